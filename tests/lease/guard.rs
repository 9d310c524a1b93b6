//! Pool guards (release on drop, keep-alive), `run_exclusive`, `with_lock` and `every` in-process.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use diesel_lease::lease::schedule::{every, run_exclusive, with_lock, Cron};
use diesel_lease::lease::{Lease, LeaseGuard, LeaseOptions};
use diesel_lease::prelude::*;
use diesel_lease::{Error, OwnerId};

use super::support::{exec, rows};
use super::{ms, opts};
use crate::common::history::{check_grants, with_first_grant_doubled, History};
use crate::common::{TestBackend, TestDb};

fn guard_releases_on_drop<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(4);
    {
        let guard = LeaseGuard::try_acquire(&pool, "job", &opts(60_000))
            .unwrap()
            .expect("free");
        assert_eq!(guard.token().get(), 1);
        assert!(guard.confirm_held().unwrap());
        assert!(LeaseGuard::try_acquire(&pool, "job", &opts(60_000))
            .unwrap()
            .is_none());
    }
    // The drop handed the release to the pool's keeper.
    crate::common::settled(&pool);
    let again = LeaseGuard::try_acquire(&pool, "job", &opts(60_000))
        .unwrap()
        .expect("released on drop");
    assert_eq!(again.token().get(), 2);
    let _ = again.release().unwrap();
}

fn keep_alive_holds_past_its_ttl<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(4);
    let options = opts(900).keep_alive(true);
    let guard = LeaseGuard::try_acquire(&pool, "job", &options)
        .unwrap()
        .expect("free");
    let start = Instant::now();
    while start.elapsed() < ms(2_500) {
        assert!(LeaseGuard::try_acquire(&pool, "job", &opts(900))
            .unwrap()
            .is_none());
        std::thread::sleep(ms(100));
    }
    assert!(!guard.is_lost());
    assert!(guard.confirm_held().unwrap());
    let _ = guard.release().unwrap();
}

/// `extend` to a shorter ttl paces the keep-alive by the new ttl: beats a third of the first
/// ttl (20 s) apart would let the 1.5 s lease expire after its first 1.35 s.
fn keep_alive_follows_an_extension_to_a_shorter_ttl<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(4);
    let guard = LeaseGuard::try_acquire(&pool, "job", &opts(60_000).keep_alive(true))
        .unwrap()
        .expect("free");
    // Once the keep-alive sleeps towards its first beat, 20 s away (the pause lets its thread
    // get there; an extension before that is paced right from the start).
    std::thread::sleep(ms(200));
    guard.extend(ms(1_500)).unwrap();
    let start = Instant::now();
    while start.elapsed() < ms(4_500) {
        assert!(
            LeaseGuard::try_acquire(&pool, "job", &opts(900))
                .unwrap()
                .is_none(),
            "taken after {:?}",
            start.elapsed()
        );
        std::thread::sleep(ms(100));
    }
    guard.ensure_held().expect("held for three of the new ttls");
    assert!(guard.confirm_held().unwrap());
    assert!(guard.release().unwrap().was_held());
}

/// Kept-alive guards of one ttl are extended together (issue 55): 40 guards kept for two ttls
/// send fewer extensions than there are guards, where a beat each would send at least two per
/// guard (each must be extended twice to outlive two ttls). A grant taken over among them is
/// still found lost, and the others stay held.
fn kept_alive_guards_of_one_ttl_are_extended_together<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    // Within the window nothing else updates the table: grants came before it, releases after.
    fn extension(sql: &str) -> bool {
        sql.contains("UPDATE") && sql.contains("diesel_lease_leases")
    }
    let (pool, extensions) =
        crate::common::counted::counted_pool_of::<B::Conn>(&db.url, 4, Some(extension));
    let ttl = 3_000;
    let guards: Vec<_> = (0..40)
        .map(|i| {
            LeaseGuard::try_acquire(&pool, &format!("many-{i}"), &opts(ttl).keep_alive(true))
                .unwrap()
                .expect("free")
        })
        .collect();
    let before = extensions.load(Ordering::SeqCst);
    std::thread::sleep(ms(2 * ttl));
    let sent = extensions.load(Ordering::SeqCst) - before;
    for guard in &guards {
        assert!(!guard.is_lost(), "{} lost", guard.name());
    }
    assert!(
        sent < 40,
        "{sent} extension statements for 40 guards over two ttls"
    );

    // One of them is taken over: its beat (its own, after the shared one extended fewer
    // grants than it named) finds it gone; the others go on.
    let mut c = db.conn();
    exec(
        &mut c,
        "UPDATE diesel_lease_leases SET expires_at = 0 WHERE token = ? AND name = 'many-7'",
        &[guards[7].token().get()],
    );
    let thief = opts(60_000).owner(OwnerId::new("thief").unwrap());
    let _stolen = Lease::try_acquire(&mut c, "many-7", &thief)
        .unwrap()
        .expect("expired");
    let start = Instant::now();
    while !guards[7].is_lost() {
        assert!(
            start.elapsed() < ms(20_000),
            "the takeover was never noticed"
        );
        std::thread::sleep(ms(50));
    }
    assert!(matches!(
        guards[7].ensure_held(),
        Err(Error::LeaseLost { .. })
    ));
    std::thread::sleep(ms(ttl));
    for (i, guard) in guards.iter().enumerate().filter(|(i, _)| *i != 7) {
        assert!(!guard.is_lost(), "guard {i} lost");
        assert!(guard.confirm_held().unwrap(), "guard {i} not held");
    }
}

