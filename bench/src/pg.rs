//! The PostgreSQL measurements: diesel-lease's calls against the hand-written SQL they replace.

use diesel_lease::prelude::*;
use std::sync::atomic::{AtomicI64, Ordering};

use diesel::connection::SimpleConnection;
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection};
use diesel::sql_types::{BigInt, Text};
use diesel_lease::{db_now, OwnerId};
use serde::Serialize;

use crate::measure::{self, Sample, Window};
use crate::model::schema::bench_jobs;
use crate::model::*;
use crate::BenchResult;

type PgPool = Pool<ConnectionManager<PgConnection>>;
type PgConn = PooledConnection<ConnectionManager<PgConnection>>;

/// How the queue table's autovacuum is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Autovacuum {
    /// Vacuum the queue table after every 10 000 dead rows (scale factor 0, no cost delay).
    Tuned,
    /// The server's defaults (20% of the table plus 50 rows).
    Default,
}

impl Autovacuum {
    fn table_options(self) -> &'static str {
        match self {
            Autovacuum::Tuned => {
                " WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, \
                 autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, \
                 autovacuum_analyze_threshold = 10000)"
            }
            Autovacuum::Default => "",
        }
    }
}

/// Whether the queue table has the partial index on ready rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Index {
    /// `CREATE INDEX … ON bench_jobs (id) WHERE status = 'ready'`.
    PartialReady,
    /// Only the primary key.
    PkOnly,
    /// `CREATE INDEX … ON bench_jobs (seq) WHERE status = 'ready'`, claimed in `seq` order.
    PartialReadySeq,
}

/// The floor: the one-statement claim as a user would hand-write it, fixed text plus binds.
/// `$1` is the limit, `$2` the owner. Same columns set and returned as `claim_next`.
pub(crate) const RAW_CLAIM_SQL: &str = "WITH picked AS (SELECT id FROM bench_jobs \
     WHERE status = 'ready' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) \
     UPDATE bench_jobs SET status = 'running', owner = $2, claimed_at = statement_timestamp(), \
     attempts = bench_jobs.attempts + 1 FROM picked WHERE bench_jobs.id = picked.id \
     RETURNING bench_jobs.id, bench_jobs.status, bench_jobs.owner, bench_jobs.claimed_at, \
     bench_jobs.attempts, bench_jobs.payload";

/// [`RAW_CLAIM_SQL`] as a Diesel query with a static query id, so Diesel prepares it once per
/// connection and reuses it, as it does `claim_next`'s statement (`sql_query` is never cached:
/// each call is parsed and planned again).
#[derive(Debug)]
pub(crate) struct RawClaimPrepared<'a> {
    limit: i64,
    owner: &'a str,
}

/// The static query id of [`RawClaimPrepared`].
#[derive(Debug)]
pub(crate) struct RawClaimId;

impl QueryId for RawClaimPrepared<'_> {
    type QueryId = RawClaimId;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for RawClaimPrepared<'_> {
    type SqlType = JobRowSql;
}

impl<Conn> RunQueryDsl<Conn> for RawClaimPrepared<'_> {}

impl QueryFragment<Pg> for RawClaimPrepared<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let (head, rest) = RAW_CLAIM_SQL.split_once("$1").ok_or_else(no_placeholder)?;
        let (mid, tail) = rest.split_once("$2").ok_or_else(no_placeholder)?;
        out.push_sql(head);
        out.push_bind_param::<BigInt, _>(&self.limit)?;
        out.push_sql(mid);
        out.push_bind_param::<Text, _>(self.owner)?;
        out.push_sql(tail);
        Ok(())
    }
}

fn no_placeholder() -> diesel::result::Error {
    diesel::result::Error::QueryBuilderError("RAW_CLAIM_SQL lost a placeholder".into())
}

/// The PostgreSQL side of a run.
#[derive(Debug)]
pub(crate) struct PgBench {
    pub(crate) url: String,
    pub(crate) window: Window,
    pub(crate) autovacuum: Autovacuum,
}

impl PgBench {
    /// Drops and refills the queue table with `rows` ready rows, then vacuums and analyzes it, so
    /// every measurement starts from the same state.
    pub(crate) fn fresh_jobs(&self, rows: u64, index: Index) -> BenchResult<()> {
        let mut conn = PgConnection::establish(&self.url)?;
        conn.batch_execute("DROP TABLE IF EXISTS bench_jobs")?;
        conn.batch_execute(&format!("{PG_JOBS_DDL}{}", self.autovacuum.table_options()))?;
        diesel::sql_query(PG_FILL_JOBS)
            .bind::<BigInt, _>(i64::try_from(rows)?)
            .execute(&mut conn)?;
        match index {
            Index::PartialReady => conn.batch_execute(PG_READY_INDEX)?,
            Index::PartialReadySeq => conn.batch_execute(PG_READY_SEQ_INDEX)?,
            Index::PkOnly => {}
        }
        conn.batch_execute("VACUUM (ANALYZE) bench_jobs")?;
        // Write the fill out now rather than during the measurement; needs superuser, so a
        // DATABASE_URL without it simply skips this.
        let _ = conn.batch_execute("CHECKPOINT");
        Ok(())
    }

