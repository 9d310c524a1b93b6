//! The commands, written once for every backend.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use diesel_lease::admin;
use diesel_lease::BorrowConnection;
use serde_json::{json, Value};

use crate::backend::{CliConnection, CliDialect, IndexInfo};
use crate::report::{duration, relative, Table};
use crate::sql::{ClaimPick, ClaimStats, Ident, StateRow};
use crate::{ClaimsArgs, Cli, Command, DoctorArgs, ReleaseWhat};

type Outcome = Result<(), String>;

/// Connects as the URL says and runs the command.
pub(crate) fn run(cli: &Cli) -> Outcome {
    let url = cli.database_url.as_str();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        with::<diesel::PgConnection>(cli, url)
    } else if url.starts_with("mysql://") {
        with::<diesel::MysqlConnection>(cli, url)
    } else {
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        if !matches!(cli.command, Command::Migrate) && !Path::new(path).exists() {
            return Err(format!("no SQLite database at `{path}`"));
        }
        with::<diesel::SqliteConnection>(cli, path)
    }
}

fn with<C>(cli: &Cli, url: &str) -> Outcome
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    let mut conn = C::establish(url).map_err(|e| format!("cannot connect to the database: {e}"))?;
    diesel_lease::pool::ConnectionTuning::default()
        .apply(&mut conn)
        .map_err(|e| format!("cannot set up the connection: {e}"))?;
    let json = cli.json;
    match &cli.command {
        Command::Migrate => {
            diesel_lease::run_migrations(&mut conn).map_err(|e| e.to_string())?;
            say(json, json!({"migrated": true}), || {
                "diesel-lease tables are up to date\n".into()
            })
        }
        Command::Leases => leases(&mut conn, json),
        Command::Semaphores => semaphores(&mut conn, json),
        Command::Claims(args) => claims(&mut conn, args, json),
        Command::Release { what, yes } => match what {
            ReleaseWhat::Lease { name } => release_lease(&mut conn, name, *yes, json),
            ReleaseWhat::Ticket { id } => release_ticket(&mut conn, *id, *yes, json),
        },
        Command::Doctor(args) => doctor(&mut conn, args, json),
    }
}

