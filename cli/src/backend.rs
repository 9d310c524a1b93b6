//! What the tool needs of each backend beyond diesel-lease's `SqlDialect`: how to read a
//! timestamp column as microseconds and any column as text, how to ask for a plan, and where the
//! indexes of a table are listed. One impl per backend; the commands are written once.

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::sql_types::Text;
use diesel::{QueryResult, QueryableByName, RunQueryDsl};
use diesel_lease::admin::AdminStatements;
use diesel_lease::backend::SqlDialect;
use diesel_lease::LeaseConnection;

use crate::sql::Ident;

/// SQL text per backend.
pub(crate) trait CliDialect: SqlDialect {
    /// The statement prefix that returns a plan instead of running a statement.
    const EXPLAIN: &'static str;
    /// Whether the planner serves a claim through a partial index (`CREATE INDEX … WHERE state =
    /// 'ready'`). The claim binds its states as parameters: PostgreSQL proves the predicate in a
    /// custom plan, SQLite cannot (it plans before the values are bound), MySQL has no partial
    /// indexes. Where not, the best index leads with the state column.
    const PARTIAL_INDEXES: bool;
    /// Any column as text.
    fn push_as_text<'b>(out: &mut AstPass<'_, 'b, Self>, column: &'b Ident<'_>) -> QueryResult<()>;
    /// A timestamp column (UTC wall-clock time, or an instant) as µs since 1970.
    fn push_micros_of<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        column: &'b Ident<'_>,
    ) -> QueryResult<()>;
}

impl CliDialect for diesel::pg::Pg {
    const EXPLAIN: &'static str = "EXPLAIN";
    const PARTIAL_INDEXES: bool = true;
    fn push_as_text<'b>(out: &mut AstPass<'_, 'b, Self>, column: &'b Ident<'_>) -> QueryResult<()> {
        out.push_sql("CAST(");
        column.walk_ast(out.reborrow())?;
        out.push_sql(" AS TEXT)");
        Ok(())
    }
    fn push_micros_of<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        column: &'b Ident<'_>,
    ) -> QueryResult<()> {
        // `timestamp` counts as UTC (what diesel-lease writes), `timestamptz` is an instant.
        out.push_sql("CAST(EXTRACT(EPOCH FROM ");
        column.walk_ast(out.reborrow())?;
        out.push_sql(") * 1000000 AS BIGINT)");
        Ok(())
    }
}

impl CliDialect for diesel::sqlite::Sqlite {
    const EXPLAIN: &'static str = "EXPLAIN QUERY PLAN";
    const PARTIAL_INDEXES: bool = false;
    fn push_as_text<'b>(out: &mut AstPass<'_, 'b, Self>, column: &'b Ident<'_>) -> QueryResult<()> {
        out.push_sql("CAST(");
        column.walk_ast(out.reborrow())?;
        out.push_sql(" AS TEXT)");
        Ok(())
    }
    fn push_micros_of<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        column: &'b Ident<'_>,
    ) -> QueryResult<()> {
        out.push_sql("CAST(ROUND((julianday(");
        column.walk_ast(out.reborrow())?;
        out.push_sql(") - 2440587.5) * 86400000.0) AS INTEGER) * 1000");
        Ok(())
    }
}

impl CliDialect for diesel::mysql::Mysql {
    const EXPLAIN: &'static str = "EXPLAIN";
    const PARTIAL_INDEXES: bool = false;
    fn push_as_text<'b>(out: &mut AstPass<'_, 'b, Self>, column: &'b Ident<'_>) -> QueryResult<()> {
        out.push_sql("CAST(");
        column.walk_ast(out.reborrow())?;
        out.push_sql(" AS CHAR)");
        Ok(())
    }
    fn push_micros_of<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        column: &'b Ident<'_>,
    ) -> QueryResult<()> {
        out.push_sql("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00.000000', ");
        column.walk_ast(out.reborrow())?;
        out.push_sql(")");
        Ok(())
    }
}

/// One index of a table.
#[derive(Debug, Clone, QueryableByName)]
pub(crate) struct IndexInfo {
    #[diesel(sql_type = Text)]
    pub(crate) name: String,
    /// `primary` for the primary key, else empty.
    #[diesel(sql_type = Text)]
    pub(crate) kind: String,
    /// Its definition (SQL, or its columns on MySQL).
    #[diesel(sql_type = Text)]
    pub(crate) definition: String,
}

