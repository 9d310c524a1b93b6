//! A capability's derive without its attribute, or with an option it does not take: an error at
//! the struct or at the option, with the attribute's format.
use diesel_lease::prelude::*;

diesel::table! {
    action (id) {
        id -> BigInt,
        notified -> Nullable<Timestamp>,
    }
}

#[derive(ClaimIfNull)]
#[diesel(table_name = action)]
pub struct Forgotten {
    pub id: i64,
    pub notified: Option<chrono::NaiveDateTime>,
}

#[derive(ClaimIfNull)]
#[diesel(table_name = action)]
#[claim_if_null(col = notified)]
pub struct Misnamed {
    pub id: i64,
    pub notified: Option<chrono::NaiveDateTime>,
}

// Two derives that address rows by key, one without its attribute: that error alone (the other
// derive implements the key).
#[derive(Claimable, ClaimIfNull)]
#[diesel(table_name = action)]
#[claim_if_null(column = notified)]
pub struct HalfDone {
    pub id: i64,
    pub notified: Option<chrono::NaiveDateTime>,
}

fn main() {}
