//! Coordinate processes through the relational database they already share.
//!
//! diesel-lease turns a few well-chosen SQL statements into safe, fast methods on your Diesel
//! models: no ZooKeeper, no Redis, no RPC. PostgreSQL is the reference backend; SQLite and
//! MySQL/MariaDB get the strongest correct equivalent of every feature (each guide says how each
//! backend does it).
//!
//! `#[derive(Claimable)]` only implements traits that describe your model's columns; the
//! operations are extension traits, brought in by `use diesel_lease::prelude::*;` (see [`dsl`]).
//!
//! | you want | use |
//! |---|---|
//! | each row of a work table handled by exactly one worker | [`#[derive(Claimable)]`](derive@Claimable) and [`ClaimDsl::claim`](dsl::ClaimDsl::claim): `Job::claim().row(conn)`, `.batch(n).rows(conn)`; [`FinishDsl`](dsl::FinishDsl): `complete` |
//! | a work table paused, resumed, its waiters woken, a row cancelled, finished rows purged, dead ones redriven | [`ClaimDsl::queue`](dsl::ClaimDsl::queue): `Job::queue().pause(conn)`, `.key(k).resume(conn)`, `.cancel(conn, pk)`, `.purge(…)`, `.filter(f).redrive(conn, n)` |
//! | a deep queue's claims without the walk over the front of its index (order relaxed up to a rescan period) | [`ClaimCursor`](claim::ClaimCursor) in a claim's [`cursor`](claim::Claim::cursor) step, [`Worker::claim_cursor`](worker::Worker::claim_cursor) |
//! | a row kept locked for your transaction, skipping locked ones | a claim's [`locked`](claim::Claim::locked), [`locked_with`](claim::Claim::locked_with) terminals |
//! | this row locked if it still qualifies, waiting for its holder | `lock_by_pk_if_claimable`, `with_locked` ([`ClaimDsl`](dsl::ClaimDsl)), `lock_by_pk_if_null`, `with_locked_if_null` ([`OnceDsl`](dsl::OnceDsl)) |
//! | a side effect done at most once | [`OnceDsl::claim_if_null`](dsl::OnceDsl::claim_if_null) (`#[claim_if_null(column = col)]`) |
//! | a follow-up row inserted once | [`OnceDsl::insert_once`](dsl::OnceDsl::insert_once) (`#[derive(InsertOnce)]` on an `Insertable`) |
//! | one node of a farm running a scheduled job, on your own `job_status` table | [`JobLeaseDsl::try_acquire_run`](dsl::JobLeaseDsl::try_acquire_run) (`#[job_lease(…)]`) |
//! | a named lock that expires, with a fencing token per grant | [`Lease::try_acquire`], [`LeaseGuard`] |
//! | a job run once per interval across the farm | [`lease::schedule::every`], [`lease::schedule::run_exclusive`], [`lease::schedule::with_lock`] |
//! | at most N holders, in request order; readers/writers | [`semaphore::Semaphore`], [`semaphore::RwLock`] |
//!
//! # Claim the next row
//!
//! Import jobs handed to a farm of workers: annotate the model you already have and claim rows. On PostgreSQL a
//! claim is one statement (`WITH picked AS (SELECT … FOR UPDATE SKIP LOCKED) UPDATE … RETURNING`);
//! on SQLite one `UPDATE … RETURNING` under the database write lock; on MySQL one short
//! transaction. Every time (claimed-at, stale cutoffs) comes from the database clock.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_lease::prelude::*;
//!
//! diesel::table! {
//!     importjobs (id) {
//!         id -> BigInt,
//!         statuscode -> Text,
//!         worker -> Nullable<Text>,
//!     }
//! }
//!
//! #[derive(Debug, Queryable, Selectable, Claimable)]
//! #[diesel(table_name = importjobs)]
//! #[claimable(state = statuscode, ready = "JOBEXTRACTED", claimed = "EXECUTIONINPROGRESS",
//!             done = "DONE", owner = worker)]
//! struct ImportJob {
//!     id: i64,
//!     statuscode: String,
//!     worker: Option<String>,
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let mut conn = diesel::SqliteConnection::establish(dir.path().join("db").to_str().unwrap())?;
//! # diesel::connection::SimpleConnection::batch_execute(&mut conn,
//! #     "CREATE TABLE importjobs (id INTEGER PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT);
//! #      INSERT INTO importjobs (statuscode) VALUES ('JOBEXTRACTED'), ('JOBEXTRACTED');")?;
//! while let Some(job) = ImportJob::claim().row(&mut conn)? {
//!     // … run the import; no other worker has this row …
//!     assert!(job.complete(&mut conn)?, "still ours");
//! }
//! # Ok(()) }
//! # main().unwrap();
//! # }
//! ```
//!
//! # Unique follow-up inserts
//!
//! With `#[derive(InsertOnce)]` on an `Insertable`, `insert_once(conn)` returns
//! [`InsertOutcome::Inserted`] or [`InsertOutcome::AlreadyExists`]; a duplicate is an ordinary
//! outcome and never aborts your PostgreSQL transaction (`ON CONFLICT DO NOTHING`).
//!
//! # Holders
//!
//! What the pool's keeper keeps in the background — a [`LeaseGuard`], a
//! [`PermitGuard`](semaphore::PermitGuard), a [`ClaimGuard`](claim::ClaimGuard) — shares the
//! [`Held`] trait (one keeper thread per pool, however many holders; a drop hands the release
//! to it and never blocks); their manual counterparts ([`Lease`], [`Permit`](semaphore::Permit), a claimed
//! row) are kept on a connection of yours.
//!
//! # Connections
//!
//! Every method takes `&mut conn` where `conn` is a `PgConnection`, `SqliteConnection`,
//! `MysqlConnection`, `MariadbConnection` (Diesel 2.4's MariaDB backend, feature `mariadb`) or
//! an r2d2 pooled one ([`BorrowConnection`]). For SQLite use
//! [`pool::ConnectionTuning`] (busy timeout + WAL) so concurrent writers wait instead of failing.
//!
//! Cargo features: one or more backends (`postgres`, `sqlite`, `mysql`, `mariadb`); `r2d2`
//! (default: r2d2 pools, `pool::build_pool`); `deadpool` (a `deadpool-diesel` pool as
//! `pool::Deadpool`, for async applications); `tracing` (default) and `metrics`. Without `r2d2`
//! no r2d2 is built: pass raw connections, and a `Deadpool` where a pool is taken.
//!
//! # Guides
//!
//! Each pattern, from the table to running code, has a guide in the `_guide` module:
//! documentation only, its examples run in CI. It is rendered where every feature is on (as on
//! docs.rs; locally `cargo doc -p diesel-lease --all-features --open`), so these links lead
//! nowhere in documentation built with fewer features.
//!
//! | guide | |
//! |---|---|
//! | [claiming](_guide/claiming/index.html) | each row to exactly one worker: batches, rescue, finishing, locked rows, cursors |
//! | [the Worker and scheduling](_guide/worker/index.html) | `available_at`, retries, waiting claims, wake-ups |
//! | [queue control](_guide/queue_control/index.html) | priorities, pause, cancel, rate limits, retention and redrive |
//! | [at-most-once and insert-once](_guide/once/index.html) | `claim_if_null`, `insert_once` |
//! | [job leases](_guide/job_leases/index.html) | one node of a farm runs a job, on your own table |
//! | [leases](_guide/leases/index.html) | fencing tokens, farm scheduling, cron |
//! | [semaphores](_guide/semaphores/index.html) | N holders in request order, mutexes, reader/writer locks |
//! | [what a holder knows](_guide/holders/index.html) | local deadlines, lost signals, the keeper |
//! | [async applications](_guide/async_apps/index.html) | `deadpool-diesel` pools, tokio |
//! | [errors and faults](_guide/errors/index.html) | the error type, what each fault looks like |
//! | [beyond one server](_guide/beyond_one_server/index.html) | PgBouncer, failover, Galera, refused engines |
//! | [operating](_guide/operating/index.html) | the CLI, the operator's page, tracing, metrics |
//! | [upgrading](_guide/upgrading/index.html) | from earlier releases |
#![cfg_attr(docsrs, feature(doc_cfg))]

