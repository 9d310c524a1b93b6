//! Database calls made on a thread of their own, so that the caller's wait for them has a bound
//! whatever the network does.
//!
//! libpq and libmariadb block in `poll` until the server answers, and neither lets a read be
//! bounded from the connection URL or interrupted from another thread (PostgreSQL's TCP
//! keepalives and `tcp_user_timeout`, which `pool::build_pool` sets, end a silent connection
//! only after about 20 s, and only when the silence is the network's; MySQL has nothing). A
//! caller that promised a bound — an explicit release its wait, a waiting `acquire` its
//! timeout, a `Worker` its stop — therefore does not make such a call itself: a [`Courier`] makes it on its
//! thread while the caller waits for the result at most until its bound. A call not done by
//! then goes on in the background; its result, when it comes, goes to the call's `undo` (a
//! claimed row is handed back, a granted lease released) instead of to the caller, and the
//! thread ends.

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// The name of a courier's thread.
const THREAD_NAME: &str = "diesel-lease call";

/// How often a caller whose bound is not known yet (a `Worker` before its stop) asks again.
const BOUND_CHECK: Duration = Duration::from_millis(50);

type Job = Box<dyn FnOnce() + Send>;

/// A thread that makes calls for one caller, one at a time (see the module docs). It is started
/// by the first call and ends when the courier is dropped, or after a call its caller gave up
/// on (the next call starts a new one).
#[derive(Debug, Default)]
pub(crate) struct Courier {
    jobs: Option<Sender<Job>>,
}

/// Where one call's result meets its caller.
struct Slot<T> {
    state: Mutex<State<T>>,
    done: Condvar,
}

