//! What a holder believes when it cannot reach the database: a lease guard or permit whose
//! heartbeats get no connection (its pool is exhausted, or — on PostgreSQL — its sessions were
//! terminated and the database refuses new ones) reports itself lost *before* the database
//! would give its grant to anybody else.

use diesel_lease::prelude::*;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel_lease::__private::DROP_WAIT;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::lease::{Lease, LeaseGuard, LeaseOptions};
use diesel_lease::semaphore::Semaphore;

use crate::common::{lost_in_time, TestDb};
use crate::models::{ImportJob, IMPORTJOBS_DDL};

const TTL: Duration = Duration::from_secs(2);

backend_suite! {
    tests: [
        a_starved_lease_guard_knows_it_lost_before_its_lease_expires,
        a_starved_permit_knows_it_lost_before_its_row_expires,
        a_configured_drop_wait_bounds_every_drop,
    ];

    /// Keep-alive on, pool of one connection, which the test then holds: every extension fails
    /// to get a connection. The guard turns lost before the database's expiry, which is checked
    /// on a connection of its own at that moment.
    pub(crate) fn a_starved_lease_guard_knows_it_lost_before_its_lease_expires(db: &TestDb<B>) {
        db.migrate();
        let pool = db.pool(1);
        // Opened before the wait, so that looking at the lease costs no connection set-up.
        let mut inspector = db.conn();
        let sent = Instant::now();
        let guard = LeaseGuard::try_acquire(&pool, "report", &LeaseOptions::new(TTL).keep_alive(true))
            .unwrap()
            .expect("free");
        let hog = pool.get().unwrap();
        // The database's expiry is at least TTL after `sent` (the acquire ran after it, on the
        // database's clock): a holder lost within TTL of `sent` knew before the expiry.
        let lost_after = lost_in_time(&guard, sent, TTL);
        let record = Lease::inspect(&mut inspector, "report").unwrap().expect("granted once");
        let looked_after = sent.elapsed();
        assert_eq!(record.token, guard.token());
        // Looked at within TTL of `sent` (not slowed down past it), the database still holds it.
        assert!(
            record.is_held() || looked_after >= TTL,
            "the database had already let the lease go ({lost_after:?}, looked after {looked_after:?})"
        );
        assert!(guard.is_lost());
        let token = guard.token();
        // Dropping it while the pool is still exhausted returns within DROP_WAIT.
        let dropping = Instant::now();
        drop(guard);
        // Bounded by the drop wait (slack for a loaded machine); one that ignored it would wait
        // for the pool's connection timeout (30 s).
        assert!(dropping.elapsed() < DROP_WAIT + Duration::from_secs(3), "drop took {:?}", dropping.elapsed());
        // Once the database's ttl has run out, another node gets the lease.
        std::thread::sleep(TTL);
        let next = Lease::try_acquire(&mut db.conn(), "report", &LeaseOptions::new(TTL)).unwrap();
        assert!(next.expect("expired on the database").token() > token);
        drop(hog);
    }

    /// Each kind of holder dropped while its pool is exhausted returns at once, without a
    /// connection: the drop hands its release to the pool's keeper. The keeper tries for as
    /// long as the holder was told (here 300 ms, against the default 2 s): with the pool's one
    /// connection held for longer, it gives up and what was held is left to its ttl (the row
    /// stays claimed until its timeout). Dropped with the default wait while the connection is
    /// held for less than that, the same holders are released.
    pub(crate) fn a_configured_drop_wait_bounds_every_drop(db: &TestDb<B>) {
        db.migrate();
        let [pg, sqlite, mysql] = [IMPORTJOBS_DDL.0, IMPORTJOBS_DDL.1, IMPORTJOBS_DDL.2];
        db.ddl(pg, sqlite, mysql);
        db.conn()
            .batch_execute(
                "INSERT INTO importjobs (id, statuscode, payload) VALUES (1, 'JOBEXTRACTED', ''), (2, 'JOBEXTRACTED', '')",
            )
            .unwrap();
        const WAIT: Duration = Duration::from_millis(300);
        let pool = db.pool(1);
        // Drops `held` while the pool's one connection is in use for `hogged`: the drop returns
        // with the connection still taken (it needs none); then the keeper's work is waited for.
        let hogged_drop = |what: &str, held: Box<dyn std::any::Any>, hogged: Duration| {
            let hog = pool.get().unwrap();
            let dropping = Instant::now();
            drop(held);
            let took = dropping.elapsed();
            std::thread::sleep(hogged.saturating_sub(took));
            drop(hog);
            // A drop that waited for a connection would have taken `hogged` at least.
            assert!(took < hogged, "{what}: drop took {took:?}");
            crate::common::settled(&pool);
        };
        // Round 1: the keeper's wait (300 ms) runs out while the connection is held (900 ms):
        // everything is left. Round 2: the default wait (2 s) outlasts the hog (300 ms).
        for (round, wait, hogged, left) in [(1, WAIT, 3 * WAIT, true), (2, DROP_WAIT, WAIT, false)] {
            let name = format!("report-{round}");
            let options = LeaseOptions::new(Duration::from_secs(60)).keep_alive(true).drop_wait(wait);
            let guard = LeaseGuard::try_acquire(&pool, &name, &options).unwrap().expect("free");
            hogged_drop("lease guard", Box::new(guard), hogged);
            let held = Lease::inspect(&mut db.conn(), &name).unwrap().is_some_and(|r| r.is_held());
            assert_eq!(held, left, "round {round}: the lease left to its ttl");

            let mutex = Semaphore::mutex(format!("api-{round}"))
                .with_ttl(Duration::from_secs(60))
                .with_drop_wait(wait);
            let permit = mutex.try_acquire(&pool).unwrap().expect("free");
            hogged_drop("permit", Box::new(permit), hogged);
            let queued = mutex.queue(&mut db.conn()).unwrap();
            assert_eq!(!queued.is_empty(), left, "round {round}: the permit left to its ttl: {queued:?}");

            let claim_options = ClaimOptions::default().drop_wait(wait);
            let claim = ImportJob::claim().options(&claim_options).guard(&pool).unwrap().expect("a row");
            let id = claim.id;
            hogged_drop("claim guard", Box::new(claim), hogged);
            // Not handed back when the keeper got no connection in time: the row stays claimed
            // until its timeout.
            let again = ImportJob::claim().row(&mut db.conn()).unwrap().map(|row| row.id);
            if left {
                assert_eq!(again, Some(2), "round 1: row {id} stays claimed, the other is next");
                // Ready again for round 2 (row 1 stays claimed).
                db.conn()
                    .batch_execute("UPDATE importjobs SET statuscode = 'JOBEXTRACTED', worker = NULL WHERE id = 2")
                    .unwrap();
            } else {
                assert_eq!((id, again), (2, Some(2)), "round 2: handed back at once");
            }
        }

        // Zero is refused everywhere.
        assert!(matches!(
            LeaseGuard::try_acquire(&pool, "report", &LeaseOptions::new(TTL).drop_wait(Duration::ZERO)),
            Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::ZeroDuration { .. }))
        ));
        assert!(matches!(
            Semaphore::mutex("api").with_drop_wait(Duration::ZERO).try_acquire(&pool),
            Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::ZeroDuration { .. }))
        ));
        let zero_wait = ClaimOptions::default().drop_wait(Duration::ZERO);
        assert!(matches!(
            ImportJob::claim().options(&zero_wait).row(&mut pool.get().unwrap()),
            Err(diesel_lease::Error::InvalidInput(diesel_lease::InvalidInput::ZeroDuration { .. }))
        ));
    }

    /// The same for a semaphore permit: lost before its row can be removed.
    pub(crate) fn a_starved_permit_knows_it_lost_before_its_row_expires(db: &TestDb<B>) {
        db.migrate();
        let pool = db.pool(1);
        let mutex = Semaphore::mutex("partner-api").with_ttl(TTL);
        let sent = Instant::now();
        let permit = mutex.try_acquire(&pool).unwrap().expect("free");
        let ticket = permit.ticket();
        // Opened before the wait, so that looking at the queue costs no connection set-up.
        let mut other = db.conn();
        let hog = pool.get().unwrap();
        let lost_after = lost_in_time(&permit, sent, TTL);
        let queue = mutex.queue(&mut other).unwrap();
        let looked_after = sent.elapsed();
        // Looked at within TTL of `sent` (not slowed down past it), the row is still granted.
        assert!(
            queue.iter().any(|r| r.ticket == ticket && r.granted) || looked_after >= TTL,
            "the row was gone before the holder knew ({lost_after:?}, looked after {looked_after:?}): {queue:?}"
        );
        assert!(permit.is_lost());
        assert!(permit.ensure_held().is_err());
        // Dropping it while the pool is still exhausted returns within DROP_WAIT.
        let dropping = Instant::now();
        drop(permit);
        // Bounded by the drop wait (slack for a loaded machine); one that ignored it would wait
        // for the pool's connection timeout (30 s).
        assert!(dropping.elapsed() < DROP_WAIT + Duration::from_secs(3), "drop took {:?}", dropping.elapsed());
        // After the database's ttl the next holder gets in.
        std::thread::sleep(TTL + Duration::from_millis(200));
        let next = mutex.acquire_on(&mut other, Duration::from_secs(5)).unwrap();
        assert_ne!(next.ticket(), ticket);
        let _ = next.release(&mut other).unwrap();
        drop(hog);
    }
}

