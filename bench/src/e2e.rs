//! Issue 12: jobs/s end to end (claim, then mark done) on PostgreSQL, against the floor and a
//! peer, in one run with interleaved rounds:
//!
//! - `claim_next + complete`: diesel-lease, one job per claim.
//! - `pgbench floor`: pgbench running the same claim and done with literal state values,
//!   prepared (`-M prepared`): what the server can do for this work with no client library.
//! - `fang fetch+remove`: the fang crate's blocking queue (`fetch_and_touch_task` then
//!   `remove_task`), on its own `fang_tasks` table from its own migrations.
//! - `fang WorkerPool`: fang's `WorkerPool` running a no-op task, in a child process (its worker
//!   threads cannot be stopped), counted by the rows it removes.
//! - `claim_batch(50) + complete_batch` and `claim_batch(50) + 50 x complete`.
//!
//! Every shape does no work per job: the numbers are the queue's own cost.

use diesel_lease::prelude::*;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use fang::{typetag, FangError, Queue, Queueable, Runnable};

use crate::measure::{self, Sample};
use crate::model::BenchJob;
use crate::pg::PgBench;
use crate::BenchResult;

/// Shape names, as recorded (group `e2e`, unit `jobs/s`).
pub(crate) const CLAIM_NEXT: &str = "claim_next + complete";
pub(crate) const PGBENCH: &str = "pgbench floor (literal, prepared)";
pub(crate) const FANG: &str = "fang fetch+remove";
pub(crate) const FANG_POOL: &str = "fang WorkerPool";
pub(crate) const BATCH: &str = "claim_batch(50) + complete_batch";
pub(crate) const BATCH_EACH: &str = "claim_batch(50) + 50 x complete";
/// [`BATCH`] through [`crate::model::BenchJobNarrow`] (4 of the 6 columns; SQLite section only).
pub(crate) const BATCH_NARROW: &str = "claim_batch(50) + complete_batch, 4-column model";
/// `--sqlite-keys-first`: keys claimed in the write transaction, rows read after (not ours).
pub(crate) const BATCH_KEYS_FIRST: &str = "keys claimed, rows read after COMMIT (not used)";
/// Issue 23: pgbench running `claim_batch(50)` + `complete_batch`'s statements, literal values.
pub(crate) const PGBENCH_BATCH: &str = "pgbench batch(50) floor";

/// fang's task: does nothing.
#[derive(fang::Serialize, fang::Deserialize)]
#[serde(crate = "fang::serde")]
pub(crate) struct NoopTask {
    n: i64,
}

#[typetag::serde]
impl Runnable for NoopTask {
    fn run(&self, _queue: &dyn Queueable) -> Result<(), FangError> {
        Ok(())
    }
}

/// The floor's script: diesel-lease's claim statement with the state values and the owner as
/// literals, then the owner-checked done, one pgbench transaction per job. The owner `pgbench` is
/// a placeholder for [`floor_owner`](crate::floors::floor_owner) ([`pgbench_script`]).
const PGBENCH_SCRIPT: &str = "WITH picked AS (SELECT id FROM bench_jobs WHERE status = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) UPDATE bench_jobs SET status = 'running', owner = 'pgbench', claimed_at = statement_timestamp(), attempts = bench_jobs.attempts + 1 FROM picked WHERE bench_jobs.id = picked.id RETURNING bench_jobs.id AS job_id, bench_jobs.status, bench_jobs.owner, bench_jobs.claimed_at, bench_jobs.attempts AS job_attempts, bench_jobs.payload \\gset\n\
UPDATE bench_jobs SET status = 'done' WHERE id = :job_id AND status = 'running' AND owner = 'pgbench' AND attempts = :job_attempts;\n";

/// [`PGBENCH_SCRIPT`] as pgbench runs it, with the floors' owner.
pub(crate) fn pgbench_script() -> String {
    PGBENCH_SCRIPT.replace("'pgbench'", &format!("'{}'", crate::floors::floor_owner()))
}

/// The batch floor's script (issue 23): `claim_batch(50)`'s statement and `complete_batch`'s, as
/// ours sends them (results.json, `floors`), with literal state values and owner. pgbench keeps
/// one row of a result (`\\gset`), so the claim's 50 rows come back aggregated in one row: the
/// keys and attempts as two arrays (and the payloads). The complete is ours' PostgreSQL form
/// (session 8): the keys and attempts as arrays joined through `unnest`, the owner once; without
/// ours' `WITH ORDINALITY … RETURNING` of each row's position, so the floor does less.
pub(crate) fn pgbench_batch_script() -> String {
    let n = crate::floors::BATCH_N;
    let owner = crate::floors::floor_owner();
    format!(
        "WITH picked AS (SELECT id FROM bench_jobs WHERE status = 'ready' ORDER BY id ASC \
         LIMIT {n} FOR UPDATE SKIP LOCKED), claimed AS (UPDATE bench_jobs SET status = 'running', \
         owner = '{owner}', claimed_at = (statement_timestamp() AT TIME ZONE 'UTC'), \
         attempts = bench_jobs.attempts + 1 FROM picked WHERE bench_jobs.id = picked.id \
         RETURNING bench_jobs.id, bench_jobs.status, bench_jobs.owner, bench_jobs.claimed_at, \
         bench_jobs.attempts, bench_jobs.payload), agg AS (SELECT array_agg(id ORDER BY id) AS ids, \
         array_agg(attempts ORDER BY id) AS atts, array_agg(payload) AS payloads FROM claimed) \
         SELECT coalesce(ids, '{{}}') AS ids, coalesce(atts, '{{}}') AS atts, payloads FROM agg \\gset\n\
         UPDATE bench_jobs SET status = 'done' FROM unnest(CAST(:ids AS BIGINT[]), \
         CAST(:atts AS INTEGER[])) AS batch(k, a) WHERE id = batch.k AND status = 'running' \
         AND owner = '{owner}' AND attempts = batch.a;\n"
    )
}