fn keep_alive_marks_the_guard_lost_when_taken_over<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(4);
    let guard = LeaseGuard::try_acquire(&pool, "job", &opts(900).keep_alive(true))
        .unwrap()
        .expect("free");
    // Simulate a holder paused past its ttl: the row expires under it and someone else takes it.
    let mut c = db.conn();
    exec(
        &mut c,
        "UPDATE diesel_lease_leases SET expires_at = 0 WHERE token = ?",
        &[guard.token().get()],
    );
    let thief = opts(60_000).owner(OwnerId::new("thief").unwrap());
    let stolen = Lease::try_acquire(&mut c, "job", &thief)
        .unwrap()
        .expect("expired");
    let start = Instant::now();
    while !guard.is_lost() {
        assert!(
            start.elapsed() < ms(20_000),
            "keep-alive never noticed the takeover"
        );
        std::thread::sleep(ms(50));
    }
    assert!(matches!(
        guard.extend(ms(900)),
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(guard.ensure_held(), Err(Error::LeaseLost { .. })));
    assert!(
        guard.release().unwrap().was_lost(),
        "a lost guard's release reports the loss"
    );
    assert!(
        stolen.confirm_held(&mut c).unwrap(),
        "the loser did not disturb the new holder"
    );
}

fn run_exclusive_skips_when_held<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(4);
    let held = LeaseGuard::try_acquire(&pool, "job", &opts(60_000))
        .unwrap()
        .expect("free");
    assert_eq!(
        run_exclusive(&pool, "job", &opts(60_000), |_| Ok::<_, Error>("ran")).unwrap(),
        None
    );
    let _ = held.release().unwrap();
    let ran = run_exclusive(&pool, "job", &opts(60_000), |lease| {
        Ok::<_, Error>(lease.token().get())
    })
    .unwrap();
    assert_eq!(ran, Some(2));
    // Released after the job: the next one runs too.
    assert!(
        run_exclusive(&pool, "job", &opts(60_000), |_| Ok::<_, Error>(()))
            .unwrap()
            .is_some()
    );
}

/// A job that runs past its lease's local deadline (a ttl of 3 s without keep-alive: the holder
/// counts it lost at 2.7 s, a tenth before the database's expiry) and returns at once then,
/// while the row is still this grant's: `run_exclusive` says the lease was lost, and a plain
/// lease's release says `false`, though the row goes all the same. Both used to report the
/// release as a success: the job had run unprotected for all the holder knew.
fn a_release_past_the_local_deadline_says_the_lease_was_lost<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(2);
    let until_lost = |lost: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !lost() {
            assert!(started.elapsed() < ms(10_000), "never lost locally");
            std::thread::sleep(ms(5));
        }
    };
    let ran = run_exclusive(&pool, "past-deadline", &opts(3_000), |guard| {
        until_lost(&|| guard.is_lost());
        Ok::<_, Error>(())
    });
    assert!(
        matches!(&ran, Err(Error::LeaseLost { name, .. }) if name == "past-deadline"),
        "{ran:?}"
    );
    let mut conn = db.conn();
    let mut lease = Lease::try_acquire(&mut conn, "past-deadline-2", &opts(3_000))
        .unwrap()
        .expect("free");
    until_lost(&|| lease.is_lost());
    assert!(
        lease.release(&mut conn).unwrap().was_lost(),
        "released past the local deadline"
    );
    // Released or expired, the next holder gets it at once.
    assert!(
        Lease::try_acquire(&mut conn, "past-deadline-2", &opts(3_000))
            .unwrap()
            .is_some()
    );
}

