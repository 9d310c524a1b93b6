//! Connection set-up that coordination needs: r2d2 pools whose connections are tuned for it,
//! and where guards, permits, waiters, schedules and the `Worker` get their connections
#![cfg_attr(
    feature = "deadpool",
    doc = "([`ConnectionSource`]: an r2d2 pool, or a `deadpool-diesel` one through [`Deadpool`])."
)]
#![cfg_attr(
    not(feature = "deadpool"),
    doc = "([`ConnectionSource`]: an r2d2 pool, or a `deadpool-diesel` one through `Deadpool`, \
           feature `deadpool`)."
)]

#[cfg(feature = "deadpool")]
mod deadpool;
#[cfg(feature = "deadpool")]
pub use self::deadpool::{build_deadpool, Deadpool};
#[cfg(feature = "r2d2")]
mod r2d2;
#[cfg(feature = "r2d2")]
pub use self::r2d2::{build_pool, PoolOptions, WaiterWakeups};

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use diesel::connection::CacheSize;

use crate::backend::Dialect;
use crate::notify::listener::Listener;
use crate::notify::Notifications;

/// An r2d2 connection customizer that prepares each new connection for concurrent use.
///
/// On SQLite it sets `busy_timeout` (writers wait for the lock instead of failing with
/// `SQLITE_BUSY`), `journal_mode = WAL` (readers never block the writer) and
/// `synchronous = NORMAL`. On MySQL / MariaDB it sets the session's `wait_timeout` to
/// [`mysql_idle_timeout`](Self::mysql_idle_timeout): see there. On every backend it first
/// refuses a server diesel-lease does not run on ([`check_server`](crate::backend::check_server)),
/// and with [`transaction_pooler`](Self::transaction_pooler) turns Diesel's prepared-statement
/// cache off.
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
    /// MySQL / MariaDB: how long the server keeps a connection that sends nothing
    /// (`wait_timeout`, whole seconds, at least 1; `None` keeps the server's, 8 hours by
    /// default). Default: 10 minutes.
    ///
    /// This is the connection's read timeout, as far as one can be had: Diesel's
    /// `MysqlConnection` sets no client-side read timeout and exposes no way to set one, so a
    /// client that waits for a reply the server will never send (the server finished, or
    /// dropped the statement, and went idle) would wait forever. The server, seeing an idle
    /// session, closes it after this long; the waiting call then fails with
    /// [`Error::ConnectionLost`](crate::Error::ConnectionLost) and the pool replaces the
    /// connection. It does not help when the server or the network itself is gone (then the
    /// operating system's TCP timeouts apply), and a connection your code keeps checked out
    /// and idle for longer (inside a transaction, across a slow external call) is closed too.
    pub mysql_idle_timeout: Option<Duration>,
    /// The connection goes through a transaction pooler (PgBouncer with `pool_mode =
    /// transaction`, or any proxy that runs each transaction on whichever server connection is
    /// free): turn Diesel's prepared-statement cache off, so every statement is sent with its
    /// text in one round of the protocol that ends with its transaction (Diesel's unnamed
    /// statements), and never `LISTEN` on a connection a caller passes in (in this process).
    /// Default `false`. See [`PoolOptions::transaction_pooler`].
    pub transaction_pooler: bool,
}

impl Default for ConnectionTuning {
    fn default() -> Self {
        ConnectionTuning {
            busy_timeout: crate::backend::DEFAULT_BUSY_TIMEOUT,
            mysql_idle_timeout: Some(Duration::from_secs(600)),
            transaction_pooler: false,
        }
    }
}

impl ConnectionTuning {
    /// Applies the tuning to one connection (what the pool does for every new connection).
    /// [`Error::Config`](crate::Error::Config) for a server diesel-lease refuses.
    pub fn apply<C: Dialect>(&self, conn: &mut C) -> crate::Result<()> {
        if self.transaction_pooler {
            conn.set_prepared_statement_cache_size(CacheSize::Disabled);
            crate::notify::note_transaction_pooler();
        }
        crate::backend::check_engine(conn)?;
        Ok(conn.tune(self.busy_timeout, self.mysql_idle_timeout)?)
    }
}

