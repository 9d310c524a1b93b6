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
//! use diesel_lease::prelude::*;
//! use diesel_lease::semaphore::Semaphore;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let url = dir.path().join("app.db").display().to_string();
//! let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
//! diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
//!
//! // At most 3 imports against the partner API at once, farm-wide.
//! let imports = Semaphore::new("partner-api", 3);
//! let permit = imports.acquire(&pool, Duration::from_secs(60)).unwrap();
//! // ... call the partner API; the permit heartbeats in the background ...
//! assert!(permit.release().unwrap().was_held()); // or just drop it
//! # }
//! ```
//!
//! # Lease or semaphore?
//!
//! - A **lease** (`lease`) is for work that must run *once*, by anybody: if somebody
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
//! what makes the scheme safe against the commit-order race of a classic control table (identity values handed out
//! before commit); the argument is spelled out in the `protocol` module and in the semaphores guide
//! ("How it works, and why two holders never happen").
//!
//! Holders heartbeat while they hold (every ttl/3, from a background thread for a pool-backed
//! [`PermitGuard`]); waiters refresh their row on every poll. A row whose owner stops for longer than
//! the ttl is removed by the next transaction on that resource, and the next in line proceeds.
//!
//! Waiters poll with exponential backoff capped at one second (one short transaction per
//! second per idle waiter). Where releases in other processes wake nobody (SQLite, MySQL), the
//! waiter at the head of the queue also reads its own row between polls (every 20 ms at first;
//! a head that has waited long reads it every 32nd of its wait, at most once per poll
//! interval), and a waiter behind it that saw the queue move polls next when the requests ahead
//! of it should be gone. A pool-backed waiter ([`Semaphore::acquire`], [`RwLock::read`],
//! [`RwLock::write`]) borrows a pool connection for each poll and gives it back before it
//! sleeps, so waiters never hold the connections that the holders' heartbeats need: a pool of
//! two serves a heartbeating holder and any number of waiters. A poll that gets no connection in
//! time is skipped, not an error; at the deadline the wait fails with
//! [`Error::Timeout`](crate::Error::Timeout), or with the last poll's
//! [`Error::Pool`](crate::Error::Pool) if not one poll got a connection.
//!
//! On PostgreSQL every transaction that lets somebody in also sends `pg_notify` with the
//! resource as payload, so the next waiter wakes within milliseconds instead of at its next
//! poll. Pool-backed waiters receive it through their pool's one listener connection (see
//! [`WaiterWakeups`](crate::pool::WaiterWakeups), which [`build_pool`](crate::pool::build_pool)
//! installs): a background thread with a dedicated connection, outside the pool, that wakes the
//! waiters of the notified resource. If that connection breaks, waiters go on polling while it
//! reconnects. A waiter on a connection of its own ([`Semaphore::acquire_on`]) keeps that
//! connection for the whole wait and `LISTEN`s on it.
//!
//! # Limits
//!
//! A holder that stalls longer than the ttl (a long GC pause, a suspended VM) loses its permit
//! while it still believes it holds it; [`is_lost`](crate::Held::is_lost) says so after the next heartbeat.
//! Choose a ttl far above any pause you expect.
//!
//! Called inside an open transaction of the caller's, every function that changes the queue
//! (`acquire_on`, and a [`Permit`]'s `heartbeat` and `release`) fails with
//! `Error::Database(diesel::result::Error::AlreadyInTransaction)`, before it sends anything: a
//! grant must commit on its own, and waiting inside a transaction would hold the caller's locks
//! while it waits. [`Semaphore::queue`] only reads, and works inside one.

mod access;
pub(crate) mod control;
mod gate;
mysql_like_modules! {
    /// MySQL's semaphore statements: no `ON CONFLICT` and no `RETURNING`, so the resource row is an
    /// `INSERT IGNORE` and a new ticket is the session's last auto-increment value.
}
mod permit;
pub(crate) mod protocol;
mod request;
mod rwlock;
pub(crate) mod schema;
pub(crate) mod statements;

use std::time::Duration;

use self::access::{FromPool, OwnConnection};
use self::request::{ControlTarget, Request};
use crate::{BorrowConnection, InvalidInput, OwnerId, Result, Ttl};

use crate::pool::{AnySource, ConnectionSource, DROP_WAIT};
pub use control::ControlTable;
pub(crate) use control::SemaphoreDialect;
pub(crate) use control::{HasModeColumn, OneResource, ResourceColumn};
pub use lease_core::admission::{Mode, QueueEntry};
pub use permit::{Permit, PermitGuard};
pub use rwlock::RwLock;