/// The job's own error type comes back through `?`, the lease's errors convert into it, and a
/// failed job still releases the lease at once (the next run does not wait for the ttl).
fn a_failing_job_returns_its_error_and_releases<B: TestBackend>(db: &TestDb<B>) {
    #[derive(Debug, PartialEq)]
    enum AppError {
        Lease(String),
        Job(&'static str),
    }
    impl From<Error> for AppError {
        fn from(e: Error) -> Self {
            AppError::Lease(e.to_string())
        }
    }
    db.migrate();
    let pool = db.pool(4);
    let failed: Result<Option<()>, AppError> = run_exclusive(&pool, "job", &opts(60_000), |_| {
        Err(AppError::Job("no mail server"))
    });
    assert_eq!(failed, Err(AppError::Job("no mail server")));
    // Released although the job failed: taken again at once, with the next token.
    let token = run_exclusive(&pool, "job", &opts(60_000), |lease| {
        Ok::<_, AppError>(lease.token().get())
    });
    assert_eq!(token, Ok(Some(2)));

    let failed: Result<(), AppError> = with_lock(&pool, "mutex", ms(60_000), || {
        Err(AppError::Job("disk full"))
    });
    assert_eq!(failed, Err(AppError::Job("disk full")));
    // `with_lock` would wait up to its ttl for a holder; a failed job left none.
    let mut c = db.conn();
    let record = Lease::inspect(&mut c, "mutex")
        .unwrap()
        .expect("the lock was taken");
    assert!(
        !record.is_held(),
        "the failed job's lock is still held: {record:?}"
    );
    // A lease error converts into the job's error type too: an empty name is refused.
    let refused = run_exclusive(&pool, "", &opts(60_000), |_| Ok::<_, AppError>(()));
    assert!(matches!(refused, Err(AppError::Lease(_))), "{refused:?}");
}

fn with_lock_is_mutually_exclusive<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(6);
    let counter = AtomicI64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..5 {
                    with_lock(&pool, "mutex", ms(30_000), || {
                        let n = counter.load(Ordering::SeqCst);
                        std::thread::sleep(ms(3));
                        counter.store(n + 1, Ordering::SeqCst);
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(counter.load(Ordering::SeqCst), 20);
}

fn with_lock_waits_for_an_expiring_holder<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(4);
    let mut c = db.conn();
    let _abandoned = Lease::try_acquire(&mut c, "mutex", &opts(300))
        .unwrap()
        .expect("free");
    let token = with_lock(&pool, "mutex", ms(10_000), || Ok::<_, Error>(7)).unwrap();
    assert_eq!(token, 7);
    assert_eq!(
        Lease::inspect(&mut c, "mutex")
            .unwrap()
            .unwrap()
            .token
            .get(),
        2
    );
}

/// Three threads poll one periodic job: each due time runs once, on an unbroken grid. Each run
/// is recorded as a grant of the job's lease to its thread, ended when the run returns, and
/// judged by `common::history` (one holder at a time, tokens increasing).
fn every_runs_once_per_interval_in_process<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let pool = db.pool(6);
    let interval = 300_000;
    let dues = Mutex::new(Vec::new());
    let history = History::default();
    let until = Instant::now() + ms(2_200);
    std::thread::scope(|s| {
        for thread in 0..3 {
            let (pool, dues, history) = (&pool, &dues, &history);
            s.spawn(move || {
                let holder = format!("thread-{thread}");
                every(ms(300))
                    .lease(LeaseOptions::new(ms(150)))
                    .poll_every(ms(20))
                    .run_until(
                        pool,
                        "tick",
                        || Instant::now() >= until,
                        |o| {
                            history.granted("tick", o.token().get(), &holder);
                            dues.lock()
                                .unwrap()
                                .push((o.due_at_micros(), o.token().get()));
                            history.grant_ended("tick", &holder);
                        },
                    )
                    .unwrap();
            });
        }
    });
    let mut dues = dues.into_inner().unwrap();
    dues.sort();
    assert!(dues.len() >= 4, "{dues:?}");
    let unique: BTreeSet<_> = dues.iter().map(|d| d.0).collect();
    assert_eq!(
        unique.len(),
        dues.len(),
        "an occurrence ran twice: {dues:?}"
    );
    for w in dues.windows(2) {
        assert_eq!(w[1].0 - w[0].0, interval, "one run per interval: {dues:?}");
        assert!(w[1].1 > w[0].1);
    }
    history.check_grants();
    // The check can fail on this very record: its first token granted again is a violation.
    let doubled = with_first_grant_doubled(&history.events());
    assert_eq!(
        check_grants(&doubled).len(),
        1,
        "the checker misses a doubled grant"
    );
}

/// A run whose release fails (here it waits for another transaction's lock on the lease row
/// past the pool's connection timeout) goes to `on_error`, and `run_until` still counts it:
/// the job ran.
fn every_counts_a_run_whose_release_failed<B: TestBackend>(db: &TestDb<B>) {
    use diesel::connection::SimpleConnection;
    use diesel::r2d2::{ConnectionManager, Pool};
    use std::sync::atomic::AtomicBool;
    db.migrate();
    let pool = Pool::builder()
        .max_size(3)
        .connection_timeout(ms(1_000))
        .connection_customizer(Box::new(diesel_lease::pool::ConnectionTuning::default()))
        .build(ConnectionManager::<B::Conn>::new(db.url.as_str()))
        .unwrap();
    let take = match B::KIND {
        diesel_lease::BackendKind::Sqlite => "BEGIN IMMEDIATE",
        _ => "BEGIN; SELECT name FROM diesel_lease_leases WHERE name = 'nightly' FOR UPDATE",
    };
    let blocker = Mutex::new(db.conn());
    let errors = std::sync::Arc::new(Mutex::new(Vec::new()));
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (reported, stopping) = (std::sync::Arc::clone(&errors), std::sync::Arc::clone(&stop));
    let runs = every(ms(3_600_000))
        .lease(LeaseOptions::new(ms(60_000)))
        .poll_every(ms(20))
        .on_error(move |e: &Error| {
            reported.lock().unwrap().push(e.to_string());
            stopping.store(true, Ordering::SeqCst);
        })
        .run_until(
            &pool,
            "nightly",
            || stop.load(Ordering::SeqCst),
            // The lease row is locked until the release has given up.
            |_| blocker.lock().unwrap().batch_execute(take).unwrap(),
        )
        .unwrap();
    blocker.lock().unwrap().batch_execute("ROLLBACK").unwrap();
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "the release failed: {errors:?}");
    assert_eq!(runs, 1, "the run counts: {errors:?}");
}

