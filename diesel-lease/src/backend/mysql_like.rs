// Included twice by `mod.rs`, as `mysql` (Diesel's `Mysql`, `MysqlConnection`) and as
// `mariadb` (`Mariadb`, `MariadbConnection`): `Db` and `Conn` are that module's backend and
// connection types. See the module's docs there.
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::result::Error as DieselError;
use diesel_migrations::EmbeddedMigrations;

use super::{
    raw_connection, BackendKind, Dialect, Offset, ServerEngine, SqlDialect, TransactionEnds,
};

raw_connection!(Conn);

/// Makes the session's next transaction READ COMMITTED.
fn read_committed_next(c: &mut Conn) -> QueryResult<()> {
    c.execute_returning_count(&SetReadCommitted).map(drop)
}

/// `SET TRANSACTION ISOLATION LEVEL READ COMMITTED` as a statement of fixed text with a static
/// query id: Diesel prepares it once per connection and then executes it in one round trip,
/// where `batch_execute` takes three (it switches the multi-statement option on and off).
#[derive(Debug, Clone, Copy, diesel::query_builder::QueryId)]
struct SetReadCommitted;

impl QueryFragment<Db> for SetReadCommitted {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Db>) -> QueryResult<()> {
        out.push_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED");
        Ok(())
    }
}

/// Our write transactions' ends on MySQL ([`super::own_transaction`]): READ COMMITTED, and
/// fewer round trips than Diesel's. Diesel's `MysqlConnection::batch_execute` (and `MariadbConnection`'s) switches the
/// session's multi-statement option on and off around every call: two `COM_SET_OPTION` round
/// trips besides the statement itself. Diesel's own transaction sends `BEGIN` and `COMMIT` that
/// way (three round trips each, six with the isolation level as a call of its own); here the
/// level and `BEGIN` go as one batch (three) and `COMMIT` as a statement prepared once per
/// connection (one).
impl TransactionEnds for Conn {
    fn begin(&mut self) -> QueryResult<()> {
        // `START TRANSACTION` cannot be prepared on MySQL; `SET` and `COMMIT` can.
        self.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN")
    }

    fn commit(&mut self) -> QueryResult<()> {
        self.execute_returning_count(&Commit).map(drop)
    }

    fn rollback(&mut self) -> QueryResult<()> {
        // Also when the server rolled the transaction back itself (a deadlock victim, a Galera
        // certification failure): a `ROLLBACK` with no transaction open is no error.
        self.batch_execute("ROLLBACK")
    }
}

/// `COMMIT`, fixed text and static query id: prepared once per connection.
#[derive(Debug, Clone, Copy, diesel::query_builder::QueryId)]
struct Commit;

impl QueryFragment<Db> for Commit {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Db>) -> QueryResult<()> {
        out.push_sql("COMMIT");
        Ok(())
    }
}

impl super::sealed::Sealed for Db {}

impl SqlDialect for Db {
    const KIND: BackendKind = BackendKind::Mysql;
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const INT_DIV: &'static str = " DIV ";
    const FOR_UPDATE: &'static str = " FOR UPDATE";

    fn push_as_bigint(out: &mut AstPass<'_, '_, Self>, column: &str) -> QueryResult<()> {
        out.push_sql("CAST(");
        out.push_identifier(column)?;
        out.push_sql(" AS SIGNED)");
        Ok(())
    }

    fn push_now_micros(out: &mut AstPass<'_, '_, Self>) {
        out.push_sql("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00.000000', UTC_TIMESTAMP(6))");
    }

    // UTC whatever the session's `time_zone`; MySQL has no `timestamptz`. A `TIMESTAMP` column
    // still converts what it stores from the session's zone (see the `clock` module).
    fn push_now(out: &mut AstPass<'_, '_, Self>, _with_time_zone: bool) {
        out.push_sql("UTC_TIMESTAMP(6)");
    }

