//! Seed 000's farm: 5 processes run the same periodic job loop; it runs once per interval, and
//! keeps running when the process that ran it last is killed.

use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

use super::processes::{first_line, spawn};
use super::support::{batch, rows, Row3};
use crate::common::{pick, TestBackend, TestDb};

const INTERVAL_MS: i64 = 400;

fn runs<B: TestBackend>(c: &mut B::Conn) -> Vec<Row3> {
    rows(
        c,
        "SELECT due_at AS a, token AS b, pid AS c FROM farm_runs ORDER BY due_at",
        &[],
    )
}

fn wait_for_runs<B: TestBackend>(c: &mut B::Conn, at_least: usize) -> Vec<Row3> {
    let start = Instant::now();
    loop {
        let r = runs::<B>(c);
        if r.len() >= at_least {
            return r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the farm stopped running: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn farm_runs_each_occurrence_once<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let mut c = db.conn();
    batch(
        &mut c,
        pick::<B>(
            "CREATE TABLE farm_runs (due_at BIGINT NOT NULL, token BIGINT NOT NULL, pid BIGINT NOT NULL)",
            "CREATE TABLE farm_runs (due_at BIGINT NOT NULL, token BIGINT NOT NULL, pid BIGINT NOT NULL)",
            "CREATE TABLE farm_runs (due_at BIGINT NOT NULL, token BIGINT NOT NULL, pid BIGINT NOT NULL)",
        ),
    );
    // Nodes start at different times, as servers of a farm do.
    let mut nodes: Vec<Child> = Vec::new();
    for _ in 0..5 {
        let mut node = spawn(db, &["farm", "report", &INTERVAL_MS.to_string(), "200"]);
        assert_eq!(first_line(&mut node), "STARTED");
        nodes.push(node);
        std::thread::sleep(Duration::from_millis(130));
    }
    let before_kill = wait_for_runs::<B>(&mut c, 5);
    let last_runner = before_kill.last().unwrap().c;
    let victim = nodes
        .iter()
        .position(|n| i64::from(n.id()) == last_runner)
        .expect("a node ran it");
    let mut victim = nodes.remove(victim);
    victim.kill().expect("SIGKILL the last runner");
    victim.wait().unwrap();
    let killed_after = runs::<B>(&mut c).len();
    let all = wait_for_runs::<B>(&mut c, killed_after + 6);
    for mut n in nodes {
        n.kill().unwrap();
        n.wait().unwrap();
    }
    let all = {
        let final_runs = runs::<B>(&mut c);
        assert!(final_runs.len() >= all.len());
        final_runs
    };
    assert!(all.len() >= 11, "at least 10 intervals: {all:?}");
    let dues: BTreeSet<i64> = all.iter().map(|r| r.a).collect();
    assert_eq!(dues.len(), all.len(), "an occurrence ran twice: {all:?}");
    for w in all.windows(2) {
        assert_eq!(
            w[1].a - w[0].a,
            INTERVAL_MS * 1_000,
            "exactly one run per interval: {all:?}"
        );
        assert!(w[1].b > w[0].b, "tokens increase with the schedule");
    }
    assert!(
        all[killed_after..].iter().all(|r| r.c != last_runner),
        "a killed node ran: {all:?}"
    );
}

backend_tests!(farm_runs_each_occurrence_once);
