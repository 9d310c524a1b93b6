//! The claim statements' SQL, pinned: one statement per claim on PostgreSQL and SQLite, every
//! value a bind parameter, identifiers only from the schema.

use diesel::prelude::*;

use super::statements::{ClaimParts, ClaimSql};
use super::Claimable;
use crate::backend::{Dialect, SqlDialect};
// The owner-checked statements are pinned on PostgreSQL only.
#[cfg(feature = "postgres")]
use super::statements::FinishStmt;
#[cfg(feature = "postgres")]
use crate::claim::Keyed;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        owner -> Nullable<Text>,
        claimed_at -> Nullable<Timestamp>,
        attempts -> Integer,
    }
}

#[derive(Queryable, Selectable, crate::Claimable)]
#[diesel(table_name = jobs)]
#[claimable(
    state = status,
    ready("new", "retry"),
    claimed = "running",
    done = "done",
    failed = "failed",
    owner = owner,
    claimed_at = claimed_at,
    attempts = attempts,
    timeout_secs = 5,
    max_attempts = 3
)]
#[allow(dead_code)]
struct Job {
    id: i64,
    status: String,
    owner: Option<String>,
    claimed_at: Option<chrono::NaiveDateTime>,
    attempts: i32,
}

const HOSTILE_OWNER: &str = "o'; DROP TABLE jobs; --";

fn parts<DB: SqlDialect>() -> ClaimParts<Job, DB>
where
    Job: ClaimSql<DB>,
{
    ClaimParts::new(HOSTILE_OWNER, Job::CLAIM_TIMEOUT_MICROS)
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_claim_is_one_cte_statement_with_binds() {
    let sql = diesel::PgConnection::claim_sql(&parts(), 10);
    let (text, binds) = sql.split_once(" -- binds: ").unwrap();
    // The stale check compares the latest instant a (maybe whole-second) claimed_at stands for.
    let f = "(CAST(EXTRACT(MICROSECONDS FROM \"claimed_at\") AS BIGINT) % 1000000)";
    assert_eq!(
        text,
        format!("WITH \"picked\" AS (SELECT \"id\" FROM \"jobs\" WHERE (\"status\" IN ($1, $2) OR (\"status\" = $3 \
         AND \"claimed_at\" < ((statement_timestamp() AT TIME ZONE 'UTC') + $4 * INTERVAL '1 microsecond') \
         AND (\"claimed_at\" + CASE WHEN {f} % 10 <> 0 THEN 1 WHEN {f} % 100 <> 0 THEN 10 \
         WHEN {f} % 1000 <> 0 THEN 100 WHEN {f} % 10000 <> 0 THEN 1000 WHEN {f} % 100000 <> 0 THEN 10000 \
         WHEN {f} <> 0 THEN 100000 ELSE 1000000 END * INTERVAL '1 microsecond') \
         < ((statement_timestamp() AT TIME ZONE 'UTC') + $5 * INTERVAL '1 microsecond') AND \"attempts\" < $6)) \
         ORDER BY \"id\" ASC LIMIT $7 FOR UPDATE SKIP LOCKED) \
         UPDATE \"jobs\" SET \"status\" = $8, \"owner\" = $9, \"claimed_at\" = (statement_timestamp() AT TIME ZONE 'UTC'), \
         \"attempts\" = \"attempts\" + 1 FROM \"picked\" WHERE \"jobs\".\"id\" = \"picked\".\"id\" \
         RETURNING \"jobs\".\"id\", \"jobs\".\"status\", \"jobs\".\"owner\", \"jobs\".\"claimed_at\", \"jobs\".\"attempts\"")
    );
    assert!(
        !text.contains("DROP TABLE"),
        "user data reached the SQL text"
    );
    assert_eq!(
        binds,
        format!(
            "[\"new\", \"retry\", \"running\", -5000000, -5000000, 3, 10, \"running\", \"{HOSTILE_OWNER}\"]"
        )
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_claim_is_one_update_returning() {
    let sql = diesel::SqliteConnection::claim_sql(&parts(), 1);
    let (text, _) = sql.split_once(" -- binds: ").unwrap();
    assert!(
        text.starts_with("UPDATE `jobs` SET `status` = ?, `owner` = ?, `claimed_at` = strftime("),
        "{text}"
    );
    assert!(
        text.contains("WHERE (`id`) IN (SELECT `id` FROM `jobs` WHERE"),
        "{text}"
    );
    assert!(
        text.contains("ORDER BY `id` ASC LIMIT ?) RETURNING"),
        "{text}"
    );
    assert!(!text.contains("DROP TABLE"));
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_pick_locks_with_skip_locked() {
    let sql = diesel::MysqlConnection::claim_sql(&parts(), 5);
    let (text, _) = sql.split_once(" -- binds: ").unwrap();
    assert!(text.starts_with("SELECT `jobs`.`id`"), "{text}");
    assert!(
        text.contains("`claimed_at` < (UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)"),
        "{text}"
    );
    assert!(
        text.ends_with("ORDER BY `id` ASC LIMIT ? FOR UPDATE SKIP LOCKED"),
        "{text}"
    );
}

#[cfg(feature = "postgres")]
#[test]
fn completion_checks_owner_attempt_and_state() {
    use diesel::pg::Pg;
    let stmt = FinishStmt::<Job> {
        table: jobs::table,
        pk: Job::pk_filter(42),
        claimed: "running".into(),
        change: super::statements::Change::State {
            to: "done".into(),
            clear_owner: false,
        },
        owner: Some(Some("me".into())),
        attempts: Some(Some(2)),
    };
    let sql = diesel::debug_query::<Pg, _>(&stmt).to_string();
    assert_eq!(
        sql,
        "UPDATE \"jobs\" SET \"status\" = $1 WHERE (\"jobs\".\"id\" = $2) AND \"status\" = $3 \
         AND \"owner\" = $4 AND \"attempts\" = $5 -- binds: [\"done\", 42, \"running\", Some(\"me\"), Some(2)]"
    );
}

#[cfg(feature = "postgres")]
#[test]
fn heartbeat_moves_claimed_at_under_the_same_checks() {
    use diesel::pg::Pg;
    let stmt = FinishStmt::<Job> {
        table: jobs::table,
        pk: Job::pk_filter(42),
        claimed: "running".into(),
        change: super::statements::Change::Touch(crate::clock::DbNow::new()),
        owner: Some(Some("me#0123456789ab".into())),
        attempts: Some(Some(2)),
    };
    let sql = diesel::debug_query::<Pg, _>(&stmt).to_string();
    assert_eq!(
        sql,
        "UPDATE \"jobs\" SET \"claimed_at\" = (statement_timestamp() AT TIME ZONE 'UTC') WHERE (\"jobs\".\"id\" = $1) \
         AND \"status\" = $2 AND \"owner\" = $3 AND \"attempts\" = $4 \
         -- binds: [42, \"running\", Some(\"me#0123456789ab\"), Some(2)]"
    );
}
