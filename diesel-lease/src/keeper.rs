//! The keeper: one background thread per connection source that keeps every holder of this
//! process held, and ends the grants that holders dropped.
//!
//! A holder (a kept-alive [`LeaseGuard`](crate::LeaseGuard), a
//! [`PermitGuard`](crate::semaphore::PermitGuard), a [`ClaimGuard`](crate::claim::ClaimGuard))
//! registers its [`HolderState`] and a *beat* — the statement that extends its grant — with the
//! keeper of its pool ([`keep`]). The keeper wakes when the earliest holder is due, lends **one**
//! connection, and runs on it the beat of every holder that is due or will be within a sixth of
//! its period (so holders that registered at different instants settle into shared ticks) —
//! holders of one kind and group in one statement ([`Together`]: kept-alive leases of one ttl,
//! permits of one owner, ttl and table), the others by their own beats — then
//! records each outcome on its state exactly as a thread of its own would: a success moves the
//! local deadline, [`Beat::Lost`] marks it [`LostReason::Gone`], a failure is retried after a
//! quarter period. It also wakes at every holder's local deadline and marks it
//! [`LostReason::Expired`] then, so the callbacks and waiters of a holder cut off from the
//! database learn it before the database hands the grant on.
//!
//! A dropped holder does no network I/O: [`release_later`] queues the statement that ends its
//! grant, and the keeper runs the queued endings on one connection as soon as it is awake. An
//! ending whose connection did not come within its bound (the holder's drop wait, counted from
//! the drop) is left: the grant expires at its ttl (a claim at its timeout). So do the endings still queued when the
//! process exits: nothing flushes them but [`flush`] (the public
//! [`pool::flush_releases`](crate::pool::flush_releases)), which waits for them within a bound.
//!
//! Which holders share a keeper: those whose pool has an identity (a `deadpool` pool, an r2d2
//! pool with [`WaiterWakeups`](crate::pool::WaiterWakeups), as `build_pool` builds them: learned
//! at a checkout) share the keeper of that pool and its one connection per tick. Holders of a
//! pool without one share the keeper of their connection type, which lends for each of them
//! separately. Either way a process runs one keeper thread per pool (or per connection type),
//! however many holders it has. The thread ends after a second with nothing to do and starts
//! again with the next holder.
//!
//! A beat or an ending that blocks (a silent link) holds up the keeper's other work for as long
//! as it blocks: their local deadlines still pass on time (they are read from the clock, and the
//! waiters wake by themselves), so a holder never believes it holds past its deadline.

use std::any::{Any, TypeId};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::heartbeat::{Beat, BeatBudget, HolderState, LostReason};

/// The shortest pause between two beats of one holder, so a zero period cannot spin.
const MIN_PAUSE: Duration = Duration::from_millis(1);

/// How long a keeper thread with nothing to do waits for more before it ends.
const LINGER: Duration = Duration::from_secs(1);

/// The name of every keeper thread.
const THREAD_NAME: &str = "diesel-lease keeper";

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its data whole (no user code runs under these locks).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a keeper gets a connection for a tick: a pool (`AnySource`), or in the unit tests a
/// stand-in. `run` lends one for at most `wait` and runs `work` on it, on this thread.
pub(crate) trait Lender<C, E>: Send + Sync + 'static {
    fn run(&self, wait: Duration, work: &mut dyn FnMut(&mut C)) -> Result<(), E>;
}

impl<C: crate::backend::Dialect + Send + 'static> Lender<C, crate::Error>
    for crate::pool::AnySource<C>
{
    fn run(&self, wait: Duration, work: &mut dyn FnMut(&mut C)) -> crate::Result<()> {
        use crate::pool::ConnectionSource;
        let mut lent = self.lend(wait)?;
        Self::with_lent(&mut lent, |conn| {
            work(conn);
            Ok(())
        })
    }
}

/// How far apart a holder's beats are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pace {
    /// A fixed period, whatever the ttl (the unit tests' pace).
    #[cfg(test)]
    Every(Duration),
    /// A third of the ttl of the latest success, so two beats in a row may fail before the
    /// local deadline whatever ttl the holder extends to.
    ThirdOfTtl,
}

impl Pace {
    /// The pause between two beats while grants last `ttl`: at least 1 ms.
    fn period(self, ttl: Duration) -> Duration {
        match self {
            #[cfg(test)]
            Pace::Every(period) => period,
            Pace::ThirdOfTtl => ttl / 3,
        }
        .max(MIN_PAUSE)
    }
}

/// A holder's beat: extends its grant on the lent connection, within the budget.
type BeatFn<C, E> = Box<dyn FnMut(&mut C, BeatBudget) -> Beat<E> + Send>;

/// An ending queued by a drop.
type EndFn<C> = Box<dyn FnOnce(&mut C) + Send>;

/// What a holder beats together with (its kind's [`Together`]), and what it brings (its grant).
pub(crate) type Member<C, E> = (Arc<dyn Together<C, E>>, Arc<dyn Any + Send + Sync>);

/// Holders of one kind whose beats one statement can run together (kept-alive leases of one
/// ttl: `UPDATE … WHERE (name, token) IN (…)`). At a tick the keeper groups the due members by
/// kind and [`group`](Self::group), and calls [`beat_together`](Self::beat_together) once for
/// each group of two or more; a member it leaves out, or of a group of one, runs its own beat.
pub(crate) trait Together<C, E>: Send + Sync {
    /// The kind: members of different kinds never share a statement.
    fn kind(&self) -> TypeId;
    /// The member's group at this tick, or `None` to beat alone (a grant no longer held).
    fn group(&self, member: &(dyn Any + Send + Sync)) -> Option<u64>;
    /// Beats `members` (two or more of one group) in one statement: each one's outcome, in
    /// order, or `None` for one that must run its own beat (which then says exactly what
    /// happened to it: lost, failed).
    fn beat_together(
        &self,
        conn: &mut C,
        members: &[&(dyn Any + Send + Sync)],
    ) -> Vec<Option<Beat<E>>>;
}

struct Entry<C, E> {
    name: Arc<str>,
    state: HolderState,
    pace: Pace,
    lender: Arc<dyn Lender<C, E>>,
    /// `None` while the keeper runs it, and for good once it panicked.
    beat: Option<BeatFn<C, E>>,
    /// Whom it may beat together with.
    together: Option<Member<C, E>>,
    /// It panicked: never called again; the keeper only marks the deadline.
    broken: bool,
    /// When its latest beat ended (its registration before the first), and whether it failed.
    beat_ended: Instant,
    failed: bool,
    /// Shared with the registration, which reads it after the holder left too.
    last_error: Arc<Mutex<Option<Arc<E>>>>,
}

