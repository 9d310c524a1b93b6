//! Waiters share a small pool with holders: they borrow a connection per poll, so the holders'
//! heartbeats still get one. On PostgreSQL they are woken by the pool's one shared listener.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel_lease::prelude::*;
use diesel_lease::semaphore::{QueuedRequest, Semaphore};

use super::{setup, wait_until, LONG};
use crate::common::history::History;
use crate::common::{TestBackend, TestDb};

/// How long the tests watch a holder while waiters poll around it.
const WATCH: Duration = Duration::from_millis(3_500);

/// `resource`'s queue, read on `conn` (a connection of the test's own, outside the pool).
fn queue_on<B: TestBackend>(conn: &mut B::Conn, resource: &str) -> Vec<QueuedRequest> {
    Semaphore::mutex(resource).queue(conn).unwrap()
}

/// A pool of 2, a holder with a 1 s ttl heartbeating through it, and 3 waiters polling through
/// it: for 3.5 s the holder keeps its permit (locally and in the database) and every waiter keeps
/// its place; once the holder releases, the waiters get the permit in the order they asked, one
/// at a time.
fn holder_keeps_its_permit_while_waiters_share_the_pool<B: TestBackend>(db: &TestDb<B>) {
    const WAITERS: usize = 3;
    let pool = setup(db, 2);
    let mut watcher = db.conn();
    let mutex = Semaphore::mutex("small-pool").with_ttl(Duration::from_secs(1));
    let holder = mutex.acquire(&pool, LONG).unwrap();
    let history = History::default();
    history.permit_held("small-pool", "holder");
    let granted = Mutex::new(Vec::new());
    let waiting = std::thread::scope(|s| {
        for i in 0..WAITERS {
            let (pool, mutex, granted, history) = (&pool, &mutex, &granted, &history);
            s.spawn(move || {
                let permit = mutex.acquire(pool, LONG).unwrap();
                history.permit_held("small-pool", &format!("waiter-{i}"));
                granted.lock().unwrap().push(permit.ticket());
                std::thread::sleep(Duration::from_millis(20));
                history.permit_released("small-pool", &format!("waiter-{i}"));
                let _ = permit.release().unwrap();
            });
            // One after the other, so the request order is known.
            wait_until("the waiter is queued", || {
                queue_on::<B>(&mut watcher, "small-pool").len() == i + 2
            });
        }
        let queued: Vec<i64> = queue_on::<B>(&mut watcher, "small-pool")
            .iter()
            .map(|r| r.ticket)
            .collect();
        let waiting = queued[1..].to_vec();
        assert_eq!(queued[0], holder.ticket());

        let until = Instant::now() + WATCH;
        let mut looks = 0;
        while Instant::now() < until {
            assert!(!holder.is_lost(), "the holder was lost after {looks} looks");
            let q = queue_on::<B>(&mut watcher, "small-pool");
            let tickets: Vec<i64> = q.iter().map(|r| r.ticket).collect();
            assert_eq!(tickets, queued, "a request expired or re-queued: {q:?}");
            assert!(q[0].granted, "the holder's row lost its grant: {q:?}");
            assert!(q[1..].iter().all(|r| !r.granted), "{q:?}");
            looks += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!holder.is_lost());
        history.permit_released("small-pool", "holder");
        let _ = holder.release().unwrap();
        waiting
    });
    history.check_permits(1);
    let granted = granted.into_inner().unwrap();
    assert_eq!(granted, waiting, "granted out of request order");
}

backend_tests!(holder_keeps_its_permit_while_waiters_share_the_pool);

/// PostgreSQL: the pool's shared listener hands a released permit over within milliseconds to
/// waiters whose own polls are seconds apart; when its connection is terminated (and cannot come
/// back) waiters still get the permit by polling; once connections are allowed again it
/// reconnects and hand-overs are fast again.
#[cfg(feature = "postgres")]
mod listener {
    use std::time::{Duration, Instant};

    use diesel::connection::SimpleConnection;
    use diesel::PgConnection;
    use diesel_lease::prelude::*;
    use diesel_lease::semaphore::Semaphore;

    use super::super::history::SemTestConn;
    use super::super::{setup, wait_until, LONG};
    use super::queue_on;
    use crate::common::{Postgres, TestDb};

    /// A hand-over this fast is the listener's doing: the waiters' own polls are seconds apart.
    /// A hand-over the listener served: well under the waiters' polls, which are 10 s apart by
    /// the time the holder releases (`hand_overs`), so that a grant by polling would come at a
    /// random point of those 10 s; with room for a loaded machine (six CPU hogs beside the
    /// suite measured 0.9 s once).
    const FAST: Duration = Duration::from_secs(2);

    /// The listener's backend pid, 0 when it is not connected.
    fn listener_pid(admin: &mut PgConnection) -> i64 {
        admin
            .count(
                "SELECT COALESCE(MAX(pid), 0)::BIGINT AS n FROM pg_stat_activity \
                 WHERE application_name = 'diesel-lease listener' \
                 AND datname = current_database()",
            )
            .unwrap()
    }

