//! The statements behind leases.
//!
//! Every statement is built with Diesel's DSL over the `diesel_lease_leases` schema; the few
//! expressions Diesel has no operator for (database time plus a duration, the next slot of a
//! schedule) are small `QueryFragment`s below that push schema identifiers and bind parameters
//! only. Every time is the database's ([`DbNowMicros`]); the client binds durations, never instants.
//!
//! The statements that read the same on every backend are written once, in the macros
//! `lease_statements!` and `grant_by_upsert!`, and expanded below for PostgreSQL and SQLite; MySQL,
//! which has no `ON CONFLICT`, grants with statements of its own (`mysql_like.rs`) built from the
//! same `grantable!` condition and `first_grant!` row.

use diesel::expression::{
    is_aggregate, AppearsOnTable, Expression, SelectableExpression, ValidGrouping,
};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, Nullable};
use diesel::QueryResult;

use super::schema::diesel_lease_leases as l;
use crate::backend::Dialect;
use crate::backend::{refuse_nested, retry_conflicts, SqlDialect};
use crate::clock::expression;
#[allow(unused_imports)]
use crate::clock::DbNowMicros;
use crate::Result;

/// What one acquisition asks for. `periodic` is set for a periodic job (see `schedule`).
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    /// The lease name.
    pub name: &'a str,
    /// Who asks.
    pub holder: &'a str,
    /// How long the grant lasts, in µs.
    pub ttl_micros: i64,
    /// For a periodic job: how its `next_run` is decided and moved.
    pub periodic: Periodic,
}

/// How a grant treats `next_run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Periodic {
    /// A plain lease: `next_run` is not looked at nor changed.
    No,
    /// Every interval (µs): due once `next_run` has passed, moved along its grid in SQL.
    Interval(i64),
    /// A cron slot the client computed from the database's `now`: granted only if `next_run`
    /// still holds the value the client read (`expected`, `None`: NULL or no row) and, by the
    /// database clock, `slot` has come and `until` has not; `next_run` moves to `next`.
    Slot {
        /// The `next_run` the client read.
        expected: Option<i64>,
        /// The slot being run (µs).
        slot: i64,
        /// The next slot (µs), later than the database's `now`.
        next: i64,
        /// The grant must land before this (µs): the next slot, or the end of the slot's grace
        /// (`lease_core::Plan::Run`).
        until: i64,
    },
}

impl Periodic {
    /// Whether `next_run` takes part in the grant.
    pub(crate) fn is_periodic(&self) -> bool {
        !matches!(self, Periodic::No)
    }
}

/// What the database granted: the new fencing token and, for a periodic job, the new `next_run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// The fencing token of this grant.
    pub token: i64,
    /// For a periodic job: when its next occurrence is due (µs, database clock).
    pub next_run: Option<i64>,
}

/// No static query id for `$t`: its SQL text depends on the grant's [`Periodic`] kind (`NULL`,
/// `now + $interval` or a bound slot; a slot test or `1 = 1`), while a derived `QueryId` would
/// give every kind one id. Diesel would then run, on a connection that had prepared a grant of
/// one kind, that kind's statement for the others (found on MySQL: an interval job's first
/// grant stored `next_run` NULL after a plain lease's on the same connection). Without a static
/// id the statements that hold it are cached by their text, one per kind.
macro_rules! by_text {
    ($t:ty) => {
        impl QueryId for $t {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }
    };
}

/// `next_run` of a newly inserted row: `NULL` for a plain lease, `now + interval` for a periodic
/// job (its grid starts at its first run), the next slot for a cron job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FirstNextRun(pub(crate) Periodic);
expression!(FirstNextRun, Nullable<BigInt>);
by_text!(FirstNextRun);

impl<DB: SqlDialect> QueryFragment<DB> for FirstNextRun {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match &self.0 {
            Periodic::No => out.push_sql("NULL"),
            Periodic::Interval(interval) => {
                out.push_sql("(");
                DB::push_now_micros(&mut out);
                out.push_sql(" + ");
                DB::bind_i64(&mut out, interval)?;
                out.push_sql(")");
            }
            Periodic::Slot { next, .. } => DB::bind_i64(&mut out, next)?,
        }
        Ok(())
    }
}