    /// Drops and refills the guard table with `rows` unset guards.
    pub(crate) fn fresh_guards(&self, rows: u64) -> BenchResult<()> {
        let mut conn = PgConnection::establish(&self.url)?;
        conn.batch_execute("DROP TABLE IF EXISTS bench_guards")?;
        conn.batch_execute(PG_GUARDS_DDL)?;
        diesel::sql_query(PG_FILL_GUARDS)
            .bind::<BigInt, _>(i64::try_from(rows)?)
            .execute(&mut conn)?;
        conn.batch_execute("VACUUM (ANALYZE) bench_guards")?;
        Ok(())
    }

    /// Drops the tables this program made.
    pub(crate) fn drop_tables(&self) -> BenchResult<()> {
        let mut conn = PgConnection::establish(&self.url)?;
        conn.batch_execute("DROP TABLE IF EXISTS bench_jobs; DROP TABLE IF EXISTS bench_guards")?;
        Ok(())
    }

    /// `workers` pooled connections, one per thread, taken from one pool of that size.
    pub(crate) fn connections(&self, workers: usize) -> BenchResult<(PgPool, Vec<PgConn>)> {
        let pool =
            diesel_lease::pool::build_pool::<PgConnection>(&self.url, u32::try_from(workers)?)?;
        let conns = (0..workers)
            .map(|_| pool.get())
            .collect::<Result<Vec<_>, _>>()?;
        Ok((pool, conns))
    }

