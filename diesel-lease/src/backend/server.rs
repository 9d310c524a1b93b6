//! What is behind a connection: which server engine (read from its version string, once per
//! connection or pool), and whether a transaction pooler sits between us and PostgreSQL.
//!
//! Some engines speak a backend's protocol without keeping the promises diesel-lease's
//! statements rely on. They are refused with [`Error::Config`] before anything relies on them:
//! by [`check_server`], which `pool::build_pool`, `pool::ConnectionTuning::apply` (so every
//! connection of a pool that has it as customizer) and [`run_migrations`](super::run_migrations)
//! call.
//!
//! A transaction pooler (PgBouncer with `pool_mode = transaction`) runs each transaction of a
//! client on whichever server connection is free. Diesel's named prepared statements, which it
//! prepares once per connection and caches, then meet server connections that never saw them
//! (`prepared statement "__diesel_stmt_0" does not exist`) or that another client prepared under
//! the same name (`… already exists`). Such errors become [`Error::Config`] with
//! [`POOLER_ADVICE`]; `pool::build_pool` refuses a URL where it sees the pooler at once.

use super::Dialect;
use crate::Error;

/// The database server behind a connection, as its version string names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerEngine {
    /// PostgreSQL (and servers that report themselves as PostgreSQL without a mark of their own).
    PostgreSql,
    /// CockroachDB: `SELECT version()` begins with `CockroachDB`. Refused.
    CockroachDb,
    /// YugabyteDB (YSQL): `SELECT version()` reads `PostgreSQL 11.2-YB-…`. Refused.
    YugabyteDb,
    /// MariaDB: `SELECT VERSION()` contains `MariaDB`.
    MariaDb,
    /// MySQL (and servers that report themselves as MySQL without a mark of their own).
    MySql,
    /// TiDB: `SELECT VERSION()` contains `TiDB`. Refused.
    TiDb,
    /// SQLite.
    Sqlite,
}

impl ServerEngine {
    /// The engine behind a PostgreSQL connection, from what `SELECT version()` returned.
    pub fn from_postgres_version(version: &str) -> Self {
        if version.trim_start().starts_with("CockroachDB") {
            ServerEngine::CockroachDb
        } else if version.contains("-YB-") {
            ServerEngine::YugabyteDb
        } else {
            ServerEngine::PostgreSql
        }
    }

    /// The engine behind a MySQL connection, from what `SELECT VERSION()` returned.
    pub fn from_mysql_version(version: &str) -> Self {
        if version.contains("TiDB") {
            ServerEngine::TiDb
        } else if version.contains("MariaDB") {
            ServerEngine::MariaDb
        } else {
            ServerEngine::MySql
        }
    }

    /// Why diesel-lease refuses this engine; `None` when it runs on it.
    pub fn refusal(self) -> Option<&'static str> {
        match self {
            ServerEngine::TiDb => Some(
                "the server is TiDB, which accepts `SELECT … FOR UPDATE SKIP LOCKED` but takes no \
                 lock at all (pingcap/tidb#69720), so a claim could hand one row to two workers; \
                 leases and semaphores rely on MySQL's row locks too, and nothing of diesel-lease \
                 is tested on TiDB. diesel-lease refuses TiDB: use MySQL 8 or MariaDB 10.6+",
            ),
            ServerEngine::CockroachDb => Some(
                "the server is CockroachDB, which speaks PostgreSQL's protocol but has no \
                 LISTEN/NOTIFY (a semaphore that admits a waiter sends `pg_notify`), runs \
                 transactions SERIALIZABLE unless READ COMMITTED is enabled cluster-wide (claims \
                 and semaphores are written for READ COMMITTED), and rejects statement shapes \
                 PostgreSQL accepts (a CTE that modifies a table the statement modifies again); \
                 nothing of diesel-lease is tested on it. diesel-lease refuses CockroachDB: use \
                 PostgreSQL",
            ),
            ServerEngine::YugabyteDb => Some(
                "the server is YugabyteDB (YSQL), which speaks PostgreSQL's protocol but runs READ \
                 COMMITTED as REPEATABLE READ unless `yb_enable_read_committed_isolation` is set \
                 (claims and semaphores are written for READ COMMITTED) and does not support \
                 LISTEN/NOTIFY in most releases (a semaphore that admits a waiter sends \
                 `pg_notify`); nothing of diesel-lease is tested on it. diesel-lease refuses \
                 YugabyteDB: use PostgreSQL",
            ),
            ServerEngine::PostgreSql
            | ServerEngine::MariaDb
            | ServerEngine::MySql
            | ServerEngine::Sqlite => None,
        }
    }
}

