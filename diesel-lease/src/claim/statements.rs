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

use std::borrow::Cow;
use std::marker::PhantomData;

use diesel::connection::LoadConnection;
use diesel::deserialize::FromSqlRow;
use diesel::expression::QueryMetadata;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::methods::LoadQuery;
use diesel::{QueryResult, RunQueryDsl, SelectableHelper};

use super::schedule::TimeColumn;
use super::{Claimable, Finish, SortOrder, StateLiteral};
use crate::backend::{Dialect, SqlDialect};
use crate::clock::{DbNow, DbNowOffset, TimestampType};

/// What the claim statements need of the table they claim from, besides its names and states
/// ([`ClaimShape`]): the `FROM` fragment, what a claim returns, and the claimed-at column's SQL
/// type. Every `ClaimSql` model is one. A tool that describes a table at run time (the
/// operator's `doctor`) implements it for its description, and then builds, and `EXPLAIN`s,
/// the very statements a model's claims send ([`ClaimDialect::claim_statements`](super::ClaimDialect::claim_statements)).
pub trait ClaimTarget<DB: SqlDialect> {
    /// The table, as the statements name it (`FROM <this>`).
    type From: QueryFragment<DB> + Send;
    /// What a claim returns (`RETURNING <this>`, MySQL's `SELECT <this>`).
    type Select: QueryFragment<DB> + Send;
    /// The claimed-at column's SQL type: whether a claim writes and compares an instant or a
    /// UTC wall-clock time.
    type ClaimedAt: TimestampType;
}

/// What the claim statements need of model `M` on backend `DB`: its table, its selection and
/// its state values as SQL. Implemented for every [`Claimable`] model whose columns the backend
/// can read and write; the statements are then written once with `M: ClaimSql<DB>` alone.
pub trait ClaimSql<DB: SqlDialect>: Claimable + ClaimTarget<DB> {
    /// The model's table as a [`ClaimTarget::From`].
    fn from() -> <Self as ClaimTarget<DB>>::From;
    /// `SELECT`'s column list for the model (`Selectable::as_select()`).
    fn select() -> <Self as ClaimTarget<DB>>::Select;
    fn push_table<'b>(out: &mut AstPass<'_, 'b, DB>, table: &'b Self::Table) -> QueryResult<()>;
    fn push_select<'b>(
        out: &mut AstPass<'_, 'b, DB>,
        select: &'b <Self as ClaimTarget<DB>>::Select,
    ) -> QueryResult<()>;
    fn push_pk<'b>(out: &mut AstPass<'_, 'b, DB>, pk: &'b Self::PkFilter) -> QueryResult<()>;
    fn push_pk_value<'b>(out: &mut AstPass<'_, 'b, DB>, pk: &'b Self::PkValue) -> QueryResult<()>;
}

impl<M, DB> ClaimTarget<DB> for M
where
    M: Claimable + diesel::Selectable<DB>,
    DB: SqlDialect,
    M::Table: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    M::PkValue: QueryFragment<DB>,
    diesel::dsl::AsSelect<M, DB>: QueryFragment<DB> + Send,
{
    type From = M::Table;
    type Select = diesel::dsl::AsSelect<M, DB>;
    type ClaimedAt = M::ClaimedAtSql;
}

impl<M, DB> ClaimSql<DB> for M
where
    M: Claimable + diesel::Selectable<DB>,
    DB: SqlDialect,
    M::Table: QueryFragment<DB>,
    M::PkFilter: QueryFragment<DB>,
    M::PkValue: QueryFragment<DB>,
    diesel::dsl::AsSelect<M, DB>: QueryFragment<DB> + Send,
{
    fn from() -> M::Table {
        M::Table::default()
    }
    fn select() -> diesel::dsl::AsSelect<M, DB> {
        M::as_select()
    }
    fn push_table<'b>(out: &mut AstPass<'_, 'b, DB>, table: &'b M::Table) -> QueryResult<()> {
        table.walk_ast(out.reborrow())
    }
    fn push_select<'b>(
        out: &mut AstPass<'_, 'b, DB>,
        select: &'b diesel::dsl::AsSelect<M, DB>,
    ) -> QueryResult<()> {
        select.walk_ast(out.reborrow())
    }
    fn push_pk<'b>(out: &mut AstPass<'_, 'b, DB>, pk: &'b M::PkFilter) -> QueryResult<()> {
        pk.walk_ast(out.reborrow())
    }
    fn push_pk_value<'b>(out: &mut AstPass<'_, 'b, DB>, pk: &'b M::PkValue) -> QueryResult<()> {
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

    /// Runs a statement that returns one `INTEGER` column (a batch's positions, see
    /// `batch.rs`), with query id `K`.
    fn load_positions<K: QueryId>(
        conn: &mut C,
        stmt: &dyn QueryFragment<C::Backend>,
    ) -> QueryResult<Vec<i32>>;
}

