//! Waits whose every attempt got no connection — the pool's connections all in use for the
//! whole wait, or a server that refuses connections — end with the last attempt's
//! `Error::Pool`, which says so, instead of `Error::Timeout` (a semaphore's `acquire`, a lease
//! guard's `acquire`) or `Ok(None)` (a `claim_next_wait`), which would say that nobody let the
//! caller in, or that no row came, though nothing was looked at.

use std::time::Duration;

use diesel::r2d2::{ConnectionManager, Pool};
use diesel_lease::lease::{LeaseGuard, LeaseOptions};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::Error;

use crate::common::{TestBackend, TestDb};
use crate::models::*;

const WAIT: Duration = Duration::from_secs(1);

backend_suite! {
    tests: [
        waits_on_an_exhausted_pool_say_so,
        waits_on_a_server_that_refuses_connections_say_why,
    ];

    /// `Error::Pool`, retryable; its message.
    fn expect_pool<T: std::fmt::Debug>(what: &str, r: diesel_lease::Result<T>) -> String {
        match r {
            Err(e @ Error::Pool(_)) => {
                assert!(e.is_retryable(), "{what}: {e}");
                e.to_string()
            }
            other => panic!("{what}: expected Error::Pool, got {other:?}"),
        }
    }

    /// The three waits through `pool`, each of `WAIT`, all expected to end in `Error::Pool`;
    /// their messages.
    fn three_waits(pool: &Pool<ConnectionManager<<B as TestBackend>::Conn>>) -> Vec<String> {
        let sem = Semaphore::mutex("unreached");
        let options = LeaseOptions::new(Duration::from_secs(60));
        vec![
            expect_pool("semaphore acquire", sem.acquire(pool, WAIT).map(drop)),
            expect_pool(
                "zero-timeout acquire",
                sem.acquire(pool, Duration::ZERO).map(drop),
            ),
            expect_pool(
                "lease guard acquire",
                LeaseGuard::acquire(pool, "unreached", &options, WAIT).map(drop),
            ),
            expect_pool("claim_next_wait", ImportJob::claim().wait(WAIT).row(pool)),
        ]
    }

    /// A pool of one whose connection the test holds: every attempt misses, and each wait ends in
    /// `Error::Pool` (the claim although a row is there). Once the connection is back, the same
    /// calls on the same pool get the permit, the lease and the row.
    pub(crate) fn waits_on_an_exhausted_pool_say_so(db: &TestDb<B>) {
        db.migrate();
        // A claimable row, so that a claim that reached the database would find it.
        crate::faults::network::seed_one_job(db);
        let pool = db.pool(1);
        let held = pool.get().unwrap();
        // Each wait's `Error::Pool` is asserted by `expect_pool`.
        three_waits(&pool);
        drop(held);
        let sem = Semaphore::mutex("unreached");
        let _ = sem.acquire(&pool, WAIT).unwrap().release().unwrap();
        let options = LeaseOptions::new(Duration::from_secs(60));
        let _ = LeaseGuard::acquire(&pool, "unreached", &options, WAIT)
            .unwrap()
            .release()
            .unwrap();
        let row = ImportJob::claim().wait(WAIT).row(&pool).unwrap();
        assert_eq!(row.map(|j| j.id), Some(1), "the row was there all along");
    }

    /// A pool whose server refuses connections (a port nothing listens on; for SQLite, a file in a
    /// directory that does not exist): each wait ends in `Error::Pool`, and the refusal reaches
    /// the caller.
    pub(crate) fn waits_on_a_server_that_refuses_connections_say_why(db: &TestDb<B>) {
        let url = match <B as TestBackend>::KIND {
            diesel_lease::BackendKind::Sqlite => {
                format!(
                    "{}/no-such-directory/db.sqlite",
                    std::env::temp_dir().display()
                )
            }
            _ => {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                let (scheme, rest) = db.url.split_once("://").unwrap();
                let (user, rest) = rest.split_once('@').unwrap();
                let (_, path) = rest.split_once('/').unwrap();
                format!("{scheme}://{user}@127.0.0.1:{port}/{path}")
            }
        };
        let pool = Pool::builder()
            .max_size(2)
            .min_idle(Some(0))
            .connection_timeout(Duration::from_secs(5))
            .build_unchecked(ConnectionManager::<<B as TestBackend>::Conn>::new(url));
        // r2d2 hands the refusal it last saw to one timed-out checkout, not to every one: a
        // wait whose last checkout came after another had taken it says only "timed out".
        let messages = three_waits(&pool);
        eprintln!("{messages:#?}");
        assert!(
            messages.iter().any(|m| m != "could not get a connection from the pool: timed out waiting for connection"),
            "the refusal is in none of {messages:?}"
        );
    }
}
