//! [`ClaimGuard`]: a claimed row that heartbeats while its work runs and is handed back if the
//! work never finishes it.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    finish, owner_checked, Change, ClaimConnection, ClaimOptions, Claimable, Finish, HasDoneState,
    HasFailedState,
};
use crate::claim::ClaimDialect;
use crate::clock::DbNow;
use crate::heartbeat::{default_margin, Beat, BeatBudget, HolderState, LostReason, LostSignal};
use crate::keeper::Registration;
use crate::pool::{end_within, AnySource, ConnectionSource};
use crate::{Error, Held, Released, Result};

/// A row claimed through a pool (an r2d2 pool, or any [`ConnectionSource`]), for work that may run longer than the claim timeout.
///
/// While the guard lives, the pool's keeper (one background thread for all the holders of a
/// pool) moves the row's `claimed_at` to the database's now every timeout/3, so the claim is not
/// rescued while its work runs. Finish it with [`complete`](Self::complete), [`fail`](Self::fail)
/// or [`release`](Held::release); a guard dropped unfinished — the work returned early or
/// panicked — hands the row back (first ready state) so another worker can take it at once: the
/// drop does no network I/O, the keeper runs the hand-back right away (see
/// [`flush_releases`](crate::pool::flush_releases)), or the claim times out if it cannot.
///
/// The guard is *lost* — [`is_lost`](Held::is_lost) turns true, [`lost_signal`](Held::lost_signal)
/// fires — when a heartbeat finds the claim rescued or finished by someone else, or when no
/// heartbeat succeeded before the local deadline (the instant the claim or the last successful
/// heartbeat was sent, plus the timeout, minus a tenth of it): a worker cut off from the database
/// knows before any rescuer can take the row. Stop the work then; `complete()` would return
/// `false` anyway.
///
/// Needs `claimed_at` and a timeout (from the derive or [`ClaimOptions::timeout`]); without a
/// timeout nothing can rescue the row, and the guard does not heartbeat.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_lease::prelude::*;
///
/// diesel::table! {
///     reports (id) { id -> BigInt, status -> Text, worker -> Nullable<Text>,
///                    claimed_at -> Nullable<Timestamp>, }
/// }
///
/// #[derive(Debug, Queryable, Selectable, Claimable)]
/// #[diesel(table_name = reports)]
/// #[claimable(state = status, ready = "new", claimed = "running", done = "done",
///             owner = worker, claimed_at = claimed_at, timeout_secs = 30)]
/// struct Report {
///     id: i64,
///     status: String,
///     worker: Option<String>,
///     claimed_at: Option<chrono::NaiveDateTime>,
/// }
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// # diesel::connection::SimpleConnection::batch_execute(&mut pool.get().unwrap(),
/// #     "CREATE TABLE reports (id INTEGER PRIMARY KEY, status TEXT NOT NULL, worker TEXT,
/// #                           claimed_at TIMESTAMP);
/// #      INSERT INTO reports (status) VALUES ('new');").unwrap();
/// while let Some(report) = Report::claim().guard(&pool).unwrap() {
///     // … a long rendering; the guard heartbeats every 10 s meanwhile …
///     if report.is_lost() {
///         continue; // rescued by another worker: drop it, do not complete
///     }
///     assert!(report.complete().unwrap());
/// }
/// # }
/// ```
#[must_use = "an unfinished guard hands its row back when dropped"]
pub struct ClaimGuard<M> {
    /// Shared with the thread that finishes it (see `pool::end_within`).
    row: Arc<M>,
    local: HolderState,
    /// Its place with the pool's keeper while heartbeating (the type names only `Any`: the
    /// registration's connection type is erased with the rest).
    kept: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// Runs an owner-checked transition of `row` within the wait (`None`: the pool's connection
    /// timeout), whatever the database does (see `pool::end_within`); or, for a drop, hands the
    /// row back through the keeper. Built where the connection type is known, so the guard's
    /// type names only the model.
    finisher: Box<Finisher<M>>,
    finished: bool,
    /// How long after a drop the keeper may wait for a connection to hand the row back
    /// ([`ClaimOptions::drop_wait`]).
    drop_wait: Duration,
}

