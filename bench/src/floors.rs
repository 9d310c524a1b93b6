//! Issue 23, item 1: floors on every backend. Jobs/s end to end (claim, then owner-checked
//! complete; no-op jobs) of diesel-lease against the same statements as literal SQL run by a
//! program outside our code, interleaved round by round:
//!
//! - MariaDB (`--only e2e-mysql`): `mariadb-slap`, K clients, each repeating the transaction our
//!   MySQL dialect runs (`SELECT … FOR UPDATE SKIP LOCKED INTO @id`, the marking `UPDATE`, the
//!   read-back, `COMMIT`, then the owner-checked `UPDATE`), literal values; and the batch of 50.
//! - SQLite (`--only e2e-sqlite`): K processes of `bench/floor/sqlite_floor.c` over the sqlite3
//!   C library, each looping `BEGIN IMMEDIATE; UPDATE … RETURNING; COMMIT` then the owner-checked
//!   complete, with our dialect's pragmas; and the batch of 50.
//!
//! Every floor is counted from the table (done rows at the start and the end of the window), not
//! from the program's own output, and every run ends with a check of the table: no row claimed
//! twice (`attempts` at most 1), no claimed row left behind beyond what the killed clients held.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::{InstrumentationEvent, SimpleConnection};
use diesel::prelude::*;
use diesel::query_builder::SqlQuery;
use diesel::query_dsl::LoadQuery;
use diesel::sql_types::BigInt;
use diesel_lease::claim::ClaimConnection;
use diesel_lease::prelude::*;
use diesel_lease::BorrowConnection;
use serde::Serialize;

use crate::measure::{self, Sample, Window};
use crate::model::BenchJob;
use crate::BenchResult;

/// Shape names, as recorded (groups `e2e-mysql` and `e2e-sqlite`, unit `jobs/s`). Ours are
/// named as on PostgreSQL (`e2e::CLAIM_NEXT`, `e2e::BATCH`).
pub(crate) const SLAP: &str = "mariadb-slap floor (literal)";
pub(crate) const SLAP_BATCH: &str = "mariadb-slap batch(50) floor";
/// Ours through Diesel's `MariadbConnection` (the `MysqlConnection` runs keep the plain names).
pub(crate) const CLAIM_NEXT_MARIADB: &str = "claim_next + complete, MariadbConnection";
pub(crate) const BATCH_MARIADB: &str = "claim_batch(50) + complete_batch, MariadbConnection";
pub(crate) const C_FLOOR: &str = "sqlite3 C floor (literal)";
pub(crate) const C_BATCH: &str = "sqlite3 C batch(50) floor";
/// The same C floors run as K threads of one process (each with its own connection), the shape
/// ours runs in: what any in-process driver pays for threads sharing one file.
pub(crate) const C_FLOOR_THREADS: &str = "sqlite3 C floor, K threads";
pub(crate) const C_BATCH_THREADS: &str = "sqlite3 C batch(50) floor, K threads";

/// How the C floor's K workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloorShape {
    /// K processes of one thread (the floor).
    Processes,
    /// One process of K threads.
    Threads,
}

/// Jobs claimed per batch, ours and the floors'.
pub(crate) const BATCH_N: usize = 50;

/// What one backend's floors ran: our statements as Diesel sent them (one `claim_next` +
/// `complete` and one `claim_batch(50)` + `complete_batch`, captured by Diesel's
/// instrumentation) next to the floors' scripts, and the table checks that passed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FloorRun {
    pub(crate) backend: &'static str,
    /// Server version (MariaDB) or SQLite library version.
    pub(crate) server: String,
    /// `throwaway` (started by this program) or the URL's environment variable.
    pub(crate) source: &'static str,
    pub(crate) ours_next_statements: Vec<String>,
    pub(crate) ours_batch_statements: Vec<String>,
    pub(crate) floor_next_script: String,
    pub(crate) floor_batch_script: String,
    /// One line per measurement: the table's counts afterwards.
    pub(crate) checks: Vec<String>,
}

/// Counts of the queue table after a run.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub(crate) struct Tally {
    #[diesel(sql_type = BigInt)]
    pub(crate) done: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) running: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) ready: i64,
    /// Rows claimed more than once, or claimed without the attempt counted.
    #[diesel(sql_type = BigInt)]
    pub(crate) miscounted: i64,
}

