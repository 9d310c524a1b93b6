//! The waiters of one process for one resource share a poller, so that their idle cost does not
//! grow with their number.
//!
//! Waiters that queue for the same resource (of the same table), through the same pool, as the
//! same owner and with the same ttl and poll interval join one gate once they hold a ticket. The
//! member with the lowest ticket polls as a lone waiter would (and pushes the expiry of every
//! member's request in one statement at each of its polls); the others wait on the gate without
//! a query. Admission is first come, first served ([`lease_core::admission::admit`] admits a
//! prefix of the waiting requests): no member can be granted before the lowest one is, so when
//! the lowest leaves (granted, gone, given up) the next one takes its place and looks at once,
//! and a grant of several members at once reaches them one short look after the other.
//!
//! A poller whose looks stop coming back (its step waits on a connection that stopped
//! answering) does not leave the others' requests to expire: once no look has come back for two
//! poll intervals, the member with the second-lowest ticket looks in its place
//! ([`Turn::Extra`]), pushing the expiry of every member's request but the stuck poller's, and
//! again every two intervals for as long as that lasts. The stuck poller's own request then expires after
//! its ttl, and the queue moves on without it (it queues again when its step comes back).
//!
//! A member whose own deadline comes first gives up on its own; a gate is forgotten when its
//! last member leaves.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::request::Request;

/// A gate's key: the pool's identity, the table (its address, for a control table), the
/// resource, the owner, the ttl in microseconds and the poll interval.
type Key = (usize, usize, String, String, i64, Duration);

static GATES: Mutex<Option<HashMap<Key, Arc<Shared>>>> = Mutex::new(None);

fn gates() -> MutexGuard<'static, Option<HashMap<Key, Arc<Shared>>>> {
    GATES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How often a member waiting for its turn looks at its deadline at the latest.
const SLICE: Duration = Duration::from_secs(1);

struct Shared {
    state: Mutex<State>,
    /// Wakes the members when one leaves or changes its ticket.
    changed: Condvar,
}

struct State {
    /// The members' tickets.
    tickets: BTreeSet<i64>,
    /// When a member's look last came back (or the gate was made).
    looked_at: Instant,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a member waiting on the gate is to do next ([`Member::wait_turn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// It has the lowest ticket: it is the poller now.
    Poller,
    /// The poller's looks stopped coming back: it looks once, in the poller's place, for the
    /// members' requests but the poller's ([`Member::others_but_the_poller`]).
    Extra,
    /// Its deadline passed.
    Over,
}

/// One waiter's membership of a gate; dropping it leaves the gate (and hands the poller's place
/// on).
pub(super) struct Member {
    shared: Arc<Shared>,
    key: Key,
    ticket: i64,
    /// The poll interval: a poller is overdue once no look came back for two of them.
    cap: Duration,
}

impl Member {
    /// Joins the gate of `req`'s resource on the pool `pool` (an identity) with `ticket`,
    /// polled every `cap` at the longest.
    pub(super) fn join(pool: usize, req: &Request, cap: Duration, ticket: i64) -> Member {
        let table = req.table.as_ref().map_or(0, |target| {
            std::ptr::from_ref(target.table).cast::<()>() as usize
        });
        let key = (
            pool,
            table,
            req.resource.clone(),
            req.owner.clone(),
            req.ttl.as_micros(),
            cap,
        );
        let mut gates = gates();
        let shared = Arc::clone(
            gates
                .get_or_insert_with(HashMap::new)
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(Shared {
                        state: Mutex::new(State {
                            tickets: BTreeSet::new(),
                            looked_at: Instant::now(),
                        }),
                        changed: Condvar::new(),
                    })
                }),
        );
        // Added under the registry's lock, so a leaving last member cannot forget the gate now.
        shared.state().tickets.insert(ticket);
        Member {
            shared,
            key,
            ticket,
            cap,
        }
    }

    /// A look of this member's came back (it reached the database, or failed there).
    pub(super) fn looked(&self) {
        self.shared.state().looked_at = Instant::now();
    }

    /// The member's request was queued again (under a new ticket).
    pub(super) fn set_ticket(&mut self, ticket: i64) {
        if ticket == self.ticket {
            return;
        }
        let mut state = self.shared.state();
        state.tickets.remove(&self.ticket);
        state.tickets.insert(ticket);
        self.ticket = ticket;
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Whether this member polls: it has the lowest ticket.
    pub(super) fn is_poller(&self) -> bool {
        self.shared.state().tickets.first() == Some(&self.ticket)
    }

    /// The other members' tickets, whose expiry the poller pushes.
    pub(super) fn others(&self) -> Vec<i64> {
        let state = self.shared.state();
        state
            .tickets
            .iter()
            .copied()
            .filter(|&t| t != self.ticket)
            .collect()
    }

    /// The other members' tickets but the poller's: those whose expiry a [`Turn::Extra`] look
    /// pushes.
    pub(super) fn others_but_the_poller(&self) -> Vec<i64> {
        let state = self.shared.state();
        state
            .tickets
            .iter()
            .copied()
            .skip(1)
            .filter(|&t| t != self.ticket)
            .collect()
    }

    /// Waits until this member is to look: as the poller, in the place of a poller whose looks
    /// stopped coming back (only the member with the second-lowest ticket, when no look came
    /// back for two intervals), or not at all because `deadline` passed.
    pub(super) fn wait_turn(&self, deadline: Option<Instant>) -> Turn {
        let mut state = self.shared.state();
        loop {
            if state.tickets.first() == Some(&self.ticket) {
                return Turn::Poller;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Turn::Over;
            }
            let overdue_at = state
                .looked_at
                .checked_add(self.cap.saturating_mul(2))
                .filter(|_| state.tickets.iter().nth(1) == Some(&self.ticket));
            if let Some(overdue_at) = overdue_at {
                if now >= overdue_at {
                    // Counted as a look now, so that the next one comes an interval later
                    // (or the poller's, should it come back first).
                    state.looked_at = now;
                    return Turn::Extra;
                }
            }
            let until = [deadline, overdue_at]
                .into_iter()
                .flatten()
                .map(|at| at - now)
                .fold(SLICE, Duration::min);
            state = self
                .shared
                .changed
                .wait_timeout(state, until)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut gates = gates();
        let mut state = self.shared.state();
        state.tickets.remove(&self.ticket);
        let empty = state.tickets.is_empty();
        drop(state);
        if empty {
            if let Some(map) = gates.as_mut() {
                map.remove(&self.key);
            }
        } else {
            self.shared.changed.notify_all();
        }
    }
}
