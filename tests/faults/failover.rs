//! PostgreSQL failover: the primary crashes (`kill -9` of the postmaster and every backend) and
//! its streaming standby is promoted; clients use a multi-host URL with
//! `target_session_attrs=read-write`, so that their pools reconnect to whichever node is the
//! primary.
//!
//! `scripts/pg-pair.sh` (started by `scripts/test.sh`, which exports its path as
//! `DIESEL_LEASE_TEST_PG_PAIR`) makes a fresh pair per test, with synchronous or asynchronous
//! replication, and pauses the primary's WAL sender on request, so that "the last grants had not
//! reached the standby when the primary died" is a certainty instead of a race.
//!
//! What these tests show:
//! - **synchronous replication** (`synchronous_standby_names` naming the standby,
//!   `synchronous_commit = on`): a grant whose commit was not acknowledged fails for its caller;
//!   every acknowledged grant survives, so the new primary never hands out a fencing token
//!   again; a `LeaseGuard` whose keep-alive reaches the new primary keeps its grant (same
//!   token), and one that cannot reach it reports itself lost before the new primary gives its
//!   lease to anybody; a claim farm goes on on the new primary without a restart, and
//!   every row is completed (owner-checked `complete` returning `true`) exactly once; a
//!   semaphore never has more holders who believe they hold a permit than it has permits.
//!   What the workers were handed and believed is recorded as they saw it and judged by
//!   `common::history`: each row handed out once per claim epoch and completed by its holder,
//!   fencing tokens rising and no lease with two believers, no more permit holders than permits.
//! - **asynchronous replication** (PostgreSQL's default): an acknowledged grant can be lost, and
//!   the new primary grants the same token again. The test asserts that it does: it documents
//!   why the README asks for synchronous replication.
//! - **a listener URL naming a standby**, which refuses `LISTEN`: the pool's listener reconnects
//!   at its backoff's pace, not in a loop, and waiters get their permits by polling.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::PgConnection;
use diesel_lease::lease::{Lease, LeaseGuard, LeaseOptions};
use diesel_lease::prelude::*;

use crate::common::history::{check_claims, with_first_hand_out_doubled, Event, History};

mod schema {
    diesel::table! {
        failover_jobs (id) {
            id -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
        }
    }
}
use schema::failover_jobs;

/// A job whose claim is rescued 2 s after its holder went silent (here: died with the primary).
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = failover_jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done",
            owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_ms = 2000)]
#[allow(dead_code)] // the columns the claim reads back; the test looks at `id` only
struct FailoverJob {
    id: i64,
    status: String,
    owner: Option<String>,
    claimed_at: Option<NaiveDateTime>,
    attempts: i32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Replication {
    Sync,
    Async,
}

/// A primary and its standby from `scripts/pg-pair.sh`; stopped and deleted when dropped.
struct Pair {
    script: PathBuf,
    dir: String,
    primary: u16,
    standby: u16,
}

impl Pair {
    /// A fresh pair, or `None` (the test prints SKIPPED) when the test script did not say where
    /// `pg-pair.sh` is; a failure when it is required (`pg-pair` in DIESEL_LEASE_TEST_REQUIRE).
    fn start(test: &str, mode: Replication) -> Option<Pair> {
        let Ok(script) = std::env::var("DIESEL_LEASE_TEST_PG_PAIR") else {
            let required = std::env::var("DIESEL_LEASE_TEST_REQUIRE").unwrap_or_default();
            assert!(
                !required.split(',').any(|r| r.trim() == "pg-pair"),
                "pg-pair is required but DIESEL_LEASE_TEST_PG_PAIR is not set"
            );
            eprintln!(
                "SKIPPED {test}: DIESEL_LEASE_TEST_PG_PAIR is not set (scripts/test.sh sets it)"
            );
            return None;
        };
        let mode = match mode {
            Replication::Sync => "sync",
            Replication::Async => "async",
        };
        let out = Command::new("bash")
            .args([&script, "start", mode])
            .output()
            .expect("run pg-pair.sh");
        assert!(
            out.status.success(),
            "pg-pair.sh start {mode} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let vars: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Some(Pair {
            script: script.into(),
            dir: vars["DIR"].clone(),
            primary: vars["PRIMARY_PORT"].parse().expect("port"),
            standby: vars["STANDBY_PORT"].parse().expect("port"),
        })
    }

