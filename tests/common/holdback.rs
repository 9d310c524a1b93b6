//! A [`ConnectionSource`] in front of a real pool that holds one loan's work back until the
//! test lets it go, as a link that delays one connection's traffic would: the statement of a
//! heartbeat can then reach the database after what the holder did next (a release, a hand-back)
//! on another connection of the pool (`lease/late_beat.rs`, `claim/heartbeat.rs`).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use diesel::r2d2::{ConnectionManager, Pool, PooledConnection, R2D2Connection};
use diesel_lease::pool::ConnectionSource;
use diesel_lease::LeaseConnection;

/// Where the held-back loan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
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
pub struct Holdback<C: R2D2Connection + 'static> {
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
    pub fn new(pool: Pool<ConnectionManager<C>>) -> Self {
        Holdback {
            pool,
            phase: Arc::new((Mutex::new(Phase::Open), Condvar::new())),
        }
    }

    pub fn set(&self, to: Phase) {
        *phase(&self.phase) = to;
        self.phase.1.notify_all();
    }

    /// Waits until `done` holds of the phase; the phase then, or `None` after `within`.
    pub fn wait_for(&self, within: Duration, done: impl Fn(Phase) -> bool) -> Option<Phase> {
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
                .wait_timeout_while(phase(&shared), Duration::from_secs(60), |p| {
                    *p != Phase::Let
                })
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
