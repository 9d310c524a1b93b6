//! Bad input is refused with typed errors before anything reaches the lock.

use diesel_lease::lease::schedule::every;
use diesel_lease::lease::{self, Lease, LeaseGuard};
use diesel_lease::{Error, InvalidInput};

use super::{ms, opts};
use crate::common::{TestBackend, TestDb};

fn invalid(r: Result<impl std::fmt::Debug, Error>) -> InvalidInput {
    match r {
        Err(Error::InvalidInput(e)) => e,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

fn bad_names_and_durations_are_typed_errors<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    assert!(matches!(
        invalid(Lease::try_acquire(&mut c, "", &opts(1_000))),
        InvalidInput::EmptyName { what: "lease" }
    ));
    let long = "x".repeat(256);
    assert!(matches!(
        invalid(Lease::try_acquire(&mut c, &long, &opts(1_000))),
        InvalidInput::NameTooLong {
            len: 256,
            max: 255,
            ..
        }
    ));
    // MySQL/MariaDB compare names padded with spaces: "job " would be "job" there, so it is
    // refused everywhere, before any SQL (a leading space is kept as given).
    let mut report = Lease::try_acquire(&mut c, "report", &opts(1_000))
        .unwrap()
        .expect("free");
    assert!(matches!(
        invalid(Lease::try_acquire(&mut c, "report ", &opts(1_000))),
        InvalidInput::TrailingSpace { what: "lease", ref name } if name == "report "
    ));
    // Held while "report" is: a lease of its own.
    let mut other = Lease::try_acquire(&mut c, " report", &opts(1_000))
        .unwrap()
        .expect("a name of its own");
    let _ = report.release(&mut c).unwrap();
    let _ = other.release(&mut c).unwrap();
    // 255 bytes fit the column on every backend, multi-byte characters included.
    let fits = format!("{}{}", "é".repeat(100), "y".repeat(55));
    assert_eq!(fits.len(), 255);
    let held = Lease::try_acquire(&mut c, &fits, &opts(1_000))
        .unwrap()
        .expect("free");
    assert_eq!(
        Lease::inspect(&mut c, &fits).unwrap().unwrap().token,
        held.token()
    );
    assert!(matches!(
        invalid(Lease::try_acquire(&mut c, "job", &opts(0))),
        InvalidInput::ZeroDuration { what: "ttl", .. }
    ));
    assert!(matches!(
        invalid(Lease::try_acquire(
            &mut c,
            "job",
            &opts(1_000).at_least_for(ms(2_000))
        )),
        InvalidInput::AtLeastExceedsTtl { .. }
    ));
    assert!(matches!(
        invalid(Lease::acquire(&mut c, "", &opts(1_000), ms(10))),
        InvalidInput::EmptyName { .. }
    ));
    let mut held = Lease::try_acquire(&mut c, "job", &opts(1_000))
        .unwrap()
        .expect("free");
    assert!(matches!(
        invalid(held.extend(&mut c, ms(0))),
        InvalidInput::ZeroDuration { .. }
    ));
    let _ = held.release(&mut c).unwrap();
    // Releasing what you no longer hold.
    assert!(matches!(held.release(&mut c), Err(Error::LeaseNotHeld { ref name }) if name == "job"));
    let pool = db.pool(2);
    assert!(matches!(
        invalid(LeaseGuard::try_acquire(&pool, "", &opts(1_000))),
        InvalidInput::EmptyName { .. }
    ));
    assert!(matches!(
        invalid(every(ms(0)).run_if_due(&pool, "tick", |_| ())),
        InvalidInput::ZeroDuration {
            what: "interval",
            ..
        }
    ));
    // A wait that gives up is a typed timeout, and nothing is left held by it.
    let _held = Lease::try_acquire(&mut c, "busy", &opts(60_000))
        .unwrap()
        .expect("free");
    let mut other = db.conn();
    assert!(matches!(
        Lease::acquire(&mut other, "busy", &opts(1_000), ms(50)),
        Err(Error::Timeout { .. })
    ));
    // Inside the caller's transaction nothing is granted, extended or released.
    let in_tx = diesel::Connection::transaction(&mut other, |c| {
        Ok::<_, diesel::result::Error>((
            Lease::try_acquire(c, "tx", &opts(1_000)).map(|l| l.is_some()),
            Lease::acquire(c, "tx", &opts(1_000), ms(10)).map(|l| l.token()),
        ))
    })
    .unwrap();
    for outcome in [in_tx.0.map(|_| ()), in_tx.1.map(|_| ())] {
        assert!(matches!(
            outcome,
            Err(Error::Database(diesel::result::Error::AlreadyInTransaction))
        ));
    }
    assert!(Lease::inspect(&mut c, "tx").unwrap().is_none());
    let mut outside = Lease::try_acquire(&mut c, "tx", &opts(1_000))
        .unwrap()
        .expect("free");
    let released = diesel::Connection::transaction(&mut c, |c| {
        Ok::<_, diesel::result::Error>(outside.release(c).map_err(|e| e.to_string()))
    })
    .unwrap();
    assert!(released.unwrap_err().contains("transaction"));
    let _ = outside.release(&mut c).unwrap();
    // Error messages say what to do.
    let msg = Error::from(InvalidInput::EmptyName { what: "lease" }).to_string();
    assert!(msg.contains("non-empty name"), "{msg}");
}

/// A ttl whose `now + ttl` would overflow the database's 64-bit microsecond clock is refused
/// before the database sees it (it used to fail with "bigint out of range" on PostgreSQL and
/// MariaDB and be clamped on SQLite); a zero poll backoff is not a busy loop.
fn overflowing_durations_are_refused<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    let forever = std::time::Duration::from_secs(2_000 * 365 * 24 * 3600);
    assert!(matches!(
        invalid(Lease::try_acquire(
            &mut c,
            "job",
            &lease::LeaseOptions::new(forever)
        )),
        InvalidInput::DurationTooLong { .. }
    ));
    let _held = Lease::try_acquire(&mut c, "job", &opts(10_000))
        .unwrap()
        .expect("free");
    let polls = std::time::Instant::now();
    let zero_poll = opts(10_000).poll(ms(0), ms(0));
    assert!(matches!(
        Lease::acquire(&mut c, "job", &zero_poll, ms(100)),
        Err(Error::Timeout { .. })
    ));
    // At least half a millisecond between polls: at most ~200 polls in 100 ms, not thousands.
    assert!(polls.elapsed() >= ms(100));
}

