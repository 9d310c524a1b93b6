//! A claim filter is an expression on the model's own table.
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

fn filtered(conn: &mut SqliteConnection) -> diesel_lease::Result<Option<Job>> {
    Job::claim().filter(users::name.eq("ann")).row(conn)
}

fn main() {}
