//! The connections diesel-lease runs on, and everything that differs between their backends.
//!
//! Operations (claims, guards, leases, semaphores) are written once, against two sealed traits
//! that each backend implements in its own file (`postgres.rs`, `sqlite.rs`, `mysql.rs`):
//!
//! - [`SqlDialect`], on Diesel's backend type (`Pg`, `Sqlite`, `Mysql`): how SQL text differs —
//!   the database clock, `FOR UPDATE SKIP LOCKED` or nothing, integer division.
//! - [`Dialect`], on the connection type: how behaviour differs — the write transaction, the
//!   statements that need a feature one backend lacks (`UPDATE … RETURNING`, `ON CONFLICT`,
//!   `LISTEN/NOTIFY`), and how the server's errors are sorted into [`crate::Error`].
//!
//! A new backend implements both in a new file; a new operation is written once against them.

use std::time::Duration;

use diesel::backend::Backend;
use diesel::connection::{AnsiTransactionManager, LoadConnection};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::r2d2::{ConnectionManager, PooledConnection, R2D2Connection};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::{Connection, QueryResult};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness};
pub use lease_core::BackendKind;
use lease_core::{Backoff, InsertOutcome};

use crate::claim::statements::{
    load_shaped, reap, shape, ClaimModel, ClaimParts, ClaimSql, ClaimStmt, Filter,
};
use crate::lease::statements::LeaseStatements;
use crate::once::RunInsertOnce;
use crate::semaphore::statements::SemaphoreStatements;
use crate::Error;

#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub(crate) mod sealed {
    /// Seals [`LeaseConnection`](super::LeaseConnection) and the dialect traits.
    pub trait Sealed {}
}

/// A raw Diesel connection of a backend diesel-lease supports: `PgConnection`, `SqliteConnection`
/// or `MysqlConnection`, each behind its Cargo feature.
///
/// Sealed: the backend-specific SQL of every operation is written and tested for these three.
pub trait LeaseConnection: Dialect {
    /// Runs `f` in the transaction kind that makes read-then-write safe on this backend: READ
    /// COMMITTED on PostgreSQL and MySQL (so InnoDB takes no gap locks and `SKIP LOCKED` claims
    /// do not deadlock on the index they update), `BEGIN IMMEDIATE` after this process's writer
    /// turn on SQLite (so the write lock is taken up front and concurrent writers wait on the
    /// busy timeout instead of failing). Inside an open transaction it becomes a savepoint of the
    /// caller's transaction, at the caller's isolation level.
    fn write_transaction<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        self.write_tx(f)
    }
}

/// How SQL text differs between backends (implemented for `Pg`, `Sqlite` and `Mysql`).
///
/// Sealed; its items are internal and carry no stability promise.
// `Default` (for the backend and its query builder): a statement can be rendered to text without a
// connection, as the label of a claim table's wake-ups (`claim/wait.rs`).
pub trait SqlDialect: Backend<QueryBuilder: Default> + Default + sealed::Sealed {
    /// Which backend.
    const KIND: BackendKind;
    /// What a `SELECT` appends to lock the rows it returns, skipping rows other transactions
    /// hold (empty where the backend has no row locks: SQLite).
    #[doc(hidden)]
    const SKIP_LOCKED: &'static str;
    /// Integer division (MySQL's `/` yields a decimal).
    #[doc(hidden)]
    const INT_DIV: &'static str;
    /// What a `SELECT` appends to lock the rows it returns, waiting for transactions that hold
    /// them (` FOR UPDATE`; empty on SQLite, whose write lock is taken by a statement of its own).
    #[doc(hidden)]
    const FOR_UPDATE: &'static str;

