//! [`Held`]: what every guard that holds something in the background has in common.

use crate::heartbeat::LostSignal;
use crate::Result;

/// Something held while a background heartbeat keeps it: a
/// [`LeaseGuard`](crate::lease::LeaseGuard), a [`PermitGuard`](crate::semaphore::PermitGuard)
/// or a [`ClaimGuard`](crate::claim::ClaimGuard). Dropping one gives back what it holds (within
/// its drop wait); [`release`](Self::release) does it and says how it ended.
///
/// A guard is *lost* when a heartbeat finds it taken over or expired, or when no heartbeat
/// succeeded before its local deadline — so a holder cut off from the database stops believing
/// it holds before the database gives the thing to someone else. Long work checks
/// [`is_lost`](Self::is_lost) between steps, or waits on [`lost_signal`](Self::lost_signal).
///
/// Its manual counterparts ([`Lease`](crate::Lease), [`PermitGuard`](crate::semaphore::PermitGuard), a
/// claimed row) have no background thread: their holder extends and releases them on a
/// connection of its own.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::{LeaseGuard, LeaseOptions};
/// use diesel_lease::prelude::*;
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
/// let options = LeaseOptions::new(Duration::from_secs(3)).keep_alive(true);
/// let guard = LeaseGuard::try_acquire(&pool, "compaction", &options).unwrap().expect("free");
/// assert!(!guard.is_lost());
/// guard.ensure_held().unwrap();
/// assert!(guard.release().unwrap(), "it was still ours");
/// # }
/// ```
pub trait Held: Sized {
    /// Whether the holder must consider it lost (see the trait docs); `false` while held.
    fn is_lost(&self) -> bool;

    /// A handle that fires when it is lost: poll it or block on it
    /// ([`LostSignal::wait_timeout`]) from the protected work to cancel that work.
    fn lost_signal(&self) -> LostSignal;

    /// `Ok(())` while held; once lost, the error that says so
    /// ([`Error::LeaseLost`](crate::Error::LeaseLost),
    /// [`Error::PermitNotHeld`](crate::Error::PermitNotHeld),
    /// [`Error::ClaimLost`](crate::Error::ClaimLost)), to stop the work with `?`.
    fn ensure_held(&self) -> Result<()>;

    /// Stops the heartbeat and gives back what is held: `true` when it was still held, `false`
    /// when it had been lost already (taken over, expired, rescued) and the protected work may
    /// have run unprotected. An error when the database could not be reached; the thing held
    /// then expires on its own.
    fn release(self) -> Result<bool>;
}
