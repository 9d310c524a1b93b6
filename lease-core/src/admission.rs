//! Who may enter a semaphore: the admission rule, without a database.
//!
//! A semaphore's state is its queue: one [`QueueEntry`] per request, ordered by ticket (request
//! order), each either waiting or already granted, each asking for [`Mode::Shared`] access (one
//! permit; readers of a reader/writer lock, holders of a counting semaphore) or
//! [`Mode::Exclusive`] access (the whole resource; writers).
//!
//! [`admit`] decides which waiting entries enter now. The rule:
//!
//! - Requests are served in ticket order: a waiting entry never enters before a waiting entry
//!   ahead of it (FIFO; no overtaking).
//! - A shared entry enters while no exclusive entry holds the resource, no exclusive entry waits
//!   ahead of it, and fewer than `permits` entries hold it.
//! - An exclusive entry enters only when it is first in the queue and nobody holds the resource.
//!   Everything queued behind a waiting exclusive entry waits behind it, so a writer cannot be
//!   starved by a stream of readers.
//!
//! Capacity is computed from the entries that *are granted*, wherever they stand in the queue, never
//! from queue positions. That is what makes the rule safe when an entry with a lower ticket shows
//! up after higher tickets were already granted (the commit-order race of a control-table semaphore): the late entry
//! simply waits until the granted ones leave.

/// How a request wants to use a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One permit, shared with other shared holders up to the permit count (a counting
    /// semaphore's permit, a reader of a reader/writer lock).
    Shared,
    /// The whole resource, alone (a writer of a reader/writer lock).
    Exclusive,
}

impl Mode {
    /// The value stored in the `mode` column of the built-in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Exclusive => "exclusive",
        }
    }

    /// Parses a stored `mode` value; `None` for anything else.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "shared" => Some(Mode::Shared),
            "exclusive" => Some(Mode::Exclusive),
            _ => None,
        }
    }
}

/// One request in a semaphore's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEntry {
    /// The request's ticket; the queue is ordered by it.
    pub ticket: i64,
    /// What the request asks for.
    pub mode: Mode,
    /// Whether the request already holds the resource.
    pub granted: bool,
}

/// The tickets of the waiting entries of `queue` that may enter now, in queue order.
///
/// `queue` must be ordered by ticket (it is what a query `ORDER BY ticket` returns). `permits` is
/// the resource's limit of shared holders; an exclusive holder counts as the whole resource.
///
/// Granting the returned tickets keeps the queue [consistent](is_consistent) whenever it was
/// consistent before, and never makes an inconsistent queue worse: if the granted entries already
/// exceed the limit (say the permit count was lowered by hand), nobody enters until enough of them
/// have left.
///
/// ```
/// use lease_core::admission::{admit, Mode, QueueEntry};
///
/// let e = |ticket, mode, granted| QueueEntry { ticket, mode, granted };
/// // Two readers hold; a writer waits; a reader queued behind the writer waits behind it.
/// let queue = [
///     e(1, Mode::Shared, true),
///     e(2, Mode::Shared, true),
///     e(3, Mode::Exclusive, false),
///     e(4, Mode::Shared, false),
/// ];
/// assert!(admit(&queue, 10).is_empty());
/// // Once the readers are gone the writer enters, alone.
/// assert_eq!(admit(&queue[2..], 10), vec![3]);
/// ```
pub fn admit(queue: &[QueueEntry], permits: u32) -> Vec<i64> {
    let permits = permits as usize;
    let mut holders = queue.iter().filter(|e| e.granted).count();
    let exclusive_held = queue.iter().any(|e| e.granted && e.mode == Mode::Exclusive);
    let mut admitted = Vec::new();
    if exclusive_held {
        return admitted;
    }
    for (position, entry) in queue.iter().enumerate() {
        if entry.granted {
            continue;
        }
        match entry.mode {
            Mode::Exclusive => {
                // Nobody ahead (granted or waiting) and nobody holding anywhere in the queue.
                if position == 0 && holders == 0 {
                    admitted.push(entry.ticket);
                }
                // A waiting writer blocks everything behind it; an admitted one holds it all.
                break;
            }
            Mode::Shared => {
                if holders >= permits {
                    break;
                }
                holders += 1;
                admitted.push(entry.ticket);
            }
        }
    }
    admitted
}

