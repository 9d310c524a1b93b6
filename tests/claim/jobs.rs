//! Seed 000: a farm's scheduled job, leased on the user's own `job_status` table.

use diesel_lease::prelude::*;
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use diesel::prelude::*;
use diesel_lease::lease::JobRunOptions;
use diesel_lease::OwnerId;

use crate::common::TestDb;
use crate::models::schema::job_status;
use crate::models::*;

pub(super) fn node(name: &str, timeout: Duration) -> JobRunOptions {
    JobRunOptions::new(timeout).holder(OwnerId::new(name).unwrap())
}

backend_suite! {
    tests: [
        one_node_of_many_runs_each_occurrence,
        a_dead_nodes_run_is_taken_over_after_the_timeout,
        a_takeover_by_the_same_holder_is_fenced,
        next_run_keeps_the_job_idle_until_due,
        a_cron_job_runs_each_slot_on_one_node,
        a_cron_start_that_reaches_the_database_after_the_next_slot_is_refused,
        a_run_on_a_plain_connection_waits_for_another_writer,
        a_schedule_without_a_next_run_column_is_refused,
    ];

    /// A model of the job table without `next_run`: a run without a schedule works; one with a
    /// schedule is refused before anything is sent (the statement could neither keep the job
    /// idle until due nor record when it is, so it would run back to back).
    pub(crate) fn a_schedule_without_a_next_run_column_is_refused(db: &TestDb<B>) {
        use super::super::unscheduled::JobNoNextRun;
        job_table(db);
        let mut conn = db.conn();
        for scheduled in [
            node("node-a", Duration::from_secs(60)).every(Duration::from_secs(3600)),
            node("node-a", Duration::from_secs(60)).every(diesel_lease::lease::schedule::Cron::parse("0 3 * * *").unwrap()),
        ] {
            match JobNoNextRun::try_acquire_run(&mut conn, "stock-prices".into(), &scheduled) {
                Err(diesel_lease::Error::Config(message)) => assert!(message.contains("next_run"), "{message}"),
                other => panic!("expected a configuration error, got {other:?}"),
            }
        }
        let holder: Option<String> = job_status::table
            .select(job_status::running_at)
            .first(&mut conn)
            .unwrap();
        assert_eq!(holder, None, "a refused start wrote nothing");
        let plain = node("node-a", Duration::from_secs(60));
        let run = JobNoNextRun::try_acquire_run(&mut conn, "stock-prices".into(), &plain).unwrap().expect("free");
        assert!(JobNoNextRun::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_held());
    }

    fn job_table(db: &TestDb<B>) {
        let (pg, sqlite, mysql) = JOB_STATUS_DDL;
        db.ddl(pg, sqlite, mysql);
        // The seed pre-inserts one row per job with only job_id set.
        diesel::insert_into(job_status::table)
            .values(job_status::job_id.eq("stock-prices"))
            .execute(&mut db.conn())
            .unwrap();
    }

    pub(crate) fn one_node_of_many_runs_each_occurrence(db: &TestDb<B>) {
        job_table(db);
        let barrier = Barrier::new(8);
        let winners = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for n in 0..8 {
                let (barrier, winners) = (&barrier, &winners);
                s.spawn(move || {
                    let mut conn = db.conn();
                    let me = node(&format!("node-{n}"), Duration::from_secs(60));
                    barrier.wait();
                    if let Some(run) = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap() {
                        winners.lock().unwrap().push((n, run));
                    }
                });
            }
        });
        let mut winners = winners.into_inner().unwrap();
        assert_eq!(winners.len(), 1, "{winners:?}");
        let (winner, run) = winners.pop().unwrap();
        let mut conn = db.conn();
        let row: JobStatus = job_status::table.find("stock-prices").select(JobStatus::as_select()).first(&mut conn).unwrap();
        let holder = format!("node-{winner}");
        assert_eq!(row.running_at.as_deref(), Some(run.stamp().as_str()));
        assert_eq!(run.stamp().owner(), holder);
        assert!(row.last_run_started.is_some());
        // The holder ends its run once; then another node can run it, and the old run's handle
        // cannot end the new run.
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_held());
        let other = node("node-x", Duration::from_secs(60));
        let next = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &other).unwrap().expect("free again");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_lost());
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &next).unwrap().was_held());
    }

    pub(crate) fn a_dead_nodes_run_is_taken_over_after_the_timeout(db: &TestDb<B>) {
        job_table(db);
        let mut conn = db.conn();
        let timeout = Duration::from_secs(1);
        let dead = node("dead-node", timeout);
        let alive = node("alive-node", timeout);
        let dead_run = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &dead).unwrap().expect("due");
        assert!(JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &alive).unwrap().is_none(), "taken over before the timeout");
        std::thread::sleep(timeout + Duration::from_millis(300));
        let alive_run = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &alive).unwrap().expect("not taken over after the timeout");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &dead_run).unwrap().was_lost(), "the dead node released the new run");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &alive_run).unwrap().was_held());
    }

    /// A run taken over by the *same* holder (another thread of the same node, after the
    /// timeout) is still fenced: the stale run's handle cannot end the new run.
    pub(crate) fn a_takeover_by_the_same_holder_is_fenced(db: &TestDb<B>) {
        job_table(db);
        let mut conn = db.conn();
        let timeout = Duration::from_secs(1);
        let me = node("node-a", timeout);
        let stale = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap().expect("due");
        std::thread::sleep(timeout + Duration::from_millis(300));
        let fresh = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap().expect("taken over");
        assert_ne!(stale, fresh);
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &stale).unwrap().was_lost(), "a stale run ended the new one");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &fresh).unwrap().was_held());
    }

    pub(crate) fn next_run_keeps_the_job_idle_until_due(db: &TestDb<B>) {
        job_table(db);
        let mut conn = db.conn();
        let interval = Duration::from_millis(1500);
        let a = node("node-a", Duration::from_secs(60)).every(interval);
        let b = node("node-b", Duration::from_secs(60)).every(interval);
        let run = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &a).unwrap().expect("due");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_held());
        assert!(JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &b).unwrap().is_none(), "ran again before next_run");
        std::thread::sleep(interval + Duration::from_millis(300));
        assert!(JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &b).unwrap().is_some(), "did not run once due");
        let zero = JobRunOptions::new(Duration::ZERO);
        assert!(matches!(
            JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &zero),
            Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::ZeroDuration { .. }))
        ));
        let zero_interval = JobRunOptions::new(Duration::from_secs(5)).every(Duration::ZERO);
        assert!(matches!(
            JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &zero_interval),
            Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::ZeroDuration { .. }))
        ));
    }

    /// A job every two seconds on the user's table: three nodes poll it for seven seconds; each
    /// slot ran on one node only, and none was skipped.
    pub(crate) fn a_cron_job_runs_each_slot_on_one_node(db: &TestDb<B>) {
        job_table(db);
        let every_two = diesel_lease::lease::schedule::Cron::parse("*/2 * * * * *").unwrap();
        let runs = Mutex::new(Vec::new());
        let until = std::time::Instant::now() + Duration::from_secs(7);
        std::thread::scope(|s| {
            for n in 0..3 {
                let (runs, every_two) = (&runs, every_two.clone());
                s.spawn(move || {
                    let mut conn = db.conn();
                    let me = node(&format!("node-{n}"), Duration::from_secs(60)).every(every_two);
                    while std::time::Instant::now() < until {
                        if let Some(run) = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me).unwrap() {
                            runs.lock().unwrap().push((run.due_at_micros().unwrap(), n));
                            assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_held());
                        }
                        std::thread::sleep(Duration::from_millis(40));
                    }
                });
            }
        });
        let mut runs = runs.into_inner().unwrap();
        runs.sort();
        assert!(runs.len() >= 3, "{runs:?}");
        for pair in runs.windows(2) {
            assert_eq!(pair[1].0 - pair[0].0, 2_000_000, "each slot once, none skipped: {runs:?}");
        }
    }

    /// A node reads the database's clock before a slot comes and sends its start after it
    /// (here: its update waits behind another transaction's write lock across the slot's
    /// boundary). The start must not run the old slot a second time: it is refused, and the new
    /// slot still runs once. On SQLite the delayed update sees the new time, as a slow client's
    /// would anywhere; PostgreSQL and MariaDB refuse it by their statement's start time too.
    pub(crate) fn a_cron_start_that_reaches_the_database_after_the_next_slot_is_refused(db: &TestDb<B>) {
        job_table(db);
        let every_two = diesel_lease::lease::schedule::Cron::parse("*/2 * * * * *").unwrap();
        let micros = || {
            let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            i64::try_from(since.as_micros()).unwrap()
        };
        let sleep_until = |at: i64| {
            if let Ok(wait) = u64::try_from(at - micros()) {
                std::thread::sleep(Duration::from_micros(wait));
            }
        };
        // The first run, early in a slot (the local clock is the server's: same machine).
        while micros() % 2_000_000 > 800_000 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut conn = db.conn();
        let a = node("node-a", Duration::from_secs(60)).every(every_two.clone());
        let first = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &a).unwrap().expect("the first slot runs on time");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &first).unwrap().was_held());
        let slot = first.due_at_micros().unwrap();
        let next_slot = slot + 2_000_000;

        // Shortly before the next slot another transaction write-locks the row until after it;
        // node-b reads the clock (the old slot is the latest) and its start waits behind the lock.
        sleep_until(next_slot - 500_000);
        let locked = Barrier::new(2);
        let late = std::thread::scope(|s| {
            let locker = s.spawn(|| {
                let mut conn = db.conn();
                conn.transaction(|conn| {
                    diesel::update(job_status::table.find("stock-prices"))
                        .set(job_status::job_id.eq(job_status::job_id))
                        .execute(conn)?;
                    locked.wait();
                    sleep_until(next_slot + 200_000);
                    diesel::QueryResult::Ok(())
                })
                .unwrap();
            });
            locked.wait();
            let mut conn = db.conn();
            let b = node("node-b", Duration::from_secs(60)).every(every_two.clone());
            let late = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &b).unwrap();
            locker.join().unwrap();
            late
        });
        // Only a start that read the clock after the boundary (a starved thread) may run, and
        // then for the new slot (or a later one, had this thread been starved past it).
        let run = match late {
            Some(run) => run,
            None => {
                let c = node("node-c", Duration::from_secs(60)).every(every_two);
                let until = std::time::Instant::now() + Duration::from_secs(10);
                loop {
                    if let Some(run) = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &c).unwrap() {
                        break run;
                    }
                    assert!(std::time::Instant::now() < until, "no later slot ran");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        assert!(run.due_at_micros().unwrap() >= next_slot, "the old slot ran twice: {run:?}");
        assert!(JobStatus::release_run(&mut conn, "stock-prices".into(), &run).unwrap().was_held());
    }

    /// On a plain connection (no busy timeout), behind another writer, starting and finishing a
    /// run each wait and take effect; on SQLite they failed at once with "database is locked".
    pub(crate) fn a_run_on_a_plain_connection_waits_for_another_writer(db: &TestDb<B>) {
        job_table(db);
        let lock = "UPDATE job_status SET job_id = job_id WHERE job_id = 'stock-prices'";
        let me = node("plain", Duration::from_secs(60));
        let run = crate::common::on_a_plain_connection_behind_a_writer(db, lock, |c| {
            JobStatus::try_acquire_run(c, "stock-prices".into(), &me)
        });
        let run = run.unwrap().expect("the start waited and took the run");
        let other = node("other", Duration::from_secs(60));
        assert!(JobStatus::try_acquire_run(&mut db.conn(), "stock-prices".into(), &other).unwrap().is_none(), "started");
        let finished = crate::common::on_a_plain_connection_behind_a_writer(db, lock, |c| {
            JobStatus::release_run(c, "stock-prices".into(), &run)
        });
        assert!(finished.unwrap().was_held(), "the release waited and ended the run");
        let row: JobStatus = job_status::table.find("stock-prices").select(JobStatus::as_select()).first(&mut db.conn()).unwrap();
        assert!(row.running_at.is_none(), "the run ended: {row:?}");
    }
}

/// The seed's job table mapped without its `next_run` column.
pub(crate) mod unscheduled {
    use diesel_lease::prelude::*;

    use crate::models::schema::job_status;

    #[derive(JobLease)]
    #[diesel(table_name = job_status, primary_key(job_id))]
    #[job_lease(holder = running_at, started_at = last_run_started)]
    #[allow(dead_code)] // the model names the table and key; its rows are never loaded
    pub(crate) struct JobNoNextRun {
        pub(crate) job_id: String,
    }
}
