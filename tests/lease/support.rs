//! Plain SQL on the test's own tables (counters, grant logs, farm runs), for any backend.
//!
//! Fixed statement text with `?` placeholders (rewritten to `$n` on PostgreSQL) and BIGINT binds
//! only. Shared by the suite and the `lease-worker` binary (`#[path]` include).

#![allow(dead_code)]

use std::any::Any;

use diesel::backend::Backend;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::sql_types::{BigInt, HasSqlType};
use diesel::RunQueryDsl;
use diesel_lease::{BackendKind, LeaseConnection};

/// A row of up to three BIGINT columns, selected as `a`, `b`, `c`.
#[derive(diesel::QueryableByName, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row3 {
    #[diesel(sql_type = BigInt)]
    pub(crate) a: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) b: i64,
    #[diesel(sql_type = BigInt)]
    pub(crate) c: i64,
}

fn placeholders<C: LeaseConnection>(sql: &str) -> String {
    if C::KIND != BackendKind::Postgres {
        return sql.to_string();
    }
    let mut out = String::new();
    let mut n = 0;
    for ch in sql.chars() {
        if ch == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(ch);
        }
    }
    out
}

fn bound<'a, DB>(sql: &'a str, binds: &[i64]) -> BoxedSqlQuery<'a, DB, SqlQuery>
where
    DB: Backend + HasSqlType<BigInt>,
    i64: diesel::serialize::ToSql<BigInt, DB>,
{
    let mut q = diesel::sql_query(sql).into_boxed::<DB>();
    for b in binds {
        q = q.bind::<BigInt, _>(*b);
    }
    q
}

macro_rules! on_conn {
    ($conn:expr, |$c:ident, $db:ident| $body:expr) => {{
        let any: &mut dyn Any = $conn;
        #[cfg(feature = "postgres")]
        if let Some($c) = any.downcast_mut::<diesel::PgConnection>() {
            type $db = diesel::pg::Pg;
            return $body;
        }
        #[cfg(feature = "sqlite")]
        if let Some($c) = any.downcast_mut::<diesel::SqliteConnection>() {
            type $db = diesel::sqlite::Sqlite;
            return $body;
        }
        #[cfg(feature = "mysql")]
        if let Some($c) = any.downcast_mut::<diesel::MysqlConnection>() {
            type $db = diesel::mysql::Mysql;
            return $body;
        }
        #[cfg(feature = "mariadb")]
        if let Some($c) = any.downcast_mut::<diesel::mariadb::MariadbConnection>() {
            type $db = diesel::mariadb::Mariadb;
            return $body;
        }
        let _ = any;
        panic!("unsupported connection type")
    }};
}

/// Runs a statement; returns the affected (MySQL: matched) row count.
pub(crate) fn exec<C: LeaseConnection>(conn: &mut C, sql: &str, binds: &[i64]) -> usize {
    let sql = placeholders::<C>(sql);
    on_conn!(conn, |c, Db| bound::<Db>(&sql, binds)
        .execute(c)
        .expect("test statement"))
}

/// Runs a query selecting BIGINT columns `a`, `b`, `c`.
pub(crate) fn rows<C: LeaseConnection>(conn: &mut C, sql: &str, binds: &[i64]) -> Vec<Row3> {
    let sql = placeholders::<C>(sql);
    on_conn!(conn, |c, Db| bound::<Db>(&sql, binds)
        .load::<Row3>(c)
        .expect("test query"))
}

/// Runs DDL text.
pub(crate) fn batch<C: LeaseConnection>(conn: &mut C, sql: &str) {
    conn.batch_execute(sql).expect("test DDL");
}