/// `url` with the client-side network settings that bound a connection's wait for a server that
/// fell silent, each added only where `url` does not set it (what [`build_pool`] and
/// [`WaiterWakeups`] connect with; use it for a pool you build yourself).
///
/// PostgreSQL (libpq reads them from the URL or `key=value` string):
///
/// | setting | value | what it bounds |
/// |---|---|---|
/// | `keepalives` | `1` | TCP keepalives on |
/// | `keepalives_idle` | `5` (s) | silence before the first probe |
/// | `keepalives_interval` | `5` (s) | between probes |
/// | `keepalives_count` | `3` | unanswered probes before the connection is given up |
/// | `tcp_user_timeout` | `20000` (ms) | data sent and not acknowledged; on Linux it also caps the probing |
/// | `connect_timeout` | `10` (s) | one connection attempt (per host) |
///
/// So a call waiting for a reply that a partitioned network swallows fails with
/// [`Error::ConnectionLost`](crate::Error::ConnectionLost) after about 20 s, where libpq alone
/// would wait for Linux's defaults (about 15 minutes with data unacknowledged, over two hours
/// otherwise). `connect_timeout` is left out when `PGCONNECT_TIMEOUT` is set; a URL that names
/// a `service` (or with `PGSERVICE` set) gets none of them, since its service file may set them.
/// They bound what the kernel sees: a server whose host still acknowledges packets but never
/// answers (hung, or a proxy in front that stopped forwarding) is not detected; the library's
/// bounded calls (drops, waiting acquires, a `Worker`'s stop) give up on it by themselves.
///
/// MySQL / MariaDB: unchanged. Diesel's `MysqlConnection` reads no timeout from its URL and
/// offers no other way to set the client's read timeout (`MYSQL_OPT_READ_TIMEOUT`), so nothing
/// client-side bounds a read; [`ConnectionTuning::mysql_idle_timeout`] has the server close a
/// session that went idle. SQLite: unchanged.
///
/// ```
/// # #[cfg(feature = "postgres")] {
/// use diesel::PgConnection;
/// use diesel_lease::pool::with_network_settings;
///
/// let url = with_network_settings::<PgConnection>("postgres://app@db/app?keepalives_idle=30");
/// assert_eq!(
///     url,
///     "postgres://app@db/app?keepalives_idle=30&keepalives=1&keepalives_interval=5\
///      &keepalives_count=3&tcp_user_timeout=20000&connect_timeout=10"
/// );
/// # }
/// ```
pub fn with_network_settings<C: Dialect>(url: &str) -> String {
    C::with_network_settings(url).into_owned()
}

/// A listener on `url` where the backend has notifications.
#[cfg_attr(not(any(feature = "r2d2", feature = "deadpool")), allow(dead_code))]
fn listener<C>(url: impl Into<String>) -> Option<Arc<Listener>>
where
    C: Notifications,
{
    C::NOTIFICATIONS.then(|| Arc::new(Listener::new::<C>(url.into())))
}

/// What a checkout of an r2d2 pool with [`WaiterWakeups`] leaves with the thread: the pool's
/// identity (the handler's address, which lives as long as the pool) and its listener.
type CheckedOut = (usize, Option<Weak<Listener>>);

thread_local! {
    /// The pool this thread last checked a connection out of.
    static CHECKED_OUT: RefCell<Option<CheckedOut>> = const { RefCell::new(None) };
}

/// Leaves with this thread what a checkout of `pool` (its identity) tells a waiter: the pool's
/// `listener`, which [`lend_with_listener`] picks up right after the checkout. An r2d2 pool's
/// [`WaiterWakeups`] calls it, and a [`Deadpool`] with a listener when it lends.
#[cfg_attr(not(any(feature = "r2d2", feature = "deadpool")), allow(dead_code))]
pub(crate) fn checked_out(pool: usize, listener: Option<&Arc<Listener>>) {
    let listener = listener.map(Arc::downgrade);
    CHECKED_OUT.with(|slot| *slot.borrow_mut() = Some((pool, listener)));
}

/// What a waiter learns from a checkout: the pool's listener, and an identity of the pool that
/// its waiters share (`notify::gate`). `None`s for a pool that keeps them to itself (an r2d2
/// pool without [`WaiterWakeups`]: its waiters poll on their own).
#[derive(Clone, Default)]
pub(crate) struct Checkout {
    pub(crate) listener: Option<Arc<Listener>>,
    pub(crate) pool: Option<usize>,
}

