//! A mistake in the attribute is reported once, at the attribute: the derive still declares the
//! methods it would generate, so the code that calls them adds no "no function or associated item
//! named `claim_next`" errors.
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
#[claimable(state = status, ready = "new", claimed = "running", don = "done", owner = worker)]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub worker: Option<String>,
}

fn work(conn: &mut SqliteConnection) -> diesel_lease::Result<usize> {
    let mut done = 0;
    while let Some(row) = Job::claim().row(conn)? {
        if row.complete(conn)? {
            done += 1;
        }
    }
    let options = diesel_lease::claim::ClaimOptions::default();
    for row in Job::claim().batch(10).options(&options).rows(conn)? {
        row.requeue(conn)?;
    }
    let _first: Option<i64> = Job::claim().locked_with(conn, |conn, row| {
        diesel::update(jobs::table.find(row.id))
            .set(jobs::status.eq("seen"))
            .execute(conn)?;
        diesel::QueryResult::Ok(row.id)
    })?;
    Ok(done)
}

fn main() {
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    if let Some(row) = Job::claim().row(&mut conn).unwrap() {
        row.complete(&mut conn).unwrap();
    }
    let _ = work(&mut conn);
}
