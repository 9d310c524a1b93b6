//! One keep-alive for everything a process holds in the database: leases, permits, claimed rows.
//!
//! The database decides when a grant expires, on its own clock; the holder cannot ask without a
//! round trip. So each holder keeps a conservative local estimate, a [`HolderState`]: the
//! instant its last successful grant or extension was *sent*, plus that grant's ttl, minus a
//! safety margin. The server started its ttl at its `now`, which came after the request left,
//! so its expiry is later than ours. Only durations measured on this process's monotonic clock
//! (`Instant`) are involved, never a wall-clock time compared with the server's: a clock step
//! (NTP, a manual change) moves nothing.
//!
//! Once that local deadline passes without a new success, the holder counts as lost, whatever
//! the database says or fails to say, and the protected work must stop. A lost state never
//! turns back to held.
//!
//! The keeper (`crate::keeper`) extends grants in the background: it calls each holder's beat,
//! a closure that talks to the database (this module knows nothing about databases), records
//! successes, retries sooner after failures, and marks the state lost when the database says it
//! is gone or when the deadline passes. [`LostSignal`] and [`HolderState::on_lost`] tell the
//! protected work.

use std::fmt;
use std::mem;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Spans longer than this (a century) are cut to it, so an enormous ttl or period cannot
/// overflow `Instant` arithmetic.
const MAX_SPAN: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The safety margin for a grant of `ttl`: a tenth of it, at least 1 ms, but never more than half
/// the ttl (so a holder of a tiny ttl is not lost at once).
///
/// The margin covers what the "sent" instant does not:
/// - the client's and the server's clocks tick at slightly different rates, so the server's
///   ttl may run out a little sooner than the same ttl measured here;
/// - the protected work needs time to notice it is lost and stop before the server hands the
///   grant to somebody else.
///
/// It does not cover a process that is paused longer than the margin (a GC pause, `SIGSTOP`, a
/// suspended VM): such a holder wakes after the server's expiry still believing it holds the
/// grant, until it next looks at the clock. Fencing tokens, checked by the protected resource,
/// remain the real protection.
pub(crate) fn default_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(1)).min(ttl / 2)
}

/// Why a holder no longer holds its grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The local deadline (last success + ttl - margin) passed without a successful extension:
    /// the database may already have given the grant to somebody else. Usually the database was
    /// unreachable.
    Expired,
    /// The database said the grant is no longer ours: it expired there and was removed or
    /// granted to another holder.
    Gone,
    /// The holder gave the grant back itself (release, drop). Nothing went wrong, but the grant
    /// protects nothing any more.
    Released,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "its local deadline passed without a successful extension",
            LostReason::Gone => "the database said it is no longer ours",
            LostReason::Released => "it was released",
        })
    }
}

/// What a holder believes about its grant; cheap to clone, every clone is the same state.
///
/// It is *lost* once `deadline()` has passed without a new success, or once
/// [`mark_lost`](Self::mark_lost) was called; lost is final. The first reason that applied is
/// the one kept: a state whose deadline passed before `mark_lost(Gone)` stays
/// [`LostReason::Expired`].
#[derive(Clone)]
pub(crate) struct HolderState {
    shared: Arc<Shared>,
}

/// A read-only view of a holder's state for the protected work: is it lost, or wait until it is.
#[derive(Clone)]
pub struct LostSignal {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Notified when the state becomes lost or its deadline moves earlier.
    changed: Condvar,
}

type Callback = Box<dyn FnOnce(LostReason) + Send>;

/// Called each time a success moves the deadline earlier (a shorter ttl), while the state lives.
type Nudge = Arc<dyn Fn() + Send + Sync>;

struct Inner {
    last_success: Instant,
    /// The ttl of the grant or success sent at `last_success`.
    ttl: Duration,
    deadline: Instant,
    /// When `deadline` was set: a deadline that had already passed then (a grant or a success
    /// that came back too late) made the state lost only at this instant.
    deadline_set_at: Instant,
    lost: Option<LostReason>,
    /// When it became lost, once `lost` is set.
    lost_at: Option<Instant>,
    callbacks: Vec<Callback>,
    nudges: Vec<Nudge>,
}

