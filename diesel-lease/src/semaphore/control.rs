//! Seed 001 on the user's own control table: the semaphore's requests are rows of a table the
//! application already has (`ProcessControl`: queue position, requesting id, resource, access
//! type), described by `#[claimable(semaphore(...))]`.
//!
//! The protocol does not change: it runs over [`SemaphoreStatements`], and [`OnControlTable`]
//! is a `SemaphoreStatements` whose request statements address the user's table and whose
//! resource statements (the row every queue change locks first, the permit count, the
//! notifications) stay on the library's `diesel_lease_semaphores`, under a key of their own
//! (`<table>#<resource>`). So the commit-order-race argument of the `protocol` module holds
//! unchanged: every change to a queue takes that row's lock first, and grants are persisted
//! flags (the `granted` column the library adds), never inferred from positions.
//!
//! The user's table needs two more columns, which only the library writes: `granted` (boolean,
//! default false) and `expires_at` (`BIGINT`, microseconds since 1970 on the database clock).
//! Every other column must have a default: the library inserts only the ticket's own values.
//!
//! Statements are built from the columns' names in Diesel's schema (`Column::NAME`), never from
//! strings a caller passes; values are always bound.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, Text};
use diesel::{QueryResult, RunQueryDsl};

use super::statements::{Body, NewTicket, SemaphoreStatements, TicketRow};
use crate::backend::SqlDialect;
use crate::clock::{DbNowMicros, NowPlus};
use crate::Ttl;
use lease_core::admission::Mode;

/// A model whose table holds semaphore requests: the description
/// `#[claimable(semaphore(...))]` writes (see [`Claimable`](crate::Claimable), "Semaphores on a
/// control table").
///
/// You rarely implement this by hand. Column names come from Diesel's schema (`Column::NAME`).
pub trait ControlTable: 'static {
    /// The model's Diesel table.
    type Table: diesel::Table + Default + Copy + Send + Sync + 'static + OnEveryBackend;
    /// The table's name as the derive saw it: the namespace of its resources' lock rows in
    /// `diesel_lease_semaphores` (`<NAME>#<resource>`).
    const NAME: &'static str;
    /// The request order: an identity / auto-increment integer column (`INT` or `BIGINT`).
    const TICKET: &'static str;
    /// Who asked (text).
    const OWNER: &'static str;
    /// Which resource the request is for (text); `None`: the table serves one resource.
    const RESOURCE: Option<&'static str>;
    /// The access-type column and the values that mean shared (a reader) and exclusive (a
    /// writer); `None`: every request is shared (a plain semaphore).
    const MODE: Option<ModeColumn>;
    /// The granted flag the library adds (boolean, default false).
    const GRANTED: &'static str;
    /// The expiry the library adds (`BIGINT`, µs since 1970, database clock).
    const EXPIRES_AT: &'static str;
}

/// A [`ControlTable`] with a resource column: each value of it is a resource of its own
/// (`Model::semaphore(resource, permits)`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no resource column: its control table queues for one resource",
    label = "call it without a resource",
    note = "add `resource = <text column>` to `semaphore(...)` to queue for many resources in one table"
)]
pub trait ResourceColumn: ControlTable {}

/// A [`ControlTable`] without a resource column: the table queues for one resource
/// (`Model::semaphore(permits)`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has a resource column: say which resource",
    label = "pass the resource first",
    note = "a control table with `resource = …` serves many resources"
)]
pub trait OneResource: ControlTable {}

/// A [`ControlTable`] with an access-type column (`mode = …`): what a reader/writer lock needs.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no access-type column, so it cannot tell readers from writers",
    label = "`rw_lock` needs `mode = …`",
    note = "add `mode = <text column>, shared = \"R\", exclusive = \"W\"` to `semaphore(...)`"
)]
pub trait HasModeColumn: ControlTable {}

/// The access-type column of a control table, and what its values mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeColumn {
    /// The column's name.
    pub column: &'static str,
    /// The value written for, and read as, a shared request (a reader).
    pub shared: &'static str,
    /// The value written for, and read as, an exclusive request (a writer). Any value other
    /// than `shared` is read as exclusive: an unknown value can only make admission stricter.
    pub exclusive: &'static str,
}

