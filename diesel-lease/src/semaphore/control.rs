//! Seed 001 on the user's own control table: the semaphore's requests are rows of a table the
//! application already has (`ProcessControl`: queue position, requesting id, resource, access
//! type), described by `#[control_table(...)]`.
//!
//! The protocol does not change: it runs over [`SemaphoreStatements`], and [`OnControlTable`]
//! is a `SemaphoreStatements` whose request statements address the user's table and whose
//! resource statements (the row every queue change locks first, the permit count, the
//! notifications) stay on the library's `diesel_lease_semaphores`, under a key of their own
//! (`<table>#<resource>`). So the commit-order-race argument of the `protocol` module holds
//! unchanged: every change to a queue takes that row's lock first, and grants are persisted
//! flags (the `granted` column the library adds), never inferred from positions.
//!
//! The request statements are written once, as `QueryFragment<DB>`s over [`SqlDialect`]; what
//! differs per connection (MySQL has no `RETURNING`: a new ticket is read back) is
//! [`ControlDialect`], implemented next to each connection's [`SemaphoreStatements`]. A
//! [`Semaphore`](crate::semaphore::Semaphore) learns its table's type when it is made and its
//! connection's type only when it is used, so it keeps the table as a `&dyn`
//! [`OnEveryConnection`] ([`TableOf<T>`]) and the connection's type takes its own
//! [`ControlRequests<C>`] from it (an upcast, [`ControlDialect::requests_on`]): both are chosen
//! by type, and `OnControlTable<T, C>` is plain generic code.
//!
//! The user's table needs two more columns, which only the library writes: `granted` (boolean,
//! default false) and `expires_at` (`BIGINT`, microseconds since 1970 on the database clock;
//! the semaphores guide's DDL defaults it to the largest `BIGINT`, so that a row another program inserts
//! the seed's way never counts as expired). Every other column must have a default: the library
//! inserts only the ticket's own values.
//!
//! Statements are built from the columns' names in Diesel's schema (`Column::NAME`), never from
//! strings a caller passes; values are always bound.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use diesel::deserialize::FromSqlRow;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, HasSqlType, Text};
use diesel::{OptionalExtension, QueryResult, RunQueryDsl};

use super::statements::{Body, NewTicket, SemaphoreStatements, TicketRow};
use crate::backend::{Dialect, SqlDialect};
use crate::clock::{DbNowMicros, NowPlus};
use crate::notify::Notifications;
use crate::Ttl;
use lease_core::admission::Mode;

/// A model whose table holds semaphore requests: the description
/// `#[control_table(...)]` writes (see [`Claimable`](crate::Claimable), "Semaphores on a
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
    label = "use `table_semaphore(permits)` or `table_rw_lock()`, without a resource",
    note = "add `resource = <text column>` to `#[control_table(...)]` to queue for many resources in one table"
)]
pub trait ResourceColumn: ControlTable {}

/// A [`ControlTable`] without a resource column: the table queues for one resource
/// (`Model::table_semaphore(permits)`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has a resource column: say which resource",
    label = "use `semaphore(resource, permits)` or `rw_lock(resource)`",
    note = "a control table with `resource = …` serves many resources"
)]
pub trait OneResource: ControlTable {}

