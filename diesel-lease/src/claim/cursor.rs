//! Claims that resume at the last claimed row: a deep queue's claims without the walk over
//! the front of its index ([`ClaimCursor`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use diesel::expression::{AppearsOnTable, AsExpression, Expression};
use diesel::query_builder::{QueryFragment, QueryId};
use diesel::sql_types::{Bool, SqlType};
use diesel::{Column, ExpressionMethods};
use lease_core::ResumePoint;

use super::{batch_size, ClaimConnection, ClaimOptions, Claimable, NoFilter, SortOrder};
use crate::Result;

/// The first column of a model's claim order, and its value in a row: what a [`ClaimCursor`]
/// resumes from.
///
/// `#[derive(Claimable)]` implements it when the struct has a field for that column (the
/// `order_by(…)` attribute's first column; by default the priority, else the not-before
/// column, else the primary key).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no field for the first column of its claim order, so a claim cannot resume at it",
    label = "a `ClaimCursor` needs this model to read its claim order's first column",
    note = "add a field for that column to `{Self}` (the first of `order_by(…)`; by default the priority, the not-before column or the primary key)"
)]
pub trait ClaimOrderKey: Claimable {
    /// The column (`jobs::seq`).
    type OrderColumn: Column<Table = Self::Table> + Default;
    /// The type of its field.
    type OrderValue;

    /// The row's value of the column.
    fn order_value(&self) -> &Self::OrderValue;
}

