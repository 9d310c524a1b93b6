//! The statements of the semaphore protocol, written once per backend.
//!
//! [`Sql`] is object safe, so the protocol (`protocol.rs`) is plain code over `&mut dyn Sql`; the
//! generic public entry points reach it through [`sql_of`]. The statements that read the same on
//! every backend come from one macro; the ones that differ (the lock, the insert, notifications)
//! are written per backend below it.

use std::any::Any;
use std::time::Duration;

use diesel::backend::Backend;
use diesel::expression::{is_aggregate, AppearsOnTable, Expression, ValidGrouping};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType};

use super::schema::{
    diesel_lease_semaphore_tickets as tickets, diesel_lease_semaphores as resources,
};
use crate::clock::DbNowMicros;
use crate::{BackendKind, LeaseConnection, Ttl};
use lease_core::admission::{Mode, QueueEntry};

/// The transaction body run by [`Sql::serialized`].
pub(super) type Body<'a> = dyn FnMut(&mut dyn Sql) -> crate::Result<()> + 'a;

/// The PostgreSQL channel releases notify on; the payload is the resource name.
#[cfg(feature = "postgres")]
const CHANNEL_LISTEN: &str = "LISTEN diesel_lease_semaphores";
#[cfg(feature = "postgres")]
const CHANNEL_UNLISTEN: &str = "UNLISTEN diesel_lease_semaphores";
#[cfg(feature = "postgres")]
const CHANNEL_NOTIFY: &str = "SELECT pg_notify('diesel_lease_semaphores', $1)";

/// How often a waiting PostgreSQL connection looks for a notification that arrived. Local
/// (reads the socket buffer), no query.
#[cfg(feature = "postgres")]
const NOTIFICATION_CHECK: Duration = Duration::from_millis(2);

/// One row of a resource's queue.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = tickets)]
pub(super) struct TicketRow {
    pub(super) ticket: i64,
    pub(super) owner: String,
    pub(super) mode: String,
    pub(super) granted: bool,
    pub(super) requested_at: i64,
    pub(super) granted_at: Option<i64>,
    pub(super) expires_at: i64,
}

impl TicketRow {
    /// The row as the admission rule sees it. A mode this version does not know is treated as
    /// exclusive: it can only make admission stricter.
    pub(super) fn entry(&self) -> QueueEntry {
        QueueEntry {
            ticket: self.ticket,
            mode: Mode::parse(&self.mode).unwrap_or(Mode::Exclusive),
            granted: self.granted,
        }
    }
}

/// A new request's row.
#[derive(Debug, Clone, Copy)]
pub(super) struct NewTicket<'a> {
    pub(super) resource: &'a str,
    pub(super) owner: &'a str,
    pub(super) mode: Mode,
    pub(super) ttl: Ttl,
}

