//! The statements behind claims, completions and guards, as Diesel `QueryFragment`s.
//!
//! Identifiers come only from the model's schema (`Column::NAME` and the `table!` struct, both
//! quoted by the backend); every value is a bind parameter. The SQL differs per backend only where
//! the backend lacks a feature (see each statement).
//!
//! Not a stable API: these types appear only in the bounds of
//! [`ClaimConnection`](super::ClaimConnection).
#![allow(missing_debug_implementations, missing_docs)]

use std::marker::PhantomData;

use diesel::backend::Backend;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType, Nullable, Text, Timestamp};
use diesel::{QueryResult, RunQueryDsl};

use super::{Claimable, SortOrder};
use crate::clock::{DbNow, DbNowOffset};
use crate::BackendKind;

/// A backend diesel-lease writes SQL for, with the binds every statement uses.
pub trait LeaseBackend: Backend {
    /// Which one.
    const KIND: BackendKind;
    /// Binds a `BIGINT`.
    fn bind_i64<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b i64) -> QueryResult<()>;
    /// Binds a nullable `BIGINT`.
    fn bind_opt_i64<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b Option<i64>) -> QueryResult<()>;
    /// Binds a text value.
    fn bind_str<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b str) -> QueryResult<()>;
    /// Binds a nullable text value.
    fn bind_opt_str<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b Option<String>) -> QueryResult<()>;
}

macro_rules! lease_backend {
    ($feature:literal, $db:ty, $kind:ident) => {
        #[cfg(feature = $feature)]
        impl LeaseBackend for $db {
            const KIND: BackendKind = BackendKind::$kind;
            fn bind_i64<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b i64) -> QueryResult<()> {
                out.push_bind_param::<BigInt, _>(v)
            }
            fn bind_opt_i64<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                v: &'b Option<i64>,
            ) -> QueryResult<()> {
                out.push_bind_param::<Nullable<BigInt>, _>(v)
            }
            fn bind_str<'b>(out: &mut AstPass<'_, 'b, Self>, v: &'b str) -> QueryResult<()> {
                out.push_bind_param::<Text, _>(v)
            }
            fn bind_opt_str<'b>(
                out: &mut AstPass<'_, 'b, Self>,
                v: &'b Option<String>,
            ) -> QueryResult<()> {
                out.push_bind_param::<Nullable<Text>, _>(v)
            }
        }
    };
}
lease_backend!("postgres", diesel::pg::Pg, Postgres);
lease_backend!("sqlite", diesel::sqlite::Sqlite, Sqlite);
lease_backend!("mysql", diesel::mysql::Mysql, Mysql);

/// What every claim-family statement needs to know: state values, owner, stale cutoff.
pub struct ClaimParts<M: Claimable> {
    pub(crate) table: M::Table,
    pub(crate) now: DbNow<Timestamp>,
    pub(crate) ready: Vec<M::StateValue>,
    pub(crate) claimed: M::StateValue,
    pub(crate) owner: String,
    /// Claims older than this are claimable again (when a claimed-at column is mapped).
    pub(crate) cutoff: Option<DbNowOffset<Timestamp>>,
    pub(crate) max_attempts: Option<i64>,
}

impl<M: Claimable> ClaimParts<M> {
    pub(crate) fn new(owner: &str, timeout_micros: Option<i64>) -> Self {
        let cutoff = match (M::CLAIMED_AT, timeout_micros) {
            (Some(_), Some(t)) => Some(DbNowOffset::ago(t)),
            _ => None,
        };
        ClaimParts {
            table: M::Table::default(),
            now: DbNow::new(),
            ready: M::ready_states(),
            claimed: M::claimed_state(),
            owner: owner.to_owned(),
            cutoff,
            max_attempts: M::MAX_ATTEMPTS.filter(|_| M::ATTEMPTS.is_some()),
        }
    }
}

fn ident<DB: Backend>(out: &mut AstPass<'_, '_, DB>, name: &str) -> QueryResult<()> {
    out.push_identifier(name)
}

