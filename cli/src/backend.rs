//! What the tool needs of each backend's connection: how to ask for a plan and read it, where
//! the columns and indexes of a table are listed, and how to load any statement's rows. One
//! impl per backend; the commands are written once.

use diesel::query_builder::QueryFragment;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{QueryResult, QueryableByName, RunQueryDsl};
use diesel_lease::__private::AdminStatements;
use diesel_lease::LeaseConnection;

use crate::dialect::CliDialect;
use crate::sql::{Explain, Untyped};

/// A new connection, tuned as diesel-lease tunes its pools' connections.
pub(crate) fn connect<C: CliConnection>(url: &str) -> Result<C, String> {
    let mut conn = C::establish(url).map_err(|e| format!("cannot connect to the database: {e}"))?;
    diesel_lease::pool::ConnectionTuning::default()
        .apply(&mut conn)
        .map_err(|e| format!("cannot set up the connection: {e}"))?;
    Ok(conn)
}

/// One column of a table.
#[derive(Debug, Clone, QueryableByName)]
pub(crate) struct ColumnInfo {
    #[diesel(sql_type = Text)]
    pub(crate) name: String,
    /// Its SQL type, as the catalog spells it.
    #[diesel(sql_type = Text)]
    pub(crate) type_name: String,
    /// 1 when it may hold `NULL`.
    #[diesel(sql_type = BigInt)]
    pub(crate) nullable: i64,
    /// Its position in the primary key (from 1), 0 when it is not part of it.
    #[diesel(sql_type = BigInt)]
    pub(crate) pk: i64,
}

/// One index of a table.
#[derive(Debug, Clone, QueryableByName)]
pub(crate) struct IndexInfo {
    #[diesel(sql_type = Text)]
    pub(crate) name: String,
    /// `primary` for the primary key, else empty.
    #[diesel(sql_type = Text)]
    pub(crate) kind: String,
    /// Its columns in index order, comma-separated.
    #[diesel(sql_type = Text)]
    pub(crate) columns: String,
    /// The `WHERE` of a partial index (SQLite: the whole `CREATE INDEX`).
    #[diesel(sql_type = Nullable<Text>)]
    pub(crate) predicate: Option<String>,
}

impl IndexInfo {
    pub(crate) fn is_primary(&self) -> bool {
        self.kind == "primary"
    }
    pub(crate) fn leading_column(&self) -> &str {
        self.columns.split(',').next().unwrap_or_default()
    }
}

/// How a statement reads the table, from its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// The index it reads through; `None` for the table itself (every row).
    pub(crate) index: Option<String>,
    /// Whether that index is the primary key (or SQLite's rowid).
    pub(crate) primary: bool,
    /// Whether a condition on the index's columns limits what it reads (PostgreSQL `Index
    /// Cond`, SQLite `SEARCH`, MySQL `ref`/`range`…), rather than reading it whole.
    pub(crate) searched: bool,
}

/// A statement's plan: its lines for people, and what the verdict needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    pub(crate) lines: Vec<String>,
    /// The ways it reads the table.
    pub(crate) accesses: Vec<Access>,
    /// Whether it sorts rows (an `ORDER BY` that no index serves).
    pub(crate) sorts: bool,
}

/// What the commands need of a connection.
pub(crate) trait CliConnection:
    LeaseConnection<Backend: CliDialect> + AdminStatements + diesel::connection::LoadConnection
{
    /// The plan of `stmt`, and how it reads `table`.
    fn plan(&mut self, stmt: &dyn QueryFragment<Self::Backend>, table: &str) -> QueryResult<Plan>;
    /// The columns of `table` (none when there is no such table).
    fn columns(&mut self, table: &str) -> QueryResult<Vec<ColumnInfo>>;
    /// The indexes of `table`.
    fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>>;
    /// Loads the rows of `stmt`, an untyped statement (as `sql_query` is), into `R`.
    fn load_rows<R: ByName>(
        &mut self,
        stmt: &dyn QueryFragment<Self::Backend>,
    ) -> QueryResult<Vec<R>>;
}

/// A row every backend can load by column name: a `#[derive(QueryableByName)]` struct.
pub(crate) trait ByName:
    'static
    + QueryableByName<diesel::pg::Pg>
    + QueryableByName<diesel::sqlite::Sqlite>
    + QueryableByName<diesel::mysql::Mysql>
    + QueryableByName<diesel::mariadb::Mariadb>
{
}

