//! The claim filter of a per-key concurrency limit: skip rows whose key already has `max`
//! claimed rows.
//!
//! A filter alone is not exact (two claims at READ COMMITTED both count `max - 1` and both
//! claim), so the `worker::Worker` also takes a semaphore permit per key before
//! it starts a row; the filter keeps workers from claiming rows they would only hand back.

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::statements::{claimed_before, ClaimSql, Filter};
use super::Claimable;
use crate::backend::SqlDialect;
use crate::clock::DbNowOffset;

/// `(SELECT COUNT(*) FROM t AS dl_running WHERE dl_running.state = 'claimed'
///   AND dl_running.key = t.key [AND NOT <stale>]) < $max`. The claimed state is the model's SQL
/// constant, as in every other claim statement, so a `NULL` claimed state is counted with
/// `IS NULL` (`= NULL` matches nothing and would lift the limit).
///
/// With a claim timeout, stale claims (claimed before the cutoff, as the claim's own predicate
/// says) are not counted: they are claimable again, and a stale claim counted against its own
/// key kept every row of that key, itself included, from being claimed (a key with `max` dead
/// claims stalled for good). The `Worker`'s per-key permit still keeps a dead holder's key
/// closed until that permit expires.
///
/// With `and`, another filter must hold too (`(and) AND (SELECT …) < $max`): a
/// [`ClaimCursor`](super::ClaimCursor)'s bound on the claim order.
pub(crate) struct UnderKeyLimit<'a, M: Claimable, DB> {
    pub(crate) table: M::Table,
    pub(crate) key: &'static str,
    pub(crate) max: i64,
    pub(crate) and: Filter<'a, DB>,
    /// The claimed-at column and the stale cutoff, when the claims rescue stale claims.
    pub(crate) stale: Option<(&'static str, DbNowOffset<M::ClaimedAtSql>)>,
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
        if let Some((claimed_at, cutoff)) = &self.stale {
            // Unqualified, the column is the subquery's own row's (`dl_running`'s).
            out.push_sql(" AND (");
            out.push_identifier(claimed_at)?;
            out.push_sql(" IS NULL OR NOT (");
            claimed_before(&mut out, claimed_at, cutoff)?;
            out.push_sql("))");
        }
        out.push_sql(") < ");
        DB::bind_i64(&mut out, &self.max)
    }
}
