//! The ground floor: the connections diesel-lease runs on, and what differs between their
//! backends that is no operation's own.
//!
//! - `SqlDialect`, on Diesel's backend type (`Pg`, `Sqlite`, `Mysql`, `Mariadb`): how SQL text differs —
//!   the database clock, `FOR UPDATE SKIP LOCKED` or nothing, integer division, binds.
//! - `Dialect`, on the connection type: how behaviour differs — the write transaction, bounded
//!   lock waits, connection tuning, migrations — and, beside them, how the server's errors are
//!   sorted into [`crate::Error`] and which conflicts are retried (`retry_conflicts`).
//!
//! Nothing here knows an operation. Each operation (claims, leases, semaphores, insert-once,
//! admin) has its own trait on top of `Dialect`, implemented per backend in the operation's
//! own folder; notifications are `notify/`'s. One file per backend here: `postgres.rs`,
//! `sqlite.rs`, and `mysql_like.rs`, compiled once for `MysqlConnection` and once for
//! `MariadbConnection` (so in each operation's folder).

use std::borrow::Cow;
use std::marker::PhantomData;
use std::time::Duration;

use diesel::backend::Backend;
use diesel::connection::{AnsiTransactionManager, LoadConnection};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
#[cfg(feature = "r2d2")]
use diesel::r2d2::{ConnectionManager, PooledConnection, R2D2Connection};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::{Connection, QueryResult};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness};
pub use lease_core::BackendKind;
use lease_core::Backoff;

use crate::Error;

#[cfg(feature = "postgres")]
mod libpq;
/// MySQL 8 / MariaDB 10.6+ through Diesel's `MysqlConnection` (backend `Mysql`): row locks with
/// `SKIP LOCKED`, but no `UPDATE … RETURNING` and no `ON CONFLICT`. Claims and lease grants take
/// the fewest statements that are safe, in one READ COMMITTED transaction; a matched-rows count
/// stands in for `RETURNING` wherever the predicate holds the old state (so "one row matched"
/// means "this caller won").
#[cfg(feature = "mysql")]
mod mysql {
    type Db = diesel::mysql::Mysql;
    type Conn = diesel::MysqlConnection;
    /// Diesel's `Mysql` backend writes no `RETURNING` (MySQL has none).
    const INSERT_RETURNING: bool = false;
    include!("mysql_like.rs");
}
/// The same through Diesel's `MariadbConnection` (backend `Mariadb`, Diesel 2.4): one source,
/// compiled for each connection type. MariaDB (10.5+) has `INSERT … RETURNING`, so an insert
/// whose generated key the operation needs (a semaphore's ticket, a control table's request,
/// `insert_once`'s row) returns it in the same statement; `UPDATE … RETURNING` only came with
/// MariaDB 13, so claims and lease takeovers take the same statements as on `MysqlConnection`.
#[cfg(feature = "mariadb")]
mod mariadb {
    type Db = diesel::mariadb::Mariadb;
    type Conn = diesel::mariadb::MariadbConnection;
    const INSERT_RETURNING: bool = true;
    include!("mysql_like.rs");
}
#[cfg(feature = "postgres")]
mod postgres;
mod server;
#[cfg(feature = "sqlite")]
mod sqlite;

pub(crate) use server::check as check_engine;
#[cfg(feature = "r2d2")]
pub(crate) use server::check_url;
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::waits_after as sqlite_waits_after;

/// The PostgreSQL server `scripts/test.sh` starts (`DIESEL_LEASE_TEST_PG`), for the unit tests
/// that need one; `None` without it, which CI never allows.
#[cfg(all(test, feature = "postgres"))]
pub(crate) fn test_server_url() -> Option<String> {
    let url = std::env::var("DIESEL_LEASE_TEST_PG")
        .ok()
        .filter(|u| !u.is_empty());
    assert!(
        url.is_some() || std::env::var_os("CI").is_none(),
        "CI runs this with DIESEL_LEASE_TEST_PG"
    );
    url
}
pub use server::{check_replication, check_server, Replication, ServerEngine};

pub(crate) mod sealed {
    /// Seals the raw connection types and the dialect traits.
    pub trait Sealed {}
}

// `pub` in a private module: sealed and not named outside (the suite and the CLI reach it
// through `__private`).
pub(crate) mod sql_dialect {
    use super::*;

