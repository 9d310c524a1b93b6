//! Rate limits: at most `max` claims per `period` of a table, or of each value of a key column,
//! across every process of the farm, by the database clock.
//!
//! # How an admission works, and why the limit holds in every window
//!
//! Every start is a row of `diesel_lease_rate_starts` (`scope`, `rate_key`, `started_at` in µs
//! by the database clock). A rate-limited claim runs in one write transaction that
//!
//! 1. locks the key's row of `diesel_lease_rate_limits` (`SELECT … FOR UPDATE`; SQLite's
//!    `BEGIN IMMEDIATE` already serializes every writer), so the admissions of one key are taken
//!    one at a time, each after the previous one committed;
//! 2. deletes the key's starts older than the period and counts the others, at the database's
//!    time `r`: `max - count` rows may start;
//! 3. claims at most that many rows (the ordinary claim statement, restricted to the key);
//! 4. records one start per claimed row, at the database's time `a`, read after the claim.
//!
//! A filter alone ("fewer than `max` starts of my key in the window") is not exact at READ
//! COMMITTED: two claims both count `max - 1` and both claim, like the per-key concurrency
//! limit, which needs a semaphore for the same reason. The lock makes the count and the claim
//! one decision.
//!
//! The guarantee, for the claimed-at times `c` the claims write (and any record of starts taken
//! at or after the claim): among any `max + 1` claims of one key, the last is at least `period`
//! after the first, so **no window of length `period` holds more than `max` starts** — a sliding
//! window, not fixed buckets. Why: take `max + 1` claims and the admission `j` that claimed the
//! last of them. Admissions of one key are serialized, and each reads the clock after the lock,
//! so `r_j` is after every earlier admission's `a`. Admission `j` claimed its rows only because
//! fewer than `max - k + 1` earlier starts had `a > r_j - period` (with `k` rows claimed by
//! `j`); at least `max + 1 - k` of the chosen claims are earlier ones, so one of them, `i`, has
//! `a_i <= r_j - period`. Then `c_last >= r_j >= a_i + period >= c_i + period`. It needs one
//! clock that does not step back (one server; a multi-primary cluster's nodes each have their
//! own), and a claimed-at column that keeps microseconds (a whole-second column rounds).
//!
//! The key's row holds no state: [`RateLimit::forget_idle`] deletes it once the key has no
//! start left, and an admission that then finds no row to lock (deleted between its creation and
//! the lock) ends its transaction before counting and creates the row again. Two admissions of
//! one key therefore only ever proceed each holding the lock of the one row that exists: a
//! deletion needs that lock too.
//!
//! The proof needs each admission's count to see every start committed before its lock, and its
//! own starts committed when it ends: a rate-limited claim is refused inside the caller's
//! transaction (`Error::Database(AlreadyInTransaction)`), where a snapshot taken earlier (MySQL's
//! REPEATABLE READ) would count too few.
//!
//! Rows over the limit are not touched: they stay ready and are claimed once the window has room.
//! A row claimed and then handed back unstarted (a `Worker` stopping, a key at its concurrency
//! limit) has used its start: the limit counts claims, never fewer.

use std::time::Duration;

use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Text};
use diesel::{Column, QueryResult, RunQueryDsl};

use super::dialect::ClaimDialect;
use super::statements::{
    pick_from, ClaimModel, ClaimParts, ClaimSql, Column1, Dynamic, Exec, Filter,
};
use super::wait::TableOf;
use crate::backend::{SqlDialect, Uncached};
use crate::{Error, InvalidInput, Result};

pub(crate) mod schema;

use schema::{diesel_lease_rate_limits as limits, diesel_lease_rate_starts as starts};

