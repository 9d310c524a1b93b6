//! Retention and redrive on a user's table: delete done and dead rows older than a period, in
//! small batches, and move dead letters back to ready.
//!
//! Every batch is one statement in a transaction of its own: a `DELETE`/`UPDATE` of at most
//! `batch` rows, picked by key and skipping rows other transactions hold on PostgreSQL; on
//! MySQL a single-table `DELETE … LIMIT` / `UPDATE … LIMIT` (MySQL takes no `LIMIT` in the
//! subquery), which waits for a row another transaction holds. So a purge never holds many locks for long, whatever the backlog: claims and completions
//! go on between batches. The statements read the table's names and states from a [`RowShape`]:
//! a model's ([`RowShape::of`]), or a table the operator's CLI describes at run time, which then
//! runs the very same statements.

use std::time::Duration;

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::schedule::TimeColumn;
use super::statements::{ClaimSql, Dynamic, Exec};
use super::wait::TableOf;
use super::{Claimable, StateLiteral};
use crate::backend::Offset;
use crate::backend::{Dialect, SqlDialect};
use crate::{Error, InvalidInput, Result};

/// How many rows a batch deletes or moves by default.
pub(crate) const DEFAULT_BATCH: usize = 500;

/// What [`purge`](super::queue::Queue::purge) deletes: done and dead (failed) rows whose age column is older than a
/// period by the database clock, `batch` rows per transaction.
///
/// Every batch is one statement in a transaction of its own: a `DELETE` (and for
/// [`redrive`](super::queue::Queue::redrive), an `UPDATE`) of at most `batch` rows, picked by key
/// and skipping rows other transactions hold on PostgreSQL; on MySQL a single-table
/// `DELETE … LIMIT` / `UPDATE … LIMIT` (MySQL takes no `LIMIT` in the subquery), which waits for a
/// row another transaction holds. So a purge never holds many locks for long, whatever the
/// backlog: claims and completions go on between batches. The operator's CLI runs the very same
/// statements on a table it describes at run time.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_lease::claim::Retention;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     jobs (id) { id -> BigInt, status -> Text, attempts -> Integer, finished_at -> Nullable<Timestamp>, }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = jobs)]
/// #[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
///             attempts = attempts)]
/// struct Job {
///     id: i64,
///     status: String,
///     attempts: i32,
///     finished_at: Option<chrono::NaiveDateTime>,
/// }
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let mut conn = SqliteConnection::establish(&url).unwrap();
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
/// #          finished_at TIMESTAMP);
/// #      INSERT INTO jobs (status, finished_at) VALUES
/// #          ('done', strftime('%Y-%m-%d %H:%M:%f', 'now', '-40 days')),
/// #          ('dead', strftime('%Y-%m-%d %H:%M:%f', 'now', '-40 days')),
/// #          ('done', strftime('%Y-%m-%d %H:%M:%f', 'now')),
/// #          ('new', NULL);").unwrap();
/// // Done and dead jobs finished more than 30 days ago go, 100 per transaction.
/// let retention = Retention::older_than(Duration::from_secs(30 * 24 * 3600)).batch_size(100);
/// let purged = Job::queue().purge(&mut conn, jobs::finished_at, &retention).unwrap();
/// assert_eq!(purged.deleted, 2);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    older_than: Duration,
    batch: usize,
    done: bool,
    failed: bool,
}

impl Retention {
    /// Deletes done and dead rows older than `period`, 500 rows per transaction.
    ///
    /// Checked when used: a zero period is [`InvalidInput::ZeroDuration`].
    pub fn older_than(period: Duration) -> Self {
        Retention {
            older_than: period,
            batch: DEFAULT_BATCH,
            done: true,
            failed: true,
        }
    }

    /// How many rows one transaction deletes at most (at least 1; checked when used).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }

    /// Whether done rows go (default `true`).
    pub fn done(mut self, purge: bool) -> Self {
        self.done = purge;
        self
    }

    /// Whether dead (failed) rows go (default `true`); keep them to [`redrive`](super::queue::Queue::redrive) later.
    pub fn failed(mut self, purge: bool) -> Self {
        self.failed = purge;
        self
    }

    fn batch_limit(&self) -> Result<i64> {
        if self.batch == 0 {
            return Err(InvalidInput::Zero { what: "batch size" }.into());
        }
        Ok(i64::try_from(self.batch).unwrap_or(i64::MAX))
    }
}

/// What a purge (or a redrive) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Purged {
    /// Rows deleted (or moved back to ready).
    pub deleted: u64,
    /// Statements run, each its own transaction (the last one found fewer rows than a batch).
    pub batches: u64,
    /// The most rows one statement changed.
    pub largest_batch: u64,
}

