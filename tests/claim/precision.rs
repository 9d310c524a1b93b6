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
//!
//! The `…_by_one_clock_tick` cases (issue 20) pin the same rule at the scale of one tick of the
//! database clock, deterministically: each connection's clock is frozen at an instant the test
//! chooses ([`FrozenClock`]). A clock reading stands for the whole tick that starts there (SQLite's
//! `'now'` is truncated to the millisecond), so a run started at reading `A` may really have
//! started up to one tick later: nothing may act at reading `A + timeout`, and everything may at
//! `A + timeout + one tick` (claims, compared strictly, one tick later still).

use diesel_lease::prelude::*;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{NaiveDate, NaiveDateTime, TimeDelta};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::OwnerId;

use super::jobs::node;
use crate::common::{TestBackend, TestDb};
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

/// The database clock of one connection, frozen at an instant the test sets, so that a
/// comparison with "now" has one outcome whatever the machine's load. Every statement on the
/// connection reads that instant wherever diesel-lease reads the database's clock for a
/// timestamp column; the database's own date arithmetic is untouched.
pub(crate) trait FrozenClock {
    /// How finely the real clock reads: 1 ms on SQLite (`'now'` is truncated to the
    /// millisecond), 1 µs on PostgreSQL and MySQL.
    const TICK: TimeDelta;
    /// From now on, this connection's clock reads `at` (UTC).
    fn freeze_at(&mut self, at: NaiveDateTime);
}

/// PostgreSQL: `statement_timestamp()` is shadowed by a function of the same name in `public`
/// that returns the session's `diesel_lease_test.now`, with `pg_catalog` searched after
/// `public`.
#[cfg(feature = "postgres")]
impl FrozenClock for diesel::PgConnection {
    const TICK: TimeDelta = TimeDelta::microseconds(1);
    fn freeze_at(&mut self, at: NaiveDateTime) {
        self.batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION public.statement_timestamp() RETURNS timestamptz \
               LANGUAGE sql STABLE AS $$ SELECT current_setting('diesel_lease_test.now')::timestamptz $$; \
             SET search_path = public, pg_catalog; \
             SET diesel_lease_test.now = '{}+00';",
            at.format("%Y-%m-%d %H:%M:%S%.6f")
        ))
        .unwrap();
    }
}

/// MySQL: `SET timestamp` fixes `UTC_TIMESTAMP(6)` for the session.
macro_rules! mysql_frozen_clock {
    ($conn:ty) => {
        impl FrozenClock for $conn {
            const TICK: TimeDelta = TimeDelta::microseconds(1);
            fn freeze_at(&mut self, at: NaiveDateTime) {
                let at = at.and_utc();
                self.batch_execute(&format!(
                    "SET timestamp = {}.{:06}",
                    at.timestamp(),
                    at.timestamp_subsec_micros()
                ))
                .unwrap();
            }
        }
    };
}
#[cfg(feature = "mysql")]
mysql_frozen_clock!(diesel::MysqlConnection);
#[cfg(feature = "mariadb")]
mysql_frozen_clock!(diesel::mariadb::MariadbConnection);

#[cfg(feature = "sqlite")]
mod sqlite_clock {
    use diesel::sql_types::{Nullable, Text};

    diesel::define_sql_function! {
        #[sql_name = "strftime"]
        fn strftime2(format: Text, time: Nullable<Text>) -> Nullable<Text>;
    }
    diesel::define_sql_function! {
        #[sql_name = "strftime"]
        fn strftime3(format: Text, time: Nullable<Text>, modifier: Nullable<Text>) -> Nullable<Text>;
    }

    #[derive(diesel::QueryableByName)]
    struct Value {
        #[diesel(sql_type = Nullable<Text>)]
        v: Option<String>,
    }

