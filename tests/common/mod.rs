//! The test harness: one suite, instantiated once per backend.
//!
//! Every test gets its own fresh database (a new PostgreSQL/MySQL database, a new SQLite file), so
//! tests never share tables and can run in parallel. The servers come from the project's test
//! script (`scripts/test.sh`), which exports:
//! - `DIESEL_LEASE_TEST_PG`: an admin URL of a throwaway PostgreSQL server;
//! - `DIESEL_LEASE_TEST_MYSQL`: an admin URL of a throwaway MariaDB/MySQL server;
//! - `DIESEL_LEASE_TEST_PGBOUNCER`: a URL of a throwaway PgBouncer (transaction pooling) in front
//!   of that PostgreSQL server (`through_pgbouncer`);
//! - `DIESEL_LEASE_TEST_REQUIRE`: comma-separated backends that must be available; a test of a
//!   required backend whose server is missing fails instead of being skipped;
//! - `DIESEL_LEASE_TEST_BACKENDS` (optional): comma-separated backends to run; the others' tests
//!   return at once (the script's extra MySQL pass per isolation level uses it);
//! - `DIESEL_LEASE_TEST_ISOLATION`: during a run, the MySQL server's isolation level for new
//!   connections (`repeatable-read` or `read-committed`), for tests that depend on it.
//!
//! Without the script, tests of a backend whose URL is missing print `SKIPPED` and return.

#![allow(dead_code)]

pub mod counted;
pub mod history;
pub mod holdback;
pub mod proxy;

use std::sync::atomic::{AtomicUsize, Ordering};

use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection, R2D2Connection};
use diesel::Connection;
use diesel_lease::{BackendKind, BorrowConnection, LeaseConnection};

/// A backend the suite runs on.
pub trait TestBackend: 'static {
    /// The raw connection type.
    type Conn: LeaseConnection + R2D2Connection + BorrowConnection<Conn = Self::Conn>;
    /// `postgres`, `sqlite`, `mysql` or `mariadb`: the name the test script and worker binaries
    /// use.
    const NAME: &'static str;
    /// The backend kind.
    const KIND: BackendKind;
    /// Creates a fresh database for one test, or `None` when the server is not configured.
    fn create(test: &str) -> Option<TestDb<Self>>
    where
        Self: Sized;
}

/// One test's own database; dropped (or its file deleted) at the end of the test.
pub struct TestDb<B: TestBackend> {
    /// A URL any process can connect to.
    pub url: String,
    cleanup: Cleanup,
    _b: std::marker::PhantomData<B>,
}

enum Cleanup {
    Drop {
        admin_url: String,
        name: String,
        kind: BackendKind,
    },
    TempDir(#[allow(dead_code)] tempfile::TempDir),
}

impl<B: TestBackend> TestDb<B> {
    /// A new tuned connection.
    pub fn conn(&self) -> B::Conn {
        let mut c = B::Conn::establish(&self.url).expect("connect to the test database");
        diesel_lease::pool::ConnectionTuning::default()
            .apply(&mut c)
            .expect("tune connection");
        c
    }

    /// A tuned r2d2 pool.
    pub fn pool(&self, size: u32) -> Pool<ConnectionManager<B::Conn>> {
        diesel_lease::pool::build_pool::<B::Conn>(&self.url, size).expect("build pool")
    }

    /// Runs backend-specific DDL: the statement for this backend among the three.
    pub fn ddl(&self, postgres: &str, sqlite: &str, mysql: &str) {
        self.conn()
            .batch_execute(pick::<B>(postgres, sqlite, mysql))
            .expect("test DDL");
    }

