//! Faults injected against the real servers, and what the caller sees.
//!
//! `errors`: each way a database ends or refuses a statement — a lock timeout, a statement
//! timeout, a terminated session, a deadlock, a busy SQLite file — arrives as the typed
//! [`diesel_lease::Error`] a caller can act on, with the database's error as its source.
//! `holders`: a lease guard or permit cut off from the database knows it lost before the
//! database gives its grant away.
//! `waits`: a client frozen inside a semaphore's locked transaction holds up nobody past their
//! deadline.
//! `read_timeout`: MySQL, a reply that never reaches the client ends in `ConnectionLost`.
//! `failover`: PostgreSQL, the primary crashes and its streaming standby is promoted.
//! `network`: PostgreSQL and MySQL behind a link that goes silent (a proxy black-holes it):
//! drops, waiting acquires and a `Worker`'s stop return within their documented bounds, and
//! holders know they lost in time.
//! `input`: bad names and owners are typed errors before the database; database timeouts name
//! the lease, resource or table they concern.
//! `unreached`: waits whose attempts never got a connection end in `Error::Pool`, which says so.
//! `galera`: a three-node MariaDB Galera cluster, workers on different nodes, one node killed.
//! `replication`: what the library says about the replication its guarantees depend on.

mod errors;
#[cfg(feature = "postgres")]
mod failover;
mod farm;
#[cfg(feature = "mysql")]
mod galera;
mod holders;
mod input;
mod network;
#[cfg(any(feature = "mysql", feature = "mariadb"))]
mod read_timeout;
mod replication;
mod scheduler;
mod unreached;
mod waits;
