//! Connection set-up that coordination needs: r2d2 pools whose connections are tuned for it.

use std::time::Duration;

use diesel::r2d2::{
    ConnectionManager, CustomizeConnection, Pool, PooledConnection, R2D2Connection,
};

use crate::{BorrowConnection, LeaseConnection};

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
        conn.tune(self)
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

/// Where background work (heartbeats, releases on drop) gets a connection from: an r2d2 pool
/// today, another pool by implementing this.
///
/// The wait is bounded by the caller: a heartbeat never waits past its holder's local deadline,
/// and a drop never waits long, so a starved pool cannot make a holder believe it still holds
/// what the database already gave away.
pub trait ConnectionSource: Clone + Send + Sync + 'static {
    /// The raw connection the pool lends.
    type Connection: LeaseConnection;
    /// A lent connection; returned to the pool when dropped.
    type Lent: BorrowConnection<Conn = Self::Connection>;
    /// Lends a connection, waiting at most `wait` for one.
    fn lend(&self, wait: Duration) -> crate::Result<Self::Lent>;
}

impl<C> ConnectionSource for Pool<ConnectionManager<C>>
where
    C: LeaseConnection + R2D2Connection,
{
    type Connection = C;
    type Lent = PooledConnection<ConnectionManager<C>>;
    fn lend(&self, wait: Duration) -> crate::Result<Self::Lent> {
        // r2d2 refuses a zero timeout; a zero budget still gets one short attempt.
        Ok(self.get_timeout(wait.max(Duration::from_millis(1)))?)
    }
}