/// The names and states retention and redrive need of a table: a model's ([`RowShape::of`]), or
/// a table described at run time (the operator's CLI).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct RowShape {
    /// Primary-key column names.
    pub pk: &'static [&'static str],
    /// The state column.
    pub state: &'static str,
    /// The state a redriven row gets (the first ready state).
    pub ready: Option<StateLiteral>,
    /// Every ready state: a purge never deletes rows in one, also when the done or failed
    /// state is among them (rows that recur, or are retried).
    pub ready_states: &'static [StateLiteral],
    /// The done state, if any.
    pub done: Option<StateLiteral>,
    /// The failed (dead-letter) state, if any.
    pub failed: Option<StateLiteral>,
    /// The owner column (cleared by a redrive), if mapped.
    pub owner: Option<&'static str>,
    /// The attempts column (reset to 0 by a redrive), if mapped.
    pub attempts: Option<&'static str>,
    /// The last-error column (cleared by a redrive), if mapped.
    pub error: Option<&'static str>,
    /// The not-before column (set to now by a redrive), if mapped.
    pub available_at: Option<TimeColumn>,
}

impl RowShape {
    /// The shape of model `M`, from its derived constants.
    pub const fn of<M: Claimable>() -> RowShape {
        RowShape {
            pk: M::PK,
            state: M::STATE,
            ready: match M::READY_SQL.first() {
                Some(r) => Some(*r),
                None => None,
            },
            ready_states: M::READY_SQL,
            done: M::DONE_SQL,
            failed: M::FAILED_SQL,
            owner: M::OWNER,
            attempts: M::ATTEMPTS,
            error: M::ERROR,
            available_at: M::AVAILABLE_AT,
        }
    }
}

/// What a batch statement does.
enum Change {
    /// `DELETE` rows in `states` whose `column` is before `<now> + cutoff` (a negative offset).
    Purge {
        states: Vec<StateLiteral>,
        column: TimeColumn,
        cutoff: Offset,
    },
    /// Failed rows back to ready: owner and error cleared, attempts 0 (next to an owner column),
    /// not-before now.
    Redrive,
}

/// One batch: `<change> … WHERE <which rows> [AND (filter)]`, at most `limit` rows.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct BatchStmt<'a, DB: SqlDialect> {
    table: &'a dyn QueryFragment<DB>,
    shape: &'a RowShape,
    change: Change,
    filter: Option<&'a dyn QueryFragment<DB>>,
    limit: i64,
}

impl<'a, DB: SqlDialect> BatchStmt<'a, DB> {
    /// `DELETE FROM t` or `UPDATE t SET …`.
    fn push_head<'b>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let shape = self.shape;
        match &self.change {
            Change::Purge { .. } => {
                out.push_sql("DELETE FROM ");
                self.table.walk_ast(out.reborrow())?;
            }
            Change::Redrive => {
                let ready = shape.ready.as_ref().ok_or_else(|| no("ready state"))?;
                out.push_sql("UPDATE ");
                self.table.walk_ast(out.reborrow())?;
                out.push_sql(" SET ");
                out.push_identifier(shape.state)?;
                out.push_sql(" = ");
                ready.push(out);
                // Without an owner column the attempts number is what fences a stale worker off
                // (its finish names the number it claimed with): it keeps counting, so no later
                // claim reuses a number an earlier one had.
                let attempts = shape.attempts.filter(|_| shape.owner.is_some());
                for (column, value) in [
                    (shape.owner, "NULL"),
                    (shape.error, "NULL"),
                    (attempts, "0"),
                ] {
                    if let Some(column) = column {
                        out.push_sql(", ");
                        out.push_identifier(column)?;
                        out.push_sql(" = ");
                        out.push_sql(value);
                    }
                }
                if let Some(col) = shape.available_at {
                    out.push_sql(", ");
                    out.push_identifier(col.name)?;
                    out.push_sql(" = ");
                    DB::push_now(out, col.with_time_zone);
                }
            }
        }
        Ok(())
    }

    /// The rows the batch changes, without the limit.
    fn push_which<'b>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match &self.change {
            Change::Purge {
                states,
                column,
                cutoff,
            } => {
                StateLiteral::push_in(states, out, self.shape.state)?;
                out.push_sql(" AND ");
                out.push_identifier(column.name)?;
                out.push_sql(" < ");
                DB::push_now_offset(out, cutoff, column.with_time_zone)?;
            }
            Change::Redrive => {
                let failed = self
                    .shape
                    .failed
                    .as_ref()
                    .ok_or_else(|| no("failed state"))?;
                failed.push_eq(out, self.shape.state)?;
            }
        }
        if let Some(filter) = self.filter {
            out.push_sql(" AND (");
            filter.walk_ast(out.reborrow())?;
            out.push_sql(")");
        }
        Ok(())
    }
}

