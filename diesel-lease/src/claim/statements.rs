//! The statements behind claims and completions, as Diesel `QueryFragment`s.
//!
//! Identifiers come only from the model's schema (`Column::NAME` and the `table!` struct, both
//! quoted by the backend); the model's state values are SQL constants the derive escaped at
//! compile time ([`StateLiteral`]); every other value is a bind parameter. Each statement has a
//! static [`QueryId`] ([`StmtId`]) naming its shape, so Diesel prepares it once per connection
//! (see "Static statement text" below). The statements every backend shares
//! are here; the one claim statement whose shape differs (`UPDATE … RETURNING` in one statement on
//! PostgreSQL and SQLite, three statements on MySQL) is in each `backend/*.rs`, built from the
//! helpers below.
//!
//! Not a stable API: these types appear only in the bounds of
//! [`ClaimConnection`](super::ClaimConnection).
#![allow(missing_debug_implementations, missing_docs)]

use std::marker::PhantomData;

use diesel::connection::LoadConnection;
use diesel::deserialize::FromSqlRow;
use diesel::expression::QueryMetadata;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::methods::LoadQuery;
use diesel::{QueryResult, RunQueryDsl, SelectableHelper};

use super::{Claimable, Finish, SortOrder, StateLiteral};
use crate::backend::{Dialect, SqlDialect};
use crate::clock::{DbNow, DbNowOffset};

/// What the claim statements need of model `M` on backend `DB`: its table, its selection and
/// its state values as SQL. Implemented for every [`Claimable`] model whose columns the backend
/// can read and write; the statements are then written once with `M: ClaimSql<DB>` alone.
pub trait ClaimSql<DB: SqlDialect>: Claimable {
    /// `SELECT`'s column list for the model (`Selectable::as_select()`).
    type Select: QueryFragment<DB> + Send;
    fn select() -> Self::Select;
    fn push_table<'b>(out: &mut AstPass<'_, 'b, DB>, table: &'b Self::Table) -> QueryResult<()>;
    fn push_select<'b>(out: &mut AstPass<'_, 'b, DB>, select: &'b Self::Select) -> QueryResult<()>;
    fn push_pk<'b>(out: &mut AstPass<'_, 'b, DB>, pk: &'b Self::PkFilter) -> QueryResult<()>;
}

impl<M, DB> ClaimSql<DB> for M
where
    M: Claimable + diesel::Selectable<DB>,
    DB: SqlDialect,
    M::Table: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    diesel::dsl::AsSelect<M, DB>: QueryFragment<DB> + Send,
{
    type Select = diesel::dsl::AsSelect<M, DB>;
    fn select() -> Self::Select {
        M::as_select()
    }
    fn push_table<'b>(out: &mut AstPass<'_, 'b, DB>, table: &'b M::Table) -> QueryResult<()> {
        table.walk_ast(out.reborrow())
    }
    fn push_select<'b>(out: &mut AstPass<'_, 'b, DB>, select: &'b Self::Select) -> QueryResult<()> {
        select.walk_ast(out.reborrow())
    }
    fn push_pk<'b>(out: &mut AstPass<'_, 'b, DB>, pk: &'b M::PkFilter) -> QueryResult<()> {
        pk.walk_ast(out.reborrow())
    }
}

/// [`ClaimSql`] plus loading the model's rows over connection `C`: all a [`Dialect`] needs to
/// run claims of `M`.
pub trait ClaimModel<C: Dialect>: ClaimSql<C::Backend> {
    /// Runs a statement that returns rows of the model (its SQL ends in the model's selection).
    /// `K` is the statement's query id: a [`StmtId`] when its text is fixed by that type
    /// (prepared once per connection), [`Dynamic`] otherwise.
    fn load<K: QueryId>(
        conn: &mut C,
        stmt: &dyn QueryFragment<C::Backend>,
    ) -> QueryResult<Vec<Self>>;
}

