//! A claim heartbeat moves `claimed_at`: a model without one has no `heartbeat`.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        worker -> Nullable<Text>,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", owner = worker)]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub worker: Option<String>,
}

fn main() {
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    if let Some(job) = Job::claim().row(&mut conn).unwrap() {
        job.heartbeat(&mut conn).unwrap();
    }
}
