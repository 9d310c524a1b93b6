//! The semaphore protocol: the transactions that queue, admit, wait, heartbeat and release.
//!
//! # Why two holders cannot both enter (the commit-order race of a control table)
//!
//! The classic control-table semaphore takes a number from an identity column and polls "is anybody ahead of me?". Identity
//! values are handed out when the insert runs, not when it commits, so ticket 5 can still be
//! uncommitted (invisible) while ticket 6 commits, sees nobody ahead and enters; then 5 commits,
//! sees nobody *granted* ahead — it only looks at positions — and enters too: two holders of a mutex.
//!
//! Here every transaction that changes a resource's queue (a new request, a poll, a release, a
//! timeout, the removal of stale rows) first locks that resource's row in
//! `diesel_lease_semaphores` (`SELECT … FOR UPDATE` on PostgreSQL and MySQL; on SQLite
//! `BEGIN IMMEDIATE` locks the whole database) and runs under READ COMMITTED, so
//!
//! 1. those transactions run one at a time per resource, and each one reads the queue as the
//!    previous one committed it: inserting a ticket and deciding admission happen under the same
//!    lock, so no decision is ever taken while another request of the resource is half-inserted;
//! 2. a grant is a persisted `granted = true` flag written in the transaction that decided it,
//!    and admission ([`lease_core::admission::admit`]) counts the granted rows wherever they are
//!    in the queue rather than counting positions. Even a row that appeared out of ticket order
//!    (written by something that skipped the lock) only waits until enough granted rows are gone.
//!
//! Heartbeats only push `expires_at` of an existing row and never take the resource lock: they
//! cannot admit anybody. A stale row is only ever removed by a locked transaction, which
//! re-checks `expires_at` against the database clock; the row lock between the heartbeat's
//! `UPDATE` and that `DELETE` makes one of them win cleanly.
//!
//! # Resources that come and go
//!
//! A semaphore marked [`Request::remove_when_idle`] (the `Worker`'s one per key value, whose
//! names are data) deletes its resource's row in the locked transaction of a release (or a
//! give-up) that leaves the queue empty, so the table does not keep a row per key value ever
//! seen. That is safe under the same lock: every request row is inserted by a transaction that
//! holds the resource's row, so a queue read empty under that lock stays empty until the delete
//! commits, and no request row outlives its resource's row. A transaction waiting for the lock
//! meanwhile finds the row gone once the delete commits (PostgreSQL and MySQL re-read the locked
//! row at READ COMMITTED; on SQLite it starts after the commit) and does what any first user
//! does: creates the row in a statement of its own and locks it again ([`locked`]).
//!
//! # Waiting without holding a connection
//!
//! A wait is a series of short steps — queue, poll, give up — each a transaction of its own, so
//! nothing in the protocol needs one connection across steps. [`acquire`] takes them through an
//! [`Access`]: the caller's own connection for every step, or a pool connection borrowed for
//! each step and given back before the pause that follows. A step that gets no connection in
//! time is a missed poll: the waiter's row keeps its place as long as a later poll comes
//! within the ttl (polls are at most a third of the ttl apart, and a checkout waits at most as
//! long), and a row that expired meanwhile is queued again at the back, as after any stall.
//! At the deadline the waiter gives up in one locked transaction that keeps a grant that has
//! just arrived; without a connection for it, the row expires after its ttl.

use std::time::{Duration, Instant};

use diesel::result::Error as DieselError;
use lease_core::admission::{self, QueueEntry};
use lease_core::Backoff;

use super::access::Access;
use super::gate::{Member, Turn};
use super::request::Request;
use super::statements::{NewTicket, SemaphoreStatements, TicketRow};
use crate::{Error, Result};

/// How many times the resource's row is created when it is missing.
const RETRIES: u32 = 8;
/// The first poll after queueing comes this soon; later polls back off up to the poll cap.
const FIRST_POLL: Duration = Duration::from_millis(5);
/// How often the waiter at the head of a queue reads its own row between polls, where releases
/// in other processes do not wake it (SQLite, MySQL): the releaser granted it already, in its
/// own transaction, so noticing takes a read, not the resource's lock. Only the head does this;
/// a waiter behind it polls when the queue's pace says it should be the head ([`Pace`]), never
/// more often than this, and once per interval while the queue stands still.
const HEAD_CHECK: Duration = Duration::from_millis(20);

/// A head of the queue that has waited `waited` as the head reads its own row every
/// `waited / HEAD_CHECK_SHARE` (at least [`HEAD_CHECK`], at most its poll interval): a hand-off
/// after a short hold is noticed in ~20 ms, one after a long hold costs at most about 3 % of the
/// wait, and a head that waits for minutes reads once per interval, not 50 times a second.
const HEAD_CHECK_SHARE: u32 = 32;

