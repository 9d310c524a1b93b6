//! A control table with a resource column is asked for a whole-table semaphore, and one that
//! queues for one resource is asked for a named resource: each is a compile error that says
//! which form the table takes.
use diesel_lease::prelude::*;

diesel::table! {
    process_control (queue_position) {
        queue_position -> Integer,
        requesting_id -> Text,
        resource -> Text,
        granted -> Bool,
        expires_at -> BigInt,
    }
}

diesel::table! {
    basic_control (queue_position) {
        queue_position -> Integer,
        requesting_id -> Text,
        granted -> Bool,
        expires_at -> BigInt,
    }
}

#[derive(ControlTable)]
#[diesel(table_name = process_control, primary_key(queue_position))]
#[control_table(ticket = queue_position, owner = requesting_id, resource = resource)]
pub struct ProcessControl {
    pub queue_position: i32,
}

#[derive(ControlTable)]
#[diesel(table_name = basic_control, primary_key(queue_position))]
#[control_table(ticket = queue_position, owner = requesting_id)]
pub struct BasicControl {
    pub queue_position: i32,
}

fn main() {
    let _ = ProcessControl::table_semaphore(2);
    let _ = BasicControl::semaphore("etl", 2);
}
