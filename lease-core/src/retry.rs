use std::time::Duration;

use crate::InvalidInput;

/// When a failed job runs again, and when it is given up: exponential backoff with jitter,
/// capped, and a limit on attempts (after which the row goes to its failed state, the dead
/// letters).
///
/// Attempt `n` (1 for the first run) that fails is retried after about `base * 2^(n-1)`, capped
/// at `max_delay`, minus up to `jitter` of it at random (so that a burst of failures does not come
/// back as a burst). The attempt that reaches `max_attempts` is not retried.
///
/// ```
/// use lease_core::RetryPolicy;
/// use std::time::Duration;
///
/// let policy = RetryPolicy::new(5).unwrap()
///     .base(Duration::from_secs(1))
///     .max_delay(Duration::from_secs(60))
///     .jitter(0.0);
/// assert_eq!(policy.delay_after(1), Some(Duration::from_secs(1)));
/// assert_eq!(policy.delay_after(3), Some(Duration::from_secs(4)));
/// assert_eq!(policy.delay_after(5), None, "the fifth failure is final");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    max_attempts: u32,
    base: Duration,
    max_delay: Duration,
    jitter: f64,
}

impl RetryPolicy {
    /// Gives a job up after `max_attempts` runs (at least 1); the delays start at 1 s, double up
    /// to 1 hour, with 20 % jitter.
    pub fn new(max_attempts: u32) -> Result<Self, InvalidInput> {
        Self::const_new(max_attempts).ok_or(InvalidInput::Zero {
            what: "max_attempts",
        })
    }

    /// [`new`](Self::new) in a `const`: `None` for zero attempts.
    pub const fn const_new(max_attempts: u32) -> Option<Self> {
        if max_attempts == 0 {
            return None;
        }
        Some(RetryPolicy {
            max_attempts,
            base: Duration::from_secs(1),
            max_delay: Duration::from_secs(3600),
            jitter: 0.2,
        })
    }

    /// The delay after the first failure.
    pub fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// The longest delay.
    pub fn max_delay(mut self, max: Duration) -> Self {
        self.max_delay = max;
        self
    }

    /// The share of each delay taken off at random, from 0 (none) to 1 (anything down to zero);
    /// clamped into that range.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        self
    }

    /// How many runs a job gets.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether a retry waits at all: `false` when there is no retry (one attempt) or every delay
    /// is zero.
    pub fn delays(&self) -> bool {
        self.max_attempts > 1 && !self.base.is_zero() && !self.max_delay.is_zero()
    }

    /// The delay before the next run after attempt `attempt` (1-based) failed, or `None` when that
    /// attempt was the last one.
    pub fn delay_after(&self, attempt: i64) -> Option<Duration> {
        if attempt >= i64::from(self.max_attempts) {
            return None;
        }
        let doublings = u32::try_from(attempt.saturating_sub(1).max(0)).unwrap_or(u32::MAX);
        let full = 2u32
            .checked_pow(doublings.min(31))
            .and_then(|factor| self.base.checked_mul(factor))
            .unwrap_or(self.max_delay)
            .min(self.max_delay);
        let cut = full.mul_f64(self.jitter * rand::random::<f64>());
        Some(full.saturating_sub(cut))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_policy_delays_unless_it_has_no_retry_or_no_delay() {
        let policy = RetryPolicy::new(3).unwrap();
        assert!(policy.delays());
        assert!(!RetryPolicy::new(1).unwrap().delays());
        assert!(!policy.base(Duration::ZERO).delays());
        assert!(!policy.max_delay(Duration::ZERO).delays());
        assert_eq!(
            policy.base(Duration::ZERO).delay_after(1),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn zero_attempts_are_refused() {
        assert_eq!(
            RetryPolicy::new(0),
            Err(InvalidInput::Zero {
                what: "max_attempts"
            })
        );
    }

    #[test]
    fn without_jitter_the_delay_doubles_up_to_the_cap() {
        let p = RetryPolicy::new(20)
            .unwrap()
            .base(Duration::from_millis(100))
            .max_delay(Duration::from_secs(1))
            .jitter(0.0);
        let delays: Vec<_> = (1..=6).map(|n| p.delay_after(n).unwrap()).collect();
        assert_eq!(
            delays,
            [100, 200, 400, 800, 1000, 1000].map(Duration::from_millis)
        );
    }

    proptest! {
        #[test]
        fn delays_stay_within_the_jitter_band(
            attempt in 0i64..200, base_ms in 0u64..10_000, max_ms in 0u64..100_000,
            jitter in 0.0f64..=1.0, max_attempts in 1u32..300,
        ) {
            let p = RetryPolicy::new(max_attempts).unwrap()
                .base(Duration::from_millis(base_ms))
                .max_delay(Duration::from_millis(max_ms))
                .jitter(jitter);
            match p.delay_after(attempt) {
                None => prop_assert!(attempt >= i64::from(max_attempts)),
                Some(d) => {
                    prop_assert!(attempt < i64::from(max_attempts));
                    let exp = u32::try_from((attempt - 1).max(0)).unwrap().min(31);
                    let full = Duration::from_millis(base_ms)
                        .checked_mul(2u32.pow(exp))
                        .unwrap_or(Duration::MAX)
                        .min(Duration::from_millis(max_ms));
                    prop_assert!(d <= full);
                    prop_assert!(d >= full.mul_f64(1.0 - jitter).saturating_sub(Duration::from_micros(1)));
                }
            }
        }
    }
}
