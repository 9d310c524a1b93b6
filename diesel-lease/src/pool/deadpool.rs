//! [`Deadpool`]: a `deadpool-diesel` pool as a [`ConnectionSource`], for async applications
//! (feature `deadpool`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool::managed::{Hook, HookError, Object, Pool, PoolError};
use deadpool_diesel::{Connection as SyncWrapper, Manager, Runtime, Timeouts};
use tokio::runtime::Handle;

use super::{with_network_settings, ConnectionSource, ConnectionTuning};
use crate::backend::Dialect;
use crate::notify::listener::Listener;
use crate::notify::Notifications;
use crate::{Error, Result};

/// A `deadpool-diesel` pool of `C` connections, lent to diesel-lease's guards, permits, waiters
/// and [`Worker`](crate::worker::Worker): an async application (axum, tokio) keeps the one pool
/// it has, and takes leases, permits and claims with it.
///
/// diesel-lease's calls block (as Diesel's do): make them where blocking is allowed — inside
/// `tokio::task::spawn_blocking`, or on a thread of your own, as a `Worker` runs — never directly
/// in an `async fn`. The guards' heartbeats and drops run on threads of their own. A connection
/// is waited for on the calling thread; new connections are made (and health-checked) on the
/// runtime's blocking threads, which is why the runtime's [`Handle`] comes along.
///
/// The pool needs a runtime of its own (`.runtime(Runtime::Tokio1)`, which [`build_deadpool`]
/// sets) for the bounded waits diesel-lease makes: without one, every loan is
/// [`Error::Config`]. Build the pool with [`build_deadpool`] to get diesel-lease's
/// [`ConnectionTuning`] (SQLite's busy timeout and WAL, MySQL's idle timeout, the engine check)
/// and libpq's network settings on every connection; a pool built otherwise works, without them.
///
/// Waiters on this pool (waiting claims, a `Worker`, a waiting `acquire`) are woken by
/// PostgreSQL's `NOTIFY` once it has a listener: [`listen_url`](Self::listen_url) with the URL
/// the pool connects to gives it one, as [`build_pool`](super::build_pool) gives an r2d2 pool
/// (deadpool keeps its URL to itself); [`Deadpool::build`] builds the pool with it. Without one they poll, at most a second apart; a
/// semaphore waiter is also woken at once by a release in this process.
///
/// ```no_run
/// # #[cfg(feature = "postgres")] {
/// use diesel::PgConnection;
/// use diesel_lease::lease::{LeaseGuard, LeaseOptions};
/// use diesel_lease::pool::{build_deadpool, Deadpool};
/// use std::time::Duration;
///
/// # async fn app() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// // In the application's start-up, on the tokio runtime:
/// let pool = build_deadpool::<PgConnection>("postgres://app@db/app", 16)?;
/// let source = Deadpool::from_current(pool.clone())?.listen_url("postgres://app@db/app");
///
/// // In a request handler: diesel-lease's calls block, so off the runtime's threads.
/// let token = tokio::task::spawn_blocking(move || {
///     let options = LeaseOptions::new(Duration::from_secs(30));
///     let guard = LeaseGuard::try_acquire(&source, "nightly-report", &options)?;
///     Ok::<_, diesel_lease::Error>(guard.map(|guard| guard.token()))
/// })
/// .await??;
/// # let _ = token;
/// # Ok(())
/// # }
/// # }
/// ```
pub struct Deadpool<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    /// `None` only while it is dropped (see `Drop`).
    pool: Option<Pool<Manager<C>>>,
    runtime: Handle,
    /// The waiters' listener ([`listen_url`](Deadpool::listen_url)), shared by every clone.
    listener: Option<Arc<Listener>>,
}

impl<C> Clone for Deadpool<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    fn clone(&self) -> Self {
        Deadpool {
            pool: self.pool.clone(),
            runtime: self.runtime.clone(),
            listener: self.listener.clone(),
        }
    }
}

impl<C> fmt::Debug for Deadpool<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadpool")
            .field("status", &self.pool().status())
            .field("listener", &self.listener.is_some())
            .finish_non_exhaustive()
    }
}

