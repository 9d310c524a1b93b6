//! Semaphore hand-off between processes, on any backend: how long after one holder starts its
//! release the next holder, in another process, returns from `acquire`; and (MySQL/MariaDB, whose
//! server counts statements) what idle waiters cost the server.
//!
//! ```sh
//! cargo run --release -p diesel-lease-bench --bin diesel-lease-handoff -- <DATABASE_URL>
//! ```
//!
//! `DATABASE_URL` is `postgres://…`, `mysql://…`, or a SQLite file path. Each of `--processes`
//! child processes (this program again, with `--child`) loops `--rounds` times: acquire a mutex
//! through its own pool, print the grant time, hold it `--hold-ms`, print the release time,
//! release. The parent pairs each grant with the release before it (a mutex: they alternate).
//! Times are the machine's wall clock, shared by the processes.

use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use diesel::r2d2::R2D2Connection;
use diesel::{MysqlConnection, PgConnection, RunQueryDsl, SqliteConnection};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::LeaseConnection;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

const RESOURCE: &str = "bench-handoff";

#[derive(Parser, Debug)]
#[command(about = "Semaphore hand-off latency between processes")]
struct Args {
    /// `postgres://…`, `mysql://…`, or a SQLite file path.
    url: String,
    /// Contending processes.
    #[arg(long, default_value_t = 8)]
    processes: usize,
    /// Acquire + release cycles per process.
    #[arg(long, default_value_t = 25)]
    rounds: u32,
    /// How long each holder keeps the mutex.
    #[arg(long, default_value_t = 20)]
    hold_ms: u64,
    /// How long the idle-cost measurement watches the waiters (MySQL only; 0: skip it).
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Internal: run as one contending process.
    #[arg(long, hide = true)]
    child: bool,
}

fn main() -> Res<()> {
    let args = Args::parse();
    if args.url.starts_with("postgres") {
        run::<PgConnection>(&args)
    } else if args.url.starts_with("mysql") {
        run::<MysqlConnection>(&args)
    } else {
        run::<SqliteConnection>(&args)
    }
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn run<C>(args: &Args) -> Res<()>
where
    C: LeaseConnection + R2D2Connection + QuestionCounter,
{
    let pool = diesel_lease::pool::build_pool::<C>(&args.url, 2)?;
    let mutex = Semaphore::mutex(RESOURCE);
    if args.child {
        let mut out = std::io::stdout();
        for _ in 0..args.rounds {
            let permit = mutex.acquire(&pool, Duration::from_secs(300))?;
            writeln!(out, "G {}", unix_ns())?;
            std::thread::sleep(Duration::from_millis(args.hold_ms));
            writeln!(out, "R {}", unix_ns())?;
            let _ = permit.release()?;
        }
        return Ok(());
    }
    diesel_lease::run_migrations(&mut pool.get()?)?;
    let me = std::env::current_exe()?;
    let spawn = |rounds: u32, hold_ms: u64| -> Res<Child> {
        Ok(Command::new(&me)
            .args([&args.url, "--child", "--rounds", &rounds.to_string()])
            .args(["--hold-ms", &hold_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()?)
    };

    // Hand-off latency.
    let started = Instant::now();
    let children = (0..args.processes)
        .map(|_| spawn(args.rounds, args.hold_ms))
        .collect::<Res<Vec<_>>>()?;
    let mut events = Vec::new();
    for mut child in children {
        let out = child.stdout.take().ok_or("no stdout")?;
        for line in BufReader::new(out).lines() {
            let line = line?;
            if let Some((kind, ns)) = line.split_once(' ') {
                events.push((ns.parse::<u128>()?, kind == "G"));
            }
        }
        if !child.wait()?.success() {
            return Err("a contending process failed".into());
        }
    }
    let elapsed = started.elapsed();
    events.sort_unstable();
    let mut latencies: Vec<f64> = events
        .windows(2)
        .filter(|w| !w[0].1 && w[1].1)
        .map(|w| (w[1].0 - w[0].0) as f64 / 1e6)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "{} processes x {} rounds, hold {} ms: {} hand-offs, p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({:.1} s in all)",
        args.processes,
        args.rounds,
        args.hold_ms,
        latencies.len(),
        pick(0.5),
        pick(0.9),
        pick(0.99),
        pick(1.0),
        elapsed.as_secs_f64()
    );

    // What idle waiters cost the server: statements per second with 1 waiter (the head) and
    // with all of them queued behind a holder that keeps the mutex.
    if let Some(rates) = idle_cost::<C>(args, &pool, &mutex, &spawn)? {
        let (one, all) = rates;
        let behind = (all - one) / (args.processes - 1) as f64;
        println!(
            "idle waiters: {one:.1} statements/s with 1 waiter (the head, holder included), \
             {all:.1} with {}; {behind:.2} statements/s for each waiter behind the head",
            args.processes
        );
    }
    Ok(())
}

type Spawn<'a> = dyn Fn(u32, u64) -> Res<Child> + 'a;

/// Statements/s the server ran while `1` and then `processes` waiters queued behind a holder.
fn idle_cost<C>(
    args: &Args,
    pool: &diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<C>>,
    mutex: &Semaphore,
    spawn: &Spawn<'_>,
) -> Res<Option<(f64, f64)>>
where
    C: LeaseConnection + R2D2Connection + QuestionCounter,
{
    let mut counter = pool.get()?;
    if args.idle_secs == 0 || C::questions(&mut counter)?.is_none() {
        return Ok(None);
    }
    let mut rates = Vec::new();
    for waiters in [1, args.processes] {
        let held = mutex.acquire(pool, Duration::from_secs(60))?;
        let mut children = (0..waiters).map(|_| spawn(1, 0)).collect::<Res<Vec<_>>>()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while mutex.queue(&mut counter)?.len() < waiters + 1 {
            if Instant::now() > deadline {
                return Err("waiters did not queue".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Let the waiters' backoff reach its cap.
        std::thread::sleep(Duration::from_secs(3));
        let before = C::questions(&mut counter)?.unwrap_or(0);
        std::thread::sleep(Duration::from_secs(args.idle_secs));
        let after = C::questions(&mut counter)?.unwrap_or(0);
        // Minus the counter's own statement.
        rates.push((after - before - 1) as f64 / args.idle_secs as f64);
        let _ = held.release()?;
        for child in &mut children {
            child.wait()?;
        }
    }
    Ok(Some((rates[0], rates[1])))
}

/// The server's count of statements clients sent, where it keeps one.
trait QuestionCounter: Sized {
    fn questions(_conn: &mut Self) -> Res<Option<u64>> {
        Ok(None)
    }
}

impl QuestionCounter for PgConnection {}
impl QuestionCounter for SqliteConnection {}

impl QuestionCounter for MysqlConnection {
    fn questions(conn: &mut Self) -> Res<Option<u64>> {
        #[derive(diesel::QueryableByName)]
        struct Status {
            #[diesel(sql_type = diesel::sql_types::Text)]
            #[diesel(column_name = Value)]
            value: String,
        }
        let status: Status =
            diesel::sql_query("SHOW GLOBAL STATUS LIKE 'Questions'").get_result(conn)?;
        Ok(Some(status.value.parse()?))
    }
}
