//! PostgreSQL: the reference backend. Row locks with `FOR UPDATE SKIP LOCKED`, `RETURNING`,
//! `ON CONFLICT`, `LISTEN/NOTIFY`; one statement per claim and per lease grant.

use std::time::Duration;

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::AstPass;
use diesel::result::Error as DieselError;
use diesel::PgConnection;
use diesel_migrations::EmbeddedMigrations;

use diesel::sql_types::Text;

use super::{raw_connection, BackendKind, Dialect, Kind, Offset, ServerEngine, SqlDialect};

raw_connection!(PgConnection);
impl super::sealed::Sealed for Pg {}

impl SqlDialect for Pg {
    const KIND: BackendKind = BackendKind::Postgres;
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const INT_DIV: &'static str = " / ";
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    // A bound `LIMIT` is planned on every call: a generic plan assumes a tenth of the table,
    // costs more than the custom one, and is never chosen (measured with pg_stat_statements:
    // `claim_batch(50)` planned on each of 6,349 calls, 55 µs each).
    const INLINE_LIMITS: bool = true;

    fn push_now_micros(out: &mut AstPass<'_, '_, Self>) {
        out.push_sql("CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)");
    }

    fn push_now(out: &mut AstPass<'_, '_, Self>, with_time_zone: bool) {
        // A `timestamp` (without time zone) would otherwise get the session's `TimeZone`.
        out.push_sql(if with_time_zone {
            "statement_timestamp()"
        } else {
            "(statement_timestamp() AT TIME ZONE 'UTC')"
        });
    }

    fn push_now_offset<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        offset: &'b Offset,
        with_time_zone: bool,
    ) -> QueryResult<()> {
        out.push_sql("(");
        Self::push_now(out, with_time_zone);
        out.push_sql(" + ");
        out.push_bind_param::<diesel::sql_types::BigInt, _>(&offset.micros)?;
        out.push_sql(" * INTERVAL '1 microsecond')");
        Ok(())
    }

    /// `("col" + <unit> * INTERVAL '1 microsecond')`, the unit read from the value's
    /// microseconds within its second.
    fn push_stored_upper_bound(out: &mut AstPass<'_, '_, Self>, column: &str) -> QueryResult<()> {
        out.push_sql("(");
        out.push_identifier(column)?;
        out.push_sql(" + ");
        super::push_apparent_unit(out, &|out| {
            out.push_sql("(CAST(EXTRACT(MICROSECONDS FROM ");
            out.push_identifier(column)?;
            out.push_sql(") AS BIGINT) % 1000000)");
            Ok(())
        })?;
        out.push_sql(" * INTERVAL '1 microsecond')");
        Ok(())
    }

    super::binds!();
}

impl Dialect for PgConnection {
    const MIGRATIONS: EmbeddedMigrations =
        diesel_migrations::embed_migrations!("migrations/postgres");

    fn with_network_settings(url: &str) -> std::borrow::Cow<'_, str> {
        super::libpq::with_network_settings(url)
    }

    fn write_tx<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        if super::in_transaction(self)? {
            return self.transaction(f);
        }
        self.build_transaction().read_committed().run(f)
    }

    fn write_tx_within<T>(
        &mut self,
        max_wait: Option<Duration>,
        f: impl FnOnce(&mut Self) -> crate::Result<T>,
    ) -> crate::Result<T> {
        super::refuse_nested(self)?;
        self.write_tx(|c| {
            if let Some(max_wait) = max_wait {
                set_lock_timeout(c, &lock_timeout(max_wait))?;
            }
            f(c)
        })
    }

    fn bounded_lock_wait<T>(
        &mut self,
        wait: Duration,
        f: impl FnOnce(&mut Self) -> QueryResult<T>,
    ) -> QueryResult<T> {
        #[derive(QueryableByName)]
        struct Setting {
            #[diesel(sql_type = diesel::sql_types::Text)]
            value: String,
        }
        let previous = diesel::sql_query("SELECT current_setting('lock_timeout') AS value")
            .get_result::<Setting>(self)?
            .value;
        set_lock_timeout(self, &lock_timeout(wait))?;
        let result = f(self);
        // Put back after a failure too: one on our side (a row that does not decode) leaves the
        // transaction going. A database error (the timeout included) aborted it, so the local
        // setting ends with it (or with the savepoint it was made in); putting it back then fails
        // too, and the first error stands.
        let restored = set_lock_timeout(self, &previous);
        let value = result?;
        restored?;
        Ok(value)
    }

    fn server_engine(&mut self) -> QueryResult<ServerEngine> {
        let version =
            diesel::select(diesel::dsl::sql::<Text>("version()")).get_result::<String>(self)?;
        Ok(ServerEngine::from_postgres_version(&version))
    }

    fn replication(&mut self) -> QueryResult<super::Replication> {
        use diesel::sql_types::BigInt;
        let (standbys, names, commit): (i64, String, String) = diesel::select((
            diesel::dsl::sql::<BigInt>("(SELECT count(*) FROM pg_stat_replication)"),
            diesel::dsl::sql::<Text>("current_setting('synchronous_standby_names')"),
            diesel::dsl::sql::<Text>("current_setting('synchronous_commit')"),
        ))
        .get_result(self)?;
        Ok(super::Replication::from_postgres(standbys, &names, &commit))
    }

    fn server_session(&mut self) -> QueryResult<Option<String>> {
        // The backend's pid is unique among a server's live sessions; the server's start time
        // tells servers apart (two behind one load balancer may hand out the same pids).
        diesel::select(diesel::dsl::sql::<Text>(
            "'process ' || pg_backend_pid() || ' of the server started at ' || pg_postmaster_start_time()",
        ))
        .get_result(self)
        .map(Some)
    }
}

