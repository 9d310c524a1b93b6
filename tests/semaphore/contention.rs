//! Many contenders at once: threads and separate processes, checked against a recorded history.

use std::sync::Mutex;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel_lease::prelude::*;
use diesel_lease::semaphore::{Mode, RwLock, Semaphore};
use diesel_lease::{Error, OwnerId};

use super::control_model::ProcessControl;
use super::history::{replay, SemTestConn};
use super::{control_table, granted, history_table, queue, setup, sql, wait_until, worker, LONG};
use crate::common::history::History;
use crate::common::{TestBackend, TestDb};

/// Short enough that the suite stays fast, long enough that nobody expires by accident.
const TTL: Duration = Duration::from_secs(5);
/// Fast hand-over on SQLite and MySQL, where waiters poll.
const POLL: Duration = Duration::from_millis(50);
/// How long a release may wait for the resource's row lock (the workers' is the same).
const RELEASE_WAIT: Duration = Duration::from_secs(20);

/// ≥ 16 contenders (threads and processes) acquire and release repeatedly with random holds;
/// replaying the recorded enter/exit history never shows more than `permits` holders.
fn safety<B: TestBackend>(db: &TestDb<B>, permits: u32, kind: &str)
where
    B::Conn: SemTestConn,
{
    const THREADS: usize = 10;
    const PROCESSES: usize = 6;
    const ITERATIONS: usize = 4;
    let pool = setup(db, THREADS as u32 + 2);
    history_table(db);
    let control = kind.starts_with("control");
    if control {
        control_table(db);
    }
    let resource = "partner-api";
    let (permits_arg, ttl_arg, poll_arg, iter_arg) = (
        permits.to_string(),
        TTL.as_millis().to_string(),
        POLL.as_millis().to_string(),
        ITERATIONS.to_string(),
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            let who = format!("process-{i}");
            worker(
                db,
                &[
                    "contend",
                    resource,
                    &permits_arg,
                    &ttl_arg,
                    &poll_arg,
                    &iter_arg,
                    &who,
                    kind,
                ],
            )
        })
        .collect();
    let (rw, sem) = if control {
        (
            ProcessControl::rw_lock(resource),
            ProcessControl::semaphore(resource, permits),
        )
    } else {
        (RwLock::new(resource), Semaphore::new(resource, permits))
    };
    // A release waits for the resource's row lock at most its drop wait (2 s by default), and
    // sixteen clients of one resource, with the machine's load beside them, can keep it longer:
    // a release that gave up would fail the test on the time it took, not on who held what.
    let rw = rw
        .with_max_readers(permits)
        .with_ttl(TTL)
        .with_max_poll_interval(POLL)
        .with_drop_wait(RELEASE_WAIT);
    let sem = sem
        .with_ttl(TTL)
        .with_max_poll_interval(POLL)
        .with_drop_wait(RELEASE_WAIT);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pool, rw, sem) = (&pool, &rw, &sem);
            s.spawn(move || {
                let who = format!("thread-{t}");
                for _ in 0..ITERATIONS {
                    let permit = match (kind, rand::random_bool(0.3)) {
                        ("rw" | "control-rw", true) => rw.write(pool, LONG).unwrap(),
                        ("rw" | "control-rw", false) => rw.read(pool, LONG).unwrap(),
                        _ => sem.acquire(pool, LONG).unwrap(),
                    };
                    let mode = permit.mode().as_str();
                    pool.get().unwrap().record(&who, "enter", mode).unwrap();
                    std::thread::sleep(Duration::from_millis(rand::random_range(0..10)));
                    pool.get().unwrap().record(&who, "exit", mode).unwrap();
                    let _ = permit.release().unwrap();
                }
            });
        }
    });
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "worker failed: {:?}", out.status);
    }
    let events = pool.get().unwrap().history().unwrap();
    assert_eq!(events.len(), 2 * (THREADS + PROCESSES) * ITERATIONS);
    let (max, writer_shared) = replay(&events);
    eprintln!("{kind} semaphore, {permits} permits: at most {max} holders at once");
    assert!(max >= 1);
    assert!(
        max <= permits as usize,
        "{max} holders at once with {permits} permits"
    );
    assert!(!writer_shared, "a writer overlapped another holder");
    assert!(
        sem.queue(&mut pool.get().unwrap()).unwrap().is_empty(),
        "nothing left behind"
    );
}

fn safety_history_one_permit<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    safety(db, 1, "shared");
}

fn safety_history_three_permits<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    safety(db, 3, "shared");
}