/// At most [`max`](Self::global) claims per period: of a whole table, or of each value of a key
/// column, across every process that claims with it. Set on [`ClaimOptions::rate_limit`](super::ClaimOptions::rate_limit)
/// (and so on a [`Worker`](crate::worker::Worker)'s claims, or with
/// [`Worker::rate_limit`](crate::worker::Worker::rate_limit)).
///
/// Never more than `max` starts in any window of length `period` by the database clock (a
/// sliding window; see the `queue_control` guide, "Rate limits"). Rows over the limit stay ready and are
/// claimed later. Every process that claims the table must use the same limits: a limit is
/// named after its table, column, `max` and `period`, so a process with other numbers keeps
/// a window of its own.
///
/// The limits live in diesel-lease's tables: run [`run_migrations`](crate::run_migrations)
/// first.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_lease::claim::{ClaimOptions, RateLimit};
/// use diesel_lease::prelude::*;
///
/// diesel::table! { calls (id) { id -> BigInt, status -> Text, tenant -> Text, } }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = calls)]
/// #[claimable(state = status, ready = "new", claimed = "calling", done = "called")]
/// struct Call {
///     id: i64,
///     status: String,
///     tenant: String,
/// }
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let mut conn = SqliteConnection::establish(&url).unwrap();
/// diesel_lease::run_migrations(&mut conn).unwrap();
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE calls (id INTEGER PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL);
/// #      INSERT INTO calls (status, tenant) VALUES ('new', 'a'), ('new', 'a'), ('new', 'b');").unwrap();
/// // At most one call per tenant per minute.
/// let options = ClaimOptions::default()
///     .rate_limit(RateLimit::per_key(calls::tenant, 1, Duration::from_secs(60)));
/// let claimed = Call::claim().batch(10).options(&options).rows(&mut conn).unwrap();
/// assert_eq!(claimed.len(), 2); // one of tenant a, one of tenant b
/// // The other row of tenant a waits, ready, for the next minute.
/// assert!(Call::claim().options(&options).row(&mut conn).unwrap().is_none());
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    max: u32,
    period: Duration,
    key: Option<KeyColumn>,
}

/// What [`RateLimit::forget_idle`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Forgotten {
    /// Starts older than the period, of every key.
    pub starts: u64,
    /// Keys' rows (`diesel_lease_rate_limits`) that no start was left for.
    pub keys: u64,
}

/// The key column of a per-key limit, and the table it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyColumn {
    table: &'static str,
    column: &'static str,
}

impl RateLimit {
    /// At most `max` claims of the table per `period`, whatever the row.
    ///
    /// Checked when a claim uses it: `max = 0` is [`InvalidInput::Zero`], a zero period
    /// [`InvalidInput::ZeroDuration`].
    pub fn global(max: u32, period: Duration) -> Self {
        RateLimit {
            max,
            period,
            key: None,
        }
    }

    /// At most `max` claims per `period` for each value of `column` (e.g. per tenant). The
    /// value is compared as text (SQL `CAST(… AS TEXT)`; `NULL` as the empty text), by its first
    /// 255 characters: values longer than that which share them share one limit (the limit is
    /// then stricter, never looser).
    ///
    /// Checked when a claim uses it, like [`global`](Self::global); a column of another
    /// table than the claimed one is [`Error::Config`].
    pub fn per_key<Col: Column>(_column: Col, max: u32, period: Duration) -> Self {
        RateLimit {
            max,
            period,
            key: Some(KeyColumn {
                table: crate::observe::table_name::<Col::Table>(),
                column: Col::NAME,
            }),
        }
    }

    /// The limit's period.
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    /// Whether this limit counts each key on its own (a second one of the same kind replaces it).
    pub(crate) fn is_per_key(&self) -> bool {
        self.key.is_some()
    }

    /// The one check, before a claim sends any SQL.
    pub(crate) fn check<M: super::Claimable>(&self) -> Result<()> {
        if self.max == 0 {
            return Err(InvalidInput::Zero {
                what: "rate limit max",
            }
            .into());
        }
        crate::Ttl::new("rate limit period", self.period)?;
        self.check_table(crate::observe::table_name::<M::Table>(), "the claim")
    }

    /// A per-key limit's column must be of `table`.
    fn check_table(&self, table: &str, what: &str) -> Result<()> {
        match &self.key {
            Some(key) if key.table != table => Err(Error::Config(format!(
                "RateLimit::per_key names a column of `{}`, but {what} is of `{table}`: give a column of the claimed table",
                key.table
            ))),
            _ => Ok(()),
        }
    }

