//! The database's clock, as Diesel expressions.
//!
//! diesel-lease never asks the client for the time: two servers whose clocks disagree would
//! otherwise disagree about whether a lease has expired (the classic pitfall of client-clock mutexes such as django-db-mutex).
//! Every "now" in a diesel-lease statement is one of these expressions, evaluated by the server.
//!
//! Every time is compared in one zone, UTC, whatever each session's time zone: workers whose
//! sessions run in different zones (or in one zone across a daylight-saving change) agree about
//! how old a claim or a job run is. The SQL of [`DbNow`] and of the offset form (now plus a
//! duration) depends on the column's type (an instant, or a wall-clock time without a zone), which
//! `#[derive(Claimable)]` passes on:
//!
//! | expression | PostgreSQL | SQLite | MySQL / MariaDB |
//! |---|---|---|---|
//! | now in µs (built-in tables) | `clock_timestamp()` as µs since 1970 | `julianday('now')` as µs (ms resolution) | `UTC_TIMESTAMP(6)` as µs |
//! | [`DbNow`], `timestamp` column (`Timestamp`, `Datetime`) | `(statement_timestamp() AT TIME ZONE 'UTC')` | `strftime('%Y-%m-%d %H:%M:%f','now')` (UTC) | `UTC_TIMESTAMP(6)` |
//! | [`DbNow`], `timestamptz` column (`Timestamptz`) | `statement_timestamp()` | — | — |
//! | now plus an offset | `(<DbNow> + $µs * INTERVAL '1 microsecond')` | `strftime(…, 'now', '±s.ffffff seconds')` | `(UTC_TIMESTAMP(6) + INTERVAL $µs MICROSECOND)` |
//!
//! The built-in lease and semaphore tables store microseconds since the epoch, which no time zone
//! changes.
//!
//! Map each column with its real type: a PostgreSQL `timestamptz` column mapped as `Timestamp`
//! would receive a UTC wall-clock time that PostgreSQL reads in the session's zone.
//!
//! A MySQL `TIMESTAMP` column, unlike `DATETIME`, converts what it stores from the session's
//! `time_zone`, and back on read. Diesel maps either kind as `Timestamp`, so the type cannot tell
//! them apart and diesel-lease writes `UTC_TIMESTAMP(6)` into both: a `TIMESTAMP` column holds
//! the right instant only when
//! written by a session at `time_zone = '+00:00'`, and sessions in different zones disagree about
//! it by their offsets (a claim written east of the reader looks hours old and is rescued at once;
//! one written west of it looks hours in the future). Use `DATETIME(6)`, or run every session at
//! `+00:00` (the server's `default_time_zone`, or `SET time_zone` on each connection).

use std::marker::PhantomData;

use diesel::expression::{
    is_aggregate, AppearsOnTable, Expression, SelectableExpression, TypedExpressionType,
    ValidGrouping,
};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, SingleValue, SqlType};
use diesel::QueryResult;

use crate::backend::{Offset, SqlDialect};

// The expression types of the statements diesel-lease writes, and the column types they take:
// `pub` for the derive and the CLI (through `__private`), in a private module: a caller writes
// `db_now`, never these.
pub(crate) mod internal {
    use super::*;

