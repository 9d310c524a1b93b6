//! A keep-alive extension that reaches the database after the release changes nothing.
//!
//! The beat is held back between the pool and the database (a [`ConnectionSource`] of the
//! test's, in front of a real pool, plays the slow link), so the release, on another connection,
//! gets there first.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use diesel::r2d2::{ConnectionManager, Pool, PooledConnection, R2D2Connection};
use diesel_lease::lease::{self, LeaseGuard};
use diesel_lease::pool::ConnectionSource;
use diesel_lease::prelude::*;
use diesel_lease::LeaseConnection;

use super::{ms, opts};
use crate::common::{TestBackend, TestDb};

/// Where the held-back loan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Loans go straight through.
    Open,
    /// The next loan will be held back.
    Armed,
    /// A loan's work waits to be sent.
    Held,
    /// The test let it go.
    Let,
    /// Its work has run.
    Landed,
}

/// A pool whose next loan, once armed, keeps its work from running until the test lets it go,
/// as a link that delays one connection's traffic would.
struct Holdback<C: R2D2Connection + 'static> {
    pool: Pool<ConnectionManager<C>>,
    phase: Arc<(Mutex<Phase>, Condvar)>,
}

impl<C: R2D2Connection + 'static> Clone for Holdback<C> {
    fn clone(&self) -> Self {
        Holdback {
            pool: self.pool.clone(),
            phase: Arc::clone(&self.phase),
        }
    }
}

fn phase(shared: &(Mutex<Phase>, Condvar)) -> MutexGuard<'_, Phase> {
    shared.0.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: R2D2Connection + 'static> Holdback<C> {
    fn new(pool: Pool<ConnectionManager<C>>) -> Self {
        Holdback {
            pool,
            phase: Arc::new((Mutex::new(Phase::Open), Condvar::new())),
        }
    }

    fn set(&self, to: Phase) {
        *phase(&self.phase) = to;
        self.phase.1.notify_all();
    }

    /// Waits until `done` holds of the phase; the phase then, or `None` after `within`.
    fn wait_for(&self, within: Duration, done: impl Fn(Phase) -> bool) -> Option<Phase> {
        let (guard, _) = self
            .phase
            .1
            .wait_timeout_while(phase(&self.phase), within, |p| !done(*p))
            .unwrap_or_else(PoisonError::into_inner);
        done(*guard).then_some(*guard)
    }
}

impl<C> ConnectionSource for Holdback<C>
where
    C: LeaseConnection + R2D2Connection + 'static,
{
    type Connection = C;
    type Lent = (
        PooledConnection<ConnectionManager<C>>,
        Option<Arc<(Mutex<Phase>, Condvar)>>,
    );

    fn lend(&self, wait: Duration) -> diesel_lease::Result<Self::Lent> {
        let conn = ConnectionSource::lend(&self.pool, wait)?;
        let mut now = phase(&self.phase);
        let held = (*now == Phase::Armed).then(|| Arc::clone(&self.phase));
        if held.is_some() {
            *now = Phase::Held;
            self.phase.1.notify_all();
        }
        Ok((conn, held))
    }

    fn with_lent<T>(
        lent: &mut Self::Lent,
        work: impl FnOnce(&mut C) -> diesel_lease::Result<T>,
    ) -> diesel_lease::Result<T> {
        let Some(shared) = lent.1.take() else {
            return work(&mut lent.0);
        };
        // Held until let go (at most a minute: a failed test must not leave it waiting).
        drop(
            shared
                .1
                .wait_timeout_while(phase(&shared), ms(60_000), |p| *p != Phase::Let)
                .unwrap_or_else(PoisonError::into_inner),
        );
        let done = work(&mut lent.0);
        *phase(&shared) = Phase::Landed;
        shared.1.notify_all();
        done
    }

    fn connection_timeout(&self) -> Duration {
        self.pool.connection_timeout()
    }
}

/// A keep-alive holder with `at_least_for` releases while its beat is on its way: the release
/// leaves the lease held until `acquired_at + at_least_for`, and the beat, sent before the
/// release and landing after it, used to find the grant still valid by token and expiry and push
/// the expiry a whole ttl past the landing, so other nodes skipped the job that much longer. A
/// released grant matches no extension now: the expiry is the release's.
fn a_keep_alive_extension_landing_after_the_release_changes_nothing<B: TestBackend>(
    db: &TestDb<B>,
) {
    db.migrate();
    let source = Holdback::new(db.pool(4));
    // Held 12 s at least (the whole ttl); the first beat comes 4 s in.
    let options = opts(12_000).at_least_for(ms(12_000)).keep_alive(true);
    let guard = LeaseGuard::try_acquire(&source, "late", &options)
        .unwrap()
        .expect("free");
    source.set(Phase::Armed);
    assert_eq!(
        source.wait_for(ms(15_000), |p| p == Phase::Held),
        Some(Phase::Held),
        "the keep-alive's beat never came"
    );
    // The release stops the keep-alive (its wait for the held beat runs out) and releases on
    // another connection of the pool.
    let released_at = Instant::now();
    assert!(guard.release().expect("released"), "it was still held");
    let mut watcher = db.conn();
    let released = lease::inspect(&mut watcher, "late").unwrap().unwrap();
    assert!(released.released_at_micros.is_some(), "{released:?}");
    assert_eq!(
        released.expires_at_micros,
        released.acquired_at_micros + 12_000_000,
        "a release keeps the lease until at_least_for ends: {released:?}"
    );
    assert!(released.is_held(), "{released:?}");

    source.set(Phase::Let);
    assert_eq!(
        source.wait_for(ms(30_000), |p| p == Phase::Landed),
        Some(Phase::Landed),
        "the held beat never ran"
    );
    let after = lease::inspect(&mut watcher, "late").unwrap().unwrap();
    assert!(
        after.read_at_micros < after.expires_at_micros,
        "the check ran before at_least_for ran out ({:?} after the release): {after:?}",
        released_at.elapsed()
    );
    assert_eq!(
        (
            after.token,
            after.expires_at_micros,
            after.released_at_micros
        ),
        (
            released.token,
            released.expires_at_micros,
            released.released_at_micros
        ),
        "the late beat moved the released lease: {after:?}"
    );
}

backend_tests!(a_keep_alive_extension_landing_after_the_release_changes_nothing);