impl<M, C> ClaimModel<C> for M
where
    C: Dialect + LoadConnection,
    M: ClaimSql<C::Backend>,
    for<'a> Rows<'a, M, C::Backend>: LoadQuery<'a, C, M>,
    for<'a> Column1<'a, C::Backend, diesel::sql_types::Integer>: LoadQuery<'a, C, i32>,
    // What `LoadQuery` asks of `Column1<'_, _, Integer, K>` for any `K`.
    i32: diesel::deserialize::FromSql<diesel::sql_types::Integer, C::Backend>,
    C::Backend: QueryMetadata<diesel::sql_types::Integer>,
    // What Diesel's `LoadQuery` asks of any `Rows<'_, M, _, K>` (it is independent of `K`).
    C::Backend: QueryMetadata<diesel::dsl::AsSelect<M, C::Backend>>,
    M: diesel::Selectable<C::Backend>,
    // Diesel 2.4 loads a selection through its SQL type's `SqlTypeLikeMarker` (for a model's
    // columns, the selection's own SQL type); what its `CompatibleType` impl for `SelectBy` asks.
    M: FromSqlRow<LoadSql<M, C::Backend>, C::Backend>,
    SelectSql<M, C::Backend>: diesel::sql_types::SqlType
        + diesel::expression::TypedExpressionType
        + diesel::deserialize::SqlTypeLikeMarker
        + 'static,
{
    fn load<K: QueryId>(conn: &mut C, stmt: &dyn QueryFragment<C::Backend>) -> QueryResult<Vec<M>> {
        Rows::<M, C::Backend, K> {
            stmt,
            _m: PhantomData,
        }
        .load(conn)
    }

    fn load_positions<K: QueryId>(
        conn: &mut C,
        stmt: &dyn QueryFragment<C::Backend>,
    ) -> QueryResult<Vec<i32>> {
        Column1::<_, diesel::sql_types::Integer, K>::new(stmt).load(conn)
    }
}

/// Any statement whose rows are one column of SQL type `ST`, as a Diesel query with query id
/// `K` ([`Dynamic`] by default: Diesel caches it by its text). Batch positions load through it,
/// and the rate limits' texts and counts.
pub struct Column1<'a, DB, ST, K = Dynamic> {
    stmt: &'a dyn QueryFragment<DB>,
    _st: PhantomData<(ST, K)>,
}

impl<'a, DB, ST, K> Column1<'a, DB, ST, K> {
    /// `stmt`, whose rows are one column of SQL type `ST`.
    pub(crate) fn new(stmt: &'a dyn QueryFragment<DB>) -> Self {
        Column1 {
            stmt,
            _st: PhantomData,
        }
    }
}

impl<DB, ST, K: QueryId> QueryId for Column1<'_, DB, ST, K> {
    type QueryId = K::QueryId;
    const HAS_STATIC_QUERY_ID: bool = K::HAS_STATIC_QUERY_ID;
}
impl<DB, ST: diesel::sql_types::SqlType + diesel::expression::TypedExpressionType, K> Query
    for Column1<'_, DB, ST, K>
{
    type SqlType = ST;
}
impl<DB: diesel::backend::Backend, ST, K> QueryFragment<DB> for Column1<'_, DB, ST, K> {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.stmt.walk_ast(out)
    }

    fn is_safe_to_cache_prepared(&self, backend: &DB) -> QueryResult<bool> {
        self.stmt.is_safe_to_cache_prepared(backend)
    }
}
impl<DB, ST, Conn, K> RunQueryDsl<Conn> for Column1<'_, DB, ST, K> {}

