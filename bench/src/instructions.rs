//! Client instructions per job, ours against the floors, counted by callgrind (section
//! `instructions`; issue 23, item 1's profile of the client's share).
//!
//! Each program runs under `valgrind --tool=callgrind` twice on one connection: draining a table
//! of `jobs` ready rows, then one of `base` rows (one call's worth). The difference in the
//! instructions it executed, over `jobs - base`, is what one job costs the client in user space,
//! start-up (linking, connecting, preparing statements) left out. A count, not a time: the
//! machine's load does not move it, so two commits, or ours and a floor, compare exactly, where
//! the end-to-end rates on this 2-core VM move by 10 % from run to run. PostgreSQL's own work is
//! not in it (the server is another process); SQLite's engine is, on both sides.
//!
//! Ours is this program re-run as a child (`--instructions-child`), claiming with `BenchJob` (the
//! end-to-end sections' model) or, on SQLite, also the narrower `BenchJobNarrow`; the floors are
//! pgbench with the end-to-end scripts and the SQLite C floor (`bench/floor/sqlite_floor.c`).

use std::path::Path;
use std::process::{Command, Stdio};

use diesel::prelude::*;
use diesel_lease::BorrowConnection;
use serde::Serialize;

use crate::floors::SqliteFloors;
use crate::model::{BenchJob, BenchJobNarrow};
use crate::pg::{Index, PgBench};
use crate::BenchResult;

/// Jobs each measured run drains (PostgreSQL's single jobs cost a round trip each under
/// valgrind, about 1 ms).
const PG_JOBS: u64 = 2_000;
/// Jobs of the batch and SQLite runs.
const BATCH_JOBS: u64 = 20_000;

/// One shape's count.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Count {
    pub(crate) backend: &'static str,
    /// `claim_next + complete` or `claim_batch(50) + complete_batch`, and the model.
    pub(crate) shape: String,
    /// Jobs drained in the measured run and in the start-up run.
    pub(crate) jobs: u64,
    pub(crate) base: u64,
    /// User-space instructions per job.
    pub(crate) ours: f64,
    pub(crate) floor: f64,
    /// What the floor is.
    pub(crate) floor_is: &'static str,
}

/// Runs the section: PostgreSQL single jobs and batches against pgbench, SQLite's against the C
/// floor. Returns nothing when valgrind is not installed (the caller notes it as not measured).
pub(crate) fn run(pg: &PgBench, pg_bin: &Path, out: &Path) -> BenchResult<Option<Vec<Count>>> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        return Ok(None);
    }
    let dir = tempfile::tempdir()?;
    let mut counts = Vec::new();
    let pgbench = pg_bin.join("pgbench");
    for (n, jobs, script) in [
        (1, PG_JOBS, crate::e2e::pgbench_script()),
        (50, BATCH_JOBS, crate::e2e::pgbench_batch_script()),
    ] {
        let ours = per_job(jobs, n, |rows| {
            pg.fresh_jobs(rows, Index::PartialReady)?;
            callgrind(dir.path(), &child("postgres", n, "BenchJob"), &pg.url)
        })?;
        let script_path = dir.path().join("floor.sql");
        std::fs::write(&script_path, &script)?;
        let floor = per_job(jobs, n, |rows| {
            pg.fresh_jobs(rows, Index::PartialReady)?;
            let mut cmd = Command::new(&pgbench);
            cmd.args(["-n", "-M", "prepared", "-c", "1", "-t"])
                .arg((rows / n as u64).to_string())
                .arg("-f")
                .arg(&script_path)
                .arg(&pg.url);
            callgrind(dir.path(), &cmd, &pg.url)
        })?;
        counts.push(Count {
            backend: "postgres",
            shape: shape(n, "BenchJob"),
            jobs,
            base: n as u64,
            ours,
            floor,
            floor_is: "pgbench, the e2e script",
        });
    }
    let floors = SqliteFloors::new(pg.window, &out.join("sqlite-floor"))?;
    let db = floors.sq.path();
    let db_arg = db.display().to_string();
    for (n, model) in [(1, "BenchJob"), (50, "BenchJob"), (50, "BenchJobNarrow")] {
        let ours = per_job(BATCH_JOBS, n, |rows| {
            floors.sq.fresh_jobs(rows)?;
            callgrind(dir.path(), &child("sqlite", n, model), &db_arg)
        })?;
        let floor = per_job(BATCH_JOBS, n, |rows| {
            floors.sq.fresh_jobs(rows)?;
            let mut cmd = Command::new(floors.program());
            // Until the table runs dry (the floor then exits 2 with its count).
            cmd.arg(&db)
                .arg(n.to_string())
                .arg(crate::floors::floor_owner())
                .arg("100000");
            callgrind(dir.path(), &cmd, &db_arg)
        })?;
        counts.push(Count {
            backend: "sqlite",
            shape: shape(n, model),
            jobs: BATCH_JOBS,
            base: n as u64,
            ours,
            floor,
            floor_is: "sqlite_floor.c, one process",
        });
    }
    Ok(Some(counts))
}