/// Reads which server is behind `conn` (one query) and refuses the engines diesel-lease does not
/// run on with [`Error::Config`], which says why: TiDB, CockroachDB, YugabyteDB. Returns the
/// engine otherwise.
///
/// `pool::build_pool` checks once per pool, `pool::ConnectionTuning::apply` once per connection
/// (a pool with it as customizer: each new connection), and
/// [`run_migrations`](super::run_migrations) before it creates anything. Call it yourself on a
/// connection that goes through none of them.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::Connection;
/// use diesel_lease::backend::{check_server, ServerEngine};
///
/// let mut conn = diesel::SqliteConnection::establish(":memory:").unwrap();
/// assert_eq!(check_server(&mut conn).unwrap(), ServerEngine::Sqlite);
/// # }
/// ```
pub fn check_server(conn: &mut impl super::BorrowConnection) -> crate::Result<ServerEngine> {
    check(conn.borrow_connection())
}

/// [`check_server`] on a raw connection.
pub(crate) fn check<C: Dialect>(conn: &mut C) -> crate::Result<ServerEngine> {
    let engine = conn.server_engine()?;
    match engine.refusal() {
        Some(reason) => Err(Error::Config(reason.to_owned())),
        None => Ok(engine),
    }
}

/// How the server behind a connection passes on what it commits, where diesel-lease's
/// guarantees depend on it ([`check_replication`]).
///
/// Every guarantee of diesel-lease is a guarantee of the server it talks to. Replication decides
/// whether it survives that server:
///
/// | topology | what holds |
/// |---|---|
/// | one server, SQLite | everything |
/// | PostgreSQL, synchronous standby (`synchronous_standby_names` names it, `synchronous_commit` `on`, `remote_write` or `remote_apply`) | everything, across a failover: an acknowledged commit is on the standby |
/// | PostgreSQL, asynchronous standbys | everything until a failover; after one, acknowledged grants, claims and completions may be gone, and the new primary can hand out a fencing token again |
/// | MariaDB Galera | claims, leases and fencing tokens across nodes (a conflicting write on another node fails at commit and is retried; `tests/faults/galera.rs`); semaphores and reader/writer locks only when all their clients use one node. At-most-once guards and insert-once decide on the row they write, as claims do, but are not tested across nodes |
///
/// It is read with `pg_stat_replication`, `synchronous_standby_names` and `synchronous_commit`
/// (asynchronous: standbys stream while no standby is named or `synchronous_commit` is `local`
/// or `off`), and with `wsrep_on` on MariaDB. Each line of the table is tested:
/// `tests/faults/failover.rs` (both pairs: detected; strict grants refused on the asynchronous
/// one, granted on the synchronous one), `tests/faults/galera.rs`, `tests/faults/replication.rs`.
/// A MySQL/MariaDB claim hands out only rows its own statement marked (re-checked in the
/// marking, counted, read back by its stamp with a locking read), which is what makes claims
/// hold across Galera nodes.
///
/// `pool::build_pool` logs a warning (feature `tracing`) when it sees asynchronous standbys or
/// Galera; [`LeaseOptions::require_synchronous_replication`](crate::lease::LeaseOptions::require_synchronous_replication)
/// refuses fencing-token grants on asynchronous standbys; `diesel-lease doctor` prints the line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replication {
    /// Nothing seen passes commits on: a single server (or one whose standbys this role may not
    /// see), SQLite, MySQL/MariaDB without Galera.
    Single,
    /// A PostgreSQL primary streaming to standbys that commits do not wait for.
    AsyncStandbys {
        /// How many standbys stream from it (`pg_stat_replication`).
        standbys: i64,
        /// Its `synchronous_standby_names`.
        synchronous_standby_names: String,
        /// Its `synchronous_commit`.
        synchronous_commit: String,
    },
    /// A PostgreSQL primary whose commits wait for a synchronous standby.
    SyncStandbys {
        /// How many standbys stream from it.
        standbys: i64,
    },
    /// A MariaDB Galera cluster (`wsrep_on`).
    Galera {
        /// Its nodes (`wsrep_cluster_size`).
        nodes: i64,
    },
}

