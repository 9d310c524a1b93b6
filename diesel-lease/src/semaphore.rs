//! Semaphores, mutexes and reader/writer locks in a control table: wait your turn, in request order.
//!
//! A [`Semaphore`] lets at most `permits` holders use a resource at once, across every process
//! that shares the database; the others queue and are let in first come, first served. A mutex
//! is a semaphore with one permit ([`Semaphore::mutex`]). A [`RwLock`] lets readers share a
//! resource and writers have it alone; readers that arrive after a waiting writer queue behind
//! it, so writers are not starved.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use std::time::Duration;
//! use diesel::SqliteConnection;
//! use diesel_lease::semaphore::Semaphore;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let url = dir.path().join("app.db").display().to_string();
//! let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
//! diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
//!
//! // At most 3 imports against the partner API at once, farm-wide.
//! let imports = Semaphore::new("partner-api", 3).unwrap();
//! let permit = imports.acquire(&pool, Duration::from_secs(60)).unwrap();
//! // ... call the partner API; the permit heartbeats in the background ...
//! permit.release().unwrap(); // or just drop it
//! # }
//! ```
//!
//! # Lease or semaphore?
//!
//! - A **lease** ([`crate::lease`]) is for work that must run *once*, by anybody: if somebody
//!   else holds it, skip (the nightly report, a singleton scheduler).
//! - A **semaphore** is for work that must run *every time*, but not too much at once: if the
//!   resource is busy, wait your turn (imports limited to 3 at once, one migration at a time).
//!
//! # How it works
//!
//! Each request is a row in `diesel_lease_semaphore_tickets` with an increasing ticket, a mode
//! (shared or exclusive), a `granted` flag and an expiry on the database clock. Every change to a
//! resource's queue runs in a transaction that first locks the resource's row in
//! `diesel_lease_semaphores` (on SQLite: `BEGIN IMMEDIATE`), so admission decisions are taken one
//! at a time per resource and grants are persisted flags, never inferred from positions. That is
//! what makes the scheme safe against seed 001's commit-order race (identity values handed out
//! before commit); the argument is spelled out in the `protocol` module and in the README
//! ("How it works, and why two holders never happen").
//!
//! Holders heartbeat while they hold (every ttl/3, from a background thread for a pool-backed
//! [`Permit`]); waiters refresh their row on every poll. A row whose owner stops for longer than
//! the ttl is removed by the next transaction on that resource, and the next in line proceeds.
//!
//! Waiters poll with exponential backoff capped at one second (one short transaction per
//! second per idle waiter). On PostgreSQL they also `LISTEN`, and every transaction that lets
//! somebody in sends `pg_notify` with the resource as payload, so the next waiter wakes within
//! milliseconds.
//!
//! # Limits
//!
//! A holder that stalls longer than the ttl (a long GC pause, a suspended VM) loses its permit
//! while it still believes it holds it; [`Permit::is_held`] says so after the next heartbeat.
//! Choose a ttl far above any pause you expect.
//!
//! Called inside an open transaction of the caller's, every function here fails with
//! `Error::Database(diesel::result::Error::AlreadyInTransaction)`: a grant must commit on its
//! own, and waiting inside a transaction would hold the caller's locks while it waits.

mod protocol;
mod schema;
mod sql;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};

use self::protocol::Request;
use self::sql::sql_of;
use crate::{BorrowConnection, Error, InvalidInput, LeaseConnection, OwnerId, Result, Ttl};

pub use lease_core::admission::Mode;

/// The longest resource name the built-in table stores, in bytes.
pub const MAX_RESOURCE_LEN: usize = 255;

/// How long a holder or waiter stays in the queue without a heartbeat, unless set with
/// [`Semaphore::with_ttl`].
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The longest pause between two polls of a waiter, unless set with
/// [`Semaphore::with_max_poll_interval`].
pub const DEFAULT_MAX_POLL: Duration = Duration::from_secs(1);

