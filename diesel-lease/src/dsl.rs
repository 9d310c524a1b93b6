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
//! `complete` or `requeue` never collide with these: a type's inherent methods win, and the
//! trait's are still there as `ClaimDsl::complete(&row, conn)`.
//!
//! Free-standing operations take the connection first (`ImportJob::claim().row(&mut conn)`);
//! operations on a row take it as their argument (`job.complete(&mut conn)`).

use std::time::Duration;

use crate::claim::{
    self, ClaimConnection, ClaimableLockConnection, Finish, HasAttempts, HasClaimedAt,
    HasDoneState, HasFailedState, NullLockConnection, RetryOutcome, RetryPolicy,
};
use crate::lease::job::{self, JobConnection, JobRun, JobRunOptions};
use crate::once::{self, ClaimIfNullConnection, InsertOnceConnection, InsertReturning};
use crate::semaphore::{HasModeColumn, OneResource, ResourceColumn, RwLock, Semaphore};
use crate::{BorrowConnection, InsertOutcome, Released, Result};

pub use crate::claim::Claimable;
use crate::claim::Keyed;
pub use crate::lease::job::JobLease;
pub use crate::once::{ClaimIfNull, InsertOnce};
pub use crate::semaphore::ControlTable;

/// The backend of connection `C`.
type Backend<C> = <<C as BorrowConnection>::Conn as diesel::Connection>::Backend;

/// Claims of a [`Claimable`] model's rows: each row to exactly one worker.
///
/// [`claim`](Self::claim) is the entry point: a [`Claim`](crate::claim::Claim) builder whose
/// steps are the options (filter, batch, claim options, wait, cursor) and whose terminal call
/// says what comes back: one row, rows, a row locked for the caller's transaction, or guarded
/// rows (`Job::claim().batch(10).rows(&mut conn)`). Claimed rows are finished with
/// [`FinishDsl`] (`complete`, `fail`, `requeue`, on one row or a slice).
///
/// [`queue`](Self::queue) is the entry point for the table's controls, built the same way
/// ([`Queue`](crate::claim::Queue)): pause and resume (the table, or one key's rows),
/// notify waiters, cancel a row, purge finished rows, redrive dead ones.
///
/// The rest works on one row: [`heartbeat`](Self::heartbeat), [`retry`](Self::retry),
/// [`fail_or_retry`](Self::fail_or_retry) on a claimed row;
/// [`lock_by_pk_if_claimable`](Self::lock_by_pk_if_claimable) and
/// [`with_locked`](Self::with_locked) lock a row by key, waiting for its holder.
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
/// let first = ImportJob::claim().row(&mut conn)?.expect("a ready row");
/// assert!(first.complete(&mut conn)?, "still ours");
///
/// let rest = ImportJob::claim().batch(10).rows(&mut conn)?;
/// assert_eq!(rest.len(), 2);
/// assert_eq!(rest.complete(&mut conn)?, [true, true]);
/// assert!(ImportJob::claim().row(&mut conn)?.is_none());
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

    /// The controls of this model's table as a queue: `Job::queue().pause(conn)`,
    /// `Job::queue().key("acme").resume(conn)`, `Job::queue().notify(conn)`,
    /// `Job::queue().cancel(conn, pk)`, `Job::queue().purge(conn, jobs::done_at, &retention)`,
    /// `Job::queue().filter(jobs::queue.eq("mail")).redrive(conn, 100)`. See
    /// [`Queue`](crate::claim::Queue).
    fn queue() -> crate::claim::Queue<Self> {
        crate::claim::Queue::new()
    }

    /// Locks the row with primary key `pk` for the caller's transaction if it is in a ready state,
    /// waiting (up to 30 s) for a transaction that holds it; `None` when the row
    /// does not qualify, including when the holder changed it while this call waited.
    ///
    /// Call it inside a transaction (or use [`with_locked`](Self::with_locked)): outside one it is refused with
    /// Diesel's `NotInTransaction` (as [`Error::Database`](crate::Error::Database)), because the lock would end at once. A
    /// wait that runs out is [`Error::Timeout`](crate::Error::Timeout); on PostgreSQL the caller's transaction is then
    /// aborted and must be rolled back. On SQLite call it first in the transaction: the lock is the
    /// database write lock, and a transaction that read before is refused it at once
    /// (`SQLITE_BUSY`, also [`Error::Timeout`](crate::Error::Timeout)) instead of waiting.
    ///
    /// Holding the lock while calling an external service holds every writer of the row (and on
    /// SQLite of the database) for as long as the call takes: the usual advice is to prefer a
    /// guard then (`claim_if_null`, which marks the row in one short statement and lets the call
    /// run outside any transaction). Use the waiting lock when the decision needs the row's current
    /// data and the work in the transaction is short, database work.
    fn lock_by_pk_if_claimable<C>(conn: &mut C, pk: Self::Pk) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimableLockConnection<Self>,
    {
        claim::lock_by_pk_if_claimable(conn, pk)
    }

    /// [`lock_by_pk_if_claimable`](Self::lock_by_pk_if_claimable) waiting at most `wait` for
    /// the row's holder instead of 30 s; a zero `wait` is refused with
    /// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration).
    fn lock_by_pk_if_claimable_within<C>(
        conn: &mut C,
        pk: Self::Pk,
        wait: std::time::Duration,
    ) -> Result<Option<Self>>
    where
        C: BorrowConnection,
        C::Conn: ClaimableLockConnection<Self>,
    {
        claim::lock_by_pk_if_claimable_within(conn, pk, wait)
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

    /// Moves this claimed row's `claimed_at` to the database's now if this worker still owns
    /// the claim, so it is not rescued while its work runs; `false` when it was rescued (stop
    /// the work). A [`ClaimGuard`](crate::claim::ClaimGuard) does it for you. Needs `claimed_at = …`.
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
}

