//! PgBouncer in transaction pooling mode in front of PostgreSQL (`scripts/test.sh` starts
//! Debian's PgBouncer with 4 server connections per database; `DIESEL_LEASE_TEST_PGBOUNCER`).
//!
//! Each transaction of a client runs on whichever server connection is free, so clients really
//! share server sessions here: more clients than server connections in every test. A pool built
//! with `PoolOptions::transaction_pooler` works through it (claims, lease guards, semaphores, the
//! `Worker`); one that is not fails at its first call with `Error::Config` saying what to change.
//! Set-up and checks use the direct URL.
#![cfg(feature = "postgres")]

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::PgConnection;
use diesel_lease::lease::{LeaseGuard, LeaseOptions};
use diesel_lease::pool::{build_pool, PoolOptions};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::worker::Worker;
use diesel_lease::Error;

use crate::claim::basics::postgres::cases::seed_jobs;
use crate::claim::schedule::postgres::cases::{insert_task, tasks_table};
use crate::common::history::{
    check_claims, completion, hand_out, hand_out_from_worker_line, with_first_hand_out_doubled,
    Event, History,
};
use crate::common::{worker_bin, Postgres, TestDb};
use crate::models::schema::{importjobs, tasks};
use crate::models::{ImportJob, Task};
use crate::ops::tracing::Capture;

/// Instantiates `name(db, url_through_pgbouncer)` as the test `pgbouncer::name`.
macro_rules! pgbouncer_tests {
    ($($name:ident),* $(,)?) => {
        mod pgbouncer {
            use crate::common::{self, Postgres};
            $(
                #[test]
                fn $name() {
                    common::run::<Postgres>(stringify!($name), |db| {
                        if let Some(url) = common::through_pgbouncer(db, stringify!($name)) {
                            super::$name(db, &url);
                        }
                    });
                }
            )*
        }
    };
}

pgbouncer_tests!(
    a_claim_farm_takes_each_row_exactly_once,
    batches_claimed_and_completed_through_the_pooler_finish_each_row_once,
    lease_guards_have_one_holder_at_a_time_and_increasing_tokens,
    a_semaphore_never_has_more_than_n_holders,
    waiters_are_woken_through_the_direct_listen_url,
    without_a_listen_url_nothing_listens_and_waiters_poll,
    a_worker_runs_every_row_once,
    a_pool_not_built_for_the_pooler_fails_at_its_first_call,
);

type PgPool = Pool<ConnectionManager<PgConnection>>;

/// A pool of `size` through the pooler, its listener on `listen_url` (or none).
fn pooler_pool(url: &str, size: u32, listen_url: Option<&str>) -> PgPool {
    let mut options = PoolOptions::default().transaction_pooler();
    if let Some(listen_url) = listen_url {
        options = options.listen_url(listen_url);
    }
    options
        .build::<PgConnection>(url, size)
        .expect("pool through PgBouncer")
}

