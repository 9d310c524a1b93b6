//! Worker process for the semaphore tests: contends for, holds or waits on a semaphore.
//!
//! `semaphore-worker <backend> <url> <command> <resource> <permits> <ttl_ms> <max_poll_ms> [...]`
//!
//! - `contend <iterations> <who> <shared|rw|control|control-rw>`: acquire, record `enter`, hold
//!   0–10 ms, record `exit`, release; `rw` picks reader or writer at random (a 30% chance of
//!   writing); `control…`: the same on seed 001's `process_control` table.
//! - `hold`: acquire, print `HELD <ticket>`, then sleep until killed.
//! - `wait <timeout_ms>`: acquire with that timeout, print `GOT <ticket>` or `TIMEOUT`.
#![allow(clippy::unwrap_used)]

use diesel_lease::prelude::*;
use std::error::Error;
use std::io::Write;
use std::time::Duration;

use diesel::r2d2::R2D2Connection;
use diesel_lease::semaphore::{RwLock, Semaphore};
use diesel_lease::LeaseConnection;

#[path = "../semaphore/history.rs"]
#[allow(dead_code)]
mod history;

#[path = "../semaphore/control_model.rs"]
#[allow(dead_code)]
mod control_model;

use control_model::ProcessControl;
use history::SemTestConn;

type Res<T> = Result<T, Box<dyn Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (backend, url, rest) = match args.as_slice() {
        [backend, url, rest @ ..] => (backend.as_str(), url.as_str(), rest),
        _ => return Err("usage: semaphore-worker <backend> <url> <command> ...".into()),
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
        other => Err(format!("backend {other} is not compiled in").into()),
    }
}

fn run<C>(url: &str, args: &[String]) -> Res<()>
where
    C: LeaseConnection + R2D2Connection + SemTestConn,
{
    let [command, resource, permits, ttl_ms, max_poll_ms, extra @ ..] = args else {
        return Err("missing arguments".into());
    };
    let ms = |s: &str| -> Res<Duration> { Ok(Duration::from_millis(s.parse()?)) };
    let sem = Semaphore::new(resource.as_str(), permits.parse()?)
        .with_ttl(ms(ttl_ms)?)
        .with_max_poll_interval(ms(max_poll_ms)?);
    let pool = diesel_lease::pool::build_pool::<C>(url, 3)?;
    let mut out = std::io::stdout();
    match (command.as_str(), extra) {
        ("contend", [iterations, who, kind]) => {
            let control = kind.starts_with("control");
            let (sem, rw) = if control {
                (
                    ProcessControl::semaphore(resource.as_str(), permits.parse()?),
                    ProcessControl::rw_lock(resource.as_str()),
                )
            } else {
                (sem, RwLock::new(resource.as_str()))
            };
            // Releases wait for the resource's row lock up to 20 s, as the test's own threads
            // do (tests/semaphore/contention.rs, RELEASE_WAIT): sixteen clients and the
            // machine's load can hold it longer than the default 2 s.
            let sem = sem
                .with_ttl(ms(ttl_ms)?)
                .with_max_poll_interval(ms(max_poll_ms)?)
                .with_drop_wait(Duration::from_secs(20));
            let rw = rw
                .with_max_readers(permits.parse()?)
                .with_ttl(ms(ttl_ms)?)
                .with_max_poll_interval(ms(max_poll_ms)?)
                .with_drop_wait(Duration::from_secs(20));
            let rw_kind = kind == "rw" || kind == "control-rw";
            for _ in 0..iterations.parse::<u32>()? {
                let permit = if rw_kind && rand::random_bool(0.3) {
                    rw.write(&pool, Duration::from_secs(60))?
                } else if rw_kind {
                    rw.read(&pool, Duration::from_secs(60))?
                } else {
                    sem.acquire(&pool, Duration::from_secs(60))?
                };
                let mode = permit.mode().as_str();
                pool.get()?.record(who, "enter", mode)?;
                std::thread::sleep(Duration::from_millis(rand::random_range(0..10)));
                pool.get()?.record(who, "exit", mode)?;
                let _ = permit.release()?;
            }
        }
        ("hold", []) => {
            let permit = sem.acquire(&pool, Duration::from_secs(60))?;
            writeln!(out, "HELD {}", permit.ticket())?;
            out.flush()?;
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        ("wait", [timeout_ms]) => match sem.acquire(&pool, ms(timeout_ms)?) {
            Ok(permit) => {
                writeln!(out, "GOT {}", permit.ticket())?;
                let _ = permit.release()?;
            }
            Err(diesel_lease::Error::Timeout { .. }) => writeln!(out, "TIMEOUT")?,
            Err(e) => return Err(e.into()),
        },
        _ => return Err(format!("unknown command {command} {extra:?}").into()),
    }
    Ok(())
}
