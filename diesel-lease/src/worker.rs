//! [`Worker`]: the loop every queue user writes around a claim, written once — wait for
//! rows without hammering the database, run them on `n` threads, heartbeat long runs, complete,
//! retry with backoff or dead-letter, survive a panicking handler, and stop cleanly.

use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use lease_core::{Backoff, InvalidInput, RetryPolicy};

use crate::claim::schedule::release_unstarted;
use crate::claim::wait::{ClaimFn, Waiter};
use crate::claim::{
    fail_or_retry, finish, heartbeat, ClaimConnection, ClaimCursor, ClaimGuard, ClaimOptions,
    ClaimOrderKey, Claimable, CursorConnection, Finish, HasAttempts, HasDoneState, HasFailedState,
    RateLimit, RetryOutcome,
};
use crate::pool::{AnySource, ConnectionSource};
use crate::semaphore::{Semaphore, MAX_RESOURCE_LEN};
use crate::{Error, Held, LeaseConnection, Result};

/// How long a row whose key is at its limit waits before it can be claimed again (with an
/// `available_at` column; without one it is claimable again at once).
const KEY_BUSY_DELAY: Duration = Duration::from_millis(200);

/// How often a pausing thread looks at the stop.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// The per-key limit: at most `max` rows with the same value of `column` run at once.
struct KeyLimit<M> {
    column: &'static str,
    max: u32,
    key: Box<dyn Fn(&M) -> String + Send + Sync>,
}

/// Runs a handler on claimed rows of model `M` from an r2d2 pool of `C` connections, on
/// [`concurrency`](Self::concurrency) threads, until told to stop.
///
/// Each thread waits for rows with a waiting claim's ([`Claim::wait`](crate::claim::Claim::wait)) waiter
/// (woken by [`Queue::notify`](crate::claim::Queue::notify) on PostgreSQL, polling at most once a
/// second when idle), claims one row or a [`batch`](Self::batch), and for each row:
///
/// - runs the handler with a pool connection while a [`ClaimGuard`] heartbeats the claim (when
///   the model has `claimed_at` and a timeout), so long runs are not rescued;
/// - on `Ok` completes the row (done state); on `Err` or a panic calls
///   [`fail_or_retry`](crate::dsl::ClaimDsl::fail_or_retry) with the [retry policy](Self::retry_policy)
///   and the error (or panic message) as the error text: retried after a backoff, or moved to the
///   failed state after the last attempt. A panicking handler never loses its row.
///
/// On stop (the flag turns true) no thread claims again; a thread still starts the rows it holds
/// for the [`grace`](Self::grace) period after the stop was seen, then hands the rest back
/// unstarted (ready at once, their attempt refunded). A running handler is never interrupted:
/// [`run_until`](Self::run_until) returns when every handler has returned, and within the
/// claims' [drop wait](ClaimOptions::drop_wait) (2 s by default) after the later of the stop and
/// the last handler's return, whatever the network does: each thread makes its database calls on
/// a thread of its own, and after the stop a call that has not answered by then is left to finish
/// in the background (rows it claims there are handed back; a completion may still land; a row
/// neither finished nor handed back is rescued after its claim timeout).
///
/// Needs a done state; retries need `attempts` and a failed state (and `available_at` for a
/// delay); [`Error::Config`] at the start otherwise.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use diesel::prelude::*;
/// use diesel_lease::worker::Worker;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     emails (id) { id -> BigInt, status -> Text, attempts -> Integer,
///                   run_at -> Timestamp, last_error -> Nullable<Text>, }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = emails)]
/// #[claimable(state = status, ready = "new", claimed = "sending", done = "sent",
///             failed = "dead", attempts = attempts, available_at = run_at, error = last_error)]
/// struct Email {
///     id: i64,
///     status: String,
///     attempts: i32,
///     run_at: chrono::NaiveDateTime,
///     last_error: Option<String>,
/// }
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// # diesel::connection::SimpleConnection::batch_execute(&mut pool.get().unwrap(),
/// #     "CREATE TABLE emails (id INTEGER PRIMARY KEY, status TEXT NOT NULL,
/// #          attempts INTEGER NOT NULL DEFAULT 0,
/// #          run_at TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
/// #          last_error TEXT);
/// #      INSERT INTO emails (status) VALUES ('new'), ('new');").unwrap();
/// let stop = AtomicBool::new(false);
/// let report = Worker::new(pool.clone())
///     .concurrency(2)
///     .run_until(&stop, |conn, email: &Email| {
///         // … send it; an `Err` (or a panic) retries it later …
///         let left: i64 = emails::table.filter(emails::status.eq("new")).count().get_result(conn)?;
///         if left == 0 {
///             stop.store(true, Ordering::Relaxed);
///         }
///         Ok::<_, diesel::result::Error>(())
///     })
///     .unwrap();
/// assert_eq!(report.completed, 2);
/// # }
/// ```
pub struct Worker<M, C>
where
    C: LeaseConnection,
{
    pool: AnySource<C>,
    concurrency: usize,
    batch: usize,
    grace: Duration,
    options: ClaimOptions,
    policy: RetryPolicy,
    key_limit: Option<KeyLimit<M>>,
    /// Claims through a [`ClaimCursor`] ([`Worker::claim_cursor`]), as a claim of `n` rows.
    cursor: Option<CursorClaim<M, C>>,
    /// How often the rate limits' idle keys are forgotten ([`Worker::forget_idle_every`]).
    forget_idle_every: Duration,
    _m: PhantomData<fn(&M)>,
}