/// A table Diesel can render on every backend this build enables (blanket-implemented; the
/// bound lets the statements below be written once for all backends).
pub trait OnEveryBackend: PgFragment + SqliteFragment + MysqlFragment {}
impl<T: PgFragment + SqliteFragment + MysqlFragment> OnEveryBackend for T {}

macro_rules! fragment_on {
    ($name:ident, $feature:literal, $db:ty) => {
        #[doc = concat!("Renders on `", stringify!($db), "` when the `", $feature, "` feature is on.")]
        #[cfg(feature = $feature)]
        pub trait $name: QueryFragment<$db> {}
        #[cfg(feature = $feature)]
        impl<T: QueryFragment<$db>> $name for T {}
        #[doc = concat!("Nothing: the `", $feature, "` feature is off.")]
        #[cfg(not(feature = $feature))]
        pub trait $name {}
        #[cfg(not(feature = $feature))]
        impl<T> $name for T {}
    };
}
fragment_on!(PgFragment, "postgres", diesel::pg::Pg);
fragment_on!(SqliteFragment, "sqlite", diesel::sqlite::Sqlite);
fragment_on!(MysqlFragment, "mysql", diesel::mysql::Mysql);

/// One request statement on a control table.
#[derive(Debug, Clone, Copy)]
pub enum ControlOp<'a> {
    /// Deletes the resource's requests whose expiry passed.
    RemoveExpired,
    /// The resource's requests in ticket order.
    Queue,
    /// Inserts a waiting request and returns its ticket.
    Insert(&'a NewTicket<'a>),
    /// Marks waiting requests granted.
    Grant(&'a [i64]),
    /// Pushes a request's expiry (only if it is granted, with `granted_only`).
    Touch {
        /// The request.
        ticket: i64,
        /// Its owner.
        owner: &'a str,
        /// The new expiry: now + ttl.
        ttl: Ttl,
        /// Touch only a granted request.
        granted_only: bool,
    },
    /// Whether a request is granted.
    IsGranted {
        /// The request.
        ticket: i64,
        /// Its owner.
        owner: &'a str,
    },
    /// Deletes a request.
    Delete {
        /// The request.
        ticket: i64,
        /// Its owner.
        owner: &'a str,
    },
}

/// What a [`ControlOp`] returned.
#[derive(Debug)]
pub enum ControlOut {
    /// Rows changed.
    Count(usize),
    /// The queue.
    Rows(Vec<TicketRow>),
    /// A new ticket.
    Ticket(i64),
    /// A flag.
    Flag(bool),
}

/// A control table's statements on each backend: the object a semaphore on the user's table
/// carries, so the protocol stays non-generic ([`SemaphoreStatements`] is object safe). Each
/// backend's `SemaphoreStatements::control` calls the method of its own connection type.
pub trait ControlTableOps: Send + Sync + fmt::Debug {
    /// [`ControlTable::NAME`].
    fn name(&self) -> &'static str;
    /// Whether the table has an access-type column (reader/writer locks).
    fn has_modes(&self) -> bool;
    /// Runs `op` on PostgreSQL.
    #[cfg(feature = "postgres")]
    fn on_pg(
        &self,
        conn: &mut diesel::PgConnection,
        resource: Option<&str>,
        op: ControlOp<'_>,
    ) -> QueryResult<ControlOut>;
    /// Runs `op` on SQLite.
    #[cfg(feature = "sqlite")]
    fn on_sqlite(
        &self,
        conn: &mut diesel::SqliteConnection,
        resource: Option<&str>,
        op: ControlOp<'_>,
    ) -> QueryResult<ControlOut>;
    /// Runs `op` on MySQL / MariaDB.
    #[cfg(feature = "mysql")]
    fn on_mysql(
        &self,
        conn: &mut diesel::MysqlConnection,
        resource: Option<&str>,
        op: ControlOp<'_>,
    ) -> QueryResult<ControlOut>;
}

/// [`ControlTableOps`] of model `T`.
pub(crate) struct OpsOf<T>(PhantomData<fn() -> T>);