fn table<'b, M: Claimable, DB: Backend>(
    out: &mut AstPass<'_, 'b, DB>,
    t: &'b M::Table,
) -> QueryResult<()>
where
    M::Table: QueryFragment<DB>,
{
    t.walk_ast(out.reborrow())
}

/// `<table>.<col>` — only where a join makes bare names ambiguous.
fn qualified<'b, M: Claimable, DB: Backend>(
    out: &mut AstPass<'_, 'b, DB>,
    t: &'b M::Table,
    col: &str,
) -> QueryResult<()>
where
    M::Table: QueryFragment<DB>,
{
    table::<M, DB>(out, t)?;
    out.push_sql(".");
    ident(out, col)
}

fn column_list<DB: Backend>(out: &mut AstPass<'_, '_, DB>, cols: &[&str]) -> QueryResult<()> {
    for (i, c) in cols.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        ident(out, c)?;
    }
    Ok(())
}

/// The rows a claim may take: ready ones, and (with a claimed-at column and a timeout) stale
/// claims that have attempts left. Bare column names: used inside single-table statements.
fn claimable_predicate<'b, M, DB>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M>,
) -> QueryResult<()>
where
    M: Claimable,
    DB: LeaseBackend + HasSqlType<M::StateSql>,
    M::StateValue: ToSql<M::StateSql, DB>,
    DbNowOffset<Timestamp>: QueryFragment<DB>,
{
    out.push_sql("(");
    ident(out, M::STATE)?;
    out.push_sql(" IN (");
    for (i, v) in parts.ready.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        out.push_bind_param::<M::StateSql, _>(v)?;
    }
    out.push_sql(")");
    if let (Some(claimed_at), Some(cutoff)) = (M::CLAIMED_AT, &parts.cutoff) {
        out.push_sql(" OR (");
        ident(out, M::STATE)?;
        out.push_sql(" = ");
        out.push_bind_param::<M::StateSql, _>(&parts.claimed)?;
        out.push_sql(" AND ");
        ident(out, claimed_at)?;
        out.push_sql(" < ");
        cutoff.walk_ast(out.reborrow())?;
        if let (Some(attempts), Some(max)) = (M::ATTEMPTS, &parts.max_attempts) {
            out.push_sql(" AND ");
            ident(out, attempts)?;
            out.push_sql(" < ");
            DB::bind_i64(out, max)?;
        }
        out.push_sql(")");
    }
    out.push_sql(")");
    Ok(())
}

fn order_by<DB: Backend>(
    out: &mut AstPass<'_, '_, DB>,
    order: &[(&str, SortOrder)],
) -> QueryResult<()> {
    out.push_sql(" ORDER BY ");
    for (i, (c, dir)) in order.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        ident(out, c)?;
        out.push_sql(match dir {
            SortOrder::Asc => " ASC",
            SortOrder::Desc => " DESC",
        });
    }
    Ok(())
}

/// `SET state = $claimed, owner = $owner, claimed_at = <db now>, attempts = attempts + 1`.
fn claim_assignments<'b, M, DB>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M>,
) -> QueryResult<()>
where
    M: Claimable,
    DB: LeaseBackend + HasSqlType<M::StateSql>,
    M::StateValue: ToSql<M::StateSql, DB>,
    DbNow<Timestamp>: QueryFragment<DB>,
{
    out.push_sql(" SET ");
    ident(out, M::STATE)?;
    out.push_sql(" = ");
    out.push_bind_param::<M::StateSql, _>(&parts.claimed)?;
    if let Some(owner) = M::OWNER {
        out.push_sql(", ");
        ident(out, owner)?;
        out.push_sql(" = ");
        DB::bind_str(out, &parts.owner)?;
    }
    if let Some(claimed_at) = M::CLAIMED_AT {
        out.push_sql(", ");
        ident(out, claimed_at)?;
        out.push_sql(" = ");
        parts.now.walk_ast(out.reborrow())?;
    }
    if let Some(attempts) = M::ATTEMPTS {
        out.push_sql(", ");
        ident(out, attempts)?;
        out.push_sql(" = ");
        ident(out, attempts)?;
        out.push_sql(" + 1");
    }
    Ok(())
}

