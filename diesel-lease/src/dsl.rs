//! The operations, as extension traits of the models `#[derive(Claimable)]` describes.
//!
//! The derive only implements traits ([`Claimable`], [`ClaimIfNull`], [`InsertOnce`],
//! [`JobLease`], [`ControlTable`]); the operations come from the traits of this module, each
//! blanket-implemented for every model with that capability, as Diesel's `QueryDsl` and
//! `RunQueryDsl` are for its queries. Bring them in with one line:
//!
//! ```
//! use diesel_lease::prelude::*;
//! ```
//!
//! A model gets exactly the operations its attributes describe: a model that is only a
//! follow-up insert is not [`Claimable`], `complete` needs a `done` state, and so on; asking
//! for more is a compile error that says which attribute is missing. Your own methods named
//! `complete` or `release` never collide with these: a type's inherent methods win, and the
//! trait's are still there as `ClaimDsl::complete(&row, conn)`.
//!
//! Free-standing operations take the connection first (`ImportJob::claim_next(&mut conn)`);
//! operations on a row take it as their argument (`job.complete(&mut conn)`).

use std::time::Duration;

use diesel::expression::{AppearsOnTable, Expression};
use diesel::query_builder::{QueryFragment, QueryId};
use diesel::r2d2::R2D2Connection;
use diesel::sql_types::Bool;
use diesel::Connection;

use crate::claim::retention::{self, Purged, Retention, RetentionSqlDialect};
use crate::claim::statements::ClaimSql;
use crate::claim::{
    self, ClaimConnection, ClaimGuard, ClaimOptions, ClaimableLockConnection, Finish, HasAttempts,
    HasCancelState, HasClaimedAt, HasDoneState, HasFailedState, HasPauseKey, NullLockConnection,
    Pausable, RetryOutcome, RetryPolicy,
};
use crate::clock::TimestampType;
use crate::lease::job::{self, JobConnection, JobRun, JobRunOptions};
use crate::once::{self, ClaimIfNullConnection, InsertOnceConnection, InsertReturning};
use crate::pool::ConnectionSource;
use crate::semaphore::{HasModeColumn, OneResource, ResourceColumn, RwLock, Semaphore};
use crate::{BorrowConnection, InsertOutcome, LeaseConnection, Result};

pub use crate::claim::{Claimable, Keyed};
pub use crate::lease::job::JobLease;
pub use crate::once::{ClaimIfNull, InsertOnce};
pub use crate::semaphore::ControlTable;

/// The backend of connection `C`.
type Backend<C> = <<C as BorrowConnection>::Conn as Connection>::Backend;