/// A [`ControlTable`] with an access-type column (`mode = …`): what a reader/writer lock needs.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no access-type column, so it cannot tell readers from writers",
    label = "`rw_lock` needs `mode = …`",
    note = "add `mode = <text column>, shared = \"R\", exclusive = \"W\"` to `#[control_table(...)]`"
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
pub trait OnEveryBackend: PgFragment + SqliteFragment + MysqlFragment + MariadbFragment {}
impl<T: PgFragment + SqliteFragment + MysqlFragment + MariadbFragment> OnEveryBackend for T {}

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
fragment_on!(MariadbFragment, "mariadb", diesel::mariadb::Mariadb);
/// What a semaphore on a control table needs of a connection beyond [`SemaphoreStatements`]
/// (which keep the resource's row): how a new request's ticket comes back, and which of a
/// table's [`ControlRequests`] is its own. Implemented per connection: PostgreSQL and SQLite
/// below (`INSERT … RETURNING`), MySQL in `mysql_like.rs` (the session's last auto-increment
/// value).
pub trait ControlDialect: SemaphoreStatements + Dialect {
    /// Runs `insert` and returns the new request's ticket.
    #[doc(hidden)]
    fn insert_request<T: ControlTable>(&mut self, insert: Insert<'_, T>) -> QueryResult<i64>;

    /// The statements of `table` on this connection type: an upcast.
    #[doc(hidden)]
    fn requests_on(table: &dyn OnEveryConnection) -> &dyn ControlRequests<Self>;
}

/// What the semaphore operations need of a connection: the protocol's statements
/// (`SemaphoreStatements`, object safe), what a control table needs besides
/// (`ControlDialect`) and the backend's notifications. Blanket-implemented.
pub trait SemaphoreDialect: Notifications + SemaphoreStatements + ControlDialect {}
impl<C: Notifications + SemaphoreStatements + ControlDialect> SemaphoreDialect for C {}

/// A control table reached through connections of type `C`. Object safe, so a semaphore, which
/// is not generic, can keep it (as part of an [`OnEveryConnection`]).
pub trait ControlRequests<C>: fmt::Debug {
    /// Runs `body` with the protocol's statements on `conn`: requests are the table's rows (of
    /// `resource`, when it has a resource column), the resource's row is the built-in one.
    #[doc(hidden)]
    fn run(&self, conn: &mut C, resource: Option<&str>, body: &mut Body<'_>) -> crate::Result<()>;
}

macro_rules! requests_on {
    ($name:ident, $feature:literal, $conn:ty) => {
        #[doc = concat!("[`ControlRequests`] on `", stringify!($conn), "` when the `", $feature, "` feature is on.")]
        #[cfg(feature = $feature)]
        pub trait $name: ControlRequests<$conn> {}
        #[cfg(feature = $feature)]
        impl<T: ControlRequests<$conn> + ?Sized> $name for T {}
        #[doc = concat!("Nothing: the `", $feature, "` feature is off.")]
        #[cfg(not(feature = $feature))]
        pub trait $name {}
        #[cfg(not(feature = $feature))]
        impl<T: ?Sized> $name for T {}
    };
}
requests_on!(RequestsOnPg, "postgres", diesel::PgConnection);
requests_on!(RequestsOnSqlite, "sqlite", diesel::SqliteConnection);
requests_on!(RequestsOnMysql, "mysql", diesel::MysqlConnection);
requests_on!(
    RequestsOnMariadb,
    "mariadb",
    diesel::mariadb::MariadbConnection
);

/// A control table reached through every connection type this build enables: what a semaphore
/// on it keeps (a `TableOf<T>`). Each connection type takes its own [`ControlRequests`] from it
/// ([`ControlDialect::requests_on`]).
pub trait OnEveryConnection:
    RequestsOnPg + RequestsOnSqlite + RequestsOnMysql + RequestsOnMariadb + fmt::Debug + Send + Sync
{
}
impl<T> OnEveryConnection for T where
    T: RequestsOnPg
        + RequestsOnSqlite
        + RequestsOnMysql
        + RequestsOnMariadb
        + fmt::Debug
        + Send
        + Sync
        + ?Sized
{
}

/// Model `T`'s control table: its [`ControlRequests`] on every connection that can run its
/// statements.
pub(crate) struct TableOf<T>(PhantomData<fn() -> T>);

impl<T: ControlTable> TableOf<T> {
    /// What a semaphore on `T` keeps.
    pub(crate) fn handle() -> &'static dyn OnEveryConnection {
        &TableOf::<T>(PhantomData)
    }
}

impl<T: ControlTable> fmt::Debug for TableOf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ControlTable").field(&T::NAME).finish()
    }
}

