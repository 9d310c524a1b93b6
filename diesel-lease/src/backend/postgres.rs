//! PostgreSQL: the reference backend. Row locks with `FOR UPDATE SKIP LOCKED`, `RETURNING`,
//! `ON CONFLICT`, `LISTEN/NOTIFY`; one statement per claim and per lease grant.

use std::time::{Duration, Instant};

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::result::Error as DieselError;
use diesel::PgConnection;
use diesel_migrations::EmbeddedMigrations;

use super::{raw_connection, BackendKind, Dialect, Kind, LeaseConnection, SqlDialect};
use crate::claim::statements::{
    claim_assignments, column_list, pick_from, qualified, ClaimParts, ClaimSql, ClaimStmt, Dynamic,
    Exec,
};
use crate::clock::Offset;
use crate::lease::statements::{grant_by_upsert, lease_statements, LeaseStatements};
use crate::semaphore::statements::{
    insert_returning_statements, semaphore_statements, SemaphoreStatements,
};

raw_connection!(PgConnection);
impl super::sealed::Sealed for Pg {}

impl SqlDialect for Pg {
    const KIND: BackendKind = BackendKind::Postgres;
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const INT_DIV: &'static str = " / ";
    const FOR_UPDATE: &'static str = " FOR UPDATE";

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
        crate::clock::push_apparent_unit(out, &|out| {
            out.push_sql("(CAST(EXTRACT(MICROSECONDS FROM ");
            out.push_identifier(column)?;
            out.push_sql(") AS BIGINT) % 1000000)");
            Ok(())
        })?;
        out.push_sql(" * INTERVAL '1 microsecond')");
        Ok(())
    }

    /// The claim in one statement:
    /// `WITH picked AS (SELECT pk … ORDER BY … LIMIT $n FOR UPDATE SKIP LOCKED)
    ///  UPDATE t SET … FROM picked WHERE t.pk = picked.pk RETURNING …`.
    /// The CTE is evaluated once, so the statement never claims more than `$n` rows (an
    /// `IN (subquery)` may be re-run by the planner and claim more).
    fn push_claim<'b, M: ClaimSql<Pg>>(
        out: &mut AstPass<'_, 'b, Pg>,
        stmt: &'b ClaimStmt<'_, M, Pg>,
    ) -> QueryResult<()> {
        out.push_sql("WITH ");
        out.push_identifier("picked")?;
        out.push_sql(" AS (SELECT ");
        column_list(out, M::PK)?;
        pick_from(out, stmt.parts, stmt.filter, &stmt.limit)?;
        out.push_sql(" FOR UPDATE SKIP LOCKED) UPDATE ");
        M::push_table(out, &stmt.parts.table)?;
        claim_assignments(out, stmt.parts)?;
        out.push_sql(" FROM ");
        out.push_identifier("picked")?;
        out.push_sql(" WHERE ");
        for (i, pk) in M::PK.iter().enumerate() {
            if i > 0 {
                out.push_sql(" AND ");
            }
            qualified(out, stmt.parts, pk)?;
            out.push_sql(" = ");
            out.push_identifier("picked")?;
            out.push_sql(".");
            out.push_identifier(pk)?;
        }
        out.push_sql(" RETURNING ");
        M::push_select(out, &stmt.parts.select)
    }

    super::binds!();
}

/// The channel the pools' listeners hear: semaphore changes (the payload is the resource name)
/// and claim rows that became ready (`claim:` and the table, as Diesel quotes it).
macro_rules! channel {
    () => {
        "diesel_lease_semaphores"
    };
}
const CHANNEL: &str = channel!();
const LISTEN: &str = concat!("LISTEN ", channel!());
const UNLISTEN: &str = concat!("UNLISTEN ", channel!());

/// How often a listening connection looks for a notification that arrived. Local (reads the
/// socket buffer), no query.
const NOTIFICATION_CHECK: Duration = Duration::from_millis(2);

impl LeaseConnection for PgConnection {}

impl Dialect for PgConnection {
    const KIND: BackendKind = BackendKind::Postgres;
    const MIGRATIONS: EmbeddedMigrations =
        diesel_migrations::embed_migrations!("migrations/postgres");
    const NOTIFICATIONS: bool = true;

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

    fn claim_sql<M: ClaimSql<Pg>>(parts: &ClaimParts<M, Pg>, limit: i64) -> String {
        diesel::debug_query::<Pg, _>(&ClaimStmt::new(parts, limit, None)).to_string()
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
        // A failure (the timeout included) aborts the transaction, and the local setting ends
        // with it (or with the savepoint it was made in).
        let value = f(self)?;
        set_lock_timeout(self, &previous)?;
        Ok(value)
    }

