// Included twice by `mod.rs`, as `mysql` (Diesel's `Mysql`, `MysqlConnection`) and as
// `mariadb` (`Mariadb`, `MariadbConnection`): `Db` and `Conn` are that module's backend and
// connection types. See the module's docs there.
use diesel::prelude::*;
use diesel::query_builder::{QueryFragment, QueryId};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use lease_core::InsertOutcome;

use super::dialect::InsertOnceDialect;
use super::RunInsertOnce;
use crate::backend::MysqlLike;
use crate::backend::{in_transaction, Dialect};

impl InsertOnceDialect for Conn {
    fn insert_once<I, R>(&mut self, insert: I) -> QueryResult<InsertOutcome<R::Output>>
    where
        I: QueryFragment<Db> + QueryId,
        R: RunInsertOnce<Self, I>,
    {
        // No ON CONFLICT … DO NOTHING (INSERT IGNORE would also hide unrelated errors). A
        // duplicate-key error does not abort a MySQL transaction, so the plain insert is safe
        // inside the caller's transaction. MariaDB's backend returns the row from the insert.
        if <Self as MysqlLike>::INSERT_RETURNING {
            return R::run_plain(self, insert);
        }
        // MySQL's has no RETURNING: the row is read back by the value the insert generated.
        let generated = if R::RETURNS_ROW {
            auto_increment_column(self, &R::Table::default().from_clause())?
        } else {
            None
        };
        let Some(column) = generated else {
            // No row asked for, or nothing to find it by: without an AUTO_INCREMENT column the
            // key came from the insert (or a default), which only the caller knows.
            return Ok(match insert_unless_duplicate(self, &insert)? {
                true => InsertOutcome::Inserted(None),
                false => InsertOutcome::AlreadyExists,
            });
        };
        // The row is read back in the transaction that inserted it (the caller's, or ours), so
        // nobody can change or delete it in between. Ours rolls the insert back if the read
        // fails; in the caller's transaction, the caller's error handling does.
        let insert_and_read_back = |c: &mut Self| {
            // LAST_INSERT_ID() keeps the last value generated on this connection, maybe by an
            // earlier insert into another table; zero says "this insert generated none".
            diesel::select(remember_insert_id(0)).get_result::<u64>(c)?;
            if !insert_unless_duplicate(c, &insert)? {
                return Ok(InsertOutcome::AlreadyExists);
            }
            let key = c.inserted_id()?;
            if key == 0 {
                // The insert gave the AUTO_INCREMENT column its value itself.
                return Ok(InsertOutcome::Inserted(None));
            }
            let rows = R::load_where(c, &column, key)?;
            if rows.len() != 1 {
                return Err(DieselError::QueryBuilderError(
                    format!(
                        "insert_once: {} rows have the AUTO_INCREMENT value {key} this insert \
                         generated in column `{column}`, expected exactly the inserted one",
                        rows.len()
                    )
                    .into(),
                ));
            }
            Ok(InsertOutcome::Inserted(rows.into_iter().next()))
        };
        if in_transaction(self)? {
            insert_and_read_back(self)
        } else {
            self.write_tx(insert_and_read_back)
        }
    }
}

