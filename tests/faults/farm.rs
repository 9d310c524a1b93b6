//! A farm of workers draining the README's headline model (claim timeout, `max_attempts`, a
//! failed state, the recommended `(statuscode, id)` index): no error reaches a worker and every
//! row is done exactly once.
//!
//! On MariaDB one worker used to hang for good inside `mysql_stmt_execute` (client in `poll(-1)`,
//! the server showing the session asleep with its transaction open, every other worker waiting
//! on that transaction's row locks). The cause: Diesel caches prepared statements, and a cached
//! scanning `SELECT … FOR UPDATE SKIP LOCKED` whose execution had failed after the server sent
//! its column definitions leaves libmariadb waiting, on the statement's next execution, for the
//! rest of the failed result. Claim picks on MySQL now run outside the statement cache
//! (`backend/mysql.rs`, `Uncached`; `mysql_claim_picks_are_not_cached` below).
//!
//! `DIESEL_LEASE_FARM_ROWS` (default 2,000) scales it; the 20,000-row MariaDB farm at
//! both isolation levels: `DIESEL_LEASE_FARM_ROWS=20000 bash scripts/test.sh -- faults::farm`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::prelude::*;

use crate::common::TestDb;
use crate::models::schema::importjobs;
use crate::models::*;

const WORKERS: usize = 6;

backend_suite! {
    fixtures: crate::claim::basics;
    tests: [];

    #[allow(dead_code)] // registered per backend below
    pub(crate) fn six_workers_drain_the_headline_model_without_errors(db: &TestDb<B>) {
        let rows: i64 = std::env::var("DIESEL_LEASE_FARM_ROWS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(2_000);
        fixtures::seed_jobs(db, rows);
        let claimed = Mutex::new(Vec::new());
        let errors = Mutex::new(Vec::new());
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..WORKERS {
                s.spawn(|| {
                    let mut conn = db.conn();
                    let mut mine = Vec::new();
                    loop {
                        match ImportJob::claim_next(&mut conn) {
                            Ok(Some(job)) => match job.complete(&mut conn) {
                                Ok(true) => mine.push(job.id),
                                Ok(false) => errors.lock().unwrap().push(format!("job {} was not ours at complete", job.id)),
                                Err(e) => errors.lock().unwrap().push(format!("complete: {e}")),
                            },
                            Ok(None) => break,
                            Err(e) => errors.lock().unwrap().push(format!("claim: {e}")),
                        }
                        assert!(started.elapsed() < Duration::from_secs(600), "the farm hung");
                    }
                    claimed.lock().unwrap().extend(mine);
                });
            }
        });
        let errors = errors.into_inner().unwrap();
        assert!(errors.is_empty(), "{} errors reached the workers: {:?}", errors.len(), &errors[..errors.len().min(5)]);
        let mut claimed = claimed.into_inner().unwrap();
        claimed.sort_unstable();
        let expected: Vec<i64> = (1..=rows).collect();
        assert_eq!(claimed.len(), expected.len(), "rows done twice or not at all");
        assert_eq!(claimed, expected);
        let done: i64 = importjobs::table
            .filter(importjobs::statuscode.eq("DONE"))
            .count()
            .get_result(&mut db.conn())
            .unwrap();
        assert_eq!(done, rows);
        eprintln!("{rows} rows by {WORKERS} workers on {} in {:?}", <B as crate::common::TestBackend>::NAME, started.elapsed());
    }
}

#[cfg(feature = "postgres")]
#[test]
fn six_workers_drain_the_headline_model_on_postgres() {
    crate::common::run::<crate::common::Postgres>(
        "six_workers_drain_the_headline_model",
        postgres::cases::six_workers_drain_the_headline_model_without_errors,
    )
}

#[cfg(feature = "sqlite")]
#[test]
fn six_workers_drain_the_headline_model_on_sqlite() {
    crate::common::run::<crate::common::Sqlite>(
        "six_workers_drain_the_headline_model",
        sqlite::cases::six_workers_drain_the_headline_model_without_errors,
    )
}

#[cfg(feature = "mysql")]
#[test]
fn six_workers_drain_the_headline_model_on_mysql() {
    crate::common::run::<crate::common::Mysql>(
        "six_workers_drain_the_headline_model",
        mysql::cases::six_workers_drain_the_headline_model_without_errors,
    )
}

/// MySQL: every claim prepares its pick afresh, so a pick that failed after the server had sent
/// its column definitions (the farm's hang: libmariadb then waits forever, on the cached
/// statement's next execution, for the rest of the failed result) is never executed again.
#[cfg(feature = "mysql")]
#[test]
fn mysql_claim_picks_are_not_cached() {
    fn body(db: &TestDb<crate::common::Mysql>) {
        #[derive(QueryableByName)]
        struct Status {
            #[diesel(sql_type = diesel::sql_types::Text)]
            #[diesel(column_name = Value)]
            value: String,
        }
        let prepares = |conn: &mut diesel::MysqlConnection| -> u64 {
            diesel::sql_query("SHOW SESSION STATUS LIKE 'Com_stmt_prepare'")
                .get_result::<Status>(conn)
                .unwrap()
                .value
                .parse()
                .unwrap()
        };
        crate::claim::basics::mysql::cases::seed_jobs(db, 20);
        let mut conn = db.conn();
        // Warm Diesel's cache with every cacheable statement of a claim and a completion.
        ImportJob::claim_next(&mut conn)
            .unwrap()
            .unwrap()
            .complete(&mut conn)
            .unwrap();
        let before = prepares(&mut conn);
        for _ in 0..10 {
            ImportJob::claim_next(&mut conn)
                .unwrap()
                .unwrap()
                .complete(&mut conn)
                .unwrap();
        }
        let fresh = prepares(&mut conn) - before;
        assert!(
            fresh >= 10,
            "{fresh} prepares for 10 claims: the pick came from the cache"
        );
    }
    crate::common::run::<crate::common::Mysql>("mysql_claim_picks_are_not_cached", body)
}
