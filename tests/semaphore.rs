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
mod stuck_poller;

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
        invalid(Semaphore::new("api ", 1)),
        InvalidInput::TrailingSpace {
            what: "resource",
            ..
        }
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
    let _ = long
        .try_acquire(&pool)
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
    crate::common::settled(&pool);
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
    let _ = five_held.release().unwrap();
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
    let _ = held.release().unwrap();
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
        let _ = held.release().unwrap();
        let mut conn = pool.get().unwrap();
        let held = mutex.acquire_on(&mut conn, wait).expect("free: granted");
        let _ = held.release(&mut conn).unwrap();
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
    assert!(manual.release(&mut conn).unwrap().was_held());
    assert!(
        manual.release(&mut conn).unwrap().was_lost(),
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
        permit.release().unwrap().was_lost(),
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
    crate::common::settled(&pool);
    assert_eq!(granted::<B>(&pool, "long-job"), 1);
    let _ = next.release().unwrap();
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
    crate::common::settled(&pool);
    let b3 = b
        .try_acquire(&pool)
        .unwrap()
        .expect("dropping b1 released it");
    assert!(a.try_acquire(&pool).unwrap().is_none(), "a unaffected");
    drop((a1, b2, b3));
    crate::common::settled(&pool);
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
    let _ = permit.release().unwrap();
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
    // Refused before anything is sent: inside a transaction a failed statement aborted
    // (PostgreSQL), the answer is the same, not the server's "transaction is aborted" for a
    // `LISTEN` sent first.
    let aborted = diesel::Connection::transaction::<_, Error, _>(&mut conn, |c| {
        use diesel::connection::SimpleConnection;
        assert!(c.batch_execute("SELECT * FROM no_such_table").is_err());
        sem.acquire_on(c, Duration::from_secs(1)).map(drop)
    });
    assert!(
        matches!(
            aborted,
            Err(Error::Database(diesel::result::Error::AlreadyInTransaction))
        ),
        "{aborted:?}"
    );
    // The connection is fine afterwards.
    let _ = sem
        .acquire_on(&mut conn, LONG)
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
            assert!(held.release(&mut holder).unwrap().was_held());
            waiting.join().unwrap()
        });
        let got = got.unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        assert!(got.release(&mut waiter).unwrap().was_held());
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
    crate::common::settled(&pool);
    assert!(mutex.try_acquire(&pool).unwrap().is_some());
}

/// SQLite: a waiter at the head of the queue that finds itself granted confirms it with a write
/// (`touch_granted`). Behind another writer that holds the database, that write waited SQLite's
/// busy timeout (30 s), far past the waiter's deadline; it now gives up at the deadline with
/// `Error::Timeout`, while the other writer still holds the database.
fn a_granted_waiter_behind_a_frozen_writer_gives_up_at_its_deadline(
    db: &TestDb<crate::common::Sqlite>,
) {
    use diesel::connection::SimpleConnection;
    let pool = setup(db, 4);
    // Polls far apart once the waiter has waited a while (its backoff grows towards 10 s),
    // while the head of the queue reads its own row every 50 ms or so.
    let mutex = Semaphore::mutex("frozen")
        .with_ttl(Duration::from_secs(60))
        .with_max_poll_interval(Duration::from_secs(10))
        .with_drop_wait(Duration::from_millis(500));
    for round in 0.. {
        let mut holder = pool.get().unwrap();
        let held = mutex.acquire_on(&mut holder, LONG).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let outcome = std::thread::scope(|s| {
            let mut conn = pool.get().unwrap();
            let mutex = &mutex;
            s.spawn(move || {
                let got = mutex.acquire_on(&mut conn, Duration::from_secs(8));
                tx.send(got.map(|permit| (permit, conn))).unwrap();
            });
            wait_until("the waiter is queued", || {
                queue::<crate::common::Sqlite>(&pool, "frozen").len() == 2
            });
            let waiter = queue::<crate::common::Sqlite>(&pool, "frozen")[1].ticket;
            // Long enough at the head for its next poll to be a second or more away: what
            // finds the grant is the head's read of its own row.
            std::thread::sleep(Duration::from_secs(3));
            // Grant the waiter, then hold the database at once (the integer is the database's own).
            let mut blocker = db.conn();
            blocker
                .batch_execute(&format!(
                    "BEGIN IMMEDIATE; \
                     UPDATE diesel_lease_semaphore_tickets SET granted = 1 WHERE ticket = {waiter}; \
                     COMMIT; BEGIN IMMEDIATE;"
                ))
                .unwrap();
            // The waiter's answer while the database is still held, or none within 20 s.
            let outcome = rx.recv_timeout(Duration::from_secs(20));
            blocker.batch_execute("ROLLBACK").unwrap();
            outcome
        });
        let outcome = outcome.expect("the waiter was still waiting 20 s later, behind the writer");
        match outcome {
            Err(Error::Timeout {
                waited: Some(waited),
                ..
            }) => {
                assert!(waited < Duration::from_secs(20), "{waited:?}");
                break;
            }
            // Rare: the waiter confirmed its grant between the blocker's two transactions.
            Ok((permit, mut conn)) if round < 3 => {
                let _ = permit.release(&mut conn).unwrap();
                let _ = held.release(&mut holder).unwrap();
            }
            other => panic!("round {round}: {:?}", other.map(drop)),
        }
    }
}

