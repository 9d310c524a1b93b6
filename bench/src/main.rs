//! diesel-lease's benchmark program (issue 6).
//!
//! Measures, side by side in one run, `claim_next` and friends against the hand-written SQL they
//! replace, on a throwaway PostgreSQL it starts itself (or on `DATABASE_URL`) and on SQLite; and
//! end to end against a literal-SQL floor outside our code on each backend (issue 23: pgbench,
//! `mariadb-slap` on a throwaway MariaDB or `DIESEL_LEASE_BENCH_MYSQL`, a C program over
//! sqlite3; sections `e2e`, `e2e-mysql`, `e2e-sqlite`, see bench/NOTES-floors.md); prints
//! a table with the target ratios and writes `target/bench/results.json` and
//! `target/bench/claims_vs_workers.svg`. It asserts nothing: a missed target is reported, not an
//! error. See BENCHMARKS.md at the repository root.
//!
//! ```text
//! cargo run --release -p diesel-lease-bench --              # default run, a few minutes
//! cargo run --release -p diesel-lease-bench -- --smoke      # CI: well under a minute
//! cargo run --release -p diesel-lease-bench -- --scale      # adds 1M/5M-row runs: long
//! cargo run --release -p diesel-lease-bench -- --overhead   # the tracing/metrics cost alone
//! cargo run --release -p diesel-lease-bench -- --only depth,width  # issue 23: depth and width
//! cargo run --release -p diesel-lease-bench -- --only depth10m     # 10M ready rows: long fill
//! cargo run --release -p diesel-lease-bench -- --only steady --duration 20  # depths held
//! ```

mod coordination;
mod depth;
mod e2e;
mod floors;
mod holders;
mod idle;
mod instructions;
mod measure;
mod model;
mod mysql;
mod overhead;
mod pg;
mod plot;
mod report;
mod server;
mod sqlite;
mod target;
mod wake;
mod width;

use std::path::{Path, PathBuf};

use clap::Parser;

use measure::{Sample, Window};
use pg::{Autovacuum, Index, PgBench};
use report::{
    Consecutive, Machine, Measurement, PgInfo, Provenance, Report, ScalePoint, SemaphoreRun,
    TargetCheck,
};
use sqlite::SqliteBench;

/// Errors end the run with a message; the benchmark has no error handling beyond reporting.
pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Benchmark diesel-lease's claims against hand-written SQL, on PostgreSQL and SQLite.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Seconds each measurement counts, after its warm-up.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Seconds each measurement runs before counting.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// CI mode: tiny tables, 0.3 s per measurement, small scale section; well under a minute.
    #[arg(long)]
    smoke: bool,
    /// Only measures what an operation's span and metrics cost (no database), with no subscriber,
    /// with a subscriber that filters the spans out, and with one that formats them.
    #[arg(long)]
    overhead: bool,
    /// Adds the long scale runs: per-claim cost at 10k, 1M and 5M ready rows, 1M consecutive claims.
    #[arg(long)]
    scale: bool,
    /// Copies the SVG plot and results.json to docs/bench/.
    #[arg(long)]
    write_docs: bool,
    /// Ready rows in the queue table at the start of each claim measurement.
    #[arg(long)]
    rows: Option<u64>,
    /// Rounds of the claim and batch sections; each shape's median round is reported
    /// (default 3; 1 with --smoke).
    #[arg(long)]
    rounds: Option<usize>,
    /// Worker counts for the claim shapes.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    workers: Vec<usize>,
    /// Sections to run (default: all but the long depth, depth10m and steady, which run when
    /// named here or with --smoke, and instructions, which runs only when named): claim, batch,
    /// e2e, e2e-mysql, e2e-sqlite, guard, lease, semaphore, wake, scale, sqlite, depth,
    /// depth10m, steady, width, idle, holders, instructions.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Queue-table layouts of the depth section (default: all): before, recommended,
    /// server-defaults (see bench/src/depth.rs).
    #[arg(long, value_delimiter = ',')]
    depth_layouts: Vec<String>,
    /// Adds to `e2e-sqlite` a claim design diesel-lease does not use (keys in the write
    /// transaction, rows read after it; not a target, see BENCHMARKS.md).
    #[arg(long)]
    sqlite_keys_first: bool,
    /// Consecutive windows (each `--warmup` + `--duration`) of every `steady` run.
    #[arg(long, default_value_t = 4)]
    steady_windows: usize,
    /// Extra setting for the throwaway server, `name=value` (repeatable; overrides the defaults).
    #[arg(long = "pg-set", value_name = "NAME=VALUE")]
    pg_set: Vec<String>,
    /// Autovacuum options of the queue table.
    #[arg(long, value_enum, default_value = "tuned")]
    autovacuum: Autovacuum,
    /// Where PostgreSQL's initdb, pg_ctl and postgres live.
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin")]
    pg_bin: PathBuf,
    /// Output directory (default: target/bench in the workspace).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Internal: runs fang's WorkerPool with this many workers on DATABASE_URL until killed
    /// (the e2e section's child process).
    #[arg(long, hide = true)]
    fang_worker_pool: Option<u32>,
    /// Internal: one process of the width section's multi-process shape, with this many threads
    /// on DATABASE_URL (waits for `go` on stdin, prints its counts).
    #[arg(long, hide = true)]
    width_child: Option<usize>,
    /// Internal: the instructions section's child, `backend:n:model`: drains the table at
    /// DIESEL_LEASE_BENCH_URL (see bench/src/instructions.rs).
    #[arg(long, hide = true)]
    instructions_child: Option<String>,
}

/// Table sizes and counts for one mode of the program.
#[derive(Debug, Clone)]
struct Plan {
    window: Window,
    rounds: usize,
    rows: u64,
    batch_rows: u64,
    batch_workers: usize,
    scale_sizes: Vec<u64>,
    /// Per-claim cost: uncounted, then counted claims (at most a third of the smallest table).
    cost_warmup: u64,
    cost_claims: u64,
    /// Consecutive claims in `seq` order (partial index on `seq`): the target's run.
    consecutive: u64,
    /// Consecutive claims in id order (partial index on `id`): fewer, because the planner may
    /// walk the primary key over every claimed row (BENCHMARKS.md), which makes it slow.
    consecutive_id_order: u64,
    consecutive_no_index: u64,
    consecutive_workers: usize,
    sqlite_workers: Vec<usize>,
    /// Ready rows per single-job end-to-end measurement, and per batch one.
    e2e_rows: u64,
    e2e_batch_rows: u64,
    /// Consecutive jobs (claim + complete) of the end-to-end run.
    e2e_consecutive: u64,
    /// Issue 23: consecutive jobs per depth run, and how often its sampler reads the table.
    depth_jobs: u64,
    depth_sample_every: std::time::Duration,
    /// Issue 23: the small and the large table of `depth10m` and `steady`.
    depth_sizes: (u64, u64),
    /// Consecutive windows of each `steady` run.
    steady_windows: usize,
    /// Issue 23: threads in one process, and processes of 4 threads, of the width section.
    width_threads: Vec<usize>,
    width_processes: Vec<usize>,
}

