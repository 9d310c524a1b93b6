//! Seed 002's follow-up row, inserted once, without reading it back.
use diesel::prelude::*;
use diesel_lease::prelude::*;
use diesel_lease::InsertOutcome;

diesel::table! {
    notification (id) {
        id -> BigInt,
        previous_notification -> BigInt,
        body -> Text,
    }
}

#[derive(Insertable, InsertOnce)]
#[diesel(table_name = notification)]
pub struct NewNotification {
    pub id: i64,
    pub previous_notification: i64,
    pub body: String,
}

#[allow(dead_code)]
fn follow_up(conn: &mut SqliteConnection, next: NewNotification) -> diesel_lease::Result<bool> {
    let outcome: InsertOutcome<()> = next.insert_once(conn)?;
    Ok(matches!(outcome, InsertOutcome::Inserted(_)))
}
