//! Semaphores, mutexes and reader/writer locks (issue 4), on every backend.
//!
//! This file: the API's promises one at a time. `semaphore/contention.rs`: many threads and
//! processes at once (safety history, the commit-order race, FIFO, readers/writers).
//! `semaphore/stale.rs`: killed holders and waiters, timeouts, polling and notifications.
//! `semaphore/small_pool.rs`: waiters and heartbeating holders sharing a pool of two; the
//! PostgreSQL pool's shared listener. `semaphore/handoff.rs`: a release reaches the next waiter
//! long before its next poll, in another process and in the same one. `semaphore/control.rs`:
//! the same semaphores on seed 001's own `process_control` table (issue 15.5).

mod contention;
mod control;
pub(crate) mod control_model;
mod handoff;
mod history;
mod idle;
mod small_pool;
mod stale;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diesel::r2d2::{ConnectionManager, Pool};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::{Mode, QueuedRequest, RwLock, Semaphore};
use diesel_lease::{Error, InvalidInput, OwnerId};

use crate::common::{pick, worker_bin, TestBackend, TestDb};

type TestPool<B> = Pool<ConnectionManager<<B as TestBackend>::Conn>>;

const LONG: Duration = Duration::from_secs(30);

/// A migrated database's pool.
fn setup<B: TestBackend>(db: &TestDb<B>, size: u32) -> TestPool<B> {
    db.migrate();
    db.pool(size)
}

/// The queue of `resource` as the database has it now.
fn queue<B: TestBackend>(pool: &TestPool<B>, resource: &str) -> Vec<QueuedRequest> {
    Semaphore::mutex(resource)
        .queue(&mut pool.get().unwrap())
        .unwrap()
}

fn granted<B: TestBackend>(pool: &TestPool<B>, resource: &str) -> usize {
    queue::<B>(pool, resource)
        .iter()
        .filter(|r| r.granted)
        .count()
}

/// Waits (bounded, generously) until `f` holds.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `semaphore-worker <backend> <url> args…` with its stdout piped.
fn worker<B: TestBackend>(db: &TestDb<B>, args: &[&str]) -> Child {
    Command::new(worker_bin("semaphore-worker"))
        .arg(B::NAME)
        .arg(&db.url)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start semaphore-worker")
}

/// Deletes every request row of `resource` behind the library's back.
fn delete_requests<B: TestBackend>(db: &TestDb<B>) {
    db.ddl(
        "DELETE FROM diesel_lease_semaphore_tickets",
        "DELETE FROM diesel_lease_semaphore_tickets",
        "DELETE FROM diesel_lease_semaphore_tickets",
    );
}

fn bad_input_is_refused<B: TestBackend>(db: &TestDb<B>) {
    // Settings are checked when a permit is asked for, before any SQL.
    let pool = setup(db, 4);
    let invalid = |sem: Semaphore| match sem.try_acquire(&pool) {
        Err(Error::InvalidInput(e)) => e,
        other => panic!("expected invalid input, got {other:?}"),
    };
    assert!(matches!(
        invalid(Semaphore::new("api", 0)),
        InvalidInput::Zero { .. }
    ));
    assert!(matches!(
        invalid(Semaphore::new("", 1)),
        InvalidInput::EmptyName { .. }
    ));
    assert!(matches!(
        invalid(Semaphore::new("x".repeat(256), 1)),
        InvalidInput::NameTooLong { .. }
    ));
    assert!(matches!(
        invalid(Semaphore::new("api", u32::MAX)),
        InvalidInput::TooLarge { .. }
    ));
    assert!(matches!(
        invalid(Semaphore::mutex("api").with_ttl(Duration::ZERO)),
        InvalidInput::ZeroDuration { .. }
    ));
    assert!(matches!(
        invalid(Semaphore::mutex("api").with_max_poll_interval(Duration::ZERO)),
        InvalidInput::ZeroDuration { .. }
    ));
    assert!(matches!(
        RwLock::new("list").with_max_readers(0).try_read(&pool),
        Err(Error::InvalidInput(InvalidInput::Zero { .. }))
    ));

    // A name at the limit works on every backend.
    let long = Semaphore::mutex("é".repeat(127));
    long.try_acquire(&pool)
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
}

fn permits_mismatch_is_refused_while_in_use<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 6);
    let three = Semaphore::new("api", 3);
    let five = Semaphore::new("api", 5);
    let held = three.acquire(&pool, LONG).unwrap();
    match five.try_acquire(&pool) {
        Err(Error::PermitsMismatch {
            name,
            existing: 3,
            requested: 5,
        }) => assert_eq!(name, "api"),
        other => panic!("expected PermitsMismatch, got {other:?}"),
    }
    assert!(matches!(
        five.acquire(&pool, Duration::from_secs(5)),
        Err(Error::PermitsMismatch { .. })
    ));
    // A waiter counts as "in use" too, and the refused requests left nothing behind.
    assert_eq!(queue::<B>(&pool, "api").len(), 1);
    drop(held);
    // Idle: the new declaration wins, and now the old one is refused.
    let five_held = five.try_acquire(&pool).unwrap().expect("idle resource");
    assert!(matches!(
        three.try_acquire(&pool),
        Err(Error::PermitsMismatch {
            existing: 5,
            requested: 3,
            ..
        })
    ));
    five_held.release().unwrap();
}

