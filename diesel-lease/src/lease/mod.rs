//! Leases with fencing tokens: named, expiring locks kept in the database you already share.
//!
//! A lease is a row of the built-in `diesel_lease_leases` table (created by
//! [`run_migrations`](crate::run_migrations)). [`Lease::try_acquire`] grants it when it is free — never
//! used, expired, or released — and every grant carries a [`FencingToken`] one larger than the
//! grant before it, across releases, expiries and takeovers. Every time involved is the
//! database's clock (PostgreSQL `clock_timestamp()`, SQLite `julianday('now')`, MySQL
//! `UTC_TIMESTAMP(6)`); the client only sends durations, so servers whose clocks disagree still
//! agree about who holds a lease.
//!
//! | | PostgreSQL, SQLite | MySQL / MariaDB |
//! |---|---|---|
//! | acquire | one `INSERT … ON CONFLICT (name) DO UPDATE … WHERE grantable RETURNING token` | one autocommit `UPDATE … WHERE grantable` that leaves the new token in the session (`LAST_INSERT_ID(token + 1)`), then a `SELECT` of the row by that token; a plain `INSERT` on first use |
//! | extend, release | `UPDATE … WHERE name, token, not expired, not released` | same (the predicate holds the old state, so a matched row means "still mine") |
//!
//! Grantable: expired (or released), and for a periodic job also due (see
//! [`schedule`]).
//!
//! Two handles:
//! - [`Lease`]: plain data plus methods that take a connection (`&mut conn`), for code that
//!   manages its own connections. Dropping it does nothing; the lease expires at its ttl.
//! - [`LeaseGuard`]: built from an r2d2 pool; releases on drop and can keep itself alive with a
//!   background thread ([`LeaseOptions::keep_alive`]).
//!
//! # Fencing
//!
//! A lease can expire while its holder is paused (GC, swap, a stopped VM) and be granted to
//! someone else; the paused holder then wakes up believing it still holds it. Pass the token
//! along with every write to the protected resource and make the resource refuse older tokens:
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_lease::lease::{Lease, LeaseOptions};
//! use std::time::Duration;
//!
//! diesel::table! { reports (id) { id -> Integer, body -> Text, last_token -> BigInt, } }
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let url = dir.path().join("app.db").display().to_string();
//! let mut conn = SqliteConnection::establish(&url).unwrap();
//! diesel_lease::run_migrations(&mut conn).unwrap();
//! # diesel::sql_query("CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT NOT NULL, last_token BIGINT NOT NULL)").execute(&mut conn).unwrap();
//! # diesel::sql_query("INSERT INTO reports VALUES (1, '', 0)").execute(&mut conn).unwrap();
//!
//! let mut lease = Lease::try_acquire(&mut conn, "report", &LeaseOptions::new(Duration::from_secs(30)))
//!     .unwrap()
//!     .expect("nobody else holds it");
//! let token = lease.token().get();
//! // The write only lands if no later holder has written already.
//! let written = diesel::update(reports::table.find(1).filter(reports::last_token.lt(token)))
//!     .set((reports::body.eq("done"), reports::last_token.eq(token)))
//!     .execute(&mut conn)
//!     .unwrap();
//! assert_eq!(written, 1, "0 would mean a later holder got there first: stop");
//! assert!(lease.release(&mut conn).unwrap().was_held());
//! # }
//! ```
//!
//! Called inside an open transaction of the caller's, the functions that change a lease
//! (acquire, extend, release) fail with
//! `Error::Database(diesel::result::Error::AlreadyInTransaction)`: a grant made inside it would
//! stay invisible to the others, and a release could be rolled back, until it ends.

use std::time::{Duration, Instant};

use lease_core::{validate_name, Backoff, FencingToken, InvalidInput, OwnerId, Ttl};

use crate::backend::kind_of;
use crate::heartbeat::{default_margin, HolderState, LostReason, LostSignal};
use crate::lease::statements::LeaseStatements;
use crate::observe::op;
use crate::{BorrowConnection, Error, Released, Result};