    /// SQLite's own `strftime(format, time[, modifier])`, on a connection of its own, with
    /// `'now'` read as `frozen`. `modifier`: `None` for the two-argument form.
    pub(super) fn real(
        format: String,
        time: Option<String>,
        modifier: Option<Option<String>>,
        frozen: &str,
    ) -> Option<String> {
        use diesel::{Connection, RunQueryDsl};
        let time = match time {
            Some(t) if t.eq_ignore_ascii_case("now") => Some(frozen.to_owned()),
            t => t,
        };
        let mut plain = diesel::SqliteConnection::establish(":memory:").unwrap();
        let query = diesel::sql_query(match modifier {
            None => "SELECT strftime(?, ?) AS v",
            Some(_) => "SELECT strftime(?, ?, ?) AS v",
        })
        .bind::<Text, _>(format)
        .bind::<Nullable<Text>, _>(time);
        match modifier {
            None => query.get_result::<Value>(&mut plain),
            Some(m) => query
                .bind::<Nullable<Text>, _>(m)
                .get_result::<Value>(&mut plain),
        }
        .unwrap()
        .v
    }
}

/// SQLite: `strftime` (diesel-lease's clock, with 2 and 3 arguments) is replaced on the
/// connection by one that runs SQLite's own `strftime` with `'now'` read as the frozen instant.
#[cfg(feature = "sqlite")]
impl FrozenClock for diesel::SqliteConnection {
    const TICK: TimeDelta = TimeDelta::milliseconds(1);
    fn freeze_at(&mut self, at: NaiveDateTime) {
        let frozen = at.format("%Y-%m-%d %H:%M:%S%.3f").to_string();
        let now = frozen.clone();
        sqlite_clock::strftime2_utils::register_nondeterministic_impl(self, move |f, t| {
            sqlite_clock::real(f, t, None, &now)
        })
        .unwrap();
        sqlite_clock::strftime3_utils::register_nondeterministic_impl(self, move |f, t, m| {
            sqlite_clock::real(f, t, Some(m), &frozen)
        })
        .unwrap();
    }
}

/// 2030-06-15 12:00:00.123457 as a clock of tick `tick` reads it (SQLite: `.123`): an instant
/// with a non-zero last digit, so even PostgreSQL's and MySQL's precision read from trailing
/// zeros is one tick.
fn reading_a(tick: TimeDelta) -> NaiveDateTime {
    let tick = tick.num_microseconds().unwrap();
    NaiveDate::from_ymd_opt(2030, 6, 15)
        .unwrap()
        .and_hms_opt(12, 0, 0)
        .unwrap()
        + TimeDelta::microseconds(123_457 / tick * tick)
}