/// A counting semaphore over a named resource, shared by every process using the database.
///
/// At most [`permits`](Self::permits) holders at once; the others are admitted in the order they
/// asked (FIFO). Many resources live in the same table, each with its own limit. Cheap to
/// create and clone; it only describes the resource.
///
/// Every process using a resource must declare the same permit count: a different count is
/// refused with [`Error::PermitsMismatch`] while anybody holds or waits for the resource, and
/// becomes the new count once the resource is idle.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::SqliteConnection;
/// use diesel_lease::semaphore::Semaphore;
///
/// let dir = tempfile::tempdir().unwrap();
/// let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
///
/// let mutex = Semaphore::mutex("schema-change").unwrap();
/// let held = mutex.try_acquire(&pool).unwrap().expect("nobody else holds it");
/// assert!(mutex.try_acquire(&pool).unwrap().is_none()); // busy: try_acquire never waits
/// drop(held); // released
/// assert!(mutex.try_acquire(&pool).unwrap().is_some());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    resource: String,
    permits: i32,
    ttl: Ttl,
    owner: OwnerId,
    max_poll: Duration,
}

impl Semaphore {
    /// A semaphore of `permits` holders over `resource`.
    ///
    /// Fails with [`InvalidInput::EmptyName`] / [`InvalidInput::NameTooLong`] for a bad name,
    /// [`InvalidInput::Zero`] for zero permits and [`InvalidInput::TooLarge`] above `i32::MAX`.
    pub fn new(resource: impl Into<String>, permits: u32) -> Result<Self> {
        let resource = resource.into();
        lease_core::validate_name("resource", &resource, MAX_RESOURCE_LEN)?;
        Ok(Semaphore {
            resource,
            permits: permits_value("permits", permits)?,
            ttl: Ttl::new("ttl", DEFAULT_TTL)?,
            owner: OwnerId::process_default().clone(),
            max_poll: DEFAULT_MAX_POLL,
        })
    }

    /// A mutex: a semaphore with one permit.
    pub fn mutex(resource: impl Into<String>) -> Result<Self> {
        Self::new(resource, 1)
    }

    /// How long a holder or waiter stays in the queue after its last heartbeat (default
    /// [`DEFAULT_TTL`]). Pool-backed permits heartbeat every ttl/3. Fails for a zero ttl.
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Self> {
        self.ttl = Ttl::new("ttl", ttl)?;
        Ok(self)
    }

    /// Who the requests are recorded as (default: [`OwnerId::process_default`]).
    pub fn with_owner(mut self, owner: OwnerId) -> Self {
        self.owner = owner;
        self
    }