/// How long the head of the queue sleeps between reads of its own row, once it has been the
/// head for `waited`, with `cap` its poll interval: [`HEAD_CHECK`] at first, then a
/// [`HEAD_CHECK_SHARE`]th of the wait, never more than `cap` (nor less than `HEAD_CHECK`).
fn head_check(waited: Duration, cap: Duration) -> Duration {
    (waited / HEAD_CHECK_SHARE).min(cap).max(HEAD_CHECK)
}

/// The most requests of other waiters one statement pushes the expiry of (its bind parameters).
const TOUCHED_AT_ONCE: usize = 500;

/// What a poll found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PollState {
    Granted,
    /// Still waiting; `head`: no request ahead of it is waiting (it is admitted next);
    /// `ahead`: how many waiting requests are ahead of it.
    Waiting {
        head: bool,
        ahead: usize,
    },
    /// The request is gone: it expired while its owner did not poll.
    Lost,
}

/// Runs `body` with the resource's row locked, creating the row first if needed. `body` gets
/// the resource's stored permit count. Deadlocks and serialization failures are retried. The
/// wait for the lock ends after `max_wait` (`None`: the server's bound) with [`Error::Timeout`]:
/// a client that froze inside its locked transaction holds up nobody past their deadline.
fn locked(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
    max_wait: Option<Duration>,
    body: &mut dyn FnMut(&mut dyn SemaphoreStatements, i32) -> Result<()>,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut missing = false;
        crate::backend::retry_conflicts(|| {
            sql.serialized(max_wait, &mut |s| match s.lock_resource(&req.resource)? {
                Some(permits) => {
                    missing = false;
                    body(s, permits)
                }
                None => {
                    missing = true;
                    Ok(())
                }
            })
        })?;
        if !missing {
            return Ok(());
        }
        if attempt > RETRIES {
            return Err(Error::Database(DieselError::NotFound));
        }
        // Created in its own statement, outside the locking transaction: on MySQL an
        // `INSERT IGNORE` followed by `FOR UPDATE` of the same row can deadlock with a twin.
        // Twins recreating a row that a release just deleted can still deadlock on MySQL (both
        // wait for the delete's commit, then both insert): the statement is rolled back whole
        // and the insert does nothing twice, so it is retried.
        crate::backend::retry_conflicts(|| {
            Ok(waiting_write(sql, |s| {
                s.create_resource(&req.resource, req.permits)
            })?)
        })?;
    }
}

/// The permit count a transaction that did not queue a request admits by: the stored count, but
/// never more than `req`'s own. While a request is queued the stored count only changes if
/// something outside this queue rewrote it: a built-in semaphore and a control table whose lock
/// rows share a name (`Semaphore::new("jobs#etl", 5)` beside `Jobs::semaphore("etl", 1)`) keep
/// separate queues on one row, and each sets the count when its own queue is empty. Taking the
/// smaller count keeps such a clash from admitting more holders than this queue's declaration.
fn admitting(stored: i32, req: &Request) -> i32 {
    stored.min(req.permits)
}

/// Deletes the resource's row when `req` asks for it and its queue is now empty (see "Resources
/// that come and go"). Runs in the locked transaction that emptied the queue.
fn remove_if_idle(s: &mut dyn SemaphoreStatements, req: &Request, left: usize) -> Result<()> {
    if req.remove_when_idle && left == 0 {
        s.delete_resource(&req.resource)?;
    }
    Ok(())
}

/// Grants whoever the admission rule lets in and wakes waiters when someone else entered.
/// Returns the granted tickets.
fn admit_and_grant(
    s: &mut dyn SemaphoreStatements,
    req: &Request,
    queue: &[QueueEntry],
    permits: i32,
    me: Option<i64>,
) -> Result<Vec<i64>> {
    let admitted = admission::admit(queue, u32::try_from(permits).unwrap_or(0));
    if admitted.is_empty() {
        return Ok(admitted);
    }
    s.certify(&req.resource, permits)?;
    s.grant(&admitted)?;
    if admitted.iter().any(|&t| Some(t) != me) {
        s.notify(&req.resource)?;
        // Before commit: a woken waiter's first statement touches its own row, which this
        // transaction holds until it commits, so it sees the grant.
        crate::notify::local::wake(&req.resource);
    }
    Ok(admitted)
}

/// Whether `ticket` is at the head of the queue: among those the admission rule would let in
/// next if every current holder left (the first waiter of a mutex; the readers at the front of
/// a reader/writer lock's queue), once `admitted` are granted.
fn at_head(queue: &[QueueEntry], admitted: &[i64], ticket: i64, permits: i32) -> bool {
    let waiting: Vec<QueueEntry> = queue
        .iter()
        .filter(|e| !e.granted && !admitted.contains(&e.ticket))
        .cloned()
        .collect();
    admission::admit(&waiting, u32::try_from(permits).unwrap_or(0)).contains(&ticket)
}

