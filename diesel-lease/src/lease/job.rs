//! A farm job's lease on the user's own table (the docs are on [`JobLease`]).

use diesel::backend::Backend;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::QueryResult;

use crate::backend::SqlDialect;
use crate::clock::{DbNow, DbNowOffset, TimestampType};
use crate::lease::statements::LeaseStatements;
use crate::model::Keyed;
use lease_core::ClaimStamp;

use crate::{BorrowConnection, OwnerId, Result, Ttl};
use lease_core::{Plan, Schedule};

/// A model with a farm job's lease columns (`#[job_lease(holder = …, started_at = …, next_run = …)]`).
///
/// A farm job's lease on the user's own `job_status` table: one node runs each occurrence.
///
/// ```sql
/// UPDATE job_status
///    SET running_at = <holder>, last_run_started = <db now>, next_run = <db now + interval>
///  WHERE job_id = <job>
///    AND ((running_at IS NULL AND (next_run IS NULL OR ⌈next_run⌉ <= <db now>))
///      OR (running_at IS NOT NULL AND ⌈last_run_started⌉ <= <db now - timeout>))
/// ```
///
/// `⌈col⌉` is the latest instant the stored value can stand for (the value plus one unit of the
/// precision it shows, on SQLite plus one tick of its millisecond clock,
/// `SqlDialect::push_stored_upper_bound`): a whole-second column (the seed's `datetime`,
/// PostgreSQL `timestamp(0)`) truncates or rounds what is written, and comparing the stored value
/// as if exact would take a run over, or start one, up to a second early (on SQLite, up to a
/// millisecond).
///
/// One row per job; whoever's update changes the row runs this occurrence. A node that dies while
/// running leaves `running_at` set; after `timeout` (database clock) another node takes over.
/// Differences from the classic statement, each a fix: a `NULL` `next_run` (a freshly inserted job row) counts
/// as due; the release is checked against the run's own stamp (`… AND running_at = <stamp>`,
/// the holder plus a random part per run), so a run that was taken over — by another node, or by
/// another thread with the same holder — cannot release the new run; times come from the
/// database clock only.
///
/// # Cron schedules
///
/// [`JobRunOptions::every`] also takes a [`Cron`](crate::lease::schedule::Cron): a start first
/// reads the database's `now`, picks the latest slot at or before it (skipped, by default,
/// when it is later than its grace: [`Missed`](crate::lease::schedule::Missed)), and sets
/// `next_run` to the first slot after that `now` (written as `now + (slot - now read)` on the
/// database clock, so it can stand a few milliseconds after the slot). The statement above still
/// decides alone who runs: a run starts only while `next_run` has passed and while the database's
/// clock is still before that next slot (and, under `Missed::Skip`, within the slot's grace),
/// and it moves `next_run` past every slot up to `now`, so
/// no slot runs twice, even for a node whose start reaches the database after the next slot
/// came (it is refused; a later poll runs the new slot). A whole-second `next_run` column makes each
/// slot due up to a second late (its stored value's upper bound), so a per-second expression
/// needs a column with fractional seconds.
pub trait JobLease: Keyed {
    /// The SQL type of the started-at column: whether runs write and compare an instant
    /// (`Timestamptz`) or a UTC wall-clock time.
    type StartedAtSql: TimestampType;
    /// The SQL type of the next-run column (`Nullable<Timestamp>` when unmapped).
    type NextRunSql: TimestampType;
    /// The holder column (nullable text): who runs the job now; `NULL` when nobody does.
    const HOLDER: &'static str;
    /// When the current run started (nullable timestamp).
    const STARTED_AT: &'static str;
    /// When the job is next due (nullable timestamp), if the model schedules runs.
    const NEXT_RUN: Option<&'static str>;
}

/// How a node takes a job run: who it is, when a run counts as dead, and when the job is next due.
#[derive(Debug, Clone)]
pub struct JobRunOptions {
    holder: OwnerId,
    timeout: std::time::Duration,
    schedule: Option<Schedule>,
}

impl JobRunOptions {
    /// A run older than `timeout` (database clock) is considered dead and may be taken over.
    ///
    /// The settings are checked when a run is started: a zero timeout or interval is refused
    /// then with [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration).
    pub fn new(timeout: std::time::Duration) -> Self {
        JobRunOptions {
            holder: OwnerId::process_default().clone(),
            timeout,
            schedule: None,
        }
    }

    /// After a run starts, the job is next due `interval` later (`next_run = now + interval`),
    /// or, given a [`Cron`](crate::lease::schedule::Cron), at its next slot (see the
    /// [`JobLease`](crate::dsl::JobLease#cron-schedules)).
    pub fn every(mut self, schedule: impl Into<Schedule>) -> Self {
        self.schedule = Some(schedule.into());
        self
    }

