//! A claiming worker process for the integration suite's multi-process tests.
//!
//! Each row a claim hands out is printed as `claimed <id> <attempts> <state> <owner stamp>`: what
//! the claim returned, for `common::history` to judge (the stamp last, as it may hold spaces;
//! empty when the row came back without one).
//! `claim-worker <backend> <url> drain <batch> <threads>`: claims until nothing is left, printing
//! `claimed …` per row and `empty <ready-rows-left>` each time a claim came back empty.
//! `claim-worker <backend> <url> cursor <batch> <threads>`: the same through one `ClaimCursor`
//! shared by the threads (no timed rescan), printing `claimed …` per row, until a claim comes
//! back empty.
//! `claim-worker <backend> <url> hold <n> <owner>`: claims `n` rows as `owner`, prints them and
//! `holding`, then sleeps until killed.
//! `claim-worker <backend> <url> tenants <threads> <limit>`: runs a `Worker` on `tasks` with a
//! per-tenant limit until killed; each run prints `claimed …` for the task its handler was
//! given and `run <id> <tenant> <start µs> <end µs>` (system clock, shared by the processes of
//! one machine).
//! `claim-worker <backend> <url> rate <threads> <max> <period ms> <global|tenant> <concurrency>`:
//! runs a `Worker` on `tasks` under a rate limit (global or per tenant; with a per-tenant
//! concurrency limit when `concurrency` > 0) until killed; each run prints
//! `rate <id> <tenant> <claimed_at µs, database clock> <start µs> <end µs>` (system clock).
//!
//! With `DIESEL_LEASE_TEST_TRANSACTION_POOLER` set, `url` goes through a transaction pooler and
//! the pools are built for one (`PoolOptions::transaction_pooler`).

#[path = "../models.rs"]
mod models;

use diesel_lease::prelude::*;
use std::io::Write;

use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel_lease::__private::CursorConnection;
use diesel_lease::claim::{ClaimConnection, ClaimCursor, ClaimOptions};
use diesel_lease::{LeaseConnection, OwnerId};
use models::schema::{importjobs, tasks};
use models::{ImportJob, Task};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, backend, url, mode, rest @ ..] = args.as_slice() else {
        eprintln!("usage: claim-worker <backend> <url> <drain|hold> …");
        std::process::exit(2);
    };
    let result = match backend.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" => run::<diesel::PgConnection>(url, mode, rest),
        #[cfg(feature = "sqlite")]
        "sqlite" => run::<diesel::SqliteConnection>(url, mode, rest),
        #[cfg(feature = "mysql")]
        "mysql" => run::<diesel::MysqlConnection>(url, mode, rest),
        #[cfg(feature = "mariadb")]
        "mariadb" => run::<diesel::mariadb::MariadbConnection>(url, mode, rest),
        other => Err(format!("backend {other} not compiled in")),
    };
    if let Err(e) = result {
        eprintln!("claim-worker: {e}");
        std::process::exit(1);
    }
}

/// A pool of `size` connections to `url`, built for a transaction pooler when the environment
/// says so.
fn worker_pool<C>(url: &str, size: u32) -> diesel_lease::Result<Pool<ConnectionManager<C>>>
where
    C: LeaseConnection + R2D2Connection,
{
    let mut options = diesel_lease::pool::PoolOptions::default();
    if std::env::var_os("DIESEL_LEASE_TEST_TRANSACTION_POOLER").is_some() {
        options = options.transaction_pooler();
    }
    options.build::<C>(url, size)
}

fn arg<T: std::str::FromStr>(rest: &[String], i: usize) -> Result<T, String> {
    rest.get(i)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("missing or bad argument {i}"))
}

