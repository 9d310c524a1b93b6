// Included twice by `mod.rs`, as `mysql` (Diesel's `Mysql`, `MysqlConnection`) and as
// `mariadb` (`Mariadb`, `MariadbConnection`): `Db` and `Conn` are that module's backend and
// connection types. See the module's docs there.
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};

use super::statements::{
    first_grant, grantable, lease_statements, Grant, Granted, LeaseStatements,
};
use crate::backend::Dialect;

diesel::define_sql_function! {
    /// `LAST_INSERT_ID(expr)`: `expr`, which the session also remembers as its
    /// `LAST_INSERT_ID()`.
    #[sql_name = "LAST_INSERT_ID"]
    fn remember_token(token: diesel::sql_types::BigInt) -> diesel::sql_types::BigInt;
}

/// Step 1 of a grant: take the existing row over only if `grantable`. InnoDB re-reads the row
/// under its lock before applying the `WHERE`, so of two concurrent takeovers exactly one
/// matches; the predicate holds the old state, so the matched-rows count (CLIENT_FOUND_ROWS)
/// means "won". Columns are assigned left to right in MySQL: none of these reads a column
/// assigned before it.
macro_rules! takeover {
    ($g:expr) => {{
        use super::statements::dsl::*;
        diesel::update(l::table.filter(l::name.eq($g.name)).filter(grantable!($g))).set((
            l::holder.eq($g.holder),
            // `LAST_INSERT_ID(expr)`: the session remembers the new token, read back after
            // the commit without a second statement in the grant's transaction.
            l::token.eq(remember_token(l::token + 1_i64)),
            l::acquired_at.eq(DbNowMicros),
            l::expires_at.eq(NowPlus($g.ttl_micros)),
            l::next_run.eq(NextRunAfterGrant($g.periodic)),
            l::released_at.eq(None::<i64>),
        ))
    }};
}

/// Step 2 of a grant (first use of the name): a plain insert; a duplicate key means someone
/// else holds it.
macro_rules! first_insert {
    ($g:expr) => {{
        use super::statements::dsl::*;
        diesel::insert_into(l::table).values(first_grant!($g))
    }};
}

impl LeaseStatements for Conn {
    lease_statements!();

    fn lease_grant(&mut self, g: &Grant<'_>) -> QueryResult<Option<Granted>> {
        use super::schema::diesel_lease_leases as l;
        // Step 1: take the existing row over if it is grantable, in one autocommit statement
        // at READ COMMITTED (no gap lock when the name has no row yet) that leaves the new token
        // in the session (`remember_token`). One statement: on a multi-primary cluster
        // (MariaDB Galera) a grant that loses to a concurrent grant on another node fails at
        // its commit, and nothing was read from a transaction that did not commit.
        if self.keyed_write(|c| takeover!(g).execute(c))? == 1 {
            let token = crate::backend::MysqlLike::inserted_id(self)?;
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
        match first_insert!(g).execute(self) {
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
            diesel::debug_query::<Db, _>(&takeover!(g)),
            diesel::debug_query::<Db, _>(&first_insert!(g))
        )
    }
}
