//! The statements behind leases, per backend.
//!
//! Every statement is built with Diesel's DSL over the `diesel_lease_leases` schema; the few
//! expressions Diesel has no operator for (database time plus a duration, the next slot of a
//! schedule) are small `QueryFragment`s below that push schema identifiers and bind parameters
//! only. Every time is the database's ([`DbNowMicros`]); the client binds durations, never instants.

use diesel::backend::Backend;
use diesel::dsl::case_when;
use diesel::expression::{
    is_aggregate, AppearsOnTable, Expression, SelectableExpression, ValidGrouping,
};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Nullable};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use diesel::upsert::excluded;

use super::schema::diesel_lease_leases as l;
use crate::clock::DbNowMicros;
use crate::{Error, LeaseConnection, Result};

/// What one acquisition asks for. `interval` is set for a periodic job (see `scheduler`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant<'a> {
    pub(crate) name: &'a str,
    pub(crate) holder: &'a str,
    pub(crate) ttl_micros: i64,
    pub(crate) interval_micros: Option<i64>,
}

/// What the database granted: the new fencing token and, for a periodic job, the new `next_run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) token: i64,
    pub(crate) next_run: Option<i64>,
}

/// The row of a lease as the database holds it, with the database's time of the read.
pub(crate) type Row = (String, i64, i64, i64, Option<i64>, i64);

static NOW: DbNowMicros = DbNowMicros;

macro_rules! plain_expression {
    ($name:ident, $sql:ty) => {
        impl Expression for $name {
            type SqlType = $sql;
        }
        impl<QS> AppearsOnTable<QS> for $name {}
        impl<QS> SelectableExpression<QS> for $name {}
        impl<GB> ValidGrouping<GB> for $name {
            type IsAggregate = is_aggregate::Never;
        }
    };
}

/// `(now + $micros)`: the database's time plus a duration bound by the client.
#[derive(Debug, Clone, Copy, QueryId)]
pub(crate) struct NowPlus(pub(crate) i64);
plain_expression!(NowPlus, BigInt);

impl<DB> QueryFragment<DB> for NowPlus
where
    DB: Backend + diesel::sql_types::HasSqlType<BigInt>,
    DbNowMicros: QueryFragment<DB>,
    i64: diesel::serialize::ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("(");
        NOW.walk_ast(out.reborrow())?;
        out.push_sql(" + ");
        out.push_bind_param::<BigInt, _>(&self.0)?;
        out.push_sql(")");
        Ok(())
    }
}

/// `next_run` of a newly inserted row: `NULL` for a plain lease, `now + interval` for a periodic
/// job (its grid starts at its first run).
#[derive(Debug, Clone, Copy, QueryId)]
pub(crate) struct FirstNextRun(pub(crate) Option<i64>);
plain_expression!(FirstNextRun, Nullable<BigInt>);

impl<DB> QueryFragment<DB> for FirstNextRun
where
    DB: Backend + diesel::sql_types::HasSqlType<BigInt>,
    DbNowMicros: QueryFragment<DB>,
    i64: diesel::serialize::ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match &self.0 {
            None => out.push_sql("NULL"),
            Some(interval) => {
                out.push_sql("(");
                NOW.walk_ast(out.reborrow())?;
                out.push_sql(" + ");
                out.push_bind_param::<BigInt, _>(interval)?;
                out.push_sql(")");
            }
        }
        Ok(())
    }
}

/// `next_run` after taking over an existing row: unchanged for a plain lease; for a periodic job
/// the first slot of its grid that lies in the future:
/// `base + ((now - base) DIV interval + 1) * interval` with `base = COALESCE(next_run, now)`.
/// Occurrences missed while nobody ran are skipped, and the grid does not drift.
#[derive(Debug, Clone, Copy, QueryId)]
pub(crate) struct NextRunAfterGrant(pub(crate) Option<i64>);
plain_expression!(NextRunAfterGrant, Nullable<BigInt>);