    /// Deletes what this limit no longer needs on `table` (the table its claims take rows of):
    /// every start older than the period, and the row of each key that has no start left. The
    /// next claim of such a key creates its row again. Run it now and then (e.g. with
    /// [`every`](crate::lease::schedule::every)) where keys come and go (a tenant, a user), so that
    /// `diesel_lease_rate_limits` and `diesel_lease_rate_starts` do not keep a row for every key
    /// value ever limited; it never changes what a claim may take.
    ///
    /// Safe beside claims under the same limit: a start older than the period no longer counts
    /// for any claim, and a claim that finds its key's row gone between creating and locking it
    /// creates it again before it counts. Checked like a claim: a zero period is
    /// [`InvalidInput::ZeroDuration`], a per-key limit on a column of another table
    /// [`Error::Config`].
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// # use std::time::Duration;
    /// # use diesel::prelude::*;
    /// # use diesel_lease::claim::{ClaimOptions, RateLimit};
    /// # use diesel_lease::prelude::*;
    /// # diesel::table! { calls (id) { id -> BigInt, status -> Text, tenant -> Text, } }
    /// # #[derive(Debug, Queryable, Selectable, Claimable)]
    /// # #[diesel(table_name = calls)]
    /// # #[claimable(state = status, ready = "new", claimed = "calling", done = "called")]
    /// # struct Call { id: i64, status: String, tenant: String }
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = dir.path().join("app.db").display().to_string();
    /// # let mut conn = SqliteConnection::establish(&url).unwrap();
    /// # diesel_lease::run_migrations(&mut conn).unwrap();
    /// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
    /// #     "CREATE TABLE calls (id INTEGER PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL);
    /// #      INSERT INTO calls (status, tenant) VALUES ('new', 'a'), ('new', 'b');").unwrap();
    /// let limit = RateLimit::per_key(calls::tenant, 1, Duration::from_millis(100));
    /// let options = ClaimOptions::default().rate_limit(limit.clone());
    /// assert_eq!(Call::claim().batch(10).options(&options).rows(&mut conn).unwrap().len(), 2);
    /// std::thread::sleep(Duration::from_millis(150));
    /// let forgotten = limit.forget_idle(&mut conn, calls::table).unwrap();
    /// assert_eq!((forgotten.starts, forgotten.keys), (2, 2)); // tenants a and b
    /// # }
    /// ```
    pub fn forget_idle<T, C>(&self, conn: &mut C, _table: T) -> Result<Forgotten>
    where
        T: diesel::Table,
        C: RateDialect,
    {
        crate::Ttl::new("rate limit period", self.period)?;
        let table = crate::observe::table_name::<T>();
        self.check_table(table, "forget_idle's table")?;
        let scope = self.scope(table);
        let of = StartsOf {
            scope: &scope,
            key: "",
            period: self.period_micros(),
        };
        // Each an autocommit statement, on MySQL at READ COMMITTED (`keyed_write`): its reads
        // then take no gap locks that the claims' inserts of starts would wait on.
        let mut run = |stmt: RateStmt<'_>| -> Result<u64> {
            crate::backend::retry_conflicts_on(conn, |c| {
                let n =
                    c.keyed_write(|c| c.execute_returning_count(&Exec::<_, Dynamic>::new(&stmt)))?;
                Ok(u64::try_from(n).unwrap_or(0))
            })
        };
        let starts = run(RateStmt::ForgetScope(&of))?;
        let keys = run(RateStmt::DropIdleKeys(&of))?;
        Ok(Forgotten { starts, keys })
    }

    fn period_micros(&self) -> i64 {
        i64::try_from(self.period.as_micros()).unwrap_or(i64::MAX)
    }

    /// The limit's name in the built-in tables: the table, the key column (`*` for none), `max`
    /// and the period in µs. Processes with other numbers keep windows of their own.
    fn scope(&self, table: &str) -> String {
        let column = self.key.as_ref().map_or("*", |k| k.column);
        format!("{table}:{column}:{}/{}us", self.max, self.period_micros())
    }
}