    fn push_now_offset<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        offset: &'b Offset,
        _with_time_zone: bool,
    ) -> QueryResult<()> {
        out.push_sql("(UTC_TIMESTAMP(6) + INTERVAL ");
        out.push_bind_param::<diesel::sql_types::BigInt, _>(&offset.micros)?;
        out.push_sql(" MICROSECOND)");
        Ok(())
    }

    /// `(`col` + INTERVAL (<unit>) MICROSECOND)`, the unit read from `MICROSECOND(col)`.
    fn push_stored_upper_bound(out: &mut AstPass<'_, '_, Self>, column: &str) -> QueryResult<()> {
        out.push_sql("(");
        out.push_identifier(column)?;
        out.push_sql(" + INTERVAL (");
        super::push_apparent_unit(out, &|out| {
            out.push_sql("MICROSECOND(");
            out.push_identifier(column)?;
            out.push_sql(")");
            Ok(())
        })?;
        out.push_sql(") MICROSECOND)");
        Ok(())
    }

    super::binds!();
}

impl Dialect for Conn {
    const MIGRATIONS: EmbeddedMigrations = diesel_migrations::embed_migrations!("migrations/mysql");

    fn write_tx<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        let out = read_committed_tx(self, f);
        if out.is_err() {
            forget_prepared_statements(self);
        }
        out
    }

    fn write_tx_or_roll_back<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> QueryResult<Option<T>>,
    ) -> QueryResult<Option<T>> {
        // A rollback the body asked for failed no statement: the cache stays.
        let out = super::rolled_back_as_none(read_committed_tx(self, |c| {
            f(c)?.ok_or(DieselError::RollbackTransaction)
        }));
        if out.is_err() {
            forget_prepared_statements(self);
        }
        out
    }

    fn write_tx_within<T>(
        &mut self,
        max_wait: Option<Duration>,
        f: impl FnOnce(&mut Self) -> crate::Result<T>,
    ) -> crate::Result<T> {
        super::refuse_nested(self)?;
        let Some(max_wait) = max_wait else {
            return self.write_tx(f);
        };
        // A session variable: set for this transaction, then put back, so the caller's later
        // statements on this connection keep their own bound.
        self.write_tx(|c| with_lock_wait(c, max_wait, f))
    }

    fn keyed_write<T>(&mut self, mut f: impl FnMut(&mut Self) -> QueryResult<T>) -> QueryResult<T> {
        if super::in_transaction(self)? {
            return f(self);
        }
        // Applies to the next transaction only: the autocommit statement `f` runs.
        read_committed_next(self)?;
        f(self).inspect_err(|_| {
            // A statement that failed before it touched a table (one that does not exist, one
            // that did not prepare, or none sent) leaves the level pending for the caller's next
            // transaction; a `ROLLBACK` with no transaction open drops it. Its own failure (the
            // connection is gone) adds nothing to `f`'s.
            let _ = self.rollback();
        })
    }

    fn tune(&mut self, _: Duration, mysql_idle_timeout: Option<Duration>) -> QueryResult<()> {
        let Some(idle) = mysql_idle_timeout else {
            return Ok(());
        };
        // Whole seconds, at least 1 (0 is refused by the server); a number of our own, bound.
        let seconds = idle.as_secs().clamp(1, 31_536_000);
        diesel::sql_query("SET SESSION wait_timeout = ?")
            .bind::<diesel::sql_types::Unsigned<diesel::sql_types::BigInt>, _>(seconds)
            .execute(self)
            .map(drop)
    }

    fn bounded_lock_wait<T>(
        &mut self,
        wait: Duration,
        f: impl FnOnce(&mut Self) -> QueryResult<T>,
    ) -> QueryResult<T> {
        // A lock wait timeout rolls back the statement only (innodb_rollback_on_timeout is off
        // by default), so the session's value is put back after a timeout too.
        with_lock_wait(self, wait, f)
    }

    fn server_engine(&mut self) -> QueryResult<ServerEngine> {
        let version = diesel::select(diesel::dsl::sql::<diesel::sql_types::Text>("VERSION()"))
            .get_result::<String>(self)?;
        Ok(ServerEngine::from_mysql_version(&version))
    }

    fn replication(&mut self) -> QueryResult<super::Replication> {
        // `SHOW` answers no row for a variable the server does not have (MySQL has no wsrep_on).
        let on = show::<Variable>(self, "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")?;
        if !on.iter().any(|v| v.value.eq_ignore_ascii_case("ON")) {
            return Ok(super::Replication::Single);
        }
        let size = show::<Variable>(self, "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'")?;
        let nodes = size.first().and_then(|v| v.value.parse().ok()).unwrap_or(0);
        Ok(super::Replication::Galera { nodes })
    }
}

