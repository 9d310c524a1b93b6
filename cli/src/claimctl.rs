//! Cancelling a row, pausing and resuming claims: the operator's side of diesel-lease's
//! `claim::cancel` and `claim::pause`, on a table named at run time.

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;
use diesel_lease::__private::ClaimShape;
use diesel_lease::__private::SqlDialect;
use diesel_lease::__private::StateLiteral;
use diesel_lease::__private::{pause_described, resume_described, PauseTarget};
use diesel_lease::BorrowConnection;
use serde_json::json;

use crate::backend::CliConnection;
use crate::dialect::{CliDialect, Ident};
use crate::doctor::{leak, state_value};
use crate::report::{confirm, say, Outcome};
use crate::{CancelArgs, PauseArgs};

/// A primary-key value the operator typed, bound as the key column's type.
#[derive(Debug)]
enum KeyValue {
    Int(i64),
    Text(String),
}

/// `<key column> = $value`.
#[derive(Debug)]
struct KeyEq<'a> {
    column: Ident<'a>,
    value: KeyValue,
}

impl<DB: SqlDialect> QueryFragment<DB> for KeyEq<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.column.walk_ast(out.reborrow())?;
        out.push_sql(" = ");
        match &self.value {
            KeyValue::Int(n) => DB::bind_i64(&mut out, n),
            KeyValue::Text(s) => DB::bind_str(&mut out, s),
        }
    }
}

/// `diesel-lease cancel`: moves one ready or claimed row to the cancelled state.
pub(crate) fn cancel<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    args: &CancelArgs,
    json: bool,
) -> Outcome {
    let (table, key) = (args.table.as_str(), args.key.as_str());
    confirm(
        &format!("row {key} of `{table}`: if it is ready or claimed, it goes to `{}`; its holder, if any, loses its claim", args.to),
        &format!("cancel row {key} of `{table}`"),
        args.yes,
    )?;
    let row = RowToCancel {
        table,
        state_column: &args.state_column,
        ready: &args.ready,
        claimed: &args.claimed,
        to: &args.to,
        key,
    };
    let cancelled = cancel_row(conn, &row)?;
    say(
        json,
        json!({"table": table, "key": key, "cancelled": cancelled, "state": args.to}),
        || {
            if cancelled {
                format!("cancelled row {key} of `{table}`: it is `{}` now; a holder learns it at its next heartbeat\n", args.to)
            } else {
                format!("row {key} of `{table}` is not ready or claimed (finished, or no such row): nothing changed\n")
            }
        },
    )
}

/// One row to cancel, described at run time (by `cancel`'s flags or a `serve --table`).
#[derive(Debug)]
pub(crate) struct RowToCancel<'a> {
    pub(crate) table: &'a str,
    pub(crate) state_column: &'a str,
    pub(crate) ready: &'a [String],
    pub(crate) claimed: &'a str,
    /// The state it goes to.
    pub(crate) to: &'a str,
    /// Its primary key, as typed.
    pub(crate) key: &'a str,
}