fn no(what: &str) -> diesel::result::Error {
    diesel::result::Error::QueryBuilderError(format!("the table has no {what}").into())
}

/// The bounds under which a connection can purge and redrive rows of model `M`
/// ([`Queue::purge`](super::queue::Queue::purge), [`Queue::redrive`](super::queue::Queue::redrive)).
/// Implemented for every connection whose backend can read and write `M`'s columns; you never
/// implement it.
pub trait RetentionConnection<M: Claimable>: Dialect<Backend: RetentionSqlDialect> {
    /// Deletes `M`'s finished rows older than the retention by `age` (the statements of
    /// [`purge_table`] on `M`'s table).
    #[doc(hidden)]
    fn purge_rows(&mut self, age: TimeColumn, retention: &Retention) -> Result<Purged>;

    /// Moves up to `limit` of `M`'s dead rows that match `filter` back to ready.
    #[doc(hidden)]
    fn redrive_rows(
        &mut self,
        limit: u64,
        filter: Option<&dyn QueryFragment<Self::Backend>>,
    ) -> Result<u64>;
}

impl<M, C> RetentionConnection<M> for C
where
    M: ClaimSql<C::Backend>,
    C: Dialect<Backend: RetentionSqlDialect>,
{
    fn purge_rows(&mut self, age: TimeColumn, retention: &Retention) -> Result<Purged> {
        purge_table(
            self,
            &TableOf::<M>::new(),
            &RowShape::of::<M>(),
            age,
            retention,
        )
    }

    fn redrive_rows(
        &mut self,
        limit: u64,
        filter: Option<&dyn QueryFragment<C::Backend>>,
    ) -> Result<u64> {
        let shape = RowShape::of::<M>();
        let moved = redrive_table(
            self,
            &TableOf::<M>::new(),
            &shape,
            filter,
            Some(limit),
            DEFAULT_BATCH,
        )?;
        Ok(moved.deleted)
    }
}

/// How a batch statement differs between backends (implemented for `Pg`, `Sqlite`, `Mysql` and `Mariadb`).
///
/// Sealed; its items are internal and carry no stability promise.
pub trait RetentionSqlDialect: SqlDialect {
    /// The batch: by default `<head> WHERE (pk) IN (SELECT pk FROM t WHERE <which> LIMIT $n
    /// <skip locked>)`, which deletes or changes at most `$n` rows and, on PostgreSQL, skips rows
    /// other transactions hold.
    #[doc(hidden)]
    fn push_batch<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        stmt: &'b BatchStmt<'_, Self>,
    ) -> QueryResult<()> {
        stmt.push_head(out)?;
        out.push_sql(" WHERE (");
        push_pk(out, stmt.shape.pk)?;
        out.push_sql(") IN (SELECT ");
        push_pk(out, stmt.shape.pk)?;
        out.push_sql(" FROM ");
        stmt.table.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        stmt.push_which(out)?;
        out.push_sql(" LIMIT ");
        Self::bind_i64(out, &stmt.limit)?;
        out.push_sql(Self::SKIP_LOCKED);
        out.push_sql(")");
        Ok(())
    }
}

fn push_pk<DB: SqlDialect>(out: &mut AstPass<'_, '_, DB>, pk: &[&str]) -> QueryResult<()> {
    for (i, c) in pk.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        out.push_identifier(c)?;
    }
    Ok(())
}

#[cfg(feature = "postgres")]
impl RetentionSqlDialect for diesel::pg::Pg {}
#[cfg(feature = "sqlite")]
impl RetentionSqlDialect for diesel::sqlite::Sqlite {}
/// MySQL and MariaDB.
#[cfg(feature = "__mysql_like")]
macro_rules! mysql_like_retention {
    ($db:ty) => {
        impl RetentionSqlDialect for $db {
            /// MySQL refuses `LIMIT` inside `IN (SELECT …)` and a subquery of the table it changes, and
            /// has single-table `DELETE … LIMIT` and `UPDATE … LIMIT` instead.
            fn push_batch<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                stmt: &'b BatchStmt<'_, Self>,
            ) -> QueryResult<()> {
                stmt.push_head(out)?;
                out.push_sql(" WHERE ");
                stmt.push_which(out)?;
                out.push_sql(" LIMIT ");
                Self::bind_i64(out, &stmt.limit)
            }
        }
    };
}
#[cfg(feature = "mysql")]
mysql_like_retention!(diesel::mysql::Mysql);
#[cfg(feature = "mariadb")]
mysql_like_retention!(diesel::mariadb::Mariadb);

