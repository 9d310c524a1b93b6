//! What an operator needs at 3 a.m.: every lease and semaphore as the database holds it, and
//! forced releases that fence the old holder. The `diesel-lease` command-line tool is built on
//! these; they are ordinary functions for dashboards too.
//!
//! Reads never change anything. The forced releases are for a holder that is stuck or gone:
//!
//! - [`force_release_lease`] makes the lease free at once **and moves its fencing token on by
//!   one**, so the old holder's next `extend` or `release` fails with
//!   [`Error::LeaseLost`] (its writes that carry the token are refused
//!   by a fenced resource, see [`lease`](crate::lease#fencing)); the next grant gets a larger
//!   token still.
//! - [`force_release_ticket`] deletes a semaphore ticket (held or waiting) in the same locked
//!   transaction a release runs and admits whoever is next; the old holder's heartbeat then
//!   finds its row gone and the permit is lost ([`Error::PermitNotHeld`]).
//!   Tickets are never reused, so nothing can confuse it with a later grant.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_lease::{admin, lease::{Lease, LeaseOptions}, Error};
//! use std::time::Duration;
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let url = dir.path().join("app.db").display().to_string();
//! let mut conn = SqliteConnection::establish(&url).unwrap();
//! diesel_lease::run_migrations(&mut conn).unwrap();
//! let mut stuck = Lease::try_acquire(&mut conn, "nightly", &LeaseOptions::new(Duration::from_secs(600)))
//!     .unwrap()
//!     .unwrap();
//!
//! let leases = admin::leases(&mut conn).unwrap();
//! assert_eq!((leases[0].name.as_str(), leases[0].record.is_held()), ("nightly", true));
//!
//! let fenced = admin::force_release_lease(&mut conn, "nightly").unwrap().unwrap();
//! assert!(fenced.token > stuck.token() && !fenced.is_held());
//! assert!(matches!(stuck.extend(&mut conn, Duration::from_secs(60)), Err(Error::LeaseLost { .. })));
//! # }
//! ```

use lease_core::{validate_name, FencingToken};

use crate::backend::{refuse_nested, Dialect};
use crate::lease::statements::LeaseStatements;
use crate::lease::{LeaseRecord, MAX_NAME_LEN};
use crate::semaphore::QueuedRequest;
use crate::semaphore::SemaphoreDialect;
use crate::{BorrowConnection, Error, Result};

/// One lease of the built-in table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseEntry {
    /// The lease name.
    pub name: String,
    /// Its row (holder, token, times; see [`LeaseRecord::is_held`]).
    pub record: LeaseRecord,
}

/// One semaphore (or reader/writer lock) of the built-in tables, with its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreEntry {
    /// The resource name.
    pub resource: String,
    /// Its permit count.
    pub permits: i32,
    /// Holders and waiters in ticket order (including rows that expired but were not yet
    /// removed).
    pub queue: Vec<QueuedRequest>,
    /// The database clock when it was read (µs since 1970), to compute ages.
    pub read_at_micros: i64,
}

/// What a forced release of a ticket removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleasedTicket {
    /// The resource it was for.
    pub resource: String,
    /// Who had asked.
    pub owner: String,
    /// Whether it held the resource (else it was waiting).
    pub was_granted: bool,
}

// `pub` in a private module: sealed, not named outside (the CLI reaches it through `__private`);
// a generic caller bounds on `LeaseConnection`, which implies it.
pub(crate) mod statements {
    use super::*;

    /// A ticket's resource, owner, mode, whether it is granted, and its resource's permits.
    pub(crate) type TicketInfo = (String, String, String, bool, i32);

    /// The typed statements of this module on one backend (implemented for every connection type).
    pub trait AdminStatements: LeaseStatements + SemaphoreDialect {
        /// Every lease: name and its row with the database's time.
        fn admin_leases(
            &mut self,
        ) -> diesel::QueryResult<Vec<(String, crate::lease::statements::Row)>>;
        /// Expires the lease now and moves its token on by one; whether the row existed.
        fn admin_fence_lease(&mut self, name: &str) -> diesel::QueryResult<bool>;
        /// Every semaphore resource and its permit count.
        fn admin_semaphores(&mut self) -> diesel::QueryResult<Vec<(String, i32)>>;
        /// A ticket's resource, owner, mode and whether it is granted, with its resource's permits.
        fn admin_ticket(&mut self, ticket: i64) -> diesel::QueryResult<Option<TicketInfo>>;
        /// The database clock, µs since 1970.
        fn admin_now(&mut self) -> diesel::QueryResult<i64>;
    }
}
pub(crate) use statements::{AdminStatements, TicketInfo};

