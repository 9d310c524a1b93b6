//! The statements on tables an operator names. Names are quoted identifiers (`push_identifier`),
//! values are bind parameters (the states in `doctor`'s statements are diesel-lease's own
//! escaped literals); the backend's clock and syntax come from diesel-lease's `SqlDialect` and
//! [`CliDialect`](crate::dialect::CliDialect).

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{QueryResult, QueryableByName};

use crate::dialect::{CliDialect, Ident};

/// Rows per state, with the oldest claimed-at and the count of claims older than a cutoff:
///
/// `SELECT CAST(s AS TEXT) AS state, COUNT(*) AS n[, MIN(micros(c)) AS oldest,
///  COUNT(CASE WHEN micros(c) < now - $older THEN 1 END) AS stale] FROM t GROUP BY s ORDER BY 1`
#[derive(Debug)]
pub(crate) struct ClaimStats<'a> {
    pub(crate) table: Ident<'a>,
    pub(crate) state: Ident<'a>,
    pub(crate) claimed_at: Option<Ident<'a>>,
    pub(crate) older_than_micros: i64,
}

/// One line of [`ClaimStats`].
#[derive(Debug, QueryableByName)]
pub(crate) struct StateRow {
    #[diesel(sql_type = Nullable<Text>)]
    pub(crate) state: Option<String>,
    #[diesel(sql_type = BigInt)]
    pub(crate) n: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) oldest: Option<i64>,
    #[diesel(sql_type = BigInt)]
    pub(crate) stale: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) now: i64,
}

impl<DB: CliDialect> QueryFragment<DB> for ClaimStats<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        DB::push_as_text(&mut out, &self.state)?;
        out.push_sql(" AS state, COUNT(*) AS n, ");
        match &self.claimed_at {
            Some(c) => {
                out.push_sql("MIN(");
                DB::push_micros_of(&mut out, c)?;
                out.push_sql(") AS oldest, COUNT(CASE WHEN ");
                DB::push_micros_of(&mut out, c)?;
                out.push_sql(" < ");
                DB::push_now_micros(&mut out);
                out.push_sql(" - ");
                DB::bind_i64(&mut out, &self.older_than_micros)?;
                out.push_sql(" THEN 1 END) AS stale, ");
            }
            // No bytes to decode: NULL reads as `None` whatever type the server gives it.
            None => out.push_sql("NULL AS oldest, COUNT(CASE WHEN 1 = 0 THEN 1 END) AS stale, "),
        }
        DB::push_now_micros(&mut out);
        out.push_sql(" AS now FROM ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" GROUP BY ");
        self.state.walk_ast(out.reborrow())?;
        out.push_sql(" ORDER BY 1");
        Ok(())
    }
}

/// `<prefix> <statement>`: the statement's plan in the backend's words (`EXPLAIN `,
/// `EXPLAIN (FORMAT JSON) `, `EXPLAIN QUERY PLAN `), with the statement's own bind values.
#[derive(Debug)]
pub(crate) struct Explain<S>(pub(crate) &'static str, pub(crate) S);

impl<DB: diesel::backend::Backend, S: QueryFragment<DB>> QueryFragment<DB> for Explain<S> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(self.0);
        self.1.walk_ast(out.reborrow())
    }
}

/// `*`: every column, what `doctor` has a claim return in place of a model's columns (it knows
/// only the table). SQLite refuses `t.*` after `RETURNING`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AllColumns;

impl<DB: diesel::backend::Backend> QueryFragment<DB> for AllColumns {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("*");
        Ok(())
    }
}

/// `CREATE INDEX name ON table (col [DESC], …) [WHERE predicate]`: the index `doctor` advises,
/// every name quoted as the backend quotes identifiers; the predicate is diesel-lease's own state
/// test ([`StatesIn`](diesel_lease::__private::StatesIn)), the text a claim carries.
#[derive(Debug)]
pub(crate) struct CreateIndex<'a> {
    pub(crate) name: String,
    pub(crate) table: Ident<'a>,
    pub(crate) columns: Vec<(Ident<'a>, bool)>,
    pub(crate) predicate: Option<diesel_lease::__private::StatesIn>,
}

impl<DB: diesel_lease::__private::SqlDialect> QueryFragment<DB> for CreateIndex<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("CREATE INDEX ");
        out.push_identifier(&self.name)?;
        out.push_sql(" ON ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" (");
        for (i, (column, desc)) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            column.walk_ast(out.reborrow())?;
            if *desc {
                out.push_sql(" DESC");
            }
        }
        out.push_sql(")");
        if let Some(predicate) = &self.predicate {
            out.push_sql(" WHERE ");
            predicate.walk_ast(out.reborrow())?;
        }
        Ok(())
    }
}

/// `ANALYZE t` (MySQL: `ANALYZE TABLE t`): fresh planner statistics for a table.
#[derive(Debug)]
pub(crate) struct Analyze<'a>(pub(crate) Ident<'a>);

impl<DB: CliDialect> QueryFragment<DB> for Analyze<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(DB::ANALYZE);
        self.0.walk_ast(out.reborrow())
    }
}

/// The SQL text of a statement without binds (DDL to show).
pub(crate) fn sql_text<DB, Q>(q: &Q) -> QueryResult<String>
where
    DB: diesel::backend::Backend + Default,
    DB::QueryBuilder: Default,
    Q: QueryFragment<DB>,
{
    use diesel::query_builder::QueryBuilder;
    let mut builder = DB::QueryBuilder::default();
    q.to_sql(&mut builder, &DB::default())?;
    Ok(builder.finish())
}

/// `EXPLAIN`'s rows are loaded into `QueryableByName` rows, as `sql_query`'s are.
impl<S> diesel::query_builder::QueryId for Explain<S> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<S> diesel::query_builder::Query for Explain<S> {
    type SqlType = diesel::sql_types::Untyped;
}

impl<S, Conn> diesel::RunQueryDsl<Conn> for Explain<S> {}

/// Any statement, loaded as an untyped one ([`CliConnection::load_rows`](crate::backend::CliConnection::load_rows)).
pub(crate) struct Untyped<'a, DB>(pub(crate) &'a dyn QueryFragment<DB>);

impl<DB: diesel::backend::Backend> QueryFragment<DB> for Untyped<'_, DB> {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(out)
    }
}

impl<DB> diesel::query_builder::QueryId for Untyped<'_, DB> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<DB> diesel::query_builder::Query for Untyped<'_, DB> {
    type SqlType = diesel::sql_types::Untyped;
}

impl<DB, Conn> diesel::RunQueryDsl<Conn> for Untyped<'_, DB> {}