/// The SQL type of model `M`'s selection on `DB`.
type SelectSql<M, DB> = diesel::dsl::SqlTypeOf<<M as diesel::Selectable<DB>>::SelectExpression>;
/// The SQL type Diesel 2.4 builds a model's rows from (see `SqlTypeLikeMarker`).
type LoadSql<M, DB> = <SelectSql<M, DB> as diesel::deserialize::SqlTypeLikeMarker>::SqlType;

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

    fn is_safe_to_cache_prepared(&self, backend: &DB) -> QueryResult<bool> {
        self.stmt.is_safe_to_cache_prepared(backend)
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
pub(crate) struct StmtId<M, S, F, const RESCUE: bool, const ONE: bool>(PhantomData<(M, S, F)>);

impl<M: 'static, S: 'static, F: QueryId, const RESCUE: bool, const ONE: bool> QueryId
    for StmtId<M, S, F, RESCUE, ONE>
{
    type QueryId = StmtId<M, S, F::QueryId, RESCUE, ONE>;
    const HAS_STATIC_QUERY_ID: bool = F::HAS_STATIC_QUERY_ID;
}

pub(crate) use crate::backend::Dynamic;
pub(crate) use crate::backend::Exec;

/// The filter id of a statement without a caller filter.
pub struct NoFilter;

impl QueryId for NoFilter {
    type QueryId = NoFilter;
    const HAS_STATIC_QUERY_ID: bool = true;
}

/// Statement shapes, for [`StmtId`].
pub(crate) mod shape {
    /// The one-statement claim (`ClaimStmt`).
    pub(crate) struct Claim;
    /// The locking pick (`PickStmt`).
    pub(crate) struct Pick;
    /// Retiring exhausted stale claims.
    pub(crate) struct Reap;
    /// An owner-checked change of one row; `T` is the target (0 done, 1 failed, 2 ready, 3 touch).
    pub(crate) struct Finish<const T: u8>;
    /// MySQL's mark-claimed and read-back of one picked row.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
    pub(crate) struct ByKeyOne<const STEP: u8>;
    /// SQLite's write-lock statement.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) struct WriteLock;
}

/// Loads the rows of `stmt`, a pick of `limit` rows, with the [`StmtId`] of shape `S` and filter
/// id `F` that matches `rescue` (the predicate includes stale claims) and whether the limit is
/// the inline `LIMIT 1`. A batch size written inline ([`inline_limit`]) makes the text depend on
/// the size, so that statement is cached by its text ([`Dynamic`]): one prepared statement per
/// size and connection.
pub(crate) fn load_shaped<M, C, S, F>(
    conn: &mut C,
    stmt: &dyn QueryFragment<C::Backend>,
    rescue: bool,
    limit: i64,
) -> QueryResult<Vec<M>>
where
    C: Dialect,
    M: ClaimModel<C>,
    S: 'static,
    F: QueryId,
{
    let one = limit == 1;
    if !one && inline_limit::<C::Backend>(limit).is_some() {
        return M::load::<Dynamic>(conn, stmt);
    }
    match (rescue, one) {
        (false, false) => M::load::<StmtId<M, S, F, false, false>>(conn, stmt),
        (false, true) => M::load::<StmtId<M, S, F, false, true>>(conn, stmt),
        (true, false) => M::load::<StmtId<M, S, F, true, false>>(conn, stmt),
        (true, true) => M::load::<StmtId<M, S, F, true, true>>(conn, stmt),
    }
}

/// An optional caller filter, type-erased so statements need no extra type parameter.
pub(crate) type Filter<'a, DB> = Option<&'a (dyn QueryFragment<DB> + 'a)>;

/// The names and states of the table a claim works on, as its statements write them: a model's
/// derived constants ([`ClaimShape::of`]), or a table described at run time (the operator's
/// `doctor`, which then `EXPLAIN`s the statements a model of this shape sends).
#[derive(Debug, Clone, Copy)]
pub struct ClaimShape {
    /// Primary-key column names, in key order.
    pub pk: &'static [&'static str],
    /// The state column.
    pub state: &'static str,
    /// The ready states (a claim takes rows in one of them).
    pub ready: &'static [StateLiteral],
    /// The claimed state.
    pub claimed: StateLiteral,
    /// The failed state, if any.
    pub failed: Option<StateLiteral>,
    /// The owner column, if mapped.
    pub owner: Option<&'static str>,
    /// The claimed-at column, if mapped.
    pub claimed_at: Option<&'static str>,
    /// The attempts column, if mapped.
    pub attempts: Option<&'static str>,
    /// Whether the attempts column may hold NULL: the claim's increment then counts it as 0
    /// (`COALESCE(attempts, 0) + 1`); `true` when not known.
    pub attempts_nullable: bool,
    /// Stale claims with this many attempts are failed instead of handed out.
    pub max_attempts: Option<i64>,
    /// The not-before column, if mapped.
    pub available_at: Option<TimeColumn>,
    /// The claim order.
    pub order: &'static [(&'static str, SortOrder)],
    /// Whether claims skip paused rows (`pausable`), and the column a pause may name a key of.
    pub pause: Option<super::pause::PauseShape>,
}

impl ClaimShape {
    /// The shape of model `M`, from its derived constants.
    pub const fn of<M: Claimable>() -> ClaimShape {
        ClaimShape {
            pk: M::PK,
            state: M::STATE,
            ready: M::READY_SQL,
            claimed: M::CLAIMED_SQL,
            failed: M::FAILED_SQL,
            owner: M::OWNER,
            claimed_at: M::CLAIMED_AT,
            attempts: M::ATTEMPTS,
            attempts_nullable: M::ATTEMPTS_NULLABLE,
            max_attempts: M::MAX_ATTEMPTS,
            available_at: M::AVAILABLE_AT,
            order: M::ORDER,
            pause: M::PAUSE,
        }
    }
}

/// What every claim-family statement needs to know: the target's table, selection and
/// [`ClaimShape`], the owner, and the stale cutoff, on backend `DB`.
pub struct ClaimParts<M: ClaimTarget<DB>, DB: SqlDialect> {
    pub(crate) table: M::From,
    pub(crate) select: M::Select,
    pub(crate) shape: ClaimShape,
    pub(crate) now: DbNow<M::ClaimedAt>,
    pub(crate) owner: String,
    /// Claims older than this are claimable again (when a claimed-at column is mapped).
    pub(crate) cutoff: Option<DbNowOffset<M::ClaimedAt>>,
    pub(crate) max_attempts: Option<i64>,
    /// The name the table's pauses are stored under, for a `pausable` shape.
    pub(crate) pause_name: Option<String>,
}

impl<M: ClaimSql<DB>, DB: SqlDialect> ClaimParts<M, DB> {
    /// `owner` is what the claim writes into the owner column: a fresh
    /// [`ClaimStamp`](lease_core::ClaimStamp) per claim (moved in, not copied).
    pub(crate) fn new(owner: impl Into<String>, timeout_micros: Option<i64>) -> Self {
        Self::described(
            M::from(),
            M::select(),
            ClaimShape::of::<M>(),
            owner,
            timeout_micros,
        )
    }
}

impl<M: ClaimTarget<DB>, DB: SqlDialect> ClaimParts<M, DB> {
    /// The parts of a claim of `shape` from `table`, returning `select`, by `owner`, rescuing
    /// claims older than `timeout_micros` (when the shape has a claimed-at column).
    pub fn described(
        table: M::From,
        select: M::Select,
        shape: ClaimShape,
        owner: impl Into<String>,
        timeout_micros: Option<i64>,
    ) -> Self {
        let cutoff = match (shape.claimed_at, timeout_micros) {
            (Some(_), Some(t)) => Some(DbNowOffset::ago(t)),
            _ => None,
        };
        let pause_name = shape.pause.map(|_| super::pause::pause_name::<DB>(&table));
        ClaimParts {
            table,
            select,
            shape,
            now: DbNow::new(),
            owner: owner.into(),
            cutoff,
            max_attempts: shape.max_attempts.filter(|_| shape.attempts.is_some()),
            pause_name,
        }
    }