    /// The URL every client uses: both hosts, and only a read-write one will do.
    fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write&connect_timeout=2",
            self.primary, self.standby
        )
    }

    fn run(&self, command: &str) {
        let out = Command::new("bash")
            .arg(&self.script)
            .args([command, &self.dir])
            .output()
            .expect("run pg-pair.sh");
        assert!(
            out.status.success(),
            "pg-pair.sh {command} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Crashes the primary and promotes the standby.
    fn fail_over(&self) {
        self.run("crash-primary");
        self.run("promote");
    }

    /// A connection to the primary of the moment, waiting (up to 60 s) for the promotion.
    fn connect(&self) -> PgConnection {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match PgConnection::establish(&self.url()) {
                Ok(conn) => return conn,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("no read-write node within 60 s: {e}"),
            }
        }
    }

    /// The port of the node `conn` is connected to.
    fn port_of(conn: &mut PgConnection) -> i32 {
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>(
            "inet_server_port()",
        ))
        .get_result(conn)
        .expect("inet_server_port()")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .args(["stop", &self.dir])
            .output();
    }
}

fn options() -> LeaseOptions {
    LeaseOptions::new(Duration::from_secs(60))
}

/// Takes and releases the lease `grants` `n` times; returns the tokens the caller was told.
fn grant_and_release(conn: &mut PgConnection, n: usize) -> Vec<i64> {
    (0..n)
        .map(|_| {
            let mut lease = Lease::try_acquire(conn, "grants", &options())
                .expect("grant")
                .expect("free");
            let token = lease.token().get();
            assert!(lease.release(conn).expect("release").was_held(), "released");
            token
        })
        .collect()
}

/// The scenario both replication modes run: grants, then the WAL sender is paused and one more
/// grant is asked for, then the primary crashes and the standby is promoted, then one more grant
/// on the new primary. Returns (tokens the callers were told, the paused grant's outcome, the
/// token the new primary gave).
fn grants_across_a_promotion(pair: &Pair) -> (Vec<i64>, Result<Option<i64>, String>, i64) {
    let mut conn = pair.connect();
    assert_eq!(Pair::port_of(&mut conn), i32::from(pair.primary));
    diesel_lease::run_migrations(&mut conn).unwrap();
    let mut told = grant_and_release(&mut conn, 5);
    assert_eq!(told, [1, 2, 3, 4, 5]);

    pair.run("pause-wal");
    let (tx, rx) = mpsc::channel();
    let url = pair.url();
    let asking = std::thread::spawn(move || {
        let outcome = PgConnection::establish(&url)
            .map_err(|e| e.to_string())
            .and_then(|mut c| {
                Lease::try_acquire(&mut c, "grants", &options()).map_err(|e| e.to_string())
            })
            .map(|granted| granted.map(|l| l.token().get()));
        tx.send(outcome).unwrap();
    });
    // Synchronous replication cannot acknowledge while the WAL sender is stopped; asynchronous
    // replication acknowledges at once. Either way the outcome is known or pending after 2 s.
    let early = rx.recv_timeout(Duration::from_secs(2)).ok();
    pair.fail_over();
    let paused = match early {
        Some(outcome) => outcome,
        None => rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the paused grant never returned after the crash"),
    };
    asking.join().unwrap();
    if let Ok(Some(token)) = paused {
        told.push(token);
    }

    let mut conn = pair.connect();
    assert_eq!(
        Pair::port_of(&mut conn),
        i32::from(pair.standby),
        "the multi-host URL reached the promoted standby"
    );
    let next = Lease::try_acquire(&mut conn, "grants", &options())
        .expect("grant on the new primary")
        .expect("free: the last grant was released or never acknowledged");
    (told, paused, next.token().get())
}

/// The grants of [`grants_across_a_promotion`] as their callers were told them (each released
/// before the next was asked for), then the new primary's.
fn grant_history(told: &[i64], next: i64) -> History {
    let history = History::default();
    for (i, &token) in told.iter().enumerate() {
        history.granted("grants", token, &format!("caller-{i}"));
        history.grant_ended("grants", &format!("caller-{i}"));
    }
    history.granted("grants", next, "new-primary");
    history
}

