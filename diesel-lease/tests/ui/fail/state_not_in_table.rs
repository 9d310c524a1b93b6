use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
    }
}

// Only `Claimable` is derived, so the unknown column is reported by this derive alone (and the
// missing `Selectable`, which claims need, is reported too).
#[derive(Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = state, ready = "new", claimed = "running")]
pub struct Job {
    pub id: i64,
    pub state: String,
}

fn main() {}
