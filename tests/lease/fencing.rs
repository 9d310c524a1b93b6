//! Fencing in practice: a paused holder's late write is rejected by the protected resource.

use diesel_lease::lease::{self, Lease};

use super::support::{batch, exec, rows};
use super::{ms, opts};
use crate::common::{TestBackend, TestDb};

/// The write every holder makes: it lands only if no later token wrote before it.
fn fenced_write<C: diesel_lease::LeaseConnection>(c: &mut C, value: i64, token: i64) -> usize {
    exec(
        c,
        "UPDATE fenced_resource SET value = ?, last_token = ? WHERE id = 1 AND last_token < ?",
        &[value, token, token],
    )
}

fn late_write_of_an_expired_holder_is_rejected<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let (mut a, mut b) = (db.conn(), db.conn());
    batch(
        &mut a,
        "CREATE TABLE fenced_resource (id BIGINT PRIMARY KEY, value BIGINT NOT NULL, last_token BIGINT NOT NULL)",
    );
    exec(
        &mut a,
        "INSERT INTO fenced_resource (id, value, last_token) VALUES (1, 0, 0)",
        &[],
    );

    let mut paused = Lease::try_acquire(&mut a, "resource", &opts(100))
        .unwrap()
        .expect("free");
    // … the holder pauses past its ttl; the lease is granted to another node meanwhile.
    std::thread::sleep(ms(300));
    let mut next = Lease::try_acquire(&mut b, "resource", &opts(10_000))
        .unwrap()
        .expect("expired");
    assert!(next.token() > paused.token());
    assert_eq!(fenced_write(&mut b, 200, next.token().get()), 1);

    // The paused holder wakes up and writes with its old token: refused.
    assert_eq!(fenced_write(&mut a, 100, paused.token().get()), 0);
    let state = rows(
        &mut a,
        "SELECT value AS a, last_token AS b, id AS c FROM fenced_resource",
        &[],
    );
    assert_eq!((state[0].a, state[0].b), (200, next.token().get()));
    // And its lease calls report the loss instead of succeeding.
    assert!(
        paused.release(&mut a).unwrap().was_lost(),
        "a lost lease's release reports the loss"
    );
    let _ = next.release(&mut b).unwrap();
}

/// A lease of a minute extended to five seconds is still held (its safety margin is that of the
/// new ttl, half a second, not the minute's six seconds, which made it lost at once), and the
/// database agrees; extended back to a minute it is held too.
fn a_lease_extended_to_a_shorter_ttl_is_still_held<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut conn = db.conn();
    let mut held = Lease::try_acquire(&mut conn, "shorter", &opts(60_000))
        .unwrap()
        .expect("free");
    held.extend(&mut conn, ms(5_000)).unwrap();
    held.ensure_held().expect("held after extending to 5 s");
    assert!(held.confirm_held(&mut conn).unwrap());
    held.extend(&mut conn, ms(60_000)).unwrap();
    held.ensure_held()
        .expect("held after extending back to a minute");
    assert!(held.release(&mut conn).unwrap().was_held());
}

/// A grant of lease `late` for 500 ms whose expiry in the database is then moved a minute
/// later, so the window between the holder's local deadline and the database's expiry (the
/// safety margin, a tenth of the ttl) is wide enough for a test to act in; with the connection
/// it was granted on.
fn late_holder<B: TestBackend>(db: &TestDb<B>) -> (B::Conn, lease::Lease) {
    db.migrate();
    let mut conn = db.conn();
    let held = Lease::try_acquire(&mut conn, "late", &opts(500))
        .unwrap()
        .expect("free");
    let moved = exec(
        &mut conn,
        "UPDATE diesel_lease_leases SET expires_at = expires_at + 60000000 WHERE name = 'late'",
        &[],
    );
    assert_eq!(moved, 1);
    (conn, held)
}

fn expires_at<C: diesel_lease::LeaseConnection>(c: &mut C) -> i64 {
    let row = rows(
        c,
        "SELECT expires_at AS a, token AS b, token AS c FROM diesel_lease_leases WHERE name = 'late'",
        &[],
    );
    row[0].a
}

/// A holder past its local deadline counts itself lost, and an `extend` does not take that
/// back: it is refused with `LeaseLost` and writes nothing, although the database would still
/// have extended the grant (it returned `Ok` while `is_lost()` stayed true).
fn a_holder_past_its_local_deadline_cannot_extend<B: TestBackend>(db: &TestDb<B>) {
    let (mut conn, mut held) = late_holder(db);
    let before = expires_at(&mut conn);
    assert!(
        held.lost_signal().wait_timeout(ms(10_000)),
        "the local deadline passed"
    );
    let extended = held.extend(&mut conn, ms(60_000));
    assert!(
        matches!(extended, Err(diesel_lease::Error::LeaseLost { .. })),
        "{extended:?}"
    );
    assert!(held.is_lost());
    assert_eq!(
        expires_at(&mut conn),
        before,
        "the refused extension wrote nothing"
    );
}

/// An extension that reaches the database only after the holder's local deadline (here it
/// waits for another transaction's lock on the lease row) extends the grant there, but the
/// holder counts itself lost: it gets `LeaseLost`, and the grant goes back at once instead of
/// being held for the new ttl by a holder that stopped.
fn an_extension_that_lands_after_the_local_deadline_is_lost_and_gives_the_grant_back<
    B: TestBackend,
>(
    db: &TestDb<B>,
) {
    use diesel::connection::SimpleConnection;
    let (mut conn, mut held) = late_holder(db);
    let mut blocker = db.conn();
    let take = match B::KIND {
        diesel_lease::BackendKind::Sqlite => "BEGIN IMMEDIATE",
        _ => "BEGIN; SELECT name FROM diesel_lease_leases WHERE name = 'late' FOR UPDATE",
    };
    blocker.batch_execute(take).unwrap();
    let signal = held.lost_signal();
    let extended = std::thread::scope(|s| {
        s.spawn(move || {
            // Let go of the row only once the holder's local deadline has passed.
            assert!(signal.wait_timeout(ms(10_000)), "the local deadline passed");
            blocker.batch_execute("ROLLBACK").unwrap();
        });
        held.extend(&mut conn, ms(60_000))
    });
    assert!(
        matches!(extended, Err(diesel_lease::Error::LeaseLost { .. })),
        "{extended:?}"
    );
    assert!(held.is_lost());
    let next = Lease::try_acquire(&mut conn, "late", &opts(10_000)).unwrap();
    let next = next.expect("the extended grant was given back");
    assert!(next.token() > held.token());
}

backend_tests!(
    late_write_of_an_expired_holder_is_rejected,
    a_lease_extended_to_a_shorter_ttl_is_still_held,
    a_holder_past_its_local_deadline_cannot_extend,
    an_extension_that_lands_after_the_local_deadline_is_lost_and_gives_the_grant_back
);
