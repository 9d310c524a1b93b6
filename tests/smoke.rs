use diesel::connection::SimpleConnection;
use diesel_lease::__private::Dialect;
use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_migrations::MigrationHarness;

use crate::common::{TestBackend, TestDb};

fn migrations_apply_twice<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    db.migrate();
}

/// Every down migration runs on every backend and undoes exactly its up migration: reverting
/// the newest (`released_at`) keeps the leases and their rows, reverting the rest leaves no
/// built-in table, and the migrations then apply again to a working lease table.
fn migrations_revert_and_apply_again<B: TestBackend>(db: &TestDb<B>) {
    const TABLES: [&str; 6] = [
        "diesel_lease_leases",
        "diesel_lease_semaphores",
        "diesel_lease_semaphore_tickets",
        "diesel_lease_pauses",
        "diesel_lease_rate_limits",
        "diesel_lease_rate_starts",
    ];
    db.migrate();
    let mut c = db.conn();
    let options = LeaseOptions::new(std::time::Duration::from_secs(10));
    let _ = Lease::try_acquire(&mut c, "job", &options)
        .unwrap()
        .expect("free")
        .release(&mut c)
        .unwrap();
    let applied = c.applied_migrations().unwrap();
    assert_eq!(applied.len(), 5, "{applied:?}");

    let reverted = c
        .revert_last_migration(<B::Conn as Dialect>::MIGRATIONS)
        .unwrap();
    assert_eq!(reverted.to_string(), "20261128000100");
    assert!(c
        .batch_execute("SELECT released_at FROM diesel_lease_leases")
        .is_err());
    c.batch_execute("SELECT name, token FROM diesel_lease_leases")
        .expect("the leases table outlives the newest migration's revert");

    db.migrate();
    let record = Lease::inspect(&mut c, "job")
        .unwrap()
        .expect("the row stayed");
    assert_eq!(record.token.get(), 1);
    assert_eq!(
        record.released_at_micros, None,
        "the column comes back empty"
    );

    let reverted = c
        .revert_all_migrations(<B::Conn as Dialect>::MIGRATIONS)
        .unwrap();
    assert_eq!(reverted.len(), 5, "{reverted:?}");
    for table in TABLES {
        assert!(
            c.batch_execute(&format!("SELECT 1 FROM {table}")).is_err(),
            "{table} is still there"
        );
    }

    db.migrate();
    let held = Lease::try_acquire(&mut c, "job", &options)
        .unwrap()
        .expect("a fresh table");
    assert_eq!(held.token().get(), 1);
}

backend_tests!(migrations_apply_twice, migrations_revert_and_apply_again);