fn timeout_zero_tries_once<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 4);
    let mutex = Semaphore::mutex("m");
    let held = mutex
        .acquire(&pool, Duration::ZERO)
        .expect("free: granted at once");
    let started = Instant::now();
    match mutex.acquire(&pool, Duration::ZERO) {
        Err(Error::Timeout { name, .. }) => assert_eq!(name, "m"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(started.elapsed() < LONG);
    assert!(mutex.try_acquire(&pool).unwrap().is_none());
    let mut conn = pool.get().unwrap();
    assert!(matches!(
        mutex.acquire_on(&mut conn, Duration::ZERO),
        Err(Error::Timeout { .. })
    ));
    drop(conn);
    let q = queue::<B>(&pool, "m");
    assert_eq!(q.len(), 1, "failed attempts leave no ticket: {q:?}");
    assert_eq!(q[0].ticket, held.ticket());
    held.release().unwrap();
}

/// A wait of a month (longer than PostgreSQL's `lock_timeout` takes, an `int` of milliseconds,
/// about 24.8 days): the acquire works as any other, through a pool and on a connection of
/// the caller's. (The month used to go to the server as is, and every acquire failed.)
fn a_wait_of_a_month_is_a_wait<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 4);
    let mutex = Semaphore::mutex("month");
    // A month, and the "forever" idioms: a lock-wait bound past what the server takes (MySQL:
    // about 34 years; PostgreSQL: 24.8 days) is capped, never overflowed.
    let month = Duration::from_secs(30 * 24 * 3600);
    for wait in [month, Duration::from_millis(u64::MAX), Duration::MAX] {
        let held = mutex.acquire(&pool, wait).expect("free: granted");
        held.release().unwrap();
        let mut conn = pool.get().unwrap();
        let held = mutex.acquire_on(&mut conn, wait).expect("free: granted");
        held.release(&mut conn).unwrap();
    }
}

fn releasing_twice_or_after_loss_is_not_held<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 4);
    let sem = Semaphore::new("reports", 2);
    let mut conn = db.conn();
    let manual = sem.acquire_on(&mut conn, LONG).unwrap();
    manual.heartbeat(&mut conn).unwrap();
    // Inside the caller's transaction, whose rollback would undo it: refused.
    let inside = diesel::Connection::transaction(&mut conn, |c| manual.heartbeat(c));
    assert!(
        matches!(
            inside,
            Err(Error::Database(diesel::result::Error::AlreadyInTransaction))
        ),
        "{inside:?}"
    );
    assert!(manual.release(&mut conn).unwrap());
    assert!(
        !manual.release(&mut conn).unwrap(),
        "a second release reports that nothing was held"
    );
    assert!(matches!(
        manual.heartbeat(&mut conn),
        Err(Error::PermitNotHeld { .. })
    ));

    // A pool permit whose row vanished (as if it expired and was removed).
    let permit = sem.acquire(&pool, LONG).unwrap();
    delete_requests(db);
    assert!(
        !permit.release().unwrap(),
        "the release reports the lost permit"
    );
    assert!(queue::<B>(&pool, "reports").is_empty());
}

fn heartbeat_keeps_a_permit_past_its_ttl<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 6);
    let ttl = Duration::from_millis(600);
    let mutex = Semaphore::mutex("long-job").with_ttl(ttl);
    let permit = mutex.acquire(&pool, LONG).unwrap();
    std::thread::sleep(ttl * 4);
    assert!(!permit.is_lost());
    assert!(mutex.try_acquire(&pool).unwrap().is_none(), "still held");

    // Lost: the next heartbeat notices the row is gone.
    delete_requests(db);
    wait_until("the heartbeat notices the loss", || permit.is_lost());
    assert!(matches!(
        permit.ensure_held(),
        Err(Error::PermitNotHeld { .. })
    ));
    let next = mutex.try_acquire(&pool).unwrap().expect("free again");
    drop(permit); // releasing a lost permit does not touch the new holder
    assert_eq!(granted::<B>(&pool, "long-job"), 1);
    next.release().unwrap();
}

fn drop_releases_and_resources_are_independent<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 10);
    let a = Semaphore::mutex("a");
    let b = Semaphore::new("b", 2);
    let a1 = a.try_acquire(&pool).unwrap().expect("a free");
    let b1 = b.try_acquire(&pool).unwrap().expect("b has 2");
    let b2 = b.try_acquire(&pool).unwrap().expect("b has 2");
    assert!(b.try_acquire(&pool).unwrap().is_none());
    assert!(a.try_acquire(&pool).unwrap().is_none());
    assert_eq!(b1.mode(), Mode::Shared);
    drop(b1);
    let b3 = b
        .try_acquire(&pool)
        .unwrap()
        .expect("dropping b1 released it");
    assert!(a.try_acquire(&pool).unwrap().is_none(), "a unaffected");
    drop((a1, b2, b3));
    assert!(queue::<B>(&pool, "a").is_empty());
    assert!(queue::<B>(&pool, "b").is_empty());
}

