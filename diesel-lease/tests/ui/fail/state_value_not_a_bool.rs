use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    test (id) {
        id -> BigInt,
        processed -> Bool,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = test)]
#[claimable(state = processed, ready = 0, claimed = "true", done = "done")]
pub struct Test {
    pub id: i64,
    pub processed: bool,
}

fn main() {}
