//! Finishing many claimed rows in one statement: `complete_batch`, `fail_batch`,
//! `release_batch`.
//!
//! Each row is checked as [`finish`](super::finish) checks one (still claimed, the same claim
//! stamp, the same attempt); the statement reports which rows it changed, so a row another worker
//! rescued in the meantime is reported as no longer this worker's and left alone.
//!
//! Not a stable API: these types appear only in the bounds of
//! [`ClaimConnection`](super::ClaimConnection).
#![allow(missing_debug_implementations)]

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;

use super::statements::{push_finish_assignments, push_stamp_check, ClaimModel, ClaimSql};
use super::{Claimable, Finish};
use crate::backend::{Dialect, SqlDialect};

/// Rows per statement: at most 4 binds each (composite keys add more), far below every
/// backend's limit on parameters.
pub(crate) const CHUNK: usize = 200;

/// One row of a batch: its key and the claim it was handed out under.
pub struct BatchRow<M: Claimable> {
    pk: M::PkFilter,
    owner: Option<Option<String>>,
    attempts: Option<Option<i64>>,
}

/// The owner-checked change of many rows, in one of its forms ([`BatchStep`]). Its rows are
/// the positions (in `rows`, from 0) of the rows it changed or locked: `CASE WHEN <pk 0> THEN 0
/// WHEN <pk 1> THEN 1 … END`, one `INTEGER` each, so the caller learns which of its rows were
/// still its own without the rows being sent back and decoded.
pub struct BatchFinishStmt<'a, M: ClaimSql<DB>, DB: SqlDialect> {
    pub(crate) table: M::Table,
    pub(crate) _db: std::marker::PhantomData<DB>,
    pub(crate) rows: &'a [BatchRow<M>],
    pub(crate) to: Finish,
    pub(crate) step: BatchStep,
}

/// Which statement of a batch finish.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum BatchStep {
    /// `UPDATE t SET <target> WHERE <still ours> RETURNING <position>`: PostgreSQL and SQLite.
    UpdateReturning,
    /// `SELECT <position> FROM t WHERE <still ours> FOR UPDATE`: MySQL's first statement, which
    /// locks the rows the update then changes (no `UPDATE … RETURNING` there).
    LockOurs,
    /// `UPDATE t SET <target> WHERE <still ours>`: MySQL's second statement.
    Update,
}

impl<'a, M: ClaimSql<DB>, DB: SqlDialect> BatchFinishStmt<'a, M, DB> {
    pub(crate) fn new(rows: &'a [BatchRow<M>], to: Finish, step: BatchStep) -> Self {
        BatchFinishStmt {
            table: M::Table::default(),
            _db: std::marker::PhantomData,
            rows,
            to,
            step,
        }
    }

    /// `state = <claimed> AND ((<pk 1> AND owner = $ AND attempts = $) OR …)`.
    fn push_still_ours<'b>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()> {
        M::CLAIMED_SQL.push_eq(out, M::STATE)?;
        out.push_sql(" AND (");
        for (i, row) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push_sql(" OR ");
            }
            out.push_sql("((");
            M::push_pk(out, &row.pk)?;
            out.push_sql(")");
            push_stamp_check::<M, DB>(out, &row.owner, &row.attempts)?;
            out.push_sql(")");
        }
        out.push_sql(")");
        Ok(())
    }

    /// `CASE WHEN (<pk 0>) THEN 0 WHEN (<pk 1>) THEN 1 … END`: a row's position in `rows`.
    fn push_position<'b>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("CASE");
        for (i, row) in self.rows.iter().enumerate() {
            out.push_sql(" WHEN (");
            M::push_pk(out, &row.pk)?;
            // The position is this loop's counter, not a value from outside.
            out.push_sql(&format!(") THEN {i}"));
        }
        out.push_sql(" END");
        Ok(())
    }
}

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for BatchFinishStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if self.step == BatchStep::LockOurs {
            out.push_sql("SELECT ");
            self.push_position(&mut out)?;
            out.push_sql(" FROM ");
            M::push_table(&mut out, &self.table)?;
            out.push_sql(" WHERE ");
            self.push_still_ours(&mut out)?;
            out.push_sql(" FOR UPDATE");
            return Ok(());
        }
        out.push_sql("UPDATE ");
        M::push_table(&mut out, &self.table)?;
        out.push_sql(" SET ");
        push_finish_assignments::<M, DB>(&mut out, self.to)?;
        out.push_sql(" WHERE ");
        self.push_still_ours(&mut out)?;
        if self.step == BatchStep::UpdateReturning {
            out.push_sql(" RETURNING ");
            self.push_position(&mut out)?;
        }
        Ok(())
    }
}

/// The batch rows of `rows`: each one's key, claim stamp and attempt.
pub(crate) fn batch_rows<M: Claimable>(rows: &[M]) -> Vec<BatchRow<M>> {
    rows.iter()
        .map(|r| BatchRow {
            pk: M::pk_filter(r.pk()),
            owner: M::OWNER.map(|_| r.owner().map(str::to_owned)),
            attempts: M::ATTEMPTS.map(|_| r.attempts()),
        })
        .collect()
}

/// The default [`Dialect::finish_rows`]: one `UPDATE … RETURNING` (the text depends on the
/// number of rows, so it has no static query id; Diesel caches it by its text).
pub(crate) fn update_returning<M, C>(
    conn: &mut C,
    rows: &[BatchRow<M>],
    to: Finish,
) -> QueryResult<Vec<bool>>
where
    C: Dialect,
    M: ClaimModel<C>,
{
    let stmt = BatchFinishStmt::<M, C::Backend>::new(rows, to, BatchStep::UpdateReturning);
    let positions = conn.keyed_write(|c| M::load_positions(c, &stmt))?;
    Ok(at_positions(rows.len(), &positions))
}

/// MySQL's [`Dialect::finish_rows`]: lock the rows that are still ours, then change exactly
/// those, in the caller's write transaction.
#[cfg(feature = "mysql")]
pub(crate) fn lock_then_update<M, C>(
    conn: &mut C,
    rows: &[BatchRow<M>],
    to: Finish,
) -> QueryResult<Vec<bool>>
where
    C: Dialect,
    M: ClaimModel<C>,
{
    // A locking read that waits, cached: it runs in `finish_rows`' `write_tx`, which closes
    // every cached statement when it fails (see `Uncached`).
    let ours = M::load_positions(
        conn,
        &BatchFinishStmt::<M, C::Backend>::new(rows, to, BatchStep::LockOurs),
    )?;
    if !ours.is_empty() {
        let update = BatchFinishStmt::<M, C::Backend>::new(rows, to, BatchStep::Update);
        conn.execute_returning_count(
            &super::statements::Exec::<_, super::statements::Dynamic>::new(&update),
        )?;
    }
    Ok(at_positions(rows.len(), &ours))
}

/// For each of `len` rows, whether its position is among `positions` (out-of-range positions,
/// which no statement of ours returns, are ignored).
pub(crate) fn at_positions(len: usize, positions: &[i32]) -> Vec<bool> {
    let mut at = vec![false; len];
    for &p in positions {
        if let Some(slot) = usize::try_from(p).ok().and_then(|p| at.get_mut(p)) {
            *slot = true;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::at_positions;

    #[test]
    fn positions_say_which_rows_of_the_batch_changed() {
        assert_eq!(at_positions(4, &[2, 0]), [true, false, true, false]);
        assert_eq!(at_positions(3, &[]), [false; 3]);
        // Nothing a statement of ours returns, but never a panic.
        assert_eq!(at_positions(2, &[-1, 2, 1]), [false, true]);
    }
}
