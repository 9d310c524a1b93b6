//! The claim statements' SQL, pinned: one statement per claim on PostgreSQL and SQLite, the
//! model's states as SQL literals, every other value a bind parameter, identifiers only from the
//! schema.

use diesel::prelude::*;

use super::statements::{ClaimParts, ClaimSql};
use super::ClaimDialect;
use super::Claimable;
use crate::backend::SqlDialect;
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
    // 7 is not one of the batch sizes written inline (`only_the_table_s_batch_sizes_…`).
    let sql = diesel::PgConnection::claim_sql(&parts(), 7);
    let (text, binds) = sql.split_once(" -- binds: ").unwrap();
    // The stale check compares the latest instant a (maybe whole-second) claimed_at stands for.
    let f = "(CAST(EXTRACT(MICROSECONDS FROM \"claimed_at\") AS BIGINT) % 1000000)";
    assert_eq!(
        text,
        format!("WITH \"picked\" AS (SELECT \"id\" FROM \"jobs\" WHERE (\"status\" IN ('new', 'retry', 'running') \
         AND (\"status\" IN ('new', 'retry') OR (\"status\" = 'running' \
         AND \"claimed_at\" < ((statement_timestamp() AT TIME ZONE 'UTC') + $1 * INTERVAL '1 microsecond') \
         AND (\"claimed_at\" + CASE WHEN {f} % 10 <> 0 THEN 1 WHEN {f} % 100 <> 0 THEN 10 \
         WHEN {f} % 1000 <> 0 THEN 100 WHEN {f} % 10000 <> 0 THEN 1000 WHEN {f} % 100000 <> 0 THEN 10000 \
         WHEN {f} <> 0 THEN 100000 ELSE 1000000 END * INTERVAL '1 microsecond') \
         < ((statement_timestamp() AT TIME ZONE 'UTC') + $2 * INTERVAL '1 microsecond') AND \"attempts\" < $3))) \
         ORDER BY \"id\" ASC LIMIT $4 FOR UPDATE SKIP LOCKED) \
         UPDATE \"jobs\" SET \"status\" = 'running', \"owner\" = $5, \"claimed_at\" = (statement_timestamp() AT TIME ZONE 'UTC'), \
         \"attempts\" = \"attempts\" + 1 FROM \"picked\" WHERE \"jobs\".\"id\" = \"picked\".\"id\" \
         RETURNING \"jobs\".\"id\", \"jobs\".\"status\", \"jobs\".\"owner\", \"jobs\".\"claimed_at\", \"jobs\".\"attempts\"")
    );
    assert!(
        !text.contains("DROP TABLE"),
        "user data reached the SQL text"
    );
    assert_eq!(
        binds,
        format!("[-5000000, -5000000, 3, 7, \"{HOSTILE_OWNER}\"]")
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_claim_is_one_update_returning() {
    let sql = diesel::SqliteConnection::claim_sql(&parts(), 1);
    let (text, _) = sql.split_once(" -- binds: ").unwrap();
    assert!(
        text.starts_with(
            "UPDATE `jobs` SET `status` = 'running', `owner` = ?, `claimed_at` = strftime("
        ),
        "{text}"
    );
    assert!(
        text.contains("WHERE (`id`) IN (SELECT `id` FROM `jobs` WHERE"),
        "{text}"
    );
    assert!(
        text.contains("ORDER BY `id` ASC LIMIT 1) RETURNING"),
        "claim_next's limit is inline: {text}"
    );
    // Both branches behind the state test a partial index can carry: SQLite uses one only when
    // the WHERE has its predicate as a term.
    assert!(
        text.contains(
            "(`status` IN ('new', 'retry', 'running') AND (`status` IN ('new', 'retry') OR"
        ),
        "{text}"
    );
    // The stale check compares the latest instant a claimed_at stands for: SQLite's clock reads
    // whole milliseconds.
    assert!(
        text.contains(
            "AND strftime('%Y-%m-%d %H:%M:%f', `claimed_at`, '+0.001 seconds') \
             < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)"
        ),
        "{text}"
    );
    assert!(!text.contains("DROP TABLE"));
}

#[cfg(feature = "__mysql_like")]
#[test]
fn mysql_pick_locks_with_skip_locked() {
    fn check(sql: String) {
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
    #[cfg(feature = "mysql")]
    check(diesel::MysqlConnection::claim_sql(&parts(), 5));
    #[cfg(feature = "mariadb")]
    check(diesel::mariadb::MariadbConnection::claim_sql(&parts(), 5));
}

#[cfg(feature = "postgres")]
#[test]
fn completion_checks_owner_attempt_and_state() {
    use diesel::pg::Pg;
    let stmt = FinishStmt::<Job> {
        table: jobs::table,
        pk: Job::pk_filter(42),
        change: super::statements::Change::State(super::Finish::Done),
        owner: Some(Some("me".into())),
        attempts: Some(Some(2)),
    };
    let sql = diesel::debug_query::<Pg, _>(&stmt).to_string();
    assert_eq!(
        sql,
        "UPDATE \"jobs\" SET \"status\" = 'done' WHERE (\"jobs\".\"id\" = $1) AND \"status\" = 'running' \
         AND \"owner\" = $2 AND \"attempts\" = $3 -- binds: [42, Some(\"me\"), Some(2)]"
    );
}

#[cfg(feature = "postgres")]
#[test]
fn heartbeat_moves_claimed_at_under_the_same_checks() {
    use diesel::pg::Pg;
    let stmt = FinishStmt::<Job> {
        table: jobs::table,
        pk: Job::pk_filter(42),
        change: super::statements::Change::Touch(crate::clock::DbNow::new()),
        owner: Some(Some("me#0123456789ab".into())),
        attempts: Some(Some(2)),
    };
    let sql = diesel::debug_query::<Pg, _>(&stmt).to_string();
    assert_eq!(
        sql,
        "UPDATE \"jobs\" SET \"claimed_at\" = (statement_timestamp() AT TIME ZONE 'UTC') WHERE (\"jobs\".\"id\" = $1) \
         AND \"status\" = 'running' AND \"owner\" = $2 AND \"attempts\" = $3 \
         -- binds: [42, Some(\"me#0123456789ab\"), Some(2)]"
    );
}

/// A claim's query id is static only when every part is: a Diesel filter keeps it static, a
/// boxed filter (whose text the type does not fix) makes Diesel build the SQL per call.
#[cfg(feature = "postgres")]
#[test]
fn a_filter_without_a_static_query_id_makes_the_claim_dynamic() {
    use super::statements::{shape, NoFilter, StmtId};
    use diesel::query_builder::QueryId;
    type Claim<F> = StmtId<Job, shape::Claim, F, false, true>;
    type Boxed = Box<
        dyn diesel::BoxableExpression<
            jobs::table,
            diesel::pg::Pg,
            SqlType = diesel::sql_types::Bool,
        >,
    >;
    const {
        assert!(<Claim<NoFilter> as QueryId>::HAS_STATIC_QUERY_ID);
        assert!(<Claim<diesel::dsl::Gt<jobs::id, i64>> as QueryId>::HAS_STATIC_QUERY_ID);
        assert!(!<Claim<Boxed> as QueryId>::HAS_STATIC_QUERY_ID);
    }
    assert_ne!(
        <Claim<NoFilter> as QueryId>::query_id(),
        <StmtId<Job, shape::Claim, NoFilter, true, true> as QueryId>::query_id(),
        "the rescue predicate changes the text, so it changes the id"
    );
}

/// `LIMIT 1` is inline everywhere; on PostgreSQL the usual batch sizes too (one prepared
/// statement per size, planned once), and every other size, or any size elsewhere, is bound.
#[test]
fn only_the_table_s_batch_sizes_are_written_inline() {
    use super::statements::inline_limit;
    #[cfg(feature = "postgres")]
    {
        use diesel::pg::Pg;
        assert_eq!(inline_limit::<Pg>(1), Some(" LIMIT 1"));
        assert_eq!(inline_limit::<Pg>(50), Some(" LIMIT 50"));
        assert_eq!(inline_limit::<Pg>(1000), Some(" LIMIT 1000"));
        for bound in [0, 7, 49, 51, 1001, -50, i64::MAX] {
            assert_eq!(inline_limit::<Pg>(bound), None, "{bound}");
        }
    }
    #[cfg(feature = "sqlite")]
    {
        use diesel::sqlite::Sqlite;
        assert_eq!(inline_limit::<Sqlite>(1), Some(" LIMIT 1"));
        assert_eq!(inline_limit::<Sqlite>(50), None);
    }
    #[cfg(feature = "mysql")]
    {
        use diesel::mysql::Mysql;
        assert_eq!(inline_limit::<Mysql>(1), Some(" LIMIT 1"));
        assert_eq!(inline_limit::<Mysql>(50), None);
    }
    #[cfg(feature = "mariadb")]
    {
        use diesel::mariadb::Mariadb;
        assert_eq!(inline_limit::<Mariadb>(1), Some(" LIMIT 1"));
        assert_eq!(inline_limit::<Mariadb>(50), None);
    }
}

/// The claim and the owner-checked change answer Diesel's cache question without the walk
/// Diesel's default makes: the answer must be the walk's, with no filter, a cacheable filter and
/// one that is not (an SQL literal), so a statement whose text can vary is never cached.
#[cfg(feature = "sqlite")]
#[test]
fn the_cache_answer_without_a_walk_is_the_walk_s() {
    use super::statements::ClaimStmt;
    use diesel::query_builder::{AstPass, QueryFragment};
    use diesel::sqlite::Sqlite;

    /// The statement's text alone: Diesel's default answer, from a walk.
    struct Walked<'a>(&'a dyn QueryFragment<Sqlite>);
    impl QueryFragment<Sqlite> for Walked<'_> {
        fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            self.0.walk_ast(out)
        }
    }
    let answers = |stmt: &dyn QueryFragment<Sqlite>| {
        (
            stmt.is_safe_to_cache_prepared(&Sqlite).unwrap(),
            Walked(stmt).is_safe_to_cache_prepared(&Sqlite).unwrap(),
        )
    };
    let parts = parts::<Sqlite>();
    let gt = jobs::id.gt(5_i64);
    let literal = diesel::dsl::sql::<diesel::sql_types::Bool>("1 = 1");
    for limit in [1, 7, 50] {
        assert_eq!(answers(&ClaimStmt::new(&parts, limit, None)), (true, true));
        assert_eq!(
            answers(&ClaimStmt::new(&parts, limit, Some(&gt))),
            (true, true)
        );
        assert_eq!(
            answers(&ClaimStmt::new(&parts, limit, Some(&literal))),
            (false, false)
        );
    }
    use super::statements::{Change, FinishStmt};
    use crate::claim::Keyed;
    for change in [
        Change::State(super::Finish::Done),
        Change::State(super::Finish::Ready),
        Change::Touch(crate::clock::DbNow::new()),
    ] {
        let stmt = FinishStmt::<Job> {
            table: jobs::table,
            pk: Job::pk_filter(42),
            change,
            owner: Some(Some("me".into())),
            attempts: Some(Some(2)),
        };
        assert_eq!(answers(&stmt), (true, true));
    }
}

