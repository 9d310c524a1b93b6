//! PostgreSQL's claims: one `WITH picked AS (SELECT … FOR UPDATE SKIP LOCKED) UPDATE …
//! RETURNING` statement, and a trigger that announces new rows to waiters.

use std::any::{Any, TypeId};
use std::borrow::Cow;

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::PgConnection;

use super::batch::{at_positions, load_unnest_positions, shared_owner, update_returning, BatchRow};
use super::dialect::{ClaimDialect, ClaimSqlDialect};
use super::statements::{
    claim_assignments, column_list, pick_from, push_finish_assignments, push_stamp_check,
    qualified, ClaimModel, ClaimParts, ClaimSql, ClaimStmt, ClaimTarget, Dynamic, Exec,
};
use super::{Claimable, Finish};
use crate::backend::Dialect;
use crate::notify::postgres::channel;

impl ClaimSqlDialect for Pg {
    /// The claim in one statement:
    /// `WITH picked AS (SELECT pk … ORDER BY … LIMIT $n FOR UPDATE SKIP LOCKED)
    ///  UPDATE t SET … FROM picked WHERE t.pk = picked.pk RETURNING …`.
    /// The CTE is evaluated once, so the statement never claims more than `$n` rows (an
    /// `IN (subquery)` may be re-run by the planner and claim more).
    fn push_claim<'b, M: ClaimTarget<Pg>>(
        out: &mut AstPass<'_, 'b, Pg>,
        stmt: &'b ClaimStmt<'_, M, Pg>,
    ) -> QueryResult<()> {
        let pk = stmt.parts.shape.pk;
        out.push_sql("WITH ");
        out.push_identifier("picked")?;
        out.push_sql(" AS (SELECT ");
        column_list(out, pk)?;
        pick_from(out, stmt.parts, stmt.filter, &stmt.limit)?;
        out.push_sql(" FOR UPDATE SKIP LOCKED) UPDATE ");
        stmt.parts.table.walk_ast(out.reborrow())?;
        claim_assignments(out, stmt.parts)?;
        out.push_sql(" FROM ");
        out.push_identifier("picked")?;
        out.push_sql(" WHERE ");
        for (i, pk) in pk.iter().enumerate() {
            if i > 0 {
                out.push_sql(" AND ");
            }
            qualified(out, stmt.parts, pk)?;
            out.push_sql(" = ");
            out.push_identifier("picked")?;
            out.push_sql(".");
            out.push_identifier(pk)?;
        }
        out.push_sql(" RETURNING ");
        stmt.parts.select.walk_ast(out.reborrow())
    }
}

impl ClaimDialect for PgConnection {
    fn claim_sql<M: ClaimSql<Pg>>(parts: &ClaimParts<M, Pg>, limit: i64) -> String {
        diesel::debug_query::<Pg, _>(&ClaimStmt::new(parts, limit, None)).to_string()
    }

    fn finish_rows<M: ClaimModel<Self>>(
        &mut self,
        rows: &[BatchRow<'_, M>],
        to: Finish,
    ) -> QueryResult<Vec<bool>> {
        unnest_finish(self, rows, to)
    }

    fn install_ready_trigger(&mut self, table: &dyn QueryFragment<Pg>) -> QueryResult<()> {
        self.transaction(|c| {
            diesel::sql_query(READY_FUNCTION).execute(c)?;
            for step in [TriggerStep::Drop, TriggerStep::Create] {
                c.execute_returning_count(&Exec::<_, Dynamic>::new(&ReadyTrigger { table, step }))?;
            }
            Ok(())
        })
    }
}

/// The trigger function behind [`ClaimDialect::install_ready_trigger`]: after an insert, one
/// notification on the listeners' channel per way a claim model may name the table (bare, and
/// schema-qualified), each quoted as Diesel quotes identifiers, which is how waiters name it.
const READY_FUNCTION: &str = concat!(
    r#"CREATE OR REPLACE FUNCTION diesel_lease_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('"#,
    channel!(),
    r#"', 'claim:"' || replace(TG_TABLE_NAME, '"', '""') || '"');
    PERFORM pg_notify('"#,
    channel!(),
    r#"', 'claim:"' || replace(TG_TABLE_SCHEMA, '"', '""') || '"."'
        || replace(TG_TABLE_NAME, '"', '""') || '"');
    RETURN NULL;
END $$"#
);

#[derive(Clone, Copy)]
enum TriggerStep {
    Drop,
    Create,
}

/// `DROP TRIGGER IF EXISTS diesel_lease_ready ON t` or `CREATE TRIGGER diesel_lease_ready AFTER
/// INSERT ON t FOR EACH STATEMENT …` (once per statement: a bulk insert wakes the waiters once).
struct ReadyTrigger<'a> {
    table: &'a dyn QueryFragment<Pg>,
    step: TriggerStep,
}