/// [`Worker::forget_idle_every`]'s default.
const FORGET_IDLE_EVERY: Duration = Duration::from_secs(60);

/// A worker's claim through a [`ClaimCursor`], its bounds checked where it was set: `n` rows,
/// under the per-key limit (column, max) when there is one.
type CursorClaim<M, C> = Arc<
    dyn Fn(&mut C, usize, &ClaimOptions, Option<(&'static str, i64)>) -> Result<Vec<M>>
        + Send
        + Sync,
>;

/// What a [`Worker`] did, counted over its threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Rows whose handler returned `Ok` and that were completed.
    pub completed: u64,
    /// Rows whose handler failed (or panicked) and that were put back for a later attempt.
    pub retried: u64,
    /// Rows whose last attempt failed and that went to the failed state.
    pub failed: u64,
    /// Rows whose handler panicked (counted also as retried or failed).
    pub panicked: u64,
    /// Rows whose claim was rescued by another worker before this one finished them, and rows
    /// whose claim was lost (its deadline passed) before their handler got a connection: those
    /// are not run, since another worker may run them already.
    pub lost: u64,
    /// Rows claimed but handed back unstarted: at stop, or because their key was at its limit.
    pub released: u64,
}

impl<M, C> fmt::Debug for Worker<M, C>
where
    C: LeaseConnection,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("concurrency", &self.concurrency)
            .field("batch", &self.batch)
            .field("grace", &self.grace)
            .field("policy", &self.policy)
            .field(
                "key_limit",
                &self.key_limit.as_ref().map(|k| (k.column, k.max)),
            )
            .field("cursor", &self.cursor.is_some())
            .field("forget_idle_every", &self.forget_idle_every)
            .finish()
    }
}