/// The derive's longest claim timeout (checked when it expands) is the runtime's [`MAX_TTL`]:
/// one more second is a compile error (`tests/ui/fail/timeout_too_long.rs`).
///
/// [`MAX_TTL`]: crate::MAX_TTL
#[test]
fn the_longest_derive_timeout_is_max_ttl() {
    #[derive(Queryable, Selectable, crate::Claimable)]
    #[diesel(table_name = jobs)]
    #[claimable(
        state = status,
        ready = "new",
        claimed = "running",
        owner = owner,
        claimed_at = claimed_at,
        timeout_secs = 31_536_000_000
    )]
    #[allow(dead_code)]
    struct Longest {
        id: i64,
        status: String,
        owner: Option<String>,
        claimed_at: Option<chrono::NaiveDateTime>,
        attempts: i32,
    }
    let max = i64::try_from(crate::MAX_TTL.as_micros()).unwrap();
    assert_eq!(Longest::CLAIM_TIMEOUT_MICROS, Some(max));
}

/// A cancel goes to the cancelled state, else to the failed state unless failed rows are
/// retried (a failed state that is a ready state: the row would be queued again, so there is
/// no state to cancel to, and `cancel_by_pk` does not compile).
#[test]
fn a_cancel_never_goes_to_a_ready_state() {
    use super::cancel::cancel_target;
    use super::StateLiteral;
    #[derive(Queryable, Selectable, crate::Claimable)]
    #[diesel(table_name = jobs)]
    #[claimable(state = status, ready("new", "retry"), claimed = "running", failed = "retry")]
    #[allow(dead_code)]
    struct Retrying {
        id: i64,
        status: String,
    }
    assert_eq!(cancel_target::<Job>(), Some(StateLiteral::sql("'failed'")));
    assert_eq!(cancel_target::<Retrying>(), None);
}
