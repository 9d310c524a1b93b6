//! The SQLite measurements: `claim_next` on a database file in WAL mode.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel_lease::prelude::*;

use crate::measure::{self, Sample, Window};
use crate::model::*;
use crate::BenchResult;

/// The SQLite side of a run: one database file in a temporary directory.
#[derive(Debug)]
pub(crate) struct SqliteBench {
    dir: tempfile::TempDir,
    window: Window,
}

impl SqliteBench {
    pub(crate) fn new(window: Window) -> BenchResult<SqliteBench> {
        Ok(SqliteBench {
            dir: tempfile::Builder::new()
                .prefix("diesel-lease-bench-sqlite-")
                .tempdir()?,
            window,
        })
    }

    fn url(&self) -> String {
        self.path().display().to_string()
    }

    /// The database file.
    pub(crate) fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("bench.db")
    }

    /// Recreates the queue table with `rows` ready rows.
    pub(crate) fn fresh_jobs(&self, rows: u64) -> BenchResult<()> {
        let mut conn = SqliteConnection::establish(&self.url())?;
        diesel_lease::pool::ConnectionTuning::default().apply(&mut conn)?;
        conn.batch_execute("DROP TABLE IF EXISTS bench_jobs")?;
        conn.batch_execute(SQLITE_JOBS_DDL)?;
        diesel::sql_query(SQLITE_FILL_JOBS)
            .bind::<BigInt, _>(i64::try_from(rows)?)
            .execute(&mut conn)?;
        conn.batch_execute("ANALYZE; PRAGMA wal_checkpoint(TRUNCATE);")?;
        Ok(())
    }

    /// A pool of `size` tuned connections to the database file.
    pub(crate) fn pool(
        &self,
        size: u32,
    ) -> BenchResult<diesel::r2d2::Pool<diesel::r2d2::ConnectionManager<SqliteConnection>>> {
        Ok(diesel_lease::pool::build_pool::<SqliteConnection>(
            &self.url(),
            size,
        )?)
    }

    /// `BenchJob::claim_next` on `workers` threads, each with its own pooled connection
    /// (`build_pool` applies `ConnectionTuning`: WAL, `synchronous = NORMAL`, busy timeout).
    pub(crate) fn claim_next(&self, workers: usize) -> BenchResult<Sample> {
        let pool = diesel_lease::pool::build_pool::<SqliteConnection>(
            &self.url(),
            u32::try_from(workers)?,
        )?;
        let conns = (0..workers)
            .map(|_| pool.get())
            .collect::<Result<Vec<_>, _>>()?;
        measure::timed(conns, self.window, |conn| {
            Ok(u64::from(BenchJob::claim().row(conn)?.is_some()))
        })
    }
}
