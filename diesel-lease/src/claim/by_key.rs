//! The waiting lock by key: lock *this* row if it still qualifies, waiting for a concurrent
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
//! `with_locked_if_null`: the classic `… AND col1 IS NULL FOR UPDATE`).
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
pub(crate) const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30);

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

/// The bounds under which a connection can take the waiting lock by key on rows of a
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

/// The bounds under which a connection can take the waiting lock by key on rows of a
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

/// What [`ClaimDsl::lock_by_pk_if_claimable`](crate::dsl::ClaimDsl::lock_by_pk_if_claimable) calls.
pub(crate) fn lock_by_pk_if_claimable<M, C>(conn: &mut C, pk: M::Pk) -> Result<Option<M>>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimableLockConnection<M>,
{
    lock_by_pk_if_claimable_within(conn, pk, DEFAULT_LOCK_WAIT)
}

/// [`ClaimDsl::lock_by_pk_if_claimable`](crate::dsl::ClaimDsl::lock_by_pk_if_claimable) waiting at most `wait` (zero is refused with
/// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration)).
pub(crate) fn lock_by_pk_if_claimable_within<M, C>(
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
pub(crate) fn with_locked<M, C, T, E, W>(conn: &mut C, pk: M::Pk, work: W) -> Result<Option<T>, E>
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

/// What [`OnceDsl::lock_by_pk_if_null`](crate::dsl::OnceDsl::lock_by_pk_if_null) calls.
pub(crate) fn lock_by_pk_if_null<M, C>(conn: &mut C, pk: M::Pk) -> Result<Option<M>>
where
    M: ClaimIfNull,
    C: BorrowConnection,
    C::Conn: NullLockConnection<M>,
{
    lock_by_pk_if_null_within(conn, pk, DEFAULT_LOCK_WAIT)
}

/// [`OnceDsl::lock_by_pk_if_null`](crate::dsl::OnceDsl::lock_by_pk_if_null) waiting at most `wait` (zero is refused with
/// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration)).
pub(crate) fn lock_by_pk_if_null_within<M, C>(
    conn: &mut C,
    pk: M::Pk,
    wait: Duration,
) -> Result<Option<M>>
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
pub(crate) fn with_locked_if_null<M, C, T, E, W>(
    conn: &mut C,
    pk: M::Pk,
    work: W,
) -> Result<Option<T>, E>
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
