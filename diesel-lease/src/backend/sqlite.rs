//! SQLite: one writer at a time per database file, no row locks, `RETURNING` since 3.35. Every
//! write runs in `BEGIN IMMEDIATE` (or is one autocommit statement), so read-then-write is
//! serialized by the database lock, and writers wait for it in SQLite's busy handler instead of
//! failing. Only the bounded lock waits (`lock_tx_within`, `write_tx_within`) also take this
//! process's writer turn (`sqlite_writer`).

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::result::Error as DieselError;
use diesel::sqlite::Sqlite;
use diesel::SqliteConnection;
use diesel_migrations::EmbeddedMigrations;

use super::{
    own_transaction, raw_connection, BackendKind, Dialect, Dynamic, Exec, Kind, Offset,
    ServerEngine, SqlDialect, TransactionEnds,
};

raw_connection!(SqliteConnection);
impl super::sealed::Sealed for Sqlite {}

impl SqlDialect for Sqlite {
    const KIND: BackendKind = BackendKind::Sqlite;
    // No row locks: the write lock of `BEGIN IMMEDIATE` stands in for them.
    const SKIP_LOCKED: &'static str = "";
    const INT_DIV: &'static str = " / ";
    const FOR_UPDATE: &'static str = "";

    fn push_now_micros(out: &mut AstPass<'_, '_, Self>) {
        // julianday is a double: rounding to whole milliseconds (SQLite's clock resolution)
        // makes the value exact.
        out.push_sql(
            "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)",
        );
    }

    // SQLite's 'now' is UTC; it has no session time zone and no `timestamptz`.
    fn push_now(out: &mut AstPass<'_, '_, Self>, _with_time_zone: bool) {
        out.push_sql("strftime('%Y-%m-%d %H:%M:%f', 'now')");
    }

    fn push_now_offset<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        offset: &'b Offset,
        _with_time_zone: bool,
    ) -> QueryResult<()> {
        out.push_sql("strftime('%Y-%m-%d %H:%M:%f', 'now', ");
        out.push_bind_param::<diesel::sql_types::Text, _>(&offset.sqlite_modifier)?;
        out.push_sql(")");
        Ok(())
    }

    /// `strftime('%Y-%m-%d %H:%M:%f', "col", '+0.001 seconds')`. SQLite keeps the text written,
    /// but what diesel-lease writes is its clock, which reads whole milliseconds (`'now'` is
    /// truncated to the millisecond): a stored reading stands for an instant up to one
    /// millisecond later, so comparing it as exact would take a run over, or start one, up to a
    /// millisecond early.
    fn push_stored_upper_bound(out: &mut AstPass<'_, '_, Self>, column: &str) -> QueryResult<()> {
        out.push_sql("strftime('%Y-%m-%d %H:%M:%f', ");
        out.push_identifier(column)?;
        out.push_sql(", '+0.001 seconds')");
        Ok(())
    }

    super::binds!();
}

impl Dialect for SqliteConnection {
    const MIGRATIONS: EmbeddedMigrations =
        diesel_migrations::embed_migrations!("migrations/sqlite");