impl Replication {
    /// What a PostgreSQL primary's `pg_stat_replication` row count and settings mean.
    ///
    /// ```
    /// use diesel_lease::backend::Replication;
    ///
    /// assert_eq!(Replication::from_postgres(0, "", "on"), Replication::Single);
    /// assert_eq!(
    ///     Replication::from_postgres(1, "standby1", "on"),
    ///     Replication::SyncStandbys { standbys: 1 }
    /// );
    /// assert!(matches!(
    ///     Replication::from_postgres(1, "standby1", "local"),
    ///     Replication::AsyncStandbys { .. }
    /// ));
    /// assert!(matches!(Replication::from_postgres(2, "", "on"), Replication::AsyncStandbys { .. }));
    /// ```
    pub fn from_postgres(
        standbys: i64,
        synchronous_standby_names: &str,
        synchronous_commit: &str,
    ) -> Self {
        if standbys == 0 {
            return Replication::Single;
        }
        let waits = !synchronous_standby_names.trim().is_empty()
            && !matches!(synchronous_commit.trim(), "local" | "off");
        if waits {
            Replication::SyncStandbys { standbys }
        } else {
            Replication::AsyncStandbys {
                standbys,
                synchronous_standby_names: synchronous_standby_names.to_owned(),
                synchronous_commit: synchronous_commit.to_owned(),
            }
        }
    }

    /// Why fencing-token grants are refused here when they must be safe across a failover
    /// ([`LeaseOptions::require_synchronous_replication`](crate::lease::LeaseOptions::require_synchronous_replication));
    /// `None` where they are.
    pub fn fencing_refusal(&self) -> Option<String> {
        let risk = self.async_risk()?;
        Some(format!(
            "{risk}. Name a standby in synchronous_standby_names with synchronous_commit on, \
             remote_write or remote_apply, or leave require_synchronous_replication off"
        ))
    }

    /// One line on what holds on this topology (see the type's table); the warning that
    /// `pool::build_pool` logs when it is `Some`.
    pub fn warning(&self) -> Option<String> {
        match self {
            Replication::Single | Replication::SyncStandbys { .. } => None,
            Replication::AsyncStandbys { .. } => self.async_risk().map(|risk| {
                format!("{risk}; LeaseOptions::require_synchronous_replication refuses grants here")
            }),
            Replication::Galera { nodes } => Some(format!(
                "the server is a node of a MariaDB Galera cluster of {nodes}: claims, leases and \
                 fencing tokens hold across nodes; semaphores and reader/writer locks hold only \
                 when all their clients use one node"
            )),
        }
    }

    /// What asynchronous standbys put at risk; `None` for any other topology.
    fn async_risk(&self) -> Option<String> {
        let Replication::AsyncStandbys {
            standbys,
            synchronous_standby_names,
            synchronous_commit,
        } = self
        else {
            return None;
        };
        Some(format!(
            "the primary streams to {standbys} standby(s) asynchronously \
             (synchronous_standby_names = '{synchronous_standby_names}', \
             synchronous_commit = '{synchronous_commit}'): after a failover an acknowledged \
             grant may be gone and the new primary can hand out the same fencing token again"
        ))
    }
}