/// Readers and writers from threads and processes: no writer ever overlaps anybody.
fn rw_writers_never_overlap<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    safety(db, 1000, "rw");
}

/// Seed 001 on its own `process_control` table: threads and processes, two permits.
fn control_table_never_more_than_permits<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    safety(db, 2, "control");
}

/// Seed 001's readers and writers on its own table (access type `R` / `W`).
fn control_table_writers_never_overlap<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    safety(db, 1000, "control-rw");
}

/// Seed 001's race: a request whose ticket was handed out first commits *after* a later one
/// was already admitted. Here a second connection inserts a request row the way seed 001
/// does (identity value first, commit later, no resource lock) and keeps its transaction open
/// while a real contender proceeds. Whatever the interleaving, a one-permit semaphore never has
/// two holders, and the late, lower ticket waits until the holder is gone.
fn commit_order_race_never_admits_two<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 8);
    let mutex = Semaphore::mutex("race").with_ttl(TTL);
    // Make sure the resource row exists, like in a running system.
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
            "INSERT INTO diesel_lease_semaphore_tickets \
             (resource, owner, mode, granted, requested_at, expires_at) \
             VALUES ('race', 'straggler', 'shared', FALSE, 0, 9000000000000000000)",
        )
        .unwrap();
    let holder = std::thread::scope(|s| {
        // On SQLite this blocks on the straggler's write lock; elsewhere it proceeds.
        let contender = s.spawn(|| mutex.try_acquire(&pool).unwrap());
        std::thread::sleep(Duration::from_millis(300));
        straggler.batch_execute("COMMIT").unwrap();
        contender.join().unwrap()
    });
    let q = queue::<B>(&pool, "race");
    let straggler_ticket = q.iter().find(|r| r.owner == "straggler").unwrap().ticket;
    assert_eq!(q.iter().filter(|r| r.granted).count(), 1, "{q:?}");
    match &holder {
        // PostgreSQL, MySQL: the contender got in before the lower ticket became visible.
        Some(holder) => {
            assert!(holder.ticket() > straggler_ticket);
            assert!(!q.iter().any(|r| r.owner == "straggler" && r.granted));
        }
        // SQLite: the write lock made the straggler commit first; it is first in line.
        None => assert!(q.iter().any(|r| r.owner == "straggler" && r.granted)),
    }

    // More contenders while the late ticket waits: still one holder at a time.
    let waiter = mutex.acquire(&pool, Duration::from_millis(400));
    assert!(matches!(waiter, Err(Error::Timeout { .. })));
    assert!(mutex.try_acquire(&pool).unwrap().is_none());
    assert_eq!(granted::<B>(&pool, "race"), 1);

    // The holder leaves: the lower ticket is next, never a newcomer.
    drop(holder);
    crate::common::settled(&pool);
    let q = queue::<B>(&pool, "race");
    assert_eq!(q.len(), 1, "{q:?}");
    assert!(q[0].granted && q[0].owner == "straggler");
}

/// The same race through the library's own insert: a trigger makes the first contender's
/// insert slow (its transaction stays open for a second; on PostgreSQL its ticket is already
/// drawn from the sequence) while a second
/// contender arrives. The resource lock makes the second wait for the first's commit; they
/// never hold together, and the lower ticket goes first. PostgreSQL and MySQL (SQLite's
/// BEGIN IMMEDIATE serializes whole transactions, there is nothing to slow down).
fn slow_insert_cannot_be_overtaken<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    if B::NAME == "sqlite" {
        eprintln!("slow_insert_cannot_be_overtaken: not applicable on SQLite (BEGIN IMMEDIATE)");
        return;
    }
    let pool = setup(db, 8);
    history_table(db);
    db.ddl(
        "CREATE FUNCTION sem_slow() RETURNS trigger AS $$ BEGIN \
           IF NEW.owner = 'slow' THEN PERFORM pg_sleep(1); END IF; RETURN NEW; END $$ \
         LANGUAGE plpgsql; \
         CREATE TRIGGER sem_slow BEFORE INSERT ON diesel_lease_semaphore_tickets \
           FOR EACH ROW EXECUTE FUNCTION sem_slow();",
        "",
        "CREATE TRIGGER sem_slow BEFORE INSERT ON diesel_lease_semaphore_tickets \
           FOR EACH ROW SET @sem_slept = IF(NEW.owner = 'slow', SLEEP(1), 0);",
    );
    let make = |owner: &str| {
        Semaphore::mutex("slow")
            .with_ttl(TTL)
            .with_max_poll_interval(POLL)
            .with_owner(OwnerId::new(owner).unwrap())
    };
    let (slow, fast) = (make("slow"), make("fast"));
    // The resource row exists, as in a running system.
    let _ = fast.try_acquire(&pool).unwrap().unwrap().release().unwrap();
    let order = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (who, sem, delay) in [("slow", &slow, 0), ("fast", &fast, 200)] {
            let (pool, order) = (&pool, &order);
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(delay));
                let permit = sem.acquire(pool, LONG).unwrap();
                pool.get().unwrap().record(who, "enter", "shared").unwrap();
                order.lock().unwrap().push((who, permit.ticket()));
                std::thread::sleep(Duration::from_millis(50));
                pool.get().unwrap().record(who, "exit", "shared").unwrap();
                let _ = permit.release().unwrap();
            });
        }
    });
    let order = order.into_inner().unwrap();
    assert_eq!(order.len(), 2);
    assert_eq!(order[0].0, "slow", "the lower ticket goes first: {order:?}");
    assert!(order[0].1 < order[1].1);
    let (max, _) = replay(&pool.get().unwrap().history().unwrap());
    assert_eq!(max, 1);
}