/// How many requests ahead of `ticket` are waiting, once `admitted` are granted.
fn waiting_ahead(queue: &[QueueEntry], admitted: &[i64], ticket: i64) -> usize {
    queue
        .iter()
        .filter(|e| e.ticket < ticket && !e.granted && !admitted.contains(&e.ticket))
        .count()
}

fn entries(queue: &[TicketRow]) -> Vec<QueueEntry> {
    queue.iter().map(TicketRow::entry).collect()
}

/// Queues a new request and admits whoever may enter. With `keep_waiting = false` a request
/// that cannot enter at once is deleted in the same transaction (nothing stays behind).
/// Returns the ticket and what the request's state is.
fn enqueue(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
    keep_waiting: bool,
    max_wait: Option<Duration>,
) -> Result<(i64, PollState)> {
    let mut out = (0, PollState::Lost);
    locked(sql, req, max_wait, &mut |s, stored| {
        s.remove_expired(&req.resource)?;
        let queue = s.queue(&req.resource)?;
        let permits = if stored == req.permits {
            stored
        } else if queue.is_empty() {
            // Idle: the new declaration wins.
            s.set_permits(&req.resource, req.permits)?;
            req.permits
        } else {
            return Err(Error::PermitsMismatch {
                name: req.resource.clone(),
                existing: stored,
                requested: req.permits,
            });
        };
        let ticket = s.insert_ticket(&NewTicket {
            resource: &req.resource,
            owner: &req.owner,
            mode: req.mode,
            ttl: req.ttl,
        })?;
        let mut entries = entries(&queue);
        entries.push(QueueEntry {
            ticket,
            mode: req.mode,
            granted: false,
        });
        entries.sort_by_key(|e| e.ticket);
        let admitted = admit_and_grant(s, req, &entries, permits, Some(ticket))?;
        let state = if admitted.contains(&ticket) {
            PollState::Granted
        } else {
            PollState::Waiting {
                head: at_head(&entries, &admitted, ticket, permits),
                ahead: waiting_ahead(&entries, &admitted, ticket),
            }
        };
        if state != PollState::Granted && !keep_waiting {
            s.delete_ticket(ticket, &req.owner)?;
        }
        out = (ticket, state);
        Ok(())
    })?;
    Ok(out)
}

/// A waiter's poll: refreshes its expiry, admits whoever may enter, reports its own state.
fn poll(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
    ticket: i64,
    max_wait: Option<Duration>,
) -> Result<PollState> {
    let mut state = PollState::Lost;
    locked(sql, req, max_wait, &mut |s, stored| {
        let permits = admitting(stored, req);
        s.remove_expired(&req.resource)?;
        let queue = s.queue(&req.resource)?;
        state = match queue.iter().find(|r| r.ticket == ticket) {
            None => PollState::Lost,
            Some(row) => {
                s.touch(ticket, &req.owner, req.ttl)?;
                if row.granted {
                    PollState::Granted
                } else {
                    let queue = entries(&queue);
                    let admitted = admit_and_grant(s, req, &queue, permits, Some(ticket))?;
                    if admitted.contains(&ticket) {
                        PollState::Granted
                    } else {
                        PollState::Waiting {
                            head: at_head(&queue, &admitted, ticket, permits),
                            ahead: waiting_ahead(&queue, &admitted, ticket),
                        }
                    }
                }
            }
        };
        Ok(())
    })?;
    Ok(state)
}

/// A waiter gives up: if it was granted meanwhile it keeps the grant (returns `true`); otherwise
/// its row is deleted and whoever it held up is admitted.
fn give_up(sql: &mut dyn SemaphoreStatements, req: &Request, ticket: i64) -> Result<bool> {
    let mut granted = false;
    locked(sql, req, Some(req.drop_wait), &mut |s, stored| {
        let permits = admitting(stored, req);
        s.remove_expired(&req.resource)?;
        let queue = s.queue(&req.resource)?;
        granted = queue.iter().any(|r| r.ticket == ticket && r.granted);
        if granted {
            s.touch(ticket, &req.owner, req.ttl)?;
            return Ok(());
        }
        s.delete_ticket(ticket, &req.owner)?;
        let rest: Vec<QueueEntry> = entries(&queue)
            .into_iter()
            .filter(|e| e.ticket != ticket)
            .collect();
        admit_and_grant(s, req, &rest, permits, None)?;
        remove_if_idle(s, req, rest.len())
    })?;
    Ok(granted)
}

