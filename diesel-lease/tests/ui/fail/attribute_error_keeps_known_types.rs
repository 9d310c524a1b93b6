//! After a mistake in the attribute, the methods the derive still declares use the key type and
//! `insert_once`'s row when those parsed, so calls that need them to infer types add no errors:
//! only the two attribute errors below.
use diesel::prelude::*;
use diesel_lease::InsertOutcome;
use diesel_lease::prelude::*;

diesel::table! {
    notification (id) {
        id -> BigInt,
        user_id -> BigInt,
    }
}

diesel::table! {
    job_status (name) {
        name -> Text,
        running_at -> Nullable<Text>,
        started -> Nullable<Timestamp>,
    }
}

#[derive(Debug, PartialEq, Queryable, Selectable)]
#[diesel(table_name = notification)]
pub struct Notification {
    pub id: i64,
    pub user_id: i64,
}

#[derive(Insertable, InsertOnce)]
#[diesel(table_name = notification)]
#[insert_once(returning = Notification)]
#[insert_once(sideways)]
pub struct NewNotification {
    pub user_id: i64,
}

#[derive(Queryable, Selectable, JobLease)]
#[diesel(table_name = job_status, primary_key(name))]
#[job_lease(holder = running_at, started = started)]
pub struct JobStatus {
    pub name: String,
    pub running_at: Option<String>,
    pub started: Option<chrono::NaiveDateTime>,
}

fn work(conn: &mut SqliteConnection) -> diesel_lease::Result<()> {
    if let InsertOutcome::Inserted(Some(row)) = (NewNotification { user_id: 1 }).insert_once(conn)? {
        println!("{}", row.id);
    }
    assert_eq!((NewNotification { user_id: 1 }).insert_once(conn)?, InsertOutcome::AlreadyExists);
    let me = diesel_lease::lease::JobRunOptions::new(std::time::Duration::from_secs(5));
    if let Some(run) = JobStatus::try_acquire_run(conn, "stock-prices".into(), &me)? {
        let _ = JobStatus::release_run(conn, "stock-prices".into(), &run)?;
    }
    Ok(())
}

fn main() {
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    let _ = work(&mut conn);
}
