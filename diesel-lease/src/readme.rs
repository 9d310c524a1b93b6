//! The README's Rust snippets, each as a doctest that compiles (`no_run`: they need servers and
//! tables), its visible lines exactly the README's block. `tests/readme.rs` checks that the two
//! stay the same: change a README snippet, change its doctest here.
//!
//! Hidden lines (`# `) give each snippet what the README leaves out: tables, imports, helper
//! functions and a `main`.

/// README block 1.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     importjobs (id) {
/// #         id -> BigInt,
/// #         statuscode -> Text,
/// #         worker -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #     }
/// # }
/// # fn import<T>(_: &T) -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// use diesel_lease::prelude::*;
///
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = importjobs)]
/// #[claimable(state = statuscode, ready = "JOBEXTRACTED", claimed = "EXECUTIONINPROGRESS",
///             done = "DONE", failed = "FAILED", owner = worker,
///             claimed_at = claimed_at, attempts = attempts, timeout_secs = 300, max_attempts = 5)]
/// struct ImportJob { id: i64, statuscode: String, worker: Option<String>,
///                    claimed_at: Option<NaiveDateTime>, attempts: i32 }
///
/// // every worker, on every server, in a loop:
/// let mut conn = pool.get()?;
/// while let Some(job) = ImportJob::claim().row(&mut conn)? {   // each row to exactly one worker
///     import(&job)?;
///     job.complete(&mut conn)?;                              // false if a rescuer took it over
/// }
/// let batch = ImportJob::claim().batch(50).rows(&mut conn)?;        // never more than 50
/// # let _ = batch;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block1;

/// README block 2.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! { table1 (id) { id -> BigInt, col1 -> Nullable<Text>, } }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # let conn = &mut conn;
/// # let id = 1_i64;
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = table1)]
/// #[claimable(state = col1, ready = None, claimed = Some("sent".into()))]
/// struct Table1 { id: i64, col1: Option<String> }
/// // in a transaction:
/// if let Some(row) = Table1::claim().filter(table1::id.eq(id)).locked(conn)? { /* … update col1 … */ }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block2;

/// README block 3.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     importjobs (id) {
/// #         id -> BigInt,
/// #         statuscode -> Text,
/// #         worker -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = importjobs)]
/// # #[claimable(state = statuscode, ready = "JOBEXTRACTED", claimed = "EXECUTIONINPROGRESS",
/// #             done = "DONE", failed = "FAILED", owner = worker,
/// #             claimed_at = claimed_at, attempts = attempts, timeout_secs = 300, max_attempts = 5)]
/// # struct ImportJob { id: i64, statuscode: String, worker: Option<String>,
/// #                    claimed_at: Option<NaiveDateTime>, attempts: i32 }
/// # fn import(_: &ImportJob, _: &diesel_lease::LostSignal) -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// while let Some(job) = ImportJob::claim().guard(&pool)? {
///     import(&job, &job.lost_signal())?;   // the signal fires if the claim is lost: stop then
///     job.complete()?;                     // false if it was rescued meanwhile
/// }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block3;

/// README block 4.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use diesel_lease::claim::ClaimCursor;
/// # use std::time::Duration;
/// # diesel::table! {
/// #     jobs (id) {
/// #         id -> BigInt,
/// #         seq -> BigInt,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = jobs)]
/// # #[claimable(state = status, ready = "ready", claimed = "running", done = "done",
/// #             owner = owner, order_by(seq))]
/// # struct Job { id: i64, seq: i64, status: String, owner: Option<String> }
/// # fn run(_: &Job) -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish("readme.db")?;
/// let cursor = ClaimCursor::<Job>::new(Duration::from_secs(1))?;  // clones share it
/// while let Some(job) = Job::claim().cursor(&cursor).row(&mut conn)? {
///     run(&job)?;
///     job.complete(&mut conn)?;
/// }
/// // also: Job::claim().cursor(&cursor).wait(t).row(&pool), Job::claim().cursor(&cursor).guard(&pool),
/// // Worker::new(pool).claim_cursor(cursor)
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block4;