mod guard;
pub(crate) mod job;
mysql_like_modules! {
    /// MySQL's lease grant: no `ON CONFLICT`, so a takeover of the existing row if it is grantable,
    /// else a plain insert of the name's first grant.
}
pub mod schedule;
pub(crate) mod schema;
pub(crate) mod statements;

pub use guard::LeaseGuard;
pub use job::{JobRun, JobRunOptions};

/// The longest lease name, in bytes (the `name` column is `VARCHAR(255)`).
pub(crate) const MAX_NAME_LEN: usize = 255;

/// How a lease is requested: how long it lasts, how long it is held at least, who holds it.
///
/// ```
/// use diesel_lease::lease::LeaseOptions;
/// use diesel_lease::OwnerId;
/// use std::time::Duration;
///
/// let options = LeaseOptions::new(Duration::from_secs(60)) // at most 60 s unless extended
///     .at_least_for(Duration::from_secs(10)) // stays held 10 s even if released sooner
///     .owner(OwnerId::new("report-node-1").unwrap())
///     .keep_alive(true); // LeaseGuard only: extend every 20 s in the background
/// assert_eq!(options.ttl(), Duration::from_secs(60));
/// ```
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    ttl: Duration,
    at_least_for: Duration,
    owner: Option<OwnerId>,
    keep_alive: bool,
    poll_min: Duration,
    poll_max: Duration,
    drop_wait: Duration,
    require_synchronous_replication: bool,
}

/// Options checked against the rules, ready to be sent.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) ttl: Ttl,
    pub(crate) at_least_for_micros: i64,
    pub(crate) holder: OwnerId,
    pub(crate) require_synchronous_replication: bool,
}

impl LeaseOptions {
    /// A lease that expires `ttl` after it is granted (ShedLock's "lock at most for"), unless it
    /// is extended. A holder that dies keeps others out for at most this long.
    pub fn new(ttl: Duration) -> Self {
        LeaseOptions {
            ttl,
            at_least_for: Duration::ZERO,
            owner: None,
            keep_alive: false,
            poll_min: Duration::from_millis(5),
            poll_max: Duration::from_millis(500),
            drop_wait: crate::pool::DROP_WAIT,
            require_synchronous_replication: false,
        }
    }

    /// Refuses every grant with [`Error::Config`], saying why, while the
    /// server is a PostgreSQL primary that streams to standbys asynchronously
    /// ([`Replication::AsyncStandbys`](crate::backend::Replication::AsyncStandbys)): a failover
    /// there can lose an acknowledged grant, and the new primary can then hand out the same
    /// fencing token again. Each grant reads the server's replication first (one more round
    /// trip). Default: off (a warning when the pool is built, see
    /// [`Replication`](crate::backend::Replication)).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use std::time::Duration;
    /// use diesel::Connection;
    /// use diesel_lease::lease::{Lease, LeaseOptions};
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = dir.path().join("app.db").display().to_string();
    /// let mut conn = diesel::SqliteConnection::establish(&url).unwrap();
    /// diesel_lease::run_migrations(&mut conn).unwrap();
    /// let options = LeaseOptions::new(Duration::from_secs(30)).require_synchronous_replication(true);
    /// // SQLite replicates nothing: the grant goes ahead.
    /// let mut lease = Lease::try_acquire(&mut conn, "nightly-report", &options).unwrap().expect("free");
    /// assert!(lease.release(&mut conn).unwrap().was_held());
    /// # }
    /// ```
    pub fn require_synchronous_replication(mut self, on: bool) -> Self {
        self.require_synchronous_replication = on;
        self
    }

    /// Keeps the lease held until `acquired_at + at_least_for` even when it is released sooner
    /// (ShedLock's "lock at least for"). Must not exceed the ttl. Default: zero.
    pub fn at_least_for(mut self, at_least_for: Duration) -> Self {
        self.at_least_for = at_least_for;
        self
    }

    /// The holder recorded in the table. Default: [`OwnerId::process_default`].
    pub fn owner(mut self, owner: OwnerId) -> Self {
        self.owner = Some(owner);
        self
    }

