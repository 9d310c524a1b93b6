//! Every public type and constant of `lease-core` (a crate users do not depend on) has a path
//! under `diesel_lease`, so that no user ever needs to write `lease_core::…`.

#![allow(unused_imports)]

// The paths a user writes; this file must name each of lease-core's public items (checked below)
// or list it in `NOT_IN_ANY_SIGNATURE`.
use diesel_lease::claim::RetryPolicy;
use diesel_lease::lease::schedule::{Cron, Missed, Plan, Schedule};
use diesel_lease::prelude::InsertOutcome as _;
use diesel_lease::semaphore::{Mode, QueueEntry};
use diesel_lease::{
    BackendKind, Backoff, ClaimStamp, FencingToken, InsertOutcome, InvalidInput, OwnerId, Ttl,
    MAX_OWNER_LEN, MAX_TTL,
};

/// lease-core items that no diesel-lease signature names (the committed `public-api.txt` shows
/// none), so a user never meets them: the resume point of a deep-queue cursor (`ClaimCursor`
/// keeps it inside) and the cron grace's default (its value, one minute, is on `Cron::grace`).
const NOT_IN_ANY_SIGNATURE: &[&str] = &["Pass", "ResumePoint", "DEFAULT_GRACE"];

/// The public types, traits and constants lease-core declares or re-exports (functions such as
/// `validate_name` are lease-core's own helpers, used inside diesel-lease).
fn lease_core_items() -> Vec<String> {
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lease-core/src")];
    let mut items = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).expect("lease-core/src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            for line in text.lines() {
                for kind in [
                    "pub struct ",
                    "pub enum ",
                    "pub trait ",
                    "pub const ",
                    "pub type ",
                ] {
                    if let Some(rest) = line.strip_prefix(kind) {
                        let name: String = rest
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        items.push(name);
                    }
                }
            }
        }
    }
    items.sort();
    items.dedup();
    items
}

#[test]
fn every_public_type_of_lease_core_has_a_path_under_diesel_lease() {
    let this = include_str!("paths.rs");
    let imports: String = this
        .lines()
        .take_while(|l| !l.starts_with("/// The public types"))
        .collect();
    let items = lease_core_items();
    assert!(items.len() >= 10, "found only {items:?}");
    let missing: Vec<_> = items
        .iter()
        .filter(|name| !imports.contains(name.as_str()))
        .filter(|name| !NOT_IN_ANY_SIGNATURE.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "lease-core items without a diesel_lease path in this file: {missing:?} \
         (re-export them from diesel-lease and import them above)"
    );
    let snapshot = include_str!("../public-api.txt");
    for name in NOT_IN_ANY_SIGNATURE {
        assert!(
            items.iter().any(|i| i == name),
            "{name} is no longer a lease-core item"
        );
        assert!(
            !snapshot.contains(&format!("::{name}")),
            "{name} is in diesel-lease's public API now: give it a path and import it above"
        );
    }
}

#[test]
fn the_prelude_brings_what_an_insert_once_caller_matches_on() {
    use diesel_lease::prelude::*;
    let outcome: InsertOutcome<()> = InsertOutcome::AlreadyExists;
    assert!(!outcome.inserted());
}
