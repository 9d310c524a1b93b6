//! `doctor`: EXPLAIN the statements a `claim_next` of a table sends, say whether each reads the
//! table through an index that serves it, and give the index that does when one does not.
//!
//! The statements are diesel-lease's own: the table, described as `#[claimable(…)]` describes
//! it, is a [`ClaimTarget`] with a [`ClaimShape`], and the library builds its claim statements
//! for it (`ClaimDialect::claim_statements`) exactly as for a derived model. The advised
//! index's predicate is the library's state test ([`StatesIn`]), the very text those
//! statements carry.

use std::marker::PhantomData;
use std::time::Duration;

use diesel::sql_types::{Timestamp, Timestamptz};
use diesel_lease::__private::ClaimDialect;
use diesel_lease::__private::SqlDialect;
use diesel_lease::__private::TimestampType;
use diesel_lease::__private::{ClaimParts, ClaimShape, ClaimStep, ClaimTarget, StatesIn};
use diesel_lease::__private::{PauseShape, SortOrder, StateLiteral, TimeColumn};
use serde_json::{json, Value};

use crate::backend::{Access, CliConnection, ColumnInfo, IndexInfo, Plan};
use crate::dialect::{has_time_zone, is_boolean_type, CliDialect, Ident};
use crate::report::{say, Outcome};
use crate::sql::{sql_text, AllColumns, Analyze, CreateIndex};
use crate::DoctorArgs;

/// A table `doctor` was told about, as the claim statements see it: claims return all its
/// columns (`doctor` knows no model), and `ST` is its claimed-at column's SQL type.
struct Described<ST>(PhantomData<ST>);

impl<DB: SqlDialect, ST: TimestampType> ClaimTarget<DB> for Described<ST> {
    type From = Ident<'static>;
    type Select = AllColumns;
    type ClaimedAt = ST;
}

/// `doctor` runs once and exits: the names and states it describes live as long as the
/// process, as a derived model's constants do.
pub(crate) fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// The model the arguments describe, checked against the table's columns.
fn describe<DB: CliDialect>(
    args: &DoctorArgs,
    columns: &[ColumnInfo],
) -> Result<ClaimShape, String> {
    // The catalog's spelling: MySQL and SQLite read names without regard to case.
    let column = |name: &str| {
        columns
            .iter()
            .find(|c| c.name == name)
            .or_else(|| columns.iter().find(|c| c.name.eq_ignore_ascii_case(name)))
            .ok_or_else(|| format!("`{}` has no column `{name}`", args.table))
    };
    let optional = |name: &Option<String>| -> Result<Option<&'static str>, String> {
        name.as_deref()
            .map(|n| column(n).map(|c| leak(&c.name)))
            .transpose()
    };
    let state = column(&args.state_column)?;
    let state_literal = |value: &str| state_value::<DB>(value, state);
    let ready: Vec<StateLiteral> = args
        .ready
        .iter()
        .map(|v| state_literal(v))
        .collect::<Result<_, _>>()?;
    let mut pk: Vec<&ColumnInfo> = columns.iter().filter(|c| c.pk > 0).collect();
    pk.sort_by_key(|c| c.pk);
    if pk.is_empty() {
        return Err(format!(
            "`{}` has no primary key: claims address rows by it",
            args.table
        ));
    }
    let pk: Vec<&'static str> = pk.iter().map(|c| leak(&c.name)).collect();
    let available_at = match &args.available_at_column {
        Some(name) => {
            let c = column(name)?;
            Some(TimeColumn {
                name: leak(&c.name),
                with_time_zone: has_time_zone(&c.type_name),
                nullable: c.nullable != 0,
            })
        }
        None => None,
    };
    let order: Vec<(&'static str, SortOrder)> = if args.order_by.is_empty() {
        // The derive's default: higher priority first, then due rows first, then by key.
        let priority = optional(&args.priority_column)?.map(|c| (c, SortOrder::Desc));
        let ascending = available_at
            .iter()
            .map(|c| c.name)
            .chain(pk.iter().copied())
            .map(|c| (c, SortOrder::Asc));
        priority.into_iter().chain(ascending).collect()
    } else {
        args.order_by
            .iter()
            .map(|o| {
                let (name, dir) = match o.rsplit_once(':') {
                    Some((c, d)) if d.eq_ignore_ascii_case("desc") => (c, SortOrder::Desc),
                    Some((c, d)) if d.eq_ignore_ascii_case("asc") => (c, SortOrder::Asc),
                    Some((_, d)) => {
                        return Err(format!("unknown order `{d}` in `{o}`: use asc or desc"))
                    }
                    None => (o.as_str(), SortOrder::Asc),
                };
                Ok((leak(&column(name)?.name), dir))
            })
            .collect::<Result<_, _>>()?
    };
    if args.timeout.is_some() && args.claimed_at_column.is_none() {
        return Err("--timeout needs --claimed-at-column: a claim's age is read from it".into());
    }
    Ok(ClaimShape {
        pk: Box::leak(pk.into_boxed_slice()),
        state: leak(&state.name),
        ready: Box::leak(ready.into_boxed_slice()),
        claimed: state_literal(&args.claimed)?,
        failed: args.failed.as_deref().map(state_literal).transpose()?,
        owner: optional(&args.owner_column)?,
        claimed_at: optional(&args.claimed_at_column)?,
        attempts: optional(&args.attempts_column)?,
        // As the derive decides it for a model of this table: Diesel maps a NOT NULL column
        // to a plain integer field, a nullable one to an `Option`.
        attempts_nullable: match &args.attempts_column {
            Some(name) => column(name)?.nullable != 0,
            None => false,
        },
        max_attempts: args.max_attempts,
        available_at,
        order: Box::leak(order.into_boxed_slice()),
        // A pausable model's claims also look up its pauses, by primary key.
        pause: (args.pausable || args.pause_key_column.is_some())
            .then(|| {
                Ok::<_, String>(PauseShape {
                    key: optional(&args.pause_key_column)?,
                })
            })
            .transpose()?,
    })
}

