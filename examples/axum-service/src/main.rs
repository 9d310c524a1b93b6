//! An async web service on axum and tokio that uses diesel-lease through the application's own
//! `deadpool-diesel` pool (no second pool):
//!
//! - `POST /orders` (body: the item) takes one unit of stock and enqueues the order — a row of
//!   the application's `orders` table, claimable by diesel-lease — in **one transaction** of the
//!   request: a sold-out item rolls both back, so no order exists that was not paid for in stock,
//!   and no stock is taken for an order that was never queued.
//! - `GET /orders/{id}` says where the order is.
//! - A `diesel_lease::worker::Worker` runs beside the runtime on a thread of its own, claims
//!   placed orders through the same pool and ships them (`shipped`).
//! - Ctrl-C stops the server (requests in flight finish), then the Worker (rows in flight finish,
//!   the rest stay queued for the next start).
//!
//! By default it plays its own client: 18 orders (8 lamps with 5 in stock, 10 desks), waits
//! until every accepted order is shipped, stops itself the way Ctrl-C does and checks the
//! result. `-- --serve` keeps it running on 127.0.0.1:3000 (`--listen ADDR` to change) until
//! Ctrl-C:
//!
//! ```text
//! cargo run -p axum-service                              # SQLite file in a temporary directory
//! DATABASE_URL=postgres://… cargo run -p axum-service    # PostgreSQL, in a schema of its own
//! cargo run -p axum-service -- --serve                   # then: curl -d lamp localhost:3000/orders
//! ```

use std::process::ExitCode;

use diesel::prelude::*;
use diesel_lease::prelude::*;
use example_db::{Backend, BoxError, ExampleDb};

mod schema {
    diesel::table! {
        orders (id) {
            id -> BigInt,
            item -> Text,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
        }
    }
    diesel::table! {
        stock (item) {
            item -> Text,
            units -> Integer,
        }
    }
    diesel::allow_tables_to_appear_in_same_query!(orders, stock);
}
use schema::{orders, stock};

/// An order, queued by the request that placed it and shipped by the Worker.
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = orders)]
#[claimable(
    state = status,
    ready = "placed",
    claimed = "packing",
    done = "shipped",
    failed = "undeliverable",
    owner = owner,
    claimed_at = claimed_at,
    attempts = attempts,
    timeout_secs = 30
)]
struct Order {
    id: i64,
    item: String,
    // The columns diesel-lease manages; the shipping code reads only `id` and `item`.
    #[allow(dead_code)]
    status: String,
    #[allow(dead_code)]
    owner: Option<String>,
    #[allow(dead_code)]
    claimed_at: Option<chrono::NaiveDateTime>,
    #[allow(dead_code)]
    attempts: i32,
}

/// The demo client's orders: (item, how many).
const ORDERS: [(&str, usize); 2] = [("lamp", 8), ("desk", 10)];
/// What is in stock when the service starts.
const STOCK: [(&str, i32); 2] = [("lamp", 5), ("desk", 100)];

// Diesel code is written against one connection type, so `demo.rs` is compiled once per
// backend. Read it as if `Conn` were your application's connection type.
mod on_sqlite {
    type Conn = diesel::SqliteConnection;
    const DDL: &str = "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'placed', owner TEXT, claimed_at TIMESTAMP,
            attempts INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX orders_placed ON orders (status, id);
        CREATE TABLE stock (item TEXT PRIMARY KEY, units INTEGER NOT NULL);";
    include!("demo.rs");
}
mod on_postgres {
    type Conn = diesel::PgConnection;
    const DDL: &str = "CREATE TABLE orders (id BIGSERIAL PRIMARY KEY, item TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'placed', owner TEXT, claimed_at TIMESTAMP,
            attempts INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX orders_placed ON orders (id) WHERE status = 'placed';
        CREATE TABLE stock (item TEXT PRIMARY KEY, units INTEGER NOT NULL);";
    include!("demo.rs");
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("axum-service FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The example's own database (see `example_db`), then the service on a tokio runtime.
fn run() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let serve = args.iter().any(|a| a == "--serve");
    let listen = match args.iter().position(|a| a == "--listen") {
        Some(i) => args
            .get(i + 1)
            .cloned()
            .ok_or("--listen needs an address")?,
        None if serve => "127.0.0.1:3000".to_owned(),
        None => "127.0.0.1:0".to_owned(),
    };
    let db = ExampleDb::open("axum-service")?;
    println!("{}", db.describe());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match db.backend() {
        Backend::Postgres => runtime.block_on(on_postgres::run(db.url(), serve, &listen)),
        Backend::Sqlite => runtime.block_on(on_sqlite::run(db.url(), serve, &listen)),
    }
}