/// Lends a connection of `source` (see [`ConnectionSource::lend`]) together with what the
/// checkout told about its pool ([`Checkout`]).
pub(crate) fn lend_with_listener<S: ConnectionSource>(
    source: &S,
    wait: Duration,
) -> crate::Result<(S::Lent, Checkout)> {
    CHECKED_OUT.with(|slot| slot.borrow_mut().take());
    let conn = source.lend(wait)?;
    let (pool, listener) = CHECKED_OUT
        .with(|slot| slot.borrow_mut().take())
        .map_or((None, None), |(pool, listener)| (Some(pool), listener));
    Ok((
        conn,
        Checkout {
            listener: listener.and_then(|listener| listener.upgrade()),
            pool: source.identity().or(pool),
        },
    ))
}

/// A loan for one attempt of a waiting call (a poll, a grant attempt): the connection, or
/// `None` when none came in time, which the caller counts as a missed attempt and tries again;
/// `reach` keeps what the attempt got ([`Reach`]).
/// [`Error::Config`](crate::Error::Config) is returned instead: a source that can never lend
/// (a deadpool pool without a runtime) is a mistake to report at once, not an attempt to miss
/// until the deadline.
pub(crate) fn loan_or_miss<T>(loan: crate::Result<T>, reach: &Reach) -> crate::Result<Option<T>> {
    match loan {
        Ok(lent) => {
            reach.reached();
            Ok(Some(lent))
        }
        Err(e @ crate::Error::Config(_)) => Err(e),
        Err(e) => {
            reach.missed(e);
            Ok(None)
        }
    }
}

/// What the attempts of one waiting call got from their connection source: whether any of them
/// got a connection, and the error of the last that got none.
///
/// A wait that ends at its deadline without a single attempt having had a connection reports
/// that error ([`Error::Pool`](crate::Error::Pool): the server refused connections, or the
/// pool's connections were all in use) instead of [`Error::Timeout`](crate::Error::Timeout) or
/// an empty result: the caller learns that it never reached the database, not that nobody let
/// it in or that no row came. Shared with the attempts' threads.
#[derive(Clone, Default)]
pub(crate) struct Reach(Arc<std::sync::Mutex<ReachState>>);

#[derive(Default)]
struct ReachState {
    reached: bool,
    missed: Option<crate::Error>,
}

impl Reach {
    fn state(&self) -> std::sync::MutexGuard<'_, ReachState> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn reached(&self) {
        let mut state = self.state();
        state.reached = true;
        state.missed = None;
    }

    fn missed(&self, e: crate::Error) {
        let mut state = self.state();
        if !state.reached {
            state.missed = Some(e);
        }
    }

    /// The last attempt's error, if no attempt got a connection; taken.
    pub(crate) fn unreached(&self) -> Option<crate::Error> {
        self.state().missed.take()
    }

    /// `e`, the wait's outcome at its own deadline ([`Error::Timeout`](crate::Error::Timeout)
    /// without a database error), or the last attempt's error if no attempt got a connection.
    pub(crate) fn explain(&self, e: crate::Error) -> crate::Error {
        match e {
            crate::Error::Timeout { source: None, .. } => self.unreached().unwrap_or(e),
            e => e,
        }
    }
}

// `pub` for the suite (through `__private`), in a private module: its value is written on the
// options it is the default of.
pub(crate) mod drop_wait {
    use std::time::Duration;

    /// How long the pool's keeper may wait for a connection to end the grant of a dropped lease
    /// guard, permit or claim guard, counted from the drop (which returns at once): when none
    /// came in time, nothing is started and the grant expires at its ttl (a claim: at its
    /// timeout). The default of
    /// `lease::LeaseOptions::drop_wait`, `claim::ClaimOptions::drop_wait` and
    /// `semaphore::Semaphore::with_drop_wait`.
    pub const DROP_WAIT: Duration = Duration::from_secs(2);
}
pub(crate) use drop_wait::DROP_WAIT;

/// What a holder does when it ends explicitly (a release, a completion): lends a connection and
/// runs `end` on it, within `wait` in all. `end` runs on a thread of its
/// own (`courier`): when the database has not answered by then (an exhausted pool, a health
/// check or statement that waits on a silent server), this returns
/// [`Error::Timeout`](crate::Error::Timeout) naming `what`. A health check or statement under
/// way goes on in the background; a connection lent only after `wait` runs nothing.
pub(crate) fn end_within<S, T>(
    source: &S,
    wait: Duration,
    what: &str,
    end: impl FnOnce(&mut S::Connection) -> crate::Result<T> + Send + 'static,
) -> crate::Result<T>
where
    S: ConnectionSource,
    T: Send + 'static,
{
    let started = std::time::Instant::now();
    // A keeper's beat still under way changes nothing once the ending has run: every extension
    // matches only a grant that is still held (a lease: not released; a claim: still claimed by
    // this owner; a permit: its row still there).
    let (source, named) = (source.clone(), what.to_owned());
    let bound = started.checked_add(wait);
    let ended = crate::courier::Courier::new().call_within(
        wait,
        move || {
            let mut conn = source.lend(wait)?;
            if bound.is_some_and(|bound| std::time::Instant::now() >= bound) {
                // The caller has gone: nothing starts after its bound (what is held expires).
                return Err(crate::Error::waited(&named, wait));
            }
            S::with_lent(&mut conn, end)
        },
        |_| {},
    );
    ended.unwrap_or_else(|| Err(crate::Error::waited(what, started.elapsed())))
}

