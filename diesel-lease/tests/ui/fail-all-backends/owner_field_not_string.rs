use diesel::prelude::*;
use diesel_lease::prelude::*;

// An alias: the derive cannot read it, so the compiler's check of the field reports it.
type WorkerId = Option<i64>;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
        worker -> Nullable<Text>,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", owner = worker)]
pub struct Job {
    pub id: i64,
    pub status: String,
    pub worker: WorkerId,
}

fn main() {}