/// The longest resource name the built-in table stores, in bytes.
pub(crate) const MAX_RESOURCE_LEN: usize = 255;

/// How long a holder or waiter stays in the queue without a heartbeat, unless set with
/// [`Semaphore::with_ttl`].
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The longest pause between two polls of a waiter, unless set with
/// [`Semaphore::with_max_poll_interval`].
pub(crate) const DEFAULT_MAX_POLL: Duration = Duration::from_secs(1);

/// A counting semaphore over a named resource, shared by every process using the database.
///
/// At most [`permits`](Self::permits) holders at once; the others are admitted in the order they
/// asked (FIFO). Many resources live in the same table, each with its own limit. Cheap to
/// create and clone; it only describes the resource.
///
/// Every process using a resource must declare the same permit count: a different count is
/// refused with [`Error::PermitsMismatch`](crate::Error::PermitsMismatch) while anybody holds or waits for the resource, and
/// becomes the new count once the resource is idle.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::SqliteConnection;
/// use diesel_lease::semaphore::Semaphore;
/// use diesel_lease::Held;
///
/// let dir = tempfile::tempdir().unwrap();
/// let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
///
/// let mutex = Semaphore::mutex("schema-change");
/// let held = mutex.try_acquire(&pool).unwrap().expect("nobody else holds it");
/// assert!(mutex.try_acquire(&pool).unwrap().is_none()); // busy: try_acquire never waits
/// assert!(held.release().unwrap().was_held()); // or drop it: the pool's keeper releases it
/// assert!(mutex.try_acquire(&pool).unwrap().is_some());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    resource: String,
    /// As given; checked (with the other settings) when a request is made.
    permits: u32,
    /// What `permits` is called in an error: `permits`, or a lock's `max readers`.
    permits_name: &'static str,
    ttl: Duration,
    owner: OwnerId,
    max_poll: Duration,
    drop_wait: Duration,
    /// The user's control table the requests are rows of; `None`: the built-in tables.
    table: Option<ControlTarget>,
    /// Whether the resource's row goes when its queue empties (see [`Self::removed_when_idle`]).
    remove_when_idle: bool,
}

impl Semaphore {
    /// A semaphore of `permits` holders over `resource`.
    ///
    /// Like every setter of this type, it only records what it is given: the settings are
    /// checked when a permit is asked for ([`acquire`](Self::acquire), …), which then fails with
    /// [`InvalidInput::EmptyName`] / [`InvalidInput::NameTooLong`] for a bad name (at most 255
    /// bytes),
    /// [`InvalidInput::Zero`] for zero permits, [`InvalidInput::TooLarge`] above `i32::MAX` and
    /// [`InvalidInput::ZeroDuration`] for a zero ttl, poll interval or drop wait.
    ///
    /// Semaphores on a control table serialize on rows of the same namespace, named
    /// `<table>#<resource>` (or `<table>` without a resource column): avoid those names. A
    /// built-in semaphore with one is a separate lock sharing that row. Neither ever admits more
    /// holders than its own count, but while the other's count is stored on the row, a new
    /// request whose own queue is busy fails with
    /// [`Error::PermitsMismatch`](crate::Error::PermitsMismatch).
    pub fn new(resource: impl Into<String>, permits: u32) -> Self {
        Semaphore {
            resource: resource.into(),
            permits,
            permits_name: "permits",
            ttl: DEFAULT_TTL,
            owner: OwnerId::process_default().clone(),
            max_poll: DEFAULT_MAX_POLL,
            drop_wait: DROP_WAIT,
            table: None,
            remove_when_idle: false,
        }
    }

    /// A semaphore of `permits` holders whose requests are rows of your control table `T`
    /// (a `ProcessControl`-style table), described by `#[control_table(...)]`; the derive
    /// gives `T::semaphore(...)`, which calls this.
    ///
    /// `resource` is the value of `T`'s resource column (`None` when `T` has none: the table
    /// then serves one resource). The queue is serialized by a row of the library's
    /// `diesel_lease_semaphores` named `<table>#<resource>` (also what
    /// [`resource`](Self::resource) returns), so the library's migrations must have run.
    /// Checked like [`new`](Self::new) when used; `resource` is `Some` exactly when `T` has a
    /// resource column (the extension traits that call this make sure of it).
    #[doc(hidden)]
    pub fn in_control_table<T: ControlTable>(resource: Option<String>, permits: u32) -> Self {
        let (key, stored) = match (T::RESOURCE, resource) {
            (Some(_), Some(resource)) => (format!("{}#{resource}", T::NAME), Some(resource)),
            (_, _) => (T::NAME.to_owned(), None),
        };
        let mut sem = Self::new(key, permits);
        sem.table = Some(ControlTarget {
            table: control::TableOf::<T>::handle(),
            resource: stored,
        });
        sem
    }