    /// The database's current time in microseconds since 1970, as a `BIGINT`.
    #[doc(hidden)]
    fn push_now_micros(out: &mut AstPass<'_, '_, Self>);
    /// The database's current time as a timestamp: an instant when `with_time_zone` (PostgreSQL
    /// `timestamptz`), else the wall-clock time in UTC, whatever the session's time zone.
    #[doc(hidden)]
    fn push_now(out: &mut AstPass<'_, '_, Self>, with_time_zone: bool);
    /// The database's current time plus `offset` (negative: minus), as [`push_now`](Self::push_now).
    #[doc(hidden)]
    fn push_now_offset<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        offset: &'b crate::clock::Offset,
        with_time_zone: bool,
    ) -> QueryResult<()>;

    /// The latest instant the stored value of timestamp column `column` can stand for, to
    /// compare with a deadline (`<upper> <= now - timeout`) so nothing acts early whatever the
    /// column's precision: a `DATETIME` or `timestamp(0)` column truncates (MariaDB) or rounds
    /// (MySQL 8, PostgreSQL) what diesel-lease writes to whole seconds, so its value can be up
    /// to one unit of its precision earlier than the real time (the unit:
    /// `clock::push_apparent_unit`). SQLite stores the text written, unchanged, but its clock
    /// reads whole milliseconds: its bound is the value plus 1 ms. The default is the column
    /// itself.
    #[doc(hidden)]
    fn push_stored_upper_bound(out: &mut AstPass<'_, '_, Self>, column: &str) -> QueryResult<()> {
        out.push_identifier(column)
    }

    /// The claim in one statement: `UPDATE` the rows `stmt` picks and return them. Backends
    /// without `UPDATE … RETURNING` (MySQL) keep this default, which refuses, and claim in
    /// several statements instead (their `Dialect::claim_rows`).
    #[doc(hidden)]
    fn push_claim<'b, M: ClaimSql<Self>>(
        _out: &mut AstPass<'_, 'b, Self>,
        _stmt: &'b ClaimStmt<'_, M, Self>,
    ) -> QueryResult<()> {
        Err(DieselError::QueryBuilderError(
            "this backend has no UPDATE … RETURNING; its claims use several statements".into(),
        ))
    }

    /// Integer column `column` as a `BIGINT` (a control table's ticket may be an `INT`).
    #[doc(hidden)]
    fn push_as_bigint(out: &mut AstPass<'_, '_, Self>, column: &str) -> QueryResult<()> {
        out.push_sql("CAST(");
        out.push_identifier(column)?;
        out.push_sql(" AS BIGINT)");
        Ok(())
    }

    /// Binds a `BIGINT`.
    #[doc(hidden)]
    fn bind_i64<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b i64) -> QueryResult<()>;
    /// Binds a nullable `BIGINT`.
    #[doc(hidden)]
    fn bind_opt_i64<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b Option<i64>) -> QueryResult<()>;
    /// Binds a text value.
    #[doc(hidden)]
    fn bind_str<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b str) -> QueryResult<()>;
    /// Binds a nullable text value.
    #[doc(hidden)]
    fn bind_opt_str<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b Option<String>) -> QueryResult<()>;
}

/// Implements the bind helpers of [`SqlDialect`] (the same on every backend).
macro_rules! binds {
    () => {
        fn bind_i64<'b>(
            out: &mut diesel::query_builder::AstPass<'_, 'b, Self>,
            v: &'b i64,
        ) -> diesel::QueryResult<()> {
            out.push_bind_param::<diesel::sql_types::BigInt, _>(v)
        }
        fn bind_opt_i64<'b>(
            out: &mut diesel::query_builder::AstPass<'_, 'b, Self>,
            v: &'b Option<i64>,
        ) -> diesel::QueryResult<()> {
            out.push_bind_param::<diesel::sql_types::Nullable<diesel::sql_types::BigInt>, _>(v)
        }
        fn bind_str<'b>(
            out: &mut diesel::query_builder::AstPass<'_, 'b, Self>,
            v: &'b str,
        ) -> diesel::QueryResult<()> {
            out.push_bind_param::<diesel::sql_types::Text, _>(v)
        }
        fn bind_opt_str<'b>(
            out: &mut diesel::query_builder::AstPass<'_, 'b, Self>,
            v: &'b Option<String>,
        ) -> diesel::QueryResult<()> {
            out.push_bind_param::<diesel::sql_types::Nullable<diesel::sql_types::Text>, _>(v)
        }
    };
}
pub(crate) use binds;

