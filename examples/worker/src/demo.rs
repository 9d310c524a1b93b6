// The demo itself. `main.rs` compiles this file twice, with `Conn = SqliteConnection` and
// `Conn = PgConnection`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_lease::claim::RetryPolicy;
use diesel_lease::prelude::*;
use diesel_lease::worker::Worker;

use super::{emails, BoxError, Email, ATTEMPTS, EMAILS, PER_TENANT, TENANTS, THREADS};

type DbPool = Pool<ConnectionManager<Conn>>;

pub(super) fn run(url: &str, backend: &str) -> Result<(), BoxError> {
    // Room for the threads, their heartbeats and permits, the producer and the checks.
    let pool: DbPool = diesel_lease::pool::build_pool(url, THREADS as u32 + 6)?;
    let mut conn = pool.get()?;
    conn.batch_execute(DDL)?;
    // The per-tenant limit uses diesel-lease's semaphores, which live in its own tables.
    diesel_lease::run_migrations(&mut conn)?;

    let sent = Mutex::new(HashMap::<i64, u32>::new());
    let sending = Mutex::new(HashMap::<String, u32>::new());
    let busiest = Mutex::new(0);
    let stop = AtomicBool::new(false);
    // A panicking handler is part of the demo: one line instead of a backtrace, announced first.
    println!(
        "{EMAILS} e-mails, {THREADS} threads, at most {PER_TENANT} per tenant, {ATTEMPTS} attempts each.\n\
         On purpose, `bounce@…` always fails and `flaky@…` panics on its first attempt: the \
         \"(expected: a handler panicked …)\" lines below are part of the demo, and the Worker \
         retries those e-mails."
    );
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = (payload.downcast_ref::<String>().map(String::as_str))
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        eprintln!("(expected: a handler panicked: {message})")
    }));
    let started = Instant::now();
    let report = std::thread::scope(|s| {
        s.spawn(|| produce(&pool));
        s.spawn(|| stop_when_settled(&pool, &stop));
        Worker::new(pool.clone())
            .concurrency(THREADS)
            .batch(2)
            .retry_policy(
                RetryPolicy::new(ATTEMPTS)?
                    .base(Duration::from_millis(100))
                    .max_delay(Duration::from_secs(1)),
            )
            .limit_per_key(emails::tenant, PER_TENANT, |e: &Email| e.tenant.clone())
            .run_until(&stop, |_conn, email: &Email| {
                let running = Running::start(&sending, &email.tenant);
                let mut busiest = busiest.lock().expect("not poisoned");
                *busiest = (*busiest).max(running.now);
                drop(busiest);
                let outcome = send(email);
                drop(running);
                if outcome.is_ok() {
                    *sent
                        .lock()
                        .expect("not poisoned")
                        .entry(email.id)
                        .or_default() += 1;
                }
                outcome
            })
            .map_err(BoxError::from)
    })?;
    let secs = started.elapsed().as_secs_f64();
    println!("{report:?} in {secs:.1} s on {backend}");
    let busiest = busiest.into_inner().map_err(|_| "poisoned")?;
    let sent = sent.into_inner().map_err(|_| "poisoned")?;
    check(&mut conn, &sent, busiest)
}

/// One e-mail of a tenant being sent, counted until dropped (even by a panic).
struct Running<'a> {
    sending: &'a Mutex<HashMap<String, u32>>,
    tenant: &'a str,
    now: u32,
}

impl<'a> Running<'a> {
    fn start(sending: &'a Mutex<HashMap<String, u32>>, tenant: &'a str) -> Self {
        let mut all = sending.lock().unwrap_or_else(|e| e.into_inner());
        let n = all.entry(tenant.to_string()).or_default();
        *n += 1;
        let now = *n;
        drop(all);
        Running {
            sending,
            tenant,
            now,
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut all = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = all.get_mut(self.tenant) {
            *n -= 1;
        }
    }
}

/// "Sends" an e-mail: `bounce@…` always fails, `flaky@…` fails its first attempt by panicking.
fn send(email: &Email) -> Result<(), String> {
    if email.recipient.starts_with("bounce@") {
        return Err(format!("550 no such mailbox: {}", email.recipient));
    }
    if email.recipient.starts_with("flaky@") && email.attempts == 1 {
        panic!("connection reset while sending to {}", email.recipient);
    }
    std::thread::sleep(Duration::from_millis(20));
    Ok(())
}

/// Inserts the e-mails over about a second; every tenth is scheduled a second ahead.
fn produce(pool: &DbPool) -> Result<(), BoxError> {
    let mut conn = pool.get()?;
    for i in 0..EMAILS {
        let tenant = TENANTS[i as usize % TENANTS.len()];
        let recipient = match i % 12 {
            5 => format!("bounce@{tenant}.example"),
            7 => format!("flaky@{tenant}.example"),
            _ => format!("user{i}@{tenant}.example"),
        };
        let row = (emails::tenant.eq(tenant), emails::recipient.eq(&recipient));
        if i % 10 == 9 {
            diesel::insert_into(emails::table)
                .values((row, emails::run_at.eq(diesel::dsl::sql(LATER))))
                .execute(&mut conn)?;
        } else {
            diesel::insert_into(emails::table)
                .values(row)
                .execute(&mut conn)?;
        }
        // Wakes idle workers at once on PostgreSQL; nothing to do on SQLite, where they poll.
        Email::queue().notify(&mut conn)?;
        std::thread::sleep(Duration::from_millis(15));
    }
    Ok(())
}

/// Stops the worker once every e-mail is `sent` or `dead`.
fn stop_when_settled(pool: &DbPool, stop: &AtomicBool) -> Result<(), BoxError> {
    let mut conn = pool.get()?;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let settled: i64 = emails::table
            .filter(emails::status.eq_any(["sent", "dead"]))
            .count()
            .get_result(&mut conn)?;
        if settled == EMAILS {
            stop.store(true, Ordering::SeqCst);
            return Ok(());
        }
    }
}

/// The properties: each e-mail that could be sent was sent exactly once, the bounces are dead
/// with their error after the last attempt, and no tenant ever had more than its limit running.
fn check(conn: &mut Conn, sent: &HashMap<i64, u32>, busiest: u32) -> Result<(), BoxError> {
    if let Some((id, n)) = sent.iter().find(|(_, n)| **n != 1) {
        return Err(format!("e-mail {id} was sent {n} times").into());
    }
    let rows: Vec<Email> = emails::table.select(Email::as_select()).load(conn)?;
    for e in &rows {
        let bounce = e.recipient.starts_with("bounce@");
        let ok = match (bounce, e.status.as_str()) {
            (true, "dead") => {
                e.attempts == ATTEMPTS as i32
                    && e.last_error
                        .as_deref()
                        .is_some_and(|m| m.starts_with("550"))
            }
            (false, "sent") => sent.contains_key(&e.id),
            _ => false,
        };
        // By the database clock, nothing ran before its time (the first or a retry's).
        let ok = ok && e.claimed_at.is_some_and(|at| at >= e.run_at);
        if !ok {
            return Err(format!("unexpected end state: {e:?}").into());
        }
    }
    if busiest > PER_TENANT {
        return Err(format!("{busiest} e-mails of one tenant ran at once").into());
    }
    println!(
        "{} sent exactly once, {} dead after {ATTEMPTS} attempts, at most {busiest} per tenant at once",
        sent.len(),
        rows.len() - sent.len()
    );
    Ok(())
}
