//! Cron schedules of `every` on the built-in lease table: one run per slot across pools, the
//! missed-slot policies, and typed errors for bad input.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

use diesel::Connection;
use diesel_lease::__private::{lease_grant, Grant, Periodic};
use diesel_lease::lease::schedule::{every, Cron, Missed};
use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_lease::{Error, InvalidInput};

use super::support::exec;
use super::{ms, opts};
use crate::common::history::{check_grants, with_first_grant_doubled, History};
use crate::common::{TestBackend, TestDb};

const SECOND: i64 = 1_000_000;

/// Three nodes, each with its own pool, poll a job that runs every two seconds: every slot
/// that came while they polled ran exactly once, and none was skipped. Each run is recorded as
/// a grant of the job's lease to its node, ended when the run returns, and judged by
/// `common::history` (one holder at a time, tokens increasing).
fn cron_runs_each_slot_once_across_nodes<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let every_two = Cron::parse("*/2 * * * * *").unwrap();
    let runs = Mutex::new(Vec::new());
    let history = History::default();
    let pools: Vec<_> = (0..3).map(|_| db.pool(2)).collect();
    let until = Instant::now() + ms(7_000);
    std::thread::scope(|s| {
        for (node, pool) in pools.iter().enumerate() {
            let (runs, every_two, history) = (&runs, every_two.clone(), &history);
            s.spawn(move || {
                let holder = format!("node-{node}");
                every(every_two)
                    .lease(LeaseOptions::new(ms(1_500)))
                    .poll_every(ms(40))
                    .run_until(
                        pool,
                        "every-two",
                        || Instant::now() >= until,
                        |o| {
                            history.granted("every-two", o.token().get(), &holder);
                            runs.lock()
                                .unwrap()
                                .push((o.due_at_micros(), node, o.token().get()));
                            history.grant_ended("every-two", &holder);
                        },
                    )
                    .unwrap();
            });
        }
    });
    let mut runs = runs.into_inner().unwrap();
    runs.sort();
    let slots: BTreeSet<i64> = runs.iter().map(|r| r.0).collect();
    assert_eq!(slots.len(), runs.len(), "a slot ran twice: {runs:?}");
    assert!(
        runs.len() >= 3,
        "7 s of polling saw at least 3 slots: {runs:?}"
    );
    for run in &runs {
        assert_eq!(run.0 % (2 * SECOND), 0, "runs are on the slots: {runs:?}");
    }
    for pair in runs.windows(2) {
        assert_eq!(
            pair[1].0 - pair[0].0,
            2 * SECOND,
            "no slot skipped: {runs:?}"
        );
        assert!(pair[1].2 > pair[0].2, "tokens increase: {runs:?}");
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

/// Sets the job's stored next run one hour back (as if the farm had been down since) and
/// returns the database's `now` at a moment when the latest slot of `every_five` is late
/// beyond its one-second grace (more than 1.5 s, less than 4 s after it).
fn an_hour_of_missed_slots<B: TestBackend>(db: &TestDb<B>, name: &str, every_five: &Cron) -> i64 {
    let mut conn = db.conn();
    let _ = Lease::try_acquire(&mut conn, name, &opts(1_000))
        .unwrap()
        .unwrap()
        .release(&mut conn)
        .unwrap();
    loop {
        let now = Lease::inspect(&mut conn, name)
            .unwrap()
            .unwrap()
            .read_at_micros;
        let latest = every_five.latest_at_or_before(now).unwrap().unwrap();
        if (now - latest) > 1_500_000 && (now - latest) < 3_000_000 {
            exec(
                &mut conn,
                "UPDATE diesel_lease_leases SET next_run = ?",
                &[now - 3_600 * SECOND],
            );
            return now;
        }
        std::thread::sleep(ms(100));
    }
}

/// Polls `job` every 40 ms until it ran twice or 15 s passed; the slots it ran.
fn poll_twice<B: TestBackend>(db: &TestDb<B>, name: &str, every_five: Cron) -> Vec<i64> {
    let pool = db.pool(2);
    let job = every(every_five).lease(opts(1_000)).poll_every(ms(40));
    let mut slots = Vec::new();
    let start = Instant::now();
    while slots.len() < 2 && start.elapsed() < ms(15_000) {
        if let Some(slot) = job.run_if_due(&pool, name, |o| o.due_at_micros()).unwrap() {
            slots.push(slot);
        }
        std::thread::sleep(ms(40));
    }
    slots
}

/// `Missed::Skip` (the default): an hour of missed slots, and the latest one late: none of them
/// runs; the next run is the first slot after the farm came back.
fn cron_skips_missed_slots_by_default<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let every_five = Cron::parse("*/5 * * * * *").unwrap().grace(ms(1_000));
    let back_at = an_hour_of_missed_slots(db, "skip", &every_five);
    let slots = poll_twice(db, "skip", every_five.clone());
    let first_future = every_five.next_after(back_at).unwrap();
    assert_eq!(
        slots,
        [first_future, first_future + 5 * SECOND],
        "no late run"
    );
}

