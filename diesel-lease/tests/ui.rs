//! Compile-fail tests of `#[derive(Claimable)]`: every error message the derive can produce has a
//! case under `tests/ui/fail/` with the expected compiler output beside it. The accepted forms are
//! `tests/derive_pass.rs` (not trybuild `pass` cases: one of those makes trybuild build every
//! case separately instead of checking them all in one `cargo check`).
//! `fail/release_answer_ignored.rs` checks that a release's `#[must_use]` answer cannot be
//! dropped unnoticed.
//!
//! The expected output is that of the toolchain CI uses. Regenerate with
//! `TRYBUILD=overwrite cargo test -p diesel-lease --all-features --test ui` and review every
//! changed `.stderr` as a user would read it: the error on the offending token, a `help:` line,
//! no cascade of secondary errors.

// Several cases use `SqliteConnection`.
#![cfg(feature = "sqlite")]

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    if cfg!(all(feature = "postgres", feature = "mysql")) {
        // These messages list types whose printed names depend on the enabled backends (the
        // backends' timestamp types; `String` or `std::string::String`), so their expected
        // output is the one with every backend, as CI and scripts/test.sh run.
        t.compile_fail("tests/ui/fail-all-backends/*.rs");
    } else {
        eprintln!("ui: tests/ui/fail-all-backends/ needs --all-features; skipped");
    }
}
