//! A locked row is not claimed: claim options (owner, timeout) do not apply to `locked`.
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

fn lock(conn: &mut SqliteConnection, options: &diesel_lease::claim::ClaimOptions) -> diesel_lease::Result<Option<Job>> {
    conn.transaction(|conn| Job::claim().options(options).locked(conn))
}

fn main() {}
