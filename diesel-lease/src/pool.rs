//! Connection set-up that coordination needs: r2d2 pools whose connections are tuned for it.

use std::time::Duration;

use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, R2D2Connection};

use crate::{BackendKind, LeaseConnection};

/// An r2d2 connection customizer that prepares each new connection for concurrent use.
///
/// On SQLite it sets `busy_timeout` (writers wait for the lock instead of failing with
/// `SQLITE_BUSY`), `journal_mode = WAL` (readers never block the writer) and
/// `synchronous = NORMAL`. On PostgreSQL and MySQL it does nothing.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::r2d2::{ConnectionManager, Pool};
/// use diesel::SqliteConnection;
/// use diesel_lease::pool::ConnectionTuning;
///
/// let dir = tempfile::tempdir().unwrap();
/// let url = dir.path().join("app.db").display().to_string();
/// let pool = Pool::builder()
///     .connection_customizer(Box::new(ConnectionTuning::default()))
///     .build(ConnectionManager::<SqliteConnection>::new(url))
///     .unwrap();
/// # let _ = pool;
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ConnectionTuning {
    /// How long a SQLite writer waits for the write lock before giving up.
    pub busy_timeout: Duration,
}

impl Default for ConnectionTuning {
    fn default() -> Self {
        ConnectionTuning {
            busy_timeout: Duration::from_secs(30),
        }
    }
}

impl ConnectionTuning {
    /// Applies the tuning to one connection (what the pool does for every new connection).
    pub fn apply<C: LeaseConnection>(&self, conn: &mut C) -> diesel::QueryResult<()> {
        if C::KIND == BackendKind::Sqlite {
            // The pragma takes an integer literal: formatted from our own u128, never user text.
            let ms = self.busy_timeout.as_millis().min(i32::MAX as u128);
            conn.batch_execute(&format!(
                "PRAGMA busy_timeout = {ms}; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
            ))?;
        }
        Ok(())
    }
}

impl<C> CustomizeConnection<C, diesel::r2d2::Error> for ConnectionTuning
where
    C: LeaseConnection + R2D2Connection,
{
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}

/// Builds an r2d2 pool of `max_size` connections to `url` with [`ConnectionTuning`] applied.
pub fn build_pool<C>(url: &str, max_size: u32) -> crate::Result<Pool<ConnectionManager<C>>>
where
    C: LeaseConnection + R2D2Connection,
{
    Ok(Pool::builder()
        .max_size(max_size)
        .connection_customizer(Box::new(ConnectionTuning::default()))
        .build(ConnectionManager::<C>::new(url))?)
}
