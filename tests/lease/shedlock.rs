//! The cases of ShedLock's shared lock-provider suite, on diesel-lease's leases.

use std::sync::Arc;

use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_lease::{Error, OwnerId};

use super::support::{batch, exec, rows};
use super::{ms, opts};
use crate::common::history::History;
use crate::common::{pick, TestBackend, TestDb};

fn creates_a_lock<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    let held = Lease::try_acquire(&mut c, "job", &opts(10_000))
        .unwrap()
        .expect("free");
    assert_eq!(held.token().get(), 1);
    let record = Lease::inspect(&mut c, "job").unwrap().expect("row");
    assert!(record.is_held());
    assert_eq!(record.holder, OwnerId::process_default().as_str());
    assert_eq!(record.token, held.token());
    assert!(held.confirm_held(&mut c).unwrap());
}

fn second_acquire_of_held_lock_fails<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let (mut a, mut b) = (db.conn(), db.conn());
    let _held = Lease::try_acquire(&mut a, "job", &opts(10_000))
        .unwrap()
        .expect("free");
    let other = opts(10_000).owner(OwnerId::new("someone-else").unwrap());
    assert!(Lease::try_acquire(&mut b, "job", &other).unwrap().is_none());
    // Not re-entrant either: the same owner is refused too.
    assert!(Lease::try_acquire(&mut a, "job", &opts(10_000))
        .unwrap()
        .is_none());
}

fn two_names_are_independent<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    let a = Lease::try_acquire(&mut c, "job-a", &opts(10_000))
        .unwrap()
        .expect("a free");
    let b = Lease::try_acquire(&mut c, "job-b", &opts(10_000))
        .unwrap()
        .expect("b free");
    assert_eq!((a.token().get(), b.token().get()), (1, 1));
}

fn lock_twice_in_a_row_after_release<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    let mut tokens = vec![];
    for _ in 0..3 {
        let mut held = Lease::try_acquire(&mut c, "job", &opts(10_000))
            .unwrap()
            .expect("free");
        tokens.push(held.token().get());
        let _ = held.release(&mut c).unwrap();
    }
    assert_eq!(tokens, [1, 2, 3]);
}

fn expired_lock_can_be_taken<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let (mut a, mut b) = (db.conn(), db.conn());
    let first = Lease::try_acquire(&mut a, "job", &opts(100))
        .unwrap()
        .expect("free");
    let expires = Lease::inspect(&mut a, "job")
        .unwrap()
        .unwrap()
        .expires_at_micros;
    std::thread::sleep(ms(300));
    assert!(!Lease::inspect(&mut b, "job").unwrap().unwrap().is_held());
    let second = Lease::try_acquire(&mut b, "job", &opts(10_000))
        .unwrap()
        .expect("expired");
    assert!(second.token() > first.token());
    let record = Lease::inspect(&mut b, "job").unwrap().unwrap();
    assert!(
        record.acquired_at_micros >= expires,
        "taken over only after expiry"
    );
}

fn lock_right_after_unlock<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let (mut a, mut b) = (db.conn(), db.conn());
    let mut first = Lease::try_acquire(&mut a, "job", &opts(60_000))
        .unwrap()
        .expect("free");
    let _ = first.release(&mut a).unwrap();
    let second = Lease::try_acquire(&mut b, "job", &opts(60_000)).unwrap();
    assert_eq!(second.map(|l| l.token().get()), Some(2));
}

fn at_least_for_keeps_it_held_after_release<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let (mut a, mut b) = (db.conn(), db.conn());
    let at_least = 2_000_000;
    let options = opts(10_000).at_least_for(ms(2_000));
    let mut first = Lease::try_acquire(&mut a, "job", &options)
        .unwrap()
        .expect("free");
    let acquired = Lease::inspect(&mut a, "job")
        .unwrap()
        .unwrap()
        .acquired_at_micros;
    let _ = first.release(&mut a).unwrap();
    let record = Lease::inspect(&mut b, "job").unwrap().unwrap();
    // Released before at_least_for ran out (database clock): held until acquired_at + at_least_for.
    if record.read_at_micros < acquired + at_least {
        assert_eq!(record.expires_at_micros, acquired + at_least);
        assert!(Lease::try_acquire(&mut b, "job", &opts(10_000))
            .unwrap()
            .is_none());
    }
    let second = Lease::acquire(&mut b, "job", &opts(10_000), ms(20_000)).unwrap();
    let record = Lease::inspect(&mut b, "job").unwrap().unwrap();
    assert!(record.acquired_at_micros >= acquired + at_least);
    assert_eq!(second.token().get(), 2);
}

fn extend_several_times<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let (mut a, mut b) = (db.conn(), db.conn());
    let mut held = Lease::try_acquire(&mut a, "job", &opts(5_000))
        .unwrap()
        .expect("free");
    let mut last = Lease::inspect(&mut a, "job")
        .unwrap()
        .unwrap()
        .expires_at_micros;
    for _ in 0..5 {
        std::thread::sleep(ms(20));
        held.extend(&mut a, ms(5_000)).unwrap();
        let now = Lease::inspect(&mut a, "job")
            .unwrap()
            .unwrap()
            .expires_at_micros;
        assert!(now > last, "each extension moves the expiry forward");
        last = now;
        assert!(Lease::try_acquire(&mut b, "job", &opts(5_000))
            .unwrap()
            .is_none());
    }
    assert!(held.confirm_held(&mut a).unwrap());
    let _ = held.release(&mut a).unwrap();
    assert!(Lease::try_acquire(&mut b, "job", &opts(5_000))
        .unwrap()
        .is_some());
}