impl std::fmt::Display for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replication::Single => f.write_str("no replication seen"),
            Replication::SyncStandbys { standbys } => write!(
                f,
                "PostgreSQL primary with {standbys} standby(s), commits wait for a synchronous one"
            ),
            Replication::AsyncStandbys { standbys, .. } => write!(
                f,
                "PostgreSQL primary with {standbys} asynchronous standby(s)"
            ),
            Replication::Galera { nodes } => write!(f, "MariaDB Galera cluster of {nodes} node(s)"),
        }
    }
}

/// How the server behind `conn` replicates what it commits ([`Replication`]). One round trip:
/// PostgreSQL reads `pg_stat_replication`, `synchronous_standby_names` and
/// `synchronous_commit`; MySQL/MariaDB `wsrep_on` and `wsrep_cluster_size`; SQLite asks nothing.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::Connection;
/// use diesel_lease::backend::{check_replication, Replication};
///
/// let mut conn = diesel::SqliteConnection::establish(":memory:").unwrap();
/// assert_eq!(check_replication(&mut conn).unwrap(), Replication::Single);
/// # }
/// ```
pub fn check_replication(conn: &mut impl super::BorrowConnection) -> crate::Result<Replication> {
    Ok(conn.borrow_connection().replication()?)
}

/// What to change when a transaction pooler is in front of PostgreSQL and the pool was not built
/// for it (the text of those [`Error::Config`]s).
pub(crate) const POOLER_ADVICE: &str =
    "the connection goes through a transaction pooler (such as PgBouncer with `pool_mode = \
     transaction`), which runs each transaction on whichever server connection is free, so the \
     prepared statements Diesel caches per connection are missing there or clash with another \
     client's: build the pool with `diesel_lease::pool::PoolOptions::default().transaction_pooler() \
     .build(url, size)` (or set \
     `ConnectionTuning::transaction_pooler` on every connection you set up yourself), which \
     turns Diesel's prepared-statement cache off; or connect to PostgreSQL directly, or use \
     `pool_mode = session`";

/// [`POOLER_ADVICE`] with what the server said.
pub(crate) fn pooler_error(said: &str) -> Error {
    Error::Config(format!("{POOLER_ADVICE} (the server said: {said})"))
}

