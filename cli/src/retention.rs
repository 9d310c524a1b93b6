//! `purge` and `redrive`: retention and dead-letter redrive on a claimable table described on
//! the command line, with the library's own statements (`claim::retention`): a purge deletes
//! done and dead rows older than a period in batches, each its own transaction; a redrive moves
//! dead rows back to ready, attempts reset (kept counting without an owner column).

use diesel_lease::__private::{purge_table, redrive_table, RowShape};
use diesel_lease::__private::{StateLiteral, TimeColumn};
use diesel_lease::claim::Retention;
use serde_json::json;

use crate::backend::{CliConnection, ColumnInfo};
use crate::dialect::{has_time_zone, CliDialect, Ident};
use crate::doctor::{leak, state_value};
use crate::report::{confirm, say, Outcome};
use crate::{PurgeArgs, RedriveArgs, ResetColumns};

/// The table's columns, and a lookup that names what is missing.
struct Columns<'a> {
    table: &'a str,
    columns: Vec<ColumnInfo>,
}

impl Columns<'_> {
    fn read<'a, C: CliConnection>(conn: &mut C, table: &'a str) -> Result<Columns<'a>, String> {
        let columns = conn
            .columns(table)
            .map_err(|e| format!("cannot read the columns of `{table}`: {e}"))?;
        if columns.is_empty() {
            return Err(format!("no table `{table}`"));
        }
        Ok(Columns { table, columns })
    }

    /// The catalog's spelling: MySQL and SQLite read names without regard to case.
    fn get(&self, name: &str) -> Result<&ColumnInfo, String> {
        self.columns
            .iter()
            .find(|c| c.name == name)
            .or_else(|| {
                self.columns
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(name))
            })
            .ok_or_else(|| format!("`{}` has no column `{name}`", self.table))
    }

    fn name(&self, name: &Option<String>) -> Result<Option<&'static str>, String> {
        name.as_deref()
            .map(|n| self.get(n).map(|c| leak(&c.name)))
            .transpose()
    }

    fn time(&self, name: &str) -> Result<TimeColumn, String> {
        let c = self.get(name)?;
        Ok(TimeColumn {
            name: leak(&c.name),
            with_time_zone: has_time_zone(&c.type_name),
            nullable: c.nullable != 0,
        })
    }

    fn pk(&self) -> Result<&'static [&'static str], String> {
        let mut pk: Vec<&ColumnInfo> = self.columns.iter().filter(|c| c.pk > 0).collect();
        pk.sort_by_key(|c| c.pk);
        if pk.is_empty() {
            return Err(format!(
                "`{}` has no primary key: batches address rows by it",
                self.table
            ));
        }
        let pk: Vec<&'static str> = pk.iter().map(|c| leak(&c.name)).collect();
        Ok(Box::leak(pk.into_boxed_slice()))
    }

    fn state<DB: CliDialect>(
        &self,
        column: &str,
        value: &Option<String>,
    ) -> Result<Option<StateLiteral>, String> {
        let state = self.get(column)?;
        value
            .as_deref()
            .map(|v| state_value::<DB>(v, state))
            .transpose()
    }
}

pub(crate) fn purge<C: CliConnection>(conn: &mut C, args: &PurgeArgs, json: bool) -> Outcome {
    if args.done.is_none() && args.failed.is_none() {
        return Err("give the states to purge: --done and/or --failed".into());
    }
    let columns = Columns::read(conn, &args.table)?;
    let shape = RowShape {
        pk: columns.pk()?,
        state: leak(&columns.get(&args.state_column)?.name),
        ready: None,
        ready_states: &[],
        done: columns.state::<C::Backend>(&args.state_column, &args.done)?,
        failed: columns.state::<C::Backend>(&args.state_column, &args.failed)?,
        owner: None,
        attempts: None,
        error: None,
        available_at: None,
    };
    let age = columns.time(&args.age_column)?;
    let states: Vec<&str> = [&args.done, &args.failed]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    confirm(
        &format!(
            "`{}`: rows in {} whose `{}` is older than {:?} will be deleted",
            args.table,
            states.join(" or "),
            age.name,
            args.older_than
        ),
        "delete them",
        args.yes,
    )?;
    let retention = Retention::older_than(args.older_than).batch_size(args.batch);
    let purged = purge_table(conn, &Ident(&args.table), &shape, age, &retention)
        .map_err(|e| format!("cannot purge `{}`: {e}", args.table))?;
    say(
        json,
        json!({"table": args.table, "deleted": purged.deleted, "batches": purged.batches, "largest_batch": purged.largest_batch}),
        || {
            format!(
                "deleted {} rows of `{}` in {} batches of at most {}\n",
                purged.deleted, args.table, purged.batches, args.batch
            )
        },
    )
}

pub(crate) fn redrive<C: CliConnection>(conn: &mut C, args: &RedriveArgs, json: bool) -> Outcome {
    let rows = DeadRows {
        table: &args.table,
        state_column: &args.state_column,
        ready: &args.ready,
        failed: &args.failed,
        reset: &args.reset,
    };
    let how_many = args
        .limit
        .map_or_else(|| "every".to_string(), |n| format!("up to {n}"));
    confirm(
        &format!(
            "`{}`: {how_many} rows in {} will go back to {}",
            args.table, args.failed, args.ready
        ),
        "redrive them",
        args.yes,
    )?;
    let moved = redrive_rows(conn, &rows, args.limit, args.batch)?;
    say(
        json,
        json!({"table": args.table, "redriven": moved.deleted, "batches": moved.batches}),
        || {
            format!(
                "moved {} rows of `{}` from {} back to {}\n",
                moved.deleted, args.table, args.failed, args.ready
            )
        },
    )
}

/// A table's dead rows, described at run time (by `redrive`'s flags or a `serve --table`).
#[derive(Debug)]
pub(crate) struct DeadRows<'a> {
    pub(crate) table: &'a str,
    pub(crate) state_column: &'a str,
    /// The state they go back to.
    pub(crate) ready: &'a str,
    /// The dead-letter state.
    pub(crate) failed: &'a str,
    /// The columns it resets.
    pub(crate) reset: &'a ResetColumns,
}

/// Moves `rows` back to ready (at most `limit`, `batch` per transaction; see
/// `Queue::redrive`).
pub(crate) fn redrive_rows<C: CliConnection>(
    conn: &mut C,
    rows: &DeadRows<'_>,
    limit: Option<u64>,
    batch: usize,
) -> Result<diesel_lease::claim::Purged, String> {
    let columns = Columns::read(conn, rows.table)?;
    let shape = RowShape {
        pk: columns.pk()?,
        state: leak(&columns.get(rows.state_column)?.name),
        ready: columns.state::<C::Backend>(rows.state_column, &Some(rows.ready.to_owned()))?,
        ready_states: &[],
        done: None,
        failed: columns.state::<C::Backend>(rows.state_column, &Some(rows.failed.to_owned()))?,
        owner: columns.name(&rows.reset.owner_column)?,
        attempts: columns.name(&rows.reset.attempts_column)?,
        error: columns.name(&rows.reset.error_column)?,
        available_at: rows
            .reset
            .available_at_column
            .as_deref()
            .map(|c| columns.time(c))
            .transpose()?,
    };
    redrive_table(conn, &Ident(rows.table), &shape, None, limit, batch)
        .map_err(|e| format!("cannot redrive `{}`: {e}", rows.table))
}
