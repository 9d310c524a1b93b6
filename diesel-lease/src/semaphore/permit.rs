//! Held permits: [`PermitGuard`] (pool-backed, heartbeats itself, released on drop) and
//! [`Permit`] (on a connection you manage).

use std::any::{Any, TypeId};
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::control::SemaphoreDialect;
use super::protocol::{self, Granted};
use super::request::Request;
use super::Mode;
use crate::heartbeat::{default_margin, Beat, BeatBudget, HolderState, LostReason, LostSignal};
use crate::keeper::Registration;
use crate::pool::{end_within, AnySource, ConnectionSource};
use crate::{BorrowConnection, Error, Held, Released, Result};

/// A held permit (or read/write lock) whose connections come from a pool (an r2d2 pool, or any
/// [`ConnectionSource`]).
///
/// While it lives, the pool's keeper (one background thread for all the holders of a pool)
/// extends it every ttl/3. It is released when dropped — the drop does no network I/O, the keeper
/// releases it at once, within [`Semaphore::with_drop_wait`](super::Semaphore::with_drop_wait)
/// (by default 2 s) or the row expires after its ttl — or by [`release`](Held::release), which
/// reports whether it was still held.
///
/// It is *lost* — [`is_lost`](Held::is_lost) turns `true` and [`lost_signal`](Held::lost_signal)
/// fires — when a heartbeat finds its row gone (it expired and the next in line got in), or when
/// no heartbeat succeeded before its local deadline: the instant the last successful grant or
/// heartbeat was sent, plus the ttl, minus a tenth of it. The database never removes the row
/// before that deadline, so a holder cut off from the database (pool exhausted, network down)
/// stops believing it holds the permit before anybody else can enter.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct PermitGuard<C>
where
    C: SemaphoreDialect,
{
    pool: AnySource<C>,
    held: Permit,
    local: HolderState,
    /// Its place with the pool's keeper.
    kept: Option<Registration<C, Error>>,
    released: bool,
}

impl<C> PermitGuard<C>
where
    C: SemaphoreDialect,
{
    pub(super) fn start(pool: AnySource<C>, req: Request, granted: Granted) -> Result<Self> {
        let ttl = req.ttl.as_duration();
        let local = HolderState::new(granted.sent_at, ttl, default_margin(ttl));
        let beat = heartbeat_beat::<C>(req.clone(), granted.ticket);
        let mut permit = PermitGuard {
            pool,
            held: Permit {
                req,
                ticket: granted.ticket,
            },
            local,
            kept: None,
            released: false,
        };
        let member = KeptPermit {
            req: permit.held.req.clone(),
            ticket: granted.ticket,
        };
        let together: crate::keeper::Member<C, Error> = (
            Arc::new(PermitsTogether::<C>(PhantomData)),
            Arc::new(member),
        );
        // On error, dropping the permit gives it back: without a heartbeat it would expire.
        permit.kept = Some(crate::keeper::keep_with(
            &permit.pool,
            permit.held.resource(),
            permit.local.clone(),
            beat,
            Some(together),
        )?);
        Ok(permit)
    }

    /// The permit's ticket (its place in the request order).
    pub fn ticket(&self) -> i64 {
        self.held.ticket()
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        self.held.resource()
    }

    /// Shared (a semaphore permit, a reader) or exclusive (a writer).
    pub fn mode(&self) -> Mode {
        self.held.mode()
    }

    /// Stops the heartbeat and deletes the permit's row, within `wait` in all whatever the
    /// database does (see `pool::end_within`).
    fn finish(&mut self, wait: Duration) -> Result<Released> {
        self.released = true;
        let held = Permit {
            req: self.held.req.clone(),
            ticket: self.held.ticket,
        };
        self.kept.take();
        let released = end_within(&self.pool, wait, self.resource(), move |conn| {
            held.release(conn)
        });
        self.local.mark_lost(LostReason::Released);
        released
    }
}