/// Releases a request (granted or not) and admits the next in line. Returns whether the row
/// still existed.
pub(super) fn release(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
    ticket: i64,
) -> Result<bool> {
    let mut existed = false;
    locked(sql, req, Some(req.drop_wait), &mut |s, stored| {
        let permits = admitting(stored, req);
        existed = s.delete_ticket(ticket, &req.owner)? > 0;
        s.remove_expired(&req.resource)?;
        let queue = s.queue(&req.resource)?;
        admit_and_grant(s, req, &entries(&queue), permits, None)?;
        remove_if_idle(s, req, queue.len())
    })?;
    Ok(existed)
}

/// A holder's heartbeat: pushes its expiry. `false` when its row is gone (expired and removed,
/// or released). Takes no lock: it cannot change who holds the resource.
pub(super) fn heartbeat(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
    ticket: i64,
) -> Result<bool> {
    Ok(touch(sql, ticket, req)? > 0)
}

/// [`heartbeat`] of several requests of `req`'s owner, ttl and table (the permits of one process
/// that its pool's keeper renews together), in one statement per [`TOUCHED_AT_ONCE`]: whether
/// every one of them was found (else some were given up or removed, and each heartbeat on its
/// own says which).
pub(super) fn heartbeat_many(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
    tickets: &[i64],
) -> Result<bool> {
    let mut found = 0;
    for chunk in tickets.chunks(TOUCHED_AT_ONCE) {
        found += crate::backend::retry_conflicts(|| {
            Ok(sql.within_wait(None, &mut |s| {
                waiting_write(s, |s| s.touch_many(chunk, &req.owner, req.ttl))
            })?)
        })?;
    }
    Ok(found == tickets.len())
}

/// The resource's queue, for inspection.
pub(super) fn queue(sql: &mut dyn SemaphoreStatements, resource: &str) -> Result<Vec<TicketRow>> {
    Ok(sql.queue(resource)?)
}

/// A granted request: its ticket, and the local instant the transaction that last pushed its
/// expiry was sent (the start of its holder's local deadline).
#[derive(Debug, Clone, Copy)]
pub(super) struct Granted {
    pub(super) ticket: i64,
    pub(super) sent_at: Instant,
}

/// One attempt: granted at once or nothing left behind.
pub(super) fn try_once(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
) -> Result<Option<Granted>> {
    let sent_at = Instant::now();
    let (ticket, state) = enqueue(sql, req, false, Some(req.drop_wait))?;
    Ok((state == PollState::Granted).then_some(Granted { ticket, sent_at }))
}

/// Queues and waits until granted or `timeout` passes, reaching the database through `access`
/// (a connection held throughout, or one borrowed per step). On every way out without a grant
/// the request's row is deleted (on a database error, or when no connection can be had for it,
/// as far as the database still answers; else it expires after the ttl).
pub(super) fn acquire<A: Access>(
    access: &mut A,
    req: &Request,
    timeout: Duration,
    max_poll: Duration,
) -> Result<Granted> {
    let started = Instant::now();
    if timeout.is_zero() {
        let (once, leaving) = (req.clone(), req.clone());
        return access
            .step_or_undo(
                Duration::ZERO,
                move |sql| try_once(sql, &once),
                // Granted after the caller had its answer: nobody holds it, so it goes back.
                move |granted, sql| match granted {
                    Some(granted) => release(sql, &leaving, granted.ticket).map(drop),
                    None => Ok(()),
                },
            )?
            .flatten()
            .ok_or_else(|| {
                // No connection for the one try: its error says why, a timeout would not.
                access
                    .unreached()
                    .unwrap_or_else(|| Error::waited(&req.resource, started.elapsed()))
            });
    }
    access.listen(&req.resource)?;
    let mut pending = None;
    let outcome = wait(access, req, started, timeout, max_poll, &mut pending);
    if outcome.is_err() {
        if let Some(ticket) = pending {
            // Best effort: the error we return is the one that matters.
            let req = req.clone();
            let _ = access.step(req.drop_wait, move |sql| release(sql, &req, ticket));
        }
    }
    // The deadline passed without a step that got a connection: the last one's error says
    // why, a timeout would not.
    let unreached = match &outcome {
        Err(Error::Timeout { source: None, .. }) => access.unreached(),
        _ => None,
    };
    access.unlisten();
    outcome.map_err(|e| match e {
        Error::Timeout { source: None, .. } if unreached.is_some() => unreached.unwrap_or(e),
        // The resource's lock was not ours by the deadline: the caller's own wait ran out.
        Error::Timeout { source, .. } => Error::Timeout {
            name: req.resource.clone(),
            waited: Some(started.elapsed()),
            source,
        },
        e => e,
    })
}