/// An optional caller filter, type-erased so statements need no extra type parameter.
pub(crate) type Filter<'a, DB> = Option<&'a (dyn QueryFragment<DB> + 'a)>;

fn and_filter<'b, DB: Backend>(
    out: &mut AstPass<'_, 'b, DB>,
    filter: Filter<'b, DB>,
) -> QueryResult<()> {
    if let Some(f) = filter {
        out.push_sql(" AND (");
        f.walk_ast(out.reborrow())?;
        out.push_sql(")");
    }
    Ok(())
}

macro_rules! query_impls {
    ($name:ident) => {
        impl<M: Claimable + diesel::Selectable<DB>, DB: Backend> QueryId for $name<'_, M, DB> {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }
        impl<M: Claimable + diesel::Selectable<DB>, DB: Backend> Query for $name<'_, M, DB> {
            type SqlType = diesel::dsl::AsSelect<M, DB>;
        }
        impl<M: Claimable + diesel::Selectable<DB>, DB: Backend, Conn> RunQueryDsl<Conn>
            for $name<'_, M, DB>
        {
        }
    };
}

/// Claims up to `limit` rows in one statement and returns them.
///
/// - PostgreSQL: `WITH picked AS (SELECT pk … ORDER BY … LIMIT $n FOR UPDATE SKIP LOCKED)
///   UPDATE t SET … FROM picked WHERE t.pk = picked.pk RETURNING …`. The CTE is evaluated once, so
///   the statement never claims more than `$n` rows (an `IN (subquery)` may be re-run by the
///   planner and claim more).
/// - SQLite: `UPDATE t SET … WHERE (pk) IN (SELECT pk … LIMIT $n) RETURNING …`, run inside
///   `BEGIN IMMEDIATE`: SQLite has one writer at a time, so the sub-select cannot race.
pub struct ClaimStmt<'a, M: Claimable + diesel::Selectable<DB>, DB: Backend> {
    pub(crate) select: diesel::dsl::AsSelect<M, DB>,
    pub(crate) parts: &'a ClaimParts<M>,
    pub(crate) limit: i64,
    pub(crate) filter: Filter<'a, DB>,
    pub(crate) _db: PhantomData<DB>,
}
query_impls!(ClaimStmt);

impl<'a, M: Claimable + diesel::Selectable<DB>, DB: Backend> ClaimStmt<'a, M, DB> {
    pub(crate) fn new(parts: &'a ClaimParts<M>, limit: i64, filter: Filter<'a, DB>) -> Self {
        ClaimStmt {
            select: diesel::SelectableHelper::as_select(),
            parts,
            limit,
            filter,
            _db: PhantomData,
        }
    }
}

impl<M, DB> QueryFragment<DB> for ClaimStmt<'_, M, DB>
where
    M: Claimable + diesel::Selectable<DB>,
    diesel::dsl::AsSelect<M, DB>: QueryFragment<DB>,
    M::Table: QueryFragment<DB>,
    DB: LeaseBackend + HasSqlType<M::StateSql>,
    M::StateValue: ToSql<M::StateSql, DB>,
    DbNow<Timestamp>: QueryFragment<DB>,
    DbNowOffset<Timestamp>: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match DB::KIND {
            BackendKind::Postgres => {
                out.push_sql("WITH ");
                ident(&mut out, "picked")?;
                out.push_sql(" AS (SELECT ");
                column_list(&mut out, M::PK)?;
                out.push_sql(" FROM ");
                table::<M, DB>(&mut out, &self.parts.table)?;
                out.push_sql(" WHERE ");
                claimable_predicate(&mut out, self.parts)?;
                and_filter(&mut out, self.filter)?;
                order_by(&mut out, M::ORDER)?;
                out.push_sql(" LIMIT ");
                DB::bind_i64(&mut out, &self.limit)?;
                out.push_sql(" FOR UPDATE SKIP LOCKED) UPDATE ");
                table::<M, DB>(&mut out, &self.parts.table)?;
                claim_assignments(&mut out, self.parts)?;
                out.push_sql(" FROM ");
                ident(&mut out, "picked")?;
                out.push_sql(" WHERE ");
                for (i, pk) in M::PK.iter().enumerate() {
                    if i > 0 {
                        out.push_sql(" AND ");
                    }
                    qualified::<M, DB>(&mut out, &self.parts.table, pk)?;
                    out.push_sql(" = ");
                    ident(&mut out, "picked")?;
                    out.push_sql(".");
                    ident(&mut out, pk)?;
                }
            }
            BackendKind::Sqlite | BackendKind::Mysql => {
                out.push_sql("UPDATE ");
                table::<M, DB>(&mut out, &self.parts.table)?;
                claim_assignments(&mut out, self.parts)?;
                out.push_sql(" WHERE (");
                column_list(&mut out, M::PK)?;
                out.push_sql(") IN (SELECT ");
                column_list(&mut out, M::PK)?;
                out.push_sql(" FROM ");
                table::<M, DB>(&mut out, &self.parts.table)?;
                out.push_sql(" WHERE ");
                claimable_predicate(&mut out, self.parts)?;
                and_filter(&mut out, self.filter)?;
                order_by(&mut out, M::ORDER)?;
                out.push_sql(" LIMIT ");
                DB::bind_i64(&mut out, &self.limit)?;
                out.push_sql(")");
            }
        }
        out.push_sql(" RETURNING ");
        self.select.walk_ast(out.reborrow())
    }
}

