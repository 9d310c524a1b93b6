//! The built-in rate-limit tables (migration `2026-11-24-000300_rate_limits`).

diesel::table! {
    /// One row per limit and key: what every admission of that key locks first.
    diesel_lease_rate_limits (scope, rate_key) {
        /// The limit: the claimed table, the key column (`*` for a global limit), the count
        /// and the period.
        scope -> Text,
        /// The key's value as text (empty for a global limit).
        rate_key -> Text,
    }
}

diesel::table! {
    /// One row per start within the limit's period.
    diesel_lease_rate_starts (id) {
        /// Insertion order.
        id -> BigInt,
        /// The limit ([`diesel_lease_rate_limits::scope`]).
        scope -> Text,
        /// The key ([`diesel_lease_rate_limits::rate_key`]).
        rate_key -> Text,
        /// When the row was claimed, µs since 1970 by the database clock.
        started_at -> BigInt,
    }
}