/// Integer division, which MySQL spells `DIV` (its `/` yields a decimal).
trait IntegerDivision {
    const DIV: &'static str;
}
#[cfg(feature = "postgres")]
impl IntegerDivision for diesel::pg::Pg {
    const DIV: &'static str = " / ";
}
#[cfg(feature = "sqlite")]
impl IntegerDivision for diesel::sqlite::Sqlite {
    const DIV: &'static str = " / ";
}
#[cfg(feature = "mysql")]
impl IntegerDivision for diesel::mysql::Mysql {
    const DIV: &'static str = " DIV ";
}

impl<DB> QueryFragment<DB> for NextRunAfterGrant
where
    DB: Backend + IntegerDivision + diesel::sql_types::HasSqlType<BigInt>,
    DbNowMicros: QueryFragment<DB>,
    l::next_run: QueryFragment<DB>,
    i64: diesel::serialize::ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let Some(interval) = &self.0 else {
            return l::next_run.walk_ast(out);
        };
        let base = |mut out: AstPass<'_, 'b, DB>| -> QueryResult<()> {
            out.push_sql("COALESCE(");
            l::next_run.walk_ast(out.reborrow())?;
            out.push_sql(", ");
            NOW.walk_ast(out.reborrow())?;
            out.push_sql(")");
            Ok(())
        };
        out.push_sql("(");
        base(out.reborrow())?;
        out.push_sql(" + ((");
        NOW.walk_ast(out.reborrow())?;
        out.push_sql(" - ");
        base(out.reborrow())?;
        out.push_sql(")");
        out.push_sql(DB::DIV);
        out.push_bind_param::<BigInt, _>(interval)?;
        out.push_sql(" + 1) * ");
        out.push_bind_param::<BigInt, _>(interval)?;
        out.push_sql(")");
        Ok(())
    }
}

/// The condition under which an existing row may be granted: expired, and for a periodic job
/// also due (`next_run` reached or never set).
macro_rules! grantable {
    ($g:expr) => {
        l::expires_at.le(DbNowMicros).and(
            l::next_run
                .is_null()
                .or(l::next_run.assume_not_null().le(DbNowMicros))
                .or($g
                    .interval_micros
                    .is_none()
                    .into_sql::<diesel::sql_types::Bool>()),
        )
    };
}

/// PostgreSQL and SQLite: one statement. Insert the row (first use of the name) or take the
/// existing one over only if `grantable`; `RETURNING` yields nothing when it is held.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! upsert {
    ($g:expr) => {
        diesel::query_dsl::methods::FilterDsl::filter(
            diesel::insert_into(l::table)
                .values((
                    l::name.eq($g.name),
                    l::holder.eq($g.holder),
                    l::token.eq(1_i64),
                    l::acquired_at.eq(DbNowMicros),
                    l::expires_at.eq(NowPlus($g.ttl_micros)),
                    l::next_run.eq(FirstNextRun($g.interval_micros)),
                ))
                .on_conflict(l::name)
                .do_update()
                .set((
                    l::holder.eq(excluded(l::holder)),
                    l::token.eq(l::token + 1_i64),
                    l::acquired_at.eq(excluded(l::acquired_at)),
                    l::expires_at.eq(excluded(l::expires_at)),
                    l::next_run.eq(NextRunAfterGrant($g.interval_micros)),
                )),
            grantable!($g),
        )
        .returning((l::token, l::next_run))
    };
}

/// MySQL, step 1: take the existing row over only if `grantable`. InnoDB re-reads the row under
/// its lock before applying the `WHERE`, so of two concurrent takeovers exactly one matches;
/// the predicate holds the old state, so the matched-rows count (CLIENT_FOUND_ROWS) means "won".
/// Columns are assigned left to right in MySQL: none of these reads a column assigned before it.
#[cfg(feature = "mysql")]
macro_rules! mysql_takeover {
    ($g:expr) => {
        diesel::update(l::table.filter(l::name.eq($g.name)).filter(grantable!($g))).set((
            l::holder.eq($g.holder),
            l::token.eq(l::token + 1_i64),
            l::acquired_at.eq(DbNowMicros),
            l::expires_at.eq(NowPlus($g.ttl_micros)),
            l::next_run.eq(NextRunAfterGrant($g.interval_micros)),
        ))
    };
}

