//! Finishing many claimed rows in one statement: `FinishDsl`'s `complete`, `fail` and
//! `requeue` on a slice.
//!
//! Each row is checked as [`FinishDsl`](crate::dsl::FinishDsl) checks one row (still claimed, the same claim
//! stamp, the same attempt); the statement reports which rows it changed, so a row another worker
//! rescued in the meantime is reported as no longer this worker's and left alone.
//!
//! The statements, by backend: PostgreSQL sends a one-column key's batch as arrays
//! (`postgres.rs`, `UnnestFinish`), any other as one `UPDATE … RETURNING <position>`
//! (`update_returning`); SQLite and MySQL send the `UPDATE` alone and check its count,
//! finding out which rows were theirs only when a row was lost (`count_then_exact`).
//!
//! Not a stable API: these types appear only in the bounds of
//! [`ClaimConnection`](super::ClaimConnection).
#![allow(missing_debug_implementations)]

use std::borrow::Cow;
use std::marker::PhantomData;

use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::QueryResult;

use super::statements::{push_finish_assignments, push_stamp_check, ClaimModel, ClaimSql};
use super::{Claimable, Finish};
use crate::backend::{BackendKind, Dialect, SqlDialect};

/// Rows per statement: at most 4 binds each (composite keys add more), far below every
/// backend's limit on parameters.
pub(crate) const CHUNK: usize = 200;

/// The row counts a batch statement is written for. A batch of `n` rows runs as the first of
/// these at least `n`, its last row repeated in the places left (a repeated row changes and
/// reports nothing twice: it matches once, and its first position is the one reported). So the
/// text of a statement follows from its type ([`BatchId`]) and Diesel prepares it once per
/// connection instead of building, hashing and comparing a text of thousands of characters on
/// every call. At most a quarter of a statement's rows are repeats.
const PADDED: [usize; 20] = [
    1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 25, 32, 40, 50, 64, 80, 100, 128, 160, CHUNK,
];

/// The rows a statement of `n` rows is written for: the first of [`PADDED`] at least `n`
/// (`n` itself past the last, which [`CHUNK`] keeps from happening).
pub(crate) fn padded_len(n: usize) -> usize {
    PADDED.iter().copied().find(|&p| p >= n).unwrap_or(n)
}

/// One row of a batch: its key and the claim it was handed out under.
pub struct BatchRow<'a, M: Claimable> {
    pk: M::PkFilter,
    /// The key's value, for PostgreSQL's array form (`postgres.rs`, [`KeyArray`]).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) key: M::Pk,
    /// Borrowed from the claimed row: a batch copies no stamps.
    pub(crate) owner: Option<Option<Cow<'a, str>>>,
    pub(crate) attempts: Option<Option<i64>>,
}

/// The owner-checked change of many rows, in one of its forms ([`BatchStep`]). Its rows are
/// the positions (in `rows`, from 0) of the rows it changed or locked: `CASE WHEN <pk 0> THEN 0
/// WHEN <pk 1> THEN 1 … END`, one `INTEGER` each, so the caller learns which of its rows were
/// still its own without the rows being sent back and decoded.
pub(crate) struct BatchFinishStmt<'a, M: ClaimSql<DB>, DB: SqlDialect> {
    pub(crate) table: M::Table,
    pub(crate) _db: std::marker::PhantomData<DB>,
    pub(crate) rows: &'a [BatchRow<'a, M>],
    /// The rows the text is written for ([`padded_len`]).
    padded: usize,
    /// The claim stamp every row shares, checked once for the whole statement (`owner = $ AND
    /// (…)`) rather than once per row: the usual batch, claimed by one batch claim. `None`
    /// when the model has no stamp column or the rows' stamps differ.
    shared_owner: Option<&'a Option<Option<Cow<'a, str>>>>,
    pub(crate) to: Finish,
    pub(crate) step: BatchStep,
}

/// Which statement of a batch finish.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchStep {
    /// `UPDATE t SET <target> WHERE <still ours> RETURNING <position>`: PostgreSQL and SQLite.
    UpdateReturning,
    /// `SELECT <position> FROM t WHERE <still ours> FOR UPDATE`: MySQL's first statement, which
    /// locks the rows the update then changes (no `UPDATE … RETURNING` there).
    LockOurs,
    /// `UPDATE t SET <target> WHERE <still ours>`: MySQL's second statement.
    #[cfg_attr(not(feature = "__mysql_like"), allow(dead_code))]
    Update,
}

