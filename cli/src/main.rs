//! `diesel-lease`: the operator's view of a farm that coordinates through its database.
//!
//! ```text
//! DATABASE_URL=postgres://… diesel-lease leases
//! diesel-lease semaphores --json
//! diesel-lease claims --table import_jobs --state-column status --claimed running --claimed-at-column claimed_at --older-than 15m
//! diesel-lease release lease nightly-report --yes
//! diesel-lease cancel --table import_jobs --state-column status --ready ready --claimed running --to cancelled 42 --yes
//! diesel-lease pause --table import_jobs --key-column tenant --key acme
//! diesel-lease doctor --table import_jobs --state-column status --ready ready --claimed running --order-by enqueued_at --order-by id
//! diesel-lease serve --table 'import_jobs --state-column status --claimed running --failed failed'
//! diesel-lease purge --table import_jobs --state-column status --done done --failed dead --age-column finished_at --older-than 30d --yes
//! diesel-lease redrive --table import_jobs --state-column status --ready ready --failed dead --attempts-column attempts --yes
//! ```
//!
//! The URL picks the backend: `postgres://` or `postgresql://`, `mysql://`, `sqlite://` or a
//! path without a scheme (a SQLite file); any other scheme is an error. Tables and columns an
//! operator names are quoted as identifiers, never pasted into SQL; values are bind parameters
//! (the state values of `doctor`'s claim statements are literals, escaped as diesel-lease
//! escapes a model's states).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod backend;
mod claimctl;
mod claims;
mod commands;
mod dialect;
mod doctor;
mod queues;
mod report;
mod retention;
mod serve;
mod sql;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Look at and repair diesel-lease's leases, semaphores and claims.
#[derive(Debug, Parser)]
#[command(name = "diesel-lease", version)]
struct Cli {
    /// The database: postgres://…, postgresql://…, mysql://…, sqlite://… or a SQLite file path.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Print JSON instead of a table (for scripts).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or update diesel-lease's built-in tables (leases, semaphores, pauses).
    Migrate,
    /// Every lease: holder, fencing token, when it expires, the next run of a periodic job.
    Leases,
    /// Every semaphore and reader/writer lock: permits, holders and waiters in ticket order.
    Semaphores(queues::ControlTablesArgs),
    /// Rows of a claimable table per state: how many, the oldest claim, claims older than a timeout.
    Claims(ClaimsArgs),
    /// Force a release (the holder is stuck or gone); the old holder is fenced.
    Release {
        #[command(subcommand)]
        what: ReleaseWhat,
        /// Do not ask for confirmation.
        #[arg(long, global = true)]
        yes: bool,
    },
    /// EXPLAIN the statements a claim sends and say whether indexes serve them (and the fix if not).
    Doctor(DoctorArgs),
    /// Serve the operator's page: leases, semaphores, claims, who holds what; refreshes itself.
    Serve(serve::ServeArgs),
    /// Cancel a row: a ready row never runs; a claimed row's holder loses its claim at its next
    /// heartbeat, and its completion is refused.
    Cancel(CancelArgs),
    /// Pause claims from a `pausable` table (or its rows of one key) across the farm: claims
    /// return nothing, waiters keep waiting.
    Pause(PauseArgs),
    /// Resume claims paused by `pause`, and wake the waiting claimers.
    Resume(PauseArgs),
    /// Delete done and dead rows older than a period, in batches (each its own transaction).
    Purge(PurgeArgs),
    /// Move dead-letter rows back to ready: owner and error cleared, attempts reset (kept
    /// counting when no owner column is given: they fence the claims then).
    Redrive(RedriveArgs),
}

#[derive(Debug, Subcommand)]
enum ReleaseWhat {
    /// Free a lease now and move its fencing token on, so the holder's next extend/release fails.
    Lease {
        /// The lease name.
        name: String,
    },
    /// Remove a semaphore ticket (held or waiting) and admit whoever is next.
    Ticket {
        /// The ticket number (see `diesel-lease semaphores`).
        id: i64,
    },
}

/// The claimable table to look at.
#[derive(Debug, clap::Args)]
struct ClaimsArgs {
    /// The table.
    #[arg(long)]
    table: String,
    /// Its state column.
    #[arg(long)]
    state_column: String,
    /// Its claimed-at column (a timestamp): shows the oldest claim and the claims older than
    /// `--older-than`, among the rows in the `--claimed` state (the only rows a claim timeout
    /// applies to: finished rows keep their claimed-at).
    #[arg(long, requires = "claimed")]
    claimed_at_column: Option<String>,
    /// The claimed state, `#[claimable(claimed = …)]`, as the table shows it (`NULL` for
    /// `None`); needs `--claimed-at-column`.
    #[arg(long, requires = "claimed_at_column")]
    claimed: Option<String>,
    /// Count claims older than this (e.g. `90s`, `15m`, `2h`; default 15m); needs
    /// `--claimed-at-column`.
    #[arg(long, value_parser = parse_duration, requires = "claimed_at_column")]
    older_than: Option<Duration>,
}