/// Claims of a [`Claimable`] model's rows: each row to exactly one worker.
///
/// [`claim`](Self::claim) is the entry point: a [`Claim`](crate::claim::Claim) builder whose
/// steps are the options and whose terminal call says what comes back
/// (`Job::claim().batch(10).rows(&mut conn)`). The methods in the table below spell some of its
/// combinations one by one; they remain until a later release removes them.
///
/// | one row | many rows | what |
/// |---|---|---|
/// | [`claim_next`](Self::claim_next) | [`claim_batch`](Self::claim_batch) | claim now, or nothing |
/// | [`claim_next_with`](Self::claim_next_with) | [`claim_batch_with`](Self::claim_batch_with) | … as another owner, with another stale-claim timeout |
/// | [`claim_next_where`](Self::claim_next_where) | [`claim_batch_where`](Self::claim_batch_where) | … only rows that also match a filter |
/// | [`claim_next_wait`](Self::claim_next_wait) | [`claim_batch_wait`](Self::claim_batch_wait) | wait for rows, through a pool |
/// | [`claim_next_guarded`](Self::claim_next_guarded) | [`claim_batch_guarded`](Self::claim_batch_guarded) | claim through a pool, heartbeat in the background ([`ClaimGuard`]) |
/// | [`complete`](Self::complete), [`fail`](Self::fail), [`release`](Self::release) | [`complete_batch`](Self::complete_batch), [`fail_batch`](Self::fail_batch), [`release_batch`](Self::release_batch) | finish a claim, if still ours |
///
/// and, keeping a row locked for the caller's transaction instead of claiming it:
/// [`lock_next`](Self::lock_next), [`lock_next_where`](Self::lock_next_where),
/// [`with_next_locked`](Self::with_next_locked) (skip locked rows), and
/// [`lock_by_pk_if_claimable`](Self::lock_by_pk_if_claimable), [`with_locked`](Self::with_locked)
/// (wait for this row's holder).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     importjobs (id) {
///         id -> BigInt,
///         statuscode -> Text,
///         worker -> Nullable<Text>,
///     }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = importjobs)]
/// #[claimable(state = statuscode, ready = "JOBEXTRACTED", claimed = "EXECUTIONINPROGRESS",
///             done = "DONE", owner = worker)]
/// struct ImportJob {
///     id: i64,
///     statuscode: String,
///     worker: Option<String>,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let mut conn = diesel::SqliteConnection::establish(dir.path().join("db").to_str().unwrap())?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE importjobs (id INTEGER PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT);
/// #      INSERT INTO importjobs (statuscode) VALUES ('JOBEXTRACTED'), ('JOBEXTRACTED'), ('JOBEXTRACTED');")?;
/// let first = ImportJob::claim_next(&mut conn)?.expect("a ready row");
/// assert!(first.complete(&mut conn)?, "still ours");
///
/// let rest = ImportJob::claim_batch(&mut conn, 10)?;
/// assert_eq!(rest.len(), 2);
/// assert_eq!(ImportJob::complete_batch(&mut conn, &rest)?, vec![true, true]);
/// assert!(ImportJob::claim_next(&mut conn)?.is_none());
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait ClaimDsl: Claimable {
    /// Starts a claim of this model's rows, described step by step and run by a terminal call
    /// that says what comes back: `Job::claim().filter(jobs::queue.eq("mail")).batch(10).rows(conn)`.
    /// The one entry point for claiming; see [`Claim`](crate::claim::Claim) for its steps
    /// (filter, batch, options, wait, cursor) and terminals (one row, rows, a locked row, guards).
    fn claim() -> crate::claim::Claim<Self> {
        crate::claim::Claim::new()
    }

    /// Claims the next claimable row for this process (`FOR UPDATE SKIP LOCKED` on PostgreSQL
    /// and MySQL, one write transaction on SQLite); `None` when no unclaimed, unlocked row is
    /// left. See the [crate docs](crate#claim-the-next-row).
    fn claim_next<C>(conn: &mut C) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::claim_next(conn)
    }

    /// Claims up to `n` rows at once; never more than `n`, even under contention. `n = 0` is
    /// [`InvalidInput::Zero`](crate::InvalidInput::Zero), before any query.
    fn claim_batch<C>(conn: &mut C, n: usize) -> Result<Vec<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::claim_batch(conn, n)
    }

    /// [`claim_next`](Self::claim_next) as `options` say: another owner, another stale-claim
    /// timeout.
    fn claim_next_with<C>(conn: &mut C, options: &ClaimOptions) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::claim_batch_with(conn, 1, options).map(first)
    }

    /// [`claim_batch`](Self::claim_batch) as `options` say.
    fn claim_batch_with<C>(conn: &mut C, n: usize, options: &ClaimOptions) -> Result<Vec<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::claim_batch_with(conn, n, options)
    }

    /// [`claim_next_with`](Self::claim_next_with), only rows that also match `filter` (a Diesel
    /// boolean expression on the model's table, e.g. `jobs::queue.eq("emails")`).
    fn claim_next_where<C, F>(
        conn: &mut C,
        options: &ClaimOptions,
        filter: F,
    ) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
        F: Expression<SqlType = Bool>
            + AppearsOnTable<Self::Table>
            + QueryFragment<Backend<C>>
            + QueryId,
    {
        claim::claim_batch_where(conn, 1, options, filter).map(first)
    }

    /// [`claim_batch_with`](Self::claim_batch_with), only rows that also match `filter`.
    fn claim_batch_where<C, F>(
        conn: &mut C,
        n: usize,
        options: &ClaimOptions,
        filter: F,
    ) -> Result<Vec<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
        F: Expression<SqlType = Bool>
            + AppearsOnTable<Self::Table>
            + QueryFragment<Backend<C>>
            + QueryId,
    {
        claim::claim_batch_where(conn, n, options, filter)
    }

    /// Claims the next row through `pool`, waiting up to `timeout` for one: at once when a row
    /// is there, within milliseconds of a [`notify_ready`](Self::notify_ready) (PostgreSQL, with
    /// the pool's [`WaiterWakeups`](crate::pool::WaiterWakeups)), else at the next poll. `None`
    /// when the timeout passed without a row. No connection is held while it sleeps. It returns
    /// within `timeout` plus the claim's drop wait whatever the network does (see
    /// [`claim_next_wait`](crate::claim::claim_next_wait)).
    fn claim_next_wait<C>(
        pool: &impl ConnectionSource<Connection = C>,
        timeout: Duration,
    ) -> Result<Option<Self>>
    where
        C: LeaseConnection + R2D2Connection + ClaimConnection<Self>,
        Self: Send,
    {
        claim::claim_next_wait(pool, timeout)
    }

    /// [`claim_next_wait`](Self::claim_next_wait) for up to `n` rows; returns as soon as at
    /// least one row was claimed. `n = 0` is [`InvalidInput::Zero`](crate::InvalidInput::Zero).
    fn claim_batch_wait<C>(
        pool: &impl ConnectionSource<Connection = C>,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Self>>
    where
        C: LeaseConnection + R2D2Connection + ClaimConnection<Self>,
        Self: Send,
    {
        claim::claim_batch_wait(pool, n, ClaimOptions::shared_default(), timeout)
    }

    /// Claims the next row through `pool` and guards it: the [`ClaimGuard`] heartbeats while
    /// the work runs (with a claim timeout) and hands the row back if dropped unfinished.
    fn claim_next_guarded<C>(
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Option<ClaimGuard<Self>>>
    where
        C: LeaseConnection + R2D2Connection + ClaimConnection<Self>,
        Self: Send + Sync,
    {
        ClaimGuard::claim_next(pool)
    }

    /// [`claim_next_guarded`](Self::claim_next_guarded) for up to `n` rows, each with its own
    /// guard.
    fn claim_batch_guarded<C>(
        pool: &impl ConnectionSource<Connection = C>,
        n: usize,
    ) -> Result<Vec<ClaimGuard<Self>>>
    where
        C: LeaseConnection + R2D2Connection + ClaimConnection<Self>,
        Self: Send + Sync,
    {
        ClaimGuard::claim_batch(pool, n)
    }

    /// Selects the next claimable row and keeps it locked until the caller's transaction ends,
    /// skipping rows other transactions hold (JPA's `PESSIMISTIC_WRITE` with the skip-locked
    /// hint). Call it inside a transaction; see [`claim::lock_next`] for each backend.
    fn lock_next<C>(conn: &mut C) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::lock_next(conn)
    }

    /// [`lock_next`](Self::lock_next), only rows that also match `filter`.
    fn lock_next_where<C, F>(conn: &mut C, filter: F) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
        F: Expression<SqlType = Bool>
            + AppearsOnTable<Self::Table>
            + QueryFragment<Backend<C>>
            + QueryId,
    {
        claim::lock_next_where(conn, filter)
    }

    /// Locks the next claimable row and runs `work` on it in one transaction: commits on `Ok`,
    /// rolls back (the row is available again) on `Err`. `Ok(None)` without calling `work` when
    /// no row is available.
    fn with_next_locked<C, T, E, W>(conn: &mut C, work: W) -> std::result::Result<Option<T>, E>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
        E: From<diesel::result::Error>,
        W: FnOnce(&mut C::Conn, Self) -> std::result::Result<T, E>,
    {
        claim::with_next_locked(conn, work)
    }

    /// Locks the row with primary key `pk` for the caller's transaction if it is in a ready
    /// state, waiting (bounded) for a transaction that holds it: `None` when the row does not
    /// qualify, also after its holder changed it. See [`claim::lock_by_pk_if_claimable`].
    fn lock_by_pk_if_claimable<C>(conn: &mut C, pk: Self::Pk) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimableLockConnection<Self>,
    {
        claim::lock_by_pk_if_claimable(conn, pk)
    }

    /// [`lock_by_pk_if_claimable`](Self::lock_by_pk_if_claimable) and `work` in one
    /// transaction: commit on `Ok`, roll back on `Err`; `Ok(None)` without calling `work` when
    /// the row does not qualify.
    fn with_locked<C, T, E, W>(
        conn: &mut C,
        pk: Self::Pk,
        work: W,
    ) -> std::result::Result<Option<T>, E>
    where
        C: BorrowConnection,
        C::Conn: ClaimableLockConnection<Self>,
        E: From<diesel::result::Error>,
        W: FnOnce(&mut C::Conn, Self) -> std::result::Result<T, E>,
    {
        claim::with_locked(conn, pk, work)
    }

    /// Marks this claimed row done if this worker still owns the claim; `false` when it was
    /// rescued by another worker (or already finished). Needs `done = …`.
    fn complete<C>(&self, conn: &mut C) -> Result<bool>
    where
        Self: HasDoneState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::finish(conn, self, Finish::Done)
    }

    /// Marks this claimed row failed if this worker still owns the claim. Needs `failed = …`.
    fn fail<C>(&self, conn: &mut C) -> Result<bool>
    where
        Self: HasFailedState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::finish(conn, self, Finish::Failed)
    }

    /// Hands this claimed row back (first ready state, owner cleared) if this worker still owns
    /// the claim.
    fn release<C>(&self, conn: &mut C) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::finish(conn, self, Finish::Ready)
    }

    /// Marks the claimed `rows` done in one statement per 200 rows, each only if this worker
    /// still owns its claim: for each row in order, `true` when it was moved, `false` when it
    /// had been rescued (or finished) and was left alone. Needs `done = …`.
    fn complete_batch<C>(conn: &mut C, rows: &[Self]) -> Result<Vec<bool>>
    where
        Self: HasDoneState,
        Self::Pk: PartialEq,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::finish_batch(conn, rows, Finish::Done)
    }

    /// [`complete_batch`](Self::complete_batch), to the failed state. Needs `failed = …`.
    fn fail_batch<C>(conn: &mut C, rows: &[Self]) -> Result<Vec<bool>>
    where
        Self: HasFailedState,
        Self::Pk: PartialEq,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::finish_batch(conn, rows, Finish::Failed)
    }

    /// [`complete_batch`](Self::complete_batch), back to the first ready state, owner cleared.
    fn release_batch<C>(conn: &mut C, rows: &[Self]) -> Result<Vec<bool>>
    where
        Self::Pk: PartialEq,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::finish_batch(conn, rows, Finish::Ready)
    }

    /// Moves this claimed row's `claimed_at` to the database's now if this worker still owns
    /// the claim, so it is not rescued while its work runs; `false` when it was rescued (stop
    /// the work). A [`ClaimGuard`] does it for you. Needs `claimed_at = …`.
    fn heartbeat<C>(&self, conn: &mut C) -> Result<bool>
    where
        Self: HasClaimedAt,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::heartbeat(conn, self)
    }

    /// Hands this claimed row back to be claimed again after `delay` (database clock) if this
    /// worker still owns the claim. A non-zero delay needs `available_at = …`
    /// ([`Error::Config`](crate::Error::Config) otherwise).
    fn retry<C>(&self, conn: &mut C, delay: Duration) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::retry(conn, self, delay)
    }

    /// After a failed run: retries the row after the policy's backoff for its attempt, or
    /// moves it to the failed state when that attempt was the policy's last.
    /// [`RetryOutcome::Lost`] when the claim was rescued meanwhile. Needs `attempts = …` and
    /// `failed = …`.
    fn fail_or_retry<C>(&self, conn: &mut C, policy: &RetryPolicy) -> Result<RetryOutcome>
    where
        Self: HasAttempts + HasFailedState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::fail_or_retry(conn, self, policy, None)
    }

    /// [`fail_or_retry`](Self::fail_or_retry), storing `error` in the `error = …` column when
    /// one is mapped.
    fn fail_or_retry_because<C>(
        &self,
        conn: &mut C,
        policy: &RetryPolicy,
        error: &str,
    ) -> Result<RetryOutcome>
    where
        Self: HasAttempts + HasFailedState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::fail_or_retry(conn, self, policy, Some(error))
    }

    /// Wakes this table's waiting claimers ([`claim_next_wait`](Self::claim_next_wait), a
    /// [`Worker`](crate::worker::Worker)) at once: call it in the transaction that inserts ready
    /// rows (PostgreSQL `NOTIFY`, sent on commit; other backends' waiters poll and this does
    /// nothing).
    fn notify_ready<C>(conn: &mut C) -> Result<()>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::notify_ready::<Self, C>(conn)
    }

    /// Installs (or replaces) a trigger on this table that does what
    /// [`notify_ready`](Self::notify_ready) does after every insert statement (PostgreSQL; a
    /// no-op elsewhere).
    fn install_ready_trigger<C>(conn: &mut C) -> Result<()>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::install_ready_trigger::<Self, C>(conn)
    }

    /// Cancels the row with key `pk`: a ready row is never claimed; a claimed row's holder
    /// loses its claim (a [`ClaimGuard`]'s heartbeat finds it, so its
    /// [`lost_signal`](crate::Held::lost_signal) fires within one heartbeat, and `complete`
    /// returns `false`). The row goes to the `cancelled = …` state, or the failed state when
    /// the model names none. `true` when the row was ready or claimed and is now cancelled;
    /// `false` when there is no such row or it had finished already (left alone). Needs
    /// `cancelled = …` or `failed = …`.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_lease::prelude::*;
    ///
    /// diesel::table! { mails (id) { id -> BigInt, status -> Text, } }
    ///
    /// #[derive(Debug, Queryable, Selectable, Claimable)]
    /// #[diesel(table_name = mails)]
    /// #[claimable(state = status, ready = "new", claimed = "sending", done = "sent",
    ///             cancelled = "cancelled")]
    /// struct Mail { id: i64, status: String }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
    /// #     "CREATE TABLE mails (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
    /// #      INSERT INTO mails VALUES (1, 'new'), (2, 'new');")?;
    /// assert!(Mail::cancel_by_pk(&mut conn, 1)?);
    /// assert!(!Mail::cancel_by_pk(&mut conn, 1)?); // already cancelled
    /// assert_eq!(Mail::claim_next(&mut conn)?.map(|m| m.id), Some(2));
    /// # Ok(()) }
    /// # main().unwrap();
    /// # }
    /// ```
    fn cancel_by_pk<C>(conn: &mut C, pk: Self::Pk) -> Result<bool>
    where
        Self: HasCancelState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::cancel_by_pk(conn, pk)
    }

    /// Pauses claims from this table for every process of the farm: its claims return nothing
    /// and its waiters ([`claim_next_wait`](Self::claim_next_wait), a
    /// [`Worker`](crate::worker::Worker)) keep waiting, until [`resume`](Self::resume). `true`
    /// when this call paused it, `false` when it was paused already. Needs `pausable` and
    /// diesel-lease's migrations ([`run_migrations`](crate::run_migrations)).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_lease::prelude::*;
    ///
    /// diesel::table! { mails (id) { id -> BigInt, status -> Text, tenant -> Text, } }
    ///
    /// #[derive(Debug, Queryable, Selectable, Claimable)]
    /// #[diesel(table_name = mails)]
    /// #[claimable(state = status, ready = "new", claimed = "sending", pausable(key = tenant))]
    /// struct Mail { id: i64, status: String, tenant: String }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_lease::run_migrations(&mut conn)?;
    /// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
    /// #     "CREATE TABLE mails (id INTEGER PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL);
    /// #      INSERT INTO mails VALUES (1, 'new', 'acme'), (2, 'new', 'globex');")?;
    /// Mail::pause(&mut conn)?;
    /// assert!(Mail::claim_next(&mut conn)?.is_none());
    /// Mail::resume(&mut conn)?;
    /// Mail::pause_key(&mut conn, "acme")?; // only acme's rows wait
    /// assert_eq!(Mail::claim_next(&mut conn)?.map(|m| m.tenant), Some("globex".to_string()));
    /// assert!(Mail::claim_next(&mut conn)?.is_none());
    /// # Ok(()) }
    /// # main().unwrap();
    /// # }
    /// ```
    fn pause<C>(conn: &mut C) -> Result<bool>
    where
        Self: Pausable,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::pause::<Self, C>(conn)
    }

    /// Resumes claims from this table and wakes its waiters at once (PostgreSQL `NOTIFY`, sent
    /// at commit; elsewhere this process's waiters, and other processes' at their next poll).
    /// `true` when it was paused. Needs `pausable`.
    fn resume<C>(conn: &mut C) -> Result<bool>
    where
        Self: Pausable,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::resume::<Self, C>(conn)
    }

    /// [`pause`](Self::pause) for the rows whose key column (`pausable(key = …)`) holds `key`:
    /// the other rows are claimed as before.
    fn pause_key<C>(conn: &mut C, key: &str) -> Result<bool>
    where
        Self: HasPauseKey,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::pause_key::<Self, C>(conn, key)
    }

    /// [`resume`](Self::resume) for the rows of `key`.
    fn resume_key<C>(conn: &mut C, key: &str) -> Result<bool>
    where
        Self: HasPauseKey,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self>,
    {
        claim::resume_key::<Self, C>(conn, key)
    }
}

