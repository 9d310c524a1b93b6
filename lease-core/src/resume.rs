//! Where a worker's next claim starts looking in a deep queue: at the last row it
//! claimed, and from the front of the claim order again now and then.
//!
//! A claim picks the first claimable row in the claim order. On PostgreSQL every claimed row
//! leaves a dead entry at the front of the queue's index until a vacuum cleans the index, and a
//! pick that starts at the front steps over all of them. A pick that starts at the last claimed
//! key skips them. The price: a row that becomes claimable again *before* that key in the claim order (released,
//! retried, rescued from a stale claim, or inserted by a transaction that committed late) waits
//! for the next claim that looks from the front. [`ResumePoint`] decides which claims do: the
//! first one, one every `rescan` period, and the next one after a claim found fewer rows from
//! the key on than it asked for.
//!
//! Several threads share one point (a `Worker`'s), and their claims overlap: each claim carries
//! the [`Pass`] its bound came from, and what a claim of an earlier pass reports is ignored
//! once a rescan has started a new one. Otherwise a claim that started from the old key and
//! ended after the rescan would move the key back past the front, and the rows the rescan was
//! for would wait for the next one.

use std::time::{Duration, Instant};

use crate::InvalidInput;

/// The claim order key a worker's claims resume from, and when they look from the front again.
///
/// Pure state, driven by the caller's clock (so it is tested without one):
///
/// ```
/// use lease_core::ResumePoint;
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// let mut point = ResumePoint::new(Duration::from_secs(1)).unwrap();
/// let (pass, from) = point.bound(start);
/// assert_eq!(from, None, "the first claim looks from the front");
/// point.claimed(pass, 41);
/// let (pass, from) = point.bound(start);
/// assert_eq!(from, Some(&41), "the next ones resume at the key");
/// point.found_nothing(pass);
/// let (pass, from) = point.bound(start);
/// assert_eq!(from, None, "nothing from the key on: look from the front");
/// point.claimed(pass, 7);
/// assert_eq!(point.bound(start + Duration::from_secs(1)).1, None, "a rescan is due");
/// ```
#[derive(Debug, Clone)]
pub struct ResumePoint<K> {
    key: Option<K>,
    rescan: Duration,
    next_rescan: Option<Instant>,
    pass: Pass,
}

/// Which rescan a claim's bound came from (see [`ResumePoint::bound`]): a claim reports with
/// the pass it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass(u64);

