//! Issue 25.3: an async application's `deadpool-diesel` pool lends its connections to lease
//! guards, permits, waiting claims, the farm schedules (`run_exclusive`, `with_lock`,
//! `every(..)`) and the `Worker`, on every backend, with the application's tokio runtime running
//! beside them (calls made from `spawn_blocking` and from plain threads).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_lease::lease::{LeaseGuard, LeaseOptions};
use diesel_lease::pool::{build_deadpool, ConnectionSource, Deadpool};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::worker::Worker;
use diesel_lease::Error;

use crate::common::{TestBackend, TestDb};
use crate::models::schema::tasks;
use crate::models::*;

/// The application's runtime: two worker threads, timers and I/O on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

backend_suite! {
    fixtures: crate::claim::schedule;
    tests: [
        a_lease_guard_on_deadpool_keeps_alive_and_learns_a_forced_release,
        permits_on_deadpool_never_exceed_the_count,
        a_worker_on_deadpool_runs_what_requests_committed_exactly_once,
        an_exhausted_or_runtimeless_deadpool_is_a_typed_error,
        farm_schedules_on_deadpool_run_each_occurrence_once,
        waiters_on_deadpool_with_a_listen_url_are_woken_by_notify,
        clones_made_before_listen_url_wait_apart_from_those_after,
        dropping_holders_inside_the_runtime_never_blocks_its_threads,
    ];

    /// Issue 55.6: holders dropped inside async tasks never block the runtime's threads. The
    /// runtime has one thread (the tasks run on the `block_on` caller) and the pool's one
    /// connection is taken by the test, with a drop wait of a minute: a drop that waited for a
    /// connection would hold that thread for a minute per holder. These return at once, and
    /// the keeper releases everything once the connection is back.
    pub(crate) fn dropping_holders_inside_the_runtime_never_blocks_its_threads(db: &TestDb<B>) {
        db.migrate();
        let pool = db.pool(1);
        let long = Duration::from_secs(60);
        let options = LeaseOptions::new(long).keep_alive(true).drop_wait(long);
        let guards: Vec<_> = (0..100)
            .map(|i| LeaseGuard::try_acquire(&pool, &format!("task-{i}"), &options).unwrap().expect("free"))
            .collect();
        let permits: Vec<_> = (0..10)
            .map(|i| {
                Semaphore::mutex(format!("res-{i}")).with_ttl(long).with_drop_wait(long)
                    .try_acquire(&pool).unwrap().expect("free")
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let hog = pool.get().unwrap();
        let started = Instant::now();
        rt.block_on(async move {
            let mut tasks: Vec<_> = guards.into_iter().map(|g| tokio::spawn(async move { drop(g) })).collect();
            tasks.extend(permits.into_iter().map(|p| tokio::spawn(async move { drop(p) })));
            for task in tasks {
                task.await.unwrap();
            }
        });
        let took = started.elapsed();
        // Every drop returned with the pool's only connection still taken: none waited for it.
        assert!(took < long / 2, "110 drops took {took:?}");
        drop(hog);
        crate::common::settled(&pool);
        let mut conn = db.conn();
        for i in 0..100 {
            let record = diesel_lease::Lease::inspect(&mut conn, &format!("task-{i}")).unwrap().expect("granted");
            assert!(record.is_released(), "task-{i}: {record:?}");
        }
        for i in 0..10 {
            assert!(Semaphore::mutex(format!("res-{i}")).queue(&mut conn).unwrap().is_empty(), "res-{i}");
        }
    }

    fn source(db: &TestDb<B>, rt: &tokio::runtime::Runtime, size: usize) -> Deadpool<<B as TestBackend>::Conn> {
        let _entered = rt.enter();
        let pool = build_deadpool::<<B as TestBackend>::Conn>(&db.url, size).unwrap();
        Deadpool::from_current(pool).unwrap()
    }

    pub(crate) fn a_lease_guard_on_deadpool_keeps_alive_and_learns_a_forced_release(db: &TestDb<B>) {
        db.migrate();
        let rt = runtime();
        let source = source(db, &rt, 4);
        let options = LeaseOptions::new(Duration::from_millis(900)).keep_alive(true);
        // Taken in a request handler: off the runtime's threads, as the docs say.
        let taken = {
            let (source, options) = (source.clone(), options.clone());
            rt.spawn_blocking(move || LeaseGuard::try_acquire(&source, "nightly", &options))
        };
        let guard = rt
            .block_on(taken)
            .unwrap()
            .unwrap()
            .expect("a free lease is granted");
        // Three ttls later the heartbeat (on the deadpool pool) has kept it.
        std::thread::sleep(Duration::from_millis(2700));
        assert!(!guard.is_lost());
        assert!(guard.confirm_held().unwrap(), "kept alive through deadpool connections");
        let r2d2 = db.pool(2);
        assert!(LeaseGuard::try_acquire(&r2d2, "nightly", &options).unwrap().is_none(), "still held");
        // The operator takes it away: the holder's next beat learns it.
        assert!(diesel_lease::admin::force_release_lease(&mut db.conn(), "nightly").unwrap().is_some());
        assert!(guard.lost_signal().wait_timeout(Duration::from_secs(10)), "the lost signal fires");
        assert!(guard.is_lost());
        assert!(guard.release().unwrap().was_lost(), "a lost lease is not released as if held");
    }

    /// `run_exclusive` and `with_lock` on the deadpool pool see a lease an r2d2 holder keeps,
    /// and three nodes' `every(..).run_until` on it run each due time once, on an unbroken grid.
    pub(crate) fn farm_schedules_on_deadpool_run_each_occurrence_once(db: &TestDb<B>) {
        use diesel_lease::lease::schedule::{every, run_exclusive, with_lock};
        db.migrate();
        let rt = runtime();
        let source = source(db, &rt, 6);
        let options = LeaseOptions::new(Duration::from_secs(30));
        let r2d2 = db.pool(2);
        let holder = LeaseGuard::try_acquire(&r2d2, "digest", &options).unwrap().expect("free");
        let ran = {
            let (source, options) = (source.clone(), options.clone());
            rt.block_on(rt.spawn_blocking(move || {
                run_exclusive(&source, "digest", &options, |_| Ok::<_, Error>(()))
            }))
            .unwrap()
            .unwrap()
        };
        assert_eq!(ran, None, "the r2d2 holder's lease is seen through deadpool connections");
        assert!(holder.release().unwrap().was_held());
        let token = run_exclusive(&source, "digest", &options, |lease| Ok::<_, Error>(lease.token().get()))
            .unwrap()
            .expect("free once released");
        assert_eq!(token, 2, "the next fencing token");
        let total = with_lock(&source, "rebuild", Duration::from_secs(5), || Ok::<_, Error>(40 + 2)).unwrap();
        assert_eq!(total, 42);

        let interval = 300_000;
        let dues = Mutex::new(Vec::new());
        let until = Instant::now() + Duration::from_millis(2_200);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    every(Duration::from_millis(300))
                        // Held for the run alone and released after it: a ttl far above the
                        // run's length, so that a loaded machine cannot make a run outlive it.
                        .lease(LeaseOptions::new(Duration::from_millis(1_500)))
                        .poll_every(Duration::from_millis(20))
                        .run_until(&source, "tick", || Instant::now() >= until, |o| {
                            dues.lock().unwrap().push((o.due_at_micros(), o.token().get()));
                        })
                        .unwrap();
                });
            }
        });
        let mut dues = dues.into_inner().unwrap();
        dues.sort();
        assert!(dues.len() >= 4, "{dues:?}");
        let unique: HashSet<i64> = dues.iter().map(|d| d.0).collect();
        assert_eq!(unique.len(), dues.len(), "an occurrence ran twice: {dues:?}");
        for w in dues.windows(2) {
            assert_eq!(w[1].0 - w[0].0, interval, "one run per interval: {dues:?}");
            assert!(w[1].1 > w[0].1, "fencing tokens grow: {dues:?}");
        }
    }

    pub(crate) fn permits_on_deadpool_never_exceed_the_count(db: &TestDb<B>) {
        db.migrate();
        let rt = runtime();
        let source = source(db, &rt, 8);
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let runs = 12;
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (source, inside, most) = (source.clone(), inside.clone(), most.clone());
                rt.spawn_blocking(move || {
                    let semaphore = Semaphore::new("exports", 2);
                    for _ in 0..runs / 6 {
                        let permit = semaphore.acquire(&source, Duration::from_secs(60))?;
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(40));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        assert!(permit.release()?.was_held(), "held until released");
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for task in tasks {
            rt.block_on(task).unwrap().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2, "two at once at most, and the two were used");
    }

    pub(crate) fn a_worker_on_deadpool_runs_what_requests_committed_exactly_once(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        db.migrate();
        let rt = runtime();
        let source = source(db, &rt, 8);
        // Requests enqueue inside their own transaction; every third one fails after its insert
        // and rolls back: its row never existed.
        let committed: Vec<i64> = rt.block_on(async {
            let mut committed = Vec::new();
            for i in 0..30 {
                let conn = source.pool().get().await.unwrap();
                let id = conn
                    .interact(move |conn| {
                        conn.transaction(|conn| {
                            let id = fixtures::insert_task(conn, -10, "");
                            if i % 3 == 2 {
                                return Err(diesel::result::Error::RollbackTransaction);
                            }
                            Ok(id)
                        })
                    })
                    .await
                    .unwrap();
                if let Ok(id) = id {
                    committed.push(id);
                }
            }
            committed
        });
        assert_eq!(committed.len(), 20);
        let seen = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let worker = Worker::<Task, _>::new(source.clone()).concurrency(3).batch(2);
        let report = std::thread::scope(|s| {
            let run = s.spawn(|| {
                worker.run_until(&stop, |conn, task: &Task| {
                    // The handler's connection is a deadpool one: it can query.
                    let me: i64 = tasks::table.filter(tasks::id.eq(task.id)).count().get_result(conn)?;
                    assert_eq!(me, 1);
                    seen.lock().unwrap().push(task.id);
                    Ok::<_, diesel::result::Error>(())
                })
            });
            let started = Instant::now();
            while seen.lock().unwrap().len() < committed.len() && started.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::SeqCst);
            run.join().unwrap().unwrap()
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, committed, "each committed row exactly once, no rolled-back row");
        assert_eq!(report.completed, 20);
        let done: HashSet<i64> = tasks::table
            .filter(tasks::status.eq("done"))
            .select(tasks::id)
            .load(&mut db.conn())
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(done, committed.into_iter().collect());
    }

    pub(crate) fn an_exhausted_or_runtimeless_deadpool_is_a_typed_error(db: &TestDb<B>) {
        db.migrate();
        let rt = runtime();
        let source = source(db, &rt, 1);
        let held = rt.block_on(source.pool().get()).unwrap();
        let options = LeaseOptions::new(Duration::from_secs(5));
        let started = Instant::now();
        let busy = {
            // A bounded loan: what a heartbeat or a waiting acquire makes.
            source.lend(Duration::from_millis(200)).map(|_| ())
        };
        assert!(matches!(busy, Err(Error::Pool(_))), "{busy:?}");
        let busy = busy.unwrap_err();
        assert!(busy.is_retryable());
        assert!(busy.to_string().contains("deadpool-diesel"), "{busy}");
        assert!(std::error::Error::source(&busy).and_then(std::error::Error::source).is_some(), "the pool's own error is kept");
        assert!(started.elapsed() < Duration::from_secs(20), "bounded by the loan's wait");
        drop(held);
        assert!(LeaseGuard::try_acquire(&source, "after", &options).unwrap().is_some());

        // A pool built without a runtime cannot bound a wait: said so, before anything is sent.
        let _entered = rt.enter();
        let manager = deadpool_diesel::Manager::<<B as TestBackend>::Conn>::new(db.url.clone(), deadpool_diesel::Runtime::Tokio1);
        let bare = deadpool_diesel::Pool::builder(manager).max_size(1).build().unwrap();
        let bare = Deadpool::from_current(bare).unwrap();
        match LeaseGuard::try_acquire(&bare, "bare", &options) {
            Err(Error::Config(message)) => assert!(message.contains("runtime"), "{message}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        // A waiting claim says so too, instead of polling in a loop until its timeout.
        fixtures::tasks_table(db);
        match Task::claim().wait(Duration::from_secs(5)).row(&bare) {
            Err(Error::Config(message)) => assert!(message.contains("runtime"), "{message}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        // And a waiting semaphore and lease, which used to count each failed loan as a missed
        // poll or a refused attempt and end in a timeout.
        match Semaphore::mutex("bare").acquire(&bare, Duration::from_secs(30)) {
            Err(Error::Config(message)) => assert!(message.contains("runtime"), "{message}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        match LeaseGuard::acquire(&bare, "bare", &options, Duration::from_secs(30)) {
            Err(Error::Config(message)) => assert!(message.contains("runtime"), "{message}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        drop(_entered);
        // Outside a runtime, `from_current` says what to do instead of panicking.
        let outside = std::thread::spawn(move || {
            Deadpool::<<B as TestBackend>::Conn>::from_current(source.pool().clone()).map(|_| ())
        })
        .join()
        .unwrap();
        assert!(matches!(outside, Err(Error::Config(ref m)) if m.contains("Deadpool::new")), "{outside:?}");
    }

    /// Waiters of one pool share a poller by the source's identity. On PostgreSQL a clone made
    /// before `listen_url` has no listener: its waiters share one apart from the waiters a
    /// `NOTIFY` wakes (a shared poller without the listener would sleep through the
    /// notifications meant for the others), while every clone made after shares the listener's.
    /// Elsewhere `listen_url` adds nothing: one pool, one identity. Another pool never shares.
    pub(crate) fn clones_made_before_listen_url_wait_apart_from_those_after(db: &TestDb<B>) {
        let rt = runtime();
        let before = source(db, &rt, 2);
        let after = before.clone().listen_url(&db.url);
        let (before_clone, after_clone) = (before.clone(), after.clone());
        let identity = |s: &Deadpool<<B as TestBackend>::Conn>| ConnectionSource::identity(s).unwrap();
        assert_eq!(identity(&before), identity(&before_clone));
        assert_eq!(identity(&after), identity(&after_clone));
        let postgres = B::NAME == "postgres";
        assert_eq!(identity(&before) != identity(&after), postgres, "{before:?} {after:?}");
        let other = source(db, &rt, 2);
        assert_ne!(identity(&other), identity(&before));
        assert_ne!(identity(&other), identity(&after));
    }

    /// `Deadpool::build` (with `listen_url`): on PostgreSQL the pool's waiters get one listener connection
    /// (seen in `pg_stat_activity` once a waiter waits, and not before), and a row made ready by
    /// the installed trigger (a `NOTIFY` from the server, no call in this process) reaches an
    /// idle `claim_next_wait` waiter within 300 ms in at least six of eight rounds: a waiter that
    /// only polls (a second apart by then) would do that about once in 100 runs, and two rounds
    /// slowed by a loaded machine do not fail the test. SQLite and MySQL have no notifications:
    /// no listener, and the waiter finds the row by polling.
    pub(crate) fn waiters_on_deadpool_with_a_listen_url_are_woken_by_notify(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        db.migrate();
        Task::queue().install_ready_trigger(&mut db.conn()).unwrap();
        let rt = runtime();
        // Deadpool::build: build_deadpool, from_current and listen_url in one call.
        let source = {
            let _entered = rt.enter();
            Deadpool::<<B as TestBackend>::Conn>::build(&db.url, 4).unwrap()
        };
        let postgres = B::NAME == "postgres";
        assert_eq!(format!("{source:?}").contains("listener: true"), postgres, "{source:?}");
        let listeners = || -> i64 {
            if !postgres {
                return 0;
            }
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                "(SELECT COUNT(*) FROM pg_stat_activity \
                  WHERE datname = current_database() AND application_name = 'diesel-lease listener')",
            ))
            .get_result(&mut db.conn())
            .unwrap()
        };
        assert_eq!(listeners(), 0, "nothing starts before a waiter waits");
        let mut latencies = Vec::new();
        for round in 0..8 {
            let (task, latency) = std::thread::scope(|s| {
                let waiter = s.spawn(|| {
                    let task = Task::claim().wait(Duration::from_secs(20)).row(&source).unwrap();
                    (task, Instant::now())
                });
                // Idle long enough that the waiter's polls are a second apart.
                std::thread::sleep(Duration::from_millis(2500));
                if postgres {
                    assert_eq!(listeners(), 1, "round {round}: one listener while a waiter waits");
                }
                let inserted = Instant::now();
                let id = fixtures::insert_task(&mut db.conn(), -10, "");
                let (task, at) = waiter.join().unwrap();
                assert_eq!(task.as_ref().map(|t| t.id), Some(id), "round {round}");
                (task.unwrap(), at - inserted)
            });
            assert!(task.complete(&mut db.conn()).unwrap());
            latencies.push(latency);
        }
        if postgres {
            let fast = latencies.iter().filter(|l| **l < Duration::from_millis(300)).count();
            assert!(fast >= 6, "woken within 300 ms in {fast} of 8 rounds: {latencies:?}");
        }
    }
}
