//! Issue 23, item 3: `ClaimCursor`, claims that resume at the last claimed row, on every
//! backend: which rows they take first, that a row re-queued before the key is still found, and
//! that every row still goes to exactly one worker under threads that share one cursor.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer};
use diesel_lease::claim::{ClaimCursor, ClaimOptions};
use diesel_lease::prelude::*;

use crate::claim::priority::schema::prio_jobs;
use crate::claim::priority::{PrioJob, PRIO_JOBS_DDL};
use crate::common::history::{
    check_claims, hand_out, hand_out_from_worker_line, with_first_hand_out_doubled, Event, History,
};
use crate::common::{pick, worker_bin, TestBackend, TestDb};
use crate::models::schema::importjobs;
use crate::models::*;

/// Long enough that no test here ever reaches a timed rescan: what they see follows from the
/// claims alone, whatever the machine's load.
const NO_TIMED_RESCAN: Duration = Duration::from_secs(3600);

backend_suite! {
    fixtures: crate::claim::basics;
    tests: [
        a_cursor_resumes_at_the_key_and_looks_from_the_front_when_nothing_is_left_after_it,
        a_descending_order_resumes_at_or_below_the_key,
        threads_and_processes_on_cursors_claim_each_row_once_and_find_every_requeued_row,
        a_zero_rescan_period_is_a_typed_error,
        once_the_rescan_period_has_passed_a_claim_looks_from_the_front,
        guarded_claims_through_a_cursor_resume_at_the_key_and_hand_rows_back,
        waiting_claims_through_a_cursor_find_rows_there_and_rows_inserted_later,
    ];

    fn ids(rows: &[ImportJob]) -> Vec<i64> {
        let mut ids: Vec<i64> = rows.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        ids
    }

    /// Rows 1-10 in key order (`ImportJob` claims by key): a row released before the key waits
    /// while rows lie ahead of the key, and is taken once a claim from the key on finds fewer
    /// rows than it asked for; claims go through the options' owner.
    pub(crate) fn a_cursor_resumes_at_the_key_and_looks_from_the_front_when_nothing_is_left_after_it(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 10);
        let mut conn = db.conn();
        let cursor = ClaimCursor::<ImportJob>::new(NO_TIMED_RESCAN).unwrap();
        let me = ClaimOptions::default().owner(diesel_lease::OwnerId::new("cursor-test").unwrap());
        assert!(
            matches!(ImportJob::claim().cursor(&cursor).batch(0).rows(&mut conn), Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::Zero { what: "batch size" }))),
            "n = 0 is a typed error"
        );
        let first: Vec<ImportJob> = (0..3)
            .map(|_| ImportJob::claim().cursor(&cursor).options(&me).row(&mut conn).unwrap().expect("a row"))
            .collect();
        assert_eq!(ids(&first), [1, 2, 3], "the first claims look from the front");
        assert!(first.iter().all(|j| j.worker.as_deref().map(diesel_lease::ClaimStamp::owner_of) == Some("cursor-test")));
        assert!(first[0].requeue(&mut conn).unwrap());
        let fourth = ImportJob::claim().cursor(&cursor).row(&mut conn).unwrap().expect("a row");
        assert_eq!(fourth.id, 4, "row 1 is ready again before the key (3): the claim resumes at the key");
        assert_eq!(ids(&ImportJob::claim().cursor(&cursor).batch(3).rows(&mut conn).unwrap()), [5, 6, 7]);
        assert!(first[1].requeue(&mut conn).unwrap());
        assert_eq!(
            ids(&ImportJob::claim().cursor(&cursor).batch(10).rows(&mut conn).unwrap()),
            [8, 9, 10],
            "from the key (7) on: three rows, fewer than asked for"
        );
        let next = ImportJob::claim().cursor(&cursor).row(&mut conn).unwrap().expect("a row");
        assert_eq!(next.id, 1, "after a short claim the next looks from the front");
        let next = ImportJob::claim().cursor(&cursor).row(&mut conn).unwrap().expect("a row");
        assert_eq!(next.id, 2, "and resumes at the key it found (1)");
        assert!(ImportJob::claim().cursor(&cursor).row(&mut conn).unwrap().is_none(), "nothing ready is left");
        assert_eq!(ready(db), 0);
    }

    /// `PrioJob` claims the highest priority first (`priority DESC`): a cursor resumes at or below
    /// the last priority claimed, so a row of a higher priority inserted later waits until a claim
    /// finds nothing at or below it.
    pub(crate) fn a_descending_order_resumes_at_or_below_the_key(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = PRIO_JOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        let mut conn = db.conn();
        let insert = |conn: &mut <B as TestBackend>::Conn, id: i64, priority: i32| {
            diesel::sql_query(pick::<B>(
                "INSERT INTO prio_jobs (id, priority, run_at) VALUES ($1, $2, TIMESTAMP '2020-01-01 00:00:00')",
                "INSERT INTO prio_jobs (id, priority, run_at) VALUES (?, ?, '2020-01-01 00:00:00')",
                "INSERT INTO prio_jobs (id, priority, run_at) VALUES (?, ?, '2020-01-01 00:00:00')",
            ))
            .bind::<BigInt, _>(id)
            .bind::<Integer, _>(priority)
            .execute(conn)
            .unwrap();
        };
        for (id, priority) in [(1, 5), (2, 4), (3, 3), (4, 2)] {
            insert(&mut conn, id, priority);
        }
        let cursor = ClaimCursor::<PrioJob>::new(NO_TIMED_RESCAN).unwrap();
        let mut claim = || PrioJob::claim().cursor(&cursor).row(&mut conn).unwrap().map(|j| j.id);
        assert_eq!(claim(), Some(1));
        assert_eq!(claim(), Some(2));
        let mut conn = db.conn();
        insert(&mut conn, 5, 9);
        let mut claim = || PrioJob::claim().cursor(&cursor).row(&mut conn).unwrap().map(|j| j.id);
        assert_eq!(claim(), Some(3), "priority 9 lies before the key (4) in a descending order");
        assert_eq!(claim(), Some(4));
        assert_eq!(claim(), Some(5), "nothing at or below the key: the claim looks from the front");
        assert_eq!(claim(), None);
        let left: i64 = prio_jobs::table
            .filter(prio_jobs::status.eq("new"))
            .count()
            .get_result(&mut db.conn())
            .unwrap();
        assert_eq!(left, 0);
    }

    /// 8 threads with their own pooled connections, 6 sharing one cursor and 2 with their own,
    /// and 2 worker processes of 2 threads on a cursor each, drain 3,000 rows; the threads hand
    /// back (release) every row whose key is a multiple of 7 the first time they claim it,
    /// putting it before the cursors' keys. Every row ends claimed for good exactly once, every
    /// released row among them: none is stranded before a key. Every hand-out is recorded as the
    /// threads and processes saw it and judged by `common::history` (a released row's next
    /// claim is a new epoch).
    pub(crate) fn threads_and_processes_on_cursors_claim_each_row_once_and_find_every_requeued_row(db: &TestDb<B>) {
        const ROWS: i64 = 3_000;
        const THREADS: usize = 8;
        const CLAIMED: &str = "EXECUTIONINPROGRESS";
        fixtures::seed_jobs(db, ROWS);
        let pool = db.pool(THREADS as u32);
        let shared = ClaimCursor::<ImportJob>::new(NO_TIMED_RESCAN).unwrap();
        let released = Mutex::new(HashSet::new());
        let kept = Mutex::new(Vec::new());
        let history = History::default();
        let children: Vec<_> = (0..2)
            .map(|_| {
                Command::new(worker_bin("claim-worker"))
                    .args([B::NAME, &db.url, "cursor", "2", "2"])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn claim-worker")
            })
            .collect();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let cursor = if t < 6 { shared.clone() } else { ClaimCursor::new(NO_TIMED_RESCAN).unwrap() };
                let (pool, released, kept, history) = (pool.clone(), &released, &kept, &history);
                s.spawn(move || {
                    let mut conn = pool.get().unwrap();
                    let mut mine = Vec::new();
                    loop {
                        let batch = ImportJob::claim().cursor(&cursor).batch(1 + t % 3).rows(&mut conn).unwrap();
                        if batch.is_empty() {
                            break;
                        }
                        for job in batch {
                            history.record(hand_out(&job));
                            if job.id % 7 == 0 && released.lock().unwrap().insert(job.id) {
                                assert!(job.requeue(&mut conn).unwrap(), "row {} was ours", job.id);
                            } else {
                                mine.push(job.id);
                            }
                        }
                    }
                    kept.lock().unwrap().extend(mine);
                });
            }
            for mut child in children {
                let stdout = child.stdout.take().unwrap();
                let mut theirs = Vec::new();
                for line in BufReader::new(stdout).lines() {
                    let line = line.unwrap();
                    let event = hand_out_from_worker_line(&line).unwrap_or_else(|| panic!("worker line {line}"));
                    if let Event::HandedOut { row, .. } = event {
                        theirs.push(row);
                    }
                    history.record(event);
                }
                assert!(child.wait().unwrap().success(), "claim-worker failed");
                kept.lock().unwrap().extend(theirs);
            }
        });
        let kept = kept.into_inner().unwrap();
        let mut seen: HashMap<i64, usize> = HashMap::new();
        for id in &kept {
            *seen.entry(*id).or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "rows claimed for good more than once: {twice:?}");
        let lost: Vec<i64> = (1..=ROWS).filter(|id| !seen.contains_key(id)).collect();
        assert!(lost.is_empty(), "{} rows never claimed for good, e.g. {:?}", lost.len(), &lost[..lost.len().min(10)]);
        assert_eq!(kept.len() as i64, ROWS);
        let released = released.into_inner().unwrap();
        // The processes do not hand rows back, so the threads released the multiples of 7 they
        // were first to claim (with 8 threads against 4 from the first claim on, some of them).
        assert!(!released.is_empty() && released.iter().all(|id| id % 7 == 0), "{released:?}");
        assert_eq!(ready(db), 0, "no row left before a key");
        history.check_claims(CLAIMED);
        assert_eq!(history.hand_outs(), kept.len() + released.len(), "each release is one more hand-out");
        // The check can fail on this very record: one hand-out given out a second time in its
        // epoch is a violation.
        let doubled = with_first_hand_out_doubled(&history.events());
        assert_eq!(check_claims(&doubled, CLAIMED).len(), 1, "the checker misses a doubled hand-out");
    }

    /// Rows of `importjobs` still ready.
    fn ready(db: &TestDb<B>) -> i64 {
        importjobs::table
            .filter(importjobs::statuscode.eq("JOBEXTRACTED"))
            .count()
            .get_result(&mut db.conn())
            .unwrap()
    }

    fn status(db: &TestDb<B>, id: i64) -> String {
        importjobs::table.find(id).select(importjobs::statuscode).get_result(&mut db.conn()).unwrap()
    }

    /// Guarded claims through a pool: a guard dropped unfinished hands its row back before the
    /// key; the next claims resume at the key, and the row comes back once nothing is left from
    /// the key on.
    pub(crate) fn guarded_claims_through_a_cursor_resume_at_the_key_and_hand_rows_back(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 5);
        let pool = db.pool(4);
        let cursor = ClaimCursor::<ImportJob>::new(NO_TIMED_RESCAN).unwrap();
        let mut guards = ImportJob::claim().cursor(&cursor).batch(3).guards(&pool).unwrap();
        guards.sort_by_key(|g| g.id);
        assert_eq!(guards.iter().map(|g| g.id).collect::<Vec<_>>(), [1, 2, 3]);
        let mut guards = guards.into_iter();
        drop(guards.next());
        crate::common::settled(&pool);
        assert_eq!(status(db, 1), "JOBEXTRACTED", "a dropped guard hands its row back");
        for guard in guards {
            assert!(guard.complete().unwrap());
        }
        let next = |cursor: &ClaimCursor<ImportJob>| ImportJob::claim().cursor(cursor).guard(&pool).unwrap().expect("a row");
        let four = next(&cursor);
        assert_eq!(four.id, 4, "the claim resumes at the key (3), row 1 waits");
        let five = next(&cursor);
        assert_eq!(five.id, 5);
        let one = next(&cursor);
        assert_eq!(one.id, 1, "nothing left from the key on: the claim looks from the front");
        for guard in [four, five, one] {
            assert!(guard.complete().unwrap());
        }
        assert!(ImportJob::claim().cursor(&cursor).guard(&pool).unwrap().is_none());
        assert!((1..=5).all(|id| status(db, id) == "DONE"));
    }

    /// Waiting claims through a cursor: rows there at once come at once, resuming at the key;
    /// an empty queue waits out its timeout and returns `None`; a row inserted while a claim
    /// waits (with the lowest key of all) is claimed by it.
    pub(crate) fn waiting_claims_through_a_cursor_find_rows_there_and_rows_inserted_later(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 4);
        let pool = db.pool(4);
        let cursor = ClaimCursor::<ImportJob>::new(NO_TIMED_RESCAN).unwrap();
        let wait = Duration::from_secs(5);
        let first = ImportJob::claim().cursor(&cursor).batch(2).wait(wait).rows(&pool).unwrap();
        assert_eq!(ids(&first), [1, 2]);
        assert!(first[0].requeue(&mut db.conn()).unwrap());
        assert_eq!(ImportJob::claim().cursor(&cursor).wait(wait).row(&pool).unwrap().map(|j| j.id), Some(3), "resumes at the key (2)");
        assert_eq!(ImportJob::claim().cursor(&cursor).wait(wait).row(&pool).unwrap().map(|j| j.id), Some(4));
        assert_eq!(ImportJob::claim().cursor(&cursor).wait(wait).row(&pool).unwrap().map(|j| j.id), Some(1), "then from the front");
        assert!(ImportJob::claim().cursor(&cursor).wait(Duration::from_millis(300)).row(&pool).unwrap().is_none(), "nothing ready");
        std::thread::scope(|s| {
            let waiter = s.spawn(|| ImportJob::claim().cursor(&cursor).wait(Duration::from_secs(30)).row(&pool).unwrap().map(|j| j.id));
            std::thread::sleep(Duration::from_millis(200));
            diesel::insert_into(importjobs::table)
                .values((importjobs::id.eq(0), importjobs::statuscode.eq("JOBEXTRACTED"), importjobs::payload.eq("late")))
                .execute(&mut db.conn())
                .unwrap();
            assert_eq!(waiter.join().unwrap(), Some(0), "the waiting claim took the row inserted while it waited");
        });
    }

    /// The timed rescan against a server: a row released before the key, with rows still ready
    /// after the key, is claimed by the first claim after the rescan period has passed (the test
    /// sleeps past it, so the verdict does not depend on how fast the claims run), and the claim
    /// after that resumes at the key it found.
    pub(crate) fn once_the_rescan_period_has_passed_a_claim_looks_from_the_front(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 6);
        let mut conn = db.conn();
        let rescan = Duration::from_millis(300);
        let cursor = ClaimCursor::<ImportJob>::new(rescan).unwrap();
        let first = ImportJob::claim().cursor(&cursor).batch(3).rows(&mut conn).unwrap();
        assert_eq!(ids(&first), [1, 2, 3], "the first claim looks from the front");
        let one = first.iter().find(|j| j.id == 1).unwrap();
        assert!(one.requeue(&mut conn).unwrap());
        std::thread::sleep(rescan + Duration::from_millis(50));
        let next = ImportJob::claim().cursor(&cursor).row(&mut conn).unwrap().expect("a row");
        assert_eq!(next.id, 1, "rows 4-6 are ready after the key (3), yet the rescan looks from the front");
        let after = ImportJob::claim().cursor(&cursor).row(&mut conn).unwrap().expect("a row");
        assert_eq!(after.id, 4, "then resumes at the key it found (1): 2 and 3 are claimed");
        assert_eq!(ready(db), 2);
    }

    pub(crate) fn a_zero_rescan_period_is_a_typed_error(_db: &TestDb<B>) {
        let err = ClaimCursor::<ImportJob>::new(Duration::ZERO).unwrap_err();
        assert!(
            matches!(err, diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::ZeroDuration { what: "rescan period", .. })),
            "{err:?}"
        );
    }
}
