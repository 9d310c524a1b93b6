//! A `ClaimCursor`'s claims add `first_order_column >= <the last claimed row's value>`: on a
//! nullable column that is a `Nullable<Bool>` filter, which no claim takes (and rows whose value
//! is `NULL` would never match it). The model derives, and the cursor is refused where it claims.
use diesel::prelude::*;
use diesel_lease::claim::ClaimCursor;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        seq -> Nullable<BigInt>,
        status -> Text,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done", order_by(seq))]
pub struct Job {
    pub id: i64,
    pub seq: Option<i64>,
    pub status: String,
}

fn main() {
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    let cursor = ClaimCursor::<Job>::new(std::time::Duration::from_secs(1)).unwrap();
    let _ = Job::claim().cursor(&cursor).row(&mut conn);
}