    /// A mutex: a semaphore with one permit.
    pub fn mutex(resource: impl Into<String>) -> Self {
        Self::new(resource, 1)
    }

    /// How long a holder or waiter stays in the queue after its last heartbeat (default
    /// 30 s). Pool-backed permits heartbeat every ttl/3. Zero is refused when used.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Who the requests are recorded as (default: [`OwnerId::process_default`]).
    pub fn with_owner(mut self, owner: OwnerId) -> Self {
        self.owner = owner;
        self
    }

    /// The longest pause between two polls of a waiter (default 1 s, and never
    /// more than ttl/3). Lower values hand a freed permit over sooner on SQLite and MySQL at the
    /// cost of more queries; PostgreSQL waiters are woken by notifications anyway (pool-backed
    /// ones when their pool has [`WaiterWakeups`](crate::pool::WaiterWakeups)). Zero is refused
    /// when used.
    pub fn with_max_poll_interval(mut self, max: Duration) -> Self {
        self.max_poll = max;
        self
    }

    /// How long the pool's keeper may wait for a connection to release a dropped [`PermitGuard`]
    /// (default 2 s, counted from the drop, which itself returns at once): when none came in
    /// time, the release is left and the permit expires after its ttl. The same bound applies to what must not hang on a cut-off database:
    /// [`try_acquire`](Self::try_acquire) and taking a request back at the deadline (waits for a
    /// connection and for the resource's lock), and a release's lock wait (an explicit
    /// [`PermitGuard`] release waits for its connection up to the pool's connection timeout, as
    /// [`Held::release`](crate::Held::release) says); a waiting
    /// [`acquire`](Self::acquire) returns within its timeout plus this. A permit that cannot be
    /// released in time expires after its ttl. Zero is refused when used.
    pub fn with_drop_wait(mut self, wait: Duration) -> Self {
        self.drop_wait = wait;
        self
    }

    /// Deletes the resource's row in `diesel_lease_semaphores` whenever a release leaves its
    /// queue empty (the next user creates it again), for resources named after data, such as
    /// the [`Worker`](crate::worker::Worker)'s one semaphore per key value: without it the
    /// table keeps a row for every name ever used.
    pub(crate) fn removed_when_idle(mut self) -> Self {
        self.remove_when_idle = true;
        self
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many holders the resource admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The ttl of requests.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Waits up to `timeout` for a permit, using connections from `pool`.
    ///
    /// Permits are granted in request order. While waiting it borrows a pool connection for
    /// each poll (waiting at most until the deadline for one) and gives it back in between; a
    /// poll that gets none in time is skipped. The returned [`PermitGuard`] heartbeats from a
    /// background thread, borrowing a pool connection for each beat every ttl/3, and is released
    /// when dropped or by [`release`](crate::Held::release). On PostgreSQL the waiter is woken by the pool's
    /// listener (see the [module docs](self)).
    ///
    /// A zero `timeout` tries once, with a connection that is free at once. At the deadline it
    /// fails with [`Error::Timeout`](crate::Error::Timeout) and leaves no request behind (if no
    /// connection can be had to delete it within the drop wait ([`with_drop_wait`](Self::with_drop_wait)), it expires after the ttl); when
    /// no poll got a connection at all (the server refused them, or the pool's were all in use
    /// the whole time), with the last poll's [`Error::Pool`](crate::Error::Pool) instead;
    /// `Duration::MAX` waits forever. It returns within `timeout` plus the
    /// [drop wait](Self::with_drop_wait) whatever the network does: each poll runs on a thread of
    /// its own and is given up once both the deadline and the drop wait from its start have
    /// passed (it goes on in the background, and a request it queued, or a permit it found
    /// granted, is taken back out when it ends; if the database is gone by then, the request
    /// expires after its ttl).
    pub fn acquire<C>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
        timeout: Duration,
    ) -> Result<PermitGuard<C>>
    where
        C: SemaphoreDialect,
    {
        pooled(pool, self.request(Mode::Shared)?, timeout, self.max_poll)
    }

