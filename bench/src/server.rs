//! A throwaway PostgreSQL server: `initdb` in a temporary directory, started on a free loopback
//! port, stopped and deleted when dropped, and on Ctrl-C through [`stop_on_interrupt`].
//!
//! When the program runs as root the server runs as the `postgres` user (`runuser -u postgres --`),
//! because PostgreSQL refuses to run as root.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::BenchResult;

/// The settings the throwaway server starts with, beyond `initdb`'s defaults.
///
/// `synchronous_commit = off`: every shape commits once per claim, and waiting for this shared
/// VM's disk would mostly measure the disk. Pass `--pg-set synchronous_commit=on` to include it.
/// `autovacuum_naptime = 1s`: a claim queue makes a dead tuple per claim; see BENCHMARKS.md.
/// `max_connections = 100`: the width section runs 64 workers, plus its own connections.
pub(crate) const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("shared_buffers", "512MB"),
    ("max_connections", "100"),
    ("synchronous_commit", "off"),
    ("max_wal_size", "4GB"),
    ("checkpoint_timeout", "30min"),
    ("autovacuum_naptime", "1s"),
    ("log_min_messages", "warning"),
];

/// What must be undone if the program is interrupted: one running server at most.
#[derive(Debug, Clone)]
struct Running {
    bin: PathBuf,
    data: PathBuf,
    dir: PathBuf,
    as_postgres: bool,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// A PostgreSQL server that lives as long as this value.
#[derive(Debug)]
pub(crate) struct TempPg {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub(crate) url: String,
    running: Running,
    dir: Option<tempfile::TempDir>,
}

impl TempPg {
    /// Runs `initdb`, writes `settings` into `postgresql.conf` and starts the server.
    pub(crate) fn start(bin: &Path, settings: &[(String, String)]) -> BenchResult<TempPg> {
        let as_postgres = running_as_root()?;
        let dir = tempfile::Builder::new()
            .prefix("diesel-lease-bench-")
            .tempdir()?;
        if as_postgres {
            run(Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path()))?;
        }
        let data = dir.path().join("data");
        run(pg_command(as_postgres, &bin.join("initdb"), dir.path())
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            ]))?;
        let port = free_port()?;
        let mut conf = OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))?;
        writeln!(conf, "\n# diesel-lease-bench")?;
        writeln!(conf, "listen_addresses = '127.0.0.1'")?;
        writeln!(conf, "port = {port}")?;
        writeln!(conf, "unix_socket_directories = '{}'", dir.path().display())?;
        for (k, v) in settings {
            writeln!(conf, "{k} = '{v}'")?;
        }
        drop(conf);

        let running = Running {
            bin: bin.to_owned(),
            data: data.clone(),
            dir: dir.path().to_owned(),
            as_postgres,
        };
        *lock_running() = Some(running.clone());
        let log = dir.path().join("server.log");
        let started = run(pg_command(as_postgres, &bin.join("pg_ctl"), dir.path())
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "start"]));
        if let Err(e) = started {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            stop(&running);
            *lock_running() = None;
            return Err(format!("PostgreSQL did not start: {e}\n{tail}").into());
        }
        Ok(TempPg {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            running,
            dir: Some(dir),
        })
    }
}

impl Drop for TempPg {
    fn drop(&mut self) {
        stop(&self.running);
        *lock_running() = None;
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

/// Stops a running throwaway PostgreSQL and deletes its directory (the Ctrl-C handler's part,
/// `main.rs`).
pub(crate) fn stop_on_interrupt() {
    if let Some(r) = lock_running().take() {
        stop(&r);
        let _ = std::fs::remove_dir_all(&r.dir);
    }
}

fn lock_running() -> std::sync::MutexGuard<'static, Option<Running>> {
    RUNNING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn stop(r: &Running) {
    let result = pg_command(r.as_postgres, &r.bin.join("pg_ctl"), &r.dir)
        .arg("-D")
        .arg(&r.data)
        .args(["-m", "fast", "-w", "-t", "30", "stop"])
        .output();
    if let Err(e) = result {
        eprintln!("could not stop the throwaway PostgreSQL: {e}");
    }
}

fn pg_command(as_postgres: bool, program: &Path, cwd: &Path) -> Command {
    let mut cmd = if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.current_dir(cwd);
    cmd
}

fn run(cmd: &mut Command) -> BenchResult<()> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

pub(crate) fn running_as_root() -> BenchResult<bool> {
    let out = Command::new("id").arg("-u").output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn free_port() -> BenchResult<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