/// How rate limits' SQL differs between backends (implemented for `Pg`, `Sqlite`, `Mysql` and `Mariadb`).
///
/// Sealed; its items are internal and carry no stability promise.
pub trait RateSqlDialect: SqlDialect {
    /// `INSERT` that does nothing when the row exists: the text before the table and after the
    /// values.
    #[doc(hidden)]
    const INSERT_IGNORE: (&'static str, &'static str) = ("INSERT INTO ", " ON CONFLICT DO NOTHING");

    /// `column` as text, as the key of a start, cut to the keys' 255 characters:
    /// `SUBSTR(COALESCE(CAST(col AS TEXT), ''), 1, 255)`.
    #[doc(hidden)]
    fn push_key_text<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        qualifier: Option<&'b dyn QueryFragment<Self>>,
        column: &str,
    ) -> QueryResult<()> {
        out.push_sql("SUBSTR(COALESCE(CAST(");
        push_column(out, qualifier, column)?;
        out.push_sql(" AS TEXT), ''), 1, ");
        out.push_sql(KEY_CHARS);
        out.push_sql(")");
        Ok(())
    }
}

/// How many characters of a key value count (the `rate_key` columns are `VARCHAR(255)`): a
/// longer value is cut to them, so values that share their first 255 characters share a limit
/// (never more starts than the limit for any of them), and no value is too long to record.
const KEY_CHARS: &str = "255";

/// `[<qualifier>.]<column>`.
fn push_column<'b, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    qualifier: Option<&'b dyn QueryFragment<DB>>,
    column: &str,
) -> QueryResult<()> {
    if let Some(q) = qualifier {
        q.walk_ast(out.reborrow())?;
        out.push_sql(".");
    }
    out.push_identifier(column)
}

/// How rate-limited claims run on a connection: loading the few values they read. Implemented
/// for `PgConnection`, `SqliteConnection`, `MysqlConnection` and `MariadbConnection`.
///
/// Sealed; its items are internal and carry no stability promise.
pub trait RateDialect: ClaimDialect<Backend: RateSqlDialect> {
    /// The text column of `stmt`'s rows.
    #[doc(hidden)]
    fn load_texts(&mut self, stmt: &dyn QueryFragment<Self::Backend>) -> QueryResult<Vec<String>>;
    /// The `BIGINT` column of `stmt`'s rows.
    #[doc(hidden)]
    fn load_counts(&mut self, stmt: &dyn QueryFragment<Self::Backend>) -> QueryResult<Vec<i64>>;
}

macro_rules! rate_dialect {
    ($conn:ty) => {
        impl RateDialect for $conn {
            fn load_texts(
                &mut self,
                stmt: &dyn QueryFragment<Self::Backend>,
            ) -> QueryResult<Vec<String>> {
                Column1::<_, Text>::new(stmt).load(self)
            }
            fn load_counts(
                &mut self,
                stmt: &dyn QueryFragment<Self::Backend>,
            ) -> QueryResult<Vec<i64>> {
                Column1::<_, BigInt>::new(stmt).load(self)
            }
        }
    };
}

#[cfg(feature = "postgres")]
impl RateSqlDialect for diesel::pg::Pg {}
#[cfg(feature = "postgres")]
rate_dialect!(diesel::PgConnection);

#[cfg(feature = "sqlite")]
impl RateSqlDialect for diesel::sqlite::Sqlite {}
#[cfg(feature = "sqlite")]
rate_dialect!(diesel::SqliteConnection);

/// MySQL and MariaDB.
#[cfg(feature = "__mysql_like")]
macro_rules! mysql_like_rate {
    ($db:ty, $conn:ty) => {
        impl RateSqlDialect for $db {
            const INSERT_IGNORE: (&'static str, &'static str) = ("INSERT IGNORE INTO ", "");

            /// MySQL casts to `CHAR`; the key columns are `utf8mb4_bin`, so the text is too (two
            /// collations of one character set refuse to compare).
            fn push_key_text<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                qualifier: Option<&'b dyn QueryFragment<Self>>,
                column: &str,
            ) -> QueryResult<()> {
                out.push_sql("SUBSTR(COALESCE(CAST(");
                push_column(out, qualifier, column)?;
                out.push_sql(" AS CHAR CHARACTER SET utf8mb4), ''), 1, ");
                out.push_sql(KEY_CHARS);
                out.push_sql(") COLLATE utf8mb4_bin");
                Ok(())
            }
        }
        rate_dialect!($conn);
    };
}
#[cfg(feature = "mysql")]
mysql_like_rate!(diesel::mysql::Mysql, diesel::MysqlConnection);
#[cfg(feature = "mariadb")]
mysql_like_rate!(diesel::mariadb::Mariadb, diesel::mariadb::MariadbConnection);