    /// Takes a permit if one is free right now and nobody is queued ahead; never waits.
    /// `Ok(None)` when busy (nothing is left queued).
    ///
    /// It returns within twice the [drop wait](Self::with_drop_wait) and a second whatever the
    /// network does (half a drop wait for a connection, one for the resource's lock, whose
    /// timeout the database reports as [`Error::Timeout`](crate::Error::Timeout) with its error;
    /// MySQL counts it in whole seconds, rounded up): the try runs on a
    /// thread of its own, and one that has not answered by then fails with
    /// [`Error::Timeout`](crate::Error::Timeout) naming the resource and goes on in the
    /// background, where a permit it gets is released. No connection within the drop wait is
    /// the pool's error ([`Error::Pool`](crate::Error::Pool)).
    pub fn try_acquire<C>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Option<PermitGuard<C>>>
    where
        C: SemaphoreDialect,
    {
        pooled_try(pool, self.request(Mode::Shared)?)
    }

    /// Like [`acquire`](Self::acquire), on a connection you own, which it uses for the whole
    /// wait. The [`Permit`] does not heartbeat or release itself; call [`Permit::heartbeat`]
    /// within every ttl and [`Permit::release`] when done.
    ///
    /// On PostgreSQL it `LISTEN`s on the connection while it waits and `UNLISTEN`s its channel
    /// after; your own `LISTEN`s stay. It reads the notifications the connection receives while
    /// it waits, and drops those of other channels among them (whether one sent during the wait
    /// is read then, or left for you, depends on when the server delivers it): wait on a
    /// connection that does not `LISTEN` for anything of yours.
    pub fn acquire_on(
        &self,
        conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
        timeout: Duration,
    ) -> Result<Permit> {
        manual(conn, self.request(Mode::Shared)?, timeout, self.max_poll)
    }

    /// The resource's queue in ticket order: holders and waiters, as the database has them now
    /// (including rows that expired but were not yet removed).
    ///
    /// On a control table the table has no request or grant times: `requested_at_micros` is 0
    /// and `granted_at_micros` `None`.
    pub fn queue(
        &self,
        conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
    ) -> Result<Vec<QueuedRequest>> {
        queue_of(conn, &self.resource, self.table.as_ref())
    }

