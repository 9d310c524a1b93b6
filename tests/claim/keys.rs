//! Batch finishes (`complete_batch`, `fail_batch`, `release_batch`) for every kind of key: a
//! 32-bit integer, text, and a composite key. PostgreSQL sends one-column keys as an array
//! (`UPDATE … FROM unnest(…)`) and composite keys as the portable statement; both must report
//! each row exactly as the other backends do: a row whose stamp changed is left and reported,
//! rows of two owners in one batch are each checked against their own, a repeated row is
//! finished once.

use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::prelude::*;
use diesel_lease::OwnerId;

use crate::common::TestDb;

pub(crate) mod schema {
    diesel::table! {
        int_key_jobs (id) {
            id -> Integer,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
        }
    }
    diesel::table! {
        text_key_jobs (name) {
            name -> Text,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
        }
    }
    diesel::table! {
        pair_key_jobs (tenant, seq) {
            tenant -> Integer,
            seq -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
        }
    }
}
use schema::{int_key_jobs, pair_key_jobs, text_key_jobs};

/// A queue keyed by a 32-bit integer.
#[derive(Debug, Clone, Queryable, Selectable, Claimable)]
#[diesel(table_name = int_key_jobs)]
#[claimable(state = status, ready = "ready", claimed = "running", done = "done", failed = "dead",
            owner = owner, claimed_at = claimed_at, attempts = attempts)]
#[allow(dead_code)] // state and claim time are mapped, never read
pub(crate) struct IntKeyJob {
    pub(crate) id: i32,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) claimed_at: Option<chrono::NaiveDateTime>,
    pub(crate) attempts: i32,
}

/// A queue keyed by text.
#[derive(Debug, Clone, Queryable, Selectable, Claimable)]
#[diesel(table_name = text_key_jobs, primary_key(name))]
#[claimable(state = status, ready = "ready", claimed = "running", done = "done", failed = "dead",
            owner = owner, claimed_at = claimed_at, attempts = attempts)]
#[allow(dead_code)] // state and claim time are mapped, never read
pub(crate) struct TextKeyJob {
    pub(crate) name: String,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) claimed_at: Option<chrono::NaiveDateTime>,
    pub(crate) attempts: i32,
}

/// A queue keyed by two columns.
#[derive(Debug, Clone, Queryable, Selectable, Claimable)]
#[diesel(table_name = pair_key_jobs, primary_key(tenant, seq))]
#[claimable(state = status, ready = "ready", claimed = "running", done = "done", failed = "dead",
            owner = owner, claimed_at = claimed_at, attempts = attempts)]
#[allow(dead_code)] // state and claim time are mapped, never read
pub(crate) struct PairKeyJob {
    pub(crate) tenant: i32,
    pub(crate) seq: i64,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) claimed_at: Option<chrono::NaiveDateTime>,
    pub(crate) attempts: i32,
}

