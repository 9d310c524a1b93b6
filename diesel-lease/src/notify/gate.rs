//! One poll schedule per pool and queue, shared by this process's waiters, so that their idle
//! cost does not grow with their number.
//!
//! Waiters of the same pool and the same queue (a table and the claim that reads it) join one
//! [`Gate`]. One of them at a time is its *poller*: it sleeps on the pool's listener or this
//! process's wake-ups as a lone waiter would, and polls on the gate's schedule (backoff up to
//! the max poll interval; half of it while it has company). The others wait on the gate without touching the database until
//! either the poller leaves (one of them takes its place and keeps the schedule) or a poll found
//! work: then one more of them polls at once ([`Turn::Extra`]), and so on for as long as polls
//! find work, so a burst of rows reaches as many waiters as it has rows while an empty queue
//! costs one poll per interval whatever the number of waiters.
//!
//! A poller whose poll has not come back a whole max poll interval after it was due (it waits
//! on a connection that stopped answering, or for a lock) does not keep the others waiting: one
//! of them polls in its place ([`Turn::Extra`]), once per interval for as long as it is overdue.
//!
//! A waiter's own poll still decides what it gets (it claims for itself): the gate only decides
//! when it looks, so whatever a claim guarantees holds unchanged.
//!
//! Gates are found by a key of the pool's identity (`pool::lend_with_listener` learns it at a
//! checkout) and the queue's name; a gate is forgotten when its last waiter leaves.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lease_core::Backoff;

/// A gate's key: the pool's identity and the queue's name.
type Key = (usize, String);

static GATES: Mutex<Option<HashMap<Key, Arc<Shared>>>> = Mutex::new(None);

fn gates() -> MutexGuard<'static, Option<HashMap<Key, Arc<Shared>>>> {
    GATES.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the members waiting for a turn.
    changed: Condvar,
}

struct State {
    members: usize,
    /// Whether a member is the poller.
    poller: bool,
    /// Members that may poll at once, because a poll found work.
    extra: usize,
    /// The last poll found nothing, and nothing since said otherwise: a newcomer need not look.
    seen_empty: bool,
    /// When the poller polls next.
    next_poll: Instant,
    backoff: Backoff,
    /// The longest pause between two polls.
    max: Duration,
}

/// What a member waiting on the gate is to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// It is the poller now: it sleeps until [`Gate::due`] (or a wake-up), then polls.
    Poller,
    /// A poll found work, or the poller is overdue: it polls once, at once.
    Extra,
    /// The wait is over (`stop`, or the deadline).
    Over,
}