/// `Missed::RunOnce`: exactly one late run (for the latest missed slot), then back on schedule.
fn cron_runs_once_late_when_asked<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let every_five = Cron::parse("*/5 * * * * *")
        .unwrap()
        .grace(ms(1_000))
        .on_missed(Missed::RunOnce);
    let back_at = an_hour_of_missed_slots(db, "once", &every_five);
    let slots = poll_twice(db, "once", every_five.clone());
    let latest_missed = every_five.latest_at_or_before(back_at).unwrap().unwrap();
    assert_eq!(
        slots,
        [latest_missed, latest_missed + 5 * SECOND],
        "one late run, then on time"
    );
}

/// A bad expression, a zero grace: typed errors, before any SQL.
fn cron_bad_input_is_a_typed_error<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let err = Error::from(Cron::parse("0 3 * *").unwrap_err());
    assert!(
        matches!(&err, Error::InvalidInput(InvalidInput::BadCron { expr, .. }) if expr == "0 3 * *"),
        "{err:?}"
    );
    assert!(err.to_string().contains("0 3 * *"), "{err}");
    let pool = db.pool(1);
    let zero_grace = every(Cron::parse("* * * * * *").unwrap().grace(ms(0)));
    let err = zero_grace.run_if_due(&pool, "tick", |_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput(InvalidInput::ZeroDuration {
                what: "cron grace",
                ..
            })
        ),
        "{err:?}"
    );
    assert!(
        Lease::inspect(&mut db.conn(), "tick").unwrap().is_none(),
        "nothing was written"
    );
    // An expression that parses but has no slot (February 30th) is refused by the parser or at
    // the loop's first poll: `run_until` returns `BadCron` instead of polling forever (it is
    // stopped after 10 s should it go on).
    if let Ok(never) = Cron::parse("0 0 30 2 *") {
        let started = Instant::now();
        let out = every(never).run_until(&pool, "never", || started.elapsed() > ms(10_000), |_| ());
        assert!(
            matches!(&out, Err(Error::InvalidInput(InvalidInput::BadCron { .. }))),
            "{out:?}"
        );
        assert!(started.elapsed() < ms(10_000), "it polled until stopped");
    }
}

/// A cron grant whose start bound has passed by the database clock is refused, even though
/// `next_run` still holds what the client read and the slot has come: it would run a stale slot,
/// late. The row is left as it was; the same grant with a bound still ahead is taken.
fn a_cron_grant_past_its_start_bound_is_refused<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut conn = db.conn();
    let _ = Lease::try_acquire(&mut conn, "bound", &opts(1_000))
        .unwrap()
        .unwrap()
        .release(&mut conn)
        .unwrap();
    let now = Lease::inspect(&mut conn, "bound")
        .unwrap()
        .unwrap()
        .read_at_micros;
    let stored = now - 10 * SECOND;
    exec(
        &mut conn,
        "UPDATE diesel_lease_leases SET next_run = ?",
        &[stored],
    );
    let grant = |until: i64| Grant {
        name: "bound",
        holder: "node-a",
        ttl_micros: SECOND,
        periodic: Periodic::Slot {
            expected: Some(stored),
            slot: stored,
            next: now + 60 * SECOND,
            until,
        },
    };
    let before = Lease::inspect(&mut conn, "bound").unwrap().unwrap();
    // The bound came a second ago (the next slot, or the end of the slot's grace).
    let late = lease_grant(&mut conn, &grant(now - SECOND)).unwrap();
    assert_eq!(late, None, "a grant after its start bound runs nothing");
    let after = Lease::inspect(&mut conn, "bound").unwrap().unwrap();
    assert_eq!(
        (after.token, after.next_run_micros, after.holder.as_str()),
        (before.token, Some(stored), before.holder.as_str()),
        "the refused grant changed nothing"
    );
    let in_time = lease_grant(&mut conn, &grant(now + 60 * SECOND))
        .unwrap()
        .expect("a grant before its bound is taken");
    assert_eq!(in_time.token, before.token.get() + 1);
    assert_eq!(in_time.next_run, Some(now + 60 * SECOND));
}

