//! Seed 001 on the user's own control table (issue 15.5): `#[control_table(...)]` on
//! `ProcessControl`. The contention tests (`contention.rs`, kinds `control` and `control-rw`)
//! check the holder counts under threads and processes; these check what lands in the user's
//! table, the commit-order race written the seed's way, stale holders, and the seed's minimal
//! two-column table.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel_lease::prelude::*;
use diesel_lease::semaphore::{RwLock, Semaphore};
use diesel_lease::Error;

use super::control_model::ProcessControl;
use super::history::SemTestConn;
use super::{control_table, setup, sql, LONG};
use crate::common::{TestBackend, TestDb};

const TTL: Duration = Duration::from_secs(5);

/// How many rows of `process_control` match `filter`, read with plain SQL as the application
/// would (seed columns compared as the seed writes them).
fn count<B: TestBackend>(conn: &mut B::Conn, filter: &str) -> i64
where
    B::Conn: SemTestConn,
{
    conn.count(&format!(
        "SELECT COUNT(*) AS n FROM process_control WHERE {filter}"
    ))
    .unwrap()
}

/// The library writes the seed's own columns: the requesting id, the resource, `R`/`W`; the
/// rows come and go with the permits; the built-in tickets table stays empty.
fn requests_are_rows_of_the_users_table<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    let pool = setup(db, 8);
    control_table(db);
    let me = diesel_lease::OwnerId::new("Process A").unwrap();
    let etl = ProcessControl::semaphore("etl", 2)
        .with_ttl(TTL)
        .with_owner(me.clone());
    let a = etl.try_acquire(&pool).unwrap().expect("free");
    let b = etl.acquire(&pool, LONG).unwrap();
    assert!(etl.try_acquire(&pool).unwrap().is_none(), "two permits");
    assert_eq!(a.resource(), "process_control#etl");
    // The table's name and `#` count towards the name's 255 bytes: refused before any SQL.
    let long = ProcessControl::semaphore("x".repeat(250), 1);
    assert!(
        matches!(
            long.try_acquire(&pool),
            Err(diesel_lease::Error::InvalidInput(
                diesel_lease::InvalidInput::NameTooLong { len: 266, .. }
            ))
        ),
        "a 250-byte resource of process_control"
    );
    let mut conn = db.conn();
    let mine = "requesting_id = 'Process A' AND resource = 'etl' AND access_type = 'R'";
    assert_eq!(
        count::<B>(&mut conn, &format!("{mine} AND granted = TRUE")),
        2
    );
    assert_eq!(count::<B>(&mut conn, "1 = 1"), 2);
    // Another resource in the same table has its own queue and limit.
    let report = ProcessControl::rw_lock("report").with_owner(me);
    let writer = report.try_write(&pool).unwrap().expect("free");
    assert!(
        report.try_read(&pool).unwrap().is_none(),
        "the writer has it alone"
    );
    let q = report.queue(&mut conn).unwrap();
    assert_eq!(q.len(), 1);
    assert!(q[0].granted && q[0].ticket == writer.ticket());
    assert_eq!(
        count::<B>(
            &mut conn,
            "requesting_id = 'Process A' AND resource = 'report' AND access_type = 'W' \
             AND granted = TRUE"
        ),
        1
    );
    drop(a);
    crate::common::settled(&pool);
    let c = etl
        .try_acquire(&pool)
        .unwrap()
        .expect("a's release let one in");
    drop((b, c, writer));
    crate::common::settled(&pool);
    assert_eq!(
        count::<B>(&mut conn, "1 = 1"),
        0,
        "every release deletes its row"
    );
    let builtin = conn
        .count("SELECT COUNT(*) AS n FROM diesel_lease_semaphore_tickets")
        .unwrap();
    assert_eq!(builtin, 0);
}