impl<T: ControlTable, C> ControlRequests<C> for TableOf<T>
where
    for<'a> OnControlTable<'a, T, C>: SemaphoreStatements,
{
    fn run(&self, conn: &mut C, resource: Option<&str>, body: &mut Body<'_>) -> crate::Result<()> {
        body(&mut OnControlTable::<T, C>::new(conn, resource))
    }
}

/// The protocol's statements for a semaphore on control table `T`, on `conn`: request
/// statements go to the user's table, resource statements to the connection's built-in ones.
pub(crate) struct OnControlTable<'a, T, C> {
    conn: &'a mut C,
    /// The resource as the user's table stores it (`None`: the table has no resource column).
    resource: Option<&'a str>,
    table: PhantomData<fn() -> T>,
}

impl<'a, T, C> OnControlTable<'a, T, C> {
    fn new(conn: &'a mut C, resource: Option<&'a str>) -> Self {
        OnControlTable {
            conn,
            resource,
            table: PhantomData,
        }
    }
}

/// The SQL types of a queue row: ticket, owner, access type, granted, expiry.
type QueueRow = (BigInt, Text, Text, Bool, BigInt);

impl<T, C> SemaphoreStatements for OnControlTable<'_, T, C>
where
    T: ControlTable,
    C: ControlDialect,
    T::Table: QueryFragment<C::Backend>,
    (i64, String, String, bool, i64): FromSqlRow<QueueRow, C::Backend>,
    bool: FromSqlRow<Bool, C::Backend>,
    C::Backend: HasSqlType<Bool>,
{
    fn serialized(&mut self, max_wait: Option<Duration>, body: &mut Body<'_>) -> crate::Result<()> {
        let resource = self.resource;
        self.conn.write_tx_within(max_wait, |conn| {
            body(&mut OnControlTable::<T, C>::new(conn, resource))
        })
    }

    fn lock_resource(&mut self, key: &str) -> QueryResult<Option<i32>> {
        self.conn.lock_resource(key)
    }

    fn create_resource(&mut self, key: &str, permits: i32) -> QueryResult<()> {
        self.conn.create_resource(key, permits)
    }

    fn set_permits(&mut self, key: &str, permits: i32) -> QueryResult<()> {
        self.conn.set_permits(key, permits)
    }

    fn delete_resource(&mut self, key: &str) -> QueryResult<usize> {
        self.conn.delete_resource(key)
    }

    fn notify(&mut self, key: &str) -> QueryResult<()> {
        self.conn.notify(key)
    }

    fn wait_when_busy(&mut self, error: &diesel::result::Error) -> bool {
        self.conn.wait_when_busy(error)
    }

    fn within_wait(
        &mut self,
        max_wait: Option<Duration>,
        write: &mut dyn FnMut(&mut dyn SemaphoreStatements) -> QueryResult<usize>,
    ) -> QueryResult<usize> {
        match max_wait {
            // As the built-in tables' statements do (see the trait).
            Some(wait) => {
                let resource = self.resource;
                self.conn.bounded_busy_wait(wait, |conn| {
                    write(&mut OnControlTable::<T, C>::new(conn, resource))
                })
            }
            None => write(self),
        }
    }

    fn remove_expired(&mut self, _key: &str) -> QueryResult<usize> {
        RemoveExpired::<T> {
            table: T::Table::default(),
            resource: self.resource,
        }
        .execute(self.conn)
    }

    fn queue(&mut self, _key: &str) -> QueryResult<Vec<TicketRow>> {
        let rows: Vec<(i64, String, String, bool, i64)> = Queue::<T> {
            table: T::Table::default(),
            resource: self.resource,
        }
        .load(self.conn)?;
        Ok(rows
            .into_iter()
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
            .collect())
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        if new.mode == Mode::Exclusive && T::MODE.is_none() {
            // Written as shared it would be read back as shared: a writer among readers.
            return Err(diesel::result::Error::QueryBuilderError(
                format!(
                    "control table `{}` has no access-type column: a writer needs \
                     `#[control_table(mode = …, shared = \"…\", exclusive = \"…\")]`",
                    T::NAME
                )
                .into(),
            ));
        }
        self.conn.insert_request(Insert::<T> {
            table: T::Table::default(),
            resource: self.resource,
            owner: new.owner,
            mode: mode_value::<T>(new.mode),
            expires_at: NowPlus(new.ttl.as_micros()),
            returning: false,
        })
    }

    fn certify(&mut self, key: &str, permits: i32) -> QueryResult<()> {
        self.conn.certify(key, permits)
    }

    fn grant(&mut self, tickets: &[i64]) -> QueryResult<usize> {
        if tickets.is_empty() {
            return Ok(0);
        }
        Grant::<T> {
            table: T::Table::default(),
            tickets,
        }
        .execute(self.conn)
    }

    fn touch(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize> {
        self.touch_where(ticket, owner, ttl, false)
    }

    fn touch_granted(&mut self, ticket: i64, owner: &str, ttl: Ttl) -> QueryResult<usize> {
        self.touch_where(ticket, owner, ttl, true)
    }

    fn touch_many(&mut self, tickets: &[i64], owner: &str, ttl: Ttl) -> QueryResult<usize> {
        if tickets.is_empty() {
            return Ok(0);
        }
        TouchMany::<T> {
            table: T::Table::default(),
            tickets,
            owner,
            expires_at: NowPlus(ttl.as_micros()),
        }
        .execute(self.conn)
    }

    fn delete_ticket(&mut self, ticket: i64, owner: &str) -> QueryResult<usize> {
        Delete::<T> {
            table: T::Table::default(),
            request: Ticket { ticket, owner },
        }
        .execute(self.conn)
    }

    fn is_granted(&mut self, ticket: i64, owner: &str) -> QueryResult<bool> {
        let granted: Option<bool> = IsGranted::<T> {
            table: T::Table::default(),
            request: Ticket { ticket, owner },
        }
        .get_result(self.conn)
        .optional()?;
        Ok(granted.unwrap_or(false))
    }
}

impl<T: ControlTable, C: ControlDialect> OnControlTable<'_, T, C>
where
    T::Table: QueryFragment<C::Backend>,
{
    /// Pushes a request's expiry to now + `ttl`; with `granted_only`, only if it is granted.
    fn touch_where(
        &mut self,
        ticket: i64,
        owner: &str,
        ttl: Ttl,
        granted_only: bool,
    ) -> QueryResult<usize> {
        Touch::<T> {
            table: T::Table::default(),
            request: Ticket { ticket, owner },
            expires_at: NowPlus(ttl.as_micros()),
            granted_only,
        }
        .execute(self.conn)
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

/// Deletes the resource's requests whose expiry passed.
struct RemoveExpired<'a, T: ControlTable> {
    table: T::Table,
    resource: Option<&'a str>,
}

/// The resource's requests in ticket order.
struct Queue<'a, T: ControlTable> {
    table: T::Table,
    resource: Option<&'a str>,
}

/// Inserts a waiting request; [`Insert::returning_ticket`] makes it return the ticket.
pub struct Insert<'a, T: ControlTable> {
    table: T::Table,
    resource: Option<&'a str>,
    owner: &'a str,
    /// The access type's value (`None`: the table has no access-type column).
    mode: Option<&'static str>,
    expires_at: NowPlus,
    returning: bool,
}

