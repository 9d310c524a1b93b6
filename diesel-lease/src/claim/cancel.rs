//! Cancelling a row: a ready row never runs, a claimed row's holder loses its claim.
//!
//! One statement, `UPDATE t SET state = <cancelled> WHERE <key> AND state IN (<ready…>,
//! <claimed>)`: a row that is waiting or running moves to the cancelled state (the model's
//! `cancelled = …`, else its failed state); a row already done, failed or cancelled is left
//! alone. A claim takes only ready rows, so a cancelled row is never claimed again; the holder
//! of a claimed row finds it at its next owner-checked statement, which requires the claimed
//! state: its [`ClaimGuard`](super::ClaimGuard)'s heartbeat matches nothing and the guard turns
//! lost (its [`lost_signal`](crate::Held::lost_signal) fires), and its `complete` returns
//! `false`.
//!
//! Written once over a [`ClaimShape`], so the operator's tool cancels a row of a table it
//! describes at run time ([`cancel_described`]) with the very statement a model's
//! [`Queue::cancel`](super::queue::Queue::cancel) sends.

use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::QueryResult;

use super::statements::{ClaimModel, ClaimShape, ClaimSql, Dynamic, Exec, NoFilter, StmtId};
use super::{about, ClaimConnection, ClaimDialect, Claimable, StateLiteral};
use crate::backend::{retry_conflicts_on, SqlDialect};
use crate::{BorrowConnection, Error, Result};

/// A [`Claimable`] model a row of which can be cancelled: it has a `cancelled = …` state, or
/// a failed state (`failed = …`) that cancelled rows go to. A failed state that is also a ready
/// state (failed rows are retried) is not one: the derive then leaves this trait out, as a
/// cancel would put the row back in the queue.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no state for cancelled rows",
    label = "`queue().cancel` needs a cancelled state, or a failed state that is not a ready state",
    note = "add `cancelled = \"<state>\"` (or a `failed = \"<state>\"` that is not a ready state) to `#[claimable(...)]` on `{Self}`"
)]
pub trait HasCancelState: Claimable {}

/// The state a cancel moves a row of `M` to: `cancelled = …`, else `failed = …` when that is
/// not a ready state (a retrying model's: a cancel would put the row back in the queue).
pub fn cancel_target<M: Claimable>() -> Option<StateLiteral> {
    M::CANCELLED_SQL.or(M::FAILED_SQL.filter(|failed| !M::READY_SQL.contains(failed)))
}

/// Refuses a cancel into a state claims would take for a live row: a ready state (the row would
/// be claimed and run again) or the claimed state (it would look claimed, and be rescued and run).
fn check_target(shape: &ClaimShape, to: StateLiteral) -> Result<()> {
    if shape.ready.contains(&to) || shape.claimed == to {
        return Err(Error::Config(format!(
            "cancelled rows cannot go to {}: it is a {} state, so a cancelled row would run again",
            to.as_sql().unwrap_or("NULL"),
            if shape.claimed == to {
                "claimed"
            } else {
                "ready"
            },
        )));
    }
    Ok(())
}

/// `UPDATE <table> SET <state> = <to> WHERE (<key>) AND <state> IN (<ready…>, <claimed>)`.
#[derive(Debug)]
pub struct CancelStmt<T, K> {
    /// The table (`M::Table`, or an identifier the operator typed).
    pub table: T,
    /// The row's key test (`M::PkFilter`, or the operator's key column and value).
    pub key: K,
    /// The table's state column and states.
    pub shape: ClaimShape,
    /// The state cancelled rows go to.
    pub to: StateLiteral,
}

impl<T, K, DB> QueryFragment<DB> for CancelStmt<T, K>
where
    DB: SqlDialect,
    T: QueryFragment<DB>,
    K: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(self.shape.state)?;
        out.push_sql(" = ");
        self.to.push(&mut out);
        out.push_sql(" WHERE (");
        self.key.walk_ast(out.reborrow())?;
        out.push_sql(") AND ");
        let mut live = self.shape.ready.to_vec();
        if !live.contains(&self.shape.claimed) {
            live.push(self.shape.claimed);
        }
        StateLiteral::push_in(&live, &mut out, self.shape.state)
    }
}

