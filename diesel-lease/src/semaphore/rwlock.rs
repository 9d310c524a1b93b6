//! [`RwLock`]: readers share a resource, writers have it alone, in request order.

use std::time::Duration;

use super::control::SemaphoreDialect;
use super::{
    manual, pooled, pooled_try, queue_of, Mode, Permit, PermitGuard, QueuedRequest, Semaphore,
};
use crate::pool::ConnectionSource;
use crate::{BorrowConnection, OwnerId, Result};

/// A reader/writer lock over a named resource, shared by every process using the database.
///
/// Readers share the resource (up to [`with_max_readers`](Self::with_max_readers), unlimited by
/// default) while no writer holds it or waits ahead of them; a writer enters only when it is
/// first in the queue and the resource is free. Readers that ask after a waiting writer wait
/// behind it, so a stream of readers cannot starve a writer.
///
/// It is a [`Semaphore`] whose requests are shared (readers) or exclusive (writers), over the
/// same tables; a resource used as a plain semaphore elsewhere must declare the same permit
/// count.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::SqliteConnection;
/// use diesel_lease::prelude::*;
/// use diesel_lease::semaphore::RwLock;
///
/// let dir = tempfile::tempdir().unwrap();
/// let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
///
/// let list = RwLock::new("work-list");
/// let r1 = list.read(&pool, Duration::from_secs(5)).unwrap();
/// let r2 = list.read(&pool, Duration::from_secs(5)).unwrap(); // readers share
/// assert!(list.try_write(&pool).unwrap().is_none()); // the writer waits for them
/// drop((r1, r2));
/// let w = list.write(&pool, Duration::from_secs(5)).unwrap();
/// assert!(list.try_read(&pool).unwrap().is_none());
/// assert!(w.release().unwrap().was_held());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    inner: Semaphore,
}

impl RwLock {
    /// A reader/writer lock over `resource` with any number of readers.
    pub fn new(resource: impl Into<String>) -> Self {
        RwLock {
            inner: Semaphore::new(resource, i32::MAX.unsigned_abs()),
        }
    }

    /// A reader/writer lock whose requests are rows of your control table `T`, which needs an
    /// access-type column (`#[control_table(mode = …, shared = "…", exclusive = "…")]`);
    /// the derive generates `T::rw_lock(...)`, which calls this. See
    /// [`Semaphore::in_control_table`].
    #[doc(hidden)]
    pub fn in_control_table<T: super::ControlTable>(resource: Option<String>) -> Self {
        RwLock {
            inner: Semaphore::in_control_table::<T>(resource, i32::MAX.unsigned_abs()),
        }
    }

    /// Admits at most `readers` readers at once (zero is refused when used).
    pub fn with_max_readers(mut self, readers: u32) -> Self {
        self.inner.permits = readers;
        self.inner.permits_name = "max readers";
        self
    }

    /// See [`Semaphore::with_ttl`].
    pub fn with_ttl(self, ttl: Duration) -> Self {
        RwLock {
            inner: self.inner.with_ttl(ttl),
        }
    }

    /// See [`Semaphore::with_owner`].
    pub fn with_owner(self, owner: OwnerId) -> Self {
        RwLock {
            inner: self.inner.with_owner(owner),
        }
    }

    /// See [`Semaphore::with_max_poll_interval`].
    pub fn with_max_poll_interval(self, max: Duration) -> Self {
        RwLock {
            inner: self.inner.with_max_poll_interval(max),
        }
    }

    /// See [`Semaphore::with_drop_wait`].
    pub fn with_drop_wait(self, wait: Duration) -> Self {
        RwLock {
            inner: self.inner.with_drop_wait(wait),
        }
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        self.inner.resource()
    }

    /// Waits up to `timeout` to read (shared); see [`Semaphore::acquire`].
    pub fn read<C>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
        timeout: Duration,
    ) -> Result<PermitGuard<C>>
    where
        C: SemaphoreDialect,
    {
        self.inner.acquire(pool, timeout)
    }

    /// Waits up to `timeout` to write (exclusive); see [`Semaphore::acquire`].
    pub fn write<C>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
        timeout: Duration,
    ) -> Result<PermitGuard<C>>
    where
        C: SemaphoreDialect,
    {
        pooled(
            pool,
            self.inner.request(Mode::Exclusive)?,
            timeout,
            self.inner.max_poll,
        )
    }

    /// Reads if possible right now; never waits (see
    /// [`Semaphore::try_acquire`](super::Semaphore::try_acquire) for its bound).
    pub fn try_read<C>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Option<PermitGuard<C>>>
    where
        C: SemaphoreDialect,
    {
        self.inner.try_acquire(pool)
    }

    /// Writes if possible right now; never waits (see
    /// [`Semaphore::try_acquire`](super::Semaphore::try_acquire) for its bound).
    pub fn try_write<C>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Option<PermitGuard<C>>>
    where
        C: SemaphoreDialect,
    {
        pooled_try(pool, self.inner.request(Mode::Exclusive)?)
    }

    /// Waits up to `timeout` for `mode` on a connection you own; see [`Semaphore::acquire_on`].
    pub fn acquire_on(
        &self,
        conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
        mode: Mode,
        timeout: Duration,
    ) -> Result<Permit> {
        manual(
            conn,
            self.inner.request(mode)?,
            timeout,
            self.inner.max_poll,
        )
    }

    /// The lock's queue; see [`Semaphore::queue`].
    pub fn queue(
        &self,
        conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
    ) -> Result<Vec<QueuedRequest>> {
        queue_of(conn, self.inner.resource(), self.inner.table.as_ref())
    }
}