/// A node plans the due slot in time, but its grant reaches the lease row only after the next
/// slot has come (here it waits on the row's lock, as it would behind a slow link or a stalled
/// writer): it does not run the stale slot. The next poll runs the slot that is owed now.
///
/// PostgreSQL and SQLite read the clock when the grant runs, after its wait. MySQL/MariaDB read
/// it when the statement starts, so there only a grant that reached the server late is refused
/// (`a_cron_grant_past_its_start_bound_is_refused` covers its statement).
fn a_cron_grant_that_lands_after_the_next_slot_runs_nothing<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let every_two = Cron::parse("*/2 * * * * *").unwrap();
    // The ttl outlasts the grant's wait on the lock, so that a grant taken after the wait is
    // still held when it returns.
    let job = every(every_two.clone()).lease(opts(10_000));
    let pool = db.pool(2);
    let mut conn = db.conn();
    let clock = |conn: &mut B::Conn| {
        Lease::inspect(conn, "stale")
            .unwrap()
            .map(|r| r.read_at_micros)
    };
    // The first run on this schedule, and its stored next slot.
    let start = Instant::now();
    while job.run_if_due(&pool, "stale", |_| ()).unwrap().is_none() {
        assert!(start.elapsed() < ms(10_000), "the job never ran");
        std::thread::sleep(ms(20));
    }
    let slot = Lease::inspect(&mut conn, "stale")
        .unwrap()
        .unwrap()
        .next_run_micros
        .unwrap();
    // Wait until that slot is due, with its successor well ahead.
    loop {
        let now = clock(&mut conn).unwrap();
        if now >= slot && now < slot + SECOND {
            break;
        }
        assert!(
            now < slot,
            "the slot went by unseen: now {now}, slot {slot}"
        );
        std::thread::sleep(ms(10));
    }
    let next = every_two.next_after(slot).unwrap();
    let (locked_tx, locked) = std::sync::mpsc::channel();
    let (end_tx, end) = std::sync::mpsc::channel::<()>();
    let mut c = db.conn();
    let ran = std::thread::scope(|s| {
        let blocker = s.spawn(move || {
            c.transaction::<_, diesel::result::Error, _>(|c| {
                exec(c, "UPDATE diesel_lease_leases SET token = token", &[]);
                locked_tx.send(()).unwrap();
                // Bounded: a hung grant must fail the test, not hang it.
                let _ = end.recv_timeout(ms(20_000));
                Ok(())
            })
            .unwrap();
        });
        locked
            .recv_timeout(ms(10_000))
            .expect("the blocker took the row's lock");
        let node = s.spawn(|| job.run_if_due(&pool, "stale", |o| o.due_at_micros()));
        while clock(&mut conn).unwrap() < next + 300_000 {
            std::thread::sleep(ms(20));
        }
        end_tx.send(()).unwrap();
        blocker.join().unwrap();
        node.join().unwrap().unwrap()
    });
    // Planned before `next` came, the grant is refused; a node slow enough to plan after it
    // ran `next` itself, which is owed.
    assert!(
        ran.is_none_or(|due| due >= next),
        "ran the stale slot {slot} after {next} had come: {ran:?}"
    );
    if ran.is_none() {
        let owed = job
            .run_if_due(&pool, "stale", |o| o.due_at_micros())
            .unwrap();
        assert!(
            owed.is_some_and(|due| due >= next),
            "the next poll runs the slot owed now ({next} or later): {owed:?}"
        );
    }
}

backend_tests!(
    a_cron_grant_past_its_start_bound_is_refused,
    cron_runs_each_slot_once_across_nodes,
    cron_skips_missed_slots_by_default,
    cron_runs_once_late_when_asked,
    cron_bad_input_is_a_typed_error,
);

backend_tests!(mod lands_late on [postgres, sqlite]: a_cron_grant_that_lands_after_the_next_slot_runs_nothing);