impl<M, C> ClaimModel<C> for M
where
    C: Dialect + LoadConnection,
    M: ClaimSql<C::Backend>,
    for<'a> Rows<'a, M, C::Backend>: LoadQuery<'a, C, M>,
    // What Diesel's `LoadQuery` asks of any `Rows<'_, M, _, K>` (it is independent of `K`).
    C::Backend: QueryMetadata<diesel::dsl::AsSelect<M, C::Backend>>,
    M: diesel::Selectable<C::Backend> + FromSqlRow<SelectSql<M, C::Backend>, C::Backend>,
    SelectSql<M, C::Backend>:
        diesel::sql_types::SqlType + diesel::expression::TypedExpressionType + 'static,
{
    fn load<K: QueryId>(conn: &mut C, stmt: &dyn QueryFragment<C::Backend>) -> QueryResult<Vec<M>> {
        Rows::<M, C::Backend, K> {
            stmt,
            _m: PhantomData,
        }
        .load(conn)
    }
}

/// The SQL type of model `M`'s selection on `DB`.
type SelectSql<M, DB> = diesel::dsl::SqlTypeOf<<M as diesel::Selectable<DB>>::SelectExpression>;

/// Any statement that returns the model's selection, as a Diesel query whose rows load as `M`,
/// with query id `K`.
pub struct Rows<'a, M, DB: diesel::backend::Backend, K = Dynamic> {
    stmt: &'a dyn QueryFragment<DB>,
    _m: PhantomData<(M, K)>,
}

impl<M, DB: diesel::backend::Backend, K: QueryId> QueryId for Rows<'_, M, DB, K> {
    type QueryId = K::QueryId;
    const HAS_STATIC_QUERY_ID: bool = K::HAS_STATIC_QUERY_ID;
}
impl<M: diesel::Selectable<DB>, DB: diesel::backend::Backend, K> Query for Rows<'_, M, DB, K> {
    type SqlType = diesel::dsl::AsSelect<M, DB>;
}
impl<M, DB: diesel::backend::Backend, K> QueryFragment<DB> for Rows<'_, M, DB, K> {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.stmt.walk_ast(out)
    }
}
impl<M, DB: diesel::backend::Backend, Conn, K> RunQueryDsl<Conn> for Rows<'_, M, DB, K> {}

// Static statement text.
//
// Diesel prepares a statement once per connection and reuses it when the statement's type has a
// static query id: the type must then fix the SQL text. Ours are written behind `&dyn
// QueryFragment`, so the id is a separate type: `StmtId<M, S, F, RESCUE, ONE>` names the model,
// the statement shape `S`, the caller filter's query id `F` ([`NoFilter`] without one), whether
// the stale-claim rescue is in the predicate, and whether the limit is the inline `LIMIT 1`. Every
// other part of the text follows from the model's constants. The id is static only when `F`'s is.

/// The query id of a statement whose text is fixed by its type parameters (see above).
pub struct StmtId<M, S, F, const RESCUE: bool, const ONE: bool>(PhantomData<(M, S, F)>);

impl<M: 'static, S: 'static, F: QueryId, const RESCUE: bool, const ONE: bool> QueryId
    for StmtId<M, S, F, RESCUE, ONE>
{
    type QueryId = StmtId<M, S, F::QueryId, RESCUE, ONE>;
    const HAS_STATIC_QUERY_ID: bool = F::HAS_STATIC_QUERY_ID;
}

pub use crate::backend::Dynamic;
pub(crate) use crate::backend::Exec;

/// The filter id of a statement without a caller filter.
pub struct NoFilter;

impl QueryId for NoFilter {
    type QueryId = NoFilter;
    const HAS_STATIC_QUERY_ID: bool = true;
}

/// Statement shapes, for [`StmtId`].
pub mod shape {
    /// The one-statement claim (`ClaimStmt`).
    pub struct Claim;
    /// The locking pick (`PickStmt`).
    pub struct Pick;
    /// Retiring exhausted stale claims.
    pub struct Reap;
    /// An owner-checked change of one row; `T` is the target (0 done, 1 failed, 2 ready, 3 touch).
    pub struct Finish<const T: u8>;
    /// MySQL's mark-claimed and read-back of one picked row.
    pub struct ByKeyOne<const STEP: u8>;
    /// SQLite's write-lock statement.
    pub struct WriteLock;
}

