//! The built-in semaphore tables (migration `2026-11-21-000002_semaphores`).

diesel::table! {
    /// One row per resource: its permit count, and the row every queue change locks first.
    diesel_lease_semaphores (resource) {
        /// The resource name.
        resource -> Text,
        /// How many shared holders the resource admits at once.
        permits -> Integer,
    }
}

diesel::table! {
    /// One row per request, waiting or granted.
    diesel_lease_semaphore_tickets (ticket) {
        /// Request order: identity / auto-increment.
        ticket -> BigInt,
        /// The resource requested.
        resource -> Text,
        /// Who asked.
        owner -> Text,
        /// `shared` or `exclusive`.
        mode -> Text,
        /// Whether the request holds the resource.
        granted -> Bool,
        /// When it was requested (µs since 1970, database clock).
        requested_at -> BigInt,
        /// When it was granted (µs since 1970, database clock).
        granted_at -> Nullable<BigInt>,
        /// When it is removed unless its owner heartbeats or polls (µs since 1970, database clock).
        expires_at -> BigInt,
    }
}
