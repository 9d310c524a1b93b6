//! Pools whose statements are counted, for the idle-cost tests (`claim/idle.rs`,
//! `semaphore/idle.rs`): a Diesel instrumentation set on every connection by the pool's
//! customizer counts every statement a connection starts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::connection::InstrumentationEvent;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, R2D2Connection};
use diesel_lease::pool::{ConnectionTuning, WaiterWakeups};
use diesel_lease::LeaseConnection;

/// The pool's tuning, plus a count of every statement its connections start.
#[derive(Debug, Clone)]
struct Counted {
    statements: Arc<AtomicU64>,
    /// Which statements count, by their SQL text (all of them when `None`).
    only: Option<fn(&str) -> bool>,
}

impl<C: LeaseConnection + R2D2Connection> CustomizeConnection<C, diesel::r2d2::Error> for Counted {
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        ConnectionTuning::default().apply(conn).map_err(|e| {
            diesel::r2d2::Error::QueryError(diesel::result::Error::QueryBuilderError(Box::new(e)))
        })?;
        let (statements, only) = (Arc::clone(&self.statements), self.only);
        conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if let InstrumentationEvent::StartQuery { query, .. } = event {
                if only.is_none_or(|only| only(&query.to_string())) {
                    statements.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(())
    }
}

/// A pool as `build_pool` makes it (tuning, listener), whose statements are counted.
pub fn counted_pool<C: LeaseConnection + R2D2Connection>(
    url: &str,
    size: u32,
) -> (Pool<ConnectionManager<C>>, Arc<AtomicU64>) {
    counted_pool_of(url, size, None)
}

/// [`counted_pool`], counting only the statements whose SQL text `only` accepts.
pub fn counted_pool_of<C: LeaseConnection + R2D2Connection>(
    url: &str,
    size: u32,
    only: Option<fn(&str) -> bool>,
) -> (Pool<ConnectionManager<C>>, Arc<AtomicU64>) {
    let statements = Arc::new(AtomicU64::new(0));
    let pool = Pool::builder()
        .max_size(size)
        .connection_customizer(Box::new(Counted {
            statements: Arc::clone(&statements),
            only,
        }))
        .event_handler(Box::new(WaiterWakeups::new::<C>(url)))
        .build(ConnectionManager::<C>::new(url))
        .expect("build pool");
    (pool, statements)
}

/// How long the statements are counted once settled.
pub const WINDOW: Duration = Duration::from_secs(4);

/// Waits until `waiters` statements have been sent (each waiter's first look sends one at
/// least) and then a second passes with fewer than `settled` (the waiters' first looks are
/// over: a few polls' worth, which waiters that each polled once a second never get under;
/// panics after two minutes, naming the rate), then counts the statements of [`WINDOW`]s until
/// one has at most `bound` of them, and returns the fewest a window had.
///
/// The verdict the callers draw (the fewest against their bound) is the rate the waiters settle
/// to, which does not depend on the machine's load. One window can hold more: on a starved
/// machine the last of a thousand first looks can come after a quiet second, and a poller that
/// looks overdue lets another waiter poll in its place. Such a burst passes; waiters that each
/// poll on their own never bring a window under the bound, and after two minutes of windows the
/// fewest is returned for the caller's assertion to fail on.
pub fn idle_statements(
    statements: &AtomicU64,
    waiters: u64,
    settled: u64,
    bound: u64,
    what: &str,
) -> u64 {
    let began = Instant::now();
    let start = statements.load(Ordering::SeqCst);
    loop {
        let before = statements.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(1));
        let now = statements.load(Ordering::SeqCst);
        let sent = now - before;
        if sent < settled && now - start >= waiters {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "{what}: still {sent} statements a second after {:?}",
            began.elapsed()
        );
    }
    let counting = Instant::now();
    let mut fewest = u64::MAX;
    while fewest > bound && counting.elapsed() < Duration::from_secs(120) {
        let before = statements.load(Ordering::SeqCst);
        std::thread::sleep(WINDOW);
        let sent = statements.load(Ordering::SeqCst) - before;
        if sent > bound {
            eprintln!("{what}: {sent} statements in {WINDOW:?}, over {bound}; counting again");
        }
        fewest = fewest.min(sent);
    }
    fewest
}
