//! The only path from `#[derive(Claimable)]` to the runtime: generated code names every runtime
//! item as `::diesel_lease::__private::…`, so modules can move without touching the derive. Not
//! public API: no stability promise, may change in any release.
//!
//! The derive only implements traits: the capability traits, the markers of optional columns and
//! states, and the column-type checks below.

use diesel::sql_types::{BigInt, Integer, Nullable, SingleValue, SmallInt, SqlType, Text};

pub use crate::admin::statements::AdminStatements;
pub use crate::backend::dialect::Dialect;
pub use crate::backend::sql_dialect::SqlDialect;
pub use crate::claim::cancel::HasCancelState;
pub use crate::claim::cursor::{ClaimOrderKey, CursorConnection, NotNullOrder};
pub use crate::claim::literal::StateLiteral;
pub use crate::claim::markers::{HasAttempts, HasClaimedAt, HasDoneState, HasFailedState};
pub use crate::claim::order::SortOrder;
pub use crate::claim::pause::{HasPauseKey, Pausable, PauseShape};
pub use crate::claim::schedule::TimeColumn;
pub use crate::claim::Claimable;
pub use crate::clock::internal::TimestampType;
pub use crate::model::Keyed;
// The operator's CLI runs the claim module's statements on a table described at run time.
pub use crate::claim::cancel::{cancel_described, cancel_target, CancelStmt};
pub use crate::claim::pause::{pause_described, resume_described, PauseTarget};
pub use crate::claim::retention::{
    purge_table, redrive_table, RetentionConnection, RetentionSqlDialect, RowShape,
};
pub use crate::claim::statements::{ClaimParts, ClaimShape, ClaimStep, ClaimTarget, StatesIn};
// The operator's web page listens for wake-ups; the suite grants leases at chosen instants.
pub use crate::lease::job::{JobConnection, JobLease};
pub use crate::lease::statements::{grant as lease_grant, Grant, Periodic};
pub use crate::notify::Notifications;
pub use crate::once::{ClaimIfNull, InsertOnce, Returning};
pub use crate::semaphore::control::SemaphoreDialect;
// The per-backend dialect traits: sealed (implemented for the four connections), unnameable
// outside; a generic caller bounds on `LeaseConnection`, which implies them all. The operator's
// `doctor` lists the statements a claim sends.
pub use crate::claim::dialect::{ClaimDialect, ClaimSqlDialect};
pub use crate::claim::rate::{RateDialect, RateSqlDialect};
pub use crate::once::dialect::InsertOnceDialect;
pub use crate::semaphore::control::{HasModeColumn, ModeColumn, OneResource, ResourceColumn};
pub use crate::semaphore::ControlTable;
// The per-model bounds a claim's lock by key and a deep-queue cursor put on a connection:
// implemented for every connection that can run them, named only by the suite's generic code.
pub use crate::claim::by_key::{ClaimableLockConnection, NullLockConnection};
// Limits the suite and the benchmark measure against (their values are on the items they bound).
pub use crate::claim::wait::MAX_POLL_INTERVAL;
pub use crate::pool::drop_wait::DROP_WAIT;
// The instrumentation's own cost, for the benchmark's `--overhead`.
pub use crate::observe::bench::overhead;

/// Reads an owner field of a model: an `Option<String>`, since a row that is ready to be claimed
/// has no owner.
#[diagnostic::on_unimplemented(
    message = "the owner field must be an `Option<String>`, but it is `{Self}`",
    label = "the field of this column has the wrong type",
    note = "the owner is the claiming worker's identity, stored as text, and NULL while the row is ready to be claimed"
)]
pub trait OwnerValue {
    /// The owner, if set.
    fn owner_str(&self) -> Option<&str>;
}
impl OwnerValue for Option<String> {
    fn owner_str(&self) -> Option<&str> {
        self.as_deref()
    }
}