/// MySQL, step 2 (first use of the name): a plain insert; a duplicate key means someone else
/// holds it.
#[cfg(feature = "mysql")]
macro_rules! mysql_insert {
    ($g:expr) => {
        diesel::insert_into(l::table).values((
            l::name.eq($g.name),
            l::holder.eq($g.holder),
            l::token.eq(1_i64),
            l::acquired_at.eq(DbNowMicros),
            l::expires_at.eq(NowPlus($g.ttl_micros)),
            l::next_run.eq(FirstNextRun($g.interval_micros)),
        ))
    };
}

/// The rows of one grant (`name`, `token`) while it is still valid.
macro_rules! held {
    ($name:expr, $token:expr) => {
        l::table
            .filter(l::name.eq($name))
            .filter(l::token.eq($token))
            .filter(l::expires_at.gt(DbNowMicros))
    };
}

/// Runs `$body` with `$c` bound to the concrete connection behind `conn`. Each backend's arm is
/// type-checked on its own, so the DSL above is used with concrete types; the trait bounds of
/// the public API stay `LeaseConnection`.
///
/// `write` marks statements that change the lease: they refuse to run inside the caller's
/// transaction, and on SQLite they take this process's writer turn and run under
/// `BEGIN IMMEDIATE` (which also makes sure the connection waits on a busy database).
macro_rules! on_backend {
    ($conn:expr, $mode:ident |$c:ident| pg_sqlite: $ps:expr, mysql: $my:expr) => {{
        let any: &mut dyn std::any::Any = $conn;
        #[cfg(feature = "postgres")]
        let any = match any.downcast_mut::<diesel::PgConnection>() {
            Some($c) => return on_backend!(@run $mode, $c, $ps),
            None => any,
        };
        #[cfg(feature = "sqlite")]
        let any = match any.downcast_mut::<diesel::SqliteConnection>() {
            Some($c) => return on_backend!(@run_sqlite $mode, $c, $ps),
            None => any,
        };
        #[cfg(feature = "mysql")]
        let any = match any.downcast_mut::<diesel::MysqlConnection>() {
            Some($c) => return on_backend!(@run $mode, $c, $my),
            None => any,
        };
        let _ = any;
        Err(unknown_backend())
    }};
    ($conn:expr, $mode:ident |$c:ident| $body:expr) => {
        on_backend!($conn, $mode |$c| pg_sqlite: $body, mysql: $body)
    };
    (@run read, $c:ident, $body:expr) => {
        $body
    };
    (@run write, $c:ident, $body:expr) => {{
        crate::backend::refuse_nested($c)?;
        $body
    }};
    (@run_sqlite read, $c:ident, $body:expr) => {
        $body
    };
    (@run_sqlite write, $c:ident, $body:expr) => {{
        crate::backend::refuse_nested($c)?;
        let _turn = crate::queue::sqlite_turn();
        $c.write_transaction(|$c| $body)
    }};
}

/// `LeaseConnection` is sealed to the three connections above; this is unreachable in practice.
fn unknown_backend() -> Error {
    Error::Database(diesel::result::Error::QueryBuilderError(
        "diesel-lease supports PgConnection, SqliteConnection and MysqlConnection only".into(),
    ))
}

/// Grants the lease if it is free (never used, expired, or released), in one statement on
/// PostgreSQL and SQLite and in the fewest safe statements on MySQL.
pub(crate) fn grant<C: LeaseConnection>(conn: &mut C, g: &Grant<'_>) -> Result<Option<Granted>> {
    on_backend!(conn, write |c| pg_sqlite: Ok(upsert!(g)
        .get_result::<(i64, Option<i64>)>(c)
        .optional()?
        .map(|(token, next_run)| Granted { token, next_run })),
    mysql: mysql_grant(c, g))
}