/// The three tables, each with 10 ready rows, on every backend.
const DDL: (&str, &str, &str) = (
    "CREATE TABLE int_key_jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'ready', \
       owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0); \
     CREATE TABLE text_key_jobs (name TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'ready', \
       owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0); \
     CREATE TABLE pair_key_jobs (tenant INTEGER, seq BIGINT, status TEXT NOT NULL DEFAULT 'ready', \
       owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (tenant, seq)); \
     INSERT INTO int_key_jobs (id) SELECT g FROM generate_series(1, 10) g; \
     INSERT INTO text_key_jobs (name) SELECT 'job-' || g FROM generate_series(10, 19) g; \
     INSERT INTO pair_key_jobs (tenant, seq) SELECT 7, g FROM generate_series(1, 10) g;",
    "CREATE TABLE int_key_jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'ready', \
       owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0); \
     CREATE TABLE text_key_jobs (name TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'ready', \
       owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0); \
     CREATE TABLE pair_key_jobs (tenant INTEGER, seq BIGINT, status TEXT NOT NULL DEFAULT 'ready', \
       owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (tenant, seq)); \
     WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 10) \
       INSERT INTO int_key_jobs (id) SELECT x FROM g; \
     WITH RECURSIVE g(x) AS (SELECT 10 UNION ALL SELECT x + 1 FROM g WHERE x < 19) \
       INSERT INTO text_key_jobs (name) SELECT 'job-' || x FROM g; \
     WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 10) \
       INSERT INTO pair_key_jobs (tenant, seq) SELECT 7, x FROM g;",
    "CREATE TABLE int_key_jobs (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'ready', \
       owner VARCHAR(255), claimed_at DATETIME(6), attempts INT NOT NULL DEFAULT 0); \
     CREATE TABLE text_key_jobs (name VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL DEFAULT 'ready', \
       owner VARCHAR(255), claimed_at DATETIME(6), attempts INT NOT NULL DEFAULT 0); \
     CREATE TABLE pair_key_jobs (tenant INT, seq BIGINT, status VARCHAR(16) NOT NULL DEFAULT 'ready', \
       owner VARCHAR(255), claimed_at DATETIME(6), attempts INT NOT NULL DEFAULT 0, PRIMARY KEY (tenant, seq)); \
     INSERT INTO int_key_jobs (id) VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9), (10); \
     INSERT INTO text_key_jobs (name) VALUES ('job-10'), ('job-11'), ('job-12'), ('job-13'), \
       ('job-14'), ('job-15'), ('job-16'), ('job-17'), ('job-18'), ('job-19'); \
     INSERT INTO pair_key_jobs (tenant, seq) VALUES (7, 1), (7, 2), (7, 3), (7, 4), (7, 5), \
       (7, 6), (7, 7), (7, 8), (7, 9), (7, 10);",
);

fn owner(name: &str) -> ClaimOptions {
    ClaimOptions::default().owner(OwnerId::new(name).unwrap())
}

/// The same story for each model: `$key` is the row's key as the table's filter takes it.
macro_rules! every_finish_reports_each_row {
    ($conn:expr, $model:ty, $table:ident, $key:expr) => {{
        let conn = $conn;
        let a = <$model>::claim()
            .batch(3)
            .options(&owner("worker-a"))
            .rows(conn)
            .unwrap();
        let b = <$model>::claim()
            .batch(3)
            .options(&owner("worker-b"))
            .rows(conn)
            .unwrap();
        assert_eq!((a.len(), b.len()), (3, 3));
        // A's second row now names another owner; nothing else about it changed.
        diesel::update($table::table.find($key(&a[1])))
            .set($table::owner.eq("worker-z#0"))
            .execute(conn)
            .unwrap();
        let state = |conn: &mut _, row: &$model| -> (String, Option<String>) {
            $table::table
                .find($key(row))
                .select(($table::status, $table::owner))
                .first(conn)
                .unwrap()
        };

        // Two owners' rows in one batch, interleaved: each checked against its own stamp.
        let mixed = vec![
            a[0].clone(),
            b[0].clone(),
            a[1].clone(),
            b[1].clone(),
            a[2].clone(),
        ];
        assert_eq!(
            mixed.complete(conn).unwrap(),
            vec![true, true, false, true, true]
        );
        assert_eq!(
            state(conn, &a[1]),
            ("running".into(), Some("worker-z#0".into()))
        );
        for row in [&a[0], &b[0], &b[1], &a[2]] {
            assert_eq!(state(conn, row).0, "done");
        }

        // One owner's rows, one of them twice: finished once, reported at its first place.
        let c = <$model>::claim()
            .batch(2)
            .options(&owner("worker-c"))
            .rows(conn)
            .unwrap();
        let repeated = vec![c[0].clone(), b[2].clone(), c[0].clone(), c[1].clone()];
        assert_eq!(repeated.fail(conn).unwrap(), vec![true, true, false, true]);
        for row in [&c[0], &b[2], &c[1]] {
            assert_eq!(state(conn, row).0, "dead");
        }

        // Back to ready: owner cleared, claimable again; a second release changes nothing.
        let d = <$model>::claim()
            .batch(2)
            .options(&owner("worker-d"))
            .rows(conn)
            .unwrap();
        assert_eq!(d.requeue(conn).unwrap(), vec![true, true]);
        assert_eq!(d.requeue(conn).unwrap(), vec![false, false]);
        for row in &d {
            assert_eq!(state(conn, row), ("ready".into(), None));
        }
        let again = <$model>::claim().batch(10).rows(conn).unwrap();
        assert_eq!(again.len(), 2, "the two released rows, and nothing else");
        assert_eq!(again.complete(conn).unwrap(), vec![true, true]);
    }};
}

