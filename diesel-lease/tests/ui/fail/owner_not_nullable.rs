//! Issue 22: a non-nullable owner gave Diesel's `CompatibleType` error at `claim_next`.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    importjobs (id) {
        id -> BigInt,
        statuscode -> Text,
        worker -> Nullable<Text>,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = importjobs)]
#[claimable(state = statuscode, ready = "new", claimed = "running", owner = worker)]
pub struct ImportJob {
    pub id: i64,
    pub statuscode: String,
    pub worker: String,
}

fn main() {}
