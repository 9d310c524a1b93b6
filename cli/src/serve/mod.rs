//! `diesel-lease serve`: the operator's page. A small synchronous HTTP server (`tiny_http`), a
//! thread per request, a new database connection per request (so an unreachable database is a
//! page that says so, and the server stays up), HTML from `maud` templates, which escape every
//! value they insert (names come from the database).
//!
//! Everything is read-only unless `--allow-actions` is given; then the actions of
//! [`actions::actions`] are served at `POST /actions/<name>`, each checked against the token
//! (printed at start, or `--token` / `DIESEL_LEASE_SERVE_TOKEN`) in constant time.

mod actions;
mod page;
mod routes;
mod snapshot;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use diesel_lease::BorrowConnection;
use subtle::ConstantTimeEq;
use tiny_http::{Header, Method, Request, Response, Server};

use crate::backend::CliConnection;
use crate::queues::{ControlTable, ControlTablesArgs};
use crate::report::Outcome;
use crate::ClaimsArgs;

/// Where and what to serve.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on (port 0: any free port; the address is printed at start).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Seconds between the page's refreshes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600))]
    refresh: u32,
    /// A claimable table to show, then the flags `diesel-lease claims` takes to describe it, and
    /// `--failed STATE` for its dead rows, as one argument (repeat for several tables):
    /// `--table 'import_jobs --state-column status --claimed running --claimed-at-column
    /// claimed_at --older-than 15m --failed failed'`.
    #[arg(long = "table", value_name = "NAME [FLAGS]")]
    tables: Vec<String>,
    #[command(flatten)]
    control_tables: ControlTablesArgs,
    /// Serve the actions (forced releases) and show their buttons; each request must carry the
    /// token.
    #[arg(long)]
    allow_actions: bool,
    /// The token actions need (default: a random one, printed at start).
    #[arg(long, env = "DIESEL_LEASE_SERVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// One `--table`: `claims`' description of it, and its failed state.
#[derive(Debug, Parser)]
#[command(name = "--table", no_binary_name = true)]
pub(crate) struct TableSpec {
    #[command(flatten)]
    claims: ClaimsArgs,
    /// The failed state (`#[claimable(failed = …)]`): its rows are the dead ones.
    #[arg(long)]
    failed: Option<String>,
    /// The ready state(s) (`#[claimable(ready = …)]`, repeat for several): with `--claimed`,
    /// rows can be cancelled from the page.
    #[arg(long = "ready")]
    ready: Vec<String>,
    /// The state a cancelled row goes to (`#[claimable(cancelled = …)]`; default: `--failed`).
    #[arg(long)]
    cancelled: Option<String>,
    /// The columns retrying dead rows resets (as `redrive` takes them).
    #[command(flatten)]
    reset: crate::ResetColumns,
}

impl TableSpec {
    /// What retrying this table's dead rows needs: its first ready state and its failed state;
    /// `None` when the spec lacks one.
    pub(super) fn dead_rows(&self) -> Option<crate::retention::DeadRows<'_>> {
        Some(crate::retention::DeadRows {
            table: &self.claims.table,
            state_column: &self.claims.state_column,
            ready: self.ready.first()?,
            failed: self.failed.as_deref().filter(|f| *f != "NULL")?,
            reset: &self.reset,
        })
    }

    /// What cancelling a row of this table needs: its ready and claimed states and the state a
    /// cancelled row goes to; `None` when the spec lacks one.
    pub(super) fn cancel_states(&self) -> Option<(&[String], &str, &str)> {
        let to = self.cancelled.as_deref().or(self.failed.as_deref())?;
        let claimed = self.claims.claimed.as_deref()?;
        (!self.ready.is_empty()).then_some((self.ready.as_slice(), claimed, to))
    }
}

impl TableSpec {
    /// `NAME [FLAGS]` → the table and its flags, parsed as `claims` parses them.
    fn parse(spec: &str) -> Result<TableSpec, String> {
        let mut words = spec.split_whitespace();
        let name = words
            .next()
            .ok_or("`--table` needs a table name, then its flags")?;
        let args = ["--table", name].into_iter().chain(words);
        TableSpec::try_parse_from(args).map_err(|e| {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or_default().to_string();
            format!("--table '{spec}': {}", first.trim_start_matches("error: "))
        })
    }
}

