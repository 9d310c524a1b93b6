//! Work that waits for its time: the not-before column that claims respect, and retries that
//! put a claimed row back with a delay (or, out of attempts, into the failed state).
//!
//! Both are pieces of the shared statements (`statements.rs` pushes [`push_not_before`] from its
//! claimable predicate, and writes a [`Retry`] as one change of its owner-checked statement); the
//! times come from the database clock, like every other time of a claim.

use std::time::Duration;

use diesel::query_builder::AstPass;
use diesel::QueryResult;
use lease_core::RetryPolicy;

use super::{run_retry, ClaimConnection, Claimable, Finish};
use crate::backend::Offset;
use crate::backend::SqlDialect;
use crate::clock::TimestampType;
use crate::{BorrowConnection, Error, InvalidInput, Result};

/// A timestamp column the derive maps, with what the clock's SQL needs to know of its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeColumn {
    /// The column's name, from Diesel's schema.
    pub name: &'static str,
    /// Whether it holds instants (PostgreSQL `timestamptz`) rather than UTC wall-clock times.
    pub with_time_zone: bool,
    /// Whether it may be `NULL`.
    pub nullable: bool,
}

impl TimeColumn {
    /// The column `name` of SQL type `ST`.
    pub const fn of<ST: TimestampType>(name: &'static str) -> Self {
        TimeColumn {
            name,
            with_time_zone: ST::WITH_TIME_ZONE,
            nullable: ST::NULLABLE,
        }
    }
}

/// ` AND (available_at IS NULL OR available_at <= <db now>)` when the model maps a not-before
/// column (without the `IS NULL` branch for a `NOT NULL` column, so an index on it serves the
/// range); nothing otherwise.
pub(crate) fn push_not_before<DB: SqlDialect>(
    out: &mut AstPass<'_, '_, DB>,
    available_at: Option<TimeColumn>,
) -> QueryResult<()> {
    let Some(col) = available_at else {
        return Ok(());
    };
    out.push_sql(" AND (");
    if col.nullable {
        out.push_identifier(col.name)?;
        out.push_sql(" IS NULL OR ");
    }
    out.push_identifier(col.name)?;
    out.push_sql(" <= ");
    DB::push_now(out, col.with_time_zone);
    out.push_sql(")");
    Ok(())
}

/// What a retry (or a final failure) writes, besides the owner check: the new state, the owner
/// cleared, `available_at = <db now> + delay`, the error text, and for a row handed back unstarted
/// its attempt refunded.
#[derive(Debug)]
pub(crate) struct Retry {
    /// Ready (the owner is cleared) or failed (the owner stays, for the record).
    pub(crate) to: Finish,
    pub(crate) not_before: Option<Offset>,
    pub(crate) error: Option<String>,
    pub(crate) refund_attempt: bool,
}

/// What [`fail_or_retry`](crate::dsl::ClaimDsl::fail_or_retry) did with the row.
#[must_use = "`RetryOutcome::Lost` means another worker has the row now: stop working on it"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// Back to the ready state, claimable again once `delay` has passed (database clock).
    Retried {
        /// The attempt that failed (1 for the first run).
        attempt: i64,
        /// How long the row waits before it can be claimed again.
        delay: Duration,
    },
    /// Out of attempts: moved to the failed state (the dead letters).
    Failed {
        /// The attempt that failed, the last one.
        attempt: i64,
    },
    /// Nothing changed: the claim was rescued by another worker, or the row already finished.
    Lost,
}

fn first_ready<M: Claimable>() -> Result<Finish> {
    match M::READY_SQL.first() {
        Some(_) => Ok(Finish::Ready),
        None => Err(Error::Config("the model has no ready state".into())),
    }
}

/// A delay as the database-clock offset that `available_at` gets; refused when the model has
/// no `available_at` column to hold it (unless it is zero: an immediate retry needs none).
fn not_before<M: Claimable>(delay: Duration) -> Result<Option<Offset>> {
    if M::AVAILABLE_AT.is_none() {
        if delay.is_zero() {
            return Ok(None);
        }
        return Err(Error::Config(
            "a retry delay is stored in the not-before column: add `available_at = <timestamp column>` to #[claimable(...)]".into(),
        ));
    }
    if delay > lease_core::MAX_TTL {
        return Err(InvalidInput::DurationTooLong {
            what: "retry delay",
            got: delay,
        }
        .into());
    }
    let micros = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
    Ok(Some(Offset::new(micros)))
}

/// Hands a row this worker claimed back to the first ready state, to be claimed again after
/// `delay` (database clock), if the worker still owns the claim. `false` when it was rescued or
/// finished meanwhile.
///
/// The owner is cleared; the attempt counts (the claim counted it). [`Error::Config`] for a
/// non-zero delay on a model without an `available_at` column.
pub(crate) fn retry<M, C>(conn: &mut C, row: &M, delay: Duration) -> Result<bool>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let retry = Retry {
        to: first_ready::<M>()?,
        not_before: not_before::<M>(delay)?,
        error: None,
        refund_attempt: false,
    };
    run_retry(conn, row, retry)
}

/// After a failed run: retries the row after the policy's backoff for its attempt (see
/// [`retry`]), or — when that attempt was the policy's last — moves it to the failed state. With
/// an `error = col` column, `error` is stored in both cases. Owner-checked:
/// [`RetryOutcome::Lost`] when the claim was rescued or the row finished meanwhile.
///
/// Needs an `attempts` column (the attempt is the row's count, which every claim increments)
/// and a failed state; [`Error::Config`] otherwise.
pub(crate) fn fail_or_retry<M, C>(
    conn: &mut C,
    row: &M,
    policy: &RetryPolicy,
    error: Option<&str>,
) -> Result<RetryOutcome>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    if M::ATTEMPTS.is_none() {
        return Err(Error::Config(
            "fail_or_retry counts attempts: add `attempts = <integer column>` to #[claimable(...)]"
                .into(),
        ));
    }
    if M::FAILED_SQL.is_none() {
        return Err(Error::Config(
            "fail_or_retry moves a row out of attempts to the failed state: add `failed = …` to #[claimable(...)]".into(),
        ));
    }
    let attempt = row.attempts().unwrap_or(0);
    let error = error.map(str::to_owned);
    let (retry, outcome) = match policy.delay_after(attempt) {
        Some(delay) => (
            Retry {
                to: first_ready::<M>()?,
                not_before: not_before::<M>(delay)?,
                error,
                refund_attempt: false,
            },
            RetryOutcome::Retried { attempt, delay },
        ),
        None => (
            Retry {
                to: Finish::Failed,
                not_before: None,
                error,
                refund_attempt: false,
            },
            RetryOutcome::Failed { attempt },
        ),
    };
    Ok(if run_retry(conn, row, retry)? {
        outcome
    } else {
        RetryOutcome::Lost
    })
}

/// Hands back a row that was claimed but never started (a worker stopping, a per-key limit
/// reached): ready again after `delay` (zero: at once, its `available_at` untouched), owner
/// cleared, and the claim's attempt refunded.
pub(crate) fn release_unstarted<M, C>(conn: &mut C, row: &M, delay: Duration) -> Result<bool>
where
    M: Claimable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let retry = Retry {
        to: first_ready::<M>()?,
        // At once: the row keeps its time (and its place in the claim order).
        not_before: if delay.is_zero() {
            None
        } else {
            not_before::<M>(delay).unwrap_or(None)
        },
        error: None,
        refund_attempt: true,
    };
    run_retry(conn, row, retry)
}
