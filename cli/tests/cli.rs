//! The tool without a server: usage and error reporting. (Against real servers it is tested in
//! the integration suite, `tests/ops/cli.rs` and `tests/ops/doctor.rs`; this file also makes
//! `cargo test` build the binary that suite runs.)

use std::process::Command;

fn run(args: &[&str], url: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_diesel-lease"));
    cmd.env_remove("DATABASE_URL").args(args);
    if let Some(url) = url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.output().expect("run diesel-lease")
}

#[test]
fn help_lists_every_command() {
    let out = run(&["--help"], None);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for command in [
        "migrate",
        "leases",
        "semaphores",
        "claims",
        "release",
        "doctor",
        "serve",
        "cancel",
        "pause",
        "resume",
        "purge",
        "redrive",
    ] {
        assert!(help.contains(command), "{command} missing from:\n{help}");
    }
}

#[test]
fn errors_are_one_line_with_a_non_zero_exit() {
    let missing = tempfile_path();
    let out = run(&["leases"], Some(&missing));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        format!("diesel-lease: no SQLite database at `{missing}`\n")
    );

    let out = run(&["leases"], Some("postgres://nobody@127.0.0.1:1/none"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("diesel-lease: cannot connect to the database: "),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    // No URL at all: clap's usage error.
    assert!(!run(&["leases"], None).status.success());
}

/// A URL with a scheme the tool does not know is not taken for a SQLite file name (issue 22.6:
/// `garbage://x` gave "no SQLite database at `garbage://x`"): the error names the scheme and the
/// ones it knows.
#[test]
fn an_unknown_url_scheme_is_named_with_the_known_ones() {
    for url in [
        "garbage://x",
        "postgress://localhost/db",
        "mssql://sa@localhost/db",
    ] {
        let out = run(&["leases"], Some(url));
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        let scheme = url.split("://").next().unwrap();
        assert_eq!(
            err,
            format!("diesel-lease: the database URL's scheme `{scheme}://` is not one diesel-lease knows: use postgres://, postgresql://, mysql://, mariadb://, sqlite:// or a SQLite file path\n")
        );
    }
}

fn tempfile_path() -> String {
    std::env::temp_dir()
        .join(format!(
            "diesel-lease-cli-missing-{}.db",
            std::process::id()
        ))
        .display()
        .to_string()
}

/// A SQLite file with a claimable table `jobs (id, status)`: rows 1, 2 ready, 3 claimed, 4 done.
fn jobs_db(name: &str) -> String {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;
    let path = std::env::temp_dir()
        .join(format!("diesel-lease-cli-{name}-{}.db", std::process::id()))
        .display()
        .to_string();
    let _ = std::fs::remove_file(&path);
    let mut conn = diesel::SqliteConnection::establish(&path).expect("create the file");
    conn.batch_execute(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
         INSERT INTO jobs VALUES (1, 'new'), (2, 'new'), (3, 'running'), (4, 'done');",
    )
    .expect("the table");
    path
}

fn statuses(path: &str) -> Vec<(i64, String)> {
    use diesel::prelude::*;
    diesel::table! { jobs (id) { id -> BigInt, status -> Text, } }
    let mut conn = diesel::SqliteConnection::establish(path).expect("open");
    jobs::table.order(jobs::id).load(&mut conn).expect("rows")
}

const CANCEL: &[&str] = &[
    "--json",
    "cancel",
    "--table",
    "jobs",
    "--state-column",
    "status",
    "--ready",
    "new",
    "--claimed",
    "running",
    "--to",
    "cancelled",
    "--yes",
];

/// `cancel` moves a ready or a claimed row to the state it is given, and leaves a finished one
/// alone (saying so); it refuses without `--yes` when nobody can confirm.
#[test]
fn cancel_moves_ready_and_claimed_rows_only() {
    let path = jobs_db("cancel");
    let cancel = |key: &str| {
        let out = run(&[CANCEL, &[key]].concat(), Some(&path));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        v["cancelled"].as_bool().expect("cancelled")
    };
    assert!(cancel("1"));
    assert!(cancel("3"));
    assert!(!cancel("4"), "a done row is not cancelled");
    assert!(!cancel("1"), "nor a cancelled one");
    assert!(!cancel("99"), "nor a missing one");
    let expected: Vec<(i64, String)> =
        [(1, "cancelled"), (2, "new"), (3, "cancelled"), (4, "done")]
            .into_iter()
            .map(|(id, s)| (id, s.to_string()))
            .collect();
    assert_eq!(statuses(&path), expected);

    let unconfirmed = run(
        &CANCEL[..CANCEL.len() - 1]
            .iter()
            .copied()
            .chain(["2"])
            .collect::<Vec<_>>(),
        Some(&path),
    );
    assert_eq!(unconfirmed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unconfirmed.stderr).contains("pass --yes"));
    let bad_key = run(&[CANCEL, &["two"]].concat(), Some(&path));
    assert!(String::from_utf8_lossy(&bad_key.stderr).contains("is not an integer"));
    // A state claims would take for a live row is refused: the row would run again.
    for (to, kind) in [("new", "a ready state"), ("running", "a claimed state")] {
        let mut args = CANCEL.to_vec();
        let at = args.iter().position(|a| *a == "cancelled").expect("--to");
        args[at] = to;
        let refused = run(&[&args[..], &["2"]].concat(), Some(&path));
        assert_eq!(refused.status.code(), Some(1), "--to {to}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(kind), "--to {to}: {stderr}");
    }
    assert_eq!(statuses(&path)[1].1, "new");
    let _ = std::fs::remove_file(&path);
}

/// `pause` and `resume` write and delete the pause rows claims look up (the claims themselves
/// are tested in the suite, `tests/claim/pause.rs`): each says whether it changed anything.
#[test]
fn pause_and_resume_a_table_and_a_key() {
    use diesel::prelude::*;
    let path = jobs_db("pause");
    let migrated = run(&["migrate"], Some(&path));
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let changed = |args: &[&str]| {
        let out = run(&[&["--json"], args].concat(), Some(&path));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        v["changed"].as_bool().expect("changed")
    };
    let pauses = || -> Vec<(String, String, String)> {
        diesel::table! { diesel_lease_pauses (table_name, key_column, key_value) {
        table_name -> Text, key_column -> Text, key_value -> Text, } }
        let mut conn = diesel::SqliteConnection::establish(&path).expect("open");
        diesel_lease_pauses::table
            .select((
                diesel_lease_pauses::table_name,
                diesel_lease_pauses::key_column,
                diesel_lease_pauses::key_value,
            ))
            .order(diesel_lease_pauses::key_column)
            .load(&mut conn)
            .expect("pauses")
    };
    assert!(changed(&["pause", "--table", "jobs"]));
    assert!(!changed(&["pause", "--table", "jobs"]));
    assert!(changed(&[
        "pause",
        "--table",
        "jobs",
        "--key-column",
        "tenant",
        "--key",
        "acme"
    ]));
    let s = |v: &str| v.to_string();
    assert_eq!(
        pauses(),
        [
            (s("jobs"), s(""), s("")),
            (s("jobs"), s("tenant"), s("acme"))
        ]
    );
    assert!(changed(&["resume", "--table", "jobs"]));
    assert!(!changed(&["resume", "--table", "jobs"]));
    assert_eq!(pauses(), [(s("jobs"), s("tenant"), s("acme"))]);
    assert!(changed(&[
        "resume",
        "--table",
        "jobs",
        "--key-column",
        "tenant",
        "--key",
        "acme"
    ]));
    assert!(pauses().is_empty());
    assert!(
        !run(&["pause", "--table", "jobs", "--key", "acme"], Some(&path))
            .status
            .success()
    );
    let _ = std::fs::remove_file(&path);
}