/// Loads the rows of `stmt` with the [`StmtId`] of shape `S` and filter id `F` that matches
/// `rescue` (the predicate includes stale claims) and `one` (inline `LIMIT 1`).
pub(crate) fn load_shaped<M, C, S, F>(
    conn: &mut C,
    stmt: &dyn QueryFragment<C::Backend>,
    rescue: bool,
    one: bool,
) -> QueryResult<Vec<M>>
where
    C: Dialect,
    M: ClaimModel<C>,
    S: 'static,
    F: QueryId,
{
    match (rescue, one) {
        (false, false) => M::load::<StmtId<M, S, F, false, false>>(conn, stmt),
        (false, true) => M::load::<StmtId<M, S, F, false, true>>(conn, stmt),
        (true, false) => M::load::<StmtId<M, S, F, true, false>>(conn, stmt),
        (true, true) => M::load::<StmtId<M, S, F, true, true>>(conn, stmt),
    }
}

/// An optional caller filter, type-erased so statements need no extra type parameter.
pub(crate) type Filter<'a, DB> = Option<&'a (dyn QueryFragment<DB> + 'a)>;

/// What every claim-family statement needs to know: state values, owner, stale cutoff, and the
/// model's selection on backend `DB`.
pub struct ClaimParts<M: ClaimSql<DB>, DB: SqlDialect> {
    pub(crate) table: M::Table,
    pub(crate) select: M::Select,
    pub(crate) now: DbNow<M::ClaimedAtSql>,
    pub(crate) ready: &'static [StateLiteral],
    pub(crate) claimed: StateLiteral,
    pub(crate) owner: String,
    /// Claims older than this are claimable again (when a claimed-at column is mapped).
    pub(crate) cutoff: Option<DbNowOffset<M::ClaimedAtSql>>,
    pub(crate) max_attempts: Option<i64>,
    pub(crate) failed: Option<StateLiteral>,
}

impl<M: ClaimSql<DB>, DB: SqlDialect> ClaimParts<M, DB> {
    /// `owner` is what the claim writes into the owner column: a fresh
    /// [`ClaimStamp`](lease_core::ClaimStamp) per claim.
    pub(crate) fn new(owner: &str, timeout_micros: Option<i64>) -> Self {
        let cutoff = match (M::CLAIMED_AT, timeout_micros) {
            (Some(_), Some(t)) => Some(DbNowOffset::ago(t)),
            _ => None,
        };
        ClaimParts {
            table: M::Table::default(),
            select: M::select(),
            now: DbNow::new(),
            ready: M::READY_SQL,
            claimed: M::CLAIMED_SQL,
            owner: owner.to_owned(),
            cutoff,
            max_attempts: M::MAX_ATTEMPTS.filter(|_| M::ATTEMPTS.is_some()),
            failed: M::FAILED_SQL,
        }
    }

    /// Whether the claimable predicate includes stale claims (a [`StmtId`] parameter).
    pub(crate) fn rescues(&self) -> bool {
        self.cutoff.is_some()
    }

    /// Whether stale claims that used up their attempts must go to the failed state before a
    /// claim (so they are never handed out again).
    pub(crate) fn needs_reap(&self) -> bool {
        self.cutoff.is_some() && self.max_attempts.is_some() && self.failed.is_some()
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn column_list<DB: SqlDialect>(
    out: &mut AstPass<'_, '_, DB>,
    cols: &[&str],
) -> QueryResult<()> {
    for (i, c) in cols.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        out.push_identifier(c)?;
    }
    Ok(())
}

/// `<table>.<col>` — only where a join makes bare names ambiguous.
#[cfg(feature = "postgres")]
pub(crate) fn qualified<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    col: &str,
) -> QueryResult<()> {
    M::push_table(out, &parts.table)?;
    out.push_sql(".");
    out.push_identifier(col)
}

/// The rows a claim may take: ready ones, and (with a claimed-at column and a timeout) stale
/// claims that have attempts left. Bare column names: used inside single-table statements.
fn claimable_predicate<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    which: Which,
) -> QueryResult<()> {
    out.push_sql("(");
    if which != Which::Stale {
        StateLiteral::push_in(parts.ready, out, M::STATE)?;
    }
    if let (Some(claimed_at), Some(cutoff), true) =
        (M::CLAIMED_AT, &parts.cutoff, which != Which::Ready)
    {
        if which == Which::Both {
            out.push_sql(" OR ");
        }
        out.push_sql("(");
        parts.claimed.push_eq(out, M::STATE)?;
        out.push_sql(" AND ");
        claimed_before(out, claimed_at, cutoff)?;
        if let (Some(attempts), Some(max)) = (M::ATTEMPTS, &parts.max_attempts) {
            out.push_sql(" AND ");
            out.push_identifier(attempts)?;
            out.push_sql(" < ");
            DB::bind_i64(out, max)?;
        }
        out.push_sql(")");
    } else if which == Which::Stale {
        // Without a claim timeout nothing is ever stale.
        out.push_sql("1 = 0");
    }
    out.push_sql(")");
    super::schedule::push_not_before::<M, DB>(out)
}