/// The claim to check: the table and its model, as `#[claimable(…)]` describes it (each flag
/// is the attribute of the same name).
#[derive(Debug, clap::Args)]
struct DoctorArgs {
    /// The table.
    #[arg(long)]
    table: String,
    /// `state = …`: its state column.
    #[arg(long)]
    state_column: String,
    /// `ready = …`: the ready state(s) a claim takes rows in (repeat for several; `NULL` for
    /// `None`).
    #[arg(long = "ready", required = true)]
    ready: Vec<String>,
    /// `claimed = …`: the state a claim writes.
    #[arg(long)]
    claimed: String,
    /// `failed = …`: the failed state, if any.
    #[arg(long)]
    failed: Option<String>,
    /// `owner = …`: the owner column, if any.
    #[arg(long)]
    owner_column: Option<String>,
    /// `claimed_at = …`: the claimed-at column, if any.
    #[arg(long)]
    claimed_at_column: Option<String>,
    /// `timeout_secs = …`: claims older than this are rescued (e.g. `300`, `5m`); needs
    /// `--claimed-at-column`.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// `attempts = …`: the attempts column, if any.
    #[arg(long)]
    attempts_column: Option<String>,
    /// `max_attempts = …`.
    #[arg(long)]
    max_attempts: Option<i64>,
    /// `available_at = …`: the not-before column, if any.
    #[arg(long)]
    available_at_column: Option<String>,
    /// `order_by(…)`: `col` or `col:desc`, repeated (default: the derive's, the not-before
    /// column if any, then the primary key).
    #[arg(long = "order-by")]
    order_by: Vec<String>,
    /// `priority = …`: the priority column, if any (higher first, then the default order).
    #[arg(long, conflicts_with = "order_by")]
    priority_column: Option<String>,
    /// `pausable`: the claims also look up the table's pauses (diesel-lease's migrations).
    #[arg(long)]
    pausable: bool,
    /// `pausable(key = …)`: the pause key column (implies `--pausable`).
    #[arg(long)]
    pause_key_column: Option<String>,
}

/// The row to cancel and its table, as `#[claimable(…)]` describes it.
#[derive(Debug, clap::Args)]
struct CancelArgs {
    /// The table.
    #[arg(long)]
    table: String,
    /// `state = …`: its state column.
    #[arg(long)]
    state_column: String,
    /// `ready = …`: the ready state(s) (repeat for several; `NULL` for `None`).
    #[arg(long = "ready", required = true)]
    ready: Vec<String>,
    /// `claimed = …`: the claimed state.
    #[arg(long)]
    claimed: String,
    /// `cancelled = …` (or `failed = …` when the model has no cancelled state): the state the
    /// row goes to.
    #[arg(long)]
    to: String,
    /// The row's primary key (a one-column key).
    key: String,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

/// The table (or key) to pause or resume.
#[derive(Debug, clap::Args)]
struct PauseArgs {
    /// The table, as its SQL name (`schema.table` outside the default schema).
    #[arg(long)]
    table: String,
    /// `pausable(key = …)`: the key column, to pause only the rows of `--key`.
    #[arg(long, requires = "key")]
    key_column: Option<String>,
    /// The key value whose rows to pause (with `--key-column`).
    #[arg(long, requires = "key_column")]
    key: Option<String>,
}

/// The rows to purge: the table, its finished states (as `#[claimable(…)]` names them), and the
/// timestamp column whose age counts.
#[derive(Debug, clap::Args)]
struct PurgeArgs {
    /// The table.
    #[arg(long)]
    table: String,
    /// `state = …`: its state column.
    #[arg(long)]
    state_column: String,
    /// `done = …`: purge rows in this state.
    #[arg(long)]
    done: Option<String>,
    /// `failed = …`: purge rows in this (dead-letter) state.
    #[arg(long)]
    failed: Option<String>,
    /// The timestamp column whose age counts (e.g. a `finished_at`, or the claimed-at column);
    /// rows where it is NULL stay.
    #[arg(long)]
    age_column: String,
    /// Delete rows older than this by the database clock (e.g. `7d`, `12h`).
    #[arg(long, value_parser = parse_duration)]
    older_than: Duration,
    /// Rows per transaction.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

/// The dead letters to move back: the table and its model's columns, as `#[claimable(…)]`
/// names them (each optional column is reset when given).
#[derive(Debug, clap::Args)]
struct RedriveArgs {
    /// The table.
    #[arg(long)]
    table: String,
    /// `state = …`: its state column.
    #[arg(long)]
    state_column: String,
    /// `ready = …`: the state redriven rows get (the model's first ready state).
    #[arg(long)]
    ready: String,
    /// `failed = …`: the dead-letter state.
    #[arg(long)]
    failed: String,
    #[command(flatten)]
    reset: ResetColumns,
    /// Move at most this many rows (default: every dead row).
    #[arg(long)]
    limit: Option<u64>,
    /// Rows per transaction.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

/// The columns a redrive resets, where the model has them (each flag is the attribute of the
/// same name).
#[derive(Debug, clap::Args)]
struct ResetColumns {
    /// `owner = …`: cleared.
    #[arg(long)]
    owner_column: Option<String>,
    /// `attempts = …`: reset to 0 when the owner column is given too; without it the attempts
    /// number is the claims' fence, and it keeps counting (a row that had used its
    /// `max_attempts` then gets one try and no retry).
    #[arg(long)]
    attempts_column: Option<String>,
    /// `error = …`: cleared.
    #[arg(long)]
    error_column: Option<String>,
    /// `available_at = …`: set to now.
    #[arg(long)]
    available_at_column: Option<String>,
}

/// `90s`, `15m`, `2h`, `1d`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 90s, 15m, 2h"))?;
    let secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("unknown unit in `{s}`: use s, m, h or d")),
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match commands::run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Servers' messages can span lines (libpq adds hints): one line for logs and scripts.
            let one_line: Vec<&str> = e.split_whitespace().collect();
            eprintln!("diesel-lease: {}", one_line.join(" "));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("2x").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn the_arguments_parse() {
        Cli::command().debug_assert();
    }

    use clap::CommandFactory;
}