impl Plan {
    fn new(args: &Args) -> Plan {
        let (window, rows, scale_sizes, consecutive, consecutive_no_index) = if args.smoke {
            (
                Window {
                    warmup_secs: 0.1,
                    measure_secs: 0.3,
                },
                20_000,
                vec![5_000, 20_000],
                5_000,
                1_000,
            )
        } else if args.scale {
            (
                window(args),
                200_000,
                vec![10_000, 1_000_000, 5_000_000],
                1_000_000,
                5_000,
            )
        } else {
            (window(args), 200_000, vec![10_000, 500_000], 100_000, 5_000)
        };
        let rows = args.rows.unwrap_or(rows);
        Plan {
            window,
            rounds: args.rounds.unwrap_or(if args.smoke { 1 } else { 3 }).max(1),
            rows,
            batch_rows: rows * 5,
            batch_workers: 2,
            cost_warmup: if args.smoke { 200 } else { 500 },
            cost_claims: if args.smoke { 1_000 } else { 3_000 },
            scale_sizes,
            consecutive,
            consecutive_id_order: if args.smoke {
                5_000
            } else if args.scale {
                50_000
            } else {
                20_000
            },
            consecutive_no_index,
            consecutive_workers: 4,
            sqlite_workers: vec![1, 2, 4],
            // pgbench runs whole seconds (at least one, even in a smoke run's 0.3 s window) and
            // fails when the table runs dry: on this VM it did 21,000 single and 97,000 batched
            // jobs in a second at K = 2.
            e2e_rows: if args.smoke { 100_000 } else { rows },
            e2e_batch_rows: if args.smoke { 400_000 } else { 2 * rows },
            e2e_consecutive: if args.smoke { 5_000 } else { 500_000 },
            depth_jobs: if args.smoke { 5_000 } else { 500_000 },
            depth_sample_every: std::time::Duration::from_millis(if args.smoke {
                200
            } else {
                1_000
            }),
            depth_sizes: if args.smoke {
                (10_000, 100_000)
            } else {
                (100_000, 10_000_000)
            },
            steady_windows: if args.smoke { 2 } else { args.steady_windows },
            width_threads: if args.smoke {
                vec![1, 8, 64]
            } else {
                vec![1, 2, 4, 8, 16, 32, 64]
            },
            width_processes: if args.smoke {
                vec![1, 2]
            } else {
                vec![1, 2, 4, 8]
            },
        }
    }
}

fn window(args: &Args) -> Window {
    Window {
        warmup_secs: args.warmup.max(0.0),
        measure_secs: args.duration.max(0.05),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("diesel-lease-bench: {e}");
        std::process::exit(1);
    }
}

/// Installs a Ctrl-C handler that stops and deletes the throwaway servers this run started, then
/// exits 130.
fn stop_on_ctrl_c() -> BenchResult<()> {
    ctrlc::set_handler(|| {
        eprintln!("\ninterrupted: stopping the throwaway PostgreSQL (and MariaDB)");
        mysql::stop_on_interrupt();
        server::stop_on_interrupt();
        std::process::exit(130);
    })?;
    Ok(())
}

fn run() -> BenchResult<()> {
    let args = Args::parse();
    if args.overhead {
        return overhead::run();
    }
    if let Some(workers) = args.fang_worker_pool {
        return e2e::run_fang_worker_pool(workers);
    }
    if let Some(threads) = args.width_child {
        return width::run_child(threads, window(&args));
    }
    if let Some(spec) = &args.instructions_child {
        return instructions::run_child(spec);
    }
    let plan = Plan::new(&args);
    stop_on_ctrl_c()?;

    let settings = server_settings(&args.pg_set)?;
    let (url, _server, source) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, None, "DATABASE_URL"),
        _ => {
            eprintln!(
                "starting a throwaway PostgreSQL from {}",
                args.pg_bin.display()
            );
            let server = server::TempPg::start(&args.pg_bin, &settings)?;
            (server.url.clone(), Some(server), "throwaway")
        }
    };
    let pg = PgBench {
        url,
        window: plan.window,
        autovacuum: args.autovacuum,
    };
    let mut report = Report {
        started_at: chrono::Utc::now().to_rfc3339(),
        provenance: Provenance::start(&workspace_root()),
        mode: if args.smoke {
            "smoke"
        } else if args.scale {
            "scale"
        } else {
            "default"
        },
        command: std::env::args().collect::<Vec<_>>().join(" "),
        window: plan.window,
        rounds: plan.rounds,
        ready_rows: plan.rows,
        machine: Machine::probe(),
        postgres: PgInfo {
            source,
            started_with: if source == "throwaway" {
                settings
            } else {
                Vec::new()
            },
            server: pg.server_facts()?,
            queue_table_autovacuum: args.autovacuum,
        },
        measurements: Vec::new(),
        scale: Vec::new(),
        consecutive: Vec::new(),
        depth: Vec::new(),
        depth_sizes: Vec::new(),
        steady: Vec::new(),
        semaphores: Vec::new(),
        idle: Vec::new(),
        holders: Vec::new(),
        floors: Vec::new(),
        instructions: Vec::new(),
        targets: Vec::new(),
        not_measured: Vec::new(),
        warnings: Vec::new(),
    };
    eprintln!("{}", report.postgres.server.version);

    let wants = |section: &str| args.only.is_empty() || args.only.iter().any(|s| s == section);
    if wants("claim") {
        claim_section(&pg, &plan, &args.workers, &mut report)?;
    }
    if wants("batch") {
        batch_section(&pg, &plan, &mut report)?;
    }
    if wants("e2e") {
        e2e_section(&pg, &plan, &args, &mut report)?;
    }
    if wants("e2e-mysql") {
        mysql_floors_section(&plan, &args, &mut report)?;
    }
    if wants("e2e-sqlite") {
        sqlite_floors_section(&plan, &args, &mut report)?;
    }
    if wants("guard") {
        guard_section(&pg, &plan, &mut report)?;
    }
    if wants("lease") {
        lease_section(&pg, &plan, &mut report)?;
    }
    if wants("semaphore") {
        semaphore_section(&pg, &plan, &mut report)?;
    }
    if wants("wake") {
        wake_section(&pg, &plan, &mut report)?;
    }
    if wants("scale") {
        scale_section(&pg, &plan, &mut report)?;
    }
    if wants("sqlite") {
        sqlite_section(&plan, &mut report)?;
    }
    if wants("idle") {
        idle_section(&args, &mut report)?;
    }
    if wants("holders") {
        holders_section(&pg, &args, &mut report)?;
    }
    // Minutes each outside --smoke: only when named.
    let long = |section: &str| args.only.iter().any(|s| s == section) || args.smoke;
    if long("depth") {
        depth_section(&pg, &plan, &args, &mut report)?;
    }
    if long("depth10m") {
        depth10m_section(&pg, &plan, &mut report)?;
    }
    if long("steady") {
        steady_section(&pg, &plan, &mut report)?;
    }
    if wants("width") {
        width_section(&pg, &plan, &mut report)?;
    }
    // Under valgrind, a few minutes: only when named.
    if args.only.iter().any(|s| s == "instructions") {
        let out = output_dir(&args).join("floor");
        match instructions::run(&pg, &args.pg_bin, &out)? {
            Some(counts) => report.instructions = counts,
            None => report
                .not_measured
                .push("instructions: valgrind is not installed".into()),
        }
    }
    pg.drop_tables()?;

    report.targets = targets(&report, &plan);
    report.provenance.finish();
    report.print();
    write_outputs(&report, &args)?;
    Ok(())
}