    /// How SQL text differs between backends (implemented for `Pg`, `Sqlite`, `Mysql` and `Mariadb`).
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
        /// Whether a claim of one of the usual batch sizes writes its `LIMIT` into the statement's
        /// text instead of binding it (`claim::statements::inline_limit`). PostgreSQL: a prepared
        /// statement whose `LIMIT` is a parameter gets a new plan on every call, since a generic
        /// plan cannot know how many rows it stops after.
        #[doc(hidden)]
        const INLINE_LIMITS: bool = false;

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
            offset: &'b Offset,
            with_time_zone: bool,
        ) -> QueryResult<()>;

        /// The latest instant the stored value of timestamp column `column` can stand for, to
        /// compare with a deadline (`<upper> <= now - timeout`) so nothing acts early whatever the
        /// column's precision: a `DATETIME` or `timestamp(0)` column truncates (MariaDB) or rounds
        /// (MySQL 8, PostgreSQL) what diesel-lease writes to whole seconds, so its value can be up
        /// to one unit of its precision earlier than the real time (the unit: `push_apparent_unit`).
        /// SQLite stores the text written, unchanged, but its clock reads whole milliseconds: its
        /// bound is the value plus 1 ms. The default is the column itself.
        #[doc(hidden)]
        fn push_stored_upper_bound(
            out: &mut AstPass<'_, '_, Self>,
            column: &str,
        ) -> QueryResult<()> {
            out.push_identifier(column)
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
        fn bind_opt_i64<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b Option<i64>)
            -> QueryResult<()>;
        /// Binds a text value.
        #[doc(hidden)]
        fn bind_str<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b str) -> QueryResult<()>;
        /// Binds a nullable text value.
        #[doc(hidden)]
        fn bind_opt_str<'b>(
            out: &mut AstPass<'_, 'b, Self>,
            v: &'b Option<std::borrow::Cow<'b, str>>,
        ) -> QueryResult<()>;
    }
}
pub(crate) use sql_dialect::SqlDialect;

// `pub` in a private module: the sealed dialect traits take it; nothing outside names it.
pub(crate) mod offset {
    use diesel::query_builder::QueryId;

    /// A signed duration in the forms the backends take it: microseconds to bind (PostgreSQL,
    /// MySQL) and a `strftime` modifier (SQLite).
    #[derive(Debug, Clone, QueryId)]
    pub struct Offset {
        /// The offset in microseconds.
        pub micros: i64,
        /// The same offset as a SQLite date modifier, such as `-300.000000 seconds`.
        pub sqlite_modifier: String,
    }
}
pub(crate) use offset::Offset;

impl Offset {
    pub(crate) fn new(micros: i64) -> Self {
        let sign = if micros < 0 { '-' } else { '+' };
        let abs = micros.unsigned_abs();
        Offset {
            micros,
            sqlite_modifier: format!("{sign}{}.{:06} seconds", abs / 1_000_000, abs % 1_000_000),
        }
    }
}

/// One unit of the precision a stored timestamp apparently has, in microseconds, from `fraction`
/// (SQL for its microseconds within the second, 0-999999):
/// `CASE WHEN f % 10 <> 0 THEN 1 WHEN f % 100 <> 0 THEN 10 … WHEN f <> 0 THEN 100000 ELSE 1000000 END`.
///
/// A column of precision `p` stores multiples of 10^-p s, so the unit read from the value's
/// trailing zeros is never smaller than the column's: a whole-second column always gives 1 s, a
/// microsecond column 1 µs (and, for the one value in ten whose last digit happens to be zero,
/// more: later, never earlier). The real instant behind a truncated or rounded value is below
/// the value plus this unit, so `value + unit <= deadline` never acts early, without reading the
/// column's declared precision from the catalog.
// Used by the backends whose columns have a precision (PostgreSQL, MySQL).
#[cfg(any(feature = "postgres", feature = "__mysql_like"))]
pub(crate) fn push_apparent_unit<DB: diesel::backend::Backend>(
    out: &mut AstPass<'_, '_, DB>,
    fraction: &dyn Fn(&mut AstPass<'_, '_, DB>) -> QueryResult<()>,
) -> QueryResult<()> {
    out.push_sql("CASE");
    for (modulus, unit) in [
        ("10", "1"),
        ("100", "10"),
        ("1000", "100"),
        ("10000", "1000"),
        ("100000", "10000"),
    ] {
        out.push_sql(" WHEN ");
        fraction(out)?;
        out.push_sql(" % ");
        out.push_sql(modulus);
        out.push_sql(" <> 0 THEN ");
        out.push_sql(unit);
    }
    out.push_sql(" WHEN ");
    fraction(out)?;
    out.push_sql(" <> 0 THEN 100000 ELSE 1000000 END");
    Ok(())
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
            v: &'b Option<std::borrow::Cow<'b, str>>,
        ) -> diesel::QueryResult<()> {
            out.push_bind_param::<diesel::sql_types::Nullable<diesel::sql_types::Text>, _>(v)
        }
    };
}
pub(crate) use binds;

