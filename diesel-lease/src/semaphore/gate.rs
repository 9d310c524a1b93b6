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
    /// The members' tickets.
    tickets: Mutex<BTreeSet<i64>>,
    /// Wakes the members when one leaves or changes its ticket.
    changed: Condvar,
}

impl Shared {
    fn tickets(&self) -> MutexGuard<'_, BTreeSet<i64>> {
        self.tickets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One waiter's membership of a gate; dropping it leaves the gate (and hands the poller's place
/// on).
pub(super) struct Member {
    shared: Arc<Shared>,
    key: Key,
    ticket: i64,
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
                        tickets: Mutex::new(BTreeSet::new()),
                        changed: Condvar::new(),
                    })
                }),
        );
        // Added under the registry's lock, so a leaving last member cannot forget the gate now.
        shared.tickets().insert(ticket);
        Member {
            shared,
            key,
            ticket,
        }
    }

    /// The member's request was queued again (under a new ticket).
    pub(super) fn set_ticket(&mut self, ticket: i64) {
        if ticket == self.ticket {
            return;
        }
        let mut tickets = self.shared.tickets();
        tickets.remove(&self.ticket);
        tickets.insert(ticket);
        self.ticket = ticket;
        drop(tickets);
        self.shared.changed.notify_all();
    }

    /// Whether this member polls: it has the lowest ticket.
    pub(super) fn is_poller(&self) -> bool {
        self.shared.tickets().first() == Some(&self.ticket)
    }

    /// The other members' tickets, whose expiry the poller pushes.
    pub(super) fn others(&self) -> Vec<i64> {
        let tickets = self.shared.tickets();
        tickets
            .iter()
            .copied()
            .filter(|&t| t != self.ticket)
            .collect()
    }

    /// Waits until this member polls (`true`) or `deadline` passes (`false`).
    pub(super) fn wait_turn(&self, deadline: Option<Instant>) -> bool {
        let mut tickets = self.shared.tickets();
        loop {
            if tickets.first() == Some(&self.ticket) {
                return true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            let slice = deadline.map_or(SLICE, |d| (d - now).min(SLICE));
            tickets = self
                .shared
                .changed
                .wait_timeout(tickets, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut gates = gates();
        let mut tickets = self.shared.tickets();
        tickets.remove(&self.ticket);
        let empty = tickets.is_empty();
        drop(tickets);
        if empty {
            if let Some(map) = gates.as_mut() {
                map.remove(&self.key);
            }
        } else {
            self.shared.changed.notify_all();
        }
    }
}
