//! [`LeaseGuard`]: a lease tied to a pool, released on drop, optionally kept alive.

use std::any::{Any, TypeId};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lease_core::FencingToken;

use super::{Lease, LeaseOptions};
use crate::courier::Courier;
use crate::heartbeat::{Beat, BeatBudget, LostReason, LostSignal};
use crate::keeper::Registration;
use crate::lease::statements::LeaseStatements;
use crate::pool::{end_within, AnySource, ConnectionSource};
use crate::{Error, Held, Released, Result};

/// A lease taken through a pool (an r2d2 pool, or any [`ConnectionSource`]). It borrows a connection from the pool only while it talks
/// to the database, and releases the lease when dropped. A drop does no network I/O and never
/// blocks: it hands the release to the pool's keeper, a background thread that runs it at once
/// on a connection of the pool (errors are ignored — call [`release`](Held::release) to see them,
/// or [`flush_releases`](crate::pool::flush_releases) to wait for it), unless no connection
/// comes within [`LeaseOptions::drop_wait`] (by default 2 s): the lease then expires at its ttl. So
/// does a lease whose drop's release is still queued when the process exits.
///
/// With [`LeaseOptions::keep_alive`], the pool's keeper extends the lease by its ttl every
/// ttl/3, in one thread for all the holders of the pool (see
/// [`flush_releases`](crate::pool::flush_releases) for what it does). The guard is *lost* ([`Held`]: [`is_lost`](Held::is_lost) turns true,
/// [`lost_signal`](Held::lost_signal) fires, [`extend`](Self::extend) returns
/// [`Error::LeaseLost`](crate::Error::LeaseLost) and [`release`](Held::release)
/// [`Released::WasLost`]) when an extension finds the lease
/// expired or granted to someone else, *or* when no extension succeeded before the local
/// deadline (see [`Lease::is_lost`]): a holder cut off from the database (pool exhausted, network
/// down, server busy) knows it lost before the database gives the lease to another node.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::SqliteConnection;
/// use diesel_lease::lease::{LeaseGuard, LeaseOptions};
/// use std::time::Duration;
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = dir.path().join("app.db").display().to_string();
/// let pool = diesel_lease::pool::build_pool::<SqliteConnection>(&url, 4).unwrap();
/// diesel_lease::run_migrations(&mut pool.get().unwrap()).unwrap();
///
/// let options = LeaseOptions::new(Duration::from_secs(3)).keep_alive(true);
/// {
///     let guard = LeaseGuard::try_acquire(&pool, "compaction", &options).unwrap().unwrap();
///     println!("compacting with fencing token {}", guard.token());
///     assert!(LeaseGuard::try_acquire(&pool, "compaction", &options).unwrap().is_none());
/// } // dropped: its release is handed to the keeper
/// assert!(diesel_lease::pool::flush_releases(&pool, Duration::from_secs(5)).unwrap());
/// assert!(LeaseGuard::try_acquire(&pool, "compaction", &options).unwrap().is_some());
/// # }
/// ```
#[must_use = "the lease is released as soon as the guard is dropped"]
pub struct LeaseGuard<C: LeaseStatements> {
    pool: AnySource<C>,
    lease: Arc<Mutex<Lease>>,
    /// Taken for the whole of an extension, the keep-alive's and [`extend`](Self::extend)'s:
    /// one extension is under way at a time, so they reach the database in the order they were
    /// sent, and the expiry the database keeps is the one the holder counts from (see
    /// `extend_beat`).
    extending: Arc<Mutex<()>>,
    token: FencingToken,
    name: String,
    signal: LostSignal,
    /// Its place with the pool's keeper while kept alive.
    kept: Option<Registration<C, Error>>,
    finished: bool,
    /// How long after a drop the keeper may wait for a connection to release it
    /// ([`LeaseOptions::drop_wait`]).
    drop_wait: Duration,
}

impl<C: LeaseStatements> fmt::Debug for LeaseGuard<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("keep_alive", &self.kept.is_some())
            .field("lost", &self.is_lost())
            .finish()
    }
}