    /// Claims `limit` rows per call with the hand-written statement through `sql_query`.
    pub(crate) fn raw_sql_query(&self, workers: usize, limit: i64) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        let owner = OwnerId::process_default().as_str();
        measure::timed(conns, self.window, |conn| {
            let rows: Vec<BenchJob> = diesel::sql_query(RAW_CLAIM_SQL)
                .bind::<BigInt, _>(limit)
                .bind::<Text, _>(owner)
                .load(conn)?;
            Ok(rows.len() as u64)
        })
    }

    /// Claims `limit` rows per call with the hand-written statement, prepared once per connection.
    pub(crate) fn raw_prepared(&self, workers: usize, limit: i64) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        let owner = OwnerId::process_default().as_str();
        measure::timed(conns, self.window, |conn| {
            let rows: Vec<BenchJob> = RawClaimPrepared { limit, owner }.load(conn)?;
            Ok(rows.len() as u64)
        })
    }

    /// `BenchJob::claim_next`.
    pub(crate) fn claim_next(&self, workers: usize) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        measure::timed(conns, self.window, |conn| {
            Ok(u64::from(BenchJob::claim().row(conn)?.is_some()))
        })
    }

    /// `BenchJob::claim_batch(n)`; counts rows.
    pub(crate) fn claim_batch(&self, workers: usize, n: usize) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        measure::timed(conns, self.window, |conn| {
            Ok(BenchJob::claim().batch(n).rows(conn)?.len() as u64)
        })
    }

    /// The two-statement shape (seed 003, the fang crate): in one transaction, select the next
    /// row `FOR UPDATE SKIP LOCKED`, then update it. Four round trips: BEGIN, SELECT, UPDATE, COMMIT.
    pub(crate) fn two_statement(&self, workers: usize) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        let owner = OwnerId::process_default().as_str();
        measure::timed(conns, self.window, |conn| {
            let claimed = conn.transaction(|c| -> QueryResult<Option<BenchJob>> {
                let next: Option<BenchJob> = bench_jobs::table
                    .filter(bench_jobs::status.eq("ready"))
                    .order(bench_jobs::id.asc())
                    .for_update()
                    .skip_locked()
                    .select(BenchJob::as_select())
                    .first(c)
                    .optional()?;
                let Some(job) = next else {
                    return Ok(None);
                };
                diesel::update(bench_jobs::table.find(job.id))
                    .set((
                        bench_jobs::status.eq("running"),
                        bench_jobs::owner.eq(owner),
                        bench_jobs::claimed_at.eq(diesel::dsl::now),
                        bench_jobs::attempts.eq(bench_jobs::attempts + 1),
                    ))
                    .returning(BenchJob::as_select())
                    .get_result(c)
                    .map(Some)
            })?;
            Ok(u64::from(claimed.is_some()))
        })
    }

    /// `BenchGuard::claim_if_null_by_pk(conn, id, db_now)` on distinct rows; counts guards won.
    pub(crate) fn guards(&self, workers: usize) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(workers)?;
        let next = AtomicI64::new(1);
        measure::timed(conns, self.window, |conn| {
            let id = next.fetch_add(1, Ordering::Relaxed);
            Ok(u64::from(BenchGuard::claim_if_null_by_pk(
                conn, id, db_now,
            )?))
        })
    }

    /// Per-claim cost: `claim_next` on one connection, `warmup` uncounted calls then `ops` counted,
    /// so a known share of the ready rows is used up whatever the speed.
    pub(crate) fn claim_cost(&self, warmup: u64, ops: u64) -> BenchResult<Sample> {
        let (_pool, mut conns) = self.connections(1)?;
        let conn = conns.pop().ok_or("the pool gave no connection")?;
        measure::counted(conn, warmup, ops, |conn| {
            Ok(u64::from(BenchJob::claim().row(conn)?.is_some()))
        })
    }

    /// `total` consecutive `claim_next` calls on `workers` threads; items/s per tenth of the run.
    /// With [`Index::PartialReadySeq`] the claims are `BenchJobBySeq::claim_next` (`seq` order).
    pub(crate) fn consecutive(
        &self,
        workers: usize,
        total: u64,
        index: Index,
    ) -> BenchResult<Vec<f64>> {
        let (_pool, conns) = self.connections(workers)?;
        measure::consecutive(conns, total, |conn| {
            let claimed = match index {
                Index::PartialReadySeq => BenchJobBySeq::claim().row(conn)?.is_some(),
                Index::PartialReady | Index::PkOnly => BenchJob::claim().row(conn)?.is_some(),
            };
            Ok(u64::from(claimed))
        })
    }

    /// Server version and the settings that matter for these numbers, as the server reports them.
    pub(crate) fn server_facts(&self) -> BenchResult<ServerFacts> {
        #[derive(QueryableByName)]
        struct Setting {
            #[diesel(sql_type = Text)]
            name: String,
            #[diesel(sql_type = Text)]
            setting: String,
        }
        #[derive(QueryableByName)]
        struct Version {
            #[diesel(sql_type = Text)]
            version: String,
        }
        let mut conn = PgConnection::establish(&self.url)?;
        let version = diesel::sql_query("SELECT version() AS version")
            .get_result::<Version>(&mut conn)?
            .version;
        let settings = diesel::sql_query(
            "SELECT name, current_setting(name) AS setting FROM pg_settings WHERE name IN \
             ('shared_buffers', 'max_connections', 'synchronous_commit', 'fsync', 'full_page_writes', \
              'wal_level', 'max_wal_size', 'checkpoint_timeout', 'autovacuum', 'autovacuum_naptime', \
              'autovacuum_vacuum_cost_delay', 'autovacuum_vacuum_scale_factor', \
              'autovacuum_vacuum_threshold', 'work_mem', 'random_page_cost', 'plan_cache_mode', \
              'jit') ORDER BY name",
        )
        .load::<Setting>(&mut conn)?
        .into_iter()
        .map(|s| (s.name, s.setting))
        .collect();
        Ok(ServerFacts { version, settings })
    }

    /// Dead rows and vacuum runs of the queue table (for the consecutive-claims run).
    pub(crate) fn vacuum_stats(&self) -> BenchResult<VacuumStats> {
        #[derive(QueryableByName)]
        struct Stats {
            #[diesel(sql_type = BigInt)]
            n_dead_tup: i64,
            #[diesel(sql_type = BigInt)]
            autovacuum_count: i64,
        }
        let mut conn = PgConnection::establish(&self.url)?;
        // The statistics collector reports with a short delay.
        conn.batch_execute("SELECT pg_stat_clear_snapshot()")?;
        let s = diesel::sql_query(
            "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE relname = 'bench_jobs'",
        )
        .get_result::<Stats>(&mut conn)?;
        Ok(VacuumStats {
            dead_rows: s.n_dead_tup,
            autovacuum_runs: s.autovacuum_count,
        })
    }
}

/// What the server said about itself.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ServerFacts {
    pub(crate) version: String,
    pub(crate) settings: Vec<(String, String)>,
}

/// `pg_stat_user_tables` for the queue table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VacuumStats {
    pub(crate) dead_rows: i64,
    pub(crate) autovacuum_runs: i64,
}
