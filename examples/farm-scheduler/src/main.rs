//! A farm of identical worker processes runs one periodic job — "write the report" — once per
//! interval, coordinated only through the database they share (seed 000).
//!
//! ```text
//! cargo run -p farm-scheduler                       # SQLite in a temp file
//! DATABASE_URL=postgres://… cargo run -p farm-scheduler   # PostgreSQL, in a schema of its own
//! ```
//!
//! The program re-executes itself as `farm-scheduler worker <n> <url> <run_ms>` four times, the
//! workers starting a little apart as servers of a farm do. Every worker runs the same loop
//! (`every(interval).run_until(…)`); the database hands each occurrence to exactly one of them.
//! The job writes the report with its fencing token, in a conditional update that a late,
//! paused holder could not win (`… WHERE last_token < $token`).
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::r2d2::R2D2Connection;
use diesel_lease::lease::schedule::every;
use diesel_lease::lease::LeaseOptions;
use diesel_lease::{BorrowConnection, LeaseConnection};
use example_db::{Backend, ExampleDb};

const WORKERS: u64 = 4;
const INTERVAL: Duration = Duration::from_millis(500);
const FARM_RUNS_FOR: Duration = Duration::from_millis(4_000);

diesel::table! {
    /// The protected resource: the latest report and the token of the run that wrote it.
    farm_demo_report (id) {
        /// Always 1: there is one report.
        id -> Integer,
        /// The fencing token of the run that wrote it last.
        last_token -> BigInt,
        /// Which worker wrote it last.
        written_by -> Text,
        /// How many runs wrote it.
        runs -> BigInt,
    }
}

/// The two backends this example runs on, with the one statement that differs in type.
trait FarmDb: LeaseConnection + R2D2Connection + BorrowConnection<Conn = Self> {
    fn write_report(&mut self, token: i64, by: &str) -> QueryResult<usize>;
}

/// The fenced write: it lands only if no run with a larger token has written already.
macro_rules! fenced_write {
    ($conn:expr, $token:expr, $by:expr) => {
        diesel::update(
            farm_demo_report::table
                .find(1)
                .filter(farm_demo_report::last_token.lt($token)),
        )
        .set((
            farm_demo_report::last_token.eq($token),
            farm_demo_report::written_by.eq($by),
            farm_demo_report::runs.eq(farm_demo_report::runs + 1),
        ))
        .execute($conn)
    };
}

impl FarmDb for diesel::SqliteConnection {
    fn write_report(&mut self, token: i64, by: &str) -> QueryResult<usize> {
        fenced_write!(self, token, by)
    }
}

impl FarmDb for diesel::PgConnection {
    fn write_report(&mut self, token: i64, by: &str) -> QueryResult<usize> {
        fenced_write!(self, token, by)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        let (n, url, job) = (&args[2], &args[3], &args[5]);
        let run_for = Duration::from_millis(args[4].parse().unwrap());
        if url.starts_with("postgres") {
            worker::<diesel::PgConnection>(n, url, run_for, job);
        } else {
            worker::<diesel::SqliteConnection>(n, url, run_for, job);
        }
        return;
    }

    // A SQLite file in a temporary directory, or a schema of its own in DATABASE_URL's
    // PostgreSQL database; removed at the end (see `example_db`).
    let db = match ExampleDb::open("farm-scheduler") {
        Ok(db) => db,
        Err(e) => {
            eprintln!("farm-scheduler FAILED: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", db.describe());
    match db.backend() {
        Backend::Postgres => setup::<diesel::PgConnection>(db.url()),
        Backend::Sqlite => setup::<diesel::SqliteConnection>(db.url()),
    }
    println!("farm of {WORKERS} workers, one report every {INTERVAL:?}");
    coordinate(db.url());
}

/// Creates the leases table and the report row.
fn setup<C: FarmDb>(url: &str) {
    let mut conn = C::establish(url).unwrap();
    diesel_lease::run_migrations(&mut conn).unwrap();
    conn.batch_execute(
        "CREATE TABLE farm_demo_report (id INTEGER PRIMARY KEY, last_token BIGINT NOT NULL,
                                        written_by TEXT NOT NULL, runs BIGINT NOT NULL);
         INSERT INTO farm_demo_report VALUES (1, 0, '', 0);",
    )
    .unwrap();
}

/// Starts the workers a little apart, prints what they report, and checks the outcome.
fn coordinate(url: &str) {
    // A job name of its own per demo run, so that each run starts a fresh schedule.
    let job = format!("farm-demo-{}", std::process::id());
    let start = Instant::now();
    let exe = std::env::current_exe().unwrap();
    let mut readers = Vec::new();
    for n in 1..=WORKERS {
        let stagger = Duration::from_millis(350) * (n as u32 - 1);
        std::thread::sleep(stagger.saturating_sub(start.elapsed()));
        let run_for = FARM_RUNS_FOR.saturating_sub(start.elapsed());
        let mut child = Command::new(&exe)
            .args([
                "worker",
                &n.to_string(),
                url,
                &run_for.as_millis().to_string(),
                &job,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        println!("{:>6} ms  worker {n} started", start.elapsed().as_millis());
        let out = child.stdout.take().unwrap();
        readers.push(std::thread::spawn(move || {
            let mut dues = Vec::new();
            for line in BufReader::new(out).lines() {
                let line = line.unwrap();
                if let Some(due) = line.strip_prefix("DUE ") {
                    dues.push(due.parse::<i64>().unwrap());
                } else {
                    println!("{line}");
                }
            }
            child.wait().unwrap();
            dues
        }));
    }
    let mut dues: Vec<i64> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    dues.sort();
    let ran = dues.len();
    dues.dedup();
    let grid = dues
        .windows(2)
        .all(|w| w[1] - w[0] == INTERVAL.as_micros() as i64);
    println!(
        "summary: {ran} occurrences in {:.1} s, {} distinct, {}",
        start.elapsed().as_secs_f64(),
        dues.len(),
        if ran == dues.len() && grid {
            "each interval ran exactly once"
        } else {
            "some intervals were skipped (coalesced) or repeated"
        }
    );
}

/// One node of the farm: the loop every server runs.
fn worker<C: FarmDb>(n: &str, url: &str, run_for: Duration, job: &str) {
    let pool = diesel_lease::pool::build_pool::<C>(url, 2).unwrap();
    let mut conn = C::establish(url).unwrap();
    diesel_lease::pool::ConnectionTuning::default()
        .apply(&mut conn)
        .unwrap();
    let me = format!("worker {n} (pid {})", std::process::id());
    let until = Instant::now() + run_for;
    every(INTERVAL)
        // A run holds the job's lease for at most 2 s: a worker that dies mid-run blocks the
        // job no longer than that, and the schedule itself moved on when the run was granted.
        .lease(LeaseOptions::new(Duration::from_secs(2)))
        .run_until(
            &pool,
            job,
            || Instant::now() >= until,
            |occurrence| {
                let token = occurrence.token().get();
                let written = conn.write_report(token, &me).unwrap();
                let due = occurrence.due_at().unwrap().format("%H:%M:%S%.3f");
                println!(
                    "{due}  {me} wrote the report with fencing token {token} (accepted: {})",
                    written == 1
                );
                println!("DUE {}", occurrence.due_at_micros());
            },
        )
        .unwrap();
}