/// Which claimable rows a pick looks at: ready or stale (one statement, PostgreSQL and SQLite),
/// or one of the two (MySQL's claims, see `backend/mysql.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Ready rows, and stale claims that may be rescued.
    Both,
    /// Ready rows only.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    Ready,
    /// Stale claims that may be rescued only.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    Stale,
}

fn order_by<DB: SqlDialect>(
    out: &mut AstPass<'_, '_, DB>,
    order: &[(&str, SortOrder)],
) -> QueryResult<()> {
    out.push_sql(" ORDER BY ");
    for (i, (c, dir)) in order.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        out.push_identifier(c)?;
        out.push_sql(match dir {
            SortOrder::Asc => " ASC",
            SortOrder::Desc => " DESC",
        });
    }
    Ok(())
}

/// `SET state = $claimed, owner = $owner, claimed_at = <db now>, attempts = attempts + 1`.
pub(crate) fn claim_assignments<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
) -> QueryResult<()> {
    out.push_sql(" SET ");
    out.push_identifier(M::STATE)?;
    out.push_sql(" = ");
    parts.claimed.push(out);
    if let Some(owner) = M::OWNER {
        out.push_sql(", ");
        out.push_identifier(owner)?;
        out.push_sql(" = ");
        DB::bind_str(out, &parts.owner)?;
    }
    if let Some(claimed_at) = M::CLAIMED_AT {
        out.push_sql(", ");
        out.push_identifier(claimed_at)?;
        out.push_sql(" = ");
        parts.now.walk_ast(out.reborrow())?;
    }
    if let Some(attempts) = M::ATTEMPTS {
        out.push_sql(", ");
        out.push_identifier(attempts)?;
        out.push_sql(" = ");
        out.push_identifier(attempts)?;
        out.push_sql(" + 1");
    }
    Ok(())
}

fn and_filter<'b, DB: SqlDialect>(
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

/// `SELECT <model> FROM t WHERE <claimable> [AND filter] ORDER BY … LIMIT $n <lock>`, where
/// `<lock>` is the backend's `FOR UPDATE SKIP LOCKED` (nothing on SQLite, whose write lock
/// stands in for row locks). The rows stay locked until the caller's transaction ends; MySQL
/// claims use it to pick rows before updating them.
pub struct PickStmt<'a, M: ClaimSql<DB>, DB: SqlDialect> {
    parts: &'a ClaimParts<M, DB>,
    limit: i64,
    filter: Filter<'a, DB>,
    which: Which,
    /// Appends the backend's `FOR UPDATE SKIP LOCKED`; without it, a plain read (a probe).
    lock: bool,
}

impl<'a, M: ClaimSql<DB>, DB: SqlDialect> PickStmt<'a, M, DB> {
    pub(crate) fn locking(
        parts: &'a ClaimParts<M, DB>,
        limit: i64,
        filter: Filter<'a, DB>,
    ) -> Self {
        PickStmt {
            parts,
            limit,
            filter,
            which: Which::Both,
            lock: true,
        }
    }

