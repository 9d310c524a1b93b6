//! MySQL 8 / MariaDB 10.6+: row locks with `SKIP LOCKED`, but no `UPDATE … RETURNING` and no
//! `ON CONFLICT`. Claims and lease grants take the fewest statements that are safe, in one READ
//! COMMITTED transaction; a matched-rows count stands in for `RETURNING` wherever the predicate
//! holds the old state (so "one row matched" means "this caller won").

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::mysql::Mysql;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::MysqlConnection;
use diesel_migrations::EmbeddedMigrations;
use lease_core::InsertOutcome;

use super::{raw_connection, BackendKind, Dialect, Kind, LeaseConnection, SqlDialect, Uncached};
use crate::claim::statements::{
    shape, AnyPk, ByKey, ByKeyStmt, ClaimModel, ClaimParts, ClaimSql, Dynamic, Exec, Filter,
    NoFilter, PickStmt, StmtId, Which,
};
use crate::clock::Offset;
use crate::lease::statements::{
    lease_statements, mysql_insert, mysql_takeover, Grant, Granted, LeaseStatements,
};
use crate::once::RunInsertOnce;
use crate::semaphore::statements::{semaphore_statements, NewTicket, SemaphoreStatements};

raw_connection!(MysqlConnection);

/// Makes the session's next transaction READ COMMITTED.
fn read_committed_next(c: &mut MysqlConnection) -> QueryResult<()> {
    c.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
}

impl super::sealed::Sealed for Mysql {}