impl<M: Claimable> ClaimDsl for M {}

/// Finishes claimed rows, each only if this worker still owns its claim: one row
/// (`job.complete(conn)`) or a slice of them (`jobs.complete(conn)`), one method name each.
///
/// A claim is still this worker's while the row is claimed with the stamp this claim wrote
/// (every claim writes a fresh one, so a rescue, even by another thread of this process, makes
/// it differ). For one row the outcome is `true` when the row was moved and `false` when it had
/// been rescued or finished meanwhile and was left alone; for a slice it is one such `bool` per
/// row, in order, from one statement per 200 rows.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! { jobs (id) { id -> BigInt, status -> Text, owner -> Nullable<Text>, } }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = jobs)]
/// #[claimable(state = status, ready = "new", claimed = "running", done = "done",
///             failed = "failed", owner = owner)]
/// struct Job {
///     id: i64,
///     status: String,
///     owner: Option<String>,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = diesel::SqliteConnection::establish(":memory:")?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL, owner TEXT);
/// #      INSERT INTO jobs (status) VALUES ('new'), ('new'), ('new'), ('new');")?;
/// let one = Job::claim().row(&mut conn)?.expect("a row");
/// assert!(one.complete(&mut conn)?, "still ours: done");
/// assert!(!one.complete(&mut conn)?, "already finished: left alone");
///
/// let rows = Job::claim().batch(3).rows(&mut conn)?;
/// assert_eq!(rows[..1].fail(&mut conn)?, [true]);
/// assert_eq!(rows[1..].requeue(&mut conn)?, [true, true], "back to new");
/// assert_eq!(Job::claim().batch(3).rows(&mut conn)?.len(), 2);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait FinishDsl {
    /// The model whose rows these are.
    type Model: Claimable;
    /// What a finish returns: `bool` for one row, `Vec<bool>` (one per row, in order) for a
    /// slice.
    type Outcome;

    /// Marks the row(s) done, each only if this worker still owns its claim. Needs `done = …`
    /// (a compile error without it).
    #[must_use = "`false` means the claim was rescued meanwhile: the row is not done by this worker"]
    fn complete<C>(&self, conn: &mut C) -> Result<Self::Outcome>
    where
        Self::Model: HasDoneState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self::Model>;

    /// Marks the row(s) failed, each only if this worker still owns its claim. Needs
    /// `failed = …`.
    #[must_use = "`false` means the claim was rescued meanwhile: the row was not failed by this worker"]
    fn fail<C>(&self, conn: &mut C) -> Result<Self::Outcome>
    where
        Self::Model: HasFailedState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self::Model>;

    /// Hands the row(s) back, untouched, for another worker to claim now (the first ready
    /// state, owner cleared), each only if this worker still owns its claim. [`ClaimDsl::retry`]
    /// hands one back after a delay, as the answer to a failed run.
    #[must_use = "`false` means the claim was rescued meanwhile: another worker has the row"]
    fn requeue<C>(&self, conn: &mut C) -> Result<Self::Outcome>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<Self::Model>;
}

