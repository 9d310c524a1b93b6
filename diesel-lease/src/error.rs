use lease_core::InvalidInput;

/// Everything a diesel-lease operation can fail with.
///
/// Each variant says what happened and what to do. Database errors are never swallowed: they
/// arrive here as [`Error::Database`] unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input was refused before anything reached the database; nothing was locked or changed.
    #[error("invalid input: {0}")]
    InvalidInput(#[from] InvalidInput),
    /// The database returned an error. The lock state is whatever the database committed.
    #[error("database error: {0}")]
    Database(#[from] diesel::result::Error),
    /// No connection could be taken from the r2d2 pool.
    #[error("could not get a connection from the pool: {0}")]
    Pool(#[from] r2d2::Error),
    /// Running the built-in migrations failed.
    #[error("running diesel-lease migrations failed: {0}")]
    Migration(String),
    /// The lease is held by someone else now (it expired and was taken over, or was never held).
    /// Stop the protected work: another holder may be doing it.
    #[error("lease `{name}` was lost: {reason}; stop the protected work, another holder may be running it")]
    LeaseLost {
        /// The lease name.
        name: String,
        /// What the database showed.
        reason: String,
    },
    /// Waiting for a lease or permit gave up at its deadline; nothing is held and nothing was left queued.
    #[error("timed out after {waited:?} waiting for `{name}`")]
    Timeout {
        /// The lease or resource name.
        name: String,
        /// How long the caller waited.
        waited: std::time::Duration,
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
    /// A permit or lease was released twice, or after it was lost.
    #[error("`{name}` is not held by this owner; it was already released or taken over")]
    NotHeld {
        /// The lease or resource name.
        name: String,
    },
    /// The background heartbeat thread of a permit could not be started (the process is out of
    /// threads or memory); the permit was given back, nothing is held.
    #[error("could not start the heartbeat thread: {0}; nothing is held")]
    KeepAlive(#[source] std::io::Error),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