/// How behaviour differs between backends (implemented for `PgConnection`, `SqliteConnection`
/// and `MysqlConnection`). Every operation is written once against it.
///
/// Sealed; its items are internal and carry no stability promise.
pub trait Dialect:
    Connection<Backend: SqlDialect, TransactionManager = AnsiTransactionManager>
    + LoadConnection
    + MigrationHarness<Self::Backend>
    + LeaseStatements
    + SemaphoreStatements
    + crate::admin::AdminStatements
    + Send
    + Sized
    + 'static
    + sealed::Sealed
{
    /// Which backend this connection talks to.
    const KIND: BackendKind;

    /// The built-in tables' migrations for this backend.
    #[doc(hidden)]
    const MIGRATIONS: EmbeddedMigrations;

    /// Whether the backend delivers [`SemaphoreStatements::notify`] to listening connections
    /// (then a pool's waiters share one listener connection; elsewhere they only poll).
    #[doc(hidden)]
    const NOTIFICATIONS: bool = false;

    /// The backend's write transaction; see [`LeaseConnection::write_transaction`].
    #[doc(hidden)]
    fn write_tx<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>;

    /// [`Dialect::write_tx`] outside the caller's transaction, with every wait for a lock inside
    /// it bounded by `max_wait` (`None`: the server's own bound): PostgreSQL `SET LOCAL
    /// lock_timeout`, MySQL `innodb_lock_wait_timeout` for the transaction (whole seconds, at
    /// least 1, restored after), SQLite the writer turn and the busy timeout. A wait that runs
    /// out fails with a lock-timeout error, which classifies as [`Error::Timeout`].
    #[doc(hidden)]
    fn write_tx_within<T>(
        &mut self,
        max_wait: Option<Duration>,
        f: impl FnOnce(&mut Self) -> crate::Result<T>,
    ) -> crate::Result<T>;

    /// Runs one autocommit write statement: as it is on PostgreSQL and MySQL; on SQLite inside
    /// the writer turn and `BEGIN IMMEDIATE`, so it waits for a busy database instead of failing.
    #[doc(hidden)]
    fn single_write<T>(&mut self, f: impl FnOnce(&mut Self) -> QueryResult<T>) -> QueryResult<T> {
        f(self)
    }

    /// Runs one write of rows picked by key (an owner-checked `complete`, a heartbeat): as it is
    /// on PostgreSQL and SQLite; on MySQL at READ COMMITTED (set for that one statement when it
    /// runs outside a transaction), like claims, so it takes no gap locks.
    #[doc(hidden)]
    fn keyed_write<T>(&mut self, f: impl FnOnce(&mut Self) -> QueryResult<T>) -> QueryResult<T> {
        f(self)
    }

    /// Applies [`ConnectionTuning`](crate::pool::ConnectionTuning) to a new connection.
    #[doc(hidden)]
    fn tune(&mut self, _tuning: &crate::pool::ConnectionTuning) -> QueryResult<()> {
        Ok(())
    }

    /// The SQL of [`Dialect::claim_rows`]'s claim statement, with its bind values (Diesel's
    /// `debug_query` format), for review and tests. On MySQL: the statement that picks the rows.
    #[doc(hidden)]
    fn claim_sql<M: ClaimSql<Self::Backend>>(
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
    ) -> String;

    /// Claims up to `limit` rows, reaping exhausted stale claims first when the model asks for it
    /// (same transaction). By default one `UPDATE … RETURNING` statement in the shape of
    /// [`SqlDialect::push_claim`], as one autocommit write when there is nothing to reap.
    #[doc(hidden)]
    /// `F` is the filter's query id ([`NoFilter`] when `filter` is `None`).
    fn claim_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Self::Backend>,
    ) -> QueryResult<Vec<M>> {
        let stmt = ClaimStmt::new(parts, limit, filter);
        let load = |c: &mut Self| {
            load_shaped::<M, Self, shape::Claim, F>(c, &stmt, parts.rescues(), limit == 1)
        };
        if !parts.needs_reap() {
            return self.single_write(load);
        }
        self.write_tx(|c| {
            reap(c, parts)?;
            load(c)
        })
    }

    /// Finishes the rows of a batch that are still this worker's claims and returns them (as
    /// they are now). By default one `UPDATE … RETURNING`.
    #[doc(hidden)]
    fn finish_rows<M: ClaimModel<Self>>(
        &mut self,
        rows: &[crate::claim::batch::BatchRow<M>],
        to: crate::claim::Finish,
    ) -> QueryResult<Vec<M>> {
        crate::claim::batch::update_returning(self, rows, to)
    }

    /// Selects up to `limit` claimable rows and keeps them locked for the caller's transaction,
    /// skipping locked ones.
    #[doc(hidden)]
    fn lock_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Self::Backend>,
    ) -> QueryResult<Vec<M>> {
        load_shaped::<M, Self, shape::Pick, F>(
            self,
            &crate::claim::statements::PickStmt::locking(parts, limit, filter),
            parts.rescues(),
            limit == 1,
        )
    }

    /// Runs `f` (a statement that may wait for a lock) with the backend's lock wait bounded by
    /// `wait` (at least 1 ms), and puts the previous bound back after it: PostgreSQL
    /// `lock_timeout` (`set_config(…, true)`, local to the transaction, so an error that aborts
    /// it also drops the setting), MySQL `innodb_lock_wait_timeout` for the session (whole
    /// seconds, rounded up), SQLite `busy_timeout`. Running out is the backend's timeout error,
    /// which classifies as [`Error::Timeout`].
    #[doc(hidden)]
    fn bounded_lock_wait<T>(
        &mut self,
        wait: Duration,
        f: impl FnOnce(&mut Self) -> QueryResult<T>,
    ) -> QueryResult<T>;

    /// Takes the lock that stands in for row locks where the backend has none, before a locking
    /// read: SQLite runs `write_nothing` (a write that matches no row but takes the database write
    /// lock); backends with row locks do nothing (their `FOR UPDATE` locks the row).
    #[doc(hidden)]
    fn take_write_lock(
        &mut self,
        _write_nothing: &dyn QueryFragment<Self::Backend>,
    ) -> QueryResult<()> {
        Ok(())
    }

    /// Installs on `table` a trigger that announces inserted rows to listening waiters
    /// (`claim/wait.rs`); where the backend has no notifications it does nothing (the waiters
    /// poll).
    #[doc(hidden)]
    fn install_ready_trigger(
        &mut self,
        _table: &dyn QueryFragment<Self::Backend>,
    ) -> QueryResult<()> {
        Ok(())
    }

    /// [`write_tx`](Dialect::write_tx) for work that starts with a bounded waiting lock (seed
    /// 002's `with_locked`), in the caller's error type and also inside the caller's transaction:
    /// where the transaction itself waits for the lock (SQLite's writer turn and `BEGIN
    /// IMMEDIATE`), that wait is bounded by `wait` too; elsewhere the lock statement bounds its
    /// own wait ([`bounded_lock_wait`](Dialect::bounded_lock_wait)).
    #[doc(hidden)]
    fn lock_tx_within<T, E, F>(&mut self, _wait: Duration, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        self.write_tx(f)
    }

    /// Inserts a row a unique constraint lets exist once; a duplicate is `AlreadyExists` and
    /// leaves the caller's transaction usable.
    #[doc(hidden)]
    fn insert_once<I, R>(&mut self, insert: I) -> QueryResult<InsertOutcome<R::Output>>
    where
        I: QueryFragment<Self::Backend> + QueryId,
        R: RunInsertOnce<Self, I>,
    {
        R::run(self, insert)
    }
}

