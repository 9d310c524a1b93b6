//! A profiling aid, not a measurement: one process drains the benchmark's `bench_jobs` table
//! with `claim_batch(50)` + `complete_batch` (`DRAIN_BATCH=n` for another size; 1 means
//! `claim_next` + `complete`) and prints jobs/s, so `perf record`, `perf stat` and `strace -c`
//! see nothing but the claim path.
//!
//! `DRAIN_URL` is a `postgres://…` URL or a SQLite file holding a filled `bench_jobs` (the
//! benchmark's DDL, `bench/src/model.rs`); `DRAIN_THREADS` threads (default 1), one connection
//! each. `DRAIN_POOL=1` (PostgreSQL): each thread's connection comes from a pool of its own built
//! by `diesel_lease::pool::build_pool` (network settings, listener); `DRAIN_POOL=shared`: from
//! one such pool of `DRAIN_THREADS` connections, checked out on the main thread and handed to
//! the threads, as the benchmark's `e2e` section does. `DRAIN_LATENCY=1` also prints the
//! distribution of each claim + complete's time (each batch's), as pgbench's `-l` log gives it.
//! `cargo build --release -p diesel-lease-bench --example drain`.
use chrono::NaiveDateTime;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_lease::prelude::*;

#[allow(missing_docs)]
mod schema {
    diesel::table! {
        bench_jobs (id) {
            id -> BigInt,
            seq -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
            payload -> Text,
        }
    }
}
use schema::bench_jobs;

#[derive(Debug, Clone, Queryable, Selectable, Claimable)]
#[diesel(table_name = bench_jobs)]
#[claimable(state = status, ready = "ready", claimed = "running", done = "done", owner = owner, claimed_at = claimed_at, attempts = attempts)]
#[allow(dead_code)]
struct BenchJob {
    id: i64,
    status: String,
    owner: Option<String>,
    claimed_at: Option<NaiveDateTime>,
    attempts: i32,
    payload: String,
}

/// Drains the table; with `lat`, each claim + complete (or batch) time in ns goes into it.
fn drain<C>(conn: &mut C, n: usize, mut lat: Option<&mut Vec<u64>>) -> usize
where
    C: diesel_lease::claim::ClaimConnection<BenchJob>,
{
    let mut total = 0;
    loop {
        let start = lat.is_some().then(std::time::Instant::now);
        let done = if n == 1 {
            let Some(job) = BenchJob::claim().row(conn).expect("claim_next") else {
                return total;
            };
            assert!(job.complete(conn).expect("complete"));
            1
        } else {
            let jobs = BenchJob::claim().batch(n).rows(conn).expect("claim_batch");
            if jobs.is_empty() {
                return total;
            }
            let ok = jobs.complete(conn).expect("complete_batch");
            assert!(ok.iter().all(|o| *o));
            jobs.len()
        };
        if let (Some(lat), Some(start)) = (lat.as_deref_mut(), start) {
            lat.push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        total += done;
    }
}

fn main() {
    let url = std::env::var("DRAIN_URL").expect("DRAIN_URL: a postgres:// URL or a SQLite file");
    let threads: usize = std::env::var("DRAIN_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    // DRAIN_BATCH=1: claim_next + complete, one job at a time.
    let batch: usize = std::env::var("DRAIN_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let latency = std::env::var_os("DRAIN_LATENCY").is_some();
    let shared = std::env::var("DRAIN_POOL").is_ok_and(|v| v == "shared");
    let shared_pool = shared.then(|| {
        let size = u32::try_from(threads).expect("DRAIN_THREADS fits in u32");
        diesel_lease::pool::build_pool::<PgConnection>(&url, size).expect("pool")
    });
    let mut shared_conns: Vec<_> = shared_pool
        .iter()
        .flat_map(|pool| (0..threads).map(|_| pool.get().expect("get")))
        .collect();
    let t = std::time::Instant::now();
    let (total, mut lat) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let url = url.clone();
                let shared_conn = shared_conns.pop();
                s.spawn(move || {
                    let mut lat = Vec::new();
                    let lat_arg = latency.then_some(&mut lat);
                    let n = if let Some(mut c) = shared_conn {
                        drain(&mut *c, batch, lat_arg)
                    } else if url.starts_with("postgres")
                        && std::env::var_os("DRAIN_POOL").is_some()
                    {
                        let pool =
                            diesel_lease::pool::build_pool::<PgConnection>(&url, 1).expect("pool");
                        let mut c = pool.get().expect("get");
                        drain(&mut *c, batch, lat_arg)
                    } else if url.starts_with("postgres") {
                        let mut c = PgConnection::establish(&url).expect("connect");
                        drain(&mut c, batch, lat_arg)
                    } else {
                        let mut c = SqliteConnection::establish(&url).expect("open");
                        // The floor's settings (`bench/floor/sqlite_floor.c`): without
                        // `synchronous = NORMAL` every commit waits for an fsync.
                        c.batch_execute(
                            "PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL; \
                             PRAGMA synchronous = NORMAL;",
                        )
                        .expect("pragmas");
                        drain(&mut c, batch, lat_arg)
                    };
                    (n, lat)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("a drain thread panicked"))
            .fold((0, Vec::new()), |(total, mut all), (n, lat)| {
                all.extend(lat);
                (total + n, all)
            })
    });
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{total} jobs in {secs:.2} s: {:.0} jobs/s",
        total as f64 / secs
    );
    if latency && !lat.is_empty() {
        lat.sort_unstable();
        let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize] as f64 / 1e3;
        let mean = lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1e3;
        println!(
            "per call (µs): mean {mean:.1}, p50 {:.1}, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}",
            at(0.5),
            at(0.9),
            at(0.99),
            at(0.999),
            at(1.0)
        );
    }
}
