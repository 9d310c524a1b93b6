use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        worker -> Nullable<Text>,
        claimed_at -> Nullable<Timestamp>,
        attempts -> Integer,
        notified -> Nullable<Timestamp>,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running")]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub worker: Option<String>,
    pub claimed_at: Option<chrono::NaiveDateTime>,
    pub attempts: i32,
    pub notified: Option<chrono::NaiveDateTime>,
}

/// Failed rows are retried (the failed state is a ready state), so they are no place for
/// cancelled rows: a cancel would put the row back in the queue.
#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready("new", "retry"), claimed = "running", failed = "retry")]
pub struct Retrying {
    pub id: i64,
    pub status: String,
}

fn cancel(conn: &mut diesel::SqliteConnection) {
    let _ = Job::queue().cancel(conn, 1);
    let _ = Job::queue().pause(conn);
    let _ = Retrying::queue().cancel(conn, 1);
}

fn main() {}
