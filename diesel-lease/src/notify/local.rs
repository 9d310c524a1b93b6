//! Wake-ups between the waiters of one process, for backends without notifications (SQLite,
//! MySQL): a transaction of this process that admitted someone wakes this process's waiters of
//! that resource at once, instead of at their next poll. Waiters in other processes are not
//! reached; the head of a queue looks at its own row often instead (`protocol.rs`).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Per resource with waiters in this process: how many, and how many wake-ups so far.
struct Entry {
    waiters: usize,
    generation: u64,
}

static RESOURCES: Mutex<Option<HashMap<String, Entry>>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

fn resources() -> MutexGuard<'static, Option<HashMap<String, Entry>>> {
    RESOURCES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wakes this process's waiters of `resource`, if it has any.
pub(crate) fn wake(resource: &str) {
    let mut resources = resources();
    if let Some(entry) = resources.as_mut().and_then(|r| r.get_mut(resource)) {
        entry.generation += 1;
        CHANGED.notify_all();
    }
}

/// One waiter's place: created before its request is queued, so no wake-up is missed.
#[derive(Debug)]
pub(crate) struct Subscription {
    resource: String,
    /// The generation this waiter has seen.
    seen: u64,
}

impl Subscription {
    pub(crate) fn new(resource: &str) -> Self {
        let mut resources = resources();
        let entry = resources
            .get_or_insert_with(HashMap::new)
            .entry(resource.to_owned())
            .or_insert(Entry {
                waiters: 0,
                generation: 0,
            });
        entry.waiters += 1;
        Subscription {
            resource: resource.to_owned(),
            seen: entry.generation,
        }
    }

    /// Sleeps up to `max`; `true` (at once) when the resource was woken since the last call.
    pub(crate) fn sleep(&mut self, max: Duration) -> bool {
        let deadline = Instant::now() + max;
        let mut resources = resources();
        loop {
            let generation = resources
                .as_ref()
                .and_then(|r| r.get(&self.resource))
                .map_or(self.seen, |e| e.generation);
            if generation != self.seen {
                self.seen = generation;
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            resources = CHANGED
                .wait_timeout(resources, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut resources = resources();
        if let Some(map) = resources.as_mut() {
            if let Some(entry) = map.get_mut(&self.resource) {
                entry.waiters -= 1;
                if entry.waiters == 0 {
                    map.remove(&self.resource);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_reaches_the_waiters_of_its_resource_only() {
        let mut a = Subscription::new("local-a");
        let mut b = Subscription::new("local-b");
        assert!(!a.sleep(Duration::from_millis(5)));
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                wake("local-a");
            });
            let started = Instant::now();
            assert!(a.sleep(Duration::from_secs(10)));
            assert!(started.elapsed() < Duration::from_secs(5));
        });
        assert!(!b.sleep(Duration::from_millis(5)), "b was not woken");
        // A wake between two sleeps is not lost.
        wake("local-b");
        assert!(b.sleep(Duration::ZERO));
        assert!(!b.sleep(Duration::ZERO));
    }

    #[test]
    fn resources_without_waiters_are_forgotten() {
        drop(Subscription::new("local-gone"));
        wake("local-gone"); // nobody waits: nothing is kept
        assert!(resources()
            .as_ref()
            .is_none_or(|r| !r.contains_key("local-gone")));
    }
}
