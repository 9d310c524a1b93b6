use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (job_id) {
        job_id -> BigInt,
        notified -> Nullable<Timestamp>,
    }
}

#[derive(Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = jobs)]
#[claim_if_null(column = notified)]
pub struct Job {
    pub job_id: i64,
    pub notified: Option<chrono::NaiveDateTime>,
}

fn main() {}
