//! What a user's model is to every operation: a row of a Diesel table addressed by its primary
//! key ([`Keyed`]), the base of `Claimable`, `ClaimIfNull` and `JobLease`.

use diesel::expression::{AppearsOnTable, Expression};
use diesel::query_builder::QueryId;
use diesel::sql_types::Bool;

/// A model whose rows are addressed by primary key: the base of `Claimable`,
/// `ClaimIfNull` and `JobLease`. Written by `#[derive(Claimable)]` from Diesel's own
/// `#[diesel(table_name, primary_key)]`.
pub trait Keyed: Sized + 'static {
    /// The model's Diesel table.
    type Table: diesel::Table + Default + Copy + QueryId + Send + 'static;
    /// The primary key's Rust value (`i64`, or a tuple for composite keys).
    type Pk: Send + 'static;
    /// `pk = $value` (composite: `a = $1 AND b = $2`) as a typed Diesel expression.
    type PkFilter: Expression<SqlType = Bool> + AppearsOnTable<Self::Table> + Send + 'static;
    /// Primary-key column names, in key order.
    const PK: &'static [&'static str];
    /// This row's primary key.
    fn pk(&self) -> Self::Pk;
    /// `pk = $pk` as a Diesel expression.
    fn pk_filter(pk: Self::Pk) -> Self::PkFilter;
    /// A one-column key's value as one bind parameter of the column's SQL type, for statements
    /// that address many rows as `<pk> IN (?, …)` (MySQL's batch claims); `()` for a composite
    /// key, whose rows such statements address as `(<pk_filter>) OR …`.
    type PkValue: Send + 'static;
    /// See [`PkValue`](Self::PkValue): `None` for a composite key.
    fn pk_value(pk: Self::Pk) -> Option<Self::PkValue>;
}