/// The throwaway server's settings: the defaults with `--pg-set` overrides applied.
fn server_settings(overrides: &[String]) -> BenchResult<Vec<(String, String)>> {
    let mut settings: Vec<(String, String)> = server::DEFAULT_SETTINGS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    for o in overrides {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| format!("--pg-set expects NAME=VALUE, got `{o}`"))?;
        let valid_name = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name || v.contains('\'') || v.contains('\n') {
            return Err(format!("--pg-set: refusing `{o}`").into());
        }
        settings.retain(|(name, _)| name != k);
        settings.push((k.to_owned(), v.to_owned()));
    }
    Ok(settings)
}

fn record(
    report: &mut Report,
    group: &'static str,
    name: &str,
    backend: &'static str,
    workers: usize,
    unit: &'static str,
    sample: Sample,
) {
    if !matches!(group, "claim" | "batch" | "width") {
        eprintln!(
            "  {group:<7} {name:<26} {workers:>3} workers: {:>9.0} {unit}  p50 {:.0} µs",
            sample.rate, sample.p50_us
        );
    }
    if sample.empty_ops > 0 && group != "lease" {
        report.warnings.push(format!(
            "{group} {name} at {workers} workers: the table ran dry ({} empty calls); raise --rows",
            sample.empty_ops
        ));
    }
    report.measurements.push(Measurement {
        group,
        name: name.to_owned(),
        backend,
        workers,
        unit,
        sample,
        round_rates: Vec::new(),
    });
}

/// Samples of several rounds, recorded as the median by rate once all rounds ran, with every
/// round's rate in run order (for the round-by-round ratios, `report::Paired`).
#[derive(Debug, Default)]
struct Rounds {
    runs: Vec<(&'static str, String, usize, &'static str, Vec<Sample>)>,
}

impl Rounds {
    fn add(
        &mut self,
        group: &'static str,
        name: &str,
        workers: usize,
        unit: &'static str,
        s: Sample,
    ) {
        eprintln!(
            "  {group:<7} {name:<26} {workers:>3} workers: {:>9.0} {unit}  p50 {:.0} µs",
            s.rate, s.p50_us
        );
        match self
            .runs
            .iter_mut()
            .find(|(g, n, w, _, _)| *g == group && n == name && *w == workers)
        {
            Some((_, _, _, _, samples)) => samples.push(s),
            None => self
                .runs
                .push((group, name.to_owned(), workers, unit, vec![s])),
        }
    }

    fn record_medians(self, report: &mut Report) {
        self.record_medians_on(report, "postgres");
    }

    fn record_medians_on(self, report: &mut Report, backend: &'static str) {
        for (group, name, workers, unit, mut samples) in self.runs {
            let round_rates: Vec<f64> = samples.iter().map(|s| s.rate).collect();
            samples.sort_by(|a, b| a.rate.total_cmp(&b.rate));
            let median = samples.swap_remove(samples.len() / 2);
            record(report, group, &name, backend, workers, unit, median);
            if round_rates.len() > 1 {
                if let Some(m) = report.measurements.last_mut() {
                    m.round_rates = round_rates;
                }
            }
        }
    }
}

/// 1-3: the floor, claim_next and the two-statement shape at each worker count, interleaved so
/// that drift of the shared machine hits every shape alike.
fn claim_section(
    pg: &PgBench,
    plan: &Plan,
    workers: &[usize],
    report: &mut Report,
) -> BenchResult<()> {
    eprintln!("claims: {} ready rows per measurement", plan.rows);
    let mut rounds = Rounds::default();
    for _ in 0..plan.rounds {
        for &w in workers {
            pg.fresh_jobs(plan.rows, Index::PartialReady)?;
            rounds.add(
                "claim",
                "raw (sql_query)",
                w,
                "claims/s",
                pg.raw_sql_query(w, 1)?,
            );
            pg.fresh_jobs(plan.rows, Index::PartialReady)?;
            rounds.add(
                "claim",
                "raw (prepared)",
                w,
                "claims/s",
                pg.raw_prepared(w, 1)?,
            );
            pg.fresh_jobs(plan.rows, Index::PartialReady)?;
            rounds.add("claim", "claim_next", w, "claims/s", pg.claim_next(w)?);
            pg.fresh_jobs(plan.rows, Index::PartialReady)?;
            rounds.add(
                "claim",
                "two-statement",
                w,
                "claims/s",
                pg.two_statement(w)?,
            );
        }
    }
    rounds.record_medians(report);
    Ok(())
}

/// 4: claim_batch(n) and the raw batch statement, rows/s.
fn batch_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let w = plan.batch_workers;
    eprintln!("batches: {} ready rows per measurement", plan.batch_rows);
    let mut rounds = Rounds::default();
    for _ in 0..plan.rounds {
        for n in [10_usize, 50, 100] {
            pg.fresh_jobs(plan.batch_rows, Index::PartialReady)?;
            let s = pg.claim_batch(w, n)?;
            rounds.add("batch", &format!("claim_batch({n})"), w, "rows/s", s);
        }
        pg.fresh_jobs(plan.batch_rows, Index::PartialReady)?;
        let s = pg.raw_sql_query(w, 50)?;
        rounds.add("batch", "raw batch(50) (sql_query)", w, "rows/s", s);
        pg.fresh_jobs(plan.batch_rows, Index::PartialReady)?;
        let s = pg.raw_prepared(w, 50)?;
        rounds.add("batch", "raw batch(50) (prepared)", w, "rows/s", s);
    }
    rounds.record_medians(report);
    Ok(())
}