    /// Runs the built-in migrations.
    pub fn migrate(&self) {
        diesel_lease::run_migrations(&mut self.conn()).expect("migrations");
    }
}

/// Waits (up to twice `ttl`) for `holder`'s lost signal and asserts the holder counted itself
/// lost before `ttl` had passed since `sent` (taken before its grant was requested), that is
/// before the database could hand the grant on; returns how long after `sent` that was.
///
/// It measures when the holder began to believe it lost ([`LostSignal::lost_at`]: its deadline,
/// for an expiry), not when this thread woke: a starved test thread must not turn a timely loss
/// into a failure.
///
/// [`LostSignal::lost_at`]: diesel_lease::LostSignal::lost_at
/// Waits for the pool's keeper to run the releases of the guards, permits and claim guards
/// dropped so far (a drop hands its release to the keeper and returns at once).
pub fn settled<S>(pool: &S)
where
    S: diesel_lease::pool::ConnectionSource<Connection: Send>,
{
    assert!(
        diesel_lease::pool::flush_releases(pool, std::time::Duration::from_secs(30)).unwrap(),
        "the keeper settled the drops' releases within 30 s"
    );
}

pub fn lost_in_time(
    holder: &impl diesel_lease::Held,
    sent: std::time::Instant,
    ttl: std::time::Duration,
) -> std::time::Duration {
    let signal = holder.lost_signal();
    assert!(signal.wait_timeout(ttl * 2), "never reported lost");
    let lost_after = signal.lost_at().expect("lost").duration_since(sent);
    assert!(lost_after < ttl, "lost only after {lost_after:?}");
    lost_after
}

/// Runs `claim` until it ends in anything but [`Error::Timeout`](diesel_lease::Error::Timeout),
/// and unwraps that: what a worker does when its claim gave up waiting for a lock (SQLite's file
/// lock, a row lock). A claim that timed out changed nothing, so farms that judge each row's
/// hand-outs retry it: how long a lock wait takes depends on the machine's load, which no verdict
/// may.
pub fn again_after_a_timeout<T>(mut claim: impl FnMut() -> diesel_lease::Result<T>) -> T {
    loop {
        match claim() {
            Err(diesel_lease::Error::Timeout { .. }) => continue,
            other => return other.expect("claim"),
        }
    }
}

/// Picks the text for backend `B`.
pub fn pick<'a, B: TestBackend>(postgres: &'a str, sqlite: &'a str, mysql: &'a str) -> &'a str {
    match B::KIND {
        BackendKind::Postgres => postgres,
        BackendKind::Sqlite => sqlite,
        BackendKind::Mysql => mysql,
    }
}

/// Runs `write` on a plain connection (`establish`: no busy timeout, no tuning) while another
/// connection holds, for 300 ms, the lock that write needs: on SQLite the file's write lock
/// (`BEGIN IMMEDIATE`), elsewhere the row lock `lock` takes in an open transaction. The write
/// must wait for it rather than fail with SQLite's "database is locked".
pub fn on_a_plain_connection_behind_a_writer<B: TestBackend, T>(
    db: &TestDb<B>,
    lock: &str,
    write: impl FnOnce(&mut B::Conn) -> T,
) -> T {
    let mut plain = <B::Conn as Connection>::establish(&db.url).expect("plain connection");
    let mut writer = db.conn();
    let take = match B::KIND {
        BackendKind::Sqlite => "BEGIN IMMEDIATE".to_owned(),
        _ => format!("BEGIN; {lock}"),
    };
    writer.batch_execute(&take).expect("take the lock");
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            writer.batch_execute("ROLLBACK").expect("let go");
        });
        write(&mut plain)
    })
}

impl<B: TestBackend> Drop for TestDb<B> {
    fn drop(&mut self) {
        if let Cleanup::Drop {
            admin_url,
            name,
            kind,
        } = &self.cleanup
        {
            let sql = match kind {
                BackendKind::Postgres => format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
                _ => format!("DROP DATABASE IF EXISTS `{name}`"),
            };
            let _ = admin_exec::<B>(admin_url, &sql);
        }
    }
}

