//! Seed 002: `col1 IS NULL` qualifies a row; a claim sets it. `None` is SQL NULL everywhere.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    table1 (id) {
        id -> BigInt,
        col1 -> Nullable<Text>,
    }
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = table1)]
#[claimable(state = col1, ready = None, claimed = Some("sent".into()), done = Some(String::from("it's done")), failed = "failed".to_owned())]
pub struct Row {
    pub id: i64,
    pub col1: Option<String>,
}

#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = table1)]
#[claimable(state = col1, ready(Some("new".into()), None), claimed = Some("sent".into()), done = None)]
pub struct Reusable {
    pub id: i64,
    pub col1: Option<String>,
}

#[allow(dead_code)]
fn work(conn: &mut SqliteConnection) -> diesel_lease::Result<()> {
    let _locked: Option<Row> =
        conn.transaction(|conn| Row::claim().filter(table1::id.eq(1)).locked(conn))?;
    let _claimed: Option<Reusable> = Reusable::claim().row(conn)?;
    Ok(())
}
