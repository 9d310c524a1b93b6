//! State values as SQL constants (issue 12.1, issue 15.1): a `NULL` state (`None`) is compared with
//! `IS NULL` and written with `SET col = NULL`, on seed 002's own `table1 (id, col1)`; on
//! PostgreSQL a claim is prepared once per connection and planned on the user's partial index.
//! A worker's per-key limit counts the claimed rows of a key with `IS NULL` too (issue 20.2).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_lease::prelude::*;
use diesel_lease::worker::Worker;
use diesel_lease::LeaseConnection;

use crate::common::TestDb;

pub(crate) mod schema {
    // Seed 002: `SELECT * FROM table1 WHERE id = $id AND col1 IS NULL FOR UPDATE`.
    diesel::table! {
        table1 (id) {
            id -> BigInt,
            col1 -> Nullable<Text>,
        }
    }

    // An integer state in a `SMALLINT` column.
    diesel::table! {
        coded (id) {
            id -> BigInt,
            code -> SmallInt,
        }
    }

    // A worker's queue whose claimed state is NULL, with a key to limit per.
    diesel::table! {
        keyed_jobs (id) {
            id -> BigInt,
            status -> Nullable<Text>,
            tenant -> Text,
            attempts -> Integer,
        }
    }
}
use schema::{coded, keyed_jobs, table1};

/// Seed 002 as a new user writes it: a row qualifies while `col1 IS NULL`.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = table1)]
#[claimable(state = col1, ready = None, claimed = Some("sent".into()), done = Some("done".into()))]
pub(crate) struct Table1 {
    pub(crate) id: i64,
    pub(crate) col1: Option<String>,
}

/// NULL as the claimed and the done state: `SET col1 = NULL`, `col1 IS NULL` in the owner check.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = table1)]
#[claimable(state = col1, ready = Some("new".into()), claimed = None, done = Some("it's done".into()))]
pub(crate) struct NullClaimed {
    pub(crate) id: i64,
    pub(crate) col1: Option<String>,
}

/// NULL among several ready states, and as the state `complete` writes.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = table1)]
#[claimable(state = col1, ready(Some("retry".into()), None), claimed = Some("sent".into()), done = None)]
#[allow(dead_code)]
pub(crate) struct NullDone {
    pub(crate) id: i64,
    pub(crate) col1: Option<String>,
}

/// Integer states of an `i16` field, negative ones and the type's bounds among them (issue 22:
/// the derive's type check used to infer `i32` for them and refuse an `i16` field).
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = coded)]
#[claimable(state = code, ready(0, -1), claimed = 1, done = 32767, failed = -32768)]
pub(crate) struct Coded {
    pub(crate) id: i64,
    pub(crate) code: i16,
}

/// Bare strings as the states of an `Option<String>` field, beside `None`.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = table1)]
#[claimable(state = col1, ready("new", None), claimed = "sent", done = "done".to_owned())]
pub(crate) struct BareOnOption {
    pub(crate) id: i64,
    pub(crate) col1: Option<String>,
}

/// NULL as the claimed state of a queue that a [`Worker`] runs with a per-key limit.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = keyed_jobs)]
#[claimable(state = status, ready = Some("new".into()), claimed = None, done = Some("done".into()),
            failed = Some("dead".into()), attempts = attempts)]
pub(crate) struct KeyedNullClaimed {
    pub(crate) id: i64,
    pub(crate) status: Option<String>,
    pub(crate) tenant: String,
    pub(crate) attempts: i32,
}

const KEYED_JOBS_DDL: (&str, &str, &str) = (
    "CREATE TABLE keyed_jobs (id BIGINT PRIMARY KEY, status TEXT, tenant TEXT NOT NULL, \
       attempts INTEGER NOT NULL DEFAULT 0);",
    "CREATE TABLE keyed_jobs (id INTEGER PRIMARY KEY, status TEXT, tenant TEXT NOT NULL, \
       attempts INTEGER NOT NULL DEFAULT 0);",
    "CREATE TABLE keyed_jobs (id BIGINT PRIMARY KEY, status VARCHAR(64), tenant VARCHAR(64) NOT NULL, \
       attempts INT NOT NULL DEFAULT 0);",
);