fn run<C>(url: &str, mode: &str, rest: &[String]) -> Result<(), String>
where
    C: LeaseConnection
        + R2D2Connection
        + ClaimConnection<ImportJob>
        + ClaimConnection<Task>
        + CursorConnection<ImportJob>,
    i64: diesel::deserialize::FromSql<diesel::sql_types::BigInt, C::Backend>,
    for<'a> diesel::dsl::Filter<
        diesel::dsl::Select<importjobs::table, diesel::dsl::CountStar>,
        diesel::dsl::Eq<importjobs::statuscode, &'a str>,
    >: diesel::query_dsl::LoadQuery<'a, C, i64>,
    for<'a> diesel::dsl::Filter<
        diesel::dsl::Filter<
            diesel::dsl::Select<tasks::table, diesel::dsl::CountStar>,
            diesel::dsl::Eq<tasks::tenant, &'a str>,
        >,
        diesel::dsl::Eq<tasks::status, &'a str>,
    >: diesel::query_dsl::LoadQuery<'a, C, i64>,
{
    let pool: Pool<ConnectionManager<C>> = worker_pool::<C>(url, 4).map_err(|e| e.to_string())?;
    match mode {
        "drain" => {
            let batch: usize = arg(rest, 0)?;
            let threads: usize = arg(rest, 1)?;
            let out = std::sync::Mutex::new(std::io::stdout());
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let pool = pool.clone();
                    let out = &out;
                    s.spawn(move || drain(&pool, batch, out));
                }
            });
            Ok(())
        }
        "cursor" => {
            let batch: usize = arg(rest, 0)?;
            let threads: usize = arg(rest, 1)?;
            let cursor = ClaimCursor::<ImportJob>::new(std::time::Duration::from_secs(3600))
                .map_err(|e| e.to_string())?;
            let out = std::sync::Mutex::new(std::io::stdout());
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let (pool, cursor, out) = (pool.clone(), &cursor, &out);
                    s.spawn(move || {
                        let mut conn = pool.get().expect("pooled connection");
                        loop {
                            let rows = ImportJob::claim()
                                .cursor(cursor)
                                .batch(batch)
                                .rows(&mut conn)
                                .expect("claim");
                            let lines: String = rows.iter().map(claimed_job).collect();
                            let mut o = out.lock().expect("stdout lock");
                            o.write_all(lines.as_bytes()).expect("write");
                            o.flush().expect("flush");
                            if rows.is_empty() {
                                return;
                            }
                        }
                    });
                }
            });
            Ok(())
        }
        "hold" => {
            let n: usize = arg(rest, 0)?;
            let owner: String = arg(rest, 1)?;
            let options =
                ClaimOptions::default().owner(OwnerId::new(owner).map_err(|e| e.to_string())?);
            let mut conn = pool.get().map_err(|e| e.to_string())?;
            let rows = ImportJob::claim()
                .batch(n)
                .options(&options)
                .rows(&mut conn)
                .map_err(|e| e.to_string())?;
            let mut out = std::io::stdout().lock();
            for r in &rows {
                out.write_all(claimed_job(r).as_bytes())
                    .map_err(|e| e.to_string())?;
            }
            writeln!(out, "holding").map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
            drop(out);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
        "tenants" => {
            let threads: usize = arg(rest, 0)?;
            let limit: u32 = arg(rest, 1)?;
            let pool = worker_pool::<C>(url, u32::try_from(threads + 6).unwrap_or(16))
                .map_err(|e| e.to_string())?;
            let never = std::sync::atomic::AtomicBool::new(false);
            let out = std::sync::Mutex::new(std::io::stdout());
            diesel_lease::worker::Worker::new(pool)
                .concurrency(threads)
                .limit_per_key(tasks::tenant, limit, |t: &Task| t.tenant.clone())
                .run_until(&never, |conn, t: &Task| {
                    let start = micros_now();
                    // The run lasts until a second run of its tenant is under way (the test
                    // wants to see the limit reached, whatever the machine's load), or no other
                    // run of it can come (no row of the tenant is ready, and every claimed one is
                    // running), or 10 s have passed. Runs say they are under way with a file of
                    // their own in the directory the test gives (`DIESEL_LEASE_TEST_RUNS_DIR`).
                    let count = |conn: &mut C, status: &str| -> Result<i64, String> {
                        tasks::table
                            .select(diesel::dsl::count_star())
                            .filter(tasks::tenant.eq(t.tenant.as_str()))
                            .filter(tasks::status.eq(status))
                            .get_result(conn)
                            .map_err(|e| e.to_string())
                    };
                    let runs_dir = std::env::var_os("DIESEL_LEASE_TEST_RUNS_DIR")
                        .map(std::path::PathBuf::from);
                    let mine = runs_dir
                        .as_ref()
                        .map(|d| d.join(format!("{}.{}", t.tenant, t.id)));
                    let under_way = || -> i64 {
                        let Some(dir) = &runs_dir else { return 1 };
                        let prefix = format!("{}.", t.tenant);
                        std::fs::read_dir(dir)
                            .map(|entries| {
                                entries
                                    .filter_map(|e| e.ok())
                                    .filter(|e| {
                                        e.file_name().to_string_lossy().starts_with(&prefix)
                                    })
                                    .count() as i64
                            })
                            .unwrap_or(1)
                    };
                    if let Some(mine) = &mine {
                        std::fs::write(mine, b"").map_err(|e| e.to_string())?;
                    }
                    let held = std::time::Instant::now();
                    while runs_dir.is_some()
                        && under_way() < 2
                        && (count(conn, "new")? > 0 || count(conn, "running")? > under_way())
                        && held.elapsed() < std::time::Duration::from_secs(10)
                    {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(30));
                    let end = micros_now();
                    if let Some(mine) = &mine {
                        std::fs::remove_file(mine).map_err(|e| e.to_string())?;
                    }
                    let lines = format!(
                        "{}run {} {} {start} {end}\n",
                        claimed_line(t.id, t.attempts, &t.status, t.owner.as_deref()),
                        t.id,
                        t.tenant
                    );
                    let mut o = out.lock().map_err(|_| "stdout lock")?;
                    o.write_all(lines.as_bytes()).map_err(|e| e.to_string())?;
                    o.flush().map_err(|e| e.to_string())
                })
                .map(drop)
                .map_err(|e| e.to_string())
        }
        "rate" => {
            let threads: usize = arg(rest, 0)?;
            let max: u32 = arg(rest, 1)?;
            let period = std::time::Duration::from_millis(arg(rest, 2)?);
            let kind: String = arg(rest, 3)?;
            let concurrency: u32 = arg(rest, 4)?;
            let limit = match kind.as_str() {
                "global" => diesel_lease::claim::RateLimit::global(max, period),
                _ => diesel_lease::claim::RateLimit::per_key(tasks::tenant, max, period),
            };
            let pool = worker_pool::<C>(url, u32::try_from(threads + 6).unwrap_or(16))
                .map_err(|e| e.to_string())?;
            let never = std::sync::atomic::AtomicBool::new(false);
            let out = std::sync::Mutex::new(std::io::stdout());
            let mut worker = diesel_lease::worker::Worker::new(pool)
                .concurrency(threads)
                .rate_limit(limit);
            if concurrency > 0 {
                worker =
                    worker.limit_per_key(tasks::tenant, concurrency, |t: &Task| t.tenant.clone());
            }
            worker
                .run_until(&never, |_, t: &Task| {
                    let start = micros_now();
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    let end = micros_now();
                    let claimed_at = t
                        .claimed_at
                        .map(|c| c.and_utc().timestamp_micros())
                        .ok_or("claimed_at unset")?;
                    let mut o = out.lock().map_err(|_| "stdout lock")?;
                    writeln!(o, "rate {} {} {claimed_at} {start} {end}", t.id, t.tenant)
                        .map_err(|e| e.to_string())?;
                    o.flush().map_err(|e| e.to_string())
                })
                .map(drop)
                .map_err(|e| e.to_string())
        }
        other => Err(format!("unknown mode {other}")),
    }
}