    fn write_tx<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        if super::in_transaction(self)? {
            // As documented: a savepoint of the open transaction, which holds the write lock
            // already if it wrote (`BEGIN IMMEDIATE` cannot nest).
            return self.transaction(f);
        }
        // No writer turn here: SQLite's busy handler lets a writer run several transactions while
        // the others sleep, which at 4 threads gave 1.5x the jobs/s and a third of the p99 of
        // taking turns (whose every hand-off is a wake-up; BENCHMARKS.md).
        let mut f = Some(f);
        let out = own_transaction(self, |c| f.take().expect("runs once")(c));
        // The body did not run: `BEGIN IMMEDIATE` failed, the database being locked. If the
        // connection had no busy timeout, it failed without waiting; now it waits. (Any other
        // failure of `BEGIN` comes back as it was.)
        match f {
            Some(f) if out.is_err() && gave_a_busy_timeout(self) => own_transaction(self, f),
            _ => out,
        }
    }

    fn write_tx_within<T>(
        &mut self,
        max_wait: Option<Duration>,
        f: impl FnOnce(&mut Self) -> crate::Result<T>,
    ) -> crate::Result<T> {
        super::refuse_nested(self)?;
        match max_wait {
            Some(max_wait) => immediate_within(self, max_wait, f),
            None => self.write_tx(f),
        }
    }

    fn single_write<T>(&mut self, f: impl FnOnce(&mut Self) -> QueryResult<T>) -> QueryResult<T> {
        self.write_tx(f)
    }

    fn keyed_write<T>(&mut self, mut f: impl FnMut(&mut Self) -> QueryResult<T>) -> QueryResult<T> {
        if super::in_transaction(self)? {
            return f(self);
        }
        // One autocommit write (a `complete`, a heartbeat), waiting in the busy handler like
        // every other write (see `write_tx`).
        match f(self) {
            // An autocommit statement that found the database locked changed nothing (SQLite
            // rolls it back whole), so it runs again once the connection waits.
            Err(e) if is_locked(&e) && gave_a_busy_timeout(self) => f(self),
            out => out,
        }
    }

    fn tune(&mut self, busy_timeout: Duration, _: Option<Duration>) -> QueryResult<()> {
        // The pragma takes an integer literal: formatted from our own u128, never user text.
        let ms = busy_timeout.as_millis().min(i32::MAX as u128);
        self.batch_execute(&format!(
            "PRAGMA busy_timeout = {ms}; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
        ))
    }

    fn bounded_lock_wait<T>(
        &mut self,
        wait: Duration,
        f: impl FnOnce(&mut Self) -> QueryResult<T>,
    ) -> QueryResult<T> {
        let previous = busy_timeout(self)?;
        set_busy_timeout(self, super::lock_wait_millis(wait))?;
        let result = f(self);
        let restored = set_busy_timeout(self, previous);
        let value = result?;
        restored?;
        Ok(value)
    }

    fn bounded_busy_wait<T>(
        &mut self,
        wait: Duration,
        f: impl FnOnce(&mut Self) -> QueryResult<T>,
    ) -> QueryResult<T> {
        self.bounded_lock_wait(wait, f)
    }

    fn take_write_lock(&mut self, write_nothing: &dyn QueryFragment<Sqlite>) -> QueryResult<()> {
        self.execute_returning_count(&Exec::<_, Dynamic>::new(write_nothing))
            .map(drop)
    }

    fn lock_tx_within<T, E, F>(&mut self, wait: Duration, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        if super::in_transaction(self)? {
            // A savepoint of the caller's transaction, as on the other backends; the lock
            // statement bounds its own wait (`bounded_lock_wait`).
            return self.transaction(f);
        }
        immediate_within(self, wait, f)
    }

    fn server_engine(&mut self) -> QueryResult<ServerEngine> {
        // The library linked in, not a server: nothing to ask.
        Ok(ServerEngine::Sqlite)
    }
}

/// Our write transactions' ends on SQLite ([`super::own_transaction`]): `BEGIN IMMEDIATE`,
/// `COMMIT` and `ROLLBACK` as statements Diesel prepares once per connection, where Diesel's
/// `immediate_transaction` sends each through `sqlite3_exec`, which parses it again every time
/// (two parses per claim, BENCHMARKS.md, "Session 6").
impl TransactionEnds for SqliteConnection {
    fn begin(&mut self) -> QueryResult<()> {
        self.execute_returning_count(&TxControl::<BEGIN>).map(drop)
    }

    fn commit(&mut self) -> QueryResult<()> {
        self.execute_returning_count(&TxControl::<COMMIT>).map(drop)
    }