impl<C> Held for PermitGuard<C>
where
    C: SemaphoreDialect,
{
    fn is_lost(&self) -> bool {
        self.local.is_lost()
    }

    fn lost_signal(&self) -> LostSignal {
        self.local.lost_signal()
    }

    /// [`Error::PermitNotHeld`] once lost.
    fn ensure_held(&self) -> Result<()> {
        self.held.still_held(!self.is_lost())
    }

    /// Releases the permit and lets the next in line in; [`Released::WasLost`] when it had
    /// already expired and been removed. Waits at most the pool's connection timeout in all:
    /// [`Error::Timeout`](crate::Error::Timeout) after that, and the release goes on in the
    /// background.
    fn release(mut self) -> Result<Released> {
        let wait = self.pool.connection_timeout();
        self.finish(wait)
    }
}

/// The keeper's beat: push the permit's expiry, on the connection the keeper lent.
fn heartbeat_beat<C: SemaphoreDialect>(
    req: Request,
    ticket: i64,
) -> impl FnMut(&mut C, BeatBudget) -> Beat<Error> + Send + 'static {
    move |conn, _budget| {
        let beat = req.on(conn, |sql| protocol::heartbeat(sql, &req, ticket));
        match beat {
            Ok(true) => Beat::Held {
                ttl: req.ttl.as_duration(),
            },
            Ok(false) => Beat::Lost,
            Err(e) => Beat::Failed(e),
        }
    }
}

/// A permit guard's request, as its keeper sees it.
struct KeptPermit {
    req: Request,
    ticket: i64,
}

impl KeptPermit {
    /// What requests renewed by one statement share: the table they are rows of (the built-in
    /// tickets, or one control table and resource), the owner and the ttl.
    fn group(&self) -> (Option<(usize, Option<&str>)>, &str, i64) {
        let table = self.req.table.as_ref().map(|target| {
            (
                std::ptr::from_ref(target.table).cast::<()>() as usize,
                target.resource.as_deref(),
            )
        });
        (table, self.req.owner.as_str(), self.req.ttl.as_micros())
    }
}

/// The permit guards on connections `C`: the keeper pushes the expiry of the permits of one
/// owner, ttl and table in one statement (`UPDATE … WHERE ticket IN (…) AND owner = ?`, the
/// statement a process's waiters share, `protocol::heartbeat_many`). When it finds every
/// request it names, each is renewed; when it finds fewer (one was given back or removed by an
/// operator) or fails, each runs its own beat, which says which was lost.
struct PermitsTogether<C>(PhantomData<fn() -> C>);

impl<C: SemaphoreDialect> crate::keeper::Together<C, Error> for PermitsTogether<C> {
    fn kind(&self) -> TypeId {
        TypeId::of::<Self>()
    }

    fn group(&self, member: &(dyn Any + Send + Sync)) -> Option<u64> {
        let mut hasher = DefaultHasher::new();
        member
            .downcast_ref::<KeptPermit>()?
            .group()
            .hash(&mut hasher);
        Some(hasher.finish())
    }

    fn beat_together(
        &self,
        conn: &mut C,
        members: &[&(dyn Any + Send + Sync)],
    ) -> Vec<Option<Beat<Error>>> {
        let kept: Option<Vec<&KeptPermit>> = members
            .iter()
            .map(|member| member.downcast_ref::<KeptPermit>())
            .collect();
        let Some((first, kept)) = kept.as_ref().and_then(|kept| Some((kept.first()?, kept))) else {
            return members.iter().map(|_| None).collect();
        };
        // The keeper groups by a hash: members that only collided with the first beat alone.
        if kept.iter().any(|permit| permit.group() != first.group()) {
            return members.iter().map(|_| None).collect();
        }
        let tickets: Vec<i64> = kept.iter().map(|permit| permit.ticket).collect();
        let all_found = first.req.on(conn, |sql| {
            protocol::heartbeat_many(sql, &first.req, &tickets)
        });
        members
            .iter()
            .map(|_| {
                matches!(all_found, Ok(true)).then(|| Beat::Held {
                    ttl: first.req.ttl.as_duration(),
                })
            })
            .collect()
    }
}

