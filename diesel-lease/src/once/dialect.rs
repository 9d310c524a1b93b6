//! What `insert_once` needs of a backend: a plain `ON CONFLICT DO NOTHING` by default, MySQL's
//! own steps (`mysql_like.rs`) where there is no `ON CONFLICT`.

use diesel::query_builder::{QueryFragment, QueryId};
use diesel::QueryResult;
use lease_core::InsertOutcome;

use super::RunInsertOnce;
use crate::backend::Dialect;

/// How a connection inserts a row once (implemented for `PgConnection`, `SqliteConnection`,
/// `MysqlConnection` and `MariadbConnection`).
///
/// Sealed; its items are internal and carry no stability promise.
pub trait InsertOnceDialect: Dialect {
    /// Inserts a row a unique constraint lets exist once; a duplicate is `AlreadyExists` and
    /// leaves the caller's transaction usable.
    #[doc(hidden)]
    fn insert_once<I, R>(&mut self, insert: I) -> QueryResult<InsertOutcome<R::Output>>
    where
        I: QueryFragment<Self::Backend> + QueryId,
        R: RunInsertOnce<Self, I>,
    {
        R::run(self, insert)
    }
}

#[cfg(feature = "postgres")]
impl InsertOnceDialect for diesel::PgConnection {}

/// The insert as one write that waits for a busy file (`single_write`), as every other write
/// of the library does, also on a connection without a busy timeout.
#[cfg(feature = "sqlite")]
impl InsertOnceDialect for diesel::SqliteConnection {
    fn insert_once<I, R>(&mut self, insert: I) -> QueryResult<InsertOutcome<R::Output>>
    where
        I: QueryFragment<Self::Backend> + QueryId,
        R: RunInsertOnce<Self, I>,
    {
        self.single_write(|c| R::run(c, insert))
    }
}
