//! One listener connection per pool, shared by the pool's waiters (semaphores, claims).
//!
//! A pool-backed waiter borrows a connection for each poll and gives it back in between, so it
//! cannot `LISTEN` on it. Instead each pool built with `pool::build_pool`
//! (or given a `pool::WaiterWakeups`) owns one [`Listener`]: a thread
//! with a dedicated connection that `LISTEN`s on the semaphore channel and wakes the waiters of a
//! notified resource through that resource's condvar. Waiters sleep on the condvar for their poll
//! delay instead of reading a socket.
//!
//! # Where its connection comes from
//!
//! It is established from the pool's URL, outside the pool: the pool's connections are what the
//! holders' heartbeats and the waiters' polls borrow, and a listener sitting on one of them for
//! the length of every wait would starve them exactly like the waiters used to. It shows in
//! `pg_stat_activity` with `application_name` = `diesel-lease listener`.
//!
//! # Why one per pool
//!
//! The pool is what knows the URL and what the waiters hold, and the listener lives exactly as
//! long: dropping the pool's last clone drops its event handler, which stops the thread. One per
//! process and URL would save a connection only for applications with several pools on one
//! database, at the price of a process-wide registry that nobody owns and nothing stops.
//!
//! # Lifetime
//!
//! The thread starts when the pool's first waiter registers and `LISTEN`s while anybody waits.
//! When the last waiter leaves it `UNLISTEN`s (so notifications do not pile up unread, holding
//! back the server's notification queue) but keeps its connection for [`LINGER`], so a steady
//! trickle of waiters does not reconnect every time; then it closes the connection and ends. The
//! next waiter starts it again. Dropping the pool stops it at its next look at its state (within
//! a read slice of 50 ms, or once a connection attempt or liveness check under way has ended: on
//! a silent network, when the connection's TCP settings give it up, about 20 s on PostgreSQL with
//! `pool::with_network_settings`, which `pool::WaiterWakeups` applies to the URL).
//!
//! # When it fails
//!
//! Notifications are only hints. Every waiter still polls on its own schedule (backoff up to its
//! max poll interval, at most one query per second by default), which is also how its row stays
//! alive, so a broken listener costs hand-over latency, never correctness. When its connection
//! breaks (reading notifications or the periodic liveness check fails), the listener reconnects
//! with backoff ([`RECONNECT_MIN`] to [`RECONNECT_MAX`]) for as long as anybody waits; the
//! backoff starts over only once `LISTEN` works, so a server that takes connections but refuses
//! `LISTEN` (a hot standby) is not reconnected to in a loop. Each successful `LISTEN` starts a
//! new *session*: the waiters wake and poll once, since notifications sent while nobody
//! listened are lost.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use lease_core::Backoff;

use super::Notifications;

/// The listener connection's `application_name` (and the thread's name).
pub(crate) const LISTENER_NAME: &str = "diesel-lease listener";

/// How long one read of notifications waits before the thread looks at its state again.
const READ_SLICE: Duration = Duration::from_millis(50);
/// How often the connection is checked with a query, to notice a connection the network lost
/// without closing it.
const LIVENESS_CHECK: Duration = Duration::from_secs(5);
/// How long the connection stays open after the last waiter left.
const LINGER: Duration = Duration::from_secs(30);
/// The first pause before reconnecting; it doubles up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// The longest pause between two reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// A pool's listener. Dropping it (with the pool) stops the thread.
pub(crate) struct Listener {
    shared: Arc<Shared>,
}

struct Shared {
    url: String,
    /// The thread's body, for the pool's connection type.
    run: fn(Arc<Shared>),
    state: Mutex<State>,
    /// Wakes the thread: a waiter arrived, or the listener was dropped.
    thread_wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The resources somebody waits for.
    resources: HashMap<String, Resource>,
    /// Counts the successful `LISTEN`s: notifications sent before the current one may be lost.
    session: u64,
    listening: bool,
    running: bool,
    stopped: bool,
}

struct Resource {
    waiters: usize,
    /// Notifications received for it (in any session).
    notified: u64,
    wake: Arc<Condvar>,
}

