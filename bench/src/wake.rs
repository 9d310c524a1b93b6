//! Insert-to-claim latency (issue 13): how long a row waits between the commit of its insert and
//! its claim by one of 8 idle workers, each blocked in `claim_next_wait` on the pool's shared
//! listener, woken by the producer's `queue().notify` in the insert's transaction.
//!
//! The producer inserts one row at a time with a random pause between inserts (so the workers are
//! idle when it comes), and a row's latency runs from just after its insert committed to just
//! after a worker's claim returned it, both on this machine's monotonic clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::PgConnection;
use diesel_lease::prelude::*;

use crate::measure::Sample;
use crate::BenchResult;

diesel::table! {
    bench_wake (id) {
        id -> BigInt,
        status -> Text,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = bench_wake)]
#[claimable(state = status, ready = "new", claimed = "taken", done = "done")]
struct WakeJob {
    id: i64,
    #[allow(dead_code)]
    status: String,
}

/// The workers that wait, idle, for each row.
pub(crate) const WAITERS: usize = 8;

/// Inserts `rows` rows one by one (a pause of 10–40 ms between them) and measures each one's
/// insert-to-claim latency.
pub(crate) fn insert_to_claim(url: &str, rows: usize) -> BenchResult<Sample> {
    let pool: Pool<ConnectionManager<PgConnection>> =
        diesel_lease::pool::build_pool(url, u32::try_from(WAITERS)? + 2)?;
    pool.get()?.batch_execute(
        "DROP TABLE IF EXISTS bench_wake;
         CREATE TABLE bench_wake (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new');
         CREATE INDEX bench_wake_ready ON bench_wake (id) WHERE status = 'new';",
    )?;
    let inserted = Mutex::new(HashMap::<i64, Instant>::new());
    let claimed = Mutex::new(HashMap::<i64, Instant>::new());
    let done = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|s| -> BenchResult<()> {
        let waiters: Vec<_> = (0..WAITERS)
            .map(|_| {
                s.spawn(|| -> BenchResult<()> {
                    while !done.load(Ordering::SeqCst) {
                        if let Some(job) = WakeJob::claim()
                            .wait(Duration::from_millis(500))
                            .row(&pool)?
                        {
                            let at = Instant::now();
                            claimed.lock().map_err(|_| "poisoned")?.insert(job.id, at);
                            job.complete(&mut pool.get()?)?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        // Let every waiter register and settle into its idle schedule.
        std::thread::sleep(Duration::from_secs(2));
        let mut conn = pool.get()?;
        for i in 0..rows {
            std::thread::sleep(Duration::from_millis(10 + (i as u64 * 7919) % 31));
            let id = conn.transaction::<_, diesel_lease::Error, _>(|conn| {
                let id = diesel::insert_into(bench_wake::table)
                    .values(bench_wake::status.eq("new"))
                    .returning(bench_wake::id)
                    .get_result::<i64>(conn)?;
                WakeJob::queue().notify(conn)?;
                Ok(id)
            })?;
            inserted
                .lock()
                .map_err(|_| "poisoned")?
                .insert(id, Instant::now());
        }
        // Every row claimed (or 10 s more), then the waiters stop.
        crate::measure::wait_for_claims(&claimed, rows, Duration::from_secs(10))?;
        done.store(true, Ordering::SeqCst);
        for w in waiters {
            w.join().map_err(|_| "a waiter panicked")??;
        }
        Ok(())
    })?;
    let secs = started.elapsed().as_secs_f64();
    let inserted = inserted.into_inner().map_err(|_| "poisoned")?;
    let claimed = claimed.into_inner().map_err(|_| "poisoned")?;
    // A claim can return before the producer noted the commit: latency 0.
    let latencies = crate::measure::insert_to_claim(&inserted, &claimed, 1e6);
    let pct = |p: f64| crate::measure::percentile(&latencies, p);
    pool.get()?
        .batch_execute("DROP TABLE IF EXISTS bench_wake")?;
    Ok(Sample {
        ops: latencies.len() as u64,
        items: latencies.len() as u64,
        empty_ops: (rows - latencies.len()) as u64,
        secs,
        rate: latencies.len() as f64 / secs,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        client_cpu_us_per_op: None,
    })
}
