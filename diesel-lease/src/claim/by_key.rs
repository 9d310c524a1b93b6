//! Seed 002's waiting lock: lock *this* row if it still qualifies, waiting for a concurrent
//! holder, then decide.
//!
//! ```sql
//! SELECT <model> FROM t WHERE <pk> AND <qualifies> FOR UPDATE   -- waits, bounded by a lock timeout
//! ```
//!
//! Unlike a claim's [`locked`](super::Claim::locked) terminal (which skips locked rows), the statement waits for the
//! transaction that holds the row; under READ COMMITTED PostgreSQL and InnoDB then check the
//! predicate again on the row as that transaction left it, so a row that no longer qualifies
//! after the wait is `None`. The wait is bounded: PostgreSQL `lock_timeout`, MySQL/MariaDB
//! `innodb_lock_wait_timeout`, SQLite's busy timeout, each set for this statement only and put
//! back after it ([`Dialect::bounded_lock_wait`]); a wait that runs out is
//! [`Error::Timeout`](crate::Error::Timeout). SQLite has no row locks: the statement first takes
//! the database write lock, which shuts out every other writer until the transaction ends.
//!
//! What "qualifies" means: a `Claimable` model's ready states (`lock_by_pk_if_claimable`,
//! `with_locked`), or a `ClaimIfNull` model's guard column still `NULL` (`lock_by_pk_if_null`,
//! `with_locked_if_null`: seed 002's own `… AND col1 IS NULL FOR UPDATE`).
#![allow(missing_debug_implementations)]

use std::marker::PhantomData;
use std::time::Duration;

use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::methods::LoadQuery;
use diesel::{QueryResult, RunQueryDsl, SelectableHelper};

use super::statements::{ClaimParts, ClaimSql, ClaimablePredicate};
use super::{Claimable, Keyed};
use crate::backend::{in_transaction, Dialect, SqlDialect};
use crate::claim::ClaimDialect;
use crate::once::ClaimIfNull;
use crate::{BorrowConnection, Error, Result, Ttl};

/// How long `lock_by_pk_if_claimable`, `with_locked` and their `_if_null` forms
/// wait for a concurrent holder of the row before [`Error::Timeout`]: 30 seconds. The `_within`
/// functions of this module take another bound. MySQL/MariaDB count the lock wait in whole
/// seconds (rounded up).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30);

/// `SELECT <model> FROM t WHERE <pk> AND (<qualifies>) FOR UPDATE` (no `FOR UPDATE` on SQLite,
/// whose write lock the statement takes first).
#[doc(hidden)]
pub struct KeyLockStmt<M: Keyed + diesel::Selectable<DB>, DB: diesel::backend::Backend, P> {
    table: M::Table,
    select: diesel::dsl::AsSelect<M, DB>,
    pk: M::PkFilter,
    qualifies: P,
    _db: PhantomData<DB>,
}

impl<M: Keyed + diesel::Selectable<DB>, DB: diesel::backend::Backend, P> QueryId
    for KeyLockStmt<M, DB, P>
{
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<M, DB, P> Query for KeyLockStmt<M, DB, P>
where
    M: Keyed + diesel::Selectable<DB>,
    DB: diesel::backend::Backend,
{
    type SqlType = diesel::dsl::AsSelect<M, DB>;
}

impl<M, DB, P> QueryFragment<DB> for KeyLockStmt<M, DB, P>
where
    M: Keyed + diesel::Selectable<DB>,
    DB: SqlDialect,
    M::Table: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    diesel::dsl::AsSelect<M, DB>: QueryFragment<DB>,
    P: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        self.select.walk_ast(out.reborrow())?;
        out.push_sql(" FROM ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        self.pk.walk_ast(out.reborrow())?;
        out.push_sql(" AND (");
        self.qualifies.walk_ast(out.reborrow())?;
        out.push_sql(")");
        out.push_sql(DB::FOR_UPDATE);
        Ok(())
    }
}

