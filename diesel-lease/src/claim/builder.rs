//! [`Claim`], the claim builder: its steps and terminals (the docs are on the type).

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use diesel::expression::{AppearsOnTable, Expression};
use diesel::query_builder::{QueryFragment, QueryId};
use diesel::sql_types::Bool;
use diesel::Connection;

use super::statements::NoFilter;
use super::{
    batch_size, ClaimConnection, ClaimCursor, ClaimDialect, ClaimGuard, ClaimOptions,
    ClaimOrderKey, Claimable, CursorConnection,
};
use crate::backend::Dialect;
use crate::pool::ConnectionSource;
use crate::{BorrowConnection, Error, Result};

/// One entry point for claiming, built step by step as a Diesel query is; made by
/// [`ClaimDsl::claim`](crate::dsl::ClaimDsl::claim).
///
/// `M::claim()` starts a claim of model `M`'s rows; each step adds an option, and a terminal
/// call runs it and says what comes back:
///
/// | step | what |
/// |---|---|
/// | [`filter`](Claim::filter) | only rows that also match a Diesel boolean expression on the model's table |
/// | [`batch`](Claim::batch) | up to `n` rows at once instead of one |
/// | [`options`](Claim::options) | another owner, stale-claim timeout, drop wait or rate limit ([`ClaimOptions`]) |
/// | [`wait`](Claim::wait), [`deadline`](Claim::deadline) | wait for rows through a pool, up to a timeout or an instant |
/// | [`cursor`](Claim::cursor) | look for rows from the last claimed one on ([`ClaimCursor`], for deep queues) |
///
/// | terminal | returns | on |
/// |---|---|---|
/// | [`row`](Claim::row) | the next row, claimed: `Option<M>` | a connection; a pool after `wait` |
/// | [`rows`](Claim::rows) | up to `n` rows, claimed: `Vec<M>` (after `batch`) | a connection; a pool after `wait` |
/// | [`locked`](Claim::locked) | the next row, not claimed but locked for the caller's transaction | a connection |
/// | [`guard`](Claim::guard), [`guards`](Claim::guards) | claimed rows, each in a [`ClaimGuard`] that keeps it alive | a pool |
///
/// A step that does not apply to a terminal is a compile error, not an option silently
/// ignored: a locked row has no batch, owner or wait, and a guard does not wait.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     jobs (id) {
///         id -> BigInt,
///         queue -> Text,
///         status -> Text,
///     }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = jobs)]
/// #[claimable(state = status, ready = "new", claimed = "running", done = "done")]
/// struct Job {
///     id: i64,
///     queue: String,
///     status: String,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let mut conn = diesel::SqliteConnection::establish(dir.path().join("db").to_str().unwrap())?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE jobs (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, status TEXT NOT NULL);
/// #      INSERT INTO jobs (queue, status) VALUES ('mail', 'new'), ('mail', 'new'), ('pdf', 'new');")?;
/// let pdf = Job::claim().filter(jobs::queue.eq("pdf")).row(&mut conn)?.expect("a pdf job");
/// assert_eq!(pdf.queue, "pdf");
///
/// let mail = Job::claim().batch(10).rows(&mut conn)?;
/// assert_eq!(mail.len(), 2);
/// assert!(Job::claim().row(&mut conn)?.is_none());
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
///
/// The type parameters record the steps taken (which filter, one row or a batch, whether it
/// waits, which options, which cursor), so that a terminal a step does not apply to is not
/// there to call. Code never needs to name them.
///
/// Through a pool: waiting for rows, guarding them, and a row locked for a transaction:
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     jobs (id) {
///         id -> BigInt,
///         status -> Text,
///         owner -> Nullable<Text>,
///     }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = jobs)]
/// #[claimable(state = status, ready = "new", claimed = "running", done = "done", owner = owner)]
/// struct Job {
///     id: i64,
///     status: String,
///     owner: Option<String>,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = dir.path().join("db").to_str().unwrap().to_owned();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 2)?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut pool.get()?,
/// #     "CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL, owner TEXT);
/// #      INSERT INTO jobs (status) VALUES ('new'), ('new'), ('new');")?;
/// // Wait up to a second for up to two rows; they are there, so at once.
/// let two = Job::claim().batch(2).wait(Duration::from_secs(1)).rows(&pool)?;
/// assert_eq!(two.len(), 2);
///
/// // The last row, guarded: dropped unfinished, it goes back to "new".
/// let guard = Job::claim().guard(&pool)?.expect("row 3");
/// assert!(guard.complete()?, "still ours");
///
/// // Nothing ready is left: a locked row, with work in its transaction, finds none.
/// let none: Option<i64> = Job::claim()
///     .filter(jobs::id.gt(0))
///     .locked_with(&mut pool.get()?, |_conn, job: Job| Ok::<_, diesel_lease::Error>(job.id))?;
/// assert_eq!(none, None);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
#[must_use = "a claim does nothing until a terminal call (`row`, `rows`, `locked`, `guard`, `guards`) runs it"]
#[derive(Debug)]
pub struct Claim<M, F = Unfiltered, N = One, W = Now, O = Defaults, K = NoCursor> {
    filter: F,
    count: N,
    wait: W,
    options: O,
    cursor: K,
    model: PhantomData<fn() -> M>,
}

/// No filter step: every claimable row qualifies.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unfiltered;

/// The [`filter`](Claim::filter) step: only rows that also match this expression.
#[derive(Debug, Clone, Copy)]
pub struct Filtered<F>(F);

/// No [`batch`](Claim::batch) step: one row.
#[derive(Debug, Clone, Copy, Default)]
pub struct One;

/// The [`batch`](Claim::batch) step: up to this many rows.
#[derive(Debug, Clone, Copy)]
pub struct Batch(usize);

/// No [`wait`](Claim::wait) step: claim now, or nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Now;

/// The [`wait`](Claim::wait) or [`deadline`](Claim::deadline) step.
#[derive(Debug, Clone, Copy)]
pub struct Wait(Until);

#[derive(Debug, Clone, Copy)]
enum Until {
    Timeout(Duration),
    Deadline(Instant),
}

impl Wait {
    /// How long the terminal call may wait, from now.
    fn timeout(self) -> Duration {
        match self.0 {
            Until::Timeout(timeout) => timeout,
            Until::Deadline(deadline) => deadline.saturating_duration_since(Instant::now()),
        }
    }
}

/// No [`options`](Claim::options) step: [`ClaimOptions::default`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Defaults;

/// The [`options`](Claim::options) step.
#[derive(Debug, Clone, Copy)]
pub struct WithOptions<'o>(&'o ClaimOptions);

