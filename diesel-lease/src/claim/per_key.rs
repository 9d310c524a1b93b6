//! The claim filter of a per-key concurrency limit: skip rows whose key already has `max`
//! claimed rows.
//!
//! A filter alone is not exact (two claims at READ COMMITTED both count `max - 1` and both
//! claim), so the `worker::Worker` also takes a semaphore permit per key before
//! it starts a row; the filter keeps workers from claiming rows they would only hand back.

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::statements::{ClaimSql, Filter};
use super::Claimable;
use crate::backend::SqlDialect;

/// `(SELECT COUNT(*) FROM t AS dl_running WHERE dl_running.state = 'claimed'
///   AND dl_running.key = t.key) < $max`. The claimed state is the model's SQL constant, as in
/// every other claim statement, so a `NULL` claimed state is counted with `IS NULL` (`= NULL`
/// matches nothing and would lift the limit).
///
/// With `and`, another filter must hold too (`(and) AND (SELECT …) < $max`): a
/// [`ClaimCursor`](super::ClaimCursor)'s bound on the claim order.
pub(crate) struct UnderKeyLimit<'a, M: Claimable, DB> {
    pub(crate) table: M::Table,
    pub(crate) key: &'static str,
    pub(crate) max: i64,
    pub(crate) and: Filter<'a, DB>,
}

const ALIAS: &str = "dl_running";

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for UnderKeyLimit<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if let Some(and) = self.and {
            out.push_sql("(");
            and.walk_ast(out.reborrow())?;
            out.push_sql(") AND ");
        }
        out.push_sql("(SELECT COUNT(*) FROM ");
        M::push_table(&mut out, &self.table)?;
        out.push_sql(" AS ");
        out.push_identifier(ALIAS)?;
        out.push_sql(" WHERE ");
        out.push_identifier(ALIAS)?;
        out.push_sql(".");
        M::CLAIMED_SQL.push_eq(&mut out, M::STATE)?;
        out.push_sql(" AND ");
        out.push_identifier(ALIAS)?;
        out.push_sql(".");
        out.push_identifier(self.key)?;
        out.push_sql(" = ");
        M::push_table(&mut out, &self.table)?;
        out.push_sql(".");
        out.push_identifier(self.key)?;
        out.push_sql(") < ");
        DB::bind_i64(&mut out, &self.max)
    }
}
