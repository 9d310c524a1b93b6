//! Issue 23, item 2: idle semaphore waiters cost the database the same whether they are ten or a
//! thousand: the waiters of one process for one resource share one poller (`semaphore/gate.rs`).
//! The statements are counted as the pool's connections send them (`common::counted`); the
//! verdicts are counts, never timings. Every holder records when it held and released its
//! permit (`common::history`): one holder at a time, in the record of what each believed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;

use crate::common::counted::{counted_pool, idle_statements, WINDOW};
use crate::common::history::History;
use crate::common::{TestBackend, TestDb};

use super::{TestPool, LONG};

/// Statements per second below which the waiters have settled: a few polls' worth, plus the
/// head of the queue reading its own row (every 20 ms at first, less often the longer it waits)
/// where releases in other processes do not wake it (SQLite, MySQL).
const SETTLED: u64 = 150;

/// How a group of waiters fared: how many got the permit, and the most that held it at once.
#[derive(Default)]
struct Fared {
    acquired: AtomicUsize,
    inside: AtomicUsize,
    most: AtomicUsize,
}

/// A release's outcome: released, or [`Error::Timeout`](diesel_lease::Error::Timeout) when the
/// resource's row lock (which a thousand polling waiters take in turn) was not had within the
/// pool's connection timeout, and the release goes on in the background (as documented). How
/// long that lock takes depends on the machine's load; the test judges who held the mutex when,
/// and that every waiter got it in the end.
fn released_or_late(released: diesel_lease::Result<diesel_lease::Released>) {
    match released {
        Ok(_) => {}
        Err(diesel_lease::Error::Timeout { .. }) => {}
        Err(e) => panic!("release: {e}"),
    }
}

/// Ten waiters for one held mutex, then a thousand for another, each group on a pool of its own:
/// the thousand cost at most twice what the ten cost, plus a few polls. Then both holders
/// release: every waiter gets its mutex, one at a time.
fn idle_semaphore_waiters_cost_the_same_whether_ten_or_a_thousand<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let holders = db.pool(4);
    let (few_mutex, many_mutex) = (Semaphore::mutex("idle-few"), Semaphore::mutex("idle-many"));
    let few_held = few_mutex.acquire(&holders, LONG).unwrap();
    let many_held = many_mutex.acquire(&holders, LONG).unwrap();
    let history = History::default();
    history.permit_held("idle-few", "first");
    history.permit_held("idle-many", "first");
    let (few_pool, few_statements) = counted_pool::<B::Conn>(&db.url, 4);
    let (many_pool, many_statements) = counted_pool::<B::Conn>(&db.url, 10);
    let (few, many) = (Fared::default(), Fared::default());
    let failures = Mutex::new(Vec::new());
    // One waiter: takes the mutex, notes how many are inside with it, releases it.
    let wait = |name: &'static str, pool: &TestPool<B>, fared: &Fared| match Semaphore::mutex(name)
        .acquire(pool, Duration::from_secs(300))
    {
        Ok(permit) => {
            let me = format!("{:?}", std::thread::current().id());
            history.permit_held(name, &me);
            let now = fared.inside.fetch_add(1, Ordering::SeqCst) + 1;
            fared.most.fetch_max(now, Ordering::SeqCst);
            fared.acquired.fetch_add(1, Ordering::SeqCst);
            fared.inside.fetch_sub(1, Ordering::SeqCst);
            history.permit_released(name, &me);
            released_or_late(permit.release());
        }
        Err(e) => failures.lock().unwrap().push(e.to_string()),
    };
    std::thread::scope(|s| {
        for _ in 0..10 {
            s.spawn(|| wait("idle-few", &few_pool, &few));
        }
        let ten = idle_statements(
            &few_statements,
            10,
            SETTLED,
            SETTLED * WINDOW.as_secs(),
            "10 semaphore waiters",
        );
        for _ in 0..1000 {
            s.spawn(|| wait("idle-many", &many_pool, &many));
        }
        let thousand = idle_statements(
            &many_statements,
            1000,
            SETTLED,
            2 * ten + 40,
            "1000 semaphore waiters",
        );
        eprintln!("idle statements in {WINDOW:?}: 10 waiters {ten}, 1000 waiters {thousand}");
        assert!(
            thousand <= 2 * ten + 40,
            "1000 idle semaphore waiters sent {thousand} statements in {WINDOW:?}, 10 sent {ten}"
        );
        assert!(ten > 0, "the waiters of a held mutex still poll");
        assert_eq!(
            few.acquired.load(Ordering::SeqCst) + many.acquired.load(Ordering::SeqCst),
            0,
            "nobody enters a held mutex"
        );
        history.permit_released("idle-few", "first");
        released_or_late(few_held.release());
        history.permit_released("idle-many", "first");
        released_or_late(many_held.release());
    });
    history.check_permits(1);
    assert_eq!(failures.into_inner().unwrap(), Vec::<String>::new());
    assert_eq!(
        few.acquired.load(Ordering::SeqCst),
        10,
        "every waiter got the mutex"
    );
    assert_eq!(
        many.acquired.load(Ordering::SeqCst),
        1000,
        "every waiter got the mutex"
    );
    assert_eq!(few.most.load(Ordering::SeqCst), 1, "one holder at a time");
    assert_eq!(many.most.load(Ordering::SeqCst), 1, "one holder at a time");
    let _ = (few_mutex, many_mutex);
}