impl<R> ByName for R where
    R: 'static
        + QueryableByName<diesel::pg::Pg>
        + QueryableByName<diesel::sqlite::Sqlite>
        + QueryableByName<diesel::mysql::Mysql>
        + QueryableByName<diesel::mariadb::Mariadb>
{
}

/// `load_rows`, the same on every backend (loading needs the concrete backend).
macro_rules! load_rows {
    () => {
        fn load_rows<R: ByName>(
            &mut self,
            stmt: &dyn QueryFragment<Self::Backend>,
        ) -> QueryResult<Vec<R>> {
            Untyped(stmt).load(self)
        }
    };
}

#[derive(QueryableByName)]
struct PgPlan {
    #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
    line: String,
}

impl CliConnection for diesel::PgConnection {
    load_rows!();
    fn plan(&mut self, stmt: &dyn QueryFragment<diesel::pg::Pg>, table: &str) -> QueryResult<Plan> {
        let rows: Vec<PgPlan> = Explain("EXPLAIN ", stmt).load(self)?;
        let mut plan = Plan {
            lines: rows.into_iter().map(|r| r.line).collect(),
            ..Plan::default()
        };
        let json: Vec<PgPlan> = Explain("EXPLAIN (FORMAT JSON) ", stmt).load(self)?;
        let tree: serde_json::Value = json
            .first()
            .and_then(|r| serde_json::from_str(&r.line).ok())
            .unwrap_or_default();
        pg_accesses(&tree[0]["Plan"], table, &mut plan);
        Ok(plan)
    }
    fn columns(&mut self, table: &str) -> QueryResult<Vec<ColumnInfo>> {
        diesel::sql_query(
            "SELECT CAST(a.attname AS TEXT) AS name, format_type(a.atttypid, a.atttypmod) AS type_name, \
                    CAST(CASE WHEN a.attnotnull THEN 0 ELSE 1 END AS BIGINT) AS nullable, \
                    CAST(COALESCE((SELECT k.ord FROM pg_index x, \
                        unnest(CAST(x.indkey AS int2[])) WITH ORDINALITY AS k(attnum, ord) \
                      WHERE x.indrelid = a.attrelid AND x.indisprimary AND k.attnum = a.attnum), 0) AS BIGINT) AS pk \
             FROM pg_attribute a \
             WHERE a.attrelid = to_regclass(quote_ident($1)) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
        )
        .bind::<Text, _>(table)
        .load(self)
    }
    fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>> {
        diesel::sql_query(
            "SELECT CAST(i.relname AS TEXT) AS name, \
                    CASE WHEN x.indisprimary THEN 'primary' ELSE '' END AS kind, \
                    COALESCE((SELECT string_agg(CAST(a.attname AS TEXT), ',' ORDER BY k.ord) \
                      FROM unnest(CAST(x.indkey AS int2[])) WITH ORDINALITY AS k(attnum, ord) \
                      JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum), '') AS columns, \
                    pg_get_expr(x.indpred, x.indrelid) AS predicate \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid \
             WHERE x.indrelid = to_regclass(quote_ident($1)) ORDER BY 1",
        )
        .bind::<Text, _>(table)
        .load(self)
    }
}

/// How a PostgreSQL plan (`EXPLAIN (FORMAT JSON)`'s tree) reads `table`.
fn pg_accesses(node: &serde_json::Value, table: &str, plan: &mut Plan) {
    let text = |key: &str| node[key].as_str().unwrap_or_default();
    let on_table = text("Relation Name") == table;
    match text("Node Type") {
        "Sort" | "Incremental Sort" => plan.sorts = true,
        "Seq Scan" if on_table => plan.accesses.push(Access {
            index: None,
            primary: false,
            searched: false,
        }),
        "Index Scan" | "Index Only Scan" if on_table => plan.accesses.push(Access {
            index: Some(text("Index Name").to_string()),
            primary: false,
            searched: node.get("Index Cond").is_some(),
        }),
        // The rows of a bitmap scan come in table order, whatever the indexes under it.
        "Bitmap Index Scan" => plan.accesses.push(Access {
            index: Some(text("Index Name").to_string()),
            primary: false,
            searched: node.get("Index Cond").is_some(),
        }),
        _ => {}
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        pg_accesses(child, table, plan);
    }
}

