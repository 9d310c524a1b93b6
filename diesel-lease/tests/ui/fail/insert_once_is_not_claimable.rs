//! Each capability is its own trait: a model that is only a follow-up insert cannot be claimed.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    notification (id) {
        id -> BigInt,
        action_id -> BigInt,
    }
}

#[derive(Insertable, InsertOnce)]
#[diesel(table_name = notification)]
pub struct NewNotification {
    pub action_id: i64,
}

fn main() {
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    let _ = NewNotification::claim().row(&mut conn);
}
