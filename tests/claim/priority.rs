//! Issue 24, item 3: `#[claimable(priority = …)]`: higher priority first, then due time, then
//! key, on every backend; the index the README gives serves the claim (doctor `EXPLAIN`s it).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text};
use diesel_lease::prelude::*;

use crate::common::{pick, TestBackend, TestDb};

pub(crate) mod schema {
    diesel::table! {
        prio_jobs (id) {
            id -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            priority -> Integer,
            run_at -> Timestamp,
        }
    }
}
use schema::prio_jobs;

/// A queue with priorities and a not-before column.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = prio_jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
            owner = owner, claimed_at = claimed_at, priority = priority, available_at = run_at)]
pub(crate) struct PrioJob {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) claimed_at: Option<chrono::NaiveDateTime>,
    pub(crate) priority: i32,
    pub(crate) run_at: chrono::NaiveDateTime,
}

/// The table, and the index the README gives for it on each backend.
pub(crate) const PRIO_JOBS_DDL: (&str, &str, &str) = (
    "CREATE TABLE prio_jobs (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', owner TEXT, \
       claimed_at TIMESTAMP, priority INTEGER NOT NULL DEFAULT 0, \
       run_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')); \
     CREATE INDEX prio_jobs_claim ON prio_jobs (priority DESC, run_at, id) WHERE status = 'new';",
    "CREATE TABLE prio_jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', owner TEXT, \
       claimed_at TIMESTAMP, priority INTEGER NOT NULL DEFAULT 0, \
       run_at TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))); \
     CREATE INDEX prio_jobs_claim ON prio_jobs (priority DESC, run_at, id) WHERE status = 'new';",
    "CREATE TABLE prio_jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT 'new', \
       owner VARCHAR(255), claimed_at DATETIME(6), priority INT NOT NULL DEFAULT 0, \
       run_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), \
       INDEX prio_jobs_claim (status, priority DESC, run_at, id));",
);

backend_suite! {
    tests: [
        rows_are_claimed_highest_priority_first_then_due_then_key,
    ];

    pub(crate) fn prio_jobs_table(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = PRIO_JOBS_DDL;
        db.ddl(pg, sqlite, mysql);
    }

    /// Inserts a ready row of `priority`, due at `run_at` (a UTC wall-clock time in the past).
    pub(crate) fn insert_prio(conn: &mut <B as TestBackend>::Conn, id: i64, priority: i32, run_at: &str) {
        let sql = pick::<B>(
            "INSERT INTO prio_jobs (id, priority, run_at) VALUES ($1, $2, CAST($3 AS TIMESTAMP))",
            "INSERT INTO prio_jobs (id, priority, run_at) VALUES (?, ?, ?)",
            "INSERT INTO prio_jobs (id, priority, run_at) VALUES (?, ?, CAST(? AS DATETIME(6)))",
        );
        diesel::sql_query(sql)
            .bind::<BigInt, _>(id)
            .bind::<Integer, _>(priority)
            .bind::<Text, _>(run_at)
            .execute(conn)
            .unwrap();
    }

    pub(crate) fn rows_are_claimed_highest_priority_first_then_due_then_key(db: &TestDb<B>) {
        prio_jobs_table(db);
        let mut conn = db.conn();
        // (id, priority, due): ties of priority by due time, ties of both by key, inserted
        // out of every order.
        let rows: [(i64, i32, &str); 9] = [
            (5, 1, "2020-01-01 00:00:02"),
            (9, 10, "2020-01-01 00:00:03"),
            (2, 10, "2020-01-01 00:00:03"),
            (7, -3, "2020-01-01 00:00:01"),
            (4, 10, "2020-01-01 00:00:01"),
            (1, 1, "2020-01-01 00:00:05"),
            (8, 0, "2020-01-01 00:00:09"),
            (3, 0, "2020-01-01 00:00:09"),
            (6, 1, "2020-01-01 00:00:02"),
        ];
        for (id, priority, due) in rows {
            insert_prio(&mut conn, id, priority, due);
        }
        // Highest priority of all, but not due yet: never ahead of due rows.
        diesel::sql_query(pick::<B>(
            "INSERT INTO prio_jobs (id, priority, run_at) VALUES (100, 1000, (now() AT TIME ZONE 'UTC') + INTERVAL '1 hour')",
            "INSERT INTO prio_jobs (id, priority, run_at) VALUES (100, 1000, strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour'))",
            "INSERT INTO prio_jobs (id, priority, run_at) VALUES (100, 1000, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
        ))
        .execute(&mut conn)
        .unwrap();
        let mut expected = rows.to_vec();
        expected.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(b.2)).then(a.0.cmp(&b.0)));
        let expected: Vec<i64> = expected.iter().map(|r| r.0).collect();
        assert_eq!(expected, [4, 2, 9, 5, 6, 1, 3, 8, 7]);

        let one_by_one: Vec<i64> =
            std::iter::from_fn(|| PrioJob::claim().row(&mut conn).unwrap().map(|j| j.id)).collect();
        assert_eq!(one_by_one, expected);

        // A batch takes the same order's head.
        diesel::update(prio_jobs::table.filter(prio_jobs::id.ne(100)))
            .set((prio_jobs::status.eq("new"), prio_jobs::owner.eq(None::<String>)))
            .execute(&mut conn)
            .unwrap();
        let mut batch: Vec<i64> = PrioJob::claim().batch(4).rows(&mut conn).unwrap().into_iter().map(|j| j.id).collect();
        batch.sort_by_key(|id| expected.iter().position(|e| e == id));
        assert_eq!(batch, expected[..4]);
    }
}
