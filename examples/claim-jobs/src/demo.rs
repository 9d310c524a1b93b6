// The demo itself. `main.rs` compiles this file twice, with `Conn = SqliteConnection` and
// `Conn = PgConnection`.

use std::collections::HashMap;
use std::time::Instant;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_lease::prelude::*;

use super::{importjobs, BoxError, ImportJob, DDL, JOBS, WORKERS};

type DbPool = Pool<ConnectionManager<Conn>>;

pub(super) fn run(url: &str, backend: &str) -> Result<(), BoxError> {
    // One pooled connection per worker, plus `conn` for set-up and checks. `build_pool` also
    // sets SQLite's busy_timeout and WAL mode.
    let pool: DbPool = diesel_lease::pool::build_pool(url, WORKERS as u32 + 1)?;
    let mut conn = pool.get()?;
    conn.batch_execute(DDL)?;

    // First one job per claim (seed 003), then the same work in batches of 100.
    for batch in [1, 100] {
        create_jobs(&mut conn)?;
        // Timed: every claim and every `complete`, by all workers, until no job is left.
        let started = Instant::now();
        let claimed = drain(&pool, batch)?;
        let secs = started.elapsed().as_secs_f64();
        check_each_claimed_once(&claimed, &mut conn)?;

        let how = match batch {
            1 => "one at a time (claim().row)".to_string(),
            n => format!("in batches of {n} (claim().batch(n).rows)"),
        };
        println!(
            "{WORKERS} workers claimed {JOBS} jobs {how}, each exactly once, in {secs:.1} s \
             ({:.0} claims/s) on {backend}",
            JOBS as f64 / secs
        );
    }
    Ok(())
}

/// Empties the table and fills it with `JOBS` jobs waiting in state `JOBEXTRACTED`.
fn create_jobs(conn: &mut Conn) -> QueryResult<()> {
    diesel::delete(importjobs::table).execute(conn)?;
    let jobs: Vec<_> = (1..=JOBS)
        .map(|id| {
            (
                importjobs::id.eq(id),
                importjobs::statuscode.eq("JOBEXTRACTED"),
            )
        })
        .collect();
    conn.transaction(|conn| {
        for chunk in jobs.chunks(1000) {
            diesel::insert_into(importjobs::table)
                .values(chunk)
                .execute(conn)?;
        }
        Ok(())
    })
}

/// Runs `WORKERS` threads until no job is left and returns the ids each of them claimed.
fn drain(pool: &DbPool, batch: usize) -> Result<Vec<i64>, BoxError> {
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| s.spawn(move || work(pool, batch)))
            .collect();
        let mut claimed = Vec::new();
        for worker in workers {
            claimed.extend(worker.join().map_err(|_| "a worker thread panicked")??);
        }
        Ok(claimed)
    })
}

/// One worker: claim, import, mark done, until there is nothing left to claim.
fn work(pool: &DbPool, batch: usize) -> Result<Vec<i64>, BoxError> {
    let mut conn = pool.get()?;
    let mut claimed = Vec::new();
    loop {
        let jobs = match batch {
            1 => ImportJob::claim().row(&mut conn)?.into_iter().collect(),
            n => ImportJob::claim().batch(n).rows(&mut conn)?,
        };
        if jobs.is_empty() {
            return Ok(claimed);
        }
        for job in jobs {
            if job.statuscode != "EXECUTIONINPROGRESS" {
                return Err(format!("job {} came back in state {}", job.id, job.statuscode).into());
            }
            // … the import of job `job.id` happens here …

            // Owner-checked: `false` would mean that this worker no longer owned the job.
            if !job.complete(&mut conn)? {
                return Err(format!("job {} was no longer ours to complete", job.id).into());
            }
            claimed.push(job.id);
        }
    }
}

/// The property: each job was claimed by exactly one worker, once, and all are `DONE`.
fn check_each_claimed_once(claimed: &[i64], conn: &mut Conn) -> Result<(), BoxError> {
    let mut times: HashMap<i64, u32> = HashMap::new();
    for id in claimed {
        *times.entry(*id).or_default() += 1;
    }
    if let Some((id, n)) = times.iter().find(|(_, n)| **n > 1) {
        return Err(format!("job {id} was claimed {n} times").into());
    }
    let done: i64 = importjobs::table
        .filter(importjobs::statuscode.eq("DONE"))
        .count()
        .get_result(conn)?;
    if times.len() as i64 != JOBS || done != JOBS {
        return Err(format!(
            "{} of {JOBS} jobs were claimed, {done} are DONE",
            times.len()
        )
        .into());
    }
    Ok(())
}
