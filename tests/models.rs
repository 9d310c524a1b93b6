//! Models written as a user of diesel-lease would write them, for the seeds' own tables.
//! Shared by the test suite and the worker binaries (`#[path]`-included).

#![allow(dead_code, missing_docs, unreachable_pub)]

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_lease::prelude::*;

pub mod schema {
    // Seed 003: the IMPORTJOBS status table, plus the columns that make stale claims rescuable.
    diesel::table! {
        importjobs (id) {
            id -> BigInt,
            statuscode -> Text,
            worker -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
            payload -> Text,
        }
    }

    // Seed 004: `CREATE TABLE test (id BIGINT PRIMARY KEY, data TEXT, processed BOOLEAN)`.
    diesel::table! {
        test (id) {
            id -> BigInt,
            data -> Text,
            processed -> Bool,
        }
    }

    // Seed 000: `job_status`, exactly as the seed defines it.
    diesel::table! {
        job_status (job_id) {
            job_id -> Text,
            running_at -> Nullable<Text>,
            last_run_started -> Nullable<Timestamp>,
            next_run -> Nullable<Timestamp>,
        }
    }

    // Seed 002's waiting lock: `SELECT * FROM table1 WHERE id = $id AND col1 IS NULL FOR UPDATE`.
    diesel::table! {
        table1 (id) {
            id -> BigInt,
            col1 -> Nullable<Text>,
        }
    }

    // Seed 002: `action.notified`, set at most once.
    diesel::table! {
        action (id) {
            id -> BigInt,
            notified -> Nullable<Timestamp>,
        }
    }

    // Seed 002 with a composite key: one mailing per (campaign, user).
    diesel::table! {
        mailing (campaign_id, user_id) {
            campaign_id -> Integer,
            user_id -> BigInt,
            sent_by -> Nullable<Text>,
        }
    }

    // Seed 002's follow-up notifications: UNIQUE (previous_notification).
    diesel::table! {
        notification (id) {
            id -> BigInt,
            user_id -> BigInt,
            previous_notification -> BigInt,
            body -> Text,
        }
    }

    // Issue 13: work that waits for its time, is retried with backoff and runs per tenant.
    diesel::table! {
        tasks (id) {
            id -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
            run_at -> Timestamp,
            last_error -> Nullable<Text>,
            tenant -> Text,
        }
    }

    // A not-before column that may be NULL ("at once").
    diesel::table! {
        reminders (id) {
            id -> BigInt,
            status -> Text,
            not_before -> Nullable<Timestamp>,
        }
    }
}

use schema::*;

/// Seed 003: each import job handed to exactly one worker.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = importjobs)]
#[claimable(
    state = statuscode,
    ready = "JOBEXTRACTED",
    claimed = "EXECUTIONINPROGRESS",
    done = "DONE",
    failed = "FAILED",
    owner = worker,
    claimed_at = claimed_at,
    attempts = attempts,
    timeout_secs = 300,
    max_attempts = 3
)]
pub struct ImportJob {
    pub id: i64,
    pub statuscode: String,
    pub worker: Option<String>,
    pub claimed_at: Option<NaiveDateTime>,
    pub attempts: i32,
    pub payload: String,
}

/// Seed 000: one node of the farm runs each occurrence of a scheduled job.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, JobLease)]
#[diesel(table_name = job_status, primary_key(job_id))]
#[job_lease(holder = running_at, started_at = last_run_started, next_run = next_run)]
pub struct JobStatus {
    pub job_id: String,
    pub running_at: Option<String>,
    pub last_run_started: Option<NaiveDateTime>,
    pub next_run: Option<NaiveDateTime>,
}

/// Seed 004: `findFirstByProcessedIsFalse` with a pessimistic, skip-locked lock.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = test)]
#[claimable(state = processed, ready = false, claimed = true)]
pub struct Test {
    pub id: i64,
    pub data: String,
    pub processed: bool,
}

/// Seed 002: `UPDATE action SET notified = now WHERE id = … AND notified IS NULL`.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = action)]
#[claim_if_null(column = notified)]
pub struct Action {
    pub id: i64,
    pub notified: Option<NaiveDateTime>,
}

/// Seed 002's `table1`: a row qualifies while `col1 IS NULL`; the transaction that locked it sets
/// `col1` from the external service's answer.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = table1)]
#[claim_if_null(column = col1)]
pub struct Table1 {
    pub id: i64,
    pub col1: Option<String>,
}