    /// Runs as `holder` instead of the process default identity.
    pub fn holder(mut self, holder: OwnerId) -> Self {
        self.holder = holder;
        self
    }

    /// The identity stored in the holder column.
    pub fn holder_id(&self) -> &OwnerId {
        &self.holder
    }
}

#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct StartRunStmt<M: JobLease> {
    table: M::Table,
    pk: M::PkFilter,
    holder: String,
    now: DbNow<M::StartedAtSql>,
    dead_before: DbNowOffset<M::StartedAtSql>,
    /// Now, as the next-run column's type: the due check.
    due_by: DbNow<M::NextRunSql>,
    next_run: Option<DbNowOffset<M::NextRunSql>>,
    /// On a cron schedule, the start bound of the slot (µs, [`Plan::Run`]'s `until`: the next
    /// slot, or the end of the grace if the slot must be on time): the start is refused once the
    /// database's clock has reached it, so a start planned in time and sent late cannot run a
    /// stale slot.
    slot_until: Option<i64>,
}

impl<M: JobLease> QueryId for StartRunStmt<M> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<M, DB> QueryFragment<DB> for StartRunStmt<M>
where
    M: JobLease,
    M::Table: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    DB: SqlDialect,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(M::HOLDER)?;
        out.push_sql(" = ");
        DB::bind_str(&mut out, &self.holder)?;
        out.push_sql(", ");
        out.push_identifier(M::STARTED_AT)?;
        out.push_sql(" = ");
        self.now.walk_ast(out.reborrow())?;
        if let (Some(col), Some(next)) = (M::NEXT_RUN, &self.next_run) {
            out.push_sql(", ");
            out.push_identifier(col)?;
            out.push_sql(" = ");
            next.walk_ast(out.reborrow())?;
        }
        out.push_sql(" WHERE ");
        self.pk.walk_ast(out.reborrow())?;
        out.push_sql(" AND ((");
        out.push_identifier(M::HOLDER)?;
        out.push_sql(" IS NULL");
        if let Some(col) = M::NEXT_RUN {
            out.push_sql(" AND (");
            out.push_identifier(col)?;
            out.push_sql(" IS NULL OR ");
            // Due once the latest instant the stored value can stand for has passed: a
            // whole-second column's rounding never starts a run early.
            DB::push_stored_upper_bound(&mut out, col)?;
            out.push_sql(" <= ");
            self.due_by.walk_ast(out.reborrow())?;
            out.push_sql(")");
        }
        out.push_sql(") OR (");
        out.push_identifier(M::HOLDER)?;
        out.push_sql(" IS NOT NULL AND ");
        // Dead once even the latest instant the stored start can stand for is older than the
        // timeout: never taken over early, whatever the column's precision.
        DB::push_stored_upper_bound(&mut out, M::STARTED_AT)?;
        out.push_sql(" <= ");
        self.dead_before.walk_ast(out.reborrow())?;
        out.push_sql("))");
        if let Some(until) = &self.slot_until {
            out.push_sql(" AND ");
            DB::push_now_micros(&mut out);
            out.push_sql(" < ");
            DB::bind_i64(&mut out, until)?;
        }
        Ok(())
    }
}

#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct FinishRunStmt<M: JobLease> {
    table: M::Table,
    pk: M::PkFilter,
    holder: String,
}

impl<M: JobLease> QueryId for FinishRunStmt<M> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<M, DB> QueryFragment<DB> for FinishRunStmt<M>
where
    M: JobLease,
    M::Table: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    DB: SqlDialect,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(M::HOLDER)?;
        out.push_sql(" = NULL WHERE ");
        self.pk.walk_ast(out.reborrow())?;
        out.push_sql(" AND ");
        out.push_identifier(M::HOLDER)?;
        out.push_sql(" = ");
        DB::bind_str(&mut out, &self.holder)
    }
}

/// The bounds under which a connection can run model `M`'s job lease; you never implement it.
pub trait JobConnection<M: JobLease>: LeaseStatements {
    #[doc(hidden)]
    fn start_run(&mut self, stmt: StartRunStmt<M>) -> QueryResult<bool>;
    #[doc(hidden)]
    fn finish_run(&mut self, stmt: FinishRunStmt<M>) -> QueryResult<bool>;
}