impl<C, E> Entry<C, E> {
    /// When its next beat is due: a period after the latest success and after its latest beat,
    /// or a quarter period after a failed beat.
    /// With it, how early it may beat to share a tick with another holder: a sixth of its
    /// period.
    fn next_beat(&self) -> (Instant, Duration) {
        let (last_success, ttl) = self.state.latest_success();
        let period = self.pace.period(ttl);
        let next = if self.failed && last_success < self.beat_ended {
            add_capped(self.beat_ended, (period / 4).max(MIN_PAUSE))
        } else {
            add_capped(self.beat_ended.max(last_success), period)
        };
        (next, period / 6)
    }
}

fn add_capped(start: Instant, span: Duration) -> Instant {
    const MAX_SPAN: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);
    start.checked_add(span.min(MAX_SPAN)).unwrap_or(start)
}

struct Ending<C, E> {
    lender: Arc<dyn Lender<C, E>>,
    /// Not started after this instant: the grant is left to expire.
    until: Option<Instant>,
    end: EndFn<C>,
}

struct Book<C, E> {
    entries: HashMap<u64, Entry<C, E>>,
    next_id: u64,
    endings: VecDeque<Ending<C, E>>,
    /// Endings queued so far, and how many of them are settled (run or left).
    queued: u64,
    settled: u64,
    /// Whether a thread serves this book.
    running: bool,
}

/// One keeper: its book and the thread's wake-up.
pub(crate) struct Keeper<C, E> {
    book: Mutex<Book<C, E>>,
    changed: Condvar,
    /// All work shares one connection per tick (the holders' pool has an identity).
    shared_lend: bool,
}

impl<C: 'static, E: fmt::Debug + Send + Sync + 'static> Keeper<C, E> {
    pub(crate) fn new(shared_lend: bool) -> Arc<Self> {
        Arc::new(Keeper {
            book: Mutex::new(Book {
                entries: HashMap::new(),
                next_id: 0,
                endings: VecDeque::new(),
                queued: 0,
                settled: 0,
                running: false,
            }),
            changed: Condvar::new(),
            shared_lend,
        })
    }

    /// Registers a holder; its first beat is a period after `state`'s grant.
    /// [`Error::Heartbeat`](crate::Error::Heartbeat) if the keeper thread cannot be started.
    pub(crate) fn register(
        self: &Arc<Self>,
        name: &str,
        state: HolderState,
        pace: Pace,
        lender: Arc<dyn Lender<C, E>>,
        beat: impl FnMut(&mut C, BeatBudget) -> Beat<E> + Send + 'static,
        together: Option<Member<C, E>>,
    ) -> std::io::Result<Registration<C, E>> {
        // An extension elsewhere to a shorter ttl brings the next beat forward; a loss marked
        // elsewhere (a release) lets the keeper forget the holder.
        let keeper = Arc::downgrade(self);
        state.on_sooner_deadline(move || {
            if let Some(keeper) = keeper.upgrade() {
                keeper.changed.notify_all();
            }
        });
        let keeper = Arc::downgrade(self);
        state.on_lost(move |_| {
            if let Some(keeper) = keeper.upgrade() {
                keeper.changed.notify_all();
            }
        });
        let last_error = Arc::default();
        // The first beat is due a period after the grant was sent (holders granted together
        // beat together).
        let granted_at = state.latest_success().0;
        let mut book = lock(&self.book);
        let id = book.next_id;
        book.next_id += 1;
        book.entries.insert(
            id,
            Entry {
                name: name.into(),
                state,
                pace,
                lender,
                beat: Some(Box::new(beat)),
                together,
                broken: false,
                beat_ended: granted_at,
                failed: false,
                last_error: Arc::clone(&last_error),
            },
        );
        if let Err(e) = self.ensure_running(&mut book) {
            book.entries.remove(&id);
            return Err(e);
        }
        drop(book);
        self.changed.notify_all();
        Ok(Registration {
            keeper: Arc::clone(self),
            id,
            last_error,
        })
    }

    /// Queues `end` to run on a connection of `lender` as soon as the keeper can, but not after
    /// `wait` from now. When no thread can be started, `end` is left undone (the grant expires).
    pub(crate) fn end_later(
        self: &Arc<Self>,
        lender: Arc<dyn Lender<C, E>>,
        wait: Duration,
        end: impl FnOnce(&mut C) + Send + 'static,
    ) {
        let mut book = lock(&self.book);
        book.queued += 1;
        book.endings.push_back(Ending {
            lender,
            until: Instant::now().checked_add(wait),
            end: Box::new(end),
        });
        if self.ensure_running(&mut book).is_err() {
            book.endings.pop_back();
            book.settled += 1;
        }
        drop(book);
        self.changed.notify_all();
    }

