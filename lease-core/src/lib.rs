//! Plain types and rules of [diesel-lease](https://docs.rs/diesel-lease), with no database in sight.
//!
//! Everything here is pure and unit/property-tested without a server: who a worker is
//! ([`OwnerId`]), how long things last ([`Ttl`]), the numbers that order grants ([`FencingToken`]),
//! what an operation can end in ([`InsertOutcome`]), how to wait politely ([`Backoff`]), and the
//! input checks every entry point runs before it talks to the database ([`InvalidInput`]), who
//! may enter a semaphore ([`admission`]), and which slot of a periodic schedule a poll runs
//! ([`Schedule`], [`Cron`]), and where a deep queue's next claim starts looking ([`ResumePoint`]).

pub mod admission;
mod backoff;
pub mod cron;
mod error;
mod owner;
mod resume;
mod retry;
mod stamp;
mod token;
mod ttl;

pub use admission::Mode;
pub use backoff::Backoff;
pub use cron::{Cron, Missed, Plan, Schedule, Tz};
pub use error::InvalidInput;
pub use owner::{bounded_name, validate_name, OwnerId, MAX_OWNER_LEN};
pub use resume::{Pass, ResumePoint};
pub use retry::RetryPolicy;
pub use stamp::ClaimStamp;
pub use token::FencingToken;
pub use ttl::{Ttl, MAX_TTL};

/// What an insert that may hit a unique constraint ended in.
///
/// A duplicate is an ordinary outcome of [a follow-up insert], not an error.
///
/// [a follow-up insert]: https://docs.rs/diesel-lease#unique-follow-up-inserts
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the outcome says whether this caller inserted the row"]
pub enum InsertOutcome<T> {
    /// This caller inserted the row; it carries the row where the backend can return it.
    Inserted(Option<T>),
    /// A row with the same unique key already existed; nothing was written.
    AlreadyExists,
}

impl<T> InsertOutcome<T> {
    /// `true` when this caller inserted the row.
    pub fn inserted(&self) -> bool {
        matches!(self, InsertOutcome::Inserted(_))
    }
}

/// The backends diesel-lease knows, for code that must pick the strongest equivalent per backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// PostgreSQL: row locks with `FOR UPDATE SKIP LOCKED`, `RETURNING`, `LISTEN/NOTIFY`.
    Postgres,
    /// SQLite: one writer at a time per database file, `RETURNING` since 3.35.
    Sqlite,
    /// MySQL 8 / MariaDB 10.6+: `SKIP LOCKED`, no `RETURNING` on `UPDATE`.
    Mysql,
}