    /// [`locking`](Self::locking), of the ready rows or the stale claims only; `lock: false`
    /// reads without locking anything (a probe).
    #[cfg(feature = "mysql")]
    pub(crate) fn only(
        parts: &'a ClaimParts<M, DB>,
        limit: i64,
        filter: Filter<'a, DB>,
        which: Which,
        lock: bool,
    ) -> Self {
        PickStmt {
            which,
            lock,
            ..Self::locking(parts, limit, filter)
        }
    }
}

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for PickStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        M::push_select(&mut out, &self.parts.select)?;
        pick_rows_from(&mut out, self.parts, self.filter, &self.limit, self.which)?;
        if self.lock {
            out.push_sql(DB::SKIP_LOCKED);
        }
        Ok(())
    }
}

/// ` FROM t WHERE <claimable> [AND (filter)] ORDER BY … LIMIT $n`: which rows a claim takes.
/// A limit of 1 is written inline (`LIMIT 1`): `claim_next`'s text then has no limit parameter.
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub(crate) fn pick_from<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    filter: Filter<'b, DB>,
    limit: &'b i64,
) -> QueryResult<()> {
    pick_rows_from(out, parts, filter, limit, Which::Both)
}

/// [`pick_from`] of the rows `which` says.
fn pick_rows_from<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    filter: Filter<'b, DB>,
    limit: &'b i64,
    which: Which,
) -> QueryResult<()> {
    out.push_sql(" FROM ");
    M::push_table(out, &parts.table)?;
    out.push_sql(" WHERE ");
    claimable_predicate(out, parts, which)?;
    and_filter(out, filter)?;
    order_by(out, M::ORDER)?;
    if *limit == 1 {
        out.push_sql(" LIMIT 1");
        return Ok(());
    }
    out.push_sql(" LIMIT ");
    DB::bind_i64(out, limit)
}

/// The claim in one statement, in the backend's shape ([`ClaimSqlDialect::push_claim`](super::ClaimSqlDialect::push_claim)): update the
/// rows `pick_from` selects and return them.
// Read by the backends that claim in one statement (PostgreSQL, SQLite).
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub struct ClaimStmt<'a, M: ClaimSql<DB>, DB: SqlDialect> {
    pub(crate) parts: &'a ClaimParts<M, DB>,
    pub(crate) limit: i64,
    pub(crate) filter: Filter<'a, DB>,
}

impl<'a, M: ClaimSql<DB>, DB: SqlDialect> ClaimStmt<'a, M, DB> {
    pub(crate) fn new(parts: &'a ClaimParts<M, DB>, limit: i64, filter: Filter<'a, DB>) -> Self {
        ClaimStmt {
            parts,
            limit,
            filter,
        }
    }
}

impl<M: ClaimSql<DB>, DB: super::ClaimSqlDialect> QueryFragment<DB> for ClaimStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_claim(&mut out, self)
    }
}

/// `(<pk of row 1>) OR (<pk of row 2>) …` from the model's typed primary-key filters.
pub struct AnyPk<M: Claimable>(Vec<M::PkFilter>);

impl<M: Claimable> AnyPk<M> {
    #[cfg(feature = "mysql")]
    pub(crate) fn of(rows: &[M]) -> Self {
        AnyPk(rows.iter().map(|r| M::pk_filter(r.pk())).collect())
    }

    fn walk<'b, DB: SqlDialect>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()>
    where
        M: ClaimSql<DB>,
    {
        if self.0.is_empty() {
            out.push_sql("1 = 0");
        }
        for (i, f) in self.0.iter().enumerate() {
            if i > 0 {
                out.push_sql(" OR ");
            }
            out.push_sql("(");
            M::push_pk(out, f)?;
            out.push_sql(")");
        }
        Ok(())
    }
}

/// MySQL's claim statements after the pick, addressed by key: `UPDATE t SET <claim> WHERE <pk
/// in rows>` to mark the picked rows claimed, then `SELECT <model> FROM t WHERE <pk in rows>` to
/// read them back.
pub struct ByKeyStmt<'a, M: ClaimSql<DB>, DB: SqlDialect> {
    pub(crate) parts: &'a ClaimParts<M, DB>,
    pub(crate) rows: &'a AnyPk<M>,
    pub(crate) step: ByKey,
}