    /// Waits at most `wait` until every ending queued before this call is settled (run, or left
    /// past its bound); whether they all are.
    pub(crate) fn flush(&self, wait: Duration) -> bool {
        let end = add_capped(Instant::now(), wait);
        let mut book = lock(&self.book);
        let target = book.queued;
        loop {
            if book.settled >= target {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            book = self
                .changed
                .wait_timeout(book, end - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// How many holders are registered (the benchmark's and the tests' view).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn holders(&self) -> usize {
        lock(&self.book).entries.len()
    }

    fn ensure_running(self: &Arc<Self>, book: &mut Book<C, E>) -> std::io::Result<()> {
        if book.running {
            return Ok(());
        }
        let keeper = Arc::clone(self);
        thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(move || keeper.serve())?;
        book.running = true;
        Ok(())
    }

    /// The thread's loop.
    fn serve(self: Arc<Self>) {
        // Should the thread end by a panic after all, the next registration starts another.
        struct Stopped<'a, C, E>(&'a Keeper<C, E>);
        impl<C, E> Drop for Stopped<'_, C, E> {
            fn drop(&mut self) {
                lock(&self.0.book).running = false;
                self.0.changed.notify_all();
            }
        }
        let stopped = Stopped(&self);
        let mut idle_since = Instant::now();
        loop {
            let work = {
                let mut book = lock(&self.book);
                match self.collect(&mut book) {
                    Collected::Work(work) => work,
                    Collected::Sleep(until) => {
                        let now = Instant::now();
                        let until = until.unwrap_or_else(|| add_capped(idle_since, LINGER));
                        if book.entries.is_empty() && book.endings.is_empty() && now >= until {
                            book.running = false;
                            drop(book);
                            // Under the lock it was decided; a registration after it starts
                            // a new thread, which this one must not mark stopped.
                            std::mem::forget(stopped);
                            return;
                        }
                        let _ = self
                            .changed
                            .wait_timeout(book, until.saturating_duration_since(now))
                            .unwrap_or_else(PoisonError::into_inner);
                        continue;
                    }
                }
            };
            self.run(work);
            idle_since = Instant::now();
        }
    }

    /// Under the book's lock: what is due now, or until when to sleep (`None`: nothing held).
    fn collect(&self, book: &mut Book<C, E>) -> Collected<C, E> {
        let now = Instant::now();
        let mut expired = Vec::new();
        // Holders marked lost by anybody (a release, a loss found by an explicit call) leave.
        book.entries.retain(|_, entry| {
            if entry.beat.is_none() && !entry.broken {
                return true; // under way: the keeper looks at it when it comes back
            }
            match entry.state.lost_reason() {
                None => true,
                Some(LostReason::Expired) => {
                    expired.push((entry.name.clone(), entry.state.clone()));
                    false
                }
                Some(_) => false,
            }
        });
        let endings: Vec<Ending<C, E>> = book.endings.drain(..).collect();
        let mut due = Vec::new();
        let mut wake: Option<Instant> = None;
        // The earliest due beat decides the tick; holders due soon after it join.
        let schedule: HashMap<u64, (Instant, Duration)> = book
            .entries
            .iter()
            .filter(|(_, entry)| entry.beat.is_some())
            .map(|(&id, entry)| (id, entry.next_beat()))
            .collect();
        let first_due = schedule.values().map(|&(next, _)| next).min();
        for (&id, entry) in &mut book.entries {
            let deadline = entry.state.deadline();
            let Some(&(next, early_by)) = schedule.get(&id) else {
                // Under way, or broken: only its deadline matters.
                if entry.broken {
                    wake = Some(wake.map_or(deadline, |w| w.min(deadline)));
                }
                continue;
            };
            let joins =
                first_due.is_some_and(|first| first <= now) && next <= add_capped(now, early_by);
            if next <= now || joins {
                let beat = entry.beat.take().expect("checked above");
                due.push(Due {
                    id,
                    beat,
                    together: entry.together.clone(),
                    lender: Arc::clone(&entry.lender),
                    budget: BeatBudget::new(deadline),
                });
            } else {
                let at = next.min(deadline);
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
        }
        if due.is_empty() && endings.is_empty() && expired.is_empty() {
            return Collected::Sleep(wake);
        }
        Collected::Work(Work {
            due,
            endings,
            expired,
        })
    }

    /// Runs a tick's work outside the book's lock, then records the outcomes.
    fn run(&self, work: Work<C, E>) {
        let Work {
            mut due,
            endings,
            expired,
        } = work;
        for (name, state) in expired {
            // Callbacks run here, in the keeper's thread; one that panics stops nothing else.
            if calm(|| state.settle_expiry()) == Some(true) {
                crate::observe::heartbeat_lost(&name, &LostReason::Expired);
            }
        }
        let now = Instant::now();
        let mut settled = 0u64;
        // Endings past their bound are left (the grant expires); the others run first, so a
        // dropped holder's grant is free before the beats of the others take their time.
        let endings: Vec<Ending<C, E>> = endings
            .into_iter()
            .filter(|ending| {
                let keep = ending.until.is_none_or(|until| now < until);
                settled += u64::from(!keep);
                keep
            })
            .collect();
        let mut outcomes: Vec<(u64, BeatFn<C, E>, Outcome<E>)> = Vec::with_capacity(due.len());
        if self.shared_lend {
            let lender = due
                .first()
                .map(|d| Arc::clone(&d.lender))
                .or_else(|| endings.first().map(|e| Arc::clone(&e.lender)));
            if let Some(lender) = lender {
                let wait = lend_wait(&due, &endings);
                let mut endings = Some(endings);
                let mut ran = Vec::new();
                let lent = lender.run(wait, &mut |conn| {
                    let lent_at = Instant::now();
                    for ending in endings.take().into_iter().flatten() {
                        settled += 1;
                        run_ending(ending, lent_at, conn);
                    }
                    ran.extend(beat_all_on(conn, due.drain(..)));
                });
                if let Err(e) = lent {
                    // No connection: the endings are left (their grants expire), the beats failed.
                    let e = Arc::new(e);
                    settled += endings.take().map_or(0, |left| left.len() as u64);
                    for d in due.drain(..) {
                        ran.push((d.id, d.beat, Outcome::Failed(Arc::clone(&e))));
                    }
                }
                outcomes.extend(ran);
            }
        } else {
            for ending in endings {
                settled += 1;
                let lender = Arc::clone(&ending.lender);
                let wait = ending
                    .until
                    .map_or(Duration::MAX, |until| until.saturating_duration_since(now));
                let mut ending = Some(ending);
                let _ = lender.run(wait, &mut |conn| {
                    if let Some(ending) = ending.take() {
                        run_ending(ending, Instant::now(), conn);
                    }
                });
            }
            for d in due {
                let lender = Arc::clone(&d.lender);
                let wait = d.budget.remaining();
                let mut d = Some(d);
                let mut ran = None;
                let lent = lender.run(wait, &mut |conn| {
                    if let Some(d) = d.take() {
                        ran = Some(beat_on(conn, d));
                    }
                });
                match (ran, lent, d) {
                    (Some(ran), _, _) => outcomes.push(ran),
                    (None, Err(e), Some(d)) => {
                        outcomes.push((d.id, d.beat, Outcome::Failed(Arc::new(e))));
                    }
                    // A lender that lent and ran nothing: the beat counts as failed next time.
                    (None, _, _) => {}
                }
            }
        }
        let mut book = lock(&self.book);
        book.settled += settled;
        let ended = Instant::now();
        let mut lost = Vec::new();
        let mut held = Vec::new();
        for (id, beat, outcome) in outcomes {
            let Some(entry) = book.entries.get_mut(&id) else {
                continue; // unregistered meanwhile: its beat goes with it
            };
            entry.beat_ended = ended;
            match outcome {
                Outcome::Held { ttl, sent_at } => {
                    entry.beat = Some(beat);
                    entry.failed = false;
                    *lock(&entry.last_error) = None;
                    held.push((entry.state.clone(), sent_at, ttl));
                }
                Outcome::Lost => {
                    *lock(&entry.last_error) = None;
                    lost.push((entry.name.clone(), entry.state.clone()));
                    book.entries.remove(&id);
                }
                Outcome::Failed(error) => {
                    crate::observe::heartbeat_failed(&entry.name, &error);
                    entry.beat = Some(beat);
                    entry.failed = true;
                    *lock(&entry.last_error) = Some(error);
                }
                Outcome::Panicked => {
                    // The panic was reported by the hook; the beat may be broken, so it is not
                    // called again, but the deadline still has to be marked for the waiters.
                    entry.broken = true;
                }
            }
        }
        drop(book);
        self.changed.notify_all();
        // Outside the book's lock: recording may run callbacks (a success that came too late).
        for (state, sent_at, ttl) in held {
            calm(|| state.record_success(sent_at, ttl));
        }
        for (name, state) in lost {
            if calm(|| state.mark_lost(LostReason::Gone)) == Some(()) {
                crate::observe::heartbeat_lost(&name, &LostReason::Gone);
            }
        }
    }
}

/// Runs `f`, which runs holders' callbacks: a panic in one (reported by the hook) must not end
/// the keeper of every other holder. `None` if it panicked.
fn calm<T>(f: impl FnOnce() -> T) -> Option<T> {
    panic::catch_unwind(AssertUnwindSafe(f)).ok()
}

fn lend_wait<C, E>(due: &[Due<C, E>], endings: &[Ending<C, E>]) -> Duration {
    let now = Instant::now();
    due.iter()
        .map(|d| d.budget.remaining())
        .chain(endings.iter().map(|e| {
            e.until
                .map_or(Duration::MAX, |u| u.saturating_duration_since(now))
        }))
        .min()
        .unwrap_or(Duration::ZERO)
}

/// Runs an ending on the connection lent at `lent_at`, unless its bound had passed by then (the
/// connection came late): nothing is started on a connection that came after the bound, and the
/// grant expires. Once the connection came in time, the endings queued on it all run, however
/// long the ones before them take (a healthy database releases every dropped holder).
fn run_ending<C, E>(ending: Ending<C, E>, lent_at: Instant, conn: &mut C) {
    if ending.until.is_some_and(|until| lent_at >= until) {
        return;
    }
    // An ending that panics leaves its grant to expire; the others still run.
    let _ = panic::catch_unwind(AssertUnwindSafe(|| (ending.end)(conn)));
}

/// Runs the beats of `due` on `conn`: each group of two or more members of one kind and group
/// in one statement ([`Together`]), every other holder by its own beat.
fn beat_all_on<C, E>(
    conn: &mut C,
    due: impl IntoIterator<Item = Due<C, E>>,
) -> Vec<(u64, BeatFn<C, E>, Outcome<E>)> {
    let mut alone = Vec::new();
    let mut groups: HashMap<(TypeId, u64), Vec<Due<C, E>>> = HashMap::new();
    for d in due {
        let group = d.together.as_ref().and_then(|(together, member)| {
            let group = calm(|| together.group(&**member)).flatten()?;
            Some((together.kind(), group))
        });
        match group {
            Some(group) => groups.entry(group).or_default().push(d),
            None => alone.push(d),
        }
    }
    let mut ran = Vec::new();
    for (_, members) in groups {
        let Some((together, _)) = members[0].together.clone().filter(|_| members.len() > 1) else {
            alone.extend(members);
            continue;
        };
        let sent_at = Instant::now();
        let outcomes = calm(|| {
            let refs: Vec<&(dyn Any + Send + Sync)> = members
                .iter()
                .filter_map(|d| d.together.as_ref().map(|(_, member)| &**member))
                .collect();
            together.beat_together(conn, &refs)
        })
        .filter(|outcomes| outcomes.len() == members.len());
        let Some(outcomes) = outcomes else {
            // It panicked (reported by the hook) or answered for others: each beats alone.
            alone.extend(members);
            continue;
        };
        for (d, outcome) in members.into_iter().zip(outcomes) {
            let outcome = match outcome {
                None => {
                    alone.push(d);
                    continue;
                }
                Some(Beat::Held { ttl }) => Outcome::Held { ttl, sent_at },
                Some(Beat::Lost) => Outcome::Lost,
                Some(Beat::Failed(e)) => Outcome::Failed(Arc::new(e)),
            };
            ran.push((d.id, d.beat, outcome));
        }
    }
    ran.extend(alone.into_iter().map(|d| beat_on(conn, d)));
    ran
}

fn beat_on<C, E>(conn: &mut C, d: Due<C, E>) -> (u64, BeatFn<C, E>, Outcome<E>) {
    let Due {
        id,
        mut beat,
        budget,
        ..
    } = d;
    let sent_at = Instant::now();
    let outcome = match panic::catch_unwind(AssertUnwindSafe(|| beat(conn, budget))) {
        Ok(Beat::Held { ttl }) => Outcome::Held { ttl, sent_at },
        Ok(Beat::Lost) => Outcome::Lost,
        Ok(Beat::Failed(e)) => Outcome::Failed(Arc::new(e)),
        Err(_) => Outcome::Panicked,
    };
    (id, beat, outcome)
}

enum Outcome<E> {
    Held { ttl: Duration, sent_at: Instant },
    Lost,
    Failed(Arc<E>),
    Panicked,
}

struct Due<C, E> {
    id: u64,
    beat: BeatFn<C, E>,
    together: Option<Member<C, E>>,
    lender: Arc<dyn Lender<C, E>>,
    budget: BeatBudget,
}

struct Work<C, E> {
    due: Vec<Due<C, E>>,
    endings: Vec<Ending<C, E>>,
    expired: Vec<(Arc<str>, HolderState)>,
}

enum Collected<C, E> {
    Work(Work<C, E>),
    Sleep(Option<Instant>),
}

/// A holder's place with its keeper; unregisters when dropped (or [`cancel`](Self::cancel)ed).
/// Unregistering does not wait for a beat under way: every beat matches only a grant still
/// held (a lease not released, a claim still this owner's, a permit's row still there), so one
/// that lands after the grant ended changes nothing.
pub(crate) struct Registration<C, E> {
    keeper: Arc<Keeper<C, E>>,
    id: u64,
    last_error: Arc<Mutex<Option<Arc<E>>>>,
}

impl<C, E> Registration<C, E> {
    /// The error of the holder's latest beat if it failed; `None` once a beat reached the
    /// database.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn last_error(&self) -> Option<Arc<E>> {
        lock(&self.last_error).clone()
    }

    /// Whether the keeper still keeps it (a lost holder leaves by itself).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn is_kept(&self) -> bool {
        lock(&self.keeper.book).entries.contains_key(&self.id)
    }
}