impl<M: Claimable> FinishDsl for M {
    type Model = M;
    type Outcome = bool;

    fn complete<C>(&self, conn: &mut C) -> Result<bool>
    where
        M: HasDoneState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        claim::finish(conn, self, Finish::Done)
    }

    fn fail<C>(&self, conn: &mut C) -> Result<bool>
    where
        M: HasFailedState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        claim::finish(conn, self, Finish::Failed)
    }

    fn requeue<C>(&self, conn: &mut C) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        claim::finish(conn, self, Finish::Ready)
    }
}

impl<M: Claimable> FinishDsl for [M]
where
    M::Pk: PartialEq,
{
    type Model = M;
    type Outcome = Vec<bool>;

    fn complete<C>(&self, conn: &mut C) -> Result<Vec<bool>>
    where
        M: HasDoneState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        claim::finish_batch(conn, self, Finish::Done)
    }

    fn fail<C>(&self, conn: &mut C) -> Result<Vec<bool>>
    where
        M: HasFailedState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        claim::finish_batch(conn, self, Finish::Failed)
    }

    fn requeue<C>(&self, conn: &mut C) -> Result<Vec<bool>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        claim::finish_batch(conn, self, Finish::Ready)
    }
}

/// At-most-once work: on a [`ClaimIfNull`] model (`#[claim_if_null(column = col)]`), set a
/// nullable column only while it is `NULL`, so exactly one caller wins however many race; on an
/// [`InsertOnce`] model (`#[derive(InsertOnce)]` on an `Insertable`), insert a follow-up row
/// where a duplicate is an outcome, never an error ([`insert_once`](Self::insert_once)).
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
/// #[derive(Debug, Queryable, Selectable, ClaimIfNull)]
/// #[diesel(table_name = action)]
/// #[claim_if_null(column = notified)]
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
pub trait OnceDsl: Sized {
    /// Sets this row's column to `value` ([`db_now`](crate::db_now) for the database clock) if
    /// it is still `NULL`: `true` for exactly one caller.
    fn claim_if_null<C, V>(&self, conn: &mut C, value: V) -> Result<bool>
    where
        Self: ClaimIfNull,
        C: BorrowConnection,
        C::Conn: ClaimIfNullConnection<Self, V>,
    {
        once::claim_if_null::<Self, C, V>(conn, Keyed::pk(self), value)
    }

    /// [`claim_if_null`](Self::claim_if_null) for the row with primary key `pk` (a tuple for
    /// composite keys).
    fn claim_if_null_by_pk<C, V>(conn: &mut C, pk: <Self as Keyed>::Pk, value: V) -> Result<bool>
    where
        Self: ClaimIfNull,
        C: BorrowConnection,
        C::Conn: ClaimIfNullConnection<Self, V>,
    {
        once::claim_if_null::<Self, C, V>(conn, pk, value)
    }