fn wait<A: Access>(
    access: &mut A,
    req: &Request,
    started: Instant,
    timeout: Duration,
    max_poll: Duration,
    pending: &mut Option<i64>,
) -> Result<Granted> {
    let deadline = started.checked_add(timeout);
    // A waiter's poll is also its heartbeat: poll well within the ttl.
    let cap = max_poll
        .min(req.ttl.as_duration() / 3)
        .max(Duration::from_millis(1));
    // A checkout waits until the deadline, but never longer than a poll interval: a waiter that
    // cannot get a connection misses a poll, then tries again after its next pause, so its row
    // goes at most two intervals (< ttl) without a refresh once the pool frees up.
    let checkout = |now: Instant| {
        deadline.map_or(cap, |deadline| {
            deadline.saturating_duration_since(now).min(cap)
        })
    };
    // Waits for the resource's lock end at the deadline too.
    let lock_wait = || deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
    let mut place = Place::default();
    if let Some(granted) = look_step(
        access,
        req,
        pending,
        false,
        lock_wait(),
        &mut place,
        checkout(started),
        Vec::new(),
    )? {
        return Ok(granted);
    }
    // Where releases elsewhere do not wake this waiter (SQLite, MySQL), it learns that it became
    // the head of the queue at a poll: when the queue moves, the next poll comes when the
    // requests ahead are expected to be gone, not a whole interval later.
    let mut pace = Pace::default();
    pace.observe(Instant::now(), place.ahead.take());
    // Jittered while ramping up; clamped to the cap once grown past it, so an idle waiter
    // settles at exactly one poll per cap.
    let mut backoff = Backoff::new(FIRST_POLL, cap.saturating_mul(2));
    // This process's other waiters for the resource through the same pool share the polls: only
    // the member with the lowest ticket polls (`gate.rs`).
    let mut member: Option<Member> = None;
    // Since when this waiter has been the head of the queue (by its looks), for [`head_check`].
    let mut head_since: Option<Instant> = None;
    loop {
        if let Some(ticket) = *pending {
            match &mut member {
                Some(member) => member.set_ticket(ticket),
                None => {
                    member = access
                        .pool()
                        .map(|pool| Member::join(pool, req, cap, ticket))
                }
            }
        }
        if let Some(member) = member.as_ref().filter(|m| !m.is_poller()) {
            // Its turn: the member before it was granted or left, and it looks at once, as a
            // woken waiter does; or the poller's looks stopped coming back, and it polls once
            // in its place (a full poll: removing expired requests, the stuck poller's among
            // them, and admitting, is what the poller's polls would have done).
            let (others, woken) = match member.wait_turn(deadline) {
                Turn::Over => return give_up_at_deadline(access, req, started, pending),
                Turn::Poller => (member.others(), true),
                Turn::Extra => (member.others_but_the_poller(), false),
            };
            let looked = look_step(
                access,
                req,
                pending,
                woken,
                lock_wait(),
                &mut place,
                checkout(Instant::now()),
                others,
            );
            member.looked();
            if let Some(granted) = looked? {
                return Ok(granted);
            }
            backoff = Backoff::new(FIRST_POLL, cap.saturating_mul(2));
            continue;
        }
        let now = Instant::now();
        let mut delay = backoff.next_delay().min(cap);
        if let Some(deadline) = deadline {
            if now >= deadline {
                return give_up_at_deadline(access, req, started, pending);
            }
            delay = delay.min(deadline - now);
        }
        if !place.head && !access.notified_across_processes() {
            if let Some(eta) = pace.until_head(now) {
                delay = delay.min(eta.max(HEAD_CHECK));
            }
        }
        let watch = pending
            .filter(|_| place.head && !access.notified_across_processes())
            .map(|ticket| {
                let since = *head_since.get_or_insert(now);
                (ticket, head_check(now.duration_since(since), cap))
            });
        if watch.is_none() {
            head_since = None;
        }
        let woken = match pause(access, req, watch, delay, &checkout, &lock_wait)? {
            Pause::Granted(granted) => return Ok(granted),
            Pause::Slept { woken } => woken,
        };
        let checkout = checkout(Instant::now());
        let others = member.as_ref().map(Member::others).unwrap_or_default();
        let looked = look_step(
            access,
            req,
            pending,
            woken,
            lock_wait(),
            &mut place,
            checkout,
            others,
        );
        if let Some(member) = &member {
            member.looked();
        }
        if let Some(granted) = looked? {
            return Ok(granted);
        }
        pace.observe(Instant::now(), place.ahead.take());
    }
}