/// Which of [`ByKeyStmt`]'s two statements.
#[derive(Clone, Copy)]
pub enum ByKey {
    /// `UPDATE … SET <claim>`.
    MarkClaimed,
    /// `SELECT <model>`.
    ReadBack,
    /// `UPDATE … SET <state> = <failed>`: exhausted stale claims the reap picked.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    Fail,
    /// `SELECT <model> … AND <stale, rescuable> FOR UPDATE SKIP LOCKED`: lock the stale claims a
    /// probe found, if they still are and nobody holds them.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    LockStale,
    /// `SELECT <model> … AND <stale, out of attempts> FOR UPDATE SKIP LOCKED`: the reap's lock.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    LockExhausted,
}

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for ByKeyStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match self.step {
            ByKey::MarkClaimed => {
                out.push_sql("UPDATE ");
                M::push_table(&mut out, &self.parts.table)?;
                claim_assignments(&mut out, self.parts)?;
            }
            ByKey::ReadBack | ByKey::LockStale | ByKey::LockExhausted => {
                out.push_sql("SELECT ");
                M::push_select(&mut out, &self.parts.select)?;
                out.push_sql(" FROM ");
                M::push_table(&mut out, &self.parts.table)?;
            }
            ByKey::Fail => {
                let Some(failed) = &self.parts.failed else {
                    return Err(diesel::result::Error::QueryBuilderError(
                        "reaping needs a failed state".into(),
                    ));
                };
                out.push_sql("UPDATE ");
                M::push_table(&mut out, &self.parts.table)?;
                out.push_sql(" SET ");
                out.push_identifier(M::STATE)?;
                out.push_sql(" = ");
                failed.push(&mut out);
            }
        }
        out.push_sql(" WHERE (");
        self.rows.walk(&mut out)?;
        out.push_sql(")");
        match self.step {
            ByKey::LockStale => {
                out.push_sql(" AND ");
                claimable_predicate(&mut out, self.parts, Which::Stale)?;
            }
            ByKey::LockExhausted => {
                out.push_sql(" AND ");
                reap_predicate(&mut out, self.parts)?;
            }
            ByKey::MarkClaimed | ByKey::ReadBack | ByKey::Fail => return Ok(()),
        }
        out.push_sql(DB::SKIP_LOCKED);
        Ok(())
    }
}

/// Stale claims that used up their attempts go to the failed state instead of being handed out:
/// `UPDATE t SET state = $failed WHERE state = $claimed AND claimed_at < <cutoff> AND attempts >= $max`.
struct ReapStmt<'a, M: ClaimSql<DB>, DB: SqlDialect>(&'a ClaimParts<M, DB>);

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for ReapStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        M::push_table(&mut out, &self.0.table)?;
        out.push_sql(" SET ");
        out.push_identifier(M::STATE)?;
        out.push_sql(" = ");
        reap_failed(self.0)?.push(&mut out);
        out.push_sql(" WHERE ");
        reap_predicate(&mut out, self.0)
    }
}

/// The probe of MySQL's reap: `SELECT <model> FROM t WHERE <reap predicate> LIMIT $n`, a plain
/// read that locks nothing (see `reap_skip_locked`).
#[cfg(feature = "mysql")]
pub struct ReapProbeStmt<'a, M: ClaimSql<DB>, DB: SqlDialect> {
    pub(crate) parts: &'a ClaimParts<M, DB>,
    pub(crate) limit: i64,
}

#[cfg(feature = "mysql")]
impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for ReapProbeStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        M::push_select(&mut out, &self.parts.select)?;
        out.push_sql(" FROM ");
        M::push_table(&mut out, &self.parts.table)?;
        out.push_sql(" WHERE ");
        reap_predicate(&mut out, self.parts)?;
        out.push_sql(" LIMIT ");
        DB::bind_i64(&mut out, &self.limit)
    }
}

/// The state exhausted stale claims go to.
fn reap_failed<M: ClaimSql<DB>, DB: SqlDialect>(
    parts: &ClaimParts<M, DB>,
) -> QueryResult<&StateLiteral> {
    parts.failed.as_ref().ok_or_else(|| {
        diesel::result::Error::QueryBuilderError("reaping needs a failed state".into())
    })
}