// `pub` in a private module: sealed and not named outside; generic code names
// `LeaseConnection`, which implies it.
pub(crate) mod dialect {
    use super::*;

    /// How behaviour differs between backends (implemented for `PgConnection`, `SqliteConnection`,
    /// `MysqlConnection` and `MariadbConnection`). Every operation is written once against it.
    ///
    /// Sealed; its items are internal and carry no stability promise.
    pub trait Dialect:
        Connection<Backend: SqlDialect, TransactionManager = AnsiTransactionManager>
        + LoadConnection
        + MigrationHarness<Self::Backend>
        + Send
        + Sized
        + 'static
        + sealed::Sealed
        + BorrowConnection<Conn = Self>
    {
        /// The built-in tables' migrations for this backend.
        #[doc(hidden)]
        const MIGRATIONS: EmbeddedMigrations;

        /// Runs `f` in the transaction kind that makes read-then-write safe on this backend: READ
        /// COMMITTED on PostgreSQL and MySQL (so InnoDB takes no gap locks and `SKIP LOCKED` claims
        /// do not deadlock on the index they update), `BEGIN IMMEDIATE` after this process's writer
        /// turn on SQLite (so the write lock is taken up front and concurrent writers wait on the
        /// busy timeout instead of failing). Inside an open transaction it becomes a savepoint of the
        /// caller's transaction, at the caller's isolation level. Public as
        /// `LeaseConnection::write_transaction`.
        #[doc(hidden)]
        fn write_tx<T, E, F>(&mut self, f: F) -> Result<T, E>
        where
            F: FnOnce(&mut Self) -> Result<T, E>,
            E: From<DieselError>;

        /// [`write_tx`](Self::write_tx) whose body asks for its rollback by returning `Ok(None)`:
        /// nothing failed then, so nothing a failed transaction calls for is done (MySQL keeps its
        /// statement cache, which a failed transaction empties).
        #[doc(hidden)]
        fn write_tx_or_roll_back<T>(
            &mut self,
            f: impl FnOnce(&mut Self) -> QueryResult<Option<T>>,
        ) -> QueryResult<Option<T>> {
            rolled_back_as_none(self.write_tx(|c| f(c)?.ok_or(DieselError::RollbackTransaction)))
        }

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
        /// `BEGIN IMMEDIATE`, so it waits for a busy database instead of failing.
        #[doc(hidden)]
        fn single_write<T>(
            &mut self,
            f: impl FnOnce(&mut Self) -> QueryResult<T>,
        ) -> QueryResult<T> {
            f(self)
        }

        /// Runs one write of rows picked by key (an owner-checked `complete`, a heartbeat): as it is
        /// on PostgreSQL; on SQLite as one autocommit statement that waits for a busy database; on MySQL
        /// at READ COMMITTED (set for that one statement when it runs outside a transaction), like
        /// claims, so it takes no gap locks.
        #[doc(hidden)]
        fn keyed_write<T>(
            &mut self,
            mut f: impl FnMut(&mut Self) -> QueryResult<T>,
        ) -> QueryResult<T> {
            f(self)
        }

        /// `url` with the client-side network settings this backend's driver takes from it added,
        /// where the URL does not set them (what `pool::build_pool` connects with; see
        /// `pool::with_network_settings`): PostgreSQL libpq's TCP keepalives, `tcp_user_timeout`
        /// and `connect_timeout`. SQLite has no network; Diesel's MySQL URL takes no such setting.
        #[doc(hidden)]
        fn with_network_settings(url: &str) -> Cow<'_, str> {
            Cow::Borrowed(url)
        }

