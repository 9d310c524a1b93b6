//! [`Queue`], the queue controls builder (the docs are on the type).

use std::marker::PhantomData;

use diesel::expression::{AppearsOnTable, Expression};
use diesel::query_builder::QueryFragment;
use diesel::sql_types::Bool;
use diesel::Connection;

use super::retention::{Purged, Retention, RetentionConnection};
use super::{
    cancel, pause, wait, ClaimConnection, Claimable, HasCancelState, HasFailedState, HasPauseKey,
    Pausable, TimeColumn,
};
use crate::clock::TimestampType;
use crate::{BorrowConnection, Result};

/// The controls of a model's table as a queue, built as a [`Claim`](super::Claim) is; made by
/// [`ClaimDsl::queue`](crate::dsl::ClaimDsl::queue).
///
/// `M::queue()` names the whole table; a step narrows it, and a terminal call acts:
///
/// | step | what |
/// |---|---|
/// | [`key`](Queue::key) | only the rows whose pause key (`pausable(key = …)`) holds this value: for `pause`, `resume` |
/// | [`filter`](Queue::filter) | only rows that also match a Diesel boolean expression on the model's table: for `redrive` |
///
/// | terminal | what | returns |
/// |---|---|---|
/// | [`pause`](Queue::pause), [`resume`](Queue::resume) | stop and restart claims, for every process of the farm | `true` when the state changed |
/// | [`notify`](Queue::notify) | wake the table's waiting claimers now | `()` |
/// | [`install_ready_trigger`](Queue::install_ready_trigger) | have every insert wake them (PostgreSQL) | `()` |
/// | [`cancel`](Queue::cancel) | cancel one row by key, claimed or not | `true` when it was cancelled |
/// | [`purge`](Queue::purge) | delete done and dead rows older than a retention period | [`Purged`] |
/// | [`redrive`](Queue::redrive) | move dead rows back to ready | how many moved |
///
/// A step a terminal does not take is a compile error: a key on `redrive`, a filter on `pause`.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! { mails (id) { id -> BigInt, status -> Text, tenant -> Text, } }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = mails)]
/// #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
///             pausable(key = tenant))]
/// struct Mail { id: i64, status: String, tenant: String }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_lease::run_migrations(&mut conn)?;
/// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
/// #     "CREATE TABLE mails (id INTEGER PRIMARY KEY, status TEXT NOT NULL, tenant TEXT NOT NULL);
/// #      INSERT INTO mails VALUES (1, 'new', 'acme'), (2, 'new', 'globex'), (3, 'dead', 'acme');")?;
/// assert!(Mail::queue().key("acme").pause(&mut conn)?, "only acme's rows wait");
/// assert_eq!(Mail::claim().row(&mut conn)?.map(|m| m.id), Some(2));
/// assert!(Mail::queue().key("acme").resume(&mut conn)?);
///
/// assert!(Mail::queue().cancel(&mut conn, 1)?, "cancelled: never claimed");
/// assert_eq!(Mail::queue().filter(mails::tenant.eq("acme")).redrive(&mut conn, 10)?, 2);
/// # Ok(()) }
/// # main().unwrap();
/// # }
/// ```
///
/// The second type parameter records the step taken (the whole table, one pause key, or a
/// filter), so that a terminal the step does not apply to is not there to call.
#[must_use = "a queue control does nothing until a terminal call (`pause`, `resume`, `notify`, `cancel`, `purge`, `redrive`, …) runs it"]
pub struct Queue<M, S = Whole> {
    scope: S,
    model: PhantomData<fn() -> M>,
}

impl<M, S: std::fmt::Debug> std::fmt::Debug for Queue<M, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("model", &std::any::type_name::<M>())
            .field("scope", &self.scope)
            .finish()
    }
}

/// Step marker: the whole table.
#[derive(Debug, Clone, Copy)]
pub struct Whole;

/// Step marker: the rows of one pause key ([`Queue::key`]).
#[derive(Debug, Clone, Copy)]
pub struct Key<'k>(&'k str);

/// Step marker: the rows that match a filter ([`Queue::filter`]).
#[derive(Debug, Clone, Copy)]
pub struct Matching<F>(F);

impl<M: Claimable> Queue<M> {
    pub(crate) fn new() -> Self {
        Queue {
            scope: Whole,
            model: PhantomData,
        }
    }

    /// Narrows [`pause`](Queue::pause) and [`resume`](Queue::resume) to the rows whose pause key
    /// column (`pausable(key = …)`) holds `key`: the other rows are claimed as before.
    pub fn key(self, key: &str) -> Queue<M, Key<'_>>
    where
        M: HasPauseKey,
    {
        Queue {
            scope: Key(key),
            model: PhantomData,
        }
    }