impl<M, C> Worker<M, C>
where
    M: Claimable + HasDoneState + HasFailedState + HasAttempts + Send + Sync,
    C: LeaseConnection + ClaimConnection<M>,
{
    /// A worker on `pool`: one thread, one row per claim, a grace period of 30 s, retries with
    /// 1 s doubling to 1 h and 20 % jitter, for the model's `max_attempts` runs (5 when it sets
    /// none). On a model without `available_at`, which has nowhere to keep a delay, the retries
    /// come at once.
    pub fn new(pool: impl ConnectionSource<Connection = C>) -> Self {
        let attempts = M::MAX_ATTEMPTS.and_then(|n| u32::try_from(n).ok());
        let policy = attempts
            .and_then(|n| RetryPolicy::new(n).ok())
            .unwrap_or(DEFAULT_POLICY);
        // Without an `available_at` column a retry cannot wait: it is ready again at once.
        let policy = match M::AVAILABLE_AT {
            Some(_) => policy,
            None => policy.base(Duration::ZERO),
        };
        Worker {
            pool: AnySource::new(&pool),
            concurrency: 1,
            batch: 1,
            grace: Duration::from_secs(30),
            options: ClaimOptions::default(),
            policy,
            key_limit: None,
            cursor: None,
            forget_idle_every: FORGET_IDLE_EVERY,
            _m: PhantomData,
        }
    }

    /// How many rows run at once (threads; default 1). Give the pool room for them plus their
    /// heartbeats: `n + 2` connections or more. Zero is
    /// [`InvalidInput::Zero`] when [`run_until`](Self::run_until)
    /// starts.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// How many rows a thread claims at once (default 1); it runs them one after the other,
    /// touching each claim before it starts it. Zero is
    /// [`InvalidInput::Zero`] when [`run_until`](Self::run_until)
    /// starts.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }

    /// How long after the stop a thread still starts rows it already claimed.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The claims' owner and stale-claim timeout.
    pub fn claim_options(mut self, options: ClaimOptions) -> Self {
        self.options = options;
        self
    }

    /// Claims through `cursor`: each claim resumes at the last row claimed instead of at
    /// the front of the claim order, which keeps a deep PostgreSQL queue's claims as fast as a
    /// short one's. A row that becomes claimable again before that row (a failure retried, a row
    /// handed back) waits for the next claim that looks from the front: at most the cursor's
    /// rescan period while rows are claimed, at once when none is left from the key on (see
    /// [`ClaimCursor`]). The worker's threads share the cursor (and so do clones of it).
    /// Combines with [`limit_per_key`](Self::limit_per_key): the cursor's claims skip rows whose
    /// key is at its limit too, and such a row, once its key has room again, is found by the
    /// next claim that looks from the front (it lies before the key).
    pub fn claim_cursor(mut self, cursor: ClaimCursor<M>) -> Self
    where
        M: ClaimOrderKey,
        M::OrderValue: Clone + PartialOrd + Send + 'static,
        C: CursorConnection<M>,
    {
        self.cursor = Some(Arc::new(
            move |conn: &mut C, n: usize, options: &ClaimOptions, key_limit| {
                cursor.claim_rows(conn, n, options, key_limit)
            },
        ));
        self
    }

    /// When failed rows run again, and when they are given up. A policy whose retries wait
    /// needs the model's `available_at` column: without one, [`run_until`](Self::run_until)
    /// returns [`Error::Config`] before it claims anything.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Runs at most `max` rows with the same value of `column` at once (e.g. per tenant), across
    /// every worker on the database: claims skip rows whose key has `max` claimed rows, and a row
    /// starts only with one of `max` permits of a [`Semaphore`] named after its key, so the limit
    /// holds even when two claims race. `key` reads the column's value from a row; a value too
    /// long for a semaphore name (or with a NUL byte) is named by its start and a 64-bit hash.
    /// A panic in `key` fails the row (or retries it, by the retry policy) as a panicking handler
    /// does, and the worker goes on.
    ///
    /// The semaphores live in diesel-lease's tables: run [`run_migrations`](crate::run_migrations)
    /// first. A key's semaphore row is deleted when its last permit is released (the next row of
    /// that key creates it again), so the table does not keep a row per key value ever seen.
    /// A `max` of zero is [`InvalidInput::Zero`] when [`run_until`](Self::run_until) starts.
    pub fn limit_per_key<Col>(
        mut self,
        _column: Col,
        max: u32,
        key: impl Fn(&M) -> String + Send + Sync + 'static,
    ) -> Self
    where
        Col: diesel::Column<Table = M::Table>,
    {
        self.key_limit = Some(KeyLimit {
            column: Col::NAME,
            max,
            key: Box::new(key),
        });
        self
    }

    /// Claims at most `limit`'s number of rows per period, of the table or of each key, across
    /// every worker and claim that uses the same limit ([`ClaimOptions::rate_limit`] on this
    /// worker's claim options; set it after [`claim_options`](Self::claim_options), which
    /// replaces them). Rows over the limit stay ready; idle threads look again at least once a
    /// second. Combines with [`limit_per_key`](Self::limit_per_key): a row then needs room in
    /// the window and a free permit of its key, and a row handed back because its key was busy
    /// has used its start.
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.options = self.options.rate_limit(limit);
        self
    }

    /// How often the worker forgets its rate limits' idle keys
    /// ([`RateLimit::forget_idle`](crate::claim::RateLimit::forget_idle): the starts older than
    /// the period, and the rows of keys with none left), so keys that come and go (users, not a
    /// few tenants) leave no rows behind. Default one minute, never more often than the longest
    /// limit's period; one thread of the worker does it, between claims (in an idle worker, one
    /// thread's wait for rows ends for it), the first time one interval after the start. Safe
    /// beside every other worker's claims and forgets. Without a rate limit it does nothing.
    pub fn forget_idle_every(mut self, every: Duration) -> Self {
        self.forget_idle_every = every;
        self
    }

    /// The claim each poll of a run makes: through the cursor, under the key limit, or plain,
    /// with the worker's batch size and options.
    fn claim_fn(&self) -> ClaimFn<M, C> {
        let limit = i64::try_from(self.batch).unwrap_or(i64::MAX);
        let options = self.options.clone();
        let key = self
            .key_limit
            .as_ref()
            .map(|k| (k.column, i64::from(k.max)));
        let (batch, cursor) = (self.batch, self.cursor.clone());
        Arc::new(move |conn: &mut C| match (key, &cursor) {
            (_, Some(cursor)) => cursor(conn, batch, &options, key),
            (Some((column, max)), None) => {
                conn.claim_under_key_limit(limit, &options, column, max, None)
            }
            (None, None) => {
                conn.claim_matching::<crate::claim::statements::NoFilter>(limit, &options, None)
            }
        })
    }

    /// Runs `handler` on claimed rows until `stop` turns true (see the type's docs), then
    /// returns what was done. The first error that is not worth retrying (a configuration
    /// mistake, a query the database refuses) stops every thread and is returned; lost
    /// connections and timeouts are retried with backoff.
    pub fn run_until<F, E>(self, stop: &AtomicBool, handler: F) -> Result<WorkerReport>
    where
        F: Fn(&mut C, &M) -> std::result::Result<(), E> + Sync,
        E: fmt::Display,
    {
        if self.concurrency == 0 {
            return Err(InvalidInput::Zero {
                what: "worker concurrency",
            }
            .into());
        }
        if self.batch == 0 {
            return Err(InvalidInput::Zero {
                what: "worker batch",
            }
            .into());
        }
        if self.key_limit.as_ref().is_some_and(|k| k.max == 0) {
            return Err(InvalidInput::Zero {
                what: "per-key limit",
            }
            .into());
        }
        if M::AVAILABLE_AT.is_none() && self.policy.delays() {
            return Err(Error::Config(
                "the retry policy delays retries, which are stored in the not-before column: add \
                 `available_at = <timestamp column>` to #[claimable(...)], or give the policy a \
                 zero base delay"
                    .into(),
            ));
        }
        let run = Run {
            worker: &self,
            stop,
            stop_seen: OnceLock::new(),
            failed: AtomicBool::new(false),
            report: Mutex::new(WorkerReport::default()),
            resource: C::ready_resource()?,
            next_forget: Mutex::new(Instant::now().checked_add(self.forget_interval())),
            forget_watch: AtomicBool::new(false),
            claim: self.claim_fn(),
        };
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..self.concurrency)
                .map(|_| s.spawn(|| run.thread(&handler)))
                .collect();
            threads
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|_| Err(Error::Config("a worker thread panicked".into())))
                })
                .collect()
        });
        // The threads' guards and permits were dropped (handed to the pool's keeper): what the
        // worker held is given back before it returns, within the claims' drop wait.
        crate::keeper::flush(&self.pool, self.options.drop_wait_limit());
        results.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(run
            .report
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner))
    }
}

