//! The statements of the semaphore protocol.
//!
//! [`SemaphoreStatements`] is object safe, so the protocol (`protocol.rs`) is plain code over
//! `&mut dyn SemaphoreStatements`; every connection implements it, below (PostgreSQL, SQLite)
//! and in `mysql_like.rs`. The statements that read the same on every backend are written once, in
//! `semaphore_statements!`; the ones that differ (the insert that returns the ticket) in
//! `insert_returning_statements!` and `mysql_like.rs`. Notifications are the ground floor's
//! ([`Notifications`](crate::notify::Notifications)).

use std::time::Duration;

use diesel::prelude::*;

use super::schema::diesel_lease_semaphore_tickets as tickets;
use crate::Ttl;
use lease_core::admission::{Mode, QueueEntry};

/// The transaction body run by [`SemaphoreStatements::serialized`].
pub(crate) type Body<'a> = dyn FnMut(&mut dyn SemaphoreStatements) -> crate::Result<()> + 'a;

/// One row of a resource's queue.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = tickets)]
pub struct TicketRow {
    pub ticket: i64,
    pub owner: String,
    pub mode: String,
    pub granted: bool,
    pub requested_at: i64,
    pub granted_at: Option<i64>,
    pub expires_at: i64,
}

impl TicketRow {
    /// The row as the admission rule sees it. A mode this version does not know is treated as
    /// exclusive: it can only make admission stricter.
    pub fn entry(&self) -> QueueEntry {
        QueueEntry {
            ticket: self.ticket,
            mode: Mode::parse(&self.mode).unwrap_or(Mode::Exclusive),
            granted: self.granted,
        }
    }
}

/// A new request's row.
#[derive(Debug, Clone, Copy)]
pub struct NewTicket<'a> {
    pub resource: &'a str,
    pub owner: &'a str,
    pub mode: Mode,
    pub ttl: Ttl,
}