/// Issue 12: jobs/s end to end (claim + complete) at 1, 2, 4, 8 workers against the pgbench
/// floor and fang, interleaved; then consecutive jobs, first against last tenth.
fn e2e_section(pg: &PgBench, plan: &Plan, args: &Args, report: &mut Report) -> BenchResult<()> {
    let workers: Vec<usize> = args.workers.iter().copied().filter(|w| *w <= 8).collect();
    // Ours' batches ran 100,000 jobs/s at K = 2 in session 8: 400,000 rows in a warm-up and
    // window of 4 s, which drained the table of `e2e_batch_rows` (3,408 empty claims in the
    // median round). Twice that leaves room to twice the rate.
    let batch_rows = if args.smoke {
        plan.e2e_batch_rows
    } else {
        2 * plan.e2e_batch_rows
    };
    eprintln!(
        "end to end: {} ready rows ({batch_rows} for batches) per measurement",
        plan.e2e_rows
    );
    pg.fresh_jobs(1_000, Index::PartialReady)?;
    let (next, batch) = floors::capture_statements(
        <diesel::PgConnection as diesel::Connection>::establish(&pg.url)?,
    )?;
    report.floors.push(floors::FloorRun {
        backend: "postgres",
        server: report.postgres.server.version.clone(),
        source: report.postgres.source,
        ours_next_statements: next,
        ours_batch_statements: batch,
        floor_next_script: e2e::pgbench_script(),
        floor_batch_script: e2e::pgbench_batch_script(),
        checks: Vec::new(),
    });
    let mut rounds = Rounds::default();
    let unit = "jobs/s";
    for round in 0..plan.rounds {
        for &w in &workers {
            for floor_now in floor_turns(round) {
                pg.fresh_jobs(plan.e2e_rows, Index::PartialReady)?;
                if floor_now {
                    let s = pg.pgbench_floor(&args.pg_bin, w)?;
                    rounds.add("e2e", e2e::PGBENCH, w, unit, s);
                } else {
                    rounds.add("e2e", e2e::CLAIM_NEXT, w, unit, pg.claim_next_complete(w)?);
                }
            }
            pg.fresh_fang_tasks(plan.e2e_rows)?;
            rounds.add("e2e", e2e::FANG, w, unit, pg.fang_fetch_remove(w)?);
            pg.fresh_fang_tasks(plan.e2e_rows)?;
            rounds.add("e2e", e2e::FANG_POOL, w, unit, pg.fang_worker_pool(w)?);
            for floor_now in floor_turns(round) {
                pg.fresh_jobs(batch_rows, Index::PartialReady)?;
                if floor_now {
                    let s = pg.pgbench_batch_floor(&args.pg_bin, w)?;
                    rounds.add("e2e", e2e::PGBENCH_BATCH, w, unit, s);
                } else {
                    let s = pg.batch_complete(w, 50, false)?;
                    rounds.add("e2e", e2e::BATCH, w, unit, s);
                }
            }
            pg.fresh_jobs(batch_rows, Index::PartialReady)?;
            rounds.add(
                "e2e",
                e2e::BATCH_EACH,
                w,
                unit,
                pg.batch_complete(w, 50, true)?,
            );
        }
    }
    rounds.record_medians(report);
    // The depth section's sampled run, in the layout this section's tables have: its tenths come
    // with the server's CPU per job and the queue table's autovacuum runs, so a slow tenth can be
    // told apart from a trend (issue 23, item 3).
    let layout = match pg.autovacuum {
        pg::Autovacuum::Tuned => depth::BEFORE,
        pg::Autovacuum::Default => depth::ID_SERVER_DEFAULTS,
    };
    let (total, w) = (plan.e2e_consecutive, 4);
    eprintln!(
        "end to end: {total} consecutive jobs, {w} workers, {}",
        layout.name
    );
    let run = pg.depth_run(layout, w, total, plan.depth_sample_every)?;
    run.print_summary();
    report.depth.push(run);
    Ok(())
}

/// Issue 23: the worker counts of the floors, the end-to-end ones (at most 8).
/// With `--smoke` and the default `--workers`, only 1 and 4 (the run stays short).
fn floor_workers(args: &Args) -> Vec<usize> {
    if args.smoke && args.workers == [1, 2, 4, 8, 16] {
        return vec![1, 4];
    }
    args.workers.iter().copied().filter(|w| *w <= 8).collect()
}

/// The order of ours and its floor in round `round` (`true`: the floor's turn): ours first in
/// even rounds, the floor first in odd ones, so that whatever the run before leaves behind (a
/// vacuum, a checkpoint, a warm cache) falls on each side equally often.
fn floor_turns(round: usize) -> [bool; 2] {
    let floor_first = round % 2 == 1;
    [floor_first, !floor_first]
}