    /// Locks the row with primary key `pk` for the caller's transaction if its guard column is
    /// still `NULL` — the classic `SELECT * FROM table1 WHERE id = $id AND col1 IS NULL FOR UPDATE`
    /// — waiting (up to 30 s) for a transaction that holds it; `None` when the
    /// guard is set, including by the holder this call waited for. Otherwise as
    /// [`ClaimDsl::lock_by_pk_if_claimable`].
    ///
    /// The at-most-once transaction on PostgreSQL: the first lock gets the row and sets `col1`; once that
    /// committed, the row no longer qualifies:
    ///
    /// ```
    /// # #[cfg(feature = "postgres")] {
    /// # mod setup { include!("doctest_pg.rs"); }
    /// # use setup::pg_connection;
    /// use diesel::prelude::*;
    /// use diesel_lease::prelude::*;
    ///
    /// diesel::table! { table1 (id) { id -> BigInt, col1 -> Nullable<Text>, } }
    ///
    /// #[derive(Debug, Queryable, Selectable, ClaimIfNull)]
    /// #[diesel(table_name = table1)]
    /// #[claim_if_null(column = col1)]
    /// struct Table1 {
    ///     id: i64,
    ///     col1: Option<String>,
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let Some(mut conn) = pg_connection() else { return Ok(()) };
    /// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
    /// #     "CREATE TABLE table1 (id BIGINT PRIMARY KEY, col1 TEXT NULL); INSERT INTO table1 VALUES (1, NULL);")?;
    /// let first = conn.transaction::<_, diesel_lease::Error, _>(|conn| {
    ///     let Some(row) = Table1::lock_by_pk_if_null(conn, 1)? else { return Ok(false) };
    ///     // … the external call, under the row lock …
    ///     diesel::update(table1::table.find(row.id)).set(table1::col1.eq("sent")).execute(conn)?;
    ///     Ok(true)
    /// })?;
    /// assert!(first);
    /// let again = conn.transaction(|conn| Table1::lock_by_pk_if_null(conn, 1))?;
    /// assert!(again.is_none(), "col1 is set: the row no longer qualifies");
    /// # Ok(()) }
    /// # main().unwrap();
    /// # }
    /// ```
    fn lock_by_pk_if_null<C>(conn: &mut C, pk: <Self as Keyed>::Pk) -> Result<Option<Self>>
    where
        Self: ClaimIfNull,
        C: BorrowConnection,
        C::Conn: NullLockConnection<Self>,
    {
        claim::lock_by_pk_if_null(conn, pk)
    }

    /// [`lock_by_pk_if_null`](Self::lock_by_pk_if_null) waiting at most `wait` for the row's
    /// holder instead of 30 s; a zero `wait` is refused with
    /// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration).
    fn lock_by_pk_if_null_within<C>(
        conn: &mut C,
        pk: <Self as Keyed>::Pk,
        wait: std::time::Duration,
    ) -> Result<Option<Self>>
    where
        Self: ClaimIfNull,
        C: BorrowConnection,
        C::Conn: NullLockConnection<Self>,
    {
        claim::lock_by_pk_if_null_within(conn, pk, wait)
    }

    /// [`lock_by_pk_if_null`](Self::lock_by_pk_if_null) and `work` in one transaction: commit
    /// on `Ok`, roll back on `Err`; `Ok(None)` without calling `work` when the column is set.
    fn with_locked_if_null<C, T, E, W>(
        conn: &mut C,
        pk: <Self as Keyed>::Pk,
        work: W,
    ) -> std::result::Result<Option<T>, E>
    where
        Self: ClaimIfNull,
        C: BorrowConnection,
        C::Conn: NullLockConnection<Self>,
        E: From<diesel::result::Error>,
        W: FnOnce(&mut C::Conn, Self) -> std::result::Result<T, E>,
    {
        claim::with_locked_if_null(conn, pk, work)
    }

    /// Inserts this row unless a unique constraint already holds an equal one: `Inserted` (with
    /// the `returning` row where the backend returns it) or `AlreadyExists`. A duplicate is an
    /// ordinary outcome, never an error, and never aborts the caller's transaction.
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
    /// #[derive(Insertable, InsertOnce)]
    /// #[diesel(table_name = notification)]
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
    fn insert_once<C>(self, conn: &mut C) -> Result<InsertOutcome<<Self as InsertOnce>::Row>>
    where
        Self: InsertOnce,
        C: BorrowConnection,
        C::Conn:
            InsertOnceConnection<<Self as InsertOnce>::Table, Self, <Self as InsertOnce>::Mode>,
        <Self as InsertOnce>::Mode: InsertReturning<Backend<C>, Output = <Self as InsertOnce>::Row>,
    {
        once::insert_once::<<Self as InsertOnce>::Mode, _, _, C>(
            conn,
            <<Self as InsertOnce>::Table as Default>::default(),
            self,
        )
    }
}

/// Every type gets [`OnceDsl`]'s methods, as every query gets Diesel's `RunQueryDsl`: each is
/// there only for the models with its capability ([`ClaimIfNull`], [`InsertOnce`]).
impl<T> OnceDsl for T {}