impl<'a, M: ClaimSql<DB>, DB: SqlDialect> BatchFinishStmt<'a, M, DB> {
    pub(crate) fn new(rows: &'a [BatchRow<'a, M>], to: Finish, step: BatchStep) -> Self {
        BatchFinishStmt {
            table: M::Table::default(),
            _db: PhantomData,
            rows,
            padded: padded_len(rows.len()),
            shared_owner: shared_owner(rows),
            to,
            step,
        }
    }

    /// `rows`, then its last row again up to the padded count.
    fn padded_rows(&self) -> impl Iterator<Item = &BatchRow<'a, M>> {
        let last = self.rows.len().saturating_sub(1);
        (0..self.padded).filter_map(move |i| self.rows.get(i.min(last)))
    }

    /// `state = <claimed> AND ((<pk 1> AND owner = $ AND attempts = $) OR …)`, or with a
    /// [shared owner](Self::shared_owner) `state = <claimed> AND owner = $ AND ((<pk 1> AND
    /// attempts = $) OR …)`: the same rows match either way.
    ///
    /// On SQLite the terms every row of the batch shares (the state, a shared owner) are written
    /// `+col = …`, which keeps an index on those columns out of the plan. Without statistics
    /// SQLite takes any equality on an indexed column for a handful of rows, and would read
    /// every claimed row of the table through the state's index, testing each against the
    /// batch's keys: 0.35 s for 200 keys among 70,000 claimed rows, where the keys' own lookups
    /// (`MULTI-INDEX OR` on the primary key) take 2 ms (measured with SQLite 3.40).
    fn push_still_ours<'b>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let unindexed = if DB::KIND == BackendKind::Sqlite {
            "+"
        } else {
            ""
        };
        out.push_sql(unindexed);
        M::CLAIMED_SQL.push_eq(out, M::STATE)?;
        if let (Some(Some(owner)), Some(col)) = (self.shared_owner, M::OWNER) {
            out.push_sql(" AND ");
            out.push_sql(unindexed);
            out.push_identifier(col)?;
            out.push_sql(" = ");
            DB::bind_opt_str(out, owner)?;
        }
        out.push_sql(" AND (");
        for (i, row) in self.padded_rows().enumerate() {
            if i > 0 {
                out.push_sql(" OR ");
            }
            out.push_sql("((");
            M::push_pk(out, &row.pk)?;
            out.push_sql(")");
            let owner = if self.shared_owner.is_some() {
                &None
            } else {
                &row.owner
            };
            push_stamp_check::<M, DB>(out, owner, &row.attempts)?;
            out.push_sql(")");
        }
        out.push_sql(")");
        Ok(())
    }

    /// `CASE WHEN (<pk 0>) THEN 0 WHEN (<pk 1>) THEN 1 … END`: a row's position in `rows` (a
    /// repeated last row matches its first `WHEN`).
    fn push_position<'b>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("CASE");
        let mut digits = Digits::default();
        for (i, row) in self.padded_rows().enumerate() {
            out.push_sql(" WHEN (");
            M::push_pk(out, &row.pk)?;
            out.push_sql(") THEN ");
            // The position is this loop's counter, not a value from outside.
            out.push_sql(digits.of(i));
        }
        out.push_sql(" END");
        Ok(())
    }
}

impl<M: ClaimSql<DB>, DB: SqlDialect> QueryFragment<DB> for BatchFinishStmt<'_, M, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if self.step == BatchStep::LockOurs {
            out.push_sql("SELECT ");
            self.push_position(&mut out)?;
            out.push_sql(" FROM ");
            M::push_table(&mut out, &self.table)?;
            out.push_sql(" WHERE ");
            self.push_still_ours(&mut out)?;
            out.push_sql(" FOR UPDATE");
            return Ok(());
        }
        out.push_sql("UPDATE ");
        M::push_table(&mut out, &self.table)?;
        out.push_sql(" SET ");
        push_finish_assignments::<M, DB>(&mut out, self.to)?;
        out.push_sql(" WHERE ");
        self.push_still_ours(&mut out)?;
        if self.step == BatchStep::UpdateReturning {
            out.push_sql(" RETURNING ");
            self.push_position(&mut out)?;
        }
        Ok(())
    }
}

/// A position written as decimal digits without allocating (statements are walked on every
/// call, also when only their binds are collected).
#[derive(Default)]
struct Digits([u8; 20]);