fn lock(lease: &Mutex<Lease>) -> MutexGuard<'_, Lease> {
    // A panic while holding the mutex leaves a consistent `Lease` (its fields are set whole).
    lease.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: LeaseStatements> LeaseGuard<C> {
    /// Tries once to take the lease `name` (see [`try_acquire`](super::Lease::try_acquire)).
    pub fn try_acquire(
        pool: &impl ConnectionSource<Connection = C>,
        name: &str,
        options: &LeaseOptions,
    ) -> Result<Option<Self>> {
        let source = AnySource::new(pool);
        let lease =
            source.with_connection(|conn| super::Lease::try_acquire(conn, name, options))?;
        lease
            .map(|lease| Self::new(source, lease, options))
            .transpose()
    }

    /// Takes the lease `name`, waiting up to `timeout` (see [`acquire`](super::Lease::acquire)).
    ///
    /// Each attempt borrows a pool connection (waiting at most until the deadline) and gives it
    /// back before the pause that follows, so waiters never keep the connections that holders'
    /// keep-alives need. An attempt that gets no connection in time just counts as refused;
    /// at the deadline this fails with [`Error::Timeout`](crate::Error::Timeout), or, when no
    /// attempt got a connection at all (the server refused them, the pool's were all in use),
    /// with the last attempt's [`Error::Pool`](crate::Error::Pool). A lease that
    /// can never be granted again is [`Error::TokensExhausted`](crate::Error::TokensExhausted)
    /// at the first refusal.
    ///
    /// It returns within `timeout` plus the [drop wait](LeaseOptions::drop_wait) whatever the
    /// network does: each attempt runs on a thread of its own and is waited for until the
    /// deadline, or the drop wait from its start if that is later; an attempt still under way
    /// then goes on in the background, and a grant it gets is released there.
    pub fn acquire(
        pool: &impl ConnectionSource<Connection = C>,
        name: &str,
        options: &LeaseOptions,
        timeout: Duration,
    ) -> Result<Self> {
        let checked = options.check(name)?;
        let started = std::time::Instant::now();
        let deadline = started.checked_add(timeout);
        let mut courier = Courier::new();
        // One erased source for every attempt and the guard: what a checkout tells about the
        // pool (which keeper keeps the guard) is kept in it.
        let source = AnySource::new(pool);
        // Whether an attempt has asked why it was refused (`refuse_if_exhausted`, once).
        let asked = Arc::new(AtomicBool::new(false));
        // Whether an attempt got a connection: a wait whose attempts never did ends with the
        // last one's error, not a timeout.
        let reach = crate::pool::Reach::default();
        let lease = super::retry_until_granted(name, options, timeout, |left| {
            let attempt_bound = std::time::Instant::now()
                .checked_add(options.drop_wait_limit())
                .zip(deadline)
                .map(|(allowed, deadline)| allowed.max(deadline));
            let (lender, named, checked) = (source.clone(), name.to_owned(), checked.clone());
            let (asked, reach) = (Arc::clone(&asked), reach.clone());
            let releaser = source.clone();
            let attempt = courier.call(
                &|| attempt_bound,
                move || {
                    let Some(mut conn) = crate::pool::loan_or_miss(lender.lend(left), &reach)?
                    else {
                        return Ok(None);
                    };
                    let granted = AnySource::with_lent(&mut conn, |conn| {
                        let granted =
                            super::grant(conn, &named, &checked, super::statements::Periodic::No)?;
                        if granted.is_none() && !asked.swap(true, Ordering::Relaxed) {
                            super::refuse_if_exhausted(conn, &named)?;
                        }
                        Ok(granted)
                    })?;
                    Ok(granted.map(|(lease, _)| lease))
                },
                // Granted after the caller gave up: nobody holds it, so it goes back.
                move |granted: Result<Option<Lease>>| {
                    if let Ok(Some(mut lease)) = granted {
                        let _ = releaser.with_connection(|conn| lease.release(conn));
                    }
                },
            );
            attempt.unwrap_or_else(|| Err(Error::waited(name, started.elapsed())))
        })
        .map_err(|e| reach.explain(e))?;
        Self::new(source, lease, options)
    }

    /// Wraps a granted lease. If the keeper thread cannot be started, the lease is released
    /// again and [`Error::Heartbeat`](crate::Error::Heartbeat) returned.
    pub(crate) fn new(pool: AnySource<C>, lease: Lease, options: &LeaseOptions) -> Result<Self> {
        let keep_alive = options.keeps_alive();
        let token = lease.token();
        let name = lease.name().to_string();
        let local = lease.local().clone();
        let lease = Arc::new(Mutex::new(lease));
        let mut guard = LeaseGuard {
            pool,
            lease,
            extending: Arc::default(),
            token,
            name,
            signal: local.lost_signal(),
            kept: None,
            finished: false,
            drop_wait: options.drop_wait_limit(),
        };
        if keep_alive {
            let beat = extend_beat(Arc::clone(&guard.lease), Arc::clone(&guard.extending));
            let member = KeptLease {
                lease: Arc::clone(&guard.lease),
                extending: Arc::clone(&guard.extending),
            };
            let together: crate::keeper::Member<C, Error> =
                (Arc::new(LeasesTogether::<C>(PhantomData)), Arc::new(member));
            // On error, dropping the guard releases the lease: nothing stays held.
            guard.kept = Some(crate::keeper::keep_with(
                &guard.pool,
                &guard.name,
                local,
                beat,
                Some(together),
            )?);
        }
        Ok(guard)
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the lease still holds, asked of the database (its clock decides expiry); see
    /// [`Held::ensure_held`] for what this holder believes without asking.
    pub fn confirm_held(&self) -> Result<bool> {
        self.pool
            .with_connection(|conn| lock(&self.lease).confirm_held(conn))
    }

    /// Moves the expiry to `ttl` from now (see [`Lease::extend`]); later keep-alive extensions
    /// use this ttl too, and come a third of it apart. A keep-alive extension under way is
    /// waited for first, so the two never cross on their way to the database.
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.pool.with_connection(|conn| {
            let _turn = turn(&self.extending);
            lock(&self.lease).extend(conn, ttl)
        })
    }

    /// Stops the keep-alive and releases the lease, within `wait` in all whatever the database
    /// does (see `pool::end_within`).
    fn finish(&mut self, wait: Duration) -> Result<Released> {
        self.kept.take();
        let lease = Arc::clone(&self.lease);
        end_within(&self.pool, wait, &self.name, move |conn| {
            lock(&lease).release(conn)
        })
    }
}

