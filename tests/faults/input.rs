//! Bad input found on the way, each a typed error on every backend with nothing left held: a
//! name with a NUL byte (which used to panic the heartbeat thread named after it on SQLite and
//! MariaDB, and failed in PostgreSQL), an owner too long for its claim stamp to fit
//! `VARCHAR(255)`; and timeouts the database reports, which name the lease, resource or table
//! they concern.

use std::sync::mpsc;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_lease::claim::ClaimOptions;
use diesel_lease::lease::{Lease, LeaseGuard, LeaseOptions};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::{Error, InvalidInput, OwnerId, MAX_OWNER_LEN};

use crate::common::{pick, TestBackend, TestDb};
use crate::models::{ImportJob, IMPORTJOBS_DDL};

const TTL: Duration = Duration::from_secs(30);

fn nul(r: diesel_lease::Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(Error::InvalidInput(InvalidInput::NulByte { what: w, at: 1 })) if w == what => {}
        other => panic!("expected InvalidInput::NulByte for the {what} name, got {other:?}"),
    }
}

fn timeout_named<T: std::fmt::Debug>(r: diesel_lease::Result<T>, name: &str) {
    match r {
        Err(Error::Timeout {
            name: n,
            source: Some(_),
            ..
        }) if n == name => {}
        other => panic!("expected a database timeout naming `{name}`, got {other:?}"),
    }
}

