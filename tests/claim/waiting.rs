//! Seed 002's waiting lock: `SELECT * FROM table1 WHERE id = $id AND col1 IS NULL FOR UPDATE`,
//! then decide and update in the same transaction. A second transaction on the same row waits
//! for the first (it does not skip it), and then sees that the row no longer qualifies; the wait
//! is bounded and ends in a typed timeout.

use diesel_lease::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Barrier};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_lease::{Error, InvalidInput};

use crate::common::TestDb;
use crate::models::schema::{table1, test};
use crate::models::*;

/// How long the first transaction keeps the row locked before it changes it and commits.
const HOLD: Duration = Duration::from_millis(600);

backend_suite! {
    fixtures: crate::claim::locking;
    tests: [
        seed_002_a_second_transaction_waits_then_sees_none,
        seed_002_the_wait_is_bounded_and_a_timeout_is_typed,
        seed_002_each_row_is_sent_once_by_many_workers,
        a_claimable_row_waits_then_sees_none,
        seed_002_inside_the_callers_transaction_is_a_savepoint,
    ];

    pub(crate) fn seed_002_table(db: &TestDb<B>, rows: i64) {
        let (pg, sqlite, mysql) = TABLE1_DDL;
        db.ddl(pg, sqlite, mysql);
        let values: Vec<_> = (1..=rows).map(|id| table1::id.eq(id)).collect();
        diesel::insert_into(table1::table).values(&values).execute(&mut db.conn()).unwrap();
    }

    pub(crate) fn seed_002_a_second_transaction_waits_then_sees_none(db: &TestDb<B>) {
        seed_002_table(db, 1);
        let (locked_tx, locked_rx) = mpsc::channel();
        std::thread::scope(|s| {
            let first = s.spawn(move || {
                let mut conn = db.conn();
                Table1::with_locked_if_null(&mut conn, 1, |conn, row| {
                    assert_eq!(row.col1, None);
                    locked_tx.send(()).unwrap();
                    // The external call, then the update from its answer.
                    std::thread::sleep(HOLD);
                    diesel::update(table1::table.find(row.id)).set(table1::col1.eq("sent")).execute(conn)?;
                    Ok::<_, Error>(row.id)
                })
                .unwrap()
            });
            locked_rx.recv().unwrap();
            let mut conn = db.conn();
            let start = Instant::now();
            let second = Table1::with_locked_if_null(&mut conn, 1, |_, row| Ok::<_, Error>(row)).unwrap();
            let waited = start.elapsed();
            assert_eq!(first.join().unwrap(), Some(1));
            assert_eq!(second, None, "the row no longer qualifies once the first transaction set col1");
            assert!(waited >= HOLD / 2, "the second transaction did not wait for the first: {waited:?}");
        });
        let row: Table1 = table1::table.find(1).select(Table1::as_select()).first(&mut db.conn()).unwrap();
        assert_eq!(row.col1.as_deref(), Some("sent"));
    }

    /// The connection's own lock wait bound, as text.
    fn lock_wait_setting(conn: &mut <B as crate::common::TestBackend>::Conn) -> String {
        #[derive(QueryableByName)]
        struct Setting {
            #[diesel(sql_type = diesel::sql_types::Text)]
            value: String,
        }
        diesel::sql_query(crate::common::pick::<B>(
            "SELECT current_setting('lock_timeout') AS value",
            "SELECT CAST(timeout AS TEXT) AS value FROM pragma_busy_timeout",
            "SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS CHAR) AS value",
        ))
        .get_result::<Setting>(conn)
        .unwrap()
        .value
    }

    pub(crate) fn seed_002_the_wait_is_bounded_and_a_timeout_is_typed(db: &TestDb<B>) {
        seed_002_table(db, 1);
        let mut conn = db.conn();
        let own_bound = lock_wait_setting(&mut conn);
        // Outside a transaction the lock would end at once: refused, not silently useless.
        let outside = Table1::lock_by_pk_if_null(&mut conn, 1);
        assert!(
            matches!(outside, Err(Error::Database(diesel::result::Error::NotInTransaction))),
            "{outside:?}"
        );
        let zero = conn.transaction(|c| Table1::lock_by_pk_if_null_within(c, 1, Duration::ZERO));
        assert!(matches!(zero, Err(Error::InvalidInput(InvalidInput::ZeroDuration { .. }))), "{zero:?}");

        let (locked_tx, locked_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            let holder = s.spawn(move || {
                let mut conn = db.conn();
                Table1::with_locked_if_null(&mut conn, 1, |_, row| {
                    locked_tx.send(()).unwrap();
                    done_rx.recv_timeout(Duration::from_secs(20)).unwrap();
                    Ok::<_, Error>(row.id)
                })
                .unwrap()
            });
            locked_rx.recv().unwrap();
            let wait = Duration::from_secs(1);
            let start = Instant::now();
            let timed_out = conn.transaction(|c| Table1::lock_by_pk_if_null_within(c, 1, wait));
            let waited = start.elapsed();
            done_tx.send(()).unwrap();
            assert!(matches!(timed_out, Err(Error::Timeout { .. })), "{timed_out:?}");
            assert!(timed_out.unwrap_err().is_retryable());
            assert!(waited >= wait - Duration::from_millis(100), "gave up after {waited:?}");
            assert!(waited < wait + Duration::from_secs(3), "waited {waited:?} for a {wait:?} bound");
            assert_eq!(holder.join().unwrap(), Some(1));
        });
        assert_eq!(lock_wait_setting(&mut conn), own_bound, "the timeout left the bound changed");
        // With nobody holding the row it locks, and the session's own bound is back afterwards.
        let row = conn.transaction(|c| Table1::lock_by_pk_if_null_within(c, 1, Duration::from_secs(1))).unwrap();
        assert_eq!(row.map(|r| r.id), Some(1));
        assert_eq!(lock_wait_setting(&mut conn), own_bound, "the lock left the bound changed");
    }

    /// Many workers run seed 002's transaction on the same rows at once: each row's external call
    /// happens exactly once.
    pub(crate) fn seed_002_each_row_is_sent_once_by_many_workers(db: &TestDb<B>) {
        const ROWS: i64 = 5;
        const WORKERS: usize = 6;
        seed_002_table(db, ROWS);
        let calls: Vec<AtomicUsize> = (0..ROWS).map(|_| AtomicUsize::new(0)).collect();
        let barrier = Barrier::new(WORKERS);
        std::thread::scope(|s| {
            for w in 0..WORKERS {
                let (calls, barrier) = (&calls, &barrier);
                s.spawn(move || {
                    let mut conn = db.conn();
                    barrier.wait();
                    for id in 1..=ROWS {
                        Table1::with_locked_if_null(&mut conn, id, |conn, row| {
                            calls[(row.id - 1) as usize].fetch_add(1, Ordering::SeqCst);
                            diesel::update(table1::table.find(row.id))
                                .set(table1::col1.eq(format!("sent by {w}")))
                                .execute(conn)?;
                            Ok::<_, Error>(())
                        })
                        .unwrap();
                    }
                });
            }
        });
        let counts: Vec<usize> = calls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(counts, vec![1; ROWS as usize]);
        let unsent = table1::table.filter(table1::col1.is_null()).count().get_result::<i64>(&mut db.conn()).unwrap();
        assert_eq!(unsent, 0);
    }

    /// `with_locked_if_null` inside the caller's transaction runs as a savepoint of it on every
    /// backend: its change commits and rolls back with the caller's transaction, and a second
    /// call in the same transaction sees the row no longer qualify.
    pub(crate) fn seed_002_inside_the_callers_transaction_is_a_savepoint(db: &TestDb<B>) {
        seed_002_table(db, 2);
        let mut conn = db.conn();
        let mark = |conn: &mut <B as crate::common::TestBackend>::Conn, id: i64| {
            Table1::with_locked_if_null(conn, id, |conn, row| {
                diesel::update(table1::table.find(row.id)).set(table1::col1.eq("sent")).execute(conn)?;
                Ok::<_, Error>(row.id)
            })
        };
        let rolled_back = conn.transaction::<(), Error, _>(|c| {
            assert_eq!(mark(c, 1)?, Some(1));
            assert_eq!(mark(c, 1)?, None, "the savepoint's change is the transaction's");
            Err(Error::Database(diesel::result::Error::RollbackTransaction))
        });
        assert!(rolled_back.is_err());
        let committed = conn.transaction(|c| Ok::<_, Error>((mark(c, 1)?, mark(c, 2)?))).unwrap();
        assert_eq!(committed, (Some(1), Some(2)), "the rollback undid the first change");
        let unsent = table1::table.filter(table1::col1.is_null()).count().get_result::<i64>(&mut conn).unwrap();
        assert_eq!(unsent, 0, "both changes committed with the caller's transaction");
    }

    /// The same waiting lock on a state column (seed 004's `processed`): the generated
    /// `lock_by_pk_if_claimable` / `with_locked`.
    pub(crate) fn a_claimable_row_waits_then_sees_none(db: &TestDb<B>) {
        fixtures::seed_test_rows(db, 2);
        let (locked_tx, locked_rx) = mpsc::channel();
        std::thread::scope(|s| {
            let first = s.spawn(move || {
                let mut conn = db.conn();
                Test::with_locked(&mut conn, 1, |conn, row| {
                    locked_tx.send(()).unwrap();
                    std::thread::sleep(HOLD);
                    diesel::update(test::table.find(row.id)).set(test::processed.eq(true)).execute(conn)?;
                    Ok::<_, Error>(row.id)
                })
                .unwrap()
            });
            locked_rx.recv().unwrap();
            let mut conn = db.conn();
            let start = Instant::now();
            let second = Test::with_locked(&mut conn, 1, |_, row| Ok::<_, Error>(row.id)).unwrap();
            let waited = start.elapsed();
            assert_eq!(first.join().unwrap(), Some(1));
            assert_eq!(second, None, "row 1 is processed once the first transaction committed");
            assert!(waited >= HOLD / 2, "the second transaction did not wait: {waited:?}");
        });
        let mut conn = db.conn();
        let free = conn.transaction(|c| Test::lock_by_pk_if_claimable(c, 2)).unwrap();
        assert_eq!(free.map(|r| r.id), Some(2));
        let done = conn.transaction(|c| Test::lock_by_pk_if_claimable_within(c, 1, Duration::from_secs(1))).unwrap();
        assert_eq!(done, None);
    }
}

