//! A state type the derive cannot read (an enum, an alias): the compiler's conversion error,
//! reported at the value rather than at the field.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    jobs (id) {
        id -> BigInt,
        status -> Text,
    }
}

#[derive(Debug)]
pub enum Status {
    New,
    Running,
}

impl From<&str> for Status {
    fn from(s: &str) -> Self {
        if s == "new" {
            Status::New
        } else {
            Status::Running
        }
    }
}

type State = Status;

#[derive(Queryable, Selectable, Claimable)]
#[diesel(table_name = jobs)]
#[claimable(state = status, ready = "new", claimed = 1)]
pub struct Job {
    pub id: i64,
    pub status: State,
}

fn main() {}