/// No [`cursor`](Claim::cursor) step: each claim looks for rows from the start of the order.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCursor;

/// The [`cursor`](Claim::cursor) step.
#[derive(Debug)]
pub struct Cursor<'c, M: ClaimOrderKey>(&'c ClaimCursor<M>);

mod sealed {
    pub trait Sealed {}
}

/// The claim options a claim runs with: [`Defaults`] or [`WithOptions`]. Sealed.
pub trait OptionsStep: sealed::Sealed {
    /// The options.
    fn get(&self) -> &ClaimOptions;
}
impl sealed::Sealed for Defaults {}
impl OptionsStep for Defaults {
    fn get(&self) -> &ClaimOptions {
        ClaimOptions::shared_default()
    }
}
impl sealed::Sealed for WithOptions<'_> {}
impl OptionsStep for WithOptions<'_> {
    fn get(&self) -> &ClaimOptions {
        self.0
    }
}

/// How many rows a claim takes: [`One`] or [`Batch`]. Sealed.
pub trait CountStep: sealed::Sealed {
    /// The row count.
    fn n(&self) -> usize;
}
impl sealed::Sealed for One {}
impl CountStep for One {
    fn n(&self) -> usize {
        1
    }
}
impl sealed::Sealed for Batch {}
impl CountStep for Batch {
    fn n(&self) -> usize {
        self.0
    }
}