/// Where guards, permits, waiters, schedules and the `Worker` get their connections: an r2d2
/// pool, or
#[cfg_attr(
    feature = "deadpool",
    doc = "any other pool implementing this ([`Deadpool`], feature `deadpool`, for a \
           `deadpool-diesel` pool of an async application)."
)]
#[cfg_attr(
    not(feature = "deadpool"),
    doc = "any other pool implementing this (`Deadpool`, feature `deadpool`, for a \
           `deadpool-diesel` pool of an async application)."
)]
///
/// A lent connection is used through [`with_lent`](Self::with_lent), a closure on the thread
/// that holds it: a `deadpool-diesel` connection sits behind a mutex whose guard cannot leave its
/// thread, while the loan itself ([`Lent`](Self::Lent)) can.
///
/// Each wait for a connection is bounded by the caller: a heartbeat never waits past its holder's
/// local deadline, and a drop never waits long, so a starved pool cannot make a holder believe it
/// still holds what the database already gave away.
pub trait ConnectionSource: Clone + Send + Sync + 'static {
    /// The raw connection the pool lends.
    type Connection: Dialect;
    /// A lent connection; returned to the pool when dropped.
    type Lent: Send + 'static;
    /// Lends a connection, waiting at most `wait` for one:
    /// [`Error::Pool`](crate::Error::Pool) or [`Error::Timeout`](crate::Error::Timeout) when none
    /// came.
    fn lend(&self, wait: Duration) -> crate::Result<Self::Lent>;
    /// Runs `work` on the lent connection, on this thread.
    fn with_lent<T>(
        lent: &mut Self::Lent,
        work: impl FnOnce(&mut Self::Connection) -> crate::Result<T>,
    ) -> crate::Result<T>;
    /// How long a call waits for a connection when nothing else bounds it (an r2d2 pool's
    /// connection timeout).
    fn connection_timeout(&self) -> Duration;

    /// Something that tells this pool from every other pool alive in the process, the same for
    /// all its clones, where the source knows one (a waiter of a pool without one learns it at a
    /// checkout, or polls on its own). Internal; no stability promise.
    #[doc(hidden)]
    fn identity(&self) -> Option<usize> {
        None
    }

    /// Lends a connection for at most the [`connection_timeout`](Self::connection_timeout) and
    /// runs `work` on it.
    fn with_connection<T>(
        &self,
        work: impl FnOnce(&mut Self::Connection) -> crate::Result<T>,
    ) -> crate::Result<T> {
        let mut lent = self.lend(self.connection_timeout())?;
        Self::with_lent(&mut lent, work)
    }
}

/// A [`ConnectionSource`] whatever its type: what a guard, permit or `Worker` keeps, so that its
/// type names only the connection (`LeaseGuard<PgConnection>` from an r2d2 pool or a
/// `deadpool-diesel` one alike).
///
/// It also remembers the identity a checkout told of its pool (an r2d2 pool with
/// [`WaiterWakeups`] tells it only at a checkout), which decides the keeper of its holders.
pub(crate) struct AnySource<C>(Arc<dyn ErasedSource<C>>, Arc<std::sync::OnceLock<usize>>);

impl<C> Clone for AnySource<C> {
    fn clone(&self) -> Self {
        AnySource(Arc::clone(&self.0), Arc::clone(&self.1))
    }
}

impl<C: Dialect + Send + 'static> AnySource<C> {
    /// `source` with its type erased.
    pub(crate) fn new<S: ConnectionSource<Connection = C>>(source: &S) -> Self {
        AnySource(Arc::new(source.clone()), Arc::default())
    }
}

/// [`ConnectionSource`] as an object.
trait ErasedSource<C>: Send + Sync {
    fn lend(&self, wait: Duration) -> crate::Result<Box<dyn ErasedLent<C>>>;
    fn connection_timeout(&self) -> Duration;
    fn identity(&self) -> Option<usize>;
}

