//! Issue 23, item 2: idle waiters cost the database the same whether they are ten or a thousand.
//! The statements are counted as the pool's connections send them (`common::counted`): every
//! poll a waiter makes goes through them.
//! The verdicts are counts, never timings; the p50 latency of a new row is measured by the
//! benchmark program (`bench/`, section `idle`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_lease::prelude::*;
use diesel_lease::worker::Worker;

use crate::common::counted::{counted_pool, idle_statements, WINDOW};
use crate::common::TestDb;

pub(crate) mod schema {
    diesel::table! {
        idle_jobs (id) {
            id -> BigInt,
            status -> Text,
            attempts -> Integer,
        }
    }
}
use schema::idle_jobs;

/// A queue of jobs that stays empty while the waiters are counted.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = idle_jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
            attempts = attempts)]
pub(crate) struct IdleJob {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) attempts: i32,
}

const IDLE_JOBS_DDL: (&str, &str, &str) = (
    "CREATE TABLE idle_jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', attempts INTEGER NOT NULL DEFAULT 0);",
    "CREATE TABLE idle_jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', attempts INTEGER NOT NULL DEFAULT 0);",
    "CREATE TABLE idle_jobs (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT 'new', attempts INT NOT NULL DEFAULT 0);",
);

/// Statements per second below which the waiters have settled: a few polls' worth.
const SETTLED: u64 = 60;