impl<C> Deadpool<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    /// Lends `pool`'s connections; new ones are made on `runtime`.
    pub fn new(pool: Pool<Manager<C>>, runtime: Handle) -> Self {
        Deadpool {
            pool: Some(pool),
            runtime,
            listener: None,
        }
    }

    /// [`new`](Self::new) with the tokio runtime this is called on;
    /// [`Error::Config`] outside one.
    pub fn from_current(pool: Pool<Manager<C>>) -> Result<Self> {
        let runtime = Handle::try_current().map_err(|e| {
            Error::Config(format!(
                "`Deadpool::from_current` was called outside a tokio runtime ({e}); \
                 pass the runtime's handle to `Deadpool::new`"
            ))
        })?;
        Ok(Deadpool::new(pool, runtime))
    }

    /// [`build_deadpool`]`(url, max_size)`, on the tokio runtime this is called on
    /// ([`from_current`](Self::from_current)), with [`listen_url`](Self::listen_url)`(url)`:
    /// the whole set-up of an application's one pool in one call. [`Error::Config`] outside a
    /// runtime.
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")] {
    /// # async fn app() -> diesel_lease::Result<()> {
    /// use diesel_lease::pool::Deadpool;
    ///
    /// let db = Deadpool::<diesel::PgConnection>::build("postgres://app@db/app", 16)?;
    /// # let _ = db;
    /// # Ok(())
    /// # }
    /// # }
    /// ```
    pub fn build(url: &str, max_size: usize) -> Result<Self>
    where
        C: Notifications,
    {
        Ok(Self::from_current(build_deadpool::<C>(url, max_size)?)?.listen_url(url))
    }

    /// Gives the pool's waiters one listener connection to `url` (PostgreSQL; nothing on SQLite
    /// and MySQL, which have no notifications): a `NOTIFY` from any process (a row made ready
    /// through [`Queue::notify`](crate::claim::Queue::notify) or the
    /// [installed trigger](crate::claim::Queue::install_ready_trigger), a permit given up) wakes them
    /// within milliseconds instead of at their next poll, as an r2d2 pool's
    /// [`WaiterWakeups`](super::WaiterWakeups) does. Pass the URL the pool connects to (a
    /// direct one when that goes through a transaction pooler: `LISTEN` needs a session); it
    /// gets [`with_network_settings`]. The listener is a background thread with a connection
    /// of its own, outside the pool, open while anybody waits and for 30 s after (it shows in
    /// `pg_stat_activity` as `diesel-lease listener`); if it breaks, waiters poll while it
    /// reconnects. Clones made before this call keep polling, as a pool of their own would.
    pub fn listen_url(mut self, url: impl AsRef<str>) -> Self
    where
        C: Notifications,
    {
        self.listener = super::listener::<C>(with_network_settings::<C>(url.as_ref()));
        self
    }

    /// Tells this pool's waiters from every other pool's (see [`ConnectionSource::identity`]),
    /// the same for all clones made after the same [`listen_url`](Self::listen_url): its
    /// listener when it has one (alive as long as a clone keeps it), else the manager, which
    /// lives in the pool's shared state as long as the pool. Waiters share a poller by it
    /// (`notify::gate`): the clones made before `listen_url`, which have no listener, get one
    /// of their own, and never poll for the waiters a `NOTIFY` wakes, nor those for them.
    fn pool_identity(&self) -> usize {
        match &self.listener {
            Some(listener) => Arc::as_ptr(listener) as usize,
            None => std::ptr::from_ref(self.pool().manager()) as usize,
        }
    }

    /// The pool, for the application's own `interact` calls.
    pub fn pool(&self) -> &Pool<Manager<C>> {
        match &self.pool {
            Some(pool) => pool,
            None => unreachable!("the pool is taken only by `drop`"),
        }
    }
}

