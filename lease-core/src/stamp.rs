//! [`ClaimStamp`]: the identity of one claim (or one job run), stored in the owner column.

use crate::OwnerId;

/// The separator between the owner and the claim's random part.
const SEPARATOR: char = '#';

/// What a claim writes into the owner column: the claimer's [`OwnerId`], `#`, and 12 random hex
/// digits drawn for this claim alone.
///
/// Owner-checked transitions compare the whole stamp, so a claim is fenced even against a rescue
/// by the same owner (another thread of the same process, or a process that reuses a fixed
/// `OwnerId`): the rescue writes a new stamp, and the stale worker's `complete()` matches nothing.
///
/// ```
/// use lease_core::{ClaimStamp, OwnerId};
///
/// let me = OwnerId::new("billing-1").unwrap();
/// let (a, b) = (ClaimStamp::new(&me), ClaimStamp::new(&me));
/// assert_ne!(a, b, "every claim gets its own stamp");
/// assert_eq!(a.owner(), "billing-1");
/// assert_eq!(ClaimStamp::owner_of(a.as_str()), "billing-1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimStamp(String);

impl ClaimStamp {
    /// How many bytes a stamp adds to its owner: `#` and 12 hex digits.
    pub const SUFFIX_LEN: usize = 13;

    /// A fresh stamp for one claim by `owner` ([`SUFFIX_LEN`](Self::SUFFIX_LEN) = 13 bytes longer
    /// than the owner, so at most 255 bytes: see [`MAX_OWNER_LEN`](crate::MAX_OWNER_LEN)).
    pub fn new(owner: &OwnerId) -> Self {
        Self::with_suffix(owner, rand::random::<u64>())
    }

    /// The stamp of `owner` with the low 48 bits of `random` as its 12 hex digits. Written out
    /// digit by digit: one allocation of the final length, no formatting machinery (a claim
    /// makes one of these every time, on the claim's hot path).
    fn with_suffix(owner: &OwnerId, random: u64) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let owner = owner.as_str();
        let mut s = String::with_capacity(owner.len() + Self::SUFFIX_LEN);
        s.push_str(owner);
        s.push(SEPARATOR);
        for shift in (0..12).rev() {
            s.push(char::from(HEX[((random >> (4 * shift)) & 0xf) as usize]));
        }
        ClaimStamp(s)
    }

    /// The stamp as stored in the owner column.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owner part of this stamp.
    pub fn owner(&self) -> &str {
        Self::owner_of(&self.0)
    }

    /// The owner part of a stored stamp (everything before the last `#`); a value without a
    /// `#` (written by something else) is returned whole.
    pub fn owner_of(stored: &str) -> &str {
        stored
            .rsplit_once(SEPARATOR)
            .map_or(stored, |(owner, _)| owner)
    }
}

impl From<ClaimStamp> for String {
    /// The stamp as stored in the owner column, without a copy.
    fn from(stamp: ClaimStamp) -> String {
        stamp.0
    }
}

impl std::fmt::Display for ClaimStamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_with_its_own_separator_is_kept_whole() {
        let owner = OwnerId::new("team#7").unwrap();
        let stamp = ClaimStamp::new(&owner);
        assert_eq!(stamp.owner(), "team#7");
        assert_eq!(
            stamp.as_str().len(),
            "team#7".len() + ClaimStamp::SUFFIX_LEN
        );
    }

    #[test]
    fn the_longest_owner_stamps_into_255_bytes() {
        let owner = OwnerId::new("o".repeat(crate::MAX_OWNER_LEN)).unwrap();
        assert_eq!(ClaimStamp::new(&owner).as_str().len(), 255);
    }

    #[test]
    fn the_suffix_is_the_low_48_bits_as_12_lowercase_hex_digits() {
        let owner = OwnerId::new("w-1").unwrap();
        let s = ClaimStamp::with_suffix(&owner, 0xdead_0123_4567_89ab);
        assert_eq!(s.as_str(), "w-1#0123456789ab");
        let s = ClaimStamp::with_suffix(&owner, 0xabc);
        assert_eq!(s.as_str(), "w-1#000000000abc");
        let s = ClaimStamp::with_suffix(&owner, u64::MAX);
        assert_eq!(s.as_str(), "w-1#ffffffffffff");
        assert_eq!(s.as_str().len(), 3 + ClaimStamp::SUFFIX_LEN);
    }

    #[test]
    fn a_value_without_a_stamp_is_its_own_owner() {
        assert_eq!(ClaimStamp::owner_of("legacy-worker"), "legacy-worker");
    }
}
