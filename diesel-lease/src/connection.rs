//! [`LeaseConnection`]: one bound for a connection every operation runs on.
//!
//! Each operation asks only for what it needs of a connection (`ClaimDialect`,
//! `LeaseStatements`, `SemaphoreDialect`, `InsertOnceDialect`, `AdminStatements`, each in its
//! own module, each on the ground floor's [`Dialect`]); this trait is their union, defined above
//! them all so that no operation imports it.

use diesel::result::Error as DieselError;

use crate::admin::AdminStatements;
use crate::backend::{BackendKind, Dialect, SqlDialect};
use crate::claim::{ClaimDialect, RateDialect};
use crate::lease::statements::LeaseStatements;
use crate::once::InsertOnceDialect;
use crate::semaphore::SemaphoreDialect;

/// A raw Diesel connection of a backend diesel-lease supports: `PgConnection` (feature
/// `postgres`), `SqliteConnection` (`sqlite`), `MysqlConnection` (`mysql`) or
/// `MariadbConnection` (`mariadb`). As a bound (`C: LeaseConnection`), it lets generic code call
/// every operation on `C`.
///
/// Implemented for every connection that implements what each operation needs of it; those
/// traits are sealed: the backend-specific SQL of every operation is written and tested for
/// these four (`MysqlConnection` and `MariadbConnection` share theirs).
pub trait LeaseConnection:
    Dialect
    + ClaimDialect
    + RateDialect
    + InsertOnceDialect
    + LeaseStatements
    + SemaphoreDialect
    + AdminStatements
{
    /// Which backend this connection talks to: its Diesel backend's [`SqlDialect::KIND`],
    /// the one place each backend states it.
    const KIND: BackendKind = <Self::Backend as SqlDialect>::KIND;

    /// Runs `f` in the transaction kind that makes read-then-write safe on this backend: READ
    /// COMMITTED on PostgreSQL and MySQL (so InnoDB takes no gap locks and `SKIP LOCKED` claims
    /// do not deadlock on the index they update), `BEGIN IMMEDIATE` on SQLite (so the write lock
    /// is taken up front and concurrent writers wait on the busy timeout instead of failing; no
    /// in-process writer turn, which only the bounded lock waits take). Inside an open transaction it becomes a savepoint of the
    /// caller's transaction, at the caller's isolation level.
    fn write_transaction<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        self.write_tx(f)
    }
}

impl<C> LeaseConnection for C where
    C: Dialect
        + ClaimDialect
        + RateDialect
        + InsertOnceDialect
        + LeaseStatements
        + SemaphoreDialect
        + AdminStatements
{
}
