//! A farm of workers draining the README's headline model (claim timeout, `max_attempts`, a
//! failed state, the recommended `(statuscode, id)` index): no error reaches a worker, no
//! deadlock even had to be retried, and every row is done exactly once. Every hand-out and
//! completion is recorded as the workers saw it and judged by `common::history` (each row once
//! per claim epoch, marked, completed by its holder), which a count of rows done cannot do.
//!
//! On MariaDB one worker used to hang for good inside `mysql_stmt_execute` (client in `poll(-1)`,
//! the server showing the session asleep with its transaction open, every other worker waiting
//! on that transaction's row locks). The cause: Diesel caches prepared statements, and a cached
//! scanning `SELECT … FOR UPDATE SKIP LOCKED` whose execution had failed after the server sent
//! its column definitions leaves libmariadb waiting, on the statement's next execution, for the
//! rest of the failed result. A failed claim transaction on MySQL now closes every cached
//! statement of its connection (`backend/mysql_like.rs`, `forget_prepared_statements`;
//! `mysql_a_claim_after_a_failed_pick_returns` below).
//!
//! `DIESEL_LEASE_FARM_ROWS` (default 2,000) scales it; the 20,000-row MariaDB farm at
//! both isolation levels: `DIESEL_LEASE_FARM_ROWS=20000 bash scripts/test.sh -- faults::farm`.

use diesel_lease::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::prelude::*;

use crate::common::history::{check_claims, with_first_hand_out_doubled, Event, History};
use crate::common::TestDb;
use crate::models::schema::importjobs;
use crate::models::*;

const WORKERS: usize = 6;

/// The headline model's claimed state, as its hand-outs must show it.
const CLAIMED: &str = "EXECUTIONINPROGRESS";

/// A tracing subscriber that counts diesel-lease's "retrying" events of deadlocks and
/// serialization failures (message `observe::RETRIED_CONFLICT`) and records nothing else.
#[derive(Clone, Default)]
struct RetryCount(Arc<AtomicUsize>);

impl tracing::Subscriber for RetryCount {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event() && metadata.target() == "diesel_lease"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 |=
                        format!("{value:?}").contains(diesel_lease::observe::RETRIED_CONFLICT);
                }
            }
        }
        let mut message = Message(false);
        event.record(&mut message);
        if message.0 {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

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
        let history = History::default();
        let retried = AtomicUsize::new(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..WORKERS {
                s.spawn(|| {
                    // The library's retries of deadlocks, counted from its tracing events in
                    // this thread (where `retry_conflicts` runs).
                    let retries = RetryCount::default();
                    let _counting = tracing::subscriber::set_default(retries.clone());
                    let mut conn = db.conn();
                    let mut mine = Vec::new();
                    loop {
                        match ImportJob::claim().row(&mut conn) {
                            Ok(Some(job)) => {
                                let holder = job.worker.clone().unwrap_or_default();
                                history.record(Event::HandedOut {
                                    row: job.id,
                                    holder: holder.clone(),
                                    state: job.statuscode.clone(),
                                    epoch: job.attempts.into(),
                                });
                                let completed = job.complete(&mut conn);
                                if let Ok(acknowledged) = completed {
                                    history.record(Event::Completed { row: job.id, holder, acknowledged });
                                }
                                match completed {
                                    Ok(true) => mine.push(job.id),
                                    Ok(false) => errors.lock().unwrap().push(format!("job {} was not ours at complete", job.id)),
                                    Err(e) => errors.lock().unwrap().push(format!("complete: {e}")),
                                }
                            }
                            Ok(None) => break,
                            Err(e) => errors.lock().unwrap().push(format!("claim: {e}")),
                        }
                        assert!(started.elapsed() < Duration::from_secs(600), "the farm hung");
                    }
                    claimed.lock().unwrap().extend(mine);
                    retried.fetch_add(retries.0.load(Ordering::Relaxed), Ordering::Relaxed);
                });
            }
        });
        history.check_claims(CLAIMED);
        assert!(history.hand_outs() as i64 >= rows, "every row handed out");
        // The check can fail on this very record: the same history with one hand-out given out
        // a second time in its epoch is a violation.
        let doubled = with_first_hand_out_doubled(&history.events());
        assert_eq!(check_claims(&doubled, CLAIMED).len(), 1, "the checker misses a doubled hand-out");
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
        let retried = retried.into_inner();
        eprintln!("{rows} rows by {WORKERS} workers on {} in {:?}; {retried} deadlock retries", <B as crate::common::TestBackend>::NAME, started.elapsed());
        // No lock-order clash left between claims, reaps and completions: nothing to retry.
        // (On MariaDB the reap inside each claim deadlocked with `complete` about 2,000 times per
        // 5,000 rows, absorbed by the retries, until it stopped waiting for row locks.)
        assert_eq!(retried, 0, "the library's statements deadlocked with each other");
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

#[cfg(feature = "mariadb")]
#[test]
fn six_workers_drain_the_headline_model_on_mariadb() {
    crate::common::run::<crate::common::Mariadb>(
        "six_workers_drain_the_headline_model",
        mariadb::cases::six_workers_drain_the_headline_model_without_errors,
    )
}

/// MySQL's statement cache, through both of Diesel's MySQL-family connections.
mod statement_cache {
    #[allow(unused_imports)]
    use super::*;

