use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        worker -> Nullable<Text>,
    }
}

#[derive(Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", owner = worker)]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub worker: Option<i64>,
}

fn main() {}
