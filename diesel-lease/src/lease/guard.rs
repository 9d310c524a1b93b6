//! [`LeaseGuard`]: a lease tied to an r2d2 pool, released on drop, optionally kept alive.

use std::fmt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use lease_core::FencingToken;

use super::{Lease, LeaseOptions};
use crate::{LeaseConnection, Result};

/// A lease taken through an r2d2 pool. It borrows a connection from the pool only while it talks
/// to the database, and releases the lease when dropped (errors on drop are ignored — call
/// [`release`](Self::release) to see them).
///
/// With [`LeaseOptions::keep_alive`], a background thread extends the lease by its ttl every
/// ttl/3. When an extension finds the lease expired or granted to someone else, the thread stops
/// and the guard is *lost*: [`is_lost`](Self::is_lost) turns true and
/// [`extend`](Self::extend)/[`release`](Self::release) return [`Error::LeaseLost`](crate::Error::LeaseLost).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::{LeaseGuard, LeaseOptions};
/// use std::time::Duration;
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
///
/// let options = LeaseOptions::new(Duration::from_secs(3)).keep_alive(true);
/// {
///     let guard = LeaseGuard::try_acquire(&pool, "compaction", &options).unwrap().unwrap();
///     println!("compacting with fencing token {}", guard.token());
///     assert!(LeaseGuard::try_acquire(&pool, "compaction", &options).unwrap().is_none());
/// } // dropped: released
/// assert!(LeaseGuard::try_acquire(&pool, "compaction", &options).unwrap().is_some());
/// # }
/// ```
pub struct LeaseGuard<C: LeaseConnection + R2D2Connection> {
    pool: Pool<ConnectionManager<C>>,
    lease: Arc<Mutex<Lease>>,
    token: FencingToken,
    name: String,
    keep_alive: Option<KeepAlive>,
    finished: bool,
}

struct KeepAlive {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl<C: LeaseConnection + R2D2Connection> fmt::Debug for LeaseGuard<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("keep_alive", &self.keep_alive.is_some())
            .field("lost", &self.is_lost())
            .finish()
    }
}

fn lock(lease: &Mutex<Lease>) -> MutexGuard<'_, Lease> {
    // A panic while holding the mutex leaves a consistent `Lease` (its fields are set whole).
    lease.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: LeaseConnection + R2D2Connection> LeaseGuard<C> {
    /// Tries once to take the lease `name` (see [`try_acquire`](super::try_acquire)).
    pub fn try_acquire(
        pool: &Pool<ConnectionManager<C>>,
        name: &str,
        options: &LeaseOptions,
    ) -> Result<Option<Self>> {
        let lease = super::try_acquire(&mut pool.get()?, name, options)?;
        lease
            .map(|lease| Self::new(pool.clone(), lease, options.keep_alive))
            .transpose()
    }

    /// Takes the lease `name`, waiting up to `timeout` (see [`acquire`](super::acquire)).
    pub fn acquire(
        pool: &Pool<ConnectionManager<C>>,
        name: &str,
        options: &LeaseOptions,
        timeout: Duration,
    ) -> Result<Self> {
        let lease = super::acquire(&mut pool.get()?, name, options, timeout)?;
        Self::new(pool.clone(), lease, options.keep_alive)
    }

    /// Wraps a granted lease. If the keep-alive thread cannot be started, the lease is released
    /// again and [`Error::KeepAlive`](crate::Error::KeepAlive) returned.
    pub(crate) fn new(
        pool: Pool<ConnectionManager<C>>,
        lease: Lease,
        keep_alive: bool,
    ) -> Result<Self> {
        let token = lease.token();
        let name = lease.name().to_string();
        let lease = Arc::new(Mutex::new(lease));
        let mut guard = LeaseGuard {
            pool,
            lease,
            token,
            name,
            keep_alive: None,
            finished: false,
        };
        if keep_alive {
            match KeepAlive::start(guard.pool.clone(), Arc::clone(&guard.lease)) {
                Ok(k) => guard.keep_alive = Some(k),
                // Dropping the guard releases the lease: nothing stays held.
                Err(e) => return Err(crate::Error::KeepAlive(e)),
            }
        }
        Ok(guard)
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether an extension (the keep-alive's or an explicit one) found the lease expired or
    /// taken over. Long jobs should check this between steps and stop when it turns true.
    pub fn is_lost(&self) -> bool {
        lock(&self.lease).is_lost()
    }

    /// Whether the lease still holds, asked of the database.
    pub fn is_valid(&self) -> Result<bool> {
        let mut conn = self.pool.get()?;
        lock(&self.lease).is_valid(&mut conn)
    }

    /// Moves the expiry to `ttl` from now (see [`Lease::extend`]); later keep-alive extensions
    /// use this ttl too.
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        let mut conn = self.pool.get()?;
        lock(&self.lease).extend(&mut conn, ttl)
    }

    /// Stops the keep-alive and releases the lease (see [`Lease::release`]).
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if it was lost meanwhile.
    pub fn release(mut self) -> Result<()> {
        self.finished = true;
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(keep_alive) = self.keep_alive.take() {
            keep_alive.stop();
        }
        let mut conn = self.pool.get()?;
        lock(&self.lease).release(&mut conn)
    }
}

impl<C: LeaseConnection + R2D2Connection> Drop for LeaseGuard<C> {
    fn drop(&mut self) {
        if !self.finished {
            // Nothing to report to: an unreleased lease expires at its ttl anyway.
            let _ = self.finish();
        }
    }
}

impl KeepAlive {
    fn start<C: LeaseConnection + R2D2Connection>(
        pool: Pool<ConnectionManager<C>>,
        lease: Arc<Mutex<Lease>>,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("diesel-lease keep-alive".to_string())
            .spawn(move || loop {
                let period = (lock(&lease).ttl() / 3).max(Duration::from_millis(1));
                match stopped.recv_timeout(period) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    // Stopped, or the guard is gone.
                    _ => return,
                }
                // A failed checkout is retried next period; the lease is only lost once an
                // extension reaches the database and finds it gone.
                let Ok(mut conn) = pool.get() else { continue };
                let mut lease = lock(&lease);
                let ttl = lease.ttl();
                match lease.extend(&mut conn, ttl) {
                    Ok(()) => {}
                    Err(crate::Error::LeaseLost { .. } | crate::Error::NotHeld { .. }) => return,
                    Err(_) => {}
                }
            })?;
        Ok(KeepAlive { stop, thread })
    }

    fn stop(self) {
        let _ = self.stop.send(());
        // A panicked keep-alive thread has nothing left to clean up.
        let _ = self.thread.join();
    }
}
