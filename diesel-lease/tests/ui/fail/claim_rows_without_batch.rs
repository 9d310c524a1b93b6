//! One row or a batch: `rows` needs a batch step, `row` takes one.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
    }
}

diesel::table! {
    users (id) {
        id -> BigInt,
        name -> Text,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running")]
struct Job {
    id: i64,
    status: String,
}

fn rows(conn: &mut SqliteConnection) -> diesel_lease::Result<Vec<Job>> {
    Job::claim().rows(conn)
}

fn main() {}