impl QueryFragment<Pg> for ReadyTrigger<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        match self.step {
            TriggerStep::Drop => out.push_sql("DROP TRIGGER IF EXISTS diesel_lease_ready ON "),
            TriggerStep::Create => {
                out.push_sql("CREATE TRIGGER diesel_lease_ready AFTER INSERT ON ")
            }
        }
        self.table.walk_ast(out.reborrow())?;
        if let TriggerStep::Create = self.step {
            out.push_sql(" FOR EACH STATEMENT EXECUTE FUNCTION diesel_lease_notify_ready()");
        }
        Ok(())
    }
}

/// A batch's keys as one array bind: the key types PostgreSQL's batch finish knows how to send
/// ([`unnest_finish`]). A model whose key is of another type, or composite, finishes its batches
/// with the portable statement (`batch.rs`).
enum KeyArray {
    BigInt(Vec<i64>),
    Integer(Vec<i32>),
    Text(Vec<String>),
}

impl KeyArray {
    /// The keys of `rows`, when they are all of one known type and no key repeats (a repeated
    /// row must be reported once, at its first place, which the portable statement does).
    fn of<M: Claimable>(rows: &[BatchRow<'_, M>]) -> Option<Self> {
        fn collect<T: Clone + Ord + 'static, M: Claimable>(
            rows: &[BatchRow<'_, M>],
        ) -> Option<Vec<T>> {
            let keys = rows
                .iter()
                .map(|r| (&r.key as &dyn Any).downcast_ref::<T>().cloned())
                .collect::<Option<Vec<T>>>()?;
            let mut sorted: Vec<&T> = keys.iter().collect();
            sorted.sort_unstable();
            sorted.windows(2).all(|w| w[0] != w[1]).then_some(keys)
        }
        if M::PK.len() != 1 {
            return None;
        }
        let any = TypeId::of::<M::Pk>();
        if any == TypeId::of::<i64>() {
            collect::<i64, M>(rows).map(KeyArray::BigInt)
        } else if any == TypeId::of::<i32>() {
            collect::<i32, M>(rows).map(KeyArray::Integer)
        } else if any == TypeId::of::<String>() {
            collect::<String, M>(rows).map(KeyArray::Text)
        } else {
            None
        }
    }
}

/// The claim stamps of a [`UnnestFinish`]: one for every row, one each, or none (the model maps
/// no stamp column).
enum Stamps<'a> {
    Shared(&'a Option<Option<Cow<'a, str>>>),
    Each(Vec<Option<&'a str>>),
    Unmapped,
}

/// PostgreSQL's batch finish for a one-column key: the keys, attempts and stamps as arrays.
///
/// `UPDATE t SET <target> FROM unnest($keys, $attempts[, $stamps]) WITH ORDINALITY AS
/// diesel_lease_batch(…, position) WHERE pk = <key> AND state = <claimed> AND owner = <stamp>
/// AND attempts = <attempt> RETURNING position - 1`.
///
/// Two to four parameters whatever the batch's size, so its text is one per model and target,
/// PostgreSQL plans it generically after its first five runs (a plan of the portable
/// statement's 50 `OR`ed rows cost as much as a third of its run, on every call: BENCHMARKS.md,
/// "Session 8"), and the client serializes at most four binds per batch instead of two or three
/// per row.
struct UnnestFinish<'a, M: ClaimSql<Pg>> {
    table: M::Table,
    keys: KeyArray,
    attempts: Option<Vec<Option<i64>>>,
    stamps: Stamps<'a>,
    to: Finish,
}

/// The `FROM` item's name and columns; the model's own columns are written unqualified, so
/// these must not be names a user's table has.
const BATCH: &str = "diesel_lease_batch";
const KEY: &str = "diesel_lease_key";
const ATTEMPT: &str = "diesel_lease_attempt";
const STAMP: &str = "diesel_lease_stamp";
const POSITION: &str = "diesel_lease_position";

