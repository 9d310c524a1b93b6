//! Ten worker processes, at most three at once: a diesel-lease semaphore across processes.
//!
//! ```text
//! cargo run -p semaphore-demo                          # SQLite in a temporary file
//! DATABASE_URL=postgres://… cargo run -p semaphore-demo   # PostgreSQL, in a schema of its own
//! ```
//!
//! The program starts ten copies of itself (`semaphore-demo worker …`). Each worker calls a
//! pretend partner API twice, and each call needs one of the three permits of the
//! `partner-api` semaphore. Meanwhile the parent watches the semaphore's queue and prints who
//! holds a permit over time; at the end it prints the most holders it ever saw.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use diesel::r2d2::R2D2Connection;
use diesel::{PgConnection, SqliteConnection};
use diesel_lease::pool::build_pool;
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::{LeaseConnection, OwnerId};
use example_db::{Backend, ExampleDb};

const WORKERS: usize = 10;
const PERMITS: u32 = 3;
const CALLS_PER_WORKER: usize = 2;
const RESOURCE: &str = "partner-api";

type Res<T = ()> = Result<T, example_db::BoxError>;

fn main() -> Res {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, backend, url, id] if cmd == "worker" => match backend.as_str() {
            "postgres" => worker::<PgConnection>(url, id),
            _ => worker::<SqliteConnection>(url, id),
        },
        _ => {
            // A SQLite file in a temporary directory, or a schema of its own in DATABASE_URL's
            // PostgreSQL database; removed at the end (see `example_db`).
            let db = ExampleDb::open("semaphore-demo")?;
            println!("{}", db.describe());
            match db.backend() {
                Backend::Postgres => watch::<PgConnection>("postgres", db.url()),
                Backend::Sqlite => watch::<SqliteConnection>("sqlite", db.url()),
            }
        }
    }
}

/// The semaphore every process declares: same name, same permit count.
fn partner_api() -> Res<Semaphore> {
    // Hand a freed permit over within 100 ms on SQLite (PostgreSQL wakes waiters at once).
    Ok(Semaphore::new(RESOURCE, PERMITS).with_max_poll_interval(Duration::from_millis(100)))
}

/// One worker: wait for a permit, "call the API" for a while, release, repeat.
fn worker<C: LeaseConnection + R2D2Connection>(url: &str, id: &str) -> Res {
    let pool = build_pool::<C>(url, 2)?;
    let sem = partner_api()?.with_owner(OwnerId::new(format!("w{id}"))?);
    for _ in 0..CALLS_PER_WORKER {
        let permit = sem.acquire(&pool, Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_millis(rand::random_range(300..700)));
        if permit.release()?.was_lost() {
            eprintln!("worker {id}: the permit expired while it was held");
        }
    }
    Ok(())
}

/// The parent: start the workers, print who holds a permit whenever it changes.
fn watch<C: LeaseConnection + R2D2Connection>(backend: &str, url: &str) -> Res {
    let pool = build_pool::<C>(url, 2)?;
    diesel_lease::run_migrations(&mut pool.get()?)?;
    let sem = partner_api()?;
    println!("{WORKERS} workers, at most {PERMITS} at once ({backend})");

    let exe = std::env::current_exe()?;
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|i| {
            Command::new(&exe)
                .args(["worker", backend, url, &i.to_string()])
                .spawn()
        })
        .collect::<Result<_, _>>()?;

    let started = Instant::now();
    let (mut most, mut last) = (0, String::new());
    while !all_done(&mut workers)? {
        let queue = sem.queue(&mut pool.get()?)?;
        let holders: Vec<&str> = queue
            .iter()
            .filter(|r| r.granted)
            .map(|r| r.owner.as_str())
            .collect();
        most = most.max(holders.len());
        let line = format!(
            "{:<3} holding {:<12} waiting {}",
            "#".repeat(holders.len()),
            holders.join(" "),
            queue.len() - holders.len()
        );
        if line != last {
            println!("{:5.2}s  {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        if started.elapsed() > Duration::from_secs(60) {
            workers.iter_mut().for_each(|w| drop(w.kill()));
            return Err("the workers did not finish within a minute".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "done in {:.1}s: at most {most} workers held a permit at once (limit {PERMITS})",
        started.elapsed().as_secs_f64()
    );
    if most > PERMITS as usize {
        return Err("more holders than permits".into());
    }
    Ok(())
}

/// `true` once every worker exited; an error if one failed.
fn all_done(workers: &mut [Child]) -> Res<bool> {
    let mut done = true;
    for w in workers {
        match w.try_wait()? {
            Some(status) if !status.success() => {
                return Err(format!("a worker failed: {status}").into())
            }
            Some(_) => {}
            None => done = false,
        }
    }
    Ok(done)
}
