//! A locked row is one row: a batch step does not apply to `locked`.
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

fn lock(conn: &mut SqliteConnection) -> diesel_lease::Result<Option<Job>> {
    conn.transaction(|conn| Job::claim().batch(5).locked(conn))
}

fn main() {}
