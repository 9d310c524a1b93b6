//! Notifications between connections, in one place: what each backend delivers
//! ([`Notifications`]), each pool's shared listener connection (`listener.rs`, owned by
//! `pool::WaiterWakeups`), and wake-ups between the waiters of one process where the backend
//! delivers nothing (`local.rs`).
//!
//! Claim waiters (`claim/wait.rs`) and semaphore waiters use the same listener and the same
//! channel; a notification's payload names what changed (a semaphore resource, or `claim:` and
//! a table).
//!
//! Sealed; its items are internal and carry no stability promise.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use diesel::QueryResult;

use crate::backend::Dialect;

pub(crate) mod gate;
pub(crate) mod listener;
pub(crate) mod local;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;

/// Set once this process set up a connection for a transaction pooler
/// (`pool::ConnectionTuning::transaction_pooler`).
static BEHIND_TRANSACTION_POOLER: AtomicBool = AtomicBool::new(false);

/// Notes that this process has connections through a transaction pooler. A `LISTEN` through one
/// lands on whichever server connection ran it and stays there: the pooler drops what arrives
/// while no client is linked to it and hands the rest to whichever client is, so the listening
/// client hears nothing and others collect notifications they never read.
pub(crate) fn note_transaction_pooler() {
    BEHIND_TRANSACTION_POOLER.store(true, Ordering::Relaxed);
}

/// Whether a wait may `LISTEN` on a connection the caller passed in: not in a process with
/// connections through a transaction pooler, since a connection does not say where it goes (such
/// waits then wake within this process and poll). A pool's listener is told its own URL.
pub(crate) fn may_listen_on_callers_connection() -> bool {
    !BEHIND_TRANSACTION_POOLER.load(Ordering::Relaxed)
}

/// What a backend delivers between connections: PostgreSQL `LISTEN/NOTIFY`; nothing on SQLite
/// and MySQL, where every method keeps its default (waiters poll, and wake each other within
/// one process through `local.rs`).
pub trait Notifications: Dialect {
    /// Whether the backend delivers [`notify`](Self::notify) to listening connections (then a
    /// pool's waiters share one listener connection; elsewhere they only poll).
    const NOTIFICATIONS: bool = false;

    /// Tells waiters of `key` that it changed (delivered at commit). Nothing where the backend
    /// has no notifications.
    #[doc(hidden)]
    fn notify(&mut self, _key: &str) -> QueryResult<()> {
        Ok(())
    }

    /// Starts (`true`) or stops listening for [`notify`](Self::notify).
    #[doc(hidden)]
    fn listen(&mut self, _on: bool) -> QueryResult<()> {
        Ok(())
    }

    /// Waits up to `max` for notifications and returns the keys notified (empty when none
    /// came). Where the backend has no notifications it just sleeps. An error means the
    /// connection broke.
    #[doc(hidden)]
    fn wait_for_notifications(&mut self, max: Duration) -> QueryResult<Vec<String>> {
        std::thread::sleep(max);
        Ok(Vec::new())
    }

    /// Sleeps up to `max`, returning early (`true`) when `key` was notified.
    #[doc(hidden)]
    fn wait_for_wakeup(&mut self, key: &str, max: Duration) -> QueryResult<bool> {
        let deadline = Instant::now() + max;
        loop {
            let notified =
                self.wait_for_notifications(deadline.saturating_duration_since(Instant::now()))?;
            if notified.iter().any(|k| k == key) {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }

    /// Names the session where the server shows it to operators (PostgreSQL's
    /// `application_name`); nothing elsewhere.
    #[doc(hidden)]
    fn name_session(&mut self, _name: &str) -> QueryResult<()> {
        Ok(())
    }
}

#[cfg(feature = "sqlite")]
impl Notifications for diesel::SqliteConnection {}

#[cfg(feature = "mysql")]
impl Notifications for diesel::MysqlConnection {}
#[cfg(feature = "mariadb")]
impl Notifications for diesel::mariadb::MariadbConnection {}
