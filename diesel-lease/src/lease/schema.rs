//! The built-in leases table, as created by the embedded migrations.

diesel::table! {
    /// One row per lease name. Rows are never deleted: the fencing token of the next grant is
    /// the stored one plus one, so tokens never repeat across releases and takeovers.
    diesel_lease_leases (name) {
        /// The lease name (at most 255 bytes).
        name -> Varchar,
        /// Who was granted the lease last ([`OwnerId`](crate::OwnerId)).
        holder -> Varchar,
        /// The fencing token of the last grant: 1 for the first, +1 for every grant after.
        token -> BigInt,
        /// When the last grant was made, µs since 1970 by the database clock.
        acquired_at -> BigInt,
        /// Until when the last grant holds, µs since 1970 by the database clock.
        expires_at -> BigInt,
        /// For periodic jobs: when the next occurrence is due (µs, database clock).
        next_run -> Nullable<BigInt>,
        /// When the last grant was released (µs, database clock); NULL while it is held, or
        /// once it expired without a release. Extensions and checks match only a grant not yet
        /// released, so an extension that reaches the database after the release changes nothing.
        released_at -> Nullable<BigInt>,
    }
}
