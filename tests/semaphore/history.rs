//! What the semaphore tests record and read back, shared by the suite and `semaphore-worker`.
//!
//! Every contender appends `enter` right after it was granted and `exit` right before it
//! releases; the table's identity gives one global order, so replaying the rows shows how many
//! held the resource at once.

use diesel::prelude::*;
use diesel::sql_types::BigInt;

diesel::table! {
    sem_history (id) {
        id -> BigInt,
        who -> Text,
        event -> Text,
        mode -> Text,
    }
}

/// The history table, per backend (PostgreSQL, SQLite, MySQL).
pub(crate) const HISTORY_DDL: [&str; 3] = [
    "CREATE TABLE sem_history (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
     who TEXT NOT NULL, event TEXT NOT NULL, mode TEXT NOT NULL)",
    "CREATE TABLE sem_history (id INTEGER PRIMARY KEY AUTOINCREMENT, \
     who TEXT NOT NULL, event TEXT NOT NULL, mode TEXT NOT NULL)",
    "CREATE TABLE sem_history (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
     who VARCHAR(64) NOT NULL, event VARCHAR(8) NOT NULL, mode VARCHAR(16) NOT NULL)",
];

/// One history row: (id, who, event, mode).
pub(crate) type Event = (i64, String, String, String);

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Test-side access to the history and to fixed counting queries, on every backend.
pub(crate) trait SemTestConn {
    /// Appends one event.
    fn record(&mut self, who: &str, event: &str, mode: &str) -> QueryResult<()>;
    /// All events in order.
    fn history(&mut self) -> QueryResult<Vec<Event>>;
    /// Runs a fixed query returning one BIGINT column named `n`.
    fn count(&mut self, sql: &str) -> QueryResult<i64>;
}

macro_rules! sem_test_conn {
    ($feature:literal, $conn:ty) => {
        #[cfg(feature = $feature)]
        impl SemTestConn for $conn {
            fn record(&mut self, who: &str, event: &str, mode: &str) -> QueryResult<()> {
                diesel::insert_into(sem_history::table)
                    .values((
                        sem_history::who.eq(who),
                        sem_history::event.eq(event),
                        sem_history::mode.eq(mode),
                    ))
                    .execute(self)
                    .map(drop)
            }

            fn history(&mut self) -> QueryResult<Vec<Event>> {
                sem_history::table.order(sem_history::id.asc()).load(self)
            }

            fn count(&mut self, sql: &str) -> QueryResult<i64> {
                diesel::sql_query(sql)
                    .get_result::<Count>(self)
                    .map(|c| c.n)
            }
        }
    };
}

sem_test_conn!("postgres", diesel::PgConnection);
sem_test_conn!("sqlite", diesel::SqliteConnection);
sem_test_conn!("mysql", diesel::MysqlConnection);
sem_test_conn!("mariadb", diesel::mariadb::MariadbConnection);

/// The largest number of simultaneous holders in `events`, and whether a writer ever shared.
pub(crate) fn replay(events: &[Event]) -> (usize, bool) {
    let (mut readers, mut writers, mut max, mut writer_shared) = (0usize, 0usize, 0usize, false);
    for (_, _, event, mode) in events {
        let count = if mode == "exclusive" {
            &mut writers
        } else {
            &mut readers
        };
        match event.as_str() {
            "enter" => *count += 1,
            _ => *count = count.saturating_sub(1),
        }
        max = max.max(readers + writers);
        writer_shared |= writers > 1 || (writers == 1 && readers > 0);
    }
    (max, writer_shared)
}
