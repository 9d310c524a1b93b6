//! At-most-once work: guards and insert-once.
//!
//! - [`claim_if_null`](crate::dsl::OnceDsl::claim_if_null): `UPDATE t SET col = <value> WHERE pk = … AND col IS NULL`. The caller
//!   whose update changed the row won; everyone else sees `false`. The old state (`IS NULL`) is in
//!   the predicate, so "one row" means "I won" on every backend, including MySQL, whose affected
//!   count is the matched count.
//! - [`insert_once`](crate::dsl::OnceDsl::insert_once): insert a row that a unique constraint lets exist once; a duplicate is the
//!   ordinary outcome [`InsertOutcome::AlreadyExists`], not an error. The inserted row comes back
//!   from `RETURNING` (PostgreSQL, SQLite) or, on MySQL, from a read by the generated
//!   `AUTO_INCREMENT` value in the same transaction ([`InsertedRowStmt`]).

pub(crate) mod dialect;
pub(crate) use dialect::InsertOnceDialect;
mysql_like_modules! {
    /// MySQL's `insert_once`: no `ON CONFLICT … DO NOTHING` and no `RETURNING`, so a plain insert
    /// whose duplicate-key error means "already exists", and the row read back by the value it
    /// generated for the table's `AUTO_INCREMENT` column.
}

use std::marker::PhantomData;

use crate::backend::kind_of;
use crate::observe::{op, table_name};
use crate::Error;
use diesel::backend::Backend;
use diesel::expression::{AsExpression, Expression};
use diesel::query_builder::{AstPass, InsertStatement, QueryFragment, QueryId};
use diesel::query_dsl::methods::LoadQuery;
use diesel::query_source::QuerySource;
use diesel::{Connection, Insertable, QueryResult, RunQueryDsl, SelectableHelper, Table};

use crate::backend::{Dialect, SqlDialect};
use crate::model::Keyed;
use crate::{BorrowConnection, InsertOutcome, Result};

/// A model with a guard column: a nullable column that is set once (`#[claim_if_null(column = col)]`).
pub trait ClaimIfNull: Keyed {
    /// The SQL type of the guard column (always `Nullable<_>`).
    type NullColumnSql: diesel::sql_types::SqlType
        + diesel::expression::TypedExpressionType
        + 'static;
    /// The guard column's name.
    const NULL_COLUMN: &'static str;
}

/// A follow-up row inserted at most once (`#[derive(InsertOnce)]` on an `Insertable`): a
/// unique constraint of [`Table`](Self::Table) decides whether an equal row exists.
pub trait InsertOnce: Sized {
    /// The table the row goes to.
    type Table: diesel::Table + Default;
    /// How the inserted row is read back: `Returning<R>` (`insert_once(returning = R)`), or `()`
    /// for nothing.
    type Mode;
    /// What `InsertOutcome::Inserted` carries: `Option<R>`'s `R`, or `()`.
    type Row;
}

/// The query id of [`IfNullStmt`]: the model and the value's query id fix its text.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct IfNullStmtId<M, E>(PhantomData<(M, E)>);

/// `UPDATE t SET <guard> = <value> WHERE <pk> AND <guard> IS NULL`.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct IfNullStmt<M: ClaimIfNull, E> {
    table: M::Table,
    pk: M::PkFilter,
    value: E,
}

// The text is the model's constants and the value expression's: static when the value's is (a
// bind or `db_now`), so Diesel prepares the guard once per connection.
impl<M: ClaimIfNull, E: QueryId> QueryId for IfNullStmt<M, E> {
    type QueryId = IfNullStmtId<M, E::QueryId>;
    const HAS_STATIC_QUERY_ID: bool = E::HAS_STATIC_QUERY_ID;
}

impl<M, E, DB> QueryFragment<DB> for IfNullStmt<M, E>
where
    M: ClaimIfNull,
    M::Table: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    E: QueryFragment<DB>,
    DB: Backend,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(M::NULL_COLUMN)?;
        out.push_sql(" = ");
        self.value.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        self.pk.walk_ast(out.reborrow())?;
        out.push_sql(" AND ");
        out.push_identifier(M::NULL_COLUMN)?;
        out.push_sql(" IS NULL");
        Ok(())
    }
}

