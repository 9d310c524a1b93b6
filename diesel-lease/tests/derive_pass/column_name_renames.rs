//! Struct fields named differently from their columns (`#[diesel(column_name = …)]`): the
//! attribute names columns, as `table!` does.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    importjobs (job_id) {
        job_id -> BigInt,
        statuscode -> Text,
        worker -> Nullable<Text>,
        claimed_at -> Nullable<Timestamp>,
        attempts -> Integer,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = importjobs, primary_key(job_id))]
#[claimable(
    state = statuscode,
    ready = "JOBEXTRACTED",
    claimed = "EXECUTIONINPROGRESS",
    done = "DONE",
    failed = "FAILED",
    owner = worker,
    claimed_at = claimed_at,
    attempts = attempts,
    timeout_ms = 1500,
    max_attempts = 2
)]
pub struct ImportJob {
    #[diesel(column_name = job_id)]
    pub id: i64,
    #[diesel(column_name = statuscode)]
    pub state: String,
    #[diesel(column_name = worker)]
    pub owner: Option<String>,
    pub claimed_at: Option<chrono::NaiveDateTime>,
    #[diesel(column_name = attempts)]
    pub tries: i32,
}

#[allow(dead_code)]
fn work(conn: &mut SqliteConnection) -> diesel_lease::Result<()> {
    if let Some(job) = ImportJob::claim().row(conn)? {
        let _still_mine: bool = job.complete(conn)?;
    }
    Ok(())
}
