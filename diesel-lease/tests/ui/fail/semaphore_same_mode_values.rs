use diesel_lease::prelude::*;

diesel::table! {
    process_control (queue_position) {
        queue_position -> Integer,
        requesting_id -> Text,
        resource -> Text,
        access_type -> Text,
        granted -> Bool,
        expires_at -> BigInt,
    }
}

#[derive(ControlTable)]
#[diesel(table_name = process_control, primary_key(queue_position))]
#[control_table(
    ticket = queue_position,
    owner = requesting_id,
    mode = access_type,
    shared = "R",
    exclusive = "R"
)]
pub struct ProcessControl {
    pub queue_position: i32,
}

fn main() {}