    /// The request this semaphore makes, once its settings are checked: the one place they are.
    fn request(&self, mode: Mode) -> Result<Request> {
        if let Some(resource) = self.table.as_ref().and_then(|t| t.resource.as_deref()) {
            lease_core::validate_name("resource", resource, MAX_RESOURCE_LEN)?;
        }
        // The name of the row that serializes the queue: for a control table `<table>#<resource>`,
        // which must fit the row's column too (MySQL would cut it short and never find it).
        let what = match &self.table {
            Some(_) => "control table and resource (`<table>#<resource>`)",
            None => "resource",
        };
        lease_core::validate_name(what, &self.resource, MAX_RESOURCE_LEN)?;
        Ttl::new("max poll interval", self.max_poll)?;
        Ok(Request {
            resource: self.resource.clone(),
            permits: permits_value(self.permits_name, self.permits)?,
            owner: self.owner.as_str().to_string(),
            mode,
            ttl: Ttl::new("ttl", self.ttl)?,
            drop_wait: Ttl::new("drop wait", self.drop_wait)?.as_duration(),
            table: self.table.clone(),
            remove_when_idle: self.remove_when_idle,
        })
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

fn pooled_try<S, C>(pool: &S, req: Request) -> Result<Option<PermitGuard<C>>>
where
    S: ConnectionSource<Connection = C>,
    C: SemaphoreDialect,
{
    use self::access::Access;
    let op = acquire_op(crate::backend::kind::<C>(), &req);
    // "Never waits": for a connection (not the pool's connection timeout, 30 s by default) no
    // longer than half the drop wait, then for the resource's lock no longer than the drop
    // wait (the database's lock timeout: `Error::Timeout` with its error; MySQL counts it in
    // whole seconds, rounded up), and for the answer no longer than twice the drop wait and a
    // second in all. The try runs on a thread of its own, so a
    // silent link or a health check that hangs does not hold the caller; a permit it gets
    // after the caller stopped waiting is released there.
    let source = AnySource::new(pool);
    let mut access = FromPool::new(source.clone(), &req, Duration::ZERO).with_allowance(
        req.drop_wait
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(1)),
    );
    let (once, leaving) = (req.clone(), req.clone());
    // Half of it for a connection, so that a checkout that comes too late is a miss the pool
    // reports, not a try that goes on (and takes a permit) after the caller has its answer.
    let granted = access
        .step_or_undo(
            req.drop_wait / 2,
            move |sql| protocol::try_once(sql, &once),
            move |granted, sql| match granted {
                Some(granted) => protocol::release(sql, &leaving, granted.ticket).map(drop),
                None => Ok(()),
            },
        )
        // A timeout the database reported names the resource.
        .map_err(|e| e.concerning(|| req.resource.clone()))
        .and_then(|stepped| {
            // No connection within the drop wait: the pool's error says why.
            stepped.ok_or_else(|| {
                access
                    .unreached()
                    .unwrap_or_else(|| crate::Error::waited(&req.resource, req.drop_wait))
            })
        });
    match op.finish(granted, granted_outcome)? {
        Some(granted) => PermitGuard::start(source, req, granted).map(Some),
        None => Ok(None),
    }
}

/// The span of one acquisition (with or without waiting).
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
fn acquire_op(kind: crate::BackendKind, req: &Request) -> crate::observe::Op {
    crate::observe::op!(
        SemaphoreAcquire,
        "",
        kind,
        resource = req.resource.as_str(),
        owner = req.owner.as_str(),
        mode = req.mode.as_str(),
        permits = req.permits,
    )
}

fn granted_outcome<G: GrantedTicket>(granted: &G) -> (&'static str, u64) {
    match granted.ticket() {
        Some(ticket) => ("granted", u64::try_from(ticket).unwrap_or(0)),
        None => ("busy", 0),
    }
}

/// A grant's ticket, for the span (`rows` is the ticket of a grant).
trait GrantedTicket {
    fn ticket(&self) -> Option<i64>;
}

impl GrantedTicket for protocol::Granted {
    fn ticket(&self) -> Option<i64> {
        Some(self.ticket)
    }
}

impl GrantedTicket for Option<protocol::Granted> {
    fn ticket(&self) -> Option<i64> {
        self.as_ref().map(|g| g.ticket)
    }
}

/// Waits up to `timeout` for `req` with connections from `pool`; the permit then heartbeats
/// itself.
fn pooled<C>(
    pool: &impl ConnectionSource<Connection = C>,
    req: Request,
    timeout: Duration,
    max_poll: Duration,
) -> Result<PermitGuard<C>>
where
    C: SemaphoreDialect,
{
    let op = acquire_op(crate::backend::kind::<C>(), &req);
    let pool = AnySource::new(pool);
    let granted = protocol::acquire(
        &mut FromPool::new(pool.clone(), &req, timeout),
        &req,
        timeout,
        max_poll,
    );
    let granted = op.finish(granted, granted_outcome)?;
    PermitGuard::start(pool, req, granted)
}

fn manual(
    conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
    req: Request,
    timeout: Duration,
    max_poll: Duration,
) -> Result<Permit> {
    let conn = conn.borrow_connection();
    let op = acquire_op(crate::backend::kind_of(conn), &req);
    // Refused before the wait sends anything (a `LISTEN` first would run in the caller's
    // transaction, and fail with the server's own error in an aborted one).
    let granted = crate::backend::refuse_nested(conn)
        .map_err(crate::Error::from)
        .and_then(|()| {
            protocol::acquire(&mut OwnConnection::new(conn, &req), &req, timeout, max_poll)
        });
    let granted = op.finish(granted, granted_outcome)?;
    Ok(Permit {
        req,
        ticket: granted.ticket,
    })
}

/// The queue of `resource`; `table`: the user's control table its requests are rows of.
pub(crate) fn queue_of(
    conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
    resource: &str,
    table: Option<&ControlTarget>,
) -> Result<Vec<QueuedRequest>> {
    let rows = request::on_table(table, conn.borrow_connection(), |sql| {
        protocol::queue(sql, resource)
    })?;
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

/// Releases ticket `ticket` of `resource` whoever holds it, as its owner's release would (the
/// operator's forced release, `admin::force_release_ticket`). Whether the row existed.
pub(crate) fn release_ticket<C: SemaphoreDialect>(
    conn: &mut C,
    resource: &str,
    permits: i32,
    owner: &str,
    mode: Mode,
    ticket: i64,
) -> Result<bool> {
    let req = Request {
        resource: resource.to_string(),
        permits,
        owner: owner.to_string(),
        mode,
        // Unused by a release; any valid ttl.
        ttl: Ttl::new("ttl", DEFAULT_TTL)?,
        drop_wait: DROP_WAIT,
        table: None,
        remove_when_idle: false,
    };
    protocol::release(conn, &req, ticket)
}
