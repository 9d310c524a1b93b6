// The demo itself. `main.rs` compiles this file twice, with `Conn = SqliteConnection` and
// `Conn = PgConnection`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_lease::prelude::*;

use super::{test, BoxError, Test, DDL, FLAKY_ROW, ROWS, WORKERS};

type DbPool = Pool<ConnectionManager<Conn>>;

/// Why a `do_something` call did not process its row.
#[derive(Debug)]
enum ServiceError {
    /// Processing the row failed; its transaction rolled back.
    ProcessingFailed(i64),
    /// The database failed.
    Database(diesel::result::Error),
}

impl From<diesel::result::Error> for ServiceError {
    fn from(e: diesel::result::Error) -> Self {
        ServiceError::Database(e)
    }
}

/// Seed 004's `TestService.doSomething()`: in one transaction, lock the first unprocessed row
/// that no other transaction holds, process it, save it. `Ok(None)`: no such row is left.
fn do_something(conn: &mut Conn, flaky: &AtomicBool) -> Result<Option<i64>, ServiceError> {
    Test::claim().locked_with(conn, |conn, row| {
        let data = process(&row, flaky)?;
        diesel::update(test::table.find(row.id))
            .set((test::data.eq(data), test::processed.eq(true)))
            .execute(conn)?;
        Ok(row.id)
    })
}

/// The processing of one row (here: upper-casing its data). It fails for `FLAKY_ROW` the first
/// time, after the row was locked.
fn process(row: &Test, flaky: &AtomicBool) -> Result<String, ServiceError> {
    if row.id == FLAKY_ROW && flaky.swap(false, Ordering::SeqCst) {
        return Err(ServiceError::ProcessingFailed(row.id));
    }
    Ok(row.data.to_uppercase())
}

/// What one worker thread did.
#[derive(Debug, Default)]
struct Tally {
    processed: Vec<i64>,
    rolled_back: Vec<i64>,
}

/// One application instance: calls the service until it finds nothing left to do.
fn worker(pool: &DbPool, flaky: &AtomicBool) -> Result<Tally, BoxError> {
    let mut conn = pool.get()?;
    let mut tally = Tally::default();
    loop {
        match do_something(&mut conn, flaky) {
            Ok(Some(id)) => tally.processed.push(id),
            Ok(None) => return Ok(tally),
            Err(ServiceError::ProcessingFailed(id)) => tally.rolled_back.push(id),
            Err(ServiceError::Database(e)) => return Err(e.into()),
        }
    }
}

pub(super) fn run(url: &str, backend: &str) -> Result<(), BoxError> {
    let pool: DbPool = diesel_lease::pool::build_pool(url, WORKERS as u32 + 1)?;
    let mut conn = pool.get()?;
    create_rows(&mut conn)?;

    let flaky = AtomicBool::new(true);
    let tallies = std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| s.spawn(|| worker(&pool, &flaky)))
            .collect();
        let mut tallies = Vec::new();
        for worker in workers {
            tallies.push(worker.join().map_err(|_| "a worker thread panicked")??);
        }
        Ok::<_, BoxError>(tallies)
    })?;
    let (failed_in, retried_in) = check(&tallies, &mut conn)?;

    let counts: Vec<String> = tallies
        .iter()
        .map(|t| t.processed.len().to_string())
        .collect();
    println!(
        "{WORKERS} threads processed {ROWS} rows, none twice ({} rows per thread) on {backend}",
        counts.join(" + ")
    );
    println!(
        "row {FLAKY_ROW} failed in thread {failed_in} and rolled back; it became available again \
         and thread {retried_in} processed it"
    );
    Ok(())
}

/// Creates the table with `ROWS` unprocessed rows.
fn create_rows(conn: &mut Conn) -> QueryResult<()> {
    conn.batch_execute(DDL)?;
    let rows: Vec<_> = (1..=ROWS)
        .map(|id| {
            (
                test::id.eq(id),
                test::data.eq(format!("row {id}")),
                test::processed.eq(false),
            )
        })
        .collect();
    for chunk in rows.chunks(1000) {
        diesel::insert_into(test::table)
            .values(chunk)
            .execute(conn)?;
    }
    Ok(())
}

/// The property: every row processed by exactly one worker, once, and saved; and the row whose
/// transaction failed was processed afterwards. Returns the threads (1-based) that failed it and
/// that processed it.
fn check(tallies: &[Tally], conn: &mut Conn) -> Result<(usize, usize), BoxError> {
    let mut times: HashMap<i64, u32> = HashMap::new();
    for id in tallies.iter().flat_map(|t| &t.processed) {
        *times.entry(*id).or_default() += 1;
    }
    if let Some((id, n)) = times.iter().find(|(_, n)| **n > 1) {
        return Err(format!("row {id} was processed {n} times").into());
    }
    let saved: Vec<Test> = test::table.select(Test::as_select()).load(conn)?;
    let unsaved = saved
        .iter()
        .filter(|t| !t.processed || t.data != t.data.to_uppercase());
    if times.len() as i64 != ROWS || unsaved.count() != 0 {
        return Err(format!(
            "only {} of {ROWS} rows were processed and saved",
            times.len()
        )
        .into());
    }
    let failed_in = tallies
        .iter()
        .position(|t| t.rolled_back.contains(&FLAKY_ROW));
    let retried_in = tallies
        .iter()
        .position(|t| t.processed.contains(&FLAKY_ROW));
    match (failed_in, retried_in) {
        (Some(failed), Some(retried)) => Ok((failed + 1, retried + 1)),
        _ => Err(format!("row {FLAKY_ROW} did not fail once and then get processed").into()),
    }
}
