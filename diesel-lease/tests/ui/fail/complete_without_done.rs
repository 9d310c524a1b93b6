//! A missing state is a compile error, not a stranded row: without `done = …` there is no
//! `complete` (it would claim the row and then have nowhere to move it).
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
#[claimable(state = status, ready = "new", claimed = "running", owner = worker)]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub worker: Option<String>,
}

fn main() {
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    if let Some(job) = Job::claim().row(&mut conn).unwrap() {
        job.complete(&mut conn).unwrap();
    }
}
