//! PostgreSQL's `LISTEN/NOTIFY` on one channel.

use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::PgConnection;

use super::Notifications;

/// The channel the pools' listeners hear: semaphore changes (the payload is the resource name)
/// and claim rows that became ready (`claim:` and the table, as Diesel quotes it).
macro_rules! channel {
    () => {
        "diesel_lease_semaphores"
    };
}
pub(crate) use channel;

const CHANNEL: &str = channel!();
const LISTEN: &str = concat!("LISTEN ", channel!());
const UNLISTEN: &str = concat!("UNLISTEN ", channel!());

/// How often a listening connection looks for a notification that arrived. Local (reads the
/// socket buffer), no query.
const NOTIFICATION_CHECK: Duration = Duration::from_millis(2);

impl Notifications for PgConnection {
    const NOTIFICATIONS: bool = true;

    fn notify(&mut self, key: &str) -> QueryResult<()> {
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<diesel::sql_types::Text, _>(CHANNEL)
            .bind::<diesel::sql_types::Text, _>(key)
            .execute(self)
            .map(drop)
    }

    fn listen(&mut self, on: bool) -> QueryResult<()> {
        diesel::sql_query(if on { LISTEN } else { UNLISTEN }).execute(self)?;
        if !on {
            // Drop what arrived meanwhile, so a pooled connection goes back clean.
            for notification in self.notifications_iter() {
                notification?;
            }
        }
        Ok(())
    }

    fn wait_for_notifications(&mut self, max: Duration) -> QueryResult<Vec<String>> {
        let deadline = Instant::now() + max;
        loop {
            // Reads what the socket already holds; no query, no round trip.
            let mut notified = Vec::new();
            for notification in self.notifications_iter() {
                let notification = notification?;
                if notification.channel == CHANNEL {
                    notified.push(notification.payload);
                }
            }
            let now = Instant::now();
            if !notified.is_empty() || now >= deadline {
                return Ok(notified);
            }
            std::thread::sleep(NOTIFICATION_CHECK.min(deadline - now));
        }
    }

    fn name_session(&mut self, name: &str) -> QueryResult<()> {
        diesel::sql_query("SELECT set_config('application_name', $1, false)")
            .bind::<diesel::sql_types::Text, _>(name)
            .execute(self)
            .map(drop)
    }
}
