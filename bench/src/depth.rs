//! Issue 23, item 3: depth on PostgreSQL.
//!
//! - `--only depth`: N consecutive jobs (`claim_next` + `complete`) on 4 workers, jobs/s per
//!   tenth of the run, for each queue-table layout; while it runs a sampler reads the table's
//!   statistics (dead rows, HOT updates, vacuum runs, sizes) and `EXPLAIN (ANALYZE, BUFFERS)`
//!   of the claim's pick about once a second, so a slowdown can be traced to what grew.
//! - `--only depth10m`: `claim_next` + `complete` at 4 workers on a table of 10M ready rows
//!   against the same on 100k, with the claim's plan (an index scan, no sort) at 10M.
//! - `--only steady`: the same two depths held constant (a producer inserts a row at the back
//!   for every job done) over several consecutive windows on one table, each window with the
//!   server's CPU per job, its autovacuum runs and the pick's buffers after it: whether a depth
//!   costs more the longer it is worked, which one fresh window cannot show.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Text};
use diesel_lease::prelude::*;
use serde::Serialize;

use diesel_lease::claim::ClaimCursor;

use crate::measure::{self, Sample};
use crate::model::{
    BenchJob, BenchJobBySeq, PG_FILL_JOBS, PG_JOBS_DDL, PG_READY_INDEX, PG_READY_SEQ_INDEX,
};
use crate::pg::PgBench;
use crate::target::TargetCheck;
use crate::BenchResult;

/// The order a layout's claims take, and so its partial index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Order {
    /// Primary-key order, `CREATE INDEX … (id) WHERE status = 'ready'` (`BenchJob`).
    Id,
    /// `order_by(seq)`, `CREATE INDEX … (seq) WHERE status = 'ready'` (`BenchJobBySeq`).
    Seq,
}

/// A queue table as a user would create it: claim order and index, storage options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Layout {
    /// Short name, as reported.
    pub(crate) name: &'static str,
    pub(crate) order: Order,
    /// `WITH (…)` options of the table, without the parentheses.
    pub(crate) table_options: &'static str,
}

/// The queue table's autovacuum options the bench used before issue 23 (`--autovacuum tuned`).
const TUNED_AUTOVACUUM: &str = "autovacuum_vacuum_scale_factor = 0, \
     autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_cost_delay = 0, \
     autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000";

/// The layout the bench used before issue 23 (the e2e section's consecutive run).
pub(crate) const BEFORE: Layout = Layout {
    name: "id order, tuned autovacuum (before)",
    order: Order::Id,
    table_options: TUNED_AUTOVACUUM,
};

/// The claiming guide's recommended queue table: vacuum by row count, analyze left to the server (an
/// analyze of a 10M-row table after every 10,000 changes costs more than the claims).
pub(crate) const RECOMMENDED: Layout = Layout {
    name: "seq order, vacuum by row count",
    order: Order::Seq,
    table_options: "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, \
     autovacuum_vacuum_cost_delay = 0",
};

/// [`BEFORE`]'s claim order and index with the server's autovacuum defaults: the end-to-end
/// section's consecutive run under `--autovacuum default`.
pub(crate) const ID_SERVER_DEFAULTS: Layout = Layout {
    name: "id order, server's autovacuum defaults",
    order: Order::Id,
    table_options: "",
};

/// The layouts `--only depth` runs, in this order, with their `--depth-layouts` names.
pub(crate) const LAYOUTS: &[(&str, Layout)] = &[
    ("before", BEFORE),
    ("recommended", RECOMMENDED),
    ("server-defaults", SERVER_DEFAULTS),
];

/// The layouts `names` choose (all when empty).
pub(crate) fn layouts(names: &[String]) -> BenchResult<Vec<Layout>> {
    if names.is_empty() {
        return Ok(LAYOUTS.iter().map(|(_, l)| *l).collect());
    }
    names
        .iter()
        .map(|n| {
            LAYOUTS
                .iter()
                .find(|(name, _)| name == n)
                .map(|(_, l)| *l)
                .ok_or_else(|| format!("--depth-layouts: unknown layout `{n}`").into())
        })
        .collect()
}

/// The recommended claim order and index with the server's autovacuum defaults (a vacuum after
/// 20 % of the table plus 50 rows changed, with the default cost delay).
pub(crate) const SERVER_DEFAULTS: Layout = Layout {
    name: "seq order, server's autovacuum defaults",
    order: Order::Seq,
    table_options: "",
};