/// The bounds under which a connection runs a [`ClaimCursor`]'s claims of model `M`: those of
/// [`ClaimConnection`], and a first order column that compares with its field's value in SQL.
/// Implemented for every such connection; you never implement it.
#[diagnostic::on_unimplemented(
    message = "a `ClaimCursor` of `{M}` cannot compare the claim order's first column with its field's value on this connection",
    note = "the field's type must convert to the column's SQL type (`AsExpression`), be `Clone + PartialOrd + Send + 'static`, and the column must not be nullable"
)]
pub trait CursorConnection<M: ClaimOrderKey>: ClaimConnection<M> {
    /// Claims up to `limit` rows at or after `key` in the claim order; with `key_limit`
    /// (column, max), none whose key column already has `max` claimed rows.
    #[doc(hidden)]
    fn claim_from(
        &mut self,
        limit: i64,
        options: &ClaimOptions,
        key: &M::OrderValue,
        key_limit: Option<(&'static str, i64)>,
    ) -> Result<Vec<M>>;
}

type Col<M> = <M as ClaimOrderKey>::OrderColumn;
type Value<M> = <M as ClaimOrderKey>::OrderValue;

// Not recommended in errors: a first order column that does not compare with its field's value
// (a nullable one) is reported as the one unmet `CursorConnection` bound, with its note, instead
// of as a type mismatch in each comparison below.
#[diagnostic::do_not_recommend]
impl<M, C> CursorConnection<M> for C
where
    M: ClaimOrderKey,
    C: ClaimConnection<M>,
    <Col<M> as Expression>::SqlType: SqlType + diesel::sql_types::SingleValue,
    Value<M>: AsExpression<<Col<M> as Expression>::SqlType> + Clone,
    diesel::dsl::GtEq<Col<M>, Value<M>>:
        Expression<SqlType = Bool> + AppearsOnTable<M::Table> + QueryFragment<C::Backend> + QueryId,
    diesel::dsl::LtEq<Col<M>, Value<M>>:
        Expression<SqlType = Bool> + AppearsOnTable<M::Table> + QueryFragment<C::Backend> + QueryId,
{
    fn claim_from(
        &mut self,
        limit: i64,
        options: &ClaimOptions,
        key: &M::OrderValue,
        key_limit: Option<(&'static str, i64)>,
    ) -> Result<Vec<M>> {
        let column = Col::<M>::default();
        // `>=` (`<=` for a descending order), never `>`: rows that share the first column's value
        // with the last claimed row may still come after it in the whole order.
        if first_order::<M>() == SortOrder::Desc {
            claim_bounded(self, limit, options, column.le(key.clone()), key_limit)
        } else {
            claim_bounded(self, limit, options, column.ge(key.clone()), key_limit)
        }
    }
}

/// A claim of rows that pass `bound` (its type is the statement's cache key), and with
/// `key_limit`, whose key column has room.
fn claim_bounded<M, C, F>(
    conn: &mut C,
    limit: i64,
    options: &ClaimOptions,
    bound: F,
    key_limit: Option<(&'static str, i64)>,
) -> Result<Vec<M>>
where
    M: Claimable,
    C: ClaimConnection<M>,
    F: QueryFragment<C::Backend> + QueryId,
{
    match key_limit {
        Some((column, max)) => {
            conn.claim_under_key_limit(limit, options, column, max, Some(&bound))
        }
        None => conn.claim_matching::<F>(limit, options, Some(&bound)),
    }
}

/// Implemented only for Diesel's marker of a column that cannot be `NULL`: a [`ClaimCursor`]'s
/// bound on its first order column.
#[diagnostic::on_unimplemented(
    message = "the first column of the claim order is nullable, so a `ClaimCursor` cannot resume at it",
    label = "a nullable first order column",
    note = "a cursor's claims add `column >= <the last claimed value>`, which a NULL never passes: order by a NOT NULL column first, or claim without a cursor"
)]
pub trait NotNullOrder {}

impl NotNullOrder for diesel::sql_types::is_nullable::NotNull {}

fn first_order<M: Claimable>() -> SortOrder {
    M::ORDER.first().map_or(SortOrder::Asc, |(_, dir)| *dir)
}

/// Claims of model `M` that resume at the last row claimed, instead of starting at the front
/// of the claim order: what keeps a deep queue's claims as fast as a short one's on PostgreSQL.
///
/// A claim picks the first claimable row in the claim order. On PostgreSQL every claimed row
/// leaves a dead entry at the front of the queue's index, which the next claims step over until
/// a vacuum cleans the index, and on a large table vacuum skips that step while fewer than 2 % of
/// the table's pages hold dead rows. A cursor's claims add `first_order_column >= <its value in
/// the last claimed row>` (`<=` for a descending order) to the claim, so the index scan starts
/// there. Held at 10 million pending rows, claims through a cursor ran as fast as at 100,000
/// (BENCHMARKS.md, session 13).
///
/// **What it changes:** a row that becomes claimable again *before* that key — released,
/// retried, rescued from a stale claim, a row of higher priority, or one inserted by a
/// transaction that committed late — is not taken first; it waits until a claim looks from the
/// front again: the first claim, one every `rescan` period, and the next claim after one that
/// found fewer rows from the key on than it asked for. So no row waits longer than `rescan` while
/// the worker keeps claiming, and a drained queue's claims find every row. Every row still goes
/// to exactly one worker: the cursor only narrows which rows a claim looks at.
///
/// The bound is on the first order column only (`>=`, so rows sharing its value with the last
/// claimed row are still found): it skips as much as that column narrows, every dead entry for a
/// sequence or an enqueue time, hardly any for a priority of a few values.
///
/// A clone shares the cursor (its key and its rescan schedule): give the workers of one process
/// one cursor per model, or one each. Claims go through [`ClaimConnection`]'s usual path
/// (owner, timeout, rate limits of the [`ClaimOptions`]).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_lease::claim::ClaimCursor;
/// use diesel_lease::prelude::*;
///
/// diesel::table! { jobs (id) { id -> BigInt, seq -> BigInt, status -> Text, } }
///
/// #[derive(Queryable, Selectable, Claimable)]
/// #[diesel(table_name = jobs)]
/// #[claimable(state = status, ready = "ready", claimed = "running", done = "done", order_by(seq))]
/// struct Job {
///     id: i64,
///     seq: i64,
///     status: String,
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel::sql_query("CREATE TABLE jobs (id INTEGER PRIMARY KEY, seq BIGINT NOT NULL, status TEXT NOT NULL)")
///     .execute(&mut conn)?;
/// diesel::sql_query("INSERT INTO jobs (id, seq, status) VALUES (1, 10, 'ready'), (2, 20, 'ready'), (3, 30, 'ready')")
///     .execute(&mut conn)?;
///
/// let cursor = ClaimCursor::<Job>::new(Duration::from_secs(60))?;
/// let a = Job::claim().cursor(&cursor).row(&mut conn)?.expect("a row");
/// let b = Job::claim().cursor(&cursor).row(&mut conn)?.expect("a row");
/// assert_eq!((a.seq, b.seq), (10, 20));
/// a.requeue(&mut conn)?;                     // ready again, before the key (20)
/// let c = Job::claim().cursor(&cursor).row(&mut conn)?.expect("a row");
/// assert_eq!(c.seq, 30, "the claim resumes at the key: row a waits");
/// let again = Job::claim().cursor(&cursor).row(&mut conn)?.expect("a row");
/// assert_eq!(again.seq, 10, "nothing left from the key on: this claim looks from the front");
/// # Ok(()) }
/// # }
/// ```
pub struct ClaimCursor<M: ClaimOrderKey> {
    point: Arc<Mutex<ResumePoint<M::OrderValue>>>,
}

impl<M: ClaimOrderKey> Clone for ClaimCursor<M> {
    fn clone(&self) -> Self {
        ClaimCursor {
            point: Arc::clone(&self.point),
        }
    }
}

impl<M: ClaimOrderKey> std::fmt::Debug for ClaimCursor<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimCursor")
            .field("model", &std::any::type_name::<M>())
            .field("rescan", &self.lock().rescan())
            .finish_non_exhaustive()
    }
}