impl Digits {
    fn of(&mut self, mut n: usize) -> &str {
        let mut at = self.0.len();
        loop {
            at -= 1;
            // `n % 10` is a digit: the cast cannot truncate.
            self.0[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        std::str::from_utf8(&self.0[at..]).unwrap_or("0")
    }
}

/// The claim stamp of `rows` when the model has one and every row carries the same, for
/// [`BatchFinishStmt::shared_owner`].
pub(crate) fn shared_owner<'a, M: Claimable>(
    rows: &'a [BatchRow<'a, M>],
) -> Option<&'a Option<Option<Cow<'a, str>>>> {
    let first = &rows.first()?.owner;
    (first.is_some() && rows.iter().all(|r| r.owner == *first)).then_some(first)
}

/// The batch rows of `rows`: each one's key, claim stamp and attempt.
pub(crate) fn batch_rows<M: Claimable>(rows: &[M]) -> Vec<BatchRow<'_, M>> {
    rows.iter()
        .map(|r| BatchRow {
            pk: M::pk_filter(r.pk()),
            key: r.pk(),
            owner: M::OWNER.map(|_| r.owner().map(Cow::Borrowed)),
            attempts: M::ATTEMPTS.map(|_| r.attempts()),
        })
        .collect()
}

/// The query id of a batch statement: the model, the finish target (`TO`: done, failed,
/// ready), the statement ([`BatchStep`] as `STEP`), whether one claim stamp is checked for all
/// rows (`SHARED`) and the padded row count fix its text; the model's constants and the
/// connection's dialect do the rest.
pub(crate) struct BatchId<M, const TO: u8, const STEP: u8, const SHARED: bool, const ROWS: usize>(
    PhantomData<M>,
);

impl<M: 'static, const TO: u8, const STEP: u8, const SHARED: bool, const ROWS: usize> QueryId
    for BatchId<M, TO, STEP, SHARED, ROWS>
{
    type QueryId = Self;
    const HAS_STATIC_QUERY_ID: bool = true;
}

/// `STEP` of a [`BatchId`].
const UPDATE_RETURNING: u8 = 0;
const LOCK_OURS: u8 = 1;
const UPDATE: u8 = 2;
/// PostgreSQL's `UPDATE … FROM unnest(…)` (`postgres.rs`), whose text is the same for every
/// row count (its `ROWS` is 0).
#[cfg(feature = "postgres")]
pub(crate) const UNNEST: u8 = 3;

impl BatchStep {
    fn id(self) -> u8 {
        match self {
            BatchStep::UpdateReturning => UPDATE_RETURNING,
            BatchStep::LockOurs => LOCK_OURS,
            BatchStep::Update => UPDATE,
        }
    }
}

/// Runs a batch statement under the query id [`with_id`] chose for it.
trait WithId {
    type Out;
    fn run<K: QueryId>(self) -> Self::Out;
}

/// Runs `run` with the [`BatchId`] of a statement of `padded` rows.
fn by_rows<M: 'static, R: WithId, const TO: u8, const STEP: u8, const SHARED: bool>(
    padded: usize,
    run: R,
) -> R::Out {
    macro_rules! arms {
        ($($n:literal),*) => {
            match padded {
                $($n => run.run::<BatchId<M, TO, STEP, SHARED, $n>>(),)*
                _ => run.run::<crate::backend::Dynamic>(),
            }
        };
    }
    // `PADDED`'s values (a unit test checks that each has its arm), and 0 for a text written
    // for any count.
    arms!(0, 1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 25, 32, 40, 50, 64, 80, 100, 128, 160, 200)
}

/// Runs `run` with `stmt`'s [`BatchId`] (`STEP` is the statement's step, which the caller knows;
/// a statement of another step, or of a row count not in [`PADDED`], is cached by its text).
fn with_id<M, DB, R, const STEP: u8>(stmt: &BatchFinishStmt<'_, M, DB>, run: R) -> R::Out
where
    M: ClaimSql<DB>,
    DB: SqlDialect,
    R: WithId,
{
    if stmt.step.id() != STEP {
        return run.run::<crate::backend::Dynamic>();
    }
    by_target::<M, R, STEP>(stmt.to, stmt.shared_owner.is_some(), stmt.padded, run)
}

/// Runs `run` with the [`BatchId`] of a statement of step `STEP` that moves rows to `to`, checks
/// one shared stamp or not, and is written for `rows` rows (0: a text that does not depend on
/// the count, PostgreSQL's [`UNNEST`]).
fn by_target<M: 'static, R: WithId, const STEP: u8>(
    to: Finish,
    shared: bool,
    rows: usize,
    run: R,
) -> R::Out {
    match (to, shared) {
        (Finish::Done, false) => by_rows::<M, R, 0, STEP, false>(rows, run),
        (Finish::Failed, false) => by_rows::<M, R, 1, STEP, false>(rows, run),
        (Finish::Ready, false) => by_rows::<M, R, 2, STEP, false>(rows, run),
        (Finish::Done, true) => by_rows::<M, R, 0, STEP, true>(rows, run),
        (Finish::Failed, true) => by_rows::<M, R, 1, STEP, true>(rows, run),
        (Finish::Ready, true) => by_rows::<M, R, 2, STEP, true>(rows, run),
    }
}

