//! How a wait reaches the database: on the caller's own connection, held throughout
//! ([`OwnConnection`]), or on a pool connection borrowed for each step and given back in between
//! ([`FromPool`]). The protocol's wait is written once against [`Access`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::r2d2::R2D2Connection;

use super::control::SemaphoreDialect;
use super::request::{on_table, ControlTarget, Request};
use super::statements::SemaphoreStatements;
use crate::courier::Courier;
use crate::notify::listener::{Listener, Mark, Registration};
use crate::notify::local::Subscription;
use crate::pool::{AnySource, ConnectionSource};
use crate::{Error, Result};

/// Where the steps of one wait run, and how it sleeps between them.
pub(super) trait Access {
    /// Runs `step` on a connection, waiting at most `wait` for one. `Ok(None)` when none came in
    /// time: a missed step, not an error.
    fn step<T: Send + 'static>(
        &mut self,
        wait: Duration,
        step: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<T> + Send + 'static,
    ) -> Result<Option<T>>;

    /// Starts listening for notifications of `resource`; called before its request is queued.
    fn listen(&mut self, resource: &str) -> Result<()>;

    /// Stops listening (best effort).
    fn unlisten(&mut self);

    /// Sleeps up to `max`; `true` when `resource` was notified since the last step began
    /// (by any process where the backend has notifications, else by this process).
    fn sleep(&mut self, resource: &str, max: Duration) -> Result<bool>;

    /// Whether [`sleep`](Access::sleep) wakes when another process admits someone: then a
    /// waiter at the head of the queue need not look at its own row between polls.
    fn notified_across_processes(&self) -> bool;

    /// The identity of the pool the steps borrow from, once a checkout told it: waiters of one
    /// pool share their polls (`gate.rs`). `None` on the caller's own connection.
    fn pool(&self) -> Option<usize> {
        None
    }
}

/// A wait on the caller's connection: it stays checked out (and `LISTEN`s, on PostgreSQL) for
/// the whole wait, as the caller chose by passing it. In a process whose connections go through
/// a transaction pooler it does not `LISTEN` (see `notify::may_listen_on_callers_connection`)
/// and wakes as on a backend without notifications.
pub(super) struct OwnConnection<'a, C: SemaphoreDialect> {
    conn: &'a mut C,
    /// The user's control table, if the requests live there.
    table: Option<ControlTarget>,
    /// Whether it `LISTEN`s on the connection.
    listens: bool,
    /// This process's wake-ups, where it does not listen.
    local: Option<Subscription>,
}

impl<'a, C: SemaphoreDialect> OwnConnection<'a, C> {
    pub(super) fn new(conn: &'a mut C, req: &Request) -> Self {
        let listens = C::NOTIFICATIONS && crate::notify::may_listen_on_callers_connection();
        if C::NOTIFICATIONS && !listens {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                crate::observe::wakeups_polled(
                    "a wait on a connection of your own (`acquire_on`) does not LISTEN in a \
                     process whose connections go through a transaction pooler",
                );
            });
        }
        OwnConnection {
            conn,
            table: req.table.clone(),
            listens,
            local: None,
        }
    }
}

impl<C: SemaphoreDialect> Access for OwnConnection<'_, C> {
    fn step<T: Send + 'static>(
        &mut self,
        _wait: Duration,
        step: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<T> + Send + 'static,
    ) -> Result<Option<T>> {
        on_table(self.table.as_ref(), &mut *self.conn, step).map(Some)
    }

    fn listen(&mut self, resource: &str) -> Result<()> {
        if !self.listens {
            self.local = Some(Subscription::new(resource));
            return Ok(());
        }
        Ok(self.conn.listen(true)?)
    }

    fn unlisten(&mut self) {
        self.local = None;
        if self.listens {
            // Hygiene for pooled connections only; a failure here does not change who holds what.
            let _ = self.conn.listen(false);
        }
    }

    fn sleep(&mut self, resource: &str, max: Duration) -> Result<bool> {
        match &mut self.local {
            Some(local) => Ok(local.sleep(max)),
            None => Ok(self.conn.wait_for_wakeup(resource, max)?),
        }
    }

    fn notified_across_processes(&self) -> bool {
        self.listens
    }
}