/// SQLite: a transaction of yours that read before the waiting lock cannot become a writer once
/// another writer committed after its read: SQLite refuses at once, whatever the busy timeout.
/// Opened with `immediate_transaction`, it holds the write lock from its start, so the lock is
/// taken. (README, "SQLite has no row locks".)
#[cfg(feature = "sqlite")]
#[test]
fn sqlite_a_transaction_that_read_first_cannot_take_the_lock() {
    use diesel::connection::SimpleConnection;
    crate::common::run::<crate::common::Sqlite>(
        "sqlite_a_transaction_that_read_first_cannot_take_the_lock",
        |db| {
            sqlite::cases::seed_002_table(db, 2);
            let (mut conn, mut other) = (db.conn(), db.conn());
            let deferred = conn.transaction(|c| {
                table1::table.count().get_result::<i64>(c)?;
                other.batch_execute("UPDATE table1 SET col1 = 'other' WHERE id = 2")?;
                let asked = Instant::now();
                let locked = Table1::with_locked_if_null(c, 1, |_, row| Ok::<_, Error>(row.id));
                Ok::<_, Error>((locked, asked.elapsed()))
            });
            let (locked, took) = deferred.unwrap();
            assert!(
                matches!(locked, Err(Error::Timeout { .. })),
                "SQLITE_BUSY, a timeout: {locked:?}"
            );
            // Not the connection's 30 s busy timeout: SQLite does not wait here.
            assert!(took < Duration::from_secs(10), "it waited {took:?}");
            let immediate = conn.immediate_transaction(|c| {
                table1::table.count().get_result::<i64>(c)?;
                Table1::with_locked_if_null(c, 1, |_, row| Ok::<_, Error>(row.id))
            });
            assert_eq!(immediate.unwrap(), Some(1));
        },
    );
}