/// Which rows qualify on backend `DB`: [`Unfiltered`] or [`Filtered`]. Sealed.
pub trait FilterStep<M: Claimable, DB>: sealed::Sealed {
    /// The filter's query id, for the statement cache ([`NoFilter`] without one).
    #[doc(hidden)]
    type Id: QueryId;
    /// The filter as the claim statements take it.
    #[doc(hidden)]
    fn fragment(&self) -> Option<&(dyn QueryFragment<DB> + '_)>;
}
impl sealed::Sealed for Unfiltered {}
impl<M: Claimable, DB> FilterStep<M, DB> for Unfiltered {
    type Id = NoFilter;
    fn fragment(&self) -> Option<&(dyn QueryFragment<DB> + '_)> {
        None
    }
}
impl<F> sealed::Sealed for Filtered<F> {}
// The expression's type and table were checked by the `filter` step, the only way to make a
// `Filtered`: not again here, where a filter on another table would repeat the step's errors at
// the terminal.
impl<M, DB, F> FilterStep<M, DB> for Filtered<F>
where
    M: Claimable,
    DB: diesel::backend::Backend,
    F: QueryFragment<DB> + QueryId,
{
    type Id = F;
    fn fragment(&self) -> Option<&(dyn QueryFragment<DB> + '_)> {
        Some(&self.0)
    }
}

impl<M: Claimable> Claim<M> {
    pub(crate) fn new() -> Self {
        Claim {
            filter: Unfiltered,
            count: One,
            wait: Now,
            options: Defaults,
            cursor: NoCursor,
            model: PhantomData,
        }
    }
}

impl<M, F, N, W, O, K> Claim<M, F, N, W, O, K> {
    fn with<F2, N2, W2, O2, K2>(
        self,
        step: impl FnOnce(F, N, W, O, K) -> (F2, N2, W2, O2, K2),
    ) -> Claim<M, F2, N2, W2, O2, K2> {
        let (filter, count, wait, options, cursor) = step(
            self.filter,
            self.count,
            self.wait,
            self.options,
            self.cursor,
        );
        Claim {
            filter,
            count,
            wait,
            options,
            cursor,
            model: PhantomData,
        }
    }
}

// --- steps ------------------------------------------------------------------------------------

impl<M: Claimable, N, W, O> Claim<M, Unfiltered, N, W, O, NoCursor> {
    /// Only rows that also match `filter`, a Diesel boolean expression on the model's table
    /// (`jobs::queue.eq("mail")`; combine several with `.and(…)`). An expression on another
    /// table is a compile error here. Not with a [`cursor`](Self::cursor).
    pub fn filter<F>(self, filter: F) -> Claim<M, Filtered<F>, N, W, O, NoCursor>
    where
        F: Expression<SqlType = Bool> + AppearsOnTable<M::Table>,
    {
        self.with(|_, n, w, o, k| (Filtered(filter), n, w, o, k))
    }
}

impl<M: Claimable, F, W, O, K> Claim<M, F, One, W, O, K> {
    /// Up to `n` rows at once, never more, even under contention; run it with
    /// [`rows`](Self::rows) or [`guards`](Self::guards). `n = 0` is
    /// [`InvalidInput::Zero`](crate::InvalidInput::Zero) when it runs, before any query.
    pub fn batch(self, n: usize) -> Claim<M, F, Batch, W, O, K> {
        self.with(|f, _, w, o, k| (f, Batch(n), w, o, k))
    }
}

impl<M: Claimable, F, N, W, K> Claim<M, F, N, W, Defaults, K> {
    /// Claims as `options` say: another owner, stale-claim timeout, drop wait or rate limit.
    pub fn options(self, options: &ClaimOptions) -> Claim<M, F, N, W, WithOptions<'_>, K> {
        self.with(|f, n, w, _, k| (f, n, w, WithOptions(options), k))
    }
}

impl<M: Claimable, F, N, O, K> Claim<M, F, N, Now, O, K> {
    /// Waits up to `timeout` for rows, through a pool: at once when a row is there, within
    /// milliseconds of a [`notify`](super::queue::Queue::notify) (PostgreSQL, with
    /// the pool's [`WaiterWakeups`](crate::pool::WaiterWakeups), which
    /// [`build_pool`](crate::pool::build_pool) installs), else at the next poll (at most
    /// one second apart). The terminal returns nothing
    /// (`None`, an empty `Vec`) when the timeout passed without a row, and
    /// [`Error::Pool`] (the last poll's) when none of its polls got a
    /// connection (the server refused them, or the pool's were all in use the whole time), since
    /// then nothing was looked at.
    ///
    /// The waiters of one pool for one table share their polls (one of them polls, twice per
    /// interval while others wait with it; the rest wait without a query until a poll finds
    /// rows), so their idle cost does not grow with their number. Each call looks once when it
    /// starts, since a row may be there already: an idle loop should wait long per call (or use
    /// a [`Worker`](crate::worker::Worker)) rather than call it with short timeouts.
    ///
    /// No connection is held while it sleeps. Each poll runs on a thread of its own, and the
    /// terminal returns within `timeout` plus the [drop wait](ClaimOptions::drop_wait) (2 s by
    /// default) whatever the pool's health check and the network do: a poll still under way
    /// then fails with [`Error::Timeout`] naming the table and goes on in
    /// the background, where rows it claims are handed back. Since polls run on their own
    /// threads, a filter on a waiting claim must own its values (`'static`, `Send`, `Sync`):
    /// `jobs::queue.eq(name.clone())`, not `.eq(&name)`.
    pub fn wait(self, timeout: Duration) -> Claim<M, F, N, Wait, O, K> {
        self.with(|f, n, _, o, k| (f, n, Wait(Until::Timeout(timeout)), o, k))
    }