/// `next_run` after taking over an existing row: unchanged for a plain lease; for a periodic job
/// the first slot of its grid that lies in the future:
/// `base + ((now - base) DIV interval + 1) * interval` with `base = COALESCE(next_run, now)`.
/// Occurrences missed while nobody ran are skipped, and the grid does not drift. For a cron job:
/// the next slot, which the client computed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NextRunAfterGrant(pub(crate) Periodic);
expression!(NextRunAfterGrant, Nullable<BigInt>);
by_text!(NextRunAfterGrant);

impl<DB: SqlDialect> QueryFragment<DB> for NextRunAfterGrant
where
    l::next_run: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let interval = match &self.0 {
            Periodic::No => return l::next_run.walk_ast(out),
            Periodic::Slot { next, .. } => return DB::bind_i64(&mut out, next),
            Periodic::Interval(interval) => interval,
        };
        let base = |mut out: AstPass<'_, 'b, DB>| -> QueryResult<()> {
            out.push_sql("COALESCE(");
            l::next_run.walk_ast(out.reborrow())?;
            out.push_sql(", ");
            DB::push_now_micros(&mut out);
            out.push_sql(")");
            Ok(())
        };
        out.push_sql("(");
        base(out.reborrow())?;
        out.push_sql(" + ((");
        DB::push_now_micros(&mut out);
        out.push_sql(" - ");
        base(out.reborrow())?;
        out.push_sql(")");
        out.push_sql(DB::INT_DIV);
        DB::bind_i64(&mut out, interval)?;
        out.push_sql(" + 1) * ");
        DB::bind_i64(&mut out, interval)?;
        out.push_sql(")");
        Ok(())
    }
}

/// For a cron slot: `next_run` still holds what the client read, and by the database clock the
/// slot has come and its start bound has not (`next_run = <read> AND <slot> <= now AND now <
/// <until>`). Of the nodes that read the same `next_run`, the first grant moves it past the slot
/// and the others no longer match: one run per slot. A grant planned in time that reaches the
/// database after the next slot (or, when the slot must be on time, after its grace) matches
/// nothing either: it would run a stale slot, late. `TRUE` (`1 = 1`) for every other grant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotStillDue(pub(crate) Periodic);
expression!(SlotStillDue, Bool);
by_text!(SlotStillDue);

impl<DB: SqlDialect> QueryFragment<DB> for SlotStillDue
where
    l::next_run: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let Periodic::Slot {
            expected,
            slot,
            until,
            ..
        } = &self.0
        else {
            out.push_sql("1 = 1");
            return Ok(());
        };
        out.push_sql("(");
        l::next_run.walk_ast(out.reborrow())?;
        match expected {
            Some(expected) => {
                out.push_sql(" = ");
                DB::bind_i64(&mut out, expected)?;
            }
            None => out.push_sql(" IS NULL"),
        }
        out.push_sql(" AND ");
        DB::bind_i64(&mut out, slot)?;
        out.push_sql(" <= ");
        DB::push_now_micros(&mut out);
        out.push_sql(" AND ");
        DB::push_now_micros(&mut out);
        out.push_sql(" < ");
        DB::bind_i64(&mut out, until)?;
        out.push_sql(")");
        Ok(())
    }
}

/// `(name, token) IN ((?, ?), …)`: the rows of these grants, for the keeper's extension of many
/// leases in one statement. Row values compare pairwise on every backend (PostgreSQL, SQLite
/// 3.15+, MySQL, MariaDB); each name and token is a bind parameter. The text depends on the
/// number of grants, and the statement is not kept prepared ([`AstPass::unsafe_to_cache_prepared`]):
/// a cache keyed by text would keep one statement per batch size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrantsIn<'a>(pub(crate) &'a [(String, i64)]);
impl Expression for GrantsIn<'_> {
    type SqlType = Bool;
}
impl<QS> AppearsOnTable<QS> for GrantsIn<'_> {}
impl<QS> SelectableExpression<QS> for GrantsIn<'_> {}
impl<GB> ValidGrouping<GB> for GrantsIn<'_> {
    type IsAggregate = is_aggregate::Never;
}

impl QueryId for GrantsIn<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<DB: SqlDialect> QueryFragment<DB> for GrantsIn<'_>
where
    l::name: QueryFragment<DB>,
    l::token: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.unsafe_to_cache_prepared();
        out.push_sql("((");
        l::name.walk_ast(out.reborrow())?;
        out.push_sql(", ");
        l::token.walk_ast(out.reborrow())?;
        out.push_sql(") IN (");
        for (i, (name, token)) in self.0.iter().enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            DB::bind_str(&mut out, name)?;
            out.push_sql(", ");
            DB::bind_i64(&mut out, token)?;
            out.push_sql(")");
        }
        out.push_sql("))");
        Ok(())
    }
}