/// 600 rows, 4 threads of this process on one pool and 2 worker processes (2 threads, batches
/// of 3): 12 clients on 4 server connections. Each row claimed exactly once; the threads
/// complete theirs. Every hand-out and the threads' completions are recorded as the threads and
/// processes saw them and judged by `common::history` (each row once per claim epoch, marked,
/// completed by its holder).
fn a_claim_farm_takes_each_row_exactly_once(db: &TestDb<Postgres>, url: &str) {
    const CLAIMED: &str = "EXECUTIONINPROGRESS";
    const ROWS: i64 = 600;
    const THREADS: usize = 4;
    seed_jobs(db, ROWS);
    let pool = pooler_pool(url, THREADS as u32, Some(&db.url));
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(worker_bin("claim-worker"))
                .args(["postgres", url, "drain", "3", "2"])
                .env("DIESEL_LEASE_TEST_TRANSACTION_POOLER", "1")
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn claim-worker")
        })
        .collect();
    let claimed = Mutex::new(Vec::new());
    let completed = AtomicUsize::new(0);
    let history = History::default();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut conn = pool.get().unwrap();
                while let Some(job) = ImportJob::claim().row(&mut conn).unwrap() {
                    history.record(hand_out(&job));
                    claimed.lock().unwrap().push(job.id);
                    let acknowledged = job.complete(&mut conn).unwrap();
                    history.record(completion(&job, acknowledged));
                    assert!(acknowledged, "row {} was ours", job.id);
                    completed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        for mut child in children {
            let stdout = BufReader::new(child.stdout.take().unwrap());
            for line in stdout.lines() {
                if let Some(event) = hand_out_from_worker_line(&line.unwrap()) {
                    if let Event::HandedOut { row, .. } = event {
                        claimed.lock().unwrap().push(row);
                    }
                    history.record(event);
                }
            }
            assert!(child.wait().unwrap().success(), "claim-worker failed");
        }
    });
    let mut claimed = claimed.into_inner().unwrap();
    claimed.sort_unstable();
    let distinct: HashSet<i64> = claimed.iter().copied().collect();
    assert_eq!(distinct.len(), claimed.len(), "a row was claimed twice");
    assert_eq!(
        claimed,
        (1..=ROWS).collect::<Vec<_>>(),
        "every row exactly once"
    );
    assert_eq!(done_rows(db), completed.into_inner() as i64);
    history.check_claims(CLAIMED);
    assert_eq!(
        history.hand_outs() as i64,
        ROWS,
        "every row handed out once"
    );
    // The check can fail on this very record: one hand-out given out a second time in its epoch
    // is a violation.
    let doubled = with_first_hand_out_doubled(&history.events());
    assert_eq!(
        check_claims(&doubled, CLAIMED).len(),
        1,
        "the checker misses a doubled hand-out"
    );
}

/// How many of seed 003's jobs are done (read on the direct URL).
fn done_rows(db: &TestDb<Postgres>) -> i64 {
    importjobs::table
        .filter(importjobs::statuscode.eq("DONE"))
        .count()
        .get_result(&mut db.conn())
        .unwrap()
}

/// 6 threads on a pool of 6 (4 server connections) drain 420 rows with `claim_batch(7)` +
/// `complete_batch`, whose PostgreSQL form sends the keys as arrays (`UPDATE … FROM unnest`):
/// each row claimed once, every completion reported as the worker's own, all rows done.
fn batches_claimed_and_completed_through_the_pooler_finish_each_row_once(
    db: &TestDb<Postgres>,
    url: &str,
) {
    const ROWS: i64 = 420;
    const THREADS: usize = 6;
    seed_jobs(db, ROWS);
    let pool = pooler_pool(url, THREADS as u32, None);
    let claimed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut conn = pool.get().unwrap();
                loop {
                    let rows = ImportJob::claim().batch(7).rows(&mut conn).unwrap();
                    if rows.is_empty() {
                        break;
                    }
                    let outcome = rows.complete(&mut conn).unwrap();
                    assert_eq!(
                        outcome,
                        vec![true; rows.len()],
                        "a fresh claim was not ours"
                    );
                    claimed.lock().unwrap().extend(rows.iter().map(|r| r.id));
                }
            });
        }
    });
    let mut claimed = claimed.into_inner().unwrap();
    claimed.sort_unstable();
    assert_eq!(
        claimed,
        (1..=ROWS).collect::<Vec<_>>(),
        "every row exactly once"
    );
    assert_eq!(done_rows(db), ROWS);
}

/// 3 threads take one lease 6 times each with `LeaseGuard::acquire`: never two holders, each
/// grant's token above the one before; one grant is held past its ttl on its keep-alive.
fn lease_guards_have_one_holder_at_a_time_and_increasing_tokens(db: &TestDb<Postgres>, url: &str) {
    db.migrate();
    let pool = pooler_pool(url, 3, None);
    let options = LeaseOptions::new(Duration::from_secs(3)).keep_alive(true);
    let holders = AtomicUsize::new(0);
    let tokens = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for thread in 0..3 {
            let (pool, options, holders, tokens) = (&pool, &options, &holders, &tokens);
            s.spawn(move || {
                for round in 0..6 {
                    let guard = LeaseGuard::acquire(
                        pool,
                        "through-pgbouncer",
                        options,
                        Duration::from_secs(60),
                    )
                    .unwrap();
                    assert_eq!(
                        holders.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    tokens.lock().unwrap().push(guard.token().0);
                    let hold = if (thread, round) == (0, 0) { 4_000 } else { 10 };
                    std::thread::sleep(Duration::from_millis(hold));
                    guard.ensure_held().expect("held throughout, kept alive");
                    holders.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().unwrap().was_held(), "released while held");
                }
            });
        }
    });
    let tokens = tokens.into_inner().unwrap();
    assert_eq!(tokens.len(), 18);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order: {tokens:?}"
    );
}

