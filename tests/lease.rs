//! Leases, the farm scheduler and the expiring mutex, on every backend.
//!
//! `shedlock`: the cases of ShedLock's shared provider suite; `guard`: pools, drop, keep-alive,
//! `run_exclusive`, `with_lock`, `every`; `late_beat`: a keep-alive extension
//! landing after the release; `cron`: cron schedules of `every`; `bad_input`: typed errors; `fencing`: a late write of a
//! paused holder is rejected; `clock`: only the database clock is used; `processes`: SIGKILLed
//! holders and 1,000 contended grants across processes; `farm`: seed 000's farm of 5 processes.

mod support;

mod bad_input;
mod clock;
mod cron;
mod farm;
mod fencing;
mod guard;
mod late_beat;
mod processes;
mod shedlock;

use std::time::Duration;

use diesel_lease::lease::LeaseOptions;

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::new(ms(ttl_ms))
}

/// A tuned connection to `url` (for threads, which cannot borrow the test's `TestDb`).
pub(crate) fn connect<B: crate::common::TestBackend>(url: &str) -> B::Conn {
    use diesel::Connection;
    let mut c = B::Conn::establish(url).expect("connect");
    diesel_lease::pool::ConnectionTuning::default()
        .apply(&mut c)
        .expect("tune");
    c
}
