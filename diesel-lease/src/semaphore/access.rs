//! How a wait reaches the database: on the caller's own connection, held throughout
//! ([`OwnConnection`]), or on a pool connection borrowed for each step and given back in between
//! ([`FromPool`]). The protocol's wait is written once against [`Access`].

use std::sync::Arc;
use std::time::{Duration, Instant};

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

    /// [`step`](Access::step), and should the step end only after this wait stopped waiting
    /// for it (a step that went on in the background), `undo` gets its value, on a connection
    /// of its own, there: what the step queued goes back out instead of waiting for its ttl.
    /// Where steps never outlive the wait (the caller's own connection), only `step` runs.
    fn step_or_undo<T: Send + 'static>(
        &mut self,
        wait: Duration,
        step: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<T> + Send + 'static,
        undo: impl FnOnce(T, &mut dyn SemaphoreStatements) -> Result<()> + Send + 'static,
    ) -> Result<Option<T>> {
        drop(undo);
        self.step(wait, step)
    }

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

    /// The last step's error getting a connection, if no step of this wait got one (see
    /// [`Reach`](crate::pool::Reach)); taken. `None` on the caller's own connection.
    fn unreached(&mut self) -> Option<Error> {
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
/// [`Error::Timeout`] and goes on in the background (a request it queued, or a grant it found,
/// is taken back out when it ends: [`Access::step_or_undo`]), and the steps after it (taking
/// the request back out) are only handed to the background, not waited for. So a wait ends
/// within its timeout plus the drop wait.
pub(super) struct FromPool<C>
where
    C: SemaphoreDialect,
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
    /// Whether a step got a connection, and the last miss's error.
    reach: crate::pool::Reach,
}

impl<C> FromPool<C>
where
    C: SemaphoreDialect,
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
            reach: crate::pool::Reach::default(),
        }
    }
}

impl<C> FromPool<C>
where
    C: SemaphoreDialect,
{
    /// The least time a step is given before the wait stops waiting for it, instead of the drop
    /// wait: a try that waits for a connection and then for the resource's lock, each bounded,
    /// is given both, so that the database's own lock timeout, not this wait's, ends it.
    pub(super) fn with_allowance(mut self, allowance: Duration) -> Self {
        self.allowance = allowance;
        self
    }
}

/// Registers for `resource` with the checkout's listener, if it has one, and marks what the
/// listener had seen: on the step's own thread, right before the step looks at the queue.
fn register_before_look(
    resource: Option<String>,
    listener: Option<&Arc<Listener>>,
) -> Option<(Registration, Mark)> {
    let registration = listener?.register(&resource?);
    let mark = registration.mark();
    Some((registration, mark))
}

/// What [`FromPool::run`] does with the value of a step that ended after the wait gave up on it.
type Undo<T> = Box<dyn FnOnce(T, &mut dyn SemaphoreStatements) -> Result<()> + Send>;

impl<C> FromPool<C>
where
    C: SemaphoreDialect,
{
    /// [`Access::step`], with `undo` for a step that ends after the wait gave up on it.
    fn run<T: Send + 'static>(
        &mut self,
        wait: Duration,
        step: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<T> + Send + 'static,
        undo: Option<Undo<T>>,
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
        // Marked before the step looks at the queue: a change committed after the look (the
        // release that admits us, right behind our look's lock) is a notification after the
        // mark, and wakes the sleep that follows the step.
        if self.mark.is_none() {
            self.mark = self.registration.as_ref().map(Registration::mark);
        }
        // Not registered yet: the first checkout that reveals the pool's listener registers
        // there, and marks, before its step looks.
        let register_as = match self.registration {
            None => self.resource.clone(),
            Some(_) => None,
        };
        let (pool, table) = (self.pool.clone(), self.table.clone());
        let (undo_pool, undo_table) = (self.pool.clone(), self.table.clone());
        let reach = self.reach.clone();
        let done = self.courier.call(
            &|| bound,
            move || {
                let lent = crate::pool::lend_with_listener(&pool, wait);
                let Some((mut conn, checkout)) = crate::pool::loan_or_miss(lent, &reach)? else {
                    return Ok(None);
                };
                let registered = register_before_look(register_as, checkout.listener.as_ref());
                AnySource::with_lent(&mut conn, |conn| on_table(table.as_ref(), conn, step))
                    .map(|value| Some((value, checkout.pool, registered)))
            },
            // Ended after the wait gave up on it: undone on a connection of its own (best
            // effort; what stays behind expires after its ttl).
            move |late: Result<Option<_>>| {
                if let (Ok(Some((value, _, _))), Some(undo)) = (late, undo) {
                    let _ = undo_pool.with_connection(|conn| {
                        on_table(undo_table.as_ref(), conn, move |sql| undo(value, sql))
                    });
                }
            },
        );
        let Some(done) = done else {
            self.given_up = true;
            return Err(Error::waited(&self.name, started.elapsed()));
        };
        Ok(done?.map(|(value, pool, registered)| {
            self.identity = self.identity.or(pool);
            if let (None, Some((registration, mark))) = (&self.registration, registered) {
                self.registration = Some(registration);
                self.mark = Some(mark);
            }
            value
        }))
    }
}