impl<C, E> Drop for Registration<C, E> {
    fn drop(&mut self) {
        lock(&self.keeper.book).entries.remove(&self.id);
        self.keeper.changed.notify_all();
    }
}

impl<C, E> fmt::Debug for Registration<C, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.id)
            .finish()
    }
}

/// The keepers of this process: one per pool identity and connection type, and one per
/// connection type for pools without an identity.
fn keepers() -> &'static Mutex<Keepers> {
    static KEEPERS: OnceLock<Mutex<Keepers>> = OnceLock::new();
    KEEPERS.get_or_init(Mutex::default)
}

/// Each keeper by its connection type and its pool's identity (`None`: pools without one).
type Keepers = HashMap<(TypeId, Option<usize>), Arc<dyn Any + Send + Sync>>;

/// The keeper of `source`'s pool, created the first time.
pub(crate) fn keeper_of<C>(source: &crate::pool::AnySource<C>) -> Arc<Keeper<C, crate::Error>>
where
    C: crate::backend::Dialect + Send + 'static,
{
    use crate::pool::ConnectionSource;
    keeper_for(source.identity())
}

/// The keeper of the pool with this identity (`None`: of the pools without one) for
/// connections of type `C`, created the first time.
fn keeper_for<C>(identity: Option<usize>) -> Arc<Keeper<C, crate::Error>>
where
    C: Send + 'static,
{
    let keeper = Arc::clone(
        lock(keepers())
            .entry((TypeId::of::<C>(), identity))
            .or_insert_with(|| Keeper::<C, crate::Error>::new(identity.is_some()) as _),
    );
    keeper
        .downcast::<Keeper<C, crate::Error>>()
        .unwrap_or_else(|_| unreachable!("keyed by the connection type"))
}

