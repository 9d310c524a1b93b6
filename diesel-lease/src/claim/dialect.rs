//! What claims need of a backend beyond the ground floor's [`Dialect`](crate::backend::Dialect):
//! the claim statement's shape, and the steps a backend without `UPDATE … RETURNING` takes
//! instead. Implemented once per backend in this folder (`postgres.rs`, `sqlite.rs`,
//! `mysql_like.rs`); the claim operations are written once against [`ClaimDialect`].
//!
//! Sealed; its items are internal and carry no stability promise.

use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::result::Error as DieselError;
use diesel::{Connection, QueryResult};

use super::statements::{
    load_shaped, reap, shape, ClaimModel, ClaimParts, ClaimSql, ClaimStatement, ClaimStep,
    ClaimStmt, ClaimTarget, Filter, PickStmt, ReapStmt,
};
use crate::backend::SqlDialect;
use crate::notify::Notifications;

/// How the claim statement's SQL differs between backends (implemented for `Pg`, `Sqlite`, `Mysql`
/// and `Mariadb`).
pub trait ClaimSqlDialect: SqlDialect {
    /// The claim in one statement: `UPDATE` the rows `stmt` picks and return them. Backends
    /// without `UPDATE … RETURNING` (MySQL) keep this default, which refuses, and claim in
    /// several statements instead (their [`ClaimDialect::claim_rows`]).
    #[doc(hidden)]
    fn push_claim<'b, M: ClaimTarget<Self>>(
        _out: &mut AstPass<'_, 'b, Self>,
        _stmt: &'b ClaimStmt<'_, M, Self>,
    ) -> QueryResult<()> {
        Err(DieselError::QueryBuilderError(
            "this backend has no UPDATE … RETURNING; its claims use several statements".into(),
        ))
    }
}

/// How claims run on a connection (implemented for `PgConnection`, `SqliteConnection`,
/// `MysqlConnection` and `MariadbConnection`). Every claim operation is written once against it.
pub trait ClaimDialect: Notifications + Connection<Backend: ClaimSqlDialect> {
    /// The SQL of [`ClaimDialect::claim_rows`]'s claim statement, with its bind values (Diesel's
    /// `debug_query` format), for review and tests. On MySQL: the statement that picks the rows.
    #[doc(hidden)]
    fn claim_sql<M: ClaimSql<Self::Backend>>(
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
    ) -> String;

    /// The statements [`claim_rows`](Self::claim_rows) sends for one `claim_next` (one row, no
    /// filter) of `parts`, in order, each with what it does: what a review tool (the operator's
    /// `doctor`) `EXPLAIN`s. By default the reap, when the claim needs one, and the one-statement
    /// claim.
    #[doc(hidden)]
    fn claim_statements<'a, T: ClaimTarget<Self::Backend>>(
        parts: &'a ClaimParts<T, Self::Backend>,
    ) -> Vec<ClaimStatement<'a, Self::Backend>> {
        let mut steps = Vec::new();
        if parts.needs_reap() {
            steps.push(ClaimStatement::new(ClaimStep::Reap, ReapStmt(parts)));
        }
        steps.push(ClaimStatement::new(
            ClaimStep::Claim,
            ClaimStmt::new(parts, 1, None),
        ));
        steps
    }

    /// Claims up to `limit` rows, reaping exhausted stale claims first when the model asks for it
    /// (same transaction). By default one `UPDATE … RETURNING` statement in the shape of
    /// [`ClaimSqlDialect::push_claim`], as one autocommit write when there is nothing to reap.
    /// `F` is the filter's query id (`NoFilter` when `filter` is `None`).
    #[doc(hidden)]
    fn claim_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Self::Backend>,
    ) -> QueryResult<Vec<M>> {
        let stmt = ClaimStmt::new(parts, limit, filter);
        let load = |c: &mut Self| {
            load_shaped::<M, Self, shape::Claim, F>(c, &stmt, parts.rescues(), limit)
        };
        if !parts.needs_reap() {
            return self.single_write(load);
        }
        self.write_tx(|c| {
            reap(c, parts)?;
            load(c)
        })
    }

    /// Finishes the rows of a batch that are still this worker's claims; for each row of
    /// `rows` in order, whether it was. By default one `UPDATE … RETURNING`.
    #[doc(hidden)]
    fn finish_rows<M: ClaimModel<Self>>(
        &mut self,
        rows: &[super::batch::BatchRow<'_, M>],
        to: super::Finish,
    ) -> QueryResult<Vec<bool>> {
        super::batch::update_returning(self, rows, to)
    }

    /// Selects up to `limit` claimable rows and keeps them locked for the caller's transaction,
    /// skipping locked ones.
    #[doc(hidden)]
    fn lock_rows<M: ClaimModel<Self>, F: QueryId>(
        &mut self,
        parts: &ClaimParts<M, Self::Backend>,
        limit: i64,
        filter: Filter<'_, Self::Backend>,
    ) -> QueryResult<Vec<M>> {
        load_shaped::<M, Self, shape::Pick, F>(
            self,
            &PickStmt::locking(parts, limit, filter),
            parts.rescues(),
            limit,
        )
    }

    /// Installs on `table` a trigger that announces inserted rows to listening waiters
    /// (`wait.rs`); where the backend has no notifications it does nothing (the waiters poll).
    #[doc(hidden)]
    fn install_ready_trigger(
        &mut self,
        _table: &dyn QueryFragment<Self::Backend>,
    ) -> QueryResult<()> {
        Ok(())
    }
}