/// One pooled connection grants a plain lease, an interval job, a cron job and plain leases
/// again, each first by insert and then by takeover. A grant's SQL depends on its kind
/// (`next_run` NULL, `now + interval` or the next slot; the cron slot's still-due test), so
/// each kind must run its own prepared statement, never the text another kind left in the
/// connection's statement cache: there, a job's grid started unset or a lease failed.
fn leases_interval_and_cron_jobs_share_one_connection<B: TestBackend>(db: &TestDb<B>) {
    const SECOND: i64 = 1_000_000;
    db.migrate();
    let pool = db.pool(1);
    let next_run = |name: &str| {
        Lease::inspect(&mut *pool.get().unwrap(), name)
            .unwrap()
            .expect("granted before")
            .next_run_micros
    };
    let plain = |name: &str| {
        let guard = LeaseGuard::try_acquire(&pool, name, &opts(60_000))
            .unwrap()
            .expect("free");
        assert!(guard.release().unwrap().was_held());
        assert_eq!(next_run(name), None, "a plain lease has no next run");
    };
    plain("plain");
    plain("plain");

    let tick = every(ms(300)).lease(opts(150));
    let first = tick
        .run_if_due(&pool, "tick", |o| o.due_at_micros())
        .unwrap()
        .expect("a new interval job is due");
    assert!(first > 0, "due at its first run, not at {first}");
    assert_eq!(
        next_run("tick"),
        Some(first + 300_000),
        "the grid starts at the first run"
    );
    std::thread::sleep(ms(350));
    let second = tick
        .run_if_due(&pool, "tick", |o| o.due_at_micros())
        .unwrap()
        .expect("due again after an interval");
    assert_eq!(second, first + 300_000, "the next point of the grid");
    assert_eq!(next_run("tick"), Some(second + 300_000));

    let each_second = every(Cron::parse("* * * * * *").unwrap()).lease(opts(500));
    let mut slots = Vec::new();
    let until = Instant::now() + ms(5_000);
    while slots.len() < 2 && Instant::now() < until {
        if let Some(slot) = each_second
            .run_if_due(&pool, "each-second", |o| o.due_at_micros())
            .unwrap()
        {
            slots.push(slot);
        }
        std::thread::sleep(ms(20));
    }
    assert_eq!(
        slots.len(),
        2,
        "two slots of a per-second cron in 5 s: {slots:?}"
    );
    assert_eq!(slots[0] % SECOND, 0, "on a slot: {slots:?}");
    assert_eq!(slots[1] - slots[0], SECOND, "the next slot: {slots:?}");
    assert_eq!(next_run("each-second"), Some(slots[1] + SECOND));

    plain("plain");
    plain("plain-2");
}

