use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        worker -> Nullable<Text>,
        claimed_at -> Nullable<Timestamp>,
        attempts -> Integer,
        notified -> Nullable<Timestamp>,
    }
}

// The field is an `Option`, the column is not: the column's type check reports it.
#[derive(Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = jobs)]
#[claim_if_null(column = status)]
pub struct Job {
    pub id: i64,
    pub status: Option<String>,
    pub worker: Option<String>,
    pub claimed_at: Option<chrono::NaiveDateTime>,
    pub attempts: i32,
    pub notified: Option<chrono::NaiveDateTime>,
}

fn main() {}