impl<M: Claimable> ClaimDsl for M {}

fn first<M>(rows: Vec<M>) -> Option<M> {
    rows.into_iter().next()
}

/// At-most-once work on a [`ClaimIfNull`] model: set a nullable column only while it is `NULL`
/// (`#[claimable(claim_if_null = col)]`), so exactly one caller wins, however many race.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     action (id) {
///         id -> BigInt,
///         notified -> Nullable<Timestamp>,
///     }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = action)]
/// #[claimable(claim_if_null = notified)]
/// struct Action {
///     id: i64,
///     notified: Option<chrono::NaiveDateTime>,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let mut conn = diesel::SqliteConnection::establish(dir.path().join("db").to_str().unwrap())?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE action (id INTEGER PRIMARY KEY, notified TIMESTAMP);
/// #      INSERT INTO action (id) VALUES (7);")?;
/// let action: Action = action::table.find(7).select(Action::as_select()).first(&mut conn)?;
/// assert!(action.claim_if_null(&mut conn, diesel_lease::db_now)?, "we notify");
/// assert!(!action.claim_if_null(&mut conn, diesel_lease::db_now)?, "already done");
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait ClaimIfNullDsl: ClaimIfNull {
    /// Sets this row's column to `value` ([`db_now`](crate::db_now) for the database clock) if
    /// it is still `NULL`: `true` for exactly one caller.
    fn claim_if_null<C, V>(&self, conn: &mut C, value: V) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: ClaimIfNullConnection<Self, V>,
    {
        once::claim_if_null::<Self, C, V>(conn, self.pk(), value)
    }

    /// [`claim_if_null`](Self::claim_if_null) for the row with primary key `pk` (a tuple for
    /// composite keys).
    fn claim_if_null_by_pk<C, V>(conn: &mut C, pk: Self::Pk, value: V) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: ClaimIfNullConnection<Self, V>,
    {
        once::claim_if_null::<Self, C, V>(conn, pk, value)
    }

    /// Locks the row with primary key `pk` for the caller's transaction if its column is still
    /// `NULL`, waiting (bounded) for a transaction that holds it; `None` when it is set, also by
    /// the holder waited for. Call inside a transaction.
    fn lock_by_pk_if_null<C>(conn: &mut C, pk: Self::Pk) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: NullLockConnection<Self>,
    {
        claim::lock_by_pk_if_null(conn, pk)
    }

    /// [`lock_by_pk_if_null`](Self::lock_by_pk_if_null) and `work` in one transaction: commit
    /// on `Ok`, roll back on `Err`; `Ok(None)` without calling `work` when the column is set.
    fn with_locked_if_null<C, T, E, W>(
        conn: &mut C,
        pk: Self::Pk,
        work: W,
    ) -> std::result::Result<Option<T>, E>
    where
        C: BorrowConnection,
        C::Conn: NullLockConnection<Self>,
        E: From<diesel::result::Error>,
        W: FnOnce(&mut C::Conn, Self) -> std::result::Result<T, E>,
    {
        claim::with_locked_if_null(conn, pk, work)
    }
}

