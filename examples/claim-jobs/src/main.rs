//! Seed 003: an `importjobs` table of 10,000 jobs waiting in state `JOBEXTRACTED`, drained by
//! 8 worker threads that each take "the next job", mark it `EXECUTIONINPROGRESS`, import it and
//! mark it `DONE`. Every job must go to exactly one worker.
//!
//! The seed does this with `SELECT … FOR UPDATE SKIP LOCKED` plus an `UPDATE` in one transaction,
//! and a retry loop for the empty results it saw under load. Here it is one call,
//! `ImportJob::claim_next(&mut conn)`, and `None` means that no job is left.
//!
//! ```text
//! cargo run -p claim-jobs                                   # SQLite file in a temporary directory
//! DATABASE_URL=postgres://… cargo run -p claim-jobs         # PostgreSQL (recreates `importjobs`)
//! ```

use std::process::ExitCode;

use diesel::prelude::*;
use diesel_lease::prelude::*;

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

/// An import job as the application models it. The derive adds `claim_next`, `claim_batch`
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
const DDL: &str = "DROP TABLE IF EXISTS importjobs;
    CREATE TABLE importjobs (id BIGINT PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT);
    CREATE INDEX importjobs_ready ON importjobs (statuscode, id);";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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

/// PostgreSQL when `DATABASE_URL` is a postgres:// URL; otherwise a SQLite file in a temporary
/// directory, deleted at the end.
fn run() -> Result<(), BoxError> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            on_postgres::run(&url, "PostgreSQL")
        }
        Ok(url) if !url.is_empty() => {
            Err("DATABASE_URL must be a postgres:// URL (unset it to use SQLite)".into())
        }
        _ => {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("claim-jobs.db");
            on_sqlite::run(&path.display().to_string(), "SQLite")
        }
    }
}