    /// The longest pause between two polls of a waiter (default [`DEFAULT_MAX_POLL`], and never
    /// more than ttl/3). Lower values hand a freed permit over sooner on SQLite and MySQL at the
    /// cost of more queries; PostgreSQL waiters are woken by notifications anyway. Fails for zero.
    pub fn with_max_poll_interval(mut self, max: Duration) -> Result<Self> {
        Ttl::new("max poll interval", max)?;
        self.max_poll = max;
        Ok(self)
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many holders the resource admits at once.
    pub fn permits(&self) -> u32 {
        self.permits.unsigned_abs()
    }

    /// The ttl of requests.
    pub fn ttl(&self) -> Duration {
        self.ttl.as_duration()
    }

    /// Waits up to `timeout` for a permit, using connections from `pool`.
    ///
    /// Permits are granted in request order. The returned [`Permit`] heartbeats from a
    /// background thread (taking a pool connection every ttl/3, so leave the pool a spare one)
    /// and is released when dropped or by [`Permit::release`].
    ///
    /// A zero `timeout` tries once. At the deadline it fails with [`Error::Timeout`] and leaves
    /// no request behind; `Duration::MAX` waits forever.
    pub fn acquire<C>(
        &self,
        pool: &Pool<ConnectionManager<C>>,
        timeout: Duration,
    ) -> Result<Permit<C>>
    where
        C: LeaseConnection + R2D2Connection,
    {
        let req = self.request(Mode::Shared);
        let ticket = protocol::acquire(sql_of(&mut *pool.get()?)?, &req, timeout, self.max_poll)?;
        Permit::start(pool.clone(), req, ticket)
    }

    /// Takes a permit if one is free right now and nobody is queued ahead; never waits.
    /// `Ok(None)` when busy (nothing is left queued).
    pub fn try_acquire<C>(&self, pool: &Pool<ConnectionManager<C>>) -> Result<Option<Permit<C>>>
    where
        C: LeaseConnection + R2D2Connection,
    {
        pooled_try(pool, self.request(Mode::Shared))
    }

    /// Like [`acquire`](Self::acquire), on a connection you own: the [`ManualPermit`] does not
    /// heartbeat or release itself; call [`ManualPermit::heartbeat`] within every ttl and
    /// [`ManualPermit::release`] when done.
    pub fn acquire_on(
        &self,
        conn: &mut impl BorrowConnection,
        timeout: Duration,
    ) -> Result<ManualPermit> {
        manual(conn, self.request(Mode::Shared), timeout, self.max_poll)
    }

    /// The resource's queue in ticket order: holders and waiters, as the database has them now
    /// (including rows that expired but were not yet removed).
    pub fn queue(&self, conn: &mut impl BorrowConnection) -> Result<Vec<QueuedRequest>> {
        queue_of(conn, &self.resource)
    }

    fn request(&self, mode: Mode) -> Request {
        Request {
            resource: self.resource.clone(),
            permits: self.permits,
            owner: self.owner.as_str().to_string(),
            mode,
            ttl: self.ttl,
        }
    }
}

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
/// use diesel_lease::semaphore::RwLock;
///
/// let dir = tempfile::tempdir().unwrap();
/// let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
///
/// let list = RwLock::new("work-list").unwrap();
/// let r1 = list.read(&pool, Duration::from_secs(5)).unwrap();
/// let r2 = list.read(&pool, Duration::from_secs(5)).unwrap(); // readers share
/// assert!(list.try_write(&pool).unwrap().is_none()); // the writer waits for them
/// drop((r1, r2));
/// let w = list.write(&pool, Duration::from_secs(5)).unwrap();
/// assert!(list.try_read(&pool).unwrap().is_none());
/// w.release().unwrap();
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    inner: Semaphore,
}

impl RwLock {
    /// A reader/writer lock over `resource` with any number of readers.
    pub fn new(resource: impl Into<String>) -> Result<Self> {
        Ok(RwLock {
            inner: Semaphore::new(resource, i32::MAX.unsigned_abs())?,
        })
    }

    /// Admits at most `readers` readers at once (fails for zero).
    pub fn with_max_readers(mut self, readers: u32) -> Result<Self> {
        self.inner.permits = permits_value("max readers", readers)?;
        Ok(self)
    }

    /// See [`Semaphore::with_ttl`].
    pub fn with_ttl(self, ttl: Duration) -> Result<Self> {
        Ok(RwLock {
            inner: self.inner.with_ttl(ttl)?,
        })
    }

    /// See [`Semaphore::with_owner`].
    pub fn with_owner(self, owner: OwnerId) -> Self {
        RwLock {
            inner: self.inner.with_owner(owner),
        }
    }

    /// See [`Semaphore::with_max_poll_interval`].
    pub fn with_max_poll_interval(self, max: Duration) -> Result<Self> {
        Ok(RwLock {
            inner: self.inner.with_max_poll_interval(max)?,
        })
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        self.inner.resource()
    }

    /// Waits up to `timeout` to read (shared); see [`Semaphore::acquire`].
    pub fn read<C>(&self, pool: &Pool<ConnectionManager<C>>, timeout: Duration) -> Result<Permit<C>>
    where
        C: LeaseConnection + R2D2Connection,
    {
        self.pooled(pool, Mode::Shared, timeout)
    }