/// A lease whose token reached `i64::MAX` is never granted again, with a typed error, and its
/// row is left as it was (on SQLite the token does not silently repeat or turn REAL).
fn the_last_fencing_token_is_refused<B: TestBackend>(db: &TestDb<B>) {
    use super::support::{batch, rows};
    db.migrate();
    let mut c = db.conn();
    let mut first = Lease::try_acquire(&mut c, "job", &opts(10_000))
        .unwrap()
        .expect("free");
    let _ = first.release(&mut c).unwrap();
    batch(
        &mut c,
        "UPDATE diesel_lease_leases SET token = 9223372036854775807, expires_at = 0",
    );
    assert!(matches!(
        Lease::try_acquire(&mut c, "job", &opts(10_000)),
        Err(Error::TokensExhausted { ref name }) if name == "job"
    ));
    // A waiting acquire, on a connection or through a pool, says so at its first refusal
    // instead of polling until its deadline and reporting a timeout.
    let waited = Lease::acquire(&mut c, "job", &opts(10_000), ms(30_000));
    assert!(
        matches!(waited, Err(Error::TokensExhausted { ref name }) if name == "job"),
        "{waited:?}"
    );
    let pool = db.pool(2);
    let guarded = diesel_lease::lease::LeaseGuard::acquire(&pool, "job", &opts(10_000), ms(30_000));
    assert!(
        matches!(guarded, Err(Error::TokensExhausted { ref name }) if name == "job"),
        "{:?}",
        guarded.err()
    );
    let token = rows(
        &mut c,
        "SELECT token AS a, token AS b, token AS c FROM diesel_lease_leases",
        &[],
    );
    assert_eq!(token[0].a, i64::MAX);
}

backend_tests!(
    bad_names_and_durations_are_typed_errors,
    overflowing_durations_are_refused,
    the_last_fencing_token_is_refused
);
