//! MySQL 8 / MariaDB 10.6+: row locks with `SKIP LOCKED`, but no `UPDATE … RETURNING` and no
//! `ON CONFLICT`. Claims and lease grants take the fewest statements that are safe, in one READ
//! COMMITTED transaction; a matched-rows count stands in for `RETURNING` wherever the predicate
//! holds the old state (so "one row matched" means "this caller won").

use diesel::connection::SimpleConnection;
use diesel::mysql::Mysql;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::MysqlConnection;
use diesel_migrations::EmbeddedMigrations;
use lease_core::InsertOutcome;

use super::{raw_connection, BackendKind, Dialect, Kind, LeaseConnection, SqlDialect};
use crate::claim::statements::{
    reap, AnyPk, ClaimModel, ClaimParts, ClaimSql, Exec, Filter, MarkClaimedStmt, PickStmt,
    ReadBackStmt,
};
use crate::clock::Offset;
use crate::lease::statements::{
    lease_statements, mysql_insert, mysql_takeover, Grant, Granted, LeaseStatements,
};
use crate::once::RunInsertOnce;
use crate::semaphore::statements::{semaphore_statements, NewTicket, SemaphoreStatements};

raw_connection!(MysqlConnection);
impl super::sealed::Sealed for Mysql {}

impl SqlDialect for Mysql {
    const KIND: BackendKind = BackendKind::Mysql;
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const INT_DIV: &'static str = " DIV ";

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
            self.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")?;
        }
        self.transaction(f)
    }

    fn claim_sql<M: ClaimSql<Mysql>>(parts: &ClaimParts<M, Mysql>, limit: i64) -> String {
        diesel::debug_query::<Mysql, _>(&PickStmt::locking(parts, limit, None)).to_string()
    }

    fn claim_rows<M: ClaimModel<Self>>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Mysql>,
    ) -> QueryResult<Vec<M>> {
        // No UPDATE … RETURNING: pick and lock, mark, read back, in one transaction.
        self.write_transaction(|c| {
            reap(c, parts)?;
            let picked = M::load(c, &PickStmt::locking(parts, limit, filter))?;
            if picked.is_empty() {
                return Ok(picked);
            }
            let rows = AnyPk::<M>::of(&picked);
            c.execute_returning_count(&Exec(&MarkClaimedStmt { parts, rows: &rows }))?;
            M::load(c, &ReadBackStmt { parts, rows: &rows })
        })
    }

    fn insert_once<I, R>(&mut self, insert: I) -> QueryResult<InsertOutcome<R::Output>>
    where
        I: QueryFragment<Mysql> + QueryId,
        R: RunInsertOnce<Self, I>,
    {
        // No ON CONFLICT … DO NOTHING (INSERT IGNORE would also hide unrelated errors). A
        // duplicate-key error does not abort a MySQL transaction, so the plain insert is safe
        // inside the caller's transaction. No row can be returned.
        match self.execute_returning_count(&insert) {
            Ok(_) => Ok(InsertOutcome::Inserted(None)),
            Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                Ok(InsertOutcome::AlreadyExists)
            }
            Err(e) => Err(e),
        }
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

diesel::define_sql_function! {
    /// The auto-increment value this connection's last insert generated.
    fn last_insert_id() -> diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
}

impl SemaphoreStatements for MysqlConnection {
    semaphore_statements!(.for_update());

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
        let id: u64 = diesel::select(last_insert_id()).get_result(self)?;
        i64::try_from(id).map_err(|e| DieselError::DeserializationError(Box::new(e)))
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
    PATTERNS
        .iter()
        .find(|(pattern, _)| message.contains(pattern))
        .map(|&(_, kind)| kind)
}