/// Anything that can lend a [`LeaseConnection`]: the raw connection itself, or an r2d2
/// `PooledConnection` of one. Every diesel-lease entry point takes `&mut impl BorrowConnection`,
/// so `&mut conn` works whether `conn` came from `establish` or from a pool.
pub trait BorrowConnection {
    /// The raw connection type.
    type Conn: LeaseConnection;
    /// The raw connection.
    fn borrow_connection(&mut self) -> &mut Self::Conn;
}

impl<C> BorrowConnection for PooledConnection<ConnectionManager<C>>
where
    C: LeaseConnection + R2D2Connection,
{
    type Conn = C;
    fn borrow_connection(&mut self) -> &mut C {
        self
    }
}

/// Seals a raw connection type and implements [`BorrowConnection`] for it.
macro_rules! raw_connection {
    ($conn:ty) => {
        impl crate::backend::sealed::Sealed for $conn {}
        impl crate::backend::BorrowConnection for $conn {
            type Conn = $conn;
            fn borrow_connection(&mut self) -> &mut $conn {
                self
            }
        }
    };
}
pub(crate) use raw_connection;

/// Whether `conn` is inside a transaction (the caller's, or one of ours).
pub(crate) fn in_transaction<C>(conn: &mut C) -> QueryResult<bool>
where
    C: Connection<TransactionManager = AnsiTransactionManager>,
{
    use diesel::connection::TransactionManager;
    Ok(AnsiTransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()?
        .is_some())
}