/// A wait that borrows a pool connection for each step, so that waiters never keep the
/// connections the holders' heartbeats need. Between steps it sleeps on the pool's shared
/// listener ([`Listener`]) when the pool has one, and plainly otherwise.
///
/// Each step runs on a [`Courier`]'s thread, and the wait for it ends when both the waiter's
/// deadline and the step's own allowance (its connection wait, at least the drop wait) have
/// passed, whatever the pool's health check and the network do: then the step fails with
/// [`Error::Timeout`] and goes on in the background (a request it queued expires after its
/// ttl), and the steps after it (taking the request back out) are only handed to the
/// background, not waited for. So a wait ends within its timeout plus the drop wait.
pub(super) struct FromPool<C>
where
    C: SemaphoreDialect + R2D2Connection,
{
    pool: AnySource<C>,
    /// Makes the steps, on a thread of its own.
    courier: Courier,
    /// The resource's name, for the timeout of a step given up on.
    name: String,
    /// When the caller's wait ends (`None`: never).
    deadline: Option<Instant>,
    /// The least time a step is given ([`Request::drop_wait`]).
    allowance: Duration,
    /// A step was given up on: the database does not answer, so later steps are not waited for.
    given_up: bool,
    /// The user's control table, if the requests live there.
    table: Option<ControlTarget>,
    /// The resource to listen for, from [`Access::listen`] on.
    resource: Option<String>,
    /// Our place at the pool's listener, from the first checkout after `listen` on.
    registration: Option<Registration>,
    /// What the listener had seen when the current step began.
    mark: Option<Mark>,
    /// This process's wake-ups, where the backend has no notifications.
    local: Option<Subscription>,
    /// The pool's identity, from the first checkout that told it on.
    identity: Option<usize>,
}

impl<C> FromPool<C>
where
    C: SemaphoreDialect + R2D2Connection,
{
    /// The access of a wait for `req` that ends `timeout` from now.
    pub(super) fn new(pool: AnySource<C>, req: &Request, timeout: Duration) -> Self {
        FromPool {
            pool,
            courier: Courier::new(),
            name: req.resource.clone(),
            deadline: Instant::now().checked_add(timeout),
            allowance: req.drop_wait,
            given_up: false,
            table: req.table.clone(),
            resource: None,
            registration: None,
            mark: None,
            local: None,
            identity: None,
        }
    }

    /// Registers with the pool's listener once it is known (the checkout reveals it), before
    /// the step that follows looks at the queue.
    fn register(&mut self, listener: Option<Arc<Listener>>) {
        if self.registration.is_none() {
            if let (Some(resource), Some(listener)) = (&self.resource, listener) {
                self.registration = Some(listener.register(resource));
            }
        }
        if self.mark.is_none() {
            self.mark = self.registration.as_ref().map(Registration::mark);
        }
    }
}

impl<C> Access for FromPool<C>
where
    C: SemaphoreDialect + R2D2Connection,
{
    fn step<T: Send + 'static>(
        &mut self,
        wait: Duration,
        step: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<T> + Send + 'static,
    ) -> Result<Option<T>> {
        let started = Instant::now();
        let bound = if self.given_up {
            Some(started)
        } else {
            match (self.deadline, started.checked_add(wait.max(self.allowance))) {
                (Some(deadline), Some(allowed)) => Some(deadline.max(allowed)),
                // No deadline: the step is waited for as long as it takes.
                _ => None,
            }
        };
        let (pool, table) = (self.pool.clone(), self.table.clone());
        let done = self.courier.call(
            &|| bound,
            move || {
                let Ok((mut conn, checkout)) = crate::pool::lend_with_listener(&pool, wait) else {
                    return Ok(None);
                };
                AnySource::with_lent(&mut conn, |conn| on_table(table.as_ref(), conn, step))
                    .map(|value| Some((value, checkout)))
            },
            |_| {},
        );
        let Some(done) = done else {
            self.given_up = true;
            return Err(Error::waited(&self.name, started.elapsed()));
        };
        Ok(done?.map(|(value, checkout)| {
            self.identity = self.identity.or(checkout.pool);
            self.register(checkout.listener);
            value
        }))
    }

    fn listen(&mut self, resource: &str) -> Result<()> {
        self.resource = Some(resource.to_owned());
        // Also where the backend has notifications: a pool without a listener (built for a
        // transaction pooler without a direct URL, or without `WaiterWakeups`) wakes its waiters
        // within this process at least.
        self.local = Some(Subscription::new(resource));
        Ok(())
    }

    fn unlisten(&mut self) {
        self.registration = None;
        self.resource = None;
        self.local = None;
    }

    fn sleep(&mut self, _resource: &str, max: Duration) -> Result<bool> {
        match (&self.registration, self.mark.take(), &mut self.local) {
            (Some(registration), Some(mark), _) => Ok(registration.sleep(mark, max)),
            (_, _, Some(local)) => Ok(local.sleep(max)),
            _ => {
                std::thread::sleep(max);
                Ok(false)
            }
        }
    }

    fn notified_across_processes(&self) -> bool {
        self.registration.is_some()
    }

    fn pool(&self) -> Option<usize> {
        self.identity
    }
}
