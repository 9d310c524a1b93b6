use std::time::Duration;

use crate::InvalidInput;

/// The longest duration diesel-lease sends to the database: 1,000 years. Far below the point
/// where the database's `now + ttl` (µs since 1970 in a `BIGINT`) would overflow.
pub const MAX_TTL: Duration = Duration::from_secs(1_000 * 365 * 24 * 60 * 60);

/// A validated, positive duration of at most [`MAX_TTL`], in signed 64-bit microseconds.
///
/// Every duration diesel-lease sends to the database goes through `Ttl`, so the database never sees a
/// zero or overflowing interval.
///
/// ```
/// use lease_core::Ttl;
/// use std::time::Duration;
///
/// let ttl = Ttl::new("ttl", Duration::from_secs(30)).unwrap();
/// assert_eq!(ttl.as_micros(), 30_000_000);
/// assert!(Ttl::new("ttl", Duration::ZERO).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl {
    micros: i64,
}

impl Ttl {
    /// Validates `d` as the duration called `what` (used in the error message).
    pub fn new(what: &'static str, d: Duration) -> Result<Self, InvalidInput> {
        if d.is_zero() {
            return Err(InvalidInput::ZeroDuration { what, got: d });
        }
        if d > MAX_TTL {
            return Err(InvalidInput::DurationTooLong { what, got: d });
        }
        let micros = i64::try_from(d.as_micros())
            .map_err(|_| InvalidInput::DurationTooLong { what, got: d })?;
        if micros == 0 {
            // Sub-microsecond durations round to zero in the database.
            return Err(InvalidInput::ZeroDuration { what, got: d });
        }
        Ok(Ttl { micros })
    }

    /// Validates a signed `chrono`-style duration given in microseconds.
    pub fn from_signed_micros(what: &'static str, micros: i64) -> Result<Self, InvalidInput> {
        match micros {
            m if m < 0 => Err(InvalidInput::NegativeDuration { what }),
            m if m.unsigned_abs() > MAX_TTL.as_micros() as u64 => {
                Err(InvalidInput::DurationTooLong {
                    what,
                    got: Duration::from_micros(m.unsigned_abs()),
                })
            }
            0 => Err(InvalidInput::ZeroDuration {
                what,
                got: Duration::ZERO,
            }),
            m => Ok(Ttl { micros: m }),
        }
    }

    /// The duration in microseconds, as bound into SQL.
    pub fn as_micros(self) -> i64 {
        self.micros
    }

    /// The duration in (fractional) seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.micros as f64 / 1e6
    }

    /// The duration as a `std::time::Duration`.
    pub fn as_duration(self) -> Duration {
        Duration::from_micros(self.micros.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_zero_and_sub_microsecond() {
        assert!(matches!(
            Ttl::new("ttl", Duration::ZERO),
            Err(InvalidInput::ZeroDuration { .. })
        ));
        assert!(matches!(
            Ttl::new("ttl", Duration::from_nanos(999)),
            Err(InvalidInput::ZeroDuration { .. })
        ));
        assert!(matches!(
            Ttl::new("ttl", Duration::MAX),
            Err(InvalidInput::DurationTooLong { .. })
        ));
        assert!(matches!(
            Ttl::from_signed_micros("ttl", -1),
            Err(InvalidInput::NegativeDuration { .. })
        ));
    }

    proptest! {
        #[test]
        fn round_trips_whole_micros(us in 1u64..=(MAX_TTL.as_micros() as u64)) {
            let ttl = Ttl::new("ttl", Duration::from_micros(us)).unwrap();
            prop_assert_eq!(ttl.as_micros() as u64, us);
            prop_assert_eq!(ttl.as_duration(), Duration::from_micros(us));
        }
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn a_ttl_that_would_overflow_the_database_clock_is_refused() {
        assert!(Ttl::new("ttl", MAX_TTL).is_ok());
        assert!(matches!(
            Ttl::new("ttl", MAX_TTL + Duration::from_secs(1)),
            Err(InvalidInput::DurationTooLong { .. })
        ));
        assert!(Ttl::new("ttl", Duration::MAX).is_err());
        assert!(Ttl::from_signed_micros("ttl", i64::MAX).is_err());
    }
}
