//! One clock zone: workers whose sessions run in different time zones agree about how old a
//! claim or a job run is, and `db_now` is the real UTC time. `timestamp` (MySQL `DATETIME`)
//! columns hold UTC wall-clock times, PostgreSQL `timestamptz` columns the instant.
//!
//! The two sessions are as far apart as the servers allow: UTC+14 (`Pacific/Kiritimati`; +13 on
//! MariaDB, whose offsets stop there) and UTC−10 (`America/Adak`, −9 in its summer). SQLite has
//! no session time zone; its tests check the same with two plain sessions.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_lease::__private::{JobConnection, Keyed};
use diesel_lease::claim::{ClaimConnection, ClaimOptions, Claimable};
use diesel_lease::dsl::JobLease;
use diesel_lease::lease::JobRunOptions;
use diesel_lease::prelude::*;
use diesel_lease::{BorrowConnection, OwnerId};

use crate::common::{pick, TestBackend, TestDb};
use crate::models::schema::{action, job_status};
use crate::models::*;

/// Two new sessions of `db`: one east of UTC, one west.
pub(crate) fn east_and_west<B: TestBackend>(db: &TestDb<B>) -> (B::Conn, B::Conn) {
    let east = pick::<B>(
        "SET TIME ZONE 'Pacific/Kiritimati'",
        "",
        "SET time_zone = '+13:00'",
    );
    let west = pick::<B>(
        "SET TIME ZONE 'America/Adak'",
        "",
        "SET time_zone = '-10:00'",
    );
    (in_zone(db, east), in_zone(db, west))
}

fn in_zone<B: TestBackend>(db: &TestDb<B>, set_zone: &str) -> B::Conn {
    let mut conn = db.conn();
    if !set_zone.is_empty() {
        conn.batch_execute(set_zone).unwrap();
    }
    conn
}

const SHORT: Duration = Duration::from_secs(1);

/// The id `conn` claims (at most one row), with `timeout` or the model's.
fn claim_ids<M, C>(conn: &mut C, timeout: Option<Duration>) -> Vec<i64>
where
    M: Claimable + Keyed<Pk = i64>,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let mut options = ClaimOptions::default();
    if let Some(t) = timeout {
        options = options.timeout(t);
    }
    M::claim()
        .batch(1)
        .options(&options)
        .rows(conn)
        .unwrap()
        .iter()
        .map(Keyed::pk)
        .collect()
}

/// Rows 1 and 2 of `M`'s table are ready; the model's own timeout is 5 minutes. Each session
/// claims one; the other does not rescue it (before claims wrote UTC, PostgreSQL's east session
/// saw the west's claim 24 h old). After a 1 s timeout each rescues the other's, so neither
/// claim looks hours in the future either.
fn claims_agree_across_zones<M, C>(east: &mut C, west: &mut C)
where
    M: Claimable + Keyed<Pk = i64>,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    assert_eq!(claim_ids::<M, _>(west, None), vec![1]);
    assert_eq!(claim_ids::<M, _>(east, None), vec![2]);
    assert_eq!(
        claim_ids::<M, _>(east, None),
        Vec::<i64>::new(),
        "east rescued west's fresh claim"
    );
    assert_eq!(
        claim_ids::<M, _>(west, None),
        Vec::<i64>::new(),
        "west rescued east's fresh claim"
    );
    std::thread::sleep(SHORT + Duration::from_millis(300));
    assert_eq!(
        claim_ids::<M, _>(east, Some(SHORT)),
        vec![1],
        "east did not rescue west's stale claim"
    );
    assert_eq!(
        claim_ids::<M, _>(west, Some(SHORT)),
        vec![2],
        "west did not rescue east's stale claim"
    );
}

fn node(name: &str, timeout: Duration) -> JobRunOptions {
    JobRunOptions::new(timeout).holder(OwnerId::new(name).unwrap())
}

fn start<M, C>(
    conn: &mut C,
    job: &str,
    options: &JobRunOptions,
) -> Option<diesel_lease::lease::JobRun>
where
    M: JobLease + Keyed<Pk = String>,
    C: BorrowConnection,
    C::Conn: JobConnection<M>,
{
    M::try_acquire_run(conn, job.to_owned(), options).unwrap()
}

