// Hidden set-up of the doctests that need a PostgreSQL server, included in a module:
// `# mod setup { include!("../doctest_pg.rs"); }`.
//
// `scripts/test.sh` starts a throwaway server and exports its admin URL as
// `DIESEL_LEASE_TEST_PG`; each doctest gets a database of its own. Without the variable the
// doctest has nothing to run against and returns early (CI always sets it).

/// A connection to a fresh database on the test server, or `None` without one.
#[allow(dead_code)]
pub fn pg_connection() -> Option<diesel::PgConnection> {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;
    let admin = std::env::var("DIESEL_LEASE_TEST_PG").ok().filter(|u| !u.is_empty())?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Our own digits only: the name is not user data.
    let name = format!("doctest_{}_{nanos}", std::process::id());
    let mut admin_conn = diesel::PgConnection::establish(&admin).expect("connect to the test server");
    admin_conn
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create the doctest database");
    let (base, _) = admin.rsplit_once('/').expect("admin URL ends in /database");
    Some(diesel::PgConnection::establish(&format!("{base}/{name}")).expect("connect to the doctest database"))
}