/// A state value typed on the command line, as the derive writes the literal of the state
/// field's type: `NULL` for `None`, an integer or `true`/`false` for a numeric or boolean column,
/// else text, quoted as diesel-lease quotes it.
pub(crate) fn state_value<DB: CliDialect>(
    value: &str,
    state: &ColumnInfo,
) -> Result<StateLiteral, String> {
    if value == "NULL" {
        return Ok(StateLiteral::NULL);
    }
    let boolean = match value.to_ascii_lowercase().as_str() {
        "true" => Some("TRUE"),
        "false" => Some("FALSE"),
        _ => None,
    };
    let text = if DB::is_integer_type(&state.type_name) {
        match (value.parse::<i64>(), boolean) {
            (Ok(n), _) => n.to_string(),
            (Err(_), Some(b)) => b.to_string(),
            (Err(_), None) => {
                return Err(format!(
                    "`{value}` is not an integer, and the state column `{}` is `{}`",
                    state.name, state.type_name
                ))
            }
        }
    } else if is_boolean_type(&state.type_name) {
        boolean.map(str::to_string).ok_or_else(|| {
            format!(
                "`{value}` is not true or false, and the state column `{}` is `{}`",
                state.name, state.type_name
            )
        })?
    } else {
        StateLiteral::quote_text(value).ok_or_else(|| {
            format!("the state `{value}` has a backslash or NUL, which the derive refuses too")
        })?
    };
    StateLiteral::checked(leak(&text)).ok_or_else(|| format!("`{value}` is not a state value"))
}

/// What a statement's plan does with the table.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    /// Through indexes that hold only rows of the states it reads, or that it searches by state.
    Serves(Vec<String>),
    /// Walking the primary key and filtering on the state.
    PrimaryKey(String),
    /// Reading the whole table (`sorted`: and sorting it).
    WholeTable { sorted: bool },
    /// Through an index that also holds rows of states it never reads.
    NotServing(String),
    /// Through serving indexes, but sorting what they find (each claim sorts every match).
    Sorts(Vec<String>),
    /// The plan does not show how it reads the table.
    Unclear,
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

/// Whether `index`, read as `access` says, gives a step only rows of the states it reads: a
/// partial index (the planner proved the statement implies its predicate; for a step on
/// claimed rows, one whose predicate names no ready state), or an index searched on its
/// leading column, the state.
fn serves(step: ClaimStep, index: &IndexInfo, access: &Access, shape: &ClaimShape) -> bool {
    match &index.predicate {
        Some(predicate) => {
            !step.reads_claimed_rows_only()
                || !shape.ready.iter().any(|r| {
                    let text = r.as_sql().unwrap_or("NULL");
                    mentions(predicate, text.trim_matches('\''))
                })
        }
        None => access.searched && index.leading_column() == shape.state,
    }
}

