//! Farm scheduling on top of leases: run a job on one node of many.
//!
//! Every node of a farm runs the same loop; the database decides which node runs each
//! occurrence. Three forms:
//!
//! - [`run_exclusive`]: run the job now if nobody else is running it (ShedLock's model);
//! - [`every`]: run a periodic job once per interval, or once per slot of a [`Cron`] expression,
//!   across the whole farm, with the schedule (`next_run`) kept in the database, so nodes started
//!   at different times share one schedule;
//! - [`with_lock`]: wait for an expiring mutex, run, release (django-db-mutex's model).
//!
//! # Missed intervals
//!
//! A periodic job's occurrences lie on a grid: its first run, plus whole multiples of the
//! interval. When no node ran for several intervals (the farm was down, or a run lasted longer
//! than the interval), the next run happens once, as soon as a node polls, for the *latest* due
//! occurrence: the missed ones are skipped and coalesced into it, and the grid does not shift.
//! A holder that dies mid-run keeps the job's lease until its ttl; the schedule is unaffected
//! because `next_run` moved forward when that run was granted.
//!
//! # Cron schedules
//!
//! `every(Cron::parse("0 3 * * *")?.in_tz(Tz::Europe__Berlin))` runs at the expression's slots on that
//! zone's wall clock ([`Cron`]; its docs say what happens at daylight-saving changes). A poll
//! reads the lease row and the database's `now` ([`inspect`](crate::lease::Lease::inspect)), computes in
//! Rust the slot that is due ([`Cron::plan`]) and the first slot after `now`, and sends one grant
//! that succeeds only if `next_run` still holds what it read and the slot has come by the
//! database clock; the same statement moves `next_run` to that next slot. So every slot runs on
//! one node at most, and slots only move forward.
//!
//! The grant also carries the latest time the run may start ([`Plan::Run`]'s `until`): the next
//! slot, or the end of the slot's grace when the slot must be on time. A grant planned in time
//! that reaches the row after that (a slow link, a wait on the row's lock) runs nothing, and the
//! next poll plans afresh, so a slot never runs after its successor has come. PostgreSQL and
//! SQLite read the clock as the grant executes; MySQL/MariaDB read it when the statement starts,
//! so there a grant that waited on a lock is judged by when it reached the server.
//!
//! Slots missed while no node was up follow the expression's [`Missed`] policy: by default they
//! are skipped (a slot runs only within its [grace](Cron::grace) of one minute); with
//! [`Missed::RunOnce`] the job runs once, late, for the latest missed slot, then goes back on
//! schedule. A cron job that has never run owes no slot: its first run is its first slot on time.
//! A skipped slot writes nothing: until the next run, the row's `next_run` (what `diesel-lease
//! leases` shows) still holds the missed slot.

use std::time::Duration;

use chrono::{DateTime, Utc};
use lease_core::{Backoff, FencingToken, Ttl};

pub use lease_core::{Cron, Missed, Plan, Schedule, Tz};

use crate::lease::statements::{LeaseStatements, Periodic};
use crate::lease::{LeaseGuard, LeaseOptions};
use crate::pool::{AnySource, ConnectionSource};
use crate::{Error, Held, Result};

