//! MySQL's lease grant: no `ON CONFLICT`, so a takeover of the existing row if it is grantable,
//! else a plain insert of the name's first grant.

use diesel::mysql::Mysql;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::MysqlConnection;

use super::statements::{
    lease_statements, mysql_insert, mysql_takeover, Grant, Granted, LeaseStatements,
};
use crate::backend::Dialect;

diesel::define_sql_function! {
    /// `LAST_INSERT_ID(expr)`: `expr`, which the session also remembers as its
    /// `LAST_INSERT_ID()`.
    #[sql_name = "LAST_INSERT_ID"]
    fn remember_token(token: diesel::sql_types::BigInt) -> diesel::sql_types::BigInt;
}

impl LeaseStatements for MysqlConnection {
    lease_statements!();

    fn lease_grant(&mut self, g: &Grant<'_>) -> QueryResult<Option<Granted>> {
        use super::schema::diesel_lease_leases as l;
        // Step 1: take the existing row over if it is grantable, in one autocommit statement
        // at READ COMMITTED (no gap lock when the name has no row yet) that leaves the new token
        // in the session (`remember_token`). One statement: on a multi-primary cluster
        // (MariaDB Galera) a grant that loses to a concurrent grant on another node fails at
        // its commit, and nothing was read from a transaction that did not commit.
        if self.keyed_write(|c| mysql_takeover!(g).execute(c))? == 1 {
            let token = crate::backend::mysql::inserted_id(self)?;
            // Our own commit, on the node we are connected to: the row has it unless a later
            // grant (after ours expired or was released) took the name over meanwhile.
            let next_run = l::table
                .find(g.name)
                .filter(l::token.eq(token))
                .select(l::next_run)
                .first::<Option<i64>>(self)
                .optional()?;
            return Ok(next_run.map(|next_run| Granted { token, next_run }));
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