    /// [`wait`](Self::wait) until `deadline` (measured when the terminal call runs).
    pub fn deadline(self, deadline: Instant) -> Claim<M, F, N, Wait, O, K> {
        self.with(|f, n, _, o, k| (f, n, Wait(Until::Deadline(deadline)), o, k))
    }
}

impl<M: ClaimOrderKey, N, W, O> Claim<M, Unfiltered, N, W, O, NoCursor> {
    /// Looks for rows from the last row `cursor` claimed on, instead of from the start of the
    /// claim order: for deep queues (see [`ClaimCursor`]). Not with a [`filter`](Self::filter).
    pub fn cursor(self, cursor: &ClaimCursor<M>) -> Claim<M, Unfiltered, N, W, O, Cursor<'_, M>> {
        self.with(|f, n, w, o, _| (f, n, w, o, Cursor(cursor)))
    }
}

// --- terminals: now, on a connection ----------------------------------------------------------

type Backend<C> = <<C as BorrowConnection>::Conn as Connection>::Backend;

impl<M: Claimable, F, N: CountStep, O: OptionsStep> Claim<M, F, N, Now, O, NoCursor> {
    fn claim_on<C>(&self, conn: &mut C) -> Result<Vec<M>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
        F: FilterStep<M, Backend<C>>,
    {
        let limit = batch_size(self.count.n())?;
        conn.borrow_connection().claim_matching::<F::Id>(
            limit,
            self.options.get(),
            self.filter.fragment(),
        )
    }
}

impl<M: Claimable, F, O: OptionsStep> Claim<M, F, One, Now, O, NoCursor> {
    /// Claims the next claimable row for this process (`FOR UPDATE SKIP LOCKED` on PostgreSQL
    /// and MySQL, one write transaction on SQLite); `None` when no unclaimed, unlocked row is
    /// left. See the [crate docs](crate#claim-the-next-row).
    pub fn row<C>(self, conn: &mut C) -> Result<Option<M>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
        F: FilterStep<M, Backend<C>>,
    {
        self.claim_on(conn).map(first)
    }