/// `max_wait` as a `lock_timeout` value: whole milliseconds, at least 1 (0 means "no limit"),
/// at most what the setting takes (an `int` of milliseconds, about 24.8 days; more is an error).
fn lock_timeout(max_wait: Duration) -> String {
    let millis = super::lock_wait_millis(max_wait).min(i64::from(i32::MAX));
    format!("{millis}ms")
}

/// `lock_timeout` for the rest of the current transaction: `SET LOCAL`, which takes no bind
/// parameter, in its bindable form `set_config(…, true)`.
fn set_lock_timeout(c: &mut PgConnection, value: &str) -> QueryResult<()> {
    diesel::sql_query("SELECT set_config('lock_timeout', $1, true)")
        .bind::<diesel::sql_types::Text, _>(value)
        .execute(c)
        .map(drop)
}

/// PostgreSQL's primary messages for the errors a caller can act on (SQLSTATE in brackets;
/// Diesel exposes the SQLSTATE only for a few kinds).
pub(super) fn classify_message(message: &str) -> Option<Kind> {
    const PATTERNS: &[(&str, Kind)] = &[
        // 55P03 lock_not_available (lock_timeout)
        ("canceling statement due to lock timeout", Kind::Timeout),
        // 57014 query_canceled (statement_timeout)
        (
            "canceling statement due to statement timeout",
            Kind::Timeout,
        ),
        // 55P03 with NOWAIT
        ("could not obtain lock on row", Kind::Timeout),
        // 57P01 admin_shutdown (pg_terminate_backend, smart/fast shutdown)
        (
            "terminating connection due to administrator command",
            Kind::ConnectionLost,
        ),
        // 57P02 crash_shutdown, 57P03 cannot_connect_now
        (
            "terminating connection because of crash of another server process",
            Kind::ConnectionLost,
        ),
        ("the database system is shutting down", Kind::ConnectionLost),
        ("the database system is starting up", Kind::ConnectionLost),
        // 08xxx as libpq reports a broken connection
        (
            "server closed the connection unexpectedly",
            Kind::ConnectionLost,
        ),
        ("no connection to the server", Kind::ConnectionLost),
        ("connection to server", Kind::ConnectionLost),
        // 40P01 deadlock_detected, 40001 serialization_failure
        ("deadlock detected", Kind::Conflict),
        ("could not serialize access", Kind::Conflict),
        // 42P05 duplicate_prepared_statement, 26000 invalid_sql_statement_name, 08P01 (a bind
        // that does not fit the statement), each naming one of the statements Diesel prepares
        // and caches: another session answered, so a transaction pooler is in between
        ("prepared statement \"__diesel_stmt_", Kind::Pooler),
    ];
    super::first_match(PATTERNS, message)
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;

    use super::*;

    fn lock_timeout_now(c: &mut PgConnection) -> String {
        diesel::select(diesel::dsl::sql::<Text>("current_setting('lock_timeout')"))
            .get_result(c)
            .unwrap()
    }

    /// The caller's `lock_timeout` is back after `f`, whether `f` succeeded or failed on the
    /// Rust side; after a database error the transaction is aborted, and that error stands.
    #[test]
    fn bounded_lock_wait_puts_the_callers_lock_timeout_back() {
        let Some(url) = super::super::test_server_url() else {
            return;
        };
        let mut conn = PgConnection::establish(&url).unwrap();
        conn.begin_test_transaction().unwrap();
        conn.batch_execute("SET LOCAL lock_timeout = '7s'").unwrap();
        let wait = Duration::from_millis(250);
        let seen = conn
            .bounded_lock_wait(wait, |c| Ok(lock_timeout_now(c)))
            .unwrap();
        assert_eq!(seen, "250ms", "the bound applies inside");
        assert_eq!(lock_timeout_now(&mut conn), "7s", "after a success");
        let failed = conn.bounded_lock_wait(wait, |_| -> QueryResult<()> {
            Err(DieselError::DeserializationError(
                "a row that does not decode".into(),
            ))
        });
        assert!(matches!(failed, Err(DieselError::DeserializationError(_))));
        assert_eq!(
            lock_timeout_now(&mut conn),
            "7s",
            "after a Rust-side failure"
        );
        let aborted =
            conn.bounded_lock_wait(wait, |c| diesel::sql_query("SELECT 1 / 0").execute(c));
        let Err(DieselError::DatabaseError(_, info)) = aborted else {
            panic!("the statement's own error: {aborted:?}");
        };
        assert!(
            info.message().contains("division by zero"),
            "{}",
            info.message()
        );
    }
}
