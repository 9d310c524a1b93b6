//! A profiling aid, not a measurement: one process drains the benchmark's `bench_jobs` table
//! with `claim_batch(50)` + `complete_batch` (`DRAIN_BATCH=n` for another size; 1 means
//! `claim_next` + `complete`) and prints jobs/s, so `perf record`, `perf stat` and `strace -c`
//! see nothing but the claim path.
//!
//! `DRAIN_URL` is a `postgres://…` URL or a SQLite file holding a filled `bench_jobs` (the
//! benchmark's DDL, `bench/src/model.rs`); `DRAIN_THREADS` threads (default 1), one connection
//! each. `DRAIN_POOL=1` (PostgreSQL): each thread's connection comes from a pool of its own built
//! by `diesel_lease::pool::build_pool`, as the benchmark's are (network settings, listener).
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

fn drain<C>(conn: &mut C, n: usize) -> usize
where
    C: diesel_lease::claim::ClaimConnection<BenchJob>,
{
    let mut total = 0;
    loop {
        if n == 1 {
            let Some(job) = BenchJob::claim_next(conn).expect("claim_next") else {
                return total;
            };
            assert!(job.complete(conn).expect("complete"));
            total += 1;
            continue;
        }
        let jobs = BenchJob::claim_batch(conn, n).expect("claim_batch");
        if jobs.is_empty() {
            return total;
        }
        let ok = BenchJob::complete_batch(conn, &jobs).expect("complete_batch");
        assert!(ok.iter().all(|o| *o));
        total += jobs.len();
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
    let t = std::time::Instant::now();
    let total: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let url = url.clone();
                s.spawn(move || {
                    if url.starts_with("postgres") && std::env::var_os("DRAIN_POOL").is_some() {
                        let pool =
                            diesel_lease::pool::build_pool::<PgConnection>(&url, 1).expect("pool");
                        let mut c = pool.get().expect("get");
                        drain(&mut *c, batch)
                    } else if url.starts_with("postgres") {
                        let mut c = PgConnection::establish(&url).expect("connect");
                        drain(&mut c, batch)
                    } else {
                        let mut c = SqliteConnection::establish(&url).expect("open");
                        // The floor's settings (`bench/floor/sqlite_floor.c`): without
                        // `synchronous = NORMAL` every commit waits for an fsync.
                        c.batch_execute(
                            "PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL; \
                             PRAGMA synchronous = NORMAL;",
                        )
                        .expect("pragmas");
                        drain(&mut c, batch)
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("a drain thread panicked"))
            .sum()
    });
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{total} jobs in {secs:.2} s: {:.0} jobs/s",
        total as f64 / secs
    );
}
