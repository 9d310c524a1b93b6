//! Lease and semaphore measurements: lease `try_acquire` + `release` pairs, semaphore acquire +
//! release cycles under contention, and the hand-off latency from one semaphore holder's release
//! to the next holder's grant.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_lease::semaphore::Semaphore;
use diesel_lease::{LeaseConnection, OwnerId};
use serde::Serialize;

use crate::measure::{self, Sample, Window};
use crate::BenchResult;

/// Release→grant latency of a one-permit semaphore with waiters queued.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Handoff {
    /// Hand-offs counted (grants inside the counted window).
    pub(crate) count: usize,
    /// Grants per second inside the counted window: the semaphore's acquire + release cycles/s
    /// (an operation that waited through the warm-up still counts when it is granted).
    pub(crate) grants_per_sec: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

/// `contenders` threads, each with its own pooled connection, loop `acquire_on` + `release` on
/// one semaphore of one permit (a mutex) named `resource`. Returns cycles/s and the time from a
/// holder starting its release to the next holder returning from `acquire_on`.
pub(crate) fn mutex_cycles<C>(
    pool: &Pool<ConnectionManager<C>>,
    resource: &str,
    contenders: usize,
    window: Window,
) -> BenchResult<(Sample, Handoff)>
where
    C: LeaseConnection + R2D2Connection + Send + 'static,
{
    let sem = Semaphore::mutex(resource);
    let conns = (0..contenders)
        .map(|_| pool.get())
        .collect::<Result<Vec<_>, _>>()?;
    let from = Instant::now() + Duration::from_secs_f64(window.warmup_secs);
    let until = from + Duration::from_secs_f64(window.measure_secs);
    let last_release: Mutex<Option<Instant>> = Mutex::new(None);
    let handoffs_ns: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    let sample = measure::timed(conns, window, |conn| {
        let permit = sem.acquire_on(conn, Duration::from_secs(60))?;
        let granted = Instant::now();
        let previous = *last_release.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(released) = previous.filter(|_| granted >= from && granted <= until) {
            let ns = u64::try_from(granted.duration_since(released).as_nanos()).unwrap_or(u64::MAX);
            handoffs_ns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(ns);
        }
        *last_release.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let _ = permit.release(conn)?;
        Ok(1)
    })?;
    let mut ns = handoffs_ns.into_inner().unwrap_or_else(|p| p.into_inner());
    ns.sort_unstable();
    let pick = |q: f64| {
        if ns.is_empty() {
            return f64::NAN;
        }
        let i = ((ns.len() - 1) as f64 * q).round() as usize;
        ns[i.min(ns.len() - 1)] as f64 / 1e6
    };
    let handoff = Handoff {
        count: ns.len(),
        grants_per_sec: ns.len() as f64 / window.measure_secs,
        p50_ms: pick(0.5),
        p99_ms: pick(0.99),
    };
    Ok((sample, handoff))
}

/// `workers` threads, each with its own pooled connection and its own owner identity, loop
/// `Lease::try_acquire` + `release` on the lease `name` (one name shared by all, or with
/// `shared_name = false` one name per thread). Items are completed pairs; a `try_acquire` that
/// finds the lease held counts as an operation without an item.
pub(crate) fn lease_pairs<C>(
    pool: &Pool<ConnectionManager<C>>,
    name: &str,
    workers: usize,
    shared_name: bool,
    window: Window,
) -> BenchResult<Sample>
where
    C: LeaseConnection + R2D2Connection + Send + 'static,
{
    let states = (0..workers)
        .map(|i| -> BenchResult<_> {
            let lease_name = if shared_name {
                name.to_owned()
            } else {
                format!("{name}-{i}")
            };
            let options = LeaseOptions::new(Duration::from_secs(30)).owner(OwnerId::generate());
            Ok((pool.get()?, lease_name, options))
        })
        .collect::<BenchResult<Vec<_>>>()?;
    measure::timed(
        states,
        window,
        |(conn, name, options)| match Lease::try_acquire(conn, name, options)? {
            Some(mut held) => {
                let _ = held.release(conn)?;
                Ok(1)
            }
            None => Ok(0),
        },
    )
}
