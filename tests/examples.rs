//! The examples never touch a user's tables.
//!
//! Diesel users usually have `DATABASE_URL` exported for their own application, and the examples'
//! tables carry the names of the articles they come from (`importjobs`, `test`, `action`, …). This
//! test gives every example (each package under `examples/` with a `src/main.rs`) a PostgreSQL
//! database that already holds a table of each name an example creates, with rows, plus
//! diesel-lease's own tables; runs the example's binary with `DATABASE_URL` pointing there; and
//! asserts that it succeeded, said it ran in a schema of its own, and that nothing outside that
//! schema changed: the same schemas, tables, columns, functions and triggers, and every row with
//! the same contents and the same `xmin` (so not even a no-op `UPDATE` went unseen). The schema
//! itself must be gone afterwards.
//!
//! The binaries are built by `scripts/test.sh` (`cargo build --workspace --all-features --bins
//! --tests`) next to the suite's own worker binaries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::Text;

use crate::common::{run, worker_bin, Postgres, TestDb};

#[test]
fn examples_leave_user_tables_untouched() {
    run::<Postgres>(
        "examples_leave_user_tables_untouched",
        leave_user_tables_untouched,
    );
}

/// An example: its package name and the tables its sources create.
struct Example {
    name: String,
    tables: Vec<String>,
}

fn leave_user_tables_untouched(db: &TestDb<Postgres>) {
    let examples = examples();
    assert!(
        examples.len() >= 6,
        "expected the six examples under examples/, found {}",
        examples.len()
    );
    let mut conn = db.conn();
    // diesel-lease's own tables, as an application using the library has them.
    db.migrate();
    // A table of every name an example creates, with rows that a claim would take
    // (`JOBEXTRACTED`, `new`, `processed = false`): the columns the examples use, and one more.
    let mut names: Vec<&str> = examples
        .iter()
        .flat_map(|e| e.tables.iter().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    for must in ["importjobs", "test", "action", "notification", "emails"] {
        assert!(
            names.contains(&must),
            "no example creates `{must}` any more: {names:?}"
        );
    }
    for table in &names {
        // The names come from this repository's own example sources (letters and `_`).
        assert!(table.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
        conn.batch_execute(&format!(
            "CREATE TABLE \"{table}\" (id BIGINT PRIMARY KEY, statuscode TEXT, status TEXT,
                 processed BOOLEAN, notified TIMESTAMP, worker TEXT, mine TEXT NOT NULL);
             INSERT INTO \"{table}\" VALUES
                 (1, 'JOBEXTRACTED', 'new', false, NULL, NULL, 'the user''s row 1'),
                 (2, 'JOBEXTRACTED', 'new', false, NULL, NULL, 'the user''s row 2'),
                 (3, 'DONE', 'sent', true, now(), 'app', 'the user''s row 3');"
        ))
        .expect("create the user's table");
    }
    let before = snapshot(&mut conn);
    assert!(
        before.contains_key("table public.importjobs"),
        "{before:#?}"
    );

    for example in &examples {
        let bin = binary(&example.name);
        let out = Command::new(&bin)
            .env("DATABASE_URL", &db.url)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{} failed ({}):\n{stdout}\n{stderr}",
            example.name,
            out.status
        );
        assert!(
            stdout.contains("schema `diesel_lease_example_"),
            "{} did not say it ran in a schema of its own:\n{stdout}",
            example.name
        );
        let after = snapshot(&mut conn);
        assert_eq!(
            changes(&before, &after),
            Vec::<String>::new(),
            "{} changed the database outside its own schema",
            example.name
        );
    }
}

