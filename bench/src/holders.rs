//! Holders (issue 55, item 4): many kept-alive grants in one process, as a farm's node holds
//! them: lease guards (`keep_alive`), semaphore permits and claim guards, 6 s ttl (the claim's
//! timeout), all through one pool of 10 connections. Counted per backend, kind and number:
//! the process's threads while they are held, the statements the pool's connections start per
//! second once every holder is settled (the renewals: nothing else runs on the pool), how late a
//! lease's or permit's renewal came (the age of its last renewal, read from the table on a
//! connection of its own, beyond the ttl/3 it is renewed at), how many holders believe they lost, how long dropping them all takes, on
//! the thread that drops, and how long until the pool's keeper has run every release.
//!
//! Issue 55's targets (at 1,000 holders at most 8 threads and 5 renewal transactions per
//! second, all dropped within 10 ms; 10,000 holders working on PostgreSQL through a pool of 10)
//! are reported, not asserted. Session 31's runs (one heartbeat thread per holder) are the
//! baseline; from session 32 on, the holders are kept by one keeper thread per pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel_lease::claim::{ClaimConnection, ClaimGuard};
use diesel_lease::lease::{LeaseGuard, LeaseOptions};
use diesel_lease::pool::WaiterWakeups;
use diesel_lease::prelude::*;
use diesel_lease::semaphore::{PermitGuard, Semaphore};
use diesel_lease::LeaseConnection;
use serde::Serialize;

use crate::idle::Counted;
use crate::BenchResult;

/// The ttl of every grant (a claim guard's: the model's timeout), as issue 55's targets have it.
const TTL: Duration = Duration::from_secs(6);
/// The connections the holders share.
const POOL_SIZE: u32 = 10;

diesel::table! {
    bench_holders (id) {
        id -> BigInt,
        status -> Text,
        owner -> Nullable<Text>,
        claimed_at -> Nullable<Timestamp>,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = bench_holders)]
#[claimable(state = status, ready = "new", claimed = "taken", done = "done", owner = owner,
            claimed_at = claimed_at, timeout_secs = 6)]
pub(crate) struct HeldJob {
    id: i64,
    #[allow(dead_code)]
    status: String,
    #[allow(dead_code)]
    owner: Option<String>,
    #[allow(dead_code)]
    claimed_at: Option<chrono::NaiveDateTime>,
}

/// What one backend, kind and number of holders measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HoldersRun {
    pub(crate) backend: &'static str,
    /// `lease`, `permit` or `claim`.
    pub(crate) kind: &'static str,
    pub(crate) holders: usize,
    pub(crate) pool_size: u32,
    pub(crate) ttl_secs: f64,
    /// How long taking them all took, s.
    pub(crate) acquire_secs: f64,
    /// The process's threads before the holders were taken, and while they were held.
    pub(crate) threads_before: usize,
    pub(crate) threads_held: usize,
    /// Statements per second on the holders' pool while nothing but renewals ran.
    pub(crate) renewal_statements_per_sec: f64,
    pub(crate) counted_secs: f64,
    /// Leases and permits: p99 over the held ones (read at several instants) of how far their
    /// last renewal lay beyond the ttl/3 they are renewed at, ms (0: on time).
    pub(crate) p99_renewal_lag_ms: Option<f64>,
    /// Holders that believed they had lost their grant by the end of the count.
    pub(crate) lost: usize,
    /// How long dropping them all took on the dropping thread, ms.
    pub(crate) drop_ms: f64,
    /// From the first drop until the pool's keeper had settled every release
    /// (`pool::flush_releases`), ms; `None` if they were not all settled within two minutes.
    pub(crate) released_ms: Option<f64>,
    /// Grants still held in the database once the releases were settled: releases the keeper
    /// left (no connection within the drop wait) rather than ran. `None` if not counted.
    pub(crate) left: Option<i64>,
    /// Why the run stopped early, if it did (an acquire that failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) failed: Option<String>,
}

