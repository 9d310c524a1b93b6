#![doc = "diesel-lease"]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The derive expands to `::diesel_lease::…` paths; this lets the crate's own tests use it.
extern crate self as diesel_lease;

#[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "mysql")))]
compile_error!(
    "diesel-lease needs at least one backend feature: enable `postgres`, `sqlite` or `mysql` \
     (e.g. `diesel-lease = { version = \"0.1\", features = [\"postgres\"] }`)"
);

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod backend;
pub mod claim;
pub mod clock;
mod error;
pub mod guard;
pub mod job;
pub mod lease;
pub mod pool;
pub mod scheduler;
pub mod semaphore;

pub use backend::{run_migrations, BackendKind, BorrowConnection, LeaseConnection};
pub use claim::Claimable;
pub use error::{Error, Result};
pub use guard::db_now;
pub use lease_core::{Backoff, FencingToken, InsertOutcome, InvalidInput, OwnerId, Ttl};
/// Derives [`Claimable`] (and the claim, lock, guard and insert-once methods) for a Diesel model.
pub use lease_derive::Claimable;