/// The statement's query id: its text is fixed by the model's constants.
struct Cancel;

/// Cancels the row of `M` with key `pk`: a ready row moves to the cancelled state and is
/// never claimed; a claimed row too, and its holder loses the claim (its guard's heartbeat
/// fails, so it learns within one heartbeat; `complete` returns `false`). `true` when the row
/// was ready or claimed and is now cancelled; `false` when there is no such row or it had
/// already finished (done, failed, cancelled), which it leaves alone.
///
/// What [`Queue::cancel`](super::queue::Queue::cancel) calls.
pub(crate) fn cancel_by_pk<M, C>(conn: &mut C, pk: M::Pk) -> Result<bool>
where
    M: HasCancelState,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let to = cancel_target::<M>().ok_or_else(|| {
        Error::Config(
            "cancelling needs a `cancelled = …` state, or a `failed = …` state that is not a ready state"
                .into(),
        )
    })?;
    conn.borrow_connection().cancel_row(pk, to)
}

/// [`cancel_by_pk`]'s statement for a model whose columns the connection reads and writes.
pub(crate) fn cancel_model<M, C>(conn: &mut C, pk: M::Pk, to: StateLiteral) -> Result<bool>
where
    M: ClaimModel<C>,
    C: ClaimDialect,
{
    let shape = ClaimShape::of::<M>();
    check_target(&shape, to).map_err(about::<M>)?;
    let stmt = CancelStmt {
        table: ModelTable::<M>(M::Table::default()),
        key: ModelKey::<M>(M::pk_filter(pk)),
        shape,
        to,
    };
    run::<_, StmtId<M, Cancel, NoFilter, false, false>>(conn, &stmt).map_err(about::<M>)
}

/// The model's table, pushed as its [`ClaimSql`] says.
struct ModelTable<M: Claimable>(M::Table);

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for ModelTable<M> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        M::push_table(&mut out, &self.0)
    }
}

/// The model's key test, pushed as its [`ClaimSql`] says.
struct ModelKey<M: Claimable>(M::PkFilter);

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for ModelKey<M> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        M::push_pk(&mut out, &self.0)
    }
}

/// [`Queue::cancel`](super::queue::Queue::cancel) on a table described at run time (the operator's tool): `table` and
/// `key` as fragments (quoted identifiers, the key value a bind parameter), the state column
/// and states in `shape`, cancelled rows going to `to`. A `to` that is one of the shape's ready
/// states or its claimed state is refused with [`Error::Config`]: the row would run again.
pub fn cancel_described<C, T, K>(
    conn: &mut C,
    table: T,
    key: K,
    shape: ClaimShape,
    to: StateLiteral,
) -> Result<bool>
where
    C: BorrowConnection,
    C::Conn: ClaimDialect,
    T: QueryFragment<<C::Conn as diesel::Connection>::Backend>,
    K: QueryFragment<<C::Conn as diesel::Connection>::Backend>,
{
    check_target(&shape, to)?;
    let stmt = CancelStmt {
        table,
        key,
        shape,
        to,
    };
    run::<_, Dynamic>(conn.borrow_connection(), &stmt)
}

/// Runs a cancel as one write; rolled back whole by a deadlock, so safe to run again (outside
/// the caller's transaction).
fn run<C: ClaimDialect, Id: QueryId>(
    conn: &mut C,
    stmt: &dyn QueryFragment<C::Backend>,
) -> Result<bool> {
    retry_conflicts_on(conn, |c| {
        Ok(c.keyed_write(|c| c.execute_returning_count(&Exec::<_, Id>::new(stmt)))? >= 1)
    })
}
