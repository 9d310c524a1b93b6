//! Claims that survive long work, and claims fenced against their own rescue: heartbeats,
//! `ClaimGuard`, and the per-claim stamp in the owner column.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::prelude::*;

use crate::common::holdback::{Holdback, Phase};
use crate::common::TestDb;
use crate::models::schema::importjobs;
use crate::models::*;

/// The import jobs of the suite, without an attempts column: fenced by the claim stamp alone.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = importjobs)]
#[claimable(
    state = statuscode,
    ready = "JOBEXTRACTED",
    claimed = "EXECUTIONINPROGRESS",
    done = "DONE",
    owner = worker,
    claimed_at = claimed_at
)]
pub(crate) struct StampOnly {
    pub(crate) id: i64,
    pub(crate) statuscode: String,
    pub(crate) worker: Option<String>,
    pub(crate) claimed_at: Option<chrono::NaiveDateTime>,
}

backend_suite! {
    tests: [
        a_long_job_heartbeating_through_5x_the_timeout_is_never_rescued,
        a_same_process_rescue_fences_the_stale_complete,
        a_same_process_rescue_fences_a_model_without_attempts,
        a_dropped_or_panicking_guard_hands_the_row_back,
        a_starved_guard_knows_it_lost_before_the_database_would_rescue,
        heartbeat_of_a_rescued_claim_is_false,
        every_claim_variant_exists_for_one_row_and_a_batch,
        a_heartbeat_landing_after_the_row_was_claimed_again_changes_nothing,
    ];

    fn seed(db: &TestDb<B>, rows: i64) {
        let (pg, sqlite, mysql) = IMPORTJOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        let values: Vec<_> = (1..=rows)
            .map(|id| (importjobs::id.eq(id), importjobs::statuscode.eq("JOBEXTRACTED"), importjobs::payload.eq("")))
            .collect();
        diesel::insert_into(importjobs::table).values(&values).execute(&mut db.conn()).unwrap();
    }

    fn timeout(d: Duration) -> ClaimOptions {
        ClaimOptions::default().timeout(d)
    }

    fn status(db: &TestDb<B>, id: i64) -> String {
        importjobs::table.find(id).select(importjobs::statuscode).first(&mut db.conn()).unwrap()
    }

    /// A job that runs 5x its claim timeout under a `ClaimGuard` is never rescued, although a
    /// rescuer asks every 100 ms all along; then it completes.
    pub(crate) fn a_long_job_heartbeating_through_5x_the_timeout_is_never_rescued(db: &TestDb<B>) {
        seed(db, 1);
        let pool = db.pool(4);
        let claim_timeout = Duration::from_secs(1);
        let guard = ImportJob::claim().options(&timeout(claim_timeout)).guard(&pool)
            .unwrap()
            .expect("a row");
        let done = AtomicBool::new(false);
        let rescued = std::thread::scope(|s| {
            let rescuer = s.spawn(|| {
                let mut conn = db.conn();
                let mut rescued = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    rescued.extend(ImportJob::claim().batch(1).options(&timeout(claim_timeout)).rows(&mut conn).unwrap());
                    std::thread::sleep(Duration::from_millis(100));
                }
                rescued
            });
            let started = Instant::now();
            while started.elapsed() < claim_timeout * 5 {
                assert!(!guard.is_lost(), "lost after {:?}", started.elapsed());
                std::thread::sleep(Duration::from_millis(50));
            }
            done.store(true, Ordering::SeqCst);
            rescuer.join().unwrap()
        });
        assert!(rescued.is_empty(), "rescued while its work ran: {rescued:?}");
        assert!(guard.complete().unwrap(), "the worker no longer owned its claim");
        assert_eq!(status(db, 1), "DONE");
    }

    /// The same process (same default owner, another thread) rescues a stale claim: the stale
    /// worker's `complete()` is `false`, the rescuer's `true`.
    pub(crate) fn a_same_process_rescue_fences_the_stale_complete(db: &TestDb<B>) {
        seed(db, 1);
        let mut conn = db.conn();
        let stale = ImportJob::claim().row(&mut conn).unwrap().expect("a row");
        std::thread::sleep(Duration::from_millis(1300));
        let rescued = std::thread::scope(|s| {
            s.spawn(|| {
                let mut conn = db.conn();
                ImportJob::claim().batch(1).options(&timeout(Duration::from_secs(1))).rows(&mut conn).unwrap()
            })
            .join()
            .unwrap()
        });
        let rescued = rescued.into_iter().next().expect("rescued");
        assert_eq!(rescued.id, stale.id);
        assert!(!stale.complete(&mut conn).unwrap(), "a stale worker completed a rescued claim");
        assert!(!stale.heartbeat(&mut conn).unwrap());
        assert!(rescued.complete(&mut conn).unwrap());
    }

    /// Without an attempts column the claim stamp alone fences the stale worker.
    pub(crate) fn a_same_process_rescue_fences_a_model_without_attempts(db: &TestDb<B>) {
        seed(db, 1);
        let mut conn = db.conn();
        let options = timeout(Duration::from_secs(1));
        let stale = StampOnly::claim().batch(1).options(&options).rows(&mut conn).unwrap().pop().expect("a row");
        std::thread::sleep(Duration::from_millis(1300));
        let rescued = StampOnly::claim().batch(1).options(&options).rows(&mut conn).unwrap().pop().expect("rescued");
        assert_eq!(rescued.id, stale.id);
        assert_eq!(
            stale.worker.as_deref().map(diesel_lease::ClaimStamp::owner_of),
            rescued.worker.as_deref().map(diesel_lease::ClaimStamp::owner_of),
            "the same owner claimed twice"
        );
        assert!(!stale.complete(&mut conn).unwrap(), "a stale worker completed a rescued claim");
        assert!(rescued.complete(&mut conn).unwrap());
    }

    /// A guard dropped unfinished (an early return) or unwound by a panic hands its row back
    /// at once: another worker claims it without waiting for the timeout.
    pub(crate) fn a_dropped_or_panicking_guard_hands_the_row_back(db: &TestDb<B>) {
        seed(db, 1);
        let pool = db.pool(4);
        let guard = ImportJob::claim().guard(&pool).unwrap().expect("a row");
        assert_eq!(status(db, 1), "EXECUTIONINPROGRESS");
        drop(guard);
        crate::common::settled(&pool);
        assert_eq!(status(db, 1), "JOBEXTRACTED");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = ImportJob::claim().guard(&pool).unwrap().expect("the row again");
            panic!("the job failed");
        }));
        assert!(panicked.is_err());
        crate::common::settled(&pool);
        assert_eq!(status(db, 1), "JOBEXTRACTED");
        let again = ImportJob::claim().row(&mut db.conn()).unwrap().expect("claimable at once");
        assert_eq!(again.attempts, 3, "three claims in all");
    }

    /// A guard's heartbeat, held back between the pool and the database (`common::holdback`),
    /// reaches it after the guard handed the row back and another worker claimed it again: it
    /// changes nothing. The touch matches the claimed state and this claim's stamp, which the new
    /// claim replaced; one that matched would refresh the new claim's `claimed_at` and put off
    /// its rescue, should that worker die. (`StampOnly`: no attempts column, the stamp alone.)
    pub(crate) fn a_heartbeat_landing_after_the_row_was_claimed_again_changes_nothing(db: &TestDb<B>) {
        seed(db, 1);
        let source = Holdback::new(db.pool(4));
        // A heartbeat a second in.
        let guard = StampOnly::claim().options(&timeout(Duration::from_secs(3))).guard(&source)
            .unwrap()
            .expect("a row");
        source.set(Phase::Armed);
        assert_eq!(source.wait_for(Duration::from_secs(10), |p| p == Phase::Held), Some(Phase::Held), "no heartbeat came");
        // The release stops the heartbeat (its wait for the held beat runs out) and hands the row
        // back on another connection.
        assert!(guard.release().unwrap().was_held(), "it was still claimed");
        assert_eq!(status(db, 1), "JOBEXTRACTED");
        let mut conn = db.conn();
        let again = StampOnly::claim().row(&mut conn).unwrap().expect("claimable at once");
        source.set(Phase::Let);
        assert_eq!(source.wait_for(Duration::from_secs(30), |p| p == Phase::Landed), Some(Phase::Landed), "the held heartbeat never ran");
        let now: StampOnly = importjobs::table.find(1).select(StampOnly::as_select()).first(&mut conn).unwrap();
        assert_eq!(now, again, "the late heartbeat touched the new claim");
    }

    /// A guard whose heartbeats cannot get a connection (its pool is exhausted) knows it lost
    /// before the database would let anyone rescue the row: at the moment it reports lost, a
    /// rescue still finds nothing; once the timeout has passed on the database, it succeeds.
    pub(crate) fn a_starved_guard_knows_it_lost_before_the_database_would_rescue(db: &TestDb<B>) {
        seed(db, 1);
        let pool = db.pool(1);
        let claim_timeout = Duration::from_secs(2);
        let claimed_at = Instant::now();
        let guard = ImportJob::claim().options(&timeout(claim_timeout)).guard(&pool)
            .unwrap()
            .expect("a row");
        // Opened before the wait, so that the rescue attempt costs no connection set-up.
        let mut other = db.conn();
        let hog = pool.get().unwrap(); // every heartbeat now fails to get a connection
        let lost_after = crate::common::lost_in_time(&guard, claimed_at, claim_timeout);
        let early = ImportJob::claim().batch(1).options(&timeout(claim_timeout)).rows(&mut other).unwrap();
        let looked_after = claimed_at.elapsed();
        // Tried within the timeout of the claim (not slowed down past it), nobody can rescue.
        assert!(
            early.is_empty() || looked_after >= claim_timeout,
            "the database let a rescuer in before the guard knew it lost ({lost_after:?}, looked after {looked_after:?})"
        );
        assert!(guard.is_lost());
        assert!(matches!(guard.ensure_held(), Err(diesel_lease::Error::ClaimLost { .. })));
        std::thread::sleep(claim_timeout);
        let rescued = ImportJob::claim().batch(1).options(&timeout(claim_timeout)).rows(&mut other).unwrap();
        assert_eq!(rescued.len(), 1, "the stale claim was never rescuable");
        drop(hog);
        assert!(!guard.complete().unwrap(), "the starved worker completed a rescued claim");
    }

    /// `ClaimDsl`'s variants for one row and for a batch: `_with` claims as the given owner,
    /// `_where` only rows of the filter, `_wait` and `_guarded` through a pool; each row goes to
    /// exactly one of them, a dropped guard hands its row back and the others complete theirs.
    pub(crate) fn every_claim_variant_exists_for_one_row_and_a_batch(db: &TestDb<B>) {
        seed(db, 10);
        let (pool, mut conn) = (db.pool(4), db.conn());
        let me = ClaimOptions::default().owner(diesel_lease::OwnerId::new("variant-test").unwrap());
        let with = ImportJob::claim().options(&me).row(&mut conn).unwrap().expect("a row");
        assert_eq!(with.worker.as_deref().map(diesel_lease::ClaimStamp::owner_of), Some("variant-test"));
        let only_7 = ImportJob::claim().filter(importjobs::id.eq(7)).options(&me).row(&mut conn).unwrap();
        assert_eq!(only_7.map(|j| j.id), Some(7));
        assert!(ImportJob::claim().filter(importjobs::id.eq(7)).options(&me).row(&mut conn).unwrap().is_none(), "row 7 is taken");
        let batch_where = ImportJob::claim().filter(importjobs::id.gt(8)).batch(5).options(&me).rows(&mut conn).unwrap();
        assert_eq!(batch_where.iter().map(|j| j.id).collect::<Vec<_>>(), vec![9, 10]);
        let waited = ImportJob::claim().batch(2).wait(Duration::from_secs(5)).rows(&pool).unwrap();
        assert_eq!(waited.len(), 2);
        let guards = ImportJob::claim().batch(10).guards(&pool).unwrap();
        assert_eq!(guards.len(), 4, "what is left: 10 rows, 6 claimed");
        let mut ids: Vec<i64> = [with.id, 7, 9, 10].into_iter().chain(waited.iter().map(|j| j.id)).collect();
        ids.extend(guards.iter().map(|g| g.id));
        ids.sort_unstable();
        assert_eq!(ids, (1..=10).collect::<Vec<_>>(), "each row to exactly one claim");
        let mut guards = guards.into_iter();
        let dropped = guards.next().expect("a guard");
        let dropped_id = dropped.id;
        drop(dropped);
        crate::common::settled(&pool);
        assert_eq!(status(db, dropped_id), "JOBEXTRACTED", "a dropped guard hands its row back");
        for guard in guards {
            let id = guard.id;
            assert!(guard.complete().unwrap());
            assert_eq!(status(db, id), "DONE");
        }
        assert!(ImportJob::claim().wait(Duration::from_secs(5)).row(&pool).unwrap().map(|j| j.id) == Some(dropped_id));
    }

    /// A heartbeat reports `false` once the claim was finished by someone else.
    pub(crate) fn heartbeat_of_a_rescued_claim_is_false(db: &TestDb<B>) {
        seed(db, 1);
        let mut conn = db.conn();
        let job = ImportJob::claim().row(&mut conn).unwrap().expect("a row");
        assert!(job.heartbeat(&mut conn).unwrap());
        assert!(job.complete(&mut conn).unwrap());
        assert!(!job.heartbeat(&mut conn).unwrap());
        // A model without claimed_at has nothing to move: a compile error now
        // (diesel-lease/tests/ui/fail/heartbeat_without_claimed_at.rs).
    }
}