/// Registers a holder of `source` with its pool's keeper (see the module docs).
/// [`Error::Heartbeat`](crate::Error::Heartbeat) if the keeper thread cannot be started.
pub(crate) fn keep<C>(
    source: &crate::pool::AnySource<C>,
    name: &str,
    state: HolderState,
    beat: impl FnMut(&mut C, BeatBudget) -> Beat<crate::Error> + Send + 'static,
) -> crate::Result<Registration<C, crate::Error>>
where
    C: crate::backend::Dialect + Send + 'static,
{
    keep_with(source, name, state, beat, None)
}

/// [`keep`], for a holder that may beat together with others of its kind (see [`Together`]).
pub(crate) fn keep_with<C>(
    source: &crate::pool::AnySource<C>,
    name: &str,
    state: HolderState,
    beat: impl FnMut(&mut C, BeatBudget) -> Beat<crate::Error> + Send + 'static,
    together: Option<Member<C, crate::Error>>,
) -> crate::Result<Registration<C, crate::Error>>
where
    C: crate::backend::Dialect + Send + 'static,
{
    keeper_of(source)
        .register(
            name,
            state,
            Pace::ThirdOfTtl,
            Arc::new(source.clone()),
            beat,
            together,
        )
        .map_err(crate::Error::Heartbeat)
}

/// Queues the ending of a dropped holder's grant with its pool's keeper: no network I/O here,
/// and no wait. It runs within `wait` from now or not at all (the grant then expires by itself).
pub(crate) fn release_later<C>(
    source: &crate::pool::AnySource<C>,
    wait: Duration,
    end: impl FnOnce(&mut C) + Send + 'static,
) where
    C: crate::backend::Dialect + Send + 'static,
{
    keeper_of(source).end_later(Arc::new(source.clone()), wait, end);
}