    /// Whether the claimable predicate includes stale claims (a `StmtId` parameter).
    pub fn rescues(&self) -> bool {
        self.cutoff.is_some()
    }

    /// Whether stale claims that used up their attempts must go to the failed state before a
    /// claim (so they are never handed out again).
    pub fn needs_reap(&self) -> bool {
        self.cutoff.is_some() && self.max_attempts.is_some() && self.shape.failed.is_some()
    }

    /// The shape these parts were built from.
    pub fn shape(&self) -> &ClaimShape {
        &self.shape
    }
}

/// What one statement of a claim does (see
/// [`ClaimDialect::claim_statements`](super::ClaimDialect::claim_statements)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStep {
    /// Picks and claims rows in one statement (PostgreSQL, SQLite).
    Claim,
    /// Picks ready rows and locks them, skipping locked ones (MySQL, which then marks them).
    ReadyPick,
    /// Finds stale claims to rescue with a plain read (MySQL, which then locks them by key).
    StaleProbe,
    /// Moves stale claims that used up their attempts to the failed state, before the claim
    /// and in its transaction (PostgreSQL, SQLite).
    Reap,
    /// Finds stale claims that used up their attempts with a plain read (MySQL's reap, which
    /// then locks and fails them by key).
    ReapProbe,
}

impl ClaimStep {
    /// Whether the statement takes rows in the claim order (`ORDER BY … LIMIT`).
    pub fn in_claim_order(self) -> bool {
        matches!(
            self,
            ClaimStep::Claim | ClaimStep::ReadyPick | ClaimStep::StaleProbe
        )
    }

    /// Whether it reads only claimed rows (stale claims): not the backlog of ready rows.
    pub fn reads_claimed_rows_only(self) -> bool {
        matches!(
            self,
            ClaimStep::StaleProbe | ClaimStep::Reap | ClaimStep::ReapProbe
        )
    }
}

/// One statement a claim sends, for review: what it does, and the statement itself.
pub struct ClaimStatement<'a, DB: diesel::backend::Backend> {
    /// What it does.
    pub step: ClaimStep,
    /// The statement, as the claim builds it.
    pub statement: Box<dyn QueryFragment<DB> + 'a>,
}

impl<'a, DB: diesel::backend::Backend> ClaimStatement<'a, DB> {
    pub(crate) fn new(step: ClaimStep, statement: impl QueryFragment<DB> + 'a) -> Self {
        ClaimStatement {
            step,
            statement: Box::new(statement),
        }
    }
}

/// `state` is one of `values` (`= 'ready'`, `IN (…)`, `IS NULL`), written as the claim writes
/// it. [`StatesIn::claimable`] is the state test every row a claim may take passes, and so the
/// predicate of the partial index that serves the claim: the claim's `WHERE` carries this very
/// text, which is what lets SQLite match it (it matches a partial index by its terms).
#[derive(Debug, Clone)]
pub struct StatesIn {
    column: &'static str,
    values: Vec<StateLiteral>,
}

impl StatesIn {
    /// The ready states, and the claimed state when the claim rescues stale claims.
    pub fn claimable(shape: &ClaimShape, rescues: bool) -> StatesIn {
        let mut values = shape.ready.to_vec();
        if rescues && !values.contains(&shape.claimed) {
            values.push(shape.claimed);
        }
        StatesIn {
            column: shape.state,
            values,
        }
    }

    /// The claimed state: the rows a reap of stale claims reads.
    pub fn claimed(shape: &ClaimShape) -> StatesIn {
        StatesIn {
            column: shape.state,
            values: vec![shape.claimed],
        }
    }
}

impl StatesIn {
    fn push<DB: SqlDialect>(&self, out: &mut AstPass<'_, '_, DB>) -> QueryResult<()> {
        StateLiteral::push_in(&self.values, out, self.column)
    }
}

impl<DB: SqlDialect> QueryFragment<DB> for StatesIn {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.push(&mut out)
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
pub(crate) fn qualified<'b, M: ClaimTarget<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    col: &str,
) -> QueryResult<()> {
    parts.table.walk_ast(out.reborrow())?;
    out.push_sql(".");
    out.push_identifier(col)
}