    fn rollback(&mut self) -> QueryResult<()> {
        match self.execute_returning_count(&TxControl::<ROLLBACK>) {
            // SQLite ended it already: an I/O error, a full disk or an interrupt roll the whole
            // transaction back with the statement.
            Err(DieselError::DatabaseError(_, info))
                if info
                    .message()
                    .starts_with("cannot rollback - no transaction is active") =>
            {
                Ok(())
            }
            out => out.map(drop),
        }
    }
}

/// `TxControl`'s statements.
const BEGIN: u8 = 0;
const COMMIT: u8 = 1;
const ROLLBACK: u8 = 2;

/// `BEGIN IMMEDIATE`, `COMMIT` or `ROLLBACK`: fixed text, static query id (one per statement).
#[derive(Debug, Clone, Copy)]
struct TxControl<const WHICH: u8>;

impl<const WHICH: u8> diesel::query_builder::QueryId for TxControl<WHICH> {
    type QueryId = Self;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<const WHICH: u8> QueryFragment<Sqlite> for TxControl<WHICH> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        out.push_sql(match WHICH {
            BEGIN => "BEGIN IMMEDIATE",
            COMMIT => "COMMIT",
            _ => "ROLLBACK",
        });
        Ok(())
    }
}

/// `BEGIN IMMEDIATE` after this process's writer turn, both waits bounded by `max_wait` together
/// (what is left of it after the turn is the busy timeout of `BEGIN IMMEDIATE`); the connection's
/// own busy timeout comes back afterwards.
fn immediate_within<T, E, F>(c: &mut SqliteConnection, max_wait: Duration, f: F) -> Result<T, E>
where
    F: FnOnce(&mut SqliteConnection) -> Result<T, E>,
    E: From<DieselError>,
{
    let deadline = Instant::now() + max_wait;
    let _turn = crate::sqlite_writer::turn_within(max_wait);
    let own = busy_timeout(c)?;
    let left = deadline.saturating_duration_since(Instant::now());
    set_busy_timeout(c, super::lock_wait_millis(left))?;
    let out = own_transaction(c, f);
    let restored = set_busy_timeout(c, own);
    let out = out?;
    restored?;
    Ok(out)
}

/// A SQLite connection without a busy timeout fails at once with "database is locked" when
/// another connection writes; every diesel-lease write waits instead. After a write found the
/// database locked, this gives such a connection the default busy timeout and says so (`true`:
/// run the write again); a timeout the application set (e.g. with `pool::ConnectionTuning`) is
/// left alone (`false`: the write waited its timeout and failed). Asked only after a failure,
/// so a write on a tuned connection sends no extra statement. A connection that cannot answer
/// gets `false`: the write's own error is the one to report.
fn gave_a_busy_timeout(c: &mut SqliteConnection) -> bool {
    busy_timeout(c).is_ok_and(|ms| ms == 0)
        && set_busy_timeout(c, super::lock_wait_millis(super::DEFAULT_BUSY_TIMEOUT)).is_ok()
}

/// Whether a write that failed with `e` should run again: the database was locked and the
/// connection, which had no busy timeout, now waits (see [`gave_a_busy_timeout`]).
pub(crate) fn waits_after(c: &mut SqliteConnection, e: &DieselError) -> bool {
    is_locked(e) && gave_a_busy_timeout(c)
}

/// Whether `e` is SQLite's "the database is locked" (`SQLITE_BUSY` / `SQLITE_LOCKED`).
fn is_locked(e: &DieselError) -> bool {
    matches!(e, DieselError::DatabaseError(_, info) if classify_message(info.message()) == Some(Kind::Timeout))
}

/// The connection's busy timeout in milliseconds (0: none). A `PRAGMA` statement, not a `SELECT`
/// from `pragma_busy_timeout`: the `SELECT` would open a read transaction, and a transaction that
/// read first gets `SQLITE_BUSY` at once, without waiting, when it then wants to write.
fn busy_timeout(c: &mut SqliteConnection) -> QueryResult<i64> {
    #[derive(diesel::QueryableByName)]
    struct BusyTimeout {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        timeout: i64,
    }
    Ok(diesel::sql_query("PRAGMA busy_timeout")
        .get_result::<BusyTimeout>(c)?
        .timeout)
}

