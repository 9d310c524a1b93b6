//! r2d2 pools (feature `r2d2`, on by default): [`build_pool`] and [`PoolOptions`] build one with
//! every connection tuned and the waiters' listener installed ([`WaiterWakeups`]), a pool built
//! elsewhere takes both, and an r2d2 pool is a [`ConnectionSource`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use diesel::r2d2::event::CheckoutEvent;
use diesel::r2d2::{
    ConnectionManager, CustomizeConnection, HandleEvent, Pool, PooledConnection, R2D2Connection,
};

use super::{checked_out, listener, with_network_settings, ConnectionSource, ConnectionTuning};
use crate::backend::Dialect;
use crate::notify::listener::Listener;
use crate::notify::Notifications;

impl<C> CustomizeConnection<C, diesel::r2d2::Error> for ConnectionTuning
where
    C: Dialect + R2D2Connection,
{
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn).map_err(|e| {
            diesel::r2d2::Error::QueryError(diesel::result::Error::QueryBuilderError(Box::new(e)))
        })
    }
}

/// Builds an r2d2 pool of `max_size` connections to `url` with [`ConnectionTuning`] applied and
/// [`WaiterWakeups`] installed: [`PoolOptions::build`] with the default options. Its
/// connections (and the listener's) connect with [`with_network_settings`]`(url)`, so on
/// PostgreSQL a silent network breaks them within about 20 s.
pub fn build_pool<C>(url: &str, max_size: u32) -> crate::Result<Pool<ConnectionManager<C>>>
where
    C: Notifications + R2D2Connection,
{
    PoolOptions::default().build(url, max_size)
}

/// How a pool is built ([`build`](Self::build)); the default is [`build_pool`]'s.
///
/// ```no_run
/// # #[cfg(feature = "postgres")] {
/// use diesel_lease::pool::PoolOptions;
///
/// // The application's connections go through PgBouncer (pool_mode = transaction); the
/// // listener that wakes waiters connects to PostgreSQL itself.
/// let pool = PoolOptions::default()
///     .transaction_pooler()
///     .listen_url("postgres://app@db:5432/app")
///     .build::<diesel::PgConnection>("postgres://app@pgbouncer:6432/app", 16)
///     .unwrap();
/// # let _ = pool;
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct PoolOptions {
    transaction_pooler: bool,
    listen_url: Option<String>,
}

impl PoolOptions {
    /// The URL goes through a transaction pooler (PgBouncer with `pool_mode = transaction`):
    /// every connection gets [`ConnectionTuning::transaction_pooler`] (Diesel's
    /// prepared-statement cache off), and the pool's listener, which `LISTEN`s and so needs a
    /// session of its own, connects to [`listen_url`](Self::listen_url) or, without one, is not
    /// started: waiters then poll, which the pool says once in a WARN. Claims, guards, leases,
    /// semaphores and the `Worker` run through it unchanged.
    ///
    /// Without it, [`build`](Self::build) refuses a URL where it sees a transaction pooler (two
    /// connections open at once answered from one server session) with
    /// [`Error::Config`](crate::Error::Config), and an error that shows one later (a cached
    /// statement that another session answered) is that same error.
    pub fn transaction_pooler(mut self) -> Self {
        self.transaction_pooler = true;
        self
    }

    /// Where the pool's listener connects for `LISTEN/NOTIFY` wake-ups (PostgreSQL), instead of
    /// the pool's URL: PostgreSQL itself, or a PgBouncer database in session mode, when the
    /// pool's URL goes through a transaction pooler.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Builds an r2d2 pool of `max_size` connections to `url` as these options say, with
    /// [`ConnectionTuning`] applied and [`WaiterWakeups`] installed.
    ///
    /// Before it builds the pool it checks the server on a connection of its own: a server
    /// diesel-lease refuses ([`check_server`](crate::backend::check_server)), and a transaction
    /// pooler these options do not mention, are [`Error::Config`](crate::Error::Config) at once.
    pub fn build<C>(&self, url: &str, max_size: u32) -> crate::Result<Pool<ConnectionManager<C>>>
    where
        C: Notifications + R2D2Connection,
    {
        // Every connection, the check's and the listener's included, with the network bounds.
        let url = with_network_settings::<C>(url);
        let url = url.as_str();
        crate::backend::check_url::<C>(url, self.transaction_pooler)?;
        let listen_url = match (&self.listen_url, self.transaction_pooler) {
            (Some(listen_url), _) => Some(listen_url.as_str()),
            (None, false) => Some(url),
            (None, true) => {
                if C::NOTIFICATIONS {
                    crate::observe::wakeups_polled(
                        "this pool goes through a transaction pooler and has no direct URL for its \
                         listener (`PoolOptions::listen_url`)",
                    );
                }
                None
            }
        };
        let tuning = ConnectionTuning {
            transaction_pooler: self.transaction_pooler,
            ..ConnectionTuning::default()
        };
        Ok(Pool::builder()
            .max_size(max_size)
            .connection_customizer(Box::new(tuning))
            .event_handler(Box::new(WaiterWakeups {
                listener: listen_url.and_then(|url| listener::<C>(with_network_settings::<C>(url))),
            }))
            .build(ConnectionManager::<C>::new(url))?)
    }
}

