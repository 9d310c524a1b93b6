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

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = action)]
#[claimable(claim_if_null = notified)]
pub struct Action {
    pub id: i64,
    pub notified: chrono::NaiveDateTime,
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = scheduled)]
#[claimable(job(holder = running_at, started_at = last_run_started))]
pub struct Scheduled {
    pub id: i64,
    pub running_at: String,
    pub last_run_started: Option<chrono::NaiveDateTime>,
}

fn main() {}