macro_rules! admin_statements {
    ($conn:ty) => {
        impl AdminStatements for $conn {
            fn admin_leases(
                &mut self,
            ) -> diesel::QueryResult<Vec<(String, crate::lease::statements::Row)>> {
                use crate::lease::statements::dsl::*;
                type Listed = (String, String, i64, i64, i64, Option<i64>, Option<i64>, i64);
                let rows: Vec<Listed> = l::table
                    .select((
                        l::name,
                        l::holder,
                        l::token,
                        l::acquired_at,
                        l::expires_at,
                        l::next_run,
                        l::released_at,
                        DbNowMicros,
                    ))
                    .order(l::name)
                    .load(self)?;
                Ok(rows
                    .into_iter()
                    .map(|(n, h, t, a, e, r, x, now)| (n, (h, t, a, e, r, x, now)))
                    .collect())
            }

            fn admin_fence_lease(&mut self, name: &str) -> diesel::QueryResult<bool> {
                use crate::lease::statements::dsl::*;
                self.single_write(|c| {
                    Ok(diesel::update(
                        // A token at i64::MAX has no successor (see `grantable!`).
                        l::table
                            .filter(l::name.eq(name))
                            .filter(l::token.lt(i64::MAX)),
                    )
                    .set((l::token.eq(l::token + 1_i64), l::expires_at.eq(DbNowMicros)))
                    .execute(c)?
                        == 1)
                })
            }

            fn admin_semaphores(&mut self) -> diesel::QueryResult<Vec<(String, i32)>> {
                use crate::semaphore::schema::diesel_lease_semaphores as s;
                use diesel::prelude::*;
                s::table
                    .select((s::resource, s::permits))
                    .order(s::resource)
                    .load(self)
            }

            fn admin_ticket(&mut self, ticket: i64) -> diesel::QueryResult<Option<TicketInfo>> {
                use crate::semaphore::schema::diesel_lease_semaphore_tickets as t;
                use crate::semaphore::schema::diesel_lease_semaphores as s;
                use diesel::prelude::*;
                let Some((resource, owner, mode, granted)) = t::table
                    .filter(t::ticket.eq(ticket))
                    .select((t::resource, t::owner, t::mode, t::granted))
                    .first::<(String, String, String, bool)>(self)
                    .optional()?
                else {
                    return Ok(None);
                };
                let permits = s::table
                    .find(&resource)
                    .select(s::permits)
                    .first::<i32>(self)?;
                Ok(Some((resource, owner, mode, granted, permits)))
            }

            fn admin_now(&mut self) -> diesel::QueryResult<i64> {
                use diesel::prelude::*;
                diesel::select(crate::clock::DbNowMicros).get_result(self)
            }
        }
    };
}

#[cfg(feature = "postgres")]
admin_statements!(diesel::PgConnection);
#[cfg(feature = "sqlite")]
admin_statements!(diesel::SqliteConnection);
#[cfg(feature = "mysql")]
admin_statements!(diesel::MysqlConnection);
#[cfg(feature = "mariadb")]
admin_statements!(diesel::mariadb::MariadbConnection);

fn record(row: crate::lease::statements::Row) -> LeaseRecord {
    let (holder, token, acquired_at, expires_at, next_run, released_at, now) = row;
    LeaseRecord {
        holder,
        token: FencingToken(token),
        acquired_at_micros: acquired_at,
        expires_at_micros: expires_at,
        next_run_micros: next_run,
        released_at_micros: released_at,
        read_at_micros: now,
    }
}

/// Every lease of the built-in table, by name, as the database holds it now (held or not).
pub fn leases(conn: &mut impl BorrowConnection<Conn: AdminStatements>) -> Result<Vec<LeaseEntry>> {
    Ok(conn
        .borrow_connection()
        .admin_leases()?
        .into_iter()
        .map(|(name, row)| LeaseEntry {
            name,
            record: record(row),
        })
        .collect())
}

/// Frees lease `name` at once and fences its holder: the token moves on by one, so the holder's
/// next `extend`/`release` fails with [`Error::LeaseLost`]. Returns the lease as it is now, or
/// `None` when no lease of that name was ever granted.
///
/// [`Error::TokensExhausted`] when the token is at `i64::MAX` (it cannot move on).
pub fn force_release_lease(
    conn: &mut impl BorrowConnection<Conn: AdminStatements>,
    name: &str,
) -> Result<Option<LeaseRecord>> {
    validate_name("lease", name, MAX_NAME_LEN)?;
    let raw = conn.borrow_connection();
    refuse_nested(raw)?;
    let fenced = raw.admin_fence_lease(name)?;
    let now = crate::lease::Lease::inspect(conn, name)?;
    match now {
        Some(record) if !fenced && record.token.get() == i64::MAX => Err(Error::TokensExhausted {
            name: name.to_string(),
        }),
        other => Ok(other),
    }
}

/// Every semaphore and reader/writer lock, with its queue in ticket order.
pub fn semaphores(
    conn: &mut impl BorrowConnection<Conn: AdminStatements>,
) -> Result<Vec<SemaphoreEntry>> {
    let raw = conn.borrow_connection();
    let resources = raw.admin_semaphores()?;
    let read_at_micros = raw.admin_now()?;
    resources
        .into_iter()
        .map(|(resource, permits)| {
            Ok(SemaphoreEntry {
                queue: crate::semaphore::queue_of(conn, &resource, None)?,
                resource,
                permits,
                read_at_micros,
            })
        })
        .collect()
}

/// Removes semaphore ticket `ticket` (held or waiting), whoever owns it, and admits whoever is
/// next in line, in one locked transaction like a release. `None` when there is no such ticket.
pub fn force_release_ticket(
    conn: &mut impl BorrowConnection<Conn: AdminStatements>,
    ticket: i64,
) -> Result<Option<ReleasedTicket>> {
    let conn = conn.borrow_connection();
    refuse_nested(conn)?;
    let Some((resource, owner, mode, was_granted, permits)) = conn.admin_ticket(ticket)? else {
        return Ok(None);
    };
    let mode = lease_core::admission::Mode::parse(&mode)
        .ok_or_else(|| Error::Config(format!("ticket {ticket} has an unknown mode `{mode}`")))?;
    let removed = crate::semaphore::release_ticket(conn, &resource, permits, &owner, mode, ticket)?;
    Ok(removed.then_some(ReleasedTicket {
        resource,
        owner,
        was_granted,
    }))
}