fn judge(step: ClaimStep, plan: &Plan, indexes: &[IndexInfo], shape: &ClaimShape) -> Finding {
    let index_of = |a: &Access| {
        a.index
            .as_deref()
            .and_then(|name| indexes.iter().find(|i| i.name == name))
    };
    let primary = |a: &Access| a.primary || index_of(a).is_some_and(IndexInfo::is_primary);
    // A search of the primary key is a claim's lookup of the rows it picked.
    let reads: Vec<&Access> = plan
        .accesses
        .iter()
        .filter(|a| !(a.searched && primary(a)))
        .collect();
    if reads.is_empty() {
        return Finding::Unclear;
    }
    let sorted = step.in_claim_order() && plan.sorts;
    if let Some(walk) = reads.iter().find(|a| primary(a)) {
        return match &walk.index {
            Some(name) if !sorted => Finding::PrimaryKey(name.clone()),
            None if !sorted && step.in_claim_order() => Finding::PrimaryKey("rowid".into()),
            _ => Finding::WholeTable { sorted },
        };
    }
    if reads.iter().any(|a| a.index.is_none()) {
        return Finding::WholeTable { sorted };
    }
    let mut names = Vec::new();
    for a in &reads {
        let name = a.index.clone().unwrap_or_default();
        match index_of(a) {
            Some(index) if serves(step, index, a, shape) => names.push(name),
            _ => return Finding::NotServing(name),
        }
    }
    names.dedup();
    if sorted {
        Finding::Sorts(names)
    } else {
        Finding::Serves(names)
    }
}

/// What a step does, for people.
fn doing(step: ClaimStep) -> &'static str {
    match step {
        ClaimStep::Claim => "the claim: picks the next row and claims it",
        ClaimStep::ReadyPick => "the pick of the next ready row, locked",
        ClaimStep::StaleProbe => "the look for a stale claim to rescue",
        ClaimStep::Reap => "the reap: stale claims out of attempts go to the failed state",
        ClaimStep::ReapProbe => "the look for stale claims out of attempts (the reap)",
    }
}

fn message(finding: &Finding, step: ClaimStep) -> String {
    let rows = if step.reads_claimed_rows_only() {
        "the claimed rows"
    } else {
        "the rows a claim may take"
    };
    match finding {
        Finding::Serves(names) => format!(
            "OK: reads the table through {}, which holds or finds only {rows}.",
            names_of(names)
        ),
        Finding::PrimaryKey(name) => format!(
            "SLOW AS IT GROWS: walks the primary key (`{name}`) and filters on the state: every claim steps over all rows claimed before it."
        ),
        Finding::WholeTable { sorted: true } => {
            "SLOW: reads the whole table and sorts it, on every claim.".into()
        }
        Finding::WholeTable { sorted: false } => {
            "SLOW: reads the whole table on every claim.".into()
        }
        Finding::NotServing(name) => format!(
            "SLOW AS IT GROWS: reads through index `{name}`, which also holds rows of states this statement never takes (finished rows, or the ready backlog), and steps over them."
        ),
        Finding::Sorts(names) => format!(
            "SLOW: finds {rows} through {}, then sorts all of them on every claim: no index gives them in the claim order.",
            names_of(names)
        ),
        Finding::Unclear => "UNCLEAR: the plan does not show how the table is read.".into(),
    }
}

fn names_of(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.len() {
        1 => format!("index {}", quoted[0]),
        _ => format!("indexes {}", quoted.join(", ")),
    }
}

