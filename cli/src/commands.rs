//! The commands, written once for every backend.

use std::path::Path;

use diesel_lease::admin;
use diesel_lease::BorrowConnection;
use serde_json::{json, Value};

use crate::backend::{connect, CliConnection};
use crate::queues::{semaphores_with_queues, ControlTablesArgs, Requests};
use crate::report::{confirm, duration, relative, say, LeaseState, Outcome, Table};
use crate::{Cli, Command, ReleaseWhat};

/// Connects as the URL says and runs the command.
pub(crate) fn run(cli: &Cli) -> Outcome {
    let url = cli.database_url.as_str();
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("postgres" | "postgresql") => with::<diesel::PgConnection>(cli, url),
        Some("mysql") => with::<diesel::MysqlConnection>(cli, url),
        Some("mariadb") => with::<diesel::mariadb::MariadbConnection>(cli, url),
        Some("sqlite") | None => {
            let path = url.strip_prefix("sqlite://").unwrap_or(url);
            if !matches!(cli.command, Command::Migrate) && !Path::new(path).exists() {
                return Err(format!("no SQLite database at `{path}`"));
            }
            with::<diesel::SqliteConnection>(cli, path)
        }
        Some(scheme) => Err(format!(
            "the database URL's scheme `{scheme}://` is not one diesel-lease knows: use postgres://, postgresql://, mysql://, mariadb://, sqlite:// or a SQLite file path"
        )),
    }
}

fn with<C>(cli: &Cli, url: &str) -> Outcome
where
    C: CliConnection + BorrowConnection<Conn = C>,
{
    // The page connects for each request, and stays up while the database is away.
    if let Command::Serve(args) = &cli.command {
        return crate::serve::serve::<C>(url, args);
    }
    let mut conn = connect::<C>(url)?;
    let json = cli.json;
    match &cli.command {
        Command::Migrate => {
            diesel_lease::run_migrations(&mut conn).map_err(|e| e.to_string())?;
            say(json, json!({"migrated": true}), || {
                "diesel-lease tables are up to date\n".into()
            })
        }
        Command::Leases => leases(&mut conn, json),
        Command::Semaphores(control) => semaphores(&mut conn, control, json),
        Command::Claims(args) => crate::claims::claims(&mut conn, args, json),
        Command::Release { what, yes } => match what {
            ReleaseWhat::Lease { name } => release_lease(&mut conn, name, *yes, json),
            ReleaseWhat::Ticket { id } => release_ticket(&mut conn, *id, *yes, json),
        },
        Command::Doctor(args) => crate::doctor::doctor(&mut conn, args, json),
        // Served above, before connecting.
        Command::Serve(_) => Ok(()),
        Command::Cancel(args) => crate::claimctl::cancel(&mut conn, args, json),
        Command::Pause(args) => crate::claimctl::pause_or_resume(&mut conn, args, true, json),
        Command::Resume(args) => crate::claimctl::pause_or_resume(&mut conn, args, false, json),
        Command::Purge(args) => crate::retention::purge(&mut conn, args, json),
        Command::Redrive(args) => crate::retention::redrive(&mut conn, args, json),
    }
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
                "state": LeaseState::of(r).as_str(),
                "acquired_at_micros": r.acquired_at_micros,
                "expires_at_micros": r.expires_at_micros,
                "expires_in_ms": (r.expires_at_micros - r.read_at_micros) / 1000,
                "next_run_micros": r.next_run_micros,
                "released_at_micros": r.released_at_micros,
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
                LeaseState::of(r).as_str().into(),
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

fn semaphores<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    control: &ControlTablesArgs,
    json: bool,
) -> Outcome {
    let all = semaphores_with_queues(conn, &control.parse()?)?;
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
                        "mode": q.mode,
                        "granted": q.granted,
                        "age_ms": q.requested_at_micros.map(|r| (s.read_at_micros - r) / 1000),
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
                "control_table": match &s.requests {
                    Requests::BuiltIn => None,
                    Requests::ControlTable(t) | Requests::Undescribed(t) => Some(t),
                },
                "queue_known": !matches!(s.requests, Requests::Undescribed(_)),
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
                    s.requests.describe().unwrap_or_else(|| "idle".into()),
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
                    q.mode.into(),
                    state,
                    q.requested_at_micros
                        .map_or("-".into(), |r| duration(s.read_at_micros - r)),
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

fn release_lease<C: CliConnection + BorrowConnection<Conn = C>>(
    conn: &mut C,
    name: &str,
    yes: bool,
    json: bool,
) -> Outcome {
    let before = diesel_lease::Lease::inspect(conn, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no lease named `{name}`"))?;
    let described = format!(
        "lease `{name}`: {}, token {}, {} {}",
        holding(&before),
        before.token,
        if before.is_held() {
            "expires"
        } else {
            "expired"
        },
        relative(before.expires_at_micros, before.read_at_micros)
    );
    confirm(&described, &format!("force release of lease `{name}`"), yes)?;
    let after = admin::force_release_lease(conn, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no lease named `{name}`"))?;
    say(
        json,
        json!({"lease": name, "holder": before.holder, "was_held": before.is_held(),
               "old_token": before.token.get(), "token": after.token.get()}),
        || {
            format!(
                "released lease `{name}` ({}): token {} -> {}; {}\n",
                holding(&before),
                before.token,
                after.token,
                match LeaseState::of(&before) {
                    LeaseState::Held => "the holder's next extend or release fails with LeaseLost",
                    LeaseState::Kept => "other nodes can take it now",
                    LeaseState::Free => "a holder that still thinks it holds it fails with LeaseLost on its next extend or release",
                }
            )
        },
    )
}

/// Who has a lease, as a forced release finds it: `held by `h``, `released by `h`, kept for
/// its at-least-for`, or `free; last held by `h`` (its holder released it or let it expire: the
/// table keeps the last holder's name).
fn holding(lease: &diesel_lease::lease::LeaseRecord) -> String {
    match LeaseState::of(lease) {
        LeaseState::Held => format!("held by `{}`", lease.holder),
        LeaseState::Kept => format!("released by `{}`, kept for its at-least-for", lease.holder),
        LeaseState::Free => format!("free; last held by `{}`", lease.holder),
    }
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
