//! Waiting for claimable rows without hammering the database.
//!
//! A waiter borrows a pool connection for each poll and gives it back before it sleeps, like a
//! semaphore waiter. On PostgreSQL it sleeps on the pool's shared listener
//! ([`WaiterWakeups`](crate::pool::WaiterWakeups), the one semaphores use), registered under the
//! resource `claim:<table>`; a producer's [`notify`](super::queue::Queue::notify) (or the trigger that
//! [`install_ready_trigger`] installs) wakes it within milliseconds. Everywhere it also polls, with
//! backoff up to [`MAX_POLL_INTERVAL`]: that is how it finds rows whose `available_at` has come,
//! rows handed back by an update nobody announced, and — on SQLite and MySQL — every row.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use diesel::query_builder::{AstPass, QueryBuilder, QueryFragment, QueryId};
use diesel::QueryResult;
use lease_core::Backoff;

use super::schedule::release_unstarted;
use super::statements::ClaimSql;
use super::{ClaimConnection, ClaimOptions, Claimable};
use crate::backend::SqlDialect;
use crate::claim::ClaimDialect;
use crate::courier::Courier;
use crate::notify::gate::{Gate, Turn};
use crate::notify::listener::{Mark, Registration};
use crate::notify::Notifications;
use crate::pool::{Checkout, ConnectionSource};
use crate::{BorrowConnection, Error, Result};

/// The longest pause between two polls of an idle waiter: it costs the database at most one
/// claim query per second. The waiters of one pool for one table share their polls: one query
/// per second for a lone waiter, two for many, however many they are.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The first pause after an empty poll; it doubles up to [`MAX_POLL_INTERVAL`].
const FIRST_POLL_PAUSE: Duration = Duration::from_millis(20);
/// How often a sleeping waiter looks at its stop condition.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// The model's table, walked by the model's own schema type.
pub(crate) struct TableOf<M: Claimable>(M::Table);

impl<M: Claimable> TableOf<M> {
    pub(crate) fn new() -> Self {
        TableOf(M::Table::default())
    }
}

impl<M: Claimable> QueryId for TableOf<M> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for TableOf<M> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        M::push_table(&mut out, &self.0)
    }
}

/// The name waiters of `M` register under at the listener: `claim:` and the table as the
/// backend quotes it (`claim:"jobs"`, `claim:"queue"."jobs"`), which the trigger reproduces.
pub(crate) fn ready_resource<M: ClaimSql<DB>, DB: SqlDialect>() -> Result<String> {
    let mut sql = DB::QueryBuilder::default();
    TableOf::<M>::new().to_sql(&mut sql, &DB::default())?;
    Ok(format!("claim:{}", sql.finish()))
}

/// Wakes the waiters of model `M` on every pool's listener: what
/// [`Queue::notify`](super::queue::Queue::notify) runs (its docs say when to call it).
pub(crate) fn notify_ready<M, C>(conn: &mut C) -> Result<()>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let resource = <C::Conn as ClaimConnection<M>>::ready_resource()?;
    Ok(Notifications::notify(conn.borrow_connection(), &resource)?)
}

/// Installs the ready trigger on `M`'s table: what
/// [`Queue::install_ready_trigger`](super::queue::Queue::install_ready_trigger) runs.
pub(crate) fn install_ready_trigger<M, C>(conn: &mut C) -> Result<()>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    <C::Conn as ClaimConnection<M>>::install_ready_trigger(conn.borrow_connection())
}

/// Waits as [`Claim::wait`](super::Claim::wait) says, each poll claiming with `claim` (a claim's, or a
/// [`ClaimCursor`](super::ClaimCursor)'s).
pub(crate) fn wait_for_rows<M, C>(
    pool: &impl ConnectionSource<Connection = C>,
    options: &ClaimOptions,
    timeout: Duration,
    claim: impl Fn(&mut C, &ClaimOptions) -> Result<Vec<M>> + Send + Sync + 'static,
) -> Result<Vec<M>>
where
    M: Claimable + Send,
    C: ClaimDialect + ClaimConnection<M>,
{
    let deadline = Instant::now().checked_add(timeout);
    let allowance = options.drop_wait_limit();
    let give_up = |started: Instant| Some(deadline?.max(started.checked_add(allowance)?));
    let kind = options.claim_kind();
    let options = options.clone();
    Waiter::new::<M, C>(&kind)?.claim(
        pool,
        deadline,
        &|| false,
        &give_up,
        Arc::new(move |conn: &mut C| claim(conn, &options)),
    )
}

