//! Claims in a chosen order: highest priority first, then oldest.
use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        priority -> Integer,
        queue -> Text,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(
    state = status,
    ready("new", "retry"),
    claimed = "running",
    done = "done",
    order_by(priority desc, id asc)
)]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub priority: i32,
    pub queue: String,
}

#[allow(dead_code)]
fn work(conn: &mut SqliteConnection) -> diesel_lease::Result<()> {
    let options = ClaimOptions::default();
    for job in Job::claim()
        .filter(jobs::queue.eq("emails"))
        .batch(5)
        .options(&options)
        .rows(conn)?
    {
        job.complete(conn)?;
    }
    Ok(())
}
