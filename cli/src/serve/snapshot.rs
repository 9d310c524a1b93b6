//! What the page shows, read in one go over a new connection: leases, semaphores with their
//! queues, the told-about tables' claims per state, and who holds what.

use std::collections::BTreeMap;

use diesel_lease::admin::{self, LeaseEntry};
use diesel_lease::BorrowConnection;

use super::{State, TableSpec};
use crate::backend::CliConnection;
use crate::dialect::CliDialect;
use crate::queues::{semaphores_with_queues, SemaphoreView};
use crate::sql::StateRow;

/// The database as the page shows it, or why it could not be read.
#[derive(Debug)]
pub(super) enum Snapshot<'a> {
    /// No connection: the page says so and keeps refreshing.
    Unreachable {
        backend: &'static str,
        error: String,
    },
    /// What was read; each part may have failed on its own.
    Read {
        backend: &'static str,
        leases: Result<Vec<LeaseEntry>, String>,
        semaphores: Result<Vec<SemaphoreView>, String>,
        tables: Vec<TableView<'a>>,
    },
}

/// One told-about table.
#[derive(Debug)]
pub(super) struct TableView<'a> {
    pub(super) spec: &'a TableSpec,
    pub(super) rows: Result<Vec<StateRow>, Unreadable>,
    /// The pauses of this table in force (`(key column, key value)`, both empty for the whole
    /// table), or why they could not be read (diesel-lease's migrations not run).
    pub(super) pauses: Result<Vec<(String, String)>, String>,
}

/// Why a table's claims are not shown.
#[derive(Debug)]
pub(super) enum Unreadable {
    /// The table is not claimable as described: what is missing.
    NotClaimable(Vec<String>),
    /// The database refused the read.
    Failed(String),
}

/// Reads the page's data over a new connection.
pub(super) fn read<C>(state: &State) -> Snapshot<'_>
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let backend = <C::Backend as CliDialect>::NAME;
    let mut conn = match crate::backend::connect::<C>(&state.url) {
        Ok(conn) => conn,
        Err(error) => return Snapshot::Unreachable { backend, error },
    };
    let pauses = crate::claimctl::pauses(&mut conn).map_err(|e| e.to_string());
    Snapshot::Read {
        backend,
        leases: admin::leases(&mut conn).map_err(|e| e.to_string()),
        semaphores: semaphores_with_queues(&mut conn, &state.control_tables),
        tables: state
            .tables
            .iter()
            .map(|spec| TableView {
                spec,
                rows: table_rows(&mut conn, spec),
                pauses: pauses.clone().map(|all| {
                    all.into_iter()
                        .filter(|p| p.table_name == spec.claims.table)
                        .map(|p| (p.key_column, p.key_value))
                        .collect()
                }),
            })
            .collect(),
    }
}

/// A table's rows per state, once its columns are known to be there.
fn table_rows<C: CliConnection>(
    conn: &mut C,
    spec: &TableSpec,
) -> Result<Vec<StateRow>, Unreadable> {
    let missing = missing_columns(conn, spec).map_err(Unreadable::Failed)?;
    if !missing.is_empty() {
        return Err(Unreadable::NotClaimable(missing));
    }
    crate::claims::claim_rows(conn, &spec.claims).map_err(Unreadable::Failed)
}

/// What a table lacks to be read as described: the table, or the columns named.
fn missing_columns<C: CliConnection>(
    conn: &mut C,
    spec: &TableSpec,
) -> Result<Vec<String>, String> {
    let args = &spec.claims;
    let columns = conn
        .columns(&args.table)
        .map_err(|e| format!("cannot read the columns of `{}`: {e}", args.table))?;
    if columns.is_empty() {
        return Ok(vec![format!("there is no table `{}`", args.table)]);
    }
    let named = [
        ("state column", Some(&args.state_column)),
        ("claimed-at column", args.claimed_at_column.as_ref()),
    ];
    Ok(named
        .into_iter()
        .filter_map(|(what, name)| {
            let name = name?;
            (!columns.iter().any(|c| &c.name == name))
                .then(|| format!("`{}` has no {what} `{name}`", args.table))
        })
        .collect())
}

/// What one holder holds: leases and semaphore tickets.
#[derive(Debug, Default)]
pub(super) struct Holdings {
    pub(super) leases: Vec<String>,
    pub(super) permits: Vec<String>,
}

/// Who holds what: held leases (not those a holder released and only an at-least-for keeps)
/// and granted tickets by holder.
pub(super) fn holders(
    leases: &[LeaseEntry],
    semaphores: &[SemaphoreView],
) -> BTreeMap<String, Holdings> {
    let mut by_holder: BTreeMap<String, Holdings> = BTreeMap::new();
    for l in leases
        .iter()
        .filter(|l| crate::report::LeaseState::of(&l.record) == crate::report::LeaseState::Held)
    {
        by_holder
            .entry(l.record.holder.clone())
            .or_default()
            .leases
            .push(l.name.clone());
    }
    for s in semaphores {
        for q in s.queue.iter().filter(|q| q.granted) {
            by_holder
                .entry(q.owner.clone())
                .or_default()
                .permits
                .push(format!("{} (ticket {}, {})", s.resource, q.ticket, q.mode));
        }
    }
    by_holder
}