    /// A mutex whose waiters, after ramping up, poll at most every 10 s.
    fn slow_polling(resource: &str) -> Semaphore {
        Semaphore::mutex(resource).with_max_poll_interval(Duration::from_secs(10))
    }

    /// Queues `waiters` one after the other behind the holder of `mutex`, lets their polls
    /// spread out, then releases: returns each release → next grant latency, in grant order.
    fn hand_overs(
        db: &TestDb<Postgres>,
        pool: &crate::semaphore::TestPool<Postgres>,
        mutex: &Semaphore,
        waiters: usize,
    ) -> Vec<Duration> {
        let mut watcher = db.conn();
        let holder = mutex.acquire(pool, LONG).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<(i64, Instant)>();
        let released = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for i in 0..waiters {
                let (tx, released) = (tx.clone(), &released);
                s.spawn(move || {
                    let permit = mutex.acquire(pool, LONG).unwrap();
                    tx.send((permit.ticket(), Instant::now())).unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                    released.lock().unwrap().push(Instant::now());
                    let _ = permit.release().unwrap();
                });
                wait_until("the waiter is queued", || {
                    queue_on::<Postgres>(&mut watcher, mutex.resource()).len() == i + 2
                });
            }
            wait_until("the listener is connected", || {
                listener_pid(&mut watcher) != 0
            });
            // Backoff from 5 ms doubles to the 10 s cap per poll by now.
            std::thread::sleep(Duration::from_secs(12));
            released.lock().unwrap().push(Instant::now());
            let _ = holder.release().unwrap();
        });
        drop(tx);
        let grants: Vec<(i64, Instant)> = rx.iter().collect();
        assert!(grants.windows(2).all(|w| w[0].0 < w[1].0), "FIFO");
        let released = released.into_inner().unwrap();
        grants
            .iter()
            .zip(&released)
            .map(|((_, granted), released)| granted.duration_since(*released))
            .collect()
    }

    fn shared_listener_hands_over_fast_and_survives_termination(db: &TestDb<Postgres>) {
        let pool = setup(db, 2);
        let mut admin = db.conn();
        // A database's connections are switched off from another database.
        let mut server = {
            use diesel::Connection;
            let url = std::env::var("DIESEL_LEASE_TEST_PG").expect("run() found the server");
            PgConnection::establish(&url).unwrap()
        };
        let database: String = {
            use diesel::prelude::*;
            diesel::select(diesel::dsl::sql::<diesel::sql_types::Text>(
                "current_database()",
            ))
            .get_result(&mut admin)
            .unwrap()
        };

        // 1. Three waiters, two pool connections, hand-overs in milliseconds.
        let fast = hand_overs(db, &pool, &slow_polling("handover"), 3);
        eprintln!("release -> grant with the shared listener: {fast:?}");
        assert!(fast.iter().all(|d| *d < FAST), "{fast:?}");
        let first_pid = listener_pid(&mut admin);
        assert_ne!(
            first_pid, 0,
            "the listener is connected (it lingers after a wait)"
        );

        // 2. Terminate the listener and keep it from reconnecting: a waiter still gets the
        // permit, by polling (every 200 ms here).
        let polling =
            Semaphore::mutex("fallback").with_max_poll_interval(Duration::from_millis(200));
        let holder = polling.acquire(&pool, LONG).unwrap();
        let mut watcher = db.conn();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let permit = polling.acquire(&pool, LONG).unwrap();
                let granted = Instant::now();
                let _ = permit.release().unwrap();
                granted
            });
            wait_until("the waiter is queued", || {
                queue_on::<Postgres>(&mut watcher, "fallback").len() == 2
            });
            server
                .batch_execute(&format!(
                    "ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS false"
                ))
                .unwrap();
            admin
                .batch_execute(&format!("SELECT pg_terminate_backend({first_pid})"))
                .unwrap();
            wait_until("the listener is gone", || listener_pid(&mut admin) == 0);
            // Let the waiter's polls settle at one per 200 ms.
            std::thread::sleep(Duration::from_secs(1));
            let released = Instant::now();
            let _ = holder.release().unwrap();
            let granted = waiter.join().unwrap();
            let waited = granted.duration_since(released);
            eprintln!("release -> grant by polling, listener down: {waited:?}");
            assert!(waited < Duration::from_secs(2), "{waited:?}");
            assert_eq!(
                listener_pid(&mut admin),
                0,
                "it was polling, not the listener"
            );
        });

        // 3. Connections allowed again: the listener reconnects for the next waiters, and
        // hand-overs are fast again.
        server
            .batch_execute(&format!(
                "ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS true"
            ))
            .unwrap();
        let again = hand_overs(db, &pool, &slow_polling("handover-again"), 2);
        eprintln!("release -> grant after the listener reconnected: {again:?}");
        assert!(again.iter().all(|d| *d < FAST), "{again:?}");
        let second_pid = listener_pid(&mut admin);
        assert_ne!(second_pid, 0);
        assert_ne!(second_pid, first_pid, "a new connection");
    }

    #[test]
    fn shared_listener_hands_over_fast_and_recovers_from_termination() {
        crate::common::run::<Postgres>(
            "shared_listener_hands_over_fast_and_recovers_from_termination",
            shared_listener_hands_over_fast_and_survives_termination,
        )
    }
}