/// Loads the positions PostgreSQL's [`UNNEST`] statement returns, under its [`BatchId`]: its text
/// follows from the model, the target `to` and whether the stamp is `shared`.
#[cfg(feature = "postgres")]
pub(crate) fn load_unnest_positions<M: ClaimModel<C>, C: Dialect>(
    conn: &mut C,
    stmt: &dyn QueryFragment<C::Backend>,
    to: Finish,
    shared: bool,
) -> QueryResult<Vec<i32>> {
    by_target::<M, _, UNNEST>(to, shared, 0, Positions::<M, C>(conn, stmt, PhantomData))
}

/// Executes a statement, for its count of changed rows.
#[cfg(any(feature = "__mysql_like", feature = "sqlite"))]
struct Count<'s, 'c, C: Dialect>(&'c mut C, &'s dyn QueryFragment<C::Backend>);

#[cfg(any(feature = "__mysql_like", feature = "sqlite"))]
impl<C: Dialect> WithId for Count<'_, '_, C> {
    type Out = QueryResult<usize>;
    fn run<K: QueryId>(self) -> QueryResult<usize> {
        self.0
            .execute_returning_count(&super::statements::Exec::<_, K>::new(self.1))
    }
}

/// Loads a statement's positions.
struct Positions<'s, 'c, M, C: Dialect>(
    &'c mut C,
    &'s dyn QueryFragment<C::Backend>,
    PhantomData<M>,
);

impl<M: ClaimModel<C>, C: Dialect> WithId for Positions<'_, '_, M, C> {
    type Out = QueryResult<Vec<i32>>;
    fn run<K: QueryId>(self) -> QueryResult<Vec<i32>> {
        M::load_positions::<K>(self.0, self.1)
    }
}