/// [`look`] as one step of `access` (waiting at most `checkout` for a connection); `None` also
/// when the step got no connection in time. `pending` and `place` are updated as `look` leaves
/// them, also when it fails. First it pushes the expiry of `others`, the requests of the
/// waiters it polls for (`gate.rs`), in one statement.
#[allow(clippy::too_many_arguments)]
fn look_step<A: Access>(
    access: &mut A,
    req: &Request,
    pending: &mut Option<i64>,
    woken: bool,
    lock_wait: Option<Duration>,
    place: &mut Place,
    checkout: Duration,
    others: Vec<i64>,
) -> Result<Option<Granted>> {
    let (req, mut queued, mut seen) = (req.clone(), *pending, *place);
    let leaving = req.clone();
    let looked = access.step_or_undo(
        checkout,
        move |sql| {
            for chunk in others.chunks(TOUCHED_AT_ONCE) {
                crate::backend::retry_conflicts(|| {
                    Ok(waiting_write(sql, |s| {
                        s.touch_many(chunk, &req.owner, req.ttl)
                    })?)
                })?;
            }
            let granted = look(sql, &req, &mut queued, woken, lock_wait, &mut seen);
            Ok((granted, queued, seen))
        },
        // The look ended after the wait gave up on it (the waiter is gone, or about to
        // return): the request it queued or found, granted or not, goes back out, instead of
        // holding its place (or the permit) until its ttl.
        move |(_, queued, _), sql| match queued {
            Some(ticket) => release(sql, &leaving, ticket).map(drop),
            None => Ok(()),
        },
    )?;
    let Some((granted, queued, seen)) = looked else {
        return Ok(None);
    };
    (*pending, *place) = (queued, seen);
    granted
}

/// What the last look told a waiter about its place in the queue.
#[derive(Debug, Default, Clone, Copy)]
struct Place {
    /// Whether it is at the head (admitted next); kept as it was when a look could not tell.
    head: bool,
    /// How many waiting requests were ahead of it, when the look was a full poll.
    ahead: Option<usize>,
}

/// How far back [`Pace`] looks at the queue's movement.
const PACE_WINDOW: Duration = Duration::from_secs(3);

/// How fast the requests ahead of a waiter leave, from its recent polls: when it will be the
/// head. An idle queue (nothing moved) predicts nothing, and the waiter keeps to its interval.
#[derive(Debug, Default)]
struct Pace {
    /// (when, waiting requests ahead), oldest first, within [`PACE_WINDOW`].
    seen: std::collections::VecDeque<(Instant, usize)>,
}

impl Pace {
    fn observe(&mut self, at: Instant, ahead: Option<usize>) {
        let Some(ahead) = ahead else { return };
        if self.seen.back().is_some_and(|&(_, last)| ahead > last) {
            // Queued again at the back (its row expired): start over.
            self.seen.clear();
        }
        self.seen.push_back((at, ahead));
        while self.seen.len() > 2
            && self
                .seen
                .front()
                .is_some_and(|&(t, _)| at.duration_since(t) > PACE_WINDOW)
        {
            self.seen.pop_front();
        }
    }

    /// How long from `now` until nobody is waiting ahead, at the pace seen; `None` when the
    /// queue did not move.
    fn until_head(&self, now: Instant) -> Option<Duration> {
        let (&(t0, a0), &(t1, a1)) = (self.seen.front()?, self.seen.back()?);
        let elapsed = t1.duration_since(t0).as_secs_f64();
        if a1 >= a0 || elapsed <= 0.0 {
            return None;
        }
        let per_request = elapsed / (a0 - a1) as f64;
        let due = t1 + Duration::from_secs_f64(per_request * a1 as f64);
        Some(due.saturating_duration_since(now))
    }
}

/// How a pause between polls ended.
enum Pause {
    /// Granted, seen on the waiter's own row.
    Granted(Granted),
    /// The pause is over; `woken` when a wake-up cut it short.
    Slept { woken: bool },
}

/// Pushes the expiry of `ticket` (one autocommit update of the caller's own row), tried again
/// after a deadlock: on a multi-primary cluster (Galera) it conflicts at commit with a locked
/// transaction on another node that wrote the same row (a grant, a removal), and is rolled back
/// whole.
fn touch(sql: &mut dyn SemaphoreStatements, ticket: i64, req: &Request) -> Result<usize> {
    touch_within(sql, ticket, req, None)
}

/// [`touch`] waiting at most `max_wait` for a busy database
/// ([`SemaphoreStatements::within_wait`]): a waiter's, bounded by its deadline.
fn touch_within(
    sql: &mut dyn SemaphoreStatements,
    ticket: i64,
    req: &Request,
    max_wait: Option<Duration>,
) -> Result<usize> {
    crate::backend::retry_conflicts(|| {
        Ok(sql.within_wait(max_wait, &mut |s| {
            waiting_write(s, |s| s.touch(ticket, &req.owner, req.ttl))
        })?)
    })
}