impl<C> ConnectionSource for Deadpool<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    type Connection = C;
    type Lent = DeadpoolLent<C>;

    fn lend(&self, wait: Duration) -> Result<Self::Lent> {
        // Timers and the blocking threads that make connections are the runtime's; the wait
        // itself happens here, on the calling thread.
        let _entered = self.runtime.enter();
        let timeouts = Timeouts {
            wait: Some(wait),
            create: Some(wait),
            recycle: Some(wait),
        };
        let object = futures_executor::block_on(self.pool().timeout_get(&timeouts)).map_err(
            |e| match e {
                PoolError::NoRuntimeSpecified => Error::Config(
                    "the deadpool-diesel pool has no runtime, so no wait for a connection can \
                     be bounded: build it with `.runtime(Runtime::Tokio1)` (as `build_deadpool` \
                     does)"
                        .into(),
                ),
                e => Error::Pool(crate::error::PoolError::deadpool(e)),
            },
        )?;
        if self.listener.is_some() {
            // What an r2d2 pool's `WaiterWakeups` does at a checkout: a waiter that lent this
            // connection finds the listener right after.
            super::checked_out(self.pool_identity(), self.listener.as_ref());
        }
        Ok(DeadpoolLent {
            object: Some(object),
            runtime: self.runtime.clone(),
        })
    }

    fn with_lent<T>(lent: &mut Self::Lent, work: impl FnOnce(&mut C) -> Result<T>) -> Result<T> {
        let object = lent.object.as_ref().ok_or_else(|| {
            Error::Config("a deadpool-diesel connection used after it went back".into())
        })?;
        // Poisoned only by a panic of an earlier user, which deadpool's recycling turns away
        // before lending the connection again; a connection lent to us is never poisoned.
        let mut conn = object.lock().map_err(|_| {
            Error::Config("a deadpool-diesel connection whose last user panicked".into())
        })?;
        work(&mut conn)
    }

    fn connection_timeout(&self) -> Duration {
        self.pool().timeouts().wait.unwrap_or(DEFAULT_WAIT)
    }

    fn identity(&self) -> Option<usize> {
        Some(self.pool_identity())
    }
}

/// The last handle of a pool closes its connections on the runtime's blocking threads, which the
/// thread dropping it (a guard's heartbeat, a `Worker`'s) need not be one of.
impl<C> Drop for Deadpool<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    fn drop(&mut self) {
        let _entered = self.runtime.enter();
        drop(self.pool.take());
    }
}

/// A connection lent by a [`Deadpool`]. It goes back to the pool when dropped, inside the
/// runtime: a connection the pool discards (its user panicked) is closed on the runtime's
/// blocking threads, which the thread dropping it (a heartbeat, a `Worker`'s) need not be one of.
pub struct DeadpoolLent<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    object: Option<Object<Manager<C>>>,
    runtime: Handle,
}

impl<C> fmt::Debug for DeadpoolLent<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadpoolLent")
            .field("lent", &self.object.is_some())
            .finish_non_exhaustive()
    }
}

impl<C> Drop for DeadpoolLent<C>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    fn drop(&mut self) {
        let _entered = self.runtime.enter();
        drop(self.object.take());
    }
}

/// How long a loan waits when the pool sets no wait timeout (r2d2's default).
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Builds a `deadpool-diesel` pool of `max_size` connections to `url` on the tokio runtime, for
/// the application and diesel-lease alike: as [`build_pool`](super::build_pool) does for r2d2,
/// every connection gets [`ConnectionTuning`] and the URL [`with_network_settings`]; waits for a
/// connection are bounded at 30 s. Must be called on a tokio runtime (wrap it in
/// [`Deadpool::from_current`] there).
pub fn build_deadpool<C>(url: &str, max_size: usize) -> Result<Pool<Manager<C>>>
where
    C: Dialect,
    Manager<C>: deadpool::managed::Manager<Type = SyncWrapper<C>, Error = deadpool_diesel::Error>,
{
    let manager = Manager::<C>::new(with_network_settings::<C>(url), Runtime::Tokio1);
    Pool::builder(manager)
        .max_size(max_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(DEFAULT_WAIT))
        .create_timeout(Some(DEFAULT_WAIT))
        .recycle_timeout(Some(DEFAULT_WAIT))
        .post_create(Hook::async_fn(|conn: &mut SyncWrapper<C>, _| {
            Box::pin(async move {
                let tuned = conn
                    .interact(|conn| ConnectionTuning::default().apply(conn))
                    .await
                    .map_err(|e| HookError::Message(format!("tuning panicked: {e}").into()))?;
                tuned.map_err(|e| HookError::Message(e.to_string().into()))
            })
        }))
        .build()
        .map_err(|e| Error::Config(format!("could not build the deadpool-diesel pool: {e}")))
}