impl<M, C> Worker<M, C>
where
    C: LeaseConnection,
{
    /// [`forget_idle_every`](Self::forget_idle_every), at least the longest limit's period.
    fn forget_interval(&self) -> Duration {
        forget_interval(self.forget_idle_every, self.options.rate_limits())
    }
}

/// The one idle thread whose wait ends when idle keys are due to be forgotten (`Run::forget_watch`),
/// for as long as this lives.
struct ForgetWatch<'a>(&'a AtomicBool);

impl<'a> ForgetWatch<'a> {
    /// The watch, when the worker has rate limits and no other thread keeps it.
    fn take<M, C>(run: &'a Run<'_, M, C>) -> Option<Self>
    where
        C: LeaseConnection,
    {
        if run.worker.options.rate_limits().is_empty() {
            return None;
        }
        Self::claim(&run.forget_watch)
    }

    /// The watch kept by `flag`, when no other thread keeps it. The guard is made only once
    /// the flag is won: one made and dropped on a lost race would clear the winner's flag.
    fn claim(flag: &'a AtomicBool) -> Option<Self> {
        flag.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then(|| ForgetWatch(flag))
    }
}

impl Drop for ForgetWatch<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// How often a worker forgets `rates`' idle keys when asked for `every`: never more often than
/// the longest limit's period (a forget any sooner finds nothing new to forget).
fn forget_interval(every: Duration, rates: &[RateLimit]) -> Duration {
    let longest = rates.iter().map(RateLimit::period).max();
    every.max(longest.unwrap_or_default())
}

/// The retry policy when the model sets no `max_attempts`.
const DEFAULT_POLICY: RetryPolicy = match RetryPolicy::const_new(5) {
    Some(p) => p,
    None => unreachable!(),
};

