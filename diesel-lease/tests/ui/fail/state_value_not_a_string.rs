//! Issue 22: `ready = 1` on a `String` state gave "`String: From<{integer}>`" at the field.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    importjobs (id) {
        id -> BigInt,
        statuscode -> Text,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = importjobs)]
#[claimable(state = statuscode, ready = 1, claimed = "running", done = true, failed = 2.to_string())]
pub struct ImportJob {
    pub id: i64,
    pub statuscode: String,
}

fn main() {}