/// Jobs `a`..`d` exist and are due. A run started in one zone with a 5-minute timeout is not
/// taken over from the other (before runs wrote UTC, PostgreSQL's east session took the west's
/// run over at once), nor run again before its `next_run` in 5 minutes; with a 1 s timeout it
/// is taken over after 1 s, not hours later.
fn job_runs_agree_across_zones<M, C>(east: &mut C, west: &mut C)
where
    M: JobLease + Keyed<Pk = String>,
    C: BorrowConnection,
    C::Conn: JobConnection<M>,
{
    let five_min = Duration::from_secs(300);
    let (e, w) = (node("east", five_min), node("west", five_min));
    let (e_every, w_every) = (e.clone().every(five_min), w.clone().every(five_min));
    let west_run = start::<M, _>(west, "a", &w_every).expect("a is due");
    let east_run = start::<M, _>(east, "b", &e_every).expect("b is due");
    assert!(
        start::<M, _>(east, "a", &e).is_none(),
        "east took over west's fresh run"
    );
    assert!(
        start::<M, _>(west, "b", &w).is_none(),
        "west took over east's fresh run"
    );
    assert!(M::release_run(west, "a".into(), &west_run)
        .unwrap()
        .was_held());
    assert!(M::release_run(east, "b".into(), &east_run)
        .unwrap()
        .was_held());
    assert!(
        start::<M, _>(east, "a", &e_every).is_none(),
        "east ran the job before its next_run"
    );
    assert!(
        start::<M, _>(west, "b", &w_every).is_none(),
        "west ran the job before its next_run"
    );

    let (e, w) = (node("east", SHORT), node("west", SHORT));
    // Runs whose nodes die: never finished.
    let _dead = start::<M, _>(west, "c", &w).expect("c is due");
    let _dead_too = start::<M, _>(east, "d", &e).expect("d is due");
    std::thread::sleep(SHORT + Duration::from_millis(300));
    assert!(
        start::<M, _>(east, "c", &e).is_some(),
        "east did not take over west's dead run"
    );
    assert!(
        start::<M, _>(west, "d", &w).is_some(),
        "west did not take over east's dead run"
    );
}

/// The guard's `db_now`, read back: the real UTC time, whichever zone wrote it.
fn assert_utc_now(written: chrono::NaiveDateTime, zone: &str) {
    let off = (chrono::Utc::now().naive_utc() - written).abs();
    assert!(
        off < chrono::TimeDelta::seconds(5),
        "{zone} wrote {written}, {off} away from UTC now"
    );
}

backend_suite! {
    fixtures: crate::claim::basics;
    tests: [
        claims_written_in_one_zone_are_not_rescued_early_in_another,
        job_runs_started_in_one_zone_are_not_taken_over_early_in_another,
        db_now_is_utc_in_every_zone,
    ];

    pub(crate) fn claims_written_in_one_zone_are_not_rescued_early_in_another(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 2);
        let (mut east, mut west) = east_and_west(db);
        claims_agree_across_zones::<ImportJob, _>(&mut east, &mut west);
    }

    pub(crate) fn job_runs_started_in_one_zone_are_not_taken_over_early_in_another(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = JOB_STATUS_DDL;
        db.ddl(pg, sqlite, mysql);
        let jobs = Vec::from(["a", "b", "c", "d"].map(|j| job_status::job_id.eq(j)));
        diesel::insert_into(job_status::table).values(&jobs).execute(&mut db.conn()).unwrap();
        let (mut east, mut west) = east_and_west(db);
        job_runs_agree_across_zones::<JobStatus, _>(&mut east, &mut west);
    }

    pub(crate) fn db_now_is_utc_in_every_zone(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = GUARD_DDL;
        db.ddl(pg, sqlite, mysql);
        diesel::insert_into(action::table)
            .values(&vec![action::id.eq(1_i64), action::id.eq(2_i64)])
            .execute(&mut db.conn())
            .unwrap();
        let (mut east, mut west) = east_and_west(db);
        for (id, conn, zone) in [(1, &mut east, "east"), (2, &mut west, "west")] {
            assert!(Action::claim_if_null_by_pk(conn, id, diesel_lease::db_now).unwrap());
            let written: Option<chrono::NaiveDateTime> =
                action::table.find(id).select(action::notified).first(conn).unwrap();
            assert_utc_now(written.expect("set"), zone);
        }
    }
}