/// `SELECT <model> FROM t WHERE <claimable> [AND filter] ORDER BY … LIMIT $n [FOR UPDATE SKIP LOCKED]`.
///
/// With `lock = true` (PostgreSQL, MySQL) the rows stay locked until the caller's transaction
/// ends. MySQL claims use it to pick rows before updating them (MySQL has no `UPDATE … RETURNING`).
pub struct PickStmt<'a, M: Claimable + diesel::Selectable<DB>, DB: Backend> {
    pub(crate) select: diesel::dsl::AsSelect<M, DB>,
    pub(crate) parts: &'a ClaimParts<M>,
    pub(crate) limit: i64,
    pub(crate) filter: Filter<'a, DB>,
    pub(crate) lock: bool,
    pub(crate) _db: PhantomData<DB>,
}
query_impls!(PickStmt);

impl<'a, M: Claimable + diesel::Selectable<DB>, DB: Backend> PickStmt<'a, M, DB> {
    /// `lock`: add `FOR UPDATE SKIP LOCKED` (not on SQLite, which has no row locks).
    pub(crate) fn new(
        parts: &'a ClaimParts<M>,
        limit: i64,
        filter: Filter<'a, DB>,
        lock: bool,
    ) -> Self {
        PickStmt {
            select: diesel::SelectableHelper::as_select(),
            parts,
            limit,
            filter,
            lock,
            _db: PhantomData,
        }
    }
}

impl<M, DB> QueryFragment<DB> for PickStmt<'_, M, DB>
where
    M: Claimable + diesel::Selectable<DB>,
    diesel::dsl::AsSelect<M, DB>: QueryFragment<DB>,
    M::Table: QueryFragment<DB>,
    DB: LeaseBackend + HasSqlType<M::StateSql>,
    M::StateValue: ToSql<M::StateSql, DB>,
    DbNowOffset<Timestamp>: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        self.select.walk_ast(out.reborrow())?;
        out.push_sql(" FROM ");
        table::<M, DB>(&mut out, &self.parts.table)?;
        out.push_sql(" WHERE ");
        claimable_predicate(&mut out, self.parts)?;
        and_filter(&mut out, self.filter)?;
        order_by(&mut out, M::ORDER)?;
        out.push_sql(" LIMIT ");
        DB::bind_i64(&mut out, &self.limit)?;
        if self.lock {
            out.push_sql(" FOR UPDATE SKIP LOCKED");
        }
        Ok(())
    }
}

/// `(<pk of row 1>) OR (<pk of row 2>) …` from the model's typed primary-key filters.
pub struct AnyPk<M: Claimable>(pub(crate) Vec<M::PkFilter>);

