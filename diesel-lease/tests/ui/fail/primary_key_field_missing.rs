use diesel_lease::prelude::*;

diesel::table! {
    mailing (campaign_id, user_id) {
        campaign_id -> Integer,
        user_id -> BigInt,
        sent_by -> Nullable<Text>,
    }
}

#[derive(ClaimIfNull)]
#[diesel(table_name = mailing, primary_key(campaign_id, user_id))]
#[claim_if_null(column = sent_by)]
pub struct Mailing {
    pub campaign_id: i32,
    pub sent_by: Option<String>,
}

fn main() {}