impl IndexInfo {
    pub(crate) fn is_primary(&self) -> bool {
        self.kind == "primary"
    }
    pub(crate) fn is_partial(&self) -> bool {
        self.definition.to_ascii_uppercase().contains(" WHERE ")
    }
}

/// What the commands need of a connection.
pub(crate) trait CliConnection:
    LeaseConnection<Backend: CliDialect> + AdminStatements + diesel::connection::LoadConnection
{
    /// The plan of `stmt`, one line per row.
    fn plan<S>(&mut self, stmt: S) -> QueryResult<Vec<String>>
    where
        S: QueryFragment<Self::Backend>;
    /// The indexes of `table`.
    fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>>;
    /// Runs [`ClaimStats`](crate::sql::ClaimStats).
    fn claim_stats(
        &mut self,
        stmt: crate::sql::ClaimStats<'_>,
    ) -> QueryResult<Vec<crate::sql::StateRow>>;
}

/// `claim_stats`, the same on every backend (the row type needs the concrete backend).
macro_rules! claim_stats {
    () => {
        fn claim_stats(
            &mut self,
            stmt: crate::sql::ClaimStats<'_>,
        ) -> QueryResult<Vec<crate::sql::StateRow>> {
            stmt.load(self)
        }
    };
}

#[derive(QueryableByName)]
struct PgPlan {
    #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
    line: String,
}

impl CliConnection for diesel::PgConnection {
    claim_stats!();
    fn plan<S: QueryFragment<diesel::pg::Pg>>(&mut self, stmt: S) -> QueryResult<Vec<String>> {
        let rows: Vec<PgPlan> = crate::sql::Explain(stmt).load(self)?;
        Ok(rows.into_iter().map(|r| r.line).collect())
    }
    fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>> {
        diesel::sql_query(
            "SELECT CAST(i.relname AS TEXT) AS name, \
                    CASE WHEN x.indisprimary THEN 'primary' ELSE '' END AS kind, \
                    pg_get_indexdef(x.indexrelid) AS definition \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid \
             WHERE x.indrelid = to_regclass(quote_ident($1)) ORDER BY 1",
        )
        .bind::<Text, _>(table)
        .load(self)
    }
}

#[derive(QueryableByName)]
struct SqlitePlan {
    #[diesel(sql_type = Text)]
    detail: String,
}

impl CliConnection for diesel::SqliteConnection {
    claim_stats!();
    fn plan<S: QueryFragment<diesel::sqlite::Sqlite>>(
        &mut self,
        stmt: S,
    ) -> QueryResult<Vec<String>> {
        let rows: Vec<SqlitePlan> = crate::sql::Explain(stmt).load(self)?;
        Ok(rows.into_iter().map(|r| r.detail).collect())
    }
    fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>> {
        diesel::sql_query(
            "SELECT l.name AS name, CASE WHEN l.origin = 'pk' THEN 'primary' ELSE '' END AS kind, \
                    COALESCE((SELECT m.sql FROM sqlite_master m WHERE m.name = l.name), '') AS definition \
             FROM pragma_index_list(?) l ORDER BY 1",
        )
        .bind::<Text, _>(table)
        .load(self)
    }
}

#[derive(QueryableByName)]
struct MysqlPlan {
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    table: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>, column_name = "type")]
    access: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    key: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>, column_name = "Extra")]
    extra: Option<String>,
}

impl CliConnection for diesel::MysqlConnection {
    claim_stats!();
    fn plan<S: QueryFragment<diesel::mysql::Mysql>>(
        &mut self,
        stmt: S,
    ) -> QueryResult<Vec<String>> {
        let rows: Vec<MysqlPlan> = crate::sql::Explain(stmt).load(self)?;
        let text = |v: Option<String>| v.unwrap_or_else(|| "NULL".into());
        Ok(rows
            .into_iter()
            .map(|r| {
                format!(
                    "table={} type={} key={} extra={}",
                    text(r.table),
                    text(r.access),
                    text(r.key),
                    text(r.extra)
                )
            })
            .collect())
    }
    fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>> {
        diesel::sql_query(
            "SELECT CAST(INDEX_NAME AS CHAR) AS name, \
                    CASE WHEN INDEX_NAME = 'PRIMARY' THEN 'primary' ELSE '' END AS kind, \
                    CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) AS definition \
             FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = ? \
             GROUP BY INDEX_NAME ORDER BY 1",
        )
        .bind::<Text, _>(table)
        .load(self)
    }
}