/// One limit as a claim applies it: its name and numbers.
struct Applied<'a> {
    scope: String,
    limit: &'a RateLimit,
}

/// `scope = $s AND rate_key = $k` on the starts table, and `started_at` compared with the
/// database's now minus the period.
struct StartsOf<'a> {
    scope: &'a str,
    key: &'a str,
    period: i64,
}

impl StartsOf<'_> {
    fn push_key<'b, DB: SqlDialect>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_identifier(starts::scope::NAME)?;
        out.push_sql(" = ");
        DB::bind_str(out, self.scope)?;
        out.push_sql(" AND ");
        out.push_identifier(starts::rate_key::NAME)?;
        out.push_sql(" = ");
        DB::bind_str(out, self.key)
    }

    /// `started_at <op> <now µs> - $period`.
    fn push_age<'b, DB: SqlDialect>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
        op: &str,
    ) -> QueryResult<()> {
        out.push_identifier(starts::started_at::NAME)?;
        out.push_sql(op);
        out.push_sql("(");
        DB::push_now_micros(out);
        out.push_sql(" - ");
        DB::bind_i64(out, &self.period)?;
        out.push_sql(")");
        Ok(())
    }
}

/// The statements on the built-in tables.
enum RateStmt<'a> {
    /// `INSERT … (scope, rate_key) VALUES ($s, $k)`, nothing when it exists.
    CreateKey(&'a StartsOf<'a>),
    /// `SELECT rate_key FROM limits WHERE scope = $s AND rate_key = $k FOR UPDATE`.
    LockKey(&'a StartsOf<'a>),
    /// `DELETE FROM starts WHERE <key> AND started_at <= now - period`.
    Forget(&'a StartsOf<'a>),
    /// `SELECT COUNT(*) FROM starts WHERE <key> AND started_at > now - period`.
    Count(&'a StartsOf<'a>),
    /// `INSERT INTO starts (scope, rate_key, started_at) VALUES ($s, $k, <now µs>)`.
    Record(&'a StartsOf<'a>),
    /// `DELETE FROM starts WHERE scope = $s AND started_at <= now - period`: every key's.
    ForgetScope(&'a StartsOf<'a>),
    /// `DELETE FROM limits WHERE scope = $s AND NOT EXISTS (SELECT 1 FROM starts WHERE
    /// starts.scope = limits.scope AND starts.rate_key = limits.rate_key)`.
    DropIdleKeys(&'a StartsOf<'a>),
}