    /// Waits up to `timeout` to write (exclusive); see [`Semaphore::acquire`].
    pub fn write<C>(
        &self,
        pool: &Pool<ConnectionManager<C>>,
        timeout: Duration,
    ) -> Result<Permit<C>>
    where
        C: LeaseConnection + R2D2Connection,
    {
        self.pooled(pool, Mode::Exclusive, timeout)
    }

    /// Reads if possible right now; never waits.
    pub fn try_read<C>(&self, pool: &Pool<ConnectionManager<C>>) -> Result<Option<Permit<C>>>
    where
        C: LeaseConnection + R2D2Connection,
    {
        pooled_try(pool, self.inner.request(Mode::Shared))
    }

    /// Writes if possible right now; never waits.
    pub fn try_write<C>(&self, pool: &Pool<ConnectionManager<C>>) -> Result<Option<Permit<C>>>
    where
        C: LeaseConnection + R2D2Connection,
    {
        pooled_try(pool, self.inner.request(Mode::Exclusive))
    }

    /// Waits up to `timeout` for `mode` on a connection you own; see [`Semaphore::acquire_on`].
    pub fn acquire_on(
        &self,
        conn: &mut impl BorrowConnection,
        mode: Mode,
        timeout: Duration,
    ) -> Result<ManualPermit> {
        manual(conn, self.inner.request(mode), timeout, self.inner.max_poll)
    }

    /// The lock's queue; see [`Semaphore::queue`].
    pub fn queue(&self, conn: &mut impl BorrowConnection) -> Result<Vec<QueuedRequest>> {
        queue_of(conn, self.inner.resource())
    }

    fn pooled<C>(
        &self,
        pool: &Pool<ConnectionManager<C>>,
        mode: Mode,
        timeout: Duration,
    ) -> Result<Permit<C>>
    where
        C: LeaseConnection + R2D2Connection,
    {
        let req = self.inner.request(mode);
        let ticket = protocol::acquire(
            sql_of(&mut *pool.get()?)?,
            &req,
            timeout,
            self.inner.max_poll,
        )?;
        Permit::start(pool.clone(), req, ticket)
    }
}

fn permits_value(what: &'static str, permits: u32) -> Result<i32> {
    if permits == 0 {
        return Err(InvalidInput::Zero { what }.into());
    }
    i32::try_from(permits).map_err(|_| {
        InvalidInput::TooLarge {
            what,
            got: permits.into(),
            max: i32::MAX.unsigned_abs().into(),
        }
        .into()
    })
}

fn pooled_try<C>(pool: &Pool<ConnectionManager<C>>, req: Request) -> Result<Option<Permit<C>>>
where
    C: LeaseConnection + R2D2Connection,
{
    match protocol::try_once(sql_of(&mut *pool.get()?)?, &req)? {
        Some(ticket) => Permit::start(pool.clone(), req, ticket).map(Some),
        None => Ok(None),
    }
}

fn manual(
    conn: &mut impl BorrowConnection,
    req: Request,
    timeout: Duration,
    max_poll: Duration,
) -> Result<ManualPermit> {
    let ticket = protocol::acquire(sql_of(conn.borrow_connection())?, &req, timeout, max_poll)?;
    Ok(ManualPermit { req, ticket })
}

fn queue_of(conn: &mut impl BorrowConnection, resource: &str) -> Result<Vec<QueuedRequest>> {
    let rows = protocol::queue(sql_of(conn.borrow_connection())?, resource)?;
    Ok(rows
        .into_iter()
        .map(|row| QueuedRequest {
            mode: row.entry().mode,
            ticket: row.ticket,
            owner: row.owner,
            granted: row.granted,
            requested_at_micros: row.requested_at,
            granted_at_micros: row.granted_at,
            expires_at_micros: row.expires_at,
        })
        .collect())
}