const TALLY: &str = "SELECT COUNT(CASE WHEN status = 'done' THEN 1 END) AS done, \
     COUNT(CASE WHEN status = 'running' THEN 1 END) AS running, \
     COUNT(CASE WHEN status = 'ready' THEN 1 END) AS ready, \
     COUNT(CASE WHEN attempts > 1 OR (status <> 'ready' AND attempts <> 1) \
     OR (status = 'ready' AND attempts <> 0) THEN 1 END) AS miscounted FROM bench_jobs";

#[derive(Debug, QueryableByName)]
pub(crate) struct Done {
    #[diesel(sql_type = BigInt)]
    pub(crate) n: i64,
}

const DONE: &str = "SELECT COUNT(*) AS n FROM bench_jobs WHERE status = 'done'";

pub(crate) fn tally<C>(conn: &mut C) -> BenchResult<Tally>
where
    C: Connection,
    SqlQuery: for<'a> LoadQuery<'a, C, Tally>,
{
    Ok(diesel::sql_query(TALLY).get_result::<Tally>(conn)?)
}

pub(crate) fn done_rows<C>(conn: &mut C) -> BenchResult<i64>
where
    C: Connection,
    SqlQuery: for<'a> LoadQuery<'a, C, Done>,
{
    Ok(diesel::sql_query(DONE).get_result::<Done>(conn)?.n)
}

impl Tally {
    /// Checks the table after a run: every claimed row claimed once; `completed` rows done (when
    /// the client knows how many it completed); at most `left_running` rows still claimed (what
    /// killed clients held between claim and complete). Returns a line for the report.
    pub(crate) fn check(
        &self,
        what: &str,
        completed: Option<u64>,
        left_running: i64,
    ) -> BenchResult<String> {
        let line = format!(
            "{what}: {} done, {} running, {} ready, {} claimed twice or miscounted",
            self.done, self.running, self.ready, self.miscounted
        );
        if self.miscounted != 0 {
            return Err(format!("{line}: a row was claimed more than once").into());
        }
        if let Some(c) = completed {
            if i64::try_from(c)? != self.done {
                return Err(format!("{line}: the client completed {c} jobs").into());
            }
        }
        if self.running > left_running {
            return Err(format!("{line}: more than {left_running} claims left behind").into());
        }
        if self.ready == 0 {
            return Err(format!("{line}: the table ran dry; raise --rows").into());
        }
        Ok(line)
    }
}

/// diesel-lease on `conns` (one thread each): `claim_next` + `complete` (`batch` = `None`) or
/// `claim_batch(n)` + `complete_batch`; jobs completed in total (warm-up included) are added to
/// `completed`, for the table check.
pub(crate) fn ours<M, C>(
    conns: Vec<C>,
    window: Window,
    batch: Option<usize>,
    completed: &AtomicU64,
) -> BenchResult<Sample>
where
    M: diesel_lease::Claimable + diesel_lease::__private::HasDoneState,
    M::Pk: PartialEq,
    C: BorrowConnection + Send,
    C::Conn: ClaimConnection<M>,
{
    measure::timed(conns, window, |conn| {
        let ours = claim_and_complete::<M, _>(conn, batch)?;
        completed.fetch_add(ours, Ordering::Relaxed);
        Ok(ours)
    })
}

/// One call of ours: `claim_next` + `complete` (`batch` = `None`) or `claim_batch(n)` +
/// `complete_batch`; the jobs it completed (0: the table is empty). A claimed job that could
/// not be completed as ours is an error.
pub(crate) fn claim_and_complete<M, C>(conn: &mut C, batch: Option<usize>) -> BenchResult<u64>
where
    M: diesel_lease::Claimable + diesel_lease::__private::HasDoneState,
    M::Pk: PartialEq,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let jobs = match batch {
        None => M::claim().row(conn)?.into_iter().collect(),
        Some(n) => M::claim().batch(n).rows(conn)?,
    };
    let ours = match jobs.as_slice() {
        [] => 0,
        [job] if batch.is_none() => u64::from(job.complete(conn)?),
        _ => jobs.complete(conn)?.into_iter().filter(|ok| *ok).count() as u64,
    };
    if ours != jobs.len() as u64 {
        return Err("a fresh claim was not ours".into());
    }
    Ok(ours)
}

