use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
    }
}

// Only `Claimable` is derived, so the unknown column is reported by this derive alone.
#[derive(Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = state, ready = "new", claimed = "running")]
pub struct Job {
    pub id: i64,
    pub state: String,
}

fn main() {}
