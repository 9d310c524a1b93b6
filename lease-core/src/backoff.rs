use std::time::Duration;

/// Exponential backoff with full jitter, capped, for polling loops that wait on the database.
///
/// Waiters start fast (a freed lock is usually taken within milliseconds) and slow down to `max`
/// so that an idle waiter costs the database about one query per `max`.
///
/// ```
/// use lease_core::Backoff;
/// use std::time::Duration;
///
/// let mut b = Backoff::new(Duration::from_millis(5), Duration::from_secs(1));
/// for _ in 0..20 {
///     assert!(b.next_delay() <= Duration::from_secs(1));
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    current: Duration,
    min: Duration,
    max: Duration,
}

/// The shortest delay a [`Backoff`] ever returns.
pub(crate) const MIN_DELAY: Duration = Duration::from_millis(1);

impl Backoff {
    /// Starts at `min` and doubles up to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        // Never a zero pause: a zero backoff would be a busy loop against the database.
        let max = max.max(MIN_DELAY);
        let min = min.max(MIN_DELAY).min(max);
        Backoff {
            current: min,
            min,
            max,
        }
    }

    /// The next delay: uniformly random in `[current/2, current]`, after which `current` doubles.
    pub fn next_delay(&mut self) -> Duration {
        let upper = self.current;
        // Saturating: a `max` near `Duration::MAX` must not overflow the doubling.
        self.current = self.current.saturating_mul(2).min(self.max);
        let lower = upper / 2;
        let span = upper.saturating_sub(lower).as_micros() as u64;
        let jitter = if span == 0 {
            0
        } else {
            rand::random::<u64>() % span.saturating_add(1)
        };
        lower + Duration::from_micros(jitter)
    }

    /// The next delay for a poll whose rate must stay under one per `max`: uniformly random in
    /// `[current, current * 1.25]` (never below the schedule, so at the cap it is at least
    /// `max`), after which `current` doubles.
    pub fn next_delay_at_least(&mut self) -> Duration {
        let lower = self.current;
        self.current = self.current.saturating_mul(2).min(self.max);
        let span = (lower / 4).as_micros() as u64;
        let jitter = if span == 0 {
            0
        } else {
            rand::random::<u64>() % span.saturating_add(1)
        };
        lower.saturating_add(Duration::from_micros(jitter))
    }

    /// Starts over from the minimum delay (after progress was made).
    pub fn reset(&mut self) {
        self.current = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn delays_near_duration_max_do_not_overflow() {
        for min in [Duration::from_millis(5), Duration::MAX / 2, Duration::MAX] {
            let mut b = Backoff::new(min, Duration::MAX);
            for _ in 0..4 {
                assert!(b.next_delay() >= min / 2);
                assert!(b.next_delay_at_least() >= min);
            }
        }
    }

    proptest! {
        #[test]
        fn delays_stay_within_bounds(min_ms in 1u64..100, max_ms in 1u64..5000, steps in 1usize..50) {
            let (min, max) = (Duration::from_millis(min_ms), Duration::from_millis(max_ms));
            let mut b = Backoff::new(min, max);
            for _ in 0..steps {
                let d = b.next_delay();
                prop_assert!(d <= max);
                prop_assert!(d >= min.min(max) / 2);
            }
        }
    }

    proptest! {
        #[test]
        fn upward_delays_never_go_below_the_schedule(min_ms in 1u64..100, max_ms in 1u64..5000, steps in 1usize..50) {
            let (min, max) = (Duration::from_millis(min_ms), Duration::from_millis(max_ms));
            let mut b = Backoff::new(min, max);
            let mut floor = min.min(max);
            for _ in 0..steps {
                let d = b.next_delay_at_least();
                prop_assert!(d >= floor && d <= floor + floor / 4);
                floor = (floor * 2).min(max.max(MIN_DELAY));
            }
        }
    }

    #[test]
    fn a_zero_backoff_still_pauses() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        for _ in 0..100 {
            assert!(b.next_delay() >= MIN_DELAY / 2);
        }
    }

    #[test]
    fn grows_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(80));
        for _ in 0..10 {
            b.next_delay();
        }
        let d = b.next_delay();
        assert!(d >= Duration::from_millis(40), "{d:?}");
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(10));
    }
}