    /// For [`LeaseGuard`]: a background thread extends the lease by its ttl every ttl/3 and
    /// marks the guard lost when an extension finds the lease expired or held by someone else.
    /// Default: off.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = on;
        self
    }

    /// How [`Lease::acquire`] polls while it waits: exponential backoff with jitter from `min` to
    /// `max`. Default: 5 ms to 500 ms.
    pub fn poll(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self
    }

    /// How long the pool's keeper may wait for a connection to release a dropped [`LeaseGuard`]
    /// (default 2 s, counted from the drop, which itself returns at once): when none came in
    /// time, the release is left and the lease expires at its ttl. A waiting
    /// [`LeaseGuard::acquire`] gets it on top of its timeout, whatever the network does.
    /// Zero is refused (by the acquire) with [`InvalidInput::ZeroDuration`].
    pub fn drop_wait(mut self, wait: Duration) -> Self {
        self.drop_wait = wait;
        self
    }

    /// What [`drop_wait`](Self::drop_wait) set.
    pub fn drop_wait_limit(&self) -> Duration {
        self.drop_wait
    }

    /// The ttl ("at most for").
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether [`LeaseGuard`]s taken with these options keep themselves alive.
    pub fn keeps_alive(&self) -> bool {
        self.keep_alive
    }

    pub(crate) fn check(&self, name: &str) -> Result<Checked, InvalidInput> {
        validate_name("lease", name, MAX_NAME_LEN)?;
        let ttl = Ttl::new("ttl", self.ttl)?;
        Ttl::new("drop wait", self.drop_wait)?;
        if self.at_least_for > self.ttl {
            return Err(InvalidInput::AtLeastExceedsTtl {
                at_least_for: self.at_least_for,
                ttl: self.ttl,
            });
        }
        let at_least_for_micros = if self.at_least_for.is_zero() {
            0
        } else {
            Ttl::new("at_least_for", self.at_least_for)?.as_micros()
        };
        let holder = self
            .owner
            .clone()
            .unwrap_or_else(|| OwnerId::process_default().clone());
        Ok(Checked {
            ttl,
            at_least_for_micros,
            holder,
            require_synchronous_replication: self.require_synchronous_replication,
        })
    }
}

/// One grant of a lease: its name, holder and fencing token.
///
/// The methods that talk to the database take the connection as an argument. Dropping a
/// `Lease` does not release it (there is no connection to do it with): it then expires at its
/// ttl. Use [`LeaseGuard`] for release-on-drop.
#[derive(Debug)]
#[must_use = "a lease that is never released stays held until its ttl runs out"]
pub struct Lease {
    name: String,
    holder: OwnerId,
    token: FencingToken,
    ttl: Ttl,
    at_least_for_micros: i64,
    state: State,
    /// What this holder believes, by its own monotonic clock (see [`Lease::is_lost`]).
    local: HolderState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Held,
    Released,
    /// Lost, with who holds it now (holder and token) when somebody took it over.
    Lost(Option<(String, FencingToken)>),
}

