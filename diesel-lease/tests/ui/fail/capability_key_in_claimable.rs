//! The capabilities other than claims are derives of their own: written as keys of
//! `#[claimable(...)]` (the spelling before they were), each is an error at the key that names
//! the derive to use.
use diesel_lease::prelude::*;

diesel::table! {
    action (id) {
        id -> BigInt,
        notified -> Nullable<Timestamp>,
        running_at -> Nullable<Text>,
        started -> Nullable<Timestamp>,
    }
}

#[derive(Claimable)]
#[diesel(table_name = action)]
#[claimable(claim_if_null = notified, job(holder = running_at, started_at = started))]
pub struct Action {
    pub id: i64,
    pub notified: Option<chrono::NaiveDateTime>,
}

fn main() {}
