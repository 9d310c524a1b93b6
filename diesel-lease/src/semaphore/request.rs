//! One caller's request for a resource, and the table its rows live in: what the protocol's
//! transactions (`protocol.rs`), the ways of reaching the database (`access.rs`) and the shared
//! polls (`gate.rs`) all work on. It imports none of them.

use std::time::Duration;

use lease_core::admission::Mode;

use super::control::OnEveryConnection;
use super::control::SemaphoreDialect;
use super::statements::SemaphoreStatements;
use crate::{Result, Ttl};

/// One caller's request for a resource: everything the transactions need.
#[derive(Debug, Clone)]
pub(super) struct Request {
    pub(super) resource: String,
    pub(super) permits: i32,
    pub(super) owner: String,
    pub(super) mode: Mode,
    pub(super) ttl: Ttl,
    /// How long dropping a permit waits at most; also how long giving up at the deadline,
    /// cleaning up after an error, a release and `try_acquire` wait for a connection and for
    /// the resource's lock.
    pub(super) drop_wait: Duration,
    /// The user's control table the requests are rows of; `None`: the built-in tickets table.
    pub(super) table: Option<ControlTarget>,
    /// Delete the resource's row when a release (or a give-up) leaves its queue empty: for
    /// resources named after data (the `Worker`'s per-key semaphores), which would otherwise
    /// leave a row per name ever used.
    pub(super) remove_when_idle: bool,
}

/// A resource whose requests are rows of the user's control table (see `control.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ControlTarget {
    /// The table, reached through whichever connection type the request runs on.
    pub(super) table: &'static dyn OnEveryConnection,
    /// The resource as the table stores it (`None`: the table has no resource column).
    pub(super) resource: Option<String>,
}

/// Runs `f` with the protocol's statements on `conn` for `target`'s table (the connection's
/// own, for the built-in tables).
pub(super) fn on_table<C: SemaphoreDialect, R>(
    target: Option<&ControlTarget>,
    conn: &mut C,
    f: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<R>,
) -> Result<R> {
    let Some(target) = target else {
        return f(conn);
    };
    let (mut f, mut out) = (Some(f), None);
    C::requests_on(target.table).run(conn, target.resource.as_deref(), &mut |sql| {
        if let Some(f) = f.take() {
            out = Some(f(sql)?);
        }
        Ok(())
    })?;
    // `run` calls the body exactly once; should it ever not, that is an error, not a panic.
    out.ok_or_else(|| {
        crate::Error::Database(diesel::result::Error::QueryBuilderError(
            "a control table's statements did not run their body".into(),
        ))
    })
}

impl Request {
    /// [`on_table`] for this request's table.
    pub(super) fn on<C: SemaphoreDialect, R>(
        &self,
        conn: &mut C,
        f: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<R>,
    ) -> Result<R> {
        on_table(self.table.as_ref(), conn, f).map_err(|e| e.concerning(|| self.resource.clone()))
    }
}