/// One reading of the sampler.
#[derive(Debug, Clone, Serialize, QueryableByName)]
pub(crate) struct TableStats {
    /// Seconds since the run started.
    #[diesel(sql_type = Double)]
    pub(crate) at_secs: f64,
    #[diesel(sql_type = BigInt)]
    pub(crate) n_live_tup: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) n_dead_tup: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) n_tup_upd: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) n_tup_hot_upd: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) autovacuum_count: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) autoanalyze_count: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) heap_pages: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) pkey_pages: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) ready_index_pages: i64,
    /// Shared buffers (hit + read) one `EXPLAIN (ANALYZE, BUFFERS)` of the claim's pick touched.
    #[diesel(sql_type = BigInt)]
    pub(crate) pick_buffers: i64,
    /// Milliseconds that pick took to execute.
    #[diesel(sql_type = Double)]
    pub(crate) pick_ms: f64,
    /// Jobs the workers had completed.
    #[diesel(sql_type = BigInt)]
    pub(crate) jobs_done: i64,
    /// CPU clock ticks the server used so far: the postmaster, its live processes and the ones
    /// that exited (autovacuum workers); -1 when the server is not on this machine.
    #[diesel(sql_type = BigInt)]
    pub(crate) server_cpu_ticks: i64,
    /// CPU clock ticks this process (the client) used so far.
    #[diesel(sql_type = BigInt)]
    pub(crate) client_cpu_ticks: i64,
}

/// One layout's consecutive run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DepthRun {
    pub(crate) layout: Layout,
    pub(crate) jobs: u64,
    pub(crate) workers: usize,
    pub(crate) tenths_per_sec: Vec<f64>,
    pub(crate) first_tenth: f64,
    pub(crate) last_tenth: f64,
    /// Last tenth over first tenth.
    pub(crate) ratio: f64,
    pub(crate) secs: f64,
    /// `EXPLAIN (ANALYZE, BUFFERS)` of the whole claim statement (rolled back), before and after.
    pub(crate) plan_before: String,
    pub(crate) plan_after: String,
    pub(crate) samples: Vec<TableStats>,
    /// Rows left in `done` afterwards: every job was completed exactly once.
    pub(crate) done_rows: i64,
    /// CPU per job in each tenth of the run, µs, from the samples (interpolated at the tenths'
    /// boundaries): the server's (vacuum included) and the client's. Unlike jobs/s, these
    /// hardly move with the machine's other load.
    pub(crate) server_cpu_us_per_job_tenths: Vec<f64>,
    pub(crate) client_cpu_us_per_job_tenths: Vec<f64>,
}

/// `claim_next` (or a cursor's) + `complete` at 100k and at 10M ready rows.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DepthSize {
    pub(crate) layout: Layout,
    pub(crate) ready_rows: u64,
    pub(crate) workers: usize,
    /// How the workers claim.
    pub(crate) claims: Claims,
    pub(crate) sample: Sample,
    /// Seconds the fill (insert, index, `VACUUM ANALYZE`) took.
    pub(crate) fill_secs: f64,
    /// `EXPLAIN (ANALYZE, BUFFERS)` of the claim statement on the fresh table (rolled back).
    pub(crate) plan: String,
    /// Server CPU (vacuum included) per job over the warm-up and the window, µs; `None` when the
    /// server is not on this machine.
    pub(crate) server_cpu_us_per_job: Option<f64>,
    /// Autovacuum runs of the queue table during the warm-up and the window.
    pub(crate) autovacuums: i64,
    /// Shared buffers one `EXPLAIN (ANALYZE, BUFFERS)` of the claim's pick touched after the
    /// window: the dead index entries it walks.
    pub(crate) pick_buffers_after: i64,
}

impl Layout {
    fn index_ddl(self) -> &'static str {
        match self.order {
            Order::Id => PG_READY_INDEX,
            Order::Seq => PG_READY_SEQ_INDEX,
        }
    }

    fn order_column(self) -> &'static str {
        match self.order {
            Order::Id => "id",
            Order::Seq => "seq",
        }
    }

    /// The claim's pick as `claim_next` sends it, with the limit as a literal.
    fn pick_sql(self) -> String {
        format!(
            "SELECT id FROM bench_jobs WHERE status = 'ready' ORDER BY {} LIMIT 1 \
             FOR UPDATE SKIP LOCKED",
            self.order_column()
        )
    }

    /// The whole claim statement, with the owner as a literal.
    fn claim_sql(self) -> String {
        format!(
            "WITH picked AS ({}) UPDATE bench_jobs SET status = 'running', owner = 'explain', \
             claimed_at = statement_timestamp(), attempts = bench_jobs.attempts + 1 \
             FROM picked WHERE bench_jobs.id = picked.id RETURNING bench_jobs.id",
            self.pick_sql()
        )
    }
}

/// How a steady run's workers claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Claims {
    /// `BenchJobBySeq::claim_next`: each pick starts at the front of the claim order.
    ClaimNext,
    /// `ClaimCursor::claim_next`, one cursor shared by the workers (rescan every second): each
    /// pick resumes at the last claimed `seq`.
    Cursor,
}

impl Claims {
    /// As reported.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Claims::ClaimNext => "claim_next",
            Claims::Cursor => "ClaimCursor::claim_next",
        }
    }
}

/// How often the steady section's cursor looks from the front (`ClaimCursor::new`).
const CURSOR_RESCAN: Duration = Duration::from_secs(1);

/// One job: `ClaimCursor::claim_next` (`seq` order) then `complete`; 0 when the table is empty.
pub(crate) fn cursor_job(
    conn: &mut PgConnection,
    cursor: &ClaimCursor<BenchJobBySeq>,
) -> BenchResult<u64> {
    let Some(job) = BenchJobBySeq::claim().cursor(cursor).row(conn)? else {
        return Ok(0);
    };
    if !job.complete(conn)? {
        return Err("a fresh claim was not ours".into());
    }
    Ok(1)
}