enum State<T> {
    Running,
    Done(thread::Result<T>),
    GivenUp,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The critical sections only move a value in or out.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Courier {
    /// A courier whose thread starts with its first call.
    pub(crate) fn new() -> Self {
        Courier::default()
    }

    /// Makes `call` on the courier's thread and waits for its result until `bound()` has passed;
    /// `None` then, and the call goes on in the background: when it ends, its result goes to
    /// `undo` on that thread. `bound` is asked again every 50 ms while it says `None` (no bound
    /// yet). A panic in `call` is resumed here (or, once given up, dropped).
    ///
    /// If no thread can be started, the call is made on the caller's thread, unbounded.
    pub(crate) fn call<T, C, U>(
        &mut self,
        bound: &dyn Fn() -> Option<Instant>,
        call: C,
        undo: U,
    ) -> Option<T>
    where
        T: Send + 'static,
        C: FnOnce() -> T + Send + 'static,
        U: FnOnce(T) + Send + 'static,
    {
        let slot = Arc::new(Slot {
            state: Mutex::new(State::Running),
            done: Condvar::new(),
        });
        let job = {
            let slot = Arc::clone(&slot);
            Box::new(move || {
                let result = panic::catch_unwind(AssertUnwindSafe(call));
                let mut state = lock(&slot.state);
                if matches!(*state, State::GivenUp) {
                    drop(state);
                    if let Ok(value) = result {
                        undo(value);
                    }
                } else {
                    *state = State::Done(result);
                    drop(state);
                    slot.done.notify_all();
                }
            }) as Job
        };
        if let Err(job) = self.send(job) {
            job();
        }
        let mut state = lock(&slot.state);
        loop {
            if let State::Done(_) = *state {
                let State::Done(result) = std::mem::replace(&mut *state, State::GivenUp) else {
                    unreachable!("just matched");
                };
                return Some(result.unwrap_or_else(|panic| panic::resume_unwind(panic)));
            }
            let now = Instant::now();
            let wait = match bound() {
                Some(bound) if now >= bound => {
                    *state = State::GivenUp;
                    // This thread stays with the call; the next call gets a new one.
                    self.jobs = None;
                    return None;
                }
                Some(bound) => (bound - now).min(BOUND_CHECK),
                None => BOUND_CHECK,
            };
            state = slot
                .done
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// [`call`](Self::call) with a fixed bound `wait` from now.
    pub(crate) fn call_within<T, C, U>(&mut self, wait: Duration, call: C, undo: U) -> Option<T>
    where
        T: Send + 'static,
        C: FnOnce() -> T + Send + 'static,
        U: FnOnce(T) + Send + 'static,
    {
        let bound = Instant::now().checked_add(wait);
        self.call(&|| Some(bound.unwrap_or_else(far_future)), call, undo)
    }

    /// Hands `job` to the thread, starting one if there is none; the job back if none could be
    /// started.
    fn send(&mut self, job: Job) -> Result<(), Job> {
        let job = match &self.jobs {
            Some(jobs) => match jobs.send(job) {
                Ok(()) => return Ok(()),
                // Its thread ended (a call panicked through `undo`): start another.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::channel::<Job>();
        let started = thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(move || {
                for job in rx {
                    job();
                }
            });
        if started.is_err() {
            return Err(job);
        }
        let sent = tx.send(job).map_err(|mpsc::SendError(job)| job);
        self.jobs = Some(tx);
        sent
    }
}

/// An instant no bound reaches (a century from now), for a wait too long to add.
fn far_future() -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_secs(100 * 365 * 24 * 60 * 60))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MS: Duration = Duration::from_millis(1);
    /// Generous room for a loaded machine.
    const SLACK: Duration = Duration::from_secs(2);

    #[test]
    fn a_quick_call_returns_its_result_on_one_reused_thread() {
        let mut courier = Courier::new();
        let first = courier
            .call_within(SLACK, || thread::current().id(), |_| {})
            .unwrap();
        let second = courier
            .call_within(SLACK, || thread::current().id(), |_| {})
            .unwrap();
        assert_eq!(first, second, "one thread serves every call");
        assert_ne!(first, thread::current().id());
    }

    #[test]
    fn a_call_past_its_bound_is_given_up_and_its_result_undone() {
        let mut courier = Courier::new();
        let (release, released) = mpsc::channel::<()>();
        let (undone_tx, undone) = mpsc::channel();
        let started = Instant::now();
        let outcome = courier.call_within(
            100 * MS,
            move || {
                released.recv().unwrap();
                7
            },
            move |value| undone_tx.send(value).unwrap(),
        );
        let waited = started.elapsed();
        assert_eq!(outcome, None);
        assert!(
            waited >= 100 * MS && waited < 100 * MS + SLACK,
            "{waited:?}"
        );
        // The call goes on; its result goes to `undo`.
        release.send(()).unwrap();
        assert_eq!(undone.recv_timeout(10 * SLACK), Ok(7));
        // The next call gets a thread of its own and works.
        assert_eq!(courier.call_within(SLACK, || 8, |_| {}), Some(8));
    }

    #[test]
    fn a_bound_not_known_yet_is_asked_again() {
        let mut courier = Courier::new();
        let asked = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let counter = Arc::clone(&asked);
        let bound = move || {
            // No bound for the first 200 ms, then one 100 ms later.
            counter.fetch_add(1, Ordering::SeqCst);
            (started.elapsed() >= 200 * MS).then(|| started + 300 * MS)
        };
        let outcome = courier.call(&bound, || thread::sleep(10 * SLACK), |()| {});
        let waited = started.elapsed();
        assert_eq!(outcome, None);
        assert!(
            waited >= 300 * MS && waited < 300 * MS + SLACK,
            "{waited:?}"
        );
        assert!(asked.load(Ordering::SeqCst) >= 3);
    }

    #[test]
    fn a_panicking_call_panics_in_the_caller() {
        let mut courier = Courier::new();
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            courier.call_within(SLACK, || -> u8 { panic!("call failed") }, |_| {})
        }));
        assert!(caught.is_err());
        assert_eq!(courier.call_within(SLACK, || 1, |_| {}), Some(1));
    }

    #[test]
    fn a_result_that_beats_the_bound_is_not_undone() {
        let mut courier = Courier::new();
        let (undone_tx, undone) = mpsc::channel::<u8>();
        assert_eq!(
            courier.call_within(SLACK, || 3, move |v| undone_tx.send(v).unwrap()),
            Some(3)
        );
        drop(courier);
        assert!(undone.recv_timeout(100 * MS).is_err());
    }
}
