//! The MariaDB side of the floors (issue 23): a throwaway `mariadbd` under a temporary directory
//! (as `scripts/servers.sh`'s `start_mariadb` starts the test server), or `DIESEL_LEASE_BENCH_MYSQL`;
//! the queue table; and the `mariadb-slap` floor.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::sql_types::BigInt;

use crate::BenchResult;

/// Where the server binaries are (Debian's `mariadb-server`).
const MARIADBD: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "mariadb-install-db";
/// The database the throwaway server's URL names.
const DB: &str = "diesel_lease_bench";

/// What must be stopped if the program is interrupted: the server's pid file and its directory.
static RUNNING: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);

/// A MariaDB server that lives as long as this value.
#[derive(Debug)]
pub(crate) struct TempMaria {
    /// `mysql://root@127.0.0.1:PORT/diesel_lease_bench`.
    pub(crate) url: String,
    child: Child,
    dir: Option<tempfile::TempDir>,
}

impl TempMaria {
    /// `mariadb-install-db` in a temporary directory, then `mariadbd` on a free loopback port,
    /// tuned as the test server is (no flush at commit, no doublewrite, no performance schema),
    /// with a 512 MB buffer pool (PostgreSQL's `shared_buffers` in this program).
    pub(crate) fn start() -> BenchResult<TempMaria> {
        if !Path::new(MARIADBD).exists() {
            return Err(format!("{MARIADBD} not found (Debian's mariadb-server)").into());
        }
        let as_mysql = crate::server::running_as_root()?;
        let dir = tempfile::Builder::new()
            .prefix("diesel-lease-bench-mariadb-")
            .tempdir()?;
        let d = dir.path();
        // root@127.0.0.1 without a password, created before clients are accepted (the server
        // skips name resolution, so a TCP client is matched by its address).
        std::fs::write(
            d.join("init.sql"),
            format!(
                "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\n\
                 GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n\
                 CREATE DATABASE IF NOT EXISTS {DB};\n"
            ),
        )?;
        // A tmpdir of its own, for the bootstrap and the server: a MariaDB server deletes every
        // `#sql*` file in its tmpdir when it starts, another server's live temporary tables too.
        let tmp = d.join("tmp");
        std::fs::create_dir(&tmp)?;
        if as_mysql {
            let status = Command::new("chown")
                .arg("-R")
                .arg("mysql:mysql")
                .arg(d)
                .status()?;
            if !status.success() {
                return Err("chown mysql of the MariaDB directory failed".into());
            }
        }
        let data = d.join("data");
        let mut install = as_user(as_mysql, INSTALL_DB);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ]);
        if as_mysql {
            install.arg("--user=mysql");
        }
        let out = install.stdin(Stdio::null()).output()?;
        if !out.status.success() {
            return Err(format!(
                "mariadb-install-db failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let pid_file = d.join("mysqld.pid");
        let log = d.join("server.log");
        let child = as_user(as_mysql, MARIADBD)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--socket={}", d.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", pid_file.display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--port={port}"))
            .arg(format!("--init-file={}", d.join("init.sql").display()))
            .args([
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--max-connections=200",
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-doublewrite=0",
                "--innodb-buffer-pool-size=512M",
                "--innodb-log-file-size=512M",
                "--performance-schema=OFF",
                "--innodb-fast-shutdown=2",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        *lock_running() = Some((pid_file, d.to_owned()));
        let mut server = TempMaria {
            url: format!("mysql://root@127.0.0.1:{port}/{DB}"),
            child,
            dir: Some(dir),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if MysqlConnection::establish(&server.url).is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline || server.child.try_wait()?.is_some() {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!("MariaDB did not start:\n{tail}").into());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for TempMaria {
    fn drop(&mut self) {
        if let Some((pid_file, _)) = lock_running().take() {
            stop(&pid_file);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

/// Stops a running throwaway MariaDB and deletes its directory (the Ctrl-C handler's part).
pub(crate) fn stop_on_interrupt() {
    if let Some((pid_file, dir)) = lock_running().take() {
        stop(&pid_file);
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn lock_running() -> std::sync::MutexGuard<'static, Option<(PathBuf, PathBuf)>> {
    RUNNING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// SIGTERM to `mariadbd` itself (its pid file; not the `runuser` wrapper, which would SIGKILL
/// it after two seconds), then waits up to 30 s for it to go.
fn stop(pid_file: &Path) {
    let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    else {
        return;
    };
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    for _ in 0..120 {
        if !proc_dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn as_user(as_mysql: bool, program: &str) -> Command {
    if as_mysql {
        let mut c = Command::new("runuser");
        c.args(["-u", "mysql", "--", program]);
        c
    } else {
        Command::new(program)
    }
}

/// The queue table on MySQL/MariaDB: the same columns; the index serves the claim's
/// `WHERE status = 'ready' ORDER BY id` (InnoDB secondary indexes end with the primary key).
pub(crate) const MYSQL_JOBS_DDL: &str = "CREATE TABLE bench_jobs (id BIGINT PRIMARY KEY, \
     seq BIGINT NOT NULL, status VARCHAR(16) NOT NULL, owner VARCHAR(255), \
     claimed_at DATETIME(6), attempts INT NOT NULL DEFAULT 0, payload TEXT NOT NULL, \
     INDEX bench_jobs_ready (status, id))";

/// Fills ids `?..=?` (recursion is capped at 1000 rows per statement on both servers).
const MYSQL_FILL_JOBS: &str = "INSERT INTO bench_jobs (id, seq, status, payload) \
     SELECT x, x, 'ready', CONCAT('payload of job ', x) FROM (WITH RECURSIVE g(x) AS \
     (SELECT CAST(? AS SIGNED) UNION ALL SELECT x + 1 FROM g WHERE x < ?) SELECT x FROM g) AS d";

pub(crate) type MysqlPool = Pool<ConnectionManager<MysqlConnection>>;

/// Recreates the queue table with `rows` ready rows.
pub(crate) fn fresh_jobs(url: &str, rows: u64) -> BenchResult<()> {
    let mut conn = MysqlConnection::establish(url)?;
    conn.batch_execute("DROP TABLE IF EXISTS bench_jobs")?;
    conn.batch_execute(MYSQL_JOBS_DDL)?;
    let rows = i64::try_from(rows)?;
    let mut from = 1;
    while from <= rows {
        let to = (from + 999).min(rows);
        diesel::sql_query(MYSQL_FILL_JOBS)
            .bind::<BigInt, _>(from)
            .bind::<BigInt, _>(to)
            .execute(&mut conn)?;
        from = to + 1;
    }
    conn.batch_execute("ANALYZE TABLE bench_jobs")?;
    Ok(())
}

/// The parts of a `mysql://user[:password]@host[:port]/database` URL that `mariadb-slap` takes
/// as options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlParts {
    pub(crate) user: String,
    pub(crate) password: Option<String>,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) database: String,
}

pub(crate) fn url_parts(url: &str) -> BenchResult<UrlParts> {
    let rest = url
        .strip_prefix("mysql://")
        .ok_or_else(|| format!("not a mysql:// URL: {url}"))?;
    let (auth, rest) = rest.rsplit_once('@').unwrap_or(("root", rest));
    let (user, password) = match auth.split_once(':') {
        Some((u, p)) => (u.to_owned(), Some(p.to_owned())),
        None => (auth.to_owned(), None),
    };
    let (hostport, database) = rest
        .split_once('/')
        .ok_or_else(|| format!("the MySQL URL names no database: {url}"))?;
    let database = database.split('?').next().unwrap_or_default().to_owned();
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h.to_owned(), p.parse()?),
        None => (hostport.to_owned(), 3306),
    };
    if database.is_empty() {
        return Err(format!("the MySQL URL names no database: {url}").into());
    }
    Ok(UrlParts {
        user,
        password,
        host,
        port,
        database,
    })
}

/// `mariadb-slap` running `script` (statements separated by `;`) on `clients` connections, each
/// repeating it, with far more repetitions than the table has rows: the caller kills it.
pub(crate) fn spawn_slap(
    url: &str,
    script: &Path,
    statements: usize,
    clients: usize,
    jobs_budget: u64,
) -> BenchResult<Child> {
    let p = url_parts(url)?;
    let mut cmd = Command::new("mariadb-slap");
    cmd.arg("--no-defaults")
        .arg("--protocol=TCP")
        .arg(format!("--host={}", p.host))
        .arg(format!("--port={}", p.port))
        .arg(format!("--user={}", p.user))
        .arg(format!("--create-schema={}", p.database))
        .arg("--no-drop")
        .arg("--delimiter=;")
        .arg(format!("--query={}", script.display()))
        .arg(format!("--concurrency={clients}"))
        // Counted over all clients, statement by statement.
        .arg(format!(
            "--number-of-queries={}",
            jobs_budget.saturating_mul(statements as u64)
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(pw) = &p.password {
        cmd.env("MYSQL_PWD", pw);
    }
    Ok(cmd.spawn()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parts_split_a_mysql_url() {
        let p = url_parts("mysql://u:pw@127.0.0.1:3307/db?x=1").unwrap();
        assert_eq!(
            p,
            UrlParts {
                user: "u".into(),
                password: Some("pw".into()),
                host: "127.0.0.1".into(),
                port: 3307,
                database: "db".into()
            }
        );
        let p = url_parts("mysql://root@localhost/bench").unwrap();
        assert_eq!((p.port, p.password), (3306, None));
        assert!(url_parts("mysql://root@localhost").is_err());
        assert!(url_parts("postgres://x/y").is_err());
    }
}