fn cannot_extend_unlocked_lock<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    let mut held = Lease::try_acquire(&mut c, "job", &opts(5_000))
        .unwrap()
        .expect("free");
    let _ = held.release(&mut c).unwrap();
    assert!(matches!(
        held.extend(&mut c, ms(5_000)),
        Err(Error::LeaseNotHeld { .. })
    ));
    assert!(matches!(
        held.release(&mut c),
        Err(Error::LeaseNotHeld { .. })
    ));
    assert!(!held.confirm_held(&mut c).unwrap());
}

fn cannot_extend_expired_lock<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    let mut held = Lease::try_acquire(&mut c, "job", &opts(100))
        .unwrap()
        .expect("free");
    std::thread::sleep(ms(300));
    assert!(!held.confirm_held(&mut c).unwrap());
    match held.extend(&mut c, ms(5_000)) {
        Err(Error::LeaseLost {
            holder: None,
            holder_token: None,
            ..
        }) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(held.is_lost());
    assert!(matches!(held.ensure_held(), Err(Error::LeaseLost { .. })));
    assert!(
        held.release(&mut c).unwrap().was_lost(),
        "a lost lease's release reports the loss"
    );
}

fn cannot_extend_or_release_after_losing_it<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let (mut a, mut b) = (db.conn(), db.conn());
    let mut first = Lease::try_acquire(&mut a, "job", &opts(100))
        .unwrap()
        .expect("free");
    std::thread::sleep(ms(300));
    let mut second = Lease::try_acquire(&mut b, "job", &opts(10_000))
        .unwrap()
        .expect("expired");
    match first.extend(&mut a, ms(5_000)) {
        Err(Error::LeaseLost {
            token,
            holder_token,
            holder,
            ..
        }) => {
            assert_eq!(token, first.token());
            assert_eq!(holder_token, Some(second.token()));
            assert_eq!(holder.as_deref(), Some(second.holder().as_str()));
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(
        first.release(&mut a).unwrap().was_lost(),
        "a lost lease's release reports the loss"
    );
    // The loser's calls changed nothing for the new holder.
    assert!(second.confirm_held(&mut b).unwrap());
    let _ = second.release(&mut b).unwrap();
}

/// 8 threads, 2 names, a read-sleep-write counter per name guarded only by the lease. Each
/// thread records its grants and their ends: tokens rise per name, and no name has two holders.
fn fuzz_counter_under_lease_is_exact<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    batch(
        &mut c,
        pick::<B>(
            "CREATE TABLE counters (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
            "CREATE TABLE counters (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
            "CREATE TABLE counters (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
        ),
    );
    exec(
        &mut c,
        "INSERT INTO counters (id, n) VALUES (0, 0), (1, 0)",
        &[],
    );
    const THREADS: i64 = 8;
    const ROUNDS: i64 = 12;
    let db = Arc::new(db.url.clone());
    let history = Arc::new(History::default());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let url = Arc::clone(&db);
            let history = Arc::clone(&history);
            std::thread::spawn(move || {
                let holder = format!("thread-{t}");
                let mut c = super::connect::<B>(&url);
                let options = LeaseOptions::new(ms(30_000)).poll(ms(1), ms(20));
                for _ in 0..ROUNDS {
                    let id = t % 2;
                    let name = format!("fuzz-{id}");
                    let mut held = Lease::acquire(&mut c, &name, &options, ms(60_000)).unwrap();
                    history.granted(&name, held.token().get(), &holder);
                    let n = rows(
                        &mut c,
                        "SELECT n AS a, id AS b, id AS c FROM counters WHERE id = ?",
                        &[id],
                    )[0]
                    .a;
                    std::thread::sleep(ms(2));
                    exec(
                        &mut c,
                        "UPDATE counters SET n = ? WHERE id = ?",
                        &[n + 1, id],
                    );
                    history.grant_ended(&name, &holder);
                    let _ = held.release(&mut c).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    history.check_grants();
    let counts = rows(
        &mut c,
        "SELECT id AS a, n AS b, id AS c FROM counters ORDER BY id",
        &[],
    );
    let per_name = THREADS / 2 * ROUNDS;
    assert_eq!(
        counts.iter().map(|r| r.b).collect::<Vec<_>>(),
        [per_name, per_name]
    );
    // Every grant got its own token: the last token of each name is its grant count.
    for id in 0..2 {
        let record = Lease::inspect(&mut c, &format!("fuzz-{id}"))
            .unwrap()
            .unwrap();
        assert_eq!(record.token.get(), per_name);
    }
}

backend_tests!(
    creates_a_lock,
    second_acquire_of_held_lock_fails,
    two_names_are_independent,
    lock_twice_in_a_row_after_release,
    expired_lock_can_be_taken,
    lock_right_after_unlock,
    at_least_for_keeps_it_held_after_release,
    extend_several_times,
    cannot_extend_unlocked_lock,
    cannot_extend_expired_lock,
    cannot_extend_or_release_after_losing_it,
    fuzz_counter_under_lease_is_exact,
);