    fn install_ready_trigger(&mut self, table: &dyn QueryFragment<Pg>) -> QueryResult<()> {
        self.transaction(|c| {
            diesel::sql_query(READY_FUNCTION).execute(c)?;
            for step in [TriggerStep::Drop, TriggerStep::Create] {
                c.execute_returning_count(&Exec::<_, Dynamic>::new(&ReadyTrigger { table, step }))?;
            }
            Ok(())
        })
    }
}

/// `max_wait` as a `lock_timeout` value: whole milliseconds, at least 1 (0 means "no limit").
fn lock_timeout(max_wait: Duration) -> String {
    format!("{}ms", super::lock_wait_millis(max_wait))
}

/// `lock_timeout` for the rest of the current transaction: `SET LOCAL`, which takes no bind
/// parameter, in its bindable form `set_config(…, true)`.
fn set_lock_timeout(c: &mut PgConnection, value: &str) -> QueryResult<()> {
    diesel::sql_query("SELECT set_config('lock_timeout', $1, true)")
        .bind::<diesel::sql_types::Text, _>(value)
        .execute(c)
        .map(drop)
}

impl LeaseStatements for PgConnection {
    lease_statements!();

    grant_by_upsert!(Pg);
}

impl SemaphoreStatements for PgConnection {
    semaphore_statements!(.for_update());

    insert_returning_statements!();

    fn control(
        &mut self,
        ops: &dyn crate::semaphore::ControlTableOps,
        resource: Option<&str>,
        op: crate::semaphore::ControlOp<'_>,
    ) -> QueryResult<crate::semaphore::ControlOut> {
        ops.on_pg(self, resource, op)
    }

    fn notifications(&self) -> bool {
        true
    }

    fn notify(&mut self, resource: &str) -> QueryResult<()> {
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<diesel::sql_types::Text, _>(CHANNEL)
            .bind::<diesel::sql_types::Text, _>(resource)
            .execute(self)
            .map(drop)
    }

    fn listen(&mut self, on: bool) -> QueryResult<()> {
        diesel::sql_query(if on { LISTEN } else { UNLISTEN }).execute(self)?;
        if !on {
            // Drop what arrived meanwhile, so a pooled connection goes back clean.
            for notification in self.notifications_iter() {
                notification?;
            }
        }
        Ok(())
    }

    fn wait_for_notifications(&mut self, max: Duration) -> QueryResult<Vec<String>> {
        let deadline = Instant::now() + max;
        loop {
            // Reads what the socket already holds; no query, no round trip.
            let mut notified = Vec::new();
            for notification in self.notifications_iter() {
                let notification = notification?;
                if notification.channel == CHANNEL {
                    notified.push(notification.payload);
                }
            }
            let now = Instant::now();
            if !notified.is_empty() || now >= deadline {
                return Ok(notified);
            }
            std::thread::sleep(NOTIFICATION_CHECK.min(deadline - now));
        }
    }

    fn name_session(&mut self, name: &str) -> QueryResult<()> {
        diesel::sql_query("SELECT set_config('application_name', $1, false)")
            .bind::<diesel::sql_types::Text, _>(name)
            .execute(self)
            .map(drop)
    }
}

/// The trigger function behind [`Dialect::install_ready_trigger`]: after an insert, one
/// notification on the listeners' channel per way a claim model may name the table (bare, and
/// schema-qualified), each quoted as Diesel quotes identifiers, which is how waiters name it.
const READY_FUNCTION: &str = concat!(
    r#"CREATE OR REPLACE FUNCTION diesel_lease_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('"#,
    channel!(),
    r#"', 'claim:"' || replace(TG_TABLE_NAME, '"', '""') || '"');
    PERFORM pg_notify('"#,
    channel!(),
    r#"', 'claim:"' || replace(TG_TABLE_SCHEMA, '"', '""') || '"."'
        || replace(TG_TABLE_NAME, '"', '""') || '"');
    RETURN NULL;
END $$"#
);

#[derive(Clone, Copy)]
enum TriggerStep {
    Drop,
    Create,
}

/// `DROP TRIGGER IF EXISTS diesel_lease_ready ON t` or `CREATE TRIGGER diesel_lease_ready AFTER
/// INSERT ON t FOR EACH STATEMENT …` (once per statement: a bulk insert wakes the waiters once).
struct ReadyTrigger<'a> {
    table: &'a dyn QueryFragment<Pg>,
    step: TriggerStep,
}

impl QueryFragment<Pg> for ReadyTrigger<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        match self.step {
            TriggerStep::Drop => out.push_sql("DROP TRIGGER IF EXISTS diesel_lease_ready ON "),
            TriggerStep::Create => {
                out.push_sql("CREATE TRIGGER diesel_lease_ready AFTER INSERT ON ")
            }
        }
        self.table.walk_ast(out.reborrow())?;
        if let TriggerStep::Create = self.step {
            out.push_sql(" FOR EACH STATEMENT EXECUTE FUNCTION diesel_lease_notify_ready()");
        }
        Ok(())
    }
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
    ];
    super::first_match(PATTERNS, message)
}