/// fang's tasks: `rows` no-op tasks of the default type, due now, in creation order.
const FANG_FILL: &str = "INSERT INTO fang_tasks (metadata, task_type, created_at, scheduled_at) \
     SELECT jsonb_build_object('type', 'NoopTask', 'n', g), 'common', \
     now() + g * INTERVAL '1 microsecond', now() - INTERVAL '1 second' \
     FROM generate_series(1::bigint, $1) AS g";

impl PgBench {
    /// `BenchJob::claim_next` then `complete`, one job per call.
    pub(crate) fn claim_next_complete(&self, workers: usize) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        measure::timed(conns, self.window, |conn| {
            let Some(job) = BenchJob::claim().row(conn)? else {
                return Ok(0);
            };
            if !job.complete(conn)? {
                return Err("a fresh claim was not ours".into());
            }
            Ok(1)
        })
    }

    /// `claim_batch(n)`, then the batch completed in one statement (`each = false`) or row by
    /// row; counts jobs.
    pub(crate) fn batch_complete(
        &self,
        workers: usize,
        n: usize,
        each: bool,
    ) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        measure::timed(conns, self.window, |conn| {
            let jobs = BenchJob::claim().batch(n).rows(conn)?;
            let ours = if each {
                let mut ours = 0;
                for job in &jobs {
                    ours += u64::from(job.complete(conn)?);
                }
                ours
            } else {
                jobs.complete(conn)?.into_iter().filter(|ok| *ok).count() as u64
            };
            if ours != jobs.len() as u64 {
                return Err("a fresh claim was not ours".into());
            }
            Ok(ours)
        })
    }

    /// pgbench with [`pgbench_script`]: `workers` clients and threads, prepared statements,
    /// counted as ours is: done rows from the table over the same warm-up and window, and the
    /// pgbench process's CPU over that window ([`crate::floors::external_window`]); latency is
    /// pgbench's average over its whole run (it reports no median).
    pub(crate) fn pgbench_floor(&self, pg_bin: &Path, workers: usize) -> BenchResult<Sample> {
        self.pgbench(pg_bin, workers, &pgbench_script(), 1, "pgbench")
    }

    /// pgbench with [`pgbench_batch_script`]: as [`Self::pgbench_floor`], 50 jobs a transaction.
    /// Every transaction must have completed 50 rows: done rows at the end equal 50 per
    /// transaction pgbench reports.
    pub(crate) fn pgbench_batch_floor(&self, pg_bin: &Path, workers: usize) -> BenchResult<Sample> {
        self.pgbench(
            pg_bin,
            workers,
            &pgbench_batch_script(),
            50,
            "pgbench batch",
        )
    }

    /// pgbench running `script` (`per_tx` jobs per transaction) through the warm-up, the window
    /// and a second more, measured over the window from the table. Then the table is checked
    /// (`label`): every claimed row claimed once, done rows grown by `per_tx` for each
    /// transaction pgbench reports, none left claimed.
    fn pgbench(
        &self,
        pg_bin: &Path,
        workers: usize,
        script_text: &str,
        per_tx: u64,
        label: &str,
    ) -> BenchResult<Sample> {
        let mut conn = PgConnection::establish(&self.url)?;
        let before = crate::floors::done_rows(&mut conn)?;
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("claim_done.sql");
        std::fs::File::create(&script)?.write_all(script_text.as_bytes())?;
        let secs = (self.window.warmup_secs + self.window.measure_secs).ceil() as u64 + 1;
        let child = Command::new(pg_bin.join("pgbench"))
            .args(["-n", "-M", "prepared", "-T"])
            .arg(secs.to_string())
            .arg("-c")
            .arg(workers.to_string())
            .arg("-j")
            .arg(workers.to_string())
            .arg("-f")
            .arg(&script)
            .arg(&self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut children = [child];
        let measured = crate::floors::external_window(&mut children, self.window, per_tx, || {
            crate::floors::done_rows(&mut conn)
        });
        let [child] = children;
        let out = child.wait_with_output()?;
        let mut sample = measured?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "pgbench failed: {}{}",
                stdout,
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let field = |prefix: &str| -> Option<f64> {
            stdout
                .lines()
                .find_map(|l| l.trim().strip_prefix(prefix))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        let transactions = field("number of transactions actually processed:")
            .ok_or_else(|| format!("pgbench printed no transaction count: {stdout}"))?;
        let failed = field("number of failed transactions:").unwrap_or(0.0);
        if failed > 0.0 || stdout.contains("aborted") {
            return Err(
                format!("pgbench clients failed (did the table run dry?): {stdout}").into(),
            );
        }
        sample.p50_us = field("latency average =").unwrap_or(f64::NAN) * 1000.0;
        let done = per_tx * transactions as u64 + u64::try_from(before)?;
        crate::floors::tally(&mut conn)?.check(&format!("{label} x{workers}"), Some(done), 0)?;
        Ok(sample)
    }

    /// Recreates fang's table (its own migrations) with `rows` due no-op tasks.
    pub(crate) fn fresh_fang_tasks(&self, rows: u64) -> BenchResult<()> {
        let mut conn = PgConnection::establish(&self.url)?;
        fang::run_migrations_postgres(&mut conn)?;
        conn.batch_execute("TRUNCATE fang_tasks")?;
        diesel::sql_query(FANG_FILL)
            .bind::<BigInt, _>(i64::try_from(rows)?)
            .execute(&mut conn)?;
        conn.batch_execute("VACUUM (ANALYZE) fang_tasks")?;
        let _ = conn.batch_execute("CHECKPOINT");
        Ok(())
    }

    /// fang's blocking queue as its workers use it: `fetch_and_touch_task`, then `remove_task`
    /// (its `RetentionMode::RemoveAll`), one shared `Queue` over a pool of `workers` connections.
    pub(crate) fn fang_fetch_remove(&self, workers: usize) -> BenchResult<Sample> {
        let pool =
            diesel_lease::pool::build_pool::<PgConnection>(&self.url, u32::try_from(workers)?)?;
        let queue = Queue::builder().connection_pool(pool).build();
        let queue = &queue;
        measure::timed(vec![(); workers], self.window, |_| {
            let Some(task) = queue.fetch_and_touch_task("common".to_owned())? else {
                return Ok(0);
            };
            Ok(queue.remove_task(&task.id)? as u64)
        })
    }

    /// fang's `WorkerPool` with `workers` workers in a child process (this program with
    /// `--fang-worker-pool`), counted by the tasks it removed during the window.
    pub(crate) fn fang_worker_pool(&self, workers: usize) -> BenchResult<Sample> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--fang-worker-pool")
            .arg(workers.to_string())
            .env("DATABASE_URL", &self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        let stat = format!("/proc/{}/stat", child.id());
        let result = (|| -> BenchResult<Sample> {
            let mut conn = PgConnection::establish(&self.url)?;
            let left = |conn: &mut PgConnection| -> BenchResult<i64> {
                Ok(diesel::sql_query("SELECT count(*) AS n FROM fang_tasks")
                    .get_result::<Count>(conn)?
                    .n)
            };
            std::thread::sleep(Duration::from_secs_f64(self.window.warmup_secs));
            let (n0, cpu0, t0) = (
                left(&mut conn)?,
                measure::stat_cpu_ticks(&stat, false),
                Instant::now(),
            );
            std::thread::sleep(Duration::from_secs_f64(self.window.measure_secs));
            let (n1, cpu1) = (left(&mut conn)?, measure::stat_cpu_ticks(&stat, false));
            let secs = t0.elapsed().as_secs_f64();
            let jobs = u64::try_from(n0 - n1).unwrap_or(0);
            if n1 == 0 {
                return Err("fang's table ran dry during the window: raise --rows".into());
            }
            Ok(Sample {
                ops: jobs,
                items: jobs,
                empty_ops: 0,
                secs,
                rate: jobs as f64 / secs,
                p50_us: f64::NAN,
                p99_us: f64::NAN,
                client_cpu_us_per_op: match (cpu0, cpu1) {
                    (Some(a), Some(b)) if jobs > 0 => {
                        Some(measure::ticks_to_us(b.saturating_sub(a)) / jobs as f64)
                    }
                    _ => None,
                },
            })
        })();
        let _ = child.kill();
        let _ = child.wait();
        result
    }
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The child process of [`PgBench::fang_worker_pool`]: runs fang's `WorkerPool` on
/// `DATABASE_URL` until killed.
pub(crate) fn run_fang_worker_pool(workers: u32) -> BenchResult<()> {
    let url = std::env::var("DATABASE_URL")?;
    let pool = diesel_lease::pool::build_pool::<PgConnection>(&url, workers)?;
    let queue = Queue::builder().connection_pool(pool).build();
    let mut workers = fang::WorkerPool::<Queue>::builder()
        .queue(queue)
        .number_of_workers(workers)
        .retention_mode(fang::RetentionMode::RemoveAll)
        .build();
    workers.start().map_err(|e| format!("{e:?}"))?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