/// The condition under which an existing row may be granted: expired, and for a periodic job
/// also due (`next_run` reached or never set), and for a cron slot still due ([`SlotStillDue`]).
macro_rules! grantable {
    ($g:expr) => {
        // A token at i64::MAX has no successor: such a row is never granted again (the caller
        // gets `Error::TokensExhausted` from `try_acquire`), instead of overflowing (or, on SQLite, turning REAL).
        l::token
            .lt(i64::MAX)
            .and(l::expires_at.le(DbNowMicros))
            .and(
                l::next_run
                    .is_null()
                    .or(l::next_run.assume_not_null().le(DbNowMicros))
                    .or((!$g.periodic.is_periodic()).into_sql::<diesel::sql_types::Bool>()),
            )
            .and(SlotStillDue($g.periodic))
    };
}
pub(crate) use grantable;

/// The row of a name's first grant: token 1, held from now for the ttl.
macro_rules! first_grant {
    ($g:expr) => {
        (
            l::name.eq($g.name),
            l::holder.eq($g.holder),
            l::token.eq(1_i64),
            l::acquired_at.eq(DbNowMicros),
            l::expires_at.eq(NowPlus($g.ttl_micros)),
            l::next_run.eq(FirstNextRun($g.periodic)),
            l::released_at.eq(None::<i64>),
        )
    };
}
pub(crate) use first_grant;

/// PostgreSQL and SQLite: one statement. Insert the row (first use of the name) or take the
/// existing one over only if `grantable`; `RETURNING` yields nothing when it is held.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! upsert {
    ($g:expr) => {{
        use crate::lease::statements::dsl::*;
        diesel::query_dsl::methods::FilterDsl::filter(
            diesel::insert_into(l::table)
                .values(crate::lease::statements::first_grant!($g))
                .on_conflict(l::name)
                .do_update()
                .set((
                    l::holder.eq(excluded(l::holder)),
                    l::token.eq(l::token + 1_i64),
                    l::acquired_at.eq(excluded(l::acquired_at)),
                    l::expires_at.eq(excluded(l::expires_at)),
                    l::next_run.eq(NextRunAfterGrant($g.periodic)),
                    l::released_at.eq(None::<i64>),
                )),
            crate::lease::statements::grantable!($g),
        )
        .returning((l::token, l::next_run))
    }};
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use upsert;

/// The rows of one grant (`name`, `token`) while it is still valid: not expired, not released.
/// A released grant can stay unexpired (`at_least_for`); an extension sent before the release
/// that reaches the database after it (a keep-alive beat on another connection) must not match.
macro_rules! held {
    ($name:expr, $token:expr) => {
        l::table
            .filter(l::name.eq($name))
            .filter(l::token.eq($token))
            .filter(l::expires_at.gt(DbNowMicros))
            .filter(l::released_at.is_null())
    };
}
pub(crate) use held;

/// The names the statement macros use, imported inside each expansion.
pub(crate) mod dsl {
    pub(crate) use super::super::schema::diesel_lease_leases as l;
    pub(crate) use super::{FirstNextRun, NextRunAfterGrant, SlotStillDue};
    pub(crate) use crate::clock::{DbNowMicros, NowPlus};
    pub(crate) use diesel::dsl::case_when;
    pub(crate) use diesel::prelude::*;
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) use diesel::upsert::excluded;
}