/// [`Dialect::write_tx`]'s transaction. Coordination statements are locking reads, which see
/// the latest committed rows at any isolation level; under REPEATABLE READ (InnoDB's default)
/// they also take gap locks, and `SKIP LOCKED` claims then deadlock on the secondary index they
/// update. Inside the caller's transaction the level cannot change (error 1568): the caller's
/// level stays and this runs as a savepoint.
fn read_committed_tx<T, E>(c: &mut Conn, f: impl FnOnce(&mut Conn) -> Result<T, E>) -> Result<T, E>
where
    E: From<DieselError>,
{
    if super::in_transaction(c)? {
        c.transaction(f)
    } else {
        super::own_transaction(c, f)
    }
}

/// Closes every prepared statement in Diesel's cache of `c` (they are prepared again on their
/// next use), after a transaction failed.
///
/// A cached statement whose execution failed after the server had sent the result's column
/// definitions leaves libmariadb waiting, on that statement's next execution, for the rest of
/// the failed result: the client sits in `poll(-1)` for good (see [`super::Uncached`]). On one
/// server only locking reads fail that way, and the ones that may (a claim's lock of rows by key,
/// the rate limit's key lock) run uncached. On a MariaDB Galera node any
/// statement of a transaction can: a replicated write that conflicts with the transaction
/// aborts it wherever it is (a "brute-force abort"; the server then lists the session as
/// `Killed`), measured on the claim's read-back by key. The failed transaction is rolled back
/// whole and retried; its statements must not come from the cache again. Closing a statement
/// right after its failure is what `Uncached` does on every run, and it returns.
fn forget_prepared_statements(c: &mut Conn) {
    use diesel::connection::CacheSize;
    // Dropping the cache closes its statements; the default (unbounded) cache comes back.
    c.set_prepared_statement_cache_size(CacheSize::Disabled);
    c.set_prepared_statement_cache_size(CacheSize::Unbounded);
}

/// Runs `f` with the session's `innodb_lock_wait_timeout` at `max_wait` (whole seconds, rounded
/// up, at least 1), then puts the session's own value back, whatever `f` returned.
fn with_lock_wait<T, E>(
    c: &mut Conn,
    max_wait: Duration,
    f: impl FnOnce(&mut Conn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DieselError>,
{
    // Whole seconds rounded up, at most the server's maximum (a year's wait and "forever" alike).
    let secs =
        (super::lock_wait_millis(max_wait).saturating_add(999) / 1000).min(MAX_LOCK_WAIT_SECS);
    diesel::sql_query(
        "SET @diesel_lease_lock_wait = @@SESSION.innodb_lock_wait_timeout, \
         SESSION innodb_lock_wait_timeout = ?",
    )
    .bind::<diesel::sql_types::BigInt, _>(secs)
    .execute(c)?;
    let out = f(c);
    // The user variable goes too (assignments run left to right): the session is the caller's.
    let restored = c.batch_execute(
        "SET SESSION innodb_lock_wait_timeout = @diesel_lease_lock_wait, \
         @diesel_lease_lock_wait = NULL",
    );
    let out = out?;
    restored?;
    Ok(out)
}

/// The largest `innodb_lock_wait_timeout` MySQL and MariaDB take, in seconds (about 34 years).
const MAX_LOCK_WAIT_SECS: i64 = 1_073_741_824;

impl super::MysqlLike for Conn {
    const INSERT_RETURNING: bool = INSERT_RETURNING;

    fn inserted_id(&mut self) -> QueryResult<i64> {
        let id: u64 = diesel::select(last_insert_id()).get_result(self)?;
        i64::try_from(id).map_err(|e| DieselError::DeserializationError(Box::new(e)))
    }
}

diesel::define_sql_function! {
    /// The auto-increment value this connection's last insert generated.
    fn last_insert_id() -> diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
}

/// A row of `SHOW VARIABLES` or `SHOW STATUS`.
#[derive(diesel::QueryableByName)]
struct Variable {
    #[diesel(sql_type = diesel::sql_types::Text, column_name = "Value")]
    value: String,
}

/// The rows of a `SHOW` statement (a fixed text: no user input reaches it).
fn show<T: diesel::QueryableByName<Db> + 'static>(
    c: &mut Conn,
    statement: &'static str,
) -> QueryResult<Vec<T>> {
    diesel::sql_query(statement).load(c)
}