const CODED_DDL: (&str, &str, &str) = (
    "CREATE TABLE coded (id BIGINT PRIMARY KEY, code SMALLINT NOT NULL);",
    "CREATE TABLE coded (id INTEGER PRIMARY KEY, code SMALLINT NOT NULL);",
    "CREATE TABLE coded (id BIGINT PRIMARY KEY, code SMALLINT NOT NULL);",
);

const TABLE1_DDL: (&str, &str, &str) = (
    "CREATE TABLE table1 (id BIGINT PRIMARY KEY, col1 TEXT);",
    "CREATE TABLE table1 (id INTEGER PRIMARY KEY, col1 TEXT);",
    "CREATE TABLE table1 (id BIGINT PRIMARY KEY, col1 VARCHAR(64), INDEX table1_col1 (col1, id));",
);

backend_suite! {
    tests: [
        seed_002_null_ready_locks_each_qualifying_row,
        seed_002_null_ready_claims_each_row_once,
        null_claimed_state_is_written_and_owner_checked,
        null_done_state_makes_the_row_ready_again,
        the_per_key_limit_counts_null_claimed_rows,
        small_integer_states_are_claimed_and_finished,
        bare_strings_are_states_of_an_option_field,
    ];

    fn fill(db: &TestDb<B>, rows: &[(i64, Option<&str>)]) {
        let (pg, sqlite, mysql) = TABLE1_DDL;
        db.ddl(pg, sqlite, mysql);
        let values: Vec<_> = rows
            .iter()
            .map(|(id, v)| (table1::id.eq(*id), table1::col1.eq(*v)))
            .collect();
        diesel::insert_into(table1::table).values(&values).execute(&mut db.conn()).unwrap();
    }

    fn states(db: &TestDb<B>) -> Vec<(i64, Option<String>)> {
        table1::table
            .order(table1::id)
            .select((table1::id, table1::col1))
            .load(&mut db.conn())
            .unwrap()
    }

    /// The seed's own program: for each id, lock the row if `col1 IS NULL`, then set it. Every
    /// one of the 200 rows is locked once; afterwards none qualifies.
    pub(crate) fn seed_002_null_ready_locks_each_qualifying_row(db: &TestDb<B>) {
        let rows: Vec<(i64, Option<&str>)> = (1..=200).map(|id| (id, None)).collect();
        fill(db, &rows);
        let mut conn = db.conn();
        for id in 1..=200 {
            let locked = conn
                .write_transaction(|conn| {
                    let row = Table1::claim().filter(table1::id.eq(id)).locked(conn)?;
                    if let Some(row) = &row {
                        diesel::update(table1::table.find(row.id))
                            .set(table1::col1.eq("sent"))
                            .execute(conn)?;
                    }
                    Ok::<_, diesel_lease::Error>(row.map(|r| r.id))
                })
                .unwrap();
            assert_eq!(locked, Some(id), "row {id} has col1 IS NULL and must be locked");
            let again = conn
                .write_transaction(|conn| Table1::claim().filter(table1::id.eq(id)).locked(conn))
                .unwrap();
            assert!(again.is_none(), "row {id} no longer qualifies");
        }
        assert!(states(db).iter().all(|(_, s)| s.as_deref() == Some("sent")));
    }

    /// `claim_next` with `ready = None` from 4 threads: every NULL row once, rows with a state never.
    pub(crate) fn seed_002_null_ready_claims_each_row_once(db: &TestDb<B>) {
        let rows: Vec<(i64, Option<&str>)> =
            (1..=120).map(|id| (id, (id % 10 == 0).then_some("other"))).collect();
        fill(db, &rows);
        let pool = db.pool(4);
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut conn = pool.get().unwrap();
                    while let Some(row) = Table1::claim().row(&mut conn).unwrap() {
                        assert_eq!(row.col1.as_deref(), Some("sent"));
                        assert!(row.complete(&mut conn).unwrap(), "still ours");
                        seen.lock().unwrap().push(row.id);
                    }
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        let unique: HashSet<i64> = seen.iter().copied().collect();
        assert_eq!(seen.len(), unique.len(), "a row was claimed twice");
        let expected: HashSet<i64> = (1..=120).filter(|id| id % 10 != 0).collect();
        assert_eq!(unique, expected);
        for (id, state) in states(db) {
            let want = if id % 10 == 0 { "other" } else { "done" };
            assert_eq!(state.as_deref(), Some(want), "row {id}");
        }
    }

    /// A claim writes `col1 = NULL`; `complete` finds the claim with `col1 IS NULL` and writes a
    /// state with a quote in it.
    pub(crate) fn null_claimed_state_is_written_and_owner_checked(db: &TestDb<B>) {
        fill(db, &[(1, Some("new")), (2, Some("new")), (3, Some("other"))]);
        let mut conn = db.conn();
        let a = NullClaimed::claim().row(&mut conn).unwrap().expect("row 1");
        assert_eq!((a.id, a.col1.as_deref()), (1, None));
        assert!(a.complete(&mut conn).unwrap());
        assert!(!a.complete(&mut conn).unwrap(), "no longer claimed (col1 is not NULL)");
        let b = NullClaimed::claim().row(&mut conn).unwrap().expect("row 2");
        assert_eq!(b.id, 2);
        assert!(NullClaimed::claim().row(&mut conn).unwrap().is_none());
        assert_eq!(
            states(db),
            vec![(1, Some("it's done".into())), (2, None), (3, Some("other".into()))]
        );
    }

    /// `ready(Some("retry"), None)` claims both; `done = None` writes `col1 = NULL`, so the row
    /// is ready again.
    pub(crate) fn null_done_state_makes_the_row_ready_again(db: &TestDb<B>) {
        fill(db, &[(1, Some("retry")), (2, None), (3, Some("other"))]);
        let mut conn = db.conn();
        let batch = NullDone::claim().batch(10).rows(&mut conn).unwrap();
        assert_eq!(batch.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2]);
        assert!(batch[0].complete(&mut conn).unwrap());
        assert_eq!(states(db)[0], (1, None));
        let again = NullDone::claim().row(&mut conn).unwrap().expect("row 1 is ready again");
        assert_eq!(again.id, 1);
        assert!(NullDone::claim().row(&mut conn).unwrap().is_none());
    }

    /// `ready(0, -1)` claims the rows in 0 and -1 and no other; `complete` and `fail` write the
    /// `SMALLINT`'s bounds.
    pub(crate) fn small_integer_states_are_claimed_and_finished(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = CODED_DDL;
        db.ddl(pg, sqlite, mysql);
        let rows = [(1_i64, 0_i16), (2, -1), (3, 5), (4, 0)];
        let values: Vec<_> =
            rows.iter().map(|(id, code)| (coded::id.eq(*id), coded::code.eq(*code))).collect();
        diesel::insert_into(coded::table).values(&values).execute(&mut db.conn()).unwrap();
        let mut conn = db.conn();
        let batch = Coded::claim().batch(10).rows(&mut conn).unwrap();
        assert_eq!(batch.iter().map(|r| (r.id, r.code)).collect::<Vec<_>>(), [(1, 1), (2, 1), (4, 1)]);
        assert!(batch[0].complete(&mut conn).unwrap());
        assert!(batch[1].fail(&mut conn).unwrap());
        assert!(Coded::claim().row(&mut conn).unwrap().is_none(), "row 3 is in no ready state");
        let codes: Vec<(i64, i16)> =
            coded::table.order(coded::id).select((coded::id, coded::code)).load(&mut conn).unwrap();
        assert_eq!(codes, [(1, 32767), (2, -32768), (3, 5), (4, 1)]);
    }

    /// `ready("new", None)` on an `Option<String>` field: the rows in 'new' and NULL, not 'other'.
    pub(crate) fn bare_strings_are_states_of_an_option_field(db: &TestDb<B>) {
        fill(db, &[(1, Some("new")), (2, None), (3, Some("other"))]);
        let mut conn = db.conn();
        let batch = BareOnOption::claim().batch(10).rows(&mut conn).unwrap();
        let claimed: Vec<_> = batch.iter().map(|r| (r.id, r.col1.as_deref())).collect();
        assert_eq!(claimed, [(1, Some("sent")), (2, Some("sent"))]);
        assert!(batch[1].complete(&mut conn).unwrap());
        assert_eq!(
            states(db),
            vec![(1, Some("sent".into())), (2, Some("done".into())), (3, Some("other".into()))]
        );
    }

    /// With a row of `acme` claimed (its state NULL) and a limit of one row per tenant, a worker
    /// never claims `acme`'s other row; it runs `globex`'s. Its first claim takes every row the
    /// limit lets it have at once (a batch of 10), so the verdict is the same whatever the timing.
    pub(crate) fn the_per_key_limit_counts_null_claimed_rows(db: &TestDb<B>) {
        db.migrate();
        let (pg, sqlite, mysql) = KEYED_JOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        let rows = [(1, "acme"), (2, "acme"), (3, "globex")];
        let values: Vec<_> = rows
            .iter()
            .map(|(id, tenant)| (keyed_jobs::id.eq(*id), keyed_jobs::status.eq(Some("new")), keyed_jobs::tenant.eq(*tenant)))
            .collect();
        diesel::insert_into(keyed_jobs::table).values(&values).execute(&mut db.conn()).unwrap();
        // Another worker runs acme's first row: its state is now NULL.
        let running = KeyedNullClaimed::claim().row(&mut db.conn()).unwrap().expect("row 1");
        assert_eq!((running.id, running.status.as_deref()), (1, None));

        let seen = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let worker = Worker::new(db.pool(4))
            .batch(10)
            .limit_per_key(keyed_jobs::tenant, 1, |r: &KeyedNullClaimed| r.tenant.clone());
        let report = std::thread::scope(|s| {
            let run = s.spawn(|| {
                worker.run_until(&stop, |_, r: &KeyedNullClaimed| {
                    seen.lock().unwrap().push(r.id);
                    Ok::<_, String>(())
                })
            });
            // Until globex's row ran: it was in the worker's first claim, with anything else
            // that claim could take.
            let started = Instant::now();
            while !seen.lock().unwrap().contains(&3) && started.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::SeqCst);
            run.join().unwrap().unwrap()
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, vec![3], "acme had a claimed row and a limit of 1: {report:?}");
        let row2: (Option<String>, i32) = keyed_jobs::table
            .find(2)
            .select((keyed_jobs::status, keyed_jobs::attempts))
            .first(&mut db.conn())
            .unwrap();
        assert_eq!(row2, (Some("new".to_string()), 0), "acme's second row was never claimed");
    }
}