/// A loan of an erased source: runs one closure on its connection.
pub(crate) trait ErasedLent<C>: Send {
    fn with(&mut self, work: &mut dyn FnMut(&mut C)) -> crate::Result<()>;
}

/// The loan of a source of type `S`.
struct LentOf<S: ConnectionSource>(S::Lent);

impl<S: ConnectionSource> ErasedLent<S::Connection> for LentOf<S> {
    fn with(&mut self, work: &mut dyn FnMut(&mut S::Connection)) -> crate::Result<()> {
        S::with_lent(&mut self.0, |conn| {
            work(conn);
            Ok(())
        })
    }
}

impl<S: ConnectionSource> ErasedSource<S::Connection> for S {
    fn lend(&self, wait: Duration) -> crate::Result<Box<dyn ErasedLent<S::Connection>>> {
        Ok(Box::new(LentOf::<S>(ConnectionSource::lend(self, wait)?)))
    }
    fn connection_timeout(&self) -> Duration {
        ConnectionSource::connection_timeout(self)
    }
    fn identity(&self) -> Option<usize> {
        ConnectionSource::identity(self)
    }
}

impl<C: Dialect + Send + 'static> ConnectionSource for AnySource<C> {
    type Connection = C;
    type Lent = Box<dyn ErasedLent<C>>;
    fn lend(&self, wait: Duration) -> crate::Result<Self::Lent> {
        if self.1.get().is_none() && self.0.identity().is_none() {
            // Learn the pool's identity from this checkout, leaving the rest of what it told
            // for `lend_with_listener`.
            CHECKED_OUT.with(|slot| slot.borrow_mut().take());
            let lent = self.0.lend(wait)?;
            if let Some((pool, _)) = CHECKED_OUT.with(|slot| slot.borrow().clone()) {
                let _ = self.1.set(pool);
            }
            return Ok(lent);
        }
        self.0.lend(wait)
    }
    fn with_lent<T>(
        lent: &mut Self::Lent,
        work: impl FnOnce(&mut C) -> crate::Result<T>,
    ) -> crate::Result<T> {
        let mut work = Some(work);
        let mut done = None;
        lent.with(&mut |conn| done = work.take().map(|work| work(conn)))?;
        done.unwrap_or_else(|| Err(crate::Error::Config("a lent connection ran nothing".into())))
    }
    fn connection_timeout(&self) -> Duration {
        self.0.connection_timeout()
    }
    fn identity(&self) -> Option<usize> {
        self.0.identity().or_else(|| self.1.get().copied())
    }
}

/// Waits at most `wait` until the releases that dropped guards, permits and claim guards of
/// `pool` handed to its keeper are done; `Ok(true)` when every one queued before the call is
/// (released, or left past its drop wait to expire by its ttl), `Ok(false)` when `wait` ran out
/// first.
///
/// A drop does no network I/O: the pool's keeper, a background thread, runs the release at
/// once. What is still queued when the process exits is not released; it expires by its ttl (a
/// claimed row: at its claim timeout). Call this before exiting — or before the next step of a
/// test that needs the grant free — to wait for them. It learns which keeper is `pool`'s from a
/// checkout (an [`Error::Pool`](crate::Error::Pool) or [`Error::Timeout`](crate::Error::Timeout)
/// when none comes within `wait`); it sends no statement.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::{LeaseGuard, LeaseOptions};
/// use std::time::Duration;
///
/// # fn main() -> diesel_lease::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4)?;
/// diesel_lease::run_migrations(&mut pool.get().unwrap())?;
/// let options = LeaseOptions::new(Duration::from_secs(60));
/// drop(LeaseGuard::try_acquire(&pool, "nightly", &options)?);
/// // Before exiting: let the keeper release what was dropped.
/// assert!(diesel_lease::pool::flush_releases(&pool, Duration::from_secs(5))?);
/// assert!(LeaseGuard::try_acquire(&pool, "nightly", &options)?.is_some());
/// # Ok(()) }
/// # }
/// ```
pub fn flush_releases<S>(pool: &S, wait: Duration) -> crate::Result<bool>
where
    S: ConnectionSource<Connection: Send>,
{
    let started = std::time::Instant::now();
    let source = AnySource::new(pool);
    if ConnectionSource::identity(&source).is_none() {
        drop(ConnectionSource::lend(&source, wait)?);
    }
    Ok(crate::keeper::flush(
        &source,
        wait.saturating_sub(started.elapsed()),
    ))
}