/// What every request handler shares.
#[derive(Debug)]
struct State {
    url: String,
    refresh: u32,
    tables: Vec<TableSpec>,
    control_tables: Vec<ControlTable>,
    /// The actions' token; `None`: actions are off.
    token: Option<String>,
    /// On a loopback address, the `Host` values a request may carry (`127.0.0.1:7878`,
    /// `localhost:7878`): a web page the operator visits cannot read this one by pointing a
    /// name of its own at 127.0.0.1 (DNS rebinding). `None`: any (the operator exposed it).
    hosts: Option<Vec<String>>,
}

/// Serves until the process is stopped.
pub(crate) fn serve<C>(url: &str, args: &ServeArgs) -> Outcome
where
    C: CliConnection + BorrowConnection<Conn = C> + 'static,
{
    let tables = args
        .tables
        .iter()
        .map(|t| TableSpec::parse(t))
        .collect::<Result<Vec<_>, _>>()?;
    let control_tables = args.control_tables.parse()?;
    let token = match (&args.token, args.allow_actions) {
        (_, false) => None,
        (Some(t), true) if t.len() < 16 => {
            return Err("the action token must be at least 16 characters".into())
        }
        (Some(t), true) => Some(t.clone()),
        (None, true) => Some(new_token()?),
    };
    let server =
        Server::http(args.listen).map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let bound = server.server_addr().to_ip().unwrap_or(args.listen);
    let at = bound.to_string();
    let hosts = bound.ip().is_loopback().then(|| {
        let port = bound.port();
        vec![at.clone(), format!("localhost:{port}")]
    });
    let mut out = std::io::stdout().lock();
    let mut banner = format!("diesel-lease serve: listening on http://{at}/\n");
    match (&token, &args.token) {
        (None, _) => {
            banner.push_str("actions are off (read-only): --allow-actions turns them on\n")
        }
        (Some(_), Some(_)) => banner.push_str("actions are on; their token is the one given\n"),
        (Some(t), None) => banner.push_str(&format!("actions are on; their token: {t}\n")),
    }
    out.write_all(banner.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the output: {e}"))?;
    drop(out);
    let state = Arc::new(State {
        url: diesel_lease::pool::with_network_settings::<C>(url),
        refresh: args.refresh,
        tables,
        control_tables,
        token,
        hosts,
    });
    for mut request in server.incoming_requests() {
        let state = Arc::clone(&state);
        std::thread::spawn(move || {
            let (status, body) = route::<C>(&state, &mut request);
            reply(request, status, body);
        });
    }
    Ok(())
}

/// 16 random bytes as hex.
fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot make a token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What a handler answers: a status and a page.
type Reply = (u16, String);

/// The page is `GET /`; actions are `POST /actions/<name>`.
fn route<C>(state: &State, request: &mut Request) -> Reply
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let path = request
        .url()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();
    if !host_allowed(state, request) {
        return (
            421,
            page::message(
                "Misdirected request",
                "This page answers to the address it printed at start only.",
                state,
            ),
        );
    }
    match (request.method(), path.as_str()) {
        (Method::Get | Method::Head, "/") => {
            (200, page::overview(&snapshot::read::<C>(state), state))
        }
        (Method::Post, p) if p.starts_with(routes::PREFIX) => {
            // A form of a few fields; anything longer is not ours.
            match read_body(request, 16 * 1024) {
                Ok(body) => actions::post::<C>(state, &p[routes::PREFIX.len()..], &body),
                Err(e) => (
                    400,
                    page::message(
                        "Bad request",
                        &format!("cannot read the request: {e}"),
                        state,
                    ),
                ),
            }
        }
        (_, p) if p == "/" || p.starts_with(routes::PREFIX) => (
            405,
            page::message(
                "Method not allowed",
                "The page is read with GET; actions are POSTed by its buttons.",
                state,
            ),
        ),
        _ => (
            404,
            page::message(
                "Not found",
                "There is nothing here: the page is at /.",
                state,
            ),
        ),
    }
}

