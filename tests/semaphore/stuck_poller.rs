//! This process's waiters for one resource share a poller (`semaphore/gate.rs`); a poller whose
//! step stopped coming back (held back between the pool and the database by
//! `common::holdback`, as a silent link would) must not leave the other members' requests to
//! expire.

use std::time::Duration;

use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::{Error, OwnerId};

use super::{queue, setup, wait_until, LONG};
use crate::common::holdback::{Holdback, Phase};
use crate::common::{TestBackend, TestDb};

/// Waiters A (the poller: lowest ticket) and B (a member of its gate) queue behind a holder.
/// A's next step is held back. B used to wait on the gate without a query until A came back, so
/// B's request expired with A's and B timed out, though the holder had left. Now B looks in
/// A's place once A is two poll intervals overdue, keeping its own request alive: A's request
/// expires, and B gets the permit while A is still stuck. When A's step comes back, A finds its
/// request gone, queues again, and gets the permit after B.
fn a_member_behind_a_stuck_poller_keeps_its_place_and_gets_the_permit<B: TestBackend>(
    db: &TestDb<B>,
) {
    let pool = setup(db, 6);
    let source = Holdback::new(pool.clone());
    let ttl = Duration::from_millis(1500);
    let waiter = Semaphore::mutex("stuck")
        .with_ttl(ttl)
        .with_max_poll_interval(Duration::from_millis(100));
    // The holder, on a connection of its own (no heartbeat on the held-back source).
    let mut holder_conn = db.conn();
    let holder = Semaphore::mutex("stuck")
        .with_ttl(LONG)
        .with_owner(OwnerId::new("holder").unwrap())
        .acquire_on(&mut holder_conn, LONG)
        .unwrap();

    std::thread::scope(|s| {
        let a = s.spawn(|| waiter.acquire(&source, Duration::from_secs(120)));
        wait_until("A queued", || queue::<B>(&pool, "stuck").len() == 2);
        let b = s.spawn(|| waiter.acquire(&source, Duration::from_secs(20)));
        wait_until("B queued", || queue::<B>(&pool, "stuck").len() == 3);
        // The next loan is A's: B, a member, does not poll while A does.
        source.set(Phase::Armed);
        assert_eq!(
            source.wait_for(Duration::from_secs(10), |p| p == Phase::Held),
            Some(Phase::Held),
            "the poller never took another connection"
        );
        assert!(holder.release(&mut holder_conn).unwrap().was_held());

        let b = b
            .join()
            .unwrap()
            .expect("B gets the permit while A is stuck");
        assert_eq!(source.wait_for(Duration::ZERO, |_| true), Some(Phase::Held));
        let q = queue::<B>(&pool, "stuck");
        let granted: Vec<_> = q.iter().filter(|r| r.granted).collect();
        assert_eq!(granted.len(), 1, "{q:?}");
        assert_eq!(granted[0].ticket, b.ticket(), "{q:?}");

        source.set(Phase::Let);
        let after_b = {
            wait_until("A queued again", || queue::<B>(&pool, "stuck").len() == 2);
            let _ = b.release().unwrap();
            a.join().unwrap().expect("A gets the permit after B")
        };
        let q = queue::<B>(&pool, "stuck");
        assert_eq!(q.len(), 1, "{q:?}");
        assert_eq!(q[0].ticket, after_b.ticket(), "{q:?}");
        let _ = after_b.release().unwrap();
    });
}

/// A waiter's look, which queues its request, is held back past the waiter's deadline: the
/// waiter returns its timeout, with nothing of its own to take back yet. When the look lands
/// later, the request it queued is taken back out at once. It used to stay in line for its ttl
/// (here a minute), and once at the head it would have held the permit with nobody there.
fn a_request_queued_after_its_waiter_gave_up_is_taken_back<B: TestBackend>(db: &TestDb<B>) {
    let pool = setup(db, 6);
    let source = Holdback::new(pool.clone());
    let mut holder_conn = db.conn();
    let holder = Semaphore::mutex("late")
        .with_ttl(LONG)
        .with_owner(OwnerId::new("holder").unwrap())
        .acquire_on(&mut holder_conn, LONG)
        .unwrap();
    let waiter = Semaphore::mutex("late")
        .with_ttl(Duration::from_secs(60))
        .with_drop_wait(Duration::from_millis(300));
    source.set(Phase::Armed);
    let gave_up = waiter.acquire(&source, Duration::from_millis(300));
    assert!(
        matches!(gave_up, Err(Error::Timeout { .. })),
        "{:?}",
        gave_up.map(|p| p.ticket())
    );
    assert_eq!(
        source.wait_for(Duration::ZERO, |_| true),
        Some(Phase::Held),
        "the look is still held back"
    );
    assert_eq!(queue::<B>(&pool, "late").len(), 1, "nothing queued yet");
    source.set(Phase::Let);
    assert_eq!(
        source.wait_for(LONG, |p| p == Phase::Landed),
        Some(Phase::Landed)
    );
    wait_until("the late request is taken back", || {
        queue::<B>(&pool, "late").len() == 1
    });
    assert_eq!(queue::<B>(&pool, "late")[0].ticket, holder.ticket());
    // The next caller is not held up by it once the holder leaves.
    assert!(holder.release(&mut holder_conn).unwrap().was_held());
    let next = Semaphore::mutex("late")
        .try_acquire(&pool)
        .unwrap()
        .expect("free once the holder left");
    let _ = next.release().unwrap();
}

backend_tests!(
    a_member_behind_a_stuck_poller_keeps_its_place_and_gets_the_permit,
    a_request_queued_after_its_waiter_gave_up_is_taken_back,
);