/// A 2-permit semaphore, 5 threads taking it 4 times each: never more than 2 holders.
fn a_semaphore_never_has_more_than_n_holders(db: &TestDb<Postgres>, url: &str) {
    db.migrate();
    let pool = pooler_pool(url, 4, Some(&db.url));
    let sem = Semaphore::new("through-pgbouncer", 2);
    let (holders, most, grants) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    std::thread::scope(|s| {
        for _ in 0..5 {
            s.spawn(|| {
                for _ in 0..4 {
                    let permit = sem.acquire(&pool, Duration::from_secs(60)).unwrap();
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    grants.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(15));
                    holders.fetch_sub(1, Ordering::SeqCst);
                    assert!(permit.release().unwrap().was_held());
                }
            });
        }
    });
    assert!(most.into_inner() <= 2, "more than 2 holders at once");
    assert_eq!(grants.into_inner(), 20);
    // On a connection of your own (no LISTEN through the pooler: woken within this process).
    let mutex = Semaphore::mutex("own-connection");
    let held = mutex.try_acquire(&pool).unwrap().expect("free");
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            assert!(held.release().unwrap().was_held());
        });
        let mut conn = pool.get().unwrap();
        let permit = mutex
            .acquire_on(&mut conn, Duration::from_secs(30))
            .unwrap();
        assert!(permit.release(&mut conn).unwrap().was_held());
    });
}

/// The roles of `db`'s sessions that the pool's listener opened (it names its sessions).
fn listener_roles(db: &TestDb<Postgres>) -> Vec<String> {
    #[derive(QueryableByName)]
    struct Role {
        #[diesel(sql_type = diesel::sql_types::Text)]
        usename: String,
    }
    diesel::sql_query(
        "SELECT usename::text AS usename FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'diesel-lease listener'",
    )
    .load::<Role>(&mut db.conn())
    .unwrap()
    .into_iter()
    .map(|r| r.usename)
    .collect()
}

/// Waits up to 30 s for `resource`'s queue to have `n` requests.
fn wait_for_queue(db: &TestDb<Postgres>, sem: &Semaphore, n: usize) {
    let started = Instant::now();
    while sem.queue(&mut db.conn()).unwrap().len() < n {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the waiter never queued"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pool's listener connects to the direct URL: its session is the one role that only the
/// direct URL names (PgBouncer knows no such user), and a waiter whose polls are far apart gets a
/// freed permit before its next poll is due.
fn waiters_are_woken_through_the_direct_listen_url(db: &TestDb<Postgres>, url: &str) {
    const ROLE: &str = "diesel_lease_direct_listener";
    db.migrate();
    db.ddl(
        &format!(
            "DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        ),
        "",
        "",
    );
    let listen_url = db.url.replacen("postgres@", &format!("{ROLE}@"), 1);
    let pool = pooler_pool(url, 4, Some(&listen_url));
    let sem = Semaphore::mutex("woken")
        .with_ttl(Duration::from_secs(120))
        .with_max_poll_interval(Duration::from_secs(30));
    let holder = sem.try_acquire(&pool).unwrap().expect("free");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| sem.acquire(&pool, Duration::from_secs(25)));
        wait_for_queue(db, &sem, 2);
        let started = Instant::now();
        while listener_roles(db).is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the listener never connected"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            listener_roles(db),
            [ROLE],
            "one listener, on the direct URL"
        );
        // Past the waiter's polls that the listener's first LISTEN causes.
        std::thread::sleep(Duration::from_millis(500));
        let released = Instant::now();
        assert!(holder.release().unwrap().was_held());
        let permit = waiter.join().unwrap().expect("woken, not timed out");
        assert!(
            released.elapsed() < Duration::from_secs(10),
            "handed over after {:?}",
            released.elapsed()
        );
        assert!(permit.release().unwrap().was_held());
    });
}

