//! The database's clock, as Diesel expressions.
//!
//! diesel-lease never asks the client for the time: two servers whose clocks disagree would
//! otherwise disagree about whether a lease has expired (seed 002's warning about django-db-mutex).
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

/// The database's current time plus `micros` (negative: minus), as a timestamp of SQL type `ST`.
#[derive(Debug, Clone, QueryId)]
pub struct DbNowOffset<ST> {
    /// PostgreSQL and MySQL bind the offset in microseconds.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    micros: i64,
    /// SQLite takes the offset as a modifier string such as `-300.000000 seconds`.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    sqlite_modifier: String,
    _st: PhantomData<ST>,
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
        let sign = if micros < 0 { '-' } else { '+' };
        let abs = micros.unsigned_abs();
        DbNowOffset {
            micros,
            sqlite_modifier: format!("{sign}{}.{:06} seconds", abs / 1_000_000, abs % 1_000_000),
            _st: PhantomData,
        }
    }

    /// The current database time minus `micros` microseconds.
    pub fn ago(micros: i64) -> Self {
        Self::new(micros.saturating_neg())
    }
}

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
expression!(DbNowMicros, BigInt);
expression!(DbNow<ST>, ST);
expression!(DbNowOffset<ST>, ST);

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use diesel::pg::Pg;

    impl QueryFragment<Pg> for DbNowMicros {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql("CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)");
            Ok(())
        }
    }
    impl<ST> QueryFragment<Pg> for DbNow<ST> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql("statement_timestamp()");
            Ok(())
        }
    }
    impl<ST> QueryFragment<Pg> for DbNowOffset<ST> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql("(statement_timestamp() + ");
            out.push_bind_param::<BigInt, _>(&self.micros)?;
            out.push_sql(" * INTERVAL '1 microsecond')");
            Ok(())
        }
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use diesel::sqlite::Sqlite;

    impl QueryFragment<Sqlite> for DbNowMicros {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            // julianday is a double: rounding to whole milliseconds (SQLite's clock resolution)
            // makes the value exact.
            out.push_sql(
                "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)",
            );
            Ok(())
        }
    }
    impl<ST> QueryFragment<Sqlite> for DbNow<ST> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_sql("strftime('%Y-%m-%d %H:%M:%f', 'now')");
            Ok(())
        }
    }
    impl<ST> QueryFragment<Sqlite> for DbNowOffset<ST> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
            out.push_sql("strftime('%Y-%m-%d %H:%M:%f', 'now', ");
            out.push_bind_param::<diesel::sql_types::Text, _>(&self.sqlite_modifier)?;
            out.push_sql(")");
            Ok(())
        }
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use diesel::mysql::Mysql;

    impl QueryFragment<Mysql> for DbNowMicros {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql(
                "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00.000000', UTC_TIMESTAMP(6))",
            );
            Ok(())
        }
    }
    impl<ST> QueryFragment<Mysql> for DbNow<ST> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql("UTC_TIMESTAMP(6)");
            Ok(())
        }
    }
    impl<ST> QueryFragment<Mysql> for DbNowOffset<ST> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql("(UTC_TIMESTAMP(6) + INTERVAL ");
            out.push_bind_param::<BigInt, _>(&self.micros)?;
            out.push_sql(" MICROSECOND)");
            Ok(())
        }
    }
}
