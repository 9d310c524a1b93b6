//! Fencing in practice: a paused holder's late write is rejected by the protected resource.

use diesel_lease::lease;

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

    let mut paused = lease::try_acquire(&mut a, "resource", &opts(100))
        .unwrap()
        .expect("free");
    // … the holder pauses past its ttl; the lease is granted to another node meanwhile.
    std::thread::sleep(ms(300));
    let mut next = lease::try_acquire(&mut b, "resource", &opts(10_000))
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
        !paused.release(&mut a).unwrap(),
        "a lost lease's release reports the loss"
    );
    next.release(&mut b).unwrap();
}

/// A lease of a minute extended to five seconds is still held (its safety margin is that of the
/// new ttl, half a second, not the minute's six seconds, which made it lost at once), and the
/// database agrees; extended back to a minute it is held too.
fn a_lease_extended_to_a_shorter_ttl_is_still_held<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut conn = db.conn();
    let mut held = lease::try_acquire(&mut conn, "shorter", &opts(60_000))
        .unwrap()
        .expect("free");
    held.extend(&mut conn, ms(5_000)).unwrap();
    held.ensure_held().expect("held after extending to 5 s");
    assert!(held.confirm_held(&mut conn).unwrap());
    held.extend(&mut conn, ms(60_000)).unwrap();
    held.ensure_held()
        .expect("held after extending back to a minute");
    assert!(held.release(&mut conn).unwrap());
}

backend_tests!(
    late_write_of_an_expired_holder_is_rejected,
    a_lease_extended_to_a_shorter_ttl_is_still_held
);
