//! Issue 13: rows that wait for their time (database clock), retries with backoff, dead
//! letters, and waiting for rows (notifications on PostgreSQL, polling elsewhere).

use diesel_lease::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::r2d2::{ConnectionManager, HandleEvent, Pool};
use diesel_lease::pool::{ConnectionTuning, WaiterWakeups};

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_lease::claim::{RetryOutcome, RetryPolicy};
use diesel_lease::{BackendKind, Error};

use crate::common::{pick, TestBackend, TestDb};
use crate::models::schema::{importjobs, reminders, tasks};
use crate::models::*;

/// Counts a pool's checkouts, keeping its waiters' listener.
#[derive(Debug)]
pub(crate) struct Counting {
    inner: WaiterWakeups,
    checkouts: Arc<AtomicUsize>,
}

impl HandleEvent for Counting {
    fn handle_checkout(&self, event: diesel::r2d2::event::CheckoutEvent) {
        self.checkouts.fetch_add(1, Ordering::SeqCst);
        self.inner.handle_checkout(event);
    }
}

backend_suite! {
    tests: [
        a_scheduled_row_is_never_claimed_before_its_time,
        due_rows_are_claimed_earliest_first,
        a_null_not_before_means_at_once,
        backoff_grows_then_the_row_is_dead_lettered,
        a_retry_is_owner_checked,
        a_retry_delay_needs_a_not_before_column,
        claim_next_wait_times_out_then_takes_a_row_that_arrives,
        an_idle_waiter_costs_at_most_one_query_per_second,
        the_installed_trigger_wakes_waiters_without_notify_ready,
    ];

    pub(crate) struct CountingPool {
        pub(crate) pool: Pool<ConnectionManager<<B as TestBackend>::Conn>>,
        checkouts: Arc<AtomicUsize>,
    }

    impl CountingPool {
        pub(crate) fn checkouts(&self) -> usize {
            self.checkouts.load(Ordering::SeqCst)
        }
    }

    /// A pool that counts its checkouts (each poll of a waiter is one), with the usual
    /// tuning and waiter wake-ups.
    pub(crate) fn counting_pool(db: &TestDb<B>) -> CountingPool {
        let checkouts = Arc::new(AtomicUsize::new(0));
        let pool = Pool::builder()
            .max_size(4)
            .connection_customizer(Box::new(ConnectionTuning::default()))
            .event_handler(Box::new(Counting {
                inner: WaiterWakeups::new::<<B as TestBackend>::Conn>(db.url.clone()),
                checkouts: Arc::clone(&checkouts),
            }))
            .build(ConnectionManager::new(db.url.clone()))
            .unwrap();
        CountingPool { pool, checkouts }
    }

    pub(crate) fn tasks_table(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = TASKS_DDL;
        db.ddl(pg, sqlite, mysql);
    }

    /// Inserts a task due `in_ms` milliseconds from the database's now (negative: overdue).
    pub(crate) fn insert_task(conn: &mut <B as TestBackend>::Conn, in_ms: i64, tenant: &str) -> i64 {
        let sql = pick::<B>(
            "INSERT INTO tasks (run_at, tenant) VALUES ((now() AT TIME ZONE 'UTC') + $1 * INTERVAL '1 millisecond', $2)",
            "INSERT INTO tasks (run_at, tenant) VALUES (strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ? / 1000.0)), ?)",
            "INSERT INTO tasks (run_at, tenant) VALUES (UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND, ?)",
        );
        diesel::sql_query(sql)
            .bind::<BigInt, _>(in_ms)
            .bind::<Text, _>(tenant)
            .execute(conn)
            .unwrap();
        tasks::table.select(diesel::dsl::max(tasks::id)).first::<Option<i64>>(conn).unwrap().unwrap()
    }

    pub(crate) fn task(conn: &mut <B as TestBackend>::Conn, id: i64) -> Task {
        tasks::table.find(id).select(Task::as_select()).first(conn).unwrap()
    }

    /// SQLite compares the text of a time column (README, "Every time is the database's"): a
    /// `run_at` of today's midnight written in ISO 8601's `T` form compares as later than every
    /// time of the day, so the row is not due; written as Diesel writes it, it is.
    #[allow(dead_code)] // registered for SQLite, the backend without a timestamp type
    pub(crate) fn sqlite_a_time_written_with_a_t_is_due_only_once_normalized(db: &TestDb<B>) {
        use diesel::connection::SimpleConnection;
        tasks_table(db);
        let mut conn = db.conn();
        let id = insert_task(&mut conn, 0, "t");
        conn.batch_execute("UPDATE tasks SET run_at = strftime('%Y-%m-%dT00:00:00', 'now')").unwrap();
        assert!(Task::claim().row(&mut conn).unwrap().is_none(), "a T-form time of today is due tomorrow");
        conn.batch_execute("UPDATE tasks SET run_at = strftime('%Y-%m-%d %H:%M:%f', run_at)").unwrap();
        assert_eq!(Task::claim().row(&mut conn).unwrap().map(|t| t.id), Some(id), "normalized, it is due");
    }

    pub(crate) fn a_scheduled_row_is_never_claimed_before_its_time(db: &TestDb<B>) {
        tasks_table(db);
        let mut conn = db.conn();
        let later = insert_task(&mut conn, 1500, "");
        let now = insert_task(&mut conn, -10, "");
        assert_eq!(Task::claim().row(&mut conn).unwrap().map(|t| t.id), Some(now));
        let started = Instant::now();
        let claimed = loop {
            if let Some(t) = Task::claim().row(&mut conn).unwrap() {
                break t;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "never became due");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(claimed.id, later);
        // By the database clock: the claim's own time is not before the row's time.
        assert!(claimed.claimed_at.unwrap() >= claimed.run_at, "{claimed:?}");
        assert!(started.elapsed() >= Duration::from_millis(1000), "claimed after {:?}", started.elapsed());
    }

    pub(crate) fn due_rows_are_claimed_earliest_first(db: &TestDb<B>) {
        tasks_table(db);
        let mut conn = db.conn();
        let a = insert_task(&mut conn, -1000, "");
        let b = insert_task(&mut conn, -3000, "");
        let c = insert_task(&mut conn, -2000, "");
        let _future = insert_task(&mut conn, 60_000, "");
        let order: Vec<i64> = Task::claim().batch(10).rows(&mut conn).unwrap().into_iter().map(|t| t.id).collect();
        let mut sorted = order.clone();
        sorted.sort_by_key(|id| [b, c, a].iter().position(|x| x == id));
        assert_eq!(sorted, vec![b, c, a], "exactly the due rows");
        // One by one, the claims come in due order.
        diesel::update(tasks::table).set((tasks::status.eq("new"), tasks::owner.eq(None::<String>))).filter(tasks::id.ne(_future)).execute(&mut conn).unwrap();
        let one_by_one: Vec<i64> = std::iter::from_fn(|| Task::claim().row(&mut conn).unwrap().map(|t| t.id)).collect();
        assert_eq!(one_by_one, vec![b, c, a]);
    }

    pub(crate) fn a_null_not_before_means_at_once(db: &TestDb<B>) {
        tasks_table(db);
        let mut conn = db.conn();
        diesel::insert_into(reminders::table).values(reminders::id.eq(1)).execute(&mut conn).unwrap();
        let future = pick::<B>(
            "INSERT INTO reminders (id, not_before) VALUES (2, (now() AT TIME ZONE 'UTC') + INTERVAL '1 hour')",
            "INSERT INTO reminders (id, not_before) VALUES (2, strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour'))",
            "INSERT INTO reminders (id, not_before) VALUES (2, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
        );
        diesel::sql_query(future).execute(&mut conn).unwrap();
        assert_eq!(Reminder::claim().row(&mut conn).unwrap().map(|r| r.id), Some(1));
        assert_eq!(Reminder::claim().row(&mut conn).unwrap(), None, "the other is an hour away");
    }

    pub(crate) fn backoff_grows_then_the_row_is_dead_lettered(db: &TestDb<B>) {
        tasks_table(db);
        let mut conn = db.conn();
        let id = insert_task(&mut conn, -10, "");
        let policy = RetryPolicy::new(4).unwrap().base(Duration::from_millis(200)).jitter(0.0);
        let mut waits = Vec::new();
        for attempt in 1..=4i64 {
            let started = Instant::now();
            let t = loop {
                if let Some(t) = Task::claim().row(&mut conn).unwrap() {
                    break t;
                }
                assert!(started.elapsed() < Duration::from_secs(10));
                std::thread::sleep(Duration::from_millis(10));
            };
            assert_eq!((t.id, i64::from(t.attempts)), (id, attempt));
            let outcome = t.fail_or_retry_because(&mut conn, &policy, &format!("boom {attempt}")).unwrap();
            let after = task(&mut conn, id);
            assert_eq!(after.last_error.as_deref(), Some(format!("boom {attempt}").as_str()));
            if attempt < 4 {
                let delay = Duration::from_millis(200 << (attempt - 1));
                assert_eq!(outcome, RetryOutcome::Retried { attempt, delay });
                assert_eq!((after.status.as_str(), after.owner.as_deref()), ("new", None));
                // The row's new time is the database's now plus the delay: at least the delay
                // after the claim, by the database clock.
                let wait = (after.run_at - t.claimed_at.unwrap()).to_std().unwrap();
                assert!(wait >= delay, "attempt {attempt}: {wait:?} < {delay:?}");
                waits.push(wait);
                assert!(Task::claim().row(&mut conn).unwrap().is_none(), "claimed before its backoff");
            } else {
                assert_eq!(outcome, RetryOutcome::Failed { attempt: 4 });
                assert_eq!(after.status, "dead");
            }
        }
        assert!(waits.windows(2).all(|w| w[0] < w[1]), "backoff grows: {waits:?}");
        assert!(Task::claim().row(&mut conn).unwrap().is_none(), "a dead letter is never claimed");
    }

    pub(crate) fn a_retry_is_owner_checked(db: &TestDb<B>) {
        tasks_table(db);
        let mut conn = db.conn();
        let id = insert_task(&mut conn, -10, "");
        let stale = Task::claim().row(&mut conn).unwrap().unwrap();
        assert!(stale.retry(&mut conn, Duration::ZERO).unwrap());
        let fresh = Task::claim().row(&mut conn).unwrap().expect("ready again at once");
        assert_eq!(fresh.id, id);
        // The first claim's copy can no longer move the row.
        assert!(!stale.retry(&mut conn, Duration::from_secs(1)).unwrap());
        let policy = RetryPolicy::new(1).unwrap();
        assert_eq!(stale.fail_or_retry(&mut conn, &policy).unwrap(), RetryOutcome::Lost);
        assert_eq!(task(&mut conn, id).status, "running");
        assert!(fresh.complete(&mut conn).unwrap());
    }

    pub(crate) fn a_retry_delay_needs_a_not_before_column(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = IMPORTJOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        let mut conn = db.conn();
        diesel::insert_into(importjobs::table)
            .values((importjobs::id.eq(1), importjobs::statuscode.eq("JOBEXTRACTED"), importjobs::payload.eq("")))
            .execute(&mut conn)
            .unwrap();
        let job = ImportJob::claim().row(&mut conn).unwrap().unwrap();
        assert!(matches!(job.retry(&mut conn, Duration::from_secs(1)), Err(Error::Config(_))));
        assert!(job.retry(&mut conn, Duration::ZERO).unwrap(), "an immediate retry needs no column");
    }

    pub(crate) fn claim_next_wait_times_out_then_takes_a_row_that_arrives(db: &TestDb<B>) {
        tasks_table(db);
        let pool = db.pool(4);
        let started = Instant::now();
        assert!(Task::claim().wait(Duration::from_millis(300)).row(&pool).unwrap().is_none());
        assert!(started.elapsed() >= Duration::from_millis(300));
        for _ in 0..2 {
            assert_woken(latency_after_idle(db, |conn| {
                let id = insert_task(conn, -10, "");
                Task::queue().notify(conn).unwrap();
                id
            }));
        }
    }

    /// Idle long enough that polls are a second apart, then inserts a row (by `insert`): the
    /// waiter's latency from the insert to its claim, and how many pool checkouts (polls) it
    /// made in between.
    fn latency_after_idle(
        db: &TestDb<B>,
        insert: impl FnOnce(&mut <B as TestBackend>::Conn) -> i64 + Send,
    ) -> (Duration, usize) {
        let pool = counting_pool(db);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let t = Task::claim().wait(Duration::from_secs(20)).row(&pool.pool).unwrap().expect("a row");
                (t, Instant::now(), pool.checkouts())
            });
            std::thread::sleep(Duration::from_millis(2500));
            let mut conn = db.conn();
            let (inserted, before) = (Instant::now(), pool.checkouts());
            let id = insert(&mut conn);
            let (t, at, after) = waiter.join().unwrap();
            assert_eq!((t.id, t.status.as_str()), (id, "running"));
            (at - inserted, after - before)
        })
    }

    /// On PostgreSQL a notification wakes the waiter within milliseconds; elsewhere its next
    /// poll finds the row: at most two polls after the insert (one may have been under way
    /// when the row came), however slow the machine makes them.
    fn assert_woken((latency, polls): (Duration, usize)) {
        if B::KIND == BackendKind::Postgres {
            assert!(latency < Duration::from_millis(400), "woken after {latency:?}");
        } else {
            assert!(polls <= 2, "found after {polls} polls ({latency:?})");
        }
    }

    pub(crate) fn the_installed_trigger_wakes_waiters_without_notify_ready(db: &TestDb<B>) {
        tasks_table(db);
        Task::queue().install_ready_trigger(&mut db.conn()).unwrap();
        // Installing again replaces it.
        Task::queue().install_ready_trigger(&mut db.conn()).unwrap();
        for _ in 0..2 {
            assert_woken(latency_after_idle(db, |conn| insert_task(conn, -10, "")));
        }
    }

    pub(crate) fn an_idle_waiter_costs_at_most_one_query_per_second(db: &TestDb<B>) {
        tasks_table(db);
        let pool = counting_pool(db);
        std::thread::scope(|s| {
            s.spawn(|| Task::claim().wait(Duration::from_millis(6500)).row(&pool.pool).unwrap());
            // The first polls come fast (20 ms, doubling); from then on one per second at most.
            std::thread::sleep(Duration::from_millis(1500));
            let before = pool.checkouts();
            std::thread::sleep(Duration::from_secs(5));
            let polls = pool.checkouts() - before;
            assert!((2..=6).contains(&polls), "{polls} polls in 5 s");
        });
    }
}

#[cfg(feature = "sqlite")]
mod on_sqlite {
    crate::backend_cases!(sqlite, Sqlite: sqlite_a_time_written_with_a_t_is_due_only_once_normalized);
}
