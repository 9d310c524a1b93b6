//! Each server-side fault arrives as its typed [`Error`] variant, caused for real: a lock held by
//! another session, the server's own timeouts, a session terminated by an administrator, a
//! deadlock between two transactions, a SQLite file locked by another writer.

use diesel_lease::prelude::*;
use std::sync::mpsc;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_lease::{db_now, Error};

use crate::common::TestDb;
use crate::models::schema::action;
use crate::models::{Action, GUARD_DDL};

backend_suite! {
    tests: [];

    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn guard_table(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = GUARD_DDL;
        db.ddl(pg, sqlite, mysql);
        diesel::insert_into(action::table)
            .values(&vec![action::id.eq(1), action::id.eq(2)])
            .execute(&mut db.conn())
            .unwrap();
    }

    /// Holds row `id` of `action` locked (an open transaction that updated it) on its own
    /// connection, in a thread, until `probe` has run on another connection; returns what it returned.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    fn while_row_is_locked<T: Send>(
        db: &TestDb<B>,
        id: i64,
        probe: impl FnOnce() -> T + Send,
    ) -> T {
        let (locked_tx, locked) = mpsc::channel();
        let (done_tx, done) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut holder = db.conn();
                let _ = holder.transaction::<(), diesel::result::Error, _>(|c| {
                    diesel::update(action::table.find(id))
                        .set(action::notified.eq(None::<chrono::NaiveDateTime>))
                        .execute(c)?;
                    locked_tx.send(()).unwrap();
                    // Keep the lock until the probe is done (bounded, so a failing probe ends too).
                    let _ = done.recv_timeout(Duration::from_secs(30));
                    Err(diesel::result::Error::RollbackTransaction)
                });
            });
            locked.recv_timeout(Duration::from_secs(10)).expect("holder locked the row");
            let out = probe();
            done_tx.send(()).unwrap();
            out
        })
    }

    #[allow(dead_code)] // registered only for the backend whose fault it is
    fn expect_db_timeout<T: std::fmt::Debug>(r: diesel_lease::Result<T>) {
        match r {
            Err(e @ Error::Timeout { source: Some(_), .. }) => assert!(e.is_retryable()),
            other => panic!("expected Error::Timeout from the database, got {other:?}"),
        }
    }

    /// PostgreSQL `lock_timeout` (55P03) ends a guard's wait for a locked row: `Error::Timeout`.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn postgres_lock_timeout_is_a_timeout(db: &TestDb<B>) {
        guard_table(db);
        let mut probe = db.conn();
        probe.batch_execute("SET lock_timeout = '200ms'").unwrap();
        expect_db_timeout(while_row_is_locked(db, 1, || {
            Action::claim_if_null_by_pk(&mut probe, 1, db_now)
        }));
        // The connection is still usable, and the guard was not set.
        assert!(Action::claim_if_null_by_pk(&mut probe, 1, db_now).unwrap());
    }

    /// PostgreSQL `statement_timeout` (57014): `Error::Timeout`.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn postgres_statement_timeout_is_a_timeout(db: &TestDb<B>) {
        guard_table(db);
        let mut probe = db.conn();
        probe.batch_execute("SET statement_timeout = '200ms'").unwrap();
        expect_db_timeout(while_row_is_locked(db, 1, || {
            Action::claim_if_null_by_pk(&mut probe, 1, db_now)
        }));
    }

    /// `pg_terminate_backend` (57P01, then a closed connection): `Error::ConnectionLost`, on a lease
    /// grant, which the caller retries with a new connection.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn postgres_terminated_session_is_connection_lost(db: &TestDb<B>) {
        #[derive(QueryableByName)]
        struct Pid {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            pid: i32,
        }
        db.migrate();
        let mut victim = db.conn();
        let pid = diesel::sql_query("SELECT pg_backend_pid() AS pid")
            .get_result::<Pid>(&mut victim)
            .unwrap()
            .pid;
        diesel::sql_query("SELECT pg_terminate_backend($1)")
            .bind::<diesel::sql_types::Integer, _>(pid)
            .execute(&mut db.conn())
            .unwrap();
        let options = LeaseOptions::new(Duration::from_secs(5));
        match Lease::try_acquire(&mut victim, "nightly", &options) {
            Err(e @ Error::ConnectionLost(_)) => assert!(e.is_retryable()),
            other => panic!("expected Error::ConnectionLost, got {other:?}"),
        }
        // A new connection gets the lease: nothing was granted to the dead session.
        assert!(Lease::try_acquire(&mut db.conn(), "nightly", &options)
            .unwrap()
            .is_some());
    }

    /// Two transactions that lock two rows in opposite orders: the server kills one of them with a
    /// deadlock (PostgreSQL 40P01, MySQL 1213), which arrives as `Error::Deadlock`; the other wins.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn crossed_guards_deadlock(db: &TestDb<B>) {
        guard_table(db);
        let (first_tx, first) = mpsc::channel::<()>();
        let (second_tx, second) = mpsc::channel::<()>();
        let run = |own: i64, other: i64, mine: mpsc::Sender<()>, theirs: mpsc::Receiver<()>| {
            let mut conn = db.conn();
            conn.transaction::<_, Error, _>(|c| {
                Action::claim_if_null_by_pk(c, own, db_now)?;
                mine.send(()).unwrap();
                theirs.recv_timeout(Duration::from_secs(10)).unwrap();
                Action::claim_if_null_by_pk(c, other, db_now)
            })
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| run(1, 2, first_tx, second));
            let b = s.spawn(|| run(2, 1, second_tx, first));
            (a.join().unwrap(), b.join().unwrap())
        });
        let deadlocked = [&a, &b]
            .iter()
            .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
            .count();
        assert_eq!(deadlocked, 1, "exactly one deadlock victim: {a:?} / {b:?}");
        assert!(a.is_ok() || b.is_ok(), "the other transaction went through");
    }

    /// A claim inside the caller's REPEATABLE READ transaction whose row another session changed
    /// after the transaction's snapshot: PostgreSQL fails it with a serialization failure
    /// (40001), which aborts the caller's transaction. The caller gets `Error::Deadlock` after
    /// one attempt: the claim is not run again inside the aborted transaction (which turned it
    /// into "current transaction is aborted", an `Error::Database`, after a backoff).
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn postgres_serialization_failure_in_a_callers_transaction_is_not_retried(
        db: &TestDb<B>,
    ) {
        use crate::models::schema::tasks;
        use crate::models::{Task, TASKS_DDL};
        db.migrate();
        let (pg, sqlite, mysql) = TASKS_DDL;
        db.ddl(pg, sqlite, mysql);
        diesel::insert_into(tasks::table)
            .values(tasks::tenant.eq("acme"))
            .execute(&mut db.conn())
            .unwrap();
        let mut conn = db.conn();
        let claimed = conn.transaction::<_, Error, _>(|c| {
                c.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
                // The snapshot is taken here; the other session's change comes after it.
                tasks::table.count().get_result::<i64>(c)?;
                diesel::update(tasks::table)
                    .set(tasks::tenant.eq("globex"))
                    .execute(&mut db.conn())?;
                Task::claim().row(c)
            });
        match claimed {
            Err(Error::Deadlock { attempts: 1, .. }) => {}
            other => panic!("expected Error::Deadlock after one attempt, got {other:?}"),
        }
        // The connection is usable, and the row was never claimed.
        let t: (String, i32) = tasks::table
            .select((tasks::status, tasks::attempts))
            .first(&mut conn)
            .unwrap();
        assert_eq!(t, ("new".to_owned(), 0));
    }

    /// MySQL `innodb_lock_wait_timeout` (1205): `Error::Timeout`.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn mysql_lock_wait_timeout_is_a_timeout(db: &TestDb<B>) {
        guard_table(db);
        let mut probe = db.conn();
        probe
            .batch_execute("SET SESSION innodb_lock_wait_timeout = 1")
            .unwrap();
        expect_db_timeout(while_row_is_locked(db, 1, || {
            Action::claim_if_null_by_pk(&mut probe, 1, db_now)
        }));
    }

    /// `KILL <connection>` on MySQL: the victim's next call is `Error::ConnectionLost`.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn mysql_killed_connection_is_connection_lost(db: &TestDb<B>) {
        #[derive(QueryableByName)]
        struct Id {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            id: i64,
        }
        db.migrate();
        let mut victim = db.conn();
        let id = diesel::sql_query("SELECT CAST(CONNECTION_ID() AS SIGNED) AS id")
            .get_result::<Id>(&mut victim)
            .unwrap()
            .id;
        diesel::sql_query("KILL ?")
            .bind::<diesel::sql_types::BigInt, _>(id)
            .execute(&mut db.conn())
            .unwrap();
        match Lease::try_acquire(&mut victim, "nightly", &LeaseOptions::new(Duration::from_secs(5))) {
            Err(e @ Error::ConnectionLost(_)) => assert!(e.is_retryable()),
            other => panic!("expected Error::ConnectionLost, got {other:?}"),
        }
    }

    /// A keyed write (an owner-checked `complete`) runs at READ COMMITTED through a
    /// `SET TRANSACTION` for the next transaction only. When it fails before it touches a table
    /// (here the table is gone: error 1146), that level must not stay pending for the caller's
    /// next transaction, which runs at its session's REPEATABLE READ: its reads share one
    /// snapshot.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn mysql_a_failed_keyed_write_leaves_the_next_transaction_at_its_level(
        db: &TestDb<B>,
    ) {
        use crate::models::schema::tasks;
        use crate::models::{Task, TASKS_DDL};
        db.migrate();
        let (pg, sqlite, mysql) = TASKS_DDL;
        db.ddl(pg, sqlite, mysql);
        let add = || {
            diesel::insert_into(tasks::table)
                .values(tasks::tenant.eq("acme"))
                .execute(&mut db.conn())
        };
        add().unwrap();
        let mut conn = db.conn();
        conn.batch_execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .unwrap();
        let task = Task::claim().row(&mut conn).unwrap().expect("one row");
        db.conn().batch_execute("RENAME TABLE tasks TO tasks_gone").unwrap();
        let completed = task.complete(&mut conn);
        assert!(matches!(completed, Err(Error::Database(_))), "{completed:?}");
        db.conn().batch_execute("RENAME TABLE tasks_gone TO tasks").unwrap();
        let counts = conn
            .transaction::<_, diesel::result::Error, _>(|c| {
                let before = tasks::table.count().get_result::<i64>(c)?;
                add()?;
                let after = tasks::table.count().get_result::<i64>(c)?;
                Ok((before, after))
            })
            .unwrap();
        assert_eq!(counts, (1, 1), "one snapshot: the transaction ran at REPEATABLE READ");
    }

    /// A bounded lock wait (here a semaphore's, on the caller's connection) sets the session's
    /// `innodb_lock_wait_timeout` and puts it back; the user variable it kept the old value in
    /// is cleared too, so the caller's session is left as it was.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn mysql_a_bounded_lock_wait_leaves_the_session_as_it_was(db: &TestDb<B>) {
        #[derive(diesel::QueryableByName)]
        struct Session {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            wait: i64,
            #[diesel(sql_type = diesel::sql_types::Bool)]
            var_unset: bool,
        }
        let read = |c: &mut <B as crate::common::TestBackend>::Conn| {
            diesel::sql_query(
                "SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS SIGNED) AS wait, \
                 @diesel_lease_lock_wait IS NULL AS var_unset",
            )
            .get_result::<Session>(c)
            .unwrap()
        };
        db.migrate();
        let mut conn = db.conn();
        conn.batch_execute("SET SESSION innodb_lock_wait_timeout = 7").unwrap();
        let mutex = diesel_lease::semaphore::Semaphore::mutex("session-vars");
        let permit = mutex.acquire_on(&mut conn, Duration::from_secs(3)).unwrap();
        let _ = permit.release(&mut conn).unwrap();
        let after = read(&mut conn);
        assert_eq!(after.wait, 7, "the session's lock wait is back");
        assert!(after.var_unset, "@diesel_lease_lock_wait is left in the caller's session");
    }

    /// `insert_once` inside the caller's REPEATABLE READ transaction, when the equal row was
    /// committed by another session after the transaction's snapshot: PostgreSQL's
    /// `ON CONFLICT DO NOTHING` cannot do nothing about a row the snapshot does not see, and
    /// fails with a serialization failure (40001). As documented, the caller gets
    /// `Error::Deadlock` (retry the whole transaction), and the other session's row stands.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn postgres_insert_once_at_repeatable_read_after_a_newer_row_is_a_conflict(
        db: &TestDb<B>,
    ) {
        use crate::models::schema::notification;
        use crate::models::NewNotification;
        guard_table(db);
        let next = NewNotification { user_id: 5, previous_notification: 1, body: "day 2".into() };
        let mut conn = db.conn();
        let inserted = conn.transaction::<_, Error, _>(|c| {
            c.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
            // The snapshot is taken here; the other session's row comes after it.
            notification::table.count().get_result::<i64>(c)?;
            let other = next.clone().insert_once(&mut db.conn())?;
            assert!(matches!(other, diesel_lease::InsertOutcome::Inserted(_)), "{other:?}");
            next.clone().insert_once(c)
        });
        assert!(matches!(inserted, Err(Error::Deadlock { .. })), "{inserted:?}");
        let rows: i64 = notification::table.count().get_result(&mut conn).unwrap();
        assert_eq!(rows, 1, "the other session's row, and no second one");
    }

    /// A SQLite file another connection holds the write lock of, past the busy timeout
    /// (`SQLITE_BUSY`): `Error::Timeout`.
    #[allow(dead_code)] // registered only for the backend whose fault it is
    pub(crate) fn sqlite_busy_file_is_a_timeout(db: &TestDb<B>) {
        db.migrate();
        let mut writer = db.conn();
        writer.batch_execute("BEGIN IMMEDIATE").unwrap();
        let mut probe = db.conn();
        probe.batch_execute("PRAGMA busy_timeout = 100").unwrap();
        expect_db_timeout(Lease::try_acquire(
            &mut probe,
            "nightly",
            &LeaseOptions::new(Duration::from_secs(5)),
        ));
        writer.batch_execute("ROLLBACK").unwrap();
        assert!(Lease::try_acquire(&mut probe, "nightly", &LeaseOptions::new(Duration::from_secs(5)))
            .unwrap()
            .is_some());
    }
}

