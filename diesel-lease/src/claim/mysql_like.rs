// Included twice by `mod.rs`, as `mysql` (Diesel's `Mysql`, `MysqlConnection`) and as
// `mariadb` (`Mariadb`, `MariadbConnection`): `Db` and `Conn` are that module's backend and
// connection types. See the module's docs there.
use diesel::prelude::*;
use diesel::query_builder::QueryId;

use super::batch::{padded_len, CHUNK};
use super::dialect::{ClaimDialect, ClaimSqlDialect};
use super::statements::{
    shape, AnyPk, ByKey, ByKeyStmt, ClaimModel, ClaimParts, ClaimSql, ClaimStatement, ClaimStep,
    ClaimTarget, Dynamic, Exec, Filter, NoFilter, PickStmt, ReapProbeStmt, StmtId, Which,
};
use crate::backend::{Dialect, Uncached};

impl ClaimSqlDialect for Db {}

impl ClaimDialect for Conn {
    fn claim_sql<M: ClaimSql<Db>>(parts: &ClaimParts<M, Db>, limit: i64) -> String {
        diesel::debug_query::<Db, _>(&PickStmt::locking(parts, limit, None)).to_string()
    }

    fn claim_statements<'a, T: ClaimTarget<Db>>(
        parts: &'a ClaimParts<T, Db>,
    ) -> Vec<ClaimStatement<'a, Db>> {
        // As `claim_rows` and `reap_skip_locked` run them; the locks by key and the marking
        // address rows by primary key.
        let mut steps = Vec::new();
        if parts.needs_reap() {
            let probe = ReapProbeStmt {
                parts,
                limit: REAP_BATCH,
            };
            steps.push(ClaimStatement::new(ClaimStep::ReapProbe, probe));
        }
        if parts.rescues() {
            let probe = PickStmt::only(parts, 1, None, Which::Stale, false);
            steps.push(ClaimStatement::new(ClaimStep::StaleProbe, probe));
        }
        let ready = PickStmt::only(parts, 1, None, Which::Ready, true);
        steps.push(ClaimStatement::new(ClaimStep::ReadyPick, ready));
        steps
    }

    fn claim_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Db>,
    ) -> QueryResult<Vec<M>> {
        // No UPDATE … RETURNING: pick and lock, mark, read back, in one transaction.
        self.write_tx(|c| {
            // Never waits for a row lock: see `reap_skip_locked`.
            reap_skip_locked(c, parts)?;
            // Stale claims first (rescues go before new work), then ready rows, each picked on
            // its own: one pick of both (an `OR`) may be planned as a sort of every match, whose
            // locking read keeps the index entries of rows other claims are marking. Stale
            // claims are found by a plain read, then locked by key (checked again to be stale
            // and to match the caller's filter: the read locked nothing): a locking range scan keeps
            // the index record that ends its range, often the next ready row, which the claim
            // marking that row then waits for (claims deadlocked with each other). Locking
            // reads come from Diesel's statement cache: a failed one fails this transaction,
            // and `write_tx` then closes every cached statement (see `Uncached`).
            // Statements by key go `CHUNK` rows at a time (MySQL refuses more than 65,535
            // binds in one statement).
            let mut picked = Vec::new();
            if parts.rescues() {
                let probe = PickStmt::only(parts, limit, filter, Which::Stale, false);
                let stale = M::load::<Dynamic>(c, &probe)?;
                for chunk in stale.chunks(CHUNK) {
                    let stale = keys::<M>(chunk);
                    let lock = ByKeyStmt {
                        filter,
                        ..ByKeyStmt::new(parts, &stale, ByKey::LockStale)
                    };
                    picked.extend(M::load::<Dynamic>(c, &lock)?);
                }
            }
            let left = limit - i64::try_from(picked.len()).unwrap_or(limit);
            if left > 0 {
                let ready = PickStmt::only(parts, left, filter, Which::Ready, true);
                picked.extend(M::load::<Dynamic>(c, &ready)?);
            }
            if picked.is_empty() {
                return Ok(picked);
            }
            // The marking checks each row again and the read-back returns the rows this
            // claim's stamp marked (see `ByKeyStmt`); a claim hands out a row only when its
            // own statement marked it. Fewer rows marked than picked means a write the pick's
            // locks did not hold back (another node of a Galera cluster claimed the row): the
            // transaction is rolled back and retried as a conflict, like the certification
            // failure the same race ends in when the other node's write comes later.
            if picked.len() == 1 {
                // One row (every `claim_next`): the text is fixed, prepare it once.
                type One<M, const S: u8, const R: bool> =
                    StmtId<M, shape::ByKeyOne<S>, NoFilter, R, false>;
                let rows = keys::<M>(&picked);
                let by_key = |step| ByKeyStmt::new(parts, &rows, step);
                let (mark, read) = (by_key(ByKey::MarkClaimed), by_key(ByKey::ReadBack));
                let marked = if parts.rescues() {
                    c.execute_returning_count(&Exec::<_, One<M, 0, true>>::new(&mark))?
                } else {
                    c.execute_returning_count(&Exec::<_, One<M, 0, false>>::new(&mark))?
                };
                expect_claimed(1, marked)?;
                let claimed = M::load::<One<M, 1, false>>(c, &read)?;
                expect_claimed(1, claimed.len())?;
                return Ok(claimed);
            }
            let mut claimed = Vec::with_capacity(picked.len());
            for chunk in picked.chunks(CHUNK) {
                let rows = keys::<M>(chunk);
                let by_key = |step| ByKeyStmt::new(parts, &rows, step);
                let (mark, read) = (by_key(ByKey::MarkClaimed), by_key(ByKey::ReadBack));
                let marked = c.execute_returning_count(&Exec::<_, Dynamic>::new(&mark))?;
                expect_claimed(chunk.len(), marked)?;
                let read = M::load::<Dynamic>(c, &read)?;
                expect_claimed(chunk.len(), read.len())?;
                claimed.extend(read);
            }
            Ok(claimed)
        })
    }

    fn lock_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Db>,
    ) -> QueryResult<Vec<M>> {
        M::load::<Dynamic>(self, &Uncached(PickStmt::locking(parts, limit, filter)))
    }

    fn finish_rows<M: ClaimModel<Self>>(
        &mut self,
        rows: &[super::batch::BatchRow<'_, M>],
        to: super::Finish,
    ) -> QueryResult<Vec<bool>> {
        // The owner-checked UPDATE alone when it changes every row; else (no UPDATE …
        // RETURNING) lock the rows still ours, then change exactly those.
        super::batch::count_then_exact(self, rows, to, |c, rows, to| {
            c.write_tx(|c| super::batch::lock_then_update(c, rows, to))
        })
    }
}

