//! The operator tool, run as a process against each backend: a worker's lease shows up, a forced
//! release fences the worker, a forced ticket release takes a permit away, claims are counted,
//! operator-typed names stay identifiers, and errors are one line with a non-zero exit.
//! (`doctor` is tested in `doctor.rs`.)

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use diesel_lease::semaphore::Semaphore;
use diesel_lease::{Error, Lease};
use serde_json::Value;

use crate::common::{worker_bin, TestBackend, TestDb};

/// The `diesel-lease` binary: `cargo test --workspace` builds it next to the suite's workers
/// (the CLI package has integration tests of its own, which makes cargo build its binary).
pub(crate) fn cli_path() -> PathBuf {
    let path = std::path::Path::new(worker_bin("lease-worker")).with_file_name("diesel-lease");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p diesel-lease-cli` (scripts/test.sh does)",
        path.display()
    );
    path
}

pub(crate) fn cli<B: TestBackend>(db: &TestDb<B>, args: &[&str]) -> Output {
    Command::new(cli_path())
        .env("DATABASE_URL", &db.url)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run diesel-lease")
}

/// Runs it, expects success, returns stdout.
pub(crate) fn ok<B: TestBackend>(db: &TestDb<B>, args: &[&str]) -> String {
    let out = cli(db, args);
    assert!(
        out.status.success(),
        "diesel-lease {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

pub(crate) fn json<B: TestBackend>(db: &TestDb<B>, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(db, &all)).expect("valid JSON")
}

/// Runs it, expects failure, returns its single stderr line.
pub(crate) fn fails<B: TestBackend>(db: &TestDb<B>, args: &[&str]) -> String {
    let out = cli(db, args);
    assert!(!out.status.success(), "diesel-lease {args:?} succeeded");
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("diesel-lease: "), "{err}");
    err
}

/// The next line of a worker's output (one reader for all of them: it buffers ahead).
fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("read worker output");
    line.trim().to_string()
}

fn a_workers_lease_is_listed_and_a_forced_release_fences_it<B: TestBackend>(db: &TestDb<B>) {
    assert!(ok(db, &["migrate"]).contains("up to date"));
    let mut worker = Command::new(worker_bin("lease-worker"))
        .args([
            B::NAME,
            &db.url,
            "hold-then-extend",
            "nightly-report",
            "60000",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn lease-worker");
    let mut out = BufReader::new(worker.stdout.take().expect("piped stdout"));
    let line = read_line(&mut out);
    let token: i64 = line
        .strip_prefix("ACQUIRED ")
        .expect(&line)
        .parse()
        .unwrap();

    // The worker's lease, as a table and as JSON.
    let table = ok(db, &["leases"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("nightly-report "))
        .expect(&table);
    assert!(
        row.contains(" held ") && row.contains(&format!(" {token} ")),
        "{row}"
    );
    let leases = json(db, &["leases"]);
    let entry = leases
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "nightly-report")
        .unwrap();
    assert_eq!(entry["token"], token);
    assert_eq!(entry["held"], true);
    let expires_in = entry["expires_in_ms"].as_i64().unwrap();
    assert!(expires_in > 0 && expires_in <= 60_000, "{expires_in}");

    // Without a terminal and without --yes nothing happens.
    let refused = fails(db, &["release", "lease", "nightly-report"]);
    assert!(refused.contains("--yes"), "{refused}");
    assert_eq!(json(db, &["leases"])[0]["token"], token);
    assert!(fails(db, &["release", "lease", "no-such-lease", "--yes"]).contains("no lease named"));

    let holder = entry["holder"].as_str().unwrap().to_string();
    let released = ok(db, &["release", "lease", "nightly-report", "--yes"]);
    assert_eq!(
        released,
        format!("released lease `nightly-report` (held by `{holder}`): token {token} -> {}; the holder's next extend or release fails with LeaseLost\n", token + 1)
    );
    assert_eq!(json(db, &["leases"])[0]["held"], false);
    // Released again, now that it is free: it says so (issue 22.6: it said "was expired by"), and
    // the token still moves on.
    let again = ok(db, &["release", "lease", "nightly-report", "--yes"]);
    assert!(
        again.starts_with(&format!(
            "released lease `nightly-report` (free; last held by `{holder}`): token {} -> {};",
            token + 1,
            token + 2
        )),
        "{again}"
    );
    let released = json(db, &["release", "lease", "nightly-report", "--yes"]);
    assert_eq!(released["was_held"], false);
    assert_eq!(released["old_token"], token + 2);
    assert_eq!(released["token"], token + 3);

    // The old holder is fenced: its next extend and release see LeaseLost.
    writeln!(worker.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(read_line(&mut out), "EXTEND LeaseLost");
    assert_eq!(read_line(&mut out), "RELEASE LeaseLost");
    assert!(worker.wait().unwrap().success());

    // And the next grant's token is larger than the fence's.
    let mut conn = db.conn();
    let next = Lease::try_acquire(
        &mut conn,
        "nightly-report",
        &super::super::lease::opts(5_000),
    )
    .unwrap()
    .expect("free after the forced release");
    assert!(next.token().get() > token + 3);
}

fn a_forced_ticket_release_takes_the_permit_away<B: TestBackend>(db: &TestDb<B>) {
    ok(db, &["migrate"]);
    let mut holder_conn = db.conn();
    let semaphore = Semaphore::new("exports", 2);
    let held = semaphore
        .acquire_on(&mut holder_conn, Duration::from_secs(10))
        .unwrap();

    let listed = json(db, &["semaphores"]);
    let exports = &listed.as_array().unwrap()[0];
    assert_eq!(exports["resource"], "exports");
    assert_eq!(
        (exports["permits"].as_i64(), exports["holders"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(exports["queue"][0]["ticket"], held.ticket());
    assert!(ok(db, &["semaphores"]).contains("holding"));

    let ticket = held.ticket().to_string();
    let released = json(db, &["release", "ticket", &ticket, "--yes"]);
    assert_eq!(released["was_granted"], true);
    assert!(matches!(
        held.heartbeat(&mut holder_conn),
        Err(Error::PermitNotHeld { .. })
    ));
    assert_eq!(json(db, &["semaphores"])[0]["holders"], 0);
    assert!(fails(db, &["release", "ticket", &ticket, "--yes"]).contains("no semaphore ticket"));
}

fn claims_are_counted_and_names_stay_identifiers<B: TestBackend>(db: &TestDb<B>) {
    db.ddl(
        "CREATE TABLE \"Import Jobs\" (id BIGINT PRIMARY KEY, status TEXT NOT NULL, claimed_at TIMESTAMP);
         INSERT INTO \"Import Jobs\" VALUES
           (1, 'ready', NULL), (2, 'ready', NULL), (3, 'claimed', now() AT TIME ZONE 'UTC' - INTERVAL '2 hours'),
           (4, 'claimed', now() AT TIME ZONE 'UTC' - INTERVAL '1 minute'), (5, 'done', NULL),
           (6, 'done', now() AT TIME ZONE 'UTC' - INTERVAL '3 hours');",
        "CREATE TABLE \"Import Jobs\" (id INTEGER PRIMARY KEY, status TEXT NOT NULL, claimed_at TIMESTAMP);
         INSERT INTO \"Import Jobs\" VALUES
           (1, 'ready', NULL), (2, 'ready', NULL), (3, 'claimed', strftime('%Y-%m-%d %H:%M:%f', 'now', '-2 hours')),
           (4, 'claimed', strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 minutes')), (5, 'done', NULL),
           (6, 'done', strftime('%Y-%m-%d %H:%M:%f', 'now', '-3 hours'));",
        "CREATE TABLE `Import Jobs` (id BIGINT PRIMARY KEY, status VARCHAR(20) NOT NULL, claimed_at DATETIME(6));
         INSERT INTO `Import Jobs` VALUES
           (1, 'ready', NULL), (2, 'ready', NULL), (3, 'claimed', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR),
           (4, 'claimed', UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE), (5, 'done', NULL),
           (6, 'done', UTC_TIMESTAMP(6) - INTERVAL 3 HOUR);",
    );
    let report = json(
        db,
        &[
            "claims",
            "--table",
            "Import Jobs",
            "--state-column",
            "status",
            "--claimed",
            "claimed",
            "--claimed-at-column",
            "claimed_at",
            "--older-than",
            "1h",
        ],
    );
    let states = report["states"].as_array().unwrap();
    let by = |s: &str| states.iter().find(|r| r["state"] == s).expect(s).clone();
    assert_eq!(by("ready")["rows"], 2);
    // A finished row keeps the claimed-at of its last claim, but no claim timeout applies to it
    // (issue 22.6: 2,000 done rows were counted as older than the timeout).
    let done = by("done");
    assert_eq!(done["rows"], 2);
    assert_eq!(done["older_than_timeout"], Value::Null, "{done}");
    assert_eq!(done["oldest_claimed_at_micros"], Value::Null, "{done}");
    let claimed = by("claimed");
    assert_eq!(claimed["rows"], 2);
    assert_eq!(
        claimed["older_than_timeout"], 1,
        "only the 2-hour-old claim"
    );
    let age = claimed["oldest_age_ms"].as_i64().unwrap();
    assert!(
        (7_000_000..7_400_000).contains(&age),
        "about two hours: {age}"
    );
    let table = ok(
        db,
        &[
            "claims",
            "--table",
            "Import Jobs",
            "--state-column",
            "status",
            "--claimed",
            "claimed",
            "--claimed-at-column",
            "claimed_at",
            "--older-than",
            "1s",
        ],
    );
    let line = |state: &str| {
        let l = table.lines().find(|l| l.starts_with(state)).expect(state);
        l.split_whitespace().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(
        table.lines().next().unwrap().split_whitespace().last(),
        Some("1.0s"),
        "{table}"
    );
    assert_eq!(line("ready"), ["ready", "2", "-", "-"], "{table}");
    assert_eq!(line("done"), ["done", "2", "-", "-"], "{table}");
    assert_eq!(
        line("claimed").last().map(String::as_str),
        Some("2"),
        "both claims are older than 1s: {table}"
    );

    // `--older-than` needs a claimed-at column to measure (issue 22.6: it printed `-`), and the
    // claimed state whose rows it measures: a usage error naming what is missing.
    for (args, missing) in [
        (&["--older-than", "1s"][..], "--claimed-at-column"),
        (&["--claimed-at-column", "claimed_at"][..], "--claimed"),
    ] {
        let mut all = vec![
            "claims",
            "--table",
            "Import Jobs",
            "--state-column",
            "status",
        ];
        all.extend_from_slice(args);
        let out = cli(db, &all);
        assert_eq!(out.status.code(), Some(2), "clap's usage error");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(missing), "{err}");
    }

    // A name is only ever a name: this one matches no table, and nothing is dropped.
    let err = fails(
        db,
        &[
            "claims",
            "--table",
            "Import Jobs\"; DROP TABLE \"Import Jobs\"; --",
            "--state-column",
            "status",
        ],
    );
    assert!(err.contains("cannot read"), "{err}");
    assert_eq!(
        json(
            db,
            &[
                "claims",
                "--table",
                "Import Jobs",
                "--state-column",
                "status"
            ]
        )["states"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

/// Semaphores on a user's control table (seed 001): their queues are rows of that table, which
/// `semaphores` reads once `--control-table` describes it; undescribed, the entry says where its
/// queue is instead of showing an empty one.
fn control_table_queues_are_listed_when_described<B: TestBackend>(db: &TestDb<B>) {
    use crate::semaphore::control_model::ProcessControl;
    use diesel_lease::prelude::*;
    use diesel_lease::OwnerId;

    db.migrate();
    let pool = db.pool(4);
    crate::semaphore::control_table(db);
    let ttl = Duration::from_secs(30);
    let owner = |name: &str| OwnerId::new(name).unwrap();
    let etl = ProcessControl::semaphore("etl", 1)
        .with_ttl(ttl)
        .with_owner(owner("Process A"));
    let held = etl.try_acquire(&pool).unwrap().expect("free");
    let report = ProcessControl::rw_lock("report").with_owner(owner("Process A"));
    let writer = report.try_write(&pool).unwrap().expect("free");
    let waiter = std::thread::spawn({
        let pool = pool.clone();
        let etl = ProcessControl::semaphore("etl", 1)
            .with_ttl(ttl)
            .with_owner(owner("Process B"));
        move || {
            etl.acquire(&pool, Duration::from_secs(60))
                .map(|p| p.ticket())
        }
    });
    let started = std::time::Instant::now();
    while etl.queue(&mut pool.get().unwrap()).unwrap().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the waiter never queued"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let entry = |listed: &Value, resource: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["resource"] == resource)
            .unwrap_or_else(|| panic!("{resource} missing from {listed}"))
            .clone()
    };

    let undescribed = entry(&json(db, &["semaphores"]), "process_control#etl");
    assert_eq!(undescribed["queue"], serde_json::json!([]));
    assert_eq!(undescribed["queue_known"], false);
    assert_eq!(undescribed["control_table"], "process_control");
    assert!(ok(db, &["semaphores"]).contains("queue in control table `process_control`"));

    let spec = "process_control --ticket queue_position --owner requesting_id --resource resource \
                --mode access_type --shared R --exclusive W";
    let listed = json(db, &["semaphores", "--control-table", spec]);
    let etl_entry = entry(&listed, "process_control#etl");
    assert_eq!(etl_entry["queue_known"], true);
    assert_eq!(
        (etl_entry["holders"].as_i64(), etl_entry["waiters"].as_i64()),
        (Some(1), Some(1))
    );
    let queue = etl_entry["queue"].as_array().unwrap();
    assert_eq!(queue[0]["ticket"], held.ticket());
    assert_eq!(
        (&queue[0]["owner"], &queue[0]["granted"], &queue[0]["mode"]),
        (
            &Value::from("Process A"),
            &Value::from(true),
            &Value::from("shared")
        )
    );
    assert_eq!(
        (&queue[1]["owner"], &queue[1]["granted"]),
        (&Value::from("Process B"), &Value::from(false))
    );
    let report_entry = entry(&listed, "process_control#report");
    assert_eq!(report_entry["queue"][0]["ticket"], writer.ticket());
    assert_eq!(report_entry["queue"][0]["mode"], "exclusive");
    let text = ok(db, &["semaphores", "--control-table", spec]);
    assert!(
        text.contains("waiting #1") && text.contains("Process B"),
        "{text}"
    );

    drop(held);
    let ticket = waiter.join().unwrap().expect("the waiter gets the permit");
    assert!(ticket > queue[0]["ticket"].as_i64().unwrap());
    drop(writer);
}

/// A lease released before its at-least-for ran out is listed as `kept` (held by its at-least-for,
/// not by a holder), with when it was released; a forced release of it says that other nodes can
/// take it now, and they can.
fn a_released_lease_kept_by_its_at_least_for_is_listed_as_kept<B: TestBackend>(db: &TestDb<B>) {
    assert!(ok(db, &["migrate"]).contains("up to date"));
    let mut conn = db.conn();
    let options = diesel_lease::lease::LeaseOptions::new(std::time::Duration::from_secs(60))
        .at_least_for(std::time::Duration::from_secs(60));
    let mut held = diesel_lease::Lease::try_acquire(&mut conn, "weekly", &options)
        .unwrap()
        .expect("free");
    assert!(held.release(&mut conn).unwrap().was_held());
    let table = ok(db, &["leases"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("weekly "))
        .expect(&table);
    assert!(row.contains(" kept "), "{row}");
    let entry = &json(db, &["leases"])[0];
    assert_eq!(entry["held"], true, "{entry}");
    assert_eq!(entry["state"], "kept", "{entry}");
    assert!(entry["released_at_micros"].as_i64().is_some(), "{entry}");
    assert!(
        diesel_lease::Lease::try_acquire(&mut conn, "weekly", &options)
            .unwrap()
            .is_none()
    );

    let released = ok(db, &["release", "lease", "weekly", "--yes"]);
    assert!(
        released.contains(&format!(
            "(released by `{}`, kept for its at-least-for)",
            held.holder()
        )) && released.ends_with("; other nodes can take it now\n"),
        "{released}"
    );
    assert!(
        diesel_lease::Lease::try_acquire(&mut conn, "weekly", &options)
            .unwrap()
            .is_some()
    );
}

/// During a rolling upgrade a node of the previous version grants a lease without clearing
/// `released_at` (it does not know the column), leaving the previous grant's release time in
/// it. The lease is held, not kept: the release is older than the grant.
fn a_grant_by_a_node_that_predates_released_at_is_listed_as_held<B: TestBackend>(db: &TestDb<B>) {
    use diesel::connection::SimpleConnection;
    assert!(ok(db, &["migrate"]).contains("up to date"));
    let mut conn = db.conn();
    let options = diesel_lease::lease::LeaseOptions::new(std::time::Duration::from_secs(60));
    let held = diesel_lease::Lease::try_acquire(&mut conn, "nightly", &options)
        .unwrap()
        .expect("free");
    // What an old node's grant after a release leaves: a release time from before the grant.
    conn.batch_execute(
        "UPDATE diesel_lease_leases SET released_at = acquired_at - 5000000 WHERE name = 'nightly'",
    )
    .unwrap();
    let record = diesel_lease::Lease::inspect(&mut conn, "nightly")
        .unwrap()
        .expect("row");
    assert!(
        record.is_held() && record.released_at_micros.is_some(),
        "{record:?}"
    );
    assert!(!record.is_released(), "{record:?}");

    let table = ok(db, &["leases"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("nightly "))
        .expect(&table);
    assert!(row.contains(" held "), "{row}");
    assert_eq!(json(db, &["leases"])[0]["state"], "held");
    let released = ok(db, &["release", "lease", "nightly", "--yes"]);
    assert!(
        released.contains(&format!("(held by `{}`)", held.holder()))
            && released.ends_with("; the holder's next extend or release fails with LeaseLost\n"),
        "{released}"
    );
}

backend_tests!(
    a_grant_by_a_node_that_predates_released_at_is_listed_as_held,
    a_released_lease_kept_by_its_at_least_for_is_listed_as_kept,
    a_workers_lease_is_listed_and_a_forced_release_fences_it,
    a_forced_ticket_release_takes_the_permit_away,
    claims_are_counted_and_names_stay_identifiers,
    control_table_queues_are_listed_when_described,
);