// The derive expands to `::diesel_lease::…` paths; this lets the crate's own tests use it.
extern crate self as diesel_lease;

#[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "__mysql_like")))]
compile_error!(
    "diesel-lease needs at least one backend feature: enable `postgres`, `sqlite`, `mysql` or `mariadb` \
     (e.g. `diesel-lease = { version = \"0.1\", features = [\"postgres\"] }`)"
);

/// A folder's MySQL-family modules: its `mysql_like.rs`, compiled as `mod mysql` for Diesel's
/// `Mysql`/`MysqlConnection` (feature `mysql`) and as `mod mariadb` for `Mariadb`/
/// `MariadbConnection` (feature `mariadb`); the file names them `Db` and `Conn`. (`include!`
/// resolves the path from the folder that invokes the macro.) The ground floor's own pair, in
/// `backend/mod.rs`, also says what the two backends do differently.
macro_rules! mysql_like_modules {
    ($(#[$doc:meta])*) => {
        $(#[$doc])*
        #[cfg(feature = "mysql")]
        mod mysql {
            #[allow(dead_code)]
            type Db = diesel::mysql::Mysql;
            type Conn = diesel::MysqlConnection;
            include!("mysql_like.rs");
        }
        /// The same through `MariadbConnection`: one source, compiled for each connection type.
        #[cfg(feature = "mariadb")]
        mod mariadb {
            #[allow(dead_code)]
            type Db = diesel::mariadb::Mariadb;
            type Conn = diesel::mariadb::MariadbConnection;
            include!("mysql_like.rs");
        }
    };
}

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
// The guides: documentation modules, rendered (docs.rs builds every feature) and their examples
// run as doctests where every feature is on; no item, and nothing in an application's build.
#[cfg(all(
    any(doc, doctest),
    feature = "postgres",
    feature = "sqlite",
    feature = "mysql",
    feature = "mariadb",
    feature = "r2d2",
    feature = "deadpool",
    feature = "tracing",
    feature = "metrics"
))]
pub mod _guide;
pub mod admin;
pub mod backend;
pub mod claim;
pub mod clock;
mod connection;
mod courier;
pub mod dsl;
mod error;
mod heartbeat;
mod held;
mod keeper;
pub mod lease;
mod model;
pub(crate) mod notify;
pub mod observe;
pub(crate) mod once;
pub mod pool;
pub mod prelude;
// The README's snippet, compiled (see `tests/readme.rs`).
#[cfg(all(doctest, feature = "sqlite", feature = "postgres"))]
mod readme;
pub mod semaphore;
#[cfg(feature = "sqlite")]
mod sqlite_writer;
pub mod worker;