/// PostgreSQL: the guard's sessions are terminated and the database refuses new ones; the guard
/// turns lost by its local deadline, while the database (read on a session opened before) still
/// holds the lease.
#[cfg(feature = "postgres")]
mod postgres_cut_off {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;

    use super::*;
    use crate::common::Postgres;

    fn a_cut_off_lease_guard_knows_it_lost_before_its_lease_expires(db: &TestDb<Postgres>) {
        db.migrate();
        let mut observer = db.conn();
        let database: String = diesel::select(diesel::dsl::sql::<diesel::sql_types::Text>(
            "current_database()",
        ))
        .get_result(&mut observer)
        .unwrap();
        let admin_url = std::env::var("DIESEL_LEASE_TEST_PG").unwrap();
        let mut admin = diesel::PgConnection::establish(&admin_url).unwrap();
        let pool = db.pool(2);
        let sent = Instant::now();
        let guard =
            LeaseGuard::try_acquire(&pool, "report", &LeaseOptions::new(TTL).keep_alive(true))
                .unwrap()
                .expect("free");
        let observer_pid: i32 = diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>(
            "pg_backend_pid()",
        ))
        .get_result(&mut observer)
        .unwrap();
        // Cut the pool off: no new sessions on this database, and its sessions terminated.
        // Identifiers come from the server (current_database()), not from user input.
        admin
            .batch_execute(&format!(
                "ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS false"
            ))
            .unwrap();
        diesel::sql_query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> $2",
        )
        .bind::<diesel::sql_types::Text, _>(&database)
        .bind::<diesel::sql_types::Integer, _>(observer_pid)
        .execute(&mut admin)
        .unwrap();
        let lost_after = lost_in_time(&guard, sent, TTL);
        let record = Lease::inspect(&mut observer, "report")
            .unwrap()
            .expect("granted");
        let looked_after = sent.elapsed();
        assert!(
            record.is_held() || looked_after >= TTL,
            "the database had already let the lease go ({lost_after:?}, looked after {looked_after:?})"
        );
        admin
            .batch_execute(&format!(
                "ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS true"
            ))
            .unwrap();
        drop(guard);
    }

    #[test]
    fn cut_off_lease_guard_knows_it_lost_before_its_lease_expires() {
        crate::common::run::<Postgres>(
            "cut_off_lease_guard_knows_it_lost_before_its_lease_expires",
            a_cut_off_lease_guard_knows_it_lost_before_its_lease_expires,
        )
    }
}