/// One request in a resource's queue, as returned by [`Semaphore::queue`].
///
/// Times are microseconds since 1970 on the database's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedRequest {
    /// Its place in line: lower tickets asked first.
    pub ticket: i64,
    /// Who asked.
    pub owner: String,
    /// Shared (a permit, a reader) or exclusive (a writer).
    pub mode: Mode,
    /// Whether it holds the resource.
    pub granted: bool,
    /// When it was queued.
    pub requested_at_micros: i64,
    /// When it was granted.
    pub granted_at_micros: Option<i64>,
    /// When it is removed unless its owner heartbeats or polls before.
    pub expires_at_micros: i64,
}

/// A held permit (or read/write lock) whose connections come from a pool.
///
/// While it lives, a background thread heartbeats it every ttl/3. It is released when dropped,
/// or by [`release`](Self::release), which reports whether it was still held. If its owner
/// stalls past the ttl the database gives the permit to the next in line; [`is_held`](Self::is_held)
/// turns `false` at the next heartbeat.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct Permit<C>
where
    C: LeaseConnection + R2D2Connection,
{
    pool: Pool<ConnectionManager<C>>,
    req: Request,
    ticket: i64,
    stop_heartbeat: Option<mpsc::Sender<()>>,
    lost: Arc<AtomicBool>,
    released: bool,
}

impl<C> Permit<C>
where
    C: LeaseConnection + R2D2Connection,
{
    fn start(pool: Pool<ConnectionManager<C>>, req: Request, ticket: i64) -> Result<Self> {
        let (stop, stopped) = mpsc::channel();
        let lost = Arc::new(AtomicBool::new(false));
        let spawned = {
            let (pool, req, lost) = (pool.clone(), req.clone(), Arc::clone(&lost));
            std::thread::Builder::new()
                .name("diesel-lease-permit".into())
                .spawn(move || keep_alive(&pool, &req, ticket, &stopped, &lost))
        };
        if let Err(e) = spawned {
            // Without a heartbeat the permit would silently expire: give it back.
            if let Ok(mut conn) = pool.get() {
                let _ = sql_of(&mut *conn).and_then(|sql| protocol::release(sql, &req, ticket));
            }
            return Err(Error::KeepAlive(e));
        }
        Ok(Permit {
            pool,
            req,
            ticket,
            stop_heartbeat: Some(stop),
            lost,
            released: false,
        })
    }

    /// The permit's ticket (its place in the request order).
    pub fn ticket(&self) -> i64 {
        self.ticket
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.req.resource
    }

    /// Shared (a semaphore permit, a reader) or exclusive (a writer).
    pub fn mode(&self) -> Mode {
        self.req.mode
    }

    /// `false` once a heartbeat found the permit gone (it expired and was removed); stop the
    /// protected work then.
    pub fn is_held(&self) -> bool {
        !self.lost.load(Ordering::SeqCst)
    }

    /// [`Error::NotHeld`] once a heartbeat found the permit gone; `Ok(())` otherwise.
    pub fn ensure_held(&self) -> Result<()> {
        if self.is_held() {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: self.req.resource.clone(),
            })
        }
    }

    /// Releases the permit and lets the next in line in. [`Error::NotHeld`] if it had already
    /// expired and been removed.
    pub fn release(mut self) -> Result<()> {
        self.stop_heartbeat = None;
        let mut conn = self.pool.get()?;
        let existed = protocol::release(sql_of(&mut *conn)?, &self.req, self.ticket)?;
        self.released = true;
        if existed {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: self.req.resource.clone(),
            })
        }
    }
}

impl<C> Drop for Permit<C>
where
    C: LeaseConnection + R2D2Connection,
{
    fn drop(&mut self) {
        // Dropping the sender stops the heartbeat thread at its next wake-up; a heartbeat
        // already under way can only touch a row, never bring a deleted one back.
        self.stop_heartbeat = None;
        if self.released {
            return;
        }
        // Best effort: if the database is unreachable the row expires after the ttl.
        if let Ok(mut conn) = self.pool.get() {
            let _ =
                sql_of(&mut *conn).and_then(|sql| protocol::release(sql, &self.req, self.ticket));
        }
    }
}