#[derive(QueryableByName)]
struct SqlitePlan {
    #[diesel(sql_type = Text)]
    detail: String,
}

impl CliConnection for diesel::SqliteConnection {
    load_rows!();
    fn plan(
        &mut self,
        stmt: &dyn QueryFragment<diesel::sqlite::Sqlite>,
        table: &str,
    ) -> QueryResult<Plan> {
        let rows: Vec<SqlitePlan> = Explain("EXPLAIN QUERY PLAN ", stmt).load(self)?;
        let mut plan = Plan::default();
        for row in rows {
            if row.detail.starts_with("USE TEMP B-TREE FOR") && row.detail.contains("ORDER BY") {
                plan.sorts = true;
            }
            plan.accesses.extend(sqlite_access(&row.detail, table));
            plan.lines.push(row.detail);
        }
        Ok(plan)
    }
    fn columns(&mut self, table: &str) -> QueryResult<Vec<ColumnInfo>> {
        diesel::sql_query(
            "SELECT name, type AS type_name, CASE WHEN \"notnull\" THEN 0 ELSE 1 END AS nullable, pk \
             FROM pragma_table_info(?) ORDER BY cid",
        )
        .bind::<Text, _>(table)
        .load(self)
    }
    fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>> {
        let mut indexes: Vec<IndexInfo> = diesel::sql_query(
            "SELECT l.name AS name, CASE WHEN l.origin = 'pk' THEN 'primary' ELSE '' END AS kind, \
                    COALESCE((SELECT group_concat(c.name, ',') FROM \
                      (SELECT name FROM pragma_index_info(l.name) ORDER BY seqno) c), '') AS columns, \
                    CASE WHEN l.partial THEN (SELECT m.sql FROM sqlite_master m WHERE m.name = l.name) END AS predicate \
             FROM pragma_index_list(?) l ORDER BY 1",
        )
        .bind::<Text, _>(table)
        .load(self)?;
        // The catalog keeps the whole `CREATE INDEX`; the predicate follows its last WHERE.
        for index in &mut indexes {
            if let Some(sql) = &index.predicate {
                let at = sql
                    .to_ascii_uppercase()
                    .rfind(" WHERE ")
                    .map_or(0, |at| at + 7);
                index.predicate = Some(sql[at..].trim().to_string());
            }
        }
        Ok(indexes)
    }
}

/// How one line of SQLite's `EXPLAIN QUERY PLAN` reads `table` (`SCAN t`, `SEARCH t USING
/// INDEX i (s=?)`, `SCAN t USING COVERING INDEX i`, `SEARCH t USING INTEGER PRIMARY KEY …`).
fn sqlite_access(detail: &str, table: &str) -> Option<Access> {
    let (rest, searched) = match detail.strip_prefix("SEARCH ") {
        Some(rest) => (rest, true),
        None => (detail.strip_prefix("SCAN ")?, false),
    };
    let rest = rest.strip_prefix("TABLE ").unwrap_or(rest);
    let rest = rest.strip_prefix(table)?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    if rest.contains(" PRIMARY KEY") {
        return Some(Access {
            index: Some("PRIMARY KEY".into()),
            primary: true,
            searched,
        });
    }
    let index = ["USING COVERING INDEX ", "USING INDEX "]
        .iter()
        .find_map(|using| rest.split_once(using).map(|(_, name)| name))
        .map(|name| name.split(" (").next().unwrap_or(name).to_string());
    Some(Access {
        // `SCAN t` walks the rowid: the primary key of a table with an INTEGER PRIMARY KEY.
        primary: index.is_none() && !searched,
        index,
        searched,
    })
}

#[derive(QueryableByName)]
struct MysqlPlan {
    #[diesel(sql_type = Nullable<Text>)]
    table: Option<String>,
    #[diesel(sql_type = Nullable<Text>, column_name = "type")]
    access: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    key: Option<String>,
    #[diesel(sql_type = Nullable<Text>, column_name = "Extra")]
    extra: Option<String>,
}