/// One job: `claim_next` then `complete` in the layout's order; 0 when the table is empty.
pub(crate) fn job(conn: &mut PgConnection, order: Order) -> BenchResult<u64> {
    let ours = match order {
        Order::Id => match BenchJob::claim().row(conn)? {
            Some(job) => job.complete(conn)?,
            None => return Ok(0),
        },
        Order::Seq => match BenchJobBySeq::claim().row(conn)? {
            Some(job) => job.complete(conn)?,
            None => return Ok(0),
        },
    };
    if !ours {
        return Err("a fresh claim was not ours".into());
    }
    Ok(1)
}

impl PgBench {
    /// Drops and refills the queue table in `layout` with `rows` ready rows, then vacuums and
    /// analyzes it.
    pub(crate) fn fresh_layout(&self, rows: u64, layout: Layout) -> BenchResult<()> {
        let mut conn = PgConnection::establish(&self.url)?;
        conn.batch_execute("DROP TABLE IF EXISTS bench_jobs")?;
        let options = if layout.table_options.is_empty() {
            String::new()
        } else {
            format!(" WITH ({})", layout.table_options)
        };
        conn.batch_execute(&format!("{PG_JOBS_DDL}{options}"))?;
        diesel::sql_query(PG_FILL_JOBS)
            .bind::<BigInt, _>(i64::try_from(rows)?)
            .execute(&mut conn)?;
        conn.batch_execute(layout.index_ddl())?;
        conn.batch_execute("VACUUM (ANALYZE) bench_jobs")?;
        let _ = conn.batch_execute("CHECKPOINT");
        Ok(())
    }