/// Cancels `row` (see `diesel_lease::claim::cancel`): `true` when it was ready or claimed.
pub(crate) fn cancel_row<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    row: &RowToCancel<'_>,
) -> Result<bool, String> {
    let table = row.table;
    let columns = conn
        .columns(table)
        .map_err(|e| format!("cannot read the columns of `{table}`: {e}"))?;
    if columns.is_empty() {
        return Err(format!("no table `{table}`"));
    }
    let column = |name: &str| {
        columns
            .iter()
            .find(|c| c.name == name)
            .or_else(|| columns.iter().find(|c| c.name.eq_ignore_ascii_case(name)))
            .ok_or_else(|| format!("`{table}` has no column `{name}`"))
    };
    let state = column(row.state_column)?;
    let literal = |v: &str| state_value::<C::Backend>(v, state);
    let ready: Vec<StateLiteral> = row
        .ready
        .iter()
        .map(|v| literal(v))
        .collect::<Result<_, _>>()?;
    let pk: Vec<_> = columns.iter().filter(|c| c.pk > 0).collect();
    let [key_column] = pk.as_slice() else {
        return Err(format!(
            "`{table}` has {} primary-key columns: cancel addresses a row by a one-column key",
            pk.len()
        ));
    };
    let value = if <C::Backend as CliDialect>::is_integer_type(&key_column.type_name) {
        KeyValue::Int(row.key.parse().map_err(|_| {
            format!(
                "`{}` is not an integer, and the key column `{}` is `{}`",
                row.key, key_column.name, key_column.type_name
            )
        })?)
    } else {
        KeyValue::Text(row.key.to_owned())
    };
    let shape = ClaimShape {
        pk: Box::leak(vec![leak(&key_column.name)].into_boxed_slice()),
        state: leak(&state.name),
        ready: Box::leak(ready.into_boxed_slice()),
        claimed: literal(row.claimed)?,
        failed: None,
        owner: None,
        claimed_at: None,
        attempts: None,
        attempts_nullable: false,
        max_attempts: None,
        available_at: None,
        order: &[],
        pause: None,
    };
    let to = literal(row.to)?;
    let key_eq = KeyEq {
        column: Ident(&key_column.name),
        value,
    };
    diesel_lease::__private::cancel_described(conn, Ident(table), key_eq, shape, to)
        .map_err(|e| e.to_string())
}

/// `diesel-lease pause` / `resume`: claims of the table (or of its rows of one key) stop, or
/// go on and its waiters wake.
pub(crate) fn pause_or_resume<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    args: &PauseArgs,
    pause: bool,
    json: bool,
) -> Outcome {
    let key = match (&args.key_column, &args.key) {
        (Some(column), Some(value)) => Some((column.clone(), value.clone())),
        (None, None) => None,
        _ => return Err("--key-column and --key go together".into()),
    };
    let target = PauseTarget {
        table: args.table.clone(),
        key,
    };
    let changed = set_paused(conn, &target, pause)?;
    let what = match &target.key {
        Some((c, v)) => format!("rows of `{}` with {c} = {v:?}", target.table),
        None => format!("`{}`", target.table),
    };
    say(
        json,
        json!({"table": target.table, "key_column": args.key_column, "key": args.key,
               "paused": pause, "changed": changed}),
        || match (pause, changed) {
            (true, true) => {
                format!("paused claims of {what}: claims skip them until `diesel-lease resume`\n")
            }
            (true, false) => format!("claims of {what} were paused already\n"),
            (false, true) => format!("resumed claims of {what}; waiting claimers were woken\n"),
            (false, false) => format!("claims of {what} were not paused\n"),
        },
    )
}

/// Pauses (`pause`) or resumes `target`: `true` when that changed anything.
pub(crate) fn set_paused<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    target: &PauseTarget,
    pause: bool,
) -> Result<bool, String> {
    if pause {
        pause_described(conn, target)
    } else {
        resume_described(conn, target)
    }
    .map_err(|e| e.to_string())
}

/// Every pause in force ([`PAUSES_SQL`]).
pub(crate) fn pauses<C: CliConnection>(conn: &mut C) -> QueryResult<Vec<PauseRow>> {
    conn.load_rows(&Pauses)
}

/// [`PAUSES_SQL`] as a statement (a constant of this file, no operator input).
struct Pauses;

impl<DB: diesel::backend::Backend> QueryFragment<DB> for Pauses {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(PAUSES_SQL);
        Ok(())
    }
}

/// Every pause in force, in a stable order.
pub(crate) const PAUSES_SQL: &str =
    "SELECT table_name, key_column, key_value FROM diesel_lease_pauses \
     ORDER BY table_name, key_column, key_value";

/// A row of `diesel_lease_pauses`: the whole table when `key_column` is empty.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub(crate) struct PauseRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub(crate) table_name: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub(crate) key_column: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub(crate) key_value: String,
}