impl<T> OpsOf<T> {
    pub(crate) fn new() -> Self {
        OpsOf(PhantomData)
    }
}

impl<T: ControlTable> fmt::Debug for OpsOf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ControlTable").field(&T::NAME).finish()
    }
}

impl<T: ControlTable> ControlTableOps for OpsOf<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn has_modes(&self) -> bool {
        T::MODE.is_some()
    }

    #[cfg(feature = "postgres")]
    fn on_pg(
        &self,
        conn: &mut diesel::PgConnection,
        resource: Option<&str>,
        op: ControlOp<'_>,
    ) -> QueryResult<ControlOut> {
        run::<T, _>(conn, resource, op, true)
    }

    #[cfg(feature = "sqlite")]
    fn on_sqlite(
        &self,
        conn: &mut diesel::SqliteConnection,
        resource: Option<&str>,
        op: ControlOp<'_>,
    ) -> QueryResult<ControlOut> {
        run::<T, _>(conn, resource, op, true)
    }

    #[cfg(feature = "mysql")]
    fn on_mysql(
        &self,
        conn: &mut diesel::MysqlConnection,
        resource: Option<&str>,
        op: ControlOp<'_>,
    ) -> QueryResult<ControlOut> {
        if let ControlOp::Insert(_) = op {
            // No `RETURNING`: the auto-increment value of this session's insert.
            run::<T, _>(conn, resource, op, false)?;
            return Ok(ControlOut::Ticket(crate::backend::mysql::inserted_id(
                conn,
            )?));
        }
        run::<T, _>(conn, resource, op, false)
    }
}

/// Runs `op` on `conn`. `returning`: the insert returns the ticket itself.
fn run<T, C>(
    conn: &mut C,
    resource: Option<&str>,
    op: ControlOp<'_>,
    returning: bool,
) -> QueryResult<ControlOut>
where
    T: ControlTable,
    C: diesel::connection::LoadConnection,
    C::Backend: SqlDialect + 'static,
    T::Table: QueryFragment<C::Backend>,
    (i64, String, String, bool, i64):
        diesel::deserialize::FromSqlRow<(BigInt, Text, Text, Bool, BigInt), C::Backend>,
    i64: diesel::deserialize::FromSqlRow<BigInt, C::Backend>,
    bool: diesel::deserialize::FromSqlRow<Bool, C::Backend>,
    C::Backend: diesel::sql_types::HasSqlType<BigInt> + diesel::sql_types::HasSqlType<Bool>,
    (BigInt, Text, Text, Bool, BigInt): diesel::query_builder::QueryId,
{
    let stmt = Stmt::<T> {
        table: T::Table::default(),
        resource,
        op,
        returning,
        now_plus: NowPlus(match op {
            ControlOp::Insert(new) => new.ttl.as_micros(),
            ControlOp::Touch { ttl, .. } => ttl.as_micros(),
            _ => 0,
        }),
    };
    if let ControlOp::Insert(new) = op {
        if new.mode == Mode::Exclusive && T::MODE.is_none() {
            // Written as shared it would be read back as shared: a writer among readers.
            return Err(diesel::result::Error::QueryBuilderError(
                format!(
                    "control table `{}` has no access-type column: a writer needs \
                     `#[claimable(semaphore(mode = …, shared = \"…\", exclusive = \"…\"))]`",
                    T::NAME
                )
                .into(),
            ));
        }
    }
    match op {
        ControlOp::Queue => {
            let rows: Vec<(i64, String, String, bool, i64)> =
                Loading::<T, (BigInt, Text, Text, Bool, BigInt)>::new(stmt).load(conn)?;
            Ok(ControlOut::Rows(
                rows.into_iter()
                    .map(|(ticket, owner, mode, granted, expires_at)| TicketRow {
                        ticket,
                        // A `CHAR(n)` owner comes back padded on PostgreSQL.
                        owner: owner.trim_end().to_owned(),
                        mode: mode_of::<T>(mode.trim_end()).as_str().to_owned(),
                        granted,
                        // The user's table has no request or grant times.
                        requested_at: 0,
                        granted_at: None,
                        expires_at,
                    })
                    .collect(),
            ))
        }
        ControlOp::Insert(_) if returning => Ok(ControlOut::Ticket(
            Loading::<T, BigInt>::new(stmt).get_result(conn)?,
        )),
        ControlOp::IsGranted { .. } => {
            let granted: Option<bool> = Loading::<T, Bool>::new(stmt)
                .get_result(conn)
                .optional_row()?;
            Ok(ControlOut::Flag(granted.unwrap_or(false)))
        }
        ControlOp::Grant([]) => Ok(ControlOut::Count(0)),
        _ => Ok(ControlOut::Count(stmt.execute(conn)?)),
    }
}

