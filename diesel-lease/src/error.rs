//! The one error type of every diesel-lease operation.

use std::time::Duration;

use lease_core::{FencingToken, InvalidInput};

/// Everything a diesel-lease operation can fail with: claims, guards, leases and semaphores alike.
///
/// Each variant says what happened and what to do. Database errors are never swallowed: the ones
/// a caller can act on are sorted into [`Timeout`](Error::Timeout),
/// [`ConnectionLost`](Error::ConnectionLost) and [`Deadlock`](Error::Deadlock) (each keeps the
/// original error as its source); the rest arrive as [`Error::Database`] unchanged.
/// [`is_retryable`](Error::is_retryable) says which are worth another try.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input was refused before anything reached the database; nothing was locked or changed.
    #[error("invalid input: {0}")]
    InvalidInput(#[from] InvalidInput),
    /// The set-up cannot do what was asked, and trying again will not help; the message says
    /// what to change. The model's `#[claimable(...)]` description (a claim timeout on a model
    /// without `claimed_at`: nothing was sent to the database), or the connection's: a database
    /// engine diesel-lease refuses (TiDB, CockroachDB, YugabyteDB: see
    /// [`ServerEngine`](crate::backend::ServerEngine)), or a transaction pooler (PgBouncer) in
    /// front of PostgreSQL that the pool was not built for (see
    /// [`PoolOptions::transaction_pooler`](crate::pool::PoolOptions::transaction_pooler)).
    #[error("configuration error: {0}")]
    Config(String),
    /// A wait ended at its deadline: the caller's timeout for a lease or permit, or a lock or
    /// statement timeout the database enforced (PostgreSQL `lock_timeout`/`statement_timeout`,
    /// MySQL `innodb_lock_wait_timeout`, SQLite's busy timeout). Nothing is held and nothing was
    /// left queued; retrying later is safe.
    #[error("timed out{} waiting for {}", .waited.map(|w| format!(" after {w:?}")).unwrap_or_default(), if .name.is_empty() { "the database" } else { .name.as_str() })]
    Timeout {
        /// What waited: the lease, the semaphore's resource, or the table of the claimed rows
        /// (also when the database reported the timeout). Empty only for a wait that concerns
        /// no one thing (a connection of your own, a statement of yours).
        name: String,
        /// How long the caller waited, when the caller's own deadline ended the wait.
        waited: Option<Duration>,
        /// The database's error, when the database ended the wait.
        #[source]
        source: Option<diesel::result::Error>,
    },
    /// The connection to the database broke (the server restarted or terminated the session, the
    /// network failed). Whatever the statement did was rolled back by the server unless it had
    /// committed; take a new connection and try again.
    #[error("the database connection was lost: {0}")]
    ConnectionLost(#[source] diesel::result::Error),
    /// The database rolled the transaction back to resolve a deadlock or a serialization
    /// conflict, and diesel-lease's own retries (where retrying is safe) did not get through.
    /// Nothing of the transaction was applied; trying again is safe.
    #[error("deadlock or serialization failure after {attempts} attempt(s): {source}")]
    Deadlock {
        /// How many times the transaction was tried.
        attempts: u32,
        /// The last attempt's error.
        #[source]
        source: diesel::result::Error,
    },
    /// Any other database error, unchanged. The lock state is whatever the database committed.
    #[error("database error: {0}")]
    Database(#[source] diesel::result::Error),
    /// No connection could be taken from the pool in time, or the pool could not make one: an
    /// r2d2 pool's error, or (feature `deadpool`) a `pool::Deadpool`'s.
    /// The pool's own error is the [`source`](std::error::Error::source) of the [`PoolError`].
    #[error("{0}")]
    Pool(#[source] PoolError),
    /// Running the built-in migrations failed.
    #[error("running diesel-lease migrations failed: {source}")]
    Migration {
        /// What diesel_migrations reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// This grant of the lease is over: it expired (and maybe was granted to someone else).
    /// Stop the protected work: another holder may be doing it.
    #[error("lease `{name}` (fencing token {token}) was lost: {}", lost_detail(.holder.as_deref(), *.holder_token))]
    LeaseLost {
        /// The lease name.
        name: String,
        /// The fencing token of the grant that was lost.
        token: FencingToken,
        /// Who holds the lease now, when somebody took it over.
        holder: Option<String>,
        /// The fencing token of the current grant, when somebody took it over.
        holder_token: Option<FencingToken>,
    },
    /// The lease's fencing token reached `i64::MAX`: no later grant could carry a larger one, so
    /// the lease is never granted again. Use a new name (after 9.2 × 10¹⁸ grants). Reported by
    /// `try_acquire`, and by a waiting `acquire` at its first refusal.
    #[error("lease `{name}` has used up its fencing tokens (i64::MAX); use a new lease name")]
    TokensExhausted {
        /// The lease name.
        name: String,
    },
    /// The lease was already released by this handle.
    #[error("lease `{name}` was already released by this holder")]
    LeaseNotHeld {
        /// The lease name.
        name: String,
    },
    /// A semaphore was declared with a permit count that differs from the one its current holders use.
    #[error("resource `{name}` is in use with {existing} permits but was declared with {requested}; use one permit count per resource, or wait until it is idle to change it")]
    PermitsMismatch {
        /// The resource name.
        name: String,
        /// The permit count the current holders declared.
        existing: i32,
        /// The permit count this caller declared.
        requested: i32,
    },
    /// A permit is not held any more: it was released already, or it expired (its owner did not
    /// heartbeat within the ttl) and was removed. Stop the protected work.
    #[error("permit {ticket} of `{resource}` is not held: it was released, or it expired and was removed")]
    PermitNotHeld {
        /// The resource name.
        resource: String,
        /// The permit's ticket.
        ticket: i64,
    },
    /// A claim is not this worker's any more: its heartbeat found it rescued by another worker
    /// (or finished), or no heartbeat succeeded before the claim timeout. Stop the work.
    #[error(
        "the claim of a row of `{table}` was lost: it was rescued by another worker or finished"
    )]
    ClaimLost {
        /// The claimed row's table.
        table: String,
    },
    /// The pool's keeper thread (which extends held grants in the background) could not be
    /// started (the process is out of threads or memory); what was granted was given back,
    /// nothing is held.
    #[error("could not start the keeper thread: {0}; nothing is held")]
    Heartbeat(#[source] std::io::Error),
}

fn lost_detail(holder: Option<&str>, token: Option<FencingToken>) -> String {
    match (holder, token) {
        (Some(holder), Some(token)) => {
            format!("it expired and was granted to `{holder}` with fencing token {token}")
        }
        _ => "it expired (nobody has taken it over yet)".to_string(),
    }
}

impl Error {
    /// Whether trying the same operation again (with a fresh connection for
    /// [`ConnectionLost`](Error::ConnectionLost)) may succeed: timeouts, lost connections,
    /// deadlocks and an exhausted pool. Lost leases, bad input and configuration errors are not.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::ConnectionLost(_)
                | Error::Deadlock { .. }
                | Error::Pool(_)
        )
    }

    /// Names what a timeout concerns (`name`), when the database reported it and nothing named
    /// it yet; every other error is returned as it is.
    pub(crate) fn concerning(self, name: impl FnOnce() -> String) -> Self {
        match self {
            Error::Timeout {
                name: unnamed,
                waited,
                source,
            } if unnamed.is_empty() => Error::Timeout {
                name: name(),
                waited,
                source,
            },
            other => other,
        }
    }

    /// A timeout of the caller's own wait for `name`.
    pub(crate) fn waited(name: &str, waited: Duration) -> Self {
        Error::Timeout {
            name: name.to_string(),
            waited: Some(waited),
            source: None,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        assert!(Error::waited("x", Duration::from_secs(1)).is_retryable());
        assert!(!Error::Config("no done state".into()).is_retryable());
        let lost = Error::LeaseLost {
            name: "n".into(),
            token: FencingToken(3),
            holder: Some("b".into()),
            holder_token: Some(FencingToken(4)),
        };
        assert!(!lost.is_retryable());
        assert_eq!(
            lost.to_string(),
            "lease `n` (fencing token 3) was lost: it expired and was granted to `b` with fencing token 4"
        );
    }

    #[test]
    fn timeout_messages_name_what_waited() {
        assert_eq!(
            Error::waited("m", Duration::from_millis(5)).to_string(),
            "timed out after 5ms waiting for m"
        );
        let db = Error::Timeout {
            name: String::new(),
            waited: None,
            source: None,
        };
        assert_eq!(db.to_string(), "timed out waiting for the database");
        let named = db.concerning(|| "jobs".to_string());
        assert_eq!(named.to_string(), "timed out waiting for jobs");
        // A name already there stays.
        let named = named.concerning(|| "other".to_string());
        assert_eq!(named.to_string(), "timed out waiting for jobs");
        assert!(matches!(
            Error::Config("x".into()).concerning(|| "jobs".into()),
            Error::Config(_)
        ));
    }
}

/// A connection pool's error, as [`Error::Pool`] carries it: which pool refused and why, with
/// the pool library's own error as its [`source`](std::error::Error::source). Its type is not
/// part of diesel-lease's API, so a pool library's upgrade is not a breaking change here.
#[derive(Debug)]
pub struct PoolError {
    pool: &'static str,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl PoolError {
    #[cfg(feature = "r2d2")]
    pub(crate) fn r2d2(source: r2d2::Error) -> Self {
        PoolError {
            pool: "the pool",
            source: Box::new(source),
        }
    }

    #[cfg(feature = "deadpool")]
    pub(crate) fn deadpool(source: deadpool_diesel::PoolError) -> Self {
        PoolError {
            pool: "the deadpool-diesel pool",
            source: Box::new(source),
        }
    }
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "could not get a connection from {}: {}",
            self.pool, self.source
        )
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
