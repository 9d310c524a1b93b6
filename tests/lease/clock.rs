//! Only the database clock decides lease times: the client binds durations, never instants.

use std::time::{SystemTime, UNIX_EPOCH};

use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_lease::OwnerId;

use super::ms;
use crate::common::{pick, TestBackend, TestDb};

fn acquire_sql_uses_the_database_clock_and_binds_only_durations<B: TestBackend>(db: &TestDb<B>) {
    let _ = db;
    let options = LeaseOptions::new(ms(5_000)).owner(OwnerId::new("node-a").unwrap());
    let sql = Lease::acquire_sql::<B::Conn>("report", &options).unwrap();
    let clock = pick::<B>("clock_timestamp()", "julianday('now')", "UTC_TIMESTAMP(6)");
    assert!(sql.contains(clock), "{sql}");
    // Every integer bound is the first token (1), the ttl in µs or the token ceiling
    // (i64::MAX, past which no grant is made); no instant from this process's clock appears
    // anywhere in the statement or its binds.
    let client_now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for part in sql.split("-- binds: ").skip(1) {
        let binds = part.split(";\n").next().unwrap();
        let numbers = binds
            .split(|c: char| !c.is_ascii_digit())
            .filter(|n| !n.is_empty())
            .map(|n| n.parse::<i64>().unwrap());
        for n in numbers {
            assert!(
                [1, 5_000_000, i64::MAX].contains(&n),
                "unexpected bound number {n} in {sql}"
            );
        }
    }
    for scale in [1, 1_000, 1_000_000] {
        let prefix = (client_now_s * scale).to_string()[..6].to_string();
        assert!(
            !sql.contains(&prefix),
            "a client timestamp leaked into {sql}"
        );
    }
}

fn lease_times_come_from_the_database_clock<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    let _probe = Lease::try_acquire(&mut c, "probe", &LeaseOptions::new(ms(60_000))).unwrap();
    let before = Lease::inspect(&mut c, "probe")
        .unwrap()
        .unwrap()
        .read_at_micros;
    let _held = Lease::try_acquire(&mut c, "job", &LeaseOptions::new(ms(5_000)))
        .unwrap()
        .unwrap();
    let record = Lease::inspect(&mut c, "job").unwrap().unwrap();
    assert!(
        before <= record.acquired_at_micros && record.acquired_at_micros <= record.read_at_micros
    );
    let span = record.expires_at_micros - record.acquired_at_micros;
    // PostgreSQL's clock_timestamp() advances between the two reads of one statement.
    assert!((5_000_000..5_100_000).contains(&span), "{span}");
}

backend_tests!(
    acquire_sql_uses_the_database_clock_and_binds_only_durations,
    lease_times_come_from_the_database_clock,
);
