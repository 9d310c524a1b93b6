//! Seed 001's control table, as a user who already has it would declare it: the seed's columns
//! (queue position, requesting id, resource, access type, request time) plus the two the
//! library adds (`granted`, `expires_at`). Shared by the suite and `semaphore-worker`.

use diesel_lease::prelude::*;

diesel::table! {
    process_control (queue_position) {
        queue_position -> Integer,
        requesting_id -> Text,
        resource -> Text,
        access_type -> Text,
        requested_at -> Timestamp,
        granted -> Bool,
        expires_at -> BigInt,
    }
}

/// The seed's model; the derive only reads the attribute (the fields are the application's).
#[derive(Debug, ControlTable)]
#[allow(dead_code)]
#[diesel(table_name = process_control, primary_key(queue_position))]
#[control_table(
    ticket = queue_position,
    owner = requesting_id,
    resource = resource,
    mode = access_type,
    shared = "R",
    exclusive = "W"
)]
pub(crate) struct ProcessControl {
    pub(crate) queue_position: i32,
    pub(crate) requesting_id: String,
    pub(crate) resource: String,
    pub(crate) access_type: String,
}

/// The seed's table on each backend (PostgreSQL, SQLite, MySQL): `INT IDENTITY`, `CHAR(255)`
/// requesting id, a resource and an access type, a request time with a default; then what
/// diesel-lease adds to it, and the index its queue reads use.
pub(crate) const PROCESS_CONTROL_DDL: [&str; 3] = [
    "CREATE TABLE process_control (\
       queue_position INT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
       requesting_id CHAR(255) NOT NULL, \
       resource VARCHAR(255) NOT NULL, \
       access_type CHAR(1) NOT NULL, \
       requested_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP); \
     ALTER TABLE process_control \
       ADD COLUMN granted BOOLEAN NOT NULL DEFAULT FALSE, \
       ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 9223372036854775807; \
     CREATE INDEX process_control_queue ON process_control (resource, queue_position)",
    "CREATE TABLE process_control (\
       queue_position INTEGER PRIMARY KEY AUTOINCREMENT, \
       requesting_id CHAR(255) NOT NULL, \
       resource VARCHAR(255) NOT NULL, \
       access_type CHAR(1) NOT NULL, \
       requested_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP); \
     ALTER TABLE process_control ADD COLUMN granted BOOLEAN NOT NULL DEFAULT FALSE; \
     ALTER TABLE process_control ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 9223372036854775807; \
     CREATE INDEX process_control_queue ON process_control (resource, queue_position)",
    "CREATE TABLE process_control (\
       queue_position INT AUTO_INCREMENT PRIMARY KEY, \
       requesting_id CHAR(255) NOT NULL, \
       resource VARCHAR(255) NOT NULL, \
       access_type CHAR(1) NOT NULL, \
       requested_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP); \
     ALTER TABLE process_control \
       ADD COLUMN granted BOOLEAN NOT NULL DEFAULT FALSE, \
       ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 9223372036854775807; \
     CREATE INDEX process_control_queue ON process_control (resource, queue_position)",
];