        /// Prepares a new connection for concurrent use (what `pool::ConnectionTuning` applies):
        /// SQLite's `busy_timeout` (and WAL), MySQL's idle timeout (`None`: the server's).
        #[doc(hidden)]
        fn tune(
            &mut self,
            _busy_timeout: Duration,
            _mysql_idle_timeout: Option<Duration>,
        ) -> QueryResult<()> {
            Ok(())
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

        /// Runs `f`, a one-statement write of rows only the caller writes (a semaphore waiter's own
        /// row), waiting at most `wait` for a busy database where a writer holds the whole file:
        /// SQLite bounds its busy timeout ([`bounded_lock_wait`](Dialect::bounded_lock_wait)), which
        /// otherwise keeps the caller waiting for as long as another writer holds the file (30 s by
        /// default). On backends with row locks it runs as it is: a row lock is held only for
        /// another transaction's short work on that row.
        #[doc(hidden)]
        fn bounded_busy_wait<T>(
            &mut self,
            _wait: Duration,
            f: impl FnOnce(&mut Self) -> QueryResult<T>,
        ) -> QueryResult<T> {
            f(self)
        }

        /// The server behind this connection, from its version string (PostgreSQL `version()`,
        /// MySQL `VERSION()`, in a statement Diesel does not cache); SQLite is always SQLite.
        #[doc(hidden)]
        fn server_engine(&mut self) -> QueryResult<ServerEngine>;

        /// How the server passes on what it commits ([`check_replication`]); `Replication::Single`
        /// where the backend has nothing to ask.
        #[doc(hidden)]
        fn replication(&mut self) -> QueryResult<Replication> {
            Ok(Replication::Single)
        }

        /// The server session this connection's statements run in now (PostgreSQL's backend pid and
        /// the server's start time; not from Diesel's statement cache), to see a transaction pooler
        /// by; `None` where the backend has none to compare.
        #[doc(hidden)]
        fn server_session(&mut self) -> QueryResult<Option<String>> {
            Ok(None)
        }

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
    }
}
pub(crate) use dialect::Dialect;

/// How long a SQLite writer waits for the write lock by default (a connection that set none,
/// and `pool::ConnectionTuning`'s default).
pub(crate) const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Anything that can lend a raw connection (a `LeaseConnection`): the raw connection itself, or an r2d2
/// `PooledConnection` of one. Every diesel-lease entry point takes `&mut impl BorrowConnection`,
/// so `&mut conn` works whether `conn` came from `establish` or from a pool.
pub trait BorrowConnection {
    /// The raw connection type (every operation adds what it needs of it; `LeaseConnection`
    /// has it all).
    type Conn: Dialect;
    /// The raw connection.
    fn borrow_connection(&mut self) -> &mut Self::Conn;
}

#[cfg(feature = "r2d2")]
impl<C> BorrowConnection for PooledConnection<ConnectionManager<C>>
where
    C: Dialect + R2D2Connection,
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

/// What MySQL's and MariaDB's connections share beyond [`Dialect`] (implemented for
/// `MysqlConnection` and `MariadbConnection` in `mysql_like.rs`).
#[cfg(feature = "__mysql_like")]
pub(crate) trait MysqlLike: Dialect<Backend: diesel::mysql_like::MysqlLikeBackend> {
    /// Whether inserts may end in `RETURNING` (MariaDB's backend; not MySQL's).
    const INSERT_RETURNING: bool;

    /// The auto-increment value the connection's last insert generated.
    fn inserted_id(&mut self) -> QueryResult<i64>;

    /// Runs `insert` and returns the `BIGINT` value the database generated for `column`: in the
    /// same statement (`RETURNING`) where the backend has it, else from `LAST_INSERT_ID()`.
    fn insert_returning_id<I>(&mut self, insert: I, column: &'static str) -> QueryResult<i64>
    where
        I: QueryFragment<Self::Backend> + QueryId,
    {
        if Self::INSERT_RETURNING {
            return diesel::RunQueryDsl::get_result(ReturningColumn { insert, column }, self);
        }
        self.execute_returning_count(&insert)?;
        self.inserted_id()
    }
}

/// `<insert> RETURNING <column>`, the column a `BIGINT` the database generates.
#[cfg(feature = "__mysql_like")]
struct ReturningColumn<I> {
    insert: I,
    column: &'static str,
}

#[cfg(feature = "__mysql_like")]
impl<I> QueryId for ReturningColumn<I> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

#[cfg(feature = "__mysql_like")]
impl<I: QueryFragment<DB>, DB: Backend> QueryFragment<DB> for ReturningColumn<I> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.insert.walk_ast(out.reborrow())?;
        out.push_sql(" RETURNING ");
        out.push_identifier(self.column)
    }
}

