//! Claiming rows of a user's table: each row to exactly one worker.
//!
//! The statements live in `statements` (and, where a backend needs its own shape, in the
//! backend's file); this module turns them into operations. Models get these operations through
//! the extension traits of [`dsl`](crate::dsl) (`M::claim()`, `M::queue()`, `row.complete(conn)`)
//! for any type that implements [`Claimable`], which `#[derive(Claimable)]` implements.

use diesel::query_builder::QueryId;

use crate::backend::kind_of;
use crate::backend::retry_conflicts_on;
use crate::observe::{op, table_name};
use lease_core::ClaimStamp;

use crate::{BorrowConnection, Error, OwnerId, Result};

pub(crate) mod batch;
mod builder;
pub(crate) mod by_key;
pub(crate) mod cancel;
pub(crate) mod cursor;
pub(crate) mod dialect;
mod guard;
pub(crate) mod literal;
pub(crate) mod pause;
mod per_key;
pub(crate) mod queue;
pub(crate) mod rate;
pub(crate) mod retention;
pub(crate) mod schedule;
pub(crate) mod statements;
pub(crate) mod wait;

mysql_like_modules! {
    /// MySQL's claims: no `UPDATE … RETURNING`, so a claim reaps, picks (stale claims by a plain read
    /// and a lock by key, then ready rows with `FOR UPDATE SKIP LOCKED`), marks, and reads back in
    /// one READ COMMITTED transaction; a batch completion locks the rows still ours, then changes
    /// exactly those.
}
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use builder::Claim;
#[cfg(test)]
pub(crate) use by_key::DEFAULT_LOCK_WAIT;
pub(crate) use by_key::{
    lock_by_pk_if_claimable, lock_by_pk_if_null, with_locked, with_locked_if_null,
};
pub(crate) use by_key::{
    lock_by_pk_if_claimable_within, lock_by_pk_if_null_within, ClaimableLockConnection,
    NullLockConnection,
};
pub(crate) use cancel::HasCancelState;
pub use cursor::ClaimCursor;
pub(crate) use cursor::{ClaimOrderKey, CursorConnection};
pub(crate) use pause::{HasPauseKey, Pausable};
pub use queue::Queue;
pub use retention::{Purged, Retention};

pub(crate) use crate::model::Keyed;
pub(crate) use dialect::{ClaimDialect, ClaimSqlDialect};
pub use guard::ClaimGuard;
pub use lease_core::RetryPolicy;
pub(crate) use literal::StateLiteral;
pub(crate) use rate::RateDialect;
pub use rate::{Forgotten, RateLimit};
pub use schedule::RetryOutcome;
pub(crate) use schedule::TimeColumn;
pub(crate) use schedule::{fail_or_retry, retry};

use statements::{finish_target, Change, ClaimModel, ClaimParts, Filter, FinishStmt, NoFilter};

use crate::clock::{DbNow, TimestampType};

// What the derive writes into `Claimable`'s hidden constants: `pub` for the derive (through
// `__private`), in a private module, so not public API.
pub(crate) mod order {
    /// Sort direction of a claim order column.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SortOrder {
        /// Ascending (oldest / smallest first).
        Asc,
        /// Descending.
        Desc,
    }
}
pub(crate) use order::SortOrder;

/// A model whose rows can be claimed: the description `#[derive(Claimable)]` writes.
///
/// You rarely implement this by hand: derive it (see the [crate docs](crate#claim-the-next-row)).
/// Column names come from Diesel's schema (`Column::NAME`), never from strings you type.
pub trait Claimable: Keyed {
    /// The SQL type of the claimed-at column (`Timestamp` when unmapped): whether claims write
    /// and compare an instant (`Timestamptz`) or a UTC wall-clock time.
    type ClaimedAtSql: TimestampType;

