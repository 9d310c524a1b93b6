use diesel_lease::prelude::*;

#[derive(Claimable)]
#[claimable(claim_if_null = notified)]
pub enum Job {
    A,
}

fn main() {}