/// FIFO: with one permit, waiters are granted in ticket (request) order, one at a time.
fn grants_come_in_ticket_order<B: TestBackend>(db: &TestDb<B>) {
    const WAITERS: usize = 6;
    let pool = setup(db, WAITERS as u32 + 4);
    let mutex = Semaphore::mutex("fifo")
        .with_ttl(TTL)
        .with_max_poll_interval(POLL);
    let holder = mutex.acquire(&pool, LONG).unwrap();
    let history = History::default();
    history.permit_held("fifo", "first");
    let order = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for i in 0..WAITERS {
            let (pool_ref, mutex, order, history) = (&pool, &mutex, &order, &history);
            s.spawn(move || {
                let permit = mutex.acquire(pool_ref, LONG).unwrap();
                history.permit_held("fifo", &format!("waiter-{i}"));
                order.lock().unwrap().push((i, permit.ticket()));
                std::thread::sleep(Duration::from_millis(5));
                history.permit_released("fifo", &format!("waiter-{i}"));
                let _ = permit.release().unwrap();
            });
            // Queue them one after the other, so request order is known.
            wait_until("the waiter is queued", || {
                queue::<B>(&pool, "fifo").len() == i + 2
            });
        }
        let q = queue::<B>(&pool, "fifo");
        assert_eq!(q.iter().filter(|r| r.granted).count(), 1);
        history.permit_released("fifo", "first");
        let _ = holder.release().unwrap();
    });
    history.check_permits(1);
    let order = order.into_inner().unwrap();
    let threads: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(threads, (0..WAITERS).collect::<Vec<_>>(), "{order:?}");
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
}

/// A writer queued behind readers gets in before any reader that asked after it: within the
/// grants of those ahead of it, and no more.
fn writer_is_not_starved_by_readers<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 14);
    let rw = RwLock::new("list")
        .with_ttl(TTL)
        .with_max_poll_interval(POLL);
    let r1 = rw.read(&pool, LONG).unwrap();
    let r2 = rw.read(&pool, LONG).unwrap();
    let order = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let (pool_ref, rw_ref, order_ref) = (&pool, &rw, &order);
        s.spawn(move || {
            let w = rw_ref.write(pool_ref, LONG).unwrap();
            order_ref.lock().unwrap().push("writer".to_string());
            std::thread::sleep(Duration::from_millis(50));
            let _ = w.release().unwrap();
        });
        wait_until("the writer is queued", || {
            queue::<B>(&pool, "list").len() == 3
        });
        for i in 0..4 {
            s.spawn(move || {
                let r = rw_ref.read(pool_ref, LONG).unwrap();
                order_ref.lock().unwrap().push(format!("reader-{i}"));
                let _ = r.release().unwrap();
            });
        }
        wait_until("the late readers are queued", || {
            queue::<B>(&pool, "list").len() == 7
        });
        // The late readers wait behind the writer although readers hold the lock.
        let q = queue::<B>(&pool, "list");
        assert_eq!(q.iter().filter(|r| r.granted).count(), 2, "{q:?}");
        assert_eq!(q[2].mode, Mode::Exclusive);
        assert!(!q[2].granted);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(granted::<B>(&pool, "list"), 2);
        drop(r1);
        drop(r2);
    });
    let order = order.into_inner().unwrap();
    assert_eq!(order.len(), 5);
    assert_eq!(order[0], "writer", "{order:?}");
}