    /// The state column.
    const STATE: &'static str;
    /// The owner column (text), if mapped.
    const OWNER: Option<&'static str>;
    /// The claimed-at column (timestamp), if mapped: enables stale-claim rescue.
    const CLAIMED_AT: Option<&'static str>;
    /// The attempts column (integer), if mapped: incremented on every claim.
    const ATTEMPTS: Option<&'static str>;
    /// Whether the attempts field may read a NULL (anything the derive does not see as a plain
    /// `i16`, `i32` or `i64`): a claim then writes `COALESCE(attempts, 0) + 1`, else
    /// `attempts + 1`. Default `true` (always correct).
    const ATTEMPTS_NULLABLE: bool = true;
    /// Claim order (default: the primary key ascending).
    #[doc(hidden)]
    const ORDER: &'static [(&'static str, SortOrder)];
    /// After this many microseconds (database clock) a claim may be rescued by another worker.
    const CLAIM_TIMEOUT_MICROS: Option<i64>;
    /// A stale claim with this many attempts goes to the failed state instead of being handed out.
    const MAX_ATTEMPTS: Option<i64>;
    /// The not-before column (`available_at = col`), if mapped: a row is claimable only once
    /// its time has come, by the database clock.
    #[doc(hidden)]
    const AVAILABLE_AT: Option<TimeColumn> = None;
    /// The last-error column (`error = col`, text), if mapped: written when a job fails or is
    /// retried with an error.
    const ERROR: Option<&'static str> = None;

    /// The ready states as SQL constants; `requeue` and retries use the first.
    #[doc(hidden)]
    const READY_SQL: &'static [StateLiteral];
    /// The claimed state as an SQL constant.
    #[doc(hidden)]
    const CLAIMED_SQL: StateLiteral;
    /// The done state as an SQL constant, if configured.
    #[doc(hidden)]
    const DONE_SQL: Option<StateLiteral>;
    /// The failed state as an SQL constant, if configured.
    #[doc(hidden)]
    const FAILED_SQL: Option<StateLiteral>;
    /// The state cancelled rows go to (`cancelled = …`), if configured; else they go to the
    /// failed state ([`Queue::cancel`](queue::Queue::cancel)).
    #[doc(hidden)]
    const CANCELLED_SQL: Option<StateLiteral> = None;
    /// Whether claims skip paused rows (`pausable`, `pausable(key = col)`): see [`Queue::pause`](queue::Queue::pause).
    #[doc(hidden)]
    const PAUSE: Option<pause::PauseShape> = None;

    /// The owner stored in this row (`None` when unmapped or NULL).
    fn owner(&self) -> Option<&str>;
    /// The attempts stored in this row (`None` when unmapped or NULL).
    fn attempts(&self) -> Option<i64>;
}

// What a model has beyond claims, as the derive declares it: the bounds that make a call that
// needs a missing attribute a compile error whose message names the attribute. `pub` for the
// derive (through `__private`), in a private module: not API a caller names.
pub(crate) mod markers {
    use super::Claimable;

    /// A [`Claimable`] model with a done state (`done = …`): what `complete` needs.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` has no done state, so its claims cannot be completed",
        label = "`complete` needs a done state",
        note = "add `done = \"<state>\"` to `#[claimable(...)]` on `{Self}`"
    )]
    pub trait HasDoneState: Claimable {}

    /// A [`Claimable`] model with a failed state (`failed = …`): what `fail` and `fail_or_retry`
    /// need.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` has no failed state, so its claims cannot fail",
        label = "this needs a failed state",
        note = "add `failed = \"<state>\"` to `#[claimable(...)]` on `{Self}`"
    )]
    pub trait HasFailedState: Claimable {}

    /// A [`Claimable`] model with a claimed-at column (`claimed_at = …`): what `heartbeat` needs.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` has no claimed_at column, so a claim heartbeat has nothing to move",
        label = "this needs a claimed_at column",
        note = "add `claimed_at = <timestamp column>` to `#[claimable(...)]` on `{Self}`"
    )]
    pub trait HasClaimedAt: Claimable {}

    /// A [`Claimable`] model with an attempts column (`attempts = …`): what `fail_or_retry` and a
    /// [`Worker`](crate::worker::Worker) need.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` has no attempts column, so its failures cannot be counted",
        label = "this needs an attempts column",
        note = "add `attempts = <integer column>` to `#[claimable(...)]` on `{Self}`"
    )]
    pub trait HasAttempts: Claimable {}
}
pub(crate) use markers::{HasAttempts, HasClaimedAt, HasDoneState, HasFailedState};

/// Per-call claim settings: who claims, and (overriding the derive's `timeout`) when a claim is stale.
#[derive(Debug, Clone)]
pub struct ClaimOptions {
    owner: OwnerId,
    timeout: Option<std::time::Duration>,
    drop_wait: std::time::Duration,
    /// At most one global and one per-key limit.
    rates: Vec<RateLimit>,
}

