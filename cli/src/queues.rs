//! Every semaphore with its queue, shared by `semaphores` and `serve`: the built-in tickets
//! table's queues (through `diesel_lease::admin`), and the queues of semaphores on a user's
//! control table (seed 001, `#[control_table(...)]`), read from that table as the operator
//! describes it with `--control-table`. Such a semaphore's lock row in `diesel_lease_semaphores`
//! is named `<table>#<resource>` (or `<table>` for a table that serves one resource); its
//! requests are rows of the user's table, which only a description can read.

use clap::Parser;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::sql_types::{BigInt, Bool, Text};
use diesel::{QueryResult, QueryableByName};
use diesel_lease::admin;
use diesel_lease::BorrowConnection;

use crate::backend::CliConnection;
use crate::dialect::{CliDialect, Ident};

/// The control tables to read queues from.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ControlTablesArgs {
    /// A control table whose semaphores to show with their queues: its name, then the columns
    /// as `#[control_table(…)]` names them, as one argument (repeat for several):
    /// `--control-table 'process_control --ticket queue_position --owner requesting_id
    /// --resource resource --mode access_type --shared R --exclusive W'` (`--granted`,
    /// `--expires-at`: when renamed).
    #[arg(long = "control-table", value_name = "NAME [FLAGS]")]
    control_tables: Vec<String>,
}

/// One control table, as `#[control_table(…)]` describes it.
#[derive(Debug, Parser)]
#[command(name = "--control-table", no_binary_name = true)]
pub(crate) struct ControlTable {
    /// The table.
    #[arg(long)]
    table: String,
    /// `ticket = …`: the request order (an integer column).
    #[arg(long)]
    ticket: String,
    /// `owner = …`: who asked.
    #[arg(long)]
    owner: String,
    /// `resource = …`: which resource (none: the table serves one).
    #[arg(long)]
    resource: Option<String>,
    /// `mode = …`: the access-type column (none: every request is shared).
    #[arg(long, requires_all = ["shared", "exclusive"])]
    mode: Option<String>,
    /// `shared = "…"`: the value of a shared request.
    #[arg(long, requires = "mode")]
    shared: Option<String>,
    /// `exclusive = "…"`: the value of an exclusive request.
    #[arg(long, requires = "mode")]
    exclusive: Option<String>,
    /// `granted = …`: the granted flag.
    #[arg(long, default_value = "granted")]
    granted: String,
    /// `expires_at = …`: the expiry (µs since 1970).
    #[arg(long = "expires-at", default_value = "expires_at")]
    expires_at: String,
}

impl ControlTablesArgs {
    /// The descriptions, parsed as their flags say.
    pub(crate) fn parse(&self) -> Result<Vec<ControlTable>, String> {
        self.control_tables
            .iter()
            .map(|spec| {
                let mut words = spec.split_whitespace();
                let name = words
                    .next()
                    .ok_or("`--control-table` needs a table name, then its flags")?;
                ControlTable::try_parse_from(["--table", name].into_iter().chain(words)).map_err(
                    |e| {
                        let text = e.to_string();
                        let first = text.lines().next().unwrap_or_default();
                        format!(
                            "--control-table '{spec}': {}",
                            first.trim_start_matches("error: ")
                        )
                    },
                )
            })
            .collect()
    }
}

/// Where a semaphore's requests are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requests {
    /// The built-in tickets table: tickets there can be force-released.
    BuiltIn,
    /// A described control table.
    ControlTable(String),
    /// A control table nobody described: its queue is unknown.
    Undescribed(String),
}

/// One request in a queue.
#[derive(Debug, Clone)]
pub(crate) struct QueueEntry {
    pub(crate) ticket: i64,
    pub(crate) owner: String,
    /// `shared` or `exclusive`.
    pub(crate) mode: &'static str,
    pub(crate) granted: bool,
    /// When it was queued (µs since 1970); a control table does not keep it.
    pub(crate) requested_at_micros: Option<i64>,
    /// When it was granted (µs since 1970); a control table does not keep it.
    pub(crate) granted_at_micros: Option<i64>,
    pub(crate) expires_at_micros: i64,
}

impl Requests {
    /// Where the requests are, for people; `None` for the built-in table.
    pub(crate) fn describe(&self) -> Option<String> {
        match self {
            Requests::BuiltIn => None,
            Requests::ControlTable(t) => Some(format!("on control table `{t}`")),
            Requests::Undescribed(t) => Some(format!(
                "queue in control table `{t}`: describe it with --control-table to see it"
            )),
        }
    }
}

/// A semaphore and its queue.
#[derive(Debug, Clone)]
pub(crate) struct SemaphoreView {
    pub(crate) resource: String,
    pub(crate) permits: i32,
    pub(crate) requests: Requests,
    pub(crate) queue: Vec<QueueEntry>,
    /// The database clock when it was read (µs since 1970).
    pub(crate) read_at_micros: i64,
}