/// A guard on a composite primary key, set to a value rather than a time.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = mailing, primary_key(campaign_id, user_id))]
#[claim_if_null(column = sent_by)]
pub struct Mailing {
    pub campaign_id: i32,
    pub user_id: i64,
    pub sent_by: Option<String>,
}

/// Seed 002's follow-up notification, as stored.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = notification)]
pub struct Notification {
    pub id: i64,
    pub user_id: i64,
    pub previous_notification: i64,
    pub body: String,
}

/// The "next" notification, inserted at most once per previous one; the database assigns its id.
#[derive(Debug, Clone, Insertable, InsertOnce)]
#[diesel(table_name = notification)]
#[insert_once(returning = Notification)]
pub struct NewNotification {
    pub user_id: i64,
    pub previous_notification: i64,
    pub body: String,
}

/// The same follow-up when the caller needs no row back: `InsertOutcome<()>`.
#[derive(Debug, Clone, Insertable, InsertOnce)]
#[diesel(table_name = notification)]
pub struct FollowUp {
    pub user_id: i64,
    pub previous_notification: i64,
    pub body: String,
}

/// A follow-up whose id the application chooses, although the table would generate one.
#[derive(Debug, Clone, Insertable, InsertOnce)]
#[diesel(table_name = notification)]
#[insert_once(returning = Notification)]
pub struct NumberedNotification {
    pub id: i64,
    pub user_id: i64,
    pub previous_notification: i64,
    pub body: String,
}

/// One mailing per (campaign, user), inserted once: the insert supplies the whole key and the
/// table generates nothing.
#[derive(Debug, Clone, Insertable, InsertOnce)]
#[diesel(table_name = mailing)]
#[insert_once(returning = Mailing)]
pub struct NewMailing {
    pub campaign_id: i32,
    pub user_id: i64,
}

/// A task of a queue: scheduled by `run_at`, retried with backoff, dead-lettered to `dead` with
/// its last error.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = tasks)]
#[claimable(
    state = status,
    ready = "new",
    claimed = "running",
    done = "done",
    failed = "dead",
    owner = owner,
    claimed_at = claimed_at,
    attempts = attempts,
    timeout_secs = 30,
    available_at = run_at,
    error = last_error
)]
pub struct Task {
    pub id: i64,
    pub status: String,
    pub owner: Option<String>,
    pub claimed_at: Option<NaiveDateTime>,
    pub attempts: i32,
    pub run_at: NaiveDateTime,
    pub last_error: Option<String>,
    pub tenant: String,
}

/// A row whose not-before time may be unset.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Claimable)]
#[diesel(table_name = reminders)]
#[claimable(state = status, ready = "new", claimed = "sent", available_at = not_before)]
pub struct Reminder {
    pub id: i64,
    pub status: String,
    pub not_before: Option<NaiveDateTime>,
}

/// Per-backend DDL for the tables above: (PostgreSQL, SQLite, MySQL).
pub const IMPORTJOBS_DDL: (&str, &str, &str) = (
    "CREATE TABLE importjobs (id BIGINT PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT, \
       claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0, payload TEXT NOT NULL DEFAULT ''); \
     CREATE INDEX importjobs_ready ON importjobs (id) WHERE statuscode = 'JOBEXTRACTED'; \
     CREATE INDEX importjobs_stale ON importjobs (claimed_at) WHERE statuscode = 'EXECUTIONINPROGRESS';",
    "CREATE TABLE importjobs (id INTEGER PRIMARY KEY, statuscode TEXT NOT NULL, worker TEXT, \
       claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0, payload TEXT NOT NULL DEFAULT ''); \
     CREATE INDEX importjobs_ready ON importjobs (statuscode, id);",
    "CREATE TABLE importjobs (id BIGINT PRIMARY KEY, statuscode VARCHAR(32) NOT NULL, worker VARCHAR(255), \
       claimed_at DATETIME(6), attempts INT NOT NULL DEFAULT 0, payload TEXT NOT NULL, \
       INDEX importjobs_ready (statuscode, id), INDEX importjobs_stale (statuscode, claimed_at));",
);

pub const TEST_DDL: (&str, &str, &str) = (
    "CREATE TABLE test (id BIGINT PRIMARY KEY, data TEXT NOT NULL, processed BOOLEAN NOT NULL DEFAULT FALSE);",
    "CREATE TABLE test (id INTEGER PRIMARY KEY, data TEXT NOT NULL, processed BOOLEAN NOT NULL DEFAULT FALSE);",
    "CREATE TABLE test (id BIGINT PRIMARY KEY, data TEXT NOT NULL, processed BOOLEAN NOT NULL DEFAULT FALSE, \
       INDEX test_ready (processed, id));",
);

