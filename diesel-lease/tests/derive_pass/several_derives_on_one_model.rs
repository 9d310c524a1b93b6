//! One model with several capabilities, each its own derive: claims, an at-most-once column and
//! a job lease on the same table. The first derive that needs the primary key implements `Keyed`
//! (a second impl would not compile), and every derive's operations are there.
use diesel::prelude::*;
use diesel_lease::lease::JobRunOptions;
use diesel_lease::prelude::*;

diesel::table! {
    reports (id) {
        id -> BigInt,
        status -> Text,
        worker -> Nullable<Text>,
        notified -> Nullable<Timestamp>,
        running_at -> Nullable<Text>,
        started -> Nullable<Timestamp>,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable, ClaimIfNull, JobLease)]
#[diesel(table_name = reports)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", owner = worker)]
#[claim_if_null(column = notified)]
#[job_lease(holder = running_at, started_at = started)]
pub struct Report {
    pub id: i64,
    pub status: String,
    pub worker: Option<String>,
    pub notified: Option<chrono::NaiveDateTime>,
    pub running_at: Option<String>,
    pub started: Option<chrono::NaiveDateTime>,
}

fn all_three(conn: &mut SqliteConnection) -> diesel_lease::Result<()> {
    if let Some(report) = Report::claim().row(conn)? {
        let _first = report.claim_if_null(conn, diesel_lease::db_now)?;
        let _done = report.complete(conn)?;
    }
    let options = JobRunOptions::new(std::time::Duration::from_secs(60));
    if let Some(run) = Report::try_acquire_run(conn, 1, &options)? {
        let _ours = Report::release_run(conn, 1, &run)?;
    }
    Ok(())
}