/// Without a direct URL the pool starts no listener (a `LISTEN` through the pooler would stay
/// on whichever server connection ran it) and says so once in a WARN; waiters still get in,
/// by polling.
fn without_a_listen_url_nothing_listens_and_waiters_poll(db: &TestDb<Postgres>, url: &str) {
    db.migrate();
    let warnings = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(warnings.clone())
        .finish();
    let pool = tracing::subscriber::with_default(subscriber, || pooler_pool(url, 4, None));
    let said = warnings.text();
    assert!(said.contains("no direct URL for its listener"), "{said}");
    assert!(said.contains("waiters poll"), "{said}");
    let sem = Semaphore::mutex("polled").with_max_poll_interval(Duration::from_millis(200));
    let holder = sem.try_acquire(&pool).unwrap().expect("free");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| sem.acquire(&pool, Duration::from_secs(30)));
        wait_for_queue(db, &sem, 2);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(listener_roles(db), Vec::<String>::new(), "nothing listens");
        assert!(holder.release().unwrap().was_held());
        let permit = waiter.join().unwrap().expect("granted at a poll");
        assert!(permit.release().unwrap().was_held());
    });
}

/// The `Worker` (claims, claim guards' heartbeats, completions) with 3 threads on a pool of 4,
/// beside 40 rows.
fn a_worker_runs_every_row_once(db: &TestDb<Postgres>, url: &str) {
    tasks_table(db);
    let ids: Vec<i64> = {
        let mut conn = db.conn();
        (0..40).map(|_| insert_task(&mut conn, -10, "")).collect()
    };
    let seen = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let worker = Worker::<Task, _>::new(pooler_pool(url, 4, Some(&db.url)))
            .concurrency(3)
            .batch(2);
        let run = s.spawn(|| {
            worker.run_until(&stop, |_, t: &Task| {
                seen.lock().unwrap().push(t.id);
                Ok::<_, String>(())
            })
        });
        let started = Instant::now();
        let done = || {
            tasks::table
                .filter(tasks::status.eq("done"))
                .count()
                .get_result::<i64>(&mut db.conn())
                .unwrap()
        };
        while done() < 40 && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::SeqCst);
        run.join().unwrap().unwrap()
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort_unstable();
    assert_eq!(seen, ids, "each row exactly once");
    assert_eq!(report.completed, 40);
}

/// The unsupported set-up fails at its first call with the error that says what to change:
/// `build_pool` sees the pooler (two connections answered from one server session), and a
/// connection whose Diesel statement cache is on meets another client's prepared statement on
/// the shared server connection at its first claim.
fn a_pool_not_built_for_the_pooler_fails_at_its_first_call(db: &TestDb<Postgres>, url: &str) {
    seed_jobs(db, 10);
    let fix = "PoolOptions::default().transaction_pooler()";
    match build_pool::<PgConnection>(url, 4) {
        Err(Error::Config(msg)) => {
            assert!(
                msg.contains("transaction pooler") && msg.contains(fix),
                "{msg}"
            )
        }
        other => panic!("expected Error::Config, got {other:?}"),
    }
    // The same database directly is fine.
    build_pool::<PgConnection>(&db.url, 2).expect("a direct URL is no pooler");

    let mut first = PgConnection::establish(url).unwrap();
    let job = ImportJob::claim().row(&mut first).unwrap().expect("a row");
    let mut second = PgConnection::establish(url).unwrap();
    match ImportJob::claim().row(&mut second) {
        Err(Error::Config(msg)) => {
            assert!(msg.contains(fix), "{msg}");
            assert!(
                msg.contains("__diesel_stmt_"),
                "the server's words are kept: {msg}"
            );
        }
        other => panic!("expected Error::Config, got {other:?}"),
    }
    drop((first, job));
}
