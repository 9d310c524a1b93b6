//! A release reaches the next waiter long before its next poll: in another process (on
//! PostgreSQL by notification; on SQLite and MySQL because the waiter at the head of the queue
//! reads its own row often), and in the same process (notification, or a local wake-up).
//!
//! The waiters poll only every 10 s here; by the time of the release their backoff has grown to
//! seconds, so a waiter that only noticed at its next poll would mostly take longer than the
//! bound (before the head of the queue read its own row, 5 of 6 runs here took 1.1-1.5 s).

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;

use super::{queue, setup, wait_until, worker};
use crate::common::{TestBackend, TestDb};

const TTL: Duration = Duration::from_secs(60);
const MAX_POLL: Duration = Duration::from_secs(10);
/// How long the holder keeps the permit after the waiter queued: the waiter's poll delay grows
/// to seconds meanwhile.
const HOLD: Duration = Duration::from_secs(5);
/// Far below that poll delay, far above a hand-off (20-50 ms) on a loaded machine.
const NOTICED_WITHIN: Duration = Duration::from_millis(400);

fn mutex(resource: &str) -> Semaphore {
    Semaphore::mutex(resource)
        .with_ttl(TTL)
        .with_max_poll_interval(MAX_POLL)
}

fn a_waiter_in_another_process_notices_a_release_at_once<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 2);
    let held = mutex("handoff-process").acquire(&pool, TTL).unwrap();
    let (ttl, poll) = (
        TTL.as_millis().to_string(),
        MAX_POLL.as_millis().to_string(),
    );
    let mut child = worker(db, &["wait", "handoff-process", "1", &ttl, &poll, "30000"]);
    wait_until("the worker is queued", || {
        queue::<B>(&pool, "handoff-process").len() == 2
    });
    std::thread::sleep(HOLD);
    let released = Instant::now();
    let _ = held.release().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let noticed = released.elapsed();
    assert!(line.starts_with("GOT"), "worker said {line:?}");
    assert!(
        noticed < NOTICED_WITHIN,
        "the waiting process noticed the release after {noticed:?}"
    );
    assert!(child.wait().unwrap().success());
}

fn a_waiter_in_the_same_process_notices_a_release_at_once<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 3);
    let sem = mutex("handoff-local");
    let held = sem.acquire(&pool, TTL).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let permit = sem.acquire(&pool, TTL).unwrap();
            let granted = Instant::now();
            let _ = permit.release().unwrap();
            granted
        });
        wait_until("the waiter is queued", || {
            queue::<B>(&pool, "handoff-local").len() == 2
        });
        std::thread::sleep(HOLD);
        let released = Instant::now();
        let _ = held.release().unwrap();
        let noticed = waiter.join().unwrap().duration_since(released);
        assert!(
            noticed < NOTICED_WITHIN,
            "the waiting thread noticed the release after {noticed:?}"
        );
    });
}

backend_tests!(
    a_waiter_in_another_process_notices_a_release_at_once,
    a_waiter_in_the_same_process_notices_a_release_at_once
);

/// `acquire_on` on PostgreSQL `LISTEN`s on the caller's connection while it waits and reads what
/// arrives there. The caller's own `LISTEN` stays (a notification sent after the wait arrives),
/// and nothing of diesel-lease's channel is left for the caller (PostgreSQL delivers no
/// notification of a channel after its `UNLISTEN`). A notification of the caller's channel sent
/// during the wait is dropped when the wait reads it and left when the server delivers it later
/// (the docs say so; the CI machine saw both), so this does not assert which.
#[cfg(feature = "postgres")]
#[test]
fn postgres_acquire_on_keeps_the_callers_listen() {
    use diesel::connection::SimpleConnection;
    crate::common::run::<crate::common::Postgres>(
        "postgres_acquire_on_keeps_the_callers_listen",
        |db| {
            let pool = setup(db, 3);
            let sem = mutex("listen-on");
            let held = sem.acquire(&pool, TTL).unwrap();
            let mut conn = db.conn();
            conn.batch_execute("LISTEN mine").unwrap();
            std::thread::scope(|s| {
                let waiter = s.spawn(|| {
                    let permit = sem.acquire_on(&mut conn, TTL).unwrap();
                    assert!(permit.release(&mut conn).unwrap().was_held());
                });
                wait_until("the waiter is queued", || {
                    queue::<crate::common::Postgres>(&pool, "listen-on").len() == 2
                });
                // Sent while the waiter waits.
                db.conn().batch_execute("NOTIFY mine, 'during'").unwrap();
                let _ = held.release().unwrap();
                waiter.join().unwrap();
            });
            db.conn().batch_execute("NOTIFY mine, 'after'").unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut seen = Vec::new();
            while !seen.iter().any(|p| p == "after") && Instant::now() < deadline {
                for n in conn.notifications_iter() {
                    let n = n.unwrap();
                    seen.push(n.payload);
                    assert_eq!(n.channel, "mine");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                seen == ["after"] || seen == ["during", "after"],
                "the caller's LISTEN stays, and each notification comes once: {seen:?}"
            );
        },
    );
}
