//! A client that froze inside its transaction on a semaphore's resource row (on SQLite: inside
//! a write transaction) holds up nobody past their own deadline: acquiring, trying and
//! releasing end with `Error::Timeout` within a bounded time, and once the frozen client is gone
//! the semaphore works as before, on the same connections.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel_lease::__private::DROP_WAIT;
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::Error;

use crate::common::{pick, TestBackend, TestDb};

const RESOURCE: &str = "frozen";
/// How long the caller is willing to wait for a permit.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Scheduling and round trips on a loaded 2-core machine, on top of a bound.
const SLACK: Duration = Duration::from_secs(3);

/// Runs `probe` in a thread and returns what it returned with how long it took; a probe that
/// does not return within 30 s fails the test (it would have waited forever).
fn bounded<T: Send + 'static>(probe: impl FnOnce() -> T + Send + 'static) -> (T, Duration) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let out = probe();
        let _ = tx.send((out, started.elapsed()));
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the call waited on the frozen client with no bound")
}

fn expect_timeout<T: std::fmt::Debug>(what: &str, r: diesel_lease::Result<T>) -> Error {
    match r {
        Err(e @ Error::Timeout { .. }) => {
            assert!(e.is_retryable(), "{what}: {e}");
            e
        }
        other => panic!("{what}: expected Error::Timeout, got {other:?}"),
    }
}

fn a_frozen_client_holds_up_nobody_past_their_deadline<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(4);
    let sem = Semaphore::new(RESOURCE, 3);
    let held = sem.acquire(&pool, TIMEOUT).unwrap();

    let mut frozen = db.conn();
    let lock_row = "BEGIN; SELECT permits FROM diesel_lease_semaphores \
                    WHERE resource = 'frozen' FOR UPDATE";
    frozen
        .batch_execute(pick::<B>(lock_row, "BEGIN IMMEDIATE", lock_row))
        .unwrap();

    // A permit is free, but deciding so needs the resource's lock: the caller's deadline ends it.
    let (p, s) = (pool.clone(), sem.clone());
    let (r, took) = bounded(move || s.acquire(&p, TIMEOUT).map(drop));
    match expect_timeout("acquire", r) {
        Error::Timeout { name, waited, .. } => {
            assert_eq!(name, RESOURCE);
            assert!(waited.is_some_and(|w| w >= TIMEOUT), "{waited:?}");
        }
        _ => unreachable!(),
    }
    // The deadline, plus at most one bounded clean-up of the queued request.
    assert!(took < TIMEOUT + DROP_WAIT + SLACK, "acquire took {took:?}");

    let (p, s) = (pool.clone(), sem.clone());
    let (r, took) = bounded(move || s.try_acquire(&p).map(|p| p.is_some()));
    expect_timeout("try_acquire", r);
    assert!(took < DROP_WAIT + SLACK, "try_acquire took {took:?}");

    // The holder's release cannot take effect either; it says so within the drop bound, and
    // its row stays until its ttl (nobody else was admitted in its place meanwhile).
    let (r, took) = bounded(move || held.release());
    expect_timeout("release", r);
    assert!(took < DROP_WAIT + SLACK, "release took {took:?}");

    frozen.batch_execute("ROLLBACK").unwrap();
    let queue = sem.queue(&mut db.conn()).unwrap();
    assert!(
        queue.len() == 1 && queue[0].granted,
        "only the holder whose release timed out is queued: {queue:?}"
    );
    let again = sem.acquire(&pool, TIMEOUT).unwrap();
    assert!(!again.is_lost());
    let _ = again.release().unwrap();
}