/// `state = $claimed AND claimed_at < <cutoff> AND attempts >= $max`: stale claims that used up
/// their attempts.
fn reap_predicate<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
) -> QueryResult<()> {
    let (Some(claimed_at), Some(attempts), Some(cutoff), Some(max)) = (
        M::CLAIMED_AT,
        M::ATTEMPTS,
        &parts.cutoff,
        &parts.max_attempts,
    ) else {
        return Err(diesel::result::Error::QueryBuilderError(
            "reaping needs claimed_at, attempts, a failed state, a timeout and max_attempts".into(),
        ));
    };
    parts.claimed.push_eq(out, M::STATE)?;
    out.push_sql(" AND ");
    claimed_before(out, claimed_at, cutoff)?;
    out.push_sql(" AND ");
    out.push_identifier(attempts)?;
    out.push_sql(" >= ");
    DB::bind_i64(out, max)
}

/// Moves stale claims that used up their attempts to the failed state, when the model asks for
/// it; run in the claim's transaction, before the claim.
pub(crate) fn reap<M, C>(conn: &mut C, parts: &ClaimParts<M, C::Backend>) -> QueryResult<()>
where
    C: Dialect,
    M: ClaimModel<C>,
{
    if parts.needs_reap() {
        let reaped = conn
            .execute_returning_count(
                &Exec::<_, StmtId<M, shape::Reap, NoFilter, true, false>>::new(&ReapStmt(parts)),
            )?;
        if reaped > 0 {
            crate::observe::rescued(crate::observe::table_name::<M::Table>(), reaped);
        }
    }
    Ok(())
}

/// Owner-checked change of one claimed row:
/// `UPDATE t SET <change> WHERE <pk> AND state = <claimed> [AND owner = $stamp] [AND attempts = $n]`.
///
/// The old state and the claim's stamp are in the predicate, so "1 row" means "this caller still
/// owns this claim" on every backend, including MySQL's matched-rows count.
pub struct FinishStmt<M: Claimable> {
    pub(crate) table: M::Table,
    pub(crate) pk: M::PkFilter,
    pub(crate) change: Change<M::ClaimedAtSql>,
    pub(crate) owner: Option<Option<String>>,
    pub(crate) attempts: Option<Option<i64>>,
}

/// What an owner-checked statement changes.
pub enum Change<ST> {
    /// `state = <target>`; back to ready also clears the owner so the row looks unclaimed.
    State(Finish),
    /// `claimed_at = <db now>`: a heartbeat, so the claim is not rescued while its work runs.
    Touch(DbNow<ST>),
    /// A retry or a final failure (`claim/schedule.rs`).
    Retry(super::schedule::Retry),
}

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for FinishStmt<M> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        M::push_table(&mut out, &self.table)?;
        out.push_sql(" SET ");
        match &self.change {
            Change::State(to) => push_finish_assignments::<M, DB>(&mut out, *to)?,
            Change::Touch(now) => {
                let Some(claimed_at) = M::CLAIMED_AT else {
                    return Err(diesel::result::Error::QueryBuilderError(
                        "a heartbeat needs a claimed_at column".into(),
                    ));
                };
                out.push_identifier(claimed_at)?;
                out.push_sql(" = ");
                now.walk_ast(out.reborrow())?;
            }
            Change::Retry(retry) => super::schedule::push_retry::<M, DB>(&mut out, retry)?,
        }
        out.push_sql(" WHERE ");
        M::push_pk(&mut out, &self.pk)?;
        out.push_sql(" AND ");
        M::CLAIMED_SQL.push_eq(&mut out, M::STATE)?;
        push_stamp_check::<M, DB>(&mut out, &self.owner, &self.attempts)
    }
}

