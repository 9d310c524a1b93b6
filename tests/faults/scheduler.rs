//! The farm scheduler's node loop survives a transient error: on PostgreSQL the release after
//! the first run hits `lock_timeout` (another session holds the lease row); the loop reports the
//! `Error::Timeout` through `on_error` and keeps scheduling, instead of stopping that node for
//! good.

#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::{Duration, Instant};

    use diesel::connection::SimpleConnection;
    use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool};
    use diesel::{Connection, PgConnection};
    use diesel_lease::lease::schedule::every;
    use diesel_lease::lease::LeaseOptions;

    use crate::common::{run, Postgres, TestDb};

    /// Every pooled connection gives up a lock wait after 100 ms.
    #[derive(Debug)]
    struct ShortLockTimeout;

    impl CustomizeConnection<PgConnection, diesel::r2d2::Error> for ShortLockTimeout {
        fn on_acquire(&self, conn: &mut PgConnection) -> Result<(), diesel::r2d2::Error> {
            conn.batch_execute("SET lock_timeout = '100ms'")
                .map_err(diesel::r2d2::Error::QueryError)
        }
    }

    fn a_transient_error_does_not_stop_the_node_loop(db: &TestDb<Postgres>) {
        db.migrate();
        let pool = Pool::builder()
            .max_size(3)
            .connection_customizer(Box::new(ShortLockTimeout))
            .build(ConnectionManager::<PgConnection>::new(&db.url))
            .unwrap();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let reported = Arc::clone(&errors);
        let schedule = every(Duration::from_millis(200))
            .lease(LeaseOptions::new(Duration::from_millis(300)))
            .poll_every(Duration::from_millis(20))
            .on_error(move |e| reported.lock().unwrap().push(format!("{e:?}")));
        let url = db.url.clone();
        let until = Instant::now() + Duration::from_millis(2500);
        let mut first = true;
        let runs = std::thread::scope(|s| {
            schedule.run_until(&pool, "digest", || Instant::now() >= until, |_| {
                if !std::mem::take(&mut first) {
                    return;
                }
                // Another session locks the lease row across this run's release.
                let (locked_tx, locked) = mpsc::channel();
                let url = url.clone();
                s.spawn(move || {
                    let mut other = PgConnection::establish(&url).unwrap();
                    other
                        .transaction::<_, diesel::result::Error, _>(|c| {
                            c.batch_execute("SELECT 1 FROM diesel_lease_leases WHERE name = 'digest' FOR UPDATE")?;
                            locked_tx.send(()).unwrap();
                            std::thread::sleep(Duration::from_millis(500));
                            Ok(())
                        })
                        .unwrap();
                });
                locked.recv().unwrap();
            })
        });
        let errors = errors.lock().unwrap();
        assert!(!errors.is_empty(), "the release never hit the lock timeout");
        assert!(
            errors.iter().all(|e| e.starts_with("Timeout")),
            "{errors:?}"
        );
        let runs = runs.expect("the loop ended with an error");
        assert!(
            runs >= 3,
            "the node stopped scheduling after the error: {runs} runs"
        );
    }

    #[test]
    fn transient_error_does_not_stop_the_node_loop() {
        run::<Postgres>(
            "transient_error_does_not_stop_the_node_loop",
            a_transient_error_does_not_stop_the_node_loop,
        )
    }
}