/// README block 5.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     emails (id) {
/// #         id -> BigInt,
/// #         tenant -> Text,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #         run_at -> Nullable<Timestamp>,
/// #         last_error -> Nullable<Text>,
/// #     }
/// # }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = emails)]
/// #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
///             owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_secs = 30,
///             available_at = run_at,      // not claimed before this time (database clock)
///             error = last_error)]        // why the last attempt failed
/// struct Email { id: i64, tenant: String, status: String, owner: Option<String>,
///                claimed_at: Option<NaiveDateTime>, attempts: i32, run_at: Option<NaiveDateTime>,
///                last_error: Option<String> }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block5;

/// README block 6.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     emails (id) {
/// #         id -> BigInt,
/// #         tenant -> Text,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #         run_at -> Nullable<Timestamp>,
/// #         last_error -> Nullable<Text>,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = emails)]
/// # #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
/// #             owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_secs = 30,
/// #             available_at = run_at, error = last_error)]
/// # struct Email { id: i64, tenant: String, status: String, owner: Option<String>,
/// #                claimed_at: Option<NaiveDateTime>, attempts: i32, run_at: Option<NaiveDateTime>,
/// #                last_error: Option<String> }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # let email: Email = emails::table.select(Email::as_select()).first(&mut conn)?;
/// # let err = "550 mailbox unavailable";
/// use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// let policy = RetryPolicy::new(5)?.base(Duration::from_secs(2)).max_delay(Duration::from_secs(600));
/// match email.fail_or_retry_because(&mut conn, &policy, &err.to_string())? {
///     RetryOutcome::Retried { delay, .. } => eprintln!("retrying in {delay:?}"),
///     RetryOutcome::Failed { .. } => eprintln!("dead letter"),
///     RetryOutcome::Lost => {} // rescued by another worker: not ours any more
/// }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block6;

/// README block 7.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     emails (id) {
/// #         id -> BigInt,
/// #         tenant -> Text,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #         run_at -> Nullable<Timestamp>,
/// #         last_error -> Nullable<Text>,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = emails)]
/// # #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
/// #             owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_secs = 30,
/// #             available_at = run_at, error = last_error)]
/// # struct Email { id: i64, tenant: String, status: String, owner: Option<String>,
/// #                claimed_at: Option<NaiveDateTime>, attempts: i32, run_at: Option<NaiveDateTime>,
/// #                last_error: Option<String> }
/// # #[derive(Insertable)]
/// # #[diesel(table_name = emails)]
/// # struct NewEmail { tenant: String, status: String }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # let new_email = NewEmail { tenant: "acme".into(), status: "new".into() };
/// conn.transaction(|conn| {
///     diesel::insert_into(emails::table).values(&new_email).execute(conn)?;
///     Email::queue().notify(conn)   // sent at commit; no-op off PostgreSQL
/// })?;
/// // or once, instead of calling queue().notify: a statement-level AFTER INSERT trigger
/// Email::queue().install_ready_trigger(&mut conn)?;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block7;

/// README block 8.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     emails (id) {
/// #         id -> BigInt,
/// #         tenant -> Text,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #         run_at -> Nullable<Timestamp>,
/// #         last_error -> Nullable<Text>,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = emails)]
/// # #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
/// #             owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_secs = 30,
/// #             available_at = run_at, error = last_error)]
/// # struct Email { id: i64, tenant: String, status: String, owner: Option<String>,
/// #                claimed_at: Option<NaiveDateTime>, attempts: i32, run_at: Option<NaiveDateTime>,
/// #                last_error: Option<String> }
/// # fn send(_: &mut SqliteConnection, _: &Email) -> Result<(), String> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// # let policy = RetryPolicy::new(5)?;
/// use diesel_lease::worker::Worker;
///
/// let stop = AtomicBool::new(false);            // set it from your shutdown signal
/// let report = Worker::new(pool.clone())
///     .concurrency(4)                           // threads; give the pool n + 2 connections or more
///     .batch(2)                                 // rows per claim (default 1)
///     .grace(Duration::from_secs(30))           // after the stop, still start held rows this long
///     .retry_policy(policy)
///     .limit_per_key(emails::tenant, 2, |e: &Email| e.tenant.clone())   // optional
///     .run_until(&stop, |conn, email: &Email| send(conn, email))?;      // Result<(), impl Display>
/// # let _ = report;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block8;