    /// Selects the next claimable row and keeps it locked for the caller's transaction, skipping rows
    /// other transactions hold (JPA's `PESSIMISTIC_WRITE` with the skip-locked hint).
    ///
    /// No batch, options or wait: a locked row is not claimed. Call it inside a transaction: the lock ends with the transaction, so in autocommit mode it
    /// ends at once. Nothing about the row changes; update it yourself before committing (or use
    /// [`locked_with`](Self::locked_with)).
    ///
    /// - PostgreSQL and MySQL: `SELECT … FOR UPDATE SKIP LOCKED`.
    /// - SQLite has no row locks. The strongest equivalent: a write that matches nothing takes the
    ///   database write lock first, so no other writer runs until this transaction ends and no two
    ///   transactions can hold the same row. Call it first in the transaction (or use
    ///   [`locked_with`](Self::locked_with), which opens `BEGIN IMMEDIATE`): a transaction that read before may be
    ///   refused the write lock with `SQLITE_BUSY`.
    ///
    /// Two transactions on PostgreSQL never get the same row; the second skips the first's:
    ///
    /// ```
    /// # #[cfg(feature = "postgres")] {
    /// # mod setup { include!("../doctest_pg.rs"); }
    /// # use setup::pg_connection;
    /// use diesel::prelude::*;
    /// use diesel_lease::prelude::*;
    ///
    /// diesel::table! { tasks (id) { id -> BigInt, done -> Bool, } }
    ///
    /// #[derive(Debug, Queryable, Selectable, Claimable)]
    /// #[diesel(table_name = tasks)]
    /// #[claimable(state = done, ready = false, claimed = true)]
    /// struct Task {
    ///     id: i64,
    ///     done: bool,
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let Some(mut a) = pg_connection() else { return Ok(()) };
    /// # diesel::connection::SimpleConnection::batch_execute(&mut a,
    /// #     "CREATE TABLE tasks (id BIGINT PRIMARY KEY, done BOOLEAN NOT NULL);
    /// #      INSERT INTO tasks VALUES (1, false), (2, false);")?;
    /// # let url = diesel::sql_query("SELECT current_database() AS name").get_result::<DbName>(&mut a)?;
    /// # #[derive(QueryableByName)] struct DbName { #[diesel(sql_type = diesel::sql_types::Text)] name: String }
    /// # let admin = std::env::var("DIESEL_LEASE_TEST_PG")?;
    /// # let mut b = PgConnection::establish(&format!("{}/{}", admin.rsplit_once('/').unwrap().0, url.name))?;
    /// a.transaction::<_, diesel_lease::Error, _>(|a| {
    ///     let first = Task::claim().locked(a)?.expect("a row");
    ///     // While `a` holds its row, `b` locks the other one instead of waiting.
    ///     let second = b.transaction::<_, diesel_lease::Error, _>(|b| {
    ///         Ok(Task::claim().locked(b)?.expect("the other row").id)
    ///     })?;
    ///     assert_ne!(first.id, second);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// # main().unwrap();
    /// # }
    /// ```
    pub fn locked<C>(self, conn: &mut C) -> Result<Option<M>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
        F: FilterStep<M, Backend<C>>,
        O: IsDefaults,
    {
        conn.borrow_connection()
            .lock_matching::<F::Id>(1, self.filter.fragment())
            .map(first)
            .map_err(Error::from)
    }

    /// [`locked`](Self::locked) and `work` on the row in one transaction: commits when `work`
    /// returns `Ok`, rolls back (the row is available again) on `Err`; `Ok(None)` without
    /// calling `work` when no row is available.
    pub fn locked_with<C, T, E, Work>(
        self,
        conn: &mut C,
        work: Work,
    ) -> std::result::Result<Option<T>, E>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
        F: FilterStep<M, Backend<C>>,
        O: IsDefaults,
        E: From<diesel::result::Error>,
        Work: FnOnce(&mut C::Conn, M) -> std::result::Result<T, E>,
    {
        let filter = &self.filter;
        Dialect::write_tx(conn.borrow_connection(), |conn| {
            match first(conn.lock_matching::<F::Id>(1, filter.fragment())?) {
                Some(row) => work(conn, row).map(Some),
                None => Ok(None),
            }
        })
    }
}

impl<M: Claimable, F, O: OptionsStep> Claim<M, F, Batch, Now, O, NoCursor> {
    /// Claims up to the batch's `n` rows at once; never more than `n`, even under contention.
    pub fn rows<C>(self, conn: &mut C) -> Result<Vec<M>>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
        F: FilterStep<M, Backend<C>>,
    {
        self.claim_on(conn)
    }
}

/// Only [`Defaults`]: a locked row is not claimed, so claim options do not apply to it. Sealed.
#[diagnostic::on_unimplemented(
    message = "claim options do not apply to a locked row: `locked` does not claim it",
    label = "this claim has an `options` step",
    note = "drop the `options` step, or claim the row with `row`"
)]
pub trait IsDefaults: sealed::Sealed {}
impl IsDefaults for Defaults {}

// --- terminals: now, with a cursor ------------------------------------------------------------

impl<M, O: OptionsStep> Claim<M, Unfiltered, One, Now, O, Cursor<'_, M>>
where
    M: ClaimOrderKey,
    M::OrderValue: Clone + PartialOrd,
{
    /// The next claimable row, looked for from the cursor's last claimed row on.
    pub fn row<C>(self, conn: &mut C) -> Result<Option<M>>
    where
        C: BorrowConnection,
        C::Conn: CursorConnection<M>,
    {
        self.cursor
            .0
            .claim_rows(conn.borrow_connection(), 1, self.options.get(), None)
            .map(first)
    }
}

