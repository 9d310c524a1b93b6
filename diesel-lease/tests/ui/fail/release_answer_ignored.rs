//! A release's answer says whether the protected work ran protected: ignoring it is a warning
//! (here denied), through `?` as well as `unwrap`, on every kind of holder.
#![deny(unused_must_use)]
#![allow(dead_code)]

use diesel::SqliteConnection;
use diesel_lease::lease::{Lease, LeaseGuard};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::{Permit, PermitGuard};

fn guard(guard: LeaseGuard<SqliteConnection>) -> diesel_lease::Result<()> {
    guard.release()?;
    Ok(())
}

fn permit_guard(permit: PermitGuard<SqliteConnection>) {
    permit.release().unwrap();
}

fn manual(lease: &mut Lease, permit: &Permit, conn: &mut SqliteConnection) -> diesel_lease::Result<()> {
    lease.release(conn)?;
    permit.release(conn)?;
    Ok(())
}

fn checked(guard: LeaseGuard<SqliteConnection>) -> diesel_lease::Result<bool> {
    // Looked at, or discarded on purpose: no warning.
    let held = guard.release()?.was_held();
    Ok(held)
}

fn main() {}