/// The rows a claim may take: ready ones, and (with a claimed-at column and a timeout) stale
/// claims that have attempts left. Bare column names: used inside single-table statements.
///
/// With the rescue, both branches are behind one state test, [`StatesIn::claimable`]:
/// `(state IN (<ready>, <claimed>) AND (<ready> OR (<stale>)))`. It changes no result, and it is
/// the predicate of the partial index that serves the claim, which SQLite uses only when the
/// `WHERE` has that very term (PostgreSQL proves the `OR` implies it either way).
fn claimable_predicate<'b, M: ClaimTarget<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    which: Which,
) -> QueryResult<()> {
    let shape = &parts.shape;
    out.push_sql("(");
    let both = which == Which::Both && parts.rescues();
    if both {
        StatesIn::claimable(shape, true).push(out)?;
        out.push_sql(" AND (");
    }
    if which != Which::Stale {
        StateLiteral::push_in(shape.ready, out, shape.state)?;
    }
    if let (Some(claimed_at), Some(cutoff), true) =
        (shape.claimed_at, &parts.cutoff, which != Which::Ready)
    {
        if which == Which::Both {
            out.push_sql(" OR ");
        }
        out.push_sql("(");
        shape.claimed.push_eq(out, shape.state)?;
        out.push_sql(" AND ");
        claimed_before(out, claimed_at, cutoff)?;
        if let (Some(attempts), Some(max)) = (shape.attempts, &parts.max_attempts) {
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
    if both {
        out.push_sql(")");
    }
    out.push_sql(")");
    super::schedule::push_not_before(out, shape.available_at)?;
    super::pause::push_not_paused(out, shape.pause, parts.pause_name.as_deref(), &parts.table)
}

/// Which claimable rows a pick looks at: ready or stale (one statement, PostgreSQL and SQLite),
/// or one of the two (MySQL's claims, see `claim/mysql_like.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// Ready rows, and stale claims that may be rescued.
    Both,
    /// Ready rows only.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
    Ready,
    /// Stale claims that may be rescued only.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
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

/// `SET state = $claimed, owner = $owner, claimed_at = <db now>, attempts = attempts + 1`
/// (`COALESCE(attempts, 0) + 1` for a nullable count).
pub(crate) fn claim_assignments<'b, M: ClaimTarget<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
) -> QueryResult<()> {
    let shape = &parts.shape;
    out.push_sql(" SET ");
    out.push_identifier(shape.state)?;
    out.push_sql(" = ");
    shape.claimed.push(out);
    if let Some(owner) = shape.owner {
        out.push_sql(", ");
        out.push_identifier(owner)?;
        out.push_sql(" = ");
        DB::bind_str(out, &parts.owner)?;
    }
    if let Some(claimed_at) = shape.claimed_at {
        out.push_sql(", ");
        out.push_identifier(claimed_at)?;
        out.push_sql(" = ");
        parts.now.walk_ast(out.reborrow())?;
    }
    if let Some(attempts) = shape.attempts {
        out.push_sql(", ");
        out.push_identifier(attempts)?;
        out.push_sql(" = ");
        if shape.attempts_nullable {
            // A nullable column's NULL counts as 0: `NULL + 1` would stay NULL, and the owner
            // check (`attempts = $n`) would then match nothing.
            out.push_sql("COALESCE(");
            out.push_identifier(attempts)?;
            out.push_sql(", 0)");
        } else {
            out.push_identifier(attempts)?;
        }
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
pub(crate) struct PickStmt<'a, M: ClaimTarget<DB>, DB: SqlDialect> {
    parts: &'a ClaimParts<M, DB>,
    limit: i64,
    filter: Filter<'a, DB>,
    which: Which,
    /// Appends the backend's `FOR UPDATE SKIP LOCKED`; without it, a plain read (a probe).
    lock: bool,
}

impl<'a, M: ClaimTarget<DB>, DB: SqlDialect> PickStmt<'a, M, DB> {
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
    #[cfg(feature = "__mysql_like")]
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

impl<M: ClaimTarget<DB>, DB: SqlDialect> QueryFragment<DB> for PickStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        self.parts.select.walk_ast(out.reborrow())?;
        pick_rows_from(&mut out, self.parts, self.filter, &self.limit, self.which)?;
        if self.lock {
            out.push_sql(DB::SKIP_LOCKED);
        }
        Ok(())
    }
}

/// ` FROM t WHERE <claimable> [AND (filter)] ORDER BY … LIMIT $n`: which rows a claim takes.
/// Some limits are written inline ([`inline_limit`]): `LIMIT 1` everywhere, so `claim_next`'s text
/// has no limit parameter, and the usual batch sizes on PostgreSQL.
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub(crate) fn pick_from<'b, M: ClaimTarget<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    filter: Filter<'b, DB>,
    limit: &'b i64,
) -> QueryResult<()> {
    pick_rows_from(out, parts, filter, limit, Which::Both)
}

/// [`pick_from`] of the rows `which` says.
fn pick_rows_from<'b, M: ClaimTarget<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
    filter: Filter<'b, DB>,
    limit: &'b i64,
    which: Which,
) -> QueryResult<()> {
    out.push_sql(" FROM ");
    parts.table.walk_ast(out.reborrow())?;
    out.push_sql(" WHERE ");
    claimable_predicate(out, parts, which)?;
    and_filter(out, filter)?;
    order_by(out, parts.shape.order)?;
    if let Some(text) = inline_limit::<DB>(*limit) {
        out.push_sql(text);
        return Ok(());
    }
    out.push_sql(" LIMIT ");
    DB::bind_i64(out, limit)
}

/// The batch sizes whose `LIMIT` a claim writes into its text where the backend plans each
/// prepared statement by its text ([`SqlDialect::INLINE_LIMITS`]: PostgreSQL): the sizes people
/// choose. A claim of another size binds its limit (and PostgreSQL plans it on every call).
/// The text comes from this table, never from the caller's number. The claiming guide ("States are SQL
/// constants") lists these sizes.
const INLINE_LIMITS: [(i64, &str); 20] = [
    (2, " LIMIT 2"),
    (3, " LIMIT 3"),
    (4, " LIMIT 4"),
    (5, " LIMIT 5"),
    (8, " LIMIT 8"),
    (10, " LIMIT 10"),
    (16, " LIMIT 16"),
    (20, " LIMIT 20"),
    (25, " LIMIT 25"),
    (32, " LIMIT 32"),
    (40, " LIMIT 40"),
    (50, " LIMIT 50"),
    (64, " LIMIT 64"),
    (100, " LIMIT 100"),
    (128, " LIMIT 128"),
    (200, " LIMIT 200"),
    (250, " LIMIT 250"),
    (256, " LIMIT 256"),
    (500, " LIMIT 500"),
    (1000, " LIMIT 1000"),
];