/// Prints `value` as JSON, or the text `human` makes.
fn say(json: bool, value: Value, human: impl FnOnce() -> String) -> Outcome {
    let mut out = std::io::stdout().lock();
    let text = if json {
        format!("{value:#}\n")
    } else {
        human()
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the output: {e}"))
}

fn leases<C: CliConnection + BorrowConnection<Conn = C>>(conn: &mut C, json: bool) -> Outcome {
    let leases = admin::leases(conn).map_err(|e| e.to_string())?;
    let value = leases
        .iter()
        .map(|l| {
            let r = &l.record;
            json!({
                "name": l.name,
                "holder": r.holder,
                "token": r.token.get(),
                "held": r.is_held(),
                "acquired_at_micros": r.acquired_at_micros,
                "expires_at_micros": r.expires_at_micros,
                "expires_in_ms": (r.expires_at_micros - r.read_at_micros) / 1000,
                "next_run_micros": r.next_run_micros,
                "read_at_micros": r.read_at_micros,
            })
        })
        .collect();
    say(json, Value::Array(value), || {
        let mut t = Table::new(&["NAME", "HOLDER", "TOKEN", "STATE", "EXPIRES", "NEXT RUN"]);
        for l in &leases {
            let r = &l.record;
            t.row(vec![
                l.name.clone(),
                r.holder.clone(),
                r.token.get().to_string(),
                if r.is_held() { "held" } else { "free" }.into(),
                relative(r.expires_at_micros, r.read_at_micros),
                r.next_run_micros
                    .map_or("-".into(), |n| relative(n, r.read_at_micros)),
            ]);
        }
        if leases.is_empty() {
            "no leases\n".into()
        } else {
            t.render()
        }
    })
}

fn semaphores<C: CliConnection + BorrowConnection<Conn = C>>(conn: &mut C, json: bool) -> Outcome {
    let all = admin::semaphores(conn).map_err(|e| e.to_string())?;
    let value = all
        .iter()
        .map(|s| {
            let queue: Vec<Value> = s
                .queue
                .iter()
                .map(|q| {
                    json!({
                        "ticket": q.ticket,
                        "owner": q.owner,
                        "mode": q.mode.as_str(),
                        "granted": q.granted,
                        "age_ms": (s.read_at_micros - q.requested_at_micros) / 1000,
                        "held_for_ms": q.granted_at_micros.map(|g| (s.read_at_micros - g) / 1000),
                        "expires_in_ms": (q.expires_at_micros - s.read_at_micros) / 1000,
                    })
                })
                .collect();
            json!({
                "resource": s.resource,
                "permits": s.permits,
                "holders": s.queue.iter().filter(|q| q.granted).count(),
                "waiters": s.queue.iter().filter(|q| !q.granted).count(),
                "queue": queue,
            })
        })
        .collect();
    say(json, Value::Array(value), || {
        let mut t = Table::new(&[
            "RESOURCE", "PERMITS", "TICKET", "OWNER", "MODE", "STATE", "AGE", "EXPIRES",
        ]);
        for s in &all {
            if s.queue.is_empty() {
                t.row(vec![
                    s.resource.clone(),
                    s.permits.to_string(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "idle".into(),
                    "-".into(),
                    "-".into(),
                ]);
            }
            let mut place = 0;
            for q in &s.queue {
                let state = if q.granted {
                    "holding".to_string()
                } else {
                    place += 1;
                    format!("waiting #{place}")
                };
                t.row(vec![
                    s.resource.clone(),
                    s.permits.to_string(),
                    q.ticket.to_string(),
                    q.owner.clone(),
                    q.mode.as_str().into(),
                    state,
                    duration(s.read_at_micros - q.requested_at_micros),
                    relative(q.expires_at_micros, s.read_at_micros),
                ]);
            }
        }
        if all.is_empty() {
            "no semaphores\n".into()
        } else {
            t.render()
        }
    })
}

fn claims<C: CliConnection>(conn: &mut C, args: &ClaimsArgs, json: bool) -> Outcome {
    let older_than_micros = i64::try_from(args.older_than.as_micros()).unwrap_or(i64::MAX);
    let stmt = ClaimStats {
        table: Ident(&args.table),
        state: Ident(&args.state_column),
        claimed_at: args.claimed_at_column.as_deref().map(Ident),
        older_than_micros,
    };
    let rows: Vec<StateRow> = conn
        .claim_stats(stmt)
        .map_err(|e| format!("cannot read `{}`: {e}", args.table))?;
    let timed = args.claimed_at_column.is_some();
    let older = duration(older_than_micros);
    let value = rows
        .iter()
        .map(|r| {
            json!({
                "state": r.state,
                "rows": r.n,
                "oldest_claimed_at_micros": r.oldest,
                "oldest_age_ms": r.oldest.map(|o| (r.now - o) / 1000),
                "older_than_timeout": if timed { Some(r.stale) } else { None },
            })
        })
        .collect();
    say(
        json,
        json!({"table": args.table, "timeout_ms": older_than_micros / 1000, "states": Value::Array(value)}),
        || {
            let stale_header = format!("OLDER THAN {older}");
            let mut t = Table::new(&["STATE", "ROWS", "OLDEST CLAIMED_AT", &stale_header]);
            for r in &rows {
                t.row(vec![
                    r.state.clone().unwrap_or_else(|| "NULL".into()),
                    r.n.to_string(),
                    r.oldest
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

/// Asks on the terminal unless `--yes`, after showing `state`; refuses without a terminal.
fn confirm(state: &str, what: &str, yes: bool) -> Outcome {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "refusing to {what} without confirmation: stdin is not a terminal (pass --yes)"
        ));
    }
    eprintln!("{state}");
    eprint!("{what}? [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    match answer.trim() {
        "y" | "Y" | "yes" => Ok(()),
        _ => Err("aborted: nothing was changed".into()),
    }
}

fn release_lease<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    name: &str,
    yes: bool,
    json: bool,
) -> Outcome {
    let before = diesel_lease::lease::inspect(conn, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no lease named `{name}`"))?;
    let state = format!(
        "lease `{name}`: {} by `{}` with token {}, expires {}",
        if before.is_held() { "held" } else { "free" },
        before.holder,
        before.token,
        relative(before.expires_at_micros, before.read_at_micros)
    );
    confirm(&state, &format!("force release of lease `{name}`"), yes)?;
    let after = admin::force_release_lease(conn, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no lease named `{name}`"))?;
    say(
        json,
        json!({"lease": name, "holder": before.holder, "was_held": before.is_held(),
               "old_token": before.token.get(), "token": after.token.get()}),
        || {
            format!(
                "released lease `{name}` (was {} by `{}`): token {} -> {}; the old holder's next extend or release fails with LeaseLost\n",
                if before.is_held() { "held" } else { "expired" },
                before.holder,
                before.token,
                after.token
            )
        },
    )
}

fn release_ticket<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    ticket: i64,
    yes: bool,
    json: bool,
) -> Outcome {
    let (resource, owner, _, granted, _) = conn
        .admin_ticket(ticket)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no semaphore ticket {ticket}"))?;
    let state = format!(
        "ticket {ticket} of `{resource}`: {} by `{owner}`",
        if granted { "holding" } else { "waiting" }
    );
    confirm(&state, &format!("force release of ticket {ticket}"), yes)?;
    let released = admin::force_release_ticket(conn, ticket)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no semaphore ticket {ticket} (released meanwhile)"))?;
    say(
        json,
        json!({"ticket": ticket, "resource": released.resource, "owner": released.owner,
               "was_granted": released.was_granted}),
        || {
            format!(
                "released ticket {ticket} of `{}` (was {} by `{}`); the next in line is admitted, and the old holder's next heartbeat finds its permit gone\n",
                released.resource,
                if released.was_granted { "holding" } else { "waiting" },
                released.owner
            )
        },
    )
}

/// What the plan does with the claim's pick.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Through a partial index: the claimed and done rows are not in it.
    PartialIndex(String),
    /// Through an ordinary index.
    Index(String),
    /// Walking the primary key (index or rowid), filtering out every claimed row it passes.
    PrimaryKey(String),
    /// Reading the whole table (and sorting).
    Scan,
}

/// Whether `name` occurs in `text` as a whole word.
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back().is_none_or(|c| !word(c));
        let after = text[at + name.len()..]
            .chars()
            .next()
            .is_none_or(|c| !word(c));
        before && after
    })
}

fn judge(plan: &[String], indexes: &[IndexInfo], table: &str) -> Verdict {
    let text = plan.join("\n");
    if let Some(index) = indexes.iter().find(|i| mentions(&text, &i.name)) {
        return if index.is_primary() {
            Verdict::PrimaryKey(index.name.clone())
        } else if index.is_partial() {
            Verdict::PartialIndex(index.name.clone())
        } else {
            Verdict::Index(index.name.clone())
        };
    }
    let upper = text.to_ascii_uppercase();
    // SQLite's `SCAN t` without a sort walks the rowid, i.e. the INTEGER PRIMARY KEY.
    let rowid_walk = plan
        .iter()
        .any(|l| l.trim() == format!("SCAN {table}") || l.trim() == format!("SCAN TABLE {table}"))
        && !upper.contains("TEMP B-TREE");
    if rowid_walk {
        Verdict::PrimaryKey("rowid".into())
    } else {
        Verdict::Scan
    }
}

/// `name` as a reader would type it in SQL.
fn shown(name: &str) -> String {
    if name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn fix<DB: CliDialect>(args: &DoctorArgs, order: &[(Ident<'_>, bool)]) -> String {
    let columns: Vec<String> = order
        .iter()
        .map(|(c, desc)| format!("{}{}", shown(c.0), if *desc { " DESC" } else { "" }))
        .collect();
    let index = format!("{}_claimable", args.table.replace('"', ""));
    if DB::PARTIAL_INDEXES {
        let values: Vec<String> = args
            .ready
            .iter()
            .map(|v| format!("'{}'", v.replace('\'', "''")))
            .collect();
        format!(
            "CREATE INDEX {} ON {} ({}) WHERE {} IN ({});",
            shown(&index),
            shown(&args.table),
            columns.join(", "),
            shown(&args.state_column),
            values.join(", ")
        )
    } else {
        format!(
            "CREATE INDEX {} ON {} ({}, {});  -- the state first: this backend cannot use a partial index for the claim",
            shown(&index),
            shown(&args.table),
            shown(&args.state_column),
            columns.join(", ")
        )
    }
}

/// Whether the claim order is exactly the primary key's columns (PostgreSQL's index definition
/// ends with them: `… USING btree (id)`).
fn order_is_primary_key(indexes: &[IndexInfo], order: &[(Ident<'_>, bool)]) -> bool {
    let columns: Vec<&str> = order.iter().map(|(c, _)| c.0).collect();
    let wanted = format!("({})", columns.join(", "));
    indexes
        .iter()
        .any(|i| i.is_primary() && i.definition.ends_with(&wanted))
}

fn doctor<C: CliConnection>(conn: &mut C, args: &DoctorArgs, json: bool) -> Outcome {
    let order: Vec<(Ident<'_>, bool)> = args
        .order_by
        .iter()
        .map(|o| match o.rsplit_once(':') {
            Some((column, dir)) if dir.eq_ignore_ascii_case("desc") => Ok((Ident(column), true)),
            Some((column, dir)) if dir.eq_ignore_ascii_case("asc") => Ok((Ident(column), false)),
            Some((_, dir)) => Err(format!("unknown order `{dir}` in `{o}`: use asc or desc")),
            None => Ok((Ident(o.as_str()), false)),
        })
        .collect::<Result<_, _>>()?;
    let pick = ClaimPick {
        table: Ident(&args.table),
        state: Ident(&args.state_column),
        ready: &args.ready,
        order: order.clone(),
    };
    let plan = conn
        .plan(pick)
        .map_err(|e| format!("cannot EXPLAIN the claim on `{}`: {e}", args.table))?;
    let indexes = conn
        .indexes(&args.table)
        .map_err(|e| format!("cannot list the indexes of `{}`: {e}", args.table))?;
    let verdict = judge(&plan, &indexes, &args.table);
    let fix = fix::<C::Backend>(args, &order);
    let by_pk = "claim in the order of a dedicated column (#[claimable(order_by(seq))], or a created-at or priority column) and index that column: the primary key can then no longer serve the claim's ORDER BY (BENCHMARKS.md, \"Consecutive claims\")";
    let (ok, says) = match &verdict {
        Verdict::PartialIndex(name) if order_is_primary_key(&indexes, &order) => (
            true,
            format!("OK FOR NOW: the claim picks rows through partial index `{name}`, but its order is the primary key's, so the planner can switch to walking the primary key as the backlog grows (BENCHMARKS.md, \"Consecutive claims\").\nto make it last: {by_pk}"),
        ),
        Verdict::PartialIndex(name) => (
            true,
            format!("OK: the claim picks rows through partial index `{name}`; claimed and finished rows are not in it."),
        ),
        Verdict::Index(name) if !<C::Backend as CliDialect>::PARTIAL_INDEXES => (
            true,
            format!("OK: the claim picks rows through index `{name}` (this backend cannot use a partial index for the claim's bound states; an index that leads with the state column is the best there is)."),
        ),
        Verdict::Index(name) => (
            false,
            format!("SLOW AS IT GROWS: the claim uses index `{name}`, which is not partial: every claimed and finished row stays in it and each claim may step over them.\nfix: {fix}"),
        ),
        Verdict::PrimaryKey(name) => (
            false,
            format!(
                "SLOW AS IT GROWS: the planner walks the primary key (`{name}`) and filters on the state: every claim steps over all rows claimed before it, so claims slow down as the backlog drains.\nfix: {fix}{}",
                if <C::Backend as CliDialect>::PARTIAL_INDEXES { format!("\nand {by_pk}") } else { String::new() }
            ),
        ),
        Verdict::Scan => (
            false,
            format!("SLOW: the claim reads the whole table (and sorts it) on every call.\nfix: {fix}"),
        ),
    };
    let kind = match &verdict {
        Verdict::PartialIndex(_) => "partial_index",
        Verdict::Index(_) => "index",
        Verdict::PrimaryKey(_) => "primary_key",
        Verdict::Scan => "scan",
    };
    say(
        json,
        json!({"table": args.table, "plan": plan, "verdict": kind, "ok": ok, "message": says,
               "fix": if ok { Value::Null } else { Value::String(fix.clone()) }}),
        || {
            let mut text = String::from("plan of the claim's row pick:\n");
            for line in &plan {
                text.push_str("  ");
                text.push_str(line);
                text.push('\n');
            }
            text.push_str(&says);
            text.push('\n');
            text
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str, kind: &str, definition: &str) -> IndexInfo {
        IndexInfo {
            name: name.into(),
            kind: kind.into(),
            definition: definition.into(),
        }
    }

    #[test]
    fn plans_are_judged_by_the_index_they_name() {
        let indexes = [
            index(
                "jobs_pkey",
                "primary",
                "CREATE UNIQUE INDEX jobs_pkey ON jobs (id)",
            ),
            index(
                "jobs_ready",
                "",
                "CREATE INDEX jobs_ready ON jobs (id) WHERE status = 'ready'",
            ),
            index(
                "jobs_status",
                "",
                "CREATE INDEX jobs_status ON jobs (status)",
            ),
        ];
        let plan = |l: &str| vec![l.to_string()];
        assert_eq!(
            judge(
                &plan("->  Index Scan using jobs_pkey on jobs"),
                &indexes,
                "jobs"
            ),
            Verdict::PrimaryKey("jobs_pkey".into())
        );
        assert_eq!(
            judge(
                &plan("->  Index Scan using jobs_ready on jobs"),
                &indexes,
                "jobs"
            ),
            Verdict::PartialIndex("jobs_ready".into())
        );
        assert_eq!(
            judge(
                &plan("SEARCH jobs USING INDEX jobs_status (status=?)"),
                &indexes,
                "jobs"
            ),
            Verdict::Index("jobs_status".into())
        );
        assert_eq!(
            judge(&plan("->  Seq Scan on jobs"), &indexes, "jobs"),
            Verdict::Scan
        );
        assert_eq!(
            judge(&plan("SCAN jobs"), &[], "jobs"),
            Verdict::PrimaryKey("rowid".into())
        );
        assert_eq!(
            judge(
                &[
                    "SCAN jobs".to_string(),
                    "USE TEMP B-TREE FOR ORDER BY".to_string()
                ],
                &[],
                "jobs"
            ),
            Verdict::Scan
        );
        assert!(!mentions("jobs_ready_2", "jobs_ready"));
        assert!(mentions("key=jobs_ready extra=", "jobs_ready"));
    }
}