/// Runs a plain insert: `true` when it inserted, `false` when a unique constraint already holds an
/// equal row (the duplicate-key error, which leaves a transaction usable on MySQL).
fn insert_unless_duplicate<I>(conn: &mut Conn, insert: &I) -> QueryResult<bool>
where
    I: QueryFragment<Db> + QueryId,
{
    match conn.execute_returning_count(insert) {
        Ok(_) => Ok(true),
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The catalog's view of the columns of every table, as far as `insert_once` reads it.
mod catalog {
    diesel::table! {
        information_schema.columns (table_schema, table_name, column_name) {
            table_schema -> Text,
            table_name -> Text,
            column_name -> Nullable<Text>,
            extra -> Nullable<Text>,
        }
    }

    diesel::define_sql_function! {
        /// The connection's current database (schema).
        fn database() -> diesel::sql_types::Nullable<diesel::sql_types::Text>;
    }
}

/// The AUTO_INCREMENT column of the table `from` names, if it has one (a table has at most one),
/// as the database's catalog spells it.
fn auto_increment_column<F>(conn: &mut Conn, from: &F) -> QueryResult<Option<String>>
where
    F: QueryFragment<Db>,
{
    use catalog::columns as c;
    let rendered = diesel::debug_query::<Db, _>(from).to_string();
    let Some((schema, table)) = rendered.strip_suffix(" -- binds: []").and_then(table_path) else {
        return Err(DieselError::QueryBuilderError(
            format!("insert_once: `{rendered}` is not a table name").into(),
        ));
    };
    let query = c::table
        .select(c::column_name)
        .filter(c::table_name.eq(table))
        .filter(c::extra.like("%auto_increment%"))
        .into_boxed();
    let query = match schema {
        Some(schema) => query.filter(c::table_schema.eq(schema)),
        None => query.filter(c::table_schema.nullable().eq(catalog::database())),
    };
    Ok(query.first::<Option<String>>(conn).optional()?.flatten())
}

/// The schema (when qualified) and name of a table from its MySQL spelling, `` `name` `` or
/// `` `schema`.`name` `` with backticks doubled inside: the reverse of Diesel's
/// `push_identifier`. `None` for anything else.
fn table_path(sql: &str) -> Option<(Option<String>, String)> {
    let mut parts = Vec::new();
    let mut rest = sql;
    loop {
        rest = rest.strip_prefix('`')?;
        let mut ident = String::new();
        loop {
            let end = rest.find('`')?;
            ident.push_str(&rest[..end]);
            rest = &rest[end + 1..];
            match rest.strip_prefix('`') {
                Some(after) => {
                    ident.push('`');
                    rest = after;
                }
                None => break,
            }
        }
        parts.push(ident);
        match rest.strip_prefix('.') {
            Some(after) => rest = after,
            None => break,
        }
    }
    let table = parts.pop()?;
    match (rest.is_empty(), parts.pop(), parts.is_empty()) {
        (true, schema, true) => Some((schema, table)),
        _ => None,
    }
}

diesel::define_sql_function! {
    /// `LAST_INSERT_ID(value)`: returns `value` and makes `LAST_INSERT_ID()` return it until an
    /// insert generates a new one.
    #[sql_name = "LAST_INSERT_ID"]
    fn remember_insert_id(
        value: diesel::sql_types::Unsigned<diesel::sql_types::BigInt>,
    ) -> diesel::sql_types::Unsigned<diesel::sql_types::BigInt>;
}

#[cfg(test)]
mod tests {
    use super::table_path;

    #[test]
    fn table_path_reverses_the_quoting_of_table_names() {
        assert_eq!(table_path("`job`"), Some((None, "job".into())));
        assert_eq!(
            table_path("`app`.`job`"),
            Some((Some("app".into()), "job".into()))
        );
        assert_eq!(table_path("`we``ird.na`me`"), None);
        assert_eq!(
            table_path("`we``ird.name`"),
            Some((None, "we`ird.name".into()))
        );
        assert_eq!(table_path("`a`.`b`.`c`"), None);
        assert_eq!(table_path("`job` AS j"), None);
        assert_eq!(table_path("job"), None);
        assert_eq!(table_path(""), None);
    }

    #[test]
    fn table_path_reads_what_diesel_writes() {
        diesel::table! { app.job (id) { id -> BigInt, } }
        diesel::table! { plain_job (id) { id -> BigInt, } }
        use diesel::QuerySource;
        let render = |sql: String| sql.strip_suffix(" -- binds: []").map(str::to_owned);
        let qualified =
            render(diesel::debug_query::<super::Db, _>(&job::table.from_clause()).to_string());
        let plain = render(
            diesel::debug_query::<super::Db, _>(&plain_job::table.from_clause()).to_string(),
        );
        assert_eq!(
            qualified.as_deref().and_then(table_path),
            Some((Some("app".into()), "job".into()))
        );
        assert_eq!(
            plain.as_deref().and_then(table_path),
            Some((None, "plain_job".into()))
        );
    }
}