/// The index that serves `step` on this backend: PostgreSQL and SQLite, a partial index of
/// exactly the states the step reads, on the claim order (a claim) or the claimed-at column (a
/// reap); MySQL, an index that leads with the state column, then the claim order (which serves
/// every step there).
fn index_for<DB: CliDialect>(
    step: ClaimStep,
    table: &'static str,
    shape: &ClaimShape,
    rescues: bool,
) -> CreateIndex<'static> {
    let order = shape
        .order
        .iter()
        .map(|(c, dir)| (Ident(c), *dir == SortOrder::Desc));
    let (suffix, columns, predicate) = match (DB::PARTIAL_INDEXES, step.reads_claimed_rows_only()) {
        (true, false) => (
            "claim",
            order.collect(),
            Some(StatesIn::claimable(shape, rescues)),
        ),
        (true, true) => (
            "stale",
            shape
                .claimed_at
                .map(|c| (Ident(c), false))
                .into_iter()
                .collect(),
            Some(StatesIn::claimed(shape)),
        ),
        (false, _) => (
            "claim",
            std::iter::once((Ident(shape.state), false))
                .chain(order)
                .collect(),
            None,
        ),
    };
    let name = format!("{table}_{suffix}");
    CreateIndex {
        name,
        table: Ident(table),
        columns,
        predicate,
    }
}

/// One checked statement.
struct Checked {
    step: ClaimStep,
    sql: String,
    plan: Plan,
    finding: Finding,
}

impl Checked {
    fn ok(&self) -> bool {
        matches!(self.finding, Finding::Serves(_))
    }
}

pub(crate) fn doctor<C: CliConnection>(conn: &mut C, args: &DoctorArgs, json: bool) -> Outcome {
    let columns = conn
        .columns(&args.table)
        .map_err(|e| format!("cannot read the columns of `{}`: {e}", args.table))?;
    if columns.is_empty() {
        return Err(format!("no table `{}`", args.table));
    }
    let indexes = conn
        .indexes(&args.table)
        .map_err(|e| format!("cannot list the indexes of `{}`: {e}", args.table))?;
    let shape = describe::<C::Backend>(args, &columns)?;
    let with_time_zone = shape
        .claimed_at
        .and_then(|c| columns.iter().find(|col| col.name == c))
        .is_some_and(|c| has_time_zone(&c.type_name));
    // The claimed-at column's SQL type picks the clock expression the statements compare it with.
    let state_type = columns
        .iter()
        .find(|c| c.name == shape.state)
        .map_or("", |c| c.type_name.as_str());
    let notes: Vec<String> = <C::Backend as CliDialect>::index_note(shape.state, state_type)
        .into_iter()
        .collect();
    let said = Said {
        notes,
        replication: replication_line(conn),
    };
    if with_time_zone {
        check::<C, Timestamptz>(conn, args, shape, &indexes, said, json)
    } else {
        check::<C, Timestamp>(conn, args, shape, &indexes, said, json)
    }
}

/// What doctor says beside the statements: notes on the indexes (printed with the fixes), and
/// the replication the guarantees depend on (always printed).
struct Said {
    notes: Vec<String>,
    replication: Option<String>,
}

/// The replication line: `None` for a single server (or a role that may not read the
/// replication views), else what it is and what holds there.
fn replication_line<C: CliConnection>(conn: &mut C) -> Option<String> {
    match diesel_lease::backend::check_replication(conn) {
        Ok(diesel_lease::backend::Replication::Single) | Err(_) => None,
        Ok(replication) => Some(match replication.warning() {
            Some(warning) => format!("replication: {replication}: {warning}"),
            None => format!("replication: {replication}"),
        }),
    }
}

