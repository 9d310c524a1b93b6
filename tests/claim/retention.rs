//! Issue 24.6: retention and redrive on the user's own table. A purge deletes exactly the done
//! and dead rows older than the period (by the database clock), in batches of its size; a
//! redrive moves exactly the dead rows chosen back to ready, attempts reset (kept counting on a
//! model fenced by its attempts alone).

use std::collections::BTreeSet;
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_lease::claim::{Purged, Retention};
use diesel_lease::prelude::*;

use crate::common::{pick, TestBackend, TestDb};
use crate::models::schema::tasks;
use crate::models::*;

/// A task fenced by its attempts alone (no owner column), dead after five.
#[derive(Debug, Queryable, Selectable, diesel_lease::Claimable)]
#[diesel(table_name = tasks)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
    attempts = attempts, max_attempts = 5, claimed_at = claimed_at, timeout_secs = 60)]
#[allow(dead_code)] // read by the derive's statements, not here
struct FencedByAttempts {
    id: i64,
    status: String,
    attempts: i32,
    claimed_at: Option<chrono::NaiveDateTime>,
}

/// A task whose failures are retried: its failed state is a ready state too.
#[derive(Debug, Queryable, Selectable, diesel_lease::Claimable)]
#[diesel(table_name = tasks)]
#[claimable(state = status, ready("new", "dead"), claimed = "running", done = "done", failed = "dead")]
#[allow(dead_code)] // read by the derive's statements, not here
struct Retried {
    id: i64,
    status: String,
}

/// A task that recurs: its done state is a ready state too.
#[derive(Debug, Queryable, Selectable, diesel_lease::Claimable)]
#[diesel(table_name = tasks)]
#[claimable(state = status, ready("new", "done"), claimed = "running", done = "done")]
#[allow(dead_code)] // read by the derive's statements, not here
struct Recurring {
    id: i64,
    status: String,
}

