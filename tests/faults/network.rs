//! A link that goes silent: the pool's connections run through a proxy in the test process
//! ([`Proxy`]) that, from a given moment on, forwards nothing in either direction and closes
//! nothing — a partition, as the client sees it. Every call with a documented bound returns
//! within it (checked against the bound plus [`SLACK`]; without the bound the call would wait
//! until the proxy goes at the end of the test), and every holder reports itself lost before
//! the database would give its grant away. PostgreSQL and MySQL/MariaDB; SQLite has no network.
//!
//! The calls under test run on threads of their own, so a call that ignores its bound fails
//! the test instead of hanging it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel_lease::__private::DROP_WAIT;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::lease::{Lease, LeaseGuard, LeaseOptions};
use diesel_lease::pool::build_pool;
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::worker::Worker;
use diesel_lease::Error;

use crate::common::proxy::Proxy;
use crate::common::{TestBackend, TestDb};
use crate::models::{ImportJob, IMPORTJOBS_DDL};

/// The grants' ttl (the claims' timeout).
const TTL: Duration = Duration::from_secs(3);
/// The drop wait the holders are given (the default is 2 s).
const WAIT: Duration = Duration::from_secs(1);
/// How long a waiting acquire is given.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Room on top of a documented bound for a loaded machine.
const SLACK: Duration = Duration::from_secs(4);

/// Runs `f` on a thread of its own and returns its result and how long it took; fails the test
/// when it has not returned within `bound` plus [`SLACK`] (the thread is left to the proxy's
/// drop, which ends whatever it waits for).
fn within<T: Send + 'static>(
    what: &str,
    bound: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let out = f();
        let _ = tx.send((out, started.elapsed()));
    });
    rx.recv_timeout(bound + SLACK).unwrap_or_else(|_| {
        panic!(
            "{what} had not returned after {:?} (bound {bound:?})",
            bound + SLACK
        )
    })
}

/// A pool of `B` whose connections go through `proxy`.
fn pool_through<B: TestBackend>(
    db: &TestDb<B>,
    proxy: &Proxy,
    size: u32,
) -> diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<B::Conn>> {
    build_pool::<B::Conn>(&proxy.url(&db.url), size).expect("a pool through the proxy")
}

pub(super) fn seed_one_job<B: TestBackend>(db: &TestDb<B>) {
    let [pg, sqlite, mysql] = [IMPORTJOBS_DDL.0, IMPORTJOBS_DDL.1, IMPORTJOBS_DDL.2];
    db.ddl(pg, sqlite, mysql);
    db.conn()
        .batch_execute(
            "INSERT INTO importjobs (id, statuscode, payload) VALUES (1, 'JOBEXTRACTED', '')",
        )
        .unwrap();
}

/// The tests below, once for PostgreSQL and once for MySQL (SQLite has no network); `B` is the
/// backend's type inside.
macro_rules! network_suite {
    (tests: [$($t:ident),* $(,)?]; $($body:item)*) => {
        $crate::backend_suite!(@one "postgres", postgres, $crate::common::Postgres, {}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mysql", mysql, $crate::common::Mysql, {}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mariadb", mariadb, $crate::common::Mariadb, {}, [$($t),*], $($body)*);
    };
}