impl State {
    fn notified_of(&self, resource: &str) -> u64 {
        self.resources.get(resource).map_or(0, |r| r.notified)
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // No critical section here runs code that can panic halfway through an update.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Listener {
    /// A listener for a pool of `C` connections to `url`; its thread starts with the first
    /// waiter.
    pub(crate) fn new<C: Notifications>(url: String) -> Self {
        Listener {
            shared: Arc::new(Shared {
                url,
                run: run::<C>,
                state: Mutex::new(State::default()),
                thread_wake: Condvar::new(),
            }),
        }
    }

    /// Registers a waiter of `resource` until the registration is dropped, starting the thread
    /// if it is not running.
    pub(crate) fn register(&self, resource: &str) -> Registration {
        let mut state = lock(&self.shared.state);
        let entry = state
            .resources
            .entry(resource.to_owned())
            .or_insert_with(|| Resource {
                waiters: 0,
                notified: 0,
                wake: Arc::new(Condvar::new()),
            });
        entry.waiters += 1;
        let wake = Arc::clone(&entry.wake);
        if !state.running && !state.stopped {
            // Without a thread the waiters just poll.
            state.running = spawn(&self.shared).is_ok();
        }
        drop(state);
        self.shared.thread_wake.notify_all();
        Registration {
            shared: Arc::clone(&self.shared),
            resource: resource.to_owned(),
            wake,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        lock(&self.shared.state).stopped = true;
        self.shared.thread_wake.notify_all();
    }
}

fn spawn(shared: &Arc<Shared>) -> io::Result<()> {
    let shared = Arc::clone(shared);
    let run = shared.run;
    thread::Builder::new()
        .name(LISTENER_NAME.to_string())
        .spawn(move || run(shared))
        .map(drop)
}

/// A waiter's place at the listener: what it was told, and its resource's condvar.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    resource: String,
    wake: Arc<Condvar>,
}

/// What the listener had seen when a waiter last looked at the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    session: u64,
    listening: bool,
    notified: u64,
}

impl Registration {
    /// Notes what the listener has seen so far; take it before looking at the queue, so that a
    /// change committed after the look is a notification after the mark.
    pub(crate) fn mark(&self) -> Mark {
        let state = lock(&self.shared.state);
        Mark {
            session: state.session,
            listening: state.listening,
            notified: state.notified_of(&self.resource),
        }
    }

    /// Sleeps up to `max`. `true` as soon as the resource was notified after `mark`; `false`
    /// when `max` passed, or when the listener (re)connected since `mark` (notifications may
    /// have been lost meanwhile: poll).
    pub(crate) fn sleep(&self, mark: Mark, max: Duration) -> bool {
        let end = Instant::now().checked_add(max);
        let mut state = lock(&self.shared.state);
        loop {
            if state.session != mark.session {
                return false;
            }
            if mark.listening && state.notified_of(&self.resource) != mark.notified {
                return true;
            }
            let left = end.map_or(max, |end| end.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return false;
            }
            state = self
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        if let Some(entry) = state.resources.get_mut(&self.resource) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                state.resources.remove(&self.resource);
            }
        }
    }
}

impl Shared {
    /// Whether anybody waits (and the listener was not dropped).
    fn has_waiters(&self) -> bool {
        let state = lock(&self.state);
        !state.stopped && !state.resources.is_empty()
    }