fn check<C: CliConnection, ST: TimestampType>(
    conn: &mut C,
    args: &DoctorArgs,
    shape: ClaimShape,
    indexes: &[IndexInfo],
    said: Said,
    json: bool,
) -> Outcome {
    let Said {
        mut notes,
        replication,
    } = said;
    let table = leak(&args.table);
    let timeout = args
        .timeout
        .map(|t: Duration| i64::try_from(t.as_micros()).unwrap_or(i64::MAX));
    let parts = ClaimParts::<Described<ST>, C::Backend>::described(
        Ident(table),
        AllColumns,
        shape,
        "diesel-lease-doctor",
        timeout,
    );
    let mut checked = Vec::new();
    for statement in <C as ClaimDialect>::claim_statements(&parts) {
        let plan = conn
            .plan(&*statement.statement, table)
            .map_err(|e| format!("cannot EXPLAIN the claim on `{table}`: {e}"))?;
        let finding = judge(statement.step, &plan, indexes, &shape);
        checked.push(Checked {
            step: statement.step,
            sql: <C::Backend as CliDialect>::debug_sql(&*statement.statement),
            plan,
            finding,
        });
    }
    let order_is_pk = shape.order.len() == shape.pk.len()
        && shape.order.iter().zip(shape.pk).all(|((c, _), pk)| c == pk);
    let drifts = <C::Backend as CliDialect>::PRIMARY_KEY_ORDER_DRIFTS && order_is_pk;
    let all_ok = checked.iter().all(Checked::ok);
    // The fixes: the index of each step that has none; in primary-key order on a backend whose
    // planner drifts onto the primary key, the claim order first.
    let mut fixes: Vec<String> = Vec::new();
    let mut order_first = false;
    for c in checked
        .iter()
        .filter(|c| !c.ok() || (drifts && !c.step.reads_claimed_rows_only()))
    {
        if drifts && !c.step.reads_claimed_rows_only() {
            order_first = true;
            continue;
        }
        let ddl = index_for::<C::Backend>(c.step, table, &shape, parts.rescues());
        let text = if indexes.iter().any(|i| i.name == ddl.name) {
            // Advised before, and not used: the planner's statistics may predate it, or another
            // index looks better to it.
            notes.push(format!(
                "index `{}` exists but the plan does not use it: after fresh statistics the planner sees what it holds; if it still prefers another index, drop that one or give it a different order",
                ddl.name
            ));
            sql_text::<C::Backend, _>(&Analyze(Ident(table))).map_err(|e| e.to_string())?
        } else {
            sql_text::<C::Backend, _>(&ddl).map_err(|e| e.to_string())?
        } + ";";
        if !fixes.contains(&text) {
            fixes.push(text);
        }
    }
    let order_advice = format!(
        "claim in the order of a dedicated column, an enqueue time, a sequence or a priority (#[claimable(order_by(enqueued_at, {pk}))]), then run doctor with that --order-by for its index: in primary-key order the planner can switch to walking the primary key as the backlog grows, whatever index serves the claim now (BENCHMARKS.md, \"Consecutive claims\")",
        pk = shape.pk.join(", ")
    );
    let (verdict, headline) = match (all_ok, drifts) {
        (true, false) => ("ok", "OK: every statement of the claim reads the table through an index that serves it.".to_string()),
        (true, true) => ("ok_for_now", format!("OK FOR NOW: every statement reads the table through an index that serves it, but the claim's order is the primary key's.\nto make it last: {order_advice}")),
        (false, _) if checked.iter().any(|c| matches!(c.finding, Finding::WholeTable { .. } | Finding::Sorts(_))) => ("slow", "SLOW: a claim reads the whole table, or sorts every row it may take.".to_string()),
        (false, _) => ("slow_as_it_grows", "SLOW AS IT GROWS: a claim steps over rows it cannot take, more with every claim.".to_string()),
    };
    let ok = all_ok;
    let value = json!({
        "table": table,
        "backend": <C::Backend as CliDialect>::NAME,
        "statements": checked.iter().map(|c| json!({
            "step": format!("{:?}", c.step),
            "what": doing(c.step),
            "sql": c.sql,
            "plan": c.plan.lines,
            "ok": c.ok(),
            "message": message(&c.finding, c.step),
        })).collect::<Vec<Value>>(),
        "verdict": verdict,
        "ok": ok,
        "message": headline,
        "fix": fixes,
        "notes": notes,
        "replication": replication,
        "claim_order_first": order_first && !ok,
    });
    say(json, value, || {
        let mut text = format!(
            "the statements of a claim_next on `{table}` ({}), and their plans:\n",
            <C::Backend as CliDialect>::NAME
        );
        for (i, c) in checked.iter().enumerate() {
            text.push_str(&format!("\n{}. {}\n   {}\n", i + 1, doing(c.step), c.sql));
            for line in &c.plan.lines {
                text.push_str("     ");
                text.push_str(line);
                text.push('\n');
            }
            text.push_str("   ");
            text.push_str(&message(&c.finding, c.step));
            text.push('\n');
        }
        text.push('\n');
        text.push_str(&headline);
        text.push('\n');
        if let Some(line) = &replication {
            text.push_str(line);
            text.push('\n');
        }
        if !ok {
            if order_first {
                text.push_str(&format!("first, {order_advice}\n"));
            }
            if !fixes.is_empty() {
                text.push_str("fix (then run doctor again):\n");
                for fix in &fixes {
                    text.push_str("  ");
                    text.push_str(fix);
                    text.push('\n');
                }
            }
            for note in &notes {
                text.push_str(note);
                text.push('\n');
            }
        }
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str, kind: &str, columns: &str, predicate: Option<&str>) -> IndexInfo {
        IndexInfo {
            name: name.into(),
            kind: kind.into(),
            columns: columns.into(),
            predicate: predicate.map(Into::into),
        }
    }

    fn via(name: &str, searched: bool) -> Access {
        Access {
            index: Some(name.into()),
            primary: false,
            searched,
        }
    }

    const READY: &[StateLiteral] = &[StateLiteral::sql("'ready'")];
    const EMPTY_SHAPE: ClaimShape = ClaimShape {
        pk: &[],
        state: "",
        ready: &[],
        claimed: StateLiteral::NULL,
        failed: None,
        owner: None,
        claimed_at: None,
        attempts: None,
        attempts_nullable: false,
        max_attempts: None,
        available_at: None,
        order: &[],
        pause: None,
    };
    const SHAPE: ClaimShape = ClaimShape {
        pk: &["id"],
        state: "status",
        ready: READY,
        claimed: StateLiteral::sql("'running'"),
        ..EMPTY_SHAPE
    };

    #[test]
    fn plans_are_judged_by_the_indexes_they_read() {
        let indexes = [
            index("jobs_pkey", "primary", "id", None),
            index("jobs_claim", "", "id", Some("(status = 'ready'::text)")),
            index(
                "jobs_stale",
                "",
                "claimed_at",
                Some("(status = 'running'::text)"),
            ),
            index("jobs_status", "", "status,id", None),
            index("jobs_claimed_at", "", "claimed_at", None),
        ];
        let plan = |accesses: Vec<Access>, sorts| Plan {
            lines: vec![],
            accesses,
            sorts,
        };
        let judge = |step, p: &Plan| judge(step, p, &indexes, &SHAPE);
        let pk_lookup = via("jobs_pkey", true);
        assert_eq!(
            judge(
                ClaimStep::Claim,
                &plan(vec![via("jobs_claim", false), pk_lookup.clone()], false)
            ),
            Finding::Serves(vec!["jobs_claim".into()])
        );
        assert_eq!(
            judge(
                ClaimStep::Claim,
                &plan(vec![via("jobs_pkey", false), pk_lookup], false)
            ),
            Finding::PrimaryKey("jobs_pkey".into())
        );
        assert_eq!(
            judge(
                ClaimStep::ReadyPick,
                &plan(vec![via("jobs_status", true)], false)
            ),
            Finding::Serves(vec!["jobs_status".into()])
        );
        assert_eq!(
            judge(
                ClaimStep::Claim,
                &plan(vec![via("jobs_status", true)], true)
            ),
            Finding::Sorts(vec!["jobs_status".into()])
        );
        // A reap through the claim's partial index reads the whole ready backlog.
        assert_eq!(
            judge(
                ClaimStep::Reap,
                &plan(vec![via("jobs_claim", false)], false)
            ),
            Finding::NotServing("jobs_claim".into())
        );
        assert_eq!(
            judge(ClaimStep::Reap, &plan(vec![via("jobs_stale", true)], false)),
            Finding::Serves(vec!["jobs_stale".into()])
        );
        assert_eq!(
            judge(
                ClaimStep::Reap,
                &plan(vec![via("jobs_claimed_at", true)], false)
            ),
            Finding::NotServing("jobs_claimed_at".into())
        );
        let scan = Access {
            index: None,
            primary: false,
            searched: false,
        };
        assert_eq!(
            judge(ClaimStep::Claim, &plan(vec![scan.clone()], true)),
            Finding::WholeTable { sorted: true }
        );
        assert_eq!(
            judge(ClaimStep::Reap, &plan(vec![scan], false)),
            Finding::WholeTable { sorted: false }
        );
        // SQLite's `SCAN t` walks the rowid.
        let rowid = Access {
            index: None,
            primary: true,
            searched: false,
        };
        assert_eq!(
            judge(ClaimStep::Claim, &plan(vec![rowid], false)),
            Finding::PrimaryKey("rowid".into())
        );
        assert_eq!(
            judge(ClaimStep::Claim, &plan(vec![], false)),
            Finding::Unclear
        );
        assert!(!mentions("jobs_ready_2", "jobs_ready"));
        assert!(mentions("(status = 'ready'::text)", "ready"));
    }
}