    crate::mysql_suite! {
        fixtures: crate::claim::basics;
        tests: [
            a_claim_after_a_failed_pick_returns,
            a_batch_with_a_lost_row_keeps_the_statement_cache,
        ];

        /// A claim whose pick failed mid-scan (here: interrupted by `max_statement_time` while a
        /// filter sleeps on its rows, after the server sent the result's column definitions)
        /// leaves no cached statement behind: the farm's hang was libmariadb waiting forever, on
        /// the cached statement's next execution, for the rest of the failed result. The next
        /// claim on the same connection, with the same statement text (the sleep is a bind),
        /// returns a row. Before and after, picks come from Diesel's statement cache (no prepare
        /// per claim).
        pub(crate) fn a_claim_after_a_failed_pick_returns(db: &TestDb<B>) {
            diesel::define_sql_function!(fn sleep(seconds: diesel::sql_types::Double) -> diesel::sql_types::BigInt);
            use diesel::connection::SimpleConnection;
            // Sleeps `secs` on every row the pick looks at (`id <> SLEEP(secs)`: SLEEP returns 0).
            let claim = |conn: &mut <B as crate::common::TestBackend>::Conn, secs: f64| {
                ImportJob::claim().filter(importjobs::id.ne(sleep(secs))).options(&diesel_lease::claim::ClaimOptions::default()).row(conn)
            };
            fixtures::seed_jobs(db, 30);
            let mut conn = db.conn();
            // Warm Diesel's cache with every statement of a claim and a completion.
            claim(&mut conn, 0.0)
                .unwrap()
                .unwrap()
                .complete(&mut conn)
                .unwrap();
            let before = prepares(&mut conn);
            for _ in 0..10 {
                claim(&mut conn, 0.0)
                    .unwrap()
                    .unwrap()
                    .complete(&mut conn)
                    .unwrap();
            }
            let fresh = prepares(&mut conn) - before;
            assert!(
                fresh <= 2,
                "{fresh} prepares for 10 claims: the picks do not come from the statement cache"
            );
            conn.batch_execute("SET SESSION max_statement_time = 0.5")
                .unwrap();
            let failed = claim(&mut conn, 2.0);
            assert!(
                matches!(failed, Err(diesel_lease::Error::Timeout { .. })),
                "the interrupted pick is a timeout: {failed:?}"
            );
            conn.batch_execute("SET SESSION max_statement_time = 0")
                .unwrap();
            // The next claim, on a thread, so that a hang fails the test instead of stalling it.
            let (sent, got) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let claimed = claim(&mut conn, 0.0).map(|job| job.map(|job| job.id));
                let _ = sent.send(claimed);
            });
            let next = got.recv_timeout(Duration::from_secs(60)).expect(
                "the claim after a failed pick hung (a cached statement awaited a lost result)",
            );
            assert!(
                matches!(next, Ok(Some(_))),
                "the next claim gets a row: {next:?}"
            );
        }

        /// How many statements this session has prepared so far (its own query included).
        fn prepares(conn: &mut <B as crate::common::TestBackend>::Conn) -> u64 {
            #[derive(QueryableByName)]
            struct Status {
                #[diesel(sql_type = diesel::sql_types::Text)]
                #[diesel(column_name = Value)]
                value: String,
            }
            diesel::sql_query("SHOW SESSION STATUS LIKE 'Com_stmt_prepare'")
                .get_result::<Status>(conn)
                .unwrap()
                .value
                .parse()
                .unwrap()
        }

        /// A `complete_batch` that finds a row no longer its own rolls its first statement back
        /// on purpose (fewer rows changed than it sent) and then moves exactly its rows. No
        /// statement failed, so Diesel's statement cache stays: ten such batches after a first
        /// one prepare next to nothing. (A failed transaction empties the cache, see
        /// `backend/mysql_like.rs`; this rollback used to count as one, and every statement of
        /// the next claim and completion was prepared again.)
        pub(crate) fn a_batch_with_a_lost_row_keeps_the_statement_cache(db: &TestDb<B>) {
            fixtures::seed_jobs(db, 100);
            let mut conn = db.conn();
            let mut other = db.conn();
            let mut claim_lose_one_complete = |conn: &mut <B as crate::common::TestBackend>::Conn| {
                let rows = ImportJob::claim().batch(5).rows(conn).unwrap();
                assert_eq!(rows.len(), 5);
                diesel::update(importjobs::table.find(rows[2].id))
                    .set(importjobs::worker.eq("someone-else"))
                    .execute(&mut other)
                    .unwrap();
                let outcome = rows.complete(conn).unwrap();
                assert_eq!(outcome, [true, true, false, true, true]);
            };
            // Warm Diesel's cache with every statement of a claim and both completion paths.
            claim_lose_one_complete(&mut conn);
            let before = prepares(&mut conn);
            for _ in 0..10 {
                claim_lose_one_complete(&mut conn);
            }
            let fresh = prepares(&mut conn) - before;
            assert!(
                fresh <= 2,
                "{fresh} prepares for 10 batches that each lost a row: the statement cache was emptied"
            );
            let done: i64 = importjobs::table
                .filter(importjobs::statuscode.eq("DONE"))
                .count()
                .get_result(&mut conn)
                .unwrap();
            assert_eq!(done, 44, "four rows of each of the 11 batches");
        }
    }
}

/// The farm's deadlock counter counts the library's retry event, written as the library writes
/// it, and nothing else: a zero from it means no retry, not a counter that never matches.
#[test]
fn the_retry_counter_counts_retry_events_only() {
    let retries = RetryCount::default();
    {
        let _counting = tracing::subscriber::set_default(retries.clone());
        tracing::warn!(target: "diesel_lease", attempt = 1u32, error = "Deadlock found", "{}", diesel_lease::observe::RETRIED_CONFLICT);
        tracing::warn!(target: "diesel_lease", name = "report", "held in the background, now lost");
        tracing::warn!(target: "elsewhere", "{}", diesel_lease::observe::RETRIED_CONFLICT);
    }
    assert_eq!(retries.0.load(Ordering::Relaxed), 1);
}