/// A pool of 2, a keep-alive holder with a 1 s ttl, and 3 `LeaseGuard::acquire` waiters
/// polling through the pool every few milliseconds: for 3.5 s the holder keeps its lease (locally
/// and in the database); once it releases, each waiter gets the lease in turn, with the next
/// fencing tokens. Every grant and its end are recorded as the holders saw them and judged by
/// `common::history` (one holder at a time, tokens increasing).
fn keep_alive_holder_keeps_its_lease_while_waiters_share_the_pool<B: TestBackend>(db: &TestDb<B>) {
    const WAITERS: usize = 3;
    db.migrate();
    let pool = db.pool(2);
    let mut watcher = db.conn();
    let holder = LeaseGuard::try_acquire(&pool, "small-pool", &opts(1_000).keep_alive(true))
        .unwrap()
        .expect("free");
    let held_token = holder.token().get();
    let history = History::default();
    history.granted("small-pool", held_token, "holder");
    let waiter_options = opts(10_000).poll(ms(5), ms(50));
    let tokens = Mutex::new(Vec::new());
    let inside = AtomicI64::new(0);
    std::thread::scope(|s| {
        for waiter in 0..WAITERS {
            let (pool, waiter_options, tokens, inside, history) =
                (&pool, &waiter_options, &tokens, &inside, &history);
            s.spawn(move || {
                let name = format!("waiter-{waiter}");
                let guard =
                    LeaseGuard::acquire(pool, "small-pool", waiter_options, ms(30_000)).unwrap();
                history.granted("small-pool", guard.token().get(), &name);
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                tokens.lock().unwrap().push(guard.token().get());
                std::thread::sleep(ms(20));
                inside.fetch_sub(1, Ordering::SeqCst);
                history.grant_ended("small-pool", &name);
                let _ = guard.release().unwrap();
            });
        }
        let until = Instant::now() + ms(3_500);
        let mut looks = 0;
        while Instant::now() < until {
            assert!(!holder.is_lost(), "the holder was lost after {looks} looks");
            let record = Lease::inspect(&mut watcher, "small-pool").unwrap().unwrap();
            assert_eq!(record.token.get(), held_token, "{record:?}");
            assert!(record.is_held(), "expired in the database: {record:?}");
            looks += 1;
            std::thread::sleep(ms(50));
        }
        assert!(
            tokens.lock().unwrap().is_empty(),
            "a waiter got in while it was held"
        );
        history.grant_ended("small-pool", "holder");
        let _ = holder.release().unwrap();
    });
    let tokens = tokens.into_inner().unwrap();
    let expected: Vec<i64> = (1..=WAITERS as i64).map(|n| held_token + n).collect();
    assert_eq!(tokens, expected, "one grant each, in token order");
    history.check_grants();
    // The check can fail on this very record: its first token granted again is a violation.
    let doubled = with_first_grant_doubled(&history.events());
    assert_eq!(
        check_grants(&doubled).len(),
        1,
        "the checker misses a doubled grant"
    );
}