/// Refuses to run inside the caller's transaction: leases and semaphores must commit their grant
/// at once, or other processes would not see it (and the caller's rollback would undo it).
pub(crate) fn refuse_nested<C>(conn: &mut C) -> QueryResult<()>
where
    C: Connection<TransactionManager = AnsiTransactionManager>,
{
    if in_transaction(conn)? {
        return Err(DieselError::AlreadyInTransaction);
    }
    Ok(())
}

/// A row-returning statement that runs as a fresh prepared statement every time, outside
/// Diesel's statement cache.
///
/// With libmariadb, a cached `SELECT` whose execution failed after the server had sent the
/// result's column definitions (a scan that then hit a lock wait timeout or was picked as a
/// deadlock victim) is left expecting the rest of that result: the next execution of the cached
/// statement first waits for it, and nothing ever comes. The client sits in `poll(-1)`, the
/// server shows the session asleep with its transaction open, and every worker behind that
/// transaction's locks stalls. (A lookup by primary key fails before any column definition is
/// sent and is not affected.) On MySQL, claim picks (which scan) and the batch completion's
/// locking read of the rows still ours (which waits) therefore never come from the cache; the
/// cost is one prepare and one close per execution.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "mysql"), allow(dead_code))] // what the MySQL statements need
pub(crate) struct Uncached<Q>(pub(crate) Q);

impl<Q> QueryId for Uncached<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: diesel::query_builder::Query> diesel::query_builder::Query for Uncached<Q> {
    type SqlType = Q::SqlType;
}

impl<Q: QueryFragment<DB>, DB: Backend> QueryFragment<DB> for Uncached<Q> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.unsafe_to_cache_prepared();
        self.0.walk_ast(out)
    }
}