/// One call of [`Worker::run_until`]: what its threads share.
struct Run<'a, M, C>
where
    C: LeaseConnection,
{
    worker: &'a Worker<M, C>,
    stop: &'a AtomicBool,
    /// When a thread first saw the stop: the grace period runs from here.
    stop_seen: OnceLock<Instant>,
    /// A thread met an error it cannot go on after: the others stop too.
    failed: AtomicBool,
    report: Mutex<WorkerReport>,
    /// The table's label, which names the per-key semaphores.
    resource: String,
    /// When a thread next forgets the rate limits' idle keys (`None`: never, an interval past
    /// what `Instant` holds).
    next_forget: Mutex<Option<Instant>>,
    /// Whether an idle thread's wait ends at `next_forget` already: one does, the others wait
    /// for rows only (a thousand idle threads wake once, not a thousand times).
    forget_watch: AtomicBool,
    /// The claim every poll makes, built once: each claim call shares it (one reference count),
    /// not a copy of the options (owner, rate limits) per call.
    claim: ClaimFn<M, C>,
}

/// What became of one row.
enum Done {
    Completed,
    Retried { panicked: bool },
    Failed { panicked: bool },
    Lost,
    Released,
}

impl Done {
    /// What a failed row became by the retry policy (`panicked`: the user's code panicked).
    fn of_failure(outcome: RetryOutcome, panicked: bool) -> Self {
        match outcome {
            RetryOutcome::Retried { .. } => Done::Retried { panicked },
            RetryOutcome::Failed { .. } => Done::Failed { panicked },
            RetryOutcome::Lost => Done::Lost,
        }
    }
}

