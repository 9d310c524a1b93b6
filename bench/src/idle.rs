//! Idle cost (issue 23, item 2), where the backend has no notifications (SQLite, and MySQL when a
//! server is given): 1,000 `claim_next_wait` waiters and 1,000 waiters for a held mutex in one
//! process, each group on a pool of its own. Counted: the statements each pool's connections
//! start per second once the waiters settled (a Diesel instrumentation on every connection), and
//! the insert-to-claim latency of rows inserted one at a time at random moments, against half
//! the poll interval.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::InstrumentationEvent;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, R2D2Connection};
use diesel_lease::pool::{ConnectionTuning, WaiterWakeups};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::LeaseConnection;
use serde::Serialize;

use crate::BenchResult;

diesel::table! {
    bench_idle (id) {
        id -> BigInt,
        status -> Text,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = bench_idle)]
#[claimable(state = status, ready = "new", claimed = "taken", done = "done")]
pub(crate) struct IdleJob {
    id: i64,
    #[allow(dead_code)]
    status: String,
}

/// What one backend's idle run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct IdleRun {
    pub(crate) backend: &'static str,
    pub(crate) claim_waiters: usize,
    pub(crate) semaphore_waiters: usize,
    /// Statements per second of the claim waiters' pool, settled.
    pub(crate) claim_statements_per_sec: f64,
    /// Statements per second of the semaphore waiters' pool, settled.
    pub(crate) semaphore_statements_per_sec: f64,
    /// Seconds the statements were counted.
    pub(crate) counted_secs: f64,
    /// Insert-to-claim latency of rows inserted one at a time, ms.
    pub(crate) rows: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// Half of `MAX_POLL_INTERVAL`, the target for the median, ms.
    pub(crate) target_p50_ms: f64,
}

/// Counts every statement a pool's connections start; applies the pool tuning `build_pool`
/// applies. (Also the holders section's.)
#[derive(Debug, Clone)]
pub(crate) struct Counted(pub(crate) Arc<AtomicU64>);

impl<C: LeaseConnection + R2D2Connection> CustomizeConnection<C, diesel::r2d2::Error> for Counted {
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        ConnectionTuning::default().apply(conn).map_err(|e| {
            diesel::r2d2::Error::QueryError(diesel::result::Error::QueryBuilderError(Box::new(e)))
        })?;
        let statements = Arc::clone(&self.0);
        conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if matches!(event, InstrumentationEvent::StartQuery { .. }) {
                statements.fetch_add(1, Ordering::Relaxed);
            }
        });
        Ok(())
    }
}

fn counted_pool<C: LeaseConnection + R2D2Connection>(
    url: &str,
    size: u32,
) -> BenchResult<(Pool<ConnectionManager<C>>, Arc<AtomicU64>)> {
    let statements = Arc::new(AtomicU64::new(0));
    let pool = Pool::builder()
        .max_size(size)
        .connection_customizer(Box::new(Counted(Arc::clone(&statements))))
        .event_handler(Box::new(WaiterWakeups::new::<C>(url)))
        .build(ConnectionManager::<C>::new(url))?;
    Ok((pool, statements))
}

/// The backends this section runs on, with their table's DDL.
pub(crate) trait IdleBackend:
    LeaseConnection + R2D2Connection + diesel_lease::claim::ClaimConnection<IdleJob>
{
    const NAME: &'static str;
    const DDL: &'static str;
    /// Inserts a ready row.
    fn insert(&mut self, id: i64) -> QueryResult<usize>;
}

macro_rules! insert_ready {
    () => {
        fn insert(&mut self, id: i64) -> QueryResult<usize> {
            diesel::insert_into(bench_idle::table)
                .values((bench_idle::id.eq(id), bench_idle::status.eq("new")))
                .execute(self)
        }
    };
}

impl IdleBackend for SqliteConnection {
    const NAME: &'static str = "sqlite";
    const DDL: &'static str = "DROP TABLE IF EXISTS bench_idle;
        CREATE TABLE bench_idle (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new');";
    insert_ready!();
}

impl IdleBackend for MysqlConnection {
    const NAME: &'static str = "mysql";
    const DDL: &'static str = "DROP TABLE IF EXISTS bench_idle;
        CREATE TABLE bench_idle (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT 'new');";
    insert_ready!();
}

/// Statements per second of `statements` over `secs`, once a second passed with fewer than
/// `settled` (at most 60 s of settling).
fn settled_rate(statements: &AtomicU64, settled: u64, secs: f64) -> f64 {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(60) {
        let before = statements.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(1));
        if statements.load(Ordering::SeqCst) - before < settled {
            break;
        }
    }
    let before = statements.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs_f64(secs));
    (statements.load(Ordering::SeqCst) - before) as f64 / secs
}