/// Issue 23, MariaDB: ours against `mariadb-slap` running the same statements, single jobs and
/// batches of 50, interleaved per round, on a throwaway `mariadbd` (or `DIESEL_LEASE_BENCH_MYSQL`).
fn mysql_floors_section(plan: &Plan, args: &Args, report: &mut Report) -> BenchResult<()> {
    let (url, _server, source) = match std::env::var("DIESEL_LEASE_BENCH_MYSQL") {
        Ok(url) if !url.is_empty() => (url, None, "DIESEL_LEASE_BENCH_MYSQL"),
        _ => {
            eprintln!("starting a throwaway MariaDB");
            match mysql::TempMaria::start() {
                Ok(server) => (server.url.clone(), Some(server), "throwaway"),
                Err(e) if args.smoke => {
                    let note = format!("e2e-mysql skipped: MariaDB did not start ({e})");
                    eprintln!("NOTE: {note}");
                    report.not_measured.push(note);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    };
    let f = floors::MysqlFloors::new(url, plan.window)?;
    // Filling is slow on MariaDB (1,000 rows a statement); the smoke run's windows are short.
    let batch_rows = if args.smoke {
        40_000
    } else {
        plan.e2e_batch_rows
    };
    let server = f.version()?;
    eprintln!(
        "end to end on MariaDB {server}: {} ready rows ({batch_rows} for batches)",
        plan.e2e_rows
    );
    mysql::fresh_jobs(&f.url, 1_000)?;
    let (next, batch) = floors::capture_statements(
        <diesel::MysqlConnection as diesel::Connection>::establish(&f.url)?,
    )?;
    let mut run = floors::FloorRun {
        backend: "mysql",
        server,
        source,
        ours_next_statements: next,
        ours_batch_statements: batch,
        floor_next_script: floors::slap_next_script(),
        floor_batch_script: floors::slap_batch_script(),
        checks: Vec::new(),
    };
    let (group, unit, n) = ("e2e-mysql", "jobs/s", floors::BATCH_N);
    let mut rounds = Rounds::default();
    for round in 0..plan.rounds {
        for &w in &floor_workers(args) {
            for (rows, batch, ours, ours_mariadb, floor) in [
                (
                    plan.e2e_rows,
                    None,
                    e2e::CLAIM_NEXT,
                    floors::CLAIM_NEXT_MARIADB,
                    floors::SLAP,
                ),
                (
                    batch_rows,
                    Some(n),
                    e2e::BATCH,
                    floors::BATCH_MARIADB,
                    floors::SLAP_BATCH,
                ),
            ] {
                // The floor, ours through MysqlConnection and through MariadbConnection, in an
                // order that turns with the round.
                for turn in mysql_turns(round) {
                    let (name, (s, c)) = match turn {
                        0 => (floor, f.slap(rows, w, batch.is_some())?),
                        1 => (ours, f.ours(rows, w, batch, false)?),
                        _ => (ours_mariadb, f.ours(rows, w, batch, true)?),
                    };
                    rounds.add(group, name, w, unit, s);
                    run.checks.push(c);
                }
            }
        }
    }
    rounds.record_medians_on(report, "mysql");
    report.floors.push(run);
    Ok(())
}

/// The order of the MariaDB section's three contenders (0 the floor, 1 ours through
/// `MysqlConnection`, 2 through `MariadbConnection`) in round `round`: each goes first, second
/// and third in turn, so that none always runs on the warmest (or coldest) server.
fn mysql_turns(round: usize) -> [usize; 3] {
    let first = round % 3;
    [first, (first + 1) % 3, (first + 2) % 3]
}

/// Issue 23, SQLite: ours against K processes of the C floor running the same statements,
/// single jobs and batches of 50, interleaved per round, on a WAL database file.
fn sqlite_floors_section(plan: &Plan, args: &Args, report: &mut Report) -> BenchResult<()> {
    let out = output_dir(args).join("floor");
    let f = match floors::SqliteFloors::new(plan.window, &out) {
        Ok(f) => f,
        Err(e) if args.smoke => {
            let note = format!("e2e-sqlite skipped: {e}");
            eprintln!("NOTE: {note}");
            report.not_measured.push(note);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let server = f.version()?;
    // A batch of 50 runs fast on SQLite (the C floor measured 240,000 jobs/s on 2 cores): more
    // rows, so that no window runs dry (a dry floor process is an error).
    let batch_rows = if args.smoke {
        400_000
    } else {
        plan.e2e_batch_rows * 5
    };
    eprintln!(
        "end to end on SQLite {server}: {} ready rows ({batch_rows} for batches)",
        plan.e2e_rows
    );
    f.sq.fresh_jobs(1_000)?;
    let conn = f.sq.pool(1)?.get()?;
    let (next, batch) = floors::capture_statements(conn)?;
    let mut run = floors::FloorRun {
        backend: "sqlite",
        server,
        source: "temporary file",
        ours_next_statements: next,
        ours_batch_statements: batch,
        floor_next_script:
            "bench/floor/sqlite_floor.c with N = 1 (K processes, and one process of K threads)"
                .to_owned(),
        floor_batch_script:
            "bench/floor/sqlite_floor.c with N = 50 (K processes, and one process of K threads)"
                .to_owned(),
        checks: Vec::new(),
    };
    let (group, unit, n) = ("e2e-sqlite", "jobs/s", floors::BATCH_N);
    let mut rounds = Rounds::default();
    for round in 0..plan.rounds {
        for &w in &floor_workers(args) {
            for floor_now in floor_turns(round) {
                if !floor_now {
                    let (s, c) = f.ours::<model::BenchJob>(plan.e2e_rows, w, None)?;
                    rounds.add(group, e2e::CLAIM_NEXT, w, unit, s);
                    run.checks.push(c);
                    continue;
                }
                for (shape, name) in [
                    (floors::FloorShape::Processes, floors::C_FLOOR),
                    (floors::FloorShape::Threads, floors::C_FLOOR_THREADS),
                ] {
                    let (s, c) = f.floor(plan.e2e_rows, w, 1, shape)?;
                    rounds.add(group, name, w, unit, s);
                    run.checks.push(c);
                }
            }
            for floor_now in floor_turns(round) {
                if floor_now {
                    for (shape, name) in [
                        (floors::FloorShape::Processes, floors::C_BATCH),
                        (floors::FloorShape::Threads, floors::C_BATCH_THREADS),
                    ] {
                        let (s, c) = f.floor(batch_rows, w, n, shape)?;
                        rounds.add(group, name, w, unit, s);
                        run.checks.push(c);
                    }
                    continue;
                }
                let (s, c) = f.ours::<model::BenchJob>(batch_rows, w, Some(n))?;
                rounds.add(group, e2e::BATCH, w, unit, s);
                run.checks.push(c);
                if args.sqlite_keys_first {
                    let (s, c) = f.keys_first(batch_rows, w, n)?;
                    rounds.add(group, e2e::BATCH_KEYS_FIRST, w, unit, s);
                    run.checks.push(c);
                }
                // Not a target: what the model's claim time and payload cost a batch (the floor
                // only steps over its columns; ours builds each row as the model).
                let (s, c) = f.ours::<model::BenchJobNarrow>(batch_rows, w, Some(n))?;
                rounds.add(group, e2e::BATCH_NARROW, w, unit, s);
                run.checks.push(c);
            }
        }
    }
    rounds.record_medians_on(report, "sqlite");
    report.floors.push(run);
    Ok(())
}

/// 5: claim_if_null on distinct rows, one and eight workers.
fn guard_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    for w in [1_usize, 8] {
        pg.fresh_guards(plan.rows)?;
        let s = pg.guards(w)?;
        record(
            report,
            "guard",
            "claim_if_null(db_now)",
            "postgres",
            w,
            "guards/s",
            s,
        );
    }
    Ok(())
}

/// 5 (continued): lease try_acquire+release pairs: one worker alone, and 8 workers contending
/// for one name (each with its own owner identity), on PostgreSQL.
fn lease_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let pool = diesel_lease::pool::build_pool::<diesel::PgConnection>(&pg.url, 8)?;
    diesel_lease::run_migrations(&mut pool.get()?)?;
    let s = coordination::lease_pairs(&pool, "diesel-lease-bench-alone", 1, true, plan.window)?;
    record(
        report,
        "lease",
        "try_acquire+release",
        "postgres",
        1,
        "pairs/s",
        s,
    );
    let s = coordination::lease_pairs(&pool, "diesel-lease-bench-shared", 8, true, plan.window)?;
    record(
        report,
        "lease",
        "try+release, shared name",
        "postgres",
        8,
        "pairs/s",
        s,
    );
    Ok(())
}

/// 5 (continued): a one-permit semaphore with 16 contenders: cycles/s and release->grant
/// latency, on PostgreSQL (waiters LISTEN) and on SQLite (waiters poll).
/// Insert-to-claim latency with 8 idle `claim_next_wait` workers (issue 13).
fn wake_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let rows = if plan.window.measure_secs < 1.0 {
        50
    } else {
        500
    };
    let sample = wake::insert_to_claim(&pg.url, rows)?;
    eprintln!(
        "  wake    insert -> claim, {} idle workers: p50 {:.2} ms, p99 {:.2} ms over {} rows",
        wake::WAITERS,
        sample.p50_us / 1000.0,
        sample.p99_us / 1000.0,
        sample.items
    );
    record(
        report,
        "wake",
        "insert -> claim_next_wait",
        "postgres",
        wake::WAITERS,
        "rows/s",
        sample,
    );
    Ok(())
}

fn semaphore_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let contenders = 16;
    {
        let pool = diesel_lease::pool::build_pool::<diesel::PgConnection>(
            &pg.url,
            u32::try_from(contenders)?,
        )?;
        diesel_lease::run_migrations(&mut pool.get()?)?;
        let (sample, handoff) =
            coordination::mutex_cycles(&pool, "diesel-lease-bench", contenders, plan.window)?;
        report.semaphores.push(SemaphoreRun {
            backend: "postgres",
            listen_notify: true,
            permits: 1,
            contenders,
            sample,
            handoff,
        });
    }
    let sq = SqliteBench::new(plan.window)?;
    let pool = sq.pool(u32::try_from(contenders)?)?;
    diesel_lease::run_migrations(&mut pool.get()?)?;
    let (sample, handoff) =
        coordination::mutex_cycles(&pool, "diesel-lease-bench", contenders, plan.window)?;
    report.semaphores.push(SemaphoreRun {
        backend: "sqlite",
        listen_notify: false,
        permits: 1,
        contenders,
        sample,
        handoff,
    });
    report.not_measured.push(
        "semaphore hand-off on PostgreSQL without LISTEN/NOTIFY: the API has no switch for it; \
         SQLite (polling only) is the comparison"
            .to_owned(),
    );
    for s in &report.semaphores {
        eprintln!(
            "  semaphore {:<8} {contenders} contenders: {:.0} cycles/s, release->grant p50 {:.2} ms",
            s.backend, s.handoff.grants_per_sec, s.handoff.p50_ms
        );
    }
    Ok(())
}

/// 6: per-claim cost against table size, and throughput over many consecutive claims.
fn scale_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    for &rows in &plan.scale_sizes {
        eprintln!("scale: filling {rows} ready rows");
        pg.fresh_jobs(rows, Index::PartialReady)?;
        let s = pg.claim_cost(plan.cost_warmup, plan.cost_claims)?;
        eprintln!(
            "  {rows} rows: p50 {:.1} µs, {:.0} claims/s",
            s.p50_us, s.rate
        );
        report.scale.push(ScalePoint {
            ready_rows: rows,
            index: Index::PartialReady,
            mean_us: 1e6 / s.rate.max(1e-9),
            sample: s,
        });
    }
    for (claims, index) in [
        (plan.consecutive_id_order, Index::PartialReady),
        (plan.consecutive, Index::PartialReadySeq),
        (plan.consecutive_no_index, Index::PkOnly),
    ] {
        let w = plan.consecutive_workers;
        eprintln!("scale: {claims} consecutive claims, {w} workers, {index:?}");
        // A tenth more rows than claims, so the last claims still find ready rows.
        pg.fresh_jobs(claims + claims / 10 + 1_000, index)?;
        let t = std::time::Instant::now();
        let tenths = pg.consecutive(w, claims, index)?;
        let secs = t.elapsed().as_secs_f64();
        let first = tenths.first().copied().unwrap_or(f64::NAN);
        let last = tenths.last().copied().unwrap_or(f64::NAN);
        eprintln!("  {secs:.1} s, first tenth {first:.0}/s, last tenth {last:.0}/s");
        report.consecutive.push(Consecutive {
            shape: "claim_next",
            claims,
            workers: w,
            index,
            autovacuum: pg.autovacuum,
            tenths_per_sec: tenths,
            first_tenth: first,
            last_tenth: last,
            ratio: last / first,
            secs,
            vacuum_after: pg.vacuum_stats().ok(),
        });
    }
    Ok(())
}

