use diesel_lease::prelude::*;

diesel::table! {
    process_control (queue_position) {
        queue_position -> Integer,
        requesting_id -> Text,
        resource -> Text,
        access_type -> Text,
        granted -> Bool,
        state -> Text,
        expires_at -> BigInt,
    }
}

/// Seed 001's control table with every option; also a claim model elsewhere in the crate could
/// derive on the same table.
#[derive(ControlTable)]
#[diesel(table_name = process_control, primary_key(queue_position))]
#[control_table(
    ticket = queue_position,
    owner = requesting_id,
    resource = resource,
    mode = access_type,
    shared = "R",
    exclusive = "W",
    granted = granted,
    expires_at = expires_at
)]
pub struct ProcessControl {
    pub queue_position: i32,
}

/// Uses the model as an application would (compiled, not run: the table does not exist).
fn use_it() {
    let pool = diesel_lease::pool::build_pool::<diesel::SqliteConnection>(":memory:", 1)
        .expect("an in-memory pool");
    let sem = ProcessControl::semaphore("etl", 3);
    let rw = ProcessControl::rw_lock("report");
    let _ = (sem.try_acquire(&pool), rw.try_write(&pool));
}