impl<M, O: OptionsStep> Claim<M, Unfiltered, Batch, Now, O, Cursor<'_, M>>
where
    M: ClaimOrderKey,
    M::OrderValue: Clone + PartialOrd,
{
    /// Up to the batch's `n` rows, looked for from the cursor's last claimed row on.
    pub fn rows<C>(self, conn: &mut C) -> Result<Vec<M>>
    where
        C: BorrowConnection,
        C::Conn: CursorConnection<M>,
    {
        self.cursor.0.claim_rows(
            conn.borrow_connection(),
            self.count.0,
            self.options.get(),
            None,
        )
    }
}

// --- terminals: waiting, through a pool ---------------------------------------------------------

impl<M, F, N, O> Claim<M, F, N, Wait, O, NoCursor>
where
    M: Claimable + Send,
    N: CountStep,
    O: OptionsStep,
{
    fn wait_on<C>(self, pool: &impl ConnectionSource<Connection = C>) -> Result<Vec<M>>
    where
        C: ClaimDialect + ClaimConnection<M>,
        F: FilterStep<M, C::Backend> + Send + Sync + 'static,
    {
        let limit = batch_size(self.count.n())?;
        let filter = self.filter;
        super::wait::wait_for_rows(
            pool,
            self.options.get(),
            self.wait.timeout(),
            move |conn: &mut C, options| {
                conn.claim_matching::<F::Id>(limit, options, filter.fragment())
            },
        )
    }
}

impl<M, F, O> Claim<M, F, One, Wait, O, NoCursor>
where
    M: Claimable + Send,
    O: OptionsStep,
{
    /// Claims the next row through `pool`, waiting for one (see [`wait`](Self::wait)); `None`
    /// when the wait ended without a row.
    pub fn row<C>(self, pool: &impl ConnectionSource<Connection = C>) -> Result<Option<M>>
    where
        C: ClaimDialect + ClaimConnection<M>,
        F: FilterStep<M, C::Backend> + Send + Sync + 'static,
    {
        self.wait_on(pool).map(first)
    }
}

impl<M, F, O> Claim<M, F, Batch, Wait, O, NoCursor>
where
    M: Claimable + Send,
    O: OptionsStep,
{
    /// Claims up to the batch's `n` rows through `pool`, waiting for them (see
    /// [`wait`](Self::wait)); returns as soon as at least one row was claimed, empty when the
    /// wait ended without one.
    pub fn rows<C>(self, pool: &impl ConnectionSource<Connection = C>) -> Result<Vec<M>>
    where
        C: ClaimDialect + ClaimConnection<M>,
        F: FilterStep<M, C::Backend> + Send + Sync + 'static,
    {
        self.wait_on(pool)
    }
}

impl<M, N, O> Claim<M, Unfiltered, N, Wait, O, Cursor<'_, M>>
where
    M: ClaimOrderKey + Send,
    M::OrderValue: Clone + PartialOrd + Send + 'static,
    N: CountStep,
    O: OptionsStep,
{
    fn wait_from_cursor<C>(self, pool: &impl ConnectionSource<Connection = C>) -> Result<Vec<M>>
    where
        C: ClaimDialect + CursorConnection<M>,
    {
        let n = self.count.n();
        batch_size(n)?;
        let cursor = self.cursor.0.clone();
        super::wait::wait_for_rows(
            pool,
            self.options.get(),
            self.wait.timeout(),
            move |conn: &mut C, options| cursor.claim_rows(conn, n, options, None),
        )
    }
}

impl<M, O> Claim<M, Unfiltered, One, Wait, O, Cursor<'_, M>>
where
    M: ClaimOrderKey + Send,
    M::OrderValue: Clone + PartialOrd + Send + 'static,
    O: OptionsStep,
{
    /// The next row through `pool`, waiting for one, each poll claiming through the cursor.
    pub fn row<C>(self, pool: &impl ConnectionSource<Connection = C>) -> Result<Option<M>>
    where
        C: ClaimDialect + CursorConnection<M>,
    {
        self.wait_from_cursor(pool).map(first)
    }
}