/// The seed's own race on the seed's own table: another program takes a number the seed's way
/// (`INSERT INTO ProcessControl …`, identity first, commit later, no lock of the library's) and
/// keeps its transaction open while a contender proceeds. A mutex never has two holders, and
/// once the late row is visible it waits for the holder like any request. The insert names the
/// seed's columns only: the expiry's default (the largest `BIGINT`, as the README's DDL has it)
/// keeps the row from being removed as stale (with a default of 0 it was deleted at once).
fn seed_style_insert_never_makes_two_holders<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 8);
    control_table(db);
    let mutex = ProcessControl::semaphore("race", 1).with_ttl(TTL);
    let _ = mutex
        .try_acquire(&pool)
        .unwrap()
        .unwrap()
        .release()
        .unwrap();

    let mut straggler = db.conn();
    straggler
        .batch_execute(sql::<B>("BEGIN", "BEGIN IMMEDIATE", "BEGIN"))
        .unwrap();
    straggler
        .batch_execute(
            "INSERT INTO process_control (requesting_id, resource, access_type) \
             VALUES ('straggler', 'race', 'R')",
        )
        .unwrap();
    let holder = std::thread::scope(|s| {
        let contender = s.spawn(|| mutex.try_acquire(&pool).unwrap());
        std::thread::sleep(Duration::from_millis(300));
        straggler.batch_execute("COMMIT").unwrap();
        contender.join().unwrap()
    });
    let mut conn = db.conn();
    let q = mutex.queue(&mut conn).unwrap();
    assert_eq!(q.iter().filter(|r| r.granted).count(), 1, "{q:?}");
    let waiter = mutex.acquire(&pool, Duration::from_millis(400));
    assert!(matches!(waiter, Err(Error::Timeout { .. })), "{waiter:?}");
    assert_eq!(
        mutex
            .queue(&mut conn)
            .unwrap()
            .iter()
            .filter(|r| r.granted)
            .count(),
        1
    );
    match holder {
        // PostgreSQL, MySQL: the contender got in; the late row is not granted by anybody
        // until the holder leaves, and then it is next.
        Some(holder) => {
            assert!(!q.iter().any(|r| r.owner == "straggler" && r.granted));
            drop(holder);
            crate::common::settled(&pool);
            let q = mutex.queue(&mut conn).unwrap();
            assert_eq!(q.len(), 1, "{q:?}");
            assert!(q[0].granted && q[0].owner == "straggler", "{q:?}");
        }
        // SQLite: the write lock made the straggler commit first; it is first in line.
        None => assert!(q.iter().any(|r| r.owner == "straggler" && r.granted)),
    }
}

/// The seed's "recovering from misbehaving participants": a holder that stopped (its expiry
/// passed) is removed by the next request, which gets in.
fn a_dead_holder_is_cleaned_up<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 4);
    control_table(db);
    let mutex = ProcessControl::semaphore("cleanup", 1);
    let _ = mutex
        .try_acquire(&pool)
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    db.conn()
        .batch_execute(
            "INSERT INTO process_control \
             (requesting_id, resource, access_type, granted, expires_at) \
             VALUES ('crashed', 'cleanup', 'R', TRUE, 0)",
        )
        .unwrap();
    let permit = mutex.acquire(&pool, LONG).unwrap();
    let mut conn = db.conn();
    let q = mutex.queue(&mut conn).unwrap();
    assert_eq!(q.len(), 1, "the stale row is gone: {q:?}");
    assert_eq!(q[0].ticket, permit.ticket());
    let _ = permit.release().unwrap();
}

diesel::table! {
    basic_control (queue_position) {
        queue_position -> BigInt,
        requesting_id -> Text,
        granted -> Bool,
        expires_at -> BigInt,
    }
}

/// The seed's first table (`queue_position`, `requesting_id`) with the two added columns: one
/// resource, shared requests only.
#[derive(ControlTable)]
#[diesel(table_name = basic_control, primary_key(queue_position))]
#[control_table(ticket = queue_position, owner = requesting_id)]
#[allow(dead_code)]
struct BasicControl {
    queue_position: i64,
}

