//! The page's actions: `POST /actions/<name>` with a form that carries the token. Each action is
//! one entry of [`actions`]: a name, the button's label, and a function that runs it on a
//! connection with the form's fields. The checks every action needs (actions on, the token, the
//! connection) are [`post`]'s, once.

use std::collections::HashMap;

use diesel_lease::admin;
use diesel_lease::BorrowConnection;

use diesel_lease::__private::PauseTarget;

use super::routes::{CANCEL, PAUSE, RELEASE_LEASE, RELEASE_TICKET, RESUME, RETRY_DEAD};
use super::{page, token_matches, Reply, State, TableSpec};
use crate::backend::CliConnection;
use crate::claimctl::{cancel_row, set_paused, RowToCancel};

/// The form fields of a request (the token among them).
#[derive(Debug)]
pub(super) struct Form(HashMap<String, String>);

impl Form {
    fn parse(body: &[u8]) -> Form {
        Form(form_urlencoded::parse(body).into_owned().collect())
    }

    /// A field's value, if the form has a non-empty one.
    fn optional(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// A field's value, or the refusal that names it.
    fn field(&self, name: &str) -> Result<&str, Refusal> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Refusal::BadRequest(format!("the form has no `{name}`")))
    }
}

/// Why an action did not happen.
#[derive(Debug)]
pub(super) enum Refusal {
    /// The request is malformed (400).
    BadRequest(String),
    /// What it names does not exist (404).
    NotFound(String),
    /// The database refused or failed (500).
    Failed(String),
}

/// One action: its path name, the function that runs it, and a summary of what it did.
pub(super) struct Action<C> {
    /// `/actions/<name>`.
    pub(super) name: &'static str,
    /// Runs it (with the page's `--table`s at hand); `Ok` says what happened, for the operator.
    pub(super) run: fn(&mut C, &State, &Form) -> Result<String, Refusal>,
}

/// Every action the page offers. A new one is a function below and a line here, and its button
/// on the page ([`page::action_button`]).
pub(super) fn actions<C>() -> [Action<C>; 6]
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    [
        Action {
            name: RELEASE_LEASE,
            run: release_lease::<C>,
        },
        Action {
            name: RELEASE_TICKET,
            run: release_ticket::<C>,
        },
        Action {
            name: PAUSE,
            run: pause::<C>,
        },
        Action {
            name: RESUME,
            run: resume::<C>,
        },
        Action {
            name: CANCEL,
            run: cancel::<C>,
        },
        Action {
            name: RETRY_DEAD,
            run: retry_dead::<C>,
        },
    ]
}

/// Rows per transaction when the page retries dead rows (as `redrive`'s default).
const RETRY_BATCH: usize = 500;

fn retry_dead<C>(conn: &mut C, state: &State, form: &Form) -> Result<String, Refusal>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let spec = described(state, form)?;
    let Some(rows) = spec.dead_rows() else {
        return Err(Refusal::BadRequest(format!(
            "`{}` was described without --ready or --failed: its dead rows cannot be retried \
             from this page",
            spec.claims.table
        )));
    };
    let moved =
        crate::retention::redrive_rows(conn, &rows, None, RETRY_BATCH).map_err(Refusal::Failed)?;
    // Without an owner column the attempts number fences stale workers: it keeps counting.
    let attempts = if rows.reset.owner_column.is_some() {
        "attempts reset"
    } else {
        "attempts kept"
    };
    Ok(format!(
        "Moved {} dead rows of `{}` from {} back to {} ({attempts}), in {} transactions.",
        moved.deleted, rows.table, rows.failed, rows.ready, moved.batches
    ))
}

/// The `--table` the form names: only tables the page was started with are acted on.
fn described<'s>(state: &'s State, form: &Form) -> Result<&'s TableSpec, Refusal> {
    let table = form.field("table")?;
    state
        .tables
        .iter()
        .find(|t| t.claims.table == table)
        .ok_or_else(|| Refusal::NotFound(format!("`{table}` is not a table this page shows")))
}

/// The pause the form names: the whole table, or its rows whose `key_column` is `key`.
fn pause_target(state: &State, form: &Form) -> Result<PauseTarget, Refusal> {
    let table = described(state, form)?.claims.table.clone();
    let key = match (form.optional("key_column"), form.optional("key")) {
        (Some(column), Some(value)) => Some((column.to_owned(), value.to_owned())),
        (None, None) => None,
        _ => {
            return Err(Refusal::BadRequest(
                "a key's pause needs both its column and its value".into(),
            ))
        }
    };
    Ok(PauseTarget { table, key })
}

