//! The only path from `#[derive(Claimable)]` to the runtime: generated code names every runtime
//! item as `::diesel_lease::__private::…`, so modules can move without touching the derive. Not
//! public API: no stability promise, may change in any release.
//!
//! The derive only implements traits: the capability traits, the markers of optional columns and
//! states, and the column-type checks below.

use diesel::sql_types::{BigInt, Integer, Nullable, SmallInt, Text};

pub use crate::claim::{
    Claimable, HasAttempts, HasClaimedAt, HasDoneState, HasFailedState, Keyed, SortOrder,
    StateLiteral, TimeColumn,
};
pub use crate::clock::TimestampType;
pub use crate::lease::job::JobLease;
pub use crate::once::{ClaimIfNull, InsertOnce, Returning};
pub use crate::semaphore::{ControlTable, HasModeColumn, ModeColumn, OneResource, ResourceColumn};

/// Reads an owner field of a model (`String` or `Option<String>`).
#[diagnostic::on_unimplemented(
    message = "the owner field must be a `String` or `Option<String>`, but it is `{Self}`",
    label = "the field of this column has the wrong type",
    note = "the owner is the worker's identity, stored as text"
)]
pub trait OwnerValue {
    /// The owner, if set.
    fn owner_str(&self) -> Option<&str>;
}
impl OwnerValue for String {
    fn owner_str(&self) -> Option<&str> {
        Some(self)
    }
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

/// The SQL types an owner (or job holder) column may have.
#[diagnostic::on_unimplemented(
    message = "this column must be a text column, but its SQL type is `{Self}`",
    label = "not a `Text` or `Nullable<Text>` column",
    note = "it stores a worker's identity: map a `Text` (or `Varchar`) column"
)]
pub trait TextColumn {}
impl TextColumn for Text {}
impl TextColumn for Nullable<Text> {}

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
    note = "add it with `expires_at BIGINT NOT NULL DEFAULT 0` (microseconds since 1970, database clock) and declare it `expires_at -> BigInt`"
)]
pub trait ExpiresAtColumn {}
impl ExpiresAtColumn for BigInt {}

/// Guard (and job lease) columns are nullable: `NULL` means "not done yet" / "not held".
#[diagnostic::on_unimplemented(
    message = "this column must be nullable, but its SQL type is `{Self}`",
    label = "diesel-lease sets this column only while it is NULL",
    note = "declare the column `Nullable<…>` in `table!` (and NULL-able in the database), e.g. `notified -> Nullable<Timestamp>`"
)]
pub trait NullableColumn {}
impl<T> NullableColumn for Nullable<T> {}