#[cfg(feature = "__mysql_like")]
impl<I> diesel::query_builder::Query for ReturningColumn<I> {
    type SqlType = diesel::sql_types::BigInt;
}

#[cfg(feature = "__mysql_like")]
impl<I, C> diesel::RunQueryDsl<C> for ReturningColumn<I> {}

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

/// How a backend opens and ends the transactions [`own_transaction`] runs: statements of our
/// own, cheaper than Diesel's (each of which goes through `batch_execute`).
#[cfg(any(feature = "__mysql_like", feature = "sqlite"))]
pub(crate) trait TransactionEnds:
    Connection<TransactionManager = AnsiTransactionManager>
{
    /// Opens the transaction.
    fn begin(&mut self) -> QueryResult<()>;
    /// Commits it. On failure the transaction may still be open: [`own_transaction`] rolls it
    /// back.
    fn commit(&mut self) -> QueryResult<()>;
    /// Rolls it back; `Ok` too when the server had already ended it.
    fn rollback(&mut self) -> QueryResult<()>;
}

/// Runs `f` in a new transaction, as Diesel's `Connection::transaction` runs one (commit on
/// `Ok`, rollback on `Err`), with the backend's own [`TransactionEnds`], and keeps the depth of
/// Diesel's transaction manager as Diesel does, so that `f` sees itself in a transaction and can
/// nest savepoints. A rollback that fails leaves a transaction nothing can end: the transaction
/// manager is marked broken, as Diesel marks it, and the pool drops the connection.
#[cfg(any(feature = "__mysql_like", feature = "sqlite"))]
pub(crate) fn own_transaction<C, T, E, F>(c: &mut C, f: F) -> Result<T, E>
where
    C: TransactionEnds,
    F: FnOnce(&mut C) -> Result<T, E>,
    E: From<DieselError>,
{
    use diesel::connection::TransactionDepthChange::{DecreaseDepth, IncreaseDepth};
    if in_transaction(c)? {
        return Err(DieselError::AlreadyInTransaction.into());
    }
    c.begin()?;
    change_depth(c, IncreaseDepth)?;
    let out = f(c);
    let ended = match &out {
        Ok(_) => c.commit().or_else(|failed| rollback(c).and(Err(failed))),
        Err(_) => rollback(c),
    };
    match change_depth(c, DecreaseDepth) {
        // Out of the transaction already (as Diesel's own commit allows at the top level).
        Ok(()) | Err(DieselError::NotInTransaction) => {}
        Err(e) => return Err(e.into()),
    }
    match ended {
        Ok(()) => out,
        Err(e) => Err(e.into()),
    }
}

/// [`TransactionEnds::rollback`], marking the transaction manager broken when it fails.
#[cfg(any(feature = "__mysql_like", feature = "sqlite"))]
fn rollback<C: TransactionEnds>(c: &mut C) -> QueryResult<()> {
    use diesel::connection::TransactionManager;
    c.rollback().inspect_err(|_| {
        AnsiTransactionManager::transaction_manager_status_mut(c).set_in_error();
    })
}

