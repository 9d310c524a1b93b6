use diesel::prelude::*;
use diesel_lease::prelude::*;

use crate::common::TestDb;
use crate::models::schema::importjobs;
use crate::models::*;

backend_suite! {
    tests: [
        claim_next_takes_rows_in_order_then_none,
        claims_work_on_an_untuned_connection,
        an_untuned_connection_waits_for_another_writer,
        a_null_attempts_count_is_counted_from_zero,
    ];

    /// An `attempts` column the model maps as nullable, on a row inserted without it (NULL):
    /// the claim counts from zero. `attempts + 1` left it NULL, so the owner check
    /// (`attempts = $n`, bound to NULL) matched nothing: `complete` reported the claim lost and
    /// the row stayed claimed.
    pub(crate) fn a_null_attempts_count_is_counted_from_zero(db: &TestDb<B>) {
        use super::super::loose::{loose_jobs, LooseJob};
        db.ddl(
            "CREATE TABLE loose_jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL, owner TEXT, \
               claimed_at TIMESTAMP, attempts INTEGER)",
            "CREATE TABLE loose_jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL, owner TEXT, \
               claimed_at TIMESTAMP, attempts INTEGER)",
            "CREATE TABLE loose_jobs (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL, \
               owner VARCHAR(255), claimed_at DATETIME(6), attempts INTEGER)",
        );
        let mut conn = db.conn();
        diesel::insert_into(loose_jobs::table)
            .values([
                (loose_jobs::id.eq(1), loose_jobs::status.eq("ready")),
                (loose_jobs::id.eq(2), loose_jobs::status.eq("ready")),
            ])
            .execute(&mut conn)
            .unwrap();
        let first = LooseJob::claim().row(&mut conn).unwrap().expect("a ready row");
        assert_eq!((first.id, first.attempts), (1, Some(1)));
        assert!(first.complete(&mut conn).unwrap(), "the claim's own complete");
        // Left claimed past its timeout (1 s): rescued, and counted on from there.
        let second = LooseJob::claim().row(&mut conn).unwrap().expect("a ready row");
        assert_eq!((second.id, second.attempts), (2, Some(1)));
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let rescued = LooseJob::claim().row(&mut conn).unwrap().expect("a stale row");
        assert_eq!((rescued.id, rescued.attempts), (2, Some(2)));
        assert!(!second.complete(&mut conn).unwrap(), "the earlier claim is fenced");
        assert!(rescued.complete(&mut conn).unwrap());
        let statuses: Vec<String> = loose_jobs::table
            .order(loose_jobs::id)
            .select(loose_jobs::status)
            .load(&mut conn)
            .unwrap();
        assert_eq!(statuses, ["done", "done"]);
    }

    pub(crate) fn seed_jobs(db: &TestDb<B>, n: i64) {
        let (pg, sqlite, mysql) = IMPORTJOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        let mut conn = db.conn();
        let rows: Vec<_> = (1..=n)
            .map(|id| {
                (
                    importjobs::id.eq(id),
                    importjobs::statuscode.eq("JOBEXTRACTED"),
                    importjobs::payload.eq(format!("job {id}")),
                )
            })
            .collect();
        for chunk in rows.chunks(1000) {
            diesel::insert_into(importjobs::table)
                .values(chunk)
                .execute(&mut conn)
                .unwrap();
        }
    }

    pub(crate) fn claim_next_takes_rows_in_order_then_none(db: &TestDb<B>) {
        seed_jobs(db, 3);
        let mut conn = db.conn();
        let first = ImportJob::claim().row(&mut conn).unwrap().expect("a ready row");
        assert_eq!(first.id, 1);
        assert_eq!(first.statuscode, "EXECUTIONINPROGRESS");
        assert_eq!(first.attempts, 1);
        assert!(first.claimed_at.is_some());
        assert_eq!(
            first.worker.as_deref().map(diesel_lease::ClaimStamp::owner_of),
            Some(diesel_lease::OwnerId::process_default().as_str())
        );
        assert!(
            matches!(ImportJob::claim().batch(0).rows(&mut conn), Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::Zero { what: "batch size" }))),
            "a batch of 0 is a typed error"
        );
        let pool = db.pool(2);
        assert!(
            matches!(ImportJob::claim().batch(0).wait(std::time::Duration::from_secs(5)).rows(&pool), Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::Zero { what: "batch size" }))),
            "a waiting batch of 0 is a typed error, at once"
        );
        let zero = diesel_lease::claim::ClaimOptions::default().timeout(std::time::Duration::ZERO);
        assert!(
            matches!(ImportJob::claim().batch(1).options(&zero).rows(&mut conn), Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::ZeroDuration { .. }))),
            "a zero claim timeout must be a typed error"
        );
        let rest = ImportJob::claim().batch(5).rows(&mut conn).unwrap();
        let mut ids: Vec<i64> = rest.iter().map(|j| j.id).collect();
        ids.sort();
        assert_eq!(ids, vec![2, 3]);
        assert_eq!(ImportJob::claim().row(&mut conn).unwrap(), None);

        assert!(first.complete(&mut conn).unwrap());
        assert!(!first.complete(&mut conn).unwrap(), "a finished row cannot be finished twice");
        let status: String = importjobs::table
            .find(1)
            .select(importjobs::statuscode)
            .first(&mut conn)
            .unwrap();
        assert_eq!(status, "DONE");
    }

    /// A plain `establish`ed connection, without `ConnectionTuning`: claims still wait for the
    /// lock instead of failing with "database is locked" on SQLite.
    pub(crate) fn claims_work_on_an_untuned_connection(db: &TestDb<B>) {
        seed_jobs(db, 200);
        let claimed = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                let claimed = &claimed;
                s.spawn(move || {
                    let mut conn = <<B as crate::common::TestBackend>::Conn as Connection>::establish(&db.url).unwrap();
                    while let Some(job) = ImportJob::claim().row(&mut conn).unwrap() {
                        claimed.lock().unwrap().push(job.id);
                    }
                });
            }
        });
        let mut ids = claimed.into_inner().unwrap();
        ids.sort();
        assert_eq!(ids, (1..=200).collect::<Vec<i64>>());
    }

    /// A plain `establish`ed connection (no busy timeout) meets a database another connection
    /// is writing to, outside diesel-lease: its claim and its complete wait for that writer
    /// and succeed, instead of failing with "database is locked" (SQLite gives the connection
    /// diesel-lease's default busy timeout once the lock is met, and runs the write again).
    pub(crate) fn an_untuned_connection_waits_for_another_writer(db: &TestDb<B>) {
        seed_jobs(db, 1);
        db.ddl(
            "CREATE TABLE side (id INTEGER PRIMARY KEY)",
            "CREATE TABLE side (id INTEGER PRIMARY KEY)",
            "CREATE TABLE side (id INTEGER PRIMARY KEY)",
        );
        let untuned = || <<B as crate::common::TestBackend>::Conn as Connection>::establish(&db.url).unwrap();
        // Writes a row of `side` in a transaction held for a while; returns when the body ended,
        // just before its commit.
        let write_elsewhere = |id: i32, locked: &std::sync::Barrier| {
            let mut conn = db.conn();
            conn.transaction(|c| {
                let insert = "INSERT INTO side (id) VALUES (?)";
                diesel::sql_query(crate::common::pick::<B>("INSERT INTO side (id) VALUES ($1)", insert, insert))
                    .bind::<diesel::sql_types::Integer, _>(id)
                    .execute(c)?;
                locked.wait();
                std::thread::sleep(std::time::Duration::from_millis(300));
                diesel::QueryResult::Ok(std::time::Instant::now())
            })
            .unwrap()
        };
        let sqlite = <B as crate::common::TestBackend>::KIND == diesel_lease::BackendKind::Sqlite;
        let locked = std::sync::Barrier::new(2);
        let (job, claimed_at, ended_at) = std::thread::scope(|s| {
            let writer = s.spawn(|| write_elsewhere(1, &locked));
            locked.wait();
            let job = ImportJob::claim().row(&mut untuned()).unwrap().expect("a row");
            (job, std::time::Instant::now(), writer.join().unwrap())
        });
        // The claim returned only after the other writer's transaction ended (SQLite: one writer).
        assert!(!sqlite || claimed_at > ended_at, "the claim did not wait for the writer");
        let (completed, completed_at, ended_at) = std::thread::scope(|s| {
            let writer = s.spawn(|| write_elsewhere(2, &locked));
            locked.wait();
            let completed = job.complete(&mut untuned()).unwrap();
            (completed, std::time::Instant::now(), writer.join().unwrap())
        });
        assert!(completed, "the complete was lost");
        assert!(!sqlite || completed_at > ended_at, "the complete did not wait for the writer");
    }
}