impl Inner {
    fn reason_at(&self, now: Instant) -> Option<LostReason> {
        self.lost
            .or((now >= self.deadline).then_some(LostReason::Expired))
    }

    /// When it became lost, as seen at `now`: the recorded instant, or once the deadline passed,
    /// that deadline (whether or not anybody looked then), but never before the deadline was
    /// known.
    fn lost_at(&self, now: Instant) -> Option<Instant> {
        self.lost_at
            .or((now >= self.deadline).then_some(self.deadline.max(self.deadline_set_at)))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its data whole (no user code runs under these locks).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn add_capped(start: Instant, span: Duration) -> Instant {
    // Falling back to `start` errs towards "lost sooner", never towards "held longer".
    start.checked_add(span.min(MAX_SPAN)).unwrap_or(start)
}

fn deadline_of(sent_at: Instant, ttl: Duration, margin: Duration) -> Instant {
    add_capped(sent_at, ttl.saturating_sub(margin))
}

impl HolderState {
    /// A grant of `ttl` obtained by a request sent at `granted_at`; it counts as lost `margin`
    /// before the ttl runs out (see [`default_margin`]). A margin of `ttl` or more makes it
    /// lost at once.
    pub(crate) fn new(granted_at: Instant, ttl: Duration, margin: Duration) -> Self {
        HolderState {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    last_success: granted_at,
                    ttl,
                    deadline: deadline_of(granted_at, ttl, margin),
                    deadline_set_at: Instant::now(),
                    lost: None,
                    lost_at: None,
                    callbacks: Vec::new(),
                    nudges: Vec::new(),
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Records a successful extension by `ttl`, whose request was sent at `sent_at`; its margin
    /// is [`default_margin`] of that ttl (an extension to a shorter ttl keeps a margin shorter
    /// than it, one to a longer ttl gets the longer margin).
    ///
    /// The latest request decides, as it does on the server (`expires_at = now + ttl`): a newer
    /// success with a shorter ttl moves the deadline earlier. A success sent before the current
    /// one is ignored (it proves nothing newer, and the server may have applied it first), so it
    /// never moves the deadline backwards. A lost state stays lost, including one whose deadline
    /// passed while this request was under way. A deadline moved earlier wakes the waiters and
    /// its keeper, which then paces its beats by the new ttl.
    pub(crate) fn record_success(&self, sent_at: Instant, ttl: Duration) {
        let mut inner = lock(&self.shared.inner);
        if inner.reason_at(Instant::now()).is_some() {
            self.shared.settle(inner, LostReason::Expired);
            return;
        }
        if sent_at < inner.last_success {
            return;
        }
        let before = inner.deadline;
        inner.last_success = sent_at;
        inner.ttl = ttl;
        inner.deadline = deadline_of(sent_at, ttl, default_margin(ttl));
        inner.deadline_set_at = Instant::now();
        if inner.deadline_set_at >= inner.deadline {
            self.shared.settle(inner, LostReason::Expired);
        } else if inner.deadline < before {
            // Waiters sleep until the deadline they saw; an earlier one must wake them.
            let nudges = inner.nudges.clone();
            drop(inner);
            self.shared.changed.notify_all();
            nudges.iter().for_each(|nudge| nudge());
        }
    }

    /// Marks the state lost for `reason`, wakes the waiters and runs the callbacks. Does nothing
    /// when it is already lost (the first reason stays).
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        self.shared.settle(lock(&self.shared.inner), reason);
    }

    /// Whether the grant is lost: marked so, or its deadline passed (even if nobody noticed yet).
    pub(crate) fn is_lost(&self) -> bool {
        self.shared.reason().is_some()
    }

    /// Why it is lost, or `None` while held. Once `Some`, it never changes.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.shared.reason()
    }

    /// When the latest success (or the grant) was sent, and its ttl.
    pub(crate) fn latest_success(&self) -> (Instant, Duration) {
        let inner = lock(&self.shared.inner);
        (inner.last_success, inner.ttl)
    }

    /// Calls `nudge` each time a success moves the deadline earlier, for as long as the state
    /// lives (outside its lock, in the thread that recorded the success).
    pub(crate) fn on_sooner_deadline(&self, nudge: impl Fn() + Send + Sync + 'static) {
        lock(&self.shared.inner).nudges.push(Arc::new(nudge));
    }

    /// The local instant at which it counts as lost unless extended before.
    pub(crate) fn deadline(&self) -> Instant {
        lock(&self.shared.inner).deadline
    }

    /// The time left until [`deadline`](Self::deadline); zero once it passed.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// A signal for the protected work.
    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs `callback` exactly once, when the state becomes lost, in the thread that marks it
    /// lost (the heartbeat's, or whoever calls [`mark_lost`](Self::mark_lost)); at once, in this
    /// thread, if it is lost already. A state that expires from time alone is marked by its
    /// keeper at the deadline; without one, by the next call that changes it.
    ///
    /// A panicking callback does not keep the others from running; the first panic is resumed
    /// in the marking thread after all of them ran.
    pub(crate) fn on_lost(&self, callback: impl FnOnce(LostReason) + Send + 'static) {
        let mut inner = lock(&self.shared.inner);
        if inner.reason_at(Instant::now()).is_none() {
            inner.callbacks.push(Box::new(callback));
            return;
        }
        let reason = self.shared.settle(inner, LostReason::Expired);
        callback(reason);
    }

    /// Marks the state lost if its deadline passed; whether it is lost.
    pub(crate) fn settle_expiry(&self) -> bool {
        let inner = lock(&self.shared.inner);
        if inner.reason_at(Instant::now()).is_none() {
            return false;
        }
        self.shared.settle(inner, LostReason::Expired);
        true
    }
}

impl Shared {
    fn reason(&self) -> Option<LostReason> {
        lock(&self.inner).reason_at(Instant::now())
    }

    fn lost_at(&self) -> Option<Instant> {
        lock(&self.inner).lost_at(Instant::now())
    }

    /// Makes the state lost (an expiry that came first wins over `reason`), then wakes the
    /// waiters and runs the callbacks outside the lock. Returns the reason that stands.
    fn settle(&self, mut inner: MutexGuard<'_, Inner>, reason: LostReason) -> LostReason {
        if let Some(already) = inner.lost {
            return already;
        }
        let now = Instant::now();
        let reason = inner.reason_at(now).unwrap_or(reason);
        inner.lost = Some(reason);
        inner.lost_at = Some(inner.lost_at(now).unwrap_or(now));
        let callbacks = mem::take(&mut inner.callbacks);
        drop(inner);
        self.changed.notify_all();
        run_callbacks(callbacks, reason);
        reason
    }

    fn wait_timeout(&self, timeout: Duration) -> bool {
        let end = add_capped(Instant::now(), timeout);
        let mut inner = lock(&self.inner);
        loop {
            let now = Instant::now();
            if inner.reason_at(now).is_some() {
                return true;
            }
            if now >= end {
                return false;
            }
            // Wake at the deadline too: nobody may be there to notify a loss from time alone.
            let until = end.min(inner.deadline);
            inner = self
                .changed
                .wait_timeout(inner, until.saturating_duration_since(now))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

fn run_callbacks(callbacks: Vec<Callback>, reason: LostReason) {
    let mut first_panic = None;
    for callback in callbacks {
        if let Err(panic) = panic::catch_unwind(AssertUnwindSafe(|| callback(reason))) {
            first_panic.get_or_insert(panic);
        }
    }
    if let Some(panic) = first_panic {
        panic::resume_unwind(panic);
    }
}

impl fmt::Debug for HolderState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HolderState")
            .field("remaining", &self.remaining())
            .field("lost", &self.lost_reason())
            .finish()
    }
}

impl LostSignal {
    /// Whether the grant is lost: the database said so, or the local deadline passed.
    pub fn is_lost(&self) -> bool {
        self.shared.reason().is_some()
    }

    /// Why it is lost, or `None` while held.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.shared.reason()
    }

    /// When the holder began to count the grant as lost, on this process's monotonic clock, or
    /// `None` while held. For [`LostReason::Expired`] it is the local deadline that passed, even
    /// when nobody looked until later (a starved thread); otherwise the instant the database's
    /// answer or the release was recorded. From that instant on [`is_lost`](Self::is_lost)
    /// answers `true`: logs and tests can compare it with when the grant was requested.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::SqliteConnection;
    /// use diesel_lease::lease::{LeaseGuard, LeaseOptions};
    /// use diesel_lease::Held;
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let url = dir.path().join("app.db").display().to_string();
    /// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 2)?;
    /// diesel_lease::run_migrations(&mut pool.get()?)?;
    /// let guard = LeaseGuard::try_acquire(&pool, "report", &LeaseOptions::new(Duration::from_secs(30)))?
    ///     .expect("free");
    /// let signal = guard.lost_signal();
    /// assert_eq!(signal.lost_at(), None);
    /// assert!(guard.release()?.was_held());
    /// assert!(signal.lost_at().is_some());
    /// # Ok(()) }
    /// # }
    /// ```
    pub fn lost_at(&self) -> Option<Instant> {
        self.shared.lost_at()
    }

    /// Blocks until the grant is lost (`true`) or `timeout` passed (`false`). Wakes at the
    /// deadline by itself, so it needs no heartbeat thread to notice an expiry.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.shared.wait_timeout(timeout)
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("lost", &self.lost_reason())
            .finish()
    }
}

/// What one beat learned from the database.
#[derive(Debug)]
pub(crate) enum Beat<E> {
    /// The grant was extended by `ttl`.
    Held {
        /// The ttl the database applied.
        ttl: Duration,
    },
    /// The database says the grant is not ours any more.
    Lost,
    /// The database could not be asked (no pool connection, network, timeout).
    Failed(E),
}

/// How long a beat may take, pool checkout and statement together: never beyond the local
/// deadline, after which a success would come too late anyway.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BeatBudget {
    until: Instant,
}

