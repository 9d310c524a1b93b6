//! What a new user writes first: a table of jobs, a model with `#[derive(Claimable)]`, and
//! workers that claim the jobs on SQLite. Exits non-zero unless every job was handed out
//! exactly once and completed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        state -> Text,
        worker -> Nullable<Text>,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = state, ready = "new", claimed = "running", done = "done", owner = worker)]
struct Job {
    id: i64,
    state: String,
    worker: Option<String>,
}

const JOBS: i64 = 200;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(format!("new-app-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = dir.join("jobs.db").display().to_string();
    let mut conn = SqliteConnection::establish(&url)?;
    conn.batch_execute(
        "CREATE TABLE jobs (id BIGINT PRIMARY KEY, state TEXT NOT NULL, worker TEXT);
         CREATE INDEX jobs_ready ON jobs (state, id);",
    )?;
    let rows: Vec<_> = (1..=JOBS)
        .map(|id| (jobs::id.eq(id), jobs::state.eq("new")))
        .collect();
    diesel::insert_into(jobs::table)
        .values(&rows)
        .execute(&mut conn)?;

    let handed_out = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            let handed_out = Arc::clone(&handed_out);
            std::thread::spawn(move || -> Result<(), BoxError> {
                let mut conn = SqliteConnection::establish(&url)?;
                // A claim or completion that gave up waiting for the database file's lock (a
                // loaded machine: four writers and no busy timeout on a plain connection)
                // changed nothing; a worker tries again.
                let again =
                    |e: &diesel_lease::Error| matches!(e, diesel_lease::Error::Timeout { .. });
                loop {
                    let job = match Job::claim().row(&mut conn) {
                        Ok(Some(job)) => job,
                        Ok(None) => break,
                        Err(e) if again(&e) => continue,
                        Err(e) => return Err(e.into()),
                    };
                    assert_eq!(
                        job.state, "running",
                        "job {} as the claim read it back",
                        job.id
                    );
                    handed_out.lock().expect("not poisoned").push(job.id);
                    let completed = loop {
                        match job.complete(&mut conn) {
                            Err(e) if again(&e) => continue,
                            other => break other?,
                        }
                    };
                    assert!(completed, "job {} was still ours", job.id);
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker panicked")?;
    }

    let handed_out = handed_out.lock().expect("not poisoned");
    let distinct: HashSet<_> = handed_out.iter().collect();
    let done: i64 = jobs::table
        .filter(jobs::state.eq("done"))
        .count()
        .get_result(&mut conn)?;
    std::fs::remove_dir_all(&dir)?;
    if handed_out.len() as i64 != JOBS || distinct.len() as i64 != JOBS || done != JOBS {
        return Err(format!(
            "{} hand-outs of {} distinct jobs, {done} done; expected {JOBS} of each",
            handed_out.len(),
            distinct.len()
        )
        .into());
    }
    println!("new-app: {JOBS} jobs, each handed out once and done, on SQLite");
    Ok(())
}