impl ClaimOptions {
    /// The rate limits these options claim under (at most one global and one per-key).
    pub(crate) fn rate_limits(&self) -> &[RateLimit] {
        &self.rates
    }
}

impl Default for ClaimOptions {
    fn default() -> Self {
        ClaimOptions {
            owner: OwnerId::process_default().clone(),
            timeout: None,
            drop_wait: crate::pool::DROP_WAIT,
            rates: Vec::new(),
        }
    }
}

impl ClaimOptions {
    /// The default options, built once: the claims that take no options use these (a fresh
    /// default copied the process's owner name on every claim).
    pub(crate) fn shared_default() -> &'static ClaimOptions {
        static DEFAULT: std::sync::OnceLock<ClaimOptions> = std::sync::OnceLock::new();
        DEFAULT.get_or_init(ClaimOptions::default)
    }

    /// Claims as `owner` instead of the process default (`host:pid:random`).
    pub fn owner(mut self, owner: OwnerId) -> Self {
        self.owner = owner;
        self
    }

    /// Treats claims older than `timeout` (database clock) as abandoned.
    ///
    /// The timeout belongs to the claim that *takes over*, not to the one it takes over from:
    /// the row stores when it was claimed, not for how long. A worker that claims with a
    /// 10-minute timeout is rescued after 30 s by another process that claims the same table
    /// with a 30 s one (the work then runs twice; the owner check fences the first run's
    /// finish), and a heartbeat paced by the longer timeout does not touch the row often enough
    /// for the shorter one. Give every process of a queue the same timeout.
    ///
    /// Checked when a claim uses the options: zero is refused then with
    /// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration), and so is a timeout on a
    /// model without a `claimed_at` column ([`Error::Config`]).
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How long the pool's keeper may wait for a connection to hand back the row of an
    /// unfinished [`ClaimGuard`] that was dropped (default 2 s, counted from the drop, which
    /// itself returns at once): when none came in time, the hand-back is left and the claim
    /// times out. Also what a waiting claim
    /// ([`Claim::wait`]) gets on top of its timeout, and a
    /// stopped `Worker` after its handlers. Zero is refused (when a claim uses the options) with
    /// [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration).
    pub fn drop_wait(mut self, wait: std::time::Duration) -> Self {
        self.drop_wait = wait;
        self
    }

    /// The one check of the settings, before a claim sends any SQL.
    fn check<M: Claimable>(&self) -> Result<()> {
        if let Some(timeout) = self.timeout {
            crate::Ttl::new("claim timeout", timeout)?;
            if M::CLAIMED_AT.is_none() {
                // A timeout nothing can measure would silently never rescue anything.
                return Err(Error::Config(
                    "ClaimOptions::timeout needs a claimed_at column: add `claimed_at = <timestamp column>` to #[claimable(...)]".into(),
                ));
            }
            if M::OWNER.is_none() && M::ATTEMPTS.is_none() {
                // A rescued claim's stale worker must not be able to complete it.
                return Err(Error::Config(
                    "ClaimOptions::timeout lets another worker rescue a claim, which needs a fence: add `owner = <text column>` or `attempts = <integer column>` to #[claimable(...)]".into(),
                ));
            }
        }
        crate::Ttl::new("drop wait", self.drop_wait)?;
        for rate in &self.rates {
            rate.check::<M>()?;
        }
        Ok(())
    }

    /// Claims at most `limit`'s number of rows per period (see [`RateLimit`]): of the table
    /// ([`RateLimit::global`]) or of each key ([`RateLimit::per_key`]). One of each kind may be
    /// set (both then hold); a second of the same kind replaces the first. Rows over the limit
    /// stay ready for a later claim. A claim with a rate limit commits its own transaction: it
    /// is refused inside yours (`Error::Database(AlreadyInTransaction)`), whose snapshot could
    /// hide the starts it must count.
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.rates.retain(|r| r.is_per_key() != limit.is_per_key());
        self.rates.push(limit);
        self
    }

    pub(crate) fn drop_wait_limit(&self) -> std::time::Duration {
        self.drop_wait
    }

    /// What of the options changes which rows a claim finds (the stale-claim timeout, the rate
    /// limits): waiters share a poll schedule only when it is equal (`wait.rs`).
    pub(crate) fn claim_kind(&self) -> String {
        format!("timeout={:?} rates={:?}", self.timeout, self.rates)
    }

    /// The identity claims are made under.
    pub fn owner_id(&self) -> &OwnerId {
        &self.owner
    }

    pub(crate) fn timeout_micros<M: Claimable>(&self) -> Option<i64> {
        self.timeout
            .map(|t| i64::try_from(t.as_micros()).unwrap_or(i64::MAX))
            .or(M::CLAIM_TIMEOUT_MICROS)
    }
}