fn shape(n: usize, model: &str) -> String {
    if n == 1 {
        format!("claim_next + complete ({model})")
    } else {
        format!("claim_batch({n}) + complete_batch ({model})")
    }
}

/// Instructions per job: `run(rows)` drains a fresh table of `rows` under callgrind and returns
/// the instructions it counted; run at `jobs` and at `base` rows.
fn per_job(
    jobs: u64,
    base: usize,
    mut run: impl FnMut(u64) -> BenchResult<u64>,
) -> BenchResult<f64> {
    let base = base as u64;
    let all = run(jobs)?;
    let start = run(base)?;
    Ok(all.saturating_sub(start) as f64 / (jobs - base) as f64)
}

/// This program as a child that drains the table ([`run_child`]).
fn child(backend: &str, n: usize, model: &str) -> Command {
    let mut cmd =
        Command::new(std::env::current_exe().unwrap_or_else(|_| "diesel-lease-bench".into()));
    cmd.arg("--instructions-child")
        .arg(format!("{backend}:{n}:{model}"));
    cmd
}

/// Runs `cmd` under callgrind (with `DIESEL_LEASE_BENCH_URL` = `url` for our child) and returns
/// the instructions it executed, from callgrind's `summary:` line. The floors' exit status 2
/// ("the table ran dry") is how they end here and counts as success.
fn callgrind(dir: &Path, cmd: &Command, url: &str) -> BenchResult<u64> {
    let out_file = dir.join("callgrind.out");
    let o = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env("DIESEL_LEASE_BENCH_URL", url)
        .stdin(Stdio::null())
        .output()?;
    if !(o.status.success() || o.status.code() == Some(2)) {
        return Err(format!(
            "{:?} under callgrind failed: {}{}",
            cmd.get_program(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
        .into());
    }
    let text = std::fs::read_to_string(&out_file)?;
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no summary line in {}", out_file.display()).into())
}

/// The child: drains `DIESEL_LEASE_BENCH_URL`'s `bench_jobs` on one pooled connection (as the
/// end-to-end sections' threads), `spec` = `backend:n:model`, then prints the jobs it completed.
pub(crate) fn run_child(spec: &str) -> BenchResult<()> {
    let url = std::env::var("DIESEL_LEASE_BENCH_URL")?;
    let parts: Vec<&str> = spec.split(':').collect();
    let [backend, n, model] = parts[..] else {
        return Err(format!("--instructions-child {spec}: want backend:n:model").into());
    };
    let n: usize = n.parse()?;
    let done = match (backend, model) {
        ("postgres", "BenchJob") => {
            let pool = diesel_lease::pool::build_pool::<PgConnection>(&url, 1)?;
            drain::<BenchJob, _>(&mut *pool.get()?, n)?
        }
        ("sqlite", "BenchJob") => {
            let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 1)?;
            drain::<BenchJob, _>(&mut *pool.get()?, n)?
        }
        ("sqlite", "BenchJobNarrow") => {
            let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 1)?;
            drain::<BenchJobNarrow, _>(&mut *pool.get()?, n)?
        }
        _ => return Err(format!("--instructions-child {spec}: no such shape").into()),
    };
    println!("{done}");
    Ok(())
}

/// Claims `n` at a time (`claim_next` for 1) and completes each call's jobs, until none is left.
fn drain<M, C>(conn: &mut C, n: usize) -> BenchResult<u64>
where
    M: diesel_lease::Claimable + diesel_lease::__private::HasDoneState,
    M::Pk: PartialEq,
    C: BorrowConnection,
    C::Conn: diesel_lease::claim::ClaimConnection<M>,
{
    let batch = (n > 1).then_some(n);
    let mut done = 0;
    loop {
        match crate::floors::claim_and_complete::<M, C>(conn, batch)? {
            0 => return Ok(done),
            jobs => done += jobs,
        }
    }
}