type Finisher<M> = dyn Fn(Arc<M>, Ending) -> Result<bool> + Send + Sync;

/// How a guard ends its claim.
enum Ending {
    /// Now, within the wait (`None`: the pool's connection timeout).
    Now(Finish, Option<Duration>),
    /// A drop: the row goes back through the keeper, which starts it within the wait or not at
    /// all.
    Later(Duration),
}

impl<M> ClaimGuard<M>
where
    M: Claimable + Send + Sync,
{
    /// Claims rows with `claim` on a connection of `pool` and guards each of them (the claims
    /// above, and a [`ClaimCursor`](super::ClaimCursor)'s).
    pub(crate) fn claim_and_guard<C>(
        pool: &impl ConnectionSource<Connection = C>,
        options: &ClaimOptions,
        claim: impl FnOnce(&mut C) -> Result<Vec<M>>,
    ) -> Result<Vec<Self>>
    where
        C: ClaimDialect + ClaimConnection<M>,
    {
        let sent_at = Instant::now();
        let pool = AnySource::new(pool);
        let rows = pool.with_connection(claim)?;
        // Every row gets its guard first: one that fails to start hands its own row back, and
        // on such an error the guards already started drop with the `Vec`, handing theirs back.
        let guards: Vec<Result<Self>> = rows
            .into_iter()
            .map(|row| Self::start(&pool, row, options, sent_at))
            .collect();
        guards.into_iter().collect()
    }

    pub(crate) fn start<C>(
        pool: &AnySource<C>,
        row: M,
        options: &ClaimOptions,
        sent_at: Instant,
    ) -> Result<Self>
    where
        C: ClaimDialect + ClaimConnection<M>,
    {
        let timeout = options
            .timeout_micros::<M>()
            .filter(|_| M::CLAIMED_AT.is_some())
            .map(|us| Duration::from_micros(us.unsigned_abs()));
        // Without a timeout nothing can rescue the row: it stays held until finished.
        let ttl = timeout.unwrap_or(Duration::MAX);
        let lender = pool.clone();
        let mut guard = ClaimGuard {
            local: HolderState::new(sent_at, ttl, default_margin(ttl)),
            kept: None,
            finisher: Box::new(move |row: Arc<M>, ending| match ending {
                Ending::Now(to, wait) => {
                    let wait = wait.unwrap_or_else(|| lender.connection_timeout());
                    let table = crate::observe::table_name::<M::Table>();
                    end_within(&lender, wait, table, move |conn| finish(conn, &*row, to))
                }
                Ending::Later(wait) => {
                    crate::keeper::release_later(&lender, wait, move |conn| {
                        let _ = finish(conn, &*row, Finish::Ready);
                    });
                    Ok(false)
                }
            }),
            row: Arc::new(row),
            finished: false,
            drop_wait: options.drop_wait_limit(),
        };
        if let Some(timeout) = timeout {
            let touch = owner_checked(&*guard.row, Change::Touch(DbNow::new()));
            let beat = touch_beat::<C, M>(touch, timeout);
            // On error, dropping the guard hands the row back: nothing stays claimed.
            let kept: Registration<C, Error> =
                crate::keeper::keep(pool, M::STATE, guard.local.clone(), beat)?;
            guard.kept = Some(Box::new(kept));
        }
        Ok(guard)
    }

    /// The claimed row.
    pub fn row(&self) -> &M {
        &self.row
    }

    /// The claimed row, for a thread that finishes it (`worker::Worker`).
    pub(crate) fn shared_row(&self) -> Arc<M> {
        Arc::clone(&self.row)
    }

    /// Marks the row done if this worker still owns the claim (see
    /// [`FinishDsl::complete`](crate::dsl::FinishDsl::complete)); `false` when it was rescued. Waits at most the pool's
    /// connection timeout in all: [`Error::Timeout`] after that (naming the table), and the
    /// completion goes on in the background.
    pub fn complete(mut self) -> Result<bool>
    where
        M: HasDoneState,
    {
        self.finish(Ending::Now(Finish::Done, None))
    }

    /// Marks the row failed if this worker still owns the claim.
    pub fn fail(mut self) -> Result<bool>
    where
        M: HasFailedState,
    {
        self.finish(Ending::Now(Finish::Failed, None))
    }
}