impl<C> Access for FromPool<C>
where
    C: SemaphoreDialect,
{
    fn step<T: Send + 'static>(
        &mut self,
        wait: Duration,
        step: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<T> + Send + 'static,
    ) -> Result<Option<T>> {
        self.run(wait, step, None)
    }

    fn step_or_undo<T: Send + 'static>(
        &mut self,
        wait: Duration,
        step: impl FnOnce(&mut dyn SemaphoreStatements) -> Result<T> + Send + 'static,
        undo: impl FnOnce(T, &mut dyn SemaphoreStatements) -> Result<()> + Send + 'static,
    ) -> Result<Option<T>> {
        self.run(wait, step, Some(Box::new(undo)))
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
        self.mark = None;
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

    fn unreached(&mut self) -> Option<Error> {
        self.reach.unreached()
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use diesel::r2d2::{ConnectionManager, Pool};
    use diesel::PgConnection;
    use lease_core::admission::Mode;

    use super::{Access, FromPool};
    use crate::notify::Notifications;
    use crate::pool::{lend_with_listener, AnySource, WaiterWakeups};
    use crate::semaphore::request::Request;
    use crate::Ttl;

    /// A change committed while a step looks at the queue wakes the sleep after that step: the
    /// step's mark of the pool's listener is taken before it looks, not when it returns. Here the
    /// step has another session notify the resource and returns only once the pool's listener
    /// has counted the notification; the sleep after it must wake at once (`true`) instead of
    /// sleeping its whole 30 s and returning `false`, the first time (when the step registers)
    /// and after.
    #[test]
    fn a_notification_while_the_step_looks_wakes_the_sleep_after_it() {
        let Some(url) = crate::backend::test_server_url() else {
            return;
        };
        let pool = Pool::builder()
            .max_size(3)
            .event_handler(Box::new(WaiterWakeups::new::<PgConnection>(&url)))
            .build(ConnectionManager::<PgConnection>::new(&url))
            .unwrap();
        let resource = format!("access-mark-{}", std::process::id());
        let req = Request {
            resource: resource.clone(),
            permits: 1,
            owner: "test".to_owned(),
            mode: Mode::Exclusive,
            ttl: Ttl::new("ttl", Duration::from_secs(60)).unwrap(),
            drop_wait: Duration::from_secs(5),
            table: None,
            remove_when_idle: false,
        };
        let mut access = FromPool::new(AnySource::new(&pool), &req, Duration::from_secs(120));
        access.listen(&resource).unwrap();
        let listener = {
            let (_conn, checkout) = lend_with_listener(&pool, Duration::from_secs(5)).unwrap();
            checkout.listener.expect("the pool has a listener")
        };
        // The listener connected and listening (a mark taken before that wakes on the
        // connection, not on a notification), and kept so while the test runs.
        let keeper = listener.register(&resource);
        let heard = (0..30).any(|_| {
            let seen = keeper.mark();
            pool.get().unwrap().notify(&resource).expect("NOTIFY");
            keeper.sleep(seen, Duration::from_secs(1))
        });
        assert!(heard, "the listener never heard a notification");
        for step in ["the first step, which registers", "a later step"] {
            let (pool, listener, key) = (pool.clone(), Arc::clone(&listener), resource.clone());
            let looked = access
                .step(Duration::from_secs(5), move |_| {
                    // Another session's change, committed while this step looks: the step
                    // returns once the pool's listener has counted it.
                    let watch = listener.register(&key);
                    let seen = watch.mark();
                    pool.get().unwrap().notify(&key).expect("NOTIFY");
                    assert!(
                        watch.sleep(seen, Duration::from_secs(30)),
                        "the listener heard nothing"
                    );
                    Ok(())
                })
                .unwrap();
            assert_eq!(looked, Some(()));
            assert!(
                access.sleep(&resource, Duration::from_secs(30)).unwrap(),
                "{step}: a notification sent during the look did not wake the sleep after it"
            );
        }
    }
}
