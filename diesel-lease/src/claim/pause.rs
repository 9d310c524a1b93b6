//! Pausing and resuming claims from a table, or from its rows of one key (a tenant).
//!
//! The pauses live in the database, in `diesel_lease_pauses` (migration `…_pauses`), so they hold
//! for every process of the farm: a row `(table_name, '', '')` pauses the whole table, a row
//! `(table_name, key_column, key_value)` its rows whose `key_column` holds `key_value`. A model
//! declared `pausable` (or `pausable(key = <text column>)`) claims with one more test,
//!
//! ```sql
//! AND NOT EXISTS (SELECT 1 FROM diesel_lease_pauses WHERE table_name = $name
//!     AND ((key_column = '' AND key_value = '') OR (key_column = $col AND key_value = t.col)))
//! ```
//!
//! a lookup by primary key in a table of one row per pause in force; a model that is not
//! `pausable` claims exactly as before. Paused rows are skipped, not lost: resuming makes them
//! claimable again, and wakes the table's waiters (waiting claims, a `Worker`) at once — on
//! PostgreSQL by the `NOTIFY` waiters listen for, elsewhere those of this process
//! (`notify::local`); waiters of other processes find the rows at their next poll (at most a
//! second apart).
//!
//! Everything here works from a table's name, so the operator's tool pauses and resumes a table
//! it is told at run time ([`pause_described`], [`resume_described`]); a model's functions
//! compute the same name from its `table!`.

use diesel::connection::Connection;
use diesel::query_builder::{AstPass, QueryBuilder, QueryFragment};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::QueryResult;

use super::{about, ClaimConnection, ClaimDialect, Claimable};
use crate::backend::{BackendKind, Dynamic, Exec, SqlDialect};
use crate::notify::Notifications;
use crate::{BorrowConnection, Error, Result};

/// The built-in table of pauses in force.
const PAUSES: &str = "diesel_lease_pauses";

/// How claims of a model look for pauses: declared by `#[claimable(pausable)]` or
/// `#[claimable(pausable(key = column))]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseShape {
    /// The (text) column a pause may name a value of, if any.
    pub key: Option<&'static str>,
}

/// A [`Claimable`] model declared `pausable`: what [`Queue::pause`](super::queue::Queue::pause) and [`Queue::resume`](super::queue::Queue::resume) need.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not pausable, so its claims do not look for pauses",
    label = "pausing needs `pausable`",
    note = "add `pausable` (or `pausable(key = <text column>)`) to `#[claimable(...)]` on `{Self}`, and run diesel-lease's migrations"
)]
pub trait Pausable: Claimable {}

/// A pausable model with a key column (`pausable(key = …)`): what [`Queue::key`](super::queue::Queue::key) needs.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no pause key column",
    label = "pausing one key needs `pausable(key = …)`",
    note = "add `pausable(key = <text column>)` to `#[claimable(...)]` on `{Self}`"
)]
pub trait HasPauseKey: Pausable {}

/// The name a table's pauses are stored under: its name as the statements write it, without
/// the quotes (`tasks`, `jobs.tasks` for a table in schema `jobs`).
pub(crate) fn pause_name<DB: SqlDialect>(table: &dyn QueryFragment<DB>) -> String {
    let mut sql = DB::QueryBuilder::default();
    if table.to_sql(&mut sql, &DB::default()).is_err() {
        return String::new();
    }
    sql.finish().replace(['"', '`'], "")
}

/// ` AND NOT EXISTS (…)`: the claim skips rows of a paused table or key (see the module docs).
/// Nothing for a shape that is not pausable.
/// `name` is the table's [`pause_name`], `table` the claimed table as the statement names it.
pub(crate) fn push_not_paused<'b, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    pause: Option<PauseShape>,
    name: Option<&'b str>,
    table: &'b dyn QueryFragment<DB>,
) -> QueryResult<()> {
    let (Some(pause), Some(name)) = (pause, name) else {
        return Ok(());
    };
    out.push_sql(" AND NOT EXISTS (SELECT 1 FROM ");
    out.push_identifier(PAUSES)?;
    out.push_sql(" WHERE ");
    out.push_identifier("table_name")?;
    out.push_sql(" = ");
    DB::bind_str(out, name)?;
    out.push_sql(" AND ((");
    push_whole_table(out)?;
    out.push_sql(")");
    if let Some(key) = pause.key {
        out.push_sql(" OR (");
        out.push_identifier("key_column")?;
        out.push_sql(" = ");
        DB::bind_str(out, key)?;
        out.push_sql(" AND ");
        out.push_identifier("key_value")?;
        out.push_sql(" = ");
        // Qualified: the subquery's own columns must not capture the user's.
        table.walk_ast(out.reborrow())?;
        out.push_sql(".");
        out.push_identifier(key)?;
        out.push_sql(")");
    }
    out.push_sql("))");
    Ok(())
}

/// `key_column = '' AND key_value = ''`: a pause of the whole table.
fn push_whole_table<DB: SqlDialect>(out: &mut AstPass<'_, '_, DB>) -> QueryResult<()> {
    out.push_identifier("key_column")?;
    out.push_sql(" = '' AND ");
    out.push_identifier("key_value")?;
    out.push_sql(" = ''");
    Ok(())
}