pub use backend::{run_migrations, BackendKind, BorrowConnection};
pub use claim::Claimable;
pub use clock::db_now;
pub use connection::LeaseConnection;
pub use error::{Error, PoolError, Result};
pub use heartbeat::{LostReason, LostSignal};
pub use held::{Held, Released};
pub use lease::{Lease, LeaseGuard, LeaseOptions};
pub use lease_core::{
    Backoff, ClaimStamp, FencingToken, InsertOutcome, InvalidInput, OwnerId, Ttl, MAX_OWNER_LEN,
    MAX_TTL,
};
/// Implements [`ClaimIfNull`](once::ClaimIfNull) for a Diesel model: `#[claim_if_null(column =
/// col)]` names the nullable column whose first write wins. The operations are
/// [`OnceDsl`](dsl::OnceDsl)'s; see the [derive guide](derive@Claimable#claim_if_null) for the
/// attribute.
pub use lease_derive::ClaimIfNull;
#[doc = include_str!("derive_docs.md")]
pub use lease_derive::Claimable;
/// Implements [`ControlTable`](semaphore::ControlTable) for a model of a semaphore's control
/// table: `#[control_table(ticket = col, owner = col, resource = col, mode = col, shared = "R",
/// exclusive = "W")]`. The operations are [`ControlTableDsl`](dsl::ControlTableDsl)'s; see the
/// [derive guide](derive@Claimable#control_table).
pub use lease_derive::ControlTable;
/// Implements [`InsertOnce`](once::InsertOnce) for an `Insertable`: a follow-up row that a unique
/// constraint lets exist once; `#[insert_once(returning = Model)]` names the row the insert
/// returns. The operation is [`OnceDsl::insert_once`](dsl::OnceDsl::insert_once); see the
/// [derive guide](derive@Claimable#insert_once).
pub use lease_derive::InsertOnce;
/// Implements [`JobLease`](crate::dsl::JobLease) for a model of your own job-status table:
/// `#[job_lease(holder = col, started_at = col, next_run = col)]`. The operations are
/// [`JobLeaseDsl`](dsl::JobLeaseDsl)'s; see the [derive guide](derive@Claimable#job_lease).
pub use lease_derive::JobLease;

/// The defaults and limits the docs state as numbers (they are not public items): a change to
/// one of them must change its docs too.
#[cfg(test)]
mod documented_defaults {
    use std::time::Duration;

    #[test]
    fn the_docs_state_each_default() {
        // dsl.rs: `lock_by_pk_if_claimable`, `lock_by_pk_if_null` wait up to 30 s.
        assert_eq!(crate::claim::DEFAULT_LOCK_WAIT, Duration::from_secs(30));
        // claim/retention.rs: `older_than` deletes 500 rows per transaction.
        assert_eq!(crate::claim::retention::DEFAULT_BATCH, 500);
        // lease/schedule.rs: `Every::lease` on a cron schedule, `run_until`'s backoff cap.
        assert_eq!(
            crate::lease::schedule::DEFAULT_CRON_LEASE,
            Duration::from_secs(60)
        );
        assert_eq!(
            crate::lease::schedule::MAX_ERROR_BACKOFF,
            Duration::from_secs(30)
        );
        // semaphore/mod.rs: `with_ttl`, `with_max_poll_interval`.
        assert_eq!(crate::semaphore::DEFAULT_TTL, Duration::from_secs(30));
        assert_eq!(crate::semaphore::DEFAULT_MAX_POLL, Duration::from_secs(1));
    }
}
