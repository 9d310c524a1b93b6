//! What the tool needs of each backend's SQL beyond diesel-lease's `SqlDialect`: identifiers
//! an operator typed, a column read as text or as microseconds, the statement that refreshes
//! planner statistics, what the planner does with an index, and what the catalogs' type names
//! mean. One impl per backend; the statements (`sql`) and the commands are written once.

use diesel::query_builder::{AstPass, QueryFragment};
use diesel::QueryResult;
use diesel_lease::__private::SqlDialect;

/// An identifier an operator typed: pushed quoted, so it can only ever name something.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ident<'a>(pub(crate) &'a str);

impl<DB: diesel::backend::Backend> QueryFragment<DB> for Ident<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_identifier(self.0)
    }
}

/// SQL text per backend, and what its planner can do with an index.
pub(crate) trait CliDialect:
    SqlDialect + diesel_lease::__private::RetentionSqlDialect
{
    /// The backend's name, for people.
    const NAME: &'static str;
    /// The statement that refreshes a table's planner statistics, before the table's name.
    const ANALYZE: &'static str = "ANALYZE ";
    /// Whether it has partial indexes (`CREATE INDEX … WHERE state = 'ready'`) that its planner
    /// uses for a claim whose `WHERE` has that very state test: PostgreSQL and SQLite. MySQL has
    /// none; there the index that serves a claim leads with the state column.
    const PARTIAL_INDEXES: bool;
    /// Whether a claim in primary-key order can drift onto the primary key as the backlog
    /// drains, whatever index serves it today: PostgreSQL costs the primary key with a state
    /// filter and an index on the ready rows as nearly equal (BENCHMARKS.md, "Consecutive
    /// claims").
    const PRIMARY_KEY_ORDER_DRIFTS: bool;
    /// Any column as text: `CAST(… AS TEXT)`.
    fn push_as_text<'b>(out: &mut AstPass<'_, 'b, Self>, column: &'b Ident<'_>) -> QueryResult<()> {
        out.push_sql("CAST(");
        column.walk_ast(out.reborrow())?;
        out.push_sql(" AS TEXT)");
        Ok(())
    }
    /// A timestamp column (UTC wall-clock time, or an instant) as µs since 1970.
    fn push_micros_of<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        column: &'b Ident<'_>,
    ) -> QueryResult<()>;
    /// A statement's SQL with its bind values, as Diesel's `debug_query` prints it.
    fn debug_sql(stmt: &dyn QueryFragment<Self>) -> String;
    /// What keeps the advised index on state column `state` of SQL type `type_name` from
    /// being created as printed, if anything.
    fn index_note(_state: &str, _type_name: &str) -> Option<String> {
        None
    }
    /// Whether a column of SQL type `type_name` (as the catalog spells it) holds integers.
    fn is_integer_type(type_name: &str) -> bool {
        matches!(
            bare_type(type_name).as_str(),
            "smallint"
                | "integer"
                | "int"
                | "bigint"
                | "tinyint"
                | "mediumint"
                | "int2"
                | "int4"
                | "int8"
        )
    }
}

/// `character varying(20)` → `character varying`, `int(10) unsigned` → `int`, lower case.
fn bare_type(type_name: &str) -> String {
    let lower = type_name.to_ascii_lowercase();
    let bare = lower.split('(').next().unwrap_or_default();
    bare.trim().trim_end_matches(" unsigned").trim().to_string()
}

/// Whether a column of SQL type `type_name` holds booleans.
pub(crate) fn is_boolean_type(type_name: &str) -> bool {
    matches!(bare_type(type_name).as_str(), "boolean" | "bool")
}

/// Whether a column of SQL type `type_name` holds instants (PostgreSQL `timestamptz`).
pub(crate) fn has_time_zone(type_name: &str) -> bool {
    let bare = bare_type(type_name);
    bare == "timestamptz" || bare.ends_with("with time zone") && !bare.contains("without")
}

impl CliDialect for diesel::pg::Pg {
    const NAME: &'static str = "PostgreSQL";
    const PARTIAL_INDEXES: bool = true;
    const PRIMARY_KEY_ORDER_DRIFTS: bool = true;
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
    fn debug_sql(stmt: &dyn QueryFragment<Self>) -> String {
        diesel::debug_query::<Self, _>(&stmt).to_string()
    }
}

impl CliDialect for diesel::sqlite::Sqlite {
    const NAME: &'static str = "SQLite";
    const PARTIAL_INDEXES: bool = true;
    const PRIMARY_KEY_ORDER_DRIFTS: bool = false;
    fn push_micros_of<'b>(
        out: &mut AstPass<'_, 'b, Self>,
        column: &'b Ident<'_>,
    ) -> QueryResult<()> {
        out.push_sql("CAST(ROUND((julianday(");
        column.walk_ast(out.reborrow())?;
        out.push_sql(") - 2440587.5) * 86400000.0) AS INTEGER) * 1000");
        Ok(())
    }
    fn debug_sql(stmt: &dyn QueryFragment<Self>) -> String {
        diesel::debug_query::<Self, _>(&stmt).to_string()
    }
    /// SQLite's own rule: a declared type containing `INT` has integer affinity.
    fn is_integer_type(type_name: &str) -> bool {
        type_name.to_ascii_lowercase().contains("int")
    }
}

/// MySQL and MariaDB, through either of Diesel's backends.
macro_rules! mysql_like_cli_dialect {
    ($db:ty) => {
        impl CliDialect for $db {
            const NAME: &'static str = "MySQL/MariaDB";
            const ANALYZE: &'static str = "ANALYZE TABLE ";
            fn index_note(state: &str, type_name: &str) -> Option<String> {
                bare_type(type_name).ends_with("text").then(|| format!(
                    "the state column `{state}` is `{type_name}`, which MySQL indexes only by a prefix, and a prefix cannot give the claim order: make it a VARCHAR (e.g. ALTER TABLE … MODIFY `{state}` VARCHAR(64) NOT NULL) before creating the index"
                ))
            }
            const PARTIAL_INDEXES: bool = false;
            const PRIMARY_KEY_ORDER_DRIFTS: bool = false;
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
            fn debug_sql(stmt: &dyn QueryFragment<Self>) -> String {
                diesel::debug_query::<Self, _>(&stmt).to_string()
            }
        }
    };
}
mysql_like_cli_dialect!(diesel::mysql::Mysql);
mysql_like_cli_dialect!(diesel::mariadb::Mariadb);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_are_read_as_the_catalogs_spell_them() {
        use diesel::mysql::Mysql;
        use diesel::pg::Pg;
        use diesel::sqlite::Sqlite;
        assert!(Pg::is_integer_type("bigint") && Pg::is_integer_type("integer"));
        assert!(!Pg::is_integer_type("interval") && !Pg::is_integer_type("point"));
        assert!(Mysql::is_integer_type("int(11) unsigned") && Mysql::is_integer_type("tinyint(1)"));
        assert!(Sqlite::is_integer_type("BIGINT") && !Sqlite::is_integer_type("TEXT"));
        assert!(is_boolean_type("boolean") && !is_boolean_type("text"));
        assert!(has_time_zone("timestamp with time zone") && has_time_zone("timestamptz"));
        assert!(!has_time_zone("timestamp without time zone") && !has_time_zone("DATETIME(6)"));
    }
}