/// The backends this section runs on, with their claim table's DDL.
pub(crate) trait HoldersBackend:
    LeaseConnection + R2D2Connection + ClaimConnection<HeldJob>
{
    const NAME: &'static str;
    const DDL: &'static str;
    /// Inserts `n` ready rows, ids 1 to `n`.
    fn insert_ready(&mut self, n: i64) -> QueryResult<usize>;
    /// The `n` of a `SELECT COUNT(*) AS n …`.
    fn count_rows(&mut self, sql: &str) -> QueryResult<i64>;
}

/// A row count read by [`HoldersBackend::count_rows`].
#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// `insert_ready` from one statement of the backend's: rows 1 to the bound `n`.
macro_rules! insert_ready {
    ($sql:expr) => {
        fn insert_ready(&mut self, n: i64) -> QueryResult<usize> {
            diesel::sql_query($sql)
                .bind::<diesel::sql_types::BigInt, _>(n)
                .execute(self)
        }

        fn count_rows(&mut self, sql: &str) -> QueryResult<i64> {
            diesel::sql_query(sql)
                .get_result::<Count>(self)
                .map(|count| count.n)
        }
    };
}

impl HoldersBackend for diesel::PgConnection {
    const NAME: &'static str = "postgres";
    const DDL: &'static str = "DROP TABLE IF EXISTS bench_holders;
        CREATE TABLE bench_holders (id BIGINT PRIMARY KEY, status TEXT NOT NULL,
            owner TEXT NULL, claimed_at TIMESTAMP NULL);";
    insert_ready!(
        "INSERT INTO bench_holders (id, status) SELECT g, 'new' FROM generate_series(1, $1) AS g"
    );
}

impl HoldersBackend for diesel::SqliteConnection {
    const NAME: &'static str = "sqlite";
    const DDL: &'static str = "DROP TABLE IF EXISTS bench_holders;
        CREATE TABLE bench_holders (id INTEGER PRIMARY KEY, status TEXT NOT NULL,
            owner TEXT NULL, claimed_at TIMESTAMP NULL);";
    insert_ready!(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) \
         INSERT INTO bench_holders (id, status) SELECT x, 'new' FROM c"
    );
}

impl HoldersBackend for diesel::MysqlConnection {
    const NAME: &'static str = "mariadb";
    const DDL: &'static str = "DROP TABLE IF EXISTS bench_holders;
        CREATE TABLE bench_holders (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL,
            owner VARCHAR(255) NULL, claimed_at DATETIME(6) NULL);";
    insert_ready!(
        "INSERT INTO bench_holders (id, status) SELECT x, 'new' FROM \
         (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) \
         SELECT x FROM c) AS t"
    );
}

fn counted_pool<C: HoldersBackend>(
    url: &str,
) -> BenchResult<(Pool<ConnectionManager<C>>, Arc<AtomicU64>)> {
    let statements = Arc::new(AtomicU64::new(0));
    let pool = Pool::builder()
        .max_size(POOL_SIZE)
        .connection_timeout(Duration::from_secs(30))
        .connection_customizer(Box::new(Counted(Arc::clone(&statements))))
        .event_handler(Box::new(WaiterWakeups::new::<C>(url)))
        .build(ConnectionManager::<C>::new(url))?;
    Ok((pool, statements))
}

/// The threads of this process (Linux: `/proc/self/status`; 0 elsewhere).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// What the held grants of one kind are, to count, read and drop them alike.
enum Holders<C: HoldersBackend> {
    Leases(Vec<LeaseGuard<C>>),
    Permits(Vec<PermitGuard<C>>),
    Claims(Vec<ClaimGuard<HeldJob>>),
}

impl<C: HoldersBackend> Holders<C> {
    fn lost(&self) -> usize {
        match self {
            Holders::Leases(v) => v.iter().filter(|h| h.is_lost()).count(),
            Holders::Permits(v) => v.iter().filter(|h| h.is_lost()).count(),
            Holders::Claims(v) => v.iter().filter(|h| h.is_lost()).count(),
        }
    }
}