impl<M: Keyed + diesel::Selectable<DB>, DB: diesel::backend::Backend, P, Conn> RunQueryDsl<Conn>
    for KeyLockStmt<M, DB, P>
{
}

/// `<guard> IS NULL`: a guarded row qualifies while its guard is unset.
#[doc(hidden)]
pub struct ColumnIsNull(&'static str);

impl<DB: diesel::backend::Backend> QueryFragment<DB> for ColumnIsNull {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_identifier(self.0)?;
        out.push_sql(" IS NULL");
        Ok(())
    }
}

/// SQLite's stand-in for a row lock on any keyed table: `UPDATE t SET pk = pk WHERE 1 = 0`, a
/// write that matches nothing but takes the database write lock.
#[doc(hidden)]
pub struct WriteNothing<M: Keyed>(M::Table);

impl<M, DB> QueryFragment<DB> for WriteNothing<M>
where
    M: Keyed,
    M::Table: QueryFragment<DB>,
    DB: diesel::backend::Backend,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let pk = M::PK.first().copied().ok_or_else(|| {
            diesel::result::Error::QueryBuilderError("a keyed model without key columns".into())
        })?;
        out.push_sql("UPDATE ");
        self.0.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(pk)?;
        out.push_sql(" = ");
        out.push_identifier(pk)?;
        out.push_sql(" WHERE 1 = 0");
        Ok(())
    }
}

/// Runs the waiting lock `stmt` on `conn`, inside the caller's transaction, with lock waits
/// bounded by `wait`.
fn lock_key<M, C, P>(
    conn: &mut C,
    stmt: KeyLockStmt<M, C::Backend, P>,
    wait: Duration,
) -> QueryResult<Option<M>>
where
    M: Keyed + diesel::Selectable<C::Backend>,
    C: Dialect,
    WriteNothing<M>: QueryFragment<C::Backend>,
    for<'a> KeyLockStmt<M, C::Backend, P>: LoadQuery<'a, C, M>,
{
    if !in_transaction(conn)? {
        // The row lock would end with the statement, and nothing would hold it for the decision.
        return Err(diesel::result::Error::NotInTransaction);
    }
    conn.bounded_lock_wait(wait, |c| {
        c.take_write_lock(&WriteNothing::<M>(M::Table::default()))?;
        Ok(stmt.load(c)?.into_iter().next())
    })
}

/// The bounds under which a connection can take seed 002's waiting lock on rows of a
/// [`Claimable`] model `M`; you never implement it.
pub trait ClaimableLockConnection<M: Claimable>: ClaimDialect {
    /// Locks row `pk` if it is in a ready state, waiting at most `wait` for its holder.
    #[doc(hidden)]
    fn lock_claimable_key(&mut self, pk: M::Pk, wait: Duration) -> QueryResult<Option<M>>;
}

impl<M, C> ClaimableLockConnection<M> for C
where
    M: Claimable + ClaimSql<C::Backend> + diesel::Selectable<C::Backend>,
    C: ClaimDialect,
    WriteNothing<M>: QueryFragment<C::Backend>,
    for<'a> KeyLockStmt<M, C::Backend, ClaimablePredicate<M, C::Backend>>: LoadQuery<'a, C, M>,
{
    fn lock_claimable_key(&mut self, pk: M::Pk, wait: Duration) -> QueryResult<Option<M>> {
        let stmt = KeyLockStmt {
            table: M::Table::default(),
            select: M::as_select(),
            pk: M::pk_filter(pk),
            // No owner, no stale-claim timeout: only the ready states qualify.
            qualifies: ClaimablePredicate(ClaimParts::new("", None)),
            _db: PhantomData,
        };
        lock_key(self, stmt, wait)
    }
}

/// The bounds under which a connection can take seed 002's waiting lock on rows of a
/// [`ClaimIfNull`] model `M`; you never implement it.
pub trait NullLockConnection<M: ClaimIfNull>: ClaimDialect {
    /// Locks row `pk` if its guard is still `NULL`, waiting at most `wait` for its holder.
    #[doc(hidden)]
    fn lock_null_key(&mut self, pk: M::Pk, wait: Duration) -> QueryResult<Option<M>>;
}