impl SqlDialect for Mysql {
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
        crate::clock::push_apparent_unit(out, &|out| {
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

impl LeaseConnection for MysqlConnection {}

impl Dialect for MysqlConnection {
    const KIND: BackendKind = BackendKind::Mysql;
    const MIGRATIONS: EmbeddedMigrations = diesel_migrations::embed_migrations!("migrations/mysql");

    fn write_tx<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>,
    {
        // Coordination statements are locking reads, which see the latest committed rows at any
        // isolation level; under REPEATABLE READ (InnoDB's default) they also take gap locks, and
        // `SKIP LOCKED` claims then deadlock on the secondary index they update. Inside the
        // caller's transaction the level cannot change (error 1568): the caller's level stays and
        // we run as a savepoint.
        if !super::in_transaction(self)? {
            read_committed_next(self)?;
        }
        self.transaction(f)
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

    fn keyed_write<T>(&mut self, f: impl FnOnce(&mut Self) -> QueryResult<T>) -> QueryResult<T> {
        if !super::in_transaction(self)? {
            // Applies to the next transaction only: the autocommit statement `f` runs.
            read_committed_next(self)?;
        }
        f(self)
    }

    fn tune(&mut self, tuning: &crate::pool::ConnectionTuning) -> QueryResult<()> {
        let Some(idle) = tuning.mysql_idle_timeout else {
            return Ok(());
        };
        // Whole seconds, at least 1 (0 is refused by the server); a number of our own, bound.
        let seconds = idle.as_secs().clamp(1, 31_536_000);
        diesel::sql_query("SET SESSION wait_timeout = ?")
            .bind::<diesel::sql_types::Unsigned<diesel::sql_types::BigInt>, _>(seconds)
            .execute(self)
            .map(drop)
    }

    fn claim_sql<M: ClaimSql<Mysql>>(parts: &ClaimParts<M, Mysql>, limit: i64) -> String {
        diesel::debug_query::<Mysql, _>(&PickStmt::locking(parts, limit, None)).to_string()
    }

    fn claim_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Mysql>,
    ) -> QueryResult<Vec<M>> {
        // No UPDATE … RETURNING: pick and lock, mark, read back, in one transaction.
        self.write_transaction(|c| {
            // Never waits for a row lock: see `reap_skip_locked`.
            crate::claim::statements::reap_skip_locked(c, parts)?;
            // Stale claims first (rescues go before new work), then ready rows, each picked on
            // its own: one pick of both (an `OR`) may be planned as a sort of every match, whose
            // locking read keeps the index entries of rows other claims are marking. Stale
            // claims are found by a plain read, then locked by key: a locking range scan keeps
            // the index record that ends its range, often the next ready row, which the claim
            // marking that row then waits for (claims deadlocked with each other). Locking
            // reads run outside the statement cache, whatever their query id: see `Uncached`.
            let mut picked = Vec::new();
            if parts.cutoff.is_some() {
                let probe = PickStmt::only(parts, limit, filter, Which::Stale, false);
                let stale = M::load::<Dynamic>(c, &probe)?;
                if !stale.is_empty() {
                    let stale = AnyPk::<M>::of(&stale);
                    let lock = ByKeyStmt {
                        parts,
                        rows: &stale,
                        step: ByKey::LockStale,
                    };
                    picked = M::load::<Dynamic>(c, &Uncached(lock))?;
                }
            }
            let left = limit - i64::try_from(picked.len()).unwrap_or(limit);
            if left > 0 {
                let ready = PickStmt::only(parts, left, filter, Which::Ready, true);
                picked.extend(M::load::<Dynamic>(c, &Uncached(ready))?);
            }
            if picked.is_empty() {
                return Ok(picked);
            }
            let rows = AnyPk::<M>::of(&picked);
            let by_key = |step| ByKeyStmt {
                parts,
                rows: &rows,
                step,
            };
            let (mark, read) = (by_key(ByKey::MarkClaimed), by_key(ByKey::ReadBack));
            if picked.len() == 1 {
                // One row (every `claim_next`): the text is fixed, prepare it once.
                type One<M, const S: u8> = StmtId<M, shape::ByKeyOne<S>, NoFilter, false, false>;
                c.execute_returning_count(&Exec::<_, One<M, 0>>::new(&mark))?;
                return M::load::<One<M, 1>>(c, &read);
            }
            c.execute_returning_count(&Exec::<_, Dynamic>::new(&mark))?;
            M::load::<Dynamic>(c, &read)
        })
    }

    fn lock_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Mysql>,
    ) -> QueryResult<Vec<M>> {
        M::load::<Dynamic>(self, &Uncached(PickStmt::locking(parts, limit, filter)))
    }

    fn finish_rows<M: ClaimModel<Self>>(
        &mut self,
        rows: &[crate::claim::batch::BatchRow<M>],
        to: crate::claim::Finish,
    ) -> QueryResult<Vec<M>> {
        // No UPDATE … RETURNING: lock the rows still ours, then change exactly those.
        self.write_transaction(|c| crate::claim::batch::lock_then_update(c, rows, to))
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

    fn insert_once<I, R>(&mut self, insert: I) -> QueryResult<InsertOutcome<R::Output>>
    where
        I: QueryFragment<Mysql> + QueryId,
        R: RunInsertOnce<Self, I>,
    {
        // No ON CONFLICT … DO NOTHING (INSERT IGNORE would also hide unrelated errors) and no
        // RETURNING. A duplicate-key error does not abort a MySQL transaction, so the plain insert
        // is safe inside the caller's transaction.
        let generated = if R::RETURNS_ROW {
            auto_increment_column(self, &R::Table::default().from_clause())?
        } else {
            None
        };
        let Some(column) = generated else {
            // No row asked for, or nothing to find it by: without an AUTO_INCREMENT column the
            // key came from the insert (or a default), which only the caller knows.
            return Ok(match insert_unless_duplicate(self, &insert)? {
                true => InsertOutcome::Inserted(None),
                false => InsertOutcome::AlreadyExists,
            });
        };
        // The row is read back in the transaction that inserted it (the caller's, or ours), so
        // nobody can change or delete it in between. Ours rolls the insert back if the read
        // fails; in the caller's transaction, the caller's error handling does.
        let insert_and_read_back = |c: &mut Self| {
            // LAST_INSERT_ID() keeps the last value generated on this connection, maybe by an
            // earlier insert into another table; zero says "this insert generated none".
            diesel::select(remember_insert_id(0)).get_result::<u64>(c)?;
            if !insert_unless_duplicate(c, &insert)? {
                return Ok(InsertOutcome::AlreadyExists);
            }
            let key: u64 = diesel::select(last_insert_id()).get_result(c)?;
            if key == 0 {
                // The insert gave the AUTO_INCREMENT column its value itself.
                return Ok(InsertOutcome::Inserted(None));
            }
            let key =
                i64::try_from(key).map_err(|e| DieselError::DeserializationError(Box::new(e)))?;
            let rows = R::load_where(c, &column, key)?;
            if rows.len() != 1 {
                return Err(DieselError::QueryBuilderError(
                    format!(
                        "insert_once: {} rows have the AUTO_INCREMENT value {key} this insert \
                         generated in column `{column}`, expected exactly the inserted one",
                        rows.len()
                    )
                    .into(),
                ));
            }
            Ok(InsertOutcome::Inserted(rows.into_iter().next()))
        };
        if super::in_transaction(self)? {
            insert_and_read_back(self)
        } else {
            self.write_transaction(insert_and_read_back)
        }
    }
}

/// Runs `f` with the session's `innodb_lock_wait_timeout` at `max_wait` (whole seconds, rounded
/// up, at least 1), then puts the session's own value back, whatever `f` returned.
fn with_lock_wait<T, E>(
    c: &mut MysqlConnection,
    max_wait: Duration,
    f: impl FnOnce(&mut MysqlConnection) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DieselError>,
{
    let secs = (super::lock_wait_millis(max_wait) + 999) / 1000;
    diesel::sql_query(
        "SET @diesel_lease_lock_wait = @@SESSION.innodb_lock_wait_timeout, \
         SESSION innodb_lock_wait_timeout = ?",
    )
    .bind::<diesel::sql_types::BigInt, _>(secs)
    .execute(c)?;
    let out = f(c);
    let restored =
        c.batch_execute("SET SESSION innodb_lock_wait_timeout = @diesel_lease_lock_wait");
    let out = out?;
    restored?;
    Ok(out)
}

/// Runs a plain insert: `true` when it inserted, `false` when a unique constraint already holds an
/// equal row (the duplicate-key error, which leaves a transaction usable on MySQL).
fn insert_unless_duplicate<I>(conn: &mut MysqlConnection, insert: &I) -> QueryResult<bool>
where
    I: QueryFragment<Mysql> + QueryId,
{
    match conn.execute_returning_count(insert) {
        Ok(_) => Ok(true),
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The catalog's view of the columns of every table, as far as `insert_once` reads it.
mod catalog {
    diesel::table! {
        information_schema.columns (table_schema, table_name, column_name) {
            table_schema -> Text,
            table_name -> Text,
            column_name -> Nullable<Text>,
            extra -> Nullable<Text>,
        }
    }

    diesel::define_sql_function! {
        /// The connection's current database (schema).
        fn database() -> diesel::sql_types::Nullable<diesel::sql_types::Text>;
    }
}

/// The AUTO_INCREMENT column of the table `from` names, if it has one (a table has at most one),
/// as the database's catalog spells it.
fn auto_increment_column<F>(conn: &mut MysqlConnection, from: &F) -> QueryResult<Option<String>>
where
    F: QueryFragment<Mysql>,
{
    use catalog::columns as c;
    let rendered = diesel::debug_query::<Mysql, _>(from).to_string();
    let Some((schema, table)) = rendered.strip_suffix(" -- binds: []").and_then(table_path) else {
        return Err(DieselError::QueryBuilderError(
            format!("insert_once: `{rendered}` is not a table name").into(),
        ));
    };
    let query = c::table
        .select(c::column_name)
        .filter(c::table_name.eq(table))
        .filter(c::extra.like("%auto_increment%"))
        .into_boxed();
    let query = match schema {
        Some(schema) => query.filter(c::table_schema.eq(schema)),
        None => query.filter(c::table_schema.nullable().eq(catalog::database())),
    };
    Ok(query.first::<Option<String>>(conn).optional()?.flatten())
}

/// The schema (when qualified) and name of a table from its MySQL spelling, `` `name` `` or
/// `` `schema`.`name` `` with backticks doubled inside: the reverse of Diesel's
/// `push_identifier`. `None` for anything else.
fn table_path(sql: &str) -> Option<(Option<String>, String)> {
    let mut parts = Vec::new();
    let mut rest = sql;
    loop {
        rest = rest.strip_prefix('`')?;
        let mut ident = String::new();
        loop {
            let end = rest.find('`')?;
            ident.push_str(&rest[..end]);
            rest = &rest[end + 1..];
            match rest.strip_prefix('`') {
                Some(after) => {
                    ident.push('`');
                    rest = after;
                }
                None => break,
            }
        }
        parts.push(ident);
        match rest.strip_prefix('.') {
            Some(after) => rest = after,
            None => break,
        }
    }
    let table = parts.pop()?;
    match (rest.is_empty(), parts.pop(), parts.is_empty()) {
        (true, schema, true) => Some((schema, table)),
        _ => None,
    }
}

impl LeaseStatements for MysqlConnection {
    lease_statements!();

    fn lease_grant(&mut self, g: &Grant<'_>) -> QueryResult<Option<Granted>> {
        use crate::lease::schema::diesel_lease_leases as l;
        // Step 1: take the existing row over if it is grantable. READ COMMITTED (see
        // `write_transaction`): no gap lock when the name has no row yet.
        let taken = self.write_transaction(|c| {
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
        // Step 2, the name's first use: a plain insert.
        match mysql_insert!(g).execute(self) {
            Ok(_) => Ok(Some(Granted {
                token: 1,
                next_run: l::table
                    .find(g.name)
                    .select(l::next_run)
                    .first::<Option<i64>>(self)?,
            })),
            // The row exists (held), or a concurrent first insert of the same name won; InnoDB
            // may resolve three concurrent inserts of one key with a deadlock for one of them.
            Err(DieselError::DatabaseError(
                DatabaseErrorKind::UniqueViolation | DatabaseErrorKind::SerializationFailure,
                _,
            )) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn lease_grant_sql(g: &Grant<'_>) -> String {
        format!(
            "{};\n{}",
            diesel::debug_query::<Mysql, _>(&mysql_takeover!(g)),
            diesel::debug_query::<Mysql, _>(&mysql_insert!(g))
        )
    }
}

/// The auto-increment value the connection's last insert generated.
pub(crate) fn inserted_id(conn: &mut MysqlConnection) -> QueryResult<i64> {
    let id: u64 = diesel::select(last_insert_id()).get_result(conn)?;
    i64::try_from(id).map_err(|e| DieselError::DeserializationError(Box::new(e)))
}

diesel::define_sql_function! {
    /// The auto-increment value this connection's last insert generated.
    fn last_insert_id() -> diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
}

diesel::define_sql_function! {
    /// `LAST_INSERT_ID(value)`: returns `value` and makes `LAST_INSERT_ID()` return it until an
    /// insert generates a new one.
    #[sql_name = "LAST_INSERT_ID"]
    fn remember_insert_id(
        value: diesel::sql_types::Unsigned<diesel::sql_types::BigInt>,
    ) -> diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
}

impl SemaphoreStatements for MysqlConnection {
    semaphore_statements!(.for_update());

    fn control(
        &mut self,
        ops: &dyn crate::semaphore::ControlTableOps,
        resource: Option<&str>,
        op: crate::semaphore::ControlOp<'_>,
    ) -> QueryResult<crate::semaphore::ControlOut> {
        ops.on_mysql(self, resource, op)
    }

    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()> {
        use crate::semaphore::schema::diesel_lease_semaphores as resources;
        diesel::insert_or_ignore_into(resources::table)
            .values((
                resources::resource.eq(resource),
                resources::permits.eq(permits),
            ))
            .execute(self)
            .map(drop)
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
        diesel::insert_into(tickets::table)
            .values(crate::semaphore::statements::new_ticket_values!(new))
            .execute(self)?;
        inserted_id(self)
    }
}

/// MySQL's and MariaDB's messages for the errors a caller can act on (error numbers in
/// brackets; Diesel maps only 1213 to a kind of its own).
pub(super) fn classify_message(message: &str) -> Option<Kind> {
    const PATTERNS: &[(&str, Kind)] = &[
        // 1205 ER_LOCK_WAIT_TIMEOUT (innodb_lock_wait_timeout)
        ("Lock wait timeout exceeded", Kind::Timeout),
        // 3024 (MySQL max_execution_time), 1969 (MariaDB max_statement_time)
        ("maximum statement execution time exceeded", Kind::Timeout),
        ("max_statement_time exceeded", Kind::Timeout),
        // 2006 CR_SERVER_GONE_ERROR, 2013 CR_SERVER_LOST, 1927 ER_CONNECTION_KILLED,
        // 1053 ER_SERVER_SHUTDOWN, 2002/2003 cannot connect
        ("server has gone away", Kind::ConnectionLost),
        ("Lost connection to", Kind::ConnectionLost),
        ("Connection was killed", Kind::ConnectionLost),
        ("Server shutdown in progress", Kind::ConnectionLost),
        ("Can't connect to", Kind::ConnectionLost),
        // 1213 ER_LOCK_DEADLOCK
        ("Deadlock found when trying to get lock", Kind::Conflict),
    ];
    super::first_match(PATTERNS, message)
}

#[cfg(test)]
mod tests {
    use super::table_path;

    #[test]
    fn table_path_reverses_the_quoting_of_table_names() {
        assert_eq!(table_path("`job`"), Some((None, "job".into())));
        assert_eq!(
            table_path("`app`.`job`"),
            Some((Some("app".into()), "job".into()))
        );
        assert_eq!(table_path("`we``ird.na`me`"), None);
        assert_eq!(
            table_path("`we``ird.name`"),
            Some((None, "we`ird.name".into()))
        );
        assert_eq!(table_path("`a`.`b`.`c`"), None);
        assert_eq!(table_path("`job` AS j"), None);
        assert_eq!(table_path("job"), None);
        assert_eq!(table_path(""), None);
    }

    #[test]
    fn table_path_reads_what_diesel_writes() {
        diesel::table! { app.job (id) { id -> BigInt, } }
        diesel::table! { plain_job (id) { id -> BigInt, } }
        use diesel::QuerySource;
        let render = |sql: String| sql.strip_suffix(" -- binds: []").map(str::to_owned);
        let qualified = render(
            diesel::debug_query::<diesel::mysql::Mysql, _>(&job::table.from_clause()).to_string(),
        );
        let plain = render(
            diesel::debug_query::<diesel::mysql::Mysql, _>(&plain_job::table.from_clause())
                .to_string(),
        );
        assert_eq!(
            qualified.as_deref().and_then(table_path),
            Some((Some("app".into()), "job".into()))
        );
        assert_eq!(
            plain.as_deref().and_then(table_path),
            Some((None, "plain_job".into()))
        );
    }
}