#[cfg(feature = "postgres")]
mod on_postgres {
    crate::backend_cases!(postgres, Postgres:
        postgres_lock_timeout_is_a_timeout,
        postgres_statement_timeout_is_a_timeout,
        postgres_terminated_session_is_connection_lost,
        crossed_guards_deadlock,
        postgres_serialization_failure_in_a_callers_transaction_is_not_retried,
        postgres_insert_once_at_repeatable_read_after_a_newer_row_is_a_conflict,
    );
}

#[cfg(feature = "mysql")]
mod on_mysql {
    crate::backend_cases!(mysql, Mysql:
        mysql_lock_wait_timeout_is_a_timeout,
        mysql_killed_connection_is_connection_lost,
        mysql_a_failed_keyed_write_leaves_the_next_transaction_at_its_level,
        mysql_a_bounded_lock_wait_leaves_the_session_as_it_was,
        crossed_guards_deadlock,
    );
}

#[cfg(feature = "mariadb")]
mod on_mariadb {
    crate::backend_cases!(mariadb, Mariadb:
        mysql_lock_wait_timeout_is_a_timeout,
        mysql_killed_connection_is_connection_lost,
        mysql_a_failed_keyed_write_leaves_the_next_transaction_at_its_level,
        mysql_a_bounded_lock_wait_leaves_the_session_as_it_was,
        crossed_guards_deadlock,
    );
}

#[cfg(feature = "sqlite")]
mod on_sqlite {
    crate::backend_cases!(sqlite, Sqlite: sqlite_busy_file_is_a_timeout);
}