/// Moves the depth Diesel's transaction manager keeps for `c` by one level (nothing to move
/// once the manager is broken).
#[cfg(any(feature = "__mysql_like", feature = "sqlite"))]
fn change_depth<C>(c: &mut C, change: diesel::connection::TransactionDepthChange) -> QueryResult<()>
where
    C: Connection<TransactionManager = AnsiTransactionManager>,
{
    use diesel::connection::{TransactionManager, TransactionManagerStatus};
    match AnsiTransactionManager::transaction_manager_status_mut(c) {
        TransactionManagerStatus::Valid(status) => status.change_transaction_depth(change),
        TransactionManagerStatus::InError => Ok(()),
    }
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
/// sent and is not affected.) Where a locking read runs in one of our own write transactions
/// (claim picks, the batch completion's lock of the rows still ours), it is cached: a failed
/// statement fails that transaction, and the MySQL `write_tx` then closes every cached
/// statement of the connection before anything runs on it again. Locking reads that run in the
/// caller's transaction (a claim's `locked`, whose failure the caller handles) and the rate limit's
/// key lock use this wrapper, at the cost of one prepare and one close per execution.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))] // what the MySQL statements need
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

/// The query id of a statement whose text the types do not fix: Diesel then builds its SQL on
/// every call (and may still cache the prepared statement by text).
#[derive(Debug)]
pub struct Dynamic;

impl QueryId for Dynamic {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

/// Any write statement, executable (Diesel's `execute` needs a `QueryId`), with query id `K`.
pub(crate) struct Exec<'a, DB, K = Dynamic>(pub(crate) &'a dyn QueryFragment<DB>, PhantomData<K>);

impl<'a, DB, K> Exec<'a, DB, K> {
    pub(crate) fn new(stmt: &'a dyn QueryFragment<DB>) -> Self {
        Exec(stmt, PhantomData)
    }
}

impl<DB, K: QueryId> QueryId for Exec<'_, DB, K> {
    type QueryId = K::QueryId;
    const HAS_STATIC_QUERY_ID: bool = K::HAS_STATIC_QUERY_ID;
}

