//! Batch completion (issue 12.2): `complete_batch` / `fail_batch` / `release_batch` change the
//! rows still claimed by this worker in one statement and report the others, on seed 003's table.

use diesel_lease::prelude::*;
use std::collections::HashSet;
use std::sync::Mutex;

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::OwnerId;

use crate::common::TestDb;
use crate::models::schema::importjobs;
use crate::models::*;

backend_suite! {
    fixtures: crate::claim::basics;
    tests: [
        complete_batch_reports_a_rescued_row_and_leaves_it,
        fail_batch_and_release_batch_move_only_their_rows,
        batches_larger_than_one_statement_are_all_completed,
        a_claim_beyond_mysql_s_parameter_limit_is_claimed_whole,
        batch_completion_under_contention_finishes_each_row_once,
        a_batch_reports_each_row_whatever_its_place_owner_or_transaction,
        a_batch_of_one_owner_still_checks_each_row_s_owner,
    ];

    fn state_of(db: &TestDb<B>, id: i64) -> (String, Option<String>) {
        importjobs::table
            .find(id)
            .select((importjobs::statuscode, importjobs::worker))
            .first(&mut db.conn())
            .unwrap()
    }

    fn owner(name: &str) -> ClaimOptions {
        ClaimOptions::default().owner(OwnerId::new(name).unwrap())
    }

    /// Worker A claims 5 rows; one of them goes stale and worker B rescues it. A's batch
    /// completion moves its 4 rows and reports the rescued one, which stays B's.
    pub(crate) fn complete_batch_reports_a_rescued_row_and_leaves_it(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 10);
        let mut conn = db.conn();
        let mine = ImportJob::claim().batch(5).options(&owner("worker-a")).rows(&mut conn).unwrap();
        assert_eq!(mine.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        // Row 3's claim is ancient: any timeout rescues it.
        let long_ago = NaiveDate::from_ymd_opt(2000, 1, 1).unwrap().and_hms_opt(0, 0, 0).unwrap();
        diesel::update(importjobs::table.find(3))
            .set(importjobs::claimed_at.eq(long_ago))
            .execute(&mut conn)
            .unwrap();
        let rescuer = owner("worker-b").timeout(std::time::Duration::from_secs(600));
        let rescued = ImportJob::claim().batch(1).options(&rescuer).rows(&mut conn).unwrap();
        assert_eq!(rescued.iter().map(|r| (r.id, r.attempts)).collect::<Vec<_>>(), vec![(3, 2)]);

        let outcome = mine.complete(&mut conn).unwrap();
        assert_eq!(outcome, vec![true, true, false, true, true]);
        for id in [1, 2, 4, 5] {
            assert_eq!(state_of(db, id).0, "DONE", "row {id}");
        }
        let (state, worker) = state_of(db, 3);
        assert_eq!(state, "EXECUTIONINPROGRESS", "the rescued row was completed by its old owner");
        assert!(worker.unwrap().starts_with("worker-b#"));
        // Nothing of A's batch is still A's: a second try changes nothing.
        assert_eq!(mine.complete(&mut conn).unwrap(), vec![false; 5]);
        assert_eq!(rescued.complete(&mut conn).unwrap(), vec![true]);
        assert_eq!(state_of(db, 3).0, "DONE");
        assert!(<[ImportJob]>::complete(&[], &mut conn).unwrap().is_empty());
    }

    pub(crate) fn fail_batch_and_release_batch_move_only_their_rows(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 4);
        let mut conn = db.conn();
        let rows = ImportJob::claim().batch(4).rows(&mut conn).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[..2].fail(&mut conn).unwrap(), vec![true, true]);
        assert_eq!(rows[2..].requeue(&mut conn).unwrap(), vec![true, true]);
        assert_eq!(rows.requeue(&mut conn).unwrap(), vec![false; 4]);
        assert_eq!(state_of(db, 1), ("FAILED".into(), rows[0].worker.clone()));
        assert_eq!(state_of(db, 2).0, "FAILED");
        assert_eq!(state_of(db, 3), ("JOBEXTRACTED".into(), None), "released: owner cleared");
        assert_eq!(state_of(db, 4), ("JOBEXTRACTED".into(), None));
        let again = ImportJob::claim().batch(4).rows(&mut conn).unwrap();
        assert_eq!(again.iter().map(|r| r.id).collect::<Vec<_>>(), vec![3, 4]);
    }

    /// The statement is written for a padded row count (5 rows run as 6, the last repeated) and,
    /// on SQLite, tried first as a plain count: a lost last row, a row passed twice, rows of two
    /// owners in one batch, and the caller's open transaction all get each row's own answer.
    pub(crate) fn a_batch_reports_each_row_whatever_its_place_owner_or_transaction(
        db: &TestDb<B>,
    ) {
        fixtures::seed_jobs(db, 9);
        let mut conn = db.conn();
        let mine = ImportJob::claim().batch(5).options(&owner("worker-a")).rows(&mut conn).unwrap();
        let theirs = ImportJob::claim().batch(2).options(&owner("worker-c")).rows(&mut conn).unwrap();
        assert_eq!(mine.len(), 5);
        assert_eq!(theirs.len(), 2);
        // The last of A's rows goes stale and B takes it over.
        let long_ago = NaiveDate::from_ymd_opt(2000, 1, 1).unwrap().and_hms_opt(0, 0, 0).unwrap();
        diesel::update(importjobs::table.find(mine[4].id))
            .set(importjobs::claimed_at.eq(long_ago))
            .execute(&mut conn)
            .unwrap();
        let rescuer = owner("worker-b").timeout(std::time::Duration::from_secs(600));
        let rescued = ImportJob::claim().batch(1).options(&rescuer).rows(&mut conn).unwrap();
        assert_eq!(rescued[0].id, mine[4].id);

        // In the caller's transaction, which goes on and commits.
        let outcome = conn
            .transaction(|c| {
                let outcome = mine.complete(c)?;
                diesel::update(importjobs::table.find(9))
                    .set(importjobs::statuscode.eq("FAILED"))
                    .execute(c)?;
                Ok::<_, diesel_lease::Error>(outcome)
            })
            .unwrap();
        assert_eq!(outcome, vec![true, true, true, true, false]);
        assert_eq!(state_of(db, 9).0, "FAILED", "the caller's transaction committed");
        assert_eq!(state_of(db, mine[4].id).0, "EXECUTIONINPROGRESS");
        for row in &mine[..4] {
            assert_eq!(state_of(db, row.id).0, "DONE", "row {}", row.id);
        }

        // Two owners' rows in one batch, one of them twice: each row finished once, and the
        // repeat reported as not (it was no longer claimed when its turn came).
        let mixed = [theirs[0].clone(), rescued[0].clone(), theirs[0].clone(), theirs[1].clone()];
        assert_eq!(
            mixed.complete(&mut conn).unwrap(),
            vec![true, true, false, true]
        );
        for row in theirs.iter().chain(&rescued) {
            assert_eq!(state_of(db, row.id).0, "DONE", "row {}", row.id);
        }
    }

    /// A batch whose rows all carry one claim stamp checks it once in the statement (`owner = $
    /// AND (…)`): a row whose owner alone changed (same attempt) is still reported and left.
    pub(crate) fn a_batch_of_one_owner_still_checks_each_row_s_owner(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 6);
        let mut conn = db.conn();
        let mine = ImportJob::claim().batch(6).options(&owner("worker-a")).rows(&mut conn).unwrap();
        assert_eq!(mine.len(), 6);
        assert!(mine.iter().all(|r| r.worker == mine[0].worker && r.attempts == 1));
        // Rows 2 and 5 now name another owner; nothing else about them changed.
        for i in [1, 4] {
            diesel::update(importjobs::table.find(mine[i].id))
                .set(importjobs::worker.eq("worker-z#0"))
                .execute(&mut conn)
                .unwrap();
        }
        let outcome = mine.complete(&mut conn).unwrap();
        assert_eq!(outcome, vec![true, false, true, true, false, true]);
        for (i, row) in mine.iter().enumerate() {
            let (state, worker) = state_of(db, row.id);
            if i == 1 || i == 4 {
                assert_eq!((state.as_str(), worker.as_deref()), ("EXECUTIONINPROGRESS", Some("worker-z#0")));
            } else {
                assert_eq!(state, "DONE", "row {}", row.id);
            }
        }
    }

    /// 450 rows: three statements (200 rows each at most), every row completed.
    pub(crate) fn batches_larger_than_one_statement_are_all_completed(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 450);
        let mut conn = db.conn();
        let rows = ImportJob::claim().batch(450).rows(&mut conn).unwrap();
        assert_eq!(rows.len(), 450);
        assert_eq!(rows.complete(&mut conn).unwrap(), vec![true; 450]);
        let done: i64 = importjobs::table
            .filter(importjobs::statuscode.eq("DONE"))
            .count()
            .get_result(&mut conn)
            .unwrap();
        assert_eq!(done, 450);
    }

    /// One `claim_batch` of 70,000 rows, more than the 65,535 parameters MySQL takes in one
    /// statement (its claims mark and read back the picked rows by key, which used to fail
    /// there after the rows were locked): every row is claimed once, and all complete.
    pub(crate) fn a_claim_beyond_mysql_s_parameter_limit_is_claimed_whole(db: &TestDb<B>) {
        const N: usize = 70_000;
        fixtures::seed_jobs(db, N as i64);
        let mut conn = db.conn();
        let rows = ImportJob::claim().batch(N).rows(&mut conn).unwrap();
        let ids: HashSet<i64> = rows.iter().map(|r| r.id).collect();
        assert_eq!((rows.len(), ids.len()), (N, N), "every row, once");
        assert!(rows.iter().all(|r| r.statuscode == "EXECUTIONINPROGRESS"), "read back claimed");
        assert!(rows.complete(&mut conn).unwrap().iter().all(|ok| *ok));
        let done: i64 = importjobs::table
            .filter(importjobs::statuscode.eq("DONE"))
            .count()
            .get_result(&mut conn)
            .unwrap();
        assert_eq!(done, N as i64);
    }

    /// 4 threads drain 300 rows with `claim_batch(7)` + `complete_batch`: each row claimed and
    /// completed exactly once, every completion reported as this worker's.
    pub(crate) fn batch_completion_under_contention_finishes_each_row_once(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 300);
        let pool = db.pool(4);
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut conn = pool.get().unwrap();
                    loop {
                        let rows = ImportJob::claim().batch(7).rows(&mut conn).unwrap();
                        if rows.is_empty() {
                            break;
                        }
                        let outcome = rows.complete(&mut conn).unwrap();
                        assert!(outcome.iter().all(|ok| *ok), "a fresh claim was not ours");
                        seen.lock().unwrap().extend(rows.iter().map(|r| r.id));
                    }
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 300, "a row was claimed twice or never");
        assert_eq!(seen.iter().copied().collect::<HashSet<_>>(), (1..=300).collect());
        let done: i64 = importjobs::table
            .filter(importjobs::statuscode.eq("DONE"))
            .count()
            .get_result(&mut db.conn())
            .unwrap();
        assert_eq!(done, 300);
    }
}