/// Runs `job` if the lease `name` can be taken now; `Ok(None)` without running it if another
/// node holds it. The lease is released when the job returns (and on unwinding, by the guard).
/// `pool` is any [`ConnectionSource`]: an r2d2 pool, or an async application's `deadpool-diesel`
/// pool (feature `deadpool`), as for every function of this module.
///
/// The job returns a `Result`, as the closure of Diesel's `Connection::transaction` does, and its
/// error comes back through `?`: the error type `E` is the job's own (`Box<dyn Error>`,
/// `anyhow::Error`, [`Error`] or an application enum), and needs only `From<diesel_lease::Error>`
/// for the lease's own errors. A job that fails still releases the lease, and its error is
/// returned whatever the release said.
///
/// The job gets the guard: its [`token`](LeaseGuard::token) fences writes, and a long job can
/// check [`is_lost`](LeaseGuard::is_lost) when [`LeaseOptions::keep_alive`] is on.
/// If the lease was lost while a successful job ran, its value is dropped and
/// [`Error::LeaseLost`] is returned: the job ran (partly) unprotected.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::LeaseOptions;
/// use diesel_lease::lease::schedule::run_exclusive;
/// use std::time::Duration;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 2)?;
/// diesel_lease::run_migrations(&mut pool.get()?)?;
///
/// let options = LeaseOptions::new(Duration::from_secs(60));
/// let ran = run_exclusive(&pool, "send-digest", &options, |lease| {
///     let sent: u32 = "3".parse()?; // the job's own errors come back through `?`
///     Ok::<_, Box<dyn std::error::Error>>(format!("{sent} sent with token {}", lease.token()))
/// })?;
/// assert_eq!(ran.as_deref(), Some("3 sent with token 1"));
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub fn run_exclusive<C, T, E>(
    pool: &impl ConnectionSource<Connection = C>,
    name: &str,
    options: &LeaseOptions,
    job: impl FnOnce(&LeaseGuard<C>) -> std::result::Result<T, E>,
) -> std::result::Result<Option<T>, E>
where
    C: LeaseStatements,
    E: From<Error>,
{
    let Some(guard) = LeaseGuard::try_acquire(pool, name, options)? else {
        return Ok(None);
    };
    let out = job(&guard);
    finish(guard, out).map(Some)
}

/// An expiring mutex: waits up to `ttl` for the lease `name`, runs `f`, releases.
///
/// `f` returns a `Result` and its error comes back through `?`, as with [`run_exclusive`]: `E`
/// is the closure's own error type, which needs `From<diesel_lease::Error>`. If `f` runs longer
/// than `ttl`, the lock expires under it and [`Error::LeaseLost`] is returned (if another node
/// took it, the result is dropped). Waiting longer than `ttl` gives [`Error::Timeout`]:
/// a holder that does not extend its lock is gone by then.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::schedule::with_lock;
/// use std::time::Duration;
///
/// # fn main() -> diesel_lease::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 2)?;
/// diesel_lease::run_migrations(&mut pool.get()?)?;
///
/// let total = with_lock(&pool, "rebuild-index", Duration::from_secs(30), || {
///     Ok::<_, diesel_lease::Error>(40 + 2)
/// })?;
/// assert_eq!(total, 42);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub fn with_lock<C, T, E>(
    pool: &impl ConnectionSource<Connection = C>,
    name: &str,
    ttl: Duration,
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E>
where
    C: LeaseStatements,
    E: From<Error>,
{
    let guard = LeaseGuard::acquire(pool, name, &LeaseOptions::new(ttl), ttl)?;
    let out = f();
    finish(guard, out)
}

/// Releases `guard` after its work returned `out`: the work's error wins (the release is still
/// attempted); otherwise a lease lost while the work ran is [`Error::LeaseLost`].
fn finish<C, T, E>(
    guard: LeaseGuard<C>,
    out: std::result::Result<T, E>,
) -> std::result::Result<T, E>
where
    C: LeaseStatements,
    E: From<Error>,
{
    match out {
        Ok(value) => {
            release_or_lost(guard)?;
            Ok(value)
        }
        Err(e) => {
            // The work's error is what the caller must see; a failed release changes nothing
            // for it (the lease expires by itself at the end of its ttl), so it is only logged.
            let name = guard.name().to_owned();
            if let Err(release) = guard.release() {
                crate::observe::release_after_failure(&name, &release);
            }
            Err(e)
        }
    }
}