/// The bounds under which a connection can set model `M`'s guard to `V`; you never implement it.
///
/// `V` is a value of the column's type *without* `Nullable`: setting the guard to `NULL` would
/// leave it unset and let every caller win, so an `Option` does not compile.
#[diagnostic::on_unimplemented(
    message = "`{V}` cannot set the guard column of `{M}`",
    label = "not a value of the guard column's type",
    note = "pass a value of the column's type, not an `Option` (`NULL` would let every caller win), or `diesel_lease::db_now` for the database clock"
)]
pub trait ClaimIfNullConnection<M: ClaimIfNull, V>: Dialect {
    /// Runs the guard update; `true` when this caller changed the row.
    #[doc(hidden)]
    fn set_if_null(&mut self, pk: M::Pk, value: V) -> QueryResult<bool>;
}

/// The SQL type of the values `M`'s guard is set to: the column's, without `Nullable`.
type GuardSql<M> = <<M as ClaimIfNull>::NullColumnSql as crate::__private::NullableColumn>::NotNull;

// Not recommended in errors: a value that does not fit is then reported as the one unmet
// `ClaimIfNullConnection` bound, with the note above, instead of as each bound below.
#[diagnostic::do_not_recommend]
impl<M, V, C> ClaimIfNullConnection<M, V> for C
where
    M: ClaimIfNull<NullColumnSql: crate::__private::NullableColumn>,
    C: Dialect,
    V: AsExpression<GuardSql<M>>,
    V::Expression: Expression<SqlType = GuardSql<M>> + QueryId,
    IfNullStmt<M, V::Expression>: QueryFragment<C::Backend>,
{
    fn set_if_null(&mut self, pk: M::Pk, value: V) -> QueryResult<bool> {
        let stmt = IfNullStmt::<M, _> {
            table: M::Table::default(),
            pk: M::pk_filter(pk),
            value: value.as_expression(),
        };
        // One write that waits for a busy SQLite file like every other (`single_write`).
        Ok(self.single_write(|c| c.execute_returning_count(&stmt))? == 1)
    }
}

/// Sets the guard column of the row with primary key `pk` to `value` if it is still `NULL`.
///
/// Returns `true` for exactly one caller however many race
/// (`UPDATE action SET notified = now WHERE id = … AND notified IS NULL`); `false` when the guard
/// was already set, including when it was set to the same value. `value` is [`db_now`](crate::db_now) for the
/// database's clock, or any value of the column's type; not an `Option` (a `NULL` guard would
/// stay unset, and every caller would win).
pub(crate) fn claim_if_null<M, C, V>(conn: &mut C, pk: M::Pk, value: V) -> Result<bool>
where
    M: ClaimIfNull,
    C: BorrowConnection,
    C::Conn: ClaimIfNullConnection<M, V>,
{
    let conn = conn.borrow_connection();
    let table = table_name::<M::Table>();
    let op = op!(Guard, table, kind_of(conn), table = table);
    let set = conn.set_if_null(pk, value).map_err(Error::from);
    op.finish(set, |&won| {
        (if won { "set" } else { "already set" }, u64::from(won))
    })
}

/// `<insert> ON CONFLICT DO NOTHING [RETURNING …]` (PostgreSQL, SQLite ≥ 3.35), or, without
/// `ON CONFLICT`, `<insert> RETURNING …` (MariaDB, where a duplicate is the unique-violation
/// error).
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct InsertOnceStmt<I, S> {
    insert: I,
    returning: Option<S>,
    do_nothing_on_conflict: bool,
}

impl<I, S> QueryId for InsertOnceStmt<I, S> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<I, S, DB> QueryFragment<DB> for InsertOnceStmt<I, S>
where
    I: QueryFragment<DB>,
    S: QueryFragment<DB>,
    DB: Backend,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.insert.walk_ast(out.reborrow())?;
        if self.do_nothing_on_conflict {
            out.push_sql(" ON CONFLICT DO NOTHING");
        }
        if let Some(s) = &self.returning {
            out.push_sql(" RETURNING ");
            s.walk_ast(out.reborrow())?;
        }
        Ok(())
    }
}

impl<I, S: Expression> diesel::query_builder::Query for InsertOnceStmt<I, S> {
    type SqlType = S::SqlType;
}
impl<I, S, Conn> RunQueryDsl<Conn> for InsertOnceStmt<I, S> {}