impl<M, C> NullLockConnection<M> for C
where
    M: ClaimIfNull + diesel::Selectable<C::Backend>,
    C: ClaimDialect,
    WriteNothing<M>: QueryFragment<C::Backend>,
    for<'a> KeyLockStmt<M, C::Backend, ColumnIsNull>: LoadQuery<'a, C, M>,
{
    fn lock_null_key(&mut self, pk: M::Pk, wait: Duration) -> QueryResult<Option<M>> {
        let stmt = KeyLockStmt {
            table: M::Table::default(),
            select: M::as_select(),
            pk: M::pk_filter(pk),
            qualifies: ColumnIsNull(M::NULL_COLUMN),
            _db: PhantomData,
        };
        lock_key(self, stmt, wait)
    }
}

fn lock_wait(wait: Duration) -> Result<Duration> {
    Ok(Ttl::new("lock wait", wait)?.as_duration())
}

/// Locks the row with primary key `pk` for the caller's transaction if it is in a ready state,
/// waiting (up to [`DEFAULT_LOCK_WAIT`]) for a transaction that holds it; `None` when the row
/// does not qualify, including when the holder changed it while this call waited. What
/// `ClaimDsl::lock_by_pk_if_claimable(conn, pk)` calls.
///
/// Call it inside a transaction (or use [`with_locked`]): outside one it is refused with
/// Diesel's `NotInTransaction` (as [`Error::Database`]), because the lock would end at once. A
/// wait that runs out is [`Error::Timeout`]; on PostgreSQL the caller's transaction is then
/// aborted and must be rolled back. On SQLite call it first in the transaction: the lock is the
/// database write lock, and a transaction that read before is refused it at once
/// (`SQLITE_BUSY`, also [`Error::Timeout`]) instead of waiting.
///
/// Holding the lock while calling an external service holds every writer of the row (and on
/// SQLite of the database) for as long as the call takes: seed 002's own advice is to prefer a
/// guard then (`claim_if_null`, which marks the row in one short statement and lets the call
/// run outside any transaction). Use the waiting lock when the decision needs the row's current
/// data and the work in the transaction is short, database work.
pub fn lock_by_pk_if_claimable<M, C>(conn: &mut C, pk: M::Pk) -> Result<Option<M>>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimableLockConnection<M>,
{
    lock_by_pk_if_claimable_within(conn, pk, DEFAULT_LOCK_WAIT)
}

/// [`lock_by_pk_if_claimable`] waiting at most `wait` (zero is refused with
/// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration)).
pub fn lock_by_pk_if_claimable_within<M, C>(
    conn: &mut C,
    pk: M::Pk,
    wait: Duration,
) -> Result<Option<M>>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimableLockConnection<M>,
{
    let wait = lock_wait(wait)?;
    conn.borrow_connection()
        .lock_claimable_key(pk, wait)
        .map_err(Error::from)
}

/// Locks row `pk` if it is in a ready state ([`lock_by_pk_if_claimable`]) and runs `work` on it
/// in one transaction: commits when `work` returns `Ok`, rolls back when it returns `Err`.
/// `Ok(None)` without calling `work` when the row does not qualify (after waiting for its
/// holder). On SQLite the transaction is `BEGIN IMMEDIATE`, which waits for the write lock
/// within the same bound.
pub fn with_locked<M, C, T, E, W>(conn: &mut C, pk: M::Pk, work: W) -> Result<Option<T>, E>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimableLockConnection<M>,
    E: From<diesel::result::Error>,
    W: FnOnce(&mut C::Conn, M) -> Result<T, E>,
{
    locked_transaction(
        conn.borrow_connection(),
        |c, wait| c.lock_claimable_key(pk, wait),
        work,
    )
}

