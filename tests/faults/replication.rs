//! What diesel-lease says about the replication its guarantees depend on
//! (`diesel_lease::backend::Replication`): a single server replicates nothing, so nothing is
//! said and strict grants go ahead, on every backend. The PostgreSQL primary/standby pairs are
//! in `failover` (asynchronous: detected, strict grants refused; synchronous: detected, strict
//! grants go ahead), the Galera cluster in `galera`.

use std::time::Duration;

use diesel_lease::backend::{check_replication, Replication};
use diesel_lease::lease::{Lease, LeaseOptions};

use crate::common::TestDb;

backend_suite! {
    tests: [a_single_server_replicates_nothing_and_strict_grants_go_ahead];

    pub(crate) fn a_single_server_replicates_nothing_and_strict_grants_go_ahead(db: &TestDb<B>) {
        db.migrate();
        let mut conn = db.conn();
        let replication = check_replication(&mut conn).unwrap();
        assert_eq!(replication, Replication::Single);
        assert_eq!(replication.warning(), None);
        assert_eq!(replication.fencing_refusal(), None);
        let strict = LeaseOptions::new(Duration::from_secs(30)).require_synchronous_replication(true);
        let mut lease = Lease::try_acquire(&mut conn, "strict", &strict)
            .unwrap()
            .expect("free");
        assert!(lease.release(&mut conn).unwrap().was_held());
    }
}