/// The statements one `claim_next` + `complete` and one `claim_batch(50)` + `complete_batch`
/// send on `conn`, as Diesel's instrumentation sees them (transaction starts and ends as
/// `BEGIN` / `COMMIT` lines).
pub(crate) fn capture_statements<C>(mut conn: C) -> BenchResult<(Vec<String>, Vec<String>)>
where
    C: Connection + BorrowConnection,
    C::Conn: ClaimConnection<BenchJob>,
{
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&log);
    conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
        let line = match event {
            InstrumentationEvent::StartQuery { query, .. } => query.to_string(),
            InstrumentationEvent::BeginTransaction { depth, .. } => {
                format!("BEGIN (depth {depth})")
            }
            InstrumentationEvent::CommitTransaction { depth, .. } => {
                format!("COMMIT (depth {depth})")
            }
            _ => return,
        };
        sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    });
    let take = || std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    // Once unlogged first: statements prepared on first use look the same either way, but a
    // first call may run set-up queries (server version, session settings) the loop never runs.
    let one = |conn: &mut C| -> BenchResult<()> {
        let job = BenchJob::claim()
            .row(conn)?
            .ok_or("no ready row to capture")?;
        job.complete(conn)?;
        Ok(())
    };
    let many = |conn: &mut C| -> BenchResult<()> {
        let jobs = BenchJob::claim().batch(BATCH_N).rows(conn)?;
        jobs.complete(conn)?;
        Ok(())
    };
    one(&mut conn)?;
    many(&mut conn)?;
    take();
    one(&mut conn)?;
    let next = take();
    many(&mut conn)?;
    let batch = take();
    Ok((next, batch))
}

/// Runs external floor processes for the window, counting done rows from the table at the
/// window's start and end with `done`, and the processes' CPU from /proc (user + system, all
/// their threads) over the same window. `children` must keep running through the window. One
/// operation is `per` jobs (a transaction of the floor), so that client CPU per operation means
/// what it means for ours (per call: one job, or one batch).
pub(crate) fn external_window(
    children: &mut [Child],
    window: Window,
    per: u64,
    mut done: impl FnMut() -> BenchResult<i64>,
) -> BenchResult<Sample> {
    let stats: Vec<String> = children
        .iter()
        .map(|c| format!("/proc/{}/stat", c.id()))
        .collect();
    let cpu = || -> Option<u64> {
        stats
            .iter()
            .map(|s| measure::stat_cpu_ticks(s, false))
            .sum::<Option<u64>>()
    };
    std::thread::sleep(Duration::from_secs_f64(window.warmup_secs));
    let (n0, cpu0, t0) = (done()?, cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(window.measure_secs));
    for c in children.iter_mut() {
        if let Some(status) = c.try_wait()? {
            return Err(format!(
                "a floor process ended during the window ({status}): {}",
                child_stderr(c)
            )
            .into());
        }
    }
    let (n1, cpu1) = (done()?, cpu());
    let secs = t0.elapsed().as_secs_f64();
    let jobs = u64::try_from(n1 - n0).unwrap_or(0);
    let ops = jobs / per.max(1);
    Ok(Sample {
        ops,
        items: jobs,
        empty_ops: 0,
        secs,
        rate: jobs as f64 / secs,
        p50_us: f64::NAN,
        p99_us: f64::NAN,
        client_cpu_us_per_op: match (cpu0, cpu1) {
            (Some(a), Some(b)) if ops > 0 => {
                Some(measure::ticks_to_us(b.saturating_sub(a)) / ops as f64)
            }
            _ => None,
        },
    })
}

fn child_stderr(c: &mut Child) -> String {
    use std::io::Read as _;
    let mut s = String::new();
    if let Some(e) = c.stderr.as_mut() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

// --- MariaDB ----------------------------------------------------------------------------------

/// The owner every floor writes and checks (the same literal in every client): as long as the
/// claim stamps ours writes (this process's owner id, `#` and 12 hex digits), so that a floor's
/// rows, pages and owner comparisons hold as many bytes as ours. Letters, digits and `-` only, so
/// it needs no quoting in any script (pgbench reads `:name` as a variable).
///
/// Until session 6 the floors wrote `floor` / `pgbench` (5-7 bytes against ours' 38 here): on
/// SQLite that alone made the batch floor 12 % faster (BENCHMARKS.md, "Session 6").
pub(crate) fn floor_owner() -> &'static str {
    static OWNER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWNER.get_or_init(|| {
        let ours = diesel_lease::ClaimStamp::new(diesel_lease::OwnerId::process_default());
        let len = ours.as_str().len();
        let mut owner = String::from("floor-");
        while owner.len() < len {
            owner.push_str("0123456789abcdef");
        }
        owner.truncate(len.max("floor".len()));
        owner
    })
}

