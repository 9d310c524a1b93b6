//! Seed 004: the locked finder (`@Lock(PESSIMISTIC_WRITE)` + skip-locked) and the helper that
//! processes a locked row in a transaction.

use diesel_lease::prelude::*;
use std::collections::HashMap;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use diesel::prelude::*;
use diesel::result::Error as DieselError;
use diesel_lease::LeaseConnection;

use crate::common::TestDb;
use crate::models::schema::test;
use crate::models::*;

backend_suite! {
    tests: [
        two_transactions_never_lock_the_same_row,
        rollback_makes_the_row_available_again,
        with_next_locked_processes_each_row_once,
        lock_next_where_applies_the_filter,
        a_timeout_without_claimed_at_is_an_error,
    ];

    pub(crate) fn seed_test_rows(db: &TestDb<B>, n: i64) {
        let (pg, sqlite, mysql) = TEST_DDL;
        db.ddl(pg, sqlite, mysql);
        let rows: Vec<_> = (1..=n)
            .map(|id| (test::id.eq(id), test::data.eq(format!("row {id}")), test::processed.eq(false)))
            .collect();
        let mut conn = db.conn();
        for chunk in rows.chunks(1000) {
            diesel::insert_into(test::table).values(chunk).execute(&mut conn).unwrap();
        }
    }

    /// Transaction A locks a row and keeps its transaction open; transaction B, on another
    /// connection, must get a different row (PostgreSQL, MySQL: immediately, skipping A's; SQLite:
    /// after A commits, since SQLite's write lock is the whole database).
    pub(crate) fn two_transactions_never_lock_the_same_row(db: &TestDb<B>) {
        seed_test_rows(db, 3);
        let (locked_tx, locked_rx) = mpsc::channel::<i64>();
        let (b_tx, b_rx) = mpsc::channel::<i64>();
        std::thread::scope(|s| {
            let a = s.spawn(move || {
                let mut conn = db.conn();
                conn.write_transaction(|conn| {
                    let row = Test::claim().locked(conn)?.expect("a row for A");
                    locked_tx.send(row.id).unwrap();
                    // Give B the chance to run while A holds its lock; B must not get this row.
                    let b_row = b_rx.recv_timeout(Duration::from_millis(500)).ok();
                    diesel::update(test::table.find(row.id)).set(test::processed.eq(true)).execute(conn)?;
                    Ok::<_, diesel_lease::Error>((row.id, b_row))
                })
                .unwrap()
            });
            let a_row = locked_rx.recv().unwrap();
            let mut conn = db.conn();
            let b_row = conn
                .write_transaction(|conn| Test::claim().locked(conn).map(|r| r.expect("a row for B").id))
                .unwrap();
            let _ = b_tx.send(b_row);
            let (a_row_again, _) = a.join().unwrap();
            assert_eq!(a_row, a_row_again);
            assert_ne!(a_row, b_row, "two transactions locked the same row");
        });
    }

    pub(crate) fn rollback_makes_the_row_available_again(db: &TestDb<B>) {
        seed_test_rows(db, 2);
        let mut conn = db.conn();
        let failed: Result<Option<()>, DieselError> = Test::claim().locked_with(&mut conn, |conn, row| {
            assert_eq!(row.id, 1);
            diesel::update(test::table.find(row.id)).set(test::processed.eq(true)).execute(conn)?;
            Err(DieselError::RollbackTransaction)
        });
        assert!(failed.is_err());
        let processed: bool = test::table.find(1).select(test::processed).first(&mut conn).unwrap();
        assert!(!processed, "the rolled-back update stuck");
        let again = conn.write_transaction(|conn| Test::claim().locked(conn)).unwrap().unwrap();
        assert_eq!(again.id, 1, "the row was not available again after rollback");

        let done = Test::claim().locked_with(&mut conn, |conn, row| {
            diesel::update(test::table.find(row.id)).set(test::processed.eq(true)).execute(conn)?;
            Ok::<_, DieselError>(row.id)
        })
        .unwrap();
        assert_eq!(done, Some(1));
        let processed: bool = test::table.find(1).select(test::processed).first(&mut conn).unwrap();
        assert!(processed);
    }

    /// Seed 004's service, run by 8 threads: each row processed exactly once.
    pub(crate) fn with_next_locked_processes_each_row_once(db: &TestDb<B>) {
        const ROWS: i64 = 300;
        seed_test_rows(db, ROWS);
        let pool = db.pool(8);
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (pool, seen) = (pool.clone(), &seen);
                s.spawn(move || {
                    let mut conn = pool.get().unwrap();
                    while let Some(id) = Test::claim().locked_with(&mut conn, |conn, row| {
                        diesel::update(test::table.find(row.id)).set(test::processed.eq(true)).execute(conn)?;
                        Ok::<_, DieselError>(row.id)
                    })
                    .unwrap()
                    {
                        seen.lock().unwrap().push(id);
                    }
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        let mut counts: HashMap<i64, usize> = HashMap::new();
        for id in &seen {
            *counts.entry(*id).or_default() += 1;
        }
        assert_eq!(counts.len() as i64, ROWS, "some rows were never processed");
        assert!(counts.values().all(|n| *n == 1), "a row was processed twice");
    }

    /// `Test` has no claimed_at column: a per-call timeout could never rescue anything, so it
    /// is refused instead of being silently ignored.
    pub(crate) fn a_timeout_without_claimed_at_is_an_error(db: &TestDb<B>) {
        seed_test_rows(db, 1);
        let options = diesel_lease::claim::ClaimOptions::default()
            .timeout(Duration::from_secs(5));
        let err = Test::claim().batch(1).options(&options).rows(&mut db.conn()).unwrap_err();
        assert!(err.to_string().contains("claimed_at"), "{err}");
        let processed: bool = test::table.find(1).select(test::processed).first(&mut db.conn()).unwrap();
        assert!(!processed, "the refused claim changed the row");
    }

    pub(crate) fn lock_next_where_applies_the_filter(db: &TestDb<B>) {
        seed_test_rows(db, 3);
        let mut conn = db.conn();
        let row = conn
            .write_transaction(|c| Test::claim().filter(test::data.eq("row 3")).locked(c))
            .unwrap()
            .unwrap();
        assert_eq!(row.id, 3);
    }
}
