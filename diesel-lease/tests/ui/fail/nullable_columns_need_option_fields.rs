//! A `claim_if_null` column and a job's holder and start are NULL until set: their fields must
//! be `Option`s.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    action (id) {
        id -> BigInt,
        notified -> Nullable<Timestamp>,
    }
}

diesel::table! {
    scheduled (id) {
        id -> BigInt,
        running_at -> Nullable<Text>,
        last_run_started -> Nullable<Timestamp>,
    }
}

#[derive(Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = action)]
#[claim_if_null(column = notified)]
pub struct Action {
    pub id: i64,
    pub notified: chrono::NaiveDateTime,
}

#[derive(Queryable, Selectable, JobLease)]
#[diesel(table_name = scheduled)]
#[job_lease(holder = running_at, started_at = last_run_started)]
pub struct Scheduled {
    pub id: i64,
    pub running_at: String,
    pub last_run_started: Option<chrono::NaiveDateTime>,
}

fn main() {}
