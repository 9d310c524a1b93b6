use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    job_status (job_id) {
        job_id -> Text,
        running_at -> Nullable<Text>,
        last_run_started -> Nullable<Timestamp>,
    }
}

#[derive(Queryable, Selectable, JobLease)]
#[diesel(table_name = job_status, primary_key(job_id))]
#[job_lease(holder = running_at, started = last_run_started)]
pub struct JobStatus {
    pub job_id: String,
    pub running_at: Option<String>,
    pub last_run_started: Option<chrono::NaiveDateTime>,
}

fn main() {}