impl<T: ControlTable> Insert<'_, T> {
    /// The insert with `RETURNING` the ticket (where the backend has it).
    #[doc(hidden)]
    pub fn returning_ticket(self) -> Self {
        Insert {
            returning: true,
            ..self
        }
    }
}

impl<T: ControlTable> fmt::Debug for Insert<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Insert")
            .field("table", &T::NAME)
            .field("resource", &self.resource)
            .field("owner", &self.owner)
            .field("mode", &self.mode)
            .field("returning", &self.returning)
            .finish()
    }
}

/// Marks waiting requests granted.
struct Grant<'a, T: ControlTable> {
    table: T::Table,
    tickets: &'a [i64],
}

/// One request, by ticket and owner.
struct Ticket<'a> {
    ticket: i64,
    owner: &'a str,
}

/// Pushes a request's expiry; with `granted_only`, only if it is granted.
struct Touch<'a, T: ControlTable> {
    table: T::Table,
    request: Ticket<'a>,
    expires_at: NowPlus,
    granted_only: bool,
}

/// Pushes the expiry of several requests of one owner.
struct TouchMany<'a, T: ControlTable> {
    table: T::Table,
    tickets: &'a [i64],
    owner: &'a str,
    expires_at: NowPlus,
}

/// Whether a request is granted.
struct IsGranted<'a, T: ControlTable> {
    table: T::Table,
    request: Ticket<'a>,
}