impl<M: ClaimIfNull> ClaimIfNullDsl for M {}

/// Follow-up inserts of an [`InsertOnce`] model (`#[claimable(insert_once)]` on an
/// `Insertable`): a duplicate is an ordinary outcome, never an error, and never aborts the
/// caller's transaction.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
/// use diesel_lease::InsertOutcome;
///
/// diesel::table! {
///     notification (id) {
///         id -> BigInt,
///         action_id -> BigInt,
///     }
/// }
///
/// #[derive(Insertable, Claimable)]
/// #[diesel(table_name = notification)]
/// #[claimable(insert_once)]
/// struct NewNotification {
///     action_id: i64,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let mut conn = diesel::SqliteConnection::establish(dir.path().join("db").to_str().unwrap())?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE notification (id INTEGER PRIMARY KEY, action_id BIGINT NOT NULL UNIQUE);")?;
/// let first = NewNotification { action_id: 7 }.insert_once(&mut conn)?;
/// assert!(matches!(first, InsertOutcome::Inserted(_)));
/// let again = NewNotification { action_id: 7 }.insert_once(&mut conn)?;
/// assert_eq!(again, InsertOutcome::AlreadyExists);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait InsertOnceDsl: InsertOnce {
    /// Inserts this row unless a unique constraint already holds an equal one: `Inserted` (with
    /// the `returning` row where the backend returns it) or `AlreadyExists`.
    fn insert_once<C>(self, conn: &mut C) -> Result<InsertOutcome<Self::Row>>
    where
        C: BorrowConnection,
        C::Conn: InsertOnceConnection<Self::Table, Self, Self::Mode>,
        Self::Mode: InsertReturning<Backend<C>, Output = Self::Row>,
    {
        once::insert_once::<Self::Mode, _, _, C>(conn, Self::Table::default(), self)
    }
}