impl<M, O> Claim<M, Unfiltered, Batch, Wait, O, Cursor<'_, M>>
where
    M: ClaimOrderKey + Send,
    M::OrderValue: Clone + PartialOrd + Send + 'static,
    O: OptionsStep,
{
    /// Up to the batch's `n` rows through `pool`, waiting for them, each poll claiming through
    /// the cursor.
    pub fn rows<C>(self, pool: &impl ConnectionSource<Connection = C>) -> Result<Vec<M>>
    where
        C: ClaimDialect + CursorConnection<M>,
    {
        self.wait_from_cursor(pool)
    }
}

// --- terminals: guarded, through a pool ---------------------------------------------------------

impl<M, F, N, O> Claim<M, F, N, Now, O, NoCursor>
where
    M: Claimable + Send + Sync,
    N: CountStep,
    O: OptionsStep,
{
    fn guard_on<C>(self, pool: &impl ConnectionSource<Connection = C>) -> Result<Vec<ClaimGuard<M>>>
    where
        C: ClaimDialect + ClaimConnection<M>,
        F: FilterStep<M, C::Backend>,
    {
        let options = self.options.get();
        let limit = batch_size(self.count.n())?;
        let filter = &self.filter;
        ClaimGuard::claim_and_guard(pool, options, |conn: &mut C| {
            conn.claim_matching::<F::Id>(limit, options, filter.fragment())
        })
    }
}

impl<M, F, O> Claim<M, F, One, Now, O, NoCursor>
where
    M: Claimable + Send + Sync,
    O: OptionsStep,
{
    /// Claims the next row through `pool` and guards it: the [`ClaimGuard`] heartbeats while
    /// the work runs (with a claim timeout) and hands the row back if dropped unfinished.
    pub fn guard<C>(
        self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Option<ClaimGuard<M>>>
    where
        C: ClaimDialect + ClaimConnection<M>,
        F: FilterStep<M, C::Backend>,
    {
        self.guard_on(pool).map(first)
    }
}

impl<M, F, O> Claim<M, F, Batch, Now, O, NoCursor>
where
    M: Claimable + Send + Sync,
    O: OptionsStep,
{
    /// [`guard`](Self::guard) for up to the batch's `n` rows, each with its own guard.
    pub fn guards<C>(
        self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Vec<ClaimGuard<M>>>
    where
        C: ClaimDialect + ClaimConnection<M>,
        F: FilterStep<M, C::Backend>,
    {
        self.guard_on(pool)
    }
}

impl<M, N, O> Claim<M, Unfiltered, N, Now, O, Cursor<'_, M>>
where
    M: ClaimOrderKey + Send + Sync,
    M::OrderValue: Clone + PartialOrd,
    N: CountStep,
    O: OptionsStep,
{
    fn guard_from_cursor<C>(
        self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Vec<ClaimGuard<M>>>
    where
        C: ClaimDialect + CursorConnection<M>,
    {
        let options = self.options.get();
        let n = self.count.n();
        let cursor = self.cursor.0;
        ClaimGuard::claim_and_guard(pool, options, |conn| {
            cursor.claim_rows(conn, n, options, None)
        })
    }
}

impl<M, O> Claim<M, Unfiltered, One, Now, O, Cursor<'_, M>>
where
    M: ClaimOrderKey + Send + Sync,
    M::OrderValue: Clone + PartialOrd,
    O: OptionsStep,
{
    /// The next row through `pool`, claimed through the cursor and guarded.
    pub fn guard<C>(
        self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Option<ClaimGuard<M>>>
    where
        C: ClaimDialect + CursorConnection<M>,
    {
        self.guard_from_cursor(pool).map(first)
    }
}

impl<M, O> Claim<M, Unfiltered, Batch, Now, O, Cursor<'_, M>>
where
    M: ClaimOrderKey + Send + Sync,
    M::OrderValue: Clone + PartialOrd,
    O: OptionsStep,
{
    /// Up to the batch's `n` rows through `pool`, claimed through the cursor, each guarded.
    pub fn guards<C>(
        self,
        pool: &impl ConnectionSource<Connection = C>,
    ) -> Result<Vec<ClaimGuard<M>>>
    where
        C: ClaimDialect + CursorConnection<M>,
    {
        self.guard_from_cursor(pool)
    }
}

fn first<M>(rows: Vec<M>) -> Option<M> {
    rows.into_iter().next()
}