/// The statements of the protocol on one connection.
pub trait SemaphoreStatements {
    /// Runs `body` in the backend's write transaction (READ COMMITTED on PostgreSQL and MySQL,
    /// `BEGIN IMMEDIATE` on SQLite), refusing to run inside the caller's transaction. Waits for
    /// locks inside it (the resource's row, the SQLite write lock) end after `max_wait` with a
    /// lock timeout ([`Error::Timeout`](crate::Error::Timeout)); `None`: the server's own bound.
    #[doc(hidden)]
    fn serialized(&mut self, max_wait: Option<Duration>, body: &mut Body<'_>) -> crate::Result<()>;
    /// Locks the resource's row until the end of the transaction and returns its permit count;
    /// `None` when the row does not exist yet.
    #[doc(hidden)]
    fn lock_resource(&mut self, resource: &str) -> QueryResult<Option<i32>>;
    /// Creates the resource's row unless it exists (in its own autocommit statement).
    #[doc(hidden)]
    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()>;
    /// Changes the resource's permit count.
    #[doc(hidden)]
    fn set_permits(&mut self, resource: &str, permits: i32) -> QueryResult<()>;
    /// Deletes the resource's row (run with the row locked, once its queue is empty).
    #[doc(hidden)]
    fn delete_resource(&mut self, resource: &str) -> QueryResult<usize>;
    /// Deletes the resource's requests whose owners stopped heartbeating.
    #[doc(hidden)]
    fn remove_expired(&mut self, resource: &str) -> QueryResult<usize>;
    /// The resource's requests in ticket order.
    #[doc(hidden)]
    fn queue(&mut self, resource: &str) -> QueryResult<Vec<TicketRow>>;
    /// Inserts a waiting request and returns its ticket.
    #[doc(hidden)]
    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64>;
    /// Makes the transaction write the resource's row (`permits`: its stored count) where the
    /// row's lock alone does not make two deciding transactions conflict (MySQL, for a
    /// multi-primary cluster: see `mysql_like.rs`); nothing elsewhere. Every transaction that grants
    /// calls it, right before [`SemaphoreStatements::grant`]; one that only looks, queues or
    /// leaves does not, so it does not conflict with the others.
    #[doc(hidden)]
    fn certify(&mut self, resource: &str, permits: i32) -> QueryResult<()>;
    /// Marks waiting requests granted.
    #[doc(hidden)]
    fn grant(&mut self, tickets: &[i64]) -> QueryResult<usize>;
    /// Pushes a request's expiry to now + ttl; returns the number of rows found (0: gone).
    #[doc(hidden)]
    fn touch(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize>;
    /// [`SemaphoreStatements::touch`] for several requests of `owner` in one statement (the
    /// waiters of one process that share a poller, `semaphore/gate.rs`); returns the number of
    /// rows found.
    #[doc(hidden)]
    fn touch_many(&mut self, tickets: &[i64], owner: &str, ttl: Ttl) -> QueryResult<usize>;
    /// [`SemaphoreStatements::touch`] only if the request is granted: 1 means "granted, alive,
    /// and extended".
    #[doc(hidden)]
    fn touch_granted(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize>;
    /// Deletes a request; returns the number of rows deleted.
    #[doc(hidden)]
    fn delete_ticket(&mut self, ticket: i64, owner: &str) -> QueryResult<usize>;
    /// Whether request `ticket` of `owner` is granted (`false` when it is gone), read without
    /// the resource's lock.
    #[doc(hidden)]
    fn is_granted(&mut self, ticket: i64, owner: &str) -> QueryResult<bool>;
    /// Tells waiters of `resource` that its queue changed (delivered at commit):
    /// [`Notifications::notify`](crate::notify::Notifications::notify) on the connection.
    #[doc(hidden)]
    fn notify(&mut self, resource: &str) -> QueryResult<()>;
    /// After `error` from a one-statement write outside the locked transaction: whether to run
    /// it once more because the connection now waits for a busy database (SQLite: it had no
    /// busy timeout and was given diesel-lease's default, as every other write of the library
    /// is). `false` elsewhere.
    #[doc(hidden)]
    fn wait_when_busy(&mut self, _error: &diesel::result::Error) -> bool {
        false
    }
    /// Runs `write`, a one-statement write of a waiter's own row outside the locked
    /// transaction, waiting at most `max_wait` for a busy database (`None`: as the connection
    /// waits), as [`Dialect::bounded_busy_wait`](crate::backend::Dialect::bounded_busy_wait)
    /// bounds it: on SQLite, where a busy file would otherwise keep a waiter past its deadline.
    #[doc(hidden)]
    fn within_wait(
        &mut self,
        max_wait: Option<std::time::Duration>,
        write: &mut dyn FnMut(&mut dyn SemaphoreStatements) -> diesel::QueryResult<usize>,
    ) -> diesel::QueryResult<usize>;
}

/// The values of a new waiting request (everything but the ticket).
macro_rules! new_ticket_values {
    ($new:expr) => {{
        use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
        (
            tickets::resource.eq($new.resource),
            tickets::owner.eq($new.owner),
            tickets::mode.eq($new.mode.as_str()),
            tickets::granted.eq(false),
            tickets::requested_at.eq(crate::clock::DbNowMicros),
            tickets::expires_at.eq(crate::clock::NowPlus($new.ttl.as_micros())),
        )
    }};
}
pub(crate) use new_ticket_values;

/// The statements that read the same on every backend. `$($lock)*` is how the backend locks the
/// resource's row (`.for_update()`; nothing on SQLite, whose `BEGIN IMMEDIATE` locks the file);
/// `$write_set`, where a row lock alone does not serialize (MySQL under Galera), is a function
/// `(conn, resource, permits)` that makes a granting transaction write the row
/// ([`SemaphoreStatements::certify`]).
macro_rules! semaphore_statements {
    (lock: [$($lock:tt)*] $(, write_set: $write_set:path)?) => {
        fn serialized(
            &mut self,
            max_wait: Option<std::time::Duration>,
            body: &mut crate::semaphore::statements::Body<'_>,
        ) -> crate::Result<()> {
            crate::backend::Dialect::write_tx_within(self, max_wait, |c| body(c))
        }

        fn within_wait(
            &mut self,
            max_wait: Option<std::time::Duration>,
            write: &mut dyn FnMut(
                &mut dyn crate::semaphore::statements::SemaphoreStatements,
            ) -> diesel::QueryResult<usize>,
        ) -> diesel::QueryResult<usize> {
            match max_wait {
                Some(wait) => crate::backend::Dialect::bounded_busy_wait(self, wait, |c| write(c)),
                None => write(self),
            }
        }

        fn notify(&mut self, resource: &str) -> diesel::QueryResult<()> {
            crate::notify::Notifications::notify(self, resource)
        }

        fn lock_resource(&mut self, resource: &str) -> diesel::QueryResult<Option<i32>> {
            use crate::semaphore::schema::diesel_lease_semaphores as resources;
            let permits = resources::table
                .find(resource)
                .select(resources::permits)
                $($lock)*
                .first(self)
                .optional()?;
            Ok(permits)
        }

        #[allow(unused_variables)]
        fn certify(&mut self, resource: &str, permits: i32) -> diesel::QueryResult<()> {
            $($write_set(self, resource, permits)?;)?
            Ok(())
        }

        fn set_permits(&mut self, resource: &str, permits: i32) -> diesel::QueryResult<()> {
            use crate::semaphore::schema::diesel_lease_semaphores as resources;
            diesel::update(resources::table.find(resource))
                .set(resources::permits.eq(permits))
                .execute(self)
                .map(drop)
        }

        fn delete_resource(&mut self, resource: &str) -> diesel::QueryResult<usize> {
            use crate::semaphore::schema::diesel_lease_semaphores as resources;
            diesel::delete(resources::table.find(resource)).execute(self)
        }

        fn remove_expired(&mut self, resource: &str) -> diesel::QueryResult<usize> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            diesel::delete(
                tickets::table
                    .filter(tickets::resource.eq(resource))
                    .filter(tickets::expires_at.lt(crate::clock::DbNowMicros)),
            )
            .execute(self)
        }

        fn queue(
            &mut self,
            resource: &str,
        ) -> diesel::QueryResult<Vec<crate::semaphore::statements::TicketRow>> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            tickets::table
                .filter(tickets::resource.eq(resource))
                .order(tickets::ticket.asc())
                .select(crate::semaphore::statements::TicketRow::as_select())
                .load(self)
        }

        fn grant(&mut self, granted: &[i64]) -> diesel::QueryResult<usize> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
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
                tickets::granted_at.eq(crate::clock::DbNowMicros.nullable()),
            ))
            .execute(self)
        }

        fn touch(&mut self, ticket: i64, owner: &str, ttl: crate::Ttl) -> diesel::QueryResult<usize> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            diesel::update(
                tickets::table
                    .filter(tickets::ticket.eq(ticket))
                    .filter(tickets::owner.eq(owner)),
            )
            .set(tickets::expires_at.eq(crate::clock::NowPlus(ttl.as_micros())))
            .execute(self)
        }

        fn touch_many(
            &mut self,
            touched: &[i64],
            owner: &str,
            ttl: crate::Ttl,
        ) -> diesel::QueryResult<usize> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            if touched.is_empty() {
                return Ok(0);
            }
            diesel::update(
                tickets::table
                    .filter(tickets::ticket.eq_any(touched))
                    .filter(tickets::owner.eq(owner)),
            )
            .set(tickets::expires_at.eq(crate::clock::NowPlus(ttl.as_micros())))
            .execute(self)
        }

        fn touch_granted(
            &mut self,
            ticket: i64,
            owner: &str,
            ttl: crate::Ttl,
        ) -> diesel::QueryResult<usize> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            diesel::update(
                tickets::table
                    .filter(tickets::ticket.eq(ticket))
                    .filter(tickets::owner.eq(owner))
                    .filter(tickets::granted.eq(true)),
            )
            .set(tickets::expires_at.eq(crate::clock::NowPlus(ttl.as_micros())))
            .execute(self)
        }

        fn is_granted(&mut self, ticket: i64, owner: &str) -> diesel::QueryResult<bool> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            Ok(tickets::table
                .filter(tickets::ticket.eq(ticket))
                .filter(tickets::owner.eq(owner))
                .select(tickets::granted)
                .first::<bool>(self)
                .optional()?
                .unwrap_or(false))
        }

        fn delete_ticket(&mut self, ticket: i64, owner: &str) -> diesel::QueryResult<usize> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            diesel::delete(
                tickets::table
                    .filter(tickets::ticket.eq(ticket))
                    .filter(tickets::owner.eq(owner)),
            )
            .execute(self)
        }
    };
    ($($lock:tt)*) => {
        crate::semaphore::statements::semaphore_statements!(lock: [$($lock)*]);
    };
}
// For `mysql_like.rs`; PostgreSQL and SQLite expand it above, in this file.
#[cfg_attr(not(feature = "__mysql_like"), allow(unused_imports))]
pub(crate) use semaphore_statements;