/// Statements of this test's database that wait for a row lock now (on MySQL: the lease
/// extensions under way, which in this test only the lock on the lease row holds up).
fn lock_waiters<B: TestBackend>(conn: &mut B::Conn) -> i64 {
    let sql = match B::KIND {
        diesel_lease::BackendKind::Postgres => {
            "SELECT COUNT(*) AS a, 0::bigint AS b, 0::bigint AS c FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'"
        }
        // An autocommit statement waiting for a row lock is not listed in `innodb_trx` by
        // MariaDB; the process list shows it under way (here, only a lock keeps it so).
        _ => {
            "SELECT CAST(COUNT(*) AS SIGNED) AS a, CAST(0 AS SIGNED) AS b, CAST(0 AS SIGNED) AS c \
             FROM information_schema.processlist WHERE db = DATABASE() \
             AND info LIKE 'UPDATE `diesel_lease_leases`%'"
        }
    };
    rows(conn, sql, &[])[0].a
}

/// A user's `extend` does not cross a keep-alive extension under way: it is sent only once the
/// beat has its answer. Crossed, a beat sent first (with the old, shorter ttl) could reach the
/// database last, which would keep the short expiry while the holder counted from the long one.
/// Here the beat waits for another transaction's lock on the lease row, and the statements
/// waiting for that lock are counted: the extension is never among them. Then the database
/// keeps the extension's expiry. (PostgreSQL and MySQL: a SQLite writer waits in its own
/// process, where nothing outside can count it.)
fn an_extend_waits_for_a_keep_alive_extension_under_way<B: TestBackend>(db: &TestDb<B>) {
    use diesel::connection::SimpleConnection;
    db.migrate();
    let pool = db.pool(4);
    // The first beat comes 4 s in; the holder's local deadline is about 11 s in.
    let guard = LeaseGuard::try_acquire(&pool, "turn", &opts(12_000).keep_alive(true))
        .unwrap()
        .expect("free");
    let expiry = |c: &mut B::Conn| {
        rows(c, "SELECT expires_at AS a, token AS b, token AS c FROM diesel_lease_leases WHERE name = 'turn'", &[])[0].a
    };
    let mut watcher = db.conn();
    let granted_until = expiry(&mut watcher);
    let mut blocker = db.conn();
    blocker
        .batch_execute("BEGIN; SELECT name FROM diesel_lease_leases WHERE name = 'turn' FOR UPDATE")
        .unwrap();
    let waiting_for = |n: i64, c: &mut B::Conn, within: std::time::Duration| {
        let start = Instant::now();
        loop {
            if lock_waiters::<B>(c) >= n {
                return true;
            }
            if start.elapsed() >= within {
                return false;
            }
            std::thread::sleep(ms(20));
        }
    };
    assert!(
        waiting_for(1, &mut watcher, ms(15_000)),
        "the keep-alive's beat never came"
    );
    std::thread::scope(|s| {
        let extension = s.spawn(|| guard.extend(ms(60_000)));
        let crossed = waiting_for(2, &mut watcher, ms(1_000));
        blocker.batch_execute("ROLLBACK").unwrap();
        assert!(
            !crossed,
            "the extension was sent while the keep-alive's beat was under way"
        );
        extension.join().unwrap().expect("extended");
    });
    let kept = expiry(&mut watcher) - granted_until;
    assert!(
        kept > 40_000_000,
        "the database kept the extension's expiry: {kept} µs later than the grant's"
    );
    guard.ensure_held().expect("held");
    assert!(guard.release().unwrap().was_held());
}

backend_tests!(mod locking on [postgres, mysql]: an_extend_waits_for_a_keep_alive_extension_under_way);

backend_tests!(
    keep_alive_holder_keeps_its_lease_while_waiters_share_the_pool,
    guard_releases_on_drop,
    keep_alive_holds_past_its_ttl,
    keep_alive_follows_an_extension_to_a_shorter_ttl,
    keep_alive_marks_the_guard_lost_when_taken_over,
    kept_alive_guards_of_one_ttl_are_extended_together,
    run_exclusive_skips_when_held,
    a_failing_job_returns_its_error_and_releases,
    a_release_past_the_local_deadline_says_the_lease_was_lost,
    with_lock_is_mutually_exclusive,
    with_lock_waits_for_an_expiring_holder,
    every_runs_once_per_interval_in_process,
    every_counts_a_run_whose_release_failed,
    leases_interval_and_cron_jobs_share_one_connection,
);