/// Runs the idle measurement on `url` with `waiters` of each kind, counting `secs` and
/// inserting `rows` rows. The claim waiters wait up to a minute per call, as an idle worker
/// would: each `claim_next_wait` call looks once when it starts (a row may be there already),
/// so short timeouts in a loop cost a poll per call.
pub(crate) fn run<C: IdleBackend>(
    url: &str,
    waiters: usize,
    secs: f64,
    rows: usize,
) -> BenchResult<IdleRun> {
    {
        let mut conn = C::establish(url)?;
        diesel_lease::run_migrations(&mut conn)?;
        conn.batch_execute(C::DDL)?;
    }
    let holders = diesel_lease::pool::build_pool::<C>(url, 2)?;
    let mutex = Semaphore::mutex("bench-idle");
    let held = mutex.acquire(&holders, Duration::from_secs(30))?;
    let (claim_pool, claim_statements) = counted_pool::<C>(url, 10)?;
    let (sem_pool, sem_statements) = counted_pool::<C>(url, 10)?;
    let done = AtomicBool::new(false);
    let claimed = Mutex::new(HashMap::<i64, Instant>::new());
    let inserted = Mutex::new(HashMap::<i64, Instant>::new());
    let semaphore_failures = AtomicU64::new(0);
    let (claim_rate, sem_rate) = std::thread::scope(|s| -> BenchResult<(f64, f64)> {
        for _ in 0..waiters {
            s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    match IdleJob::claim()
                        .wait(Duration::from_secs(60))
                        .row(&claim_pool)
                    {
                        Ok(Some(job)) => {
                            let at = Instant::now();
                            if let Ok(mut claimed) = claimed.lock() {
                                claimed.insert(job.id, at);
                            }
                            if let Ok(mut conn) = claim_pool.get() {
                                let _ = job.complete(&mut conn);
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            eprintln!("  idle: claim_next_wait failed: {e}");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
            });
            s.spawn(
                || match mutex.acquire(&sem_pool, Duration::from_secs(600)) {
                    Ok(permit) => drop(permit),
                    Err(_) => {
                        semaphore_failures.fetch_add(1, Ordering::SeqCst);
                    }
                },
            );
        }
        let claim_rate = settled_rate(&claim_statements, 100, secs);
        let sem_rate = settled_rate(&sem_statements, 200, secs);
        // A tuned connection (busy timeout on SQLite): the pollers write too.
        let mut pooled = holders.get()?;
        let conn: &mut C = &mut pooled;
        for i in 0..rows {
            // 0.3-1.8 s apart: the poller is back at its idle pace when a row comes.
            std::thread::sleep(Duration::from_millis(300 + (i as u64 * 7919) % 1500));
            let id = i64::try_from(i)? + 1;
            conn.insert(id)?;
            inserted
                .lock()
                .map_err(|_| "poisoned")?
                .insert(id, Instant::now());
        }
        crate::measure::wait_for_claims(&claimed, rows, Duration::from_secs(10))?;
        done.store(true, Ordering::SeqCst);
        // The waiters still waiting (up to a minute) get a row each to end their wait.
        let first = i64::try_from(rows)? + 1;
        for id in first..first + i64::try_from(waiters)? {
            conn.insert(id)?;
        }
        let _ = held.release()?;
        Ok((claim_rate, sem_rate))
    })?;
    if semaphore_failures.load(Ordering::SeqCst) > 0 {
        eprintln!(
            "  idle: {} semaphore waiters did not get the mutex",
            semaphore_failures.load(Ordering::SeqCst)
        );
    }
    let inserted = inserted.into_inner().map_err(|_| "poisoned")?;
    let claimed = claimed.into_inner().map_err(|_| "poisoned")?;
    let latencies = crate::measure::insert_to_claim(&inserted, &claimed, 1e3);
    let pct = |p: f64| crate::measure::percentile(&latencies, p);
    Ok(IdleRun {
        backend: C::NAME,
        claim_waiters: waiters,
        semaphore_waiters: waiters,
        claim_statements_per_sec: claim_rate,
        semaphore_statements_per_sec: sem_rate,
        counted_secs: secs,
        rows: latencies.len(),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        target_p50_ms: diesel_lease::__private::MAX_POLL_INTERVAL.as_secs_f64() * 1e3 / 2.0,
    })
}