/// The lease statements of one backend: a grant in the backend's own shape, the rest written once
/// (`lease_statements!`). Called through the functions below, never directly.
pub trait LeaseStatements: Dialect {
    /// Grants the lease if it is free (never used, expired, or released), in one statement on
    /// PostgreSQL and SQLite and in the fewest safe statements on MySQL.
    #[doc(hidden)]
    fn lease_grant(&mut self, g: &Grant<'_>) -> QueryResult<Option<Granted>>;
    /// The SQL [`LeaseStatements::lease_grant`] sends, with its bind values.
    #[doc(hidden)]
    fn lease_grant_sql(g: &Grant<'_>) -> String
    where
        Self: Sized;
    /// Moves the expiry of a valid grant to `now + ttl`; whether the grant was still valid.
    #[doc(hidden)]
    fn lease_extend(&mut self, name: &str, token: i64, ttl_micros: i64) -> QueryResult<bool>;
    /// Moves the expiry of each of these valid grants to `now + ttl`, in one statement; how
    /// many were still valid (the rest were lost, released or are unknown).
    #[doc(hidden)]
    fn lease_extend_all(&mut self, grants: &[(String, i64)], ttl_micros: i64)
        -> QueryResult<usize>;
    /// Ends a valid grant: it expires now, or at `acquired_at + at_least_for` if that is later,
    /// and `released_at` records when (no extension matches it after that). The row (and its
    /// token) stays. Whether the grant was still valid.
    #[doc(hidden)]
    fn lease_release(
        &mut self,
        name: &str,
        token: i64,
        at_least_for_micros: i64,
    ) -> QueryResult<bool>;
    /// Whether the grant (`name`, `token`) is still valid by the database's clock.
    #[doc(hidden)]
    fn lease_is_valid(&mut self, name: &str, token: i64) -> QueryResult<bool>;
    /// The lease's row and the database's current time.
    #[doc(hidden)]
    fn lease_inspect(&mut self, name: &str) -> QueryResult<Option<Row>>;
    /// The database's current time (µs since 1970), for a schedule whose lease has no row yet.
    #[doc(hidden)]
    fn lease_now(&mut self) -> QueryResult<i64>;
}

/// The row of a lease as the database holds it (holder, token, acquired at, expires at, next
/// run, released at), with the database's time of the read.
pub(crate) type Row = (String, i64, i64, i64, Option<i64>, Option<i64>, i64);

/// The lease statements that read the same on every backend.
macro_rules! lease_statements {
    () => {
        fn lease_extend(
            &mut self,
            name: &str,
            token: i64,
            ttl_micros: i64,
        ) -> diesel::QueryResult<bool> {
            use crate::lease::statements::dsl::*;
            Ok(diesel::update(crate::lease::statements::held!(name, token))
                .set(l::expires_at.eq(NowPlus(ttl_micros)))
                .execute(self)?
                == 1)
        }

        fn lease_extend_all(
            &mut self,
            grants: &[(String, i64)],
            ttl_micros: i64,
        ) -> diesel::QueryResult<usize> {
            use crate::lease::statements::dsl::*;
            diesel::update(
                l::table
                    .filter(crate::lease::statements::GrantsIn(grants))
                    .filter(l::expires_at.gt(DbNowMicros))
                    .filter(l::released_at.is_null()),
            )
            .set(l::expires_at.eq(NowPlus(ttl_micros)))
            .execute(self)
        }

        fn lease_release(
            &mut self,
            name: &str,
            token: i64,
            at_least_for_micros: i64,
        ) -> diesel::QueryResult<bool> {
            use crate::lease::statements::dsl::*;
            Ok(diesel::update(crate::lease::statements::held!(name, token))
                .set((
                    l::expires_at.eq(case_when(
                        (l::acquired_at + at_least_for_micros).gt(DbNowMicros),
                        l::acquired_at + at_least_for_micros,
                    )
                    .otherwise(DbNowMicros)),
                    l::released_at.eq(DbNowMicros.nullable()),
                ))
                .execute(self)?
                == 1)
        }

        fn lease_is_valid(&mut self, name: &str, token: i64) -> diesel::QueryResult<bool> {
            use crate::lease::statements::dsl::*;
            Ok(crate::lease::statements::held!(name, token)
                .count()
                .get_result::<i64>(self)?
                == 1)
        }

        fn lease_inspect(
            &mut self,
            name: &str,
        ) -> diesel::QueryResult<Option<crate::lease::statements::Row>> {
            use crate::lease::statements::dsl::*;
            l::table
                .find(name)
                .select((
                    l::holder,
                    l::token,
                    l::acquired_at,
                    l::expires_at,
                    l::next_run,
                    l::released_at,
                    DbNowMicros,
                ))
                .first(self)
                .optional()
        }

        fn lease_now(&mut self) -> diesel::QueryResult<i64> {
            use crate::lease::statements::dsl::*;
            diesel::select(DbNowMicros).get_result(self)
        }
    };
}
// For `mysql_like.rs`; PostgreSQL and SQLite expand it above, in this file.
#[cfg_attr(not(feature = "__mysql_like"), allow(unused_imports))]
pub(crate) use lease_statements;

/// The one-statement grant of the backends with `INSERT … ON CONFLICT DO UPDATE … RETURNING`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! grant_by_upsert {
    ($db:ty) => {
        fn lease_grant(
            &mut self,
            g: &crate::lease::statements::Grant<'_>,
        ) -> diesel::QueryResult<Option<crate::lease::statements::Granted>> {
            use diesel::prelude::*;
            Ok(crate::lease::statements::upsert!(g)
                .get_result::<(i64, Option<i64>)>(self)
                .optional()?
                .map(|(token, next_run)| crate::lease::statements::Granted { token, next_run }))
        }

        fn lease_grant_sql(g: &crate::lease::statements::Grant<'_>) -> String {
            diesel::debug_query::<$db, _>(&crate::lease::statements::upsert!(g)).to_string()
        }
    };
}

/// Grants the lease (see `LeaseStatements::lease_grant`). Refused inside the caller's
/// transaction: a grant must commit at once to be seen by the others.
///
/// A grant, an extension and a release are each rolled back whole when they fail with a
/// deadlock, so they are tried again (`retry_conflicts`). One server hardly ever reports one
/// for these statements; a multi-primary cluster (MariaDB Galera) reports one for every grant
/// that lost to a concurrent write of the same lease on another node, at commit.
///
/// Public (in this hidden module) for the test suite, which hands it grants no planner would
/// make yet, such as a cron slot whose start bound has already passed.
pub fn grant<C: LeaseStatements>(conn: &mut C, g: &Grant<'_>) -> Result<Option<Granted>> {
    refuse_nested(conn)?;
    retry_conflicts(|| {
        conn.single_write(|c| c.lease_grant(g))
            .map_err(about(g.name))
    })
}

/// Classifies a database error, naming the lease in a timeout the database reported.
fn about(name: &str) -> impl FnOnce(diesel::result::Error) -> crate::Error + '_ {
    move |e| crate::Error::from(e).concerning(|| name.to_owned())
}