/// `script` with the placeholder owner `'floor'` replaced by [`floor_owner`] (inside
/// `EXECUTE IMMEDIATE` texts too, where it is written `''floor''`).
fn with_floor_owner(script: &str) -> String {
    script.replace("'floor'", &format!("'{}'", floor_owner()))
}

/// [`SLAP_NEXT_SCRIPT`] as slap runs it, with [`floor_owner`].
pub(crate) fn slap_next_script() -> String {
    with_floor_owner(SLAP_NEXT_SCRIPT)
}

/// [`SLAP_BATCH_SCRIPT`] as slap runs it, with [`floor_owner`].
pub(crate) fn slap_batch_script() -> String {
    with_floor_owner(SLAP_BATCH_SCRIPT)
}

/// `claim_next` + `complete` as our MySQL dialect runs them (`ours_next_statements` in
/// results.json), with literal values: the pick locks one ready row and reads it (into session
/// variables: slap has no client-side variables), the marking goes by key, the read-back sends
/// the row to the client, and the complete checks key, state, owner and attempt. The owner is a
/// placeholder for [`floor_owner`] ([`slap_next_script`]).
const SLAP_NEXT_SCRIPT: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n\
BEGIN;\n\
SELECT id, status, owner, claimed_at, attempts, payload INTO @id, @status, @owner, @claimed_at, @attempts, @payload FROM bench_jobs WHERE status = 'ready' ORDER BY id ASC LIMIT 1 FOR UPDATE SKIP LOCKED;\n\
UPDATE bench_jobs SET status = 'running', owner = 'floor', claimed_at = UTC_TIMESTAMP(6), attempts = attempts + 1 WHERE id = @id;\n\
SELECT id, status, owner, claimed_at, attempts, payload FROM bench_jobs WHERE id = @id;\n\
COMMIT;\n\
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n\
UPDATE bench_jobs SET status = 'done' WHERE id = @id AND status = 'running' AND owner = 'floor' AND attempts = @attempts + 1;\n";

/// `claim_batch(50)` + `complete_batch` as our MySQL dialect runs them: the pick locks 50 ready
/// rows (their ids kept in `@ids`, the rows not sent to the client: slap cannot keep them), the
/// marking and the read-back name the 50 keys (`EXECUTE IMMEDIATE` of the text with the keys
/// written in; ours binds them, `id = ? OR id = ? …`), then the complete marks the rows still
/// ours in a transaction of its own (ours checks each row's own attempt, here all are 1; since
/// session 8 ours sends this `UPDATE` alone and reads its matched-row count, locking first only
/// when a row was lost). The owner is a placeholder for [`floor_owner`] ([`slap_batch_script`]).
const SLAP_BATCH_SCRIPT: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n\
BEGIN;\n\
SELECT GROUP_CONCAT(id ORDER BY id) INTO @ids FROM (SELECT id, status, owner, claimed_at, attempts, payload FROM bench_jobs WHERE status = 'ready' ORDER BY id ASC LIMIT 50 FOR UPDATE SKIP LOCKED) AS picked;\n\
EXECUTE IMMEDIATE CONCAT('UPDATE bench_jobs SET status = ''running'', owner = ''floor'', claimed_at = UTC_TIMESTAMP(6), attempts = attempts + 1 WHERE id IN (', @ids, ')');\n\
EXECUTE IMMEDIATE CONCAT('SELECT id, status, owner, claimed_at, attempts, payload FROM bench_jobs WHERE id IN (', @ids, ')');\n\
COMMIT;\n\
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n\
BEGIN;\n\
EXECUTE IMMEDIATE CONCAT('UPDATE bench_jobs SET status = ''done'' WHERE id IN (', @ids, ') AND status = ''running'' AND owner = ''floor'' AND attempts = 1');\n\
COMMIT;\n";

/// Statements in a slap script (its `;`-terminated lines).
fn statements(script: &str) -> usize {
    script
        .lines()
        .filter(|l| l.trim_end().ends_with(';'))
        .count()
}