backend_suite! {
    fixtures: crate::claim::schedule;
    tests: [
        a_purge_deletes_exactly_the_old_done_and_dead_rows_in_batches,
        a_purge_can_keep_the_dead_rows,
        a_purge_never_deletes_rows_in_a_ready_state,
        a_redrive_resets_exactly_the_dead_rows_chosen,
        a_redrive_keeps_the_attempts_fence_of_a_model_without_owner,
        a_redriven_row_without_owner_gets_one_try_past_its_attempts,
    ];

    /// A task in `status` whose `claimed_at` is `secs_ago` seconds before the database's now
    /// (`None`: NULL), with a used attempt, an error and an owner.
    pub(crate) fn insert(conn: &mut <B as TestBackend>::Conn, status: &str, secs_ago: Option<i64>, tenant: &str) -> i64 {
        let sql = pick::<B>(
            "INSERT INTO tasks (status, claimed_at, tenant, attempts, last_error, owner) VALUES \
             ($1, (now() AT TIME ZONE 'UTC') - $2 * INTERVAL '1 second', $3, 5, 'boom', 'w1')",
            "INSERT INTO tasks (status, claimed_at, tenant, attempts, last_error, owner) VALUES \
             (?, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+d seconds', -?)), ?, 5, 'boom', 'w1')",
            "INSERT INTO tasks (status, claimed_at, tenant, attempts, last_error, owner) VALUES \
             (?, UTC_TIMESTAMP(6) - INTERVAL ? SECOND, ?, 5, 'boom', 'w1')",
        );
        diesel::sql_query(sql)
            .bind::<Text, _>(status)
            .bind::<diesel::sql_types::Nullable<BigInt>, _>(secs_ago)
            .bind::<Text, _>(tenant)
            .execute(conn)
            .unwrap();
        tasks::table.select(diesel::dsl::max(tasks::id)).first::<Option<i64>>(conn).unwrap().unwrap()
    }

    pub(crate) fn ids(conn: &mut <B as TestBackend>::Conn) -> BTreeSet<i64> {
        tasks::table.select(tasks::id).load::<i64>(conn).unwrap().into_iter().collect()
    }

    const DAY: i64 = 24 * 3600;

    /// Rows a purge of one day must keep, and rows it must delete.
    pub(crate) fn seed(conn: &mut <B as TestBackend>::Conn) -> (BTreeSet<i64>, BTreeSet<i64>, BTreeSet<i64>) {
        let mut keep = BTreeSet::new();
        let (mut old_done, mut old_dead) = (BTreeSet::new(), BTreeSet::new());
        for _ in 0..7 {
            old_done.insert(insert(conn, "done", Some(2 * DAY), ""));
        }
        for _ in 0..5 {
            old_dead.insert(insert(conn, "dead", Some(3 * DAY), ""));
        }
        // Newer than the period, not finished, or never timed: kept.
        keep.insert(insert(conn, "done", Some(3600), ""));
        keep.insert(insert(conn, "dead", Some(DAY - 600), ""));
        keep.insert(insert(conn, "new", Some(2 * DAY), ""));
        keep.insert(insert(conn, "running", Some(2 * DAY), ""));
        keep.insert(insert(conn, "done", None, ""));
        (keep, old_done, old_dead)
    }

    /// The tasks table, empty.
    pub(crate) fn table(db: &TestDb<B>) {
        fixtures::tasks_table(db);
    }

    pub(crate) fn a_purge_deletes_exactly_the_old_done_and_dead_rows_in_batches(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        let (keep, _, _) = seed(&mut conn);
        let retention = Retention::older_than(Duration::from_secs(DAY as u64)).batch_size(3);
        let purged: Purged = Task::queue().purge(&mut conn, tasks::claimed_at, &retention).unwrap();
        // 12 rows, 3 per statement: four full batches, and a fifth that finds none.
        assert_eq!((purged.deleted, purged.batches, purged.largest_batch), (12, 5, 3));
        assert_eq!(ids(&mut conn), keep);
        // Nothing left to do.
        let again = Task::queue().purge(&mut conn, tasks::claimed_at, &retention).unwrap();
        assert_eq!((again.deleted, again.batches), (0, 1));
        // Inside the caller's transaction it is refused: each batch commits on its own.
        let nested = conn.transaction::<_, diesel_lease::Error, _>(|c| {
            Task::queue().purge(c, tasks::claimed_at, &retention).map(drop)
        });
        assert!(nested.is_err());
        let zero = Retention::older_than(Duration::from_secs(1)).batch_size(0);
        assert!(Task::queue().purge(&mut conn, tasks::claimed_at, &zero).is_err());
    }

    pub(crate) fn a_purge_can_keep_the_dead_rows(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        let (keep, old_done, old_dead) = seed(&mut conn);
        let retention = Retention::older_than(Duration::from_secs(DAY as u64)).failed(false);
        let purged = Task::queue().purge(&mut conn, tasks::claimed_at, &retention).unwrap();
        assert_eq!((purged.deleted, purged.batches), (7, 1));
        let left = ids(&mut conn);
        assert!(left.is_disjoint(&old_done));
        assert_eq!(left, keep.union(&old_dead).copied().collect());
    }

    /// Where the failed state is a ready state too (failures are retried), a purge deletes the
    /// old done rows and keeps the dead ones, which are queued work; where the done state is one
    /// (rows recur) and there is no failed state, nothing is left to purge: `Error::Config`, and
    /// every row stays.
    pub(crate) fn a_purge_never_deletes_rows_in_a_ready_state(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        let (keep, old_done, old_dead) = seed(&mut conn);
        let retention = Retention::older_than(Duration::from_secs(DAY as u64));
        let purged = Retried::queue().purge(&mut conn, tasks::claimed_at, &retention).unwrap();
        assert_eq!(purged.deleted, 7, "only the old done rows");
        let left = ids(&mut conn);
        assert!(left.is_disjoint(&old_done));
        assert_eq!(left, keep.union(&old_dead).copied().collect(), "the dead rows are retried, not purged");
        let recurring = Recurring::queue().purge(&mut conn, tasks::claimed_at, &retention);
        assert!(matches!(recurring, Err(diesel_lease::Error::Config(_))), "{recurring:?}");
        assert_eq!(ids(&mut conn), left, "a refused purge deletes nothing");
    }

    pub(crate) fn a_redrive_resets_exactly_the_dead_rows_chosen(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        let dead_a: Vec<i64> = (0..4).map(|_| insert(&mut conn, "dead", Some(60), "a")).collect();
        let dead_b = insert(&mut conn, "dead", Some(60), "b");
        let done = insert(&mut conn, "done", Some(60), "a");
        // Claimed just now: not stale, so no claim rescues it.
        let running = insert(&mut conn, "running", Some(0), "a");
        let before: Vec<Task> = tasks::table.order(tasks::id).select(Task::as_select()).load(&mut conn).unwrap();
        // Only tenant b's one dead row matches the filter.
        assert_eq!(Task::queue().filter(tasks::tenant.eq("b")).redrive(&mut conn, 3).unwrap(), 1);
        // Then at most three of the others.
        assert_eq!(Task::queue().redrive(&mut conn, 3).unwrap(), 3);
        let after: Vec<Task> = tasks::table.order(tasks::id).select(Task::as_select()).load(&mut conn).unwrap();
        let redriven: Vec<&Task> = after.iter().filter(|t| t.status == "new").collect();
        assert_eq!(redriven.len(), 4);
        assert!(redriven.iter().any(|t| t.id == dead_b));
        for t in &redriven {
            assert!(dead_a.contains(&t.id) || t.id == dead_b, "only dead rows: {t:?}");
            assert_eq!((t.attempts, t.owner.as_deref(), t.last_error.as_deref()), (0, None, None));
        }
        // Everything else is as it was.
        for (b, a) in before.iter().zip(&after) {
            if a.status != "new" {
                assert_eq!(a, b);
            }
        }
        assert_eq!(after.iter().filter(|t| t.status == "dead").count(), 1);
        assert_eq!(after.iter().find(|t| t.id == done).unwrap().status, "done");
        assert_eq!(after.iter().find(|t| t.id == running).unwrap().status, "running");
        // A redriven row is claimable again, at once, with its first attempt.
        let claimed = Task::claim().row(&mut conn).unwrap().expect("ready again");
        assert!(redriven.iter().any(|t| t.id == claimed.id));
        assert_eq!(claimed.attempts, 1);
        assert_eq!(Task::queue().redrive(&mut conn, 10).unwrap(), 1);
        assert_eq!(Task::queue().redrive(&mut conn, 10).unwrap(), 0);
    }

    /// A model fenced by `attempts` alone (no owner column): a redrive keeps its attempts
    /// counting, so the worker of a claim that was given up and redriven cannot finish the row's
    /// next claim (with attempts reset, both claims had number 1).
    pub(crate) fn a_redrive_keeps_the_attempts_fence_of_a_model_without_owner(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        let id = insert(&mut conn, "new", None, "a");
        diesel::update(tasks::table.find(id)).set(tasks::attempts.eq(0)).execute(&mut conn).unwrap();
        let first = FencedByAttempts::claim().row(&mut conn).unwrap().expect("ready");
        // Given up (an operator's cancel, a reap), then redriven, then claimed by another worker.
        diesel::update(tasks::table.find(id)).set(tasks::status.eq("dead")).execute(&mut conn).unwrap();
        assert_eq!(FencedByAttempts::queue().redrive(&mut conn, 10).unwrap(), 1);
        let second = FencedByAttempts::claim().row(&mut conn).unwrap().expect("ready again");
        assert_eq!((first.id, second.id), (id, id));
        assert_eq!((first.attempts, second.attempts), (1, 2), "the attempts go on counting");
        assert!(!first.complete(&mut conn).unwrap(), "the first claim's worker is fenced off");
        assert!(second.complete(&mut conn).unwrap());
    }

    /// The price of that fence, as documented: a redriven row that had used its `max_attempts`
    /// gets one more try and no retry; failing it again makes it dead at once.
    pub(crate) fn a_redriven_row_without_owner_gets_one_try_past_its_attempts(db: &TestDb<B>) {
        fixtures::tasks_table(db);
        let mut conn = db.conn();
        // Dead after its fifth attempt.
        let id = insert(&mut conn, "dead", None, "a");
        assert_eq!(FencedByAttempts::queue().redrive(&mut conn, 10).unwrap(), 1);
        let row = FencedByAttempts::claim().row(&mut conn).unwrap().expect("ready again");
        assert_eq!((row.id, row.attempts), (id, 6), "one more try, counted on");
        let policy = diesel_lease::claim::RetryPolicy::new(5).unwrap();
        let outcome = row.fail_or_retry(&mut conn, &policy).unwrap();
        assert!(matches!(outcome, diesel_lease::claim::RetryOutcome::Failed { .. }), "{outcome:?}");
        let status: String = tasks::table.find(id).select(tasks::status).first(&mut conn).unwrap();
        assert_eq!(status, "dead", "no retry after the redrive");
    }
}