impl<M: InsertOnce> InsertOnceDsl for M {}

/// Seed 000's job lease on a [`JobLease`] model (`#[claimable(job(...))]` on your own
/// `job_status` table): one node of a farm runs each occurrence of a job; a dead node's run is
/// taken over after its timeout, by the database clock.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_lease::lease::job::JobRunOptions;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     job_status (job_id) {
///         job_id -> Text,
///         running_at -> Nullable<Text>,
///         last_run_started -> Nullable<Timestamp>,
///         next_run -> Nullable<Timestamp>,
///     }
/// }
///
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = job_status, primary_key(job_id))]
/// #[claimable(job(holder = running_at, started_at = last_run_started, next_run = next_run))]
/// struct JobStatus {
///     job_id: String,
///     running_at: Option<String>,
///     last_run_started: Option<chrono::NaiveDateTime>,
///     next_run: Option<chrono::NaiveDateTime>,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let mut conn = diesel::SqliteConnection::establish(dir.path().join("db").to_str().unwrap())?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE job_status (job_id TEXT PRIMARY KEY, running_at TEXT,
/// #                              last_run_started TIMESTAMP, next_run TIMESTAMP);
/// #      INSERT INTO job_status (job_id) VALUES ('stock-prices');")?;
/// let me = JobRunOptions::new(Duration::from_secs(600)).every(Duration::from_secs(300));
/// let run = JobStatus::try_start_run(&mut conn, "stock-prices".into(), &me)?.expect("due");
/// // Another node (or this one) asking now is told no: the job runs, and is not due again yet.
/// assert!(JobStatus::try_start_run(&mut conn, "stock-prices".into(), &me)?.is_none());
/// assert!(JobStatus::finish_run(&mut conn, "stock-prices".into(), &run)?);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait JobLeaseDsl: JobLease {
    /// Takes this occurrence of job `pk` if it is due and nobody runs it (or its runner has been
    /// silent past the timeout): `Some(run)` for exactly one node. A schedule in `options`
    /// (`every`, `cron`) needs the model's `next_run` column: without one it is
    /// [`Error::Config`](crate::Error::Config), before anything is sent.
    fn try_start_run<C>(
        conn: &mut C,
        pk: Self::Pk,
        options: &JobRunOptions,
    ) -> Result<Option<JobRun>>
    where
        C: BorrowConnection,
        C::Conn: JobConnection<Self>,
    {
        job::try_start_run::<Self, C>(conn, pk, options)
    }

    /// Ends `run` of job `pk` if it is still this run; `false` when it was taken over.
    fn finish_run<C>(conn: &mut C, pk: Self::Pk, run: &JobRun) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: JobConnection<Self>,
    {
        job::finish_run::<Self, C>(conn, pk, run)
    }
}