/// The default [`ClaimDialect::finish_rows`](super::ClaimDialect::finish_rows): one
/// `UPDATE … RETURNING <position>`.
pub(crate) fn update_returning<M, C>(
    conn: &mut C,
    rows: &[BatchRow<'_, M>],
    to: Finish,
) -> QueryResult<Vec<bool>>
where
    C: Dialect,
    M: ClaimModel<C>,
{
    let stmt = BatchFinishStmt::<M, C::Backend>::new(rows, to, BatchStep::UpdateReturning);
    let positions = conn.keyed_write(|c| {
        with_id::<_, _, _, UPDATE_RETURNING>(&stmt, Positions::<M, C>(c, &stmt, PhantomData))
    })?;
    Ok(at_positions(rows.len(), &positions))
}

/// SQLite's and MySQL's [`ClaimDialect::finish_rows`](super::ClaimDialect::finish_rows): the
/// owner-checked `UPDATE` alone, in a write transaction, whose count of changed rows (MySQL:
/// matched rows, Diesel's `CLIENT_FOUND_ROWS`) answers for the whole batch when every row was
/// still ours (the usual case): no positions to compute, return and decode, and on MySQL no
/// locking read before the write. When fewer rows changed, the transaction (a savepoint inside
/// the caller's) rolls back and `exact` says which rows were ours.
///
/// The positions' `CASE` costs SQLite a comparison per earlier row for every row it returns
/// (BENCHMARKS.md, "Session 6"); MySQL's locking read of the positions was one statement and
/// 151 parameters more per batch ("Session 8").
#[cfg(any(feature = "__mysql_like", feature = "sqlite"))]
pub(crate) fn count_then_exact<M, C>(
    conn: &mut C,
    rows: &[BatchRow<'_, M>],
    to: Finish,
    exact: impl FnOnce(&mut C, &[BatchRow<'_, M>], Finish) -> QueryResult<Vec<bool>>,
) -> QueryResult<Vec<bool>>
where
    C: Dialect,
    M: ClaimModel<C>,
{
    let update = BatchFinishStmt::<M, C::Backend>::new(rows, to, BatchStep::Update);
    let all_ours = conn.write_tx_or_roll_back(|c| {
        let changed = with_id::<_, _, _, UPDATE>(&update, Count(c, &update))?;
        // Each row matches at most once (one key each), so `rows.len()` changes mean every row
        // was ours; a repeated row can never reach it and takes the exact path below.
        Ok((changed == rows.len()).then_some(()))
    })?;
    match all_ours {
        Some(()) => Ok(vec![true; rows.len()]),
        None => exact(conn, rows, to),
    }
}

/// MySQL's [`ClaimDialect::finish_rows`](super::ClaimDialect::finish_rows): lock the rows that
/// are still ours, then change exactly those, in the caller's write transaction.
#[cfg(feature = "__mysql_like")]
pub(crate) fn lock_then_update<M, C>(
    conn: &mut C,
    rows: &[BatchRow<'_, M>],
    to: Finish,
) -> QueryResult<Vec<bool>>
where
    C: Dialect,
    M: ClaimModel<C>,
{
    // A locking read that waits, cached: it runs in `finish_rows`' `write_tx`, which closes
    // every cached statement when it fails (see `Uncached`).
    let lock = BatchFinishStmt::<M, C::Backend>::new(rows, to, BatchStep::LockOurs);
    let ours = with_id::<_, _, _, LOCK_OURS>(&lock, Positions::<M, C>(conn, &lock, PhantomData))?;
    if !ours.is_empty() {
        let update = BatchFinishStmt::<M, C::Backend>::new(rows, to, BatchStep::Update);
        with_id::<_, _, _, UPDATE>(&update, Count(conn, &update))?;
    }
    Ok(at_positions(rows.len(), &ours))
}

/// For each of `len` rows, whether its position is among `positions` (out-of-range positions,
/// which no statement of ours returns, are ignored).
pub(crate) fn at_positions(len: usize, positions: &[i32]) -> Vec<bool> {
    let mut at = vec![false; len];
    for &p in positions {
        if let Some(slot) = usize::try_from(p).ok().and_then(|p| at.get_mut(p)) {
            *slot = true;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;
    use std::collections::HashSet;

    use diesel::query_builder::QueryId;

    use super::{at_positions, by_rows, padded_len, Digits, WithId, CHUNK, PADDED};

    /// The query id a statement would run under.
    struct IdOf;

    impl WithId for IdOf {
        type Out = Option<TypeId>;
        fn run<K: QueryId>(self) -> Option<TypeId> {
            K::query_id()
        }
    }

    #[test]
    fn every_batch_size_pads_to_a_row_count_with_its_own_static_id() {
        for n in 1..=CHUNK {
            let p = padded_len(n);
            assert!(PADDED.contains(&p) && p >= n, "{n} rows padded to {p}");
            assert!(
                4 * (p - n) <= p,
                "{n} rows padded to {p}: more than a quarter repeated"
            );
        }
        let mut ids = HashSet::new();
        for p in PADDED {
            for id in [
                by_rows::<(), _, 0, 0, false>(p, IdOf),
                by_rows::<(), _, 1, 0, false>(p, IdOf),
                by_rows::<(), _, 0, 2, false>(p, IdOf),
                by_rows::<(), _, 0, 0, true>(p, IdOf),
            ] {
                assert!(ids.insert(id.expect("a static id")), "{p} rows: id shared");
            }
        }
        // A text for any count (PostgreSQL's arrays) has one of its own.
        assert!(ids.insert(by_rows::<(), _, 0, 3, false>(0, IdOf).expect("a static id")));
        // Anything else is cached by its text.
        assert_eq!(by_rows::<(), _, 0, 0, false>(7, IdOf), None);
    }

    #[test]
    fn positions_are_written_as_their_decimal_digits() {
        let mut d = Digits::default();
        for n in [0, 7, 10, 199, 200, 12345, usize::MAX] {
            assert_eq!(d.of(n), n.to_string());
        }
    }

    #[test]
    fn positions_say_which_rows_of_the_batch_changed() {
        assert_eq!(at_positions(4, &[2, 0]), [true, false, true, false]);
        assert_eq!(at_positions(3, &[]), [false; 3]);
        // Nothing a statement of ours returns, but never a panic.
        assert_eq!(at_positions(2, &[-1, 2, 1]), [false, true]);
    }
}