/// Releases `guard`; [`Error::LeaseLost`] when it had been lost while the work ran, which the
/// caller of a run-and-release helper must hear about (the work ran, partly, unprotected).
fn release_or_lost<C: LeaseStatements>(guard: LeaseGuard<C>) -> Result<()> {
    let lost = guard.ensure_held().err();
    let (name, token) = (guard.name().to_owned(), guard.token());
    if guard.release()?.was_held() {
        return Ok(());
    }
    Err(lost.unwrap_or(Error::LeaseLost {
        name,
        token,
        holder: None,
        holder_token: None,
    }))
}

/// A periodic job's schedule: once per interval (a [`Duration`]) or once per slot of a
/// [`Cron`] expression, across the farm (see [`Every`]).
pub fn every(schedule: impl Into<Schedule>) -> Every {
    Every {
        schedule: schedule.into(),
        lease: None,
        poll: None,
        on_error: None,
    }
}

/// A periodic job's schedule, built by [`every`].
///
/// The schedule lives in the job's lease row (`next_run`): a node runs the job only when the
/// lease is free *and* the next occurrence is due, and the grant moves `next_run` to the next
/// slot in the same statement. So the job runs once per interval however many nodes poll and
/// whenever they started. See the [module docs](self) for missed intervals.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::LeaseOptions;
/// use diesel_lease::lease::schedule::every;
/// use std::time::Duration;
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 2).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
///
/// let hourly = every(Duration::from_secs(3600)).lease(LeaseOptions::new(Duration::from_secs(300)));
/// // The first call runs it; a second node (or this one) calling again this hour does not.
/// assert!(hourly.run_if_due(&pool, "stock-alerts", |_| ()).unwrap().is_some());
/// assert!(hourly.run_if_due(&pool, "stock-alerts", |_| ()).unwrap().is_none());
/// # }
/// ```
#[derive(Clone)]
pub struct Every {
    schedule: Schedule,
    lease: Option<LeaseOptions>,
    poll: Option<Duration>,
    on_error: Option<ErrorHook>,
}

/// What [`Every::on_error`] calls.
type ErrorHook = std::sync::Arc<dyn Fn(&Error) + Send + Sync>;

/// The lease a cron schedule's run takes unless [`Every::lease`] says otherwise: a node that
/// dies mid-run keeps the job from running for at most this long.
pub(crate) const DEFAULT_CRON_LEASE: Duration = Duration::from_secs(60);

/// The time between a cron expression's next two slots after this machine's now.
fn cron_spacing(cron: &Cron) -> Option<Duration> {
    let now = Utc::now().timestamp_micros();
    let first = cron.next_after(now).ok()?;
    let second = cron.next_after(first).ok()?;
    u64::try_from(second - first)
        .ok()
        .map(Duration::from_micros)
}

/// The longest pause [`Every::run_until`] makes after consecutive errors.
pub(crate) const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(30);

impl std::fmt::Debug for Every {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Every")
            .field("schedule", &self.schedule)
            .field("lease", &self.lease)
            .field("poll", &self.poll)
            .field("on_error", &self.on_error.is_some())
            .finish()
    }
}

/// One occurrence of a periodic job, handed to the job.
pub struct Occurrence<'a, C: LeaseStatements> {
    guard: &'a LeaseGuard<C>,
    due_at_micros: i64,
}

impl<C: LeaseStatements> std::fmt::Debug for Occurrence<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Occurrence")
            .field("guard", self.guard)
            .field("due_at_micros", &self.due_at_micros)
            .finish()
    }
}

impl<C: LeaseStatements> Occurrence<'_, C> {
    /// The fencing token of this run.
    pub fn token(&self) -> FencingToken {
        self.guard.token()
    }

    /// When this occurrence was due: µs since 1970 by the database clock. Each due time is run
    /// at most once; consecutive runs' due times differ by a whole number of intervals, or, on a
    /// cron schedule, are slots of its expression.
    pub fn due_at_micros(&self) -> i64 {
        self.due_at_micros
    }

    /// [`due_at_micros`](Self::due_at_micros) as a UTC timestamp.
    pub fn due_at(&self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_micros(self.due_at_micros)
    }

    /// The lease this run holds.
    pub fn guard(&self) -> &LeaseGuard<C> {
        self.guard
    }
}

