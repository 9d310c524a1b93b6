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
        "mariadb://root@localhost/db",
    ] {
        let out = run(&["leases"], Some(url));
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        let scheme = url.split("://").next().unwrap();
        assert_eq!(
            err,
            format!("diesel-lease: the database URL's scheme `{scheme}://` is not one diesel-lease knows: use postgres://, postgresql://, mysql://, sqlite:// or a SQLite file path\n")
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
