//! The page's actions: `POST /actions/<name>` with a form that carries the token. Each action is
//! one entry of [`actions`]: a name, the button's label, and a function that runs it on a
//! connection with the form's fields. The checks every action needs (actions on, the token, the
//! connection) are [`post`]'s, once.

use std::collections::HashMap;

use diesel_lease::admin;
use diesel_lease::BorrowConnection;

use super::{page, token_matches, Reply, State};
use crate::backend::CliConnection;

/// Where actions are posted: `/actions/<name>`.
pub(super) const PREFIX: &str = "/actions/";

/// The form fields of a request (the token among them).
#[derive(Debug)]
pub(super) struct Form(HashMap<String, String>);

impl Form {
    fn parse(body: &[u8]) -> Form {
        Form(form_urlencoded::parse(body).into_owned().collect())
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
    /// Runs it; `Ok` says what happened, for the operator.
    pub(super) run: fn(&mut C, &Form) -> Result<String, Refusal>,
}

/// Every action the page offers. A new one is a function below and a line here, and its button
/// on the page ([`page::action_button`]).
pub(super) fn actions<C>() -> [Action<C>; 2]
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
    ]
}

/// Force-releases lease `name` (and fences its holder).
pub(super) const RELEASE_LEASE: &str = "release-lease";
/// Force-releases semaphore ticket `ticket`.
pub(super) const RELEASE_TICKET: &str = "release-ticket";

fn release_lease<C>(conn: &mut C, form: &Form) -> Result<String, Refusal>
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

fn release_ticket<C>(conn: &mut C, form: &Form) -> Result<String, Refusal>
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
    let mut conn = match crate::commands::connect::<C>(&state.url) {
        Ok(conn) => conn,
        Err(e) => return refused(503, &format!("Nothing was changed: {e}")),
    };
    match (action.run)(&mut conn, &form) {
        Ok(done) => (200, page::message("Done", &done, state)),
        Err(Refusal::BadRequest(why)) => refused(400, &why),
        Err(Refusal::NotFound(why)) => refused(404, &why),
        Err(Refusal::Failed(why)) => (500, page::message("Failed", &why, state)),
    }
}