/// The bounds under which a connection can run claims of model `M`. Implemented for every
/// [`ClaimDialect`] whose backend can read `M`; you never implement it.
pub trait ClaimConnection<M: Claimable>: ClaimDialect {
    /// Claims up to `limit` (≥ 1) rows matching the model's claimable predicate and `filter`.
    /// `F` is the filter's query id ([`NoFilter`](statements::NoFilter) when `filter` is `None`).
    #[doc(hidden)]
    fn claim_matching<F: QueryId>(
        &mut self,
        limit: i64,
        options: &ClaimOptions,
        filter: Filter<'_, Self::Backend>,
    ) -> Result<Vec<M>>;

    /// Selects (and on PostgreSQL/MySQL row-locks, skipping locked rows) up to `limit` claimable rows.
    #[doc(hidden)]
    fn lock_matching<F: QueryId>(
        &mut self,
        limit: i64,
        filter: Filter<'_, Self::Backend>,
    ) -> diesel::QueryResult<Vec<M>>;

    /// Runs an owner-checked change; `true` when exactly one row changed.
    #[doc(hidden)]
    fn finish(&mut self, stmt: &FinishStmt<M>) -> Result<bool>;

    /// Runs owner-checked changes of many rows; for each row in order, whether it changed.
    #[doc(hidden)]
    fn finish_many(&mut self, rows: &[batch::BatchRow<'_, M>], to: Finish) -> Result<Vec<bool>>;

    /// The name waiters of `M` register under at a pool's listener (`claim/wait.rs`).
    #[doc(hidden)]
    fn ready_resource() -> Result<String>;

    /// Installs the trigger that announces `M`'s inserted rows (`claim/wait.rs`).
    #[doc(hidden)]
    fn install_ready_trigger(&mut self) -> Result<()>;

    /// [`claim_matching`](Self::claim_matching) skipping rows whose `key` column already has
    /// `max` claimed rows (`claim/per_key.rs`), and rows that fail `and` when given.
    #[doc(hidden)]
    fn claim_under_key_limit(
        &mut self,
        limit: i64,
        options: &ClaimOptions,
        key: &'static str,
        max: i64,
        and: Filter<'_, Self::Backend>,
    ) -> Result<Vec<M>>;

    /// Moves the row with key `pk` to `to` if it is ready or claimed (`claim/cancel.rs`).
    #[doc(hidden)]
    fn cancel_row(&mut self, pk: M::Pk, to: StateLiteral) -> Result<bool>;
}

impl<M, C> ClaimConnection<M> for C
where
    M: Claimable + ClaimModel<C>,
    C: ClaimDialect + RateDialect,
{
    fn claim_matching<F: QueryId>(
        &mut self,
        limit: i64,
        options: &ClaimOptions,
        filter: Filter<'_, C::Backend>,
    ) -> Result<Vec<M>> {
        options.check::<M>()?;
        // Every claim writes its own stamp: a rescue (even by this process) makes it differ.
        let stamp = ClaimStamp::new(&options.owner);
        let parts = ClaimParts::<M, C::Backend>::new(stamp, options.timeout_micros::<M>());
        let table = table_name::<M::Table>();
        let op = op!(
            Claim,
            table,
            kind_of(self),
            table = table,
            owner = parts.owner.as_str(),
            limit = limit
        );
        // A deadlock or serialization failure rolled the claim back whole: nothing was
        // claimed, so trying again is safe (outside the caller's transaction, which it ended).
        let claimed = retry_conflicts_on(self, |c| {
            if !options.rates.is_empty() {
                return rate::claim_limited::<M, C, F>(c, &parts, limit, filter, &options.rates);
            }
            Ok(ClaimDialect::claim_rows::<M, F>(c, &parts, limit, filter)?)
        })
        .map_err(about::<M>);
        op.finish(claimed, |rows| ("claimed", rows.len() as u64))
    }

    fn lock_matching<F: QueryId>(
        &mut self,
        limit: i64,
        filter: Filter<'_, C::Backend>,
    ) -> diesel::QueryResult<Vec<M>> {
        let parts = ClaimParts::<M, C::Backend>::new("", None);
        ClaimDialect::lock_rows::<M, F>(self, &parts, limit, filter)
    }

    fn finish(&mut self, stmt: &FinishStmt<M>) -> Result<bool> {
        // One owner-checked statement, rolled back whole by a deadlock: safe to run again.
        retry_conflicts_on(self, |c| Ok(c.keyed_write(|c| stmt.execute(c))? == 1))
            .map_err(about::<M>)
    }

    fn finish_many(&mut self, rows: &[batch::BatchRow<'_, M>], to: Finish) -> Result<Vec<bool>> {
        // Rolled back whole by a deadlock (MySQL: the whole transaction): safe to run again.
        retry_conflicts_on(self, |c| Ok(ClaimDialect::finish_rows(c, rows, to)?))
            .map_err(about::<M>)
    }

    fn ready_resource() -> Result<String> {
        wait::ready_resource::<M, C::Backend>()
    }

    fn install_ready_trigger(&mut self) -> Result<()> {
        Ok(ClaimDialect::install_ready_trigger(
            self,
            &wait::TableOf::<M>::new(),
        )?)
    }

    fn claim_under_key_limit(
        &mut self,
        limit: i64,
        options: &ClaimOptions,
        key: &'static str,
        max: i64,
        and: Filter<'_, C::Backend>,
    ) -> Result<Vec<M>> {
        let filter = per_key::UnderKeyLimit::<M, C::Backend> {
            table: M::Table::default(),
            key,
            max,
            and,
            stale: M::CLAIMED_AT
                .zip(options.timeout_micros::<M>())
                .map(|(column, micros)| (column, crate::clock::DbNowOffset::ago(micros))),
        };
        self.claim_matching::<statements::Dynamic>(limit, options, Some(&filter))
    }

    fn cancel_row(&mut self, pk: M::Pk, to: StateLiteral) -> Result<bool> {
        cancel::cancel_model::<M, C>(self, pk, to)
    }
}

/// Names `M`'s table in a timeout the database reported.
fn about<M: Claimable>(e: Error) -> Error {
    e.concerning(|| table_name::<M::Table>().to_owned())
}

/// A claim's row count as its statement takes it. Zero is [`InvalidInput::Zero`] (`"batch
/// size"`): a claim of no rows is a mistake in the caller's arithmetic, and an empty result
/// would read as "the queue is empty".
pub(crate) fn batch_size(n: usize) -> Result<i64> {
    if n == 0 {
        return Err(lease_core::InvalidInput::Zero { what: "batch size" }.into());
    }
    Ok(i64::try_from(n).unwrap_or(i64::MAX))
}

// Named by the sealed traits' hidden methods, so `pub`, in a private module: not public API.
mod finish {
    /// Where an owner-checked transition sends the row.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Finish {
        /// To the done state.
        Done,
        /// To the failed state.
        Failed,
        /// Back to the first ready state, owner cleared, for another worker to claim.
        Ready,
    }
}
pub(crate) use finish::Finish;

/// Moves a row this worker claimed to `to`, only if the worker still owns that claim: still
/// claimed, the same claim stamp in the owner column (every claim writes a fresh one, so a
/// rescue — even by another thread of this process — makes it differ), and (with an attempts
/// column) the same attempt. Returns `false` when the claim was rescued in the meantime, or the
/// row was already finished.
///
/// [`Error::Config`] when the model has no done/failed state configured.
pub(crate) fn finish<M, C>(conn: &mut C, row: &M, to: Finish) -> Result<bool>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    if finish_target::<M>(to).is_none() {
        return Err(Error::Config(format!(
            "the model has no {to:?} state: add it to #[claimable(...)]"
        )));
    }
    let conn = conn.borrow_connection();
    let table = table_name::<M::Table>();
    let op = op!(
        Complete,
        table,
        kind_of(conn),
        table = table,
        owner = row.owner()
    );
    let finished = conn.finish(&owner_checked(row, Change::State(to)));
    let finished = op.finish(finished, |&ours| match (ours, to) {
        (false, _) => ("lost", 0),
        (true, Finish::Done) => ("done", 1),
        (true, Finish::Failed) => ("failed", 1),
        (true, Finish::Ready) => ("ready", 1),
    });
    claim_lost_if::<M>(row, &finished);
    finished
}

/// Warns when an owner-checked change found the claim no longer this worker's.
fn claim_lost_if<M: Claimable>(row: &M, ours: &Result<bool>) {
    if let Ok(false) = ours {
        crate::observe::lost(
            "claim",
            table_name::<M::Table>(),
            row.attempts(),
            &format_args!(
                "claim stamp {} is not in the row any more: it was rescued by another worker or already finished",
                row.owner().unwrap_or("-")
            ),
        );
    }
}

/// [`finish`] for many rows in one statement per 200 rows (one `UPDATE … RETURNING` on
/// PostgreSQL and SQLite; a locking `SELECT` and an `UPDATE` in one transaction on MySQL).
///
/// Each row is checked as `finish` checks one: still claimed, under the same claim stamp and
/// attempt. Returns, for each row of `rows` in order, `true` when it was still this worker's
/// claim and was moved, `false` when it had been rescued by another worker or was already
/// finished (left unchanged). An empty `rows` runs no query.
///
/// [`Error::Config`] when the model has no done/failed state configured.
pub(crate) fn finish_batch<M, C>(conn: &mut C, rows: &[M], to: Finish) -> Result<Vec<bool>>
where
    M: Claimable,
    M::Pk: PartialEq,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    if finish_target::<M>(to).is_none() {
        return Err(Error::Config(format!(
            "the model has no {to:?} state: add it to #[claimable(...)]"
        )));
    }
    let conn = conn.borrow_connection();
    let table = table_name::<M::Table>();
    let op = op!(Complete, table, kind_of(conn), table = table);
    let mut finish_all = || -> Result<Vec<bool>> {
        let mut finished = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(batch::CHUNK) {
            finished.extend(conn.finish_many(&batch::batch_rows(chunk), to)?);
        }
        Ok(finished)
    };
    let ours = op.finish(finish_all(), |ours| {
        let moved = ours.iter().filter(|&&o| o).count() as u64;
        let outcome = match (moved, to) {
            (0, _) => "lost",
            (_, Finish::Done) => "done",
            (_, Finish::Failed) => "failed",
            (_, Finish::Ready) => "ready",
        };
        (outcome, moved)
    });
    if let Ok(ours) = &ours {
        for (row, &ours) in rows.iter().zip(ours) {
            claim_lost_if::<M>(row, &Ok(ours));
        }
    }
    ours
}

