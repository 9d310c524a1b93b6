//! SQLite's claims: one `UPDATE … WHERE pk IN (SELECT … LIMIT n) RETURNING` under the database
//! write lock, which also stands in for row locks.

use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sqlite::Sqlite;
use diesel::SqliteConnection;

use super::dialect::{ClaimDialect, ClaimSqlDialect};
use super::statements::{
    claim_assignments, column_list, load_shaped, pick_from, shape, ClaimModel, ClaimParts,
    ClaimSql, ClaimStmt, ClaimTarget, Exec, Filter, NoFilter, PickStmt, StmtId,
};
use crate::backend::SqlDialect;

impl ClaimSqlDialect for Sqlite {
    /// The claim in one statement, safe because SQLite has one writer at a time (the caller holds
    /// `BEGIN IMMEDIATE`): `UPDATE t SET … WHERE (pk) IN (SELECT pk … LIMIT $n) RETURNING …`.
    fn push_claim<'b, M: ClaimTarget<Sqlite>>(
        out: &mut AstPass<'_, 'b, Sqlite>,
        stmt: &'b ClaimStmt<'_, M, Sqlite>,
    ) -> QueryResult<()> {
        let pk = stmt.parts.shape.pk;
        out.push_sql("UPDATE ");
        stmt.parts.table.walk_ast(out.reborrow())?;
        claim_assignments(out, stmt.parts)?;
        out.push_sql(" WHERE (");
        column_list(out, pk)?;
        out.push_sql(") IN (SELECT ");
        column_list(out, pk)?;
        pick_from(out, stmt.parts, stmt.filter, &stmt.limit)?;
        out.push_sql(") RETURNING ");
        stmt.parts.select.walk_ast(out.reborrow())
    }
}

impl ClaimDialect for SqliteConnection {
    fn claim_sql<M: ClaimSql<Sqlite>>(parts: &ClaimParts<M, Sqlite>, limit: i64) -> String {
        diesel::debug_query::<Sqlite, _>(&ClaimStmt::new(parts, limit, None)).to_string()
    }

    fn finish_rows<M: ClaimModel<Self>>(
        &mut self,
        rows: &[super::batch::BatchRow<'_, M>],
        to: super::Finish,
    ) -> QueryResult<Vec<bool>> {
        super::batch::count_then_exact(self, rows, to, super::batch::update_returning)
    }

    fn lock_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Sqlite>,
    ) -> QueryResult<Vec<M>> {
        // No row locks: a write that matches nothing takes the database write lock, which then
        // shuts out every other writer until the caller's transaction ends.
        self.execute_returning_count(&Exec::<
            _,
            StmtId<M, shape::WriteLock, NoFilter, false, false>,
        >::new(&WriteLockStmt(parts)))?;
        load_shaped::<M, Self, shape::Pick, F>(
            self,
            &PickStmt::locking(parts, limit, filter),
            parts.rescues(),
            limit,
        )
    }
}

/// SQLite's stand-in for a row lock: a write that matches nothing still takes the database's
/// write lock, which then shuts out every other writer until the transaction ends.
struct WriteLockStmt<'a, M: ClaimTarget<DB>, DB: SqlDialect>(&'a ClaimParts<M, DB>);

impl<M: ClaimTarget<DB>, DB: SqlDialect> QueryFragment<DB> for WriteLockStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.0.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(self.0.shape.state)?;
        out.push_sql(" = ");
        out.push_identifier(self.0.shape.state)?;
        out.push_sql(" WHERE 1 = 0");
        Ok(())
    }
}