/// The statements of the protocol on one connection.
pub(super) trait Sql {
    /// Runs `body` in a transaction in which every read sees the latest committed rows: READ
    /// COMMITTED on PostgreSQL and MySQL (whatever the session default), `BEGIN IMMEDIATE` on
    /// SQLite.
    fn serialized(&mut self, body: &mut Body<'_>) -> crate::Result<()>;
    /// Locks the resource's row until the end of the transaction and returns its permit count;
    /// `None` when the row does not exist yet.
    fn lock_resource(&mut self, resource: &str) -> QueryResult<Option<i32>>;
    /// Creates the resource's row unless it exists (in its own autocommit statement).
    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()>;
    /// Changes the resource's permit count.
    fn set_permits(&mut self, resource: &str, permits: i32) -> QueryResult<()>;
    /// Deletes the resource's requests whose owners stopped heartbeating.
    fn remove_expired(&mut self, resource: &str) -> QueryResult<usize>;
    /// The resource's requests in ticket order.
    fn queue(&mut self, resource: &str) -> QueryResult<Vec<TicketRow>>;
    /// Inserts a waiting request and returns its ticket.
    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64>;
    /// Marks waiting requests granted.
    fn grant(&mut self, tickets: &[i64]) -> QueryResult<usize>;
    /// Pushes a request's expiry to now + ttl; returns the number of rows found (0: gone).
    fn touch(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize>;
    /// [`Sql::touch`] only if the request is granted: 1 means "granted, alive, and extended".
    fn touch_granted(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize>;
    /// Deletes a request; returns the number of rows deleted.
    fn delete_ticket(&mut self, ticket: i64, owner: &str) -> QueryResult<usize>;
    /// Tells waiters of `resource` that its queue changed (delivered at commit; PostgreSQL only).
    fn notify(&mut self, resource: &str) -> QueryResult<()>;
    /// Starts (`true`) or stops listening for [`Sql::notify`] (PostgreSQL only).
    fn listen(&mut self, on: bool) -> QueryResult<()>;
    /// Sleeps up to `max`, returning early when `resource` was notified (PostgreSQL); `true`
    /// when a notification woke it.
    fn wait_for_wakeup(&mut self, resource: &str, max: Duration) -> QueryResult<bool>;
}

/// The protocol's statements on `conn`.
pub(super) fn sql_of<C: LeaseConnection>(conn: &mut C) -> crate::Result<&mut dyn Sql> {
    let any: &mut dyn Any = conn;
    #[allow(unreachable_patterns)]
    let found: Option<&mut dyn Sql> = match C::KIND {
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => any
            .downcast_mut::<diesel::PgConnection>()
            .map(|c| c as &mut dyn Sql),
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => any
            .downcast_mut::<diesel::SqliteConnection>()
            .map(|c| c as &mut dyn Sql),
        #[cfg(feature = "mysql")]
        BackendKind::Mysql => any
            .downcast_mut::<diesel::MysqlConnection>()
            .map(|c| c as &mut dyn Sql),
        _ => None,
    };
    // Unreachable: `LeaseConnection` is sealed and implemented exactly for the types above.
    found.ok_or_else(|| {
        crate::Error::Database(diesel::result::Error::QueryBuilderError(
            "diesel-lease semaphores do not know this connection type".into(),
        ))
    })
}

/// `now + micros` on the database clock, as µs since 1970.
#[derive(Debug, Clone, Copy, QueryId)]
struct NowPlus {
    now: DbNowMicros,
    micros: i64,
}

impl NowPlus {
    fn ttl(ttl: Ttl) -> Self {
        NowPlus {
            now: DbNowMicros,
            micros: ttl.as_micros(),
        }
    }
}

impl Expression for NowPlus {
    type SqlType = BigInt;
}
impl<QS> AppearsOnTable<QS> for NowPlus {}
impl<GB> ValidGrouping<GB> for NowPlus {
    type IsAggregate = is_aggregate::Never;
}

impl<DB> QueryFragment<DB> for NowPlus
where
    DB: Backend + HasSqlType<BigInt>,
    DbNowMicros: QueryFragment<DB>,
    i64: ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("(");
        self.now.walk_ast(out.reborrow())?;
        out.push_sql(" + ");
        out.push_bind_param::<BigInt, i64>(&self.micros)?;
        out.push_sql(")");
        Ok(())
    }
}

/// The statements that read the same on every backend.
macro_rules! common_statements {
    () => {
        fn set_permits(&mut self, resource: &str, permits: i32) -> QueryResult<()> {
            diesel::update(resources::table.find(resource))
                .set(resources::permits.eq(permits))
                .execute(self)
                .map(drop)
        }

        fn remove_expired(&mut self, resource: &str) -> QueryResult<usize> {
            diesel::delete(
                tickets::table
                    .filter(tickets::resource.eq(resource))
                    .filter(tickets::expires_at.lt(DbNowMicros)),
            )
            .execute(self)
        }

        fn queue(&mut self, resource: &str) -> QueryResult<Vec<TicketRow>> {
            tickets::table
                .filter(tickets::resource.eq(resource))
                .order(tickets::ticket.asc())
                .select(TicketRow::as_select())
                .load(self)
        }

        fn grant(&mut self, granted: &[i64]) -> QueryResult<usize> {
            if granted.is_empty() {
                return Ok(0);
            }
            diesel::update(
                tickets::table
                    .filter(tickets::ticket.eq_any(granted))
                    .filter(tickets::granted.eq(false)),
            )
            .set((
                tickets::granted.eq(true),
                tickets::granted_at.eq(DbNowMicros.nullable()),
            ))
            .execute(self)
        }

        fn touch(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize> {
            diesel::update(
                tickets::table
                    .filter(tickets::ticket.eq(ticket))
                    .filter(tickets::owner.eq(owner)),
            )
            .set(tickets::expires_at.eq(NowPlus::ttl(ttl)))
            .execute(self)
        }

        fn touch_granted(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize> {
            diesel::update(
                tickets::table
                    .filter(tickets::ticket.eq(ticket))
                    .filter(tickets::owner.eq(owner))
                    .filter(tickets::granted.eq(true)),
            )
            .set(tickets::expires_at.eq(NowPlus::ttl(ttl)))
            .execute(self)
        }

        fn delete_ticket(&mut self, ticket: i64, owner: &str) -> QueryResult<usize> {
            diesel::delete(
                tickets::table
                    .filter(tickets::ticket.eq(ticket))
                    .filter(tickets::owner.eq(owner)),
            )
            .execute(self)
        }
    };
}

/// The values of a new waiting request (everything but the ticket).
macro_rules! new_ticket_values {
    ($new:expr) => {
        (
            tickets::resource.eq($new.resource),
            tickets::owner.eq($new.owner),
            tickets::mode.eq($new.mode.as_str()),
            tickets::granted.eq(false),
            tickets::requested_at.eq(DbNowMicros),
            tickets::expires_at.eq(NowPlus::ttl($new.ttl)),
        )
    };
}

#[cfg(feature = "postgres")]
impl Sql for diesel::PgConnection {
    common_statements!();

    fn serialized(&mut self, body: &mut Body<'_>) -> crate::Result<()> {
        self.build_transaction().read_committed().run(|c| body(c))
    }

    fn lock_resource(&mut self, resource: &str) -> QueryResult<Option<i32>> {
        resources::table
            .find(resource)
            .select(resources::permits)
            .for_update()
            .first(self)
            .optional()
    }

    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()> {
        diesel::insert_into(resources::table)
            .values((
                resources::resource.eq(resource),
                resources::permits.eq(permits),
            ))
            .on_conflict_do_nothing()
            .execute(self)
            .map(drop)
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        diesel::insert_into(tickets::table)
            .values(new_ticket_values!(new))
            .returning(tickets::ticket)
            .get_result(self)
    }

    fn notify(&mut self, resource: &str) -> QueryResult<()> {
        diesel::sql_query(CHANNEL_NOTIFY)
            .bind::<diesel::sql_types::Text, _>(resource)
            .execute(self)
            .map(drop)
    }

    fn listen(&mut self, on: bool) -> QueryResult<()> {
        diesel::sql_query(if on { CHANNEL_LISTEN } else { CHANNEL_UNLISTEN }).execute(self)?;
        if !on {
            // Drop what arrived meanwhile, so a pooled connection goes back clean.
            for notification in self.notifications_iter() {
                notification?;
            }
        }
        Ok(())
    }

    fn wait_for_wakeup(&mut self, resource: &str, max: Duration) -> QueryResult<bool> {
        let deadline = std::time::Instant::now() + max;
        loop {
            let mut woken = false;
            for notification in self.notifications_iter() {
                woken |= notification?.payload == resource;
            }
            let now = std::time::Instant::now();
            if woken || now >= deadline {
                return Ok(woken);
            }
            std::thread::sleep(NOTIFICATION_CHECK.min(deadline - now));
        }
    }
}

#[cfg(feature = "sqlite")]
impl Sql for diesel::SqliteConnection {
    common_statements!();

    fn serialized(&mut self, body: &mut Body<'_>) -> crate::Result<()> {
        crate::backend::refuse_nested(self)?;
        // BEGIN IMMEDIATE: one writer at a time for the whole database file, so admission
        // decisions are serialized without a row lock. Writers of this process take turns
        // first (SQLite's busy handler is not fair; see `queue`).
        let _turn = crate::queue::sqlite_turn();
        self.write_transaction(|c| body(c))
    }

    fn lock_resource(&mut self, resource: &str) -> QueryResult<Option<i32>> {
        resources::table
            .find(resource)
            .select(resources::permits)
            .first(self)
            .optional()
    }

    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()> {
        diesel::insert_or_ignore_into(resources::table)
            .values((
                resources::resource.eq(resource),
                resources::permits.eq(permits),
            ))
            .execute(self)
            .map(drop)
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        diesel::insert_into(tickets::table)
            .values(new_ticket_values!(new))
            .returning(tickets::ticket)
            .get_result(self)
    }

    fn notify(&mut self, _resource: &str) -> QueryResult<()> {
        Ok(())
    }

    fn listen(&mut self, _on: bool) -> QueryResult<()> {
        Ok(())
    }

    fn wait_for_wakeup(&mut self, _resource: &str, max: Duration) -> QueryResult<bool> {
        std::thread::sleep(max);
        Ok(false)
    }
}

#[cfg(feature = "mysql")]
mod mysql_only {
    diesel::define_sql_function! {
        /// The auto-increment value this connection's last insert generated.
        fn last_insert_id() -> diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
    }
}

#[cfg(feature = "mysql")]
impl Sql for diesel::MysqlConnection {
    common_statements!();

    fn serialized(&mut self, body: &mut Body<'_>) -> crate::Result<()> {
        crate::backend::refuse_nested(self)?;
        // READ COMMITTED (`write_transaction` sets it for this transaction): every statement
        // reads the latest committed rows (after our row lock is granted), and InnoDB takes no
        // gap locks, so requests for different resources never deadlock on the tickets index.
        self.write_transaction(|c| body(c))
    }

    fn lock_resource(&mut self, resource: &str) -> QueryResult<Option<i32>> {
        resources::table
            .find(resource)
            .select(resources::permits)
            .for_update()
            .first(self)
            .optional()
    }

    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()> {
        diesel::insert_or_ignore_into(resources::table)
            .values((
                resources::resource.eq(resource),
                resources::permits.eq(permits),
            ))
            .execute(self)
            .map(drop)
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        diesel::insert_into(tickets::table)
            .values(new_ticket_values!(new))
            .execute(self)?;
        let id: u64 = diesel::select(mysql_only::last_insert_id()).get_result(self)?;
        i64::try_from(id).map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
    }

    fn notify(&mut self, _resource: &str) -> QueryResult<()> {
        Ok(())
    }

    fn listen(&mut self, _on: bool) -> QueryResult<()> {
        Ok(())
    }

    fn wait_for_wakeup(&mut self, _resource: &str, max: Duration) -> QueryResult<bool> {
        std::thread::sleep(max);
        Ok(false)
    }
}
