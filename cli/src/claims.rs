//! `claims`: a claimable table's rows per state and its oldest claims, as `claims` prints them
//! and `serve`'s page shows them.

use std::time::Duration;

use serde_json::{json, Value};

use crate::backend::CliConnection;
use crate::dialect::Ident;
use crate::report::{duration, say, Outcome, Table};
use crate::sql::{ClaimStats, StateRow};
use crate::ClaimsArgs;

/// The claim timeout `claims` counts against, in µs (`--older-than`, default 15 minutes).
pub(crate) fn older_than_micros(args: &ClaimsArgs) -> i64 {
    let older_than = args.older_than.unwrap_or(Duration::from_secs(15 * 60));
    i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX)
}

/// A table's rows per state, as `claims` describes it (shared with `serve`).
pub(crate) fn claim_rows<C: CliConnection>(
    conn: &mut C,
    args: &ClaimsArgs,
) -> Result<Vec<StateRow>, String> {
    let stmt = ClaimStats {
        table: Ident(&args.table),
        state: Ident(&args.state_column),
        claimed_at: args.claimed_at_column.as_deref().map(Ident),
        older_than_micros: older_than_micros(args),
    };
    conn.load_rows(&stmt)
        .map_err(|e| format!("cannot read `{}`: {e}", args.table))
}

/// Whether `row` is in the claimed state (`--claimed`, `NULL` for `None`): a claim's age means
/// something only there (clap makes `--claimed` and `--claimed-at-column` come together), as
/// finished rows keep the claimed-at of their last claim.
pub(crate) fn is_claimed(args: &ClaimsArgs, row: &StateRow) -> bool {
    let claimed = args.claimed.as_deref().map(|c| (c != "NULL").then_some(c));
    claimed == Some(row.state.as_deref())
}

pub(crate) fn claims<C: CliConnection>(conn: &mut C, args: &ClaimsArgs, json: bool) -> Outcome {
    let older_than_micros = older_than_micros(args);
    let rows = claim_rows(conn, args)?;
    let is_claimed = |r: &StateRow| is_claimed(args, r);
    let older = duration(older_than_micros);
    let value = rows
        .iter()
        .map(|r| {
            let timed = is_claimed(r);
            json!({
                "state": r.state,
                "rows": r.n,
                "oldest_claimed_at_micros": r.oldest.filter(|_| timed),
                "oldest_age_ms": r.oldest.filter(|_| timed).map(|o| (r.now - o) / 1000),
                "older_than_timeout": timed.then_some(r.stale),
            })
        })
        .collect();
    say(
        json,
        json!({"table": args.table, "claimed": args.claimed, "timeout_ms": older_than_micros / 1000, "states": Value::Array(value)}),
        || {
            let stale_header = format!("OLDER THAN {older}");
            let mut t = Table::new(&["STATE", "ROWS", "OLDEST CLAIMED_AT", &stale_header]);
            for r in &rows {
                let timed = is_claimed(r);
                t.row(vec![
                    r.state.clone().unwrap_or_else(|| "NULL".into()),
                    r.n.to_string(),
                    r.oldest
                        .filter(|_| timed)
                        .map_or("-".into(), |o| format!("{} ago", duration(r.now - o))),
                    if timed {
                        r.stale.to_string()
                    } else {
                        "-".into()
                    },
                ]);
            }
            if rows.is_empty() {
                format!("`{}` has no rows\n", args.table)
            } else {
                t.render()
            }
        },
    )
}
