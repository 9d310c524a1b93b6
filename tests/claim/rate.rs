//! Issue 24.1: rate limits. At most N claims per period, of a table or per key, across processes
//! and threads, by the database clock: never more than N in any window of the period (asserted
//! from the claimed-at times the claims wrote), every row started exactly once, none lost.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_lease::claim::{ClaimOptions, RateLimit};
use diesel_lease::prelude::*;

use crate::common::{TestBackend, TestDb};
use crate::models::schema::tasks;
use crate::models::*;

backend_suite! {
    fixtures: crate::claim::schedule;
    tests: [
        a_global_rate_limit_holds_in_every_window_across_processes_and_threads,
        a_per_key_rate_limit_holds_with_the_per_key_concurrency_limit,
        keys_longer_than_255_characters_are_limited_by_their_start,
        rows_over_a_rate_limit_stay_ready,
        a_rate_limit_on_another_table_is_refused,
        a_rate_limited_claim_inside_a_transaction_is_refused,
        forget_idle_deletes_old_starts_and_idle_keys_and_claims_go_on,
        a_per_key_limit_holds_while_forget_idle_runs_beside_the_claims,
        a_key_row_forgotten_under_a_waiting_admission_is_created_again,
        a_worker_forgets_its_rate_limits_idle_keys,
        an_idle_worker_forgets_its_rate_limits_idle_keys_while_it_waits,
    ];

    const PERIOD: Duration = Duration::from_secs(2);

    fn seed(db: &TestDb<B>, n: usize, tenants: &[&str]) -> Vec<i64> {
        db.migrate();
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        (0..n).map(|i| fixtures::insert_task(&mut conn, -10, tenants[i % tenants.len()])).collect()
    }

    fn left(db: &TestDb<B>, status: &str) -> i64 {
        tasks::table.filter(tasks::status.eq(status)).count().get_result(&mut db.conn()).unwrap()
    }

    /// One start: the row, its key, and its claimed-at time (µs, database clock).
    struct Start {
        id: i64,
        tenant: String,
        claimed_at: i64,
        /// The handler's run on the system clock (µs), when a worker process ran it.
        run: Option<(u128, u128)>,
    }

    fn micros(t: &Task) -> i64 {
        t.claimed_at.expect("claimed").and_utc().timestamp_micros()
    }

    /// No `max + 1` starts within less than `period`: sorted by time, each start is at least
    /// `period` after the one `max` places before it. That is "never more than `max` in any
    /// window of length `period`".
    fn assert_windows(starts: &[&Start], max: usize, what: &str) {
        assert_windows_of(starts, max, PERIOD, what);
    }

    fn assert_windows_of(starts: &[&Start], max: usize, period: Duration, what: &str) {
        let mut times: Vec<i64> = starts.iter().map(|s| s.claimed_at).collect();
        times.sort();
        let period = i64::try_from(period.as_micros()).unwrap();
        for (i, pair) in times.windows(max + 1).enumerate() {
            let gap = pair[max] - pair[0];
            assert!(
                gap >= period,
                "{what}: starts {i}..={} are {gap} µs apart, less than the period: {times:?}",
                i + max
            );
        }
        // The limit was reached: the test would have seen a breach.
        assert!(times.len() > max, "{what}: only {} starts", times.len());
    }

    /// Spawns `processes` claim-worker processes in `rate` mode with `args`.
    fn spawn(db: &TestDb<B>, processes: usize, args: &[&str]) -> Vec<std::process::Child> {
        (0..processes)
            .map(|_| {
                std::process::Command::new(crate::common::worker_bin("claim-worker"))
                    .args([B::NAME, &db.url, "rate"])
                    .args(args)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn claim-worker")
            })
            .collect()
    }

    fn collect(children: Vec<std::process::Child>, starts: &mut Vec<Start>) {
        for mut child in children {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            for line in String::from_utf8(out.stdout).unwrap().lines() {
                let f: Vec<&str> = line.split(' ').collect();
                if let ["rate", id, tenant, claimed_at, start, end] = f.as_slice() {
                    starts.push(Start {
                        id: id.parse().unwrap(),
                        tenant: tenant.to_string(),
                        claimed_at: claimed_at.parse().unwrap(),
                        run: Some((start.parse().unwrap(), end.parse().unwrap())),
                    });
                }
            }
        }
    }

    fn assert_each_once(db: &TestDb<B>, starts: &[Start], ids: &[i64]) {
        let seen: HashSet<i64> = starts.iter().map(|s| s.id).collect();
        assert_eq!(starts.len(), ids.len(), "each row started once");
        assert_eq!(seen, ids.iter().copied().collect::<HashSet<_>>(), "every row started");
        assert_eq!(left(db, "done"), i64::try_from(ids.len()).unwrap(), "every row done");
    }

    /// Waits (at most 120 s) until every row is done.
    fn wait_done(db: &TestDb<B>, n: usize) {
        let started = Instant::now();
        while left(db, "done") < i64::try_from(n).unwrap() && started.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn a_global_rate_limit_holds_in_every_window_across_processes_and_threads(db: &TestDb<B>) {
        let ids = seed(db, 18, &[""]);
        let period_ms = PERIOD.as_millis().to_string();
        let options = ClaimOptions::default().rate_limit(RateLimit::global(5, PERIOD));
        // Plain claims here (a first one before the processes start, then two threads of at
        // most two rows each) and three processes of two worker threads each, which do the
        // rest: all under 5 per 2 s.
        let plain = |conn: &mut <B as TestBackend>::Conn, t: Task| {
            assert!(t.complete(conn).unwrap());
            Start { id: t.id, tenant: t.tenant.clone(), claimed_at: micros(&t), run: None }
        };
        let mut conn = db.conn();
        let first = Task::claim().options(&options).row(&mut conn).unwrap().expect("the window is empty");
        let mut starts = vec![plain(&mut conn, first)];
        let children = spawn(db, 3, &["2", "5", &period_ms, "global", "0"]);
        starts.extend(std::thread::scope(|s| {
            let claimers: Vec<_> = (0..2)
                .map(|_| {
                    let options = options.clone();
                    s.spawn(move || {
                        let mut conn = db.conn();
                        let mut mine = Vec::new();
                        while mine.len() < 2 && left(db, "done") < 18 {
                            match Task::claim().options(&options).row(&mut conn).unwrap() {
                                Some(t) => mine.push(plain(&mut conn, t)),
                                None => std::thread::sleep(Duration::from_millis(50)),
                            }
                        }
                        mine
                    })
                })
                .collect();
            claimers.into_iter().flat_map(|c| c.join().unwrap()).collect::<Vec<_>>()
        }));
        wait_done(db, 18);
        collect(children, &mut starts);
        assert_each_once(db, &starts, &ids);
        assert_windows(&starts.iter().collect::<Vec<_>>(), 5, "global");
        assert!(starts.iter().filter(|s| s.run.is_some()).count() >= 13, "the processes ran the rest");
    }

    pub(crate) fn a_per_key_rate_limit_holds_with_the_per_key_concurrency_limit(db: &TestDb<B>) {
        let tenants = ["acme", "globex", "initech"];
        let ids = seed(db, 21, &tenants);
        let period_ms = PERIOD.as_millis().to_string();
        // 3 per 2 s per tenant, and at most one row of a tenant running at once.
        let children = spawn(db, 3, &["3", "3", &period_ms, "tenant", "1"]);
        wait_done(db, 21);
        let mut starts = Vec::new();
        collect(children, &mut starts);
        assert_each_once(db, &starts, &ids);
        for tenant in tenants {
            let of: Vec<&Start> = starts.iter().filter(|s| s.tenant == tenant).collect();
            assert_windows(&of, 3, tenant);
            // The concurrency limit still holds: a tenant's runs never overlap (system clock of
            // this machine, shared by the processes).
            let mut runs: Vec<(u128, u128)> = of.iter().filter_map(|s| s.run).collect();
            runs.sort();
            for pair in runs.windows(2) {
                assert!(pair[0].1 <= pair[1].0, "{tenant}: two runs at once: {pair:?}");
            }
        }
    }

    pub(crate) fn rows_over_a_rate_limit_stay_ready(db: &TestDb<B>) {
        seed(db, 5, &["a", "a", "a", "b", "b"]);
        let mut conn = db.conn();
        let options = ClaimOptions::default()
            .rate_limit(RateLimit::per_key(tasks::tenant, 1, Duration::from_secs(60)))
            .rate_limit(RateLimit::global(10, Duration::from_secs(60)));
        let first = Task::claim().batch(10).options(&options).rows(&mut conn).unwrap();
        let mut tenants: Vec<&str> = first.iter().map(|t| t.tenant.as_str()).collect();
        tenants.sort();
        assert_eq!(tenants, ["a", "b"], "one row per tenant");
        assert!(Task::claim().batch(10).options(&options).rows(&mut conn).unwrap().is_empty());
        // Nothing consumed: the others are ready, and claimable without the limit.
        let states: HashMap<String, i64> = tasks::table
            .group_by(tasks::status)
            .select((tasks::status, diesel::dsl::count_star()))
            .load::<(String, i64)>(&mut conn)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(states, HashMap::from([("new".to_string(), 3), ("running".to_string(), 2)]));
        assert_eq!(Task::claim().batch(10).rows(&mut conn).unwrap().len(), 3);
        // A global limit on its own counts every claim with it.
        let tight = ClaimOptions::default().rate_limit(RateLimit::global(1, Duration::from_secs(60)));
        fixtures::insert_task(&mut conn, -10, "c");
        fixtures::insert_task(&mut conn, -10, "c");
        assert_eq!(Task::claim().batch(10).options(&tight).rows(&mut conn).unwrap().len(), 1);
        assert!(Task::claim().options(&tight).row(&mut conn).unwrap().is_none());
        assert_eq!(left(db, "new"), 1);
    }

    /// Inside the caller's transaction the admission's count could read the caller's snapshot
    /// (MySQL's REPEATABLE READ) and admit more than the limit: refused, claiming nothing.
    pub(crate) fn a_rate_limited_claim_inside_a_transaction_is_refused(db: &TestDb<B>) {
        seed(db, 2, &["a"]);
        let mut conn = db.conn();
        let options = ClaimOptions::default().rate_limit(RateLimit::global(1, Duration::from_secs(60)));
        let inside = conn.transaction(|c| Task::claim().options(&options).row(c));
        assert!(
            matches!(inside, Err(diesel_lease::Error::Database(diesel::result::Error::AlreadyInTransaction))),
            "{inside:?}"
        );
        assert_eq!(left(db, "new"), 2, "nothing claimed");
        assert!(Task::claim().options(&options).row(&mut conn).unwrap().is_some());
        assert!(Task::claim().options(&options).row(&mut conn).unwrap().is_none(), "the limit holds");
    }

    /// A key value longer than the rate-key columns (255 characters) made every rate-limited
    /// claim of the table fail (PostgreSQL: "value too long"; MySQL: an error, or a cut key that
    /// was never found again). Keys are now compared by their first 255 characters: two values
    /// that share them share one limit, and other keys keep their own.
    pub(crate) fn keys_longer_than_255_characters_are_limited_by_their_start(db: &TestDb<B>) {
        let start = "k".repeat(255);
        let (a, b) = (format!("{start}-a"), format!("{start}-b"));
        db.migrate();
        fixtures::tasks_table(db);
        db.ddl("SELECT 1", "SELECT 1", "ALTER TABLE tasks MODIFY tenant VARCHAR(300) NOT NULL DEFAULT ''");
        let mut conn = db.conn();
        for tenant in [a.as_str(), b.as_str(), "short"] {
            fixtures::insert_task(&mut conn, -10, tenant);
        }
        let options = ClaimOptions::default().rate_limit(RateLimit::per_key(tasks::tenant, 1, Duration::from_secs(60)));
        let mut claimed = Vec::new();
        while let Some(task) = Task::claim().options(&options).row(&mut conn).unwrap() {
            claimed.push(task.tenant);
        }
        claimed.sort();
        assert_eq!(claimed.len(), 2, "one of the two long keys, and the short one");
        assert!(claimed.contains(&"short".to_string()));
        assert!(claimed[0] == a || claimed[0] == b, "{:?}", claimed[0].len());
        assert_eq!(left(db, "new"), 1, "the other long key waits for the shared limit");
    }

    pub(crate) fn a_rate_limit_on_another_table_is_refused(db: &TestDb<B>) {
        seed(db, 1, &[""]);
        let mut conn = db.conn();
        let wrong = ClaimOptions::default()
            .rate_limit(RateLimit::per_key(crate::models::schema::reminders::status, 1, PERIOD));
        let err = Task::claim().options(&wrong).row(&mut conn).unwrap_err();
        assert!(matches!(err, diesel_lease::Error::Config(_)), "{err}");
        let zero = ClaimOptions::default().rate_limit(RateLimit::global(0, PERIOD));
        assert!(Task::claim().options(&zero).row(&mut conn).is_err());
        assert_eq!(left(db, "new"), 1, "nothing claimed");
    }

    /// Rows of diesel-lease's two rate-limit tables: (keys, starts).
    fn rate_rows(db: &TestDb<B>) -> (i64, i64) {
        let count = |table: &str| -> i64 {
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(&format!("(SELECT COUNT(*) FROM {table})")))
                .get_result(&mut db.conn())
                .unwrap()
        };
        (count("diesel_lease_rate_limits"), count("diesel_lease_rate_starts"))
    }

    /// `RateLimit::forget_idle`: nothing while the starts are in their window; once they are
    /// older than the period, every start and every key's row of that limit (and only that
    /// limit's); the next claims create the rows again and the limit still holds. Misuse is a
    /// typed error. The starts are aged by the database (their `started_at` moved two periods
    /// back) rather than by waiting, so a slow machine changes no verdict: a period of an hour
    /// is never over between two statements, and an aged start is always outside it.
    pub(crate) fn forget_idle_deletes_old_starts_and_idle_keys_and_claims_go_on(db: &TestDb<B>) {
        seed(db, 6, &["a", "b", "c"]);
        let mut conn = db.conn();
        let period = Duration::from_secs(3_600);
        let per_tenant = RateLimit::per_key(tasks::tenant, 1, period);
        let global = RateLimit::global(10, period);
        let options = ClaimOptions::default().rate_limit(per_tenant.clone()).rate_limit(global.clone());
        assert_eq!(Task::claim().batch(10).options(&options).rows(&mut conn).unwrap().len(), 3, "one per tenant");
        assert_eq!(rate_rows(db), (4, 6), "three tenants' rows and the global one; 3 + 3 starts");
        let none = per_tenant.forget_idle(&mut conn, tasks::table).unwrap();
        assert_eq!((none.starts, none.keys), (0, 0), "every start is in its window");
        let aged = diesel::sql_query(format!(
            "UPDATE diesel_lease_rate_starts SET started_at = started_at - {}",
            2 * period.as_micros()
        ))
        .execute(&mut db.conn())
        .unwrap();
        assert_eq!(aged, 6, "every start aged by two periods");
        let tenants = per_tenant.forget_idle(&mut conn, tasks::table).unwrap();
        assert_eq!((tenants.starts, tenants.keys), (3, 3));
        assert_eq!(rate_rows(db), (1, 3), "the global limit's rows are another limit's");
        let all = global.forget_idle(&mut conn, tasks::table).unwrap();
        assert_eq!((all.starts, all.keys), (3, 1));
        assert_eq!(rate_rows(db), (0, 0));
        assert_eq!(Task::claim().batch(10).options(&options).rows(&mut conn).unwrap().len(), 3, "the keys come back");
        assert!(Task::claim().batch(10).options(&options).rows(&mut conn).unwrap().is_empty(), "and still limit");
        assert_eq!(rate_rows(db), (4, 6));
        let err = RateLimit::per_key(crate::models::schema::reminders::status, 1, period)
            .forget_idle(&mut conn, tasks::table)
            .unwrap_err();
        assert!(matches!(err, diesel_lease::Error::Config(_)), "{err}");
        let err = RateLimit::global(1, Duration::ZERO).forget_idle(&mut conn, tasks::table).unwrap_err();
        assert!(matches!(err, diesel_lease::Error::InvalidInput(_)), "{err}");
        assert_eq!(rate_rows(db), (4, 6), "misuse deleted nothing");
    }

    /// Four threads claim 30 rows of 6 tenants under 1 per 300 ms per tenant while another
    /// thread runs `forget_idle` over and over, deleting keys' rows as their starts age out:
    /// from the claimed-at times, no tenant has two starts within 300 ms, and every row runs
    /// once. At the end, with every start aged out, one more `forget_idle` leaves nothing.
    pub(crate) fn a_per_key_limit_holds_while_forget_idle_runs_beside_the_claims(db: &TestDb<B>) {
        let tenants = ["t0", "t1", "t2", "t3", "t4", "t5"];
        let ids = seed(db, 30, &tenants);
        let period = Duration::from_millis(300);
        let limit = RateLimit::per_key(tasks::tenant, 1, period);
        let options = ClaimOptions::default().rate_limit(limit.clone());
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut forgotten = 0;
        let mut starts: Vec<Start> = Vec::new();
        std::thread::scope(|s| {
            let forget = s.spawn(|| {
                let mut conn = db.conn();
                let mut keys = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    keys += limit.forget_idle(&mut conn, tasks::table).unwrap().keys;
                    std::thread::sleep(Duration::from_millis(2));
                }
                keys
            });
            let claimers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut conn = db.conn();
                        let mut mine = Vec::new();
                        let started = Instant::now();
                        while left(db, "done") < 30 && started.elapsed() < Duration::from_secs(120) {
                            match Task::claim().options(&options).row(&mut conn).unwrap() {
                                Some(t) => {
                                    assert!(t.complete(&mut conn).unwrap());
                                    mine.push(Start { id: t.id, tenant: t.tenant.clone(), claimed_at: micros(&t), run: None });
                                }
                                None => std::thread::sleep(Duration::from_millis(5)),
                            }
                        }
                        mine
                    })
                })
                .collect();
            for c in claimers {
                starts.extend(c.join().unwrap());
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            forgotten = forget.join().unwrap();
        });
        assert_each_once(db, &starts, &ids);
        for tenant in tenants {
            let of: Vec<&Start> = starts.iter().filter(|s| s.tenant == tenant).collect();
            assert_windows_of(&of, 1, period, tenant);
        }
        std::thread::sleep(period + Duration::from_millis(100));
        let last = limit.forget_idle(&mut db.conn(), tasks::table).unwrap();
        assert_eq!(rate_rows(db), (0, 0), "after forgetting {forgotten} keys' rows beside the claims and {last:?} at the end");
    }

    /// The admission's retry, forced: another transaction holds the lock of key `a`'s row from
    /// before the admission starts, and runs `forget_idle` (the key's only start has aged out)
    /// while the admission waits for that lock. The admission must find no row, end its
    /// transaction before counting, create the row again and claim: one row, one new start, the
    /// key's row back. On PostgreSQL the admission's `INSERT … ON CONFLICT DO NOTHING` passes
    /// the locked row and it waits at its `SELECT … FOR UPDATE`, so the key's row is created
    /// twice (the retry). On MariaDB its `INSERT IGNORE` already waits (InnoDB locks the
    /// duplicate key it finds) and inserts once the deletion commits: created once. On SQLite
    /// the deleter holds the one writer's lock, so the admission's writes wait for the deletion.
    pub(crate) fn a_key_row_forgotten_under_a_waiting_admission_is_created_again(db: &TestDb<B>) {
        use diesel::connection::{InstrumentationEvent, SimpleConnection};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        let ids = seed(db, 2, &["a"]);
        let period = Duration::from_millis(100);
        let limit = RateLimit::per_key(tasks::tenant, 5, period);
        let options = ClaimOptions::default().rate_limit(limit.clone());
        let mut claimer = db.conn();
        let first = Task::claim().options(&options).row(&mut claimer).unwrap().expect("a ready row");
        assert!(first.complete(&mut claimer).unwrap());
        assert_eq!(rate_rows(db), (1, 1), "key a's row and its start");
        std::thread::sleep(period + Duration::from_millis(100));

        // The claimer's creations of a key's row, from the statements it sends.
        let creations = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&creations);
        claimer.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if let InstrumentationEvent::StartQuery { query, .. } = event {
                let text = query.to_string();
                if text.starts_with("INSERT") && text.contains("diesel_lease_rate_limits") {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
        });

        let lock = crate::common::pick::<B>(
            "SELECT rate_key FROM diesel_lease_rate_limits FOR UPDATE",
            // Any write takes SQLite's one writer lock for the transaction.
            "UPDATE diesel_lease_rate_limits SET rate_key = rate_key",
            "SELECT rate_key FROM diesel_lease_rate_limits FOR UPDATE",
        );
        let waiting = crate::common::pick::<B>(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            "",
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX t \
             JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
             WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()",
        );
        let blocked = || -> bool {
            if B::KIND == diesel_lease::BackendKind::Mysql {
                // InnoDB refreshes INNODB_TRX only when it was last read over 0.1 s ago.
                std::thread::sleep(Duration::from_millis(250));
            }
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(&format!("({waiting})")))
                .get_result::<i64>(&mut db.conn())
                .unwrap()
                > 0
        };
        let (locked_tx, locked_rx) = std::sync::mpsc::channel::<()>();
        let (claiming_tx, claiming_rx) = std::sync::mpsc::channel::<()>();
        let (limit, blocked) = (&limit, &blocked);
        let (forgotten, claimed) = std::thread::scope(|s| {
            let deleter = s.spawn(move || {
                let mut conn = db.conn();
                conn.transaction(|d| -> diesel_lease::Result<diesel_lease::claim::Forgotten> {
                    d.batch_execute(lock)?;
                    locked_tx.send(()).unwrap();
                    claiming_rx.recv().unwrap();
                    if !waiting.is_empty() {
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while !blocked() {
                            assert!(Instant::now() < deadline, "the claim never waited for key a's lock");
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    limit.forget_idle(d, tasks::table)
                })
                .unwrap()
            });
            locked_rx.recv().unwrap();
            let claim = s.spawn(|| {
                claiming_tx.send(()).unwrap();
                Task::claim().options(&options).row(&mut claimer).unwrap()
            });
            (deleter.join().unwrap(), claim.join().unwrap())
        });
        assert_eq!((forgotten.starts, forgotten.keys), (1, 1), "the aged-out start and key a's row");
        let claimed = claimed.expect("the waiting admission claims once its key's row is back");
        assert_eq!(claimed.id, ids[1]);
        assert_eq!(rate_rows(db), (1, 1), "key a's row created again, with the new start");
        let expected = match B::NAME {
            "postgres" => 2,
            _ => 1,
        };
        assert_eq!(creations.load(Ordering::SeqCst), expected, "creations of key a's row");
    }

    /// Runs `worker` on every row (each row it runs goes into the returned list) while `watch`
    /// runs on this thread, then stops it; the worker is stopped however `watch` ends, a failed
    /// assertion too (the scope would wait for the worker forever).
    fn while_working(
        worker: diesel_lease::worker::Worker<Task, <B as TestBackend>::Conn>,
        watch: impl FnOnce(),
    ) -> (diesel_lease::worker::WorkerReport, Vec<i64>) {
        use std::sync::atomic::{AtomicBool, Ordering};

        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let stop = AtomicBool::new(false);
        let ran = std::sync::Mutex::new(Vec::new());
        let report = std::thread::scope(|s| {
            let run = s.spawn(|| {
                worker.run_until(&stop, |_conn, task: &Task| {
                    ran.lock().unwrap().push(task.id);
                    Ok::<_, diesel::result::Error>(())
                })
            });
            let stop_on_drop = StopOnDrop(&stop);
            watch();
            drop(stop_on_drop);
            run.join().unwrap().unwrap()
        });
        let mut ran = ran.into_inner().unwrap();
        ran.sort();
        (report, ran)
    }

    /// Waits (up to 60 s) until `done()`, failing with `what` and `detail()`.
    fn wait_until(done: impl Fn() -> bool, what: &str, detail: impl Fn() -> String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: {}", detail());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// 12 ready rows of 12 tenants, and a worker of 4 threads for them under 1 per 100 ms per
    /// tenant that forgets idle keys `every`.
    fn twelve_tenants(
        db: &TestDb<B>,
        every: Duration,
    ) -> (Vec<i64>, diesel_lease::worker::Worker<Task, <B as TestBackend>::Conn>) {
        let tenants: Vec<String> = (0..12).map(|i| format!("user{i}")).collect();
        let tenants: Vec<&str> = tenants.iter().map(String::as_str).collect();
        let ids = seed(db, 12, &tenants);
        let limit = RateLimit::per_key(tasks::tenant, 1, Duration::from_millis(100));
        let worker = diesel_lease::worker::Worker::<Task, _>::new(db.pool(4))
            .rate_limit(limit)
            .forget_idle_every(every);
        (ids, worker)
    }

    /// `Worker::forget_idle_every`: a worker under 1 per 100 ms per tenant runs 12 rows of 12
    /// tenants (keys that come and go), then, idle, one more row of a new tenant; between its
    /// claims it forgets the limit's idle keys, so the 12 tenants' rows and starts go, leaving at
    /// most the newest tenant's. Each row ran once.
    pub(crate) fn a_worker_forgets_its_rate_limits_idle_keys(db: &TestDb<B>) {
        let (mut ids, worker) = twelve_tenants(db, Duration::from_millis(200));
        let (report, ran) = while_working(worker, || {
            wait_until(|| left(db, "done") == 12, "the worker did not finish the 12 rows", String::new);
            // Idle past the period and the forget interval, then a row of a new tenant.
            std::thread::sleep(Duration::from_millis(400));
            ids.push(fixtures::insert_task(&mut db.conn(), -10, "late"));
            wait_until(|| rate_rows(db).0 <= 1, "idle keys still there", || format!("{:?}", rate_rows(db)));
            wait_until(|| left(db, "done") == 13, "the worker did not run the last row", String::new);
        });
        assert_eq!(report.completed, 13);
        ids.sort();
        assert_eq!(ran, ids, "each row once");
        let (keys, starts) = rate_rows(db);
        assert!(keys <= 1 && starts <= 1, "at most the newest tenant's row and start: {keys}, {starts}");
    }

    /// A worker idle in its wait for rows wakes to forget its rate limits' idle keys: 12 rows of
    /// 12 tenants under 1 per 100 ms per tenant, then no new row at all; the 12 tenants' rows
    /// and starts go all the same (before, they stayed until the next claim found a row). Each
    /// row ran once.
    pub(crate) fn an_idle_worker_forgets_its_rate_limits_idle_keys_while_it_waits(db: &TestDb<B>) {
        // Longer than the 12 rows take: the last forget before the wait finds the keys in use.
        let (mut ids, worker) = twelve_tenants(db, Duration::from_secs(1));
        let (report, ran) = while_working(worker, || {
            wait_until(|| left(db, "done") == 12, "the worker did not finish the 12 rows", String::new);
            wait_until(|| rate_rows(db) == (0, 0), "idle keys still there", || format!("{:?}", rate_rows(db)));
        });
        assert_eq!(report.completed, 12);
        ids.sort();
        assert_eq!(ran, ids, "each row once");
    }
}