/// Locks the row with primary key `pk` for the caller's transaction if its guard column is
/// still `NULL` — seed 002's `SELECT * FROM table1 WHERE id = $id AND col1 IS NULL FOR UPDATE`
/// — waiting (up to [`DEFAULT_LOCK_WAIT`]) for a transaction that holds it; `None` when the
/// guard is set, including by the holder this call waited for. What the generated
/// `Model::lock_by_pk_if_null(conn, pk)` calls; otherwise as [`lock_by_pk_if_claimable`].
///
/// Seed 002's transaction on PostgreSQL: the first lock gets the row and sets `col1`; once that
/// committed, the row no longer qualifies:
///
/// ```
/// # #[cfg(feature = "postgres")] {
/// # mod setup { include!("../doctest_pg.rs"); }
/// # use setup::pg_connection;
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! { table1 (id) { id -> BigInt, col1 -> Nullable<Text>, } }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = table1)]
/// #[claimable(claim_if_null = col1)]
/// struct Table1 {
///     id: i64,
///     col1: Option<String>,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let Some(mut conn) = pg_connection() else { return Ok(()) };
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE table1 (id BIGINT PRIMARY KEY, col1 TEXT NULL); INSERT INTO table1 VALUES (1, NULL);")?;
/// let first = conn.transaction::<_, diesel_lease::Error, _>(|conn| {
///     let Some(row) = Table1::lock_by_pk_if_null(conn, 1)? else { return Ok(false) };
///     // … the external call, under the row lock …
///     diesel::update(table1::table.find(row.id)).set(table1::col1.eq("sent")).execute(conn)?;
///     Ok(true)
/// })?;
/// assert!(first);
/// let again = conn.transaction(|conn| Table1::lock_by_pk_if_null(conn, 1))?;
/// assert!(again.is_none(), "col1 is set: the row no longer qualifies");
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub fn lock_by_pk_if_null<M, C>(conn: &mut C, pk: M::Pk) -> Result<Option<M>>
where
    M: ClaimIfNull,
    C: BorrowConnection,
    C::Conn: NullLockConnection<M>,
{
    lock_by_pk_if_null_within(conn, pk, DEFAULT_LOCK_WAIT)
}

/// [`lock_by_pk_if_null`] waiting at most `wait` (zero is refused with
/// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration)).
pub fn lock_by_pk_if_null_within<M, C>(conn: &mut C, pk: M::Pk, wait: Duration) -> Result<Option<M>>
where
    M: ClaimIfNull,
    C: BorrowConnection,
    C::Conn: NullLockConnection<M>,
{
    let wait = lock_wait(wait)?;
    conn.borrow_connection()
        .lock_null_key(pk, wait)
        .map_err(Error::from)
}

/// Locks row `pk` if its guard is still `NULL` ([`lock_by_pk_if_null`]) and runs `work` on it in
/// one transaction, as [`with_locked`].
pub fn with_locked_if_null<M, C, T, E, W>(conn: &mut C, pk: M::Pk, work: W) -> Result<Option<T>, E>
where
    M: ClaimIfNull,
    C: BorrowConnection,
    C::Conn: NullLockConnection<M>,
    E: From<diesel::result::Error>,
    W: FnOnce(&mut C::Conn, M) -> Result<T, E>,
{
    locked_transaction(
        conn.borrow_connection(),
        |c, wait| c.lock_null_key(pk, wait),
        work,
    )
}

/// `work` on the row `lock` returns, in one write transaction whose own lock wait (SQLite) shares
/// the bound [`DEFAULT_LOCK_WAIT`]; `Ok(None)` without `work` when `lock` finds no row.
fn locked_transaction<M, C, T, E, W>(
    conn: &mut C,
    lock: impl FnOnce(&mut C, Duration) -> QueryResult<Option<M>>,
    work: W,
) -> Result<Option<T>, E>
where
    C: ClaimDialect,
    E: From<diesel::result::Error>,
    W: FnOnce(&mut C, M) -> Result<T, E>,
{
    let wait = DEFAULT_LOCK_WAIT;
    conn.lock_tx_within(wait, |c| match lock(c, wait)? {
        Some(row) => work(c, row).map(Some),
        None => Ok(None),
    })
}