impl<DB: RetentionSqlDialect> QueryFragment<DB> for BatchStmt<'_, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_batch(&mut out, self)
    }
}

/// Runs `stmt` in batches until one changes fewer than `limit` rows (or, with `max_rows`, until
/// that many changed); each batch commits on its own.
fn in_batches<C>(
    conn: &mut C,
    mut stmt: BatchStmt<'_, C::Backend>,
    max_rows: Option<u64>,
) -> Result<Purged>
where
    C: Dialect<Backend: RetentionSqlDialect>,
{
    crate::backend::refuse_nested(conn)?;
    let batch = stmt.limit;
    let mut done = Purged::default();
    loop {
        if let Some(max) = max_rows {
            let left = max.saturating_sub(done.deleted);
            if left == 0 {
                return Ok(done);
            }
            stmt.limit = batch.min(i64::try_from(left).unwrap_or(i64::MAX));
        }
        // One statement, rolled back whole by a deadlock: safe to run again.
        let n = crate::backend::retry_conflicts(|| {
            Ok(conn.single_write(|c| {
                c.keyed_write(|c| c.execute_returning_count(&Exec::<_, Dynamic>::new(&stmt)))
            })?)
        })?;
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        done.batches += 1;
        done.deleted += n;
        done.largest_batch = done.largest_batch.max(n);
        if n < u64::try_from(stmt.limit).unwrap_or(u64::MAX) {
            return Ok(done);
        }
    }
}

/// [`purge_finished`] on a table described by `table` and `shape` (the operator's CLI).
#[doc(hidden)]
pub fn purge_table<C>(
    conn: &mut C,
    table: &dyn QueryFragment<C::Backend>,
    shape: &RowShape,
    column: TimeColumn,
    retention: &Retention,
) -> Result<Purged>
where
    C: Dialect<Backend: RetentionSqlDialect>,
{
    let limit = retention.batch_limit()?;
    crate::Ttl::new("retention period", retention.older_than)?;
    let asked: Vec<StateLiteral> = [
        shape.done.filter(|_| retention.done),
        shape.failed.filter(|_| retention.failed),
    ]
    .into_iter()
    .flatten()
    .collect();
    if asked.is_empty() {
        return Err(Error::Config(
            "a purge deletes done or dead rows: the table has neither state to purge (add `done = …` / `failed = …` to #[claimable(...)], or purge both)".into(),
        ));
    }
    // A done or failed state that is also a ready state holds queued work (a recurring row, a
    // retry): never purged.
    let states: Vec<StateLiteral> = asked
        .into_iter()
        .filter(|state| !shape.ready_states.contains(state))
        .collect();
    if states.is_empty() {
        return Err(Error::Config(
            "a purge deletes done or dead rows, and the states to purge are ready states too (rows that recur or are retried): purging them would delete queued work".into(),
        ));
    }
    let micros = i64::try_from(retention.older_than.as_micros()).unwrap_or(i64::MAX);
    let stmt = BatchStmt {
        table,
        shape,
        change: Change::Purge {
            states,
            column,
            cutoff: Offset::new(micros.saturating_neg()),
        },
        filter: None,
        limit,
    };
    in_batches(conn, stmt, None)
}

/// [`redrive_dead`] on a table described by `table` and `shape` (the operator's CLI):
/// at most `max` rows (`None`: every dead row), `batch` per transaction.
#[doc(hidden)]
pub fn redrive_table<C>(
    conn: &mut C,
    table: &dyn QueryFragment<C::Backend>,
    shape: &RowShape,
    filter: Option<&dyn QueryFragment<C::Backend>>,
    max: Option<u64>,
    batch: usize,
) -> Result<Purged>
where
    C: Dialect<Backend: RetentionSqlDialect>,
{
    if shape.failed.is_none() {
        return Err(Error::Config(
            "a redrive moves dead rows: add `failed = …` to #[claimable(...)]".into(),
        ));
    }
    if shape.ready.is_none() {
        return Err(Error::Config("the table has no ready state".into()));
    }
    let stmt = BatchStmt {
        table,
        shape,
        change: Change::Redrive,
        filter,
        limit: Retention::older_than(Duration::ZERO)
            .batch_size(batch)
            .batch_limit()?,
    };
    in_batches(conn, stmt, max)
}