/// `MysqlConnection` and `MariadbConnection`: the same server, two Diesel backends.
macro_rules! mysql_like_cli_connection {
    ($db:ty, $conn:ty) => {
        impl CliConnection for $conn {
            load_rows!();
            fn plan(
                &mut self,
                stmt: &dyn QueryFragment<$db>,
                table: &str,
            ) -> QueryResult<Plan> {
                let rows: Vec<MysqlPlan> = Explain("EXPLAIN ", stmt).load(self)?;
                let mut plan = Plan::default();
                for r in rows {
                    let extra = r.extra.unwrap_or_default();
                    plan.sorts |= extra.contains("filesort");
                    if r.table.as_deref() == Some(table) {
                        let access = r.access.clone().unwrap_or_default();
                        plan.accesses.push(Access {
                            primary: r.key.as_deref() == Some("PRIMARY"),
                            searched: !matches!(access.as_str(), "ALL" | "index"),
                            index: r.key.clone().filter(|_| access != "ALL"),
                        });
                    }
                    let text = |v: Option<String>| v.unwrap_or_else(|| "NULL".into());
                    plan.lines.push(format!(
                        "table={} type={} key={} extra={}",
                        text(r.table),
                        text(r.access),
                        text(r.key),
                        if extra.is_empty() { "NULL" } else { &extra }
                    ));
                }
                Ok(plan)
            }
            fn columns(&mut self, table: &str) -> QueryResult<Vec<ColumnInfo>> {
                diesel::sql_query(
                    "SELECT CAST(c.COLUMN_NAME AS CHAR) AS name, CAST(c.COLUMN_TYPE AS CHAR) AS type_name, \
                            CAST(c.IS_NULLABLE = 'YES' AS SIGNED) AS nullable, \
                            CAST(COALESCE(s.SEQ_IN_INDEX, 0) AS SIGNED) AS pk \
                     FROM information_schema.columns c LEFT JOIN information_schema.statistics s \
                       ON s.TABLE_SCHEMA = c.TABLE_SCHEMA AND s.TABLE_NAME = c.TABLE_NAME \
                      AND s.COLUMN_NAME = c.COLUMN_NAME AND s.INDEX_NAME = 'PRIMARY' \
                     WHERE c.TABLE_SCHEMA = DATABASE() AND c.TABLE_NAME = ? ORDER BY c.ORDINAL_POSITION",
                )
                .bind::<Text, _>(table)
                .load(self)
            }
            fn indexes(&mut self, table: &str) -> QueryResult<Vec<IndexInfo>> {
                diesel::sql_query(
                    "SELECT CAST(INDEX_NAME AS CHAR) AS name, \
                            CASE WHEN INDEX_NAME = 'PRIMARY' THEN 'primary' ELSE '' END AS kind, \
                            CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) AS columns, \
                            CAST(NULL AS CHAR) AS predicate \
                     FROM information_schema.statistics \
                     WHERE table_schema = DATABASE() AND table_name = ? \
                     GROUP BY INDEX_NAME ORDER BY 1",
                )
                .bind::<Text, _>(table)
                .load(self)
            }
        }
    };
}
mysql_like_cli_connection!(diesel::mysql::Mysql, diesel::MysqlConnection);
mysql_like_cli_connection!(diesel::mariadb::Mariadb, diesel::mariadb::MariadbConnection);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_plan_lines_say_how_the_table_is_read() {
        let access = |d| sqlite_access(d, "jobs");
        let via = |index: &str, searched| {
            Some(Access {
                index: Some(index.into()),
                primary: false,
                searched,
            })
        };
        assert_eq!(
            access("SEARCH jobs USING INDEX jobs_claim (status=?)"),
            via("jobs_claim", true)
        );
        assert_eq!(
            access("SCAN jobs USING COVERING INDEX jobs_claim"),
            via("jobs_claim", false)
        );
        assert_eq!(
            access("SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"),
            Some(Access {
                index: Some("PRIMARY KEY".into()),
                primary: true,
                searched: true
            })
        );
        assert_eq!(
            access("SCAN jobs"),
            Some(Access {
                index: None,
                primary: true,
                searched: false
            })
        );
        assert_eq!(access("SCAN jobs_archive"), None);
        assert_eq!(access("USE TEMP B-TREE FOR ORDER BY"), None);
    }
}