fn the_seeds_two_column_table_works<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 4);
    db.ddl(
        "CREATE TABLE basic_control (queue_position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
           requesting_id VARCHAR(255) NOT NULL, \
           granted BOOLEAN NOT NULL DEFAULT FALSE, expires_at BIGINT NOT NULL DEFAULT 9223372036854775807)",
        "CREATE TABLE basic_control (queue_position INTEGER PRIMARY KEY AUTOINCREMENT, \
           requesting_id VARCHAR(255) NOT NULL, \
           granted BOOLEAN NOT NULL DEFAULT FALSE, expires_at BIGINT NOT NULL DEFAULT 9223372036854775807)",
        "CREATE TABLE basic_control (queue_position BIGINT AUTO_INCREMENT PRIMARY KEY, \
           requesting_id VARCHAR(255) NOT NULL, \
           granted BOOLEAN NOT NULL DEFAULT FALSE, expires_at BIGINT NOT NULL DEFAULT 9223372036854775807)",
    );
    let mutex = BasicControl::table_semaphore(1);
    assert_eq!(mutex.resource(), "basic_control");
    let held = mutex.acquire(&pool, LONG).unwrap();
    let waiter = std::thread::scope(|s| {
        let waiter = s.spawn(|| mutex.acquire(&pool, LONG).unwrap());
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(mutex.queue(&mut pool.get().unwrap()).unwrap().len(), 2);
        let _ = held.release().unwrap();
        waiter.join().unwrap()
    });
    let q = mutex.queue(&mut pool.get().unwrap()).unwrap();
    assert_eq!(q.len(), 1);
    assert!(q[0].granted && q[0].ticket == waiter.ticket());
    drop(waiter);
    crate::common::settled(&pool);

    // A writer needs an access-type column: refused, and nothing is left behind.
    let rw = RwLock::in_control_table::<BasicControl>(None);
    match rw.try_write(&pool) {
        Err(Error::Database(e)) => assert!(e.to_string().contains("access-type"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(mutex.queue(&mut pool.get().unwrap()).unwrap().is_empty());
}

/// A built-in semaphore named like a control table's lock row (`process_control#<resource>`)
/// shares that row with it: two separate queues, one row, and each sets the row's permit count
/// when its own queue is empty. Neither queue ever admits more holders than its own
/// declaration, in either direction, and each still hands over to its own waiters.
fn a_builtin_semaphore_named_like_a_lock_row_adds_no_holders<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 8);
    control_table(db);
    let poll = Duration::from_millis(50);
    // The control-table mutex has a holder and a waiter; then a built-in semaphore of five
    // permits on the same row, whose own queue is empty, rewrites the count to 5.
    let mutex = ProcessControl::semaphore("clash", 1)
        .with_ttl(TTL)
        .with_max_poll_interval(poll);
    let five = Semaphore::new("process_control#clash", 5).with_ttl(TTL);
    // The other way round: a built-in mutex with a waiter, and a control-table semaphore of
    // three permits on its row.
    let builtin = Semaphore::mutex("process_control#back")
        .with_ttl(TTL)
        .with_max_poll_interval(poll);
    let three = ProcessControl::semaphore("back", 3).with_ttl(TTL);
    assert_eq!(three.resource(), builtin.resource(), "one lock row");
    let holder = mutex.try_acquire(&pool).unwrap().expect("free");
    let builtin_holder = builtin.try_acquire(&pool).unwrap().expect("free");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| mutex.acquire(&pool, LONG).unwrap());
        let builtin_waiter = s.spawn(|| builtin.acquire(&pool, LONG).unwrap());
        let mut conn = pool.get().unwrap();
        let queued = std::time::Instant::now();
        while mutex.queue(&mut conn).unwrap().len() < 2
            || builtin.queue(&mut conn).unwrap().len() < 2
        {
            assert!(queued.elapsed() < LONG, "the waiters never queued");
            std::thread::sleep(poll);
        }
        let other = five
            .try_acquire(&pool)
            .unwrap()
            .expect("its own queue is empty");
        let other_back = three
            .try_acquire(&pool)
            .unwrap()
            .expect("its own queue is empty");
        // Each waiter polls about twenty times with the row's count rewritten.
        std::thread::sleep(Duration::from_millis(1_000));
        for (what, q) in [
            ("control-table mutex", mutex.queue(&mut conn).unwrap()),
            ("built-in mutex", builtin.queue(&mut conn).unwrap()),
        ] {
            let granted: Vec<_> = q.iter().filter(|r| r.granted).collect();
            assert_eq!(
                granted.len(),
                1,
                "{what}: one holder, whatever the row says: {q:?}"
            );
        }
        assert_eq!(mutex.queue(&mut conn).unwrap()[0].ticket, holder.ticket());
        assert_eq!(
            builtin.queue(&mut conn).unwrap()[0].ticket,
            builtin_holder.ticket()
        );
        // Each queue still hands over to its own waiter.
        let _ = holder.release().unwrap();
        let _ = builtin_holder.release().unwrap();
        let next = waiter.join().unwrap();
        let builtin_next = builtin_waiter.join().unwrap();
        assert_eq!(mutex.queue(&mut conn).unwrap().len(), 1);
        assert_eq!(builtin.queue(&mut conn).unwrap().len(), 1);
        drop((next, builtin_next, other, other_back));
    });
}

backend_tests!(
    a_builtin_semaphore_named_like_a_lock_row_adds_no_holders,
    requests_are_rows_of_the_users_table,
    seed_style_insert_never_makes_two_holders,
    a_dead_holder_is_cleaned_up,
    the_seeds_two_column_table_works,
);
