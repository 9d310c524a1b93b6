//! Guides: each pattern, from the table to the running code.
//!
//! These pages are documentation only (no items); their examples are compiled, and run, as
//! doctests in CI. Reference lives on the items they link to. Read them in this order, or jump
//! to the pattern you need:
//!
//! | guide | what it covers |
//! |---|---|
//! | [`claiming`] | each row of a work table to exactly one worker: `claim().row`, batches, stale-claim rescue, finishing, rows kept locked for your transaction, deep queues through a cursor |
//! | [`worker`] | the [`Worker`](crate::worker::Worker) loop and work that waits for its time: `available_at`, retries with backoff, `wait`ing claims and wake-ups |
//! | [`queue_control`] | priorities, pause and resume, cancelling a row, rate limits, retention and redrive |
//! | [`once`] | at-most-once side effects (`claim_if_null`) and follow-up rows inserted once (`insert_once`) |
//! | [`job_leases`] | one node of a farm running a scheduled job, on your own `job_status` table |
//! | [`leases`] | named leases on the database clock, fencing tokens, farm scheduling and cron |
//! | [`semaphores`] | at most N holders in request order, mutexes, reader/writer locks, seed 001's control table |
//! | [`holders`] | what a lease guard, a permit or a claim guard knows, and when it learns it lost |
//! | [`async_apps`] | tokio applications: `deadpool-diesel` pools, waiting without blocking the runtime |
//! | [`errors`] | the error type, and what you see under each fault we inject |
//! | [`beyond_one_server`] | PgBouncer, PostgreSQL failover, MariaDB Galera, engines we refuse |
//! | [`operating`] | the operator CLI, its web page, tracing and metrics |
//! | [`upgrading`] | from earlier releases to this API |

pub mod claiming {
    #![doc = include_str!("claiming.md")]
}
pub mod worker {
    #![doc = include_str!("worker.md")]
}
pub mod queue_control {
    #![doc = include_str!("queue_control.md")]
}
pub mod once {
    #![doc = include_str!("once.md")]
}
pub mod job_leases {
    #![doc = include_str!("job_leases.md")]
}
pub mod leases {
    #![doc = include_str!("leases.md")]
}
pub mod semaphores {
    #![doc = include_str!("semaphores.md")]
}
pub mod holders {
    #![doc = include_str!("holders.md")]
}
pub mod async_apps {
    #![doc = include_str!("async_apps.md")]
}
pub mod errors {
    #![doc = include_str!("errors.md")]
}
pub mod beyond_one_server {
    #![doc = include_str!("beyond_one_server.md")]
}
pub mod operating {
    #![doc = include_str!("operating.md")]
}
pub mod upgrading {
    #![doc = include_str!("upgrading.md")]
}