/// Deletes a request.
struct Delete<'a, T: ControlTable> {
    table: T::Table,
    request: Ticket<'a>,
}

/// A statement's query id (none: its text depends on the table and on how many tickets it
/// binds) and `RunQueryDsl`; `=> ST`: it returns rows of SQL type `ST`.
macro_rules! statement {
    ($($name:ident $(=> $st:ty)?),* $(,)?) => {$(
        impl<T: ControlTable> QueryId for $name<'_, T> {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }
        impl<T: ControlTable, Conn> RunQueryDsl<Conn> for $name<'_, T> {}
        $(impl<T: ControlTable> Query for $name<'_, T> {
            type SqlType = $st;
        })?
    )*};
}
statement!(
    RemoveExpired,
    Queue => QueueRow,
    Insert => BigInt,
    Grant,
    Touch,
    TouchMany,
    IsGranted => Bool,
    Delete,
);

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for RemoveExpired<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("DELETE FROM ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        out.push_identifier(T::EXPIRES_AT)?;
        out.push_sql(" < ");
        DbNowMicros.walk_ast(out.reborrow())?;
        and_resource::<T, DB>(&mut out, self.resource)
    }
}

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for Queue<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
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
        and_resource::<T, DB>(&mut out, self.resource)?;
        out.push_sql(" ORDER BY ");
        out.push_identifier(T::TICKET)
    }
}

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for Insert<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
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
        DB::bind_str(&mut out, self.owner)?;
        if let (Some(_), Some(resource)) = (T::RESOURCE, self.resource) {
            out.push_sql(", ");
            DB::bind_str(&mut out, resource)?;
        }
        if let Some(value) = self.mode {
            out.push_sql(", ");
            DB::bind_str(&mut out, value)?;
        }
        out.push_sql(", FALSE, ");
        self.expires_at.walk_ast(out.reborrow())?;
        out.push_sql(")");
        if self.returning {
            out.push_sql(" RETURNING ");
            DB::push_as_bigint(&mut out, T::TICKET)?;
        }
        Ok(())
    }
}

/// `UPDATE table SET expires_at = <now + ttl>`: the head of the statements that push expiries.
fn push_set_expiry<'b, T: ControlTable, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    table: &'b T::Table,
    expires_at: &'b NowPlus,
) -> QueryResult<()>
where
    T::Table: QueryFragment<DB>,
{
    out.push_sql("UPDATE ");
    table.walk_ast(out.reborrow())?;
    out.push_sql(" SET ");
    out.push_identifier(T::EXPIRES_AT)?;
    out.push_sql(" = ");
    expires_at.walk_ast(out.reborrow())
}

