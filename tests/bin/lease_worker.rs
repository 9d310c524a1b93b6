//! Worker process for the lease tests: `lease-worker <backend> <url> <mode> <args…>`.
//!
//! Modes:
//! - `hold <name> <ttl_ms>`: take the lease, print `ACQUIRED <token>`, then sleep until killed;
//! - `hold-then-extend <name> <ttl_ms>`: take the lease, print `ACQUIRED <token>`, wait for a
//!   line on stdin, then extend it and print `EXTEND ok` or `EXTEND <error>`, release it and
//!   print `RELEASE ok` or `RELEASE <error>` (the operator tool's forced release fences it);
//! - `take <name> <ttl_ms> <timeout_ms>`: wait for the lease, print
//!   `ACQUIRED <token> <acquired_at_micros>`, release it, exit;
//! - `contend <name> <count>`: `count` times: wait for the lease, log its token into
//!   `grants (token, pid)` while holding it, release;
//! - `drop-and-exit <name> <ttl_ms> <flush|exit>`: take the lease through a pool with
//!   keep-alive on, print `ACQUIRED <token>`, drop the guard and exit at once (`exit`), or
//!   first wait for the keeper to release it (`flush`, printing `FLUSHED <true|false>`);
//! - `farm <name> <interval_ms> <ttl_ms>`: the farm loop of seed 000: run the periodic job
//!   whenever it is due here, logging each run into `farm_runs (due_at, token, pid)`; runs until
//!   killed (or 120 s).
#![allow(clippy::print_stdout)]

use std::io::Write;
use std::time::{Duration, Instant};

use diesel::r2d2::R2D2Connection;
use diesel_lease::lease::schedule::every;
use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_lease::{BorrowConnection, LeaseConnection, Released};

#[path = "../lease/support.rs"]
mod support;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (backend, url, rest) = match args.as_slice() {
        [backend, url, rest @ ..] => (backend.as_str(), url.as_str(), rest),
        _ => panic!("usage: lease-worker <backend> <url> <mode> <args…>"),
    };
    match backend {
        #[cfg(feature = "postgres")]
        "postgres" => run::<diesel::PgConnection>(url, rest),
        #[cfg(feature = "sqlite")]
        "sqlite" => run::<diesel::SqliteConnection>(url, rest),
        #[cfg(feature = "mysql")]
        "mysql" => run::<diesel::MysqlConnection>(url, rest),
        #[cfg(feature = "mariadb")]
        "mariadb" => run::<diesel::mariadb::MariadbConnection>(url, rest),
        other => panic!("backend {other} is not enabled"),
    }
}

fn ms(arg: &str) -> Duration {
    Duration::from_millis(arg.parse().expect("milliseconds"))
}

fn connect<C: LeaseConnection>(url: &str) -> C {
    let mut conn = C::establish(url).expect("connect");
    diesel_lease::pool::ConnectionTuning::default()
        .apply(&mut conn)
        .expect("tune");
    conn
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("flush");
}

fn run<C: LeaseConnection + R2D2Connection + BorrowConnection<Conn = C>>(
    url: &str,
    args: &[String],
) {
    let pid = i64::from(std::process::id());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["hold", name, ttl] => {
            let mut conn = connect::<C>(url);
            let held = Lease::acquire(
                &mut conn,
                name,
                &LeaseOptions::new(ms(ttl)),
                Duration::from_secs(60),
            )
            .expect("acquire");
            say(format!("ACQUIRED {}", held.token()));
            std::thread::sleep(Duration::from_secs(120));
        }
        ["hold-then-extend", name, ttl] => {
            let mut conn = connect::<C>(url);
            let mut held = Lease::acquire(
                &mut conn,
                name,
                &LeaseOptions::new(ms(ttl)),
                Duration::from_secs(60),
            )
            .expect("acquire");
            say(format!("ACQUIRED {}", held.token()));
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).expect("stdin");
            let outcome = |r: diesel_lease::Result<()>| match r {
                Ok(()) => "ok".to_string(),
                Err(diesel_lease::Error::LeaseLost { .. }) => "LeaseLost".to_string(),
                Err(e) => format!("{e}"),
            };
            say(format!(
                "EXTEND {}",
                outcome(held.extend(&mut conn, ms(ttl)))
            ));
            // A release of a lost lease reports `WasLost`; the protocol keeps its word for it.
            let released = match held.release(&mut conn) {
                Ok(Released::WasHeld) => "ok".to_string(),
                Ok(Released::WasLost) => "LeaseLost".to_string(),
                Err(e) => format!("{e}"),
            };
            say(format!("RELEASE {released}"));
        }
        ["drop-and-exit", name, ttl, then] => {
            let pool = diesel_lease::pool::build_pool::<C>(url, 2).expect("pool");
            let options = LeaseOptions::new(ms(ttl)).keep_alive(true);
            let guard = diesel_lease::LeaseGuard::try_acquire(&pool, name, &options)
                .expect("acquire")
                .expect("free");
            say(format!("ACQUIRED {}", guard.token()));
            drop(guard);
            if *then == "flush" {
                let flushed = diesel_lease::pool::flush_releases(&pool, Duration::from_secs(30));
                say(format!("FLUSHED {}", flushed.expect("flush")));
            }
            // Returning from `main` ends the process, the keeper's thread with it.
        }
        ["take", name, ttl, timeout] => {
            let mut conn = connect::<C>(url);
            let mut taken =
                Lease::acquire(&mut conn, name, &LeaseOptions::new(ms(ttl)), ms(timeout))
                    .expect("acquire");
            let record = Lease::inspect(&mut conn, name)
                .expect("inspect")
                .expect("row");
            say(format!(
                "ACQUIRED {} {}",
                taken.token(),
                record.acquired_at_micros
            ));
            let _ = taken.release(&mut conn).expect("release");
        }
        ["contend", name, count] => {
            let mut conn = connect::<C>(url);
            let options = LeaseOptions::new(Duration::from_secs(60))
                .poll(Duration::from_millis(1), Duration::from_millis(20));
            for _ in 0..count.parse::<u32>().expect("count") {
                let mut held = Lease::acquire(&mut conn, name, &options, Duration::from_secs(120))
                    .expect("acquire");
                support::exec(
                    &mut conn,
                    "INSERT INTO grants (token, pid) VALUES (?, ?)",
                    &[held.token().get(), pid],
                );
                let _ = held.release(&mut conn).expect("release");
            }
            say("DONE".to_string());
        }
        ["farm", name, interval, ttl] => {
            let pool = diesel_lease::pool::build_pool::<C>(url, 2).expect("pool");
            let mut log = connect::<C>(url);
            let deadline = Instant::now() + Duration::from_secs(120);
            say("STARTED".to_string());
            every(ms(interval))
                .lease(LeaseOptions::new(ms(ttl)))
                .run_until(
                    &pool,
                    name,
                    || Instant::now() >= deadline,
                    |occurrence| {
                        support::exec(
                            &mut log,
                            "INSERT INTO farm_runs (due_at, token, pid) VALUES (?, ?, ?)",
                            &[occurrence.due_at_micros(), occurrence.token().get(), pid],
                        );
                    },
                )
                .expect("farm loop");
        }
        other => panic!("unknown mode {other:?}"),
    }
}