/// The `LIMIT` clause a pick of `limit` rows writes as text, or `None` when it binds the
/// limit: ` LIMIT 1` on every backend (`claim_next`'s text has no limit parameter), and on a
/// backend with [`SqlDialect::INLINE_LIMITS`] the sizes of [`INLINE_LIMITS`].
pub(crate) fn inline_limit<DB: SqlDialect>(limit: i64) -> Option<&'static str> {
    if limit == 1 {
        return Some(" LIMIT 1");
    }
    if !DB::INLINE_LIMITS {
        return None;
    }
    INLINE_LIMITS
        .iter()
        .find(|(n, _)| *n == limit)
        .map(|(_, text)| *text)
}

/// The claim in one statement, in the backend's shape ([`ClaimSqlDialect::push_claim`](super::ClaimSqlDialect::push_claim)): update the
/// rows `pick_from` selects and return them.
// Read by the backends that claim in one statement (PostgreSQL, SQLite).
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub struct ClaimStmt<'a, M: ClaimTarget<DB>, DB: SqlDialect> {
    pub(crate) parts: &'a ClaimParts<M, DB>,
    pub(crate) limit: i64,
    pub(crate) filter: Filter<'a, DB>,
}

impl<'a, M: ClaimTarget<DB>, DB: SqlDialect> ClaimStmt<'a, M, DB> {
    pub(crate) fn new(parts: &'a ClaimParts<M, DB>, limit: i64, filter: Filter<'a, DB>) -> Self {
        ClaimStmt {
            parts,
            limit,
            filter,
        }
    }
}

impl<M: ClaimTarget<DB>, DB: super::ClaimSqlDialect> QueryFragment<DB> for ClaimStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        DB::push_claim(&mut out, self)
    }

    /// Diesel asks this before every execution, by default with a walk of the whole statement.
    /// Only the parts Diesel types bring can say no (the table, the selection, the caller's
    /// filter); the rest is this crate's text, with binds fixed in number.
    fn is_safe_to_cache_prepared(&self, backend: &DB) -> QueryResult<bool> {
        let safe = self.parts.table.is_safe_to_cache_prepared(backend)?
            && self.parts.select.is_safe_to_cache_prepared(backend)?
            && self
                .filter
                .map_or(Ok(true), |filter| filter.is_safe_to_cache_prepared(backend))?;
        debug_assert_walk_agrees(self, backend, safe);
        Ok(safe)
    }
}

/// In debug builds (the test suites), that Diesel's default answer to the cache question, a walk
/// of `stmt`'s whole text, is `answer`: the statements that answer without the walk
/// ([`ClaimStmt`], [`FinishStmt`]) are checked against it on every execution, so a part added
/// to them that must not be cached cannot go unnoticed.
fn debug_assert_walk_agrees<DB: diesel::backend::Backend>(
    stmt: &dyn QueryFragment<DB>,
    backend: &DB,
    answer: bool,
) {
    /// `stmt`'s text alone, with Diesel's default answer.
    struct Walked<'a, DB>(&'a dyn QueryFragment<DB>);
    impl<DB: diesel::backend::Backend> QueryFragment<DB> for Walked<'_, DB> {
        fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
            self.0.walk_ast(out)
        }
    }
    if cfg!(debug_assertions) {
        let walked = Walked(stmt).is_safe_to_cache_prepared(backend);
        debug_assert!(
            walked.as_ref().map_or(true, |walked| *walked == answer),
            "the cache answer without a walk ({answer}) differs from the walk's ({walked:?})"
        );
    }
}

/// The rows of a statement by key: `<pk> IN (?, ?, …)` for a one-column key, from the model's
/// typed key values; `(<pk of row 1>) OR (<pk of row 2>) …` from its typed primary-key filters
/// for a composite key.
///
/// Not a disjunction where a list will do: the server tests an `IN` list by a sorted lookup,
/// a disjunction term by term, and when its statistics misjudge the rows in a state (taken
/// before a large claim) MariaDB reads a state index and tests the list on every entry of it:
/// with 200 `OR` terms a 70,000-row claim cost it a minute of CPU.
#[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))] // MySQL's and MariaDB's
pub(crate) enum AnyPk<M: Claimable> {
    /// A one-column key: `<pk> IN (?, …)` (empty: matches nothing).
    Values(Vec<M::PkValue>),
    /// A composite key: one typed primary-key filter per row, joined by `OR`.
    Filters(Vec<M::PkFilter>),
}

impl<M: Claimable> AnyPk<M> {
    /// The keys of `rows`, the last one repeated up to `len` keys in all (at least
    /// `rows.len()`): a repeated key matches its row once, and statements padded to a few
    /// lengths are a few prepared statements on the server instead of one per row count.
    #[cfg(feature = "__mysql_like")]
    pub(crate) fn padded(rows: &[M], len: usize) -> Self {
        let last = rows.len().saturating_sub(1);
        let len = if rows.is_empty() {
            0
        } else {
            len.max(rows.len())
        };
        let keys = || (0..len).map(|i| rows[i.min(last)].pk());
        match keys().map(M::pk_value).collect::<Option<Vec<_>>>() {
            Some(values) => AnyPk::Values(values),
            None => AnyPk::Filters(keys().map(M::pk_filter).collect()),
        }
    }