fn admin_exec<B: TestBackend>(admin_url: &str, sql: &str) -> diesel::QueryResult<()> {
    let mut c = B::Conn::establish(admin_url)
        .map_err(|e| diesel::result::Error::QueryBuilderError(Box::new(e)))?;
    c.batch_execute(sql)
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A database name unique to this test run: `dl_<test>_<pid>_<n>` (test-chosen text only).
fn db_name(test: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let short: String = test
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(40)
        .collect();
    format!("dl_{short}_{}_{n}", std::process::id()).to_lowercase()
}

fn server_db<B: TestBackend>(env: &str, test: &str) -> Option<TestDb<B>> {
    let admin_url = std::env::var(env).ok().filter(|u| !u.is_empty())?;
    let admin_url = match B::NAME {
        "mariadb" => as_mariadb_url(&admin_url),
        _ => admin_url,
    };
    let name = db_name(test);
    let create = match B::KIND {
        BackendKind::Postgres => format!("CREATE DATABASE \"{name}\""),
        _ => format!("CREATE DATABASE `{name}`"),
    };
    admin_exec::<B>(&admin_url, &create).expect("create the test database");
    let base = admin_url
        .rsplit_once('/')
        .map(|(base, _)| base)
        .expect("admin URL ends in /database");
    Some(TestDb {
        url: format!("{base}/{name}"),
        cleanup: Cleanup::Drop {
            admin_url,
            name,
            kind: B::KIND,
        },
        _b: std::marker::PhantomData,
    })
}

/// PostgreSQL.
#[cfg(feature = "postgres")]
pub struct Postgres;
#[cfg(feature = "postgres")]
impl TestBackend for Postgres {
    type Conn = diesel::PgConnection;
    const NAME: &'static str = "postgres";
    const KIND: BackendKind = BackendKind::Postgres;
    fn create(test: &str) -> Option<TestDb<Self>> {
        server_db(env_var(Self::NAME), test)
    }
}

/// SQLite, one file per test.
#[cfg(feature = "sqlite")]
pub struct Sqlite;
#[cfg(feature = "sqlite")]
impl TestBackend for Sqlite {
    type Conn = diesel::SqliteConnection;
    const NAME: &'static str = "sqlite";
    const KIND: BackendKind = BackendKind::Sqlite;
    fn create(_test: &str) -> Option<TestDb<Self>> {
        let dir = tempfile::tempdir().expect("temp dir");
        Some(TestDb {
            url: dir.path().join("test.db").display().to_string(),
            cleanup: Cleanup::TempDir(dir),
            _b: std::marker::PhantomData,
        })
    }
}

/// MySQL / MariaDB through Diesel's `MysqlConnection`.
#[cfg(feature = "mysql")]
pub struct Mysql;
#[cfg(feature = "mysql")]
impl TestBackend for Mysql {
    type Conn = diesel::MysqlConnection;
    const NAME: &'static str = "mysql";
    const KIND: BackendKind = BackendKind::Mysql;
    fn create(test: &str) -> Option<TestDb<Self>> {
        server_db(env_var(Self::NAME), test)
    }
}

/// The same MariaDB server through Diesel's `MariadbConnection` (URLs `mariadb://…`).
#[cfg(feature = "mariadb")]
pub struct Mariadb;
#[cfg(feature = "mariadb")]
impl TestBackend for Mariadb {
    type Conn = diesel::mariadb::MariadbConnection;
    const NAME: &'static str = "mariadb";
    const KIND: BackendKind = BackendKind::Mysql;
    fn create(test: &str) -> Option<TestDb<Self>> {
        server_db(env_var(Self::NAME), test)
    }
}

/// `url` (a `mysql://` URL, as the test script exports) with the scheme `MariadbConnection`
/// takes.
pub fn as_mariadb_url(url: &str) -> String {
    match url.strip_prefix("mysql://") {
        Some(rest) => format!("mariadb://{rest}"),
        None => url.to_owned(),
    }
}

/// `db`'s database through the PgBouncer (transaction pooling) that `scripts/test.sh` starts in
/// front of the PostgreSQL server, or `None` without one: the test is SKIPPED, or fails when
/// `pgbouncer` is required (`DIESEL_LEASE_TEST_REQUIRE`).
#[cfg(feature = "postgres")]
pub fn through_pgbouncer(db: &TestDb<Postgres>, test: &str) -> Option<String> {
    const VAR: &str = "DIESEL_LEASE_TEST_PGBOUNCER";
    let Some(bouncer) = std::env::var(VAR).ok().filter(|u| !u.is_empty()) else {
        let required = std::env::var("DIESEL_LEASE_TEST_REQUIRE").unwrap_or_default();
        assert!(
            !required.split(',').any(|r| r.trim() == "pgbouncer"),
            "pgbouncer is required (DIESEL_LEASE_TEST_REQUIRE) but {VAR} is not set; run the suite through scripts/test.sh"
        );
        eprintln!("SKIPPED {test}: {VAR} is not set (scripts/test.sh starts PgBouncer)");
        return None;
    };
    let (base, _) = bouncer
        .rsplit_once('/')
        .expect("PgBouncer URL ends in /database");
    let (_, name) = db.url.rsplit_once('/').expect("test URL ends in /database");
    Some(format!("{base}/{name}"))
}

fn env_var(backend: &str) -> &'static str {
    match backend {
        "postgres" => "DIESEL_LEASE_TEST_PG",
        "mysql" | "mariadb" => "DIESEL_LEASE_TEST_MYSQL",
        _ => "",
    }
}