/// SQLite: a waiter whose deadline comes while another writer holds the database returns
/// within its timeout plus the drop wait, as `with_drop_wait` promises. Its give-up (taking its
/// request back) waits the drop wait for the database and fails; a release was then tried too,
/// for another drop wait (1 s + 2 × 3 s here, instead of 1 s + 3 s).
fn a_waiter_behind_a_frozen_writer_returns_within_timeout_plus_drop_wait(
    db: &TestDb<crate::common::Sqlite>,
) {
    use diesel::connection::SimpleConnection;
    const TIMEOUT: Duration = Duration::from_secs(1);
    const DROP_WAIT: Duration = Duration::from_secs(3);
    let pool = setup(db, 6);
    let mutex = Semaphore::mutex("frozen-deadline").with_ttl(Duration::from_secs(60));
    let held = mutex.acquire(&pool, LONG).unwrap();
    let mut blocker = db.conn();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        // The first waiter polls for this process's waiters of the resource; the second waits
        // for its turn, and gives up at its deadline.
        let first = s.spawn(|| mutex.acquire(&pool, LONG).map(drop));
        wait_until("the first waiter is queued", || {
            queue::<crate::common::Sqlite>(&pool, "frozen-deadline").len() == 2
        });
        let second = mutex.clone().with_drop_wait(DROP_WAIT);
        let pool2 = pool.clone();
        s.spawn(move || {
            let started = Instant::now();
            let got = second.acquire(&pool2, TIMEOUT).map(drop);
            tx.send((got, started.elapsed())).unwrap();
        });
        wait_until("the second waiter is queued", || {
            queue::<crate::common::Sqlite>(&pool, "frozen-deadline").len() == 3
        });
        blocker.batch_execute("BEGIN IMMEDIATE").unwrap();
        let outcome = rx.recv_timeout(Duration::from_secs(30));
        blocker.batch_execute("ROLLBACK").unwrap();
        let (got, returned_after) = outcome.expect("the second waiter returned");
        assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
        // Half a drop wait of slack over the promise, half a drop wait under the old wait.
        assert!(
            returned_after < TIMEOUT + DROP_WAIT + DROP_WAIT / 2,
            "returned after {returned_after:?}"
        );
        drop(held);
        first.join().unwrap().unwrap();
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_a_waiter_behind_a_frozen_writer_returns_within_timeout_plus_drop_wait() {
    crate::common::run::<crate::common::Sqlite>(
        "sqlite_a_waiter_behind_a_frozen_writer_returns_within_timeout_plus_drop_wait",
        a_waiter_behind_a_frozen_writer_returns_within_timeout_plus_drop_wait,
    )
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_a_granted_waiter_behind_a_frozen_writer_gives_up_at_its_deadline() {
    crate::common::run::<crate::common::Sqlite>(
        "sqlite_a_granted_waiter_behind_a_frozen_writer_gives_up_at_its_deadline",
        a_granted_waiter_behind_a_frozen_writer_gives_up_at_its_deadline,
    )
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