trait OptionalRow<T> {
    fn optional_row(self) -> QueryResult<Option<T>>;
}

impl<T> OptionalRow<T> for QueryResult<T> {
    fn optional_row(self) -> QueryResult<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(diesel::result::Error::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What a stored access type means (see [`ModeColumn::exclusive`]).
fn mode_of<T: ControlTable>(stored: &str) -> Mode {
    match T::MODE {
        Some(m) if stored == m.shared => Mode::Shared,
        Some(_) => Mode::Exclusive,
        None => Mode::Shared,
    }
}

/// The value written for `mode` (`None`: the table has no access-type column).
fn mode_value<T: ControlTable>(mode: Mode) -> Option<&'static str> {
    T::MODE.map(|m| match mode {
        Mode::Shared => m.shared,
        Mode::Exclusive => m.exclusive,
    })
}

/// One statement of [`ControlOp`] on `T`'s table.
struct Stmt<'a, T: ControlTable> {
    table: T::Table,
    resource: Option<&'a str>,
    op: ControlOp<'a>,
    returning: bool,
    now_plus: NowPlus,
}

impl<T: ControlTable> QueryId for Stmt<'_, T> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<T: ControlTable, Conn> RunQueryDsl<Conn> for Stmt<'_, T> {}

impl<'a, T, DB> QueryFragment<DB> for Stmt<'a, T>
where
    T: ControlTable,
    T::Table: QueryFragment<DB>,
    DB: SqlDialect,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        match &self.op {
            ControlOp::RemoveExpired => {
                out.push_sql("DELETE FROM ");
                self.table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE ");
                out.push_identifier(T::EXPIRES_AT)?;
                out.push_sql(" < ");
                DbNowMicros.walk_ast(out.reborrow())?;
                self.and_resource(&mut out)?;
            }
            ControlOp::Queue => {
                out.push_sql("SELECT ");
                DB::push_as_bigint(&mut out, T::TICKET)?;
                out.push_sql(", ");
                out.push_identifier(T::OWNER)?;
                out.push_sql(", ");
                match T::MODE {
                    Some(m) => out.push_identifier(m.column)?,
                    // A constant of this module, not data: every request of the table is shared.
                    None => out.push_sql("''"),
                }
                out.push_sql(", ");
                out.push_identifier(T::GRANTED)?;
                out.push_sql(", ");
                out.push_identifier(T::EXPIRES_AT)?;
                out.push_sql(" FROM ");
                self.table.walk_ast(out.reborrow())?;
                out.push_sql(" WHERE 1 = 1");
                self.and_resource(&mut out)?;
                out.push_sql(" ORDER BY ");
                out.push_identifier(T::TICKET)?;
            }
            ControlOp::Insert(new) => {
                out.push_sql("INSERT INTO ");
                self.table.walk_ast(out.reborrow())?;
                out.push_sql(" (");
                out.push_identifier(T::OWNER)?;
                if let (Some(col), Some(_)) = (T::RESOURCE, self.resource) {
                    out.push_sql(", ");
                    out.push_identifier(col)?;
                }
                if let Some(m) = T::MODE {
                    out.push_sql(", ");
                    out.push_identifier(m.column)?;
                }
                out.push_sql(", ");
                out.push_identifier(T::GRANTED)?;
                out.push_sql(", ");
                out.push_identifier(T::EXPIRES_AT)?;
                out.push_sql(") VALUES (");
                DB::bind_str(&mut out, new.owner)?;
                if let (Some(_), Some(resource)) = (T::RESOURCE, self.resource) {
                    out.push_sql(", ");
                    DB::bind_str(&mut out, resource)?;
                }
                if let Some(value) = mode_value::<T>(new.mode) {
                    out.push_sql(", ");
                    DB::bind_str(&mut out, value)?;
                }
                out.push_sql(", FALSE, ");
                self.now_plus.walk_ast(out.reborrow())?;
                out.push_sql(")");
                if self.returning {
                    out.push_sql(" RETURNING ");
                    DB::push_as_bigint(&mut out, T::TICKET)?;
                }
            }
            ControlOp::Grant(tickets) => {
                out.push_sql("UPDATE ");
                self.table.walk_ast(out.reborrow())?;
                out.push_sql(" SET ");
                out.push_identifier(T::GRANTED)?;
                out.push_sql(" = TRUE WHERE ");
                out.push_identifier(T::GRANTED)?;
                out.push_sql(" = FALSE AND ");
                out.push_identifier(T::TICKET)?;
                out.push_sql(" IN (");
                for (i, ticket) in tickets.iter().enumerate() {
                    if i > 0 {
                        out.push_sql(", ");
                    }
                    DB::bind_i64(&mut out, ticket)?;
                }
                out.push_sql(")");
            }
            ControlOp::Touch {
                ticket,
                owner,
                granted_only,
                ..
            } => {
                out.push_sql("UPDATE ");
                self.table.walk_ast(out.reborrow())?;
                out.push_sql(" SET ");
                out.push_identifier(T::EXPIRES_AT)?;
                out.push_sql(" = ");
                self.now_plus.walk_ast(out.reborrow())?;
                self.where_request(&mut out, ticket, owner)?;
                if *granted_only {
                    out.push_sql(" AND ");
                    out.push_identifier(T::GRANTED)?;
                    out.push_sql(" = TRUE");
                }
            }
            ControlOp::IsGranted { ticket, owner } => {
                out.push_sql("SELECT ");
                out.push_identifier(T::GRANTED)?;
                out.push_sql(" FROM ");
                self.table.walk_ast(out.reborrow())?;
                self.where_request(&mut out, ticket, owner)?;
            }
            ControlOp::Delete { ticket, owner } => {
                out.push_sql("DELETE FROM ");
                self.table.walk_ast(out.reborrow())?;
                self.where_request(&mut out, ticket, owner)?;
            }
        }
        Ok(())
    }
}