/// Issue 23, item 3: consecutive jobs in each layout of [`depth::LAYOUTS`], interleaved over the
/// rounds, with the table's statistics sampled during each run.
fn depth_section(pg: &PgBench, plan: &Plan, args: &Args, report: &mut Report) -> BenchResult<()> {
    let (jobs, w) = (plan.depth_jobs, 4);
    let layouts = depth::layouts(&args.depth_layouts)?;
    for round in 0..plan.rounds {
        for &layout in &layouts {
            eprintln!(
                "depth: {jobs} consecutive jobs, {w} workers, {} (round {})",
                layout.name,
                round + 1
            );
            let run = pg.depth_run(layout, w, jobs, plan.depth_sample_every)?;
            run.print_summary();
            report.depth.push(run);
        }
    }
    Ok(())
}

/// Issue 23, item 3: `claim_next` + `complete`, and the same through a `ClaimCursor`, at 4 workers
/// on the small and the large table, each freshly filled.
fn depth10m_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let layout = depth::RECOMMENDED;
    let (small, large) = plan.depth_sizes;
    for round in 0..plan.rounds {
        for rows in [small, large] {
            for claims in [depth::Claims::ClaimNext, depth::Claims::Cursor] {
                eprintln!(
                    "depth10m: {rows} ready rows, 4 workers, {}, {} (round {})",
                    claims.name(),
                    layout.name,
                    round + 1
                );
                let size = pg.depth_size(layout, rows, 4, claims)?;
                eprintln!(
                    "  fill {:.1} s; {:.0} jobs/s, p50 {:.0} µs, server CPU {} µs/job, {} autovacuums, \
                     pick {} buffers after",
                    size.fill_secs,
                    size.sample.rate,
                    size.sample.p50_us,
                    size.server_cpu_us_per_job
                        .map_or("-".to_owned(), |c| format!("{c:.0}")),
                    size.autovacuums,
                    size.pick_buffers_after
                );
                report.depth_sizes.push(size);
            }
        }
    }
    Ok(())
}

/// Issue 23, item 3 held over time: the depth10m sizes kept at their depth by a producer, over
/// `plan.steady_windows` consecutive windows each, sizes alternating per round, each size claimed
/// with `claim_next` and through a `ClaimCursor`.
fn steady_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let layout = depth::RECOMMENDED;
    let (small, large) = plan.depth_sizes;
    for round in 0..plan.rounds {
        for rows in [small, large] {
            for claims in [depth::Claims::ClaimNext, depth::Claims::Cursor] {
                eprintln!(
                    "steady: {rows} ready rows held, 4 workers, {} windows, {}, {} (round {})",
                    plan.steady_windows,
                    claims.name(),
                    layout.name,
                    round + 1
                );
                let run = pg.steady_depth(layout, rows, 4, plan.steady_windows, claims)?;
                for (k, w) in run.windows.iter().enumerate() {
                    eprintln!("{}", w.line(k));
                }
                report.steady.push(run);
            }
        }
    }
    Ok(())
}

/// Issue 23, item 4: jobs/s against threads in one process and against processes of 4 threads.
fn width_section(pg: &PgBench, plan: &Plan, report: &mut Report) -> BenchResult<()> {
    eprintln!("width: {} ready rows per measurement", plan.rows);
    let mut rounds = Rounds::default();
    for _ in 0..plan.rounds {
        for &t in &plan.width_threads {
            pg.fresh_layout(plan.rows, width::LAYOUT)?;
            rounds.add("width", width::THREADS, t, "jobs/s", pg.width_threads(t)?);
        }
        for &p in &plan.width_processes {
            pg.fresh_layout(plan.rows, width::LAYOUT)?;
            let s = pg.width_processes(p)?;
            rounds.add(
                "width",
                width::PROCESSES,
                p * width::THREADS_PER_PROCESS,
                "jobs/s",
                s,
            );
        }
    }
    rounds.record_medians(report);
    Ok(())
}

/// 7: claim_next on SQLite (file, WAL).
fn sqlite_section(plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let sq = SqliteBench::new(plan.window)?;
    for &w in &plan.sqlite_workers {
        sq.fresh_jobs(plan.rows)?;
        let s = sq.claim_next(w)?;
        record(report, "sqlite", "claim_next", "sqlite", w, "claims/s", s);
    }
    Ok(())
}

/// MariaDB for `section`: `DIESEL_LEASE_BENCH_MYSQL`, else a throwaway server (kept alive by
/// the second value); `None` with a note in the report when none starts.
fn mariadb_for(section: &str, report: &mut Report) -> (Option<String>, Option<mysql::TempMaria>) {
    match std::env::var("DIESEL_LEASE_BENCH_MYSQL") {
        Ok(url) if !url.is_empty() => (Some(url), None),
        _ => match mysql::TempMaria::start() {
            Ok(server) => (Some(server.url.clone()), Some(server)),
            Err(e) => {
                let note = format!("{section} on MariaDB skipped: MariaDB did not start ({e})");
                eprintln!("NOTE: {note}");
                report.not_measured.push(note);
                (None, None)
            }
        },
    }
}