/// Every example runs as a reader first runs it: no `DATABASE_URL`, so on SQLite in a
/// temporary directory of its own, with nothing set up, and exits successfully. (`.ci/run` runs
/// the README's demo command, `cargo run -p claim-jobs`, the same way.)
#[test]
fn every_example_runs_with_no_set_up() {
    let examples = examples();
    assert!(
        examples.len() >= 6,
        "expected the examples under examples/, found {}",
        examples.len()
    );
    for example in &examples {
        let dir = tempfile::tempdir().expect("a working directory");
        let bin = binary(&example.name);
        let out = Command::new(&bin)
            .env_remove("DATABASE_URL")
            .env("TMPDIR", dir.path())
            .current_dir(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
        assert!(
            out.status.success(),
            "{} failed with no set-up ({}):\n{}\n{}",
            example.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The examples under `examples/` that are programs, with the tables they create.
fn examples() -> Vec<Example> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read examples/") {
        let path = entry.expect("examples/ entry").path();
        let src = path.join("src");
        if !src.join("main.rs").exists() {
            continue;
        }
        let manifest = std::fs::read_to_string(path.join("Cargo.toml")).expect("Cargo.toml");
        let name = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|rest| rest.split('"').next())
            .expect("package name")
            .to_owned();
        let mut tables = Vec::new();
        for file in std::fs::read_dir(&src).expect("read src/") {
            let text = std::fs::read_to_string(file.expect("src entry").path()).unwrap();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("CREATE TABLE ") {
                rest = &rest[at + "CREATE TABLE ".len()..];
                let table: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                tables.push(table);
            }
        }
        found.push(Example { name, tables });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The example's binary, built by `scripts/test.sh` next to the suite's workers.
fn binary(name: &str) -> PathBuf {
    let path = Path::new(worker_bin("lease-worker")).with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build the examples first (`cargo build --workspace --all-features --bins \
         --tests`, which scripts/test.sh runs)",
        path.display()
    );
    path
}

#[derive(QueryableByName)]
struct Item {
    #[diesel(sql_type = Text)]
    item: String,
    #[diesel(sql_type = Text)]
    fingerprint: String,
}

/// Everything outside the system schemas: schemas, relations (with their columns, and for
/// tables their rows and each row's `xmin`), functions and triggers.
fn snapshot(conn: &mut diesel::PgConnection) -> BTreeMap<String, String> {
    diesel::sql_query(
        "SELECT 'schema ' || nspname::text AS item, ''::text AS fingerprint
           FROM pg_namespace
          WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
         UNION ALL
         SELECT CASE c.relkind WHEN 'r' THEN 'table ' ELSE 'relation ' || c.relkind::text || ' ' END
                    || n.nspname || '.' || c.relname,
                (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', '
                                   ORDER BY a.attnum)
                   FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0)
                || CASE WHEN c.relkind = 'r' THEN ' / ' || md5(query_to_xml(
                       format('SELECT xmin, * FROM %I.%I ORDER BY 2', n.nspname, c.relname),
                       true, false, '')::text) ELSE '' END
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
         UNION ALL
         SELECT 'function ' || n.nspname || '.' || p.proname, md5(p.prosrc)
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
         UNION ALL
         SELECT 'trigger ' || t.tgrelid::regclass::text || '.' || t.tgname, ''
           FROM pg_trigger t WHERE NOT t.tgisinternal",
    )
    .load::<Item>(conn)
    .expect("snapshot the database")
    .into_iter()
    .map(|i| (i.item, i.fingerprint))
    .collect()
}

/// What differs between two snapshots, one line per item.
fn changes(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (item, was) in before {
        match after.get(item) {
            None => out.push(format!("gone: {item}")),
            Some(now) if now != was => out.push(format!("changed: {item}")),
            Some(_) => {}
        }
    }
    for item in after.keys().filter(|i| !before.contains_key(*i)) {
        out.push(format!("new: {item}"));
    }
    out
}

/// Issue 25.3: the axum service stops gracefully on Ctrl-C (SIGINT): the server first, then its
/// Worker, with every accepted order shipped and the process exiting cleanly. Runs on SQLite
/// (no `DATABASE_URL`), as a reader's first run does.
#[test]
fn the_axum_service_stops_gracefully_on_ctrl_c() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn http(address: &str, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(address).expect("connect to the service");
        stream.write_all(request.as_bytes()).expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        response
    }
    let mut child = Command::new(binary("axum-service"))
        .args(["--serve", "--listen", "127.0.0.1:0"])
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start axum-service");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = Vec::new();
    let address = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "exited early: {lines:?}"
        );
        lines.push(line.clone());
        if let Some(rest) = line.strip_prefix("listening on http://") {
            break rest
                .split_whitespace()
                .next()
                .expect("an address")
                .to_owned();
        }
    };
    let mut ids = Vec::new();
    for item in ["lamp", "desk", "desk"] {
        let response = http(
            &address,
            &format!("POST /orders HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{item}", item.len()),
        );
        assert!(response.starts_with("HTTP/1.1 201"), "{response}");
        ids.push(
            response
                .split("\r\n\r\n")
                .nth(1)
                .expect("a body")
                .trim()
                .to_owned(),
        );
    }
    let started = Instant::now();
    for id in &ids {
        loop {
            let response = http(
                &address,
                &format!(
                    "GET /orders/{id} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
                ),
            );
            if response.ends_with("shipped\n") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "order {id} not shipped: {response}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Ctrl-C.
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let rest: Vec<String> = out.lines().map(|l| l.expect("read")).collect();
    let exited = child.wait().expect("wait");
    assert!(exited.success(), "{exited:?}: {lines:?} {rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.starts_with("Ctrl-C: stopping the server, then the worker")),
        "{rest:?}"
    );
    assert!(
        rest.iter()
            .any(|l| l.starts_with("worker stopped: 3 shipped")),
        "{rest:?}"
    );
}
