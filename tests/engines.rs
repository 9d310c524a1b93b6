//! Which server is behind a connection, checked once per connection or pool: the suite's own
//! servers (PostgreSQL, MariaDB, SQLite) pass; a PostgreSQL whose `version()` reads like
//! CockroachDB's or YugabyteDB's is refused before anything is created. (TiDB, which we cannot
//! run either, is checked on its version strings by the unit tests of `backend::server`.)

use diesel_lease::backend::{check_server, ServerEngine};
use diesel_lease::BackendKind;

use crate::common::{TestBackend, TestDb};

fn the_suites_servers_pass_the_engine_check<B: TestBackend>(db: &TestDb<B>) {
    // `conn()` applies `ConnectionTuning`, which checks too.
    let mut conn = db.conn();
    let engine = check_server(&mut conn).unwrap();
    match B::KIND {
        BackendKind::Postgres => assert_eq!(engine, ServerEngine::PostgreSql),
        BackendKind::Sqlite => assert_eq!(engine, ServerEngine::Sqlite),
        // scripts/test.sh starts MariaDB; a MySQL server passes as well.
        BackendKind::Mysql => {
            assert!(
                matches!(engine, ServerEngine::MariaDb | ServerEngine::MySql),
                "{engine:?}"
            )
        }
    }
    diesel_lease::run_migrations(&mut conn).unwrap();
    diesel_lease::pool::build_pool::<B::Conn>(&db.url, 1).unwrap();
}

backend_tests!(the_suites_servers_pass_the_engine_check);

/// PostgreSQL servers that say they are another engine: a `version()` of our own, found first on
/// the database's `search_path`.
#[cfg(feature = "postgres")]
mod lookalikes {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;
    use diesel::r2d2::{ConnectionManager, Pool};
    use diesel::PgConnection;
    use diesel_lease::pool::ConnectionTuning;
    use diesel_lease::Error;

    use super::*;
    use crate::common::Postgres;

    /// Makes every new session of `db` read `version` from `version()`.
    fn pretend(db: &TestDb<Postgres>, version: &str) {
        let mut conn = PgConnection::establish(&db.url).unwrap();
        conn.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS lookalike;
             CREATE OR REPLACE FUNCTION lookalike.version() RETURNS text LANGUAGE sql
                 AS $f$ SELECT '{version}'::text $f$;
             DO $d$ BEGIN
                 EXECUTE format('ALTER DATABASE %I SET search_path = lookalike, pg_catalog, public',
                                current_database());
             END $d$;"
        ))
        .unwrap();
    }

    fn expect_refusal<T: std::fmt::Debug>(what: &str, got: diesel_lease::Result<T>, engine: &str) {
        match got {
            Err(Error::Config(msg)) => {
                assert!(
                    msg.contains(engine) && msg.contains("diesel-lease refuses"),
                    "{what}: {msg}"
                )
            }
            other => panic!("{what}: expected Error::Config naming {engine}, got {other:?}"),
        }
    }

    fn refused_at_first_use(db: &TestDb<Postgres>, version: &str, engine: &str) {
        pretend(db, version);
        let url = &db.url;
        expect_refusal(
            "build_pool",
            diesel_lease::pool::build_pool::<PgConnection>(url, 2),
            engine,
        );
        let mut conn = PgConnection::establish(url).unwrap();
        expect_refusal("check_server", check_server(&mut conn), engine);
        expect_refusal(
            "ConnectionTuning::apply",
            ConnectionTuning::default().apply(&mut conn),
            engine,
        );
        expect_refusal(
            "run_migrations",
            diesel_lease::run_migrations(&mut conn),
            engine,
        );
        let tables: i64 = diesel::dsl::sql::<diesel::sql_types::BigInt>(
            "SELECT COUNT(*) FROM pg_tables WHERE tablename LIKE 'diesel\\_lease\\_%'",
        )
        .get_result(&mut conn)
        .unwrap();
        assert_eq!(tables, 0, "nothing was created");
        // A pool of your own with `ConnectionTuning` as its customizer gets no connection; the
        // pool's error names the engine.
        let own = Pool::builder()
            .connection_timeout(std::time::Duration::from_secs(2))
            .connection_customizer(Box::new(ConnectionTuning::default()))
            .build(ConnectionManager::<PgConnection>::new(url.as_str()));
        let err = own
            .map(drop)
            .expect_err("no connection passes the customizer");
        assert!(err.to_string().contains(engine), "{err}");
    }

    fn cockroachdb_is_refused_at_first_use(db: &TestDb<Postgres>) {
        refused_at_first_use(
            db,
            "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)",
            "CockroachDB",
        );
    }

    fn yugabytedb_is_refused_at_first_use(db: &TestDb<Postgres>) {
        refused_at_first_use(
            db,
            "PostgreSQL 11.2-YB-2.6.1.0-b0 on x86_64-pc-linux-gnu, compiled by gcc (Homebrew gcc 5.5.0_4) 5.5.0, 64-bit",
            "YugabyteDB",
        );
    }

    #[test]
    fn cockroachdb() {
        crate::common::run::<Postgres>("cockroachdb", cockroachdb_is_refused_at_first_use);
    }

    #[test]
    fn yugabytedb() {
        crate::common::run::<Postgres>("yugabytedb", yugabytedb_is_refused_at_first_use);
    }
}
