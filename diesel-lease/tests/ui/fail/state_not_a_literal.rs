use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
    }
}

const READY: &str = "new";

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = READY, claimed = format!("run{}", 1), done = "done")]
pub struct Job {
    pub id: i64,
    pub status: String,
}

fn main() {}