/// The MariaDB side of a floors run.
#[derive(Debug)]
pub(crate) struct MysqlFloors {
    pub(crate) url: String,
    pub(crate) window: Window,
    dir: tempfile::TempDir,
}

impl MysqlFloors {
    pub(crate) fn new(url: String, window: Window) -> BenchResult<MysqlFloors> {
        let dir = tempfile::Builder::new()
            .prefix("diesel-lease-bench-slap-")
            .tempdir()?;
        std::fs::write(dir.path().join("next.sql"), slap_next_script())?;
        std::fs::write(dir.path().join("batch.sql"), slap_batch_script())?;
        Ok(MysqlFloors { url, window, dir })
    }

    pub(crate) fn pool(&self, size: usize) -> BenchResult<crate::mysql::MysqlPool> {
        Ok(diesel_lease::pool::build_pool::<MysqlConnection>(
            &self.url,
            u32::try_from(size)?,
        )?)
    }

    pub(crate) fn version(&self) -> BenchResult<String> {
        let mut conn = MysqlConnection::establish(&self.url)?;
        #[derive(QueryableByName)]
        struct V {
            #[diesel(sql_type = diesel::sql_types::Text)]
            v: String,
        }
        Ok(diesel::sql_query("SELECT VERSION() AS v")
            .get_result::<V>(&mut conn)?
            .v)
    }

    /// Ours on a fresh table of `rows`, through `MysqlConnection` or, with `mariadb`, Diesel's
    /// `MariadbConnection`; returns the sample and the table check's line.
    pub(crate) fn ours(
        &self,
        rows: u64,
        workers: usize,
        batch: Option<usize>,
        mariadb: bool,
    ) -> BenchResult<(Sample, String)> {
        crate::mysql::fresh_jobs(&self.url, rows)?;
        let mut conn = MysqlConnection::establish(&self.url)?;
        if mariadb {
            let url = self.url.replacen("mysql://", "mariadb://", 1);
            let pool = diesel_lease::pool::build_pool::<diesel::mariadb::MariadbConnection>(
                &url,
                u32::try_from(workers)?,
            )?;
            let conns = (0..workers)
                .map(|_| pool.get())
                .collect::<Result<Vec<_>, _>>()?;
            return self.measure_ours(conns, &mut conn, workers, batch, "mariadb");
        }
        let pool = self.pool(workers)?;
        let conns = (0..workers)
            .map(|_| pool.get())
            .collect::<Result<Vec<_>, _>>()?;
        self.measure_ours(conns, &mut conn, workers, batch, "mysql")
    }

    /// [`ours`](Self::ours) on the connections taken: the run, the server's counters around
    /// it, the table's check.
    fn measure_ours<C>(
        &self,
        conns: Vec<C>,
        conn: &mut MysqlConnection,
        workers: usize,
        batch: Option<usize>,
        through: &str,
    ) -> BenchResult<(Sample, String)>
    where
        C: BorrowConnection + Send,
        C::Conn: ClaimConnection<BenchJob>,
    {
        let before = Counters::read(conn)?;
        let completed = AtomicU64::new(0);
        let s = ours::<BenchJob, _>(conns, self.window, batch, &completed)?;
        let after = Counters::read(conn)?;
        let t = tally(conn)?;
        let what = format!("{through} ours {:?} x{workers}", batch.unwrap_or(1));
        let line = t.check(&what, Some(completed.load(Ordering::Relaxed)), 0)?;
        Ok((s, format!("{line}; {}", after.per_job(&before, t.done))))
    }

    /// `mariadb-slap` with the single-job or the batch script, `workers` clients, on a fresh
    /// table of `rows`, counted from the table; killed after the window.
    pub(crate) fn slap(
        &self,
        rows: u64,
        workers: usize,
        batch: bool,
    ) -> BenchResult<(Sample, String)> {
        crate::mysql::fresh_jobs(&self.url, rows)?;
        let (file, script, per) = if batch {
            ("batch.sql", slap_batch_script(), BATCH_N)
        } else {
            ("next.sql", slap_next_script(), 1)
        };
        let script_path = self.dir.path().join(file);
        let mut conn = MysqlConnection::establish(&self.url)?;
        let before = Counters::read(&mut conn)?;
        // Ample repetitions: the window ends it, not the count.
        let runs = rows.div_ceil(per as u64) * 4;
        let child =
            crate::mysql::spawn_slap(&self.url, &script_path, statements(&script), workers, runs)?;
        let mut children = vec![child];
        let sample = external_window(&mut children, self.window, per as u64, || {
            done_rows(&mut conn)
        });
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let sample = sample?;
        // The server ends the killed clients' sessions (rolling back what was open) when it sees
        // them gone; wait until they are.
        wait_for_sessions_gone(&mut conn)?;
        let after = Counters::read(&mut conn)?;
        let t = tally(&mut conn)?;
        let what = format!("mysql slap {per} x{workers}");
        let line = t.check(&what, None, i64::try_from(workers * per)?)?;
        // The counting queries of the window (two) are the floor's too; negligible per job.
        Ok((
            sample,
            format!("{line}; {}", after.per_job(&before, t.done)),
        ))
    }
}