    /// Marker for the SQL timestamp types [`DbNow`] and `DbNowOffset` can produce.
    ///
    /// Implemented for `Timestamp` (every backend), `Timestamptz` (PostgreSQL) and `Datetime`
    /// (MySQL), and their `Nullable` forms.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not a timestamp type",
        label = "diesel-lease needs a timestamp column here",
        note = "map a column of SQL type `Timestamp`, `Timestamptz` (PostgreSQL) or `Datetime` (MySQL), possibly `Nullable`"
    )]
    // `Send + Sync + 'static` (every SQL type is a unit struct): statements typed by it travel to a
    // claim guard's heartbeat thread.
    pub trait TimestampType:
        SqlType + SingleValue + TypedExpressionType + Send + Sync + 'static
    {
        /// Whether a value is an instant (PostgreSQL `timestamptz`), which the database compares
        /// across time zones itself. Otherwise it is a wall-clock reading without a zone, and
        /// diesel-lease writes and compares it in UTC.
        const WITH_TIME_ZONE: bool = false;
        /// Whether the column may hold `NULL` (a not-before column's `NULL` means "at once").
        const NULLABLE: bool = false;
    }
    impl TimestampType for diesel::sql_types::Timestamp {}
    impl TimestampType for diesel::sql_types::Nullable<diesel::sql_types::Timestamp> {
        const NULLABLE: bool = true;
    }
    /// The database's current time in microseconds since the Unix epoch, as a `BIGINT`.
    ///
    /// Used by the built-in lease and semaphore tables, which store times as integers so that the
    /// same arithmetic (`expires_at = now + ttl`) works identically on every backend.
    #[derive(Debug, Clone, Copy, Default, QueryId)]
    pub(crate) struct DbNowMicros;

    /// The database's current time plus an offset (negative: minus), as a timestamp of SQL type `ST`.
    #[derive(Debug, Clone, QueryId)]
    pub(crate) struct DbNowOffset<ST> {
        pub(crate) offset: Offset,
        pub(crate) _st: PhantomData<ST>,
    }
}
pub(crate) use internal::{DbNowMicros, DbNowOffset, TimestampType};

#[cfg(feature = "postgres")]
impl TimestampType for diesel::sql_types::Timestamptz {
    const WITH_TIME_ZONE: bool = true;
}
#[cfg(feature = "postgres")]
impl TimestampType for diesel::sql_types::Nullable<diesel::sql_types::Timestamptz> {
    const WITH_TIME_ZONE: bool = true;
    const NULLABLE: bool = true;
}
#[cfg(feature = "__mysql_like")]
impl TimestampType for diesel::sql_types::Datetime {}
#[cfg(feature = "__mysql_like")]
impl TimestampType for diesel::sql_types::Nullable<diesel::sql_types::Datetime> {
    const NULLABLE: bool = true;
}

/// The database's current time as a timestamp of SQL type `ST` (see the module docs).
#[derive(Debug, Clone, Copy, QueryId)]
pub struct DbNow<ST>(PhantomData<ST>);

/// The database's current time as a value to write: `row.claim_if_null(conn, db_now)` sets a
/// `claim_if_null` column to it.
///
/// Works for `Timestamp` columns, nullable or not (and `Timestamptz` on PostgreSQL, `Datetime` on
/// MySQL).
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct db_now;

