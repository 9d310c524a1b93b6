//! Writers with a bounded lock wait take turns in front of SQLite's write lock.
//!
//! SQLite's busy handler is not fair: a writer that finds the database locked sleeps and retries,
//! and under saturation it can keep losing to writers that never sleep. A locked semaphore
//! transaction with a short bound on its wait (`lock_tx_within`, `write_tx_within`) therefore
//! takes turns here with the others of its process first, so that at most one of them waits on
//! the database lock. Other writes (claims, completes, leases) do not: every hand-off of a turn
//! is a wake-up, and at 4 threads claiming, taking turns cost a third of the jobs/s and tripled
//! the p99 against letting the busy handler decide (BENCHMARKS.md, SQLite floors). The queue is
//! only an optimisation: a writer that waited its bound proceeds anyway (SQLite's own locking
//! still decides), and a thread already inside the queue (a nested diesel-lease call) never waits
//! for itself.

use std::cell::Cell;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

const MAX_QUEUE_WAIT: Duration = Duration::from_secs(10);

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    busy: false,
    waiting: 0,
});
static FREED: Condvar = Condvar::new();

/// Whether a writer has the turn, and how many wait for it (a release wakes one only then: a
/// lone writer's turns cost no wake-up call).
struct Queue {
    busy: bool,
    waiting: usize,
}

thread_local! {
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// A turn in the queue; the next writer goes when it is dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    owned: bool,
}

/// Waits for this process's turn to write to SQLite (see the module docs), at most `max_wait`
/// (and never more than `MAX_QUEUE_WAIT`) before going ahead without one.
pub(crate) fn turn_within(max_wait: Duration) -> Turn {
    if HOLDING.with(Cell::get) {
        return Turn { owned: false };
    }
    let deadline = Instant::now() + max_wait.min(MAX_QUEUE_WAIT);
    let mut queue = QUEUE.lock().unwrap_or_else(|p| p.into_inner());
    while queue.busy {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Turn { owned: false };
        }
        queue.waiting += 1;
        queue = FREED
            .wait_timeout(queue, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        queue.waiting -= 1;
    }
    queue.busy = true;
    HOLDING.with(|h| h.set(true));
    Turn { owned: true }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.owned {
            HOLDING.with(|h| h.set(false));
            let mut queue = QUEUE.lock().unwrap_or_else(|p| p.into_inner());
            queue.busy = false;
            let waiting = queue.waiting > 0;
            drop(queue);
            if waiting {
                FREED.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn one_writer_at_a_time_and_nested_turns_do_not_wait() {
        let inside = AtomicUsize::new(0);
        let max = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let _t = turn_within(MAX_QUEUE_WAIT);
                        let _nested = turn_within(MAX_QUEUE_WAIT); // must not deadlock
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(n, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(max.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_the_queue_as_it_found_it() {
        let held = std::sync::Barrier::new(2);
        let release = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let t = turn_within(MAX_QUEUE_WAIT);
                assert!(t.owned);
                held.wait();
                release.wait();
            });
            held.wait();
            let gave_up = turn_within(Duration::from_millis(30));
            assert!(!gave_up.owned, "went ahead without the turn");
            drop(gave_up);
            assert!(
                QUEUE.lock().unwrap().busy,
                "giving up released the holder's turn"
            );
            release.wait();
        });
        // The queue still works (other tests of this process may take turns meanwhile).
        assert!(turn_within(MAX_QUEUE_WAIT).owned);
    }
}