/// The longest rescan period kept exactly: a longer one (`Duration::MAX` for "never") waits this
/// long, a hundred years, instead of overflowing the clock.
const LONGEST_RESCAN: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl<K> ResumePoint<K> {
    /// A point with no key yet, whose claims look from the front at least every `rescan`
    /// (refused when zero: every claim would look from the front, which is a plain claim).
    pub fn new(rescan: Duration) -> Result<Self, InvalidInput> {
        if rescan.is_zero() {
            return Err(InvalidInput::ZeroDuration {
                what: "rescan period",
                got: rescan,
            });
        }
        Ok(ResumePoint {
            key: None,
            rescan,
            next_rescan: None,
            pass: Pass::default(),
        })
    }

    /// The longest a claim resumes from the key before one looks from the front again.
    pub fn rescan(&self) -> Duration {
        self.rescan
    }

    /// The key the claim starting `now` resumes from, or `None` when it must look from the
    /// front: no key yet, or a rescan is due. A rescan starts a new pass: the next one is
    /// scheduled `rescan` later, and until a claim of the new pass reports, the claims that
    /// start look from the front too.
    pub fn bound(&mut self, now: Instant) -> (Pass, Option<&K>) {
        match self.next_rescan {
            Some(due) if now < due => {}
            _ => {
                // `Duration::MAX` means "never": capped, it is still later than any process lives.
                let wait = self.rescan.min(LONGEST_RESCAN);
                self.next_rescan = Some(now.checked_add(wait).unwrap_or(now));
                self.pass = Pass(self.pass.0.wrapping_add(1));
                self.key = None;
            }
        }
        (self.pass, self.key.as_ref())
    }

    /// A claim of `pass` took rows; `furthest` is the key of the last of them in the claim
    /// order. Ignored when a rescan started a newer pass meanwhile.
    pub fn claimed(&mut self, pass: Pass, furthest: K) {
        if pass == self.pass {
            self.key = Some(furthest);
        }
    }

    /// A claim of `pass` that resumed from the key found fewer rows than it asked for: rows may
    /// wait before the key, so the next claim looks from the front. Ignored when a rescan
    /// started a newer pass meanwhile.
    pub fn found_nothing(&mut self, pass: Pass) {
        if pass == self.pass {
            self.key = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn a_zero_rescan_period_is_refused() {
        assert!(matches!(
            ResumePoint::<i64>::new(Duration::ZERO),
            Err(InvalidInput::ZeroDuration {
                what: "rescan period",
                ..
            })
        ));
    }

    #[test]
    fn a_rescan_period_of_duration_max_means_never() {
        let t0 = Instant::now();
        let mut p = ResumePoint::new(Duration::MAX).unwrap();
        let (pass, from) = p.bound(t0);
        assert_eq!(from, None);
        p.claimed(pass, 10);
        assert_eq!(p.bound(t0 + 1000 * 24 * 3600 * SEC).1, Some(&10));
    }

    #[test]
    fn claims_resume_from_the_last_key_until_the_rescan_is_due() {
        let t0 = Instant::now();
        let mut p = ResumePoint::new(SEC).unwrap();
        let (pass, from) = p.bound(t0);
        assert_eq!(from, None);
        p.claimed(pass, 10);
        assert_eq!(p.bound(t0 + SEC / 2), (pass, Some(&10)));
        p.claimed(pass, 20);
        assert_eq!(p.bound(t0 + SEC - Duration::from_nanos(1)).1, Some(&20));
        // Due: this claim looks from the front, and the key it finds replaces the old one even
        // when it lies before it (a row re-queued before the old key).
        let (rescan, from) = p.bound(t0 + SEC);
        assert_eq!(from, None);
        p.claimed(rescan, 3);
        assert_eq!(p.bound(t0 + SEC).1, Some(&3));
        assert_eq!(p.bound(t0 + 2 * SEC - Duration::from_nanos(1)).1, Some(&3));
        assert_eq!(p.bound(t0 + 2 * SEC).1, None);
    }

    #[test]
    fn a_claim_that_found_nothing_sends_the_next_to_the_front() {
        let t0 = Instant::now();
        let mut p = ResumePoint::new(SEC).unwrap();
        let (pass, _) = p.bound(t0);
        p.claimed(pass, 5);
        p.found_nothing(pass);
        assert_eq!(p.bound(t0).1, None);
        assert_eq!(
            p.bound(t0).1,
            None,
            "still no key until a claim takes a row"
        );
        p.claimed(pass, 6);
        assert_eq!(p.bound(t0).1, Some(&6));
    }

    #[test]
    fn a_clock_that_goes_backwards_never_skips_the_rescan_for_long() {
        // `Instant` is monotonic; a caller passing an earlier instant only shortens the wait
        // for nothing: the schedule is kept, and the next due instant still comes.
        let t0 = Instant::now() + 10 * SEC;
        let mut p = ResumePoint::new(SEC).unwrap();
        let (pass, _) = p.bound(t0);
        p.claimed(pass, 1);
        assert_eq!(p.bound(t0 - 5 * SEC).1, Some(&1));
        assert_eq!(p.bound(t0 + SEC).1, None);
    }

    /// Claims overlap when threads share the point: one that started from the old key and
    /// reports after a rescan must not move the key back past what the rescan found, nor send
    /// the rescan's claims to the front again with a stale `found_nothing`.
    #[test]
    fn a_claim_of_an_earlier_pass_reports_nothing() {
        let t0 = Instant::now();
        let mut p = ResumePoint::new(SEC).unwrap();
        let (first, _) = p.bound(t0);
        p.claimed(first, 10_000);
        // A thread starts from the key, 10 000, and is still claiming when the rescan is due.
        let (old, from) = p.bound(t0 + SEC / 2);
        assert_eq!(from, Some(&10_000));
        let (rescan, from) = p.bound(t0 + SEC);
        assert_eq!(from, None);
        // Until the rescan reports, other claims look from the front too.
        assert_eq!(p.bound(t0 + SEC), (rescan, None));
        p.claimed(rescan, 5);
        p.claimed(old, 10_050);
        p.found_nothing(old);
        assert_eq!(p.bound(t0 + SEC).1, Some(&5), "the rescan's key stands");
    }
}