impl<M: ClaimOrderKey> ClaimCursor<M> {
    /// A cursor whose claims look from the front of the claim order at least every `rescan`
    /// (zero is refused with [`InvalidInput::ZeroDuration`](crate::InvalidInput::ZeroDuration)).
    /// A row that becomes claimable before the last claimed key waits at most that long while
    /// the worker keeps claiming. With one second, one claim a second pays the walk over the
    /// front of the index that the others skip.
    ///
    /// The first order column must not be nullable: the bound is `column >= value`, which a
    /// `NULL` never passes, so such a cursor is a compile error here.
    pub fn new(rescan: Duration) -> Result<Self>
    where
        <Col<M> as Expression>::SqlType: SqlType,
        <<Col<M> as Expression>::SqlType as SqlType>::IsNull: NotNullOrder,
    {
        Ok(ClaimCursor {
            point: Arc::new(Mutex::new(ResumePoint::new(rescan)?)),
        })
    }

    /// Claims up to `n` rows from the last claimed row on, on the connection itself (a claim's with [`Claim::cursor`](super::Claim::cursor), and a
    /// [`Worker`](crate::worker::Worker)'s claims).
    ///
    /// With `key_limit`, rows whose key column already has `max` claimed rows are skipped, as
    /// `Worker::limit_per_key`'s claims skip them.
    pub(crate) fn claim_rows<D>(
        &self,
        conn: &mut D,
        n: usize,
        options: &ClaimOptions,
        key_limit: Option<(&'static str, i64)>,
    ) -> Result<Vec<M>>
    where
        D: CursorConnection<M>,
        M::OrderValue: Clone + PartialOrd,
    {
        let limit = batch_size(n)?;
        let (pass, key) = {
            let mut point = self.lock();
            let (pass, key) = point.bound(Instant::now());
            (pass, key.cloned())
        };
        let from_front = |conn: &mut D| match key_limit {
            Some((col, max)) => conn.claim_under_key_limit(limit, options, col, max, None),
            None => conn.claim_matching::<NoFilter>(limit, options, None),
        };
        let (rows, resume) = match key {
            None => (from_front(conn)?, true),
            Some(key) => {
                let rows = conn.claim_from(limit, options, &key, key_limit)?;
                if rows.is_empty() {
                    // Nothing from the key on: look from the front at once.
                    (from_front(conn)?, true)
                } else {
                    // Fewer rows than asked: rows may wait before the key, so the next claim
                    // looks from the front.
                    let full = rows.len() == n;
                    (rows, full)
                }
            }
        };
        let mut point = self.lock();
        match furthest(&rows) {
            Some(key) if resume => point.claimed(pass, key.clone()),
            _ => point.found_nothing(pass),
        }
        drop(point);
        Ok(rows)
    }

    /// The state; a panic elsewhere cannot leave it half-changed (each change is one assignment).
    fn lock(&self) -> MutexGuard<'_, ResumePoint<M::OrderValue>> {
        self.point
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The order value of the last of `rows` in the claim order (a batch comes back in no
/// particular order).
fn furthest<M: ClaimOrderKey>(rows: &[M]) -> Option<&M::OrderValue>
where
    M::OrderValue: PartialOrd,
{
    let later = |a: &M::OrderValue, b: &M::OrderValue| match first_order::<M>() {
        SortOrder::Asc => b > a,
        SortOrder::Desc => b < a,
    };
    rows.iter()
        .map(M::order_value)
        .fold(None, |best, v| match best {
            Some(b) if !later(b, v) => Some(b),
            _ => Some(v),
        })
}