/// One waiter's membership of a gate; dropping it leaves the gate (and hands the poller's place
/// on).
pub(crate) struct Gate {
    shared: Arc<Shared>,
    key: Key,
    poller: bool,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gate {
    /// Joins the gate of `queue` on the pool `pool` (an identity), polled on a schedule from
    /// `first` up to `max` apart.
    pub(crate) fn join(pool: usize, queue: &str, first: Duration, max: Duration) -> Gate {
        let key = (pool, queue.to_owned());
        let shared = {
            let mut gates = gates();
            let shared = gates
                .get_or_insert_with(HashMap::new)
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(Shared {
                        state: Mutex::new(State {
                            members: 0,
                            poller: false,
                            extra: 0,
                            seen_empty: false,
                            next_poll: Instant::now(),
                            backoff: Backoff::new(first, max),
                            max,
                        }),
                        changed: Condvar::new(),
                    })
                });
            // Counted under the registry's lock, so a leaving last member cannot forget it now.
            lock(shared).members += 1;
            Arc::clone(shared)
        };
        Gate {
            shared,
            key,
            poller: false,
        }
    }

    /// Whether a newcomer polls before it waits for a turn: unless the gate's last poll found
    /// nothing and a poller keeps watching.
    pub(crate) fn polls_first(&self) -> bool {
        let state = lock(&self.shared);
        !(state.seen_empty && state.poller)
    }

    /// Records what a member's poll found. Work found: the schedule starts over, the poller
    /// polls soon, and one more member polls at once. Nothing found by the poller: its next poll
    /// is one step of the backoff later.
    pub(crate) fn polled(&self, found: bool) {
        let mut state = lock(&self.shared);
        if found {
            state.seen_empty = false;
            state.backoff.reset();
            state.next_poll = Instant::now();
            state.extra = (state.extra + 1).min(state.members);
            drop(state);
            self.shared.changed.notify_all();
            return;
        }
        state.seen_empty = true;
        if self.poller {
            let mut pause = state.backoff.next_delay_at_least();
            if state.members > 1 {
                // Shared by several: twice per interval, so that a row that comes at a random
                // moment reaches one of them within a quarter of the interval (median), at a
                // cost that still does not grow with their number.
                pause = pause.min(state.max / 2);
            }
            state.next_poll = Instant::now() + pause;
        }
    }

    /// The poller was woken (a notification, this process's wake-up): it polls at once, and the
    /// schedule starts over.
    pub(crate) fn woken(&self) {
        let mut state = lock(&self.shared);
        state.seen_empty = false;
        state.backoff.reset();
        state.next_poll = Instant::now();
    }

    /// When the poller polls next.
    pub(crate) fn due(&self) -> Instant {
        lock(&self.shared).next_poll
    }

    /// Waits for this member's turn: [`Turn::Poller`] at once if it is the poller or nobody
    /// is, [`Turn::Extra`] when a poll found work or the poller's poll is a whole max interval
    /// overdue, [`Turn::Over`] once `stop()` or `deadline`. Looks at `stop` every `stop_check`.
    pub(crate) fn turn(
        &mut self,
        deadline: Option<Instant>,
        stop: &dyn Fn() -> bool,
        stop_check: Duration,
    ) -> Turn {
        let mut state = lock(&self.shared);
        loop {
            if self.poller {
                return Turn::Poller;
            }
            if !state.poller {
                state.poller = true;
                self.poller = true;
                return Turn::Poller;
            }
            if state.extra > 0 {
                state.extra -= 1;
                return Turn::Extra;
            }
            let now = Instant::now();
            if stop() || deadline.is_some_and(|d| now >= d) {
                return Turn::Over;
            }
            let overdue_at = state.next_poll.checked_add(state.max);
            if overdue_at.is_some_and(|at| now >= at) {
                // The poller has not recorded a poll for a whole interval past its due time:
                // this member polls in its place, and the next one an interval later if the
                // poller is still out (`polled` puts the schedule back once it returns).
                state.next_poll = now;
                return Turn::Extra;
            }
            let slice = deadline
                .map_or(stop_check, |d| (d - now).min(stop_check))
                .min(overdue_at.map_or(stop_check, |at| at - now));
            state = self
                .shared
                .changed
                .wait_timeout(state, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let mut gates = gates();
        let mut state = lock(&self.shared);
        state.members -= 1;
        state.extra = state.extra.min(state.members);
        if self.poller {
            state.poller = false;
        }
        let empty = state.members == 0;
        drop(state);
        if empty {
            if let Some(map) = gates.as_mut() {
                map.remove(&self.key);
            }
        } else if self.poller {
            // Somebody takes the poller's place.
            self.shared.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Duration = Duration::from_millis(20);
    const MAX: Duration = Duration::from_secs(1);
    const SLICE: Duration = Duration::from_millis(10);

    fn join(pool: usize) -> Gate {
        Gate::join(pool, "q", FIRST, MAX)
    }

    #[test]
    fn one_member_polls_the_others_wait_until_work_is_found() {
        let (mut a, mut b) = (join(1), join(1));
        assert!(a.polls_first(), "nothing is known yet");
        assert_eq!(a.turn(None, &|| false, SLICE), Turn::Poller);
        a.polled(false);
        assert!(!b.polls_first(), "seen empty, and a poller watches");
        assert!(
            a.due() > Instant::now(),
            "the next poll is one backoff step away"
        );
        let until = Instant::now() + Duration::from_millis(50);
        assert_eq!(b.turn(Some(until), &|| false, SLICE), Turn::Over);
        // The poller finds work: one more member looks at once.
        a.polled(true);
        assert_eq!(b.turn(None, &|| false, SLICE), Turn::Extra);
        assert!(b.polls_first(), "work was seen");
    }

    #[test]
    fn the_pollers_place_is_taken_when_it_leaves() {
        let (mut a, mut b) = (join(2), join(2));
        assert_eq!(a.turn(None, &|| false, SLICE), Turn::Poller);
        a.polled(false);
        std::thread::scope(|s| {
            let waiting = s.spawn(move || b.turn(None, &|| false, SLICE));
            std::thread::sleep(Duration::from_millis(30));
            drop(a);
            assert_eq!(waiting.join().unwrap(), Turn::Poller);
        });
    }

    #[test]
    fn gates_of_other_pools_are_apart_and_forgotten_when_empty() {
        let (mut a, mut other) = (join(3), join(4));
        assert_eq!(a.turn(None, &|| false, SLICE), Turn::Poller);
        assert_eq!(other.turn(None, &|| false, SLICE), Turn::Poller);
        drop((a, other));
        assert!(gates()
            .as_ref()
            .is_none_or(|g| !g.keys().any(|k| k.0 == 3 || k.0 == 4)));
    }

    #[test]
    fn a_member_polls_in_place_of_an_overdue_poller() {
        let (mut a, mut b) = (join(6), join(6));
        assert_eq!(a.turn(None, &|| false, SLICE), Turn::Poller);
        a.polled(false);
        let due = a.due();
        // The poller's next poll never records (it hangs): a whole interval past its due time,
        // the other member polls instead, and not before.
        let until = Instant::now() + 5 * MAX;
        assert_eq!(b.turn(Some(until), &|| false, SLICE), Turn::Extra);
        assert!(
            Instant::now() >= due + MAX,
            "taken over before the poller was overdue"
        );
        b.polled(false);
        // Once per interval: at once again only when a poll found work.
        let soon = Instant::now() + MAX / 2;
        assert_eq!(b.turn(Some(soon), &|| false, SLICE), Turn::Over);
    }

    #[test]
    fn a_stop_ends_the_wait() {
        let (mut a, mut b) = (join(5), join(5));
        assert_eq!(a.turn(None, &|| false, SLICE), Turn::Poller);
        assert_eq!(b.turn(None, &|| true, SLICE), Turn::Over);
    }
}
