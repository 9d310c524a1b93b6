//! The README's Rust snippet as a doctest that compiles (`no_run`: it needs a pool and a table;
//! the crate-level example runs the same claim loop), its visible lines exactly the README's
//! block. `tests/readme.rs` checks that the two stay the same: change the README's snippet,
//! change its doctest here. The guides (`src/_guide/`) hold their examples themselves.
//!
//! Hidden lines (`# `) give the snippet what the README leaves out: tables, imports, helper
//! functions and a `main`.

/// README block 1.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     importjobs (id) {
/// #         id -> BigInt,
/// #         statuscode -> Text,
/// #         worker -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #     }
/// # }
/// # fn import<T>(_: &T) -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// use diesel_lease::prelude::*;
///
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = importjobs)]
/// #[claimable(state = statuscode, ready = "JOBEXTRACTED", claimed = "EXECUTIONINPROGRESS",
///             done = "DONE", failed = "FAILED", owner = worker,
///             claimed_at = claimed_at, attempts = attempts, timeout_secs = 300, max_attempts = 5)]
/// struct ImportJob { id: i64, statuscode: String, worker: Option<String>,
///                    claimed_at: Option<NaiveDateTime>, attempts: i32 }
///
/// // every worker, on every server, in a loop:
/// let mut conn = pool.get()?;
/// while let Some(job) = ImportJob::claim().row(&mut conn)? {   // each row to exactly one worker
///     import(&job)?;
///     job.complete(&mut conn)?;                              // false if a rescuer took it over
/// }
/// let batch = ImportJob::claim().batch(50).rows(&mut conn)?;        // never more than 50
/// # let _ = batch;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block1;