impl<C: LeaseStatements> Held for LeaseGuard<C> {
    /// See [`Lease::is_lost`].
    fn is_lost(&self) -> bool {
        lock(&self.lease).is_lost()
    }

    fn lost_signal(&self) -> LostSignal {
        self.signal.clone()
    }

    /// [`Error::LeaseLost`](crate::Error::LeaseLost) once lost.
    fn ensure_held(&self) -> Result<()> {
        lock(&self.lease).ensure_held()
    }

    /// Stops the keep-alive and releases the lease (see [`Lease::release`]), waiting at most the
    /// pool's connection timeout in all: [`Error::Timeout`](crate::Error::Timeout) after that,
    /// and the release goes on in the background.
    fn release(mut self) -> Result<Released> {
        self.finished = true;
        let wait = self.pool.connection_timeout();
        self.finish(wait)
    }
}

/// The guard's extension turn (`LeaseGuard::extending`); nothing it guards can be left half
/// done by a panic.
fn turn(extending: &Mutex<()>) -> MutexGuard<'_, ()> {
    extending.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The keeper's beat: extend by the current ttl on the connection the keeper lent. It extends a
/// copy of the grant, so the guard's lock is not held while the database answers (or does not):
/// `is_lost` and `ensure_held` never wait for a beat.
///
/// It holds the extension turn from before it reads the ttl until it has recorded the answer.
/// Without it, a beat sent just before a user's [`LeaseGuard::extend`] with a longer ttl could
/// reach the database after it: the database would keep the beat's shorter expiry while the
/// holder, counting from its latest send, believed the longer one, and could go on believing
/// it holds after another node was granted the lease.
fn extend_beat<C: LeaseStatements>(
    lease: Arc<Mutex<Lease>>,
    extending: Arc<Mutex<()>>,
) -> impl FnMut(&mut C, BeatBudget) -> Beat<Error> + Send + 'static {
    move |conn, _budget| {
        let _turn = turn(&extending);
        let mut copy = lock(&lease).copy();
        let ttl = copy.ttl();
        let extended = copy.extend(conn, ttl);
        lock(&lease).absorb(copy);
        match extended {
            Ok(()) => Beat::Held { ttl },
            Err(Error::LeaseLost { .. } | Error::LeaseNotHeld { .. }) => Beat::Lost,
            Err(e) => Beat::Failed(e),
        }
    }
}

