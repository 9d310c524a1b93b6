//! Real OS processes: a SIGKILLed holder, and 1,000 contended grants from 4 processes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use diesel_lease::lease::Lease;

use super::support::{batch, rows};
use crate::common::{pick, worker_bin, TestBackend, TestDb};

pub(crate) fn spawn<B: TestBackend>(db: &TestDb<B>, args: &[&str]) -> Child {
    Command::new(worker_bin("lease-worker"))
        .arg(B::NAME)
        .arg(&db.url)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn lease-worker")
}

/// The first line the worker prints.
pub(crate) fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read worker output");
    line.trim().to_string()
}

fn killed_holder_is_taken_over_only_after_expiry<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut holder = spawn(db, &["hold", "job", "3000"]);
    let line = first_line(&mut holder);
    let held_token: i64 = line
        .strip_prefix("ACQUIRED ")
        .expect(&line)
        .parse()
        .unwrap();
    holder.kill().expect("SIGKILL the holder");
    holder.wait().unwrap();

    let mut c = db.conn();
    let record = Lease::inspect(&mut c, "job").unwrap().unwrap();
    assert_eq!(record.token.get(), held_token);
    if record.is_held() {
        // Dead, but its lease has not run out: nobody may take it yet.
        assert!(Lease::try_acquire(&mut c, "job", &super::opts(1_000))
            .unwrap()
            .is_none());
    }
    let mut taker = spawn(db, &["take", "job", "1000", "30000"]);
    let line = first_line(&mut taker);
    assert!(taker.wait().unwrap().success());
    let mut parts = line.strip_prefix("ACQUIRED ").expect(&line).split(' ');
    let token: i64 = parts.next().unwrap().parse().unwrap();
    let acquired_at: i64 = parts.next().unwrap().parse().unwrap();
    assert!(token > held_token, "the new holder's token is larger");
    assert!(
        acquired_at >= record.expires_at_micros,
        "taken over only after expiry"
    );
}

fn tokens_strictly_increase_across_processes<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    batch(
        &mut c,
        pick::<B>(
            "CREATE TABLE grants (seq BIGSERIAL PRIMARY KEY, token BIGINT NOT NULL, pid BIGINT NOT NULL)",
            "CREATE TABLE grants (seq INTEGER PRIMARY KEY AUTOINCREMENT, token BIGINT NOT NULL, pid BIGINT NOT NULL)",
            "CREATE TABLE grants (seq BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT NOT NULL, pid BIGINT NOT NULL)",
        ),
    );
    const PROCESSES: usize = 4;
    const EACH: usize = 250;
    let mut workers: Vec<Child> = (0..PROCESSES)
        .map(|_| spawn(db, &["contend", "hot", &EACH.to_string()]))
        .collect();
    for w in &mut workers {
        assert_eq!(first_line(w), "DONE");
        assert!(w.wait().unwrap().success());
    }
    // Grants are logged while the lease is held, so the log order is the grant order.
    let log = rows(
        &mut c,
        "SELECT token AS a, pid AS b, seq AS c FROM grants ORDER BY seq",
        &[],
    );
    assert_eq!(log.len(), PROCESSES * EACH);
    let tokens: Vec<i64> = log.iter().map(|r| r.a).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens strictly increase"
    );
    assert_eq!(tokens, (1..=(PROCESSES * EACH) as i64).collect::<Vec<_>>());
    let pids: std::collections::BTreeSet<i64> = log.iter().map(|r| r.b).collect();
    assert_eq!(pids.len(), PROCESSES);
}

/// A guard dropped just before its process exits: the release was handed to the keeper, whose
/// thread ends with the process. Without a flush, the lease is either released already or left
/// to its ttl — never held past it (its keep-alive died too). With
/// `pool::flush_releases` before exiting, it is released, and free at once.
fn a_drop_at_exit_is_released_when_flushed_and_never_outlives_its_ttl<B: TestBackend>(
    db: &TestDb<B>,
) {
    db.migrate();
    const TTL_MS: i64 = 3_000;
    let mut c = db.conn();
    for (name, then) in [("exit-flushed", "flush"), ("exit-at-once", "exit")] {
        let child = spawn(db, &["drop-and-exit", name, &TTL_MS.to_string(), then]);
        // Read after the exit, all at once (the two lines may come in one read).
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let out = String::from_utf8(out.stdout).unwrap();
        let mut lines = out.lines();
        let line = lines.next().unwrap_or_default();
        let token: i64 = line.strip_prefix("ACQUIRED ").expect(line).parse().unwrap();
        if then == "flush" {
            assert_eq!(lines.next(), Some("FLUSHED true"));
        }
        let record = Lease::inspect(&mut c, name).unwrap().expect("granted once");
        assert_eq!(record.token.get(), token);
        if then == "flush" {
            assert!(record.is_released(), "flushed before exit: {record:?}");
            let next = Lease::try_acquire(&mut c, name, &super::opts(1_000)).unwrap();
            assert!(next.expect("free at once").token().get() > token);
        } else {
            // Released in time, or left: then it runs out at its ttl from the grant (the grant
            // reads the clock twice, microseconds apart; a keep-alive would have moved it a
            // third of the ttl and more).
            assert!(
                record.is_released()
                    || record.expires_at_micros
                        < record.acquired_at_micros + (TTL_MS + TTL_MS / 3) * 1_000,
                "a lease dropped at exit outlived its ttl: {record:?}"
            );
            let mut taker = spawn(db, &["take", name, "1000", "30000"]);
            let line = first_line(&mut taker);
            assert!(taker.wait().unwrap().success());
            let taken: i64 = line
                .strip_prefix("ACQUIRED ")
                .expect(&line)
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(taken > token);
        }
    }
}

backend_tests!(
    a_drop_at_exit_is_released_when_flushed_and_never_outlives_its_ttl,
    killed_holder_is_taken_over_only_after_expiry,
    tokens_strictly_increase_across_processes,
);
