use diesel_lease::Claimable;

#[derive(Claimable)]
#[claimable(guard = notified)]
pub enum Job {
    A,
}

fn main() {}