impl Every {
    /// The lease each run takes. Its ttl bounds how long a dead node's run blocks the job;
    /// keep it shorter than the interval (or turn on [`LeaseOptions::keep_alive`] for runs that
    /// may last longer). Default: `LeaseOptions::new(interval)`; on a cron schedule, a 60 s
    /// lease.
    pub fn lease(mut self, options: LeaseOptions) -> Self {
        self.lease = Some(options);
        self
    }

    /// How often [`run_until`](Self::run_until) asks whether the job is due. Default: a tenth of
    /// the interval (on a cron schedule, of the time between its next two slots), between 5 ms
    /// and 1 s (with jitter, so that nodes do not poll in lockstep).
    pub fn poll_every(mut self, poll: Duration) -> Self {
        self.poll = Some(poll);
        self
    }

    /// Called by [`run_until`](Self::run_until) with every error it retries (log it, count it).
    pub fn on_error(mut self, report: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        self.on_error = Some(std::sync::Arc::new(report));
        self
    }

    fn lease_options(&self) -> LeaseOptions {
        self.lease.clone().unwrap_or_else(|| {
            LeaseOptions::new(match &self.schedule {
                Schedule::Interval(interval) => *interval,
                Schedule::Cron(_) => DEFAULT_CRON_LEASE,
            })
        })
    }

    /// The schedule's own check, before any SQL.
    fn check_schedule(&self) -> Result<()> {
        match &self.schedule {
            Schedule::Interval(interval) => Ttl::new("interval", *interval).map(drop),
            Schedule::Cron(cron) => cron.check(),
        }
        .map_err(Error::from)
    }

    /// The default poll period: a tenth of the time between runs. A cron schedule's spacing is
    /// read off this machine's clock, which paces the polls only: every decision is the
    /// database's.
    fn default_poll(&self) -> Duration {
        let spacing = match &self.schedule {
            Schedule::Interval(interval) => *interval,
            Schedule::Cron(cron) => cron_spacing(cron).unwrap_or(Duration::from_secs(10)),
        };
        (spacing / 10).clamp(Duration::from_millis(5), Duration::from_secs(1))
    }

    /// What this poll asks the grant for, from the database's `now` and the lease row (`None`:
    /// no cron slot is due, so nothing is sent). An interval's due check is the grant's own.
    fn periodic<C: LeaseStatements>(&self, conn: &mut C, name: &str) -> Result<Option<Periodic>> {
        let cron = match &self.schedule {
            Schedule::Interval(interval) => {
                return Ok(Some(Periodic::Interval(
                    Ttl::new("interval", *interval)?.as_micros(),
                )))
            }
            Schedule::Cron(cron) => cron,
        };
        let (expected, now) = match crate::lease::statements::inspect(conn, name)? {
            Some((_, _, _, _, next_run, _, now)) => (next_run, now),
            None => (None, crate::lease::statements::now(conn)?),
        };
        Ok(match cron.plan(expected, now)? {
            Plan::Run { slot, next, until } => Some(Periodic::Slot {
                expected,
                slot,
                next,
                until,
            }),
            Plan::Wait { .. } => None,
        })
    }