/// Moves the claimed-at time of a row this worker claimed to the database's now, so the claim is
/// not rescued while its work goes on: call it more often than the claim timeout (a
/// [`ClaimGuard`] does it for you). `false` when the claim was rescued or finished meanwhile —
/// stop the work then: another worker may be running it.
///
/// [`Error::Config`] when the model has no `claimed_at` column (nothing to move).
pub(crate) fn heartbeat<M, C>(conn: &mut C, row: &M) -> Result<bool>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    if M::CLAIMED_AT.is_none() {
        return Err(Error::Config(
            "a claim heartbeat moves claimed_at: add `claimed_at = <timestamp column>` to #[claimable(...)]".into(),
        ));
    }
    let touched = conn
        .borrow_connection()
        .finish(&owner_checked(row, Change::Touch(DbNow::new())));
    claim_lost_if::<M>(row, &touched);
    touched
}

/// The owner-checked statement for `row`: its key, its claim stamp and attempt.
pub(crate) fn owner_checked<M: Claimable>(
    row: &M,
    change: Change<M::ClaimedAtSql>,
) -> FinishStmt<M> {
    FinishStmt {
        table: M::Table::default(),
        pk: M::pk_filter(row.pk()),
        change,
        owner: M::OWNER.map(|_| row.owner().map(|o| o.to_owned().into())),
        attempts: M::ATTEMPTS.map(|_| row.attempts()),
    }
}

/// Runs an owner-checked [`Retry`](schedule::Retry) of `row`.
pub(crate) fn run_retry<M, C>(conn: &mut C, row: &M, retry: schedule::Retry) -> Result<bool>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    conn.borrow_connection()
        .finish(&owner_checked(row, Change::Retry(retry)))
}

#[cfg(test)]
mod tests;
