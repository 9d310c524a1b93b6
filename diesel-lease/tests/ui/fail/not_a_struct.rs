use diesel_lease::prelude::*;

#[derive(ClaimIfNull)]
#[claim_if_null(column = notified)]
pub enum Job {
    A,
}

fn main() {}