    /// Runs `job` once if its next occurrence is due and nobody is running it; `Ok(None)`
    /// otherwise. Call it from every node's loop, or use [`run_until`](Self::run_until).
    pub fn run_if_due<C, T>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
        name: &str,
        job: impl FnOnce(&Occurrence<'_, C>) -> T,
    ) -> Result<Option<T>>
    where
        C: LeaseStatements,
    {
        self.check_schedule()?;
        let options = self.lease_options();
        let checked = options.check(name)?;
        let granted = pool.with_connection(|conn| {
            let Some(periodic) = self.periodic(conn, name)? else {
                return Ok(None);
            };
            let granted = crate::lease::grant(conn, name, &checked, periodic)?;
            Ok(granted.map(|(lease, next_run)| (lease, next_run, periodic)))
        })?;
        let Some((lease, next_run, periodic)) = granted else {
            return Ok(None);
        };
        let guard = LeaseGuard::new(AnySource::new(pool), lease, &options)?;
        let due_at_micros = match periodic {
            // The grant set next_run to the slot after the one being run.
            Periodic::Interval(interval) => next_run.unwrap_or_default() - interval,
            Periodic::Slot { slot, .. } => slot,
            Periodic::No => 0,
        };
        let out = job(&Occurrence {
            guard: &guard,
            due_at_micros,
        });
        release_or_lost(guard)?;
        Ok(Some(out))
    }

    /// The node loop: until `stop()` returns true, polls and runs `job` whenever it is due here.
    /// Returns how many occurrences this node ran (a run whose release failed after it counts:
    /// the job ran).
    ///
    /// Only a lost lease ends the loop ([`Error::LeaseLost`]: the job
    /// ran, partly, unprotected — the caller must know), and so does bad input
    /// ([`Error::InvalidInput`]), checked once before the first poll, or found by a poll (a cron
    /// expression that parses but has no slot, such as `0 0 30 2 *`, February 30th: every poll
    /// would find none). Every other error — the database restarting, a pool timeout, a
    /// lock timeout on the release after a run — is handed to [`on_error`](Self::on_error) and
    /// the loop goes on after a backoff that doubles from the poll period up to
    /// 30 s, so one transient fault never stops a node for good.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::SqliteConnection;
    /// use diesel_lease::lease::LeaseOptions;
    /// use diesel_lease::lease::schedule::every;
    /// use std::time::{Duration, Instant};
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = dir.path().join("app.db").display().to_string();
    /// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 2).unwrap();
    /// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
    ///
    /// let until = Instant::now() + Duration::from_millis(250);
    /// let runs = every(Duration::from_millis(100))
    ///     .lease(LeaseOptions::new(Duration::from_millis(50)))
    ///     .run_until(&pool, "heartbeat", || Instant::now() >= until, |occurrence| {
    ///         println!("heartbeat due at {:?}", occurrence.due_at());
    ///     })
    ///     .unwrap();
    /// assert!(runs >= 1);
    /// # }
    /// ```
    pub fn run_until<C>(
        &self,
        pool: &impl ConnectionSource<Connection = C>,
        name: &str,
        mut stop: impl FnMut() -> bool,
        mut job: impl FnMut(&Occurrence<'_, C>),
    ) -> Result<u64>
    where
        C: LeaseStatements,
    {
        let poll = self
            .poll
            .unwrap_or_else(|| self.default_poll())
            .max(Duration::from_millis(1));
        // Bad input would fail every poll the same way: refuse it once.
        self.check_schedule()?;
        self.lease_options().check(name)?;
        let mut jitter = Backoff::new(poll, poll);
        let mut after_error = Backoff::new(poll, MAX_ERROR_BACKOFF.max(poll));
        let mut runs = 0;
        while !stop() {
            // Counted when the job ran, whatever its release says after it.
            let mut ran = false;
            let polled = self.run_if_due(pool, name, |occurrence| {
                ran = true;
                job(occurrence)
            });
            runs += u64::from(ran);
            let pause = match polled {
                Ok(_) => {
                    after_error = Backoff::new(poll, MAX_ERROR_BACKOFF.max(poll));
                    jitter.next_delay()
                }
                // Bad input fails every poll the same way, and a lost lease must be known.
                Err(e @ (Error::LeaseLost { .. } | Error::InvalidInput(_))) => return Err(e),
                Err(e) => {
                    crate::observe::schedule_retry(name, &e);
                    if let Some(report) = &self.on_error {
                        report(&e);
                    }
                    after_error.next_delay()
                }
            };
            std::thread::sleep(pause);
        }
        Ok(runs)
    }
}
