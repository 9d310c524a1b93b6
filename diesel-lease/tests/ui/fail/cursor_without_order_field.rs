//! A `ClaimCursor` resumes behind the claim order's first column: a model without a field for
//! it (here `seq`) cannot have one.
use diesel::prelude::*;
use diesel_lease::claim::ClaimCursor;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        seq -> BigInt,
        status -> Text,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", order_by(seq))]
pub struct Job {
    pub id: i64,
    pub status: String,
}

fn main() {
    let cursor = ClaimCursor::<Job>::new(std::time::Duration::from_secs(1)).unwrap();
    let _ = cursor;
}