    /// `EXPLAIN (ANALYZE, BUFFERS)` of the layout's claim statement, in a transaction that is
    /// rolled back (the explained claim takes no row for good).
    pub(crate) fn explain_claim(&self, layout: Layout) -> BenchResult<String> {
        #[derive(QueryableByName)]
        struct Line {
            #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
            line: String,
        }
        let mut conn = PgConnection::establish(&self.url)?;
        let sql = format!("EXPLAIN (ANALYZE, BUFFERS) {}", layout.claim_sql());
        conn.batch_execute("BEGIN")?;
        let lines = diesel::sql_query(&sql).load::<Line>(&mut conn);
        conn.batch_execute("ROLLBACK")?;
        Ok(lines?
            .into_iter()
            .map(|l| l.line)
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// `total` consecutive jobs on `workers` threads in `layout`, with the sampler running.
    pub(crate) fn depth_run(
        &self,
        layout: Layout,
        workers: usize,
        total: u64,
        every: Duration,
    ) -> BenchResult<DepthRun> {
        // A hundredth more rows than jobs, so the last claims still find ready rows.
        self.fresh_layout(total + total / 100 + 1_000, layout)?;
        let plan_before = self.explain_claim(layout)?;
        let (_pool, conns) = self.connections(workers)?;
        let stop = AtomicBool::new(false);
        let done = AtomicU64::new(0);
        let start = Instant::now();
        let (tenths, samples) = std::thread::scope(|s| {
            let sampler = s.spawn(|| self.sample_until(layout, &stop, &done, start, every));
            let tenths = measure::consecutive(conns, total, |conn| {
                let n = job(conn, layout.order)?;
                done.fetch_add(n, Ordering::Relaxed);
                Ok(n)
            });
            stop.store(true, Ordering::Relaxed);
            let samples = sampler
                .join()
                .unwrap_or_else(|_| Err("the sampler panicked".into()));
            (tenths, samples)
        });
        let secs = start.elapsed().as_secs_f64();
        let (tenths, samples) = (tenths?, samples?);
        let plan_after = self.explain_claim(layout)?;
        let first = tenths.first().copied().unwrap_or(f64::NAN);
        let last = tenths.last().copied().unwrap_or(f64::NAN);
        let per_job = |ticks: fn(&TableStats) -> i64| cpu_per_job_tenths(&samples, total, ticks);
        Ok(DepthRun {
            server_cpu_us_per_job_tenths: per_job(|s| s.server_cpu_ticks),
            client_cpu_us_per_job_tenths: per_job(|s| s.client_cpu_ticks),
            layout,
            jobs: total,
            workers,
            first_tenth: first,
            last_tenth: last,
            ratio: last / first,
            tenths_per_sec: tenths,
            secs,
            plan_before,
            plan_after,
            samples,
            done_rows: self.count_status("done")?,
        })
    }

    /// Reads [`TableStats`] every `every` until `stop`.
    fn sample_until(
        &self,
        layout: Layout,
        stop: &AtomicBool,
        done: &AtomicU64,
        start: Instant,
        every: Duration,
    ) -> BenchResult<Vec<TableStats>> {
        let mut conn = PgConnection::establish(&self.url)?;
        let postmaster = postmaster_pid(&mut conn);
        let mut out = Vec::new();
        loop {
            // Read before sampling: after the run ends, one last sample counts every job.
            let last = stop.load(Ordering::Relaxed);
            let (buffers, ms) = pick_cost(&mut conn, layout)?;
            let jobs = done.load(Ordering::Relaxed);
            let server = postmaster
                .and_then(server_cpu_ticks)
                .map_or(-1, |t| t as i64);
            let client = measure::stat_cpu_ticks("/proc/self/stat", false).map_or(-1, |t| t as i64);
            let sql = format!(
                "SELECT {at}::float8 AS at_secs, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, \
                 autovacuum_count, autoanalyze_count, \
                 pg_relation_size('bench_jobs') / 8192 AS heap_pages, \
                 pg_relation_size('bench_jobs_pkey') / 8192 AS pkey_pages, \
                 (SELECT coalesce(sum(pg_relation_size(indexrelid)), 0)::bigint / 8192 FROM pg_index \
                  WHERE indrelid = 'bench_jobs'::regclass AND indpred IS NOT NULL) \
                  AS ready_index_pages, \
                 {buffers}::bigint AS pick_buffers, {ms}::float8 AS pick_ms, \
                 {jobs}::bigint AS jobs_done, {server}::bigint AS server_cpu_ticks, \
                 {client}::bigint AS client_cpu_ticks \
                 FROM pg_stat_user_tables WHERE relname = 'bench_jobs'",
                at = start.elapsed().as_secs_f64(),
            );
            out.push(diesel::sql_query(sql).get_result::<TableStats>(&mut conn)?);
            if last {
                break;
            }
            let next = Instant::now() + every;
            while !stop.load(Ordering::Relaxed) && Instant::now() < next {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(out)
    }

    /// Rows of `bench_jobs` in `status`.
    pub(crate) fn count_status(&self, status: &str) -> BenchResult<i64> {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let mut conn = PgConnection::establish(&self.url)?;
        Ok(
            diesel::sql_query("SELECT count(*) AS n FROM bench_jobs WHERE status = $1")
                .bind::<Text, _>(status)
                .get_result::<Count>(&mut conn)?
                .n,
        )
    }

    /// `claim_next` + `complete` at `workers` for the window on a fresh table of `rows`.
    pub(crate) fn depth_size(
        &self,
        layout: Layout,
        rows: u64,
        workers: usize,
        claims: Claims,
    ) -> BenchResult<DepthSize> {
        if claims == Claims::Cursor && layout.order != Order::Seq {
            return Err("the depth10m section's cursor claims in seq order".into());
        }
        let cursor = ClaimCursor::<BenchJobBySeq>::new(CURSOR_RESCAN)?;
        let t = Instant::now();
        self.fresh_layout(rows, layout)?;
        let fill_secs = t.elapsed().as_secs_f64();
        let plan = self.explain_claim(layout)?;
        let (_pool, conns) = self.connections(workers)?;
        let mut conn = PgConnection::establish(&self.url)?;
        let postmaster = postmaster_pid(&mut conn);
        let (cpu0, av0) = (
            postmaster.and_then(server_cpu_ticks),
            autovacuums(&mut conn)?,
        );
        let done = AtomicU64::new(0);
        let sample = measure::timed(conns, self.window, |conn| {
            let n = match claims {
                Claims::ClaimNext => job(conn, layout.order)?,
                Claims::Cursor => cursor_job(conn, &cursor)?,
            };
            done.fetch_add(n, Ordering::Relaxed);
            Ok(n)
        })?;
        let (cpu1, av1) = (
            postmaster.and_then(server_cpu_ticks),
            autovacuums(&mut conn)?,
        );
        let jobs = done.load(Ordering::Relaxed);
        let (pick_buffers_after, _) = pick_cost(&mut conn, layout)?;
        Ok(DepthSize {
            server_cpu_us_per_job: cpu0
                .zip(cpu1)
                .filter(|_| jobs > 0)
                .map(|(a, b)| measure::ticks_to_us(b.saturating_sub(a)) / jobs as f64),
            autovacuums: av1 - av0,
            layout,
            ready_rows: rows,
            workers,
            claims,
            sample,
            fill_secs,
            plan,
            pick_buffers_after,
        })
    }
}

/// One window of a [`SteadyRun`].
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SteadyWindow {
    pub(crate) sample: Sample,
    /// Server CPU (vacuum included) per job over the warm-up and the window, µs.
    pub(crate) server_cpu_us_per_job: Option<f64>,
    /// Autovacuum runs of the queue table during the warm-up and the window.
    pub(crate) autovacuums: i64,
    /// The part of `server_cpu_us_per_job` spent by the workers' own backends (the claims and
    /// completes themselves); the rest is upkeep: autovacuum, the producer's inserts, WAL and
    /// checkpoint writers.
    pub(crate) claiming_backends_cpu_us_per_job: Option<f64>,
    /// Shared buffers of one read-only pick after the window.
    pub(crate) pick_buffers_after: i64,
}

impl SteadyWindow {
    /// One line for window `k` (from 0), as printed.
    pub(crate) fn line(&self, k: usize) -> String {
        format!(
            "  window {}: {:>8.0} jobs/s, server {} µs/job (claiming backends {}), {} autovacuums, \
             pick {} buffers after",
            k + 1,
            self.sample.rate,
            self.server_cpu_us_per_job
                .map_or("-".to_owned(), |c| format!("{c:.0}")),
            self.claiming_backends_cpu_us_per_job
                .map_or("-".to_owned(), |c| format!("{c:.0}")),
            self.autovacuums,
            self.pick_buffers_after
        )
    }
}

/// `claim_next` + `complete` at a depth held constant: a producer thread inserts a chunk of
/// ready rows at the back of the claim order for every chunk of jobs done.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SteadyRun {
    pub(crate) layout: Layout,
    pub(crate) ready_rows: u64,
    pub(crate) workers: usize,
    /// How the workers claim.
    pub(crate) claims: Claims,
    /// The server's `autovacuum_naptime`, as `SHOW` prints it.
    pub(crate) autovacuum_naptime: String,
    /// Consecutive windows on the same table, in order.
    pub(crate) windows: Vec<SteadyWindow>,
    /// Rows the producer inserted.
    pub(crate) inserted: u64,
    /// Ready rows left at the end (the depth, give or take one chunk).
    pub(crate) ready_after: i64,
}

impl SteadyRun {
    /// Jobs/s over the windows after the first (the first still finds a freshly vacuumed table).
    pub(crate) fn steady_rate(&self) -> Option<f64> {
        let later = self.windows.get(1..).filter(|w| !w.is_empty())?;
        Some(later.iter().map(|w| w.sample.rate).sum::<f64>() / later.len() as f64)
    }
}

/// Rows the steady producer inserts at a time.
const STEADY_CHUNK: u64 = 500;

impl PgBench {
    /// [`SteadyRun`]: `windows` consecutive windows at `workers` on one table of `rows` ready
    /// rows, kept at that depth by a producer.
    pub(crate) fn steady_depth(
        &self,
        layout: Layout,
        rows: u64,
        workers: usize,
        windows: usize,
        claims: Claims,
    ) -> BenchResult<SteadyRun> {
        if claims == Claims::Cursor && layout.order != Order::Seq {
            return Err("the steady section's cursor claims in seq order".into());
        }
        let cursor = ClaimCursor::<BenchJobBySeq>::new(CURSOR_RESCAN)?;
        #[derive(QueryableByName)]
        struct Setting {
            #[diesel(sql_type = Text)]
            autovacuum_naptime: String,
        }
        self.fresh_layout(rows, layout)?;
        let mut conn = PgConnection::establish(&self.url)?;
        let autovacuum_naptime = diesel::sql_query("SHOW autovacuum_naptime")
            .get_result::<Setting>(&mut conn)?
            .autovacuum_naptime;
        let postmaster = postmaster_pid(&mut conn);
        let done = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let (windows, inserted) = std::thread::scope(|s| {
            let producer = s.spawn(|| -> BenchResult<u64> {
                let mut conn = PgConnection::establish(&self.url)?;
                let mut next = i64::try_from(rows)? + 1;
                let mut inserted = 0;
                while !stop.load(Ordering::Relaxed) {
                    if done.load(Ordering::Relaxed) < inserted + STEADY_CHUNK {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    let last = next + STEADY_CHUNK as i64 - 1;
                    diesel::sql_query(
                        "INSERT INTO bench_jobs (id, seq, status, payload) SELECT g, g, 'ready', \
                         'payload of job ' || g FROM generate_series($1::bigint, $2) AS g",
                    )
                    .bind::<BigInt, _>(next)
                    .bind::<BigInt, _>(last)
                    .execute(&mut conn)?;
                    next = last + 1;
                    inserted += STEADY_CHUNK;
                }
                Ok(inserted)
            });
            let run = (|| -> BenchResult<Vec<SteadyWindow>> {
                let mut out = Vec::with_capacity(windows);
                for _ in 0..windows {
                    let (_pool, mut conns) = self.connections(workers)?;
                    let backends: Option<Vec<u32>> =
                        postmaster.and_then(|_| conns.iter_mut().map(|c| backend_pid(c)).collect());
                    let backends = backends.unwrap_or_default();
                    let (cpu0, own0, av0) = (
                        postmaster.and_then(server_cpu_ticks),
                        backends_cpu_ticks(&backends),
                        autovacuums(&mut conn)?,
                    );
                    let before = done.load(Ordering::Relaxed);
                    let sample = measure::timed(conns, self.window, |conn| {
                        let n = match claims {
                            Claims::ClaimNext => job(conn, layout.order)?,
                            Claims::Cursor => cursor_job(conn, &cursor)?,
                        };
                        done.fetch_add(n, Ordering::Relaxed);
                        Ok(n)
                    })?;
                    let jobs = done.load(Ordering::Relaxed) - before;
                    let (cpu1, own1, av1) = (
                        postmaster.and_then(server_cpu_ticks),
                        backends_cpu_ticks(&backends),
                        autovacuums(&mut conn)?,
                    );
                    let per_job = |a: Option<u64>, b: Option<u64>| {
                        a.zip(b)
                            .filter(|_| jobs > 0)
                            .map(|(a, b)| measure::ticks_to_us(b.saturating_sub(a)) / jobs as f64)
                    };
                    out.push(SteadyWindow {
                        server_cpu_us_per_job: per_job(cpu0, cpu1),
                        claiming_backends_cpu_us_per_job: per_job(own0, own1)
                            .filter(|_| !backends.is_empty()),
                        autovacuums: av1 - av0,
                        pick_buffers_after: pick_cost(&mut conn, layout)?.0,
                        sample,
                    });
                }
                Ok(out)
            })();
            stop.store(true, Ordering::Relaxed);
            let inserted = producer
                .join()
                .map_err(|_| "the steady producer panicked")?;
            BenchResult::Ok((run?, inserted?))
        })?;
        Ok(SteadyRun {
            layout,
            ready_rows: rows,
            workers,
            claims,
            autovacuum_naptime,
            windows,
            inserted,
            ready_after: self.count_status("ready")?,
        })
    }
}

/// Prints the steady runs, a line per window.
pub(crate) fn print_steady(runs: &[SteadyRun]) {
    for run in runs {
        println!();
        println!(
            "steady: {} ready rows held (producer inserted {}, {} ready after), {} workers, {}, \
             {}, autovacuum_naptime {}",
            run.ready_rows,
            run.inserted,
            run.ready_after,
            run.workers,
            run.claims.name(),
            run.layout.name,
            run.autovacuum_naptime
        );
        for (k, w) in run.windows.iter().enumerate() {
            println!("{}", w.line(k));
        }
    }
}

/// The large depth against the small one, held over windows: jobs/s of the windows after the
/// first, median over rounds; one target for each way of claiming that ran.
pub(crate) fn steady_targets(runs: &[SteadyRun]) -> Vec<TargetCheck> {
    let median = |rows: u64, claims: Claims| {
        let mut rates: Vec<f64> = runs
            .iter()
            .filter(|r| r.ready_rows == rows && r.claims == claims)
            .filter_map(SteadyRun::steady_rate)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len() / 2).copied()
    };
    let mut sizes: Vec<u64> = runs.iter().map(|r| r.ready_rows).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let (Some(&small), Some(&large)) = (sizes.first(), sizes.last()) else {
        return Vec::new();
    };
    if small == large {
        return Vec::new();
    }
    [Claims::ClaimNext, Claims::Cursor]
        .into_iter()
        .filter(|c| runs.iter().any(|r| r.claims == *c))
        .map(|claims| {
            TargetCheck::at_least(
                &format!(
                    "steady depth: jobs/s at {large} / at {small} ready rows, held, {}",
                    claims.name()
                ),
                median(large, claims)
                    .zip(median(small, claims))
                    .map(|(a, b)| a / b),
                0.9,
                format!(
                    "{} + complete, 4 workers, windows after the first; autovacuum_naptime {}",
                    claims.name(),
                    runs[0].autovacuum_naptime
                ),
            )
        })
        .collect()
}

/// Autovacuum runs of the queue table so far (the statistics lag by up to a second).
fn autovacuums(conn: &mut PgConnection) -> BenchResult<i64> {
    #[derive(QueryableByName)]
    struct Runs {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    conn.batch_execute("SELECT pg_stat_clear_snapshot()")?;
    Ok(diesel::sql_query(
        "SELECT autovacuum_count AS n FROM pg_stat_user_tables WHERE relname = 'bench_jobs'",
    )
    .get_result::<Runs>(conn)?
    .n)
}

/// The postmaster's process id, when the server runs on this machine: the parent of this
/// connection's backend.
fn postmaster_pid(conn: &mut PgConnection) -> Option<u32> {
    parent_pid(&format!("/proc/{}/stat", backend_pid(conn)?))
}

/// The process id of `conn`'s server backend (`pg_backend_pid()`).
fn backend_pid(conn: &mut PgConnection) -> Option<u32> {
    #[derive(QueryableByName)]
    struct Pid {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        pid: i32,
    }
    let pid = diesel::sql_query("SELECT pg_backend_pid() AS pid")
        .get_result::<Pid>(conn)
        .ok()?
        .pid;
    u32::try_from(pid).ok()
}

/// CPU ticks of the server backends `pids` (all of them, or `None`: one has gone, or the server
/// is not on this machine).
fn backends_cpu_ticks(pids: &[u32]) -> Option<u64> {
    pids.iter()
        .map(|pid| measure::stat_cpu_ticks(&format!("/proc/{pid}/stat"), false))
        .sum()
}

/// Field 4 of a `/proc/<pid>/stat` file.
fn parent_pid(stat_path: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU ticks of the postmaster, of its exited children (waited for) and of its live ones.
fn server_cpu_ticks(postmaster: u32) -> Option<u64> {
    let stat = format!("/proc/{postmaster}/stat");
    let mut ticks = measure::stat_cpu_ticks(&stat, false)? + measure::stat_cpu_ticks(&stat, true)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let path = format!("/proc/{pid}/stat");
        if parent_pid(&path) == Some(postmaster) {
            ticks += measure::stat_cpu_ticks(&path, false).unwrap_or(0);
        }
    }
    Some(ticks)
}

/// CPU µs per job in each tenth of `total` jobs, reading the cumulative `ticks` of the samples
/// at the tenths' boundaries (linear between samples); empty without two samples or ticks.
fn cpu_per_job_tenths(
    samples: &[TableStats],
    total: u64,
    ticks: fn(&TableStats) -> i64,
) -> Vec<f64> {
    let points: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| ticks(s) >= 0)
        .map(|s| (s.jobs_done as f64, measure::ticks_to_us(ticks(s) as u64)))
        .collect();
    let at = |jobs: f64| -> Option<f64> {
        let i = points.iter().position(|(j, _)| *j >= jobs)?;
        if i == 0 {
            return Some(points[0].1);
        }
        let ((j0, c0), (j1, c1)) = (points[i - 1], points[i]);
        Some(if j1 > j0 {
            c0 + (c1 - c0) * (jobs - j0) / (j1 - j0)
        } else {
            c1
        })
    };
    (0..10)
        .map_while(|k| {
            let (a, b) = (
                total as f64 * k as f64 / 10.0,
                total as f64 * (k + 1) as f64 / 10.0,
            );
            Some((at(b)? - at(a)?) / (b - a))
        })
        .collect()
}

/// Shared buffers and execution time of one read-only pick (no lock: it takes nothing).
fn pick_cost(conn: &mut PgConnection, layout: Layout) -> BenchResult<(i64, f64)> {
    #[derive(QueryableByName)]
    struct Plan {
        #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
        json: String,
    }
    let sql = format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM bench_jobs \
         WHERE status = 'ready' ORDER BY {} LIMIT 1",
        layout.order_column()
    );
    let plan = diesel::sql_query(sql).get_result::<Plan>(conn)?;
    let v: serde_json::Value = serde_json::from_str(&plan.json)?;
    let top = &v[0];
    let blocks = |k: &str| top["Plan"][k].as_i64().unwrap_or(0);
    Ok((
        blocks("Shared Hit Blocks") + blocks("Shared Read Blocks"),
        top["Execution Time"].as_f64().unwrap_or(f64::NAN),
    ))
}

impl DepthRun {
    /// Prints the tenths and the sampler's first and last readings.
    pub(crate) fn print_summary(&self) {
        let tenths: Vec<String> = self
            .tenths_per_sec
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect();
        eprintln!(
            "  {:.1} s; jobs/s per tenth: {}; last/first {:.2}; {} done rows",
            self.secs,
            tenths.join(" "),
            self.ratio,
            self.done_rows
        );
        let us = |v: &[f64]| {
            v.iter()
                .map(|c| format!("{c:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        eprintln!(
            "  CPU µs per job per tenth: server {}; client {}",
            us(&self.server_cpu_us_per_job_tenths),
            us(&self.client_cpu_us_per_job_tenths)
        );
        for (when, s) in [
            ("first", self.samples.first()),
            ("last", self.samples.last()),
        ] {
            if let Some(s) = s {
                eprintln!(
                    "  {when:<5} sample at {:>6.1} s: {} dead rows, {} updates ({} HOT), \
                     {} autovacuums, heap {} pages, pkey {} pages, ready index {} pages, \
                     pick {} buffers {:.3} ms",
                    s.at_secs,
                    s.n_dead_tup,
                    s.n_tup_upd,
                    s.n_tup_hot_upd,
                    s.autovacuum_count,
                    s.heap_pages,
                    s.pkey_pages,
                    s.ready_index_pages,
                    s.pick_buffers,
                    s.pick_ms
                );
            }
        }
    }
}

/// Prints the depth runs and the small/large comparison.
pub(crate) fn print(depth: &[DepthRun], depth_sizes: &[DepthSize]) {
    for run in depth {
        println!();
        println!(
            "depth: {} consecutive jobs, {} workers, {}: {:.1} s; jobs/s per tenth:",
            run.jobs, run.workers, run.layout.name, run.secs
        );
        let tenths: Vec<String> = run
            .tenths_per_sec
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect();
        println!("  {}", tenths.join(" "));
        println!("  last/first = {:.2}", run.ratio);
    }
    if !depth_sizes.is_empty() {
        println!();
        println!(
            "{:<12} {:<44} {:<24} {:>8} {:>10} {:>9} {:>9} {:>12} {:>12} {:>6} {:>11}",
            "ready rows",
            "layout",
            "claims",
            "workers",
            "jobs/s",
            "p50 µs",
            "p99 µs",
            "client µs/op",
            "server µs/op",
            "vacuums",
            "pick after"
        );
        for d in depth_sizes {
            println!(
                "{:<12} {:<44} {:<24} {:>8} {:>10.0} {:>9.1} {:>9.1} {:>12} {:>12} {:>6} {:>11}",
                d.ready_rows,
                d.layout.name,
                d.claims.name(),
                d.workers,
                d.sample.rate,
                d.sample.p50_us,
                d.sample.p99_us,
                d.sample
                    .client_cpu_us_per_op
                    .map_or("-".to_owned(), |c| format!("{c:.1}")),
                d.server_cpu_us_per_job
                    .map_or("-".to_owned(), |c| format!("{c:.1}")),
                d.autovacuums,
                d.pick_buffers_after
            );
        }
    }
}

/// Issue 23's depth targets: last tenth at least 0.9x the first (the median run of each layout),
/// and the large table at least 0.9x the small one (medians of the rounds).
pub(crate) fn targets(depth: &[DepthRun], depth_sizes: &[DepthSize]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    let mut layouts: Vec<Layout> = Vec::new();
    for run in depth {
        if !layouts.contains(&run.layout) {
            layouts.push(run.layout);
        }
    }
    for layout in layouts {
        let mut runs: Vec<&DepthRun> = depth.iter().filter(|r| r.layout == layout).collect();
        runs.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
        let median = runs[runs.len() / 2];
        let detail = format!("4 workers, {}; median of {} runs", layout.name, runs.len());
        out.push(TargetCheck::at_least(
            &format!(
                "depth: last / first tenth of {} consecutive jobs",
                median.jobs
            ),
            Some(median.ratio),
            0.9,
            detail.clone(),
        ));
        let cpu = &median.server_cpu_us_per_job_tenths;
        out.push(TargetCheck::at_most(
            "depth: server CPU per job, last / first tenth (same run)",
            cpu.first().zip(cpu.last()).map(|(a, b)| b / a),
            1.0 / 0.9,
            format!("{detail}; vacuum included, hardly moved by other load"),
        ));
    }
    let median = |rows: u64, claims: Claims, of: &dyn Fn(&DepthSize) -> Option<f64>| {
        let mut values: Vec<f64> = depth_sizes
            .iter()
            .filter(|d| d.ready_rows == rows && d.claims == claims)
            .filter_map(of)
            .collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied()
    };
    let mut sizes: Vec<u64> = depth_sizes.iter().map(|d| d.ready_rows).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if let (Some(&small), Some(&large)) = (sizes.first(), sizes.last()) {
        for claims in [Claims::ClaimNext, Claims::Cursor] {
            if !depth_sizes.iter().any(|d| d.claims == claims) {
                continue;
            }
            let rate = |rows| median(rows, claims, &|d: &DepthSize| Some(d.sample.rate));
            out.push(TargetCheck::at_least(
                &format!(
                    "depth: jobs/s at {large} / at {small} ready rows, {}",
                    claims.name()
                ),
                rate(large).zip(rate(small)).map(|(a, b)| a / b),
                0.9,
                format!("{} + complete, 4 workers; target ~1.0", claims.name()),
            ));
            let cpu = |rows| median(rows, claims, &|d: &DepthSize| d.server_cpu_us_per_job);
            out.push(TargetCheck::at_most(
                &format!(
                    "depth: server CPU per job at {large} / at {small} ready rows, {}",
                    claims.name()
                ),
                cpu(large).zip(cpu(small)).map(|(a, b)| a / b),
                1.0 / 0.9,
                "vacuum included; hardly moved by other load".to_owned(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(jobs: i64, server_ticks: i64) -> TableStats {
        TableStats {
            at_secs: 0.0,
            n_live_tup: 0,
            n_dead_tup: 0,
            n_tup_upd: 0,
            n_tup_hot_upd: 0,
            autovacuum_count: 0,
            autoanalyze_count: 0,
            heap_pages: 0,
            pkey_pages: 0,
            ready_index_pages: 0,
            pick_buffers: 0,
            pick_ms: 0.0,
            jobs_done: jobs,
            server_cpu_ticks: server_ticks,
            client_cpu_ticks: -1,
        }
    }

    #[test]
    fn cpu_per_job_is_read_at_the_tenths_boundaries() {
        // 1,000 jobs; 1 tick (10 ms) per 100 jobs in the first half, 2 ticks in the second.
        let samples = [sample(0, 0), sample(500, 5), sample(1_000, 15)];
        let server = cpu_per_job_tenths(&samples, 1_000, |s| s.server_cpu_ticks);
        assert_eq!(server.len(), 10);
        assert!((server[0] - 100.0).abs() < 1e-9, "{server:?}");
        assert!((server[9] - 200.0).abs() < 1e-9, "{server:?}");
        // No client ticks known: no tenths.
        assert!(cpu_per_job_tenths(&samples, 1_000, |s| s.client_cpu_ticks).is_empty());
        // Samples that stop short of the total give the tenths they cover.
        assert_eq!(
            cpu_per_job_tenths(&samples[..2], 1_000, |s| s.server_cpu_ticks).len(),
            5
        );
    }

    #[test]
    fn parent_pid_reads_proc() {
        if std::path::Path::new("/proc/self/stat").exists() {
            assert_eq!(
                parent_pid("/proc/self/stat"),
                Some(std::os::unix::process::parent_id())
            );
        }
    }

    #[test]
    fn layouts_by_name() {
        assert_eq!(layouts(&[]).unwrap().len(), LAYOUTS.len());
        assert_eq!(
            layouts(&["recommended".to_owned()]).unwrap(),
            vec![RECOMMENDED]
        );
        assert!(layouts(&["nope".to_owned()]).is_err());
    }
}
