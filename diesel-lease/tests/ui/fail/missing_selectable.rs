//! Issue 22: a model without `Selectable` gave a long `QueryMetadata` error at `claim_next`.
//! The backend in the message is SQLite whenever it is enabled (a default feature).
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    importjobs (id) {
        id -> BigInt,
        statuscode -> Text,
    }
}

#[derive(Queryable, Claimable)]
#[diesel(table_name = importjobs)]
#[claimable(state = statuscode, ready = "new", claimed = "running")]
pub struct ImportJob {
    pub id: i64,
    pub statuscode: String,
}

fn main() {}