/// One pause: of a whole table (`key` `None`), or of its rows whose `key.0` column holds
/// `key.1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseTarget {
    /// The table's name, as the pause is stored under (see [`pause_described`]).
    pub table: String,
    /// The key column and value, for a pause of one key.
    pub key: Option<(String, String)>,
}

impl PauseTarget {
    fn column(&self) -> &str {
        self.key.as_ref().map_or("", |(c, _)| c)
    }
    fn value(&self) -> &str {
        self.key.as_ref().map_or("", |(_, v)| v)
    }
}

/// `INSERT INTO diesel_lease_pauses (table_name, key_column, key_value) VALUES ($1, $2, $3)` or
/// `DELETE FROM diesel_lease_pauses WHERE table_name = $1 AND key_column = $2 AND key_value = $3`.
struct PauseStmt<'a> {
    target: &'a PauseTarget,
    insert: bool,
}

impl<DB: SqlDialect> QueryFragment<DB> for PauseStmt<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let t = self.target;
        if self.insert {
            out.push_sql("INSERT INTO ");
            out.push_identifier(PAUSES)?;
            out.push_sql(" (");
            out.push_identifier("table_name")?;
            out.push_sql(", ");
            out.push_identifier("key_column")?;
            out.push_sql(", ");
            out.push_identifier("key_value")?;
            out.push_sql(") VALUES (");
            DB::bind_str(&mut out, &t.table)?;
            out.push_sql(", ");
            DB::bind_str(&mut out, t.column())?;
            out.push_sql(", ");
            DB::bind_str(&mut out, t.value())?;
            out.push_sql(")");
            // A pause already there is an outcome (`false`), and on PostgreSQL a unique
            // violation would abort the caller's transaction: where the backend has it, the
            // duplicate is not an error at all. (MySQL has no `ON CONFLICT`; a duplicate key
            // there fails the statement only, and is read as `false` below.)
            if DB::KIND != BackendKind::Mysql {
                out.push_sql(" ON CONFLICT DO NOTHING");
            }
            return Ok(());
        }
        out.push_sql("DELETE FROM ");
        out.push_identifier(PAUSES)?;
        out.push_sql(" WHERE ");
        out.push_identifier("table_name")?;
        out.push_sql(" = ");
        DB::bind_str(&mut out, &t.table)?;
        out.push_sql(" AND ");
        out.push_identifier("key_column")?;
        out.push_sql(" = ");
        DB::bind_str(&mut out, t.column())?;
        out.push_sql(" AND ");
        out.push_identifier("key_value")?;
        out.push_sql(" = ");
        DB::bind_str(&mut out, t.value())
    }
}

/// The name waiters of the table register under (`claim:<table as SQL>`, as `wait.rs` names
/// a model's), for the wake-up on resume. `schema.table` is two identifiers, as Diesel writes a
/// table of another schema (`"schema"."table"`).
fn ready_resource<DB: SqlDialect>(table: &str) -> String {
    struct Table<'a>(&'a str);
    impl<DB: SqlDialect> QueryFragment<DB> for Table<'_> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
            for (i, part) in self.0.splitn(2, '.').enumerate() {
                if i > 0 {
                    out.push_sql(".");
                }
                out.push_identifier(part)?;
            }
            Ok(())
        }
    }
    let mut sql = DB::QueryBuilder::default();
    let _ = QueryFragment::<DB>::to_sql(&Table(table), &mut sql, &DB::default());
    format!("claim:{}", sql.finish())
}