/// PostgreSQL `timestamptz` columns: the clock writes and compares the instant.
mod timestamptz {
    #[cfg(feature = "postgres")]
    #[allow(dead_code)] // the models' fields and most generated methods
    mod postgres {
        use chrono::{DateTime, Utc};
        use diesel::connection::SimpleConnection;
        use diesel::prelude::*;
        use diesel_lease::prelude::*;

        use crate::claim::zones::{
            assert_utc_now, claims_agree_across_zones, east_and_west, job_runs_agree_across_zones,
        };
        use crate::common::{run, Postgres, TestDb};

        diesel::table! {
            zoned_jobs (id) {
                id -> BigInt,
                status -> Text,
                worker -> Nullable<Text>,
                claimed_at -> Nullable<Timestamptz>,
                attempts -> Integer,
            }
        }

        diesel::table! {
            zoned_job_status (job_id) {
                job_id -> Text,
                running_at -> Nullable<Text>,
                last_run_started -> Nullable<Timestamptz>,
                next_run -> Nullable<Timestamptz>,
            }
        }

        diesel::table! {
            zoned_action (id) {
                id -> BigInt,
                notified -> Nullable<Timestamptz>,
            }
        }

        #[derive(Debug, Queryable, Selectable, Claimable)]
        #[diesel(table_name = zoned_jobs)]
        #[claimable(
            state = status,
            ready = "new",
            claimed = "running",
            owner = worker,
            claimed_at = claimed_at,
            attempts = attempts,
            timeout_secs = 300
        )]
        struct ZonedJob {
            id: i64,
            status: String,
            worker: Option<String>,
            claimed_at: Option<DateTime<Utc>>,
            attempts: i32,
        }

        #[derive(Debug, Queryable, Selectable, JobLease)]
        #[diesel(table_name = zoned_job_status, primary_key(job_id))]
        #[job_lease(holder = running_at, started_at = last_run_started, next_run = next_run)]
        struct ZonedJobStatus {
            job_id: String,
            running_at: Option<String>,
            last_run_started: Option<DateTime<Utc>>,
            next_run: Option<DateTime<Utc>>,
        }

        #[derive(Debug, Queryable, Selectable, ClaimIfNull)]
        #[diesel(table_name = zoned_action)]
        #[claim_if_null(column = notified)]
        struct ZonedAction {
            id: i64,
            notified: Option<DateTime<Utc>>,
        }

        fn ddl(db: &TestDb<Postgres>) {
            db.conn()
                .batch_execute(
                    "CREATE TABLE zoned_jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL, worker TEXT, \
                       claimed_at TIMESTAMPTZ, attempts INTEGER NOT NULL DEFAULT 0); \
                     INSERT INTO zoned_jobs (id, status) VALUES (1, 'new'), (2, 'new'); \
                     CREATE TABLE zoned_job_status (job_id TEXT PRIMARY KEY, running_at TEXT, \
                       last_run_started TIMESTAMPTZ, next_run TIMESTAMPTZ); \
                     INSERT INTO zoned_job_status (job_id) VALUES ('a'), ('b'), ('c'), ('d'); \
                     CREATE TABLE zoned_action (id BIGINT PRIMARY KEY, notified TIMESTAMPTZ); \
                     INSERT INTO zoned_action (id) VALUES (1), (2);",
                )
                .unwrap();
        }

        fn claims_with_timestamptz(db: &TestDb<Postgres>) {
            ddl(db);
            let (mut east, mut west) = east_and_west(db);
            claims_agree_across_zones::<ZonedJob, _>(&mut east, &mut west);
        }

        fn job_runs_with_timestamptz(db: &TestDb<Postgres>) {
            ddl(db);
            let (mut east, mut west) = east_and_west(db);
            job_runs_agree_across_zones::<ZonedJobStatus, _>(&mut east, &mut west);
        }

        fn db_now_with_timestamptz(db: &TestDb<Postgres>) {
            ddl(db);
            let (mut east, mut west) = east_and_west(db);
            for (id, conn, zone) in [(1, &mut east, "east"), (2, &mut west, "west")] {
                assert!(ZonedAction::claim_if_null_by_pk(conn, id, diesel_lease::db_now).unwrap());
                let written: Option<DateTime<Utc>> = zoned_action::table
                    .find(id)
                    .select(zoned_action::notified)
                    .first(conn)
                    .unwrap();
                assert_utc_now(written.expect("set").naive_utc(), zone);
            }
        }

        #[test]
        fn claims_written_in_one_zone_are_not_rescued_early_in_another() {
            run::<Postgres>("claims_with_timestamptz", claims_with_timestamptz);
        }

        #[test]
        fn job_runs_started_in_one_zone_are_not_taken_over_early_in_another() {
            run::<Postgres>("job_runs_with_timestamptz", job_runs_with_timestamptz);
        }

        #[test]
        fn db_now_is_utc_in_every_zone() {
            run::<Postgres>("db_now_with_timestamptz", db_now_with_timestamptz);
        }
    }
}

