//! Seed 003: an `importjobs` table of 10,000 jobs waiting in state `JOBEXTRACTED`, drained by
//! 8 worker threads that each take "the next job", mark it `EXECUTIONINPROGRESS`, import it and
//! mark it `DONE`. Every job must go to exactly one worker.
//!
//! The seed does this with `SELECT … FOR UPDATE SKIP LOCKED` plus an `UPDATE` in one transaction,
//! and a retry loop for the empty results it saw under load. Here it is one call,
//! `ImportJob::claim().row(&mut conn)`, and `None` means that no job is left.
//!
//! ```text
//! cargo run -p claim-jobs                                   # SQLite file in a temporary directory
//! DATABASE_URL=postgres://… cargo run -p claim-jobs         # PostgreSQL, in a schema of its own (see example-db)
//! ```

use std::process::ExitCode;

use diesel::prelude::*;
use diesel_lease::prelude::*;
use example_db::{Backend, BoxError, ExampleDb};

mod schema {
    diesel::table! {
        importjobs (id) {
            id -> BigInt,
            statuscode -> Text,
            worker -> Nullable<Text>,
        }
    }
}
use schema::importjobs;

/// An import job as the application models it. The derive adds `claim()`
/// and `complete`.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = importjobs)]
#[claimable(
    state = statuscode,
    ready = "JOBEXTRACTED",
    claimed = "EXECUTIONINPROGRESS",
    done = "DONE",
    owner = worker
)]
struct ImportJob {
    id: i64,
    statuscode: String,
    worker: Option<String>,
}

const JOBS: i64 = 10_000;
const WORKERS: usize = 8;

/// The same DDL works on both backends. The index serves "the first ready job".
const DDL: &str =
    "CREATE TABLE importjobs (id BIGINT PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT);
    CREATE INDEX importjobs_ready ON importjobs (statuscode, id);";

// Diesel code is written against one connection type, so `demo.rs` is compiled once per
// backend. Read it as if `Conn` were your application's connection type.
mod on_sqlite {
    type Conn = diesel::SqliteConnection;
    include!("demo.rs");
}
mod on_postgres {
    type Conn = diesel::PgConnection;
    include!("demo.rs");
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("claim-jobs FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The example's own database: a SQLite file in a temporary directory, or, when `DATABASE_URL`
/// is a postgres:// URL, a schema of its own in that database (see `example_db`). Either is
/// removed at the end; no other table is touched.
fn run() -> Result<(), BoxError> {
    let db = ExampleDb::open("claim-jobs")?;
    println!("{}", db.describe());
    match db.backend() {
        Backend::Postgres => on_postgres::run(db.url(), "PostgreSQL"),
        Backend::Sqlite => on_sqlite::run(db.url(), "SQLite"),
    }
}
