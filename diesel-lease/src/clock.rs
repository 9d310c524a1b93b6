//! The database's clock, as Diesel expressions.
//!
//! diesel-lease never asks the client for the time: two servers whose clocks disagree would
//! otherwise disagree about whether a lease has expired (the classic pitfall of client-clock mutexes such as django-db-mutex).
//! Every "now" in a diesel-lease statement is one of these expressions, evaluated by the server.
//!
//! | expression | PostgreSQL | SQLite | MySQL / MariaDB |
//! |---|---|---|---|
//! | [`DbNowMicros`] | `clock_timestamp()` as µs since 1970 | `julianday('now')` as µs (ms resolution) | `UTC_TIMESTAMP(6)` as µs |
//! | [`DbNow`] | `statement_timestamp()` | `strftime('%Y-%m-%d %H:%M:%f','now')` | `UTC_TIMESTAMP(6)` |
//! | [`DbNowOffset`] | `statement_timestamp() + $µs * interval '1 µs'` | `strftime(…, 'now', '±s.ffffff seconds')` | `UTC_TIMESTAMP(6) + INTERVAL $µs MICROSECOND` |
//!
//! On PostgreSQL a `timestamp` (without time zone) column receives `statement_timestamp()` in the
//! session's `TimeZone`; keep one `TimeZone` across the farm (the server default) or use
//! `timestamptz`. On MySQL timestamps are written in UTC whatever the session time zone.

use std::marker::PhantomData;

use diesel::expression::{
    is_aggregate, AppearsOnTable, Expression, SelectableExpression, TypedExpressionType,
    ValidGrouping,
};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, SingleValue, SqlType};
use diesel::QueryResult;

use crate::backend::SqlDialect;

/// Marker for the SQL timestamp types [`DbNow`] and [`DbNowOffset`] can produce.
///
/// Implemented for `Timestamp` (every backend), `Timestamptz` (PostgreSQL) and `Datetime`
/// (MySQL).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a timestamp type",
    label = "diesel-lease needs a timestamp column here",
    note = "map a column of SQL type `Timestamp`, `Timestamptz` (PostgreSQL) or `Datetime` (MySQL), possibly `Nullable`"
)]
pub trait TimestampType: SqlType + SingleValue + TypedExpressionType {}
impl TimestampType for diesel::sql_types::Timestamp {}
impl TimestampType for diesel::sql_types::Nullable<diesel::sql_types::Timestamp> {}
#[cfg(feature = "postgres")]
impl TimestampType for diesel::sql_types::Timestamptz {}
#[cfg(feature = "postgres")]
impl TimestampType for diesel::sql_types::Nullable<diesel::sql_types::Timestamptz> {}
#[cfg(feature = "mysql")]
impl TimestampType for diesel::sql_types::Datetime {}
#[cfg(feature = "mysql")]
impl TimestampType for diesel::sql_types::Nullable<diesel::sql_types::Datetime> {}

/// The database's current time in microseconds since the Unix epoch, as a `BIGINT`.
///
/// Used by the built-in lease and semaphore tables, which store times as integers so that the
/// same arithmetic (`expires_at = now + ttl`) works identically on every backend.
#[derive(Debug, Clone, Copy, Default, QueryId)]
pub struct DbNowMicros;

/// The database's current time as a timestamp of SQL type `ST` (see the module docs).
#[derive(Debug, Clone, Copy, QueryId)]
pub struct DbNow<ST>(PhantomData<ST>);

/// The database's current time plus an offset (negative: minus), as a timestamp of SQL type `ST`.
#[derive(Debug, Clone, QueryId)]
pub struct DbNowOffset<ST> {
    offset: Offset,
    _st: PhantomData<ST>,
}

/// A signed duration in the forms the backends take it: microseconds to bind (PostgreSQL,
/// MySQL) and a `strftime` modifier (SQLite).
#[doc(hidden)]
#[derive(Debug, Clone, QueryId)]
pub struct Offset {
    /// The offset in microseconds.
    pub micros: i64,
    /// The same offset as a SQLite date modifier, such as `-300.000000 seconds`.
    pub sqlite_modifier: String,
}

impl Offset {
    fn new(micros: i64) -> Self {
        let sign = if micros < 0 { '-' } else { '+' };
        let abs = micros.unsigned_abs();
        Offset {
            micros,
            sqlite_modifier: format!("{sign}{}.{:06} seconds", abs / 1_000_000, abs % 1_000_000),
        }
    }
}

impl<ST> DbNow<ST> {
    /// The current database time.
    pub fn new() -> Self {
        DbNow(PhantomData)
    }
}

impl<ST> Default for DbNow<ST> {
    fn default() -> Self {
        Self::new()
    }
}

impl<ST> DbNowOffset<ST> {
    /// The current database time plus `micros` microseconds (negative for the past).
    pub fn new(micros: i64) -> Self {
        DbNowOffset {
            offset: Offset::new(micros),
            _st: PhantomData,
        }
    }

    /// The current database time minus `micros` microseconds.
    pub fn ago(micros: i64) -> Self {
        Self::new(micros.saturating_neg())
    }
}

/// Implements Diesel's expression traits for a database-clock expression of SQL type `$sql`.
macro_rules! expression {
    ($name:ident $(<$st:ident>)?, $sql:ty) => {
        impl$(<$st: TimestampType>)? Expression for $name$(<$st>)? {
            type SqlType = $sql;
        }
        impl<QS $(, $st: TimestampType)?> AppearsOnTable<QS> for $name$(<$st>)? {}
        impl<QS $(, $st: TimestampType)?> SelectableExpression<QS> for $name$(<$st>)? {}
        impl<GB $(, $st)?> ValidGrouping<GB> for $name$(<$st>)? {
            type IsAggregate = is_aggregate::Never;
        }
    };
}
pub(crate) use expression;
expression!(DbNowMicros, BigInt);
expression!(DbNow<ST>, ST);
expression!(DbNowOffset<ST>, ST);

// The SQL of each expression is the backend's: see `SqlDialect` in each `backend/*.rs`.
impl<DB: SqlDialect> QueryFragment<DB> for DbNowMicros {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_now_micros(&mut out);
        Ok(())
    }
}

impl<DB: SqlDialect, ST> QueryFragment<DB> for DbNow<ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_now(&mut out);
        Ok(())
    }
}

impl<DB: SqlDialect, ST> QueryFragment<DB> for DbNowOffset<ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_now_offset(&mut out, &self.offset)
    }
}

/// `(now + $micros)` on the database clock, as µs since 1970: the expiry of a grant, the time a
/// request lapses. The client binds the duration, never an instant.
#[derive(Debug, Clone, Copy, QueryId)]
pub(crate) struct NowPlus(pub(crate) i64);
expression!(NowPlus, BigInt);

impl<DB: SqlDialect> QueryFragment<DB> for NowPlus {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("(");
        DB::push_now_micros(&mut out);
        out.push_sql(" + ");
        DB::bind_i64(&mut out, &self.0)?;
        out.push_sql(")");
        Ok(())
    }
}