backend_suite! {
    tests: [
        batch_finishes_report_each_row_for_every_kind_of_key,
    ];

    pub(crate) fn batch_finishes_report_each_row_for_every_kind_of_key(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = DDL;
        db.ddl(pg, sqlite, mysql);
        let mut conn = db.conn();
        every_finish_reports_each_row!(&mut conn, IntKeyJob, int_key_jobs, |r: &IntKeyJob| r.id);
        every_finish_reports_each_row!(&mut conn, TextKeyJob, text_key_jobs, |r: &TextKeyJob| r.name.clone());
        every_finish_reports_each_row!(&mut conn, PairKeyJob, pair_key_jobs, |r: &PairKeyJob| (r.tenant, r.seq));
    }
}

/// On PostgreSQL the same story runs the array form for one-column keys (integer and text; with
/// one shared stamp and with a stamp per row) and the portable statement for the composite key.
mod postgres_statements {
    use diesel::prelude::*;
    use diesel::sql_types::Text;

    use super::*;
    use crate::common::Postgres;

    #[derive(QueryableByName, Debug)]
    struct Prepared {
        #[diesel(sql_type = Text)]
        statement: String,
    }

    fn one_column_keys_are_sent_as_arrays(db: &TestDb<Postgres>) {
        let (pg, _, _) = DDL;
        db.ddl(pg, "", "");
        let mut conn = db.conn();
        every_finish_reports_each_row!(&mut conn, IntKeyJob, int_key_jobs, |r: &IntKeyJob| r.id);
        every_finish_reports_each_row!(&mut conn, TextKeyJob, text_key_jobs, |r: &TextKeyJob| r
            .name
            .clone());
        every_finish_reports_each_row!(&mut conn, PairKeyJob, pair_key_jobs, |r: &PairKeyJob| (
            r.tenant, r.seq
        ));
        let finishes: Vec<Prepared> = diesel::sql_query(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'UPDATE %' \
             ORDER BY statement",
        )
        .load(&mut conn)
        .unwrap();
        let with = |table: &str, form: &str| {
            finishes
                .iter()
                .filter(|p| p.statement.starts_with(&format!("UPDATE \"{table}\"")))
                .filter(|p| p.statement.contains(form))
                .count()
        };
        for table in ["int_key_jobs", "text_key_jobs"] {
            // `done` with a stamp per row and with one shared stamp, `ready` with one shared
            // stamp; the `fail_batch` with a repeated row takes the portable statement.
            assert_eq!(with(table, "FROM unnest("), 3, "{table}: {finishes:#?}");
            assert_eq!(
                with(table, "diesel_lease_stamp"),
                1,
                "{table}: {finishes:#?}"
            );
            assert_eq!(with(table, " OR "), 1, "{table}: {finishes:#?}");
        }
        assert_eq!(with("pair_key_jobs", "FROM unnest("), 0, "{finishes:#?}");
        assert!(with("pair_key_jobs", " OR ") > 0, "{finishes:#?}");
    }

    #[test]
    fn postgres_one_column_keys_are_sent_as_arrays() {
        crate::common::run::<Postgres>(
            "one_column_keys_are_sent_as_arrays",
            one_column_keys_are_sent_as_arrays,
        );
    }
}