/// README block: Priorities.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # diesel::table! {
/// #     reports (id) {
/// #         id -> BigInt,
/// #         status -> Text,
/// #         priority -> Integer,
/// #         run_at -> Timestamp,
/// #     }
/// # }
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = reports)]
/// #[claimable(state = status, ready = "new", claimed = "running", done = "done",
///             priority = priority,   // higher first
///             available_at = run_at)] // then due time, then id
/// struct Report { id: i64, status: String, priority: i32, run_at: NaiveDateTime }
/// # fn main() {}
/// ```
#[allow(dead_code)]
pub(crate) struct BlockPriorities;

/// README block: Pause and resume.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # diesel::table! {
/// #     emails (id) {
/// #         id -> BigInt,
/// #         status -> Text,
/// #         tenant -> Text,
/// #     }
/// # }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = emails)]
/// #[claimable(state = status, ready = "new", claimed = "sending", done = "sent",
///             pausable(key = tenant))]
/// struct Email { id: i64, status: String, tenant: String }
///
/// Email::queue().pause(&mut conn)?;                 // every claim of the table returns nothing
/// Email::queue().resume(&mut conn)?;                // claims go on; waiting claimers wake at once
/// Email::queue().key("acme").pause(&mut conn)?;     // only acme's rows wait, the others are claimed
/// Email::queue().key("acme").resume(&mut conn)?;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct BlockPause;

/// README block: Cancelling a row.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # diesel::table! {
/// #     exports (id) {
/// #         id -> BigInt,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #     }
/// # }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = exports)]
/// #[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
///             cancelled = "cancelled",   // else cancelled rows go to "dead"
///             owner = owner, claimed_at = claimed_at, timeout_secs = 30)]
/// struct Export { id: i64, status: String, owner: Option<String>, claimed_at: Option<NaiveDateTime> }
///
/// if Export::queue().cancel(&mut conn, 42)? {
///     println!("export 42 will not run (or its worker stops at its next heartbeat)");
/// }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct BlockCancel;

