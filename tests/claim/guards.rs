//! Seed 002: at-most-once guards (`claim_if_null`) and unique follow-up inserts (`insert_once`).

use diesel_lease::prelude::*;
use std::sync::{Barrier, Mutex};

use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_lease::{db_now, InsertOutcome, LeaseConnection};

use crate::common::TestDb;
use crate::models::schema::{action, mailing, notification};
use crate::models::*;

backend_suite! {
    tests: [
        guards_on_a_plain_connection_wait_for_another_writer,
        claim_if_null_has_exactly_one_winner_among_16,
        claim_if_null_on_a_composite_key_with_a_value,
        insert_once_inserts_once_among_16_and_keeps_transactions_usable,
        insert_once_returns_the_row_outside_a_transaction,
        insert_once_with_a_key_the_insert_supplies,
        insert_once_still_reports_other_errors,
        insert_once_without_returning_reports_the_outcome,
        insert_once_sends_one_statement_where_the_insert_returns_its_row,
    ];

    fn guard_tables(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = GUARD_DDL;
        db.ddl(pg, sqlite, mysql);
    }

    /// On a plain connection (no busy timeout), behind another writer, the guard and the
    /// follow-up insert wait and win, as every other write of the library does; on SQLite they
    /// failed at once with "database is locked" (`Error::Timeout`).
    pub(crate) fn guards_on_a_plain_connection_wait_for_another_writer(db: &TestDb<B>) {
        guard_tables(db);
        diesel::insert_into(action::table).values(action::id.eq(1)).execute(&mut db.conn()).unwrap();
        let lock = "UPDATE action SET notified = NULL WHERE id = 1";
        let won = crate::common::on_a_plain_connection_behind_a_writer(db, lock, |c| {
            Action::claim_if_null_by_pk(c, 1, db_now)
        });
        assert!(won.unwrap(), "the guard waited and won");
        let next = NewNotification { user_id: 5, previous_notification: 1, body: "day 2".into() };
        let inserted = crate::common::on_a_plain_connection_behind_a_writer(db, lock, |c| {
            next.clone().insert_once(c)
        });
        assert!(matches!(inserted, Ok(InsertOutcome::Inserted(_))), "{inserted:?}");
    }

    /// 16 concurrent callers race to notify the same action: exactly one wins. A later call,
    /// whose update would change nothing, also reports that it lost.
    pub(crate) fn claim_if_null_has_exactly_one_winner_among_16(db: &TestDb<B>) {
        guard_tables(db);
        let mut conn = db.conn();
        diesel::insert_into(action::table).values(action::id.eq(7)).execute(&mut conn).unwrap();
        let barrier = Barrier::new(16);
        let wins = Mutex::new(0);
        std::thread::scope(|s| {
            for _ in 0..16 {
                let (barrier, wins) = (&barrier, &wins);
                s.spawn(move || {
                    let mut conn = db.conn();
                    barrier.wait();
                    if Action::claim_if_null_by_pk(&mut conn, 7, db_now).unwrap() {
                        *wins.lock().unwrap() += 1;
                    }
                });
            }
        });
        assert_eq!(wins.into_inner().unwrap(), 1);
        let row: Action = action::table.find(7).select(Action::as_select()).first(&mut conn).unwrap();
        assert!(row.notified.is_some());
        assert!(!row.claim_if_null(&mut conn, db_now).unwrap(), "a set guard was claimed again");
        assert!(!Action::claim_if_null_by_pk(&mut conn, 8, db_now).unwrap(), "a missing row was claimed");
    }

    pub(crate) fn claim_if_null_on_a_composite_key_with_a_value(db: &TestDb<B>) {
        guard_tables(db);
        let mut conn = db.conn();
        diesel::insert_into(mailing::table)
            .values(&vec![
                (mailing::campaign_id.eq(1), mailing::user_id.eq(10i64)),
                (mailing::campaign_id.eq(1), mailing::user_id.eq(11i64)),
            ])
            .execute(&mut conn)
            .unwrap();
        assert!(Mailing::claim_if_null_by_pk(&mut conn, (1, 10), "worker-a").unwrap());
        // The same value again: the update would be a no-op, and it must still report "lost".
        assert!(!Mailing::claim_if_null_by_pk(&mut conn, (1, 10), "worker-a").unwrap());
        assert!(!Mailing::claim_if_null_by_pk(&mut conn, (1, 10), "worker-b").unwrap());
        let other: Mailing = mailing::table.find((1, 11i64)).select(Mailing::as_select()).first(&mut conn).unwrap();
        assert_eq!(other.sent_by, None, "the guard touched another row of the composite key");
        assert!(other.claim_if_null(&mut conn, "worker-b").unwrap());
    }

    /// 16 callers, each inside its own transaction, insert the follow-up of notification 1:
    /// exactly one inserts; every other caller gets `AlreadyExists`, and each of the 16
    /// transactions can go on and commit more work.
    pub(crate) fn insert_once_inserts_once_among_16_and_keeps_transactions_usable(db: &TestDb<B>) {
        guard_tables(db);
        let barrier = Barrier::new(16);
        let outcomes = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for worker in 0..16i64 {
                let (barrier, outcomes) = (&barrier, &outcomes);
                s.spawn(move || {
                    let mut conn = db.conn();
                    barrier.wait();
                    let outcome = conn
                        .transaction::<_, diesel_lease::Error, _>(|conn| {
                            let next = NewNotification {
                                user_id: 5,
                                previous_notification: 1,
                                body: format!("follow-up by {worker}"),
                            };
                            let outcome = next.insert_once(conn)?;
                            // The transaction must still be usable after a duplicate.
                            diesel::insert_into(action::table).values(action::id.eq(worker)).execute(conn)?;
                            Ok(outcome)
                        })
                        .unwrap();
                    outcomes.lock().unwrap().push(outcome);
                });
            }
        });
        let outcomes = outcomes.into_inner().unwrap();
        let inserted: Vec<_> = outcomes.iter().filter(|o| o.inserted()).collect();
        assert_eq!(inserted.len(), 1, "{outcomes:?}");
        assert_eq!(outcomes.iter().filter(|o| **o == InsertOutcome::AlreadyExists).count(), 15);
        let mut conn = db.conn();
        let stored: Notification = notification::table.select(Notification::as_select()).first(&mut conn).unwrap();
        assert_eq!(inserted[0], &InsertOutcome::Inserted(Some(stored)), "the row comes back on every backend");
        let committed: i64 = action::table.count().get_result(&mut conn).unwrap();
        assert_eq!(committed, 16, "a transaction was poisoned by the duplicate");
        let rows: i64 = notification::table.count().get_result(&mut conn).unwrap();
        assert_eq!(rows, 1);
    }

    /// Without a surrounding transaction (MySQL reads the row back in a short one of its own), the
    /// row comes back, committed; and a later insert whose key the caller gives never comes back
    /// as the earlier row, although `LAST_INSERT_ID()` still holds that row's id on MySQL.
    pub(crate) fn insert_once_returns_the_row_outside_a_transaction(db: &TestDb<B>) {
        guard_tables(db);
        let mut conn = db.conn();
        let first = NewNotification { user_id: 5, previous_notification: 1, body: "day 2".into() };
        let outcome = first.clone().insert_once(&mut conn).unwrap();
        let stored: Notification = notification::table
            .filter(notification::previous_notification.eq(1))
            .select(Notification::as_select())
            .first(&mut db.conn())
            .unwrap();
        assert_eq!(outcome, InsertOutcome::Inserted(Some(stored)));
        assert_eq!(first.insert_once(&mut conn).unwrap(), InsertOutcome::AlreadyExists);
        // MysqlConnection, which has no RETURNING: the session's `LAST_INSERT_ID()` is reset
        // before each insert (as documented), so after a duplicate it reads 0, not the id of the
        // row inserted before. (MariadbConnection's insert returns its row.)
        let mysql = <B as crate::common::TestBackend>::NAME == "mysql";
        let last_insert_id = |conn: &mut <B as crate::common::TestBackend>::Conn| -> i64 {
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>("CAST(LAST_INSERT_ID() AS SIGNED)"))
                .get_result(conn)
                .unwrap()
        };
        if mysql {
            assert_eq!(last_insert_id(&mut conn), 0, "after AlreadyExists");
        }

        let numbered = NumberedNotification { id: 100, user_id: 5, previous_notification: 2, body: "day 3".into() };
        let outcome = numbered.clone().insert_once(&mut conn).unwrap();
        let stored: Notification = notification::table.find(100).select(Notification::as_select()).first(&mut conn).unwrap();
        if mysql {
            // The insert generated no AUTO_INCREMENT value: MySQL has nothing to find the row by.
            assert_eq!(outcome, InsertOutcome::Inserted(None));
            assert_eq!(last_insert_id(&mut conn), 0, "after Inserted(None)");
        } else {
            assert_eq!(outcome, InsertOutcome::Inserted(Some(stored)));
        }
        assert_eq!(numbered.insert_once(&mut conn).unwrap(), InsertOutcome::AlreadyExists);
        let depth = <AnsiTransactionManager as TransactionManager<<B as crate::common::TestBackend>::Conn>>::transaction_manager_status_mut(&mut conn)
            .transaction_depth()
            .unwrap();
        assert_eq!(depth, None, "a transaction was left open");
    }

    /// The statements an `insert_once` that returns its row sends, inserted and duplicate,
    /// outside a transaction: the insert alone wherever it returns the row itself (PostgreSQL
    /// `ON CONFLICT DO NOTHING RETURNING`, MariadbConnection `INSERT … RETURNING`; SQLite's
    /// inside the `BEGIN IMMEDIATE … COMMIT` every SQLite write of the library takes).
    /// MysqlConnection, which has no RETURNING, finds the generated key and reads the row back
    /// in a transaction of its own.
    pub(crate) fn insert_once_sends_one_statement_where_the_insert_returns_its_row(db: &TestDb<B>) {
        use std::sync::{Arc, Mutex};
        guard_tables(db);
        let mut conn = db.conn();
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = Arc::clone(&sent);
        conn.set_instrumentation(move |event: diesel::connection::InstrumentationEvent<'_>| {
            if let diesel::connection::InstrumentationEvent::StartQuery { query, .. } = event {
                log.lock().unwrap().push(query.to_string());
            }
        });
        let mut statements = |f: &mut dyn FnMut(&mut <B as crate::common::TestBackend>::Conn)| {
            sent.lock().unwrap().clear();
            f(&mut conn);
            std::mem::take(&mut *sent.lock().unwrap())
        };
        let row = NewNotification { user_id: 7, previous_notification: 3, body: "day 4".into() };
        let inserted = statements(&mut |c| {
            assert!(matches!(row.clone().insert_once(c).unwrap(), InsertOutcome::Inserted(Some(_))));
        });
        let duplicate = statements(&mut |c| {
            assert_eq!(row.clone().insert_once(c).unwrap(), InsertOutcome::AlreadyExists);
        });
        let kinds = |sent: &[String]| -> Vec<String> {
            sent.iter().map(|q| q.split_whitespace().next().unwrap_or("").to_uppercase()).collect()
        };
        let name = <B as crate::common::TestBackend>::NAME;
        let expected: &[&str] = match name {
            "sqlite" => &["BEGIN", "INSERT", "COMMIT"],
            _ => &["INSERT"],
        };
        if name == "mysql" {
            assert!(inserted.len() > 1 && kinds(&inserted).contains(&"SELECT".to_owned()), "MysqlConnection reads the row back: {inserted:#?}");
        } else {
            assert_eq!(kinds(&inserted), expected, "{name}, inserted: {inserted:#?}");
            assert_eq!(kinds(&duplicate), expected, "{name}, duplicate: {duplicate:#?}");
        }
    }

    /// A table that generates no key (the insert supplies all of it): the row comes back where
    /// the backend has `RETURNING` (MariadbConnection too); MysqlConnection says
    /// `Inserted(None)`. Inside a transaction too.
    pub(crate) fn insert_once_with_a_key_the_insert_supplies(db: &TestDb<B>) {
        guard_tables(db);
        let mut conn = db.conn();
        let mysql = <B as crate::common::TestBackend>::NAME == "mysql";
        let expected = |campaign_id, user_id| match mysql {
            true => InsertOutcome::Inserted(None),
            false => InsertOutcome::Inserted(Some(Mailing { campaign_id, user_id, sent_by: None })),
        };
        let mailing = NewMailing { campaign_id: 1, user_id: 10 };
        assert_eq!(mailing.clone().insert_once(&mut conn).unwrap(), expected(1, 10));
        assert_eq!(mailing.insert_once(&mut conn).unwrap(), InsertOutcome::AlreadyExists);
        conn.transaction::<_, diesel_lease::Error, _>(|conn| {
            assert_eq!(NewMailing { campaign_id: 1, user_id: 11 }.insert_once(conn)?, expected(1, 11));
            assert_eq!(NewMailing { campaign_id: 1, user_id: 10 }.insert_once(conn)?, InsertOutcome::AlreadyExists);
            Ok(())
        })
        .unwrap();
        let rows: i64 = mailing::table.count().get_result(&mut conn).unwrap();
        assert_eq!(rows, 2);
    }

    pub(crate) fn insert_once_still_reports_other_errors(db: &TestDb<B>) {
        guard_tables(db);
        let mut conn = db.conn();
        conn.batch_execute("DROP TABLE notification").unwrap();
        let next = NewNotification { user_id: 1, previous_notification: 1, body: "x".into() };
        let err = next.clone().insert_once(&mut conn).unwrap_err();
        assert!(
            !matches!(
                err,
                diesel_lease::Error::Database(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _))
            ),
            "{err:?}"
        );
        // And within a transaction the error propagates (nothing is swallowed).
        let r = conn.write_transaction(|c| next.clone().insert_once(c));
        assert!(r.is_err());
    }

    pub(crate) fn insert_once_without_returning_reports_the_outcome(db: &TestDb<B>) {
        guard_tables(db);
        let mut conn = db.conn();
        let next = FollowUp { user_id: 1, previous_notification: 9, body: "hello".into() };
        conn.transaction::<_, diesel_lease::Error, _>(|conn| {
            assert_eq!(next.clone().insert_once(conn)?, InsertOutcome::Inserted(None));
            assert_eq!(next.clone().insert_once(conn)?, InsertOutcome::AlreadyExists);
            // Still usable after the duplicate.
            diesel::insert_into(action::table).values(action::id.eq(1)).execute(conn)?;
            Ok(())
        })
        .unwrap();
        let rows: i64 = notification::table.count().get_result(&mut conn).unwrap();
        assert_eq!(rows, 1);
    }
}