impl<M, DB> QueryFragment<DB> for AnyPk<M>
where
    M: Claimable,
    M::PkFilter: QueryFragment<DB>,
    DB: Backend,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if self.0.is_empty() {
            out.push_sql("1 = 0");
        }
        for (i, f) in self.0.iter().enumerate() {
            if i > 0 {
                out.push_sql(" OR ");
            }
            out.push_sql("(");
            f.walk_ast(out.reborrow())?;
            out.push_sql(")");
        }
        Ok(())
    }
}

/// MySQL's second claim statement: `UPDATE t SET <claim> WHERE <pk in picked>`.
pub struct MarkClaimedStmt<'a, M: Claimable> {
    pub(crate) parts: &'a ClaimParts<M>,
    pub(crate) rows: &'a AnyPk<M>,
}

impl<M: Claimable> QueryId for MarkClaimedStmt<'_, M> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<M, DB> QueryFragment<DB> for MarkClaimedStmt<'_, M>
where
    M: Claimable,
    M::PkFilter: QueryFragment<DB>,
    M::Table: QueryFragment<DB>,
    DB: LeaseBackend + HasSqlType<M::StateSql>,
    M::StateValue: ToSql<M::StateSql, DB>,
    DbNow<Timestamp>: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        table::<M, DB>(&mut out, &self.parts.table)?;
        claim_assignments(&mut out, self.parts)?;
        out.push_sql(" WHERE ");
        self.rows.walk_ast(out.reborrow())
    }
}

/// `SELECT <model> FROM t WHERE <pk in rows>`: MySQL's read-back after claiming.
pub struct ReadBackStmt<'a, M: Claimable + diesel::Selectable<DB>, DB: Backend> {
    pub(crate) select: diesel::dsl::AsSelect<M, DB>,
    pub(crate) table: M::Table,
    pub(crate) rows: &'a AnyPk<M>,
    pub(crate) _db: PhantomData<DB>,
}
impl<M: Claimable + diesel::Selectable<DB>, DB: Backend> QueryId for ReadBackStmt<'_, M, DB> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}
impl<M: Claimable + diesel::Selectable<DB>, DB: Backend> Query for ReadBackStmt<'_, M, DB> {
    type SqlType = diesel::dsl::AsSelect<M, DB>;
}
impl<M: Claimable + diesel::Selectable<DB>, DB: Backend, Conn> RunQueryDsl<Conn>
    for ReadBackStmt<'_, M, DB>
{
}
impl<M, DB> QueryFragment<DB> for ReadBackStmt<'_, M, DB>
where
    M: Claimable + diesel::Selectable<DB>,
    diesel::dsl::AsSelect<M, DB>: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    M::Table: QueryFragment<DB>,
    DB: Backend,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        self.select.walk_ast(out.reborrow())?;
        out.push_sql(" FROM ");
        table::<M, DB>(&mut out, &self.table)?;
        out.push_sql(" WHERE ");
        self.rows.walk_ast(out.reborrow())
    }
}

/// Stale claims that used up their attempts go to the failed state instead of being handed out:
/// `UPDATE t SET state = $failed WHERE state = $claimed AND claimed_at < <cutoff> AND attempts >= $max`.
pub struct ReapStmt<'a, M: Claimable> {
    pub(crate) parts: &'a ClaimParts<M>,
    pub(crate) failed: M::StateValue,
}
impl<M: Claimable> QueryId for ReapStmt<'_, M> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}
impl<M, DB> QueryFragment<DB> for ReapStmt<'_, M>
where
    M: Claimable,
    M::Table: QueryFragment<DB>,
    DB: LeaseBackend + HasSqlType<M::StateSql>,
    M::StateValue: ToSql<M::StateSql, DB>,
    DbNowOffset<Timestamp>: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let (Some(claimed_at), Some(attempts), Some(cutoff), Some(max)) = (
            M::CLAIMED_AT,
            M::ATTEMPTS,
            &self.parts.cutoff,
            &self.parts.max_attempts,
        ) else {
            return Err(diesel::result::Error::QueryBuilderError(
                "reaping needs claimed_at, attempts, a timeout and max_attempts".into(),
            ));
        };
        out.push_sql("UPDATE ");
        table::<M, DB>(&mut out, &self.parts.table)?;
        out.push_sql(" SET ");
        ident(&mut out, M::STATE)?;
        out.push_sql(" = ");
        out.push_bind_param::<M::StateSql, _>(&self.failed)?;
        out.push_sql(" WHERE ");
        ident(&mut out, M::STATE)?;
        out.push_sql(" = ");
        out.push_bind_param::<M::StateSql, _>(&self.parts.claimed)?;
        out.push_sql(" AND ");
        ident(&mut out, claimed_at)?;
        out.push_sql(" < ");
        cutoff.walk_ast(out.reborrow())?;
        out.push_sql(" AND ");
        ident(&mut out, attempts)?;
        out.push_sql(" >= ");
        DB::bind_i64(&mut out, max)
    }
}

