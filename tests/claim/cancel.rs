//! Issue 24, item 5: cancelling a row. A ready row is never claimed; a claimed row's holder
//! learns it at its next heartbeat (its guard turns lost, `Gone`), and its `complete` returns
//! `false`. The row goes to `cancelled = …`, or the failed state without one.

use std::time::Duration;

use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::prelude::*;
use diesel_lease::LostReason;

use super::priority::schema::prio_jobs;
use super::priority::PRIO_JOBS_DDL;
use crate::common::TestDb;

/// A queue whose cancelled rows go to a state of their own.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = prio_jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
            cancelled = "cancelled", owner = owner, claimed_at = claimed_at, timeout_secs = 3)]
pub(crate) struct CancelJob {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) claimed_at: Option<chrono::NaiveDateTime>,
}

/// The same table, without a cancelled state: cancelled rows go to the failed state.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = prio_jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
            owner = owner)]
pub(crate) struct FailedOnCancel {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
}

backend_suite! {
    tests: [
        a_cancelled_ready_row_is_never_claimed,
        a_cancelled_claim_is_lost_within_a_heartbeat_and_cannot_complete,
        without_a_cancelled_state_rows_go_to_the_failed_state,
    ];

    fn rows(db: &TestDb<B>, n: i64) {
        let (pg, sqlite, mysql) = PRIO_JOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        let mut conn = db.conn();
        for id in 1..=n {
            diesel::insert_into(prio_jobs::table)
                .values((prio_jobs::id.eq(id), prio_jobs::status.eq("new")))
                .execute(&mut conn)
                .unwrap();
        }
    }

    pub(crate) fn status(db: &TestDb<B>, id: i64) -> String {
        prio_jobs::table.find(id).select(prio_jobs::status).first(&mut db.conn()).unwrap()
    }

    pub(crate) fn a_cancelled_ready_row_is_never_claimed(db: &TestDb<B>) {
        rows(db, 4);
        let mut conn = db.conn();
        assert!(CancelJob::queue().cancel(&mut conn, 2).unwrap());
        assert_eq!(status(db, 2), "cancelled");
        assert!(!CancelJob::queue().cancel(&mut conn, 2).unwrap(), "already cancelled");
        assert!(!CancelJob::queue().cancel(&mut conn, 99).unwrap(), "no such row");
        let mut claimed: Vec<i64> = CancelJob::claim().batch(10).rows(&mut conn).unwrap().into_iter().map(|j| j.id).collect();
        claimed.sort();
        assert_eq!(claimed, [1, 3, 4]);
        // A finished row is left alone.
        let four = CancelJob::claim().row(&mut conn).unwrap();
        assert!(four.is_none());
        diesel::update(prio_jobs::table.find(4)).set(prio_jobs::status.eq("done")).execute(&mut conn).unwrap();
        assert!(!CancelJob::queue().cancel(&mut conn, 4).unwrap());
        assert_eq!(status(db, 4), "done");
        // Even a stale claim's rescue never takes it: it is no longer in the claimed state.
        let rescue = ClaimOptions::default().timeout(Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(20));
        let rescued: Vec<i64> = CancelJob::claim().batch(10).options(&rescue).rows(&mut conn).unwrap().into_iter().map(|j| j.id).collect();
        assert!(!rescued.contains(&2), "{rescued:?}");
    }

    /// The holder's guard heartbeats every 4 s (a third of its 12 s timeout): the cancel is
    /// seen by the database at the next one (`Gone`, not its local deadline, which leaves a
    /// starved heartbeat almost 7 s), and `complete` finds the row no longer its claim. The
    /// bound only keeps a broken build from hanging.
    pub(crate) fn a_cancelled_claim_is_lost_within_a_heartbeat_and_cannot_complete(db: &TestDb<B>) {
        rows(db, 1);
        let pool = db.pool(4);
        let options = ClaimOptions::default().timeout(Duration::from_secs(12));
        let guard = CancelJob::claim().options(&options).guard(&pool).unwrap().expect("the row");
        assert!(!guard.is_lost());
        assert!(CancelJob::queue().cancel(&mut db.conn(), 1).unwrap());
        assert!(guard.lost_signal().wait_timeout(Duration::from_secs(60)), "never learned of the cancel");
        assert_eq!(guard.lost_signal().lost_reason(), Some(LostReason::Gone));
        let row = guard.row().clone();
        assert!(!row.complete(&mut db.conn()).unwrap(), "a cancelled claim completed");
        assert!(!guard.complete().unwrap());
        assert_eq!(status(db, 1), "cancelled");
    }

    pub(crate) fn without_a_cancelled_state_rows_go_to_the_failed_state(db: &TestDb<B>) {
        rows(db, 2);
        let mut conn = db.conn();
        let claimed = FailedOnCancel::claim().row(&mut conn).unwrap().expect("row 1");
        assert!(FailedOnCancel::queue().cancel(&mut conn, 2).unwrap());
        assert!(FailedOnCancel::queue().cancel(&mut conn, claimed.id).unwrap());
        assert_eq!((status(db, 1), status(db, 2)), ("dead".to_string(), "dead".to_string()));
        assert!(!claimed.complete(&mut conn).unwrap());
        assert!(FailedOnCancel::claim().row(&mut conn).unwrap().is_none());
    }
}
