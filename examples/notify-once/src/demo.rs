// The demo itself. `main.rs` compiles this file twice, with `Conn = SqliteConnection` and
// `Conn = PgConnection`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_lease::prelude::*;
use diesel_lease::{db_now, InsertOutcome};

use super::{action, notification, task_log, Action, BoxError, NewNotification, Notification};
use super::{DDL, TASKS, USER};

type DbPool = Pool<ConnectionManager<Conn>>;

pub(super) fn run(url: &str, backend: &str) -> Result<(), BoxError> {
    let pool: DbPool = diesel_lease::pool::build_pool(url, TASKS as u32 + 1)?;
    let mut conn = pool.get()?;
    conn.batch_execute(DDL)?;
    notify_once(&pool, &mut conn, backend)?;
    follow_up_once(&pool, &mut conn, backend)
}

/// Runs `task` on `TASKS` threads at once, each with its own pooled connection.
fn race<T: Send>(
    pool: &DbPool,
    task: impl Fn(&mut Conn, usize) -> Result<T, BoxError> + Sync,
) -> Result<Vec<T>, BoxError> {
    let start = Barrier::new(TASKS);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..TASKS)
            .map(|i| {
                let (start, task) = (&start, &task);
                s.spawn(move || {
                    let mut conn = pool.get()?;
                    start.wait();
                    task(&mut conn, i)
                })
            })
            .collect();
        let mut results = Vec::new();
        for thread in threads {
            results.push(thread.join().map_err(|_| "a task thread panicked")??);
        }
        Ok(results)
    })
}

/// Part 1: `TASKS` copies of the email task for action 1 run at once; one email goes out.
fn notify_once(pool: &DbPool, conn: &mut Conn, backend: &str) -> Result<(), BoxError> {
    diesel::insert_into(action::table)
        .values(action::id.eq(1))
        .execute(conn)?;
    let emails_sent = AtomicUsize::new(0);
    let read_null = AtomicUsize::new(0);
    let all_read = Barrier::new(TASKS);

    race(pool, |conn, _| {
        // The seed's check, `SELECT notified FROM action WHERE id = 1` …
        let action: Action = action::table
            .find(1)
            .select(Action::as_select())
            .first(conn)?;
        all_read.wait(); // (for the demo: every task reads before any task writes)
        if action.notified.is_some() {
            return Ok(());
        }
        // … passes in every task, so on its own it would send `TASKS` emails. The conditional
        // UPDATE lets exactly one task through.
        read_null.fetch_add(1, Ordering::SeqCst);
        if action.claim_if_null(conn, db_now)? {
            emails_sent.fetch_add(1, Ordering::SeqCst); // send_notification_email(…)
        }
        Ok(())
    })?;

    let action: Action = action::table
        .find(1)
        .select(Action::as_select())
        .first(conn)?;
    let (read_null, sent) = (read_null.into_inner(), emails_sent.into_inner());
    let Some(notified) = action.notified else {
        return Err("action 1 is not marked as notified".into());
    };
    if sent != 1 {
        return Err(format!("{sent} emails were sent for action {}", action.id).into());
    }
    println!(
        "{TASKS} tasks raced to email action 1 ({read_null} read notified = NULL): 1 email sent, \
         notified = {notified} by the database clock, on {backend}"
    );
    Ok(())
}

/// Part 2: `TASKS` tasks, each in its own transaction, try to insert the follow-up to the first
/// notification; one inserts it, and every transaction still commits its log row.
fn follow_up_once(pool: &DbPool, conn: &mut Conn, backend: &str) -> Result<(), BoxError> {
    let first = 1;
    let welcome = NewNotification {
        id: first,
        user_id: USER,
        previous_notification: None,
        body: "Welcome!".into(),
    };
    diesel::insert_into(notification::table)
        .values(welcome)
        .execute(conn)?;

    let outcomes = race(pool, |conn, task| {
        let outcome = conn.transaction(|conn| {
            let next = NewNotification {
                id: 100 + task as i64, // each task's own id (from the application's generator)
                user_id: USER,
                previous_notification: Some(first),
                body: "Did you see our welcome email?".into(),
            };
            let outcome = next.insert_once(conn)?;
            // Other work in the same transaction. On PostgreSQL, a plain INSERT that hit the
            // UNIQUE constraint would have aborted the transaction here.
            diesel::insert_into(task_log::table)
                .values((
                    task_log::task.eq(task as i32),
                    task_log::outcome.eq(label(&outcome)),
                ))
                .execute(conn)?;
            Ok::<_, diesel_lease::Error>(outcome)
        })?;
        Ok((task, outcome))
    })?;

    let inserted: Vec<_> = outcomes.iter().filter(|(_, o)| o.inserted()).collect();
    let duplicates = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, InsertOutcome::AlreadyExists))
        .count();
    let logged: i64 = task_log::table.count().get_result(conn)?;
    let follow_ups: i64 = notification::table
        .filter(notification::previous_notification.eq(first))
        .count()
        .get_result(conn)?;
    let [(task, InsertOutcome::Inserted(Some(row)))] = inserted[..] else {
        return Err(format!("{} tasks inserted the follow-up", inserted.len()).into());
    };
    if follow_ups != 1 || logged != TASKS as i64 || row.previous_notification != Some(first) {
        return Err(format!("{follow_ups} follow-ups stored, {logged} tasks committed").into());
    }
    println!(
        "{TASKS} tasks raced to insert the follow-up to notification {first}: task {task} \
         inserted notification {}, {duplicates} got AlreadyExists, all {logged} transactions \
         committed, on {backend}",
        row.id
    );
    Ok(())
}

fn label(outcome: &InsertOutcome<Notification>) -> &'static str {
    match outcome {
        InsertOutcome::Inserted(_) => "inserted, sending the email",
        InsertOutcome::AlreadyExists => "already sent by another task",
    }
}
