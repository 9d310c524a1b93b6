//! Second-precision time columns (seed 000's exact DDL: `datetime NULL` on MariaDB, and
//! PostgreSQL `timestamp(0)`): the database rounds or truncates what diesel-lease writes to whole
//! seconds, and still no run is taken over before its timeout, no run starts before its
//! interval, and no claim is rescued before its timeout.
//!
//! Each case starts at a fixed point in the second (a quarter to a half past), where both
//! MariaDB's truncation and PostgreSQL's rounding store an instant earlier than the real one, so
//! comparing the stored value as if it were exact would act 0.25-0.45 s early. Elapsed times are
//! measured from before the first statement to after the one that acted: an upper bound of the
//! database-clock interval between them, so `elapsed >= limit` holds whenever the database acted
//! no earlier than allowed.

use diesel_lease::prelude::*;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::OwnerId;

use super::jobs::node;
use crate::common::TestDb;
use crate::models::schema::{importjobs, job_status};
use crate::models::*;

/// Seed 000's table exactly as the seed writes it (PostgreSQL: `timestamp(0)`, its nearest
/// second-precision type).
const SEED_000_EXACT_DDL: (&str, &str, &str) = (
    "CREATE TABLE job_status (job_id varchar(254) NOT NULL, running_at varchar(254) NULL, \
       last_run_started timestamp(0) NULL, next_run timestamp(0) NULL, PRIMARY KEY(job_id));",
    "CREATE TABLE job_status (job_id varchar(254) NOT NULL, running_at varchar(254) NULL, \
       last_run_started datetime NULL, next_run datetime NULL, PRIMARY KEY(job_id));",
    "CREATE TABLE job_status (job_id varchar(254) NOT NULL, running_at varchar(254) NULL, \
       last_run_started datetime NULL, next_run datetime NULL, PRIMARY KEY(job_id));",
);

/// Seed 003's claim table with a whole-second `claimed_at`.
const IMPORTJOBS_SECONDS_DDL: (&str, &str, &str) = (
    "CREATE TABLE importjobs (id BIGINT PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT, \
       claimed_at TIMESTAMP(0), attempts INTEGER NOT NULL DEFAULT 0, payload TEXT NOT NULL DEFAULT '');",
    "CREATE TABLE importjobs (id INTEGER PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT, \
       claimed_at datetime, attempts INTEGER NOT NULL DEFAULT 0, payload TEXT NOT NULL DEFAULT '');",
    "CREATE TABLE importjobs (id BIGINT PRIMARY KEY, statuscode VARCHAR(32) NOT NULL, worker VARCHAR(255), \
       claimed_at datetime NULL, attempts INT NOT NULL DEFAULT 0, payload TEXT NOT NULL);",
);

/// Waits until the wall clock (the database's, on this host) is 0.25-0.45 s past a second.
fn at_a_third_past_a_second() {
    loop {
        let frac = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_millis();
        if (250..450).contains(&frac) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Calls `attempt` every 10 ms until it succeeds; how long after `start` it did. Panics when it
/// never does within `limit` plus a generous 5 s.
fn first_success(start: Instant, limit: Duration, mut attempt: impl FnMut() -> bool) -> Duration {
    loop {
        if attempt() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit + Duration::from_secs(5),
            "never happened"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

backend_suite! {
    tests: [
        seed_000_exact_ddl_never_takes_a_run_over_early,
        seed_000_exact_ddl_never_runs_before_the_interval,
        whole_second_claimed_at_is_never_rescued_early,
    ];

    fn seed_000_table(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = SEED_000_EXACT_DDL;
        db.ddl(pg, sqlite, mysql);
        diesel::insert_into(job_status::table)
            .values(job_status::job_id.eq("stock-prices"))
            .execute(&mut db.conn())
            .unwrap();
    }

    pub(crate) fn seed_000_exact_ddl_never_takes_a_run_over_early(db: &TestDb<B>) {
        seed_000_table(db);
        let (mut dead_conn, mut alive_conn) = (db.conn(), db.conn());
        let timeout = Duration::from_secs(1);
        let (dead, alive) = (node("dead-node", timeout), node("alive-node", timeout));
        at_a_third_past_a_second();
        let start = Instant::now();
        let _dead_run = JobStatus::try_start_run(&mut dead_conn, "stock-prices".into(), &dead).unwrap().expect("due");
        let took_over = first_success(start, timeout, || {
            JobStatus::try_start_run(&mut alive_conn, "stock-prices".into(), &alive).unwrap().is_some()
        });
        assert!(took_over >= timeout, "a run with a {timeout:?} timeout was taken over after {took_over:?}");
    }

    pub(crate) fn seed_000_exact_ddl_never_runs_before_the_interval(db: &TestDb<B>) {
        seed_000_table(db);
        let mut conn = db.conn();
        let interval = Duration::from_secs(1);
        let me = node("node-a", Duration::from_secs(60)).every(interval);
        at_a_third_past_a_second();
        let start = Instant::now();
        let run = JobStatus::try_start_run(&mut conn, "stock-prices".into(), &me).unwrap().expect("due");
        assert!(JobStatus::finish_run(&mut conn, "stock-prices".into(), &run).unwrap());
        let next = first_success(start, interval, || {
            JobStatus::try_start_run(&mut conn, "stock-prices".into(), &me).unwrap().is_some()
        });
        assert!(next >= interval, "a job due every {interval:?} ran again after {next:?}");
    }

    pub(crate) fn whole_second_claimed_at_is_never_rescued_early(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = IMPORTJOBS_SECONDS_DDL;
        db.ddl(pg, sqlite, mysql);
        diesel::insert_into(importjobs::table)
            .values((
                importjobs::id.eq(1),
                importjobs::statuscode.eq("JOBEXTRACTED"),
                importjobs::attempts.eq(0),
                importjobs::payload.eq(""),
            ))
            .execute(&mut db.conn())
            .unwrap();
        let (mut dead_conn, mut rescuer_conn) = (db.conn(), db.conn());
        let timeout = Duration::from_secs(1);
        let options = |name: &str| {
            ClaimOptions::default()
                .owner(OwnerId::new(name).unwrap())
                .timeout(timeout)
        };
        let (dead, rescuer) = (options("dead-worker"), options("rescuer"));
        at_a_third_past_a_second();
        let start = Instant::now();
        let claimed = ImportJob::claim_batch_with(&mut dead_conn, 1, &dead).unwrap();
        assert_eq!(claimed.len(), 1);
        let rescued = first_success(start, timeout, || {
            !ImportJob::claim_batch_with(&mut rescuer_conn, 1, &rescuer).unwrap().is_empty()
        });
        assert!(rescued >= timeout, "a claim with a {timeout:?} timeout was rescued after {rescued:?}");
    }
}