/// `max_wait` in whole milliseconds, rounded up (a wait bounded by the caller's deadline ends at
/// or after it, never before), at least 1 (a lock timeout of 0 means "none" to servers).
pub(crate) fn lock_wait_millis(max_wait: Duration) -> i64 {
    i64::try_from(max_wait.as_micros().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// How many times a transaction that a deadlock or serialization failure rolled back is tried.
/// With the backoff of [`retry_conflicts`] that is up to about 2 s of retrying. The library's
/// own statements no longer deadlock with each other (a six-worker MariaDB farm used to, about
/// 2,000 times per 5,000 rows, until the claim's reap stopped waiting for locks; see
/// `claim::statements::reap_skip_locked`); what is left to retry is contention with the
/// application's own transactions.
pub(crate) const CONFLICT_ATTEMPTS: u32 = 16;

/// Runs `f` until it does not fail with a deadlock or serialization failure
/// ([`Error::Deadlock`]), at most [`CONFLICT_ATTEMPTS`] times, with jittered exponential backoff
/// between tries. Only for work the database rolled back whole (a transaction, or one
/// statement), so trying again is safe.
pub(crate) fn retry_conflicts<T>(mut f: impl FnMut() -> crate::Result<T>) -> crate::Result<T> {
    let mut pause = Backoff::new(Duration::from_millis(1), Duration::from_millis(200));
    let mut attempt = 0;
    loop {
        attempt += 1;
        match f() {
            Err(e @ Error::Deadlock { .. }) if attempt < CONFLICT_ATTEMPTS => {
                crate::observe::retried_conflict(attempt, &e);
                std::thread::sleep(pause.next_delay());
            }
            Err(Error::Deadlock { source, .. }) => {
                return Err(Error::Deadlock {
                    attempts: attempt,
                    source,
                })
            }
            other => return other,
        }
    }
}

/// What an error means to a caller, whatever the backend said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Timeout,
    ConnectionLost,
    Conflict,
}

/// Sorts a database error by what Diesel knows and by the server's message.
///
/// Diesel does not expose PostgreSQL's SQLSTATE or MySQL's error number for most errors, so the
/// servers' (English, stable) primary messages are matched; each backend file lists its own.
/// An error whose message is localized (PostgreSQL `lc_messages` other than English) arrives as
/// [`Error::Database`], unchanged.
pub(crate) fn classify_common(e: DieselError) -> Error {
    let kind = match &e {
        DieselError::DatabaseError(DatabaseErrorKind::ClosedConnection, _)
        | DieselError::DatabaseError(DatabaseErrorKind::UnableToSendCommand, _)
        | DieselError::BrokenTransactionManager => Some(Kind::ConnectionLost),
        DieselError::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => {
            Some(Kind::Conflict)
        }
        DieselError::DatabaseError(_, info) => classify_message(info.message()),
        _ => None,
    };
    match kind {
        Some(Kind::Timeout) => Error::Timeout {
            name: String::new(),
            waited: None,
            source: Some(e),
        },
        Some(Kind::ConnectionLost) => Error::ConnectionLost(e),
        Some(Kind::Conflict) => Error::Deadlock {
            attempts: 1,
            source: e,
        },
        None => Error::Database(e),
    }
}

/// The kind of the first pattern `message` contains.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn first_match(patterns: &[(&str, Kind)], message: &str) -> Option<Kind> {
    patterns
        .iter()
        .find(|(pattern, _)| message.contains(pattern))
        .map(|&(_, kind)| kind)
}

/// The message patterns of every backend compiled in (an error comes from exactly one server, and
/// the servers' messages do not overlap).
fn classify_message(message: &str) -> Option<Kind> {
    #[cfg(feature = "postgres")]
    if let Some(kind) = postgres::classify_message(message) {
        return Some(kind);
    }
    #[cfg(feature = "mysql")]
    if let Some(kind) = mysql::classify_message(message) {
        return Some(kind);
    }
    #[cfg(feature = "sqlite")]
    if let Some(kind) = sqlite::classify_message(message) {
        return Some(kind);
    }
    let _ = message;
    None
}

/// Creates or updates diesel-lease's built-in tables (leases, semaphores) on this connection.
///
/// Idempotent: already-applied migrations are skipped. Uses Diesel's own
/// `__diesel_schema_migrations` bookkeeping table, so it coexists with the application's
/// migrations.
pub fn run_migrations(conn: &mut impl BorrowConnection) -> crate::Result<()> {
    fn run<C: LeaseConnection>(conn: &mut C) -> crate::Result<()> {
        conn.run_pending_migrations(C::MIGRATIONS)
            .map(|_| ())
            .map_err(|source| Error::Migration { source })
    }
    run(conn.borrow_connection())
}