/// What the library says of the pair's primary (`backend::Replication`), and what a lease that
/// requires synchronous replication does there: refused with `Error::Config` on the asynchronous
/// pair, granted on the synchronous one. On lease `strict`, apart from the tests' own `grants`.
fn replication_is_said(pair: &Pair, mode: Replication) {
    use diesel_lease::backend::{check_replication, Replication as Seen};
    let mut conn = pair.connect();
    diesel_lease::run_migrations(&mut conn).unwrap();
    let seen = check_replication(&mut conn).unwrap();
    let strict = LeaseOptions::new(Duration::from_secs(30)).require_synchronous_replication(true);
    let granted = Lease::try_acquire(&mut conn, "strict", &strict);
    match mode {
        Replication::Sync => {
            assert_eq!(seen, Seen::SyncStandbys { standbys: 1 });
            assert_eq!(seen.warning(), None);
            let mut lease = granted.unwrap().expect("free");
            assert!(lease.release(&mut conn).unwrap().was_held());
        }
        Replication::Async => {
            assert!(
                matches!(seen, Seen::AsyncStandbys { standbys: 1, .. }),
                "{seen:?}"
            );
            let warning = seen.warning().expect("said");
            assert!(warning.contains("same fencing token"), "{warning}");
            match granted {
                Err(diesel_lease::Error::Config(why)) => {
                    assert!(why.contains("asynchronously"), "{why}")
                }
                other => panic!("a strict grant on asynchronous standbys: {other:?}"),
            }
            // Refused before anything was written: the name was never granted.
            let record = Lease::inspect(&mut conn, "strict").unwrap();
            assert!(record.is_none(), "{record:?}");
        }
    }
}

/// Synchronous replication: the grant the crash interrupted failed for its caller, and the new
/// primary's token is larger than every token a caller was ever told.
#[test]
fn sync_replication_never_grants_a_token_twice() {
    let Some(pair) = Pair::start(
        "sync_replication_never_grants_a_token_twice",
        Replication::Sync,
    ) else {
        return;
    };
    replication_is_said(&pair, Replication::Sync);
    let (told, paused, next) = grants_across_a_promotion(&pair);
    assert!(
        paused.is_err(),
        "a grant whose commit the standby never confirmed must not be reported granted: {paused:?}"
    );
    assert!(
        told.iter().all(|&t| t < next),
        "token {next} granted again after the promotion (told before: {told:?})"
    );
    grant_history(&told, next).check_grants();
}

/// Asynchronous replication: the grant made while the WAL sender was paused was acknowledged,
/// then lost with the primary; the new primary hands out the same token again. This is the
/// failure the README's "Beyond one server" section tells users to configure away.
#[test]
fn async_replication_can_grant_a_token_twice() {
    let Some(pair) = Pair::start(
        "async_replication_can_grant_a_token_twice",
        Replication::Async,
    ) else {
        return;
    };
    replication_is_said(&pair, Replication::Async);
    let (told, paused, next) = grants_across_a_promotion(&pair);
    assert_eq!(
        paused,
        Ok(Some(6)),
        "asynchronous commit acknowledges at once"
    );
    assert_eq!(told, [1, 2, 3, 4, 5, 6]);
    assert_eq!(
        next, 6,
        "with asynchronous replication the lost grant's token is granted again"
    );
    // The grant checker sees it in the record of what the callers were told: it can fail.
    let violations = grant_history(&told, next).grant_violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
}