impl<'a, M: ClaimSql<Pg>> UnnestFinish<'a, M> {
    fn new(rows: &'a [BatchRow<'a, M>], to: Finish) -> Option<Self> {
        let keys = KeyArray::of(rows)?;
        let stamps = match (M::OWNER, shared_owner(rows)) {
            (None, _) => Stamps::Unmapped,
            (Some(_), Some(shared)) => Stamps::Shared(shared),
            (Some(_), None) => Stamps::Each(
                rows.iter()
                    .map(|r| r.owner.as_ref().and_then(|o| o.as_deref()))
                    .collect(),
            ),
        };
        let attempts = M::ATTEMPTS.map(|_| rows.iter().map(|r| r.attempts.flatten()).collect());
        Some(UnnestFinish {
            table: M::Table::default(),
            keys,
            attempts,
            stamps,
            to,
        })
    }

    /// `"diesel_lease_batch"."<column>"`.
    fn batch_column(out: &mut AstPass<'_, '_, Pg>, column: &str) -> QueryResult<()> {
        out.push_identifier(BATCH)?;
        out.push_sql(".");
        out.push_identifier(column)
    }
}

impl<M: ClaimSql<Pg>> QueryFragment<Pg> for UnnestFinish<'_, M> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text};
        out.push_sql("UPDATE ");
        M::push_table(&mut out, &self.table)?;
        out.push_sql(" SET ");
        push_finish_assignments::<M, Pg>(&mut out, self.to)?;
        out.push_sql(" FROM unnest(");
        match &self.keys {
            KeyArray::BigInt(k) => out.push_bind_param::<Array<BigInt>, _>(k)?,
            KeyArray::Integer(k) => out.push_bind_param::<Array<Integer>, _>(k)?,
            KeyArray::Text(k) => out.push_bind_param::<Array<Text>, _>(k)?,
        }
        let mut columns = vec![KEY];
        if let Some(attempts) = &self.attempts {
            out.push_sql(", ");
            out.push_bind_param::<Array<Nullable<BigInt>>, _>(attempts)?;
            columns.push(ATTEMPT);
        }
        if let Stamps::Each(stamps) = &self.stamps {
            out.push_sql(", ");
            out.push_bind_param::<Array<Nullable<Text>>, _>(stamps)?;
            columns.push(STAMP);
        }
        out.push_sql(") WITH ORDINALITY AS ");
        out.push_identifier(BATCH)?;
        out.push_sql("(");
        for column in columns.iter().chain([&POSITION]) {
            if *column != KEY {
                out.push_sql(", ");
            }
            out.push_identifier(column)?;
        }
        out.push_sql(") WHERE ");
        out.push_identifier(M::PK[0])?;
        out.push_sql(" = ");
        Self::batch_column(&mut out, KEY)?;
        out.push_sql(" AND ");
        M::CLAIMED_SQL.push_eq(&mut out, M::STATE)?;
        match (&self.stamps, M::OWNER) {
            (Stamps::Shared(stamp), _) => push_stamp_check::<M, Pg>(&mut out, stamp, &None)?,
            (Stamps::Each(_), Some(owner)) => {
                out.push_sql(" AND ");
                out.push_identifier(owner)?;
                out.push_sql(" = ");
                Self::batch_column(&mut out, STAMP)?;
            }
            _ => {}
        }
        if let (Some(_), Some(column)) = (&self.attempts, M::ATTEMPTS) {
            out.push_sql(" AND ");
            out.push_identifier(column)?;
            out.push_sql(" = ");
            Self::batch_column(&mut out, ATTEMPT)?;
        }
        out.push_sql(" RETURNING CAST(");
        Self::batch_column(&mut out, POSITION)?;
        out.push_sql(" AS INTEGER) - 1");
        Ok(())
    }
}

/// PostgreSQL's [`ClaimDialect::finish_rows`]: [`UnnestFinish`] where the model's key allows,
/// else the portable `UPDATE … RETURNING <position>`.
fn unnest_finish<M: ClaimModel<PgConnection>>(
    conn: &mut PgConnection,
    rows: &[BatchRow<'_, M>],
    to: Finish,
) -> QueryResult<Vec<bool>> {
    let Some(stmt) = UnnestFinish::new(rows, to) else {
        return update_returning(conn, rows, to);
    };
    let shared = matches!(stmt.stamps, Stamps::Shared(_));
    let positions = conn.keyed_write(|c| load_unnest_positions::<M, _>(c, &stmt, to, shared))?;
    Ok(at_positions(rows.len(), &positions))
}
