//! Seed 004: a `processed` boolean, claimed or locked.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    test (id) {
        id -> BigInt,
        data -> Text,
        processed -> Bool,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = test)]
#[claimable(state = processed, ready = false, claimed = true)]
pub struct Test {
    pub id: i64,
    pub data: String,
    pub processed: bool,
}

#[allow(dead_code)]
fn work(conn: &mut SqliteConnection) -> diesel_lease::Result<()> {
    let _claimed: Option<Test> = Test::claim_next(conn)?;
    let _batch: Vec<Test> = Test::claim_batch(conn, 10)?;
    let _locked: Option<Test> = conn.transaction(Test::lock_next)?;
    let _only_a: Option<Test> =
        conn.transaction(|conn| Test::lock_next_where(conn, test::data.like("a%")))?;
    let _done: Option<()> = Test::with_next_locked(conn, |conn, row: Test| {
        diesel::update(test::table.find(row.id))
            .set(test::data.eq("seen"))
            .execute(conn)
            .map(|_| ())
    })?;
    Ok(())
}