backend_suite! {
    tests: [
        seed_000_exact_ddl_never_takes_a_run_over_early,
        seed_000_exact_ddl_never_runs_before_the_interval,
        whole_second_claimed_at_is_never_rescued_early,
        a_run_is_never_taken_over_early_by_one_clock_tick,
        a_job_never_runs_before_its_interval_by_one_clock_tick,
        a_claim_is_never_rescued_early_by_one_clock_tick,
    ];

    type Conn = <B as TestBackend>::Conn;
    const TICK: TimeDelta = <Conn as FrozenClock>::TICK;
    const ONE_SECOND: TimeDelta = TimeDelta::seconds(1);

    /// Seed 000's table with the finest time columns each backend has.
    fn fine_job_table(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = JOB_STATUS_DDL;
        db.ddl(pg, sqlite, mysql);
        diesel::insert_into(job_status::table)
            .values(job_status::job_id.eq("stock-prices"))
            .execute(&mut db.conn())
            .unwrap();
    }

    fn job_row(conn: &mut Conn) -> JobStatus {
        job_status::table.find("stock-prices").select(JobStatus::as_select()).first(conn).unwrap()
    }

    /// A run started at reading A may have started up to one tick later: at A + timeout it is
    /// not yet dead; one tick later it is.
    pub(crate) fn a_run_is_never_taken_over_early_by_one_clock_tick(db: &TestDb<B>) {
        fine_job_table(db);
        let (mut dead_conn, mut alive_conn) = (db.conn(), db.conn());
        let (dead, alive) = (node("dead-node", Duration::from_secs(1)), node("alive-node", Duration::from_secs(1)));
        let a = reading_a(TICK);
        dead_conn.freeze_at(a);
        let _dead_run = JobStatus::try_acquire_run(&mut dead_conn, "stock-prices".into(), &dead).unwrap().expect("due");
        assert_eq!(job_row(&mut dead_conn).last_run_started, Some(a), "the run's start is the frozen reading");

        alive_conn.freeze_at(a + ONE_SECOND);
        let early = JobStatus::try_acquire_run(&mut alive_conn, "stock-prices".into(), &alive).unwrap();
        assert!(early.is_none(), "a run started at {a} with a 1 s timeout was taken over at {}", a + ONE_SECOND);

        alive_conn.freeze_at(a + ONE_SECOND + TICK);
        let due = JobStatus::try_acquire_run(&mut alive_conn, "stock-prices".into(), &alive).unwrap();
        assert!(due.is_some(), "a run started at {a} with a 1 s timeout was still alive at {}", a + ONE_SECOND + TICK);
    }

    /// `next_run = A + interval` from a run started at reading A stands for an instant up to one
    /// tick later: at reading A + interval the job is not due yet; one tick later it is.
    pub(crate) fn a_job_never_runs_before_its_interval_by_one_clock_tick(db: &TestDb<B>) {
        fine_job_table(db);
        let mut conn = db.conn();
        let me = node("node-a", Duration::from_secs(60)).every(Duration::from_secs(1));
        let a = reading_a(TICK);
        conn.freeze_at(a);
        let run = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap().expect("due");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_held());
        assert_eq!(job_row(&mut conn).next_run, Some(a + ONE_SECOND));

        conn.freeze_at(a + ONE_SECOND);
        let early = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap();
        assert!(early.is_none(), "a job started at {a}, due every 1 s, ran again at {}", a + ONE_SECOND);

        conn.freeze_at(a + ONE_SECOND + TICK);
        let due = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap();
        assert!(due.is_some(), "a job started at {a}, due every 1 s, was not due at {}", a + ONE_SECOND + TICK);
    }

    /// A claim made at reading A is not rescued at A + timeout, and is by A + timeout + two
    /// ticks (the stale check is strict, `<`, on top of the one-tick bound).
    pub(crate) fn a_claim_is_never_rescued_early_by_one_clock_tick(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = IMPORTJOBS_DDL;
        db.ddl(pg, sqlite, mysql);
        diesel::insert_into(importjobs::table)
            .values((importjobs::id.eq(1), importjobs::statuscode.eq("JOBEXTRACTED"), importjobs::payload.eq("")))
            .execute(&mut db.conn())
            .unwrap();
        let options = |name: &str| {
            ClaimOptions::default().owner(OwnerId::new(name).unwrap()).timeout(Duration::from_secs(1))
        };
        let (mut dead_conn, mut rescuer_conn) = (db.conn(), db.conn());
        let a = reading_a(TICK);
        dead_conn.freeze_at(a);
        let claimed = ImportJob::claim().batch(1).options(&options("dead-worker")).rows(&mut dead_conn).unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].claimed_at, Some(a), "the claim's time is the frozen reading");

        rescuer_conn.freeze_at(a + ONE_SECOND);
        let early = ImportJob::claim().batch(1).options(&options("rescuer")).rows(&mut rescuer_conn).unwrap();
        assert!(early.is_empty(), "a claim made at {a} with a 1 s timeout was rescued at {}", a + ONE_SECOND);

        rescuer_conn.freeze_at(a + ONE_SECOND + TICK * 2);
        let rescued = ImportJob::claim().batch(1).options(&options("rescuer")).rows(&mut rescuer_conn).unwrap();
        assert_eq!(rescued.len(), 1, "a claim made at {a} with a 1 s timeout was not rescued at {}", a + ONE_SECOND + TICK * 2);
    }

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
        let _dead_run = JobStatus::try_acquire_run(&mut dead_conn, "stock-prices".into(), &dead).unwrap().expect("due");
        let took_over = first_success(start, timeout, || {
            JobStatus::try_acquire_run(&mut alive_conn, "stock-prices".into(), &alive).unwrap().is_some()
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
        let run = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap().expect("due");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_held());
        let next = first_success(start, interval, || {
            JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap().is_some()
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
        let claimed = ImportJob::claim().batch(1).options(&dead).rows(&mut dead_conn).unwrap();
        assert_eq!(claimed.len(), 1);
        let rescued = first_success(start, timeout, || {
            !ImportJob::claim().batch(1).options(&rescuer).rows(&mut rescuer_conn).unwrap().is_empty()
        });
        assert!(rescued >= timeout, "a claim with a {timeout:?} timeout was rescued after {rescued:?}");
    }
}
