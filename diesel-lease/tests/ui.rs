//! Compile-fail and compile-pass tests of `#[derive(Claimable)]`: every error message the derive
//! can produce has a case under `tests/ui/fail/` with the expected compiler output beside it.
//!
//! The expected output depends on the rustc version and on the enabled backend features (the
//! "types that implement" notes list the backends' timestamp types), so the cases are checked
//! with the default feature set only. Regenerate with `TRYBUILD=overwrite cargo test -p
//! diesel-lease --test ui` and review every changed `.stderr` as a user would read it.

#[test]
fn ui() {
    if cfg!(any(feature = "postgres", feature = "mysql")) {
        eprintln!("ui: the expected compiler output is for the default features (sqlite only); skipped");
        return;
    }
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
