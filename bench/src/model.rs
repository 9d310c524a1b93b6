//! The benchmark's tables and models, written as a user of diesel-lease writes them.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_lease::prelude::*;

pub(crate) mod schema {
    diesel::table! {
        bench_jobs (id) {
            id -> BigInt,
            seq -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
            payload -> Text,
        }
    }

    diesel::table! {
        bench_guards (id) {
            id -> BigInt,
            done_at -> Nullable<Timestamp>,
        }
    }
}

use schema::{bench_guards, bench_jobs};

/// A queue row: claimed from `ready` to `running` with owner, claim time and attempt count.
#[derive(Debug, Clone, Queryable, QueryableByName, Selectable, Claimable)]
#[diesel(table_name = bench_jobs)]
#[claimable(
    state = status,
    ready = "ready",
    claimed = "running",
    done = "done",
    owner = owner,
    claimed_at = claimed_at,
    attempts = attempts
)]
#[allow(dead_code)] // fields are read by nobody: the benchmark only counts rows
pub(crate) struct BenchJob {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) claimed_at: Option<NaiveDateTime>,
    pub(crate) attempts: i32,
    pub(crate) payload: String,
}

/// The same queue claimed in `seq` order instead of primary-key order: with a partial index on
/// `(seq) WHERE status = 'ready'` the primary key cannot serve the claim's `ORDER BY`, so the
/// planner has only one ordered path (see BENCHMARKS.md, "the planner and the primary key").
#[derive(Debug, Clone, Queryable, Selectable, Claimable)]
#[diesel(table_name = bench_jobs)]
#[claimable(
    state = status,
    ready = "ready",
    claimed = "running",
    done = "done",
    owner = owner,
    claimed_at = claimed_at,
    attempts = attempts,
    order_by(seq)
)]
#[allow(dead_code)]
pub(crate) struct BenchJobBySeq {
    pub(crate) id: i64,
    /// The claim order, read by the steady section's `ClaimCursor` claims.
    pub(crate) seq: i64,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) claimed_at: Option<NaiveDateTime>,
    pub(crate) attempts: i32,
    pub(crate) payload: String,
}

/// The same queue as [`BenchJob`] through a narrower model: the columns a claim and its owner-checked
/// completion need (key, state, owner, attempt), without the claim time and the payload. Only the
/// SQLite end-to-end section claims it, next to `BenchJob`, to show what materializing the two
/// other columns costs a batch (a `NaiveDateTime` parsed from text, one more `String` per row).
#[derive(Debug, Clone, Queryable, Selectable, Claimable)]
#[diesel(table_name = bench_jobs)]
#[claimable(
    state = status,
    ready = "ready",
    claimed = "running",
    done = "done",
    owner = owner,
    attempts = attempts
)]
#[allow(dead_code)]
pub(crate) struct BenchJobNarrow {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) owner: Option<String>,
    pub(crate) attempts: i32,
}

/// A row whose `done_at` is set at most once (`claim_if_null`).
#[derive(Debug, Clone, Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = bench_guards)]
#[claim_if_null(column = done_at)]
#[allow(dead_code)]
pub(crate) struct BenchGuard {
    pub(crate) id: i64,
    pub(crate) done_at: Option<NaiveDateTime>,
}

/// The SQL type of a whole `bench_jobs` row, for hand-written statements.
pub(crate) type JobRowSql = (
    diesel::sql_types::BigInt,
    diesel::sql_types::Text,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Nullable<diesel::sql_types::Timestamp>,
    diesel::sql_types::Integer,
    diesel::sql_types::Text,
);

/// PostgreSQL: the queue table. Autovacuum options are added by the caller.
pub(crate) const PG_JOBS_DDL: &str = "CREATE TABLE bench_jobs (id BIGINT PRIMARY KEY, \
     seq BIGINT NOT NULL, status TEXT NOT NULL, owner TEXT, claimed_at TIMESTAMP, \
     attempts INTEGER NOT NULL DEFAULT 0, payload TEXT NOT NULL DEFAULT '')";

/// PostgreSQL: the index a claim queue needs. Claimed rows leave it, so a claim's index scan
/// starts at the first row still ready instead of walking over everything claimed before.
pub(crate) const PG_READY_INDEX: &str =
    "CREATE INDEX bench_jobs_ready ON bench_jobs (id) WHERE status = 'ready'";

/// PostgreSQL: the index for [`BenchJobBySeq`]'s claim order.
pub(crate) const PG_READY_SEQ_INDEX: &str =
    "CREATE INDEX bench_jobs_ready_seq ON bench_jobs (seq) WHERE status = 'ready'";

/// PostgreSQL: fills `bench_jobs` with ids 1..=$1, all ready.
pub(crate) const PG_FILL_JOBS: &str = "INSERT INTO bench_jobs (id, seq, status, payload) \
     SELECT g, g, 'ready', 'payload of job ' || g FROM generate_series(1::bigint, $1) AS g";

pub(crate) const PG_GUARDS_DDL: &str =
    "CREATE TABLE bench_guards (id BIGINT PRIMARY KEY, done_at TIMESTAMP)";
pub(crate) const PG_FILL_GUARDS: &str =
    "INSERT INTO bench_guards (id) SELECT g FROM generate_series(1::bigint, $1) AS g";

/// SQLite: the same queue table; SQLite plans the bound state value, so the index leads with it.
pub(crate) const SQLITE_JOBS_DDL: &str = "CREATE TABLE bench_jobs (id INTEGER PRIMARY KEY, \
     seq BIGINT NOT NULL, status TEXT NOT NULL, owner TEXT, claimed_at TIMESTAMP, \
     attempts INTEGER NOT NULL DEFAULT 0, payload TEXT NOT NULL DEFAULT ''); \
     CREATE INDEX bench_jobs_ready ON bench_jobs (status, id);";

/// SQLite: fills `bench_jobs` with ids 1..=?, all ready.
pub(crate) const SQLITE_FILL_JOBS: &str = "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL \
     SELECT x + 1 FROM g WHERE x < ?) \
     INSERT INTO bench_jobs (id, seq, status, payload) SELECT x, x, 'ready', 'payload of job ' || x FROM g";