/// The line reporting that a claim handed out the row `id` with `attempts`, `state` and
/// `owner` (see the module docs).
fn claimed_line(id: i64, attempts: i32, state: &str, owner: Option<&str>) -> String {
    format!(
        "claimed {id} {attempts} {state} {}\n",
        owner.unwrap_or_default()
    )
}

/// [`claimed_line`] of an import job as its claim returned it.
fn claimed_job(job: &ImportJob) -> String {
    claimed_line(job.id, job.attempts, &job.statuscode, job.worker.as_deref())
}

/// Microseconds since 1970 by the system clock: one timeline for every process of the machine.
fn micros_now() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

fn drain<C>(
    pool: &Pool<ConnectionManager<C>>,
    batch: usize,
    out: &std::sync::Mutex<std::io::Stdout>,
) where
    C: LeaseConnection + R2D2Connection + ClaimConnection<ImportJob>,
    for<'a> diesel::dsl::Filter<
        diesel::dsl::Select<importjobs::table, diesel::dsl::CountStar>,
        diesel::dsl::Eq<importjobs::statuscode, &'a str>,
    >: diesel::query_dsl::LoadQuery<'a, C, i64>,
{
    let mut conn = pool.get().expect("pooled connection");
    loop {
        // A claim that gave up waiting for a lock changed nothing: under load a wait can outlast
        // the bound, and the farm judges hand-outs, not wait times. Try again.
        let rows = loop {
            match ImportJob::claim().batch(batch).rows(&mut conn) {
                Err(diesel_lease::Error::Timeout { .. }) => continue,
                other => break other.expect("claim"),
            }
        };
        let mut lines = String::new();
        for r in &rows {
            lines.push_str(&claimed_job(r));
        }
        if rows.len() > batch {
            lines.push_str(&format!("overfull {}\n", rows.len()));
        }
        if rows.is_empty() {
            let ready: i64 = importjobs::table
                .select(diesel::dsl::count_star())
                .filter(importjobs::statuscode.eq("JOBEXTRACTED"))
                .get_result(&mut *conn)
                .expect("count");
            lines.push_str(&format!("empty {ready}\n"));
        }
        let mut o = out.lock().expect("stdout lock");
        o.write_all(lines.as_bytes()).expect("write");
        o.flush().expect("flush");
        if rows.is_empty() {
            return;
        }
    }
}