/// `Ok` when a claim's marking (or its read-back) found all `picked` rows; else the conflict
/// error that rolls the claim back for `retry_conflicts` to try again (see `claim_rows`).
fn expect_claimed(picked: usize, found: usize) -> QueryResult<()> {
    if picked == found {
        return Ok(());
    }
    Err(diesel::result::Error::DatabaseError(
        diesel::result::DatabaseErrorKind::SerializationFailure,
        Box::new(format!(
            "{found} of the {picked} rows a claim picked were still claimable when it marked \
             them (another node of a multi-primary cluster claimed the others)"
        )),
    ))
}

/// The keys of `rows` (at most [`CHUNK`]: callers go chunk by chunk, so a statement's binds
/// stay far below MySQL's 65,535), padded to the batch statements' row counts ([`padded_len`]),
/// so that each kind of statement by key has a few texts, each one prepared statement on the
/// server, instead of one per row count.
fn keys<M: crate::Claimable>(rows: &[M]) -> AnyPk<M> {
    debug_assert!(rows.len() <= CHUNK);
    AnyPk::padded(rows, padded_len(rows.len()))
}

/// How many exhausted stale claims one MySQL claim moves to the failed state at most; the rest
/// go with the next claims.
const REAP_BATCH: i64 = 100;

/// MySQL's [`reap`], in three statements that never wait for a row lock and lock nothing when
/// there is nothing to reap: a plain read finds exhausted stale claims, `SELECT … WHERE <their
/// keys> AND <still exhausted and stale> FOR UPDATE SKIP LOCKED` locks those nobody else holds,
/// and [`ByKey::Fail`] fails exactly those. Run in the claim's transaction, before the claim.
///
/// A single `UPDATE … WHERE <reap predicate>` scan (what PostgreSQL and SQLite run) deadlocked
/// on InnoDB with `complete`: it waits for the row a completion holds while holding index
/// entries the completion needs next. A locking scan that skips locked rows still locks the
/// index record that ends its range, which is often the next ready row, and the claim marking
/// that row then waits for it: claims deadlocked with each other instead.
fn reap_skip_locked<M>(conn: &mut Conn, parts: &ClaimParts<M, Db>) -> QueryResult<()>
where
    M: ClaimModel<Conn>,
{
    if !parts.needs_reap() {
        return Ok(());
    }
    let probe = ReapProbeStmt {
        parts,
        limit: REAP_BATCH,
    };
    let found = M::load::<Dynamic>(conn, &probe)?;
    if found.is_empty() {
        return Ok(());
    }
    let found = keys::<M>(&found);
    let lock = ByKeyStmt::new(parts, &found, ByKey::LockExhausted);
    // A locking read, cached: it runs in the claim's `write_tx` (see `Uncached`).
    let locked = M::load::<Dynamic>(conn, &lock)?;
    if locked.is_empty() {
        return Ok(());
    }
    let rows = keys::<M>(&locked);
    let fail = ByKeyStmt::new(parts, &rows, ByKey::Fail);
    let reaped =
        diesel::Connection::execute_returning_count(conn, &Exec::<_, Dynamic>::new(&fail))?;
    if reaped > 0 {
        crate::observe::rescued(crate::observe::table_name::<M::Table>(), reaped);
    }
    Ok(())
}