/// A MySQL `TIMESTAMP` column (not `DATETIME`) converts what it stores from the session's
/// `time_zone`, and diesel-lease's `UTC_TIMESTAMP(6)` is only stored as the right instant by a
/// session at `+00:00` (see the `clock` module docs). What happens, pinned down.
mod timestamp_column {
    #[allow(unused_imports)]
    use diesel::connection::SimpleConnection;

    #[allow(unused_imports)]
    use crate::claim::zones::{east_and_west, in_zone};
    #[allow(unused_imports)]
    use crate::common::TestDb;
    #[allow(unused_imports)]
    use crate::models::ImportJob;
    #[allow(unused_imports)]
    use diesel_lease::prelude::*;

    crate::mysql_suite! {
        tests: [timestamp_columns_are_right_only_for_sessions_at_utc];

        pub(crate) fn timestamp_columns_are_right_only_for_sessions_at_utc(db: &TestDb<B>) {
            db.conn()
                .batch_execute(
                    "CREATE TABLE importjobs (id BIGINT PRIMARY KEY, statuscode VARCHAR(32) NOT NULL, \
                       worker VARCHAR(255), claimed_at TIMESTAMP(6) NULL, attempts INT NOT NULL DEFAULT 0, \
                       payload TEXT NOT NULL DEFAULT ''); \
                     INSERT INTO importjobs (id, statuscode) VALUES (1, 'JOBEXTRACTED'), (2, 'JOBEXTRACTED');",
                )
                .unwrap();
            let (mut east, mut west) = east_and_west(db);
            // East stores its UTC reading as +13:00 local time, an instant 13 h ago; west reads
            // that instant as 23 h old and rescues the claim at once: duplicate work.
            assert_eq!(
                ImportJob::claim().row(&mut east).unwrap().map(|j| j.id),
                Some(1)
            );
            assert_eq!(
                ImportJob::claim().row(&mut west).unwrap().map(|j| j.id),
                Some(1),
                "a TIMESTAMP column no longer depends on the session's time_zone: update the clock docs"
            );
            // Sessions at +00:00 store the right instant and agree (the fresh claims of west,
            // stored 10 h in the future, and of `a` are both left alone).
            let utc = "SET time_zone = '+00:00'";
            let (mut a, mut b) = (in_zone(db, utc), in_zone(db, utc));
            assert_eq!(
                ImportJob::claim().row(&mut a).unwrap().map(|j| j.id),
                Some(2)
            );
            assert_eq!(ImportJob::claim().row(&mut b).unwrap().map(|j| j.id), None);
        }
    }
}
