//! The field is an `Option`, but the column is declared NOT NULL: a release back to ready would
//! fail at run time.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    importjobs (id) {
        id -> BigInt,
        statuscode -> Text,
        worker -> Text,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = importjobs)]
#[claimable(state = statuscode, ready = "new", claimed = "running", owner = worker)]
pub struct ImportJob {
    pub id: i64,
    pub statuscode: String,
    pub worker: Option<String>,
}

fn main() {}