/// Reads an attempts field of a model (any signed integer, possibly optional).
#[diagnostic::on_unimplemented(
    message = "the attempts field must be an `i16`, `i32` or `i64` (or an `Option` of one), but it is `{Self}`",
    label = "the field of this column has the wrong type",
    note = "the attempts field counts how often the row was claimed"
)]
pub trait AttemptsValue {
    /// The attempts, if set.
    fn attempts_i64(&self) -> Option<i64>;
}
macro_rules! attempts_value {
    ($($t:ty),*) => {$(
        impl AttemptsValue for $t {
            fn attempts_i64(&self) -> Option<i64> {
                Some(i64::from(*self))
            }
        }
        impl AttemptsValue for Option<$t> {
            fn attempts_i64(&self) -> Option<i64> {
                self.map(i64::from)
            }
        }
    )*};
}
attempts_value!(i16, i32, i64);

/// The SQL types a job holder column may have (that it is nullable is `NullableColumn`'s check).
#[diagnostic::on_unimplemented(
    message = "this column must be a text column, but its SQL type is `{Self}`",
    label = "not a `Text` or `Nullable<Text>` column",
    note = "it stores a worker's identity: map a `Text` (or `Varchar`) column"
)]
pub trait TextColumn {}
impl TextColumn for Text {}
impl TextColumn for Nullable<Text> {}

/// The SQL type of a claim's owner column: nullable text, since a release or retry back to ready
/// sets it to NULL.
#[diagnostic::on_unimplemented(
    message = "the owner column must be a nullable text column, but its SQL type is `{Self}`",
    label = "not a `Nullable<Text>` column",
    note = "it stores the claiming worker's identity, and NULL while the row is ready to be claimed (a release or a retry back to ready sets it to NULL): declare it `Nullable<Text>` (or `Nullable<Varchar>`) in `table!`, NULL-able in the database"
)]
pub trait OwnerColumn {}
impl OwnerColumn for Nullable<Text> {}

/// A claimable model is `Selectable`: claims read the rows they claim with `as_select()`. The
/// derive asserts it with this bound, whose message names the fix (checked on one enabled
/// backend; Diesel's derive implements `Selectable` for every backend at once).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is claimable (`#[claimable(state = …)]`), so it must implement Diesel's `Selectable`: claims read the rows they claim with `{Self}::as_select()`",
    label = "add `Selectable` to this derive",
    note = "derive it next to `Queryable`: `#[derive(Queryable, Selectable, Claimable)]`",
    note = "with `#[diesel(check_for_backend(diesel::pg::Pg))]` (or `diesel::sqlite::Sqlite`, `diesel::mysql::Mysql`: the backends you use) each field is also checked against its column, at the field"
)]
pub trait ClaimRow {}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "__mysql_like"))]
impl<T: diesel::Selectable<CheckedBackend> + ?Sized> ClaimRow for T {}

// SQLite first: it is a default feature, so the message names the same backend in most builds.
#[cfg(feature = "sqlite")]
type CheckedBackend = diesel::sqlite::Sqlite;
#[cfg(all(not(feature = "sqlite"), feature = "postgres"))]
type CheckedBackend = diesel::pg::Pg;
#[cfg(all(not(feature = "sqlite"), not(feature = "postgres"), feature = "mysql"))]
type CheckedBackend = diesel::mysql::Mysql;
#[cfg(all(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    feature = "mariadb"
))]
type CheckedBackend = diesel::mariadb::Mariadb;

/// The SQL types a last-error column may have.
#[diagnostic::on_unimplemented(
    message = "the error column must be a text column, but its SQL type is `{Self}`",
    label = "not a `Text` or `Nullable<Text>` column",
    note = "it stores the error of a job's last failed run: map a `Text` (or `Varchar`) column"
)]
pub trait ErrorColumn {}
impl ErrorColumn for Text {}
impl ErrorColumn for Nullable<Text> {}