impl BeatBudget {
    /// A budget that ends at `until` (the holder's deadline when its beat starts).
    pub(crate) fn new(until: Instant) -> Self {
        BeatBudget { until }
    }

    /// The instant the beat must be done by (the state's deadline when the beat started).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn until(&self) -> Instant {
        self.until
    }

    /// The time left from now; use it as the pool checkout and statement timeouts.
    pub(crate) fn remaining(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Barrier};
    use std::thread;

    /// Generous slack for a loaded CI machine: bounds that only fail when something is broken.
    const SLACK: Duration = Duration::from_millis(700);
    const MS: Duration = Duration::from_millis(1);

    fn ago(d: Duration) -> Instant {
        Instant::now()
            .checked_sub(d)
            .expect("the monotonic clock started more than a few seconds ago")
    }

    /// A beat counter the test keeps while the closure moves into the thread.
    fn counter() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        (Arc::clone(&count), count)
    }

    #[test]
    fn default_margin_is_a_tenth_at_least_1ms_and_below_the_ttl() {
        assert_eq!(
            default_margin(Duration::from_secs(30)),
            Duration::from_secs(3)
        );
        assert_eq!(default_margin(Duration::from_millis(5)), MS);
        assert_eq!(default_margin(Duration::from_micros(1000)), MS / 2);
        assert!(default_margin(Duration::from_micros(3)) < Duration::from_micros(3));
    }

    #[test]
    fn without_successes_it_is_lost_at_ttl_minus_margin_from_time_alone() {
        let granted_at = Instant::now();
        let state = HolderState::new(granted_at, 150 * MS, 50 * MS);
        assert_eq!(state.deadline(), granted_at + 100 * MS);
        {
            let inner = lock(&state.shared.inner);
            assert_eq!(
                inner.reason_at(granted_at + 100 * MS - Duration::from_nanos(1)),
                None
            );
            assert_eq!(
                inner.reason_at(granted_at + 100 * MS),
                Some(LostReason::Expired)
            );
        }

        // Nobody marks it and no thread runs: a waiter still wakes at the deadline.
        let signal = state.lost_signal();
        assert!(signal.wait_timeout(10 * SLACK));
        assert!(Instant::now() >= granted_at + 100 * MS);
        assert!(state.is_lost() && signal.is_lost());
        assert_eq!(state.remaining(), Duration::ZERO);
        assert_eq!(signal.lost_reason(), Some(LostReason::Expired));
        // Lost at the deadline, not when somebody looked.
        assert_eq!(signal.lost_at(), Some(granted_at + 100 * MS));
        state.mark_lost(LostReason::Gone);
        assert_eq!(signal.lost_at(), Some(granted_at + 100 * MS));

        let old = HolderState::new(ago(Duration::from_secs(1)), 500 * MS, MS);
        assert_eq!(old.lost_reason(), Some(LostReason::Expired));
        assert!(HolderState::new(Instant::now(), 10 * MS, 10 * MS).is_lost());
    }

    #[test]
    fn wait_timeout_returns_false_while_held() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let started = Instant::now();
        assert!(!state.lost_signal().wait_timeout(20 * MS));
        assert!(started.elapsed() >= 20 * MS);
        assert!(!state.is_lost());
        assert!(state.remaining() > Duration::from_secs(50));
    }

    #[test]
    fn record_success_moves_the_deadline_but_a_stale_one_never_backwards() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(10);
        let state = HolderState::new(t0, ttl, Duration::from_secs(1));
        assert_eq!(state.deadline(), t0 + Duration::from_secs(9));

        state.record_success(t0 + Duration::from_secs(2), ttl);
        assert_eq!(state.deadline(), t0 + Duration::from_secs(11));

        // Sent before the current success: ignored, even with a longer ttl.
        state.record_success(t0 + Duration::from_secs(1), ttl);
        assert_eq!(state.deadline(), t0 + Duration::from_secs(11));
        state.record_success(t0 + Duration::from_secs(1), 3 * ttl);
        assert_eq!(state.deadline(), t0 + Duration::from_secs(11));

        // A newer request with a shorter ttl is what the server applied last, with the margin
        // of that ttl (half a second).
        state.record_success(t0 + Duration::from_secs(3), Duration::from_secs(5));
        assert_eq!(state.deadline(), t0 + Duration::from_millis(7500));
        assert!(!state.is_lost());
    }

    /// A grant of a minute extended to five seconds: its margin is no longer six seconds (which
    /// made it lost at once), and an extension back to an hour gets the hour's margin.
    #[test]
    fn each_success_has_the_margin_of_its_own_ttl() {
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        let state = HolderState::new(t0, minute, default_margin(minute));
        state.record_success(t0, Duration::from_secs(5));
        assert!(!state.is_lost(), "extended to 5 s, not lost");
        assert_eq!(state.deadline(), t0 + Duration::from_millis(4500));
        let hour = Duration::from_secs(3600);
        state.record_success(t0 + MS, hour);
        assert_eq!(state.deadline(), t0 + MS + hour - default_margin(hour));
    }

    #[test]
    fn a_shorter_deadline_wakes_waiters() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let signal = state.lost_signal();
        let (entered_tx, entered) = mpsc::channel();
        let waiter = thread::spawn(move || {
            entered_tx.send(()).unwrap();
            signal.wait_timeout(10 * SLACK)
        });
        entered.recv().unwrap();
        let sent_at = Instant::now();
        state.record_success(sent_at, 50 * MS);
        assert!(waiter.join().unwrap(), "woke at the new deadline");
        // 50 ms less its margin, 5 ms.
        let woke = sent_at.elapsed();
        assert!(woke >= 45 * MS && woke < 45 * MS + SLACK, "{woke:?}");
    }

    #[test]
    fn lost_is_final_and_keeps_its_first_reason() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        assert_eq!(state.lost_signal().lost_at(), None);
        let before = Instant::now();
        state.mark_lost(LostReason::Gone);
        let marked = state.lost_signal().lost_at().expect("lost");
        assert!(before <= marked && marked <= Instant::now());
        state.record_success(Instant::now(), Duration::from_secs(60));
        state.mark_lost(LostReason::Released);
        assert_eq!(state.lost_reason(), Some(LostReason::Gone));
        assert_eq!(state.lost_signal().lost_at(), Some(marked));

        // Expired from time alone: a late success does not revive it, and a later mark keeps
        // the expiry as the reason.
        let expired = HolderState::new(ago(Duration::from_secs(1)), 500 * MS, MS);
        expired.record_success(Instant::now(), Duration::from_secs(60));
        assert_eq!(expired.lost_reason(), Some(LostReason::Expired));
        // Granted with a deadline already past: lost from the moment it was known, not before.
        let before = Instant::now();
        let expired = HolderState::new(ago(Duration::from_secs(1)), 500 * MS, MS);
        expired.mark_lost(LostReason::Gone);
        assert_eq!(expired.lost_reason(), Some(LostReason::Expired));
        let lost_at = expired.lost_signal().lost_at().expect("lost");
        assert!(
            before <= lost_at && lost_at <= Instant::now(),
            "{lost_at:?}"
        );

        // A success whose own deadline already passed makes it lost too.
        let slow = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        slow.record_success(ago(Duration::from_secs(1)) + MS, 500 * MS);
        assert!(!slow.is_lost(), "a stale success is ignored");
        let slow = HolderState::new(ago(Duration::from_secs(2)), Duration::from_secs(60), MS);
        let before = Instant::now();
        slow.record_success(ago(Duration::from_secs(1)), 500 * MS);
        assert_eq!(slow.lost_reason(), Some(LostReason::Expired));
        // Lost when that late answer came, not at the deadline it carried (already past).
        let lost_at = slow.lost_signal().lost_at().expect("lost");
        assert!(
            before <= lost_at && lost_at <= Instant::now(),
            "{lost_at:?}"
        );
    }

    #[test]
    fn on_lost_runs_exactly_once() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let (calls, seen) = counter();
        let (reasons_tx, reasons) = mpsc::channel();
        for _ in 0..2 {
            let (calls, reasons_tx) = (Arc::clone(&calls), reasons_tx.clone());
            state.on_lost(move |reason| {
                calls.fetch_add(1, Ordering::SeqCst);
                reasons_tx.send(reason).unwrap();
            });
        }
        assert_eq!(seen.load(Ordering::SeqCst), 0);

        // Four threads race to mark it.
        let barrier = Arc::new(Barrier::new(4));
        let markers: Vec<_> = [LostReason::Gone, LostReason::Released]
            .into_iter()
            .cycle()
            .take(4)
            .map(|reason| {
                let (state, barrier) = (state.clone(), Arc::clone(&barrier));
                thread::spawn(move || {
                    barrier.wait();
                    state.mark_lost(reason);
                })
            })
            .collect();
        for marker in markers {
            marker.join().unwrap();
        }
        assert_eq!(seen.load(Ordering::SeqCst), 2, "each callback once");
        let reason = state.lost_reason().unwrap();
        assert_eq!(reasons.try_iter().collect::<Vec<_>>(), vec![reason; 2]);

        // Registered after the fact: runs at once, in this thread, with the same reason.
        let caller = thread::current().id();
        let (tx, rx) = mpsc::channel();
        state.on_lost(move |r| tx.send((r, thread::current().id())).unwrap());
        assert_eq!(rx.try_recv().unwrap(), (reason, caller));
    }

    #[test]
    fn on_lost_registered_after_a_silent_expiry_runs_at_once_with_expired() {
        let state = HolderState::new(ago(Duration::from_secs(1)), 500 * MS, MS);
        let (tx, rx) = mpsc::channel();
        state.on_lost(move |r| tx.send(r).unwrap());
        assert_eq!(rx.try_recv().unwrap(), LostReason::Expired);
    }

    #[test]
    fn a_panicking_callback_does_not_skip_the_others() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let (calls, seen) = counter();
        state.on_lost(|_| panic!("callback failed"));
        state.on_lost(move |_| {
            calls.fetch_add(1, Ordering::SeqCst);
        });
        let marked = panic::catch_unwind(AssertUnwindSafe(|| state.mark_lost(LostReason::Gone)));
        assert!(marked.is_err(), "the panic is passed on");
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        assert_eq!(state.lost_reason(), Some(LostReason::Gone));
    }
}
