//! Seed 002 on a composite key: one mailing per (campaign, user), sent at most once.
use diesel::prelude::*;
use diesel_lease::prelude::*;

diesel::table! {
    mailing (campaign_id, user_id) {
        campaign_id -> Integer,
        user_id -> BigInt,
        sent_by -> Nullable<Text>,
    }
}

#[derive(Debug, Queryable, Selectable, ClaimIfNull)]
#[diesel(table_name = mailing, primary_key(campaign_id, user_id))]
#[claim_if_null(column = sent_by)]
pub struct Mailing {
    pub campaign_id: i32,
    pub user_id: i64,
    pub sent_by: Option<String>,
}

#[allow(dead_code)]
fn send(conn: &mut SqliteConnection, m: &Mailing) -> diesel_lease::Result<bool> {
    let by_key = Mailing::claim_if_null_by_pk(conn, (m.campaign_id, m.user_id), "worker-1")?;
    let by_row = m.claim_if_null(conn, "worker-2")?;
    Ok(by_key || by_row)
}
