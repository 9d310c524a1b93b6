//! A queue of e-mails on the application's own table, drained by `diesel_lease::worker::Worker`.
//!
//! A producer inserts 60 e-mails for three tenants over about a second; some are scheduled a
//! second ahead (`run_at`), some fail once, some always fail. Four worker threads send them,
//! at most two per tenant at once; a failure is retried with backoff and given up (state
//! `dead`, with its last error) after three attempts; a panic is a failure like any other. When
//! every e-mail is settled the worker is stopped and the demo checks what happened.
//!
//! ```text
//! cargo run -p worker                                   # SQLite file in a temporary directory
//! DATABASE_URL=postgres://… cargo run -p worker         # PostgreSQL, in a schema of its own (see example-db)
//! ```

use std::process::ExitCode;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_lease::prelude::*;
use example_db::{Backend, BoxError, ExampleDb};

mod schema {
    diesel::table! {
        emails (id) {
            id -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
            run_at -> Timestamp,
            last_error -> Nullable<Text>,
            tenant -> Text,
            recipient -> Text,
        }
    }
}
use schema::emails;

/// An e-mail to send. `available_at = run_at`: not claimed before its time (database clock).
/// `error = last_error`: why its last attempt failed.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = emails)]
#[claimable(
    state = status,
    ready = "new",
    claimed = "sending",
    done = "sent",
    failed = "dead",
    owner = owner,
    claimed_at = claimed_at,
    attempts = attempts,
    timeout_secs = 30,
    available_at = run_at,
    error = last_error
)]
struct Email {
    id: i64,
    status: String,
    owner: Option<String>,
    claimed_at: Option<NaiveDateTime>,
    attempts: i32,
    run_at: NaiveDateTime,
    last_error: Option<String>,
    tenant: String,
    recipient: String,
}

const EMAILS: i64 = 60;
const TENANTS: [&str; 3] = ["acme", "globex", "initech"];
const THREADS: usize = 4;
const PER_TENANT: u32 = 2;
const ATTEMPTS: u32 = 3;

// Diesel code is written against one connection type, so `demo.rs` is compiled once per
// backend. Read it as if `Conn` were your application's connection type.
mod on_sqlite {
    type Conn = diesel::SqliteConnection;
    /// The table; `run_at` defaults to the database's now (UTC).
    const DDL: &str =
        "CREATE TABLE emails (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new',
            owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0,
            run_at TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
            last_error TEXT, tenant TEXT NOT NULL, recipient TEXT NOT NULL);
        CREATE INDEX emails_due ON emails (status, run_at, id);";
    /// `run_at` one second from the database's now.
    const LATER: &str = "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 seconds')";
    include!("demo.rs");
}
mod on_postgres {
    type Conn = diesel::PgConnection;
    /// The partial index serves exactly the claim: due rows in `run_at` order.
    const DDL: &str =
        "CREATE TABLE emails (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new',
            owner TEXT, claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0,
            run_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
            last_error TEXT, tenant TEXT NOT NULL, recipient TEXT NOT NULL);
        CREATE INDEX emails_due ON emails (run_at, id) WHERE status = 'new';";
    const LATER: &str = "((now() AT TIME ZONE 'UTC') + INTERVAL '1 second')";
    include!("demo.rs");
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The example's own database: a SQLite file in a temporary directory, or, when `DATABASE_URL`
/// is a postgres:// URL, a schema of its own in that database (see `example_db`). Either is
/// removed at the end; no other table is touched.
fn run() -> Result<(), BoxError> {
    let db = ExampleDb::open("worker")?;
    println!("{}", db.describe());
    match db.backend() {
        Backend::Postgres => on_postgres::run(db.url(), "PostgreSQL"),
        Backend::Sqlite => on_sqlite::run(db.url(), "SQLite"),
    }
}