/// ` IN (?, ?, …)` with `tickets` bound.
fn push_in_list<'b, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    tickets: &'b [i64],
) -> QueryResult<()> {
    out.push_sql(" IN (");
    for (i, ticket) in tickets.iter().enumerate() {
        if i > 0 {
            out.push_sql(", ");
        }
        DB::bind_i64(out, ticket)?;
    }
    out.push_sql(")");
    Ok(())
}

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for Grant<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        out.push_identifier(T::GRANTED)?;
        out.push_sql(" = TRUE WHERE ");
        out.push_identifier(T::GRANTED)?;
        out.push_sql(" = FALSE AND ");
        out.push_identifier(T::TICKET)?;
        push_in_list(&mut out, self.tickets)
    }
}

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for Touch<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        push_set_expiry::<T, DB>(&mut out, &self.table, &self.expires_at)?;
        self.request.push_where::<T, DB>(&mut out)?;
        if self.granted_only {
            out.push_sql(" AND ");
            out.push_identifier(T::GRANTED)?;
            out.push_sql(" = TRUE");
        }
        Ok(())
    }
}

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for TouchMany<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        push_set_expiry::<T, DB>(&mut out, &self.table, &self.expires_at)?;
        out.push_sql(" WHERE ");
        out.push_identifier(T::OWNER)?;
        out.push_sql(" = ");
        DB::bind_str(&mut out, self.owner)?;
        out.push_sql(" AND ");
        out.push_identifier(T::TICKET)?;
        push_in_list(&mut out, self.tickets)
    }
}

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for IsGranted<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("SELECT ");
        out.push_identifier(T::GRANTED)?;
        out.push_sql(" FROM ");
        self.table.walk_ast(out.reborrow())?;
        self.request.push_where::<T, DB>(&mut out)
    }
}

impl<T: ControlTable, DB: SqlDialect> QueryFragment<DB> for Delete<'_, T>
where
    T::Table: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("DELETE FROM ");
        self.table.walk_ast(out.reborrow())?;
        self.request.push_where::<T, DB>(&mut out)
    }
}

/// ` AND <resource> = ?` when the table has a resource column.
fn and_resource<'b, T: ControlTable, DB: SqlDialect>(
    out: &mut AstPass<'_, 'b, DB>,
    resource: Option<&'b str>,
) -> QueryResult<()> {
    if let (Some(col), Some(resource)) = (T::RESOURCE, resource) {
        out.push_sql(" AND ");
        out.push_identifier(col)?;
        out.push_sql(" = ");
        DB::bind_str(out, resource)?;
    }
    Ok(())
}

impl Ticket<'_> {
    /// ` WHERE <ticket> = ? AND <owner> = ?`.
    fn push_where<'b, T: ControlTable, DB: SqlDialect>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        out.push_sql(" WHERE ");
        out.push_identifier(T::TICKET)?;
        out.push_sql(" = ");
        DB::bind_i64(out, &self.ticket)?;
        out.push_sql(" AND ");
        out.push_identifier(T::OWNER)?;
        out.push_sql(" = ");
        DB::bind_str(out, self.owner)
    }
}

#[cfg(feature = "postgres")]
impl ControlDialect for diesel::PgConnection {
    fn insert_request<T: ControlTable>(&mut self, insert: Insert<'_, T>) -> QueryResult<i64> {
        insert.returning_ticket().get_result(self)
    }

    fn requests_on(table: &dyn OnEveryConnection) -> &dyn ControlRequests<Self> {
        table
    }
}

#[cfg(feature = "sqlite")]
impl ControlDialect for diesel::SqliteConnection {
    fn insert_request<T: ControlTable>(&mut self, insert: Insert<'_, T>) -> QueryResult<i64> {
        insert.returning_ticket().get_result(self)
    }

    fn requests_on(table: &dyn OnEveryConnection) -> &dyn ControlRequests<Self> {
        table
    }
}