/// The most grants one statement extends (`2 ×` as many bind parameters, well under every
/// backend's limit); a larger group takes several statements.
const MAX_TOGETHER: usize = 1_000;

/// A kept-alive guard's grant, as its keeper sees it.
struct KeptLease {
    lease: Arc<Mutex<Lease>>,
    extending: Arc<Mutex<()>>,
}

/// The kept-alive lease guards on connections `C`: the keeper extends the grants of one ttl in
/// one statement (`UPDATE … WHERE (name, token) IN (…)`, see `statements::extend_all`).
///
/// Each member's extension turn is held from before its grant is read until its answer is
/// recorded, as its own beat holds it ([`extend_beat`]); a member whose turn is taken (a user's
/// [`LeaseGuard::extend`] under way) is left to its own beat, which waits for the turn. When
/// the statement extends every grant it names, each member records the extension as its own
/// [`Lease::extend`] would; when it extends fewer (one was lost, released or taken over) or
/// fails, every member runs its own beat, which finds out which and why. A grant the statement
/// extended is then extended again by its own beat: that moves its expiry to the same place.
struct LeasesTogether<C>(PhantomData<fn() -> C>);

impl<C: LeaseStatements> crate::keeper::Together<C, Error> for LeasesTogether<C> {
    fn kind(&self) -> TypeId {
        TypeId::of::<Self>()
    }

    fn group(&self, member: &(dyn Any + Send + Sync)) -> Option<u64> {
        let member = member.downcast_ref::<KeptLease>()?;
        let (_, ttl) = lock(&member.lease).extendable()?;
        u64::try_from(ttl.as_micros()).ok()
    }

    fn beat_together(
        &self,
        conn: &mut C,
        members: &[&(dyn Any + Send + Sync)],
    ) -> Vec<Option<Beat<Error>>> {
        let mut outcomes: Vec<Option<Beat<Error>>> = members.iter().map(|_| None).collect();
        let mut picked = Vec::new();
        let mut ttl_of_group = None;
        for (i, member) in members.iter().enumerate() {
            let Some(member) = member.downcast_ref::<KeptLease>() else {
                continue;
            };
            let Ok(turn) = member.extending.try_lock() else {
                continue; // a user's extension under way: its own beat waits for it
            };
            let Some((grant, ttl)) = lock(&member.lease).extendable() else {
                continue;
            };
            // Grouped by ttl before the turns were taken: one changed since beats alone.
            if *ttl_of_group.get_or_insert(ttl) != ttl {
                continue;
            }
            picked.push((i, member, turn, grant));
        }
        let Some(ttl) = ttl_of_group else {
            return outcomes;
        };
        for chunk in picked.chunks(MAX_TOGETHER).filter(|chunk| chunk.len() > 1) {
            let grants: Vec<(String, i64)> =
                chunk.iter().map(|(.., grant)| grant.clone()).collect();
            let sent_at = Instant::now();
            if !matches!(
                super::statements::extend_all(conn, &grants, ttl.as_micros()),
                Ok(true)
            ) {
                continue; // each finds out on its own what happened to it
            }
            for (i, member, _turn, _) in chunk {
                let mut copy = lock(&member.lease).copy();
                let extended = copy.extended(conn, sent_at, ttl);
                lock(&member.lease).absorb(copy);
                outcomes[*i] = Some(match extended {
                    Ok(()) => Beat::Held {
                        ttl: ttl.as_duration(),
                    },
                    Err(Error::LeaseLost { .. } | Error::LeaseNotHeld { .. }) => Beat::Lost,
                    Err(e) => Beat::Failed(e),
                });
            }
        }
        outcomes
    }
}

impl<C: LeaseStatements> Drop for LeaseGuard<C> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // No network I/O here: the keeper releases it (nothing to report to; a lease it cannot
        // release in time expires at its ttl). The protected work may stop at once.
        self.kept.take();
        lock(&self.lease).local().mark_lost(LostReason::Released);
        let lease = Arc::clone(&self.lease);
        crate::keeper::release_later(&self.pool, self.drop_wait, move |conn| {
            let _ = lock(&lease).release(conn);
        });
    }
}