/// What one poll of a [`Waiter`] brings back: the claimed rows, and what the checkout told
/// about the pool.
type Polled<M> = (Vec<M>, Checkout);

/// The claim a [`Waiter`] makes on each poll.
pub(crate) type ClaimFn<M, C> = Arc<dyn Fn(&mut C) -> Result<Vec<M>> + Send + Sync>;

/// One waiter's place at its pool's listener and at its pool's [`Gate`], its poll schedule
/// while it polls on its own, and the thread its polls run on.
///
/// Waiters of one pool that make the same claim share a [`Gate`]: one of them polls on the
/// schedule, the others wait without a query until a poll finds rows, so idle waiters cost
/// one claim query per [`MAX_POLL_INTERVAL`] per pool and queue, however many they are. A waiter
/// looks once when it starts waiting, unless its gate's last poll found nothing (and its poller
/// still watches); it polls on its own only where the pool is not known (an r2d2 pool without
/// [`WaiterWakeups`](crate::pool::WaiterWakeups), until its first checkout).
pub(crate) struct Waiter {
    resource: String,
    /// The gate's name of the queue: the table, the model and what its claim looks for.
    queue: String,
    /// The pool's identity, once known.
    pool: Option<usize>,
    registration: Option<Registration>,
    /// Wake-ups from this process where the pool has no listener (a resume, `claim/pause.rs`).
    local: crate::notify::local::Subscription,
    pause: Backoff,
    courier: Courier,
    /// When the last poll started ([`Waiter::polled_at`]).
    polled_at: Option<Instant>,
}

impl Waiter {
    /// A waiter for claims of `M`; `kind` names what its claim looks for beyond the model (the
    /// options that change which rows it finds): waiters share a gate only when it is equal.
    pub(crate) fn new<M, C>(kind: &str) -> Result<Self>
    where
        M: Claimable,
        C: ClaimConnection<M>,
    {
        let resource = C::ready_resource()?;
        Ok(Waiter {
            local: crate::notify::local::Subscription::new(&resource),
            queue: format!("{resource} {} {kind}", std::any::type_name::<M>()),
            resource,
            pool: None,
            registration: None,
            pause: Backoff::new(FIRST_POLL_PAUSE, MAX_POLL_INTERVAL),
            courier: Courier::new(),
            polled_at: None,
        })
    }

    /// When the last poll started, before its checkout: no later than the database's claim
    /// time of the rows it brought, so a claim deadline counted from here is never late.
    pub(crate) fn polled_at(&self) -> Option<Instant> {
        self.polled_at
    }

    fn join(&self) -> Option<Gate> {
        self.pool
            .map(|pool| Gate::join(pool, &self.queue, FIRST_POLL_PAUSE, MAX_POLL_INTERVAL))
    }

    /// Runs `claim` on a pool connection until it returns rows, `deadline` passes (`None`:
    /// never) or `stop()` turns true; empty in the last two cases.
    ///
    /// Each poll runs on the waiter's [`Courier`] and is waited for until `give_up(its start)`
    /// (asked again while `None`): past that it fails with [`Error::Timeout`] naming the table
    /// and goes on in the background, where the rows it claims are handed back.
    pub(crate) fn claim<M, C>(
        &mut self,
        pool: &impl ConnectionSource<Connection = C>,
        deadline: Option<Instant>,
        stop: &dyn Fn() -> bool,
        give_up: &dyn Fn(Instant) -> Option<Instant>,
        claim: ClaimFn<M, C>,
    ) -> Result<Vec<M>>
    where
        M: Claimable + Send,
        C: ClaimDialect + ClaimConnection<M>,
    {
        let began = Instant::now();
        let mut gate = self.join();
        let mut look = gate.as_ref().is_none_or(Gate::polls_first);
        let mut mark = None;
        // Whether a poll of this call got a connection: a wait whose polls never did ends with
        // the last one's error, not an empty result (a stop still ends it empty).
        let reach = crate::pool::Reach::default();
        let ended = || match reach.unreached() {
            Some(e) if !stop() => Err(e),
            _ => Ok(Vec::new()),
        };
        loop {
            if stop() {
                return Ok(Vec::new());
            }
            if look {
                // Marked before the poll: a row announced after it wakes the sleep below.
                mark = self.registration.as_ref().map(Registration::mark);
                let polled = self.poll(pool, began, give_up, Arc::clone(&claim), &reach)?;
                let Some((rows, checkout)) = polled else {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return ended();
                    }
                    continue;
                };
                if self.registration.is_none() {
                    self.registration = checkout.listener.map(|l| l.register(&self.resource));
                }
                if self.pool.is_none() && checkout.pool.is_some() {
                    self.pool = checkout.pool;
                    gate = self.join();
                }
                if let Some(gate) = &gate {
                    gate.polled(!rows.is_empty());
                }
                if !rows.is_empty() {
                    self.pause.reset();
                    return Ok(rows);
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return ended();
            }
            look = true;
            let Some(gate) = gate.as_mut() else {
                let pause = self
                    .pause
                    .next_delay_at_least()
                    .min(left.unwrap_or(Duration::MAX));
                if self.nap(mark, pause, stop) {
                    // Announced: the next poll comes at once, and the one after soon.
                    self.pause.reset();
                }
                continue;
            };
            match gate.turn(deadline, stop, STOP_CHECK) {
                Turn::Over => return ended(),
                Turn::Extra => {}
                Turn::Poller => {
                    if mark.is_none() && self.registration.is_some() {
                        // It has just become the poller without a mark of the pool's listener
                        // (it took the place over without looking, or its first look found the
                        // listener): it looks first, marked, so that its sleep wakes on a
                        // notification rather than at the next poll.
                        continue;
                    }
                    let until = gate.due().saturating_duration_since(Instant::now());
                    let pause = until.min(left.unwrap_or(Duration::MAX));
                    if self.nap(mark, pause, stop) {
                        gate.woken();
                    }
                }
            }
        }
    }

