//! A claimed state that is also a ready state lets a claim pick a claimed row again (two workers
//! run it); a done state equal to the claimed one makes a finished row look claimed; a cancelled
//! state that is also a ready state puts a cancelled row back in the queue. States that differ
//! only in letter case or trailing spaces are one state under MySQL's default collations.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
    }
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready("new", "retry"), claimed = "retry", done = "done")]
pub struct Job {
    pub id: i64,
    pub status: String,
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "running")]
pub struct Finished {
    pub id: i64,
    pub status: String,
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready("new", "held"), claimed = "running", cancelled = "held")]
pub struct Cancelled {
    pub id: i64,
    pub status: String,
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "New", done = "done")]
pub struct CaseOnly {
    pub id: i64,
    pub status: String,
}

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "Running ")]
pub struct PaddedOnly {
    pub id: i64,
    pub status: String,
}

fn main() {}