impl<M, C> Run<'_, M, C>
where
    M: Claimable + HasDoneState + HasFailedState + HasAttempts + Send + Sync,
    C: LeaseConnection + ClaimConnection<M>,
{
    fn stopping(&self) -> bool {
        self.failed.load(Ordering::Relaxed) || self.stop.load(Ordering::Relaxed)
    }

    /// Whether a held row may still be started: before the stop, or within the grace after it.
    fn may_start(&self) -> bool {
        if self.failed.load(Ordering::Relaxed) {
            return false;
        }
        if !self.stop.load(Ordering::Relaxed) {
            return true;
        }
        let seen = *self.stop_seen.get_or_init(Instant::now);
        seen.elapsed() < self.worker.grace
    }

    fn count(&self, done: Done) {
        let mut r = self.report.lock().unwrap_or_else(PoisonError::into_inner);
        match done {
            Done::Completed => r.completed += 1,
            Done::Retried { panicked } => {
                r.retried += 1;
                r.panicked += u64::from(panicked);
            }
            Done::Failed { panicked } => {
                r.failed += 1;
                r.panicked += u64::from(panicked);
            }
            Done::Lost => r.lost += 1,
            Done::Released => r.released += 1,
        }
    }

    /// When a database call of a thread is given up on: never before the stop; after it, the
    /// drop wait after the later of the stop and the end of the thread's last handler (`quiet`),
    /// for all its calls together. So a stopped worker's threads return within the drop wait
    /// after their handlers, whatever the network does.
    fn give_up_at(&self, quiet: Instant) -> Option<Instant> {
        if !self.stopping() {
            return None;
        }
        let seen = *self.stop_seen.get_or_init(Instant::now);
        seen.max(quiet)
            .checked_add(self.worker.options.drop_wait_limit())
    }

    /// Makes `call` on the thread's courier, waiting for it until [`give_up_at`](Self::give_up_at);
    /// `None` past that, and the call goes on in the background (its result to `undo`).
    fn try_call<T: Send + 'static>(
        &self,
        calls: &mut Calls,
        call: impl FnOnce() -> Result<T> + Send + 'static,
        undo: impl FnOnce(Result<T>) + Send + 'static,
    ) -> Option<Result<T>> {
        let quiet = calls.quiet_since;
        calls
            .waiter
            .courier()
            .call(&|| self.give_up_at(quiet), call, undo)
    }

    /// [`try_call`](Self::try_call); a call given up on is [`Error::Timeout`] naming the table.
    fn call<T: Send + 'static>(
        &self,
        calls: &mut Calls,
        call: impl FnOnce() -> Result<T> + Send + 'static,
        undo: impl FnOnce(Result<T>) + Send + 'static,
    ) -> Result<T> {
        let started = Instant::now();
        self.try_call(calls, call, undo).unwrap_or_else(|| {
            Err(Error::waited(
                crate::observe::table_name::<M::Table>(),
                started.elapsed(),
            ))
        })
    }

    /// Sleeps `pause`, or until the stop.
    fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        while !self.stopping() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(STOP_CHECK));
        }
    }

    /// One thread: claim, run, repeat; transient errors are retried after a pause.
    fn thread<F, E>(&self, handler: &F) -> Result<()>
    where
        F: Fn(&mut C, &M) -> std::result::Result<(), E> + Sync,
        E: fmt::Display,
    {
        let key = self.worker.key_limit.as_ref().map(|k| (k.column, k.max));
        let kind = format!("{} key_limit={key:?}", self.worker.options.claim_kind());
        let mut calls = Calls {
            waiter: Waiter::new::<M, C>(&kind)?,
            quiet_since: Instant::now(),
        };
        let mut pause = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        while !self.stopping() {
            let step = self
                .forget_idle_if_due(&mut calls)
                .and_then(|()| self.claim_and_run(&mut calls, handler));
            match step {
                Ok(()) => pause.reset(),
                Err(e) if e.is_retryable() => self.pause(pause.next_delay()),
                Err(e) => {
                    self.failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Forgets the rate limits' idle keys when [`Worker::forget_idle_every`] has passed since
    /// the last time (one thread at a time: the first to see it due moves the time on).
    fn forget_idle_if_due(&self, calls: &mut Calls) -> Result<()> {
        let rates = self.worker.options.rate_limits();
        if rates.is_empty() {
            return Ok(());
        }
        {
            let mut next = self
                .next_forget
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            if next.is_none_or(|next| now < next) {
                return Ok(());
            }
            *next = now.checked_add(self.worker.forget_interval());
        }
        let (pool, rates) = (self.worker.pool.clone(), rates.to_vec());
        self.call(
            calls,
            move || {
                pool.with_connection(|conn| {
                    for rate in &rates {
                        rate.forget_idle(conn, M::Table::default())?;
                    }
                    Ok(())
                })
            },
            |_| {},
        )
    }

    fn claim_and_run<F, E>(&self, calls: &mut Calls, handler: &F) -> Result<()>
    where
        F: Fn(&mut C, &M) -> std::result::Result<(), E> + Sync,
        E: fmt::Display,
    {
        let w = self.worker;
        let waited_from = Instant::now();
        let quiet = calls.quiet_since;
        // One idle thread's wait ends when the rate limits' idle keys are next due to be
        // forgotten: it then forgets them (`forget_idle_if_due`) and waits again.
        let watch = ForgetWatch::take(self);
        let forget_due = match watch {
            Some(_) => *self
                .next_forget
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            None => None,
        };
        let rows = calls.waiter.claim(
            &w.pool,
            forget_due,
            &|| self.stopping(),
            &|_| self.give_up_at(quiet),
            Arc::clone(&self.claim),
        )?;
        drop(watch);
        // The rows' claim deadline runs from the poll that brought them, not from the start of
        // the wait: an idle wait may be longer than the claim timeout.
        let claimed_at = calls
            .waiter
            .polled_at()
            .unwrap_or(waited_from)
            .max(waited_from);
        let mut rows = rows.into_iter();
        let mut first = true;
        while let Some(row) = rows.next() {
            if !self.may_start() {
                // Stopping: hand back what was not started, first this row, then the rest. A
                // failed hand-back does not keep the others from going back (that row waits
                // for its claim timeout); the first error surfaces after them all.
                let mut failed = None;
                for row in std::iter::once(row).chain(rows.by_ref()) {
                    if let Err(e) = self.release(calls, row) {
                        failed.get_or_insert(e);
                    }
                }
                return failed.map_or(Ok(()), Err);
            }
            let sent_at = if first { Some(claimed_at) } else { None };
            first = false;
            if let Err(e) = self.start_one(calls, row, sent_at, handler) {
                // The rest of the batch goes back before the error surfaces.
                for row in rows {
                    let _ = self.release(calls, row);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Fails (or retries, by the retry policy) a row that was not started because of the user's
    /// code panicking (`error`), counted as a panicking handler's row.
    fn fail_unstarted(&self, calls: &mut Calls, row: M, error: String) -> Result<()> {
        let (pool, policy) = (self.worker.pool.clone(), self.worker.policy);
        let done = self.call(
            calls,
            move || {
                pool.with_connection(|conn| {
                    let outcome = fail_or_retry(conn, &row, &policy, Some(&error))?;
                    Ok(Done::of_failure(outcome, true))
                })
            },
            |_| {},
        )?;
        self.count(done);
        Ok(())
    }

    /// Hands back a row that was not started.
    fn release(&self, calls: &mut Calls, row: M) -> Result<()> {
        let pool = self.worker.pool.clone();
        let back = self.call(
            calls,
            move || pool.with_connection(|conn| release_unstarted(conn, &row, Duration::ZERO)),
            |_| {},
        )?;
        self.count(if back { Done::Released } else { Done::Lost });
        Ok(())
    }

    /// Runs one row of a claim sent at `sent_at`; `None`: a later row of a batch, which waited
    /// behind the others, so its claim is renewed first.
    fn start_one<F, E>(
        &self,
        calls: &mut Calls,
        row: M,
        sent_at: Option<Instant>,
        handler: &F,
    ) -> Result<()>
    where
        F: Fn(&mut C, &M) -> std::result::Result<(), E> + Sync,
        E: fmt::Display,
    {
        let (row, sent_at) = match sent_at {
            Some(sent_at) => (row, sent_at),
            None if M::CLAIMED_AT.is_none() => (row, Instant::now()),
            None => {
                let sent_at = Instant::now();
                let (pool, returner) = (self.worker.pool.clone(), self.worker.pool.clone());
                let (row, held) = self.call(
                    calls,
                    move || {
                        let held = pool.with_connection(|conn| heartbeat(conn, &row));
                        Ok((row, held))
                    },
                    // Renewed after the thread gave up: nobody will start it, so it goes back.
                    move |renewed| {
                        if let Ok((row, Ok(true))) = renewed {
                            let _ = returner.with_connection(|conn| {
                                release_unstarted(conn, &row, Duration::ZERO)
                            });
                        }
                    },
                )?;
                let held = match held {
                    Ok(held) => held,
                    Err(e) => {
                        // Still ours as far as anyone knows: it goes back before the error
                        // surfaces, as the rest of the batch does, rather than wait for its
                        // claim timeout (or for ever, on a model without one).
                        let _ = self.release(calls, row);
                        return Err(e);
                    }
                };
                if !held {
                    self.count(Done::Lost);
                    return Ok(());
                }
                (row, sent_at)
            }
        };
        self.run_one(calls, row, sent_at, handler)
    }

    /// Runs one claimed row under its guard (and its key's permit), then finishes it.
    fn run_one<F, E>(&self, calls: &mut Calls, row: M, sent_at: Instant, handler: &F) -> Result<()>
    where
        F: Fn(&mut C, &M) -> std::result::Result<(), E> + Sync,
        E: fmt::Display,
    {
        let w = self.worker;
        let permit = match &w.key_limit {
            None => None,
            Some(k) => {
                // The key function is the user's code, as the handler is: a panic in it fails
                // (or retries) this row as a panicking handler does, and the thread goes on.
                let key = match catch_unwind(AssertUnwindSafe(|| (k.key)(&row))) {
                    Ok(key) => key,
                    Err(panic) => {
                        let error = format!(
                            "the limit_per_key key function panicked: {}",
                            panic_message(&*panic)
                        );
                        return self.fail_unstarted(calls, row, error);
                    }
                };
                // A key of any length or content names a semaphore (a long one by its hash).
                let name = lease_core::bounded_name(
                    &format!("{}:{}=", self.resource, k.column),
                    &key,
                    MAX_RESOURCE_LEN,
                );
                // One semaphore per key value: its row goes when the key's last permit does.
                let semaphore = Semaphore::new(name, k.max).removed_when_idle();
                let pool = w.pool.clone();
                // A permit got after the thread gave up is dropped there: released.
                match self.call(calls, move || semaphore.try_acquire(&pool), drop) {
                    Ok(Some(permit)) => Some(permit),
                    Err(e) => {
                        // Not started: the row goes back before the error surfaces.
                        let _ = self.release(calls, row);
                        return Err(e);
                    }
                    Ok(None) => {
                        // Another worker's row of this key got the last permit: hand it back.
                        let pool = w.pool.clone();
                        let back = self.call(
                            calls,
                            move || {
                                pool.with_connection(|conn| {
                                    release_unstarted(conn, &row, KEY_BUSY_DELAY)
                                })
                            },
                            |_| {},
                        )?;
                        self.count(if back { Done::Released } else { Done::Lost });
                        return Ok(());
                    }
                }
            }
        };
        let mut guard = ClaimGuard::start(&w.pool, row, &w.options, sent_at)?;
        let pool = w.pool.clone();
        let conn = match self.call(calls, move || pool.lend(pool.connection_timeout()), drop) {
            Ok(conn) => conn,
            Err(e) => {
                // No connection for the handler: it never started. The guard's drop hands
                // the row back.
                drop(guard);
                drop(permit);
                return Err(e);
            }
        };
        if guard.is_lost() {
            // The claim was lost while the handler waited for its connection (a pool starved
            // past the claim's deadline): another worker may run the row already, so this one
            // does not. The guard's drop hands it back if it is still ours.
            drop(conn);
            drop(guard);
            drop(permit);
            self.count(Done::Lost);
            return Ok(());
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut conn = conn;
            AnySource::with_lent(&mut conn, |conn| Ok(handler(conn, &guard)))
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        }));
        calls.quiet_since = Instant::now();
        guard.stop_heartbeat();
        let (error, panicked) = match outcome {
            Ok(Ok(())) => (None, false),
            Ok(Err(error)) => (Some(error), false),
            Err(panic) => (
                Some(format!("the handler panicked: {}", panic_message(&*panic))),
                true,
            ),
        };
        let (pool, row, policy) = (w.pool.clone(), guard.shared_row(), w.policy);
        let done = self.try_call(
            calls,
            move || {
                pool.with_connection(|conn| {
                    Ok(match error {
                        None if finish(conn, &*row, Finish::Done)? => Done::Completed,
                        None => Done::Lost,
                        Some(error) => Done::of_failure(
                            fail_or_retry(conn, &*row, &policy, Some(&error))?,
                            panicked,
                        ),
                    })
                })
            },
            |_| {},
        );
        let done = match done {
            // Finished by our own statement: the guard's drop must not hand the row back.
            Some(Ok(done)) => {
                guard.finished_elsewhere();
                Ok(done)
            }
            // Still finishing in the background: that statement decides, not the guard.
            None => {
                guard.finished_elsewhere();
                Err(Error::waited(
                    crate::observe::table_name::<M::Table>(),
                    Instant::now().saturating_duration_since(calls.quiet_since),
                ))
            }
            // It failed: the guard's drop hands the row back.
            Some(Err(e)) => Err(e),
        };
        drop(guard);
        drop(permit);
        self.count(done?);
        Ok(())
    }
}

/// What one thread of a [`Worker`] keeps between rows: its waiter, whose courier makes every
/// database call of the thread, and when its last handler returned.
struct Calls {
    waiter: Waiter,
    quiet_since: Instant,
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::{forget_interval, ForgetWatch};
    use crate::claim::RateLimit;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::Barrier;
    use std::time::Duration;

    /// One thread at a time keeps the forget watch, and gives it up when its wait returns: the
    /// others' waits do not end for the forget (a thousand idle threads wake once).
    #[test]
    fn one_thread_at_a_time_keeps_the_forget_watch() {
        let flag = AtomicBool::new(false);
        let first = ForgetWatch::claim(&flag).expect("a free watch is taken");
        assert!(
            ForgetWatch::claim(&flag).is_none(),
            "a kept watch is not taken twice"
        );
        drop(first);
        assert!(
            ForgetWatch::claim(&flag).is_some(),
            "a watch given up is free again"
        );

        // Eight threads at once, many times over: never two keepers, and it is kept.
        let (keepers, most, kept) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let start = Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..5_000 {
                        if let Some(watch) = ForgetWatch::claim(&flag) {
                            most.fetch_max(keepers.fetch_add(1, SeqCst) + 1, SeqCst);
                            kept.fetch_add(1, SeqCst);
                            keepers.fetch_sub(1, SeqCst);
                            drop(watch);
                        }
                    }
                });
            }
        });
        assert_eq!(most.load(SeqCst), 1, "two threads kept the watch at once");
        assert!(kept.load(SeqCst) > 0);
        assert!(!flag.load(SeqCst), "every watch was given up");
    }

    #[test]
    fn idle_keys_are_never_forgotten_more_often_than_the_longest_period() {
        let secs = Duration::from_secs;
        let limits = [
            RateLimit::global(10, secs(5)),
            RateLimit::global(100, secs(90)),
        ];
        assert_eq!(forget_interval(secs(60), &limits), secs(90));
        assert_eq!(forget_interval(secs(120), &limits), secs(120));
        assert_eq!(forget_interval(Duration::ZERO, &limits[..1]), secs(5));
        assert_eq!(forget_interval(secs(1), &[]), secs(1));
    }
}