/// After a refused grant: [`Error::TokensExhausted`] if the refusal is for good (after 9.2 ×
/// 10¹⁸ grants the token cannot move on), rather than because someone holds the lease. Asked
/// once per call (a waiting acquire asks at its first refusal), not on every poll.
pub(crate) fn refuse_if_exhausted<C: LeaseStatements>(conn: &mut C, name: &str) -> Result<()> {
    if record(conn, name)?.is_some_and(|r| r.token.get() == i64::MAX) {
        return Err(Error::TokensExhausted {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// The waiting of [`Lease::acquire`] and [`LeaseGuard::acquire`]: calls `attempt` with the time left
/// until it grants (`Some`), pausing as [`LeaseOptions::poll`] says between attempts, and fails
/// with [`Error::Timeout`] once `timeout` has passed. An attempt that could not be made (no
/// connection in time) returns `None` like a refused one.
pub(crate) fn retry_until_granted(
    name: &str,
    options: &LeaseOptions,
    timeout: Duration,
    mut attempt: impl FnMut(Duration) -> Result<Option<Lease>>,
) -> Result<Lease> {
    let start = Instant::now();
    let mut backoff = Backoff::new(options.poll_min, options.poll_max);
    loop {
        if let Some(lease) = attempt(timeout.saturating_sub(start.elapsed()))? {
            return Ok(lease);
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(Error::waited(name, waited));
        }
        std::thread::sleep(backoff.next_delay().min(timeout - waited));
    }
}

/// Grants `name` (as a periodic job's run when `periodic` says so); returns the lease and the new
/// `next_run`.
pub(crate) fn grant<C: LeaseStatements>(
    conn: &mut C,
    name: &str,
    checked: &Checked,
    periodic: statements::Periodic,
) -> Result<Option<(Lease, Option<i64>)>> {
    if checked.require_synchronous_replication {
        if let Some(reason) = conn.replication()?.fencing_refusal() {
            return Err(Error::Config(reason));
        }
    }
    let sent_at = Instant::now();
    let op = op!(
        LeaseAcquire,
        "",
        crate::backend::kind::<C>(),
        name = name,
        owner = checked.holder.as_str()
    );
    let granted = op.finish(
        statements::grant(
            conn,
            &statements::Grant {
                name,
                holder: checked.holder.as_str(),
                ttl_micros: checked.ttl.as_micros(),
                periodic,
            },
        ),
        |g| match g {
            Some(g) => ("granted", u64::try_from(g.token).unwrap_or(0)),
            None => ("held by another", 0),
        },
    )?;
    Ok(granted.map(|g| {
        let lease = Lease {
            name: name.to_string(),
            holder: checked.holder.clone(),
            token: FencingToken(g.token),
            ttl: checked.ttl,
            at_least_for_micros: checked.at_least_for_micros,
            state: State::Held,
            local: HolderState::new(
                sent_at,
                checked.ttl.as_duration(),
                default_margin(checked.ttl.as_duration()),
            ),
        };
        (lease, g.next_run)
    }))
}

impl Lease {
    /// Tries once to take the lease `name` (1 to 255 bytes, else [`InvalidInput`]): `Some` if it was free (never used, expired or released),
    /// `None` if someone holds it.
    ///
    /// One statement on PostgreSQL and SQLite (see the [module docs](self)).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_lease::lease::{Lease, LeaseOptions};
    /// use std::time::Duration;
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = dir.path().join("app.db").display().to_string();
    /// let mut conn = SqliteConnection::establish(&url).unwrap();
    /// diesel_lease::run_migrations(&mut conn).unwrap();
    ///
    /// let options = LeaseOptions::new(Duration::from_secs(30));
    /// let mut first = Lease::try_acquire(&mut conn, "nightly-report", &options).unwrap().unwrap();
    /// assert!(Lease::try_acquire(&mut conn, "nightly-report", &options).unwrap().is_none());
    /// assert!(first.release(&mut conn).unwrap().was_held());
    ///
    /// let second = Lease::try_acquire(&mut conn, "nightly-report", &options).unwrap().unwrap();
    /// assert!(second.token() > first.token());
    /// # let _ = second;
    /// # }
    /// ```
    pub fn try_acquire(
        conn: &mut impl BorrowConnection<Conn: LeaseStatements>,
        name: &str,
        options: &LeaseOptions,
    ) -> Result<Option<Lease>> {
        let checked = options.check(name)?;
        let conn = conn.borrow_connection();
        match grant(conn, name, &checked, statements::Periodic::No)? {
            Some((lease, _)) => Ok(Some(lease)),
            None => {
                refuse_if_exhausted(conn, name)?;
                Ok(None)
            }
        }
    }

    /// Takes the lease `name`, waiting up to `timeout` for it (polling with backoff, see
    /// [`LeaseOptions::poll`]); [`Error::Timeout`] if it stays held, and
    /// [`Error::TokensExhausted`] at its first refusal if it can never be granted again.
    ///
    /// The deadline is measured on this process's monotonic clock — it bounds the caller's wait,
    /// not the lease.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_lease::lease::{Lease, LeaseOptions};
    /// use std::time::Duration;
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = dir.path().join("app.db").display().to_string();
    /// let mut conn = SqliteConnection::establish(&url).unwrap();
    /// diesel_lease::run_migrations(&mut conn).unwrap();
    ///
    /// let options = LeaseOptions::new(Duration::from_millis(200));
    /// let _held = Lease::try_acquire(&mut conn, "import", &options).unwrap().unwrap();
    /// // Not released, so it is granted again once its 200 ms have passed.
    /// let next = Lease::acquire(&mut conn, "import", &options, Duration::from_secs(10)).unwrap();
    /// assert!(next.token() > _held.token());
    /// # let _ = next;
    /// # }
    /// ```
    pub fn acquire(
        conn: &mut impl BorrowConnection<Conn: LeaseStatements>,
        name: &str,
        options: &LeaseOptions,
        timeout: Duration,
    ) -> Result<Lease> {
        let checked = options.check(name)?;
        let conn = conn.borrow_connection();
        let mut asked = false;
        retry_until_granted(name, options, timeout, |_| {
            let granted = grant(conn, name, &checked, statements::Periodic::No)?;
            if granted.is_none() && !std::mem::replace(&mut asked, true) {
                refuse_if_exhausted(conn, name)?;
            }
            Ok(granted.map(|(lease, _)| lease))
        })
    }

    /// The SQL that [`try_acquire`](Self::try_acquire) sends on backend `C` for these arguments, with its bind values
    /// (Diesel's `debug_query` format). For code review and logging: it shows that every instant is
    /// the database's clock and that the client binds only the name, the holder and durations.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel_lease::lease::{Lease, LeaseOptions};
    /// use std::time::Duration;
    ///
    /// let sql = Lease::acquire_sql::<diesel::SqliteConnection>("report", &LeaseOptions::new(Duration::from_secs(5))).unwrap();
    /// assert!(sql.contains("ON CONFLICT"));
    /// assert!(sql.contains("julianday('now')"));
    /// # }
    /// ```
    pub fn acquire_sql<C: LeaseStatements>(name: &str, options: &LeaseOptions) -> Result<String> {
        let checked = options.check(name)?;
        Ok(statements::grant_sql::<C>(&statements::Grant {
            name,
            holder: checked.holder.as_str(),
            ttl_micros: checked.ttl.as_micros(),
            periodic: statements::Periodic::No,
        }))
    }

    /// Reads the lease `name` as the database holds it (for dashboards, diagnostics and tests);
    /// `None` if it was never granted.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// # use diesel::prelude::*;
    /// # use diesel_lease::lease::{Lease, LeaseOptions};
    /// # use std::time::Duration;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = dir.path().join("app.db").display().to_string();
    /// # let mut conn = SqliteConnection::establish(&url).unwrap();
    /// # diesel_lease::run_migrations(&mut conn).unwrap();
    /// let mut held = Lease::try_acquire(&mut conn, "sync", &LeaseOptions::new(Duration::from_secs(30)))
    ///     .unwrap()
    ///     .unwrap();
    /// let record = Lease::inspect(&mut conn, "sync").unwrap().unwrap();
    /// assert!(record.is_held());
    /// assert_eq!(record.token, held.token());
    /// assert_eq!(record.expires_at_micros - record.acquired_at_micros, 30_000_000);
    /// assert!(held.release(&mut conn).unwrap().was_held());
    /// # }
    /// ```
    pub fn inspect(
        conn: &mut impl BorrowConnection<Conn: LeaseStatements>,
        name: &str,
    ) -> Result<Option<LeaseRecord>> {
        validate_name("lease", name, MAX_NAME_LEN)?;
        record(conn.borrow_connection(), name)
    }

    /// The fencing token of this grant: larger than the token of every earlier grant of the
    /// same name. Send it with every write to the protected resource (see the module docs).
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Who holds it, as recorded in the table.
    pub fn holder(&self) -> &OwnerId {
        &self.holder
    }

    /// The ttl of the last grant or extension.
    pub fn ttl(&self) -> Duration {
        self.ttl.as_duration()
    }

    /// Whether this holder must consider the grant lost: an earlier call found it expired or
    /// taken over, or its *local deadline* passed — the instant the last successful grant or
    /// extension was sent, plus the ttl, minus a safety margin (a tenth of the ttl), measured on
    /// this process's monotonic clock. The database's expiry is never earlier than that
    /// deadline (it counts from when the statement ran, which is after it was sent), so a holder
    /// cut off from the database knows it lost before the database gives the lease away.
    ///
    /// A process paused longer than the margin (GC, `SIGSTOP`, a suspended VM) can still wake
    /// after the database's expiry believing it holds the lease until it looks again: pass the
    /// [fencing token](Self::token) to the protected resource, which is the real protection.
    /// `false` after a release.
    pub fn is_lost(&self) -> bool {
        matches!(
            self.local.lost_reason(),
            Some(LostReason::Expired | LostReason::Gone)
        )
    }

    /// What this holder believes (shared with a [`LeaseGuard`]'s heartbeat).
    pub(crate) fn local(&self) -> &HolderState {
        &self.local
    }

    /// A handle the protected work can poll or block on ([`LostSignal::wait_timeout`]) to stop
    /// when the grant is lost (or released).
    pub fn lost_signal(&self) -> LostSignal {
        self.local.lost_signal()
    }

    /// Whether this grant still holds, asked of the database (its clock decides expiry).
    /// `false` after release, expiry or takeover.
    pub fn confirm_held(
        &self,
        conn: &mut impl BorrowConnection<Conn: LeaseStatements>,
    ) -> Result<bool> {
        if self.state != State::Held {
            return Ok(false);
        }
        statements::is_valid(conn.borrow_connection(), &self.name, self.token.get())
    }

    /// Moves the expiry to `ttl` from now (database clock). Only a valid grant can be extended:
    /// [`Error::LeaseLost`] if it expired or was taken over (the lease is then marked lost), or
    /// once this holder counts it lost ([`is_lost`](Self::is_lost): its local deadline passed,
    /// before or while the extension was under way; the database's grant is then left to expire,
    /// or given back if the extension reached it), [`Error::LeaseNotHeld`] after release.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// # use diesel::prelude::*;
    /// # use diesel_lease::lease::{Lease, LeaseOptions};
    /// # use std::time::Duration;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = dir.path().join("app.db").display().to_string();
    /// # let mut conn = SqliteConnection::establish(&url).unwrap();
    /// # diesel_lease::run_migrations(&mut conn).unwrap();
    /// let mut lease = Lease::try_acquire(&mut conn, "long-job", &LeaseOptions::new(Duration::from_secs(10)))
    ///     .unwrap()
    ///     .unwrap();
    /// lease.extend(&mut conn, Duration::from_secs(60)).unwrap();
    /// assert!(lease.confirm_held(&mut conn).unwrap());
    /// assert!(lease.release(&mut conn).unwrap().was_held());
    /// # }
    /// ```
    pub fn extend(
        &mut self,
        conn: &mut impl BorrowConnection<Conn: LeaseStatements>,
        ttl: Duration,
    ) -> Result<()> {
        let ttl = Ttl::new("ttl", ttl)?;
        self.check_held()?;
        let conn = conn.borrow_connection();
        if self.is_lost() {
            // A holder past its local deadline stays lost (see `is_lost`): nothing is extended,
            // and the error says who holds the lease now, if anybody took it over.
            return Err(self.mark_lost(conn));
        }
        let sent_at = Instant::now();
        let op = op!(
            LeaseExtend,
            "",
            kind_of(conn),
            name = self.name.as_str(),
            owner = self.holder.as_str(),
            token = self.token.get()
        );
        let extended = statements::extend(conn, &self.name, self.token.get(), ttl.as_micros());
        if op.finish(extended, |&held| {
            (if held { "extended" } else { "lost" }, 0)
        })? {
            self.extended(conn, sent_at, ttl)
        } else {
            Err(self.mark_lost(conn))
        }
    }

    /// Takes in an extension by `ttl`, sent at `sent_at`, that the database applied (by
    /// [`extend`](Self::extend), or by the keeper for many leases in one statement).
    pub(crate) fn extended<C: LeaseStatements>(
        &mut self,
        conn: &mut C,
        sent_at: Instant,
        ttl: Ttl,
    ) -> Result<()> {
        self.local.record_success(sent_at, ttl.as_duration());
        if self.is_lost() {
            // The local deadline passed while the extension was under way: this holder counts
            // itself lost, so the grant it just extended goes back rather than outlive the work
            // (best effort: otherwise it expires by itself).
            let _ =
                statements::release(conn, &self.name, self.token.get(), self.at_least_for_micros);
            self.state = State::Lost(None);
            return Err(self.lost_error(None));
        }
        self.ttl = ttl;
        Ok(())
    }

    /// The grant (name, token) and its ttl, while the keeper may extend it together with
    /// others: held, and not lost by this holder's clock (else its own beat says why).
    pub(crate) fn extendable(&self) -> Option<((String, i64), Ttl)> {
        (self.state == State::Held && !self.is_lost())
            .then(|| ((self.name.clone(), self.token.get()), self.ttl))
    }

    /// Releases the lease. It becomes free at once, or at `acquired_at + at_least_for` when that
    /// is later ([`LeaseOptions::at_least_for`]). The row and its token stay, so the next grant
    /// gets a larger token; the row records the release (`released_at`), and no extension
    /// matches a released grant, not even one sent before the release that reaches the database
    /// after it.
    ///
    /// [`Released::WasHeld`] when the grant was still held; [`Released::WasLost`] when it had
    /// expired or was taken over, or its local deadline had passed
    /// ([`is_lost`](Self::is_lost); the row, still this grant's, is released all the same) —
    /// the protected work ran (partly) unprotected. [`Error::LeaseNotHeld`] if it was already
    /// released.
    pub fn release(
        &mut self,
        conn: &mut impl BorrowConnection<Conn: LeaseStatements>,
    ) -> Result<Released> {
        match self.check_held() {
            Err(Error::LeaseLost { .. }) => return Ok(Released::WasLost),
            checked => checked?,
        }
        // Past the local deadline the work ran (partly) unprotected, as far as this holder
        // could know, even if the row is still ours and goes now.
        let expired_here = self.is_lost();
        let conn = conn.borrow_connection();
        let op = op!(
            LeaseRelease,
            "",
            kind_of(conn),
            name = self.name.as_str(),
            owner = self.holder.as_str(),
            token = self.token.get()
        );
        let released =
            statements::release(conn, &self.name, self.token.get(), self.at_least_for_micros);
        if op.finish(released, |&held| {
            (if held { "released" } else { "lost" }, 0)
        })? {
            self.state = State::Released;
            self.local.mark_lost(LostReason::Released);
            Ok(Released::from_held(!expired_here))
        } else {
            self.mark_lost(conn);
            Ok(Released::WasLost)
        }
    }

    /// `Ok(())` while this holder believes it holds the lease (see [`is_lost`](Self::is_lost));
    /// [`Error::LeaseLost`] once lost, [`Error::LeaseNotHeld`] after release.
    pub fn ensure_held(&self) -> Result<()> {
        match self.check_held() {
            // Lost by the local deadline, before any statement found out.
            Ok(()) if self.is_lost() => Err(self.lost_error(None)),
            checked => checked,
        }
    }

    fn check_held(&self) -> Result<()> {
        match &self.state {
            State::Held => Ok(()),
            State::Released => Err(Error::LeaseNotHeld {
                name: self.name.clone(),
            }),
            State::Lost(now) => Err(self.lost_error(now.clone())),
        }
    }

    fn lost_error(&self, now: Option<(String, FencingToken)>) -> Error {
        let (holder, holder_token) = now.unzip();
        Error::LeaseLost {
            name: self.name.clone(),
            token: self.token,
            holder,
            holder_token,
        }
    }

    /// A copy of this grant, sharing what the holder believes, for a heartbeat to extend without
    /// holding the guard's lock while the database answers; [`absorb`](Self::absorb) takes back
    /// what the copy learned.
    pub(crate) fn copy(&self) -> Lease {
        Lease {
            name: self.name.clone(),
            holder: self.holder.clone(),
            token: self.token,
            ttl: self.ttl,
            at_least_for_micros: self.at_least_for_micros,
            state: self.state.clone(),
            local: self.local.clone(),
        }
    }

    /// Takes over a loss that a [`copy`](Self::copy) found; a release or loss recorded here
    /// meanwhile stays. (A success needs nothing: the holder state is shared.)
    pub(crate) fn absorb(&mut self, copy: Lease) {
        if self.state == State::Held && matches!(copy.state, State::Lost(_)) {
            self.state = copy.state;
        }
    }

    /// Records that the grant is gone (reading from the database who holds it now) and returns
    /// the error for it.
    fn mark_lost<C: LeaseStatements>(&mut self, conn: &mut C) -> Error {
        // A failed read only loses the detail of who took over, not the fact that we lost.
        let now = match record(conn, &self.name) {
            Ok(Some(row)) if row.token != self.token => Some((row.holder, row.token)),
            _ => None,
        };
        self.state = State::Lost(now.clone());
        // A keep-alive beat that lands after the guard's release finds the grant gone: that is
        // no loss to report (the holder's state stays released).
        let released = self.local.lost_reason() == Some(LostReason::Released);
        self.local.mark_lost(LostReason::Gone);
        let error = self.lost_error(now);
        if !released {
            crate::observe::lost("lease", &self.name, Some(self.token.get()), &error);
        }
        error
    }
}

/// A lease as the database holds it right now (see [`Lease::inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRecord {
    /// The holder of the last grant.
    pub holder: String,
    /// The fencing token of the last grant.
    pub token: FencingToken,
    /// When the last grant was made: µs since 1970, database clock.
    pub acquired_at_micros: i64,
    /// Until when it holds: µs since 1970, database clock.
    pub expires_at_micros: i64,
    /// For a periodic job: when its next occurrence is due (µs, database clock).
    pub next_run_micros: Option<i64>,
    /// When the last grant was released (µs, database clock); `None` while it is held, or when
    /// it expired without a release. A grant released before its
    /// [`at_least_for`](LeaseOptions::at_least_for) ran out stays [held](Self::is_held) until
    /// then, released or not.
    ///
    /// During a rolling upgrade a node of a version that predates the column grants without
    /// clearing it: the column then holds an earlier grant's release, older than
    /// [`acquired_at_micros`](Self::acquired_at_micros). [`is_released`](Self::is_released)
    /// tells the two apart.
    pub released_at_micros: Option<i64>,
    /// The database clock when this record was read (µs since 1970).
    pub read_at_micros: i64,
}

impl LeaseRecord {
    /// Whether the lease was held when the record was read (by the database clock).
    pub fn is_held(&self) -> bool {
        self.expires_at_micros > self.read_at_micros
    }

    /// Whether the last grant's holder released it: [`released_at_micros`] is set and not
    /// older than the grant. A lease that [is held](Self::is_held) and released is kept from
    /// other nodes by its [`at_least_for`](LeaseOptions::at_least_for) alone.
    ///
    /// [`released_at_micros`]: Self::released_at_micros
    pub fn is_released(&self) -> bool {
        self.released_at_micros
            .is_some_and(|released| released >= self.acquired_at_micros)
    }
}

fn record<C: LeaseStatements>(conn: &mut C, name: &str) -> Result<Option<LeaseRecord>> {
    Ok(statements::inspect(conn, name)?.map(
        |(holder, token, acquired_at, expires_at, next_run, released_at, now)| LeaseRecord {
            holder,
            token: FencingToken(token),
            acquired_at_micros: acquired_at,
            expires_at_micros: expires_at,
            next_run_micros: next_run,
            released_at_micros: released_at,
            read_at_micros: now,
        },
    ))
}