macro_rules! db_now_as {
    ($($(#[$cfg:meta])* $st:ty),*) => {$(
        $(#[$cfg])*
        impl diesel::expression::AsExpression<$st> for db_now {
            type Expression = DbNow<$st>;
            fn as_expression(self) -> Self::Expression {
                DbNow::new()
            }
        }
        $(#[$cfg])*
        impl diesel::expression::AsExpression<diesel::sql_types::Nullable<$st>> for db_now {
            type Expression = DbNow<diesel::sql_types::Nullable<$st>>;
            fn as_expression(self) -> Self::Expression {
                DbNow::new()
            }
        }
    )*};
}
db_now_as!(
    diesel::sql_types::Timestamp,
    #[cfg(feature = "postgres")]
    diesel::sql_types::Timestamptz,
    #[cfg(feature = "__mysql_like")]
    diesel::sql_types::Datetime
);

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
    pub(crate) fn new(micros: i64) -> Self {
        DbNowOffset {
            offset: Offset::new(micros),
            _st: PhantomData,
        }
    }

    /// The current database time minus `micros` microseconds.
    pub(crate) fn ago(micros: i64) -> Self {
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

impl<DB: SqlDialect, ST: TimestampType> QueryFragment<DB> for DbNow<ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_now(&mut out, ST::WITH_TIME_ZONE);
        Ok(())
    }
}

impl<DB: SqlDialect, ST: TimestampType> QueryFragment<DB> for DbNowOffset<ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_now_offset(&mut out, &self.offset, ST::WITH_TIME_ZONE)
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

/// The clock's SQL per backend and per column type: UTC wall-clock time for `timestamp`
/// columns, the instant for `timestamptz`, whatever the session's time zone.
#[cfg(test)]
mod tests {
    use std::fmt::Display;

    use diesel::backend::Backend;
    use diesel::query_builder::DebugQuery;
    use diesel::sql_types::{Nullable, Timestamp};

    use super::{DbNow, DbNowOffset, TimestampType};

    /// `(now, now - 5 s)` as SQL text with binds, for column type `ST` on backend `DB`.
    fn now_and_cutoff<DB, ST>() -> (String, String)
    where
        DB: Backend,
        ST: TimestampType,
        for<'a> DebugQuery<'a, DbNow<ST>, DB>: Display,
        for<'a> DebugQuery<'a, DbNowOffset<ST>, DB>: Display,
    {
        (
            diesel::debug_query::<DB, _>(&DbNow::<ST>::new()).to_string(),
            diesel::debug_query::<DB, _>(&DbNowOffset::<ST>::ago(5_000_000)).to_string(),
        )
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_timestamp_is_utc_and_timestamptz_the_instant() {
        use diesel::pg::Pg;
        use diesel::sql_types::Timestamptz;
        let utc = (
            "(statement_timestamp() AT TIME ZONE 'UTC') -- binds: []".to_owned(),
            "((statement_timestamp() AT TIME ZONE 'UTC') + $1 * INTERVAL '1 microsecond') -- binds: [-5000000]"
                .to_owned(),
        );
        assert_eq!(now_and_cutoff::<Pg, Timestamp>(), utc);
        assert_eq!(now_and_cutoff::<Pg, Nullable<Timestamp>>(), utc);
        let instant = (
            "statement_timestamp() -- binds: []".to_owned(),
            "(statement_timestamp() + $1 * INTERVAL '1 microsecond') -- binds: [-5000000]"
                .to_owned(),
        );
        assert_eq!(now_and_cutoff::<Pg, Timestamptz>(), instant);
        assert_eq!(now_and_cutoff::<Pg, Nullable<Timestamptz>>(), instant);
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_is_utc() {
        use diesel::sqlite::Sqlite;
        let utc = (
            "strftime('%Y-%m-%d %H:%M:%f', 'now') -- binds: []".to_owned(),
            "strftime('%Y-%m-%d %H:%M:%f', 'now', ?) -- binds: [\"-5.000000 seconds\"]".to_owned(),
        );
        assert_eq!(now_and_cutoff::<Sqlite, Timestamp>(), utc);
        assert_eq!(now_and_cutoff::<Sqlite, Nullable<Timestamp>>(), utc);
    }

    #[cfg(feature = "__mysql_like")]
    #[test]
    fn mysql_is_utc_for_datetime_and_timestamp() {
        use diesel::sql_types::Datetime;
        let utc = (
            "UTC_TIMESTAMP(6) -- binds: []".to_owned(),
            "(UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) -- binds: [-5000000]".to_owned(),
        );
        macro_rules! utc_on {
            ($db:ty) => {
                assert_eq!(now_and_cutoff::<$db, Timestamp>(), utc);
                assert_eq!(now_and_cutoff::<$db, Nullable<Timestamp>>(), utc);
                assert_eq!(now_and_cutoff::<$db, Datetime>(), utc);
                assert_eq!(now_and_cutoff::<$db, Nullable<Datetime>>(), utc);
            };
        }
        #[cfg(feature = "mysql")]
        utc_on!(diesel::mysql::Mysql);
        #[cfg(feature = "mariadb")]
        utc_on!(diesel::mariadb::Mariadb);
    }
}