/// The resource row and the ticket insert of the backends with `ON CONFLICT` and `RETURNING`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! insert_returning_statements {
    () => {
        fn create_resource(&mut self, resource: &str, permits: i32) -> diesel::QueryResult<()> {
            use crate::semaphore::schema::diesel_lease_semaphores as resources;
            diesel::insert_into(resources::table)
                .values((
                    resources::resource.eq(resource),
                    resources::permits.eq(permits),
                ))
                .on_conflict_do_nothing()
                .execute(self)
                .map(drop)
        }

        fn insert_ticket(
            &mut self,
            new: &crate::semaphore::statements::NewTicket<'_>,
        ) -> diesel::QueryResult<i64> {
            use crate::semaphore::schema::diesel_lease_semaphore_tickets as tickets;
            diesel::insert_into(tickets::table)
                .values(crate::semaphore::statements::new_ticket_values!(new))
                .returning(tickets::ticket)
                .get_result(self)
        }
    };
}

#[cfg(feature = "postgres")]
impl SemaphoreStatements for diesel::PgConnection {
    semaphore_statements!(.for_update());

    insert_returning_statements!();
}

#[cfg(feature = "sqlite")]
impl SemaphoreStatements for diesel::SqliteConnection {
    semaphore_statements!();

    insert_returning_statements!();

    fn wait_when_busy(&mut self, error: &diesel::result::Error) -> bool {
        crate::backend::sqlite_waits_after(self, error)
    }
}