impl<'a, T: ControlTable> Stmt<'a, T> {
    /// ` AND <resource> = ?` when the table has a resource column.
    fn and_resource<'b, DB: SqlDialect>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        if let (Some(col), Some(resource)) = (T::RESOURCE, self.resource) {
            out.push_sql(" AND ");
            out.push_identifier(col)?;
            out.push_sql(" = ");
            DB::bind_str(out, resource)?;
        }
        Ok(())
    }

    /// ` WHERE <ticket> = ? AND <owner> = ?`.
    fn where_request<'b, DB: SqlDialect>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
        ticket: &'b i64,
        owner: &'b str,
    ) -> QueryResult<()> {
        out.push_sql(" WHERE ");
        out.push_identifier(T::TICKET)?;
        out.push_sql(" = ");
        DB::bind_i64(out, ticket)?;
        out.push_sql(" AND ");
        out.push_identifier(T::OWNER)?;
        out.push_sql(" = ");
        DB::bind_str(out, owner)
    }
}

/// A [`Stmt`] that returns rows of SQL type `ST`.
struct Loading<'a, T: ControlTable, ST> {
    stmt: Stmt<'a, T>,
    _st: PhantomData<ST>,
}

impl<'a, T: ControlTable, ST> Loading<'a, T, ST> {
    fn new(stmt: Stmt<'a, T>) -> Self {
        Loading {
            stmt,
            _st: PhantomData,
        }
    }
}