impl<M: JobLease> JobLeaseDsl for M {}

/// Seed 001 on a control table with a resource column (`#[claimable(semaphore(resource = …,
/// …))]`): semaphores and reader/writer locks whose requests are rows of your table.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     process_control (queue_position) {
///         queue_position -> Integer,
///         requesting_id -> Text,
///         resource -> Text,
///         access_type -> Text,
///         granted -> Bool,
///         expires_at -> BigInt,
///     }
/// }
///
/// #[derive(Claimable)]
/// #[diesel(table_name = process_control, primary_key(queue_position))]
/// #[claimable(semaphore(ticket = queue_position, owner = requesting_id, resource = resource,
///                       mode = access_type, shared = "R", exclusive = "W"))]
/// struct ProcessControl {
///     queue_position: i32,
///     requesting_id: String,
///     resource: String,
///     access_type: String,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<diesel::SqliteConnection>(&url, 4)?;
/// diesel_lease::run_migrations(&mut pool.get()?)?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut pool.get()?,
/// #     "CREATE TABLE process_control (queue_position INTEGER PRIMARY KEY AUTOINCREMENT,
/// #        requesting_id TEXT NOT NULL, resource TEXT NOT NULL, access_type TEXT NOT NULL,
/// #        granted BOOLEAN NOT NULL DEFAULT FALSE, expires_at BIGINT NOT NULL DEFAULT 9223372036854775807);")?;
/// let etl = ProcessControl::semaphore("etl", 2);
/// let first = etl.acquire(&pool, Duration::from_secs(5))?;
/// let second = etl.acquire(&pool, Duration::from_secs(5))?;
/// assert!(etl.try_acquire(&pool)?.is_none(), "two holders at most");
/// drop(first);
/// assert!(etl.try_acquire(&pool)?.is_some());
/// # drop(second);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait ControlTableDsl: ControlTable + ResourceColumn + Sized {
    /// A semaphore of `permits` holders over `resource`. Every process using the resource must
    /// declare the same count.
    fn semaphore(resource: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::in_control_table::<Self>(Some(resource.into()), permits)
    }

    /// A reader/writer lock over `resource` (needs `mode(…)`).
    fn rw_lock(resource: impl Into<String>) -> RwLock
    where
        Self: HasModeColumn,
    {
        RwLock::in_control_table::<Self>(Some(resource.into()))
    }
}