/// Waits at most `wait` for the endings that dropped holders of `source` queued before this
/// call; whether all of them are settled.
pub(crate) fn flush<C>(source: &crate::pool::AnySource<C>, wait: Duration) -> bool
where
    C: crate::backend::Dialect + Send + 'static,
{
    use crate::pool::ConnectionSource;
    let end = add_capped(Instant::now(), wait);
    let flushed = keeper_of(source).flush(wait);
    // A holder of this pool whose source had not learned the pool's identity yet queued with
    // the keeper of pools without one: wait for that keeper too.
    let anonymous = source.identity().is_none()
        || keeper_for::<C>(None).flush(end.saturating_duration_since(Instant::now()));
    flushed && anonymous
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// Generous slack for a loaded CI machine: bounds that only fail when something is broken.
    const SLACK: Duration = Duration::from_millis(700);
    const MS: Duration = Duration::from_millis(1);

    /// A lender whose "connection" is `()`, lent at once; counts its loans.
    #[derive(Default)]
    struct Free(AtomicUsize);

    impl<E: 'static> Lender<(), E> for Free {
        fn run(&self, _wait: Duration, work: &mut dyn FnMut(&mut ())) -> Result<(), E> {
            self.0.fetch_add(1, Ordering::SeqCst);
            work(&mut ());
            Ok(())
        }
    }

    /// A lender that never lends.
    struct Refusing;

    impl Lender<(), &'static str> for Refusing {
        fn run(&self, _: Duration, _: &mut dyn FnMut(&mut ())) -> Result<(), &'static str> {
            Err("no connection")
        }
    }

    /// A beat counter the test keeps while the closure moves into the keeper.
    fn counter() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        (Arc::clone(&count), count)
    }

    /// A keeper of its own keeping `state` with `beat` every `period`.
    fn start<E: fmt::Debug + Send + Sync + 'static>(
        name: &str,
        state: HolderState,
        period: Duration,
        mut beat: impl FnMut(BeatBudget) -> Beat<E> + Send + 'static,
    ) -> Registration<(), E> {
        Keeper::new(true)
            .register(
                name,
                state,
                Pace::Every(period),
                Arc::new(Free::default()),
                move |_: &mut (), budget| beat(budget),
                None,
            )
            .unwrap()
    }

    /// Waits (boundedly) until the keeper has let the holder go.
    fn left(registration: &Registration<(), impl Sized>) -> bool {
        let end = Instant::now() + 10 * SLACK;
        while registration.is_kept() {
            if Instant::now() >= end {
                return false;
            }
            thread::sleep(MS);
        }
        true
    }

    #[test]
    fn failing_beats_retry_sooner_and_expire_the_state_before_its_ttl() {
        let (ttl, margin, period) = (Duration::from_secs(1), 100 * MS, 200 * MS);
        let granted_at = Instant::now();
        let state = HolderState::new(granted_at, ttl, margin);
        let deadline = granted_at + ttl - margin;

        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let signal = state.lost_signal();
                thread::spawn(move || (signal.wait_timeout(10 * SLACK), Instant::now()))
            })
            .collect();
        let (marked_tx, marked) = mpsc::channel();
        state.on_lost(move |reason| marked_tx.send((reason, Instant::now())).unwrap());

        let (beats, seen) = counter();
        let (budget_ok_tx, budget_ok) = mpsc::channel();
        let beat_state = state.clone();
        let kept = start("test-failing", state.clone(), period, move |budget| {
            beats.fetch_add(1, Ordering::SeqCst);
            let before = Instant::now();
            let remaining = budget.remaining();
            let deadline = beat_state.deadline();
            let within = budget.until() == deadline
                && remaining <= deadline.saturating_duration_since(before);
            budget_ok_tx.send((within, remaining)).unwrap();
            Beat::<&str>::Failed("database down")
        });

        let (reason, marked_at) = marked.recv_timeout(10 * SLACK).unwrap();
        assert_eq!(reason, LostReason::Expired);
        assert!(marked_at >= deadline, "not before the local deadline");
        assert!(marked_at < deadline + SLACK, "woken at the deadline");
        assert!(deadline < granted_at + ttl);
        for waiter in waiters {
            let (lost, woke_at) = waiter.join().unwrap();
            assert!(lost && woke_at >= deadline);
        }
        assert_eq!(kept.last_error().as_deref(), Some(&"database down"));
        assert!(left(&kept), "the keeper let it go by itself");

        // Period pacing would give 4 beats before the deadline, retry pacing about 14.
        let beats = seen.load(Ordering::SeqCst);
        assert!(
            beats >= 6,
            "failures are retried sooner than the period: {beats} beats"
        );
        let budgets: Vec<(bool, Duration)> = budget_ok.try_iter().collect();
        assert_eq!(budgets.len(), beats);
        assert!(
            budgets.iter().all(|(ok, _)| *ok),
            "every budget within the deadline"
        );
        // The first beat (at 200 ms of 900) had real time to spend.
        assert!(budgets[0].1 > 100 * MS, "{:?}", budgets[0].1);
    }

    #[test]
    fn the_keeper_wakes_at_the_deadline_whatever_the_period() {
        let granted_at = Instant::now();
        let state = HolderState::new(granted_at, 300 * MS, 30 * MS);
        let (beats, seen) = counter();
        let kept = start(
            "test-long-period",
            state.clone(),
            Duration::from_secs(60),
            move |_| {
                beats.fetch_add(1, Ordering::SeqCst);
                Beat::<()>::Held { ttl: 300 * MS }
            },
        );
        let (tx, rx) = mpsc::channel();
        state.on_lost(move |reason| tx.send((reason, Instant::now())).unwrap());
        let (reason, marked_at) = rx.recv_timeout(10 * SLACK).unwrap();
        assert_eq!(reason, LostReason::Expired);
        assert!(marked_at >= granted_at + 270 * MS && marked_at < granted_at + 270 * MS + SLACK);
        assert!(left(&kept));
        assert_eq!(
            seen.load(Ordering::SeqCst),
            0,
            "the deadline came before the first beat"
        );
    }

    #[test]
    fn a_success_with_a_shorter_ttl_paces_the_beats_by_it() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        // Beats every 500 ms against a deadline 1.35 s after each success: a beat may come
        // 850 ms late before the state is lost, more than the other tests' slack.
        let ttl = 1500 * MS;
        let (beats, seen) = counter();
        let kept = Keeper::new(true)
            .register(
                "test-shorter",
                state.clone(),
                Pace::ThirdOfTtl,
                Arc::new(Free::default()),
                move |_: &mut (), _| {
                    beats.fetch_add(1, Ordering::SeqCst);
                    Beat::<()>::Held { ttl }
                },
                None,
            )
            .unwrap();
        // Once the keeper sleeps towards the first beat, 20 s away (the pause lets it get
        // there), an extension elsewhere (as `LeaseGuard::extend` makes) leaves 1.35 s.
        thread::sleep(100 * MS);
        state.record_success(Instant::now(), ttl);
        assert!(
            !state.lost_signal().wait_timeout(2 * ttl),
            "held for two of the new ttls"
        );
        drop(kept);
        // Held for 3 s on deadlines 1.35 s after each success: its own beats extended it.
        assert!(seen.load(Ordering::SeqCst) >= 2);
    }

    #[test]
    fn a_lost_beat_marks_gone_and_lets_the_holder_go_without_another_beat() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let (beats, seen) = counter();
        let kept = start("test-lost", state.clone(), MS, move |_| {
            beats.fetch_add(1, Ordering::SeqCst);
            Beat::<()>::Lost
        });
        // Not unregistered: it leaves by itself.
        assert!(state.lost_signal().wait_timeout(10 * SLACK));
        assert!(left(&kept));
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        assert_eq!(state.lost_reason(), Some(LostReason::Gone));
        assert!(kept.last_error().is_none());
    }

    #[test]
    fn held_beats_keep_the_state_held_across_several_ttls() {
        let ttl = 300 * MS;
        let state = HolderState::new(Instant::now(), ttl, 30 * MS);
        let (beats, seen) = counter();
        let (budget_ok_tx, budget_ok) = mpsc::channel();
        let beat_state = state.clone();
        let kept = start("test-held", state.clone(), 30 * MS, move |budget| {
            beats.fetch_add(1, Ordering::SeqCst);
            budget_ok_tx
                .send(budget.until() == beat_state.deadline())
                .unwrap();
            Beat::<()>::Held { ttl }
        });
        let started = Instant::now();
        assert!(
            !state.lost_signal().wait_timeout(3 * ttl),
            "held for three ttls"
        );
        assert!(started.elapsed() >= 3 * ttl);
        drop(kept);
        assert!(!state.is_lost(), "unregistering does not mark it lost");
        assert!(state.remaining() > Duration::ZERO);
        // Three ttls at one beat per 30 ms: far more than one ttl's worth.
        assert!(seen.load(Ordering::SeqCst) > 10);
        assert!(budget_ok.try_iter().all(|ok| ok));
    }

    #[test]
    fn marking_the_state_lost_elsewhere_lets_the_holder_go() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let kept = start(
            "test-released",
            state.clone(),
            Duration::from_secs(60),
            |_| Beat::<()>::Held {
                ttl: Duration::from_secs(60),
            },
        );
        state.mark_lost(LostReason::Released);
        assert!(left(&kept));
    }

    /// A beat that blocks until the test lets it go; `gone` disconnects when the beat is dropped.
    fn blocking_beat() -> (
        Registration<(), ()>,
        Arc<AtomicUsize>,
        mpsc::Sender<()>,
        mpsc::Receiver<()>,
    ) {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let (entered_tx, entered) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let (alive, gone) = mpsc::channel::<()>();
        let (beats, seen) = counter();
        let kept = start("test-blocking", state, MS, move |_| {
            let _alive = &alive;
            beats.fetch_add(1, Ordering::SeqCst);
            entered_tx.send(()).unwrap();
            let _ = released.recv();
            Beat::Held {
                ttl: Duration::from_secs(60),
            }
        });
        entered.recv_timeout(10 * SLACK).unwrap();
        (kept, seen, release, gone)
    }

    #[test]
    fn unregistering_does_not_wait_for_a_blocked_beat() {
        let (kept, seen, release, gone) = blocking_beat();
        let started = Instant::now();
        drop(kept);
        let waited = started.elapsed();
        assert!(waited < SLACK, "{waited:?}");

        release.send(()).unwrap();
        assert_eq!(
            gone.recv_timeout(10 * SLACK),
            Err(mpsc::RecvTimeoutError::Disconnected),
            "the beat is dropped once it returns"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1, "and never called again");
    }

    #[test]
    fn a_name_with_a_nul_byte_is_kept() {
        let state = HolderState::new(Instant::now(), Duration::from_secs(60), MS);
        let kept = start("a\0b", state, Duration::from_secs(60), |_| {
            Beat::<()>::Held {
                ttl: Duration::from_secs(60),
            }
        });
        assert!(kept.is_kept());
    }

    #[test]
    fn a_zero_period_does_not_spin() {
        for fail in [false, true] {
            let started = Instant::now();
            let state = HolderState::new(started, Duration::from_secs(60), MS);
            let (beats, seen) = counter();
            let kept = start("test-zero", state, Duration::ZERO, move |_| {
                beats.fetch_add(1, Ordering::SeqCst);
                if fail {
                    Beat::Failed(())
                } else {
                    Beat::Held {
                        ttl: Duration::from_secs(60),
                    }
                }
            });
            // A measuring window, not synchronisation: at most one beat per millisecond.
            thread::sleep(100 * MS);
            drop(kept);
            let window = started.elapsed().as_millis();
            let beats = seen.load(Ordering::SeqCst);
            assert!(
                beats >= 1 && beats as u128 <= window + 1,
                "{beats} beats in {window} ms"
            );
        }
    }

    #[test]
    fn a_panicking_beat_is_not_called_again_and_the_state_still_expires() {
        let granted_at = Instant::now();
        let state = HolderState::new(granted_at, 200 * MS, 20 * MS);
        let (beats, seen) = counter();
        let kept: Registration<(), ()> = start("test-panic", state.clone(), MS, move |_| {
            beats.fetch_add(1, Ordering::SeqCst);
            panic!("beat failed");
        });
        assert!(state.lost_signal().wait_timeout(10 * SLACK));
        assert!(left(&kept));
        assert_eq!(state.lost_reason(), Some(LostReason::Expired));
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        assert!(format!("{kept:?}").contains("Registration"));
        assert!(format!("{state:?} {:?}", state.lost_signal()).contains("Expired"));
        assert_eq!(
            LostReason::Gone.to_string(),
            "the database said it is no longer ours"
        );
    }

    #[test]
    fn holders_granted_together_beat_together_on_one_thread_and_one_loan() {
        let keeper = Keeper::<(), ()>::new(true);
        let lender = Arc::new(Free::default());
        let granted_at = Instant::now();
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let (beats, seen) = counter();
        let kept: Vec<_> = (0..1000)
            .map(|i| {
                let (beats, threads) = (Arc::clone(&beats), Arc::clone(&threads));
                let state = HolderState::new(granted_at, Duration::from_secs(60), MS);
                keeper
                    .register(
                        &format!("holder-{i}"),
                        state,
                        Pace::Every(20 * MS),
                        Arc::clone(&lender) as _,
                        move |_: &mut (), _| {
                            beats.fetch_add(1, Ordering::SeqCst);
                            lock(&threads).insert(thread::current().id());
                            Beat::Held {
                                ttl: Duration::from_secs(60),
                            }
                        },
                        None,
                    )
                    .unwrap()
            })
            .collect();
        assert_eq!(keeper.holders(), 1000);
        let end = Instant::now() + 10 * SLACK;
        while seen.load(Ordering::SeqCst) < 3000 && Instant::now() < end {
            thread::sleep(MS);
        }
        drop(kept);
        let (beats, loans) = (seen.load(Ordering::SeqCst), lender.0.load(Ordering::SeqCst));
        assert!(beats >= 3000, "{beats} beats");
        assert_eq!(lock(&threads).len(), 1, "one thread for a thousand holders");
        // Due at the same instants, they share each tick's connection.
        assert!(loans * 100 <= beats, "{loans} loans for {beats} beats");
        assert_eq!(keeper.holders(), 0);
    }

    #[test]
    fn a_holder_due_within_a_sixth_of_its_period_joins_the_tick() {
        // A is due 600 ms after its grant; B, granted 50 ms later, would be due at 650 ms but
        // joins A's tick (a sixth of 600 ms is 100 ms): both first beats on one loan. A late
        // keeper only makes B more due, so load cannot fail this; the rule's absence can.
        let keeper = Keeper::<(), ()>::new(true);
        let lender = Arc::new(Free::default());
        let (period, ttl) = (600 * MS, Duration::from_secs(60));
        let t0 = Instant::now();
        let (loans_tx, loans) = mpsc::channel();
        let kept: Vec<_> = [("a", t0), ("b", t0 + 50 * MS)]
            .into_iter()
            .map(|(name, granted_at)| {
                let (lender_seen, loans_tx) = (Arc::clone(&lender), loans_tx.clone());
                keeper
                    .register(
                        name,
                        HolderState::new(granted_at, ttl, MS),
                        Pace::Every(period),
                        Arc::clone(&lender) as _,
                        move |_: &mut (), _| {
                            let _ = loans_tx.send((name, lender_seen.0.load(Ordering::SeqCst)));
                            Beat::Held { ttl }
                        },
                        None,
                    )
                    .unwrap()
            })
            .collect();
        let first = loans
            .recv_timeout(period + 10 * SLACK)
            .expect("a first beat");
        let second = loans.recv_timeout(10 * SLACK).expect("a second beat");
        drop(kept);
        assert_ne!(
            first.0, second.0,
            "{first:?} then {second:?}: each holder once"
        );
        assert_eq!(first.1, second.1, "{first:?}, {second:?}: the same loan");
        assert!(
            t0.elapsed() >= period,
            "nobody beats before the first holder is due"
        );
    }

    /// Members beat together in groups: `member` is (its group, whether the shared statement
    /// answers for it); every call of `beat_together` and every own beat is counted.
    struct Pairs {
        calls: Arc<AtomicUsize>,
        panics: bool,
    }

    impl Together<(), ()> for Pairs {
        fn kind(&self) -> TypeId {
            TypeId::of::<Self>()
        }
        fn group(&self, member: &(dyn Any + Send + Sync)) -> Option<u64> {
            member
                .downcast_ref::<(u64, bool)>()
                .map(|&(group, _)| group)
        }
        fn beat_together(
            &self,
            _: &mut (),
            members: &[&(dyn Any + Send + Sync)],
        ) -> Vec<Option<Beat<()>>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            assert!(!self.panics, "a together beat that panics");
            members
                .iter()
                .map(|member| {
                    let &(_, answered) = member.downcast_ref::<(u64, bool)>().unwrap();
                    answered.then_some(Beat::Held {
                        ttl: Duration::from_secs(60),
                    })
                })
                .collect()
        }
    }

    /// Registers `members` (group, answered) with one keeper, all due at once and not again
    /// for a minute, waits until each has had its beat recorded, and returns how many
    /// `beat_together` calls and own beats that took.
    fn first_tick_of(members: &[(u64, bool)], panics: bool) -> (usize, usize) {
        let keeper = Keeper::<(), ()>::new(true);
        let lender = Arc::new(Free::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let together: Arc<dyn Together<(), ()>> = Arc::new(Pairs {
            calls: Arc::clone(&calls),
            panics,
        });
        let (own, seen) = counter();
        let period = Duration::from_secs(60);
        let granted_at = Instant::now() - period;
        let states: Vec<_> = members
            .iter()
            .map(|_| HolderState::new(granted_at, 2 * period, MS))
            .collect();
        let kept: Vec<_> = members
            .iter()
            .zip(&states)
            .map(|(&member, state)| {
                let own = Arc::clone(&own);
                keeper
                    .register(
                        "member",
                        state.clone(),
                        Pace::Every(period),
                        Arc::clone(&lender) as _,
                        move |_: &mut (), _| {
                            own.fetch_add(1, Ordering::SeqCst);
                            Beat::Held {
                                ttl: Duration::from_secs(60),
                            }
                        },
                        Some((Arc::clone(&together), Arc::new(member) as _)),
                    )
                    .unwrap()
            })
            .collect();
        let end = Instant::now() + 10 * SLACK;
        while states.iter().any(|s| s.latest_success().0 == granted_at) {
            assert!(Instant::now() < end, "a member's beat was never recorded");
            thread::sleep(MS);
        }
        drop(kept);
        assert_eq!(lender.0.load(Ordering::SeqCst), 1, "one tick, one loan");
        (calls.load(Ordering::SeqCst), seen.load(Ordering::SeqCst))
    }

    #[test]
    fn members_of_one_group_beat_together_and_the_rest_on_their_own() {
        // Groups 1 (three members) and 2 (two) share a call each; group 3 has one member, which
        // beats on its own, as does the member the shared statement leaves out.
        let members = [
            (1, true),
            (1, true),
            (1, false),
            (2, true),
            (2, true),
            (3, true),
        ];
        assert_eq!(first_tick_of(&members, false), (2, 2));
        // A together beat that panics leaves each of its members to its own beat.
        assert_eq!(first_tick_of(&[(1, true), (1, true)], true), (1, 2));
    }

    #[test]
    fn endings_run_at_once_and_flush_waits_for_them() {
        let keeper = Keeper::<(), &'static str>::new(true);
        let (ran, seen) = counter();
        for _ in 0..100 {
            let ran = Arc::clone(&ran);
            keeper.end_later(
                Arc::new(Free::default()),
                Duration::from_secs(60),
                move |_| {
                    ran.fetch_add(1, Ordering::SeqCst);
                },
            );
        }
        assert!(keeper.flush(10 * SLACK));
        assert_eq!(seen.load(Ordering::SeqCst), 100);
    }

    #[test]
    fn an_ending_without_a_connection_or_past_its_bound_is_left() {
        let keeper = Keeper::<(), &'static str>::new(true);
        let (ran, seen) = counter();
        let r = Arc::clone(&ran);
        keeper.end_later(Arc::new(Refusing), Duration::from_secs(60), move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        });
        keeper.end_later(Arc::new(Free::default()), Duration::ZERO, move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
        });
        assert!(keeper.flush(10 * SLACK), "both settled");
        assert_eq!(seen.load(Ordering::SeqCst), 0, "neither ran");
    }

    #[test]
    fn the_thread_ends_when_idle_and_starts_again() {
        let keeper = Keeper::<(), &'static str>::new(false);
        keeper.end_later(Arc::new(Free::default()), Duration::from_secs(60), |_| {});
        assert!(keeper.flush(10 * SLACK));
        let end = Instant::now() + LINGER + 10 * SLACK;
        while lock(&keeper.book).running && Instant::now() < end {
            thread::sleep(10 * MS);
        }
        assert!(!lock(&keeper.book).running, "ended after lingering");
        let (ran, seen) = counter();
        keeper.end_later(
            Arc::new(Free::default()),
            Duration::from_secs(60),
            move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
            },
        );
        assert!(keeper.flush(10 * SLACK));
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }
}
