//! A queue's steps narrow only the terminals they apply to: a filter is for `redrive`, a key is
//! for `pause` and `resume`.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        tenant -> Text,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", failed = "dead",
            pausable(key = tenant))]
struct Job {
    id: i64,
    status: String,
    tenant: String,
}

fn pause_a_filter(conn: &mut SqliteConnection) -> diesel_lease::Result<bool> {
    Job::queue().filter(jobs::tenant.eq("acme")).pause(conn)
}

fn redrive_a_key(conn: &mut SqliteConnection) -> diesel_lease::Result<u64> {
    Job::queue().key("acme").redrive(conn, 10)
}

fn main() {}