/// Takes `n` holders of `kind`; stops at the first failure, keeping what it got.
fn take<C: HoldersBackend>(
    pool: &Pool<ConnectionManager<C>>,
    kind: &'static str,
    n: usize,
) -> (Holders<C>, Option<String>) {
    match kind {
        "lease" => {
            let options = LeaseOptions::new(TTL).keep_alive(true);
            let mut held = Vec::with_capacity(n);
            for i in 0..n {
                match LeaseGuard::try_acquire(pool, &format!("bench-holder-{i}"), &options) {
                    Ok(Some(guard)) => held.push(guard),
                    Ok(None) => {
                        return (Holders::Leases(held), Some(format!("lease {i} was held")))
                    }
                    Err(e) => return (Holders::Leases(held), Some(format!("lease {i}: {e}"))),
                }
            }
            (Holders::Leases(held), None)
        }
        "permit" => {
            let permits = u32::try_from(n).unwrap_or(u32::MAX);
            let semaphore = Semaphore::new("bench-holders", permits).with_ttl(TTL);
            let mut held = Vec::with_capacity(n);
            for i in 0..n {
                match semaphore.try_acquire(pool) {
                    Ok(Some(permit)) => held.push(permit),
                    Ok(None) => {
                        return (Holders::Permits(held), Some(format!("permit {i} refused")))
                    }
                    Err(e) => return (Holders::Permits(held), Some(format!("permit {i}: {e}"))),
                }
            }
            (Holders::Permits(held), None)
        }
        _ => {
            let mut held = Vec::with_capacity(n);
            while held.len() < n {
                let chunk = (n - held.len()).min(500);
                match HeldJob::claim().batch(chunk).guards(pool) {
                    Ok(guards) if guards.is_empty() => {
                        return (Holders::Claims(held), Some("the table ran dry".into()))
                    }
                    Ok(guards) => held.extend(guards),
                    Err(e) => return (Holders::Claims(held), Some(format!("claim: {e}"))),
                }
            }
            (Holders::Claims(held), None)
        }
    }
}

/// p99 of how far the held leases' or permits' last renewals lie beyond ttl/3, ms, read
/// `reads` times across `window` from the built-in tables (each row's expiry against the
/// database's `now`, read in the same statement). `None` for claim guards.
fn renewal_lag<C: HoldersBackend>(
    url: &str,
    kind: &str,
    reads: usize,
    window: Duration,
) -> BenchResult<Option<f64>> {
    let ttl_micros = i64::try_from(TTL.as_micros())?;
    // Renewed at `now - age`: expires_at = renewal + ttl.
    let lag_ms = |expires_at: i64, now: i64| {
        let age_micros = ttl_micros - (expires_at - now);
        (age_micros - ttl_micros / 3).max(0) as f64 / 1e3
    };
    // A connection of its own, outside the counted pool: the reads are not renewals.
    let mut conn = C::establish(url)?;
    let mut lags = Vec::new();
    for _ in 0..reads {
        std::thread::sleep(window / u32::try_from(reads)?);
        match kind {
            "lease" => {
                for entry in diesel_lease::admin::leases(&mut conn)? {
                    let record = entry.record;
                    if entry.name.starts_with("bench-holder-") && record.is_held() {
                        lags.push(lag_ms(record.expires_at_micros, record.read_at_micros));
                    }
                }
            }
            "permit" => {
                for entry in diesel_lease::admin::semaphores(&mut conn)? {
                    if entry.resource != "bench-holders" {
                        continue;
                    }
                    for request in entry.queue.iter().filter(|r| r.granted) {
                        lags.push(lag_ms(request.expires_at_micros, entry.read_at_micros));
                    }
                }
            }
            _ => return Ok(None),
        }
    }
    if lags.is_empty() {
        return Ok(None);
    }
    lags.sort_by(f64::total_cmp);
    Ok(Some(crate::measure::percentile(&lags, 0.99)))
}

