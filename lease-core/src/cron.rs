//! Cron schedules: the slots of a cron expression in a time zone, and which slot a poll runs.
//!
//! Every instant here is µs since 1970 (UTC), as the built-in lease table stores it; the zone
//! only decides which instants the expression's wall-clock fields name. The caller brings the
//! database's `now`; nothing here reads a clock.
//!
//! # Daylight saving
//!
//! Slots follow [croner](https://docs.rs/croner)'s rules, which are Vixie cron's:
//!
//! - **Spring forward** (a wall-clock hour does not exist): a *fixed-time* expression (numbers
//!   in the second, minute and hour fields, such as `30 2 * * *`) runs once, at the first
//!   instant after the gap (03:00 in Europe/Berlin on the last Sunday of March); an expression
//!   with a wildcard or step in those fields (`*/15 * * * *`) has no slots inside the gap.
//! - **Fall back** (a wall-clock hour happens twice): a fixed-time expression runs once, in the
//!   first pass; a wildcard or step expression runs in both passes, every slot a distinct
//!   instant.
//!
//! Slots are instants, so they never repeat and always increase, whatever the zone does.

use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds};

use crate::InvalidInput;

pub use chrono_tz::Tz;

/// What happens to slots that passed while no node ran the job (the farm was down, or every
/// node was busy past the slot's [grace](Cron::grace)).
///
/// The default, [`Skip`](Missed::Skip), is what River's periodic jobs, Oban's cron plugin and
/// Solid Queue's recurring tasks do: a job scheduled for 03:00 does not start at 09:00 because
/// the farm came back then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missed {
    /// A slot not taken within its grace is not run; the job runs next at its next slot.
    #[default]
    Skip,
    /// When slots were missed, the job runs once as soon as a node polls (for the latest missed
    /// slot, however many there were), then goes back on schedule.
    RunOnce,
}

/// A parsed cron expression in a time zone, with a policy for missed slots.
///
/// Five fields (`min hour day month weekday`) or six with seconds first
/// (`sec min hour day month weekday`); `L`, `W`, `#` and names such as `MON` work as in croner.
/// Day of month and day of week combine with OR, as in Vixie cron.
///
/// ```
/// use lease_core::{Cron, Missed, Tz};
///
/// let nightly = Cron::parse("0 3 * * *")?.in_tz(Tz::Europe__Berlin).on_missed(Missed::RunOnce);
/// assert_eq!(nightly.expression(), "0 3 * * *");
/// assert!(Cron::parse("0 3 * *").is_err()); // a typed error, never a panic
/// # Ok::<(), lease_core::InvalidInput>(())
/// ```
#[derive(Debug, Clone)]
pub struct Cron {
    expr: String,
    parsed: croner::Cron,
    tz: Tz,
    missed: Missed,
    grace: Duration,
}

/// One of croner's searches (forwards, backwards) from an instant.
type Step =
    fn(&croner::Cron, &DateTime<Tz>, bool) -> Result<DateTime<Tz>, croner::errors::CronError>;

/// How late a slot may start and still count as on time, unless [`Cron::grace`] says otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// What a poll at the database's `now` should do, from [`Cron::plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Run the job for `slot` and move the stored next run to `next` (the first slot after now).
    Run {
        /// The slot this run stands for (µs since 1970).
        slot: i64,
        /// The first slot after now (µs since 1970).
        next: i64,
        /// The run may start only while the database's clock is before this (µs since 1970):
        /// `next` (once it has come, that slot is the one owed), or, when the slot must be on
        /// time, the end of its grace if that is earlier. A grant planned in time but arriving
        /// after this bound must be refused: it would run a stale slot.
        until: i64,
    },
    /// Nothing is due; the next slot that may run is `next`.
    Wait {
        /// The next slot (µs since 1970).
        next: i64,
    },
}

impl Cron {
    /// Parses `expr` (in UTC until [`in_tz`](Self::in_tz)); a bad expression is
    /// [`InvalidInput::BadCron`].
    pub fn parse(expr: &str) -> Result<Self, InvalidInput> {
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| InvalidInput::BadCron {
                expr: expr.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Cron {
            expr: expr.to_owned(),
            parsed,
            tz: Tz::UTC,
            missed: Missed::default(),
            grace: DEFAULT_GRACE,
        })
    }

    /// The zone whose wall clock the expression's fields read (default UTC).
    pub fn in_tz(mut self, tz: Tz) -> Self {
        self.tz = tz;
        self
    }

    /// What happens to missed slots (default [`Missed::Skip`]).
    pub fn on_missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// How late a slot may start and still count as on time (default [`DEFAULT_GRACE`], one
    /// minute). A slot taken later is missed, and [`Missed`] decides. Must be longer than zero.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The zone.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// The missed-slot policy.
    pub fn missed(&self) -> Missed {
        self.missed
    }

    /// Refuses settings that cannot work: a zero grace (no slot would ever be on time).
    pub fn check(&self) -> Result<(), InvalidInput> {
        if self.grace.is_zero() {
            return Err(InvalidInput::ZeroDuration {
                what: "cron grace",
                got: self.grace,
            });
        }
        Ok(())
    }

