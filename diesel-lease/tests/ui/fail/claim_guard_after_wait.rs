//! A guard claims now: a wait step does not apply to `guard`.
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

fn guarded(pool: &diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<SqliteConnection>>) {
    let _ = Job::claim().wait(std::time::Duration::from_secs(1)).guard(pool);
}

fn main() {}