fn pause_or_resume<C>(
    conn: &mut C,
    state: &State,
    form: &Form,
    pause: bool,
) -> Result<String, Refusal>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let target = pause_target(state, form)?;
    let changed = set_paused(conn, &target, pause).map_err(Refusal::Failed)?;
    let what = match &target.key {
        Some((column, value)) => format!("rows of `{}` with {column} = {value:?}", target.table),
        None => format!("`{}`", target.table),
    };
    Ok(match (pause, changed) {
        (true, true) => format!("Paused claims of {what}: claims skip them until resumed."),
        (true, false) => format!("Claims of {what} were paused already."),
        (false, true) => format!("Resumed claims of {what}; waiting claimers were woken."),
        (false, false) => format!("Claims of {what} were not paused."),
    })
}

fn pause<C>(conn: &mut C, state: &State, form: &Form) -> Result<String, Refusal>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    pause_or_resume(conn, state, form, true)
}

fn resume<C>(conn: &mut C, state: &State, form: &Form) -> Result<String, Refusal>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    pause_or_resume(conn, state, form, false)
}

fn cancel<C>(conn: &mut C, state: &State, form: &Form) -> Result<String, Refusal>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let spec = described(state, form)?;
    let Some((ready, claimed, to)) = spec.cancel_states() else {
        return Err(Refusal::BadRequest(format!(
            "`{}` was described without --ready, --claimed or a cancelled (or failed) state: \
             rows cannot be cancelled from this page",
            spec.claims.table
        )));
    };
    let key = form.field("key")?;
    let row = RowToCancel {
        table: &spec.claims.table,
        state_column: &spec.claims.state_column,
        ready,
        claimed,
        to,
        key,
    };
    let cancelled = cancel_row(conn, &row).map_err(Refusal::Failed)?;
    let table = &spec.claims.table;
    Ok(if cancelled {
        format!("Cancelled row {key} of `{table}`: it is `{to}` now; its holder, if any, learns it at its next heartbeat.")
    } else {
        format!("Row {key} of `{table}` is not ready or claimed (finished, or no such row): nothing changed.")
    })
}

fn release_lease<C>(conn: &mut C, _: &State, form: &Form) -> Result<String, Refusal>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let name = form.field("name")?;
    let after = admin::force_release_lease(conn, name)
        .map_err(|e| Refusal::Failed(e.to_string()))?
        .ok_or_else(|| Refusal::NotFound(format!("no lease named `{name}`")))?;
    Ok(format!(
        "Released lease `{name}`: its token is now {}; the holder's next extend or release fails with LeaseLost.",
        after.token
    ))
}

fn release_ticket<C>(conn: &mut C, _: &State, form: &Form) -> Result<String, Refusal>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let ticket: i64 = form
        .field("ticket")?
        .parse()
        .map_err(|_| Refusal::BadRequest("the ticket is not a number".into()))?;
    let released = admin::force_release_ticket(conn, ticket)
        .map_err(|e| Refusal::Failed(e.to_string()))?
        .ok_or_else(|| Refusal::NotFound(format!("no semaphore ticket {ticket}")))?;
    Ok(format!(
        "Released ticket {ticket} of `{}` (it was {} by `{}`); the next in line is admitted.",
        released.resource,
        if released.was_granted {
            "holding"
        } else {
            "waiting"
        },
        released.owner
    ))
}

/// Runs action `name` for a posted form, after the checks every action needs.
pub(super) fn post<C>(state: &State, name: &str, body: &[u8]) -> Reply
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let refused = |status, text: &str| (status, page::message("Refused", text, state));
    let Some(token) = &state.token else {
        return refused(
            403,
            "Actions are off: this page is read-only. Start `diesel-lease serve` with --allow-actions to turn them on.",
        );
    };
    let form = Form::parse(body);
    if !token_matches(token, form.0.get("token").map_or("", String::as_str)) {
        return refused(
            403,
            "The action token is missing or wrong: nothing was changed. Enter the token `diesel-lease serve` printed at start.",
        );
    }
    let Some(action) = actions::<C>().into_iter().find(|a| a.name == name) else {
        return refused(404, "There is no such action.");
    };
    let mut conn = match crate::backend::connect::<C>(&state.url) {
        Ok(conn) => conn,
        Err(e) => return refused(503, &format!("Nothing was changed: {e}")),
    };
    match (action.run)(&mut conn, state, &form) {
        Ok(done) => (200, page::message("Done", &done, state)),
        Err(Refusal::BadRequest(why)) => refused(400, &why),
        Err(Refusal::NotFound(why)) => refused(404, &why),
        Err(Refusal::Failed(why)) => (500, page::message("Failed", &why, state)),
    }
}
