//! The statements on tables an operator names. Names are quoted identifiers (`push_identifier`),
//! values are bind parameters; the backend's clock and syntax come from diesel-lease's
//! `SqlDialect` and [`CliBackend`](crate::backend::CliBackend).

use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Nullable, Text, Untyped};
use diesel::{QueryResult, QueryableByName, RunQueryDsl};

use crate::backend::CliDialect;

/// An identifier an operator typed: pushed quoted, so it can only ever name something.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ident<'a>(pub(crate) &'a str);

impl<DB: diesel::backend::Backend> QueryFragment<DB> for Ident<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_identifier(self.0)
    }
}

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

/// The row pick of a claim, as diesel-lease's claim statement has it inside:
/// `SELECT * FROM t WHERE s IN ($1, …) ORDER BY … LIMIT 1 FOR UPDATE SKIP LOCKED`.
#[derive(Debug)]
pub(crate) struct ClaimPick<'a> {
    pub(crate) table: Ident<'a>,
    pub(crate) state: Ident<'a>,
    pub(crate) ready: &'a [String],
    pub(crate) order: Vec<(Ident<'a>, bool)>,
}

impl<DB: CliDialect> QueryFragment<DB> for ClaimPick<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT * FROM ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        self.state.walk_ast(out.reborrow())?;
        out.push_sql(" IN (");
        for (i, value) in self.ready.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            DB::bind_str(&mut out, value)?;
        }
        out.push_sql(") ORDER BY ");
        for (i, (column, desc)) in self.order.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            column.walk_ast(out.reborrow())?;
            out.push_sql(if *desc { " DESC" } else { " ASC" });
        }
        out.push_sql(" LIMIT 1");
        out.push_sql(DB::SKIP_LOCKED);
        Ok(())
    }
}

/// `EXPLAIN <statement>` in the backend's words (`EXPLAIN QUERY PLAN` on SQLite).
#[derive(Debug)]
pub(crate) struct Explain<S>(pub(crate) S);

impl<DB: CliDialect, S: QueryFragment<DB>> QueryFragment<DB> for Explain<S> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(DB::EXPLAIN);
        out.push_sql(" ");
        self.0.walk_ast(out.reborrow())
    }
}

/// Untyped statements loaded into `QueryableByName` rows, as `sql_query` is.
macro_rules! untyped {
    ($($t:ident $(<$l:lifetime>)? $(<$s:ident>)?),*) => {$(
        impl$(<$l>)?$(<$s>)? QueryId for $t$(<$l>)?$(<$s>)? {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }
        impl$(<$l>)?$(<$s>)? Query for $t$(<$l>)?$(<$s>)? {
            type SqlType = Untyped;
        }
        impl<$($l,)? $($s,)? Conn> RunQueryDsl<Conn> for $t$(<$l>)?$(<$s>)? {}
    )*};
}
untyped!(ClaimStats<'a>, ClaimPick<'a>, Explain<S>);