/// A waiting writer that gives up lets the readers queued behind it share with the holders.
fn waiting_writer_timeout_lets_readers_in<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 10);
    let rw = RwLock::new("doc")
        .with_ttl(TTL)
        .with_max_poll_interval(POLL);
    let r1 = rw.read(&pool, LONG).unwrap();
    std::thread::scope(|s| {
        let (pool_ref, rw_ref) = (&pool, &rw);
        let writer = s.spawn(move || rw_ref.write(pool_ref, Duration::from_millis(1500)));
        wait_until("the writer is queued", || {
            queue::<B>(&pool, "doc").len() == 2
        });
        let reader = s.spawn(move || rw_ref.read(pool_ref, LONG).unwrap());
        assert!(matches!(writer.join().unwrap(), Err(Error::Timeout { .. })));
        let r2 = reader.join().unwrap();
        // Both readers hold at once; the writer left nothing behind.
        let q = queue::<B>(&pool, "doc");
        assert_eq!(q.len(), 2, "{q:?}");
        assert!(q.iter().all(|r| r.granted && r.mode == Mode::Shared));
        let _ = r2.release().unwrap();
    });
    let _ = r1.release().unwrap();
}

/// A resource row deleted while an acquirer waits for its lock (what the last release of a
/// per-key semaphore of a `Worker` does): the acquirer finds the row gone, creates it again and
/// is granted. The deleter is a raw transaction that locks the row and deletes it, and commits
/// only once the acquirer is seen waiting for that lock (PostgreSQL, MySQL: in the server's
/// lock waits; SQLite: the acquirer's `BEGIN IMMEDIATE` cannot start before the deleter's
/// commit, whenever it comes, so there is nothing to wait for).
fn a_resource_row_deleted_under_a_waiter_is_recreated<B: TestBackend>(db: &TestDb<B>)
where
    B::Conn: SemTestConn,
{
    let count = |query: &str| db.conn().count(query).unwrap();
    let pool = setup(db, 4);
    let mutex = Semaphore::mutex("gone");
    // The row exists, as for a key that was used before.
    let _ = mutex
        .try_acquire(&pool)
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    let rows = "SELECT COUNT(*) AS n FROM diesel_lease_semaphores WHERE resource = 'gone'";
    assert_eq!(count(rows), 1);

    let mut deleter = db.conn();
    let lock_and_delete = "BEGIN; \
         SELECT permits FROM diesel_lease_semaphores WHERE resource = 'gone' FOR UPDATE; \
         DELETE FROM diesel_lease_semaphores WHERE resource = 'gone'";
    deleter
        .batch_execute(sql::<B>(
            lock_and_delete,
            "BEGIN IMMEDIATE; DELETE FROM diesel_lease_semaphores WHERE resource = 'gone'",
            lock_and_delete,
        ))
        .unwrap();
    let waiting = sql::<B>(
        "SELECT COUNT(*) AS n FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
        "",
        "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX t \
         JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
         WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()",
    );
    let permit = std::thread::scope(|s| {
        let acquirer = s.spawn(|| mutex.acquire(&pool, LONG));
        if !waiting.is_empty() {
            wait_until("the acquirer waits for the resource's lock", || {
                if B::KIND == diesel_lease::BackendKind::Mysql {
                    // InnoDB refreshes what INNODB_TRX shows only when it was last read more
                    // than 0.1 s ago: faster polls would keep reading the same stale snapshot.
                    std::thread::sleep(Duration::from_millis(250));
                }
                count(waiting) > 0
            });
        }
        deleter.batch_execute("COMMIT").unwrap();
        acquirer.join().unwrap()
    })
    .expect("granted once the row is recreated");
    let q = queue::<B>(&pool, "gone");
    assert_eq!(q.len(), 1, "{q:?}");
    assert!(q[0].granted && q[0].ticket == permit.ticket(), "{q:?}");
    assert_eq!(count(rows), 1, "the row is back");
    let _ = permit.release().unwrap();
}

backend_tests!(
    a_resource_row_deleted_under_a_waiter_is_recreated,
    safety_history_one_permit,
    safety_history_three_permits,
    rw_writers_never_overlap,
    control_table_never_more_than_permits,
    control_table_writers_never_overlap,
    commit_order_race_never_admits_two,
    slow_insert_cannot_be_overtaken,
    grants_come_in_ticket_order,
    writer_is_not_starved_by_readers,
    waiting_writer_timeout_lets_readers_in,
);