pub const GUARD_DDL: (&str, &str, &str) = (
    "CREATE TABLE action (id BIGINT PRIMARY KEY, notified TIMESTAMP); \
     CREATE TABLE mailing (campaign_id INTEGER NOT NULL, user_id BIGINT NOT NULL, sent_by TEXT, PRIMARY KEY (campaign_id, user_id)); \
     CREATE TABLE notification (id BIGSERIAL PRIMARY KEY, user_id BIGINT NOT NULL, previous_notification BIGINT NOT NULL UNIQUE, body TEXT NOT NULL);",
    "CREATE TABLE action (id INTEGER PRIMARY KEY, notified TIMESTAMP); \
     CREATE TABLE mailing (campaign_id INTEGER NOT NULL, user_id BIGINT NOT NULL, sent_by TEXT, PRIMARY KEY (campaign_id, user_id)); \
     CREATE TABLE notification (id INTEGER PRIMARY KEY, user_id BIGINT NOT NULL, previous_notification BIGINT NOT NULL UNIQUE, body TEXT NOT NULL);",
    "CREATE TABLE action (id BIGINT PRIMARY KEY, notified DATETIME(6) NULL); \
     CREATE TABLE mailing (campaign_id INT NOT NULL, user_id BIGINT NOT NULL, sent_by VARCHAR(255), PRIMARY KEY (campaign_id, user_id)); \
     CREATE TABLE notification (id BIGINT AUTO_INCREMENT PRIMARY KEY, user_id BIGINT NOT NULL, previous_notification BIGINT NOT NULL UNIQUE, body TEXT NOT NULL);",
);

pub const JOB_STATUS_DDL: (&str, &str, &str) = (
    "CREATE TABLE job_status (job_id VARCHAR(254) NOT NULL, running_at VARCHAR(254) NULL, \
       last_run_started TIMESTAMP NULL, next_run TIMESTAMP NULL, PRIMARY KEY (job_id));",
    "CREATE TABLE job_status (job_id VARCHAR(254) NOT NULL, running_at VARCHAR(254) NULL, \
       last_run_started DATETIME NULL, next_run DATETIME NULL, PRIMARY KEY (job_id));",
    "CREATE TABLE job_status (job_id VARCHAR(254) NOT NULL, running_at VARCHAR(254) NULL, \
       last_run_started DATETIME(6) NULL, next_run DATETIME(6) NULL, PRIMARY KEY (job_id));",
);

/// Seed 002's `table1 (id, col1)`: `col1` is NULL until the row is processed.
pub const TABLE1_DDL: (&str, &str, &str) = (
    "CREATE TABLE table1 (id BIGINT PRIMARY KEY, col1 TEXT NULL);",
    "CREATE TABLE table1 (id INTEGER PRIMARY KEY, col1 TEXT NULL);",
    "CREATE TABLE table1 (id BIGINT PRIMARY KEY, col1 VARCHAR(255) NULL);",
);

/// `tasks` and `reminders`, with the partial index the README recommends for a not-before
/// column (PostgreSQL; an ordinary one elsewhere).
pub const TASKS_DDL: (&str, &str, &str) = (
    "CREATE TABLE tasks (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', owner TEXT, \
       claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0, \
       run_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'), last_error TEXT, \
       tenant TEXT NOT NULL DEFAULT ''); \
     CREATE INDEX tasks_due ON tasks (run_at, id) WHERE status = 'new'; \
     CREATE TABLE reminders (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', not_before TIMESTAMP);",
    "CREATE TABLE tasks (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', owner TEXT, \
       claimed_at TIMESTAMP, attempts INTEGER NOT NULL DEFAULT 0, \
       run_at TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')), last_error TEXT, \
       tenant TEXT NOT NULL DEFAULT ''); \
     CREATE INDEX tasks_due ON tasks (status, run_at, id); \
     CREATE TABLE reminders (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'new', not_before TIMESTAMP);",
    "CREATE TABLE tasks (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT 'new', \
       owner VARCHAR(255), claimed_at DATETIME(6), attempts INT NOT NULL DEFAULT 0, \
       run_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), last_error TEXT, \
       tenant VARCHAR(64) NOT NULL DEFAULT '', INDEX tasks_due (status, run_at, id)); \
     CREATE TABLE reminders (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT 'new', \
       not_before DATETIME(6) NULL);",
);