/// Issue 55 item 4: kept-alive lease guards, permits and claim guards in one process, 10 to
/// 1,000 of each on SQLite and MariaDB, up to 10,000 on PostgreSQL, through a pool of 10.
fn holders_section(pg: &PgBench, args: &Args, report: &mut Report) -> BenchResult<()> {
    let (sizes, secs): (&[usize], f64) = if args.smoke {
        (&[10], 1.0)
    } else {
        (&[10, 100, 1000], 6.0)
    };
    let mut pg_sizes = sizes.to_vec();
    if !args.smoke {
        pg_sizes.push(10_000);
    }
    report.holders.extend(holders::run::<diesel::PgConnection>(
        &pg.url, &pg_sizes, secs,
    )?);
    let dir = tempfile::Builder::new()
        .prefix("diesel-lease-bench-holders-")
        .tempdir()?;
    let sqlite = dir.path().join("holders.db").display().to_string();
    report
        .holders
        .extend(holders::run::<diesel::SqliteConnection>(
            &sqlite, sizes, secs,
        )?);
    let (url, _server) = mariadb_for("holders", report);
    if let Some(url) = url {
        report
            .holders
            .extend(holders::run::<diesel::MysqlConnection>(&url, sizes, secs)?);
    }
    Ok(())
}

/// Issue 23 item 2: 1,000 idle claim waiters and 1,000 idle semaphore waiters on SQLite and on
/// MariaDB (a throwaway `mariadbd`, or `DIESEL_LEASE_BENCH_MYSQL`): statements per second, and
/// the insert-to-claim latency against half the poll interval.
fn idle_section(args: &Args, report: &mut Report) -> BenchResult<()> {
    let (waiters, secs, rows) = if args.smoke {
        (50, 2.0, 3)
    } else {
        (1000, 10.0, 30)
    };
    let dir = tempfile::Builder::new()
        .prefix("diesel-lease-bench-idle-")
        .tempdir()?;
    let sqlite = dir.path().join("idle.db").display().to_string();
    let mut runs = vec![idle::run::<diesel::SqliteConnection>(
        &sqlite, waiters, secs, rows,
    )?];
    let (url, _server) = mariadb_for("idle", report);
    if let Some(url) = url {
        runs.push(idle::run::<diesel::MysqlConnection>(
            &url, waiters, secs, rows,
        )?);
    }
    for run in &runs {
        eprintln!(
            "  idle    {}: {} claim waiters {:.1} statements/s, {} semaphore waiters {:.1} \
             statements/s; insert -> claim p50 {:.0} ms, p99 {:.0} ms over {} rows (target p50 <= {:.0} ms)",
            run.backend,
            run.claim_waiters,
            run.claim_statements_per_sec,
            run.semaphore_waiters,
            run.semaphore_statements_per_sec,
            run.p50_ms,
            run.p99_ms,
            run.rows,
            run.target_p50_ms
        );
    }
    report.idle.extend(runs);
    Ok(())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The targets of issue 6 as ratios of this run's numbers.
fn targets(r: &Report, plan: &Plan) -> Vec<TargetCheck> {
    let w = 8;
    let next = r.rate("claim", "claim_next", w);
    let raw = r.rate("claim", "raw (sql_query)", w);
    let raw_prep = r.rate("claim", "raw (prepared)", w);
    let two = r.rate("claim", "two-statement", w);
    let bw = plan.batch_workers;
    let batch = r.rate("batch", "claim_batch(50)", bw);
    let raw_batch = r.rate("batch", "raw batch(50) (sql_query)", bw);
    let raw_batch_prep = r.rate("batch", "raw batch(50) (prepared)", bw);
    let mut out = vec![
        TargetCheck::at_least(
            "claim_next / raw one-statement SQL (sql_query), 8 workers",
            ratio(next, raw),
            0.9,
            String::new(),
        ),
        TargetCheck::at_least(
            "claim_next / raw one-statement SQL (prepared), 8 workers",
            ratio(next, raw_prep),
            0.9,
            "stricter floor: the same text, prepared once".to_owned(),
        ),
        TargetCheck::at_least(
            "claim_next / two-statement shape, 8 workers",
            ratio(next, two),
            1.4,
            String::new(),
        ),
        TargetCheck::at_least(
            "claim_batch(50) / raw batch statement (sql_query), rows/s",
            ratio(batch, raw_batch),
            0.9,
            format!("{bw} workers"),
        ),
        TargetCheck::at_least(
            "claim_batch(50) / raw batch statement (prepared), rows/s",
            ratio(batch, raw_batch_prep),
            0.9,
            format!("{bw} workers"),
        ),
    ];
    let small = r.scale.first();
    let large = r.scale.last().filter(|_| r.scale.len() > 1);
    let (label, cost) = match (small, large) {
        (Some(s), Some(l)) => (
            format!(
                "per-claim cost (p50) at {} / at {} ready rows",
                human(l.ready_rows),
                human(s.ready_rows)
            ),
            ratio(Some(l.sample.p50_us), Some(s.sample.p50_us)),
        ),
        _ => ("per-claim cost at 5M / at 10k ready rows".to_owned(), None),
    };
    let detail = if large.is_some_and(|l| l.ready_rows < 5_000_000) {
        "smaller than 5M: run with --scale for the target's sizes".to_owned()
    } else {
        String::new()
    };
    out.push(TargetCheck::at_most(&label, cost, 1.25, detail));
    let wake = r
        .measurements
        .iter()
        .find(|m| m.group == "wake")
        .map(|m| (m.sample.p50_us, m.sample.p99_us));
    out.push(TargetCheck::at_most(
        "insert-to-claim latency p50 (ms), 8 idle workers, LISTEN/NOTIFY",
        wake.map(|(p50, _)| p50 / 1000.0),
        5.0,
        String::new(),
    ));
    out.push(TargetCheck::at_most(
        "insert-to-claim latency p99 (ms), 8 idle workers, LISTEN/NOTIFY",
        wake.map(|(_, p99)| p99 / 1000.0),
        25.0,
        String::new(),
    ));
    for (index, how) in [
        (
            Index::PartialReady,
            "claimed in id order, partial index on (id)",
        ),
        (
            Index::PartialReadySeq,
            "claimed in seq order, partial index on (seq)",
        ),
    ] {
        let run = r
            .consecutive
            .iter()
            .find(|c| c.index == index && c.shape == "claim_next");
        let mut detail = how.to_owned();
        if run.is_some_and(|c| c.claims < 1_000_000) {
            detail.push_str("; fewer than 1M: run with --scale for the target's count");
        }
        out.push(TargetCheck::at_least(
            &run.map_or("last / first tenth of consecutive claims".to_owned(), |c| {
                format!(
                    "last / first tenth of {} consecutive claims",
                    human(c.claims)
                )
            }),
            run.map(|c| c.ratio),
            0.8,
            detail,
        ));
    }
    out.extend(e2e_targets(r));
    out.extend(depth::targets(&r.depth, &r.depth_sizes));
    out.extend(depth::steady_targets(&r.steady));
    out.extend(floor_targets(r));
    let pg_sem = r
        .semaphores
        .iter()
        .find(|s| s.backend == "postgres" && s.listen_notify);
    out.push(TargetCheck::at_most(
        "semaphore release->grant p50 on PostgreSQL with LISTEN/NOTIFY (ms)",
        pg_sem.map(|s| s.handoff.p50_ms),
        10.0,
        pg_sem
            .map(|s| {
                format!(
                    "{} contenders, one permit; value in ms, not a ratio",
                    s.contenders
                )
            })
            .unwrap_or_default(),
    ));
    out
}

/// Issue 12's targets, as ratios of jobs/s in one run.
fn e2e_targets(r: &Report) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    let e2e = |name: &str, w: usize| r.rate("e2e", name, w);
    let measured: Vec<usize> = {
        let mut w: Vec<usize> = r
            .measurements
            .iter()
            .filter(|m| m.group == "e2e")
            .map(|m| m.workers)
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    };
    for w in measured {
        let next = e2e(e2e::CLAIM_NEXT, w);
        let floor = e2e(e2e::PGBENCH, w);
        let batch = e2e(e2e::BATCH, w);
        let detail = format!("{w} workers");
        out.push(TargetCheck::at_least(
            &format!("e2e: claim_next + complete / pgbench literal floor, {w} workers"),
            ratio(next, floor),
            0.9,
            paired_detail(r, "e2e", e2e::CLAIM_NEXT, e2e::PGBENCH, w, 0.9),
        ));
        out.push(TargetCheck::at_least(
            &format!("e2e: claim_batch(50) + complete_batch / + 50 x complete, {w} workers"),
            ratio(batch, e2e(e2e::BATCH_EACH, w)),
            1.5,
            String::new(),
        ));
        out.push(TargetCheck::at_least(
            &format!(
                "e2e: claim_batch(50) + complete_batch / pgbench single-job floor, {w} workers"
            ),
            ratio(batch, floor),
            3.0,
            String::new(),
        ));
        out.push(TargetCheck::at_least(
            &format!("e2e: claim_next + complete / fang fetch+remove, {w} workers"),
            ratio(next, e2e(e2e::FANG, w)),
            2.0,
            detail.clone(),
        ));
        out.push(TargetCheck::at_least(
            &format!("e2e: claim_next + complete / fang WorkerPool, {w} workers"),
            ratio(next, e2e(e2e::FANG_POOL, w)),
            2.0,
            detail,
        ));
    }
    out
}