backend_suite! {
    tests: [
        a_name_with_a_nul_byte_is_refused_before_the_database,
        the_longest_owner_fits_every_claim_stamp,
        database_timeouts_name_what_they_concern,
    ];

    fn seed_jobs(db: &TestDb<B>, n: i64) {
        let [pg, sqlite, mysql] = [IMPORTJOBS_DDL.0, IMPORTJOBS_DDL.1, IMPORTJOBS_DDL.2];
        db.ddl(pg, sqlite, mysql);
        let mut conn = db.conn();
        for id in 1..=n {
            diesel::sql_query(
                "INSERT INTO importjobs (id, statuscode, payload) VALUES (?, 'JOBEXTRACTED', '')"
                    .replace('?', pick::<B>("$1", "?", "?"))
                    .as_str(),
            )
            .bind::<diesel::sql_types::BigInt, _>(id)
            .execute(&mut conn)
            .unwrap();
        }
    }

    /// Holds `lock` (the backend's statement among three) on a connection of its own, in a thread,
    /// until `probe` has run; returns what `probe` returned. Run inside a transaction that is rolled
    /// back at the end (MySQL's `LOCK TABLES` is undone by `UNLOCK TABLES`).
    fn while_locked<T: Send>(
        db: &TestDb<B>,
        lock: (&str, &str, &str),
        probe: impl FnOnce() -> T + Send,
    ) -> T {
        let (locked_tx, locked) = mpsc::channel();
        let (done_tx, done) = mpsc::channel::<()>();
        let lock = pick::<B>(lock.0, lock.1, lock.2).to_owned();
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut holder = db.conn();
                holder.batch_execute(&lock).expect("take the lock");
                locked_tx.send(()).unwrap();
                let _ = done.recv_timeout(Duration::from_secs(30));
                let _ = holder.batch_execute(pick::<B>("ROLLBACK", "ROLLBACK", "UNLOCK TABLES; ROLLBACK"));
            });
            locked
                .recv_timeout(Duration::from_secs(10))
                .expect("the lock was taken");
            let out = probe();
            done_tx.send(()).unwrap();
            out
        })
    }

    /// A connection whose lock waits end within about a second.
    fn impatient(db: &TestDb<B>) -> <B as TestBackend>::Conn {
        let mut conn = db.conn();
        conn.batch_execute(pick::<B>(
            "SET lock_timeout = '300ms'",
            "PRAGMA busy_timeout = 300",
            "SET SESSION innodb_lock_wait_timeout = 1; SET SESSION lock_wait_timeout = 1",
        ))
        .unwrap();
        conn
    }

    /// Counts the rows of one of the built-in tables (our own constant names).
    fn rows(conn: &mut <B as TestBackend>::Conn, table: &str) -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}"))
            .get_result::<Count>(conn)
            .unwrap()
            .n
    }

    /// `Semaphore::new("a\0b", 1).try_acquire(&pool)` and a kept-alive `LeaseGuard` of such a
    /// name used to panic (the heartbeat thread is named after it) on SQLite and MariaDB, and
    /// failed with a database error on PostgreSQL: now `InvalidInput::NulByte` everywhere,
    /// before anything is written.
    pub(crate) fn a_name_with_a_nul_byte_is_refused_before_the_database(db: &TestDb<B>) {
        db.migrate();
        let pool = db.pool(2);
        let mut conn = db.conn();
        let bad = "a\0b";
        nul(Semaphore::new(bad, 1).try_acquire(&pool), "resource");
        nul(Semaphore::new(bad, 1).acquire(&pool, Duration::from_millis(50)), "resource");
        nul(Semaphore::new(bad, 1).acquire_on(&mut conn, Duration::from_millis(50)), "resource");
        nul(diesel_lease::semaphore::RwLock::new(bad).read(&pool, Duration::from_millis(50)), "resource");
        let keep_alive = LeaseOptions::new(TTL).keep_alive(true);
        nul(LeaseGuard::try_acquire(&pool, bad, &keep_alive), "lease");
        nul(LeaseGuard::acquire(&pool, bad, &keep_alive, Duration::from_millis(50)), "lease");
        nul(Lease::try_acquire(&mut conn, bad, &keep_alive), "lease");
        assert_eq!(
            OwnerId::new("worker\0").unwrap_err(),
            InvalidInput::NulByte { what: "owner", at: 6 }
        );
        // Nothing was written.
        assert_eq!(rows(&mut conn, "diesel_lease_leases"), 0);
        assert_eq!(rows(&mut conn, "diesel_lease_semaphores"), 0);
        assert_eq!(rows(&mut conn, "diesel_lease_semaphore_tickets"), 0);
    }

    /// An owner of `MAX_OWNER_LEN` (242) bytes: its claim stamp (13 bytes more) fits the
    /// `VARCHAR(255)` owner column (MariaDB used to refuse every claim of a 255-byte owner
    /// with "Data too long for column 'worker'"), and leases and permits take it as holder.
    /// One byte more is refused by `OwnerId::new`.
    pub(crate) fn the_longest_owner_fits_every_claim_stamp(db: &TestDb<B>) {
        db.migrate();
        seed_jobs(db, 2);
        assert_eq!(MAX_OWNER_LEN, 242);
        assert!(matches!(
            OwnerId::new("o".repeat(MAX_OWNER_LEN + 1)),
            Err(InvalidInput::NameTooLong { what: "owner", len: 243, max: 242 })
        ));
        let owner = OwnerId::new("o".repeat(MAX_OWNER_LEN)).unwrap();
        let options = ClaimOptions::default().owner(owner.clone());
        let mut conn = db.conn();
        let job = ImportJob::claim().options(&options).row(&mut conn).unwrap().expect("a row");
        assert_eq!(job.worker.as_deref().map(str::len), Some(255));
        assert!(job.complete(&mut conn).unwrap());
        let pool = db.pool(3);
        let guard = ImportJob::claim().options(&options).guard(&pool).unwrap().expect("a row");
        assert!(guard.complete().unwrap());
        let held = Lease::try_acquire(&mut conn, "long-owner", &LeaseOptions::new(TTL).owner(owner.clone()))
            .unwrap()
            .expect("free");
        assert_eq!(Lease::inspect(&mut conn, "long-owner").unwrap().unwrap().holder, owner.as_str());
        let mut held = held;
        assert!(held.release(&mut conn).unwrap().was_held());
        let permit = Semaphore::mutex("long-owner").with_owner(owner).try_acquire(&pool).unwrap().expect("free");
        assert!(permit.release().unwrap().was_held());
    }

    /// A lock wait the database ends names what waited: the lease for `try_acquire`, the
    /// resource for a semaphore, the table for a claim and a `complete()` (they used to carry
    /// an empty name).
    pub(crate) fn database_timeouts_name_what_they_concern(db: &TestDb<B>) {
        db.migrate();
        seed_jobs(db, 2);
        // The lease's and the resource's rows exist (granted once, released).
        let mut conn = db.conn();
        let mut first = Lease::try_acquire(&mut conn, "nightly", &LeaseOptions::new(TTL)).unwrap().unwrap();
        let _ = first.release(&mut conn).unwrap();
        let pool = db.pool(2);
        let mutex = Semaphore::mutex("api").with_drop_wait(Duration::from_millis(300));
        assert!(mutex.try_acquire(&pool).unwrap().expect("free").release().unwrap().was_held());

        let mut probe = impatient(db);
        let lease_row = (
            "BEGIN; SELECT * FROM diesel_lease_leases WHERE name = 'nightly' FOR UPDATE",
            "BEGIN IMMEDIATE",
            "BEGIN; SELECT * FROM diesel_lease_leases WHERE name = 'nightly' FOR UPDATE",
        );
        timeout_named(
            while_locked(db, lease_row, || {
                Lease::try_acquire(&mut probe, "nightly", &LeaseOptions::new(TTL))
            }),
            "nightly",
        );
        let resource_row = (
            "BEGIN; SELECT * FROM diesel_lease_semaphores WHERE resource = 'api' FOR UPDATE",
            "BEGIN IMMEDIATE",
            "BEGIN; SELECT * FROM diesel_lease_semaphores WHERE resource = 'api' FOR UPDATE",
        );
        timeout_named(while_locked(db, resource_row, || mutex.try_acquire(&pool)), "api");

        let job = ImportJob::claim().row(&mut probe).unwrap().expect("a row");
        let table = (
            "BEGIN; LOCK TABLE importjobs IN ACCESS EXCLUSIVE MODE",
            "BEGIN IMMEDIATE",
            "LOCK TABLES importjobs WRITE",
        );
        timeout_named(while_locked(db, table, || ImportJob::claim().row(&mut probe)), "importjobs");
        timeout_named(while_locked(db, table, || job.complete(&mut probe)), "importjobs");
        // Nothing changed: the row is still claimed, and completes now.
        assert!(job.complete(&mut probe).unwrap());
    }
}