/// The job lease of a scheduled job on a farm, on a [`JobLease`] model (`#[job_lease(...)]` on your own
/// `job_status` table): one node of a farm runs each occurrence of a job; a dead node's run is
/// taken over after its timeout, by the database clock.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_lease::lease::JobRunOptions;
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
/// #[derive(Queryable, Selectable, JobLease)]
/// #[diesel(table_name = job_status, primary_key(job_id))]
/// #[job_lease(holder = running_at, started_at = last_run_started, next_run = next_run)]
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
/// let run = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me)?.expect("due");
/// // Another node (or this one) asking now is told no: the job runs, and is not due again yet.
/// assert!(JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me)?.is_none());
/// assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run)?.was_held());
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait JobLeaseDsl: JobLease {
    /// Takes this occurrence of job `pk` if it is due and nobody runs it (or its runner has been
    /// silent past the timeout): `Some(run)` for exactly one node. A schedule in `options`
    /// (`every`, `cron`) needs the model's `next_run` column: without one it is
    /// [`Error::Config`](crate::Error::Config), before anything is sent.
    fn try_acquire_run<C>(
        conn: &mut C,
        pk: Self::Pk,
        options: &JobRunOptions,
    ) -> Result<Option<JobRun>>
    where
        C: BorrowConnection,
        C::Conn: JobConnection<Self>,
    {
        job::try_acquire_run::<Self, C>(conn, pk, options)
    }

    /// Ends `run` of job `pk` (its holder column back to `NULL`) if it is still this run:
    /// [`Released::WasHeld`]; [`Released::WasLost`]
    /// when another node took the job over after the timeout (or the run was released already),
    /// and then the new run is left alone. A lease's [`release`](crate::Lease::release) answers
    /// the same way.
    fn release_run<C>(conn: &mut C, pk: Self::Pk, run: &JobRun) -> Result<Released>
    where
        C: BorrowConnection,
        C::Conn: JobConnection<Self>,
    {
        job::release_run::<Self, C>(conn, pk, run)
    }
}

impl<M: JobLease> JobLeaseDsl for M {}

/// Semaphores and reader/writer locks on a [`ControlTable`] (`#[control_table(…)]`):
/// their requests are rows of your table, granted first come, first served. A table with a
/// resource column (`resource = …`) holds many resources ([`semaphore`](Self::semaphore),
/// [`rw_lock`](Self::rw_lock)); one without queues for one
/// ([`table_semaphore`](Self::table_semaphore), [`table_rw_lock`](Self::table_rw_lock)).
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
/// #[derive(ControlTable)]
/// #[diesel(table_name = process_control, primary_key(queue_position))]
/// #[control_table(ticket = queue_position, owner = requesting_id, resource = resource,
///                       mode = access_type, shared = "R", exclusive = "W")]
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
/// assert!(first.release()?.was_held()); // or drop it: the pool's keeper releases it
/// assert!(etl.try_acquire(&pool)?.is_some());
/// # drop(second);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
pub trait ControlTableDsl: ControlTable + Sized {
    /// A semaphore of `permits` holders over `resource`, on a table with a resource column.
    /// Every process using the resource must declare the same count.
    fn semaphore(resource: impl Into<String>, permits: u32) -> Semaphore
    where
        Self: ResourceColumn,
    {
        Semaphore::in_control_table::<Self>(Some(resource.into()), permits)
    }

    /// A reader/writer lock over `resource`, on a table with a resource column (needs
    /// `mode(…)`).
    fn rw_lock(resource: impl Into<String>) -> RwLock
    where
        Self: ResourceColumn + HasModeColumn,
    {
        RwLock::in_control_table::<Self>(Some(resource.into()))
    }

    /// A semaphore of `permits` holders over the whole table, on a table that queues for one
    /// resource (no `resource = …`). Every process must declare the same count.
    fn table_semaphore(permits: u32) -> Semaphore
    where
        Self: OneResource,
    {
        Semaphore::in_control_table::<Self>(None, permits)
    }

    /// A reader/writer lock over the whole table, on a table that queues for one resource
    /// (needs `mode(…)`).
    fn table_rw_lock() -> RwLock
    where
        Self: OneResource + HasModeColumn,
    {
        RwLock::in_control_table::<Self>(None)
    }
}

impl<T: ControlTable> ControlTableDsl for T {}
