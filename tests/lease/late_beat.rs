//! A keep-alive extension that reaches the database after the release changes nothing.
//!
//! The beat is held back between the pool and the database (`common::holdback`, in front of a
//! real pool, plays the slow link), so the release, on another connection, gets there first.

use diesel_lease::lease::{Lease, LeaseGuard};
use diesel_lease::prelude::*;
use diesel_lease::LostReason;

use super::{ms, opts};
use crate::common::holdback::{Holdback, Phase};
use crate::common::{TestBackend, TestDb};

/// A keep-alive holder with `at_least_for` releases while its beat is on its way: the release
/// leaves the lease held until `acquired_at + at_least_for`, and the beat, sent before the
/// release and landing after it, used to find the grant still valid by token and expiry and push
/// the expiry a whole ttl past the landing, so other nodes skipped the job that much longer. A
/// released grant matches no extension now: the expiry is the release's. The holder, which
/// released, is not told it lost, and nothing reports a loss.
fn a_keep_alive_extension_landing_after_the_release_changes_nothing<B: TestBackend>(
    db: &TestDb<B>,
) {
    let warnings = crate::ops::tracing::warnings();
    db.migrate();
    // Its own name per backend: the suite's WARN capture is shared by every test.
    let name = format!("late-beat-{}", B::NAME);
    let source = Holdback::new(db.pool(4));
    // Held 12 s at least (the whole ttl); the first beat comes 4 s in.
    let options = opts(12_000).at_least_for(ms(12_000)).keep_alive(true);
    let guard = LeaseGuard::try_acquire(&source, &name, &options)
        .unwrap()
        .expect("free");
    source.set(Phase::Armed);
    assert_eq!(
        source.wait_for(ms(15_000), |p| p == Phase::Held),
        Some(Phase::Held),
        "the keep-alive's beat never came"
    );
    // The release stops the keep-alive (its wait for the held beat runs out) and releases on
    // another connection of the pool.
    let signal = guard.lost_signal();
    assert!(
        guard.release().expect("released").was_held(),
        "it was still held"
    );
    let mut watcher = db.conn();
    let released = Lease::inspect(&mut watcher, &name).unwrap().unwrap();
    assert!(released.released_at_micros.is_some(), "{released:?}");
    assert!(
        released.expires_at_micros >= released.acquired_at_micros + 12_000_000,
        "a release keeps the lease until at_least_for ends: {released:?}"
    );

    source.set(Phase::Let);
    assert_eq!(
        source.wait_for(ms(30_000), |p| p == Phase::Landed),
        Some(Phase::Landed),
        "the held beat never ran"
    );
    // Landed about 6 s before at_least_for runs out, so the grant is unexpired by the database's
    // clock: without the release's mark the beat would match it and move the expiry. (A machine
    // so slow that it landed after would make this pass either way, never fail.)
    let after = Lease::inspect(&mut watcher, &name).unwrap().unwrap();
    assert_eq!(
        (
            after.token,
            after.expires_at_micros,
            after.released_at_micros
        ),
        (
            released.token,
            released.expires_at_micros,
            released.released_at_micros
        ),
        "the late beat moved the released lease: {after:?}"
    );
    // The beat found no grant to extend; the holder's released state stays, and the loss
    // report is skipped: it would have been emitted before the beat's loan ended (`Landed`).
    assert_eq!(signal.lost_reason(), Some(LostReason::Released));
    let text = warnings.text();
    let reported = text
        .lines()
        .find(|l| l.contains(&name) && l.contains("lost"));
    assert_eq!(reported, None, "a loss reported after the release");
}

backend_tests!(a_keep_alive_extension_landing_after_the_release_changes_nothing);