/// An r2d2 event handler that gives the pool's semaphore waiters one shared listener connection
/// (PostgreSQL; on SQLite and MySQL it does nothing).
///
/// A waiter (`semaphore::Semaphore::acquire`,
/// `semaphore::RwLock::read`/`write`, a claim's `wait`)
/// borrows a pool connection for each poll and gives it back in between. On PostgreSQL it is woken
/// between polls by `NOTIFY`, received by one listener per pool: a background thread with its own
/// connection to `url`, opened outside the pool (it shows in `pg_stat_activity` as
/// `diesel-lease listener`), while anybody waits and for 30 s after. If that connection breaks,
/// waiters poll (at most once per max poll interval, one second by default) while it reconnects.
///
/// [`build_pool`] installs it. For a pool you build yourself, install it with the same URL (or,
/// when that URL goes through a transaction pooler, a direct one: see
/// [`PoolOptions::listen_url`]); without it PostgreSQL waiters only poll, so a freed permit is
/// handed over at the next waiter's poll instead of within milliseconds.
///
/// r2d2 keeps a pool's URL to itself, so the listener is told the URL here; and r2d2 lets
/// nothing be attached to a pool but its event handler, so the handler is how waiters find the
/// listener: each checkout of the pool leaves the handler's listener with the thread that checked
/// out, and a waiter picks it up right after its own checkout.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::r2d2::{ConnectionManager, Pool};
/// use diesel::SqliteConnection;
/// use diesel_lease::pool::{ConnectionTuning, WaiterWakeups};
///
/// let dir = tempfile::tempdir().unwrap();
/// let url = dir.path().join("app.db").display().to_string();
/// let pool = Pool::builder()
///     .connection_customizer(Box::new(ConnectionTuning::default()))
///     .event_handler(Box::new(WaiterWakeups::new::<SqliteConnection>(&url)))
///     .build(ConnectionManager::<SqliteConnection>::new(url))
///     .unwrap();
/// # let _ = pool;
/// # }
/// ```
pub struct WaiterWakeups {
    listener: Option<Arc<Listener>>,
}

impl WaiterWakeups {
    /// The handler for a pool of `C` connections to `url`. Nothing starts until a waiter waits.
    pub fn new<C>(url: impl Into<String>) -> Self
    where
        C: Notifications,
    {
        let url = url.into();
        WaiterWakeups {
            listener: listener::<C>(with_network_settings::<C>(&url)),
        }
    }
}

impl fmt::Debug for WaiterWakeups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaiterWakeups")
            .field("listener", &self.listener.is_some())
            .finish()
    }
}

impl HandleEvent for WaiterWakeups {
    fn handle_checkout(&self, _event: CheckoutEvent) {
        // r2d2 calls this on the thread that checks out, just before it returns the connection.
        checked_out(std::ptr::from_ref(self) as usize, self.listener.as_ref());
    }
}

impl<C> ConnectionSource for Pool<ConnectionManager<C>>
where
    C: Dialect + R2D2Connection,
{
    type Connection = C;
    type Lent = PooledConnection<ConnectionManager<C>>;
    fn lend(&self, wait: Duration) -> crate::Result<Self::Lent> {
        // r2d2 refuses a zero timeout; a zero budget still gets one short attempt. Never longer
        // than the pool's own timeout (which also keeps r2d2's deadline from overflowing).
        let wait = wait
            .min(self.connection_timeout())
            .max(Duration::from_millis(1));
        Ok(self.get_timeout(wait)?)
    }
    fn with_lent<T>(
        lent: &mut Self::Lent,
        work: impl FnOnce(&mut C) -> crate::Result<T>,
    ) -> crate::Result<T> {
        work(lent)
    }
    fn connection_timeout(&self) -> Duration {
        Pool::connection_timeout(self)
    }
}