/// How long the lone waiter of [`a_head_that_waits_long_reads_its_row_less_often`] has waited
/// when its statements are counted.
const HEAD_AGE: Duration = Duration::from_secs(8);

/// At most this many statements in [`WINDOW`] from a lone waiter that has been the head of the
/// queue for [`HEAD_AGE`]: its own-row reads every 250-375 ms by then (a 32nd of its wait),
/// ~16 in the window, plus a full poll a second and the pool's check-out pings. Reading every
/// 20 ms, as the head did before, is 200 reads (400 statements with the pings) in the window.
const OLD_HEAD_BOUND: u64 = 120;

/// Where releases in other processes do not wake a waiter (SQLite, MySQL), the head of the queue
/// reads its own row between polls; a head that has waited long reads it seldom (a 32nd of its
/// wait), not 50 times a second for as long as the holder keeps the permit. It still gets the
/// permit when the holder leaves. Counted statements are an upper bound, so a slow machine can
/// only send fewer. On PostgreSQL the waiter sleeps on the listener and reads nothing between
/// polls.
fn a_head_that_waits_long_reads_its_row_less_often<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let holders = db.pool(2);
    let mutex = Semaphore::mutex("idle-old-head");
    let held = mutex.acquire(&holders, LONG).unwrap();
    let (pool, statements) = counted_pool::<B::Conn>(&db.url, 2);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            Semaphore::mutex("idle-old-head")
                .acquire(&pool, Duration::from_secs(300))
                .map(|permit| permit.release())
        });
        std::thread::sleep(HEAD_AGE);
        let before = statements.load(Ordering::SeqCst);
        std::thread::sleep(WINDOW);
        let sent = statements.load(Ordering::SeqCst) - before;
        eprintln!("a head waiting {HEAD_AGE:?} sent {sent} statements in {WINDOW:?}");
        assert!(
            sent <= OLD_HEAD_BOUND,
            "a head of the queue that waited {HEAD_AGE:?} sent {sent} statements in {WINDOW:?}"
        );
        assert!(!waiter.is_finished(), "nobody enters a held mutex");
        let _ = held.release().unwrap();
        let _ = waiter
            .join()
            .unwrap()
            .expect("the head gets the mutex once it is released")
            .unwrap();
    });
}

backend_tests!(
    idle_semaphore_waiters_cost_the_same_whether_ten_or_a_thousand,
    a_head_that_waits_long_reads_its_row_less_often
);
