use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> SmallInt,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready("0", 1), claimed = "running", done = 40000, failed = false)]
pub struct Job {
    pub id: i64,
    pub status: i16,
}

fn main() {}