/// Whether the granted entries of `queue` respect the limit: at most `permits` holders, and an
/// exclusive holder only alone.
///
/// Used by tests and as a cheap self-check; [`admit`] keeps it true.
pub fn is_consistent(queue: &[QueueEntry], permits: u32) -> bool {
    let holders: Vec<&QueueEntry> = queue.iter().filter(|e| e.granted).collect();
    let exclusive = holders.iter().any(|e| e.mode == Mode::Exclusive);
    holders.len() <= permits as usize && (!exclusive || holders.len() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(ticket: i64, mode: Mode, granted: bool) -> QueueEntry {
        QueueEntry {
            ticket,
            mode,
            granted,
        }
    }
    const S: Mode = Mode::Shared;
    const X: Mode = Mode::Exclusive;

    fn apply(queue: &mut [QueueEntry], admitted: &[i64]) {
        for entry in queue.iter_mut() {
            if admitted.contains(&entry.ticket) {
                entry.granted = true;
            }
        }
    }

    #[test]
    fn counting_semaphore_admits_up_to_the_limit_in_order() {
        let queue = [
            e(1, S, false),
            e(2, S, false),
            e(3, S, false),
            e(4, S, false),
        ];
        assert_eq!(admit(&queue, 3), vec![1, 2, 3]);
        assert_eq!(admit(&queue, 1), vec![1]);
    }

    #[test]
    fn granted_entries_count_wherever_they_stand() {
        // Seed 001's race: ticket 5 became visible after ticket 6 was granted.
        let queue = [e(5, S, false), e(6, S, true)];
        assert!(admit(&queue, 1).is_empty());
        assert_eq!(admit(&queue, 2), vec![5]);
        // An exclusive entry that shows up late does not enter either.
        assert!(admit(&[e(5, X, false), e(6, S, true)], 5).is_empty());
    }

    #[test]
    fn writer_waits_for_readers_and_readers_behind_it_wait_for_the_writer() {
        let queue = [e(1, S, true), e(2, X, false), e(3, S, false)];
        assert!(admit(&queue, 10).is_empty());
        let queue = [e(2, X, false), e(3, S, false)];
        assert_eq!(admit(&queue, 10), vec![2]);
        let queue = [e(2, X, true), e(3, S, false)];
        assert!(admit(&queue, 10).is_empty());
    }

    #[test]
    fn readers_ahead_of_a_writer_share() {
        let queue = [
            e(1, S, false),
            e(2, S, false),
            e(3, X, false),
            e(4, S, false),
        ];
        assert_eq!(admit(&queue, 10), vec![1, 2]);
    }

    #[test]
    fn overfull_queue_admits_nobody() {
        let queue = [e(1, S, true), e(2, S, true), e(3, S, false)];
        assert!(admit(&queue, 1).is_empty());
        assert!(!is_consistent(&queue, 1));
    }

    #[test]
    fn mode_round_trips() {
        for m in [S, X] {
            assert_eq!(Mode::parse(m.as_str()), Some(m));
        }
        assert_eq!(Mode::parse("read"), None);
    }

    fn arb_queue() -> impl Strategy<Value = (Vec<QueueEntry>, u32)> {
        (
            prop::collection::vec((any::<bool>(), any::<bool>()), 0..12),
            1u32..5,
        )
            .prop_map(|(flags, permits)| {
                let queue = flags
                    .into_iter()
                    .enumerate()
                    .map(|(i, (exclusive, granted))| {
                        e(i as i64 * 3 + 1, if exclusive { X } else { S }, granted)
                    })
                    .collect();
                (queue, permits)
            })
    }

    proptest! {
        /// Safety: admission never exceeds the limit and never lets a writer share, starting
        /// from any state at all (granted entries anywhere, e.g. after the commit-order race).
        #[test]
        fn admission_is_safe_from_any_state((queue, permits) in arb_queue()) {
            let admitted = admit(&queue, permits);
            let mut after = queue.clone();
            apply(&mut after, &admitted);
            if !admitted.is_empty() {
                prop_assert!(is_consistent(&after, permits));
            }
            if is_consistent(&queue, permits) {
                prop_assert!(is_consistent(&after, permits));
            }
        }

        /// FIFO: an admitted entry never overtakes a waiting one; readers never pass a waiting writer.
        #[test]
        fn admission_is_fifo((queue, permits) in arb_queue()) {
            let admitted = admit(&queue, permits);
            let waiting: Vec<&QueueEntry> = queue.iter().filter(|e| !e.granted).collect();
            // The admitted tickets are a prefix of the waiting ones.
            prop_assert!(admitted.len() <= waiting.len());
            for (a, w) in admitted.iter().zip(&waiting) {
                prop_assert_eq!(*a, w.ticket);
            }
        }

        /// Admission is idempotent: right after granting, nobody else is admitted.
        #[test]
        fn admission_is_idempotent((queue, permits) in arb_queue()) {
            let mut after = queue.clone();
            apply(&mut after, &admit(&queue, permits));
            prop_assert!(admit(&after, permits).is_empty());
        }

        /// Liveness: when nobody holds the resource, the first waiting entry enters.
        #[test]
        fn idle_resource_admits_the_head((queue, permits) in arb_queue()) {
            let mut queue = queue;
            for entry in &mut queue {
                entry.granted = false;
            }
            let admitted = admit(&queue, permits);
            match queue.first() {
                Some(head) => prop_assert_eq!(admitted.first(), Some(&head.ticket)),
                None => prop_assert!(admitted.is_empty()),
            }
        }

        /// No writer starvation: simulate arrivals and releases; a writer is granted after at most
        /// as many grants as there were entries ahead of it when it queued.
        #[test]
        fn writer_is_granted_within_a_bounded_number_of_grants(
            permits in 1u32..4,
            ahead in prop::collection::vec(any::<bool>(), 0..6),
            steps in prop::collection::vec((any::<bool>(), any::<bool>(), 0usize..8), 1..60),
        ) {
            let mut next = 1i64;
            let mut queue: Vec<QueueEntry> = Vec::new();
            let mut push = |queue: &mut Vec<QueueEntry>, mode| {
                queue.push(e(next, mode, false));
                next += 1;
                next - 1
            };
            for exclusive in ahead {
                push(&mut queue, if exclusive { X } else { S });
            }
            let granted = admit(&queue, permits);
            apply(&mut queue, &granted);
            let bound = queue.len();
            let writer = push(&mut queue, X);
            let mut grants_since = 0usize;
            for (arrive, exclusive, pick) in steps {
                if arrive {
                    push(&mut queue, if exclusive { X } else { S });
                } else {
                    // A random holder leaves.
                    let holders: Vec<usize> = (0..queue.len()).filter(|&i| queue[i].granted).collect();
                    if let Some(&i) = holders.get(pick % holders.len().max(1)) {
                        if queue[i].ticket == writer {
                            return Ok(());
                        }
                        queue.remove(i);
                    }
                }
                let admitted = admit(&queue, permits);
                if admitted.contains(&writer) {
                    prop_assert!(grants_since <= bound);
                    return Ok(());
                }
                grants_since += admitted.len();
                apply(&mut queue, &admitted);
                prop_assert!(grants_since <= bound, "{} grants before the writer, bound {}", grants_since, bound);
            }
        }
    }
}
