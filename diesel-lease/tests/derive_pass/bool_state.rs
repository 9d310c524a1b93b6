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
    let _claimed: Option<Test> = Test::claim().row(conn)?;
    let _batch: Vec<Test> = Test::claim().batch(10).rows(conn)?;
    let _locked: Option<Test> = conn.transaction(|conn| Test::claim().locked(conn))?;
    let _only_a: Option<Test> =
        conn.transaction(|conn| Test::claim().filter(test::data.like("a%")).locked(conn))?;
    let _done: Option<()> = Test::claim().locked_with(conn, |conn, row: Test| {
        diesel::update(test::table.find(row.id))
            .set(test::data.eq("seen"))
            .execute(conn)
            .map(|_| ())
    })?;
    Ok(())
}