#[cfg(feature = "mysql")]
fn mysql_grant(c: &mut diesel::MysqlConnection, g: &Grant<'_>) -> Result<Option<Granted>> {
    use diesel::result::{DatabaseErrorKind, Error as DieselError};
    // READ COMMITTED (see `write_transaction`): no gap lock when the name has no row yet.
    let taken = c.write_transaction(|c| {
        if mysql_takeover!(g).execute(c)? != 1 {
            return Ok::<_, DieselError>(None);
        }
        l::table
            .find(g.name)
            .select((l::token, l::next_run))
            .first::<(i64, Option<i64>)>(c)
            .map(Some)
    })?;
    if let Some((token, next_run)) = taken {
        return Ok(Some(Granted { token, next_run }));
    }
    match mysql_insert!(g).execute(c) {
        Ok(_) => Ok(Some(Granted {
            token: 1,
            next_run: l::table
                .find(g.name)
                .select(l::next_run)
                .first::<Option<i64>>(c)?,
        })),
        // The row exists (held), or a concurrent first insert of the same name won; InnoDB may
        // resolve three concurrent inserts of one key with a deadlock for one of them.
        Err(DieselError::DatabaseError(
            DatabaseErrorKind::UniqueViolation | DatabaseErrorKind::SerializationFailure,
            _,
        )) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The SQL [`grant`] sends on backend `C`, with its bind values (for review and tests).
pub(crate) fn grant_sql<C: LeaseConnection>(g: &Grant<'_>) -> String {
    match C::KIND {
        #[cfg(feature = "postgres")]
        crate::BackendKind::Postgres => {
            diesel::debug_query::<diesel::pg::Pg, _>(&upsert!(g)).to_string()
        }
        #[cfg(feature = "sqlite")]
        crate::BackendKind::Sqlite => {
            diesel::debug_query::<diesel::sqlite::Sqlite, _>(&upsert!(g)).to_string()
        }
        #[cfg(feature = "mysql")]
        crate::BackendKind::Mysql => format!(
            "{};\n{}",
            diesel::debug_query::<diesel::mysql::Mysql, _>(&mysql_takeover!(g)),
            diesel::debug_query::<diesel::mysql::Mysql, _>(&mysql_insert!(g))
        ),
        #[allow(unreachable_patterns)]
        _ => String::new(),
    }
}

/// Moves the expiry of a valid grant to `now + ttl`. Returns whether the grant was still valid.
pub(crate) fn extend<C: LeaseConnection>(
    conn: &mut C,
    name: &str,
    token: i64,
    ttl_micros: i64,
) -> Result<bool> {
    on_backend!(
        conn,
        write
            | c
            | Ok(diesel::update(held!(name, token))
                .set(l::expires_at.eq(NowPlus(ttl_micros)))
                .execute(c)?
                == 1)
    )
}

/// Ends a valid grant: it expires now, or at `acquired_at + at_least_for` if that is later.
/// The row (and its token) stays. Returns whether the grant was still valid.
pub(crate) fn release<C: LeaseConnection>(
    conn: &mut C,
    name: &str,
    token: i64,
    at_least_for_micros: i64,
) -> Result<bool> {
    on_backend!(
        conn,
        write
            | c
            | Ok(diesel::update(held!(name, token))
                .set(
                    l::expires_at.eq(case_when(
                        (l::acquired_at + at_least_for_micros).gt(DbNowMicros),
                        l::acquired_at + at_least_for_micros,
                    )
                    .otherwise(DbNowMicros))
                )
                .execute(c)?
                == 1)
    )
}

/// Whether the grant (`name`, `token`) is still valid by the database's clock.
pub(crate) fn is_valid<C: LeaseConnection>(conn: &mut C, name: &str, token: i64) -> Result<bool> {
    on_backend!(
        conn,
        read | c | Ok(held!(name, token).count().get_result::<i64>(c)? == 1)
    )
}

/// The lease's row and the database's current time.
pub(crate) fn inspect<C: LeaseConnection>(conn: &mut C, name: &str) -> Result<Option<Row>> {
    on_backend!(
        conn,
        read | c
            | Ok(l::table
                .find(name)
                .select((
                    l::holder,
                    l::token,
                    l::acquired_at,
                    l::expires_at,
                    l::next_run,
                    DbNowMicros
                ))
                .first::<Row>(c)
                .optional()?)
    )
}
