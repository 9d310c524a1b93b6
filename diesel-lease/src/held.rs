//! [`Held`]: what every guard that holds something in the background has in common.

use crate::heartbeat::LostSignal;
use crate::Result;

/// Something held while its pool's keeper keeps it: a
/// [`LeaseGuard`](crate::lease::LeaseGuard), a [`PermitGuard`](crate::semaphore::PermitGuard)
/// or a [`ClaimGuard`](crate::claim::ClaimGuard). Dropping one gives back what it holds: the drop
/// does no network I/O and never blocks (inside an async task too), it hands the release to the
/// keeper, which runs it at once (within the drop wait, or the grant expires; see
/// [`pool::flush_releases`](crate::pool::flush_releases)); [`release`](Self::release) does it
/// itself and says how it ended.
///
/// The keeper is one background thread per pool: it extends every holder of the pool a third of
/// its ttl after the last extension, running on one connection the extensions that are due
/// together, and wakes at each holder's local deadline.
///
/// A guard is *lost* when a heartbeat finds it taken over or expired, or when no heartbeat
/// succeeded before its local deadline — so a holder cut off from the database stops believing
/// it holds before the database gives the thing to someone else. Long work checks
/// [`is_lost`](Self::is_lost) between steps, or waits on [`lost_signal`](Self::lost_signal).
///
/// Its manual counterparts ([`Lease`](crate::Lease), [`Permit`](crate::semaphore::Permit), a
/// claimed row) have no keeper: their holder extends and releases them on a
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
/// assert!(guard.release().unwrap().was_held(), "it was still ours");
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

    /// Stops the heartbeat and gives back what is held: [`Released::WasHeld`] when it was still
    /// held, [`Released::WasLost`] when it had been lost already (taken over, expired, rescued)
    /// and the protected work may have run unprotected. An error when the database could not be
    /// reached; the thing held then expires on its own.
    fn release(self) -> Result<Released>;
}

/// How a release ended: whether what it gave back was still held until then.
///
/// A release is the last moment a holder learns that its grant was lost while it worked, so
/// the answer must be looked at: the type is `#[must_use]`, and `guard.release()?;` on its own
/// is a warning. Check it, or discard it on purpose with `let _ =`.
///
/// Returned by [`Held::release`], [`Lease::release`](crate::Lease::release) and
/// [`Permit::release`](crate::semaphore::Permit::release).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::{LeaseGuard, LeaseOptions};
/// use diesel_lease::prelude::*;
/// use diesel_lease::Released;
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
/// let options = LeaseOptions::new(Duration::from_secs(3));
/// let guard = LeaseGuard::try_acquire(&pool, "report", &options).unwrap().expect("free");
/// // ... the protected work ...
/// match guard.release().unwrap() {
///     Released::WasHeld => {}
///     Released::WasLost => eprintln!("the report may have run twice: check its output"),
/// }
/// # }
/// ```
#[must_use = "`Released::WasLost` means the protected work may have run unprotected: check it, \
              or discard it on purpose with `let _ =`"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Released {
    /// It was still held until the release gave it back: the protected work ran protected.
    WasHeld,
    /// It had been lost before the release (expired, taken over, rescued, released already, or
    /// its local deadline had passed): the protected work may have run (partly) unprotected.
    WasLost,
}

impl Released {
    /// `true` for [`Released::WasHeld`].
    pub fn was_held(self) -> bool {
        self == Released::WasHeld
    }

    /// `true` for [`Released::WasLost`].
    pub fn was_lost(self) -> bool {
        self == Released::WasLost
    }

    /// From "was it still held".
    pub(crate) fn from_held(held: bool) -> Self {
        if held {
            Released::WasHeld
        } else {
            Released::WasLost
        }
    }
}