impl<C> Drop for PermitGuard<C>
where
    C: SemaphoreDialect,
{
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // No network I/O here: the keeper gives it back (if the database cannot be reached in
        // time, the row expires after the ttl).
        self.released = true;
        self.kept.take();
        self.local.mark_lost(LostReason::Released);
        let held = Permit {
            req: self.held.req.clone(),
            ticket: self.held.ticket,
        };
        crate::keeper::release_later(&self.pool, self.held.req.drop_wait, move |conn| {
            let _ = held.release(conn);
        });
    }
}

impl<C> fmt::Debug for PermitGuard<C>
where
    C: SemaphoreDialect,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("resource", &self.resource())
            .field("ticket", &self.ticket())
            .field("mode", &self.mode())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// A held permit on a connection you manage: no background thread, no release on drop.
///
/// Call [`heartbeat`](Self::heartbeat) more often than the ttl while you hold it, and
/// [`release`](Self::release) when done; a forgotten permit is removed once its ttl has run out.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::{Connection, SqliteConnection};
/// use diesel_lease::semaphore::Semaphore;
///
/// let dir = tempfile::tempdir().unwrap();
/// let mut conn = SqliteConnection::establish(&dir.path().join("app.db").display().to_string()).unwrap();
/// diesel_lease::run_migrations(&mut conn).unwrap();
///
/// let sem = Semaphore::new("reports", 2);
/// let permit = sem.acquire_on(&mut conn, Duration::from_secs(5)).unwrap();
/// permit.heartbeat(&mut conn).unwrap();
/// assert!(permit.release(&mut conn).unwrap().was_held());
/// // Releasing twice is reported, and changes nothing.
/// assert!(permit.release(&mut conn).unwrap().was_lost());
/// # }
/// ```
#[derive(Debug)]
#[must_use = "the permit stays held until released or expired"]
pub struct Permit {
    pub(super) req: Request,
    pub(super) ticket: i64,
}

impl Permit {
    fn not_held(&self) -> Error {
        Error::PermitNotHeld {
            resource: self.req.resource.clone(),
            ticket: self.ticket,
        }
    }

    /// The permit's ticket (its place in the request order).
    pub fn ticket(&self) -> i64 {
        self.ticket
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.req.resource
    }

    /// Shared (a semaphore permit, a reader) or exclusive (a writer).
    pub fn mode(&self) -> Mode {
        self.req.mode
    }

    /// Pushes the permit's expiry to now + ttl. [`Error::PermitNotHeld`] if it already expired and was
    /// removed (stop the protected work) or was released.
    pub fn heartbeat(
        &self,
        conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
    ) -> Result<()> {
        let conn = conn.borrow_connection();
        // As every call here: the caller's rollback would undo an extension reported as done.
        crate::backend::refuse_nested(conn)?;
        let held = self
            .req
            .on(conn, |sql| protocol::heartbeat(sql, &self.req, self.ticket))?;
        if !held {
            crate::observe::lost(
                "permit",
                self.resource(),
                Some(self.ticket),
                &self.not_held(),
            );
        }
        self.still_held(held)
    }

    /// Releases the permit and lets the next in line in: [`Released::WasHeld`] when it was still
    /// held, [`Released::WasLost`] when it was already released or had expired (nothing else
    /// changes then).
    pub fn release(
        &self,
        conn: &mut impl BorrowConnection<Conn: SemaphoreDialect>,
    ) -> Result<Released> {
        let conn = conn.borrow_connection();
        let op = crate::observe::op!(
            SemaphoreRelease,
            "",
            crate::backend::kind_of(conn),
            resource = self.resource(),
            owner = self.req.owner.as_str(),
            ticket = self.ticket,
        );
        let released = self
            .req
            .on(conn, |sql| protocol::release(sql, &self.req, self.ticket));
        op.finish(released, |&found| {
            (if found { "released" } else { "lost" }, 0)
        })
        .map(Released::from_held)
    }

    /// `Ok` when the statement found the permit's row, [`Error::PermitNotHeld`] otherwise.
    fn still_held(&self, found: bool) -> Result<()> {
        if found {
            Ok(())
        } else {
            Err(self.not_held())
        }
    }
}