impl<C> fmt::Debug for Permit<C>
where
    C: LeaseConnection + R2D2Connection,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("resource", &self.req.resource)
            .field("ticket", &self.ticket)
            .field("mode", &self.req.mode)
            .field("held", &self.is_held())
            .finish()
    }
}

/// Heartbeats every ttl/3 until told to stop or the row is gone.
fn keep_alive<C>(
    pool: &Pool<ConnectionManager<C>>,
    req: &Request,
    ticket: i64,
    stop: &mpsc::Receiver<()>,
    lost: &AtomicBool,
) where
    C: LeaseConnection + R2D2Connection,
{
    let period = (req.ttl.as_duration() / 3).max(Duration::from_millis(1));
    let mut pause = period;
    loop {
        match stop.recv_timeout(pause) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let beat = pool
            .get_timeout(period)
            .map_err(Error::from)
            .and_then(|mut conn| protocol::heartbeat(sql_of(&mut *conn)?, req, ticket));
        match beat {
            Ok(true) => pause = period,
            Ok(false) => {
                lost.store(true, Ordering::SeqCst);
                return;
            }
            // Transient (no pool connection, database restarting): try again sooner; the row
            // lives until its ttl runs out.
            Err(_) => pause = (period / 4).max(Duration::from_millis(1)),
        }
    }
}

/// A held permit on a connection you manage: no background thread, no release on drop.
///
/// Call [`heartbeat`](Self::heartbeat) more often than the ttl while you hold it, and
/// [`release`](Self::release) when done; a forgotten permit is removed once its ttl has run out.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::{Connection, SqliteConnection};
/// use diesel_lease::semaphore::Semaphore;
///
/// let dir = tempfile::tempdir().unwrap();
/// let mut conn = SqliteConnection::establish(&dir.path().join("app.db").display().to_string()).unwrap();
/// diesel_lease::run_migrations(&mut conn).unwrap();
///
/// let sem = Semaphore::new("reports", 2).unwrap();
/// let permit = sem.acquire_on(&mut conn, Duration::from_secs(5)).unwrap();
/// permit.heartbeat(&mut conn).unwrap();
/// permit.release(&mut conn).unwrap();
/// // Releasing twice is reported, and changes nothing.
/// assert!(matches!(permit.release(&mut conn), Err(diesel_lease::Error::NotHeld { .. })));
/// # }
/// ```
#[derive(Debug)]
#[must_use = "the permit stays held until released or expired"]
pub struct ManualPermit {
    req: Request,
    ticket: i64,
}

impl ManualPermit {
    /// The permit's ticket (its place in the request order).
    pub fn ticket(&self) -> i64 {
        self.ticket
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.req.resource
    }

    /// Shared (a semaphore permit, a reader) or exclusive (a writer).
    pub fn mode(&self) -> Mode {
        self.req.mode
    }

    /// Pushes the permit's expiry to now + ttl. [`Error::NotHeld`] if it already expired and was
    /// removed (stop the protected work) or was released.
    pub fn heartbeat(&self, conn: &mut impl BorrowConnection) -> Result<()> {
        if protocol::heartbeat(sql_of(conn.borrow_connection())?, &self.req, self.ticket)? {
            Ok(())
        } else {
            Err(self.not_held())
        }
    }

    /// Releases the permit and lets the next in line in. [`Error::NotHeld`] when it was already
    /// released or had expired; nothing else changes then.
    pub fn release(&self, conn: &mut impl BorrowConnection) -> Result<()> {
        if protocol::release(sql_of(conn.borrow_connection())?, &self.req, self.ticket)? {
            Ok(())
        } else {
            Err(self.not_held())
        }
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.req.resource.clone(),
        }
    }
}