fn owners_are_recorded<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 4);
    let me = OwnerId::new("billing-worker-7").unwrap();
    let sem = Semaphore::new("owners", 2).with_owner(me.clone());
    let permit = sem.acquire(&pool, LONG).unwrap();
    let q = sem.queue(&mut pool.get().unwrap()).unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].owner, me.as_str());
    assert!(q[0].granted);
    assert!(q[0].granted_at_micros.is_some());
    assert!(q[0].expires_at_micros > q[0].requested_at_micros);
    permit.release().unwrap();
}

fn refused_inside_a_transaction<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 4);
    let sem = Semaphore::new("nested", 2);
    let mut conn = db.conn();
    let inside = diesel::Connection::transaction::<_, Error, _>(&mut conn, |c| {
        sem.acquire_on(c, Duration::from_secs(1)).map(drop)
    });
    assert!(
        matches!(
            inside,
            Err(Error::Database(diesel::result::Error::AlreadyInTransaction))
        ),
        "{inside:?}"
    );
    assert!(queue::<B>(&pool, "nested").is_empty());
    // The connection is fine afterwards.
    sem.acquire_on(&mut conn, LONG)
        .unwrap()
        .release(&mut conn)
        .unwrap();
}

/// A mutex handed over between two plain connections (no busy timeout: `establish`, as the
/// `Permit` docs do), 20 times: the release wakes the waiter of this process before its commit,
/// so on SQLite the waiter's first write can find the database still locked. It must wait, as
/// every other write of the library does, and get the permit, not fail with a timeout.
fn plain_connections_hand_a_mutex_over<B: TestBackend>(db: &TestDb<B>) {
    use diesel::Connection;
    setup(db, 1);
    let mutex = Semaphore::mutex("plain");
    let plain = || <B::Conn as Connection>::establish(&db.url).unwrap();
    let (mut holder, mut waiter) = (plain(), plain());
    for round in 0..20 {
        let held = mutex.acquire_on(&mut holder, LONG).unwrap();
        let got = std::thread::scope(|s| {
            let waiting = s.spawn(|| mutex.acquire_on(&mut waiter, Duration::from_secs(20)));
            // Ordering only: the waiter queued before the release, or it finds the mutex free.
            std::thread::sleep(Duration::from_millis(20));
            assert!(held.release(&mut holder).unwrap());
            waiting.join().unwrap()
        });
        let got = got.unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        assert!(got.release(&mut waiter).unwrap());
    }
}

/// `try_acquire` never waits, also for a connection: on a pool with none to spare it gives up
/// after the semaphore's drop wait (200 ms here), not the pool's connection timeout (r2d2's
/// 30 s), and says so with a retryable error.
fn try_acquire_on_an_exhausted_pool_gives_up_after_the_drop_wait<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 1);
    let taken = pool.get().unwrap();
    let mutex = Semaphore::mutex("exhausted").with_drop_wait(Duration::from_millis(200));
    let started = Instant::now();
    let tried = mutex.try_acquire(&pool);
    let waited = started.elapsed();
    assert!(matches!(&tried, Err(e) if e.is_retryable()), "{tried:?}");
    assert!(
        waited < Duration::from_secs(10),
        "waited {waited:?}, as for the pool's timeout"
    );
    drop(taken);
    assert!(mutex.try_acquire(&pool).unwrap().is_some());
}

backend_tests!(
    plain_connections_hand_a_mutex_over,
    try_acquire_on_an_exhausted_pool_gives_up_after_the_drop_wait,
    refused_inside_a_transaction,
    bad_input_is_refused,
    permits_mismatch_is_refused_while_in_use,
    timeout_zero_tries_once,
    a_wait_of_a_month_is_a_wait,
    releasing_twice_or_after_loss_is_not_held,
    heartbeat_keeps_a_permit_past_its_ttl,
    drop_releases_and_resources_are_independent,
    owners_are_recorded,
);

/// Seed 001's `process_control` table, with the two columns diesel-lease adds.
pub(crate) fn control_table<B: TestBackend>(db: &TestDb<B>) {
    let [pg, sqlite, mysql] = control_model::PROCESS_CONTROL_DDL;
    db.ddl(pg, sqlite, mysql);
}

/// The history table for the contention tests.
fn history_table<B: TestBackend>(db: &TestDb<B>) {
    let [pg, sqlite, mysql] = history::HISTORY_DDL;
    db.ddl(pg, sqlite, mysql);
}

/// Shorthand for backend-specific test SQL.
fn sql<'a, B: TestBackend>(postgres: &'a str, sqlite: &'a str, mysql: &'a str) -> &'a str {
    pick::<B>(postgres, sqlite, mysql)
}
