//! The connections diesel-lease runs on, and what differs between their backends.

use diesel::connection::LoadConnection;
use diesel::r2d2::{ConnectionManager, PooledConnection, R2D2Connection};
use diesel::Connection;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness};
pub use lease_core::BackendKind;

mod sealed {
    pub trait Sealed {}
}

/// A raw Diesel connection of a backend diesel-lease supports: `PgConnection`, `SqliteConnection`
/// or `MysqlConnection`, each behind its Cargo feature.
///
/// Sealed: the backend-specific SQL of every operation is written and tested for these three.
pub trait LeaseConnection:
    Connection
    + LoadConnection
    + MigrationHarness<Self::Backend>
    + Send
    + Sized
    + 'static
    + sealed::Sealed
{
    /// Which backend this connection talks to.
    const KIND: BackendKind;

    /// The built-in tables' migrations for this backend.
    const MIGRATIONS: EmbeddedMigrations;

    /// Runs `f` in the transaction kind that makes read-then-write safe on this backend: a plain
    /// transaction on PostgreSQL, `BEGIN IMMEDIATE` on SQLite (so the write lock is taken up front
    /// and concurrent writers wait on `busy_timeout` instead of failing with `SQLITE_BUSY`), a
    /// READ COMMITTED transaction on MySQL (no gap locks, so no `SKIP LOCKED` deadlocks). Inside
    /// an open transaction it becomes a savepoint of the caller's transaction.
    fn write_transaction<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<diesel::result::Error>;
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

macro_rules! raw_connection {
    ($feature:literal, $conn:ty, $kind:ident, $dir:literal, |$c:ident, $f:ident| $tx:expr) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $conn {}

        #[cfg(feature = $feature)]
        impl LeaseConnection for $conn {
            const KIND: BackendKind = BackendKind::$kind;
            const MIGRATIONS: EmbeddedMigrations = diesel_migrations::embed_migrations!($dir);

            fn write_transaction<T, E, F>(&mut self, $f: F) -> Result<T, E>
            where
                F: FnOnce(&mut Self) -> Result<T, E>,
                E: From<diesel::result::Error>,
            {
                let $c = self;
                $tx
            }
        }

        #[cfg(feature = $feature)]
        impl BorrowConnection for $conn {
            type Conn = $conn;
            fn borrow_connection(&mut self) -> &mut $conn {
                self
            }
        }
    };
}

raw_connection!(
    "postgres",
    diesel::PgConnection,
    Postgres,
    "migrations/postgres",
    |c, f| c.transaction(f)
);
raw_connection!(
    "sqlite",
    diesel::SqliteConnection,
    Sqlite,
    "migrations/sqlite",
    |c, f| {
        sqlite_ensure_busy_timeout(c)?;
        c.immediate_transaction(f)
    }
);

/// A SQLite connection without a busy timeout fails at once with "database is locked" when
/// another connection writes; every diesel-lease write waits instead. A timeout the application
/// set (e.g. with [`ConnectionTuning`](crate::pool::ConnectionTuning)) is left alone.
#[cfg(feature = "sqlite")]
fn sqlite_ensure_busy_timeout(c: &mut diesel::SqliteConnection) -> diesel::QueryResult<()> {
    use diesel::connection::SimpleConnection;
    use diesel::RunQueryDsl;

    #[derive(diesel::QueryableByName)]
    struct BusyTimeout {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        timeout: i64,
    }
    let current = diesel::sql_query("SELECT timeout FROM pragma_busy_timeout")
        .get_result::<BusyTimeout>(c)?
        .timeout;
    if current == 0 {
        let ms = crate::pool::ConnectionTuning::default()
            .busy_timeout
            .as_millis();
        // An integer we own, not user text: PRAGMA takes no bind parameters.
        c.batch_execute(&format!("PRAGMA busy_timeout = {ms}"))?;
    }
    Ok(())
}
raw_connection!(
    "mysql",
    diesel::MysqlConnection,
    Mysql,
    "migrations/mysql",
    |c, f| {
        mysql_read_committed_next(c)?;
        c.transaction(f)
    }
);

/// Runs the next MySQL transaction at READ COMMITTED.
///
/// Coordination statements are locking reads, which see the latest committed rows at any
/// isolation level; under REPEATABLE READ (InnoDB's default) they also take gap locks, and
/// `SKIP LOCKED` claims then deadlock on the secondary index they update. Inside the caller's
/// transaction the level cannot change (error 1568): the caller's level stays and we run as a
/// savepoint.
#[cfg(feature = "mysql")]
fn mysql_read_committed_next(c: &mut diesel::MysqlConnection) -> diesel::QueryResult<()> {
    use diesel::connection::SimpleConnection;
    if in_transaction(c)? {
        return Ok(());
    }
    c.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
}

/// Whether `conn` is inside a transaction (the caller's, or one of ours).
pub(crate) fn in_transaction<C>(conn: &mut C) -> diesel::QueryResult<bool>
where
    C: Connection<TransactionManager = diesel::connection::AnsiTransactionManager>,
{
    use diesel::connection::TransactionManager;
    Ok(
        diesel::connection::AnsiTransactionManager::transaction_manager_status_mut(conn)
            .transaction_depth()?
            .is_some(),
    )
}

/// Refuses to run inside the caller's transaction: leases and semaphores must commit their grant
/// at once, or other processes would not see it (and the caller's rollback would undo it).
pub(crate) fn refuse_nested<C>(conn: &mut C) -> diesel::QueryResult<()>
where
    C: Connection<TransactionManager = diesel::connection::AnsiTransactionManager>,
{
    if in_transaction(conn)? {
        return Err(diesel::result::Error::AlreadyInTransaction);
    }
    Ok(())
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
            .map_err(|e| crate::Error::Migration(e.to_string()))
    }
    run(conn.borrow_connection())
}