backend_suite! {
    tests: [
        idle_waiters_cost_the_same_whether_ten_or_a_thousand,
    ];

    fn insert(db: &TestDb<B>, ids: std::ops::RangeInclusive<i64>) {
        let values: Vec<_> = ids.map(|id| idle_jobs::id.eq(id)).collect();
        for chunk in values.chunks(200) {
            diesel::insert_into(idle_jobs::table).values(chunk).execute(&mut db.conn()).unwrap();
        }
    }

    /// `n` threads in `claim_next_wait` (each sends what it got, `None` at its timeout), and a
    /// `Worker` of `workers` threads on an empty queue, all on `pool`. Returns the waiters' and
    /// the worker's threads.
    fn wait_on(
        pool: &Pool<ConnectionManager<<B as crate::common::TestBackend>::Conn>>,
        n: usize,
        workers: usize,
        stop: &Arc<AtomicBool>,
        got: &mpsc::Sender<Option<i64>>,
    ) -> (Vec<std::thread::JoinHandle<()>>, std::thread::JoinHandle<usize>) {
        let waiters = (0..n)
            .map(|_| {
                let (pool, got) = (pool.clone(), got.clone());
                std::thread::spawn(move || {
                    let job = IdleJob::claim().wait(Duration::from_secs(180)).row(&pool).unwrap();
                    got.send(job.map(|j| j.id)).unwrap();
                })
            })
            .collect();
        let (pool, stop) = (pool.clone(), Arc::clone(stop));
        let worker = std::thread::spawn(move || {
            let ran = Arc::new(AtomicU64::new(0));
            let counted = Arc::clone(&ran);
            Worker::new(pool)
                .concurrency(workers)
                .run_until(&stop, move |_conn, _job: &IdleJob| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(())
                })
                .unwrap();
            usize::try_from(ran.load(Ordering::SeqCst)).unwrap()
        });
        (waiters, worker)
    }

    /// Ten waiters (and a `Worker` of two threads), then a thousand (and a `Worker` of fifty)
    /// on an empty queue: the thousand cost at most twice what the ten cost, plus a few polls.
    /// Then, the workers stopped, one row reaches exactly one of the waiters, and a row for each
    /// of the others reaches each: every waiter gets one row, every row is claimed once.
    pub(crate) fn idle_waiters_cost_the_same_whether_ten_or_a_thousand(db: &TestDb<B>) {
        db.migrate();
        let (pg, sqlite, mysql) = IDLE_JOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        let stop = Arc::new(AtomicBool::new(false));

        let (few_pool, few_statements) = counted_pool::<<B as crate::common::TestBackend>::Conn>(&db.url, 4);
        let (got, rx) = mpsc::channel();
        let (few, few_worker) = wait_on(&few_pool, 10, 2, &stop, &got);
        let ten = idle_statements(&few_statements, 10, SETTLED, SETTLED * WINDOW.as_secs(), "10 waiters");

        let (many_pool, many_statements) = counted_pool::<<B as crate::common::TestBackend>::Conn>(&db.url, 10);
        let (many, many_worker) = wait_on(&many_pool, 1000, 50, &stop, &got);
        let thousand = idle_statements(&many_statements, 1000, SETTLED, 2 * ten + 40, "1000 waiters");
        eprintln!("idle statements in {WINDOW:?}: 10 waiters {ten}, 1000 waiters {thousand}");
        assert!(
            thousand <= 2 * ten + 40,
            "1000 idle waiters sent {thousand} statements in {WINDOW:?}, 10 sent {ten}"
        );
        assert!(ten > 0, "the waiters of an empty queue still poll");
        stop.store(true, Ordering::SeqCst);
        assert_eq!(few_worker.join().unwrap() + many_worker.join().unwrap(), 0, "the queue was empty");

        // One row: exactly one waiter of the two pools gets it.
        insert(db, 1..=1);
        let first = rx.recv_timeout(Duration::from_secs(120));
        assert_eq!(first, Ok(Some(1)), "the row reached a waiter");
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "one row, one waiter");
        // A row for every other waiter.
        insert(db, 2..=1010);
        let mut ids = vec![1];
        for _ in 1..1010 {
            let id = rx.recv_timeout(Duration::from_secs(120)).expect("every waiter got a row");
            ids.push(id.expect("no waiter timed out"));
        }
        for thread in few.into_iter().chain(many) {
            thread.join().unwrap();
        }
        ids.sort();
        assert_eq!(ids, (1..=1010).collect::<Vec<_>>(), "each row claimed exactly once");
    }

    /// The waiters of one pool share a poller; here the poller's claim hangs (a trigger makes
    /// the update of row 1 sleep, as a connection that stopped answering would keep it), and
    /// row 2, inserted then, must still reach the other waiter: it polls in the hung poller's
    /// place a poll interval later. Without that, it waited for the poller until its own
    /// timeout. (PostgreSQL and MariaDB: SQLite has no sleep to put in a trigger.)
    #[allow(dead_code)] // registered for the backends with a sleep function
    pub(crate) fn a_hung_poll_does_not_keep_the_other_waiters_from_new_rows(db: &TestDb<B>) {
        use diesel::connection::SimpleConnection;
        let (pg, sqlite, mysql) = IDLE_JOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        db.ddl(
            "CREATE FUNCTION idle_jobs_hang() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NEW.id = 1 AND NEW.status = 'running' THEN PERFORM pg_sleep(120); END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER idle_jobs_hang BEFORE UPDATE ON idle_jobs \
               FOR EACH ROW EXECUTE FUNCTION idle_jobs_hang();",
            "",
            "CREATE TRIGGER idle_jobs_hang BEFORE UPDATE ON idle_jobs FOR EACH ROW \
               BEGIN IF NEW.id = 1 AND NEW.status = 'running' THEN DO SLEEP(120); END IF; END",
        );
        let pool = db.pool(6);
        let (got, rx) = mpsc::channel();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (pool, got) = (pool.clone(), got.clone());
                std::thread::spawn(move || {
                    let job = IdleJob::claim().wait(Duration::from_secs(40)).row(&pool);
                    let _ = got.send(job.map(|j| j.map(|j| j.id)).map_err(|e| e.to_string()));
                })
            })
            .collect();
        // Once they have looked at the empty queue and settled behind one poller.
        std::thread::sleep(Duration::from_millis(1_500));
        insert(db, 1..=1);
        let mut watch = db.conn();
        // The claims sleeping in the trigger now.
        let sleeping = crate::common::pick::<B>(
            "SELECT COUNT(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event = 'PgSleep'",
            "",
            "SELECT COUNT(*) AS n FROM information_schema.processlist \
             WHERE db = DATABASE() AND state = 'User sleep'",
        );
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let hung = (0..300).any(|_| {
            let n = diesel::sql_query(sleeping).get_result::<Count>(&mut watch).unwrap().n;
            n == 1 || { std::thread::sleep(Duration::from_millis(100)); false }
        });
        assert!(hung, "the poller never took row 1");
        insert(db, 2..=2);
        let second = rx.recv_timeout(Duration::from_secs(30));
        assert_eq!(second, Ok(Ok(Some(2))), "row 2 reached the other waiter");
        // End the hung claim; its waiter returns (an error, or row 1 once the sleep is cut).
        match <B as crate::common::TestBackend>::KIND {
            diesel_lease::BackendKind::Postgres => {
                watch.batch_execute(
                    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event = 'PgSleep'",
                ).unwrap();
            }
            _ => {
                #[derive(QueryableByName)]
                struct Id {
                    #[diesel(sql_type = diesel::sql_types::BigInt)]
                    id: i64,
                }
                let ids = diesel::sql_query(
                    "SELECT CAST(id AS SIGNED) AS id FROM information_schema.processlist \
                     WHERE db = DATABASE() AND state = 'User sleep'",
                )
                .load::<Id>(&mut watch)
                .unwrap();
                for Id { id } in ids {
                    watch.batch_execute(&format!("KILL QUERY {id}")).unwrap();
                }
            }
        }
        for waiter in waiters {
            waiter.join().unwrap();
        }
    }
}

#[cfg(feature = "postgres")]
mod on_postgres {
    crate::backend_cases!(postgres, Postgres: a_hung_poll_does_not_keep_the_other_waiters_from_new_rows);
}

#[cfg(feature = "mysql")]
mod on_mysql {
    crate::backend_cases!(mysql, Mysql: a_hung_poll_does_not_keep_the_other_waiters_from_new_rows);
}

#[cfg(feature = "mariadb")]
mod on_mariadb {
    crate::backend_cases!(mariadb, Mariadb: a_hung_poll_does_not_keep_the_other_waiters_from_new_rows);
}