impl<DB: RateSqlDialect> QueryFragment<DB> for RateStmt<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let out = &mut out;
        match self {
            RateStmt::CreateKey(k) => {
                out.push_sql(DB::INSERT_IGNORE.0);
                limits::table.walk_ast(out.reborrow())?;
                out.push_sql(" (");
                out.push_identifier(limits::scope::NAME)?;
                out.push_sql(", ");
                out.push_identifier(limits::rate_key::NAME)?;
                out.push_sql(") VALUES (");
                DB::bind_str(out, k.scope)?;
                out.push_sql(", ");
                DB::bind_str(out, k.key)?;
                out.push_sql(")");
                out.push_sql(DB::INSERT_IGNORE.1);
            }
            RateStmt::LockKey(k) => {
                out.push_sql("SELECT ");
                out.push_identifier(limits::rate_key::NAME)?;
                out.push_sql(" FROM ");
                limits::table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                k.push_key(out)?;
                out.push_sql(DB::FOR_UPDATE);
            }
            RateStmt::Forget(k) => {
                out.push_sql("DELETE FROM ");
                starts::table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                k.push_key(out)?;
                out.push_sql(" AND ");
                k.push_age(out, " <= ")?;
            }
            RateStmt::Count(k) => {
                out.push_sql("SELECT COUNT(*) FROM ");
                starts::table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                k.push_key(out)?;
                out.push_sql(" AND ");
                k.push_age(out, " > ")?;
            }
            RateStmt::Record(k) => {
                out.push_sql("INSERT INTO ");
                starts::table.walk_ast(out.reborrow())?;
                out.push_sql(" (");
                out.push_identifier(starts::scope::NAME)?;
                out.push_sql(", ");
                out.push_identifier(starts::rate_key::NAME)?;
                out.push_sql(", ");
                out.push_identifier(starts::started_at::NAME)?;
                out.push_sql(") VALUES (");
                DB::bind_str(out, k.scope)?;
                out.push_sql(", ");
                DB::bind_str(out, k.key)?;
                out.push_sql(", ");
                DB::push_now_micros(out);
                out.push_sql(")");
            }
            RateStmt::ForgetScope(k) => {
                out.push_sql("DELETE FROM ");
                starts::table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                out.push_identifier(starts::scope::NAME)?;
                out.push_sql(" = ");
                DB::bind_str(out, k.scope)?;
                out.push_sql(" AND ");
                k.push_age(out, " <= ")?;
            }
            RateStmt::DropIdleKeys(k) => {
                out.push_sql("DELETE FROM ");
                limits::table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                out.push_identifier(limits::scope::NAME)?;
                out.push_sql(" = ");
                DB::bind_str(out, k.scope)?;
                out.push_sql(" AND NOT EXISTS (SELECT 1 FROM ");
                starts::table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                for (i, (start, limit)) in [
                    (starts::scope::NAME, limits::scope::NAME),
                    (starts::rate_key::NAME, limits::rate_key::NAME),
                ]
                .into_iter()
                .enumerate()
                {
                    if i > 0 {
                        out.push_sql(" AND ");
                    }
                    starts::table.walk_ast(out.reborrow())?;
                    out.push_sql(".");
                    out.push_identifier(start)?;
                    out.push_sql(" = ");
                    limits::table.walk_ast(out.reborrow())?;
                    out.push_sql(".");
                    out.push_identifier(limit)?;
                }
                out.push_sql(")");
            }
        }
        Ok(())
    }
}

/// The claim's filter on a per-key limit: `(<the caller's filter>) AND <key test>`, where the
/// key test is either "the key has room" (a hint for the probe; the lock decides) or "the key
/// is this one".
struct KeyFilter<'a, M: ClaimSql<DB>, DB: RateSqlDialect> {
    caller: Filter<'a, DB>,
    table: TableOf<M>,
    column: &'static str,
    test: KeyTest<'a>,
}

enum KeyTest<'a> {
    /// `(SELECT COUNT(*) FROM starts WHERE scope = $s AND rate_key = <t.key> AND <recent>) < $max`.
    HasRoom {
        scope: &'a str,
        period: i64,
        max: i64,
    },
    /// `<key> = $k`.
    Is(&'a str),
}

impl<M: ClaimSql<DB>, DB: RateSqlDialect> QueryFragment<DB> for KeyFilter<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if let Some(caller) = self.caller {
            out.push_sql("(");
            caller.walk_ast(out.reborrow())?;
            out.push_sql(") AND ");
        }
        let table: &dyn QueryFragment<DB> = &self.table;
        match &self.test {
            KeyTest::HasRoom { scope, period, max } => {
                out.push_sql("(SELECT COUNT(*) FROM ");
                starts::table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                out.push_identifier(starts::scope::NAME)?;
                out.push_sql(" = ");
                DB::bind_str(&mut out, scope)?;
                out.push_sql(" AND ");
                out.push_identifier(starts::rate_key::NAME)?;
                out.push_sql(" = ");
                DB::push_key_text(&mut out, Some(table), self.column)?;
                out.push_sql(" AND ");
                out.push_identifier(starts::started_at::NAME)?;
                out.push_sql(" > (");
                DB::push_now_micros(&mut out);
                out.push_sql(" - ");
                DB::bind_i64(&mut out, period)?;
                out.push_sql(")) < ");
                DB::bind_i64(&mut out, max)
            }
            KeyTest::Is(key) => {
                DB::push_key_text(&mut out, Some(table), self.column)?;
                out.push_sql(" = ");
                DB::bind_str(&mut out, key)
            }
        }
    }
}