/// A queue table with the partial index issue 12 is about.
#[cfg(feature = "postgres")]
mod plan {
    use diesel::prelude::*;
    use diesel::sql_types::{BigInt, Text};
    use diesel_lease::prelude::*;

    use crate::common::{Postgres, TestDb};

    diesel::table! {
        plan_jobs (id) {
            id -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
        }
    }

    #[derive(Debug, Queryable, Selectable, Claimable)]
    #[diesel(table_name = plan_jobs)]
    #[claimable(state = status, ready = "ready", claimed = "running", done = "done",
                owner = owner, claimed_at = claimed_at, attempts = attempts)]
    #[allow(dead_code)]
    pub(crate) struct PlanJob {
        pub(crate) id: i64,
        pub(crate) status: String,
        pub(crate) owner: Option<String>,
        pub(crate) claimed_at: Option<chrono::NaiveDateTime>,
        pub(crate) attempts: i32,
    }

    #[derive(QueryableByName, Debug)]
    struct Prepared {
        #[diesel(sql_type = Text)]
        name: String,
        #[diesel(sql_type = Text)]
        statement: String,
        #[diesel(sql_type = BigInt)]
        params: i64,
        #[diesel(sql_type = BigInt)]
        plans: i64,
    }

    #[derive(QueryableByName)]
    struct PlanLine {
        #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
        line: String,
    }

    fn prepared(conn: &mut PgConnection, like: &str) -> Vec<Prepared> {
        diesel::sql_query(
            "SELECT name, statement, cardinality(parameter_types)::bigint AS params, \
             (generic_plans + custom_plans)::bigint AS plans \
             FROM pg_prepared_statements WHERE statement LIKE $1",
        )
        .bind::<Text, _>(like)
        .load(conn)
        .unwrap()
    }

    fn explain(conn: &mut PgConnection, stmt: &Prepared, mode: &str) -> String {
        diesel::sql_query(format!("SET plan_cache_mode = {mode}"))
            .execute(conn)
            .unwrap();
        let args = vec!["NULL"; usize::try_from(stmt.params).unwrap()].join(", ");
        let lines: Vec<PlanLine> =
            diesel::sql_query(format!("EXPLAIN EXECUTE {}({args})", stmt.name))
                .load(conn)
                .unwrap();
        diesel::sql_query("RESET plan_cache_mode")
            .execute(conn)
            .unwrap();
        lines
            .into_iter()
            .map(|l| l.line)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `plan_jobs` with 50,000 rows, every 100th ready, the partial index and fresh statistics.
    fn plan_jobs(db: &TestDb<Postgres>) -> PgConnection {
        let mut conn = db.conn();
        diesel::connection::SimpleConnection::batch_execute(
            &mut conn,
            "CREATE TABLE plan_jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL, owner TEXT, \
               claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0); \
             INSERT INTO plan_jobs (id, status) \
               SELECT g, CASE WHEN g % 100 = 0 THEN 'ready' ELSE 'done' END FROM generate_series(1, 50000) g; \
             CREATE INDEX plan_jobs_ready ON plan_jobs (id) WHERE status = 'ready'; \
             ANALYZE plan_jobs;",
        )
        .unwrap();
        conn
    }

    /// After N claims and completions on one connection, each statement is prepared once and
    /// was executed N times, and both the generic and the custom plan of the claim read the
    /// partial index `WHERE status = 'ready'`.
    fn claim_is_prepared_once_and_uses_the_partial_index(db: &TestDb<Postgres>) {
        let mut conn = plan_jobs(db);
        const N: i64 = 30;
        for _ in 0..N {
            let job = PlanJob::claim()
                .row(&mut conn)
                .unwrap()
                .expect("a ready row");
            assert!(job.complete(&mut conn).unwrap());
        }
        // A filter with a static query id keeps the claim prepared too.
        for _ in 0..N {
            let jobs = PlanJob::claim()
                .filter(plan_jobs::id.gt(0))
                .batch(2)
                .options(&Default::default())
                .rows(&mut conn)
                .unwrap();
            assert_eq!(jobs.len(), 2);
        }

        let claims = prepared(&mut conn, "WITH %SKIP LOCKED%");
        assert_eq!(
            claims.len(),
            2,
            "claim_next and claim_batch_where: {claims:#?}"
        );
        assert!(
            claims.iter().all(|c| c.plans == N),
            "each ran {N} times: {claims:#?}"
        );
        let claim = claims
            .iter()
            .find(|c| c.statement.contains("LIMIT 1 FOR UPDATE"))
            .expect("claim_next's inline LIMIT 1");
        assert!(
            claim.statement.contains("\"status\" = 'ready'"),
            "the ready state is a literal: {}",
            claim.statement
        );
        let completes = prepared(&mut conn, "UPDATE \"plan_jobs\" SET \"status\" = 'done'%");
        assert_eq!(completes.len(), 1, "{completes:#?}");
        assert_eq!(completes[0].plans, N);

        for mode in ["force_generic_plan", "force_custom_plan"] {
            let plan = explain(&mut conn, claim, mode);
            assert!(
                plan.contains("plan_jobs_ready"),
                "{mode} must use the partial index:\n{plan}"
            );
        }
    }

    #[derive(QueryableByName, Debug)]
    struct Plans {
        #[diesel(sql_type = Text)]
        statement: String,
        #[diesel(sql_type = BigInt)]
        generic_plans: i64,
        #[diesel(sql_type = BigInt)]
        custom_plans: i64,
    }

    /// A prepared statement with a bound `LIMIT` is planned on every call by PostgreSQL (a generic
    /// plan cannot know how many rows it stops after, so it never looks cheaper than the custom
    /// one): `claim_batch(50)` writes its `LIMIT 50` into the text instead, and after the first
    /// five calls PostgreSQL reuses one generic plan. A size outside the inline table still
    /// binds its limit and still works, planned each time.
    fn a_batch_claim_of_a_usual_size_is_planned_once(db: &TestDb<Postgres>) {
        let mut conn = plan_jobs(db);
        // 8 rounds of 57 rows from the 500 ready ones; PostgreSQL tries a generic plan after 5.
        const N: i64 = 8;
        let mut claimed = std::collections::HashSet::new();
        for _ in 0..N {
            for (n, rows) in [
                (50, PlanJob::claim().batch(50).rows(&mut conn)),
                (7, PlanJob::claim().batch(7).rows(&mut conn)),
            ] {
                let rows = rows.unwrap();
                assert_eq!(rows.len(), n, "a full batch of {n}");
                assert!(
                    rows.iter().all(|r| claimed.insert(r.id)),
                    "a row claimed twice"
                );
            }
        }
        let plans: Vec<Plans> = diesel::sql_query(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements \
             WHERE statement LIKE 'WITH %SKIP LOCKED%'",
        )
        .load(&mut conn)
        .unwrap();
        let fifty = plans
            .iter()
            .find(|p| p.statement.contains(" LIMIT 50 FOR UPDATE SKIP LOCKED"))
            .unwrap_or_else(|| panic!("claim_batch(50) with its limit inline: {plans:#?}"));
        assert_eq!(fifty.generic_plans + fifty.custom_plans, N, "{fifty:#?}");
        assert!(
            fifty.custom_plans < N && fifty.generic_plans > 0,
            "PostgreSQL settled on one generic plan: {fifty:#?}"
        );
        let seven = plans
            .iter()
            .find(|p| p.statement.contains(" LIMIT $"))
            .unwrap_or_else(|| panic!("claim_batch(7) with its limit bound: {plans:#?}"));
        assert_eq!(seven.generic_plans + seven.custom_plans, N, "{seven:#?}");
    }

    /// `complete_batch` on PostgreSQL sends a model with a one-column key as arrays (`UPDATE … FROM
    /// unnest($keys, $attempts) … AND owner = $stamp`): one prepared statement for every batch
    /// size, three parameters, and PostgreSQL settles on its generic plan instead of planning
    /// each call (the portable statement's `OR` of 50 rows was planned on every call).
    fn a_batch_completion_is_one_statement_planned_once(db: &TestDb<Postgres>) {
        let mut conn = plan_jobs(db);
        const N: i64 = 8;
        for _ in 0..N {
            for n in [50, 7] {
                let rows = PlanJob::claim().batch(n).rows(&mut conn).unwrap();
                assert_eq!(rows.len(), n, "a full batch of {n}");
                let done = rows.complete(&mut conn).unwrap();
                assert_eq!(done, vec![true; n], "every fresh claim is ours");
            }
        }
        let done: i64 = plan_jobs::table
            .filter(plan_jobs::status.eq("done"))
            .count()
            .get_result(&mut conn)
            .unwrap();
        assert_eq!(done, 50_000 - 500 + N * 57);
        let plans: Vec<Plans> = diesel::sql_query(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements \
             WHERE statement LIKE 'UPDATE \"plan_jobs\"%unnest(%'",
        )
        .load(&mut conn)
        .unwrap();
        assert_eq!(
            plans.len(),
            1,
            "one statement for sizes 50 and 7: {plans:#?}"
        );
        let finish = &plans[0];
        assert_eq!(
            finish.generic_plans + finish.custom_plans,
            2 * N,
            "{finish:#?}"
        );
        assert!(
            finish.generic_plans > 0 && finish.custom_plans < 2 * N,
            "PostgreSQL settled on one generic plan: {finish:#?}"
        );
        let params = prepared(&mut conn, "UPDATE \"plan_jobs\"%unnest(%");
        assert_eq!(
            params[0].params, 3,
            "keys, attempts, the shared stamp: {params:#?}"
        );
    }

    #[test]
    fn postgres_a_batch_completion_is_one_statement_planned_once() {
        crate::common::run::<Postgres>(
            "a_batch_completion_is_one_statement_planned_once",
            a_batch_completion_is_one_statement_planned_once,
        );
    }

    #[test]
    fn postgres_a_batch_claim_of_a_usual_size_is_planned_once() {
        crate::common::run::<Postgres>(
            "a_batch_claim_of_a_usual_size_is_planned_once",
            a_batch_claim_of_a_usual_size_is_planned_once,
        );
    }

    #[test]
    fn postgres_claim_is_prepared_once_and_uses_the_partial_index() {
        crate::common::run::<Postgres>(
            "claim_is_prepared_once_and_uses_the_partial_index",
            claim_is_prepared_once_and_uses_the_partial_index,
        );
    }
}
