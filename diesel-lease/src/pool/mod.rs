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

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use diesel::connection::CacheSize;
use diesel::r2d2::event::CheckoutEvent;
use diesel::r2d2::{
    ConnectionManager, CustomizeConnection, HandleEvent, Pool, PooledConnection, R2D2Connection,
};

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
        let options = self;
        // Every connection, the check's and the listener's included, with the network bounds.
        let url = with_network_settings::<C>(url);
        let url = url.as_str();
        crate::backend::check_url::<C>(url, options.transaction_pooler)?;
        let listen_url = match (&options.listen_url, options.transaction_pooler) {
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
            transaction_pooler: options.transaction_pooler,
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
        C: Notifications + R2D2Connection,
    {
        let url = url.into();
        WaiterWakeups {
            listener: listener::<C>(with_network_settings::<C>(&url)),
        }
    }
}

/// A listener on `url` where the backend has notifications.
fn listener<C>(url: impl Into<String>) -> Option<Arc<Listener>>
where
    C: Notifications + R2D2Connection,
{
    C::NOTIFICATIONS.then(|| Arc::new(Listener::new::<C>(url.into())))
}

impl fmt::Debug for WaiterWakeups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaiterWakeups")
            .field("listener", &self.listener.is_some())
            .finish()
    }
}

/// What a checkout of an r2d2 pool with [`WaiterWakeups`] leaves with the thread: the pool's
/// identity (the handler's address, which lives as long as the pool) and its listener.
type CheckedOut = (usize, Option<Weak<Listener>>);

thread_local! {
    /// The pool this thread last checked a connection out of.
    static CHECKED_OUT: RefCell<Option<CheckedOut>> = const { RefCell::new(None) };
}

impl HandleEvent for WaiterWakeups {
    fn handle_checkout(&self, _event: CheckoutEvent) {
        // r2d2 calls this on the thread that checks out, just before it returns the connection.
        checked_out(std::ptr::from_ref(self) as usize, self.listener.as_ref());
    }
}

/// Leaves with this thread what a checkout of `pool` (its identity) tells a waiter: the pool's
/// `listener`, which [`lend_with_listener`] picks up right after the checkout. An r2d2 pool's
/// [`WaiterWakeups`] calls it, and a [`Deadpool`] with a listener when it lends.
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

    /// How long dropping a lease guard, permit or claim guard waits at most, in all: for its
    /// heartbeat to stop, then for a pool connection and the statement that ends the grant, whatever
    /// the pool's health check and the network do (the statement runs on a thread of its own; one
    /// that has not answered by then goes on in the background, and none starts after it). A grant
    /// that cannot be ended in time expires at its ttl (a claim: at its timeout) anyway. The default of
    /// `lease::LeaseOptions::drop_wait`, `claim::ClaimOptions::drop_wait` and
    /// `semaphore::Semaphore::with_drop_wait`.
    pub const DROP_WAIT: Duration = Duration::from_secs(2);
}
pub(crate) use drop_wait::DROP_WAIT;

/// What a holder does when it ends (a drop, a release, a completion): stops its heartbeat, then
/// lends a connection and runs `end` on it, within `wait` in all. `end` runs on a thread of its
/// own (`courier`): when the database has not answered by then (an exhausted pool, a health
/// check or statement that waits on a silent server), this returns
/// [`Error::Timeout`](crate::Error::Timeout) naming `what`. A health check or statement under
/// way goes on in the background; a connection lent only after `wait` runs nothing.
pub(crate) fn end_within<S, T>(
    heartbeat: Option<crate::heartbeat::Heartbeat<crate::Error>>,
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
    if let Some(heartbeat) = heartbeat {
        // A beat still under way changes nothing once the ending has run: every extension
        // matches only a grant that is still held (a lease: not released; a claim: still
        // claimed by this owner; a permit: its row still there).
        heartbeat.stop(wait.min(DROP_WAIT));
    }
    let left = wait.saturating_sub(started.elapsed());
    let (source, named) = (source.clone(), what.to_owned());
    let bound = started.checked_add(wait);
    let ended = crate::courier::Courier::new().call_within(
        left,
        move || {
            let mut conn = source.lend(left)?;
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

/// A [`ConnectionSource`] whatever its type: what a guard, permit or `Worker` keeps, so that its
/// type names only the connection (`LeaseGuard<PgConnection>` from an r2d2 pool or a
/// `deadpool-diesel` one alike).
pub(crate) struct AnySource<C>(Arc<dyn ErasedSource<C>>);

impl<C> Clone for AnySource<C> {
    fn clone(&self) -> Self {
        AnySource(Arc::clone(&self.0))
    }
}

impl<C: Dialect + Send + 'static> AnySource<C> {
    /// `source` with its type erased.
    pub(crate) fn new<S: ConnectionSource<Connection = C>>(source: &S) -> Self {
        AnySource(Arc::new(source.clone()))
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
        self.0.identity()
    }
}