/// One autocommit write, run once more when it found the database busy on a connection that
/// only now waits for it ([`SemaphoreStatements::wait_when_busy`]), as the library's other
/// writes are.
fn waiting_write<T>(
    sql: &mut dyn SemaphoreStatements,
    mut write: impl FnMut(&mut dyn SemaphoreStatements) -> diesel::QueryResult<T>,
) -> diesel::QueryResult<T> {
    match write(sql) {
        Err(e) if sql.wait_when_busy(&e) => write(sql),
        other => other,
    }
}

/// [`touch_within`] of a granted row only (see [`SemaphoreStatements::touch_granted`]).
fn touch_granted(
    sql: &mut dyn SemaphoreStatements,
    ticket: i64,
    req: &Request,
    max_wait: Option<Duration>,
) -> Result<usize> {
    touch_granted_as(sql, ticket, &req.owner, req.ttl, max_wait)
}

/// [`touch_granted`] for a step that owns what it needs of the request.
fn touch_granted_as(
    sql: &mut dyn SemaphoreStatements,
    ticket: i64,
    owner: &str,
    ttl: lease_core::Ttl,
    max_wait: Option<Duration>,
) -> Result<usize> {
    crate::backend::retry_conflicts(|| {
        Ok(sql.within_wait(max_wait, &mut |s| {
            waiting_write(s, |s| s.touch_granted(ticket, owner, ttl))
        })?)
    })
}

/// Sleeps up to `delay`. With `watch` (the waiter's ticket, when it is at the head of the queue
/// and releases elsewhere do not wake it, and how often to look: [`head_check`]) it also reads
/// its own row that often.
fn pause<A: Access>(
    access: &mut A,
    req: &Request,
    watch: Option<(i64, Duration)>,
    delay: Duration,
    checkout: &dyn Fn(Instant) -> Duration,
    lock_wait: &dyn Fn() -> Option<Duration>,
) -> Result<Pause> {
    let Some((ticket, every)) = watch else {
        let woken = access.sleep(&req.resource, delay)?;
        return Ok(Pause::Slept { woken });
    };
    let until = Instant::now() + delay;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Pause::Slept { woken: false });
        }
        if access.sleep(&req.resource, left.min(every))? {
            return Ok(Pause::Slept { woken: true });
        }
        if Instant::now() >= until {
            // The poll that follows the pause reads the row anyway.
            return Ok(Pause::Slept { woken: false });
        }
        let sent_at = Instant::now();
        // A grant found by the read is confirmed (and the expiry pushed) as a notified waiter
        // confirms it: by an update of its own row that only succeeds while it is granted.
        let (owner, ttl, max_wait) = (req.owner.clone(), req.ttl, lock_wait());
        let granted = access.step(checkout(sent_at), move |sql| {
            Ok(sql.is_granted(ticket, &owner)?
                && touch_granted_as(sql, ticket, &owner, ttl, max_wait)? > 0)
        })?;
        if granted == Some(true) {
            return Ok(Pause::Granted(Granted { ticket, sent_at }));
        }
    }
}

/// One look at the queue on a lent connection: queues the request if it is not queued yet (or
/// any more), else polls. `Some` when granted; else `head` says whether the request is next in
/// line (left as it was when this look could not tell).
fn look(
    sql: &mut dyn SemaphoreStatements,
    req: &Request,
    pending: &mut Option<i64>,
    woken: bool,
    lock_wait: Option<Duration>,
    place: &mut Place,
) -> Result<Option<Granted>> {
    let mut sent_at = Instant::now();
    let Some(ticket) = *pending else {
        let (ticket, state) = enqueue(sql, req, true, lock_wait)?;
        *pending = Some(ticket);
        return Ok(granted_or_waiting(
            state,
            Granted { ticket, sent_at },
            place,
        ));
    };
    if woken {
        // Woken by a notification: whoever changed the queue already admitted whoever may
        // enter, in its locked transaction, before notifying. Check our own row without the
        // resource lock, so that the woken waiters do not all queue for that lock (with the
        // one that was granted possibly last). A grant is a committed flag that only a
        // release or an expiry removal takes away, and these updates serialize with that
        // removal on the row: "1 row" means granted (or waiting) and still alive, and the
        // waiter's expiry is pushed as a full poll would. A row that is gone falls through
        // to the full poll, which reports it lost.
        if touch_granted(sql, ticket, req, lock_wait)? > 0 {
            return Ok(Some(Granted { ticket, sent_at }));
        }
        sent_at = Instant::now();
        if touch_within(sql, ticket, req, lock_wait)? > 0 {
            return Ok(None);
        }
    }
    match poll(sql, req, ticket, lock_wait)? {
        PollState::Lost => {
            // We stalled past the ttl and our request was removed: queue again at the back.
            *pending = None;
            look(sql, req, pending, false, lock_wait, place)
        }
        state => Ok(granted_or_waiting(
            state,
            Granted { ticket, sent_at },
            place,
        )),
    }
}