/// Runs one generic test body on backend `B` with a fresh database.
pub fn run<B: TestBackend>(test: &str, body: fn(&TestDb<B>)) {
    if let Ok(selected) = std::env::var("DIESEL_LEASE_TEST_BACKENDS") {
        if !selected.split(',').any(|s| s.trim() == B::NAME) {
            eprintln!(
                "SKIPPED {test} on {}: not in DIESEL_LEASE_TEST_BACKENDS={selected}",
                B::NAME
            );
            return;
        }
    }
    match B::create(test) {
        Some(db) => body(&db),
        None => {
            let required = std::env::var("DIESEL_LEASE_TEST_REQUIRE").unwrap_or_default();
            if required.split(',').any(|r| r.trim() == B::NAME) {
                panic!(
                    "{} is required (DIESEL_LEASE_TEST_REQUIRE) but {} is not set; run the suite through scripts/test.sh",
                    B::NAME,
                    env_var(B::NAME)
                );
            }
            eprintln!(
                "SKIPPED {test} on {}: {} is not set (scripts/test.sh starts the server)",
                B::NAME,
                env_var(B::NAME)
            );
        }
    }
}

/// Instantiates generic test functions `fn name<B: TestBackend>(db: &TestDb<B>)` once per
/// enabled backend, as `postgres::name`, `sqlite::name` and `mysql::name` (and, with the `mariadb`
/// feature, `mariadb::name`: wherever `mysql` is named, `MariadbConnection` runs the case too).
///
/// Cases that exist on some backends only (a server feature, or what only a server can show)
/// go in a group of their own, registered for the backends named, as `group::postgres::name`…:
///
/// ```ignore
/// backend_tests!(mod locking on [postgres, mysql]: an_extend_waits_for_a_keep_alive_extension_under_way);
/// ```
#[macro_export]
macro_rules! backend_tests {
    (mod $group:ident on [$($backend:ident),+ $(,)?]: $($name:ident),* $(,)?) => {
        mod $group {
            // The cases, for the backend modules below (`super::name`).
            #[allow(unused_imports)]
            use super::*;
            $crate::backend_tests!(@each [$($backend),+] [$($name),*]);
        }
    };
    (@each [$backend:ident $(, $rest:ident)*] [$($name:ident),*]) => {
        $crate::backend_tests!(@one $backend [$($name),*]);
        $crate::backend_tests!(@each [$($rest),*] [$($name),*]);
    };
    (@each [] [$($name:ident),*]) => {};
    (@one postgres [$($name:ident),*]) => {
        #[cfg(feature = "postgres")]
        mod postgres {
            $( #[test] fn $name() { $crate::common::run::<$crate::common::Postgres>(stringify!($name), super::$name::<$crate::common::Postgres>) } )*
        }
    };
    (@one sqlite [$($name:ident),*]) => {
        #[cfg(feature = "sqlite")]
        mod sqlite {
            $( #[test] fn $name() { $crate::common::run::<$crate::common::Sqlite>(stringify!($name), super::$name::<$crate::common::Sqlite>) } )*
        }
    };
    (@one mysql [$($name:ident),*]) => {
        #[cfg(feature = "mysql")]
        mod mysql {
            $( #[test] fn $name() { $crate::common::run::<$crate::common::Mysql>(stringify!($name), super::$name::<$crate::common::Mysql>) } )*
        }
        $crate::backend_tests!(@one mariadb [$($name),*]);
    };
    (@one mariadb [$($name:ident),*]) => {
        #[cfg(feature = "mariadb")]
        mod mariadb {
            $( #[test] fn $name() { $crate::common::run::<$crate::common::Mariadb>(stringify!($name), super::$name::<$crate::common::Mariadb>) } )*
        }
    };
    ($($name:ident),* $(,)?) => {
        $crate::backend_tests!(@each [postgres, sqlite, mysql] [$($name),*]);
    };
}

/// Registers cases of a [`backend_suite!`] file for one backend only (a fault, a server feature
/// or a limitation that exists there alone), in a module next to the suite:
///
/// ```ignore
/// #[cfg(feature = "postgres")]
/// mod on_postgres {
///     backend_cases!(postgres, Postgres: postgres_lock_timeout_is_a_timeout);
/// }
/// ```
#[macro_export]
macro_rules! backend_cases {
    ($backend:ident, $ty:ident: $($name:ident),* $(,)?) => {
        $( #[test] fn $name() {
            $crate::common::run::<$crate::common::$ty>(stringify!($name), super::$backend::cases::$name)
        } )*
    };
}

/// A pooled connection of backend `B`.
pub type Pooled<B> = PooledConnection<ConnectionManager<<B as TestBackend>::Conn>>;

/// Path of a worker binary built with this test crate.
pub fn worker_bin(name: &str) -> &'static str {
    match name {
        "claim-worker" => env!("CARGO_BIN_EXE_claim-worker"),
        "lease-worker" => env!("CARGO_BIN_EXE_lease-worker"),
        "semaphore-worker" => env!("CARGO_BIN_EXE_semaphore-worker"),
        other => panic!("unknown worker binary {other}"),
    }
}

/// Compiles a block of test items once per enabled backend, with `B` bound to that backend's
/// concrete type, so test bodies use Diesel's typed DSL freely (no generic backend bounds).
///
/// ```ignore
/// backend_suite! {
///     tests: [claims_in_order];
///     fn claims_in_order(db: &TestDb<B>) { let mut conn = db.conn(); /* … */ }
/// }
/// ```
///
/// `fixtures: crate::path::to::other_suite_file;` before `tests:` imports that file's
/// `backend_suite!` items for the same backend as `fixtures` (shared seeding helpers).
#[macro_export]
macro_rules! backend_suite {
    (fixtures: $fx:path; tests: [$($t:ident),* $(,)?]; $($body:item)*) => {
        $crate::backend_suite!(@one "postgres", postgres, $crate::common::Postgres, {use $fx as fx; use fx::postgres::cases as fixtures;}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "sqlite", sqlite, $crate::common::Sqlite, {use $fx as fx; use fx::sqlite::cases as fixtures;}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mysql", mysql, $crate::common::Mysql, {use $fx as fx; use fx::mysql::cases as fixtures;}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mariadb", mariadb, $crate::common::Mariadb, {use $fx as fx; use fx::mariadb::cases as fixtures;}, [$($t),*], $($body)*);
    };
    (tests: [$($t:ident),* $(,)?]; $($body:item)*) => {
        $crate::backend_suite!(@one "postgres", postgres, $crate::common::Postgres, {}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "sqlite", sqlite, $crate::common::Sqlite, {}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mysql", mysql, $crate::common::Mysql, {}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mariadb", mariadb, $crate::common::Mariadb, {}, [$($t),*], $($body)*);
    };
    (@one $feature:literal, $m:ident, $ty:ty, {$($fx:item)*}, [$($t:ident),*], $($body:item)*) => {
        #[cfg(feature = $feature)]
        pub(crate) mod $m {
            /// The test bodies, compiled for this backend.
            pub(crate) mod cases {
                #[allow(unused_imports)]
                use super::super::*;
                $(#[allow(unused_imports)] $fx)*
                #[allow(dead_code)]
                pub(crate) type B = $ty;
                $($body)*
            }
            $(
                #[test]
                fn $t() {
                    $crate::common::run::<cases::B>(stringify!($t), cases::$t)
                }
            )*
        }
    };
}

/// A [`backend_suite!`] block for the MySQL family only: each test as `mysql::name`
/// (`MysqlConnection`) and `mariadb::name` (`MariadbConnection`), on the same server. Put it in
/// a module of its own when the file has a `backend_suite!` too (both name a `mysql` module).
#[macro_export]
macro_rules! mysql_suite {
    (fixtures: $fx:path; tests: [$($t:ident),* $(,)?]; $($body:item)*) => {
        $crate::backend_suite!(@one "mysql", mysql, $crate::common::Mysql, {use $fx as fx; use fx::mysql::cases as fixtures;}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mariadb", mariadb, $crate::common::Mariadb, {use $fx as fx; use fx::mariadb::cases as fixtures;}, [$($t),*], $($body)*);
    };
    (tests: [$($t:ident),* $(,)?]; $($body:item)*) => {
        $crate::backend_suite!(@one "mysql", mysql, $crate::common::Mysql, {}, [$($t),*], $($body)*);
        $crate::backend_suite!(@one "mariadb", mariadb, $crate::common::Mariadb, {}, [$($t),*], $($body)*);
    };
}
