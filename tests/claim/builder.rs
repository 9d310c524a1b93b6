//! Issue 54, item 1: `M::claim()`, the one entry point for claiming. Each step and each
//! terminal on every backend, and combinations the per-combination methods never offered (a
//! filter with a wait, a filter with guards, a locked row run with work under a filter).

use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_lease::claim::{ClaimCursor, ClaimOptions};
use diesel_lease::prelude::*;
use diesel_lease::{ClaimStamp, Error, InvalidInput, OwnerId};

use crate::common::TestDb;
use crate::models::schema::importjobs;
use crate::models::*;

backend_suite! {
    fixtures: crate::claim::basics;
    tests: [
        one_row_then_none,
        a_batch_never_takes_more_than_asked_and_zero_is_a_typed_error,
        a_filter_narrows_every_terminal,
        options_name_the_owner,
        a_locked_row_is_not_claimed,
        locked_with_commits_or_rolls_back,
        waiting_returns_rows_or_nothing_after_the_timeout,
        a_deadline_in_the_past_still_looks_once,
        guards_hand_unfinished_rows_back,
        a_cursor_resumes_at_its_key,
    ];

    fn ids(rows: &[ImportJob]) -> Vec<i64> {
        let mut ids: Vec<i64> = rows.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        ids
    }

    fn guard_ids(guards: &[diesel_lease::claim::ClaimGuard<ImportJob>]) -> Vec<i64> {
        let mut ids: Vec<i64> = guards.iter().map(|g| g.row().id).collect();
        ids.sort_unstable();
        ids
    }

    fn status(db: &TestDb<B>, id: i64) -> String {
        importjobs::table.find(id).select(importjobs::statuscode).first(&mut db.conn()).unwrap()
    }

    pub(crate) fn one_row_then_none(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 2);
        let mut conn = db.conn();
        let first = ImportJob::claim().row(&mut conn).unwrap().expect("a row");
        let second = ImportJob::claim().row(&mut conn).unwrap().expect("a row");
        assert_eq!((first.id, second.id), (1, 2), "in claim order");
        assert_eq!(first.statuscode, "EXECUTIONINPROGRESS");
        assert!(ImportJob::claim().row(&mut conn).unwrap().is_none());
        assert!(first.complete(&mut conn).unwrap());
    }

    pub(crate) fn a_batch_never_takes_more_than_asked_and_zero_is_a_typed_error(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 5);
        let mut conn = db.conn();
        assert!(matches!(
            ImportJob::claim().batch(0).rows(&mut conn),
            Err(Error::InvalidInput(InvalidInput::Zero { what: "batch size" }))
        ));
        assert_eq!(ids(&ImportJob::claim().batch(3).rows(&mut conn).unwrap()), [1, 2, 3]);
        assert_eq!(ids(&ImportJob::claim().batch(10).rows(&mut conn).unwrap()), [4, 5]);
        assert!(ImportJob::claim().batch(10).rows(&mut conn).unwrap().is_empty());
    }

    /// Rows whose payload ends in an even digit: every terminal takes only those.
    pub(crate) fn a_filter_narrows_every_terminal(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 12);
        let mut conn = db.conn();
        let pool = db.pool(2);
        let even = || importjobs::id.eq_any(vec![2_i64, 4, 6, 8, 10, 12]);
        let one = ImportJob::claim().filter(even()).row(&mut conn).unwrap().expect("a row");
        assert_eq!(one.id, 2);
        let two = ImportJob::claim().filter(even()).batch(2).rows(&mut conn).unwrap();
        assert_eq!(ids(&two), [4, 6]);
        let waited = ImportJob::claim()
            .filter(importjobs::id.eq(8_i64))
            .wait(Duration::from_secs(5))
            .row(&pool)
            .unwrap()
            .expect("row 8 is ready");
        assert_eq!(waited.id, 8);
        let guards = ImportJob::claim().filter(even()).batch(5).guards(&pool).unwrap();
        assert_eq!(guard_ids(&guards), [10, 12]);
        for guard in guards {
            assert!(guard.complete().unwrap());
        }
        let locked = conn
            .transaction::<_, Error, _>(|c| ImportJob::claim().filter(importjobs::id.gt(10_i64)).locked(c))
            .unwrap()
            .expect("row 11 is ready");
        assert_eq!(locked.id, 11);
        // Only odd rows are left; every filtered terminal finds nothing.
        assert!(ImportJob::claim().filter(even()).row(&mut conn).unwrap().is_none());
        assert!(ImportJob::claim().filter(even()).wait(Duration::from_millis(300)).row(&pool).unwrap().is_none());
        assert!(ImportJob::claim().filter(even()).guard(&pool).unwrap().is_none());
        assert_eq!(status(db, 1), "JOBEXTRACTED");
    }

    pub(crate) fn options_name_the_owner(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 3);
        let mut conn = db.conn();
        let me = ClaimOptions::default().owner(OwnerId::new("builder-test").unwrap());
        let owner = |j: &ImportJob| j.worker.as_deref().map(ClaimStamp::owner_of).map(str::to_owned);
        let one = ImportJob::claim().options(&me).row(&mut conn).unwrap().expect("a row");
        assert_eq!(owner(&one).as_deref(), Some("builder-test"));
        let rest = ImportJob::claim().batch(5).options(&me).rows(&mut conn).unwrap();
        assert_eq!(rest.len(), 2);
        assert!(rest.iter().all(|j| owner(j).as_deref() == Some("builder-test")));
    }

    /// `locked` leaves the row as it is (not claimed): after the transaction a claim takes it.
    pub(crate) fn a_locked_row_is_not_claimed(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 2);
        let mut conn = db.conn();
        let seen = conn
            .transaction::<_, Error, _>(|c| {
                let row = ImportJob::claim().locked(c)?.expect("a row");
                assert_eq!(row.statuscode, "JOBEXTRACTED", "not claimed");
                Ok(row.id)
            })
            .unwrap();
        assert_eq!(seen, 1);
        assert_eq!(status(db, 1), "JOBEXTRACTED");
        assert_eq!(ImportJob::claim().row(&mut conn).unwrap().map(|j| j.id), Some(1));
    }

    pub(crate) fn locked_with_commits_or_rolls_back(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 2);
        let mut conn = db.conn();
        let mark = |c: &mut <B as crate::common::TestBackend>::Conn, id: i64| {
            diesel::update(importjobs::table.find(id)).set(importjobs::statuscode.eq("DONE")).execute(c)
        };
        let refused: Result<Option<()>, diesel::result::Error> =
            ImportJob::claim().locked_with(&mut conn, |c, row: ImportJob| {
                mark(c, row.id)?;
                Err(diesel::result::Error::RollbackTransaction)
            });
        assert!(refused.is_err());
        assert_eq!(status(db, 1), "JOBEXTRACTED", "rolled back");
        let done: Result<Option<i64>, diesel::result::Error> = ImportJob::claim()
            .filter(importjobs::id.eq(2_i64))
            .locked_with(&mut conn, |c, row: ImportJob| mark(c, row.id).map(|_| row.id));
        assert_eq!(done.unwrap(), Some(2));
        assert_eq!(status(db, 2), "DONE", "committed");
    }

    pub(crate) fn waiting_returns_rows_or_nothing_after_the_timeout(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 3);
        let pool = db.pool(2);
        let rows = ImportJob::claim().batch(5).wait(Duration::from_secs(5)).rows(&pool).unwrap();
        assert_eq!(ids(&rows), [1, 2, 3], "at once: the rows are there");
        let started = Instant::now();
        assert!(ImportJob::claim().wait(Duration::from_millis(400)).row(&pool).unwrap().is_none());
        assert!(started.elapsed() >= Duration::from_millis(400), "waited the timeout out");
        assert!(matches!(
            ImportJob::claim().batch(0).wait(Duration::from_secs(1)).rows(&pool),
            Err(Error::InvalidInput(InvalidInput::Zero { .. }))
        ));
    }

    pub(crate) fn a_deadline_in_the_past_still_looks_once(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 1);
        let pool = db.pool(2);
        let past = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let row = ImportJob::claim().deadline(past).row(&pool).unwrap();
        assert_eq!(row.map(|j| j.id), Some(1));
        assert!(ImportJob::claim().deadline(Instant::now()).row(&pool).unwrap().is_none());
    }

    pub(crate) fn guards_hand_unfinished_rows_back(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 3);
        let pool = db.pool(3);
        let guard = ImportJob::claim().guard(&pool).unwrap().expect("a row");
        assert_eq!(guard.row().id, 1);
        let more = ImportJob::claim().batch(5).guards(&pool).unwrap();
        assert_eq!(guard_ids(&more), [2, 3]);
        assert!(guard.complete().unwrap());
        drop(more);
        crate::common::settled(&pool);
        assert_eq!((status(db, 2), status(db, 3)), ("JOBEXTRACTED".into(), "JOBEXTRACTED".into()), "dropped unfinished: handed back");
        assert_eq!(status(db, 1), "DONE");
    }

    pub(crate) fn a_cursor_resumes_at_its_key(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 6);
        let mut conn = db.conn();
        let pool = db.pool(2);
        let cursor = ClaimCursor::<ImportJob>::new(Duration::from_secs(3600)).unwrap();
        let claim = |c: &mut <B as crate::common::TestBackend>::Conn| {
            ImportJob::claim().cursor(&cursor).row(c).unwrap().expect("a row")
        };
        let first = claim(&mut conn);
        assert_eq!((first.id, claim(&mut conn).id), (1, 2));
        assert!(first.requeue(&mut conn).unwrap());
        // Row 1 is ready again, behind the key (2): the cursor goes on from the key.
        assert_eq!(ids(&ImportJob::claim().cursor(&cursor).batch(2).rows(&mut conn).unwrap()), [3, 4]);
        let waited = ImportJob::claim().cursor(&cursor).wait(Duration::from_secs(5)).row(&pool).unwrap();
        assert_eq!(waited.map(|j| j.id), Some(5));
        let guard = ImportJob::claim().cursor(&cursor).guard(&pool).unwrap().expect("row 6");
        assert_eq!(guard.row().id, 6);
        assert!(guard.complete().unwrap());
        // Nothing after the key: the cursor looks from the front and finds row 1.
        assert_eq!(ImportJob::claim().cursor(&cursor).row(&mut conn).unwrap().map(|j| j.id), Some(1));
        assert!(ImportJob::claim().cursor(&cursor).batch(3).guards(&pool).unwrap().is_empty());
    }
}