/// `Some(granted)` when `state` is granted; else records the waiter's place in the queue.
fn granted_or_waiting(state: PollState, granted: Granted, place: &mut Place) -> Option<Granted> {
    match state {
        PollState::Granted => Some(granted),
        PollState::Waiting { head, ahead } => {
            place.head = head;
            place.ahead = Some(ahead);
            None
        }
        PollState::Lost => None,
    }
}

/// The deadline passed: give up, unless a grant arrived meanwhile (then it is kept). Without a
/// connection in time the request is left to expire after its ttl.
fn give_up_at_deadline<A: Access>(
    access: &mut A,
    req: &Request,
    started: Instant,
    pending: &mut Option<i64>,
) -> Result<Granted> {
    // Taken now: a give-up that fails (its own wait for the lock ran out) is not followed by a
    // release, which would wait as long again.
    if let Some(ticket) = pending.take() {
        let (giving_up, leaving) = (req.clone(), req.clone());
        let kept = access.step_or_undo(
            req.drop_wait,
            move |sql| {
                let sent_at = Instant::now();
                Ok(give_up(sql, &giving_up, ticket)?.then_some(Granted { ticket, sent_at }))
            },
            // A grant the give-up found, after the caller had its timeout: released.
            move |kept, sql| match kept {
                Some(_) => release(sql, &leaving, ticket).map(drop),
                None => Ok(()),
            },
        )?;
        if let Some(Some(granted)) = kept {
            return Ok(granted);
        }
    }
    *pending = None;
    Err(Error::waited(&req.resource, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_head_reads_its_row_less_often_the_longer_it_waits() {
        let cap = Duration::from_secs(1);
        assert_eq!(head_check(Duration::ZERO, cap), HEAD_CHECK);
        assert_eq!(head_check(320 * MS, cap), HEAD_CHECK);
        assert_eq!(head_check(1600 * MS, cap), 50 * MS);
        assert_eq!(head_check(Duration::from_secs(8), cap), 250 * MS);
        assert_eq!(head_check(Duration::from_secs(3600), cap), cap);
        // A poll interval shorter than HEAD_CHECK does not make the reads more frequent.
        assert_eq!(head_check(Duration::from_secs(3600), 5 * MS), HEAD_CHECK);
    }

    #[test]
    fn pace_predicts_the_head_from_the_queues_movement() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.observe(t0, Some(5));
        assert_eq!(
            pace.until_head(t0),
            None,
            "one look says nothing about the pace"
        );
        // Two requests left in 100 ms: the three ahead are gone 150 ms later.
        pace.observe(t0 + 100 * MS, Some(3));
        assert_eq!(pace.until_head(t0 + 100 * MS), Some(150 * MS));
        assert_eq!(pace.until_head(t0 + 200 * MS), Some(50 * MS));
        assert_eq!(pace.until_head(t0 + 400 * MS), Some(Duration::ZERO));
        // A look without a count (a woken waiter's own-row check) changes nothing.
        pace.observe(t0 + 120 * MS, None);
        assert_eq!(pace.until_head(t0 + 100 * MS), Some(150 * MS));
    }

    #[test]
    fn an_idle_queue_predicts_nothing() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        for i in 0..5 {
            pace.observe(t0 + i * 1000 * MS, Some(4));
        }
        assert_eq!(pace.until_head(t0 + 5000 * MS), None);
    }

    #[test]
    fn a_stalled_queue_forgets_its_old_pace() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.observe(t0, Some(3));
        pace.observe(t0 + 100 * MS, Some(2));
        // Stalled since: each look stretches the pace, and once the movement is older than the
        // window the waiter is back to its poll interval.
        let stretched = |pace: &Pace, at| pace.until_head(at).unwrap_or(Duration::MAX);
        pace.observe(t0 + 1000 * MS, Some(2));
        assert!(stretched(&pace, t0 + 1000 * MS) > 1000 * MS);
        for i in 2..=5 {
            pace.observe(t0 + i * 1000 * MS, Some(2));
        }
        assert_eq!(pace.until_head(t0 + 5000 * MS), None);
    }

    #[test]
    fn queued_again_at_the_back_starts_over() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.observe(t0, Some(3));
        pace.observe(t0 + 100 * MS, Some(1));
        pace.observe(t0 + 200 * MS, Some(7));
        assert_eq!(pace.until_head(t0 + 200 * MS), None);
    }
}