/// Sends `body` with the headers every page gets.
fn reply(request: Request, status: u16, body: String) {
    let headers = [
        ("Content-Type", "text/html; charset=utf-8"),
        ("Cache-Control", "no-store"),
        ("X-Frame-Options", "DENY"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        // The page's own inline style and script only; forms post to this server only.
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    ];
    let mut response = Response::from_string(body).with_status_code(status);
    for (name, value) in headers {
        if let Ok(h) = Header::from_bytes(name, value) {
            response.add_header(h);
        }
    }
    // The client may have gone; nothing to do about it.
    let _ = request.respond(response);
}

/// Whether the request's `Host` is one the server answers to (see [`State::hosts`]).
fn host_allowed(state: &State, request: &Request) -> bool {
    let Some(hosts) = &state.hosts else {
        return true;
    };
    let host = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Host"))
        .map(|h| h.value.as_str().to_ascii_lowercase());
    host.is_some_and(|host| hosts.contains(&host))
}

/// Whether `given` is the token, compared in constant time.
fn token_matches(token: &str, given: &str) -> bool {
    bool::from(token.as_bytes().ct_eq(given.as_bytes()))
}

/// Reads at most `limit` bytes of a request's body.
fn read_body(request: &mut Request, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    request.as_reader().take(limit).read_to_end(&mut body)?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::{QueueEntry, Requests, SemaphoreView};

    fn state(actions: bool) -> State {
        State {
            url: String::new(),
            refresh: 5,
            tables: Vec::new(),
            control_tables: Vec::new(),
            token: actions.then(|| "0123456789abcdef".to_string()),
            hosts: None,
        }
    }

    #[test]
    fn tables_take_the_flags_of_claims() {
        let spec = TableSpec::parse(
            "jobs --state-column status --claimed running --claimed-at-column claimed_at --older-than 2m --failed dead",
        )
        .unwrap();
        assert_eq!(spec.claims.table, "jobs");
        assert_eq!(spec.claims.claimed.as_deref(), Some("running"));
        assert_eq!(spec.failed.as_deref(), Some("dead"));
        let err = TableSpec::parse("jobs --claimed running").unwrap_err();
        assert!(
            err.starts_with("--table 'jobs --claimed running': "),
            "{err}"
        );
        assert!(TableSpec::parse("  ").is_err());
    }

    #[test]
    fn the_token_must_match_exactly() {
        assert!(token_matches("0123456789abcdef", "0123456789abcdef"));
        assert!(!token_matches("0123456789abcdef", "0123456789abcdeF"));
        assert!(!token_matches("0123456789abcdef", "0123456789abcde"));
        assert!(!token_matches("0123456789abcdef", ""));
        assert_eq!(new_token().unwrap().len(), 32);
        assert_ne!(new_token().unwrap(), new_token().unwrap());
    }

    fn semaphore(requests: Requests, owner: &str) -> SemaphoreView {
        SemaphoreView {
            resource: "process_control#<etl>".into(),
            permits: 1,
            requests,
            queue: vec![QueueEntry {
                ticket: 7,
                owner: owner.into(),
                mode: "shared",
                granted: true,
                requested_at_micros: None,
                granted_at_micros: None,
                expires_at_micros: 2_000_000,
            }],
            read_at_micros: 1_000_000,
        }
    }

    fn overview(semaphores: Vec<SemaphoreView>, state: &State) -> String {
        page::overview(
            &snapshot::Snapshot::Read {
                backend: "SQLite",
                leases: Ok(Vec::new()),
                semaphores: Ok(semaphores),
                tables: Vec::new(),
            },
            state,
        )
    }

    /// A control table's tickets are its own rows: the built-in forced release would remove
    /// another ticket of the same number, so they get no button. Values are escaped.
    #[test]
    fn buttons_only_where_an_action_applies_and_values_escaped() {
        let state = state(true);
        let html = overview(
            vec![semaphore(
                Requests::ControlTable("process_control".into()),
                "<img src=x>",
            )],
            &state,
        );
        assert!(!html.contains("<form"), "{html}");
        assert!(html.contains("&lt;img src=x&gt;") && !html.contains("<img"));
        assert!(html.contains("process_control#&lt;etl&gt;"));
        let html = overview(vec![semaphore(Requests::BuiltIn, "w")], &state);
        assert!(
            html.contains("action=\"/actions/release-ticket\""),
            "{html}"
        );
        // Read-only: no buttons, no token field.
        let html = overview(vec![semaphore(Requests::BuiltIn, "w")], &self::state(false));
        assert!(!html.contains("<form") && !html.contains("id=\"token\""));
    }

    #[test]
    fn an_unreachable_database_says_so_and_refreshes() {
        let html = page::overview(
            &snapshot::Snapshot::Unreachable {
                backend: "PostgreSQL",
                error: "cannot connect to the database: <refused>".into(),
            },
            &state(false),
        );
        assert!(html.contains("cannot be reached") && html.contains("&lt;refused&gt;"));
        assert!(
            html.contains("http-equiv=\"refresh\" content=\"5;url=/\""),
            "{html}"
        );
    }
}