impl<T: ControlTable, ST> QueryId for Loading<'_, T, ST> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<T: ControlTable, ST, DB> QueryFragment<DB> for Loading<'_, T, ST>
where
    T::Table: QueryFragment<DB>,
    DB: SqlDialect,
{
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.stmt.walk_ast(out)
    }
}

impl<T: ControlTable, ST: diesel::sql_types::SqlType> Query for Loading<'_, T, ST> {
    type SqlType = ST;
}

impl<T: ControlTable, ST, Conn> RunQueryDsl<Conn> for Loading<'_, T, ST> {}

/// The protocol's statements for a semaphore on a control table: request statements go to the
/// user's table (through `ops`), resource statements to the connection's built-in ones.
pub(crate) struct OnControlTable<'a> {
    pub(crate) inner: &'a mut dyn SemaphoreStatements,
    pub(crate) ops: &'a dyn ControlTableOps,
    /// The resource as the user's table stores it (`None`: the table has no resource column).
    pub(crate) resource: Option<&'a str>,
}

impl OnControlTable<'_> {
    fn control(&mut self, op: ControlOp<'_>) -> QueryResult<ControlOut> {
        self.inner.control(self.ops, self.resource, op)
    }

    fn count(&mut self, op: ControlOp<'_>) -> QueryResult<usize> {
        match self.control(op)? {
            ControlOut::Count(n) => Ok(n),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(out: ControlOut) -> diesel::result::Error {
    diesel::result::Error::QueryBuilderError(
        format!("control table statement returned {out:?}").into(),
    )
}

impl SemaphoreStatements for OnControlTable<'_> {
    fn serialized(&mut self, max_wait: Option<Duration>, body: &mut Body<'_>) -> crate::Result<()> {
        let (ops, resource) = (self.ops, self.resource);
        self.inner.serialized(max_wait, &mut |inner| {
            body(&mut OnControlTable {
                inner,
                ops,
                resource,
            })
        })
    }

    fn lock_resource(&mut self, key: &str) -> QueryResult<Option<i32>> {
        self.inner.lock_resource(key)
    }

    fn create_resource(&mut self, key: &str, permits: i32) -> QueryResult<()> {
        self.inner.create_resource(key, permits)
    }

    fn set_permits(&mut self, key: &str, permits: i32) -> QueryResult<()> {
        self.inner.set_permits(key, permits)
    }

    fn delete_resource(&mut self, key: &str) -> QueryResult<usize> {
        self.inner.delete_resource(key)
    }

    fn remove_expired(&mut self, _key: &str) -> QueryResult<usize> {
        self.count(ControlOp::RemoveExpired)
    }

    fn queue(&mut self, _key: &str) -> QueryResult<Vec<TicketRow>> {
        match self.control(ControlOp::Queue)? {
            ControlOut::Rows(rows) => Ok(rows),
            other => Err(unexpected(other)),
        }
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        match self.control(ControlOp::Insert(new))? {
            ControlOut::Ticket(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    fn grant(&mut self, tickets: &[i64]) -> QueryResult<usize> {
        self.count(ControlOp::Grant(tickets))
    }

    fn touch(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize> {
        self.count(ControlOp::Touch {
            ticket,
            owner,
            ttl,
            granted_only: false,
        })
    }

    fn touch_granted(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize> {
        self.count(ControlOp::Touch {
            ticket,
            owner,
            ttl,
            granted_only: true,
        })
    }

    fn delete_ticket(&mut self, ticket: i64, owner: &str) -> QueryResult<usize> {
        self.count(ControlOp::Delete { ticket, owner })
    }

    fn is_granted(&mut self, ticket: i64, owner: &str) -> QueryResult<bool> {
        match self.control(ControlOp::IsGranted { ticket, owner })? {
            ControlOut::Flag(b) => Ok(b),
            other => Err(unexpected(other)),
        }
    }

    fn notify(&mut self, key: &str) -> QueryResult<()> {
        self.inner.notify(key)
    }

    fn control(
        &mut self,
        ops: &dyn ControlTableOps,
        resource: Option<&str>,
        op: ControlOp<'_>,
    ) -> QueryResult<ControlOut> {
        self.inner.control(ops, resource, op)
    }
}