/// What `insert_once` hands back: nothing (`()`), or the inserted row (`Returning<R>`).
pub trait InsertReturning<DB: Backend> {
    /// The value carried by `InsertOutcome::Inserted`.
    type Output;
    #[doc(hidden)]
    type Select: QueryFragment<DB> + Expression;
    #[doc(hidden)]
    fn select() -> Option<Self::Select>;
}

/// The bounds under which a connection can insert `V` into `T` once; you never implement it.
pub trait InsertOnceConnection<T, V, R: InsertReturning<Self::Backend>>: InsertOnceDialect {
    #[doc(hidden)]
    fn insert_once_into(&mut self, table: T, values: V) -> QueryResult<InsertOutcome<R::Output>>;
}

impl<T, V, R, C, DB> InsertOnceConnection<T, V, R> for C
where
    T: QueryId + 'static,
    V::Values: QueryId,
    C: InsertOnceDialect + Connection<Backend = DB>,
    DB: diesel::backend::Backend,
    T: Table,
    V: Insertable<T>,
    InsertStatement<T, V::Values>: QueryFragment<DB>,
    R: RunInsertOnce<C, InsertStatement<T, V::Values>>,
    T::FromClause: QueryFragment<DB>,
{
    fn insert_once_into(&mut self, table: T, values: V) -> QueryResult<InsertOutcome<R::Output>> {
        InsertOnceDialect::insert_once::<_, R>(self, diesel::insert_into(table).values(values))
    }
}

/// A plain insert's result as an outcome: its unique-violation error is `AlreadyExists`.
fn unless_duplicate<R>(inserted: QueryResult<Option<R>>) -> QueryResult<InsertOutcome<R>> {
    match inserted {
        Ok(row) => Ok(InsertOutcome::Inserted(row)),
        Err(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        )) => Ok(InsertOutcome::AlreadyExists),
        Err(e) => Err(e),
    }
}

/// `SELECT <the model's columns> FROM <table> WHERE <column> = <key>`: how a backend without
/// `RETURNING` (MySQL) reads back the row it has just inserted, by the value the database generated
/// for `column`. `column` comes from the database's own catalog, `key` is a bind parameter.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct InsertedRowStmt<'a, F, S> {
    from: F,
    select: S,
    column: &'a str,
    key: i64,
}

impl<F, S> QueryId for InsertedRowStmt<'_, F, S> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<F, S, DB> QueryFragment<DB> for InsertedRowStmt<'_, F, S>
where
    F: QueryFragment<DB>,
    S: QueryFragment<DB>,
    DB: SqlDialect,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        self.select.walk_ast(out.reborrow())?;
        out.push_sql(" FROM ");
        self.from.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        out.push_identifier(self.column)?;
        out.push_sql(" = ");
        DB::bind_i64(&mut out, &self.key)
    }
}

impl<F, S: Expression> diesel::query_builder::Query for InsertedRowStmt<'_, F, S> {
    type SqlType = S::SqlType;
}
impl<F, S, Conn> RunQueryDsl<Conn> for InsertedRowStmt<'_, F, S> {}

/// The table an insert statement writes to.
#[doc(hidden)]
pub trait InsertTarget {
    /// The table.
    type Table;
}

impl<T: QuerySource, U, Op, Ret> InsertTarget for InsertStatement<T, U, Op, Ret> {
    type Table = T;
}

/// Runs `<insert> ON CONFLICT DO NOTHING`, reading the row back or not: one impl per
/// [`InsertReturning`] mode, because only the returning mode loads rows (and `()` is no row type).
///
/// A backend without `ON CONFLICT` and `RETURNING` (MySQL) runs the insert itself and uses the
/// rest: whether the mode wants the row, the insert's table, and how to load the row from it.
#[doc(hidden)]
pub trait RunInsertOnce<C: Connection, I>: InsertReturning<C::Backend> {
    /// The table `I` inserts into.
    type Table: Table<FromClause: QueryFragment<C::Backend>> + Default;
    /// Whether `InsertOutcome::Inserted` carries the inserted row in this mode.
    const RETURNS_ROW: bool;

    #[doc(hidden)]
    fn run(conn: &mut C, insert: I) -> QueryResult<InsertOutcome<Self::Output>>;