/// The server's counters of client statements (MariaDB's global status), for a profile of one
/// measurement: per job, how many statements and prepared-statement calls it took.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    questions: i64,
    prepare: i64,
    execute: i64,
    close: i64,
}

#[derive(QueryableByName)]
struct Status {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

impl Counters {
    fn read(conn: &mut MysqlConnection) -> BenchResult<Counters> {
        let rows = diesel::sql_query(
            "SELECT VARIABLE_NAME AS name, VARIABLE_VALUE AS value FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME IN ('QUESTIONS', 'COM_STMT_PREPARE', 'COM_STMT_EXECUTE', 'COM_STMT_CLOSE')",
        )
        .load::<Status>(conn)?;
        let mut c = Counters::default();
        for r in rows {
            let v: i64 = r.value.parse().unwrap_or(0);
            match r.name.to_ascii_uppercase().as_str() {
                "QUESTIONS" => c.questions = v,
                "COM_STMT_PREPARE" => c.prepare = v,
                "COM_STMT_EXECUTE" => c.execute = v,
                "COM_STMT_CLOSE" => c.close = v,
                _ => {}
            }
        }
        Ok(c)
    }

    /// Per job, from `before` to `self`, over `jobs` jobs: the server's `Questions` counter (it
    /// counts a prepared statement's execution more than once: 16 for ours' 10 commands a job,
    /// where slap's 8 text statements count 8), prepares, executes and closes.
    fn per_job(&self, before: &Counters, jobs: i64) -> String {
        let j = jobs.max(1) as f64;
        format!(
            "per job: {:.2} Questions, {:.2} prepares, {:.2} executes, {:.2} closes",
            (self.questions - before.questions) as f64 / j,
            (self.prepare - before.prepare) as f64 / j,
            (self.execute - before.execute) as f64 / j,
            (self.close - before.close) as f64 / j
        )
    }
}

#[derive(QueryableByName)]
struct Sessions {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn wait_for_sessions_gone(conn: &mut MysqlConnection) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = diesel::sql_query(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() \
             AND DB = DATABASE() AND COMMAND <> 'Daemon'",
        )
        .get_result::<Sessions>(conn)?
        .n;
        if n == 0 || Instant::now() > deadline {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// --- SQLite -----------------------------------------------------------------------------------

type SqlitePool = diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<SqliteConnection>>;
type SqliteConn = diesel::r2d2::PooledConnection<diesel::r2d2::ConnectionManager<SqliteConnection>>;

/// The floor's C source, compiled at run time with the system's `cc` and `-lsqlite3`.
const SQLITE_FLOOR_C: &str = include_str!("../floor/sqlite_floor.c");

/// The SQLite side of a floors run: the database file and the compiled floor program.
#[derive(Debug)]
pub(crate) struct SqliteFloors {
    pub(crate) sq: crate::sqlite::SqliteBench,
    pub(crate) window: Window,
    program: PathBuf,
}

impl SqliteFloors {
    /// Compiles `bench/floor/sqlite_floor.c` into `out`.
    pub(crate) fn new(window: Window, out: &Path) -> BenchResult<SqliteFloors> {
        std::fs::create_dir_all(out)?;
        let src = out.join("sqlite_floor.c");
        std::fs::write(&src, SQLITE_FLOOR_C)?;
        let program = out.join("sqlite_floor");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let o = Command::new(&cc)
            .args(["-O2", "-o"])
            .arg(&program)
            .arg(&src)
            .args(["-lsqlite3", "-lpthread"])
            .output()?;
        if !o.status.success() {
            return Err(format!(
                "compiling the SQLite floor ({cc} -O2 … -lsqlite3) failed: {}",
                String::from_utf8_lossy(&o.stderr)
            )
            .into());
        }
        Ok(SqliteFloors {
            sq: crate::sqlite::SqliteBench::new(window)?,
            window,
            program,
        })
    }

    /// The compiled floor program.
    pub(crate) fn program(&self) -> &Path {
        &self.program
    }

    /// The SQLite library version the floor links (`sqlite_floor --version`).
    pub(crate) fn version(&self) -> BenchResult<String> {
        let o = Command::new(&self.program).arg("--version").output()?;
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
    }

    /// A fresh table of `rows` and a pool with `workers` connections taken from it.
    fn fresh_pool(&self, rows: u64, workers: usize) -> BenchResult<(SqlitePool, Vec<SqliteConn>)> {
        self.sq.fresh_jobs(rows)?;
        let pool = self.sq.pool(u32::try_from(workers)?)?;
        let conns = (0..workers)
            .map(|_| pool.get())
            .collect::<Result<Vec<_>, _>>()?;
        Ok((pool, conns))
    }

    /// Ours with model `M` ([`BenchJob`], or the narrower model of the same table), `workers`
    /// threads on a fresh table of `rows`, checked as the floors are.
    pub(crate) fn ours<M>(
        &self,
        rows: u64,
        workers: usize,
        batch: Option<usize>,
    ) -> BenchResult<(Sample, String)>
    where
        M: diesel_lease::Claimable + diesel_lease::__private::HasDoneState,
        M::Pk: PartialEq,
        SqliteConnection: ClaimConnection<M>,
    {
        let (pool, conns) = self.fresh_pool(rows, workers)?;
        let completed = AtomicU64::new(0);
        let s = ours::<M, _>(conns, self.window, batch, &completed)?;
        let t = tally(&mut pool.get()?)?;
        let what = format!("sqlite ours {:?} x{workers}", batch.unwrap_or(1));
        let line = t.check(&what, Some(completed.load(Ordering::Relaxed)), 0)?;
        Ok((s, line))
    }

    /// `workers` workers of the C floor (processes or threads of one, by `shape`), each claiming
    /// `n` (1 or 50) per transaction until the window's end plus a little, when each stops after
    /// its current job; the processes print how many they completed, whose sum must equal the
    /// done rows.
    pub(crate) fn floor(
        &self,
        rows: u64,
        workers: usize,
        n: usize,
        shape: FloorShape,
    ) -> BenchResult<(Sample, String)> {
        self.sq.fresh_jobs(rows)?;
        let db = self.sq.path();
        let run_secs = self.window.warmup_secs + self.window.measure_secs + 0.3;
        let (processes, threads) = match shape {
            FloorShape::Processes => (workers, 1),
            FloorShape::Threads => (1, workers),
        };
        let mut children = (0..processes)
            .map(|_| {
                Command::new(&self.program)
                    .arg(&db)
                    .arg(n.to_string())
                    .arg(floor_owner())
                    .arg(format!("{run_secs:.3}"))
                    .arg(threads.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut conn = SqliteConnection::establish(&db.display().to_string())?;
        conn.batch_execute("PRAGMA busy_timeout = 30000")?;
        let sample = external_window(&mut children, self.window, n as u64, || {
            done_rows(&mut conn)
        });
        let mut completed = 0u64;
        let mut failed = None;
        for c in children {
            let o = c.wait_with_output()?;
            let out = String::from_utf8_lossy(&o.stdout);
            match out.trim().parse::<u64>() {
                Ok(k) if o.status.success() => completed += k,
                _ => {
                    failed = Some(format!(
                        "the SQLite floor failed ({}): {out}{}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    ))
                }
            }
        }
        if let Some(f) = failed {
            return Err(f.into());
        }
        let sample = sample?;
        let t = tally(&mut conn)?;
        let what = format!("sqlite C floor {n} x{workers} {shape:?}");
        let line = t.check(&what, Some(completed), 0)?;
        Ok((sample, line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(done: i64, running: i64, ready: i64, miscounted: i64) -> Tally {
        Tally {
            done,
            running,
            ready,
            miscounted,
        }
    }

    #[test]
    fn tally_check_refuses_double_claims_lost_jobs_and_dry_tables() {
        assert!(t(10, 0, 90, 0).check("x", Some(10), 0).is_ok());
        assert!(t(10, 2, 88, 0).check("x", None, 2).is_ok());
        assert!(t(10, 0, 90, 1).check("x", Some(10), 0).is_err());
        assert!(t(10, 0, 90, 0).check("x", Some(11), 0).is_err());
        assert!(t(10, 3, 87, 0).check("x", None, 2).is_err());
        assert!(t(100, 0, 0, 0).check("x", Some(100), 0).is_err());
    }

    #[test]
    fn slap_scripts_count_their_statements() {
        assert_eq!(statements(SLAP_NEXT_SCRIPT), 8);
        assert_eq!(statements(SLAP_BATCH_SCRIPT), 10);
    }

    #[test]
    fn every_floor_writes_an_owner_as_long_as_ours() {
        let ours = diesel_lease::ClaimStamp::new(diesel_lease::OwnerId::process_default());
        let owner = floor_owner();
        assert_eq!(owner.len(), ours.as_str().len());
        assert!(owner.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        for script in [
            slap_next_script(),
            slap_batch_script(),
            crate::e2e::pgbench_script(),
            crate::e2e::pgbench_batch_script(),
        ] {
            assert!(script.contains(owner), "{script}");
            assert!(!script.contains("'floor'") && !script.contains("'pgbench'"));
        }
        assert_eq!(slap_batch_script().matches(owner).count(), 2);
    }

    #[test]
    fn pgbench_batch_script_claims_50_and_completes_them_as_arrays() {
        let s = crate::e2e::pgbench_batch_script();
        assert!(s.contains(" LIMIT 50 FOR UPDATE SKIP LOCKED"), "{s}");
        assert!(
            s.contains("unnest(CAST(:ids AS BIGINT[]), CAST(:atts AS INTEGER[]))"),
            "{s}"
        );
        assert!(s.contains("\\gset\n") && s.contains("'{}'"), "{s}");
        assert_eq!(s.lines().count(), 2);
    }
}

/// A key from the keys-first claim's `RETURNING`.
#[derive(QueryableByName)]
struct ClaimedId {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

impl SqliteFloors {
    /// A claim design diesel-lease does not use, measured to decide against it (`e2e-sqlite
    /// --sqlite-keys-first`, not a target): the write transaction returns only the claimed keys,
    /// and the rows are read and built as [`BenchJob`] after `COMMIT` (Diesel's `eq_any`), so
    /// building them no longer holds the database's write lock; then `complete_batch` as ours.
    pub(crate) fn keys_first(
        &self,
        rows: u64,
        workers: usize,
        n: usize,
    ) -> BenchResult<(Sample, String)> {
        use crate::model::schema::bench_jobs;
        let (pool, conns) = self.fresh_pool(rows, workers)?;
        let completed = AtomicU64::new(0);
        let owner = floor_owner();
        let limit = i64::try_from(n)?;
        let s = measure::timed(conns, self.window, |conn| {
            let c: &mut SqliteConnection = conn;
            let ids: Vec<i64> = c.immediate_transaction(|c| {
                diesel::sql_query(
                    "UPDATE bench_jobs SET status = 'running', owner = ?, \
                     claimed_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), attempts = attempts + 1 \
                     WHERE (id) IN (SELECT id FROM bench_jobs WHERE (status = 'ready') \
                     ORDER BY id ASC LIMIT ?) RETURNING id",
                )
                .bind::<diesel::sql_types::Text, _>(&owner)
                .bind::<BigInt, _>(limit)
                .load::<ClaimedId>(c)
                .map(|v| v.into_iter().map(|r| r.id).collect())
            })?;
            let jobs: Vec<BenchJob> = bench_jobs::table
                .filter(bench_jobs::id.eq_any(&ids))
                .filter(bench_jobs::owner.eq(&owner))
                .select(BenchJob::as_select())
                .load(c)?;
            let ours = jobs.complete(c)?.into_iter().filter(|ok| *ok).count() as u64;
            if ours != ids.len() as u64 {
                return Err("a fresh claim was not ours".into());
            }
            completed.fetch_add(ours, Ordering::Relaxed);
            Ok(ours)
        })?;
        let t = tally(&mut pool.get()?)?;
        let what = format!("sqlite keys-first {n} x{workers}");
        let line = t.check(&what, Some(completed.load(Ordering::Relaxed)), 0)?;
        Ok((s, line))
    }
}