/// Owner-checked transition of one claimed row:
/// `UPDATE t SET state = $to WHERE <pk> AND state = $claimed [AND owner = $me] [AND attempts = $n]`.
///
/// The old state is in the predicate, so "1 row" means "this caller still owned it" on every
/// backend, including MySQL's matched-rows count.
pub struct FinishStmt<M: Claimable> {
    pub(crate) table: M::Table,
    pub(crate) pk: M::PkFilter,
    pub(crate) claimed: M::StateValue,
    pub(crate) to: M::StateValue,
    pub(crate) owner: Option<Option<String>>,
    pub(crate) attempts: Option<Option<i64>>,
    /// Back to ready: clear the owner so the row looks unclaimed.
    pub(crate) clear_owner: bool,
}
impl<M: Claimable> QueryId for FinishStmt<M> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}
impl<M, DB> QueryFragment<DB> for FinishStmt<M>
where
    M: Claimable,
    M::PkFilter: QueryFragment<DB>,
    M::Table: QueryFragment<DB>,
    DB: LeaseBackend + HasSqlType<M::StateSql>,
    M::StateValue: ToSql<M::StateSql, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        table::<M, DB>(&mut out, &self.table)?;
        out.push_sql(" SET ");
        ident(&mut out, M::STATE)?;
        out.push_sql(" = ");
        out.push_bind_param::<M::StateSql, _>(&self.to)?;
        if let (true, Some(owner)) = (self.clear_owner, M::OWNER) {
            out.push_sql(", ");
            ident(&mut out, owner)?;
            out.push_sql(" = NULL");
        }
        out.push_sql(" WHERE ");
        self.pk.walk_ast(out.reborrow())?;
        out.push_sql(" AND ");
        ident(&mut out, M::STATE)?;
        out.push_sql(" = ");
        out.push_bind_param::<M::StateSql, _>(&self.claimed)?;
        if let (Some(col), Some(owner)) = (M::OWNER, &self.owner) {
            out.push_sql(" AND ");
            ident(&mut out, col)?;
            out.push_sql(" = ");
            DB::bind_opt_str(&mut out, owner)?;
        }
        if let (Some(col), Some(attempts)) = (M::ATTEMPTS, &self.attempts) {
            out.push_sql(" AND ");
            ident(&mut out, col)?;
            out.push_sql(" = ");
            DB::bind_opt_i64(&mut out, attempts)?;
        }
        Ok(())
    }
}

/// SQLite's stand-in for a row lock: a write that matches nothing still takes the database's
/// write lock, which then shuts out every other writer until the transaction ends.
pub struct WriteLockStmt<M: Claimable> {
    pub(crate) table: M::Table,
}
impl<M: Claimable> QueryId for WriteLockStmt<M> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}
impl<M, DB> QueryFragment<DB> for WriteLockStmt<M>
where
    M: Claimable,
    M::Table: QueryFragment<DB>,
    DB: Backend,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        table::<M, DB>(&mut out, &self.table)?;
        out.push_sql(" SET ");
        ident(&mut out, M::STATE)?;
        out.push_sql(" = ");
        ident(&mut out, M::STATE)?;
        out.push_sql(" WHERE 1 = 0");
        Ok(())
    }
}