    /// [`run`](RunInsertOnce::run) for a backend with `RETURNING` but no `ON CONFLICT`
    /// (MariaDB): the plain insert, whose unique-violation error means "already exists" (it
    /// leaves a transaction usable there).
    #[doc(hidden)]
    fn run_plain(conn: &mut C, insert: I) -> QueryResult<InsertOutcome<Self::Output>>;

    /// The rows of [`Self::Table`](RunInsertOnce::Table) whose `column` holds `key`, as this
    /// mode's row ([`InsertedRowStmt`]). Empty, without a query, in the mode that returns no row.
    #[doc(hidden)]
    fn load_where(conn: &mut C, column: &str, key: i64) -> QueryResult<Vec<Self::Output>>;
}

impl<C, I> RunInsertOnce<C, I> for ()
where
    C: Connection,
    InsertOnceStmt<I, NoReturning>: QueryFragment<C::Backend>,
    I: InsertTarget,
    I::Table: Table<FromClause: QueryFragment<C::Backend>> + Default,
{
    type Table = I::Table;
    const RETURNS_ROW: bool = false;

    fn run(conn: &mut C, insert: I) -> QueryResult<InsertOutcome<()>> {
        let stmt = InsertOnceStmt::<_, NoReturning> {
            insert,
            returning: None,
            do_nothing_on_conflict: true,
        };
        Ok(match conn.execute_returning_count(&stmt)? {
            0 => InsertOutcome::AlreadyExists,
            _ => InsertOutcome::Inserted(None),
        })
    }

    fn run_plain(conn: &mut C, insert: I) -> QueryResult<InsertOutcome<()>> {
        let stmt = InsertOnceStmt::<_, NoReturning> {
            insert,
            returning: None,
            do_nothing_on_conflict: false,
        };
        unless_duplicate(conn.execute_returning_count(&stmt).map(|_| None))
    }

    fn load_where(_conn: &mut C, _column: &str, _key: i64) -> QueryResult<Vec<()>> {
        Ok(Vec::new())
    }
}

impl<C, I, R> RunInsertOnce<C, I> for Returning<R>
where
    C: Connection<Backend: SqlDialect>,
    Returning<R>: InsertReturning<C::Backend, Output = R>,
    for<'a> InsertOnceStmt<&'a I, <Returning<R> as InsertReturning<C::Backend>>::Select>:
        LoadQuery<'a, C, R>,
    I: InsertTarget,
    I::Table: Table<FromClause: QueryFragment<C::Backend>> + Default,
    for<'a> InsertedRowStmt<
        'a,
        <I::Table as QuerySource>::FromClause,
        <Returning<R> as InsertReturning<C::Backend>>::Select,
    >: LoadQuery<'a, C, R>,
{
    type Table = I::Table;
    const RETURNS_ROW: bool = true;

    fn run(conn: &mut C, insert: I) -> QueryResult<InsertOutcome<R>> {
        let stmt = InsertOnceStmt {
            insert: &insert,
            returning: Self::select(),
            do_nothing_on_conflict: true,
        };
        let rows: Vec<R> = stmt.load(conn)?;
        Ok(match rows.into_iter().next() {
            Some(row) => InsertOutcome::Inserted(Some(row)),
            None => InsertOutcome::AlreadyExists,
        })
    }

    fn run_plain(conn: &mut C, insert: I) -> QueryResult<InsertOutcome<R>> {
        let stmt = InsertOnceStmt {
            insert: &insert,
            returning: Self::select(),
            do_nothing_on_conflict: false,
        };
        unless_duplicate(stmt.load::<R>(conn).map(|rows| rows.into_iter().next()))
    }

    fn load_where(conn: &mut C, column: &str, key: i64) -> QueryResult<Vec<R>> {
        let Some(select) = Self::select() else {
            return Ok(Vec::new());
        };
        InsertedRowStmt {
            from: I::Table::default().from_clause(),
            select,
            column,
            key,
        }
        .load(conn)
    }
}

