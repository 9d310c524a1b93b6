use std::fmt;

use crate::InvalidInput;

/// The longest owner identity diesel-lease stores (the built-in tables use `VARCHAR(255)`).
pub const MAX_OWNER_LEN: usize = 255;

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
            // Keep the unique tail; host names are the part that can be long.
            id = id[id.len() - MAX_OWNER_LEN..].to_string();
        }
        OwnerId(id)
    }

    /// The process-wide default identity, generated once.
    pub fn process_default() -> &'static OwnerId {
        static ID: std::sync::OnceLock<OwnerId> = std::sync::OnceLock::new();
        ID.get_or_init(OwnerId::generate)
    }

    /// A caller-chosen identity; must be non-empty and at most [`MAX_OWNER_LEN`] bytes.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidInput> {
        let id = id.into();
        if id.is_empty() {
            return Err(InvalidInput::EmptyName { what: "owner" });
        }
        if id.len() > MAX_OWNER_LEN {
            return Err(InvalidInput::NameTooLong {
                what: "owner",
                len: id.len(),
                max: MAX_OWNER_LEN,
            });
        }
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

/// Validates a lock or resource name: non-empty and at most `max` bytes.
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