    fn walk<'b, DB: SqlDialect>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()>
    where
        M: ClaimSql<DB>,
    {
        match self {
            AnyPk::Values(values) if values.is_empty() => out.push_sql("1 = 0"),
            AnyPk::Filters(filters) if filters.is_empty() => out.push_sql("1 = 0"),
            AnyPk::Values(values) => {
                out.push_identifier(M::PK[0])?;
                out.push_sql(" IN (");
                for (i, v) in values.iter().enumerate() {
                    if i > 0 {
                        out.push_sql(", ");
                    }
                    M::push_pk_value(out, v)?;
                }
                out.push_sql(")");
            }
            AnyPk::Filters(filters) => {
                for (i, f) in filters.iter().enumerate() {
                    if i > 0 {
                        out.push_sql(" OR ");
                    }
                    out.push_sql("(");
                    M::push_pk(out, f)?;
                    out.push_sql(")");
                }
            }
        }
        Ok(())
    }
}

/// MySQL's claim statements after the pick, addressed by key: `UPDATE t SET <claim> WHERE <pk
/// in rows> AND <claimable>` to mark the picked rows claimed, then `SELECT <model> FROM t WHERE
/// <pk in rows> AND <claimed by this claim> FOR UPDATE` to read back exactly the rows it marked.
///
/// Both check the row again although the pick locked it: a multi-primary cluster (Galera)
/// replicates writes, not row locks, so another node's claim of the same row may have been
/// applied here since the pick. The marking then matches fewer rows than were picked, and the
/// read-back is a current (locking) read of this claim's own stamp, never a snapshot.
pub(crate) struct ByKeyStmt<'a, M: ClaimSql<DB>, DB: SqlDialect> {
    pub(crate) parts: &'a ClaimParts<M, DB>,
    pub(crate) rows: &'a AnyPk<M>,
    pub(crate) step: ByKey,
    /// The caller's filter, which [`ByKey::LockStale`] checks again: the probe that found the
    /// rows locked nothing, so a row's filter columns may have changed since.
    pub(crate) filter: Filter<'a, DB>,
}

impl<'a, M: ClaimSql<DB>, DB: SqlDialect> ByKeyStmt<'a, M, DB> {
    /// `step` on `rows`, without a caller filter.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
    pub(crate) fn new(parts: &'a ClaimParts<M, DB>, rows: &'a AnyPk<M>, step: ByKey) -> Self {
        ByKeyStmt {
            parts,
            rows,
            step,
            filter: None,
        }
    }
}

/// Which of [`ByKeyStmt`]'s two statements.
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))] // MySQL's and MariaDB's
pub(crate) enum ByKey {
    /// `UPDATE … SET <claim> … AND <claimable>`.
    MarkClaimed,
    /// `SELECT <model> … AND <state> = <claimed> [AND <owner> = <this claim's stamp>] FOR UPDATE`.
    ReadBack,
    /// `UPDATE … SET <state> = <failed>`: exhausted stale claims the reap picked.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
    Fail,
    /// `SELECT <model> … AND <stale, rescuable> [AND (filter)] FOR UPDATE SKIP LOCKED`: lock the
    /// stale claims a probe found, if they still are (and still match the caller's filter) and
    /// nobody holds them.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
    LockStale,
    /// `SELECT <model> … AND <stale, out of attempts> FOR UPDATE SKIP LOCKED`: the reap's lock.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
    LockExhausted,
}

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for ByKeyStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match self.step {
            ByKey::MarkClaimed => {
                out.push_sql("UPDATE ");
                self.parts.table.walk_ast(out.reborrow())?;
                claim_assignments(&mut out, self.parts)?;
            }
            ByKey::ReadBack | ByKey::LockStale | ByKey::LockExhausted => {
                out.push_sql("SELECT ");
                self.parts.select.walk_ast(out.reborrow())?;
                out.push_sql(" FROM ");
                self.parts.table.walk_ast(out.reborrow())?;
            }
            ByKey::Fail => {
                let failed = reap_failed(self.parts)?;
                out.push_sql("UPDATE ");
                self.parts.table.walk_ast(out.reborrow())?;
                out.push_sql(" SET ");
                out.push_identifier(self.parts.shape.state)?;
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
                and_filter(&mut out, self.filter)?;
            }
            ByKey::LockExhausted => {
                out.push_sql(" AND ");
                reap_predicate(&mut out, self.parts)?;
            }
            ByKey::MarkClaimed => {
                out.push_sql(" AND ");
                return claimable_predicate(&mut out, self.parts, Which::Both);
            }
            ByKey::ReadBack => {
                let shape = &self.parts.shape;
                out.push_sql(" AND ");
                shape.claimed.push_eq(&mut out, shape.state)?;
                if let Some(owner) = shape.owner {
                    out.push_sql(" AND ");
                    out.push_identifier(owner)?;
                    out.push_sql(" = ");
                    DB::bind_str(&mut out, &self.parts.owner)?;
                }
                out.push_sql(DB::FOR_UPDATE);
                return Ok(());
            }
            ByKey::Fail => return Ok(()),
        }
        out.push_sql(DB::SKIP_LOCKED);
        Ok(())
    }
}