/// `SELECT <key text> FROM t WHERE <claimable> AND <filter> ORDER BY <claim order> LIMIT $n`:
/// the keys of the rows a claim would take next, whose keys have room (a plain read).
struct KeyProbe<'a, M: ClaimSql<DB>, DB: RateSqlDialect> {
    parts: &'a ClaimParts<M, DB>,
    filter: &'a KeyFilter<'a, M, DB>,
    limit: i64,
}

impl<M: ClaimSql<DB>, DB: RateSqlDialect> QueryFragment<DB> for KeyProbe<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        DB::push_key_text(&mut out, None, self.filter.column)?;
        pick_from(&mut out, self.parts, Some(self.filter), &self.limit)
    }
}

/// Claims up to `limit` rows under `rates` (at most one global and one per-key limit): see the
/// module docs. `F` is the caller filter's query id.
pub(crate) fn claim_limited<M, C, F>(
    conn: &mut C,
    parts: &ClaimParts<M, C::Backend>,
    limit: i64,
    filter: Filter<'_, C::Backend>,
    rates: &[RateLimit],
) -> Result<Vec<M>>
where
    M: ClaimModel<C>,
    C: RateDialect,
    F: QueryId,
{
    // The admission counts the starts other claims committed, after its lock: inside the
    // caller's transaction its reads may come from the caller's snapshot (MySQL's REPEATABLE
    // READ, PostgreSQL's), and its own starts stay invisible until the caller commits.
    crate::backend::refuse_nested(conn)?;
    let table = crate::observe::table_name::<M::Table>();
    let applied = |per_key: bool| {
        rates
            .iter()
            .find(|r| r.is_per_key() == per_key)
            .map(|limit| Applied {
                scope: limit.scope(table),
                limit,
            })
    };
    let (global, per_key) = (applied(false), applied(true));
    // The keys of the next rows whose keys have room, in claim order (a hint: the lock decides).
    let keys = match &per_key {
        None => None,
        Some(k) => {
            let column = k.limit.key.as_ref().map_or("", |c| c.column);
            let filter = KeyFilter::<M, C::Backend> {
                caller: filter,
                table: TableOf::new(),
                column,
                test: KeyTest::HasRoom {
                    scope: &k.scope,
                    period: k.limit.period_micros(),
                    max: i64::from(k.limit.max),
                },
            };
            let probe = KeyProbe {
                parts,
                filter: &filter,
                limit,
            };
            let mut keys: Vec<String> = Vec::new();
            for key in conn.load_texts(&probe)? {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            Some((k, column, keys))
        }
    };
    // The rows to lock, in one order for every admission, so two never wait for each other.
    let mut locks: Vec<(&str, &str)> = Vec::new();
    if let Some(g) = &global {
        locks.push((&g.scope, ""));
    }
    if let Some((k, _, keys)) = &keys {
        locks.extend(keys.iter().map(|key| (k.scope.as_str(), key.as_str())));
    }
    locks.sort();
    // A key's row may be deleted by `RateLimit::forget_idle` between its creation and its lock
    // (it has no start then): the transaction then ends before it counts, and this creates the
    // row again. Each pass needs another such deletion in those few milliseconds.
    for _ in 0..KEY_ROW_PASSES {
        create_keys(conn, &locks)?;
        let claimed = conn.write_tx(|c| -> Result<Option<Vec<M>>> {
            for &(scope, key) in &locks {
                let of = StartsOf {
                    scope,
                    key,
                    period: 0,
                };
                // A locking read that waits: outside the statement cache (see `Uncached`).
                if c.load_texts(&Uncached(RateStmt::LockKey(&of)))?.is_empty() {
                    return Ok(None);
                }
            }
            admit::<M, C, F>(c, parts, limit, filter, &global, &keys).map(Some)
        })?;
        if let Some(claimed) = claimed {
            return Ok(claimed);
        }
    }
    Err(Error::Config(format!(
        "a rate limit's key row was deleted {KEY_ROW_PASSES} times between its creation and its lock: is RateLimit::forget_idle running in a loop?"
    )))
}

/// How many times a rate-limited claim creates its keys' rows again after finding one gone.
const KEY_ROW_PASSES: usize = 16;

/// Creates the rows the admission locks, each in its own statement before the locking
/// transaction: on MySQL an `INSERT IGNORE` and a `FOR UPDATE` of the same row in one
/// transaction deadlock with a twin.
fn create_keys<C: RateDialect>(conn: &mut C, locks: &[(&str, &str)]) -> Result<()> {
    for &(scope, key) in locks {
        let of = StartsOf {
            scope,
            key,
            period: 0,
        };
        crate::backend::retry_conflicts_on(conn, |conn| {
            Ok(conn.single_write(|c| {
                c.execute_returning_count(&Exec::<_, Dynamic>::new(&RateStmt::CreateKey(&of)))
            })?)
        })?;
    }
    Ok(())
}

/// Under the keys' locks: counts each limit's window and claims what has room.
fn admit<M, C, F>(
    c: &mut C,
    parts: &ClaimParts<M, C::Backend>,
    limit: i64,
    filter: Filter<'_, C::Backend>,
    global: &Option<Applied<'_>>,
    keys: &Option<(&Applied<'_>, &'static str, Vec<String>)>,
) -> Result<Vec<M>>
where
    M: ClaimModel<C>,
    C: RateDialect,
    F: QueryId,
{
    let mut room = limit;
    if let Some(g) = &global {
        room = room.min(room_left(c, &g.scope, "", g.limit)?);
    }
    let mut claimed: Vec<M> = Vec::new();
    match &keys {
        None => {
            if room > 0 {
                claimed = super::dialect::ClaimDialect::claim_rows::<M, F>(c, parts, room, filter)?;
            }
        }
        Some((k, column, keys)) => {
            for key in keys {
                let left = room - len(&claimed);
                if left <= 0 {
                    break;
                }
                let n = left.min(room_left(c, &k.scope, key, k.limit)?);
                if n <= 0 {
                    continue;
                }
                let only = KeyFilter::<M, C::Backend> {
                    caller: filter,
                    table: TableOf::new(),
                    column,
                    test: KeyTest::Is(key),
                };
                let rows = super::dialect::ClaimDialect::claim_rows::<M, Dynamic>(
                    c,
                    parts,
                    n,
                    Some(&only),
                )?;
                // After the claim: a start's time is never before its row's claimed-at.
                record(c, &k.scope, key, rows.len())?;
                claimed.extend(rows);
            }
        }
    }
    if let Some(g) = &global {
        record(c, &g.scope, "", claimed.len())?;
    }
    Ok(claimed)
}

fn len<T>(rows: &[T]) -> i64 {
    i64::try_from(rows.len()).unwrap_or(i64::MAX)
}

/// How many more rows of `key` may start now: forgets the starts that left the window, and
/// counts the rest (under the key's lock).
fn room_left<C: RateDialect>(
    conn: &mut C,
    scope: &str,
    key: &str,
    limit: &RateLimit,
) -> Result<i64> {
    let of = StartsOf {
        scope,
        key,
        period: limit.period_micros(),
    };
    conn.execute_returning_count(&Exec::<_, Dynamic>::new(&RateStmt::Forget(&of)))?;
    let count = conn
        .load_counts(&RateStmt::Count(&of))?
        .into_iter()
        .next()
        .unwrap_or(0);
    Ok(i64::from(limit.max) - count)
}

/// Records `n` starts of `key` at the database's now.
fn record<C: RateDialect>(conn: &mut C, scope: &str, key: &str, n: usize) -> Result<()> {
    let of = StartsOf {
        scope,
        key,
        period: 0,
    };
    for _ in 0..n {
        conn.execute_returning_count(&Exec::<_, Dynamic>::new(&RateStmt::Record(&of)))?;
    }
    Ok(())
}
