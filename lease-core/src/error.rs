use std::time::Duration;

/// Input that diesel-lease refuses before it reaches the database.
///
/// Each variant says what was wrong and what to do instead; none of them has touched any lock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidInput {
    /// A lock, lease or resource name was empty.
    #[error("the {what} name is empty; give every lock a stable, non-empty name such as \"nightly-report\"")]
    EmptyName {
        /// Which kind of name (`"lease"`, `"resource"`, `"owner"`).
        what: &'static str,
    },
    /// A name was longer than the column that stores it.
    #[error("the {what} name is {len} bytes long but the column holds at most {max}; use a shorter name")]
    NameTooLong {
        /// Which kind of name.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A name contained a NUL byte (`\0`): PostgreSQL cannot store one in text, MySQL and SQLite
    /// would store a name other tools cut short, and a thread cannot be named after it.
    #[error("the {what} name contains a NUL byte (\\0) at byte {at}; names are stored as text, which cannot hold one on every database")]
    NulByte {
        /// Which kind of name (`"lease"`, `"resource"`, `"owner"`).
        what: &'static str,
        /// The byte offset of the first NUL.
        at: usize,
    },
    /// A name ended with a space. MySQL and MariaDB compare text padded with spaces (their
    /// `utf8mb4_bin` collation is `PAD SPACE`), so `"job"` and `"job "` would be one lock there
    /// and two elsewhere; such names are refused on every backend.
    #[error("the {what} name {name:?} ends with a space; MySQL and MariaDB ignore trailing spaces when they compare names, so it would be the same {what} as one without them there: drop the trailing spaces")]
    TrailingSpace {
        /// Which kind of name (`"lease"`, `"resource"`, `"owner"`).
        what: &'static str,
        /// The name given.
        name: String,
    },
    /// A duration that must be positive was zero.
    #[error("{what} must be longer than zero (got {got:?}); a zero {what} would expire the moment it is granted")]
    ZeroDuration {
        /// Which duration (`"ttl"`, `"claim timeout"`, `"interval"`).
        what: &'static str,
        /// The value given.
        got: Duration,
    },
    /// A duration was negative (only reachable through signed inputs such as `chrono::Duration`).
    #[error("{what} must not be negative; pass a positive duration")]
    NegativeDuration {
        /// Which duration.
        what: &'static str,
    },
    /// A duration longer than [`MAX_TTL`](crate::MAX_TTL) (1,000 years): the database's
    /// `now + duration` would come near the end of its 64-bit microsecond clock.
    #[error("{what} of {got:?} is too long; keep it under 1,000 years")]
    DurationTooLong {
        /// Which duration.
        what: &'static str,
        /// The value given.
        got: Duration,
    },
    /// `at_least_for` was longer than the lease itself.
    #[error("at_least_for ({at_least_for:?}) is longer than the lease ttl ({ttl:?}); a lease cannot be held at least longer than at most")]
    AtLeastExceedsTtl {
        /// The minimum hold.
        at_least_for: Duration,
        /// The maximum hold.
        ttl: Duration,
    },
    /// A batch size of zero was asked for where a batch must hold something.
    #[error("{what} must be at least 1")]
    Zero {
        /// Which count (`"permits"`, `"batch size"`).
        what: &'static str,
    },
    /// A count too large for the column that stores it.
    #[error("{what} of {got} is larger than the maximum of {max}")]
    TooLarge {
        /// Which count.
        what: &'static str,
        /// The value given.
        got: u64,
        /// The limit.
        max: u64,
    },
    /// A cron expression that does not parse, or that names no instant at all.
    #[error("the cron expression {expr:?} cannot be used: {reason}; write five fields (`min hour day month weekday`, e.g. \"0 3 * * *\") or six with seconds first")]
    BadCron {
        /// The expression as given.
        expr: String,
        /// What the parser said.
        reason: String,
    },
}