/// The SQL [`grant`] sends on backend `C`, with its bind values (for review and tests).
pub(crate) fn grant_sql<C: LeaseStatements>(g: &Grant<'_>) -> String {
    C::lease_grant_sql(g)
}

/// Extends a valid grant (see [`LeaseStatements::lease_extend`]).
pub(crate) fn extend<C: LeaseStatements>(
    conn: &mut C,
    name: &str,
    token: i64,
    ttl_micros: i64,
) -> Result<bool> {
    refuse_nested(conn)?;
    retry_conflicts(|| {
        conn.single_write(|c| c.lease_extend(name, token, ttl_micros))
            .map_err(about(name))
    })
}

/// Extends these valid grants in one statement (see [`LeaseStatements::lease_extend_all`]):
/// whether every one of them was still valid.
pub(crate) fn extend_all<C: LeaseStatements>(
    conn: &mut C,
    grants: &[(String, i64)],
    ttl_micros: i64,
) -> Result<bool> {
    refuse_nested(conn)?;
    retry_conflicts(|| {
        conn.single_write(|c| c.lease_extend_all(grants, ttl_micros))
            .map_err(crate::Error::from)
    })
    .map(|extended| extended == grants.len())
}

/// Releases a valid grant (see [`LeaseStatements::lease_release`]).
pub(crate) fn release<C: LeaseStatements>(
    conn: &mut C,
    name: &str,
    token: i64,
    at_least_for_micros: i64,
) -> Result<bool> {
    refuse_nested(conn)?;
    retry_conflicts(|| {
        conn.single_write(|c| c.lease_release(name, token, at_least_for_micros))
            .map_err(about(name))
    })
}

/// Whether the grant is still valid by the database's clock.
pub(crate) fn is_valid<C: LeaseStatements>(conn: &mut C, name: &str, token: i64) -> Result<bool> {
    conn.lease_is_valid(name, token).map_err(about(name))
}

/// The database's current time, µs since 1970.
pub(crate) fn now<C: LeaseStatements>(conn: &mut C) -> Result<i64> {
    Ok(conn.lease_now()?)
}

/// The lease's row and the database's current time.
pub(crate) fn inspect<C: LeaseStatements>(conn: &mut C, name: &str) -> Result<Option<Row>> {
    conn.lease_inspect(name).map_err(about(name))
}

#[cfg(feature = "postgres")]
impl LeaseStatements for diesel::PgConnection {
    lease_statements!();

    grant_by_upsert!(diesel::pg::Pg);
}

#[cfg(feature = "sqlite")]
impl LeaseStatements for diesel::SqliteConnection {
    lease_statements!();

    grant_by_upsert!(diesel::sqlite::Sqlite);
}