/// Every semaphore with its queue, control tables' included.
pub(crate) fn semaphores_with_queues<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    tables: &[ControlTable],
) -> Result<Vec<SemaphoreView>, String> {
    let all = admin::semaphores(conn).map_err(|e| e.to_string())?;
    all.into_iter()
        .map(|s| {
            let mut view = SemaphoreView {
                requests: Requests::BuiltIn,
                queue: s
                    .queue
                    .iter()
                    .map(|q| QueueEntry {
                        ticket: q.ticket,
                        owner: q.owner.clone(),
                        mode: q.mode.as_str(),
                        granted: q.granted,
                        requested_at_micros: Some(q.requested_at_micros),
                        granted_at_micros: q.granted_at_micros,
                        expires_at_micros: q.expires_at_micros,
                    })
                    .collect(),
                resource: s.resource,
                permits: s.permits,
                read_at_micros: s.read_at_micros,
            };
            // A built-in queue is never empty for long while its resource is in use; an empty
            // one whose name says `<table>#…` may be a control table's.
            if view.queue.is_empty() {
                if let Some((table, resource)) = control_key(&view.resource, tables) {
                    view.queue = control_queue(conn, table, resource)
                        .map_err(|e| format!("cannot read the queue in `{}`: {e}", table.table))?;
                    view.requests = Requests::ControlTable(table.table.clone());
                } else if let Some((table, _)) = view.resource.split_once('#') {
                    view.requests = Requests::Undescribed(table.to_string());
                }
            }
            Ok(view)
        })
        .collect()
}

/// The described control table a lock row's name belongs to, and the resource it names.
fn control_key<'a, 'r>(
    key: &'r str,
    tables: &'a [ControlTable],
) -> Option<(&'a ControlTable, Option<&'r str>)> {
    tables.iter().find_map(|t| match &t.resource {
        Some(_) => key
            .strip_prefix(t.table.as_str())
            .and_then(|rest| rest.strip_prefix('#'))
            .map(|resource| (t, Some(resource))),
        None => (key == t.table).then_some((t, None)),
    })
}

fn control_queue<C: CliConnection>(
    conn: &mut C,
    table: &ControlTable,
    resource: Option<&str>,
) -> QueryResult<Vec<QueueEntry>> {
    let rows: Vec<ControlRow> = conn.load_rows(&ControlQueue {
        table,
        owner: Ident(&table.owner),
        mode: table.mode.as_deref().map(Ident),
        resource,
    })?;
    Ok(rows
        .into_iter()
        .map(|r| QueueEntry {
            ticket: r.ticket,
            mode: match (&table.mode, &table.shared) {
                (Some(_), Some(shared)) if &r.mode != shared => "exclusive",
                _ => "shared",
            },
            owner: r.owner,
            granted: r.granted,
            requested_at_micros: None,
            granted_at_micros: None,
            expires_at_micros: r.expires_at,
        })
        .collect())
}

/// A resource's requests on a control table, in ticket order:
///
/// `SELECT CAST(ticket AS BIGINT), CAST(owner AS TEXT), CAST(mode AS TEXT) | '', granted,
///  CAST(expires_at AS BIGINT) FROM t [WHERE resource = $1] ORDER BY ticket`
#[derive(Debug)]
pub(crate) struct ControlQueue<'a> {
    table: &'a ControlTable,
    owner: Ident<'a>,
    mode: Option<Ident<'a>>,
    resource: Option<&'a str>,
}

/// One line of [`ControlQueue`].
#[derive(Debug, QueryableByName)]
pub(crate) struct ControlRow {
    #[diesel(sql_type = BigInt)]
    ticket: i64,
    #[diesel(sql_type = Text)]
    owner: String,
    #[diesel(sql_type = Text)]
    mode: String,
    #[diesel(sql_type = Bool)]
    granted: bool,
    #[diesel(sql_type = BigInt)]
    expires_at: i64,
}

impl<DB: CliDialect> QueryFragment<DB> for ControlQueue<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let t = self.table;
        out.push_sql("SELECT ");
        DB::push_as_bigint(&mut out, &t.ticket)?;
        out.push_sql(" AS ticket, ");
        DB::push_as_text(&mut out, &self.owner)?;
        out.push_sql(" AS owner, ");
        match &self.mode {
            Some(mode) => DB::push_as_text(&mut out, mode)?,
            // A constant of this file, not data: every request of the table is shared.
            None => out.push_sql("''"),
        }
        out.push_sql(" AS mode, ");
        out.push_identifier(&t.granted)?;
        out.push_sql(" AS granted, ");
        DB::push_as_bigint(&mut out, &t.expires_at)?;
        out.push_sql(" AS expires_at FROM ");
        out.push_identifier(&t.table)?;
        if let (Some(column), Some(resource)) = (&t.resource, self.resource) {
            out.push_sql(" WHERE ");
            out.push_identifier(column)?;
            out.push_sql(" = ");
            DB::bind_str(&mut out, resource)?;
        }
        out.push_sql(" ORDER BY ");
        out.push_identifier(&t.ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(spec: &str) -> ControlTable {
        ControlTablesArgs {
            control_tables: vec![spec.into()],
        }
        .parse()
        .expect("parses")
        .remove(0)
    }

    #[test]
    fn lock_rows_are_matched_to_their_control_table() {
        let tables = [
            table(
                "process_control --ticket queue_position --owner requesting_id --resource resource",
            ),
            table("single --ticket id --owner who"),
        ];
        let key = |k| control_key(k, &tables).map(|(t, r)| (t.table.as_str(), r));
        assert_eq!(
            key("process_control#etl"),
            Some(("process_control", Some("etl")))
        );
        assert_eq!(
            key("process_control#a#b"),
            Some(("process_control", Some("a#b")))
        );
        assert_eq!(key("single"), Some(("single", None)));
        assert_eq!(key("single#x"), None);
        assert_eq!(key("process_controlled#x"), None);
        assert_eq!(key("etl"), None);
    }

    #[test]
    fn a_mode_needs_its_values() {
        let args = ControlTablesArgs {
            control_tables: vec!["t --ticket id --owner o --mode m".into()],
        };
        let err = args.parse().unwrap_err();
        assert!(
            err.starts_with("--control-table 't --ticket id --owner o --mode m': "),
            "{err}"
        );
    }
}
