//! Seed 004: another system inserts rows into `test(id, data, processed)`; several instances of
//! the application run the seed's `TestService.doSomething()` — take the first unprocessed row,
//! process it, save it — and must never process a row twice or block one another.
//!
//! The seed's JPA finder (`@Lock(PESSIMISTIC_WRITE)` plus the skip-locked hint) and its
//! `@Transactional` service become one call: `Test::claim().locked_with(conn, |conn, row| …)` runs
//! the closure inside the row's transaction; `Ok` commits, `Err` rolls back and the row is
//! available again. (SQLite has no row locks: there the transaction holds the database's write
//! lock instead. Same guarantee, one writer at a time; and since SQLite does not queue waiting
//! writers fairly, some threads may get few rows or none.)
//!
//! ```text
//! cargo run -p skip-locked                                  # SQLite file in a temporary directory
//! DATABASE_URL=postgres://… cargo run -p skip-locked        # PostgreSQL, in a schema of its own (see example-db)
//! ```

use std::process::ExitCode;

use diesel::prelude::*;
use diesel_lease::prelude::*;
use example_db::{Backend, BoxError, ExampleDb};

mod schema {
    diesel::table! {
        test (id) {
            id -> BigInt,
            data -> Text,
            processed -> Bool,
        }
    }
}
use schema::test;

/// The seed's entity. `ready = false`: the rows to lock are those not processed yet.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = test)]
#[claimable(state = processed, ready = false, claimed = true)]
struct Test {
    id: i64,
    data: String,
    processed: bool,
}

const ROWS: i64 = 1_000;
const WORKERS: usize = 4;
/// Processing this row fails the first time (say, an external service times out).
const FLAKY_ROW: i64 = 500;

/// The seed's table (NOT NULL added); the same DDL works on both backends.
const DDL: &str =
    "CREATE TABLE test (id BIGINT PRIMARY KEY, data TEXT NOT NULL, processed BOOLEAN NOT NULL);
    CREATE INDEX test_unprocessed ON test (processed, id);";

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
            eprintln!("skip-locked FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The example's own database: a SQLite file in a temporary directory, or, when `DATABASE_URL`
/// is a postgres:// URL, a schema of its own in that database (see `example_db`). Either is
/// removed at the end; no other table is touched.
fn run() -> Result<(), BoxError> {
    let db = ExampleDb::open("skip-locked")?;
    println!("{}", db.describe());
    match db.backend() {
        Backend::Postgres => on_postgres::run(db.url(), "PostgreSQL"),
        Backend::Sqlite => on_sqlite::run(db.url(), "SQLite"),
    }
}
