#![doc = "diesel-lease"]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "mysql")))]
compile_error!(
    "diesel-lease needs at least one backend feature: enable `postgres`, `sqlite` or `mysql` \
     (e.g. `diesel-lease = { version = \"0.1\", features = [\"postgres\"] }`)"
);

mod backend;
pub mod clock;
pub mod lease;
pub mod scheduler;
pub mod semaphore;
mod error;
pub mod pool;

pub use backend::{run_migrations, BackendKind, BorrowConnection, LeaseConnection};
pub use error::{Error, Result};
pub use lease_core::{Backoff, FencingToken, InsertOutcome, InvalidInput, OwnerId, Ttl};