    /// The courier the waiter's polls run on, for the other calls of its thread.
    pub(crate) fn courier(&mut self) -> &mut Courier {
        &mut self.courier
    }

    /// One poll on the courier: the claimed rows and what the checkout told, or `None` when the
    /// pool had no connection to spare (a missed poll, not a failure; the wait for one is
    /// bounded so that a stop is still seen, and taken whole; `reach` keeps the miss). A source
    /// that cannot lend at all is [`Error::Config`]. A poll given up on is [`Error::Timeout`]
    /// with the time waited since `began`.
    fn poll<M, C, S>(
        &mut self,
        pool: &S,
        began: Instant,
        give_up: &dyn Fn(Instant) -> Option<Instant>,
        claim: ClaimFn<M, C>,
        reach: &crate::pool::Reach,
    ) -> Result<Option<Polled<M>>>
    where
        M: Claimable + Send,
        C: ClaimDialect + ClaimConnection<M>,
        S: ConnectionSource<Connection = C>,
    {
        let wait = pool.connection_timeout().min(MAX_POLL_INTERVAL);
        let (lender, returner, reach) = (pool.clone(), pool.clone(), reach.clone());
        let started = Instant::now();
        self.polled_at = Some(started);
        let polled = self.courier.call(
            &|| give_up(started),
            move || {
                let lent = crate::pool::lend_with_listener(&lender, wait);
                let Some((mut conn, checkout)) = crate::pool::loan_or_miss(lent, &reach)? else {
                    // No connection this time: a missed poll, which takes its whole wait also
                    // when the source said no at once (a server refusing connections), so that
                    // it is not asked again in a loop.
                    thread::sleep(wait.saturating_sub(started.elapsed()));
                    return Ok(None);
                };
                Ok(Some((
                    S::with_lent(&mut conn, |conn| claim(conn))?,
                    checkout,
                )))
            },
            // Claimed after the caller gave up: nobody will run them, so they go back.
            move |polled: Result<Option<Polled<M>>>| {
                let Ok(Some((rows, _))) = polled else { return };
                let _ = returner.with_connection(|conn| {
                    for row in &rows {
                        let _ = release_unstarted(conn, row, Duration::ZERO);
                    }
                    Ok(())
                });
            },
        );
        polled.unwrap_or_else(|| {
            Err(Error::waited(
                crate::observe::table_name::<M::Table>(),
                began.elapsed(),
            ))
        })
    }

    /// Sleeps up to `max` in slices, looking at `stop` between them; `true` when woken early by
    /// a notification (or the listener's reconnection, after which notifications may be lost).
    fn nap(&mut self, mark: Option<Mark>, max: Duration, stop: &dyn Fn() -> bool) -> bool {
        let end = Instant::now() + max;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || stop() {
                return false;
            }
            let slice = left.min(STOP_CHECK);
            match (&self.registration, mark) {
                (Some(registration), Some(mark)) => {
                    let started = Instant::now();
                    if registration.sleep(mark, slice) || started.elapsed() < slice {
                        return true;
                    }
                }
                _ => {
                    if self.local.sleep(slice) {
                        return true;
                    }
                }
            }
        }
    }
}