    /// Waits up to `linger` for a waiter; `false` when none came or the listener was dropped.
    /// Then the thread ends, and says so under the lock, so a waiter arriving at that moment
    /// starts a new one.
    fn wait_for_waiters(&self, linger: Duration) -> bool {
        let until = Instant::now() + linger;
        let mut state = lock(&self.state);
        loop {
            if state.stopped {
                break;
            }
            if !state.resources.is_empty() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                break;
            }
            state = self
                .thread_wake
                .wait_timeout(state, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.running = false;
        state.listening = false;
        false
    }

    /// Sleeps up to `pause`, or until a waiter arrives or the listener is dropped.
    fn nap(&self, pause: Duration) {
        let state = lock(&self.state);
        if !state.stopped {
            drop(self.thread_wake.wait_timeout(state, pause));
        }
    }

    /// A new `LISTEN` took effect: every waiter polls once (it may have missed notifications).
    fn listening(&self) {
        let mut state = lock(&self.state);
        state.session += 1;
        state.listening = true;
        for resource in state.resources.values() {
            resource.wake.notify_all();
        }
    }

    fn not_listening(&self) {
        lock(&self.state).listening = false;
    }

    /// Wakes the waiters of the notified resources.
    fn notified(&self, resources: &[String]) {
        if resources.is_empty() {
            return;
        }
        let mut state = lock(&self.state);
        for name in resources {
            if let Some(resource) = state.resources.get_mut(name) {
                resource.notified += 1;
                resource.wake.notify_all();
            }
        }
    }
}

/// The thread: connect, `LISTEN` while anybody waits, pass notifications on, reconnect when the
/// connection breaks, end when nobody waited for [`LINGER`] or the listener was dropped.
fn run<C: Notifications>(shared: Arc<Shared>) {
    let mut conn: Option<C> = None;
    let mut listening = false;
    let mut reconnect = Backoff::new(RECONNECT_MIN, RECONNECT_MAX);
    let mut next_connect = Instant::now();
    let mut next_check = Instant::now();
    loop {
        if !shared.has_waiters() {
            // Stop listening, so that notifications do not pile up unread (and hold back the
            // server's notification queue), but keep the connection for the next waiters.
            if listening {
                listening = false;
                shared.not_listening();
                if conn.as_mut().is_some_and(|c| c.listen(false).is_err()) {
                    conn = None;
                }
            }
            if !shared.wait_for_waiters(LINGER) {
                return;
            }
        }
        let now = Instant::now();
        let Some(c) = conn.as_mut() else {
            if now < next_connect {
                shared.nap(next_connect - now);
            } else if let Some(c) = connect::<C>(&shared.url) {
                // The backoff starts over only once `LISTEN` works: a server that takes the
                // connection but refuses `LISTEN` (a hot standby) is retried at its pace.
                conn = Some(c);
                next_check = now + LIVENESS_CHECK;
            } else {
                next_connect = Instant::now() + reconnect.next_delay();
            }
            continue;
        };
        let read = if listening {
            c.wait_for_notifications(READ_SLICE).and_then(|notified| {
                if Instant::now() >= next_check {
                    diesel::connection::SimpleConnection::batch_execute(c, "SELECT 1")?;
                    next_check = Instant::now() + LIVENESS_CHECK;
                }
                Ok(notified)
            })
        } else {
            c.listen(true).map(|()| {
                listening = true;
                reconnect.reset();
                shared.listening();
                Vec::new()
            })
        };
        match read {
            Ok(notified) => shared.notified(&notified),
            Err(_) => {
                // Broken: the waiters poll until a new connection listens.
                conn = None;
                if listening {
                    listening = false;
                    shared.not_listening();
                }
                next_connect = Instant::now() + reconnect.next_delay();
            }
        }
    }
}

/// A new connection to `url`, named for operators; `None` if that failed (retried later).
fn connect<C: Notifications>(url: &str) -> Option<C> {
    let mut conn = C::establish(url).ok()?;
    conn.name_session(LISTENER_NAME).ok()?;
    Some(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(5);
    const SHORT: Duration = Duration::from_millis(50);

    /// A listener whose thread does nothing: the tests play its part.
    fn idle_listener() -> Listener {
        Listener {
            shared: Arc::new(Shared {
                url: String::new(),
                run: |_| {},
                state: Mutex::new(State::default()),
                thread_wake: Condvar::new(),
            }),
        }
    }

    /// Runs `f` on the listener's side after a short pause, while the test sleeps.
    fn soon(shared: &Arc<Shared>, f: impl FnOnce(&Shared) + Send + 'static) {
        let shared = Arc::clone(shared);
        thread::spawn(move || {
            thread::sleep(SHORT);
            f(&shared);
        });
    }

    #[test]
    fn a_notification_after_the_mark_wakes_the_sleeper_at_once() {
        let listener = idle_listener();
        listener.shared.listening();
        let waiter = listener.register("r");
        let mark = waiter.mark();
        soon(&listener.shared, |s| s.notified(&["r".to_string()]));
        let started = Instant::now();
        assert!(waiter.sleep(mark, LONG));
        assert!(started.elapsed() < LONG / 2);
    }

    #[test]
    fn a_notification_before_the_mark_or_of_another_resource_does_not_wake() {
        let listener = idle_listener();
        listener.shared.listening();
        let waiter = listener.register("r");
        listener.shared.notified(&["r".to_string()]);
        let mark = waiter.mark();
        soon(&listener.shared, |s| s.notified(&["other".to_string()]));
        let started = Instant::now();
        assert!(!waiter.sleep(mark, SHORT * 4));
        assert!(started.elapsed() >= SHORT * 4);
    }

    #[test]
    fn a_reconnection_ends_the_sleep_with_a_poll() {
        let listener = idle_listener();
        let waiter = listener.register("r");
        // Marked while nobody listened: only the next session can wake it early.
        let mark = waiter.mark();
        soon(&listener.shared, Shared::listening);
        let started = Instant::now();
        assert!(!waiter.sleep(mark, LONG), "a poll, not a notification");
        assert!(started.elapsed() < LONG / 2);
    }

    #[test]
    fn notifications_while_not_listening_are_not_trusted() {
        let listener = idle_listener();
        let waiter = listener.register("r");
        let mark = waiter.mark();
        listener.shared.notified(&["r".to_string()]);
        assert!(!waiter.sleep(mark, SHORT));
    }

    #[test]
    fn registrations_are_counted_per_resource() {
        let listener = idle_listener();
        let a = listener.register("r");
        let b = listener.register("r");
        let c = listener.register("s");
        let count = |l: &Listener| lock(&l.shared.state).resources.len();
        assert_eq!(count(&listener), 2);
        assert!(listener.shared.has_waiters());
        drop(a);
        assert_eq!(count(&listener), 2, "b still waits for r");
        drop((b, c));
        assert_eq!(count(&listener), 0);
        assert!(!listener.shared.has_waiters());
    }

    #[test]
    fn the_thread_ends_after_the_linger_or_when_the_listener_is_dropped() {
        let listener = idle_listener();
        let shared = Arc::clone(&listener.shared);
        lock(&shared.state).running = true;
        assert!(!shared.wait_for_waiters(SHORT), "nobody came");
        assert!(!lock(&shared.state).running);

        let waiter = listener.register("r");
        assert!(shared.wait_for_waiters(LONG), "a waiter is there");
        drop(listener);
        let started = Instant::now();
        assert!(!shared.has_waiters(), "dropped: nobody to wake any more");
        assert!(!shared.wait_for_waiters(LONG));
        assert!(started.elapsed() < LONG / 2);
        drop(waiter);
    }
}
