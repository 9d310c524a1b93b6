use std::fmt;

use crate::{ClaimStamp, InvalidInput};

/// The longest owner identity, in bytes: 242, so that what a claim stores — the owner plus its
/// [`ClaimStamp`] suffix of 13 bytes — fits the 255 bytes of the built-in tables' `VARCHAR(255)`
/// and of a `VARCHAR(255)` owner column of your own. (An owner column of yours that is shorter
/// needs an owner that much shorter: a claim fails with the database's "value too long" error.)
pub const MAX_OWNER_LEN: usize = 255 - ClaimStamp::SUFFIX_LEN;

/// Who holds a claim, lease or permit: by default `host:pid:random`, unique per process start.
///
/// The random suffix keeps two processes apart even when a container reuses the same host name
/// and pid after a restart, so a restarted worker never mistakes its predecessor's claims for
/// its own.
///
/// ```
/// use lease_core::OwnerId;
///
/// let me = OwnerId::generate();
/// assert!(me.as_str().contains(&std::process::id().to_string()));
/// let named = OwnerId::new("billing-worker-1").unwrap();
/// assert_eq!(named.as_str(), "billing-worker-1");
/// assert!(OwnerId::new("").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(String);

impl OwnerId {
    /// `host:pid:suffix`, with a fresh random suffix on every call.
    pub fn generate() -> Self {
        let host = hostname();
        let suffix: u64 = rand::random();
        let mut id = format!("{host}:{}:{suffix:016x}", std::process::id());
        if id.len() > MAX_OWNER_LEN {
            // Keep the unique tail; host names are the part that can be long. Cut at a character
            // boundary (a host name may be UTF-8).
            let mut start = id.len() - MAX_OWNER_LEN;
            while !id.is_char_boundary(start) {
                start += 1;
            }
            id = id[start..].to_string();
        }
        // A host name with a NUL (set through HOSTNAME) would make every statement fail.
        OwnerId(id.replace('\0', "?"))
    }

    /// The process-wide default identity, generated once.
    pub fn process_default() -> &'static OwnerId {
        static ID: std::sync::OnceLock<OwnerId> = std::sync::OnceLock::new();
        ID.get_or_init(OwnerId::generate)
    }

    /// A caller-chosen identity: non-empty, at most [`MAX_OWNER_LEN`] (242) bytes, no NUL byte.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidInput> {
        let id = id.into();
        validate_name("owner", &id, MAX_OWNER_LEN)?;
        Ok(OwnerId(id))
    }

    /// The identity as stored in owner columns.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_string())
}

/// Validates a lock or resource name: non-empty, at most `max` bytes, without a NUL byte
/// (which PostgreSQL refuses in text, and which no thread name may hold), and not ending with a
/// space (which MySQL and MariaDB ignore when they compare: [`InvalidInput::TrailingSpace`]).
pub fn validate_name(what: &'static str, name: &str, max: usize) -> Result<(), InvalidInput> {
    if name.is_empty() {
        return Err(InvalidInput::EmptyName { what });
    }
    if name.len() > max {
        return Err(InvalidInput::NameTooLong {
            what,
            len: name.len(),
            max,
        });
    }
    if let Some(at) = name.bytes().position(|b| b == 0) {
        return Err(InvalidInput::NulByte { what, at });
    }
    if name.ends_with(' ') {
        return Err(InvalidInput::TrailingSpace {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// `prefix` followed by `value`, as a name that passes [`validate_name`] with `max` (at least
/// 17 bytes more than `prefix`): `value` as it is when that fits, holds no NUL byte and does not
/// end with a space, else the
/// longest clean start of it that leaves room for `#` and the 16 hex digits of its 64-bit FNV-1a
/// hash. The same value gives the same name in every process and build, so names made from
/// data (a key column's value) stay shared across a farm; two long values that share their start
/// are told apart by the hash (a collision only makes them share a name).
pub fn bounded_name(prefix: &str, value: &str, max: usize) -> String {
    let whole = prefix.len() + value.len();
    if whole <= max && !value.contains('\0') && !value.ends_with(' ') {
        return format!("{prefix}{value}");
    }
    let hash = value.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let room = max.saturating_sub(prefix.len() + 17);
    let mut start = String::with_capacity(room);
    for c in value.chars().filter(|&c| c != '\0') {
        if start.len() + c.len_utf8() > room {
            break;
        }
        start.push(c);
    }
    format!("{prefix}{start}#{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn bounded_names_are_valid_stable_and_keep_short_values(
            prefix in "[a-z:=\"]{1,40}",
            value in any::<String>(),
        ) {
            let name = bounded_name(&prefix, &value, 255);
            prop_assert!(validate_name("n", &name, 255).is_ok(), "{name:?}");
            prop_assert!(name.starts_with(&prefix));
            prop_assert_eq!(&name, &bounded_name(&prefix, &value, 255));
            if prefix.len() + value.len() <= 255 && !value.contains('\0') && !value.ends_with(' ') {
                prop_assert_eq!(name, format!("{prefix}{value}"));
            }
        }
    }

    #[test]
    fn long_values_with_one_start_get_names_of_their_own() {
        let (a, b) = ("x".repeat(300) + "a", "x".repeat(300) + "b");
        let (na, nb) = (bounded_name("k=", &a, 255), bounded_name("k=", &b, 255));
        assert_ne!(na, nb);
        assert_eq!(na.len(), 255);
        assert!(bounded_name("k=", "a\0b", 255).starts_with("k=ab#"));
        // A trailing space, which MySQL would ignore, is hashed in: "a " and "a" stay apart.
        let padded = bounded_name("k=", "a ", 255);
        assert!(padded.starts_with("k=a #"), "{padded}");
        assert_ne!(padded, bounded_name("k=", "a", 255));
    }

    #[test]
    fn generated_ids_differ_and_fit() {
        let a = OwnerId::generate();
        let b = OwnerId::generate();
        assert_ne!(a, b);
        assert!(a.as_str().len() <= MAX_OWNER_LEN);
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(
            validate_name("lease", "", 10),
            Err(InvalidInput::EmptyName { what: "lease" })
        );
        assert!(validate_name("lease", "abc", 3).is_ok());
        assert!(matches!(
            validate_name("lease", "abcd", 3),
            Err(InvalidInput::NameTooLong { len: 4, max: 3, .. })
        ));
        assert!(OwnerId::new("x".repeat(MAX_OWNER_LEN + 1)).is_err());
        assert!(OwnerId::new("x".repeat(MAX_OWNER_LEN)).is_ok());
        assert_eq!(
            validate_name("resource", "a\0b", 10),
            Err(InvalidInput::NulByte {
                what: "resource",
                at: 1
            })
        );
        assert_eq!(
            validate_name("lease", "job ", 10),
            Err(InvalidInput::TrailingSpace {
                what: "lease",
                name: "job ".into()
            })
        );
        assert!(validate_name("lease", " job", 10).is_ok());
        assert!(OwnerId::new("worker ").is_err());
        assert_eq!(
            OwnerId::new("w\0"),
            Err(InvalidInput::NulByte {
                what: "owner",
                at: 1
            })
        );
    }
}
