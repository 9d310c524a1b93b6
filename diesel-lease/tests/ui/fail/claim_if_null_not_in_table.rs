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

#[derive(Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = jobs)]
#[claim_if_null(column = notified_at)]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub worker: Option<String>,
    pub claimed_at: Option<chrono::NaiveDateTime>,
    pub attempts: i32,
    pub notified: Option<chrono::NaiveDateTime>,
}

fn main() {}