/// Sets the connection's busy timeout to `ms` milliseconds (0: none).
fn set_busy_timeout(c: &mut SqliteConnection, ms: i64) -> QueryResult<()> {
    let ms = ms.min(i64::from(i32::MAX));
    // An integer we own, not user text: PRAGMA takes no bind parameters.
    c.batch_execute(&format!("PRAGMA busy_timeout = {ms}"))
}

/// SQLite's messages for the errors a caller can act on.
pub(super) fn classify_message(message: &str) -> Option<Kind> {
    // SQLITE_BUSY / SQLITE_LOCKED: the busy timeout passed while another connection wrote.
    (message == "database is locked" || message.starts_with("database table is locked"))
        .then_some(Kind::Timeout)
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;
    use diesel::result::Error as DieselError;
    use diesel::SqliteConnection;

    use crate::backend::own_transaction;

    fn in_transaction_of(c: &mut SqliteConnection) -> bool {
        crate::backend::in_transaction(c).unwrap()
    }

    fn rows(c: &mut SqliteConnection) -> Vec<i64> {
        diesel::sql_query("SELECT x FROM t ORDER BY x")
            .load::<X>(c)
            .unwrap()
            .into_iter()
            .map(|r| r.x)
            .collect()
    }

    #[derive(diesel::QueryableByName)]
    struct X {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        x: i64,
    }

    fn insert(c: &mut SqliteConnection, x: i64) -> QueryResult<usize> {
        diesel::sql_query("INSERT INTO t (x) VALUES (?)")
            .bind::<diesel::sql_types::BigInt, _>(x)
            .execute(c)
    }

    /// A SQLite write transaction (`own_transaction`) commits on `Ok`, rolls back on `Err`, keeps Diesel's transaction depth (so a
    /// nested `transaction` is a savepoint and a nested one is refused), holds the write
    /// lock from its start, and leaves the connection as it found it.
    #[test]
    fn immediate_commits_rolls_back_and_keeps_the_transaction_depth() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tx.db").display().to_string();
        let mut c = SqliteConnection::establish(&path).unwrap();
        let mut other = SqliteConnection::establish(&path).unwrap();
        c.batch_execute("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER NOT NULL)")
            .unwrap();

        own_transaction(&mut c, |c| {
            assert!(in_transaction_of(c));
            // The write lock is ours from `BEGIN IMMEDIATE` on: another writer is shut out.
            let shut_out = other.batch_execute("BEGIN IMMEDIATE").unwrap_err();
            assert_eq!(shut_out.to_string(), "database is locked");
            insert(c, 1)
        })
        .unwrap();
        assert!(!in_transaction_of(&mut c));
        assert_eq!(rows(&mut other), [1]);

        let failed = own_transaction(&mut c, |c| {
            insert(c, 2)?;
            Err::<(), _>(DieselError::RollbackTransaction)
        });
        assert!(matches!(failed, Err(DieselError::RollbackTransaction)));
        assert!(!in_transaction_of(&mut c));
        assert_eq!(rows(&mut c), [1]);

        own_transaction(&mut c, |c| {
            let inner = c.transaction(|c| {
                insert(c, 3)?;
                Err::<(), _>(DieselError::RollbackTransaction)
            });
            assert!(inner.is_err());
            let nested = own_transaction(c, |_| Ok::<_, DieselError>(()));
            assert!(matches!(nested, Err(DieselError::AlreadyInTransaction)));
            insert(c, 4)
        })
        .unwrap();
        assert_eq!(rows(&mut other), [1, 4]);
        // Diesel's own transactions still work on the connection afterwards.
        c.immediate_transaction(|c| insert(c, 5)).unwrap();
        assert_eq!(rows(&mut other), [1, 4, 5]);
    }
}