/// MySQL-family cases, through `MysqlConnection` and `MariadbConnection`.
mod mysql_family {
    #[allow(unused_imports)]
    use super::*;

    crate::mysql_suite! {
        fixtures: crate::claim::basics;
        tests: [write_transactions_run_read_committed];

        /// MySQL: our write transactions (every claim; `write_transaction`) run at READ COMMITTED
        /// whatever the session's level, and leave that level as it was: the level and `BEGIN` now go
        /// as one batch (`backend/mysql_like.rs`, `read_committed_transaction`), and a keyed write
        /// (`complete`) sets the level with a prepared statement, not a batch.
        pub(crate) fn write_transactions_run_read_committed(db: &TestDb<B>) {
            use diesel::connection::SimpleConnection;
            use diesel_lease::LeaseConnection;
                // The level of the transaction `c` is in, by what it does: a row another connection
                // commits between two plain reads is seen by the second read at READ COMMITTED, not at
                // REPEATABLE READ. (information_schema.INNODB_TRX's `trx_isolation_level` can show the
                // previous transaction's level on MariaDB, so it is not asked.)
                let other = std::cell::RefCell::new(db.conn());
                let next_id = std::cell::Cell::new(1_000_i64);
                let level = |c: &mut <B as crate::common::TestBackend>::Conn| -> diesel::QueryResult<&'static str> {
                    let count =
                        |c: &mut <B as crate::common::TestBackend>::Conn| importjobs::table.count().get_result::<i64>(c);
                    let before = count(c)?;
                    next_id.set(next_id.get() + 1);
                    diesel::insert_into(importjobs::table)
                        .values((
                            importjobs::id.eq(next_id.get()),
                            importjobs::statuscode.eq("done"),
                            importjobs::payload.eq(""),
                        ))
                        .execute(&mut *other.borrow_mut())?;
                    Ok(if count(c)? > before {
                        "READ COMMITTED"
                    } else {
                        "REPEATABLE READ"
                    })
                };
                fixtures::seed_jobs(db, 20);
                let mut conn = db.conn();
                conn.batch_execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    .unwrap();
                assert_eq!(conn.write_transaction(level).unwrap(), "READ COMMITTED");
                assert_eq!(
                    conn.transaction(level).unwrap(),
                    "REPEATABLE READ",
                    "the session's own level is left as it was"
                );
                for _ in 0..5 {
                    let job = ImportJob::claim().row(&mut conn).unwrap().expect("a row");
                    assert!(job.complete(&mut conn).unwrap());
                }
                assert_eq!(
                    conn.transaction(level).unwrap(),
                    "REPEATABLE READ",
                    "claims and completes leave the session's level as it was"
                );
            }
    }
}

/// A model whose `attempts` column is nullable (`a_null_attempts_count_is_counted_from_zero`).
pub(crate) mod loose {
    use chrono::NaiveDateTime;
    use diesel::prelude::*;
    use diesel_lease::prelude::*;

    diesel::table! {
        loose_jobs (id) {
            id -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Nullable<Integer>,
        }
    }

    #[derive(Debug, Queryable, Selectable, Claimable)]
    #[diesel(table_name = loose_jobs)]
    #[claimable(
        state = status,
        ready = "ready",
        claimed = "running",
        done = "done",
        owner = owner,
        claimed_at = claimed_at,
        attempts = attempts,
        timeout_secs = 1
    )]
    #[allow(dead_code)] // status, owner and claimed_at are read by the claim, not the test
    pub(crate) struct LooseJob {
        pub(crate) id: i64,
        pub(crate) status: String,
        pub(crate) owner: Option<String>,
        pub(crate) claimed_at: Option<NaiveDateTime>,
        pub(crate) attempts: Option<i32>,
    }
}