/// ` AND owner = $stamp AND attempts = $n`, for the columns the model maps: the claim a row was
/// handed out under.
pub(crate) fn push_stamp_check<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    owner: &'b Option<Option<String>>,
    attempts: &'b Option<Option<i64>>,
) -> QueryResult<()> {
    if let (Some(col), Some(owner)) = (M::OWNER, owner) {
        out.push_sql(" AND ");
        out.push_identifier(col)?;
        out.push_sql(" = ");
        DB::bind_opt_str(out, owner)?;
    }
    if let (Some(col), Some(attempts)) = (M::ATTEMPTS, attempts) {
        out.push_sql(" AND ");
        out.push_identifier(col)?;
        out.push_sql(" = ");
        DB::bind_opt_i64(out, attempts)?;
    }
    Ok(())
}

/// The state a finish moves a row to, as SQL: [`Error::Config`](crate::Error::Config) is
/// reported before a statement is built when the model has none.
pub(crate) fn finish_target<M: Claimable>(to: Finish) -> Option<StateLiteral> {
    match to {
        Finish::Done => M::DONE_SQL,
        Finish::Failed => M::FAILED_SQL,
        Finish::Ready => M::READY_SQL.first().copied(),
    }
}

/// `state = <target>`, and `owner = NULL` when the row goes back to ready (it then looks
/// unclaimed).
pub(crate) fn push_finish_assignments<M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, '_, DB>,
    to: Finish,
) -> QueryResult<()> {
    let Some(target) = finish_target::<M>(to) else {
        return Err(diesel::result::Error::QueryBuilderError(
            format!("the model has no {to:?} state").into(),
        ));
    };
    out.push_identifier(M::STATE)?;
    out.push_sql(" = ");
    target.push(out);
    if let (Finish::Ready, Some(owner)) = (to, M::OWNER) {
        out.push_sql(", ");
        out.push_identifier(owner)?;
        out.push_sql(" = NULL");
    }
    Ok(())
}

impl<M: Claimable> FinishStmt<M> {
    /// Runs this statement with its static query id (one per target: the text is the model's
    /// constants and the target's).
    pub(crate) fn execute<C: Dialect>(&self, conn: &mut C) -> QueryResult<usize>
    where
        M: ClaimSql<C::Backend>,
    {
        fn run<M: ClaimSql<C::Backend>, C: Dialect, const T: u8>(
            conn: &mut C,
            stmt: &FinishStmt<M>,
        ) -> QueryResult<usize> {
            conn.execute_returning_count(&Exec::<
                _,
                StmtId<M, shape::Finish<T>, NoFilter, false, false>,
            >::new(stmt))
        }
        match self.change {
            Change::State(Finish::Done) => run::<M, C, 0>(conn, self),
            Change::State(Finish::Failed) => run::<M, C, 1>(conn, self),
            Change::State(Finish::Ready) => run::<M, C, 2>(conn, self),
            Change::Touch(_) => run::<M, C, 3>(conn, self),
            // Its text depends on which of not-before and error it writes.
            Change::Retry(_) => conn.execute_returning_count(&Exec::<_, Dynamic>::new(self)),
        }
    }
}

/// `claimed_at < <cutoff> AND <latest instant claimed_at can stand for> < <cutoff>`: a claim is
/// stale only once even the latest real time behind its stored `claimed_at` (which a
/// whole-second column truncated or rounded) is older than the timeout. The plain comparison
/// first keeps an index on `claimed_at` usable.
fn claimed_before<'b, ST: crate::clock::TimestampType, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    claimed_at: &str,
    cutoff: &'b DbNowOffset<ST>,
) -> QueryResult<()> {
    out.push_identifier(claimed_at)?;
    out.push_sql(" < ");
    cutoff.walk_ast(out.reborrow())?;
    out.push_sql(" AND ");
    DB::push_stored_upper_bound(out, claimed_at)?;
    out.push_sql(" < ");
    cutoff.walk_ast(out.reborrow())
}

/// The rows a claim may take (`claimable_predicate`), as a boolean fragment of its own: what
/// the waiting lock by key (`claim::by_key`) checks. Owns its parts, so a statement can carry it.
pub struct ClaimablePredicate<M: ClaimSql<DB>, DB: SqlDialect>(pub(crate) ClaimParts<M, DB>);

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for ClaimablePredicate<M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        claimable_predicate(&mut out, &self.0, Which::Both)
    }
}