/// The same connection, used again after its wait for the resource's lock timed out, works
/// (the lock-wait bound of the failed transaction is put back, and on MySQL the timed-out read
/// of the resource's row, a lookup by key that fails before any result is sent, leaves no
/// half-read result in Diesel's statement cache; see `Uncached` in `backend/mysql_like.rs`).
fn a_connection_whose_lock_wait_timed_out_works_again<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let sem = Semaphore::new(RESOURCE, 3);
    let mut conn = db.conn();
    let _ = sem
        .acquire_on(&mut conn, TIMEOUT)
        .unwrap()
        .release(&mut conn)
        .unwrap();

    let mut frozen = db.conn();
    let lock_row = "BEGIN; SELECT permits FROM diesel_lease_semaphores \
                    WHERE resource = 'frozen' FOR UPDATE";
    frozen
        .batch_execute(pick::<B>(lock_row, "BEGIN IMMEDIATE", lock_row))
        .unwrap();
    let s = sem.clone();
    let ((r, conn), _) = bounded(move || {
        let r = s.acquire_on(&mut conn, TIMEOUT).map(drop);
        (r, conn)
    });
    expect_timeout("acquire_on", r);
    frozen.batch_execute("ROLLBACK").unwrap();

    let s = sem.clone();
    let (held, _) = bounded(move || {
        let mut conn = conn;
        let permit = s.acquire_on(&mut conn, TIMEOUT);
        permit.map(|p| p.release(&mut conn))
    });
    let _ = held
        .expect("acquired again on the same connection")
        .expect("released");
}

/// A waiter whose request is queued when a frozen client takes the resource's lock, on a
/// connection of its own (`acquire_on`, where only the database bounds a lock wait): its poll's
/// wait for the lock ends at its deadline, and the clean-up of its queued request waits once
/// more, for its drop wait; the call returns then, with `Error::Timeout`. The drop wait is
/// longer than the test's slack, so that one more wait of it is told apart from a slow machine
/// (a poll whose lock wait ran for the drop wait instead of to the deadline took 16 s with a
/// 2 s deadline and an 8 s drop wait; here it would take at least two drop waits, 20 s, against
/// a bound of 18 s). The deadline leaves the waiter 5 s to queue its request: on a loaded
/// machine (a cold build beside the suite) it once took over 2 s, and the test then failed on
/// its set-up instead of judging anything.
fn a_queued_waiter_frozen_out_returns_after_its_deadline_and_one_drop_wait<B: TestBackend>(
    db: &TestDb<B>,
) {
    const LONG_DROP: Duration = Duration::from_secs(10);
    const WAITED: Duration = Duration::from_secs(5);
    db.migrate();
    let mutex = Semaphore::mutex(RESOURCE).with_drop_wait(LONG_DROP);
    let mut holder = db.conn();
    let held = mutex.acquire_on(&mut holder, TIMEOUT).unwrap();
    let mut waiter = db.conn();
    let (m, started) = (mutex.clone(), Instant::now());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let out = m.acquire_on(&mut waiter, WAITED).map(drop);
        let _ = tx.send((out, started.elapsed()));
    });
    let mut watch = db.conn();
    let queued = (0..500).any(|_| {
        mutex.queue(&mut watch).unwrap().len() == 2 || {
            std::thread::sleep(Duration::from_millis(10));
            false
        }
    });
    assert!(queued, "the waiter's request was never queued");
    let mut frozen = db.conn();
    let lock_row = "BEGIN; SELECT permits FROM diesel_lease_semaphores \
                    WHERE resource = 'frozen' FOR UPDATE";
    frozen
        .batch_execute(pick::<B>(lock_row, "BEGIN IMMEDIATE", lock_row))
        .unwrap();
    let (out, took) = rx
        .recv_timeout(WAITED + 2 * LONG_DROP + SLACK * 4)
        .expect("the waiter never returned");
    frozen.batch_execute("ROLLBACK").unwrap();
    eprintln!("acquire_on: {out:?} after {took:?}");
    match expect_timeout("acquire_on", out) {
        Error::Timeout { name, .. } => assert_eq!(name, RESOURCE),
        _ => unreachable!(),
    }
    assert!(
        took < WAITED + LONG_DROP + SLACK,
        "acquire_on took {took:?}: more than its deadline and one drop wait ({LONG_DROP:?})"
    );
    let _ = held.release(&mut holder).unwrap();
}

backend_tests!(
    a_frozen_client_holds_up_nobody_past_their_deadline,
    a_connection_whose_lock_wait_timed_out_works_again,
    a_queued_waiter_frozen_out_returns_after_its_deadline_and_one_drop_wait
);