network_suite! {
    tests: [
        a_silent_link_loses_a_lease_guard_in_time_and_its_drop_is_bounded,
        a_silent_link_loses_a_permit_in_time_and_its_drop_is_bounded,
        a_silent_link_loses_a_claim_guard_in_time_and_its_drop_is_bounded,
        a_waiting_acquire_on_a_silent_link_times_out_within_its_bound,
        a_stopped_worker_on_a_silent_link_returns_within_its_drop_wait,
        a_try_acquire_on_a_silent_link_returns_within_its_bound,
    ];

    /// A kept-alive lease guard whose link goes silent: lost before its ttl, `is_lost` answers at
    /// once (the heartbeat stuck in its extension does not hold it up), and the drop returns within
    /// its drop wait. The database gives the lease away only at its ttl, with a larger token.
    pub(crate) fn a_silent_link_loses_a_lease_guard_in_time_and_its_drop_is_bounded(db: &TestDb<B>) {
        db.migrate();
        let proxy = Proxy::to_server_of(&db.url);
        let pool = pool_through(db, &proxy, 4);
        let options = LeaseOptions::new(TTL).keep_alive(true).drop_wait(WAIT);
        let sent = Instant::now();
        let guard = LeaseGuard::try_acquire(&pool, "net", &options)
            .unwrap()
            .expect("free");
        let token = guard.token();
        proxy.black_hole();
        let lost_after = lost_in_time(&guard, sent);
        let ((lost, held, guard), _) = within("is_lost and ensure_held", Duration::ZERO, move || {
            (guard.is_lost(), guard.ensure_held(), guard)
        });
        assert!(lost);
        assert!(
            matches!(held, Err(Error::LeaseLost { ref name, .. }) if name == "net"),
            "{held:?}"
        );
        let ((), took) = within("dropping the lease guard", WAIT, move || drop(guard));
        eprintln!("lease guard: lost after {lost_after:?}, dropped in {took:?}");
        // Never released: another holder gets it once the ttl has run out, with a larger token.
        let next = Lease::acquire(&mut db.conn(), "net", &LeaseOptions::new(TTL), TTL + SLACK)
            .expect("granted after the ttl");
        assert!(next.token() > token);
        drop(proxy);
    }

    /// A semaphore's `try_acquire` (and a reader/writer lock's `try_write`) on a link that went
    /// silent: each returns within twice its drop wait and a second, with `Error::Timeout` naming the resource,
    /// whatever the pool's health check and the statement wait on. They used to wait on the
    /// caller's thread until the operating system gave up on the connection.
    pub(crate) fn a_try_acquire_on_a_silent_link_returns_within_its_bound(db: &TestDb<B>) {
        db.migrate();
        let proxy = Proxy::to_server_of(&db.url);
        let pool = pool_through(db, &proxy, 2);
        let mutex = Semaphore::mutex("net-try").with_drop_wait(WAIT);
        let lock = diesel_lease::semaphore::RwLock::new("net-try-rw").with_drop_wait(WAIT);
        // On a working link first: the pool's connections exist and were used.
        let _ = mutex.try_acquire(&pool).unwrap().expect("free").release().unwrap();
        proxy.black_hole();
        let (p, m) = (pool.clone(), mutex.clone());
        let (out, took) = within("try_acquire", 2 * WAIT + Duration::from_secs(1), move || m.try_acquire(&p).map(|g| g.is_some()));
        assert!(matches!(&out, Err(Error::Timeout { name, .. }) if name == "net-try"), "{out:?}");
        eprintln!("try_acquire: {out:?} after {took:?}");
        let (p, l) = (pool.clone(), lock.clone());
        let (out, took) = within("try_write", 2 * WAIT + Duration::from_secs(1), move || l.try_write(&p).map(|g| g.is_some()));
        assert!(matches!(&out, Err(Error::Timeout { name, .. }) if name == "net-try-rw"), "{out:?}");
        eprintln!("try_write: {out:?} after {took:?}");
        drop(proxy);
        // What the abandoned tries queued is gone once the link ends: nothing is held.
        let mut conn = db.conn();
        let free = mutex.acquire_on(&mut conn, TTL + SLACK).expect("free again");
        let _ = free.release(&mut conn).unwrap();
    }

    /// The same for a permit: lost before its row expires, dropped within its drop wait, and the
    /// next holder gets in once the row's ttl has run out.
    pub(crate) fn a_silent_link_loses_a_permit_in_time_and_its_drop_is_bounded(db: &TestDb<B>) {
        db.migrate();
        let proxy = Proxy::to_server_of(&db.url);
        let pool = pool_through(db, &proxy, 4);
        let mutex = Semaphore::mutex("net-permit")
            .with_ttl(TTL)
            .with_drop_wait(WAIT);
        let sent = Instant::now();
        let permit = mutex.try_acquire(&pool).unwrap().expect("free");
        let ticket = permit.ticket();
        proxy.black_hole();
        let lost_after = lost_in_time(&permit, sent);
        assert!(permit.is_lost());
        assert!(matches!(permit.ensure_held(), Err(Error::PermitNotHeld { .. })));
        let ((), took) = within("dropping the permit", WAIT, move || drop(permit));
        eprintln!("permit: lost after {lost_after:?}, dropped in {took:?}");
        let mut conn = db.conn();
        let next = mutex
            .acquire_on(&mut conn, TTL + SLACK)
            .expect("admitted after the ttl");
        assert_ne!(next.ticket(), ticket);
        let _ = next.release(&mut conn).unwrap();
        drop(proxy);
    }

    /// The same for a claim guard: lost before the claim can be rescued, dropped within its drop
    /// wait (the row is not handed back: nothing reaches the database), and rescued by another
    /// worker once its timeout has passed.
    pub(crate) fn a_silent_link_loses_a_claim_guard_in_time_and_its_drop_is_bounded(db: &TestDb<B>) {
        db.migrate();
        seed_one_job(db);
        let proxy = Proxy::to_server_of(&db.url);
        let pool = pool_through(db, &proxy, 4);
        let options = ClaimOptions::default().timeout(TTL).drop_wait(WAIT);
        let sent = Instant::now();
        let guard = ImportJob::claim().options(&options).guard(&pool)
            .unwrap()
            .expect("a row");
        proxy.black_hole();
        let lost_after = lost_in_time(&guard, sent);
        assert!(guard.is_lost());
        assert!(matches!(guard.ensure_held(), Err(Error::ClaimLost { .. })));
        let ((), took) = within("dropping the claim guard", WAIT, move || drop(guard));
        eprintln!("claim guard: lost after {lost_after:?}, dropped in {took:?}");
        // Rescued by another worker once the timeout has passed on the database's clock.
        let mut conn = db.conn();
        let rescue = ClaimOptions::default().timeout(TTL);
        let until = Instant::now() + TTL + SLACK;
        let rescued = loop {
            if let Some(job) = ImportJob::claim().options(&rescue).row(&mut conn).unwrap() {
                break job;
            }
            assert!(Instant::now() < until, "never rescued");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(rescued.id, 1);
        drop(proxy);
    }

    /// Waiters whose link goes silent while they wait — a semaphore's `acquire`, a lease guard's
    /// `acquire`, a `claim_next_wait` — end with `Error::Timeout` naming what they waited for,
    /// within their timeout plus their drop wait.
    pub(crate) fn a_waiting_acquire_on_a_silent_link_times_out_within_its_bound(db: &TestDb<B>) {
        db.migrate();
        seed_one_job(db);
        // Held elsewhere, so that the waiters wait; the only row is claimed already.
        let mut holder = db.conn();
        let mutex = Semaphore::mutex("net-wait")
            .with_ttl(TTL)
            .with_drop_wait(WAIT);
        let held = mutex.acquire_on(&mut holder, SLACK).unwrap();
        let lease_held = Lease::try_acquire(
            &mut holder,
            "net-wait",
            &LeaseOptions::new(Duration::from_secs(60)),
        )
        .unwrap()
        .expect("free");
        let claimed = ImportJob::claim().row(&mut holder).unwrap().expect("the row");

        let proxy = Proxy::to_server_of(&db.url);
        let pool = pool_through(db, &proxy, 6);
        let (tx, rx) = mpsc::channel::<(&str, diesel_lease::Result<()>, Duration, Duration)>();
        let started = Instant::now();
        {
            let (pool, tx) = (pool.clone(), tx.clone());
            std::thread::spawn(move || {
                let out = mutex.acquire(&pool, TIMEOUT).map(drop);
                let _ = tx.send(("semaphore acquire", out, started.elapsed(), WAIT));
            });
        }
        {
            let (pool, tx) = (pool.clone(), tx.clone());
            std::thread::spawn(move || {
                let options = LeaseOptions::new(TTL).drop_wait(WAIT);
                let out = LeaseGuard::acquire(&pool, "net-wait", &options, TIMEOUT).map(drop);
                let _ = tx.send(("lease guard acquire", out, started.elapsed(), WAIT));
            });
        }
        {
            let (pool, tx) = (pool.clone(), tx.clone());
            std::thread::spawn(move || {
                let out = ImportJob::claim().wait(TIMEOUT).row(&pool).map(|row| {
                    assert!(row.is_none(), "the only row is claimed");
                });
                let _ = tx.send(("claim_next_wait", out, started.elapsed(), DROP_WAIT));
            });
        }
        drop(tx);
        // Let them wait a while on a working link, then silence it.
        std::thread::sleep(TIMEOUT / 4);
        proxy.black_hole();
        let expected = [
            ("semaphore acquire", "net-wait"),
            ("lease guard acquire", "net-wait"),
            ("claim_next_wait", "importjobs"),
        ];
        for _ in expected {
            let (what, out, took, drop_wait) = rx
                .recv_timeout(TIMEOUT + DROP_WAIT.max(WAIT) + SLACK)
                .expect("a waiter had not returned within its timeout plus its drop wait");
            let name = expected.iter().find(|(w, _)| *w == what).unwrap().1;
            match &out {
                Err(Error::Timeout { name: n, .. }) if n == name => {}
                other => panic!("{what}: expected Timeout for {name}, got {other:?}"),
            }
            assert!(
                took < TIMEOUT + drop_wait + SLACK,
                "{what} took {took:?}"
            );
            eprintln!("{what}: {out:?} after {took:?}");
        }
        drop(proxy);
        let _ = held.release(&mut holder).unwrap();
        let mut lease_held = lease_held;
        let _ = lease_held.release(&mut holder).unwrap();
        assert!(claimed.complete(&mut holder).unwrap());
    }

    /// A `Worker` whose link goes silent while a handler runs, and which is then stopped: once the
    /// handler returns, `run_until` returns within the claims' drop wait, though the completion
    /// never reaches the database (it is left to the background).
    pub(crate) fn a_stopped_worker_on_a_silent_link_returns_within_its_drop_wait(db: &TestDb<B>) {
        db.migrate();
        seed_one_job(db);
        let proxy = Proxy::to_server_of(&db.url);
        let pool = pool_through(db, &proxy, 6);
        let stop = Arc::new(AtomicBool::new(false));
        let (started_tx, started) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let worker = Worker::<ImportJob, <B as TestBackend>::Conn>::new(pool)
            .claim_options(ClaimOptions::default().drop_wait(WAIT))
            .grace(Duration::ZERO);
        let (done_tx, done) = mpsc::channel();
        {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let report = worker.run_until(&stop, |_conn, job: &ImportJob| {
                    started_tx.send(job.id).unwrap();
                    go_rx.lock().unwrap().recv().unwrap();
                    Ok::<_, String>(())
                });
                let _ = done_tx.send((report, Instant::now()));
            });
        }
        assert_eq!(started.recv_timeout(SLACK * 5).expect("the handler ran"), 1);
        proxy.black_hole();
        stop.store(true, Ordering::SeqCst);
        let returned = Instant::now();
        go.send(()).unwrap();
        let (report, ended) = done
            .recv_timeout(WAIT + SLACK)
            .expect("run_until had not returned within its drop wait after the handler");
        let report = report.expect("a stop on a silent link is no error of the run");
        eprintln!(
            "worker: returned {:?} after its handler, {report:?}",
            ended - returned
        );
        assert_eq!(report.completed, 0, "the completion cannot have reached the database");
        drop(proxy);
    }
}

/// [`common::lost_in_time`](crate::common::lost_in_time) with this file's ttl.
fn lost_in_time(holder: &impl Held, sent: Instant) -> Duration {
    crate::common::lost_in_time(holder, sent, TTL)
}
