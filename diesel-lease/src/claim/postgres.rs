//! PostgreSQL's claims: one `WITH picked AS (SELECT … FOR UPDATE SKIP LOCKED) UPDATE …
//! RETURNING` statement, and a trigger that announces new rows to waiters.

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::PgConnection;

use super::dialect::{ClaimDialect, ClaimSqlDialect};
use super::statements::{
    claim_assignments, column_list, pick_from, qualified, ClaimParts, ClaimSql, ClaimStmt,
    ClaimTarget, Dynamic, Exec,
};
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