impl<DB: diesel::backend::Backend, K> QueryFragment<DB> for Exec<'_, DB, K> {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(out)
    }

    // The statement's own answer, which may know it without a walk (`claim::statements`).
    fn is_safe_to_cache_prepared(&self, backend: &DB) -> QueryResult<bool> {
        self.0.is_safe_to_cache_prepared(backend)
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

/// A transaction's result where a deliberate rollback (`RollbackTransaction` from its body) is
/// `Ok(None)`.
fn rolled_back_as_none<T>(out: QueryResult<T>) -> QueryResult<Option<T>> {
    match out {
        Ok(t) => Ok(Some(t)),
        Err(DieselError::RollbackTransaction) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs `f` until it does not fail with a deadlock or serialization failure
/// ([`Error::Deadlock`]), at most [`CONFLICT_ATTEMPTS`] times, with jittered exponential backoff
/// between tries. Only for work the database rolled back whole (a transaction, or one
/// statement), so trying again is safe.
pub(crate) fn retry_conflicts<T>(mut f: impl FnMut() -> crate::Result<T>) -> crate::Result<T> {
    // Made at the first conflict: nearly every call returns the first time.
    let mut pause: Option<Backoff> = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match f() {
            Err(e @ Error::Deadlock { .. }) if attempt < CONFLICT_ATTEMPTS => {
                crate::observe::retried_conflict(attempt, &e);
                let pause = pause.get_or_insert_with(|| {
                    Backoff::new(Duration::from_millis(1), Duration::from_millis(200))
                });
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

/// [`retry_conflicts`] for work that may run inside the caller's transaction: there a deadlock
/// or serialization failure has rolled back (MySQL) or aborted (PostgreSQL) the caller's whole
/// transaction, which is not ours to run again, so the first [`Error::Deadlock`] goes to the
/// caller; outside one, `f` is tried again as [`retry_conflicts`] does.
pub(crate) fn retry_conflicts_on<C, T>(
    conn: &mut C,
    mut f: impl FnMut(&mut C) -> crate::Result<T>,
) -> crate::Result<T>
where
    C: Connection<TransactionManager = AnsiTransactionManager>,
{
    if in_transaction(conn)? {
        return f(conn);
    }
    retry_conflicts(|| f(conn))
}

/// What an error means to a caller, whatever the backend said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Timeout,
    ConnectionLost,
    Conflict,
    /// Another server session answered than the one that prepared the statement: a transaction
    /// pooler is in between (see `server.rs`). Told from a Diesel error on PostgreSQL, and from
    /// an r2d2 checkout's.
    #[cfg_attr(not(any(feature = "postgres", feature = "r2d2")), allow(dead_code))]
    Pooler,
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
        Some(Kind::Pooler) => server::pooler_error(&e.to_string()),
        None => Error::Database(e),
    }
}

/// A pool's error, unless it says that a transaction pooler is in between (a checkout's health
/// check is a cached statement too): then [`Error::Config`] with what to change.
#[cfg(feature = "r2d2")]
impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        let said = e.to_string();
        if classify_message(&said) == Some(Kind::Pooler) {
            return server::pooler_error(&said);
        }
        Error::Pool(crate::error::PoolError::r2d2(e))
    }
}

/// Errors from Diesel are sorted by the backend's [`Dialect`]; this
/// conversion is for errors whose backend is unknown (connection set-up, pools). It sorts by
/// what Diesel itself knows: a closed connection and a serialization failure.
impl From<diesel::result::Error> for Error {
    fn from(e: diesel::result::Error) -> Self {
        classify_common(e)
    }
}

/// The kind of the first pattern `message` contains.
#[cfg(any(feature = "postgres", feature = "__mysql_like"))]
fn first_match(patterns: &[(&str, Kind)], message: &str) -> Option<Kind> {
    patterns
        .iter()
        .find(|(pattern, _)| message.contains(pattern))
        .map(|&(_, kind)| kind)
}

#[cfg(feature = "__mysql_like")]
/// MySQL's and MariaDB's messages for the errors a caller can act on (error numbers in
/// brackets; Diesel maps only 1213 to a kind of its own).
fn classify_mysql_message(message: &str) -> Option<Kind> {
    const PATTERNS: &[(&str, Kind)] = &[
        // 1205 ER_LOCK_WAIT_TIMEOUT (innodb_lock_wait_timeout)
        ("Lock wait timeout exceeded", Kind::Timeout),
        // 3024 (MySQL max_execution_time), 1969 (MariaDB max_statement_time)
        ("maximum statement execution time exceeded", Kind::Timeout),
        ("max_statement_time exceeded", Kind::Timeout),
        // 2006 CR_SERVER_GONE_ERROR, 2013 CR_SERVER_LOST, 1927 ER_CONNECTION_KILLED,
        // 1053 ER_SERVER_SHUTDOWN, 2002/2003 cannot connect
        ("server has gone away", Kind::ConnectionLost),
        ("Lost connection to", Kind::ConnectionLost),
        ("Connection was killed", Kind::ConnectionLost),
        ("Server shutdown in progress", Kind::ConnectionLost),
        ("Can't connect to", Kind::ConnectionLost),
        // 1213 ER_LOCK_DEADLOCK
        ("Deadlock found when trying to get lock", Kind::Conflict),
    ];
    first_match(PATTERNS, message)
}

/// The message patterns of every backend compiled in (an error comes from exactly one server, and
/// the servers' messages do not overlap).
fn classify_message(message: &str) -> Option<Kind> {
    #[cfg(feature = "postgres")]
    if let Some(kind) = postgres::classify_message(message) {
        return Some(kind);
    }
    #[cfg(feature = "__mysql_like")]
    if let Some(kind) = classify_mysql_message(message) {
        return Some(kind);
    }
    #[cfg(feature = "sqlite")]
    if let Some(kind) = sqlite::classify_message(message) {
        return Some(kind);
    }
    let _ = message;
    None
}

/// The backend of a connection (for [`op!`](crate::observe::op)).
pub(crate) fn kind_of<C: Dialect>(_: &C) -> BackendKind {
    kind::<C>()
}

/// The backend of connection type `C`.
pub(crate) fn kind<C: Dialect>() -> BackendKind {
    <C::Backend as SqlDialect>::KIND
}

/// Creates or updates diesel-lease's built-in tables (leases, semaphores) on this connection.
///
/// Idempotent: already-applied migrations are skipped. Uses Diesel's own
/// `__diesel_schema_migrations` bookkeeping table, so it coexists with the application's
/// migrations. A server diesel-lease refuses ([`check_server`]) gets no tables:
/// [`Error::Config`] says why.
pub fn run_migrations(conn: &mut impl BorrowConnection) -> crate::Result<()> {
    fn run<C: Dialect>(conn: &mut C) -> crate::Result<()> {
        server::check(conn)?;
        conn.run_pending_migrations(C::MIGRATIONS)
            .map(|_| ())
            .map_err(|source| Error::Migration { source })
    }
    run(conn.borrow_connection())
}