/// The SQL types an attempts column may have.
#[diagnostic::on_unimplemented(
    message = "the attempts column must be an integer column, but its SQL type is `{Self}`",
    label = "not a `SmallInt`, `Integer` or `BigInt` column",
    note = "map `attempts` to an integer column that counts claims"
)]
pub trait IntegerColumn {}
impl IntegerColumn for SmallInt {}
impl IntegerColumn for Integer {}
impl IntegerColumn for BigInt {}
impl IntegerColumn for Nullable<SmallInt> {}
impl IntegerColumn for Nullable<Integer> {}
impl IntegerColumn for Nullable<BigInt> {}

/// The SQL types a priority column may have: integers that are never NULL (backends sort NULL
/// differently, so a NULL priority would claim in a different order on each).
#[diagnostic::on_unimplemented(
    message = "the priority column must be a NOT NULL integer column, but its SQL type is `{Self}`",
    label = "not a `SmallInt`, `Integer` or `BigInt` column",
    note = "claims take higher priorities first: map `priority` to a NOT NULL integer column"
)]
pub trait PriorityColumn {}
impl PriorityColumn for SmallInt {}
impl PriorityColumn for Integer {}
impl PriorityColumn for BigInt {}

/// The SQL types a pause key column may have: text, compared with the key a pause names.
#[diagnostic::on_unimplemented(
    message = "the pause key column must be a text column, but its SQL type is `{Self}`",
    label = "not a `Text` or `Nullable<Text>` column",
    note = "a pause names a key value as text (a tenant, a queue): map `pausable(key = …)` to a text column"
)]
pub trait PauseKeyColumn {}
impl PauseKeyColumn for Text {}
impl PauseKeyColumn for Nullable<Text> {}

/// The SQL types a control table's ticket column may have.
#[diagnostic::on_unimplemented(
    message = "the semaphore's ticket column must be an integer column, but its SQL type is `{Self}`",
    label = "not an `Integer` or `BigInt` column",
    note = "the ticket is the request order: an identity / auto-increment `INT` or `BIGINT` column"
)]
pub trait TicketColumn {}
impl TicketColumn for Integer {}
impl TicketColumn for BigInt {}

/// The SQL types a control table's owner, resource and access-type columns may have.
#[diagnostic::on_unimplemented(
    message = "this column must be a non-null text column, but its SQL type is `{Self}`",
    label = "not a `Text` column",
    note = "the semaphore compares its values: map a `Text` (or `Varchar`) column that is NOT NULL"
)]
pub trait NotNullTextColumn {}
impl NotNullTextColumn for Text {}

/// The SQL type of a control table's granted flag.
#[diagnostic::on_unimplemented(
    message = "the semaphore's granted column must be a `Bool` column, but its SQL type is `{Self}`",
    label = "not a `Bool` column",
    note = "add it with `granted BOOLEAN NOT NULL DEFAULT FALSE` and declare it `granted -> Bool`"
)]
pub trait GrantedColumn {}
impl GrantedColumn for diesel::sql_types::Bool {}

/// The SQL type of a control table's expiry.
#[diagnostic::on_unimplemented(
    message = "the semaphore's expires_at column must be a `BigInt` column, but its SQL type is `{Self}`",
    label = "not a `BigInt` column",
    note = "add it with `expires_at BIGINT NOT NULL DEFAULT 9223372036854775807` (microseconds since 1970, database clock) and declare it `expires_at -> BigInt`"
)]
pub trait ExpiresAtColumn {}
impl ExpiresAtColumn for BigInt {}

/// Guard (and job lease) columns are nullable: `NULL` means "not done yet" / "not held".
#[diagnostic::on_unimplemented(
    message = "this column must be nullable, but its SQL type is `{Self}`",
    label = "diesel-lease sets this column only while it is NULL",
    note = "declare the column `Nullable<…>` in `table!` (and NULL-able in the database), e.g. `notified -> Nullable<Timestamp>`"
)]
pub trait NullableColumn {
    /// The column's type without `Nullable`: what a guard is set to (never `NULL`).
    type NotNull: SqlType + SingleValue;
}
impl<T: SqlType + SingleValue> NullableColumn for Nullable<T> {
    type NotNull = T;
}