/// Checks the server behind `url` on a connection of its own before a pool is built: the engine
/// ([`check_server`]), and, unless the pool is built for one (`transaction_pooler`), a
/// transaction pooler in between. A URL that cannot be connected to is left to the pool, which
/// reports it as it always did.
///
/// The pooler shows itself when two connections open at the same time run their statements in
/// the same server session (PostgreSQL's backend pid, on the server started at the same
/// instant): directly, every connection has a session of its own, so this never refuses a direct
/// URL, not even one that a load balancer spreads over several servers. A pooler hands an idle client the server
/// connection released last (PgBouncer's default, `server_round_robin = 0`), which is the first
/// connection's; under other traffic, or round-robin, it may hand another one and go unseen here
/// — then the first clashing prepared statement reports it instead.
#[cfg_attr(not(feature = "r2d2"), allow(dead_code))]
pub(crate) fn check_url<C: Dialect>(url: &str, transaction_pooler: bool) -> crate::Result<()> {
    let Ok(mut first) = C::establish(url) else {
        return Ok(());
    };
    check(&mut first)?;
    // Said, not refused: a role that may not read the replication views gets no warning.
    if let Some(warning) = first.replication().ok().and_then(|r| r.warning()) {
        crate::observe::replication_warning(&warning);
    }
    if transaction_pooler {
        return Ok(());
    }
    let Some(session) = first.server_session()? else {
        return Ok(());
    };
    let Ok(mut second) = C::establish(url) else {
        return Ok(());
    };
    if second.server_session()?.as_ref() == Some(&session) {
        return Err(Error::Config(format!(
            "{POOLER_ADVICE} (two connections open at once were both answered by {session})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ServerEngine::{self, *};

    /// `SELECT version()` as each engine answers it: the suite's own server, and strings seen in
    /// issue reports, shell sessions and other projects' notes (the build details vary).
    const POSTGRES_VERSIONS: &[(&str, ServerEngine)] = &[
        ("PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14+deb12u1) 12.2.0, 64-bit", PostgreSql),
        ("PostgreSQL 9.4.6 on x86_64-apple-darwin14.5.0, compiled by Apple LLVM version 7.0.0 (clang-700.1.76), 64-bit", PostgreSql),
        ("PostgreSQL 16.14 on x86_64-pc-linux-musl, compiled by gcc (Alpine 15.2.0) 15.2.0, 64-bit", PostgreSql),
        ("CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)", CockroachDb),
        ("CockroachDB CCL v21.1.0 (x86_64-unknown-linux-gnu, built 2021/04/23 13:54:57, go1.13.14)", CockroachDb),
        ("CockroachDB CCL v24.1.0-alpha.5-dev-d45a65e08d45383aade2bcffdcdbe72a0cc279b1 (....)", CockroachDb),
        ("CockroachDB CCL v2.1.0-alpha.20180702-281-g07a11b8e8c-dirty (x86_64-apple-darwin17.6.0, built 2018/07/08 14:00:29, go1.10.1)", CockroachDb),
        ("PostgreSQL 11.2-YB-2.6.1.0-b0 on x86_64-pc-linux-gnu, compiled by gcc (Homebrew gcc 5.5.0_4) 5.5.0, 64-bit", YugabyteDb),
        ("PostgreSQL 15.12-YB-2025.2.6.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 19.1.0 (https://github.com/yugabyte/llvm-project.git a2a6b655e14e7fa1fcf1011a6cb29cb85", YugabyteDb),
        ("PostgreSQL 15.12-YB-2025.2.2.2-b0", YugabyteDb),
    ];

    /// `SELECT VERSION()` as each engine answers it, from the same kinds of sources.
    const MYSQL_VERSIONS: &[(&str, ServerEngine)] = &[
        ("10.11.19-MariaDB-0+deb12u1", MariaDb),
        ("10.6.12-MariaDB-0ubuntu0.22.04.1", MariaDb),
        ("5.5.5-10.6.12-MariaDB-0ubuntu0.22.04.1", MariaDb),
        ("8.0.36-0ubuntu0.22.04.1", MySql),
        ("8.0.45-0ubuntu0.22.04.1", MySql),
        ("5.7.25-TiDB-v3.0.3", TiDb),
        ("5.7.25-TiDB-v4.0.0-beta.2-524-g73fe3ca4d-dirty", TiDb),
        ("8.0.11-TiDB-v7.5.2-serverless", TiDb),
        ("8.0.11-TiDB-v8.5.6", TiDb),
        ("8.0.11-TiDB-v9.0.0-beta.1.pre-640-g24903d6b24-dirty", TiDb),
    ];

    #[test]
    fn postgres_version_strings_name_their_engine() {
        for &(version, engine) in POSTGRES_VERSIONS {
            assert_eq!(
                ServerEngine::from_postgres_version(version),
                engine,
                "{version}"
            );
        }
    }

    #[test]
    fn mysql_version_strings_name_their_engine() {
        for &(version, engine) in MYSQL_VERSIONS {
            assert_eq!(
                ServerEngine::from_mysql_version(version),
                engine,
                "{version}"
            );
        }
    }

    #[test]
    fn the_refused_engines_say_why() {
        for engine in [TiDb, CockroachDb, YugabyteDb] {
            let reason = engine.refusal().expect("refused");
            assert!(reason.contains("diesel-lease refuses"), "{reason}");
        }
        assert!(TiDb.refusal().unwrap().contains("SKIP LOCKED"));
        assert!(CockroachDb.refusal().unwrap().contains("LISTEN/NOTIFY"));
        for engine in [PostgreSql, MariaDb, MySql, Sqlite] {
            assert_eq!(engine.refusal(), None);
        }
    }
}