    /// Narrows [`redrive`](Queue::redrive) to the rows that also match `filter`, a Diesel
    /// boolean expression on the model's table (`jobs::queue.eq("emails")`); another table's
    /// column is a compile error here.
    pub fn filter<F>(self, filter: F) -> Queue<M, Matching<F>>
    where
        F: Expression<SqlType = Bool> + AppearsOnTable<M::Table>,
    {
        Queue {
            scope: Matching(filter),
            model: PhantomData,
        }
    }

    /// Pauses claims from this table for every process of the farm: its claims return nothing
    /// and its waiters (claims with a [`wait`](super::Claim::wait) step, a
    /// [`Worker`](crate::worker::Worker)) keep waiting, until [`resume`](Self::resume). `true`
    /// when this call paused it, `false` when it was paused already. Needs `pausable` and
    /// diesel-lease's migrations ([`run_migrations`](crate::run_migrations)).
    pub fn pause<C>(self, conn: &mut C) -> Result<bool>
    where
        M: Pausable,
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        pause::pause::<M, C>(conn)
    }

    /// Resumes claims from this table and wakes its waiters at once (PostgreSQL `NOTIFY`, sent
    /// at commit; elsewhere this process's waiters, and other processes' at their next poll).
    /// `true` when it was paused. Needs `pausable`.
    ///
    /// Called inside a transaction of yours, the resume counts from your commit; PostgreSQL's
    /// `NOTIFY` is sent then, but this process's waiters on SQLite and MySQL are woken at once,
    /// may look before the commit and find the table still paused, and then see the resume at
    /// their next poll (within one second).
    pub fn resume<C>(self, conn: &mut C) -> Result<bool>
    where
        M: Pausable,
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        pause::resume::<M, C>(conn)
    }

    /// Wakes this table's waiting claimers (claims with a [`wait`](super::Claim::wait) step, a
    /// [`Worker`](crate::worker::Worker)) on every pool's listener: call it after inserting
    /// rows, or after making rows ready by an update. Inside a transaction the notification is
    /// sent when it commits (PostgreSQL `NOTIFY`), so waiters never look before the rows are
    /// visible. On SQLite and MySQL, which have no notifications, it does nothing: their
    /// waiters poll.
    ///
    /// ```
    /// # #[cfg(feature = "postgres")] {
    /// # mod setup { include!("../doctest_pg.rs"); }
    /// # use setup::pg_connection;
    /// use diesel::prelude::*;
    /// use diesel_lease::prelude::*;
    ///
    /// diesel::table! { mails (id) { id -> BigInt, status -> Text, } }
    ///
    /// #[derive(Debug, Queryable, Selectable, Claimable)]
    /// #[diesel(table_name = mails)]
    /// #[claimable(state = status, ready = "new", claimed = "sending")]
    /// struct Mail {
    ///     id: i64,
    ///     status: String,
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let Some(mut conn) = pg_connection() else { return Ok(()) };
    /// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
    /// #     "CREATE TABLE mails (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL)")?;
    /// conn.transaction::<_, diesel_lease::Error, _>(|conn| {
    ///     diesel::insert_into(mails::table).values(mails::status.eq("new")).execute(conn)?;
    ///     Mail::queue().notify(conn)
    /// })?;
    /// # Ok(()) }
    /// # main().unwrap();
    /// # }
    /// ```
    pub fn notify<C>(self, conn: &mut C) -> Result<()>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        wait::notify_ready::<M, C>(conn)
    }

    /// Installs (or replaces) on this table a trigger that does what [`notify`](Self::notify)
    /// does after every insert statement, so producers need not call it (PostgreSQL: a function
    /// `diesel_lease_notify_ready()` and a statement-level trigger `diesel_lease_ready`; run it
    /// once, e.g. from a migration step). Updates that make rows ready again are not announced
    /// by it; waiters find those at their next poll. On SQLite and MySQL it does nothing.
    pub fn install_ready_trigger<C>(self, conn: &mut C) -> Result<()>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        wait::install_ready_trigger::<M, C>(conn)
    }

    /// Cancels the row with key `pk`: a ready row is never claimed; a claimed row's holder
    /// loses its claim (a [`ClaimGuard`](super::ClaimGuard)'s heartbeat finds it, so its
    /// [`lost_signal`](crate::Held::lost_signal) fires within one heartbeat, and `complete`
    /// returns `false`). The row goes to the `cancelled = …` state, or the failed state when
    /// the model names none. `true` when the row was ready or claimed and is now cancelled;
    /// `false` when there is no such row or it had finished already (left alone). Needs
    /// `cancelled = …` or `failed = …`.
    pub fn cancel<C>(self, conn: &mut C, pk: M::Pk) -> Result<bool>
    where
        M: HasCancelState,
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        cancel::cancel_by_pk(conn, pk)
    }

    /// Deletes the done and dead rows whose `column` (a timestamp you name, such as a
    /// `finished_at` or the `claimed_at` column) is older than the retention period by the
    /// database clock, in batches of the retention's size, each its own transaction; rows whose
    /// `column` is `NULL` stay. Ready and claimed rows are never touched, also where the done or
    /// failed state is a ready state too (rows that recur, or are retried): that state is not
    /// purged, and [`Error::Config`](crate::Error::Config) says so when no state is left to
    /// purge.
    ///
    /// Run it on one node of a farm from a periodic job
    /// ([`every`](crate::lease::schedule::every)). Refused inside an open transaction (each
    /// batch must commit on its own): `Error::Database(AlreadyInTransaction)`. See
    /// [`Retention`] for an example.
    pub fn purge<C, Col>(self, conn: &mut C, column: Col, retention: &Retention) -> Result<Purged>
    where
        C: BorrowConnection,
        C::Conn: RetentionConnection<M>,
        Col: diesel::Column<Table = M::Table>,
        Col::SqlType: TimestampType,
    {
        let _ = column;
        conn.borrow_connection()
            .purge_rows(TimeColumn::of::<Col::SqlType>(Col::NAME), retention)
    }

    /// Moves up to `limit` dead rows (the failed state) back to the first ready state: attempts
    /// reset to 0, owner and last error cleared, not-before set to now, where the model maps
    /// those columns; 500 rows per transaction. Returns how many moved.
    ///
    /// A model with an attempts column but no owner column keeps its attempts counting: the
    /// number is what fences the worker of an earlier claim off, and one used again would let
    /// that worker finish the new claim. The price, with `max_attempts` or a
    /// [`RetryPolicy`](super::RetryPolicy): a redriven row that had used its attempts gets one
    /// more try and no retry. Map an owner column for a redrive that starts the row's attempts
    /// over. A model with neither column cannot fence at all: a row cancelled into the failed
    /// state while a worker ran it, then redriven and claimed again, can be completed by that
    /// first worker. Map `owner` or `attempts` on a model whose running rows you cancel and
    /// redrive.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_lease::prelude::*;
    ///
    /// diesel::table! {
    ///     mails (id) {
    ///         id -> BigInt, status -> Text, owner -> Nullable<Text>, attempts -> Integer,
    ///         last_error -> Nullable<Text>,
    ///     }
    /// }
    ///
    /// #[derive(Debug, Queryable, Selectable, Claimable)]
    /// #[diesel(table_name = mails)]
    /// #[claimable(state = status, ready = "new", claimed = "sending", done = "sent", failed = "dead",
    ///             owner = owner, attempts = attempts, error = last_error)]
    /// struct Mail {
    ///     id: i64,
    ///     status: String,
    ///     owner: Option<String>,
    ///     attempts: i32,
    ///     last_error: Option<String>,
    /// }
    ///
    /// # let mut conn = SqliteConnection::establish(":memory:").unwrap();
    /// # diesel::connection::SimpleConnection::batch_execute(&mut conn,
    /// #     "CREATE TABLE mails (id INTEGER PRIMARY KEY, status TEXT NOT NULL, owner TEXT,
    /// #          attempts INTEGER NOT NULL, last_error TEXT);
    /// #      INSERT INTO mails VALUES (1, 'dead', 'w1', 5, 'smtp down'), (2, 'dead', 'w1', 5, 'smtp down');").unwrap();
    /// // The mail server is back: both dead letters are new mails again, with no attempt used.
    /// assert_eq!(Mail::queue().redrive(&mut conn, 100).unwrap(), 2);
    /// let mail = Mail::claim().row(&mut conn).unwrap().expect("ready again");
    /// assert_eq!((mail.attempts, mail.last_error), (1, None));
    /// # }
    /// ```
    pub fn redrive<C>(self, conn: &mut C, limit: u64) -> Result<u64>
    where
        M: HasFailedState,
        C: BorrowConnection,
        C::Conn: RetentionConnection<M>,
    {
        conn.borrow_connection().redrive_rows(limit, None)
    }
}

impl<M: HasPauseKey> Queue<M, Key<'_>> {
    /// Pauses claims of the rows of this key; the other rows are claimed as before. `true` when
    /// this call paused them.
    pub fn pause<C>(self, conn: &mut C) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        pause::pause_key::<M, C>(conn, self.scope.0)
    }

    /// Resumes claims of the rows of this key, and wakes the table's waiters. `true` when they
    /// were paused.
    pub fn resume<C>(self, conn: &mut C) -> Result<bool>
    where
        C: BorrowConnection,
        C::Conn: ClaimConnection<M>,
    {
        pause::resume_key::<M, C>(conn, self.scope.0)
    }
}

impl<M: Claimable, F> Queue<M, Matching<F>>
where
    F: Expression<SqlType = Bool> + AppearsOnTable<M::Table>,
{
    /// [`redrive`](Queue::redrive) of the dead rows that also match the filter.
    pub fn redrive<C>(self, conn: &mut C, limit: u64) -> Result<u64>
    where
        M: HasFailedState,
        C: BorrowConnection,
        C::Conn: RetentionConnection<M>,
        F: QueryFragment<<C::Conn as Connection>::Backend>,
    {
        conn.borrow_connection()
            .redrive_rows(limit, Some(&self.scope.0))
    }
}