/// Inserts `values` into `table` unless a unique constraint already holds an equal row.
///
/// - PostgreSQL, SQLite: `INSERT … ON CONFLICT DO NOTHING RETURNING …`. No error is raised, so a
///   duplicate never aborts the caller's surrounding PostgreSQL transaction at READ COMMITTED
///   (the default). At REPEATABLE READ or SERIALIZABLE, PostgreSQL raises a serialization failure
///   when the equal row was committed after the transaction's snapshot (it cannot tell "do
///   nothing" from a row it may not see): that aborts the transaction, and comes back as
///   [`Error::Deadlock`], to retry the whole transaction.
/// - MySQL: a plain `INSERT`; the duplicate-key error is mapped to `AlreadyExists` (MySQL keeps the
///   transaction usable after it). MySQL has no `RETURNING`, so with [`Returning`] the row is read
///   back in the transaction that inserted it (the caller's, or a short one of diesel-lease's when
///   there is none), by the value the insert generated for the table's `AUTO_INCREMENT` column
///   (`LAST_INSERT_ID()`, which is reset first so that a value left by an earlier insert is never
///   taken for this one: after `AlreadyExists` or `Inserted(None)` the session's
///   `LAST_INSERT_ID()` reads 0; the column's name comes from `information_schema.columns`).
///   `Inserted(None)` exactly when the insert generated no such value: the table has no
///   `AUTO_INCREMENT` column (its key came from the insert or a default), or the insert gave the
///   column a value itself. The caller then knows the key and can load the row by it.
///
/// Any other database error (a foreign key, a `NOT NULL`) is returned as an error.
pub(crate) fn insert_once<R, T, V, C>(
    conn: &mut C,
    table: T,
    values: V,
) -> Result<InsertOutcome<R::Output>>
where
    C: BorrowConnection,
    R: InsertReturning<<C::Conn as Connection>::Backend>,
    C::Conn: InsertOnceConnection<T, V, R>,
{
    let conn = conn.borrow_connection();
    let name = table_name::<T>();
    let op = op!(InsertOnce, name, kind_of(conn), table = name);
    let inserted = conn.insert_once_into(table, values).map_err(Error::from);
    op.finish(inserted, |outcome| match outcome {
        InsertOutcome::Inserted(_) => ("inserted", 1),
        InsertOutcome::AlreadyExists => ("already exists", 0),
    })
}

/// Returns the inserted row as model `R` (`#[insert_once(returning = R)]`).
#[derive(Debug)]
pub struct Returning<R>(PhantomData<R>);

impl<R, DB> InsertReturning<DB> for Returning<R>
where
    DB: Backend,
    R: diesel::Selectable<DB>,
    R::SelectExpression: QueryId,
    diesel::dsl::AsSelect<R, DB>: QueryFragment<DB>,
{
    type Output = R;
    type Select = diesel::dsl::AsSelect<R, DB>;
    fn select() -> Option<Self::Select> {
        Some(R::as_select())
    }
}

/// No `RETURNING` clause: `InsertOutcome::Inserted(None)`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct NoReturning;

impl Expression for NoReturning {
    type SqlType = diesel::sql_types::Integer;
}

impl<DB: Backend> QueryFragment<DB> for NoReturning {
    fn walk_ast<'b>(&'b self, _out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        Ok(())
    }
}

impl<DB: Backend> InsertReturning<DB> for () {
    type Output = ();
    type Select = NoReturning;
    fn select() -> Option<Self::Select> {
        None
    }
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use diesel::prelude::*;

    use super::InsertedRowStmt;

    diesel::table! {
        notification (id) {
            id -> BigInt,
            body -> Text,
        }
    }

    #[derive(Queryable, Selectable)]
    #[diesel(table_name = notification)]
    #[allow(dead_code)]
    struct Notification {
        id: i64,
        body: String,
    }

    /// The read-back of an insert on MySQL: identifiers from the schema and the catalog, quoted;
    /// the key a bind parameter.
    #[test]
    fn mysql_reads_the_inserted_row_back_by_its_generated_key() {
        use diesel::mysql::Mysql;
        let stmt = InsertedRowStmt {
            from: notification::table.from_clause(),
            select: Notification::as_select(),
            column: "i`d",
            key: 7,
        };
        assert_eq!(
            diesel::debug_query::<Mysql, _>(&stmt).to_string(),
            "SELECT `notification`.`id`, `notification`.`body` FROM `notification` \
             WHERE `i``d` = ? -- binds: [7]"
        );
    }
}