/// Pauses claims from the table `target` names (see [`Queue::pause`](super::queue::Queue::pause)); `true` when this call paused
/// it, `false` when it was paused already. For a table described at run time (the operator's
/// tool): `target.table` is its name as the model's pauses are stored (its SQL name without
/// quotes, `schema.table` for a table outside the default schema).
pub fn pause_described<C>(conn: &mut C, target: &PauseTarget) -> Result<bool>
where
    C: BorrowConnection,
    C::Conn: ClaimDialect,
{
    let conn = conn.borrow_connection();
    let stmt = PauseStmt {
        target,
        insert: true,
    };
    // One write that waits for a busy SQLite file like every other (`single_write`).
    let inserted = crate::backend::Dialect::single_write(conn, |c| {
        c.execute_returning_count(&Exec::<_, Dynamic>::new(&stmt))
    });
    match inserted {
        Ok(n) => Ok(n > 0),
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Resumes claims from the table `target` names, and wakes its waiters; `true` when it was
/// paused. The counterpart of [`pause_described`].
pub fn resume_described<C>(conn: &mut C, target: &PauseTarget) -> Result<bool>
where
    C: BorrowConnection,
    C::Conn: ClaimDialect,
{
    let conn = conn.borrow_connection();
    let stmt = PauseStmt {
        target,
        insert: false,
    };
    // One write that waits for a busy SQLite file, as the pause does.
    let resumed = crate::backend::Dialect::single_write(conn, |c| {
        c.execute_returning_count(&Exec::<_, Dynamic>::new(&stmt))
    })? > 0;
    if resumed {
        let resource = ready_resource::<<C::Conn as Connection>::Backend>(&target.table);
        // PostgreSQL: sent when the caller's transaction commits, if it is in one.
        Notifications::notify(conn, &resource)?;
        crate::notify::local::wake(&resource);
    }
    Ok(resumed)
}

/// The pause target of model `M` on connection `C`: its whole table, or its rows of one key.
fn target_of<M: Claimable, C: ClaimConnection<M>>(key: Option<&str>) -> Result<PauseTarget> {
    let key = match key {
        None => None,
        Some(value) => {
            let column = M::PAUSE.and_then(|p| p.key).ok_or_else(|| {
                Error::Config("pausing one key needs `pausable(key = <column>)`".into())
            })?;
            Some((column.to_owned(), value.to_owned()))
        }
    };
    // The table as the claim statements write it: the waiters' resource without its prefix.
    let resource = C::ready_resource()?;
    let table = resource.strip_prefix("claim:").unwrap_or(&resource);
    Ok(PauseTarget {
        table: table.replace(['"', '`'], ""),
        key,
    })
}

/// Pauses claims from `M`'s table, for every process of the farm: its claims
/// (every claim, waiting ones, a `Worker`) return nothing until [`resume`]; waiters
/// keep waiting. `true` when this call paused it, `false` when it was paused already. Needs
/// `pausable` and diesel-lease's migrations.
pub(crate) fn pause<M, C>(conn: &mut C) -> Result<bool>
where
    M: Pausable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let target = target_of::<M, C::Conn>(None)?;
    pause_described(conn, &target).map_err(about::<M>)
}

/// Resumes claims from `M`'s table and wakes its waiters; `true` when it was paused.
///
/// Called inside a transaction of yours, the resume counts from your commit; PostgreSQL's
/// `NOTIFY` is sent then, but this process's waiters on SQLite and MySQL are woken at once, may
/// look before the commit and find the table still paused, and then see the resume at their
/// next poll (within a second).
pub(crate) fn resume<M, C>(conn: &mut C) -> Result<bool>
where
    M: Pausable,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let target = target_of::<M, C::Conn>(None)?;
    resume_described(conn, &target).map_err(about::<M>)
}

/// Pauses claims of `M`'s rows whose key column (`pausable(key = …)`) holds `key`; other rows
/// are claimed as before.
pub(crate) fn pause_key<M, C>(conn: &mut C, key: &str) -> Result<bool>
where
    M: HasPauseKey,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let target = target_of::<M, C::Conn>(Some(key))?;
    pause_described(conn, &target).map_err(about::<M>)
}

/// Resumes claims of `M`'s rows of `key`, and wakes the table's waiters.
pub(crate) fn resume_key<M, C>(conn: &mut C, key: &str) -> Result<bool>
where
    M: HasPauseKey,
    C: BorrowConnection,
    C::Conn: ClaimConnection<M>,
{
    let target = target_of::<M, C::Conn>(Some(key))?;
    resume_described(conn, &target).map_err(about::<M>)
}

#[cfg(all(test, feature = "postgres", feature = "sqlite"))]
mod tests {
    use super::*;

    diesel::table! { jobs (id) { id -> BigInt, status -> Text, } }
    diesel::table! { queue.queued_jobs (id) { id -> BigInt, status -> Text, } }

    #[derive(diesel::Queryable, diesel::Selectable, crate::Claimable)]
    #[diesel(table_name = jobs)]
    #[claimable(state = status, ready = "new", claimed = "running", pausable)]
    #[allow(dead_code)]
    struct Plain {
        id: i64,
        status: String,
    }

    #[derive(diesel::Queryable, diesel::Selectable, crate::Claimable)]
    #[diesel(table_name = queued_jobs)]
    #[claimable(state = status, ready = "new", claimed = "running", pausable)]
    #[allow(dead_code)]
    struct InSchema {
        id: i64,
        status: String,
    }

    /// The resource a resume wakes, and the one `M`'s waiters register under on `C`.
    fn resumed<M: Claimable, C: ClaimConnection<M>>() -> (String, String) {
        let target = target_of::<M, C>(None).expect("a model's pause target");
        (
            ready_resource::<<C as Connection>::Backend>(&target.table),
            C::ready_resource().expect("the waiters' resource"),
        )
    }

    /// A resume wakes the waiters under the name they registered with, for a table of another
    /// schema too: it named `"queue.queued_jobs"` instead of `"queue"."queued_jobs"`, and woke
    /// nobody (PostgreSQL's notification carried the same wrong name).
    #[test]
    fn a_resume_names_the_waiters_resource_of_any_table() {
        for (named, registered) in [
            resumed::<Plain, diesel::PgConnection>(),
            resumed::<Plain, diesel::SqliteConnection>(),
            resumed::<InSchema, diesel::PgConnection>(),
            resumed::<InSchema, diesel::SqliteConnection>(),
        ] {
            assert_eq!(named, registered);
        }
    }
}