impl<M: Claimable> Held for ClaimGuard<M> {
    /// Whether this worker must consider the claim lost (see the type's docs).
    fn is_lost(&self) -> bool {
        matches!(
            self.local.lost_reason(),
            Some(LostReason::Expired | LostReason::Gone)
        )
    }

    /// Fires when the claim is lost (or finished).
    fn lost_signal(&self) -> LostSignal {
        self.local.lost_signal()
    }

    /// [`Error::ClaimLost`] once lost.
    fn ensure_held(&self) -> Result<()> {
        if self.is_lost() {
            return Err(Error::ClaimLost {
                table: crate::observe::table_name::<M::Table>().to_owned(),
            });
        }
        Ok(())
    }

    /// Hands the row back (first ready state, owner cleared) if this worker still owns the
    /// claim; [`Released::WasLost`] when it was rescued or finished meanwhile.
    fn release(mut self) -> Result<Released> {
        self.finish(Ending::Now(Finish::Ready, None))
            .map(Released::from_held)
    }
}

impl<M> ClaimGuard<M> {
    /// Stops the heartbeat (without waiting: a beat under way changes nothing once the row is
    /// finished) so that the caller can finish the row with a statement of its own
    /// (`worker::Worker`: a retry); then [`finished_elsewhere`](Self::finished_elsewhere), or
    /// the drop hands the row back.
    pub(crate) fn stop_heartbeat(&mut self) {
        self.kept.take();
    }

    /// The caller finished the row itself: dropping the guard leaves it alone.
    pub(crate) fn finished_elsewhere(&mut self) {
        self.finished = true;
        self.local.mark_lost(LostReason::Released);
    }

    /// Stops the heartbeat, then runs (or, for a drop, queues) the owner-checked transition.
    fn finish(&mut self, ending: Ending) -> Result<bool> {
        self.finished = true;
        self.kept.take();
        // A drop's work may stop at once (the row goes back in the background); an explicit
        // ending is released once its statement has run.
        let later = matches!(ending, Ending::Later(_));
        if later {
            self.local.mark_lost(LostReason::Released);
        }
        let done = (self.finisher)(Arc::clone(&self.row), ending);
        if !later {
            self.local.mark_lost(LostReason::Released);
        }
        done
    }
}

impl<M> Deref for ClaimGuard<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.row
    }
}

/// The keeper's beat: the owner-checked `claimed_at = now`, on the connection the keeper lent;
/// each success extends the claim by `timeout`.
fn touch_beat<C, M>(
    touch: super::FinishStmt<M>,
    timeout: Duration,
) -> impl FnMut(&mut C, BeatBudget) -> Beat<Error> + Send + 'static
where
    C: ClaimConnection<M>,
    M: Claimable,
{
    move |conn, _budget| match conn.finish(&touch) {
        Ok(true) => Beat::Held { ttl: timeout },
        Ok(false) => Beat::Lost,
        Err(e) => Beat::Failed(e),
    }
}

impl<M> Drop for ClaimGuard<M> {
    fn drop(&mut self) {
        if !self.finished {
            // Unfinished (an early return, an error, a panic): the keeper hands the row back at
            // once for another worker; if the database cannot be reached, the claim times out.
            let _ = self.finish(Ending::Later(self.drop_wait));
        }
    }
}

impl<M: fmt::Debug> fmt::Debug for ClaimGuard<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimGuard")
            .field("row", &self.row)
            .field("heartbeat", &self.kept.is_some())
            .field("lost", &self.local.lost_reason())
            .finish()
    }
}