/// Stale claims that used up their attempts go to the failed state instead of being handed out:
/// `UPDATE t SET state = $failed WHERE state = $claimed AND claimed_at < <cutoff> AND attempts >= $max`.
pub(crate) struct ReapStmt<'a, M: ClaimTarget<DB>, DB: SqlDialect>(
    pub(crate) &'a ClaimParts<M, DB>,
);

impl<M: ClaimTarget<DB>, DB: SqlDialect> QueryFragment<DB> for ReapStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.0.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(self.0.shape.state)?;
        out.push_sql(" = ");
        reap_failed(self.0)?.push(&mut out);
        out.push_sql(" WHERE ");
        reap_predicate(&mut out, self.0)
    }
}

/// The probe of MySQL's reap: `SELECT <model> FROM t WHERE <reap predicate> LIMIT $n`, a plain
/// read that locks nothing (see `reap_skip_locked`).
#[cfg(feature = "__mysql_like")]
pub(crate) struct ReapProbeStmt<'a, M: ClaimTarget<DB>, DB: SqlDialect> {
    pub(crate) parts: &'a ClaimParts<M, DB>,
    pub(crate) limit: i64,
}

#[cfg(feature = "__mysql_like")]
impl<M: ClaimTarget<DB>, DB: SqlDialect> QueryFragment<DB> for ReapProbeStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        self.parts.select.walk_ast(out.reborrow())?;
        out.push_sql(" FROM ");
        self.parts.table.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        reap_predicate(&mut out, self.parts)?;
        out.push_sql(" LIMIT ");
        DB::bind_i64(&mut out, &self.limit)
    }
}

/// The state exhausted stale claims go to.
fn reap_failed<M: ClaimTarget<DB>, DB: SqlDialect>(
    parts: &ClaimParts<M, DB>,
) -> QueryResult<&StateLiteral> {
    parts.shape.failed.as_ref().ok_or_else(|| {
        diesel::result::Error::QueryBuilderError("reaping needs a failed state".into())
    })
}

/// `state = $claimed AND claimed_at < <cutoff> AND attempts >= $max`: stale claims that used up
/// their attempts.
fn reap_predicate<'b, M: ClaimTarget<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    parts: &'b ClaimParts<M, DB>,
) -> QueryResult<()> {
    let (Some(claimed_at), Some(attempts), Some(cutoff), Some(max)) = (
        parts.shape.claimed_at,
        parts.shape.attempts,
        &parts.cutoff,
        &parts.max_attempts,
    ) else {
        return Err(diesel::result::Error::QueryBuilderError(
            "reaping needs claimed_at, attempts, a failed state, a timeout and max_attempts".into(),
        ));
    };
    parts.shape.claimed.push_eq(out, parts.shape.state)?;
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
    pub(crate) owner: Option<Option<Cow<'static, str>>>,
    pub(crate) attempts: Option<Option<i64>>,
}

/// What an owner-checked statement changes.
pub(crate) enum Change<ST> {
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
            Change::Retry(retry) => push_retry::<M, DB>(&mut out, retry)?,
        }
        out.push_sql(" WHERE ");
        M::push_pk(&mut out, &self.pk)?;
        out.push_sql(" AND ");
        M::CLAIMED_SQL.push_eq(&mut out, M::STATE)?;
        push_stamp_check::<M, DB>(&mut out, &self.owner, &self.attempts)
    }

    /// Always: the text is this crate's and the derive's (the table's name, the key's columns
    /// each compared with one bind), with binds fixed in number. Diesel's default would walk
    /// the statement before every execution to learn that.
    fn is_safe_to_cache_prepared(&self, backend: &DB) -> QueryResult<bool> {
        debug_assert_walk_agrees(self, backend, true);
        Ok(true)
    }
}

/// ` AND owner = $stamp AND attempts = $n`, for the columns the model maps: the claim a row was
/// handed out under.
pub(crate) fn push_stamp_check<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    owner: &'b Option<Option<Cow<'b, str>>>,
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

/// The `SET` list of a [`Retry`](super::schedule::Retry).
fn push_retry<'b, M: ClaimSql<DB>, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    r: &'b super::schedule::Retry,
) -> QueryResult<()> {
    push_finish_assignments::<M, DB>(out, r.to)?;
    if let (Some(col), Some(offset)) = (M::AVAILABLE_AT, &r.not_before) {
        out.push_sql(", ");
        out.push_identifier(col.name)?;
        out.push_sql(" = ");
        DB::push_now_offset(out, offset, col.with_time_zone)?;
    }
    if let (Some(col), Some(error)) = (M::ERROR, &r.error) {
        out.push_sql(", ");
        out.push_identifier(col)?;
        out.push_sql(" = ");
        DB::bind_str(out, error)?;
    }
    if let (true, Some(attempts)) = (r.refund_attempt, M::ATTEMPTS) {
        out.push_sql(", ");
        out.push_identifier(attempts)?;
        out.push_sql(" = ");
        out.push_identifier(attempts)?;
        out.push_sql(" - 1");
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
pub(crate) fn claimed_before<'b, ST: TimestampType, DB: SqlDialect>(
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
pub struct ClaimablePredicate<M: ClaimTarget<DB>, DB: SqlDialect>(pub(crate) ClaimParts<M, DB>);

impl<M: ClaimTarget<DB>, DB: SqlDialect> QueryFragment<DB> for ClaimablePredicate<M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        claimable_predicate(&mut out, &self.0, Which::Both)
    }
}