/// The round-by-round view of a floor target whose verdict is the ratio of the two medians: the
/// median and range of the rounds' own ratios (`""` with one round).
fn paired_detail(r: &Report, group: &str, ours: &str, floor: &str, w: usize, min: f64) -> String {
    r.paired(group, ours, floor, w)
        .map_or_else(String::new, |p| p.describe(min))
}

/// Issue 23's targets: ours over the literal floor on each backend, per worker count. The
/// verdict is the ratio of the two shapes' median rounds, as since the targets were set; the
/// detail adds the rounds' own ratios (`paired_detail`), which say whether one run can tell.
fn floor_targets(r: &Report) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for (group, backend, floor, batch_floor, min) in [
        ("e2e", "PostgreSQL", e2e::PGBENCH, e2e::PGBENCH_BATCH, 0.9),
        (
            "e2e-mysql",
            "MariaDB",
            floors::SLAP,
            floors::SLAP_BATCH,
            0.8,
        ),
        (
            "e2e-sqlite",
            "SQLite",
            floors::C_FLOOR,
            floors::C_BATCH,
            0.9,
        ),
    ] {
        let mut workers: Vec<usize> = r
            .measurements
            .iter()
            .filter(|m| m.group == group && m.name == batch_floor)
            .map(|m| m.workers)
            .collect();
        workers.sort_unstable();
        workers.dedup();
        for w in workers {
            let rate = |name: &str| r.rate(group, name, w);
            if group != "e2e" {
                // PostgreSQL's single-job floor target is in e2e_targets already.
                out.push(TargetCheck::at_least(
                    &format!("{backend}: claim_next + complete / literal floor, {w} workers"),
                    ratio(rate(e2e::CLAIM_NEXT), rate(floor)),
                    min,
                    paired_detail(r, group, e2e::CLAIM_NEXT, floor, w, min),
                ));
            }
            out.push(TargetCheck::at_least(
                &format!("{backend}: claim_batch(50) + complete_batch / batch floor, {w} workers"),
                ratio(rate(e2e::BATCH), rate(batch_floor)),
                0.9,
                paired_detail(r, group, e2e::BATCH, batch_floor, w, 0.9),
            ));
            if group == "e2e-mysql" {
                // The same targets through Diesel's MariadbConnection.
                for (ours, against, name, min) in [
                    (
                        floors::CLAIM_NEXT_MARIADB,
                        floor,
                        "claim_next + complete / literal floor",
                        min,
                    ),
                    (
                        floors::BATCH_MARIADB,
                        batch_floor,
                        "claim_batch(50) + complete_batch / batch floor",
                        0.9,
                    ),
                ] {
                    out.push(TargetCheck::at_least(
                        &format!("{backend} (MariadbConnection): {name}, {w} workers"),
                        ratio(rate(ours), rate(against)),
                        min,
                        paired_detail(r, group, ours, against, w, min),
                    ));
                }
            }
        }
    }
    out
}

fn human(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}k", n / 1_000)
    } else {
        n.to_string()
    }
}

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_owned()
}

/// `--out`, or target/bench in the workspace.
fn output_dir(args: &Args) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| workspace_root().join("target/bench"))
}

fn write_outputs(report: &Report, args: &Args) -> BenchResult<()> {
    let root = workspace_root();
    let out = output_dir(args);
    std::fs::create_dir_all(&out)?;
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(out.join("results.json"), &json)?;
    // `--only` runs are named after their sections, so they never replace a full run's file.
    let name = if args.only.is_empty() {
        report.mode.to_owned()
    } else {
        args.only.join("-")
    };
    std::fs::write(out.join(format!("results-{name}.json")), &json)?;
    let svg = out.join("claims_vs_workers.svg");
    let plotted = report.measurements.iter().any(|m| m.unit == "claims/s");
    if plotted {
        plot::claims_vs_workers(report, &svg)?;
    }
    let width_svg = out.join("width_jobs_vs_workers.svg");
    let width_plotted = report.measurements.iter().any(|m| m.group == "width");
    if width_plotted {
        plot::width(report, &width_svg)?;
    }
    let e2e_svg = out.join("jobs_vs_workers.svg");
    let e2e_plotted = report.measurements.iter().any(|m| m.group == "e2e");
    if e2e_plotted {
        plot::jobs_vs_workers(report, &e2e_svg)?;
    }
    eprintln!("wrote {}", out.join("results.json").display());
    if args.write_docs {
        let docs = root.join("docs/bench");
        std::fs::create_dir_all(&docs)?;
        if plotted {
            std::fs::copy(&svg, docs.join("claims_vs_workers.svg"))?;
        }
        if e2e_plotted {
            std::fs::copy(&e2e_svg, docs.join("jobs_vs_workers.svg"))?;
        }
        if width_plotted {
            std::fs::copy(&width_svg, docs.join("width_jobs_vs_workers.svg"))?;
        }
        std::fs::write(docs.join(format!("results-{name}.json")), &json)?;
        eprintln!("copied the plot and results to {}", docs.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_set_overrides_defaults_and_refuses_quotes() {
        let s = server_settings(&["synchronous_commit=on".to_owned()]).unwrap();
        assert!(s.contains(&("synchronous_commit".to_owned(), "on".to_owned())));
        assert_eq!(
            s.iter().filter(|(k, _)| k == "synchronous_commit").count(),
            1
        );
        assert!(server_settings(&["work_mem='1GB".to_owned()]).is_err());
        assert!(server_settings(&["no equals sign".to_owned()]).is_err());
        assert!(server_settings(&["bad name=1".to_owned()]).is_err());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(5_000_000), "5M");
        assert_eq!(human(10_000), "10k");
        assert_eq!(human(1_234), "1234");
    }
}