/// One backend: every kind at every number in `sizes`, counting `secs` each.
pub(crate) fn run<C: HoldersBackend>(
    url: &str,
    sizes: &[usize],
    secs: f64,
) -> BenchResult<Vec<HoldersRun>> {
    {
        let mut conn = C::establish(url)?;
        diesel_lease::run_migrations(&mut conn)?;
        conn.batch_execute(C::DDL)?;
    }
    let mut runs = Vec::new();
    for kind in ["lease", "permit", "claim"] {
        for &n in sizes {
            runs.push(one::<C>(url, kind, n, secs)?);
        }
    }
    Ok(runs)
}

/// How many grants of `kind` are still held in the database (after every release settled):
/// leases not released, permits' rows, claimed rows.
fn still_held<C: HoldersBackend>(url: &str, kind: &str) -> BenchResult<i64> {
    let sql = match kind {
        "lease" => "SELECT COUNT(*) AS n FROM diesel_lease_leases WHERE released_at IS NULL",
        "permit" => "SELECT COUNT(*) AS n FROM diesel_lease_semaphore_tickets",
        _ => "SELECT COUNT(*) AS n FROM bench_holders WHERE status = 'taken'",
    };
    Ok(C::establish(url)?.count_rows(sql)?)
}

fn one<C: HoldersBackend>(
    url: &str,
    kind: &'static str,
    n: usize,
    secs: f64,
) -> BenchResult<HoldersRun> {
    {
        let mut conn = C::establish(url)?;
        conn.batch_execute(
            "DELETE FROM bench_holders; DELETE FROM diesel_lease_leases; \
             DELETE FROM diesel_lease_semaphore_tickets; DELETE FROM diesel_lease_semaphores;",
        )?;
        if kind == "claim" {
            conn.insert_ready(i64::try_from(n)?)?;
        }
    }
    let threads_before = threads();
    let (pool, statements) = counted_pool::<C>(url)?;
    let began = Instant::now();
    let (held, failed) = take::<C>(&pool, kind, n);
    let acquire_secs = began.elapsed().as_secs_f64();
    // One renewal period for every holder to be on its own pace, then the count.
    std::thread::sleep(TTL / 3);
    let threads_held = threads();
    let before = statements.load(Ordering::SeqCst);
    let counting = Instant::now();
    let lag = if kind == "claim" {
        std::thread::sleep(Duration::from_secs_f64(secs));
        None
    } else {
        renewal_lag::<C>(url, kind, 3, Duration::from_secs_f64(secs))?
    };
    let counted = counting.elapsed().as_secs_f64();
    let renewals = statements.load(Ordering::SeqCst) - before;
    let lost = held.lost();
    let dropping = Instant::now();
    drop(held);
    let drop_ms = dropping.elapsed().as_secs_f64() * 1e3;
    let released_ms = diesel_lease::pool::flush_releases(&pool, Duration::from_secs(120))
        .unwrap_or(false)
        .then(|| dropping.elapsed().as_secs_f64() * 1e3);
    let left = still_held::<C>(url, kind).ok();
    let run = HoldersRun {
        backend: C::NAME,
        kind,
        holders: n,
        pool_size: POOL_SIZE,
        ttl_secs: TTL.as_secs_f64(),
        acquire_secs,
        threads_before,
        threads_held,
        renewal_statements_per_sec: renewals as f64 / counted,
        counted_secs: counted,
        p99_renewal_lag_ms: lag,
        lost,
        drop_ms,
        released_ms,
        left,
        failed,
    };
    eprintln!(
        "  holders {} {:>6} x{:<6} threads {:>6} (before {}), renewals {:>8.1} statements/s, \
         p99 lag {}, lost {}, drop {:.1} ms, released in {} ({} left){}",
        run.backend,
        run.kind,
        run.holders,
        run.threads_held,
        run.threads_before,
        run.renewal_statements_per_sec,
        run.p99_renewal_lag_ms
            .map_or_else(|| "-".to_string(), |l| format!("{l:.0} ms")),
        run.lost,
        run.drop_ms,
        run.released_ms
            .map_or_else(|| "-".to_string(), |ms| format!("{ms:.0} ms")),
        run.left.map_or_else(|| "?".to_string(), |n| n.to_string()),
        run.failed
            .as_ref()
            .map_or_else(String::new, |f| format!(" (stopped: {f})")),
    );
    Ok(run)
}
