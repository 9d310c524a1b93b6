//! The derive adds no inherent methods: a model's own `complete` and `release` stay the user's,
//! and the library's operations are still there through their trait.
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

impl Job {
    /// The application's own notion of "complete".
    pub fn complete(&self) -> bool {
        self.status == "done"
    }

    /// And of "release".
    pub fn release(&self) -> &str {
        &self.status
    }
}

/// Generic code over any claimable model with a done state. (The done-state marker is the
/// derive's, not API a caller names: `__private` here only so this file can call through the
/// trait in generic code, where an inherent method is never in the way.)
fn drain<M, C>(conn: &mut C) -> diesel_lease::Result<usize>
where
    M: diesel_lease::__private::HasDoneState,
    C: diesel_lease::BorrowConnection,
    C::Conn: diesel_lease::claim::ClaimConnection<M>,
{
    let mut done = 0;
    while let Some(row) = M::claim().row(conn)? {
        if FinishDsl::complete(&row, conn)? {
            done += 1;
        }
    }
    Ok(done)
}

/// Uses the model as an application would (compiled, not run: the table does not exist).
fn use_it() {
    let mut conn = SqliteConnection::establish(":memory:").expect("an in-memory database");
    if let Ok(Some(job)) = Job::claim().row(&mut conn) {
        let _mine: bool = job.complete();
        let _theirs: diesel_lease::Result<bool> = FinishDsl::complete(&job, &mut conn);
        let _status: &str = job.release();
    }
    let _ = drain::<Job, _>(&mut conn);
}
