//! A guard set to `NULL` stays unset, so every caller would "win": the value is of the
//! column's type without `Nullable`, and an `Option` does not compile.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    mailing (id) {
        id -> BigInt,
        sent_by -> Nullable<Text>,
    }
}

#[derive(Debug, Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = mailing)]
#[claim_if_null(column = sent_by)]
pub struct Mailing {
    pub id: i64,
    pub sent_by: Option<String>,
}

fn main() {
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    Mailing::claim_if_null_by_pk(&mut conn, 1, "worker-a").unwrap();
    Mailing::claim_if_null_by_pk(&mut conn, 1, None::<String>).unwrap();
}