impl<M, C> JobConnection<M> for C
where
    M: JobLease,
    C: LeaseStatements,
    StartRunStmt<M>: QueryFragment<C::Backend>,
    FinishRunStmt<M>: QueryFragment<C::Backend>,
    C::Backend: Backend,
{
    // Each one write that waits for a busy SQLite file like every other (`single_write`).
    fn start_run(&mut self, stmt: StartRunStmt<M>) -> QueryResult<bool> {
        Ok(self.single_write(|c| c.execute_returning_count(&stmt))? == 1)
    }
    fn finish_run(&mut self, stmt: FinishRunStmt<M>) -> QueryResult<bool> {
        Ok(self.single_write(|c| c.execute_returning_count(&stmt))? == 1)
    }
}

/// One node's run of a job: what [`try_acquire_run`](crate::dsl::JobLeaseDsl::try_acquire_run) granted and [`release_run`](crate::dsl::JobLeaseDsl::release_run) ends.
///
/// It carries the run's [`ClaimStamp`] — the holder plus a random part drawn for this run — which
/// is what the holder column stores. Ending a run compares the whole stamp, so a run that was
/// taken over (even by another thread of the same process, with the same holder) cannot end the
/// new run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "release the run with release_run, or it is taken over after the timeout"]
pub struct JobRun {
    stamp: ClaimStamp,
    slot: Option<i64>,
}

impl JobRun {
    /// On a cron schedule, the slot this run stands for (µs since 1970, database clock).
    pub fn due_at_micros(&self) -> Option<i64> {
        self.slot
    }

    /// What the holder column stores for this run.
    pub fn stamp(&self) -> &ClaimStamp {
        &self.stamp
    }
}

/// Takes this occurrence of job `pk` if it is due and nobody runs it (or its runner is dead):
/// `Some(run)` for exactly one node. What [`JobLeaseDsl::try_acquire_run`](crate::dsl::JobLeaseDsl::try_acquire_run) calls.
pub(crate) fn try_acquire_run<M, C>(
    conn: &mut C,
    pk: M::Pk,
    options: &JobRunOptions,
) -> Result<Option<JobRun>>
where
    M: JobLease,
    C: BorrowConnection,
    C::Conn: JobConnection<M>,
{
    // The options' one check, before any SQL.
    let timeout = Ttl::new("job run timeout", options.timeout)?;
    if options.schedule.is_some() && M::NEXT_RUN.is_none() {
        // Without the column the statement neither keeps the job idle until it is due nor
        // records when it is: the schedule would be ignored, and the job run back to back.
        return Err(crate::Error::Config(format!(
            "a scheduled run (`every`, `cron`) needs the model's `next_run` column, and `{}` maps \
             none: add `next_run = <column>` to `#[job_lease(...)]`, or run without a schedule",
            crate::observe::table_name::<M::Table>()
        )));
    }
    let (next_run, slot) = match &options.schedule {
        None => (None, None),
        Some(Schedule::Interval(i)) => (Some(Ttl::new("job interval", *i)?.as_micros()), None),
        Some(Schedule::Cron(cron)) => {
            cron.check()?;
            let now = crate::lease::statements::now(conn.borrow_connection())?;
            // The stored next run is the user's column, read by the statement itself: here
            // only whether the latest slot is still owed by the policy (as if missed long ago).
            match cron.plan(Some(i64::MIN), now)? {
                Plan::Run { slot, next, until } => (Some(next - now), Some((slot, until))),
                Plan::Wait { .. } => return Ok(None),
            }
        }
    };
    let stamp = ClaimStamp::new(&options.holder);
    let started = conn.borrow_connection().start_run(StartRunStmt {
        table: M::Table::default(),
        pk: M::pk_filter(pk),
        holder: stamp.as_str().to_owned(),
        now: DbNow::new(),
        dead_before: DbNowOffset::ago(timeout.as_micros()),
        due_by: DbNow::new(),
        next_run: next_run.map(DbNowOffset::new),
        slot_until: slot.map(|(_, until)| until),
    })?;
    Ok(started.then_some(JobRun {
        stamp,
        slot: slot.map(|(slot, _)| slot),
    }))
}

/// Ends `run` of job `pk` (`running_at = NULL`), only if it is still this run; `WasLost` when the
/// run was taken over (or already released).
pub(crate) fn release_run<M, C>(conn: &mut C, pk: M::Pk, run: &JobRun) -> Result<crate::Released>
where
    M: JobLease,
    C: BorrowConnection,
    C::Conn: JobConnection<M>,
{
    let held = conn.borrow_connection().finish_run(FinishRunStmt {
        table: M::Table::default(),
        pk: M::pk_filter(pk),
        holder: run.stamp.as_str().to_owned(),
    })?;
    Ok(crate::Released::from_held(held))
}
