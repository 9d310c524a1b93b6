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

impl LeaseStatements for MysqlConnection {
    lease_statements!();

    fn lease_grant(&mut self, g: &Grant<'_>) -> QueryResult<Option<Granted>> {
        use super::schema::diesel_lease_leases as l;
        // Step 1: take the existing row over if it is grantable. READ COMMITTED (see
        // `write_transaction`): no gap lock when the name has no row yet.
        let taken = self.write_tx(|c| {
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
