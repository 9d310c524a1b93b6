//! Issue 13: the `Worker` loop on real databases: every row once, panics and errors retried or
//! dead-lettered, long runs heartbeated, a graceful stop that loses nothing, and a per-key limit
//! that holds under contention and leaves no semaphore row behind for keys that went idle
//! (issue 20.3).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_lease::claim::{ClaimOptions, RetryPolicy};
use diesel_lease::worker::{Worker, WorkerReport};

use crate::common::history::{
    check_claims, hand_out_from_worker_line, with_first_hand_out_doubled, History,
};
use crate::common::{TestBackend, TestDb};
use crate::models::schema::tasks;
use crate::models::*;

backend_suite! {
    fixtures: crate::claim::schedule;
    tests: [
        every_row_is_run_once_by_a_batched_worker,
        a_zero_batch_concurrency_or_key_limit_is_refused_before_any_claim,
        a_panicking_handler_never_loses_its_row,
        failing_rows_are_dead_lettered_after_their_last_attempt,
        a_long_run_is_heartbeated_and_never_rescued,
        a_long_run_after_an_idle_wait_is_heartbeated_and_never_rescued,
        a_graceful_stop_loses_nothing,
        a_failed_hand_back_at_the_stop_still_hands_back_the_rest,
        a_failed_renewal_of_a_batch_row_hands_it_back,
        the_per_key_limit_holds_under_contention,
        a_stale_claim_under_a_per_key_limit_is_rescued_and_its_key_goes_on,
        the_per_key_limit_holds_across_processes,
        per_key_semaphores_are_removed_once_their_keys_are_idle,
        keys_of_any_length_get_their_limit,
        a_panicking_key_function_fails_its_row_and_the_worker_goes_on,
        a_worker_claiming_through_a_cursor_runs_every_row_and_every_retry,
        a_cursor_under_a_per_key_limit_keeps_the_limit_and_runs_every_row,
        a_claim_lost_before_the_handler_gets_a_connection_is_not_run,
        a_model_without_available_at_retries_at_once_and_refuses_a_delay_at_the_start,
    ];

    /// A model without `available_at` has nowhere to keep a retry's delay. The default policy
    /// retries it at once (it used to ask for a delay at the first failure, get `Error::Config`,
    /// and stop the worker after it had run rows); a policy that delays is refused at the
    /// start, before any row is claimed, as the `Worker` docs say.
    pub(crate) fn a_model_without_available_at_retries_at_once_and_refuses_a_delay_at_the_start(db: &TestDb<B>) {
        #[derive(Debug, Queryable, Selectable, diesel_lease::Claimable)]
        #[diesel(table_name = tasks)]
        #[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
            owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_secs = 30)]
        #[allow(dead_code)] // read by the derive's statements, not here
        struct Undelayed {
            id: i64,
            status: String,
            owner: Option<String>,
            claimed_at: Option<chrono::NaiveDateTime>,
            attempts: i32,
        }
        let ids = seed(db, 3, &[""]);
        // Handlers that fail: a worker that started would leave rows claimed or retried. It is
        // stopped after 10 s should it start at all.
        let stop_refused = AtomicBool::new(false);
        let refused = std::thread::scope(|s| {
            let delaying = Worker::<Undelayed, _>::new(db.pool(4)).retry_policy(RetryPolicy::new(3).unwrap());
            let run = s.spawn(|| delaying.run_until(&stop_refused, |_: &mut <B as TestBackend>::Conn, _: &Undelayed| Err("no")));
            let started = Instant::now();
            while !run.is_finished() && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop_refused.store(true, Ordering::SeqCst);
            run.join().unwrap()
        });
        match refused {
            Err(diesel_lease::Error::Config(message)) => assert!(message.contains("available_at"), "{message}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        assert_eq!(left(db, "new"), 3, "a refused worker claimed nothing");

        // Each row fails on its first run and succeeds on its second.
        let failed_once = Mutex::new(HashSet::new());
        let stop = AtomicBool::new(false);
        let report = std::thread::scope(|s| {
            let run = s.spawn(|| {
                Worker::<Undelayed, _>::new(db.pool(4)).run_until(&stop, |_: &mut <B as TestBackend>::Conn, row: &Undelayed| {
                    if failed_once.lock().unwrap().insert(row.id) {
                        Err(format!("first run of {}", row.id))
                    } else {
                        Ok(())
                    }
                })
            });
            let started = Instant::now();
            while left(db, "done") < 3 && started.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::SeqCst);
            run.join().unwrap()
        });
        let report = report.expect("the worker ran on");
        assert_eq!((report.completed, report.retried, report.failed), (3, 3, 0), "{report:?}");
        assert_eq!(left(db, "done"), 3);
        assert_eq!(failed_once.into_inner().unwrap(), ids.into_iter().collect::<HashSet<_>>());
    }

    /// The semaphore rows left in diesel-lease's table, and how many requests.
    fn semaphore_rows(db: &TestDb<B>) -> (Vec<String>, i64) {
        #[derive(QueryableByName)]
        struct Resource {
            #[diesel(sql_type = diesel::sql_types::Text)]
            resource: String,
        }
        let mut conn = db.conn();
        let resources = diesel::sql_query("SELECT resource FROM diesel_lease_semaphores ORDER BY resource")
            .load::<Resource>(&mut conn)
            .unwrap()
            .into_iter()
            .map(|r| r.resource)
            .collect();
        let tickets = diesel::sql_query("SELECT COUNT(*) AS n FROM diesel_lease_semaphore_tickets")
            .get_result::<Count>(&mut conn)
            .unwrap()
            .n;
        (resources, tickets)
    }

    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }

    fn seed(db: &TestDb<B>, n: usize, tenants: &[&str]) -> Vec<i64> {
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        (0..n).map(|i| fixtures::insert_task(&mut conn, -10, tenants[i % tenants.len()])).collect()
    }

    fn statuses(db: &TestDb<B>) -> HashMap<String, i64> {
        tasks::table
            .group_by(tasks::status)
            .select((tasks::status, diesel::dsl::count_star()))
            .load::<(String, i64)>(&mut db.conn())
            .unwrap()
            .into_iter()
            .collect()
    }

    fn left(db: &TestDb<B>, status: &str) -> i64 {
        tasks::table.filter(tasks::status.eq(status)).count().get_result(&mut db.conn()).unwrap()
    }

    fn quick_retries(max: u32) -> RetryPolicy {
        RetryPolicy::new(max).unwrap().base(Duration::from_millis(20)).max_delay(Duration::from_millis(100))
    }

    /// Runs `worker` in the background and stops it when `done()` holds (or after 60 s).
    fn run_until_settled(
        worker: Worker<Task, <B as TestBackend>::Conn>,
        handler: impl Fn(&mut <B as TestBackend>::Conn, &Task) -> Result<(), String> + Sync,
        done: impl Fn() -> bool,
    ) -> WorkerReport {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let run = s.spawn(|| worker.run_until(&stop, &handler));
            let started = Instant::now();
            while !done() && started.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::SeqCst);
            run.join().unwrap().unwrap()
        })
    }

    pub(crate) fn every_row_is_run_once_by_a_batched_worker(db: &TestDb<B>) {
        let ids = seed(db, 40, &[""]);
        let seen = Mutex::new(Vec::new());
        let worker = Worker::new(db.pool(8)).concurrency(4).batch(3);
        let report = run_until_settled(worker, |_, t: &Task| {
            seen.lock().unwrap().push(t.id);
            Ok(())
        }, || left(db, "done") == 40);
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, ids, "each row exactly once");
        assert_eq!(report.completed, 40);
        assert_eq!(statuses(db), HashMap::from([("done".to_string(), 40)]));
    }

    /// `batch(0)`, `concurrency(0)` and `limit_per_key(_, 0, _)` are typed errors when the worker starts (they used to be
    /// raised to 1 silently); nothing is claimed. Bounded: a worker that started anyway is
    /// stopped after 10 s, and the test then fails on its result.
    pub(crate) fn a_zero_batch_concurrency_or_key_limit_is_refused_before_any_claim(db: &TestDb<B>) {
        seed(db, 3, &[""]);
        for (worker, what) in [
            (Worker::<Task, _>::new(db.pool(4)).batch(0), "worker batch"),
            (Worker::<Task, _>::new(db.pool(4)).concurrency(0), "worker concurrency"),
            (
                Worker::<Task, _>::new(db.pool(4)).limit_per_key(tasks::tenant, 0, |t: &Task| t.tenant.clone()),
                "per-key limit",
            ),
        ] {
            let stop = AtomicBool::new(false);
            let result = std::thread::scope(|s| {
                let run = s.spawn(|| worker.run_until(&stop, |_: &mut <B as TestBackend>::Conn, _: &Task| Ok::<(), String>(())));
                let started = Instant::now();
                while !run.is_finished() && started.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                stop.store(true, Ordering::SeqCst);
                run.join().unwrap()
            });
            assert!(
                matches!(&result, Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::Zero { what: got })) if *got == what),
                "{what}: {result:?}"
            );
            assert_eq!(left(db, "new"), 3, "{what}: nothing was claimed");
        }
    }

    /// `Worker::claim_cursor` (issue 23, item 3): 4 threads sharing one cursor, batches of 3;
    /// every fifth row fails its first attempt and is retried after a backoff. Each row is
    /// done, run once, or twice when it failed; none is stranded before the cursor's key.
    pub(crate) fn a_worker_claiming_through_a_cursor_runs_every_row_and_every_retry(db: &TestDb<B>) {
        let ids = seed(db, 40, &[""]);
        let runs = Mutex::new(HashMap::<i64, u32>::new());
        let cursor = diesel_lease::claim::ClaimCursor::new(Duration::from_secs(3600)).unwrap();
        let worker = Worker::new(db.pool(8))
            .concurrency(4)
            .batch(3)
            .retry_policy(quick_retries(3))
            .claim_cursor(cursor);
        let report = run_until_settled(worker, |_, t: &Task| {
            *runs.lock().unwrap().entry(t.id).or_default() += 1;
            if t.id % 5 == 0 && t.attempts == 1 {
                return Err(format!("task {} fails once", t.id));
            }
            Ok(())
        }, || left(db, "done") == 40);
        let runs = runs.into_inner().unwrap();
        let mut seen: Vec<i64> = runs.keys().copied().collect();
        seen.sort();
        assert_eq!(seen, ids, "every row ran");
        for (id, n) in &runs {
            assert_eq!(*n, if id % 5 == 0 { 2 } else { 1 }, "runs of row {id}");
        }
        assert_eq!((report.completed, report.retried, report.failed), (40, 8, 0));
        assert_eq!(statuses(db), HashMap::from([("done".to_string(), 40)]));
    }

    pub(crate) fn a_panicking_handler_never_loses_its_row(db: &TestDb<B>) {
        seed(db, 6, &[""]);
        let runs = Mutex::new(HashMap::<i64, u32>::new());
        let worker = Worker::new(db.pool(6)).concurrency(2).retry_policy(quick_retries(3));
        let report = run_until_settled(worker, |_, t: &Task| {
            *runs.lock().unwrap().entry(t.id).or_default() += 1;
            if t.attempts == 1 {
                panic!("task {} exploded", t.id);
            }
            Ok(())
        }, || left(db, "done") == 6);
        assert_eq!(report.panicked, 6);
        assert_eq!((report.retried, report.completed), (6, 6));
        assert!(runs.into_inner().unwrap().values().all(|n| *n == 2));
        let rows: Vec<Task> = tasks::table.select(Task::as_select()).load(&mut db.conn()).unwrap();
        for t in rows {
            assert_eq!((t.status.as_str(), t.attempts), ("done", 2));
            let error = t.last_error.unwrap();
            assert!(error.contains(&format!("task {} exploded", t.id)), "{error}");
        }
    }

    pub(crate) fn failing_rows_are_dead_lettered_after_their_last_attempt(db: &TestDb<B>) {
        seed(db, 5, &[""]);
        let runs = AtomicUsize::new(0);
        let worker = Worker::new(db.pool(6)).concurrency(2).retry_policy(quick_retries(3));
        let report = run_until_settled(worker, |_, t: &Task| {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(format!("no luck on attempt {}", t.attempts))
        }, || left(db, "dead") == 5);
        assert_eq!(runs.into_inner(), 15, "three attempts each");
        assert_eq!((report.retried, report.failed, report.completed), (10, 5, 0));
        let rows: Vec<Task> = tasks::table.select(Task::as_select()).load(&mut db.conn()).unwrap();
        for t in rows {
            assert_eq!((t.status.as_str(), t.attempts), ("dead", 3));
            assert_eq!(t.last_error.as_deref(), Some("no luck on attempt 3"));
        }
    }

    pub(crate) fn a_long_run_is_heartbeated_and_never_rescued(db: &TestDb<B>) {
        seed(db, 1, &[""]);
        let runs = AtomicUsize::new(0);
        // Claims older than 3 s are rescued; the run takes 7 s (more than two timeouts), and an
        // idle second thread polls with the same timeout all along. (The timeout leaves the
        // heartbeat seconds of slack: with 600 ms, a run beside a cold build on two cores once
        // starved it past the deadline and the row was rescued.)
        let options = ClaimOptions::default().timeout(Duration::from_secs(3));
        let worker = Worker::new(db.pool(6)).concurrency(2).claim_options(options);
        let report = run_until_settled(worker, |_, _t: &Task| {
            runs.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(7));
            Ok(())
        }, || left(db, "done") == 1);
        assert_eq!(runs.into_inner(), 1);
        assert_eq!((report.completed, report.lost), (1, 0));
        let t = fixtures::task(&mut db.conn(), 1);
        assert_eq!((t.status.as_str(), t.attempts), ("done", 1));
    }

    /// The same after an idle wait longer than the claim timeout: the row's deadline and
    /// heartbeat run from the poll that claimed it, not from the start of the wait (which put
    /// the deadline in the past: the heartbeat stopped at once and the row was rescued).
    pub(crate) fn a_long_run_after_an_idle_wait_is_heartbeated_and_never_rescued(db: &TestDb<B>) {
        seed(db, 0, &[""]);
        let runs = AtomicUsize::new(0);
        // As above: a 3 s timeout, a 7 s run.
        let options = ClaimOptions::default().timeout(Duration::from_secs(3));
        let worker = Worker::new(db.pool(6)).concurrency(2).claim_options(options);
        let (started, inserted) = (Instant::now(), std::cell::Cell::new(None));
        let report = run_until_settled(worker, |_, _t: &Task| {
            runs.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(7));
            Ok(())
        }, || {
            // The row comes after 7.5 s of waiting, two and a half timeouts.
            if inserted.get().is_none() && started.elapsed() >= Duration::from_millis(7500) {
                inserted.set(Some(fixtures::insert_task(&mut db.conn(), -10, "")));
            }
            inserted.get().is_some() && left(db, "done") == 1
        });
        assert_eq!(runs.into_inner(), 1);
        assert_eq!((report.completed, report.lost), (1, 0));
        let t = fixtures::task(&mut db.conn(), inserted.get().unwrap());
        assert_eq!((t.status.as_str(), t.attempts), ("done", 1));
    }

    /// At the stop, the rows a thread claimed but did not start go back one by one. One whose
    /// hand-back fails (here a trigger refuses it) does not keep the ones after it claimed until
    /// their timeout: they go back, and the error is returned after them.
    pub(crate) fn a_failed_hand_back_at_the_stop_still_hands_back_the_rest(db: &TestDb<B>) {
        let ids = seed(db, 5, &[""]);
        let refused = ids[1];
        db.ddl(
            &format!(
                "CREATE FUNCTION refuse_hand_back() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'hand-back refused'; END $$; \
                 CREATE TRIGGER refuse_hand_back BEFORE UPDATE ON tasks FOR EACH ROW \
                 WHEN (NEW.status = 'new' AND OLD.id = {refused}) EXECUTE FUNCTION refuse_hand_back()"
            ),
            &format!(
                "CREATE TRIGGER refuse_hand_back BEFORE UPDATE ON tasks FOR EACH ROW \
                 WHEN NEW.status = 'new' AND OLD.id = {refused} \
                 BEGIN SELECT RAISE(ABORT, 'hand-back refused'); END"
            ),
            &format!(
                "CREATE TRIGGER refuse_hand_back BEFORE UPDATE ON tasks FOR EACH ROW \
                 BEGIN IF NEW.status = 'new' AND OLD.id = {refused} THEN \
                 SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'hand-back refused'; END IF; END"
            ),
        );
        let stop = AtomicBool::new(false);
        let started = Mutex::new(Vec::new());
        // One thread, one batch of all five rows; the stop comes with the first run, with no
        // grace: the other four are handed back, the refused one first.
        let result = Worker::new(db.pool(4))
            .batch(5)
            .grace(Duration::ZERO)
            .run_until(&stop, |_, t: &Task| {
                started.lock().unwrap().push(t.id);
                stop.store(true, Ordering::SeqCst);
                Ok::<_, String>(())
            });
        assert!(
            matches!(&result, Err(e) if e.to_string().contains("hand-back refused")),
            "the refusal is returned: {result:?}"
        );
        let started = started.into_inner().unwrap();
        assert_eq!(started, [ids[0]], "the first row ran, then the stop came");
        let status = |id: i64| -> String {
            tasks::table.find(id).select(tasks::status).first(&mut db.conn()).unwrap()
        };
        assert_eq!(status(ids[0]), "done");
        assert_eq!(status(refused), "running", "its hand-back was refused");
        for &id in &ids[2..] {
            assert_eq!(status(id), "new", "row {id} went back after the refused one");
        }
    }

    /// A batch of two: the second row's claim is renewed before it starts, and a trigger
    /// refuses that renewal (an update that keeps it claimed). The worker stops with the
    /// refusal, a database error, and the row is back in the queue; it used to stay claimed
    /// until its timeout.
    pub(crate) fn a_failed_renewal_of_a_batch_row_hands_it_back(db: &TestDb<B>) {
        let ids = seed(db, 2, &[""]);
        let refused = ids[1];
        db.ddl(
            &format!(
                "CREATE FUNCTION refuse_renewal() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'renewal refused'; END $$; \
                 CREATE TRIGGER refuse_renewal BEFORE UPDATE ON tasks FOR EACH ROW \
                 WHEN (OLD.status = 'running' AND NEW.status = 'running' AND OLD.id = {refused}) \
                 EXECUTE FUNCTION refuse_renewal()"
            ),
            &format!(
                "CREATE TRIGGER refuse_renewal BEFORE UPDATE ON tasks FOR EACH ROW \
                 WHEN OLD.status = 'running' AND NEW.status = 'running' AND OLD.id = {refused} \
                 BEGIN SELECT RAISE(ABORT, 'renewal refused'); END"
            ),
            &format!(
                "CREATE TRIGGER refuse_renewal BEFORE UPDATE ON tasks FOR EACH ROW \
                 BEGIN IF OLD.status = 'running' AND NEW.status = 'running' AND OLD.id = {refused} THEN \
                 SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'renewal refused'; END IF; END"
            ),
        );
        let stop = AtomicBool::new(false);
        let started = Mutex::new(Vec::new());
        let result = Worker::new(db.pool(4)).batch(2).run_until(&stop, |_, t: &Task| {
            started.lock().unwrap().push(t.id);
            Ok::<_, String>(())
        });
        assert!(
            matches!(&result, Err(e) if e.to_string().contains("renewal refused")),
            "the refusal is returned: {result:?}"
        );
        assert_eq!(started.into_inner().unwrap(), [ids[0]], "only the first row ran");
        let (status, owner): (String, Option<String>) = tasks::table
            .find(refused)
            .select((tasks::status, tasks::owner))
            .first(&mut db.conn())
            .unwrap();
        assert_eq!((status.as_str(), owner), ("new", None), "the row whose renewal failed is back");
    }

    pub(crate) fn a_graceful_stop_loses_nothing(db: &TestDb<B>) {
        let ids = seed(db, 30, &[""]);
        let seen = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        // Batches of 5 on 3 threads; the stop comes after 6 runs, with no grace: what each
        // thread holds but has not started goes back.
        let report = Worker::new(db.pool(8))
            .concurrency(3)
            .batch(5)
            .grace(Duration::ZERO)
            .run_until(&stop, |_, t: &Task| {
                std::thread::sleep(Duration::from_millis(30));
                let mut seen = seen.lock().unwrap();
                seen.push(t.id);
                if seen.len() >= 6 {
                    stop.store(true, Ordering::SeqCst);
                }
                Ok::<_, String>(())
            })
            .unwrap();
        let first: Vec<i64> = seen.lock().unwrap().clone();
        assert_eq!(report.completed as usize, first.len());
        assert!(report.released > 0, "{report:?}");
        let by_status = statuses(db);
        assert_eq!(by_status.get("running"), None, "nothing left claimed: {by_status:?}");
        assert_eq!(by_status.get("done").copied().unwrap_or(0) as usize, first.len());
        // Handed back as if never claimed: no owner, no attempt used.
        let ready: Vec<Task> = tasks::table.filter(tasks::status.eq("new")).select(Task::as_select()).load(&mut db.conn()).unwrap();
        assert_eq!(ready.len() + first.len(), 30);
        assert!(ready.iter().all(|t| t.owner.is_none() && t.attempts == 0), "{ready:?}");

        // A second run (a grace long enough for the batch) takes exactly the rest.
        let rest = run_until_settled(
            Worker::new(db.pool(8)).concurrency(3).batch(5),
            |_, t: &Task| {
                seen.lock().unwrap().push(t.id);
                Ok(())
            },
            || left(db, "done") == 30,
        );
        assert_eq!(rest.released, 0);
        let mut all = seen.into_inner().unwrap();
        all.sort();
        assert_eq!(all, ids, "every row exactly once over both runs");
    }

    pub(crate) fn the_per_key_limit_holds_under_contention(db: &TestDb<B>) {
        two_workers_keep_a_per_key_limit_of_two(db, || {
            Worker::new(db.pool(10))
                .concurrency(4)
                .limit_per_key(tasks::tenant, 2, |t: &Task| t.tenant.clone())
        });
    }

    /// A per-key limit of one, and a row of tenant `acme` claimed long ago by a worker that is
    /// gone (stale past the model's 30 s timeout): the stale claim is rescued and run, and the
    /// tenant's other rows after it. The stale claim used to count against its own key, so no
    /// row of `acme`, itself included, was ever claimed again (the run below waited its 60 s).
    pub(crate) fn a_stale_claim_under_a_per_key_limit_is_rescued_and_its_key_goes_on(db: &TestDb<B>) {
        db.migrate();
        let mut ids = seed(db, 3, &["acme"]);
        let long_ago = chrono::NaiveDate::from_ymd_opt(2000, 1, 1).unwrap().and_hms_opt(0, 0, 0).unwrap();
        diesel::update(tasks::table.find(ids[0]))
            .set((
                tasks::status.eq("running"),
                tasks::owner.eq("gone-worker"),
                tasks::claimed_at.eq(long_ago),
                tasks::attempts.eq(1),
            ))
            .execute(&mut db.conn())
            .unwrap();
        let seen = Mutex::new(Vec::new());
        let worker = Worker::new(db.pool(6))
            .concurrency(2)
            .limit_per_key(tasks::tenant, 1, |t: &Task| t.tenant.clone());
        run_until_settled(worker, |_, t: &Task| {
            seen.lock().unwrap().push(t.id);
            Ok(())
        }, || left(db, "done") == 3);
        assert_eq!(statuses(db), HashMap::from([("done".to_string(), 3)]));
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        ids.sort();
        assert_eq!(seen, ids, "each row once, the stale one included");
    }

    /// `Worker::claim_cursor` with `limit_per_key` (issue 23): the cursor's claims skip rows of
    /// tenants at their limit, each worker's own cursor (never a timed rescan) moves past them,
    /// and they are found once a claim from the key finds fewer rows than it asked for. The
    /// limit holds and every row runs once.
    pub(crate) fn a_cursor_under_a_per_key_limit_keeps_the_limit_and_runs_every_row(db: &TestDb<B>) {
        two_workers_keep_a_per_key_limit_of_two(db, || {
            let cursor = diesel_lease::claim::ClaimCursor::new(Duration::from_secs(3600)).unwrap();
            Worker::new(db.pool(10))
                .concurrency(4)
                .claim_cursor(cursor)
                .limit_per_key(tasks::tenant, 2, |t: &Task| t.tenant.clone())
        });
    }

    /// Two workers from `make` (as two processes would be: their own pools), 4 threads each,
    /// over 36 rows of 3 tenants whose handler takes 40 ms: at most 2 rows per tenant at once
    /// across both, the limit reached, each row run once, and no semaphore row left after.
    fn two_workers_keep_a_per_key_limit_of_two(
        db: &TestDb<B>,
        make: impl Fn() -> Worker<Task, <B as TestBackend>::Conn> + Sync,
    ) {
        db.migrate();
        seed(db, 36, &["acme", "globex", "initech"]);
        let running = Mutex::new(HashMap::<String, usize>::new());
        let peak = Mutex::new(HashMap::<String, usize>::new());
        let seen = Mutex::new(Vec::new());
        let handler = |_: &mut <B as TestBackend>::Conn, t: &Task| -> Result<(), String> {
            {
                let mut running = running.lock().unwrap();
                let now = running.entry(t.tenant.clone()).or_default();
                *now += 1;
                let mut peak = peak.lock().unwrap();
                let p = peak.entry(t.tenant.clone()).or_default();
                *p = (*p).max(*now);
            }
            std::thread::sleep(Duration::from_millis(40));
            *running.lock().unwrap().get_mut(&t.tenant).unwrap() -= 1;
            seen.lock().unwrap().push(t.id);
            Ok(())
        };
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let a = s.spawn(|| make().run_until(&stop, handler));
            let b = s.spawn(|| make().run_until(&stop, handler));
            let started = Instant::now();
            while left(db, "done") < 36 && started.elapsed() < Duration::from_secs(90) {
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::SeqCst);
            a.join().unwrap().unwrap();
            b.join().unwrap().unwrap();
        });
        let peak = peak.into_inner().unwrap();
        assert!(peak.values().all(|p| *p <= 2), "limit exceeded: {peak:?}");
        assert!(peak.values().any(|p| *p == 2), "the limit was never reached: {peak:?}");
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 36);
        assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 36, "each row once");
        assert_eq!(statuses(db), HashMap::from([("done".to_string(), 36)]));
        // Every key is idle: its semaphore's row went with its last permit.
        assert_eq!(semaphore_rows(db), (vec![], 0));
    }

    /// A worker limited per tenant over 20 tenants: once every row is done (and the worker has
    /// returned, so every permit is released), no semaphore row is left for any tenant.
    pub(crate) fn per_key_semaphores_are_removed_once_their_keys_are_idle(db: &TestDb<B>) {
        db.migrate();
        let tenants: Vec<String> = (0..20).map(|t| format!("tenant-{t:02}")).collect();
        let tenants: Vec<&str> = tenants.iter().map(String::as_str).collect();
        seed(db, 40, &tenants);
        let worker = Worker::new(db.pool(8))
            .concurrency(4)
            .batch(3)
            .limit_per_key(tasks::tenant, 1, |t: &Task| t.tenant.clone());
        let report = run_until_settled(worker, |_, _t: &Task| Ok(()), || left(db, "done") == 40);
        assert_eq!(report.completed, 40, "{report:?}");
        assert_eq!(semaphore_rows(db), (vec![], 0), "semaphore rows (and requests) left behind");
    }

    /// Keys too long to name a semaphore as they are (two of 250 bytes with the same start): each
    /// gets one named by its hash, so every row runs, one at a time per key (limit 1), and nothing is left claimed.
    /// A key that could not name its semaphore used to stop the worker with the row claimed.
    pub(crate) fn keys_of_any_length_get_their_limit(db: &TestDb<B>) {
        db.migrate();
        // 250 bytes: too long with the semaphore name's prefix (MySQL's column is widened to take it).
        let long = "t".repeat(249);
        let (a, b) = (format!("{long}a"), format!("{long}b"));
        fixtures::tasks_table(db);
        db.ddl("SELECT 1", "SELECT 1", "ALTER TABLE tasks MODIFY tenant VARCHAR(255) NOT NULL DEFAULT ''");
        let mut conn = db.conn();
        for tenant in [&a, &b, "short"].iter().cycle().take(6) {
            fixtures::insert_task(&mut conn, -10, tenant);
        }
        let running: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
        let peak: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
        let worker = Worker::new(db.pool(8))
            .concurrency(4)
            .limit_per_key(tasks::tenant, 1, |t: &Task| t.tenant.clone());
        let report = run_until_settled(
            worker,
            |_, t: &Task| {
                let now = {
                    let mut running = running.lock().unwrap();
                    let n = running.entry(t.tenant.clone()).or_default();
                    *n += 1;
                    *n
                };
                let mut peak = peak.lock().unwrap();
                let p = peak.entry(t.tenant.clone()).or_default();
                *p = (*p).max(now);
                drop(peak);
                std::thread::sleep(Duration::from_millis(50));
                *running.lock().unwrap().get_mut(&t.tenant).unwrap() -= 1;
                Ok(())
            },
            || left(db, "done") == 6,
        );
        assert_eq!(report.completed, 6, "{report:?}");
        let peak = peak.into_inner().unwrap();
        assert_eq!(peak.len(), 3, "{peak:?}");
        assert!(peak.values().all(|p| *p == 1), "two rows of one key ran at once: {peak:?}");
        assert_eq!(semaphore_rows(db), (vec![], 0));
    }

    /// A `limit_per_key` key function that panics on a row fails that row like a panicking
    /// handler (retried, then dead with the panic as its error); the worker goes on with the
    /// other rows. Before, the panic ended the worker thread, and `run_until` panicked.
    pub(crate) fn a_panicking_key_function_fails_its_row_and_the_worker_goes_on(db: &TestDb<B>) {
        db.migrate();
        seed(db, 6, &["acme", "boom"]);
        let ran = Mutex::new(Vec::new());
        let worker = Worker::new(db.pool(6))
            .concurrency(2)
            .retry_policy(quick_retries(2))
            .limit_per_key(tasks::tenant, 2, |t: &Task| {
                assert_ne!(t.tenant, "boom", "no key for this tenant");
                t.tenant.clone()
            });
        let report = run_until_settled(worker, |_, t: &Task| {
            ran.lock().unwrap().push(t.tenant.clone());
            Ok(())
        }, || left(db, "done") == 3 && left(db, "dead") == 3);
        assert_eq!(ran.into_inner().unwrap(), ["acme"; 3], "only rows with a key ran");
        assert_eq!((report.completed, report.retried, report.failed, report.panicked), (3, 3, 3, 6));
        let rows: Vec<Task> = tasks::table.filter(tasks::tenant.eq("boom")).select(Task::as_select()).load(&mut db.conn()).unwrap();
        for t in rows {
            assert_eq!((t.status.as_str(), t.attempts), ("dead", 2));
            let error = t.last_error.unwrap();
            assert!(error.contains("key function panicked") && error.contains("no key for this tenant"), "{error}");
        }
    }

    /// A pool whose every checkout takes 300 ms (a starved pool, injected with an r2d2 event
    /// handler) and claims that time out after 200 ms: by the time the handler's connection
    /// arrives, the claim's local deadline (180 ms after it was sent) has passed, and another
    /// worker may be running the row. The handler is not called; the claim counts as lost and
    /// the row goes back. Before, the handler ran on the lost claim.
    pub(crate) fn a_claim_lost_before_the_handler_gets_a_connection_is_not_run(db: &TestDb<B>) {
        #[derive(Debug)]
        struct SlowCheckout;
        impl diesel::r2d2::HandleEvent for SlowCheckout {
            fn handle_checkout(&self, _: diesel::r2d2::event::CheckoutEvent) {
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        #[derive(Debug, Queryable, Selectable, diesel_lease::Claimable)]
        #[diesel(table_name = tasks)]
        #[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
            owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_ms = 200)]
        #[allow(dead_code)] // read by the derive's statements, not here
        struct Short {
            id: i64,
            status: String,
            owner: Option<String>,
            claimed_at: Option<chrono::NaiveDateTime>,
            attempts: i32,
        }
        seed(db, 2, &[""]);
        let pool = diesel::r2d2::Pool::builder()
            .max_size(4)
            .connection_customizer(Box::new(diesel_lease::pool::ConnectionTuning::default()))
            .event_handler(Box::new(SlowCheckout))
            .build(diesel::r2d2::ConnectionManager::<<B as TestBackend>::Conn>::new(&db.url))
            .unwrap();
        let ran = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let report = std::thread::scope(|s| {
            let worker = Worker::<Short, _>::new(pool);
            let run = s.spawn(|| {
                worker.run_until(&stop, |_: &mut <B as TestBackend>::Conn, _: &Short| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                })
            });
            std::thread::sleep(Duration::from_secs(3));
            stop.store(true, Ordering::SeqCst);
            run.join().unwrap().unwrap()
        });
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a handler ran on a lost claim");
        assert!(report.lost >= 1, "{report:?}");
        assert_eq!(report.completed, 0, "{report:?}");
        assert_eq!(left(db, "done"), 0);
    }

    /// Three worker processes of 3 threads each, limit 2 per tenant: the runs' intervals (on
    /// the machine's clock, taken inside the handler, which runs within the key's permit) never
    /// overlap more than 2 deep for one tenant, and every row runs once. The task each handler
    /// was given is recorded as a hand-out and judged by `common::history` (each row once per
    /// claim epoch, marked).
    pub(crate) fn the_per_key_limit_holds_across_processes(db: &TestDb<B>) {
        db.migrate();
        seed(db, 30, &["acme", "globex"]);
        // The runs under way, one file each: a run waits there for a second one of its tenant.
        let runs_dir = tempfile::tempdir().unwrap();
        let mut children: Vec<_> = (0..3)
            .map(|_| {
                std::process::Command::new(crate::common::worker_bin("claim-worker"))
                    .env("DIESEL_LEASE_TEST_RUNS_DIR", runs_dir.path())
                    .args([B::NAME, &db.url, "tenants", "3", "2"])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn claim-worker")
            })
            .collect();
        let started = Instant::now();
        while left(db, "done") < 30 && started.elapsed() < Duration::from_secs(90) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut runs: Vec<(i64, String, u128, u128)> = Vec::new();
        let history = History::default();
        for child in &mut children {
            child.kill().unwrap();
        }
        for child in children {
            let out = child.wait_with_output().unwrap();
            for line in String::from_utf8(out.stdout).unwrap().lines() {
                if let Some(event) = hand_out_from_worker_line(line) {
                    history.record(event);
                    continue;
                }
                let f: Vec<&str> = line.split(' ').collect();
                if let ["run", id, tenant, start, end] = f.as_slice() {
                    runs.push((id.parse().unwrap(), tenant.to_string(), start.parse().unwrap(), end.parse().unwrap()));
                }
            }
        }
        assert_eq!(left(db, "done"), 30);
        let ids: HashSet<i64> = runs.iter().map(|r| r.0).collect();
        assert_eq!((runs.len(), ids.len()), (30, 30), "each row once");
        let mut peaks = Vec::new();
        for tenant in ["acme", "globex"] {
            // Ends sort before starts at the same instant: back to back is not overlapping.
            let mut events: Vec<(u128, i32)> = runs
                .iter()
                .filter(|r| r.1 == tenant)
                .flat_map(|r| [(r.2, 1), (r.3, -1)])
                .collect();
            events.sort();
            let (mut depth, mut peak) = (0, 0);
            for (_, step) in events {
                depth += step;
                peak = peak.max(depth);
            }
            assert!(peak <= 2, "{tenant}: {peak} at once");
            peaks.push(peak);
        }
        assert!(peaks.contains(&2), "the limit was never reached: {peaks:?}");
        history.check_claims("running");
        assert_eq!(history.hand_outs(), runs.len(), "one hand-out per run");
        // The check can fail on this very record: one hand-out given out a second time in its
        // epoch is a violation.
        let doubled = with_first_hand_out_doubled(&history.events());
        assert_eq!(check_claims(&doubled, "running").len(), 1, "the checker misses a doubled hand-out");
    }
}