/// README block 7a (Rate limits).
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! {
/// #     emails (id) {
/// #         id -> BigInt,
/// #         tenant -> Text,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #         run_at -> Nullable<Timestamp>,
/// #         last_error -> Nullable<Text>,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = emails)]
/// # #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
/// #             owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_secs = 30,
/// #             available_at = run_at, error = last_error)]
/// # struct Email { id: i64, tenant: String, status: String, owner: Option<String>,
/// #                claimed_at: Option<NaiveDateTime>, attempts: i32, run_at: Option<NaiveDateTime>,
/// #                last_error: Option<String> }
/// # fn send(_: &mut SqliteConnection, _: &Email) -> Result<(), String> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// # let mut conn = pool.get()?;
/// # let stop = AtomicBool::new(false);
/// use diesel_lease::claim::{ClaimOptions, RateLimit};
///
/// let report = Worker::new(pool.clone())
///     .concurrency(8)
///     .rate_limit(RateLimit::per_key(emails::tenant, 5, Duration::from_secs(2)))  // 5 per 2 s per tenant
///     .rate_limit(RateLimit::global(100, Duration::from_secs(60)))                // and 100 a minute in all
///     .limit_per_key(emails::tenant, 2, |e: &Email| e.tenant.clone())            // 2 at once per tenant
///     .run_until(&stop, |conn, email: &Email| send(conn, email))?;
///
/// // Plain claims take the same limits through their options.
/// let options = ClaimOptions::default().rate_limit(RateLimit::global(100, Duration::from_secs(60)));
/// let batch = Email::claim().batch(10).options(&options).rows(&mut conn)?;   // at most the room left
/// # let _ = (report, batch);
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block7a;

/// README block 7b (Retention and redrive).
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # diesel::table! {
/// #     emails (id) {
/// #         id -> BigInt,
/// #         tenant -> Text,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #         run_at -> Nullable<Timestamp>,
/// #         last_error -> Nullable<Text>,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = emails)]
/// # #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
/// #             owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_secs = 30,
/// #             available_at = run_at, error = last_error)]
/// # struct Email { id: i64, tenant: String, status: String, owner: Option<String>,
/// #                claimed_at: Option<NaiveDateTime>, attempts: i32, run_at: Option<NaiveDateTime>,
/// #                last_error: Option<String> }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// # let mut conn = pool.get()?;
/// use diesel_lease::claim::Retention;
/// use diesel_lease::lease::schedule::every;
///
/// // Hourly, on one node: done and dead emails whose claimed_at is older than 30 days.
/// let retention = Retention::older_than(Duration::from_secs(30 * 24 * 3600)).batch_size(500);
/// every(Duration::from_secs(3600)).run_if_due(&pool, "purge-emails", |_| {
///     Email::queue().purge(&mut pool.get()?, emails::claimed_at, &retention)
/// })?;
///
/// // The SMTP relay is back: dead letters of one tenant go back to ready, attempts reset.
/// let moved = Email::queue().filter(emails::tenant.eq("acme")).redrive(&mut conn, 1000)?;
/// # let _ = moved;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block7b;

/// README block 9.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! { action (id) { id -> BigInt, notified -> Nullable<Timestamp>, } }
/// # diesel::table! { notification (id) { id -> BigInt, user_id -> BigInt, previous_notification -> BigInt, body -> Text, } }
/// # #[derive(Queryable, Selectable)]
/// # #[diesel(table_name = notification)]
/// # struct Notification { id: i64, user_id: i64, previous_notification: i64, body: String }
/// # fn send_notification_email<T>(_: &T) -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn send(_: Option<Notification>) {}
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// #[derive(Queryable, Selectable, ClaimIfNull)]
/// #[diesel(table_name = action)]
/// #[claim_if_null(column = notified)]                 // a nullable column
/// struct Action { id: i64, notified: Option<NaiveDateTime> }
/// # let action: Action = action::table.select(Action::as_select()).first(&mut conn)?;
///
/// if action.claim_if_null(&mut conn, diesel_lease::db_now)? {   // true for exactly one caller
///     send_notification_email(&action)?;
/// }
///
/// #[derive(Insertable, InsertOnce)]
/// #[diesel(table_name = notification)]
/// #[insert_once(returning = Notification)]  // UNIQUE (previous_notification)
/// struct NewNotification { user_id: i64, previous_notification: i64, body: String }
/// # let next = NewNotification { user_id: 1, previous_notification: 0, body: String::new() };
///
/// use diesel_lease::InsertOutcome;
/// match next.insert_once(&mut conn)? {
///     InsertOutcome::Inserted(row) => send(row),
///     InsertOutcome::AlreadyExists => {}          // an ordinary outcome; the transaction goes on
/// }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block9;

/// README block 10.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! { table1 (id) { id -> BigInt, col1 -> Nullable<Text>, } }
/// # fn call_the_service<T>(_: &T) -> Result<String, diesel_lease::Error> { Ok("sent".into()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # let id = 1_i64;
/// #[derive(Queryable, Selectable, ClaimIfNull)]
/// #[diesel(table_name = table1)]
/// #[claim_if_null(column = col1)]                    // qualifies while col1 IS NULL
/// struct Table1 { id: i64, col1: Option<String> }
///
/// let sent = Table1::with_locked_if_null(&mut conn, id, |conn, row| {
///     let answer = call_the_service(&row)?;     // still holding the row lock
///     diesel::update(table1::table.find(row.id)).set(table1::col1.eq(answer)).execute(conn)?;
///     Ok::<_, diesel_lease::Error>(())
/// })?;                                          // None: col1 was set (maybe by the holder we waited for)
/// # let _ = sent;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block10;

/// README block 11.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! { job_status (job_id) { job_id -> Text, running_at -> Nullable<Text>, last_run_started -> Nullable<Timestamp>, next_run -> Nullable<Timestamp>, } }
/// # fn send_price_alerts() -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// use diesel_lease::lease::JobRunOptions;
///
/// #[derive(Queryable, Selectable, JobLease)]
/// #[diesel(table_name = job_status, primary_key(job_id))]
/// #[job_lease(holder = running_at, started_at = last_run_started, next_run = next_run)]
/// struct JobStatus { job_id: String, running_at: Option<String>,
///                    last_run_started: Option<NaiveDateTime>, next_run: Option<NaiveDateTime> }
///
/// let me = JobRunOptions::new(Duration::from_secs(600)).every(Duration::from_secs(300));
/// if let Some(run) = JobStatus::try_acquire_run(&mut conn, "stock-prices".into(), &me)? {
///     send_price_alerts()?;
///     let _ = JobStatus::release_run(&mut conn, "stock-prices".into(), &run)?; // WasLost if taken over
/// }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block11;

/// README block 12.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # fn do_the_work(_: diesel_lease::FencingToken) -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// use diesel_lease::lease::{Lease, LeaseOptions};
/// use std::time::Duration;
///
/// diesel_lease::run_migrations(&mut conn)?; // creates diesel_lease_leases (once)
///
/// let options = LeaseOptions::new(Duration::from_secs(60)); // held at most 60 s
/// if let Some(mut held) = Lease::try_acquire(&mut conn, "nightly-report", &options)? {
///     do_the_work(held.token())?;
///     if held.release(&mut conn)?.was_lost() {
///         // it expired or was taken over meanwhile: the work may have run twice
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block12;

/// README block 13.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! { reports (id) { id -> BigInt, body -> Text, last_token -> BigInt, } }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mut conn = SqliteConnection::establish(":memory:")?;
/// # let held = diesel_lease::Lease::try_acquire(&mut conn, "report", &diesel_lease::LeaseOptions::new(std::time::Duration::from_secs(60)))?.expect("free");
/// # let (report_id, body) = (1_i64, "the report");
/// let token = held.token().get();
/// let written = diesel::update(
///         reports::table.find(report_id).filter(reports::last_token.lt(token)),
///     )
///     .set((reports::body.eq(body), reports::last_token.eq(token)))
///     .execute(&mut conn)?;
/// if written == 0 {
///     // A later holder already wrote: this holder's lease is gone. Stop.
/// }
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block13;

/// README block 14.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # fn send_digest(_: diesel_lease::FencingToken) -> Result<usize, Box<dyn std::error::Error>> { Ok(1) }
/// # fn shutting_down() -> bool { true }
/// # fn check_prices_and_mail(_: Option<chrono::DateTime<chrono::Utc>>, _: diesel_lease::FencingToken) {}
/// # fn rebuild() -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// use diesel_lease::lease::schedule::{every, run_exclusive, with_lock};
/// use diesel_lease::LeaseOptions;
///
/// // Run now if nobody else is running it (ShedLock's model): None if another node is. The job
/// // returns a Result (as Diesel's `transaction` closure does) and its error comes back through `?`.
/// let sent: Option<usize> =
///     run_exclusive(&pool, "send-digest", &LeaseOptions::new(Duration::from_secs(300)), |lease| {
///         send_digest(lease.token()) // -> Result<usize, Box<dyn Error>>
///     })?;
///
/// // Once per interval across the whole farm, whichever nodes are up and whenever they started.
/// every(Duration::from_secs(3600))
///     .lease(LeaseOptions::new(Duration::from_secs(600)))
///     .run_until(&pool, "stock-alerts", || shutting_down(), |occurrence| {
///         check_prices_and_mail(occurrence.due_at(), occurrence.token());
///     })?;
///
/// // An expiring mutex (django-db-mutex): wait up to the ttl for it, run, release; rebuild's
/// // error, like the lock's, comes back through `?`.
/// with_lock(&pool, "rebuild-index", Duration::from_secs(30), || rebuild())?;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block14;

/// README block: cron schedules (after block 13).
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use std::time::Duration;
/// # use diesel_lease::lease::JobRunOptions;
/// # fn shutting_down() -> bool { true }
/// # fn export(_: Option<chrono::DateTime<chrono::Utc>>) {}
/// # fn refresh() {}
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// use diesel_lease::lease::schedule::{every, Cron, Missed, Tz};
/// use diesel_lease::LeaseOptions;
///
/// // 03:30 every night on Berlin's wall clock, on one node of the farm.
/// every(Cron::parse("30 3 * * *")?.in_tz(Tz::Europe__Berlin))
///     .lease(LeaseOptions::new(Duration::from_secs(600)))
///     .run_until(&pool, "nightly-export", || shutting_down(), |occurrence| {
///         export(occurrence.due_at()); // the slot, e.g. 2026-03-29T01:30:00Z
///     })?;
///
/// // Every 15 minutes; after an outage, run once late instead of waiting for the next slot.
/// let quarter_hourly = Cron::parse("*/15 * * * *")?.on_missed(Missed::RunOnce);
/// every(quarter_hourly).run_if_due(&pool, "refresh-rates", |_| refresh())?;
///
/// // On your own job_status table (see "Job leases on your own table").
/// let me = JobRunOptions::new(Duration::from_secs(600)).every(Cron::parse("0 */6 * * *")?);
/// # let _ = me;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct BlockCron;

/// README block 15.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # fn import_everything() -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let url = String::from("postgres://localhost/app");
/// use std::time::Duration;
/// use diesel_lease::semaphore::{RwLock, Semaphore};
///
/// let pool = diesel_lease::pool::build_pool::<diesel::PgConnection>(&url, 8)?;
/// diesel_lease::run_migrations(&mut pool.get()?)?; // creates the control tables
///
/// let imports = Semaphore::new("partner-api", 3);
/// let permit = imports.acquire(&pool, Duration::from_secs(600))?; // waits its turn
/// import_everything()?;
/// let _ = permit.release()?; // or drop it
///
/// let mutex = Semaphore::mutex("schema-change");
/// if let Some(_held) = mutex.try_acquire(&pool)? { /* never waits */ }
///
/// let list = RwLock::new("work-list");
/// let reading = list.read(&pool, Duration::from_secs(30))?; // shared with other readers
/// drop(reading);
/// let writing = list.write(&pool, Duration::from_secs(30))?; // alone, once the readers left
/// # let _ = writing;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block15;

/// README block 16.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use chrono::NaiveDateTime;
/// # use std::time::Duration;
/// # use diesel_lease::claim::{RetryOutcome, RetryPolicy};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::AtomicBool;
/// # diesel::table! { process_control (queue_position) { queue_position -> Integer, requesting_id -> Text, resource -> Text, access_type -> Text, granted -> Bool, expires_at -> BigInt, } }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = diesel_lease::pool::build_pool::<SqliteConnection>("readme.db", 4)?;
/// #[derive(Queryable, Selectable, ControlTable)]
/// #[diesel(table_name = process_control, primary_key(queue_position))]
/// #[control_table(ticket = queue_position, owner = requesting_id, resource = resource,
///                       mode = access_type, shared = "R", exclusive = "W")]
/// pub struct ProcessControl { queue_position: i32, requesting_id: String, resource: String,
///                             access_type: String }
///
/// let etl = ProcessControl::semaphore("etl", 3);          // a Semaphore, as above
/// let permit = etl.acquire(&pool, Duration::from_secs(600))?;
/// let report = ProcessControl::rw_lock("report-list");     // readers 'R', writers 'W'
/// let writing = report.write(&pool, Duration::from_secs(30))?;
/// # let _ = (permit, writing);
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block16;

/// README block 17.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # #[cfg(feature = "deadpool")]
/// # mod app {
/// # use diesel::prelude::*;
/// # use diesel_lease::prelude::*;
/// # use diesel_lease::lease::{LeaseGuard, LeaseOptions};
/// # use diesel_lease::worker::Worker;
/// # use std::sync::atomic::{AtomicBool, Ordering};
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # diesel::table! {
/// #     orders (id) {
/// #         id -> BigInt,
/// #         item -> Text,
/// #         status -> Text,
/// #         owner -> Nullable<Text>,
/// #         claimed_at -> Nullable<Timestamp>,
/// #         attempts -> Integer,
/// #     }
/// # }
/// # #[derive(Queryable, Selectable, Claimable)]
/// # #[diesel(table_name = orders)]
/// # #[claimable(state = status, ready = "placed", claimed = "packing", done = "shipped",
/// #             failed = "undeliverable", owner = owner, claimed_at = claimed_at, attempts = attempts)]
/// # struct Order { id: i64, item: String, status: String, owner: Option<String>,
/// #                claimed_at: Option<chrono::NaiveDateTime>, attempts: i32 }
/// # fn ship(_: &mut PgConnection, _: &Order) -> Result<(), diesel::result::Error> { Ok(()) }
/// # fn take_stock(_: &mut PgConnection, _: &str) -> Result<(), diesel::result::Error> { Ok(()) }
/// # async fn app(url: String, body: String) -> Result<(), Box<dyn std::error::Error>> {
/// use diesel_lease::pool::Deadpool;
///
/// // At start-up, on the runtime: one pool for the application and diesel-lease, whose
/// // waiters a NOTIFY wakes (one listener connection to `url`).
/// let db = Deadpool::<PgConnection>::build(&url, 16)?;
///
/// // Beside the runtime, on a thread of its own: the Worker.
/// let stop = Arc::new(AtomicBool::new(false));
/// let worker = std::thread::spawn({
///     let (db, stop) = (db.clone(), stop.clone());
///     move || Worker::<Order, PgConnection>::new(db).run_until(&stop, |conn, order: &Order| ship(conn, order))
/// });
///
/// // In a request handler: the row is queued in the request's own transaction, so a request
/// // that fails after it queues nothing.
/// let item = body.clone();
/// let conn = db.pool().get().await?;
/// conn.interact(move |conn| conn.transaction(|conn| {
///     take_stock(conn, &item)?;                                  // the request's own writes
///     diesel::insert_into(orders::table).values(orders::item.eq(&item)).execute(conn)
/// })).await??;
///
/// // Leases and permits block, like Diesel: take them in spawn_blocking, never in the async fn.
/// let lease = { let db = db.clone(); tokio::task::spawn_blocking(move || {
///     LeaseGuard::try_acquire(&db, "nightly-report", &LeaseOptions::new(Duration::from_secs(60)))
/// }) }.await??;
///
/// // On Ctrl-C: stop the server first (axum's `with_graceful_shutdown`), then the Worker.
/// stop.store(true, Ordering::SeqCst);
/// let report = tokio::task::spawn_blocking(move || worker.join()).await?;
/// # let _ = (lease, report);
/// # Ok(())
/// # }
/// # }
/// # fn main() {}
/// ```
#[allow(dead_code)]
pub(crate) struct Block17;

/// README block 18.
/// ```no_run
/// # #![allow(unused, dead_code)]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use diesel_lease::pool::PoolOptions;
///
/// let pool = PoolOptions::default()
///     .transaction_pooler()                             // Diesel's statement cache off
///     .listen_url("postgres://app@db-primary:5432/app") // wake-ups from PostgreSQL itself
///     .build::<diesel::PgConnection>("postgres://app@pgbouncer:6432/app", 16)?; // through PgBouncer
/// # let _ = pool;
/// # Ok(())
/// # }
/// ```
#[allow(dead_code)]
pub(crate) struct Block18;