    /// The first slot strictly after `micros`; [`InvalidInput::BadCron`] when the expression
    /// has none (such as `0 0 30 2 *`, February 30th).
    pub fn next_after(&self, micros: i64) -> Result<i64, InvalidInput> {
        self.find(micros, false, croner::Cron::find_next_occurrence)?
            .ok_or_else(|| self.no_slot("after", micros))
    }

    /// The latest slot at or before `micros`, if the expression had one.
    pub fn latest_at_or_before(&self, micros: i64) -> Result<Option<i64>, InvalidInput> {
        self.find(micros, true, croner::Cron::find_previous_occurrence)
    }

    fn find(&self, micros: i64, inclusive: bool, step: Step) -> Result<Option<i64>, InvalidInput> {
        let at = DateTime::<Utc>::from_timestamp_micros(micros)
            .ok_or_else(|| self.no_slot("near", micros))?
            .with_timezone(&self.tz);
        Ok(step(&self.parsed, &at, inclusive)
            .ok()
            .map(|slot| slot.timestamp_micros()))
    }

    fn no_slot(&self, side: &str, micros: i64) -> InvalidInput {
        InvalidInput::BadCron {
            expr: self.expr.clone(),
            reason: format!("it has no slot {side} {micros} µs since 1970"),
        }
    }

    /// What a poll at the database's `now` does, given the stored next run (`None`: the job has
    /// not run on this schedule yet).
    ///
    /// The slot to run is the latest slot at or before `now`, if it is not before the stored
    /// next run (earlier slots were run or given up). It runs when it is on time
    /// (`now - slot < grace`) or when the policy is [`Missed::RunOnce`]; the next run is then the
    /// first slot after `now`, so slots only move forward and none runs twice. The run must
    /// start before [`Plan::Run`]'s `until`, which the caller checks against the database's
    /// clock when it takes the slot.
    pub fn plan(&self, stored_next: Option<i64>, now: i64) -> Result<Plan, InvalidInput> {
        if let Some(stored) = stored_next.filter(|&stored| stored > now) {
            return Ok(Plan::Wait { next: stored });
        }
        let next = self.next_after(now)?;
        let due = match (self.latest_at_or_before(now)?, stored_next) {
            (Some(slot), Some(stored)) if slot >= stored => Some(slot),
            (Some(slot), None) => Some(slot),
            _ => None,
        };
        let on_time = |slot: i64| {
            u64::try_from(now.saturating_sub(slot))
                .is_ok_and(|late| u128::from(late) < self.grace.as_micros())
        };
        // The grace ends `grace` after the slot (saturating: a grace of centuries is no bound).
        let grace_end = |slot: i64| {
            i64::try_from(self.grace.as_micros()).map_or(i64::MAX, |g| slot.saturating_add(g))
        };
        let late_allowed = stored_next.is_some() && self.missed == Missed::RunOnce;
        Ok(match due {
            // `RunOnce` after a first run: the owed slot may start late, until the next comes.
            Some(slot) if late_allowed => Plan::Run {
                slot,
                next,
                until: next,
            },
            // Otherwise only a slot on time, which must start within its grace (a job that
            // never ran on this schedule missed nothing).
            Some(slot) if on_time(slot) => Plan::Run {
                slot,
                next,
                until: next.min(grace_end(slot)),
            },
            _ => Plan::Wait { next },
        })
    }
}

/// When a periodic job runs: every `interval` (a grid that starts at its first run), or at the
/// slots of a [`Cron`] expression.
///
/// `Duration` and `Cron` convert into it, so `every(Duration::from_secs(3600))` and
/// `every(Cron::parse("0 3 * * *")?)` read the same.
///
/// ```
/// use lease_core::{Schedule, Tz};
/// use std::time::Duration;
///
/// let hourly = Schedule::interval(Duration::from_secs(3600));
/// let nightly = Schedule::cron("0 3 * * *", Tz::America__New_York)?;
/// assert!(matches!(hourly, Schedule::Interval(_)));
/// assert!(matches!(nightly, Schedule::Cron(_)));
/// # Ok::<(), lease_core::InvalidInput>(())
/// ```
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Once per interval; missed occurrences coalesce into one run as soon as a node polls.
    Interval(Duration),
    /// At the slots of a cron expression (boxed: it is much larger than a duration).
    Cron(Box<Cron>),
}

impl Schedule {
    /// Once per `interval`.
    pub fn interval(interval: Duration) -> Self {
        Schedule::Interval(interval)
    }

    /// At the slots of `expr` read on `tz`'s wall clock ([`Cron::parse`], [`Cron::in_tz`]).
    pub fn cron(expr: &str, tz: Tz) -> Result<Self, InvalidInput> {
        Ok(Cron::parse(expr)?.in_tz(tz).into())
    }
}

impl From<Duration> for Schedule {
    fn from(interval: Duration) -> Self {
        Schedule::Interval(interval)
    }
}

impl From<Cron> for Schedule {
    fn from(cron: Cron) -> Self {
        Schedule::Cron(Box::new(cron))
    }
}

#[cfg(test)]
mod tests;