/// Two lease guards with keep-alive on the primary that dies. One's pool has only the dead
/// primary's address: it reports itself lost, and does so before the new primary gives its lease
/// to anybody else. The other's pool has the multi-host URL: its keep-alive reconnects to the new
/// primary, where synchronous replication kept its grant, and it keeps holding the lease with the
/// same token (or, if the promotion took longer than its local deadline, it reports itself lost
/// before anybody else gets the lease: the test accepts either, and checks the one that happened).
#[test]
fn guards_on_the_dead_primary_are_kept_or_know_they_lost_before_the_lease_moves() {
    let Some(pair) = Pair::start(
        "guards_on_the_dead_primary_are_kept_or_know_they_lost_before_the_lease_moves",
        Replication::Sync,
    ) else {
        return;
    };
    let ttl = Duration::from_secs(4);
    let options = LeaseOptions::new(ttl).keep_alive(true);
    let both = diesel_lease::pool::build_pool::<PgConnection>(&pair.url(), 3).unwrap();
    let primary_only = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?connect_timeout=2",
        pair.primary
    );
    let dead_end = diesel_lease::pool::build_pool::<PgConnection>(&primary_only, 3).unwrap();
    diesel_lease::run_migrations(&mut both.get().unwrap()).unwrap();
    let kept = LeaseGuard::try_acquire(&both, "kept", &options)
        .unwrap()
        .expect("free");
    let cut = LeaseGuard::try_acquire(&dead_end, "cut", &options)
        .unwrap()
        .expect("free");
    // Grants as each holder believed them: a guard's ends when the other node sees it lost.
    let history = History::default();
    for (name, guard) in [("kept", &kept), ("cut", &cut)] {
        history.granted(name, guard.token().get(), &format!("{name}-guard"));
    }
    let mut ended = BTreeSet::new();
    pair.fail_over();

    // Another node asks the new primary for both leases, over more than a ttl: whenever it gets
    // one, that lease's old guard must already have known it lost.
    let mut other = pair.connect();
    let deadline = Instant::now() + ttl * 3;
    let mut got_cut = None;
    while Instant::now() < deadline && got_cut.is_none() {
        for (name, guard) in [("kept", &kept), ("cut", &cut)] {
            let lost_before = guard.is_lost();
            if lost_before && ended.insert(name) {
                history.grant_ended(name, &format!("{name}-guard"));
            }
            if let Some(lease) = Lease::try_acquire(&mut other, name, &LeaseOptions::new(ttl))
                .unwrap_or_else(|e| panic!("asking the new primary for {name}: {e}"))
            {
                history.granted(name, lease.token().get(), "other");
                assert!(
                    lost_before,
                    "the new primary granted `{name}` while its old holder still believed it held it"
                );
                assert!(lease.token() > guard.token());
                if name == "cut" {
                    got_cut = Some(lease);
                } else {
                    // Not kept: the other node's work under it is over.
                    history.grant_ended(name, "other");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    history.check_grants();
    assert!(
        got_cut.is_some(),
        "the cut-off guard's lease never expired on the new primary"
    );
    assert!(
        cut.is_lost(),
        "the guard that cannot reach any primary must know it lost"
    );
    assert!(matches!(
        cut.ensure_held(),
        Err(diesel_lease::Error::LeaseLost { .. })
    ));
    if !kept.is_lost() {
        let record = Lease::inspect(&mut other, "kept")
            .unwrap()
            .expect("granted");
        assert!(
            record.is_held(),
            "kept by its keep-alive on the new primary"
        );
        assert_eq!(
            record.token,
            kept.token(),
            "the same grant, carried by replication"
        );
        assert!(kept.confirm_held().unwrap());
    }
    for guard in [kept, cut] {
        let dropping = Instant::now();
        drop(guard);
        assert!(
            dropping.elapsed() < diesel_lease::__private::DROP_WAIT + Duration::from_secs(5),
            "drop took {:?}",
            dropping.elapsed()
        );
    }
}

/// A claim farm on a pool with the multi-host URL: the primary dies mid-run, workers get errors,
/// retry, and go on on the new primary without a restart. Rows claimed on the dead primary are
/// rescued after their 2 s timeout. Every row ends `done`, and `complete` said `true` for each
/// exactly once.
#[test]
fn a_claim_farm_goes_on_after_a_promotion_and_completes_each_row_once() {
    let Some(pair) = Pair::start(
        "a_claim_farm_goes_on_after_a_promotion_and_completes_each_row_once",
        Replication::Sync,
    ) else {
        return;
    };
    // 400 rows in the suite; DIESEL_LEASE_TEST_FAILOVER_ROWS=20000 for a large farm by hand.
    let rows: i64 = std::env::var("DIESEL_LEASE_TEST_FAILOVER_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    const WORKERS: usize = 4;
    let mut conn = pair.connect();
    conn.batch_execute(
        "CREATE TABLE failover_jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL, owner TEXT,
             claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0);",
    )
    .unwrap();
    diesel::sql_query(
        "INSERT INTO failover_jobs (id, status) SELECT g, 'new' FROM generate_series(1, $1) g",
    )
    .bind::<diesel::sql_types::BigInt, _>(rows)
    .execute(&mut conn)
    .unwrap();
    let pool =
        diesel_lease::pool::build_pool::<PgConnection>(&pair.url(), WORKERS as u32 + 1).unwrap();
    let completed = Mutex::new(BTreeMap::<i64, u32>::new());
    let history = History::default();
    let errors = Mutex::new(Vec::<String>::new());
    let failed_over = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let step = pool.get().map_err(|e| e.to_string()).and_then(|mut conn| {
                        let Some(job) = FailoverJob::claim()
                            .row(&mut conn)
                            .map_err(|e| e.to_string())?
                        else {
                            return Ok(false);
                        };
                        let holder = job.owner.clone().unwrap_or_default();
                        history.record(Event::HandedOut {
                            row: job.id,
                            holder: holder.clone(),
                            state: job.status.clone(),
                            epoch: job.attempts.into(),
                        });
                        std::thread::sleep(Duration::from_millis(2)); // the work

                        // A completion that errs has an unknown outcome: not recorded.
                        let acknowledged = job.complete(&mut conn).map_err(|e| e.to_string())?;
                        history.record(Event::Completed {
                            row: job.id,
                            holder,
                            acknowledged,
                        });
                        if acknowledged {
                            *completed.lock().unwrap().entry(job.id).or_default() += 1;
                        }
                        Ok(true)
                    });
                    match step {
                        Ok(true) => {}
                        // Nothing claimable now: rows may still be held by the dead primary's
                        // claims until their timeout.
                        Ok(false) => std::thread::sleep(Duration::from_millis(50)),
                        Err(e) => {
                            errors.lock().unwrap().push(e);
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            });
        }
        // Fail over once a quarter of the rows are done; stop when all are done on the new
        // primary.
        let deadline =
            Instant::now() + Duration::from_secs(120) + Duration::from_millis(rows as u64 * 5);
        loop {
            if !failed_over.load(Ordering::SeqCst) {
                if completed.lock().unwrap().len() as i64 >= rows / 4 {
                    pair.fail_over();
                    failed_over.store(true, Ordering::SeqCst);
                }
            } else if done_rows(&pool) == Some(rows) || Instant::now() > deadline {
                stop.store(true, Ordering::SeqCst);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    history.check_claims("running");
    assert!(history.hand_outs() as i64 >= rows, "every row handed out");
    // The check can fail on this very record (see `with_first_hand_out_doubled`).
    assert_eq!(
        check_claims(&with_first_hand_out_doubled(&history.events()), "running").len(),
        1,
        "the checker misses a doubled hand-out"
    );
    let completed = completed.into_inner().unwrap();
    let twice: Vec<_> = completed.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "completed more than once: {twice:?}");
    let mut conn = pair.connect();
    assert_eq!(Pair::port_of(&mut conn), i32::from(pair.standby));
    assert_eq!(done_rows(&pool), Some(rows), "rows done on the new primary");
    // A `complete` whose commit the crash interrupted errs for its caller, although the standby
    // may have received it (the outcome of an unacknowledged commit is unknown): at most one such
    // row per worker is done without anybody having been told.
    assert!(
        completed.len() as i64 >= rows - WORKERS as i64,
        "only {} of {rows} completions acknowledged",
        completed.len()
    );
    assert!(
        !errors.into_inner().unwrap().is_empty(),
        "no worker saw the primary die: the failover happened after the work"
    );
}

/// How many rows are `done`, asked of the primary of the moment (`None` while there is none).
fn done_rows(
    pool: &diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<PgConnection>>,
) -> Option<i64> {
    let mut conn = pool.get_timeout(Duration::from_secs(1)).ok()?;
    failover_jobs::table
        .filter(failover_jobs::status.eq("done"))
        .count()
        .get_result(&mut conn)
        .ok()
}

/// A semaphore of 2 permits, 5 threads on the multi-host pool taking turns, the primary dying in
/// the middle: at no moment do more than 2 threads believe they hold a permit. A holder works in
/// steps of its lost signal, so it stops the moment it learns it lost; permits granted on the
/// dead primary are kept by their heartbeats on the new one or expire there only after their
/// holders knew. Threads go on after the promotion, and every one of them gets permits again.
#[test]
fn a_semaphore_never_over_grants_across_a_promotion() {
    let Some(pair) = Pair::start(
        "a_semaphore_never_over_grants_across_a_promotion",
        Replication::Sync,
    ) else {
        return;
    };
    const PERMITS: u32 = 2;
    const THREADS: usize = 5;
    let pool = diesel_lease::pool::build_pool::<PgConnection>(&pair.url(), THREADS as u32 * 2 + 2)
        .unwrap();
    diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
    let sem = diesel_lease::semaphore::Semaphore::new("partner-api", PERMITS)
        .with_ttl(Duration::from_secs(3));
    let believers = Mutex::new((0u32, 0u32)); // (now, most ever)
    let history = History::default();
    let after_promotion = Mutex::new(vec![0u32; THREADS]);
    let failed_over = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (sem, pool, believers, history, after, failed_over, stop) = (
                &sem,
                &pool,
                &believers,
                &history,
                &after_promotion,
                &failed_over,
                &stop,
            );
            s.spawn(move || {
                let holder = format!("thread-{t}");
                while !stop.load(Ordering::SeqCst) {
                    let Ok(permit) = sem.acquire(pool, Duration::from_secs(2)) else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    history.permit_held("partner-api", &holder);
                    {
                        let mut b = believers.lock().unwrap();
                        b.0 += 1;
                        b.1 = b.1.max(b.0);
                    }
                    // The work: 10 steps of 10 ms, each ending early if the permit is lost.
                    let lost = (0..10)
                        .any(|_| permit.lost_signal().wait_timeout(Duration::from_millis(10)));
                    believers.lock().unwrap().0 -= 1;
                    history.permit_released("partner-api", &holder);
                    if !lost && failed_over.load(Ordering::SeqCst) {
                        after.lock().unwrap()[t] += 1;
                    }
                    let _ = permit.release();
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        pair.fail_over();
        failed_over.store(true, Ordering::SeqCst);
        // Run until every thread has held a permit on the new primary twice (at most 60 s).
        let deadline = Instant::now() + Duration::from_secs(60);
        while after_promotion.lock().unwrap().iter().any(|&n| n < 2) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::SeqCst);
    });
    history.check_permits(PERMITS as usize);
    let (_, most) = believers.into_inner().unwrap();
    assert!(
        most <= PERMITS,
        "{most} threads believed they held a permit at once"
    );
    assert_eq!(
        most, PERMITS,
        "the permits were never all in use: the test proves nothing"
    );
    let after = after_promotion.into_inner().unwrap();
    assert!(
        after.iter().all(|&n| n >= 2),
        "threads that did not go on after the promotion: {after:?}"
    );
}

/// The sessions the server on `port` has had so far (`pg_stat_database.sessions`, counted by
/// each server itself, a hot standby included).
fn sessions(port: u16) -> i64 {
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let mut conn = PgConnection::establish(&url).expect("connect");
    diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
        "(SELECT sessions FROM pg_stat_database WHERE datname = current_database())",
    ))
    .get_result(&mut conn)
    .expect("pg_stat_database.sessions")
}

/// A pool whose listener URL names a hot standby, which takes the connection but refuses
/// `LISTEN`: the listener reconnects at its backoff's pace (50 ms doubling to 5 s: about 7
/// connections in 4 s), not every 50 ms (about 80), since the backoff starts over only once
/// `LISTEN` works. The waiter, woken by nobody, still gets its permit by polling.
#[test]
fn a_listener_that_cannot_listen_backs_off() {
    let Some(pair) = Pair::start(
        "a_listener_that_cannot_listen_backs_off",
        Replication::Async,
    ) else {
        return;
    };
    let standby = format!("postgres://postgres@127.0.0.1:{}/postgres", pair.standby);
    let pool = diesel_lease::pool::PoolOptions::default()
        .listen_url(standby)
        .build::<PgConnection>(&pair.url(), 4)
        .unwrap();
    diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
    let mutex = diesel_lease::semaphore::Semaphore::mutex("standby-listener");
    let held = mutex.acquire(&pool, Duration::from_secs(10)).unwrap();
    let before = sessions(pair.standby);
    let got = std::thread::scope(|s| {
        let waiter = s.spawn(|| mutex.acquire(&pool, Duration::from_secs(30)).map(drop));
        std::thread::sleep(Duration::from_secs(4));
        drop(held);
        waiter.join().unwrap()
    });
    // Our own count's session is one of them.
    let listener_sessions = sessions(pair.standby) - before - 1;
    got.expect("the waiter got the permit by polling");
    assert!(
        (1..=15).contains(&listener_sessions),
        "the listener connected to the standby {listener_sessions} times in 4 s"
    );
}