impl<T: ControlTable + ResourceColumn> ControlTableDsl for T {}

/// Seed 001 on a control table that queues for one resource (no `resource = …`).
pub trait OneResourceControlTableDsl: ControlTable + OneResource + Sized {
    /// A semaphore of `permits` holders over the table's one resource. Every process must
    /// declare the same count.
    fn semaphore(permits: u32) -> Semaphore {
        Semaphore::in_control_table::<Self>(None, permits)
    }

    /// A reader/writer lock over the table's one resource (needs `mode(…)`).
    fn rw_lock() -> RwLock
    where
        Self: HasModeColumn,
    {
        RwLock::in_control_table::<Self>(None)
    }
}

impl<T: ControlTable + OneResource> OneResourceControlTableDsl for T {}

/// Retention and redrive of a claimable model's rows: delete done and dead rows older than a
/// period in small batches, and move dead letters back to ready (see the README, "Retention
/// and redrive").
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     mails (id) {
///         id -> BigInt, status -> Text, owner -> Nullable<Text>, attempts -> Integer,
///         last_error -> Nullable<Text>,
///     }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = mails)]
/// #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
///             owner = owner, attempts = attempts, error = last_error)]
/// struct Mail {
///     id: i64,
///     status: String,
///     owner: Option<String>,
///     attempts: i32,
///     last_error: Option<String>,
/// }
///
/// # let mut conn = SqliteConnection::establish(":memory:").unwrap();
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE mails (id INTEGER PRIMARY KEY, status TEXT NOT NULL, owner TEXT,
/// #          attempts INTEGER NOT NULL, last_error TEXT);
/// #      INSERT INTO mails VALUES (1, 'dead', 'w1', 5, 'smtp down'), (2, 'dead', 'w1', 5, 'smtp down');").unwrap();
/// // The mail server is back: both dead letters are new mails again, with no attempt used.
/// assert_eq!(Mail::redrive_dead(&mut conn, 100).unwrap(), 2);
/// let mail = Mail::claim_next(&mut conn).unwrap().expect("ready again");
/// assert_eq!((mail.attempts, mail.last_error), (1, None));
/// # }
/// ```
pub trait RetentionDsl: Claimable {
    /// Deletes done and dead rows whose `column` is older than the retention's period by the
    /// database clock, in batches; see
    /// [`claim::retention::purge_finished`](crate::claim::retention::purge_finished()).
    fn purge_finished<C, Col>(conn: &mut C, column: Col, retention: &Retention) -> Result<Purged>
    where
        Self: ClaimSql<<C::Conn as Connection>::Backend>,
        C: BorrowConnection,
        <C::Conn as Connection>::Backend: RetentionSqlDialect,
        Col: diesel::Column<Table = Self::Table>,
        Col::SqlType: TimestampType,
    {
        retention::purge_finished::<Self, C, Col>(conn, column, retention)
    }

    /// Moves up to `limit` dead rows back to ready, attempts reset (kept counting on a model
    /// without an owner column, where they fence the claims: such a row that had used its
    /// `max_attempts` gets one try and no retry); see
    /// [`claim::retention::redrive_dead`](crate::claim::retention::redrive_dead()).
    fn redrive_dead<C>(conn: &mut C, limit: u64) -> Result<u64>
    where
        Self: HasFailedState + ClaimSql<<C::Conn as Connection>::Backend>,
        C: BorrowConnection,
        <C::Conn as Connection>::Backend: RetentionSqlDialect,
    {
        retention::redrive_dead::<Self, C>(conn, limit)
    }

    /// [`redrive_dead`](Self::redrive_dead) of the dead rows that also match `filter`.
    fn redrive_dead_where<C, F>(conn: &mut C, limit: u64, filter: F) -> Result<u64>
    where
        Self: HasFailedState + ClaimSql<<C::Conn as Connection>::Backend>,
        C: BorrowConnection,
        <C::Conn as Connection>::Backend: RetentionSqlDialect,
        F: Expression<SqlType = Bool>
            + AppearsOnTable<Self::Table>
            + QueryFragment<<C::Conn as Connection>::Backend>,
    {
        retention::redrive_dead_where::<Self, C, F>(conn, limit, filter)
    }
}

impl<M: Claimable> RetentionDsl for M {}
