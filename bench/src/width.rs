//! Issue 23, item 4: width on PostgreSQL. Jobs/s of `claim_next` + `complete` against the number
//! of workers: threads in one process (one pooled connection each), and several processes of
//! [`THREADS_PER_PROCESS`] threads each (children of this program, started with the hidden
//! `--width-child` flag), with the client CPU per job of each shape.
//!
//! The children connect, say `ready`, and start their window together when the parent writes
//! `go`; each then prints one line of counts, which the parent adds up.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::depth::{self, Layout};
use crate::measure::{self, Sample, Window};
use crate::pg::PgBench;
use crate::BenchResult;

/// Shape names, as recorded (group `width`, unit `jobs/s`; `workers` counts threads in all).
pub(crate) const THREADS: &str = "threads in one process";
pub(crate) const PROCESSES: &str = "processes x 4 threads";

/// Threads of each child process.
pub(crate) const THREADS_PER_PROCESS: usize = 4;

/// The table every width measurement claims from: the claiming guide's recommended layout.
pub(crate) const LAYOUT: Layout = depth::RECOMMENDED;

impl PgBench {
    /// `claim_next` + `complete` on `threads` threads of this process.
    pub(crate) fn width_threads(&self, threads: usize) -> BenchResult<Sample> {
        let (_pool, conns) = self.connections(threads)?;
        measure::timed(conns, self.window, |conn| depth::job(conn, LAYOUT.order))
    }

    /// `claim_next` + `complete` in `processes` child processes of [`THREADS_PER_PROCESS`]
    /// threads each, their windows started together; rates and jobs add up, the client CPU is
    /// the children's own, per job; p50 is the median of the children's, p99 the largest.
    pub(crate) fn width_processes(&self, processes: usize) -> BenchResult<Sample> {
        let mut children = Vec::with_capacity(processes);
        let result = (|| -> BenchResult<Sample> {
            for _ in 0..processes {
                children.push(WidthChild::spawn(&self.url, self.window)?);
            }
            for c in &mut children {
                c.expect_line("ready")?;
            }
            for c in &mut children {
                writeln!(c.stdin, "go")?;
                c.stdin.flush()?;
            }
            let mut samples = Vec::with_capacity(processes);
            for c in &mut children {
                samples.push(parse_counts(&c.read_line()?, self.window)?);
            }
            Ok(combine(&samples, self.window))
        })();
        for mut c in children {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
        result
    }
}

/// A child process running [`run_child`].
struct WidthChild {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl WidthChild {
    fn spawn(url: &str, window: Window) -> BenchResult<WidthChild> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--width-child")
            .arg(THREADS_PER_PROCESS.to_string())
            .arg("--warmup")
            .arg(window.warmup_secs.to_string())
            .arg("--duration")
            .arg(window.measure_secs.to_string())
            .env("DATABASE_URL", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin for the child")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout for the child")?);
        Ok(WidthChild {
            child,
            stdin,
            stdout,
        })
    }

    fn read_line(&mut self) -> BenchResult<String> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err("a width child exited early (see its error above)".into());
        }
        Ok(line.trim().to_owned())
    }

    fn expect_line(&mut self, want: &str) -> BenchResult<()> {
        let line = self.read_line()?;
        if line != want {
            return Err(format!("a width child said `{line}`, expected `{want}`").into());
        }
        Ok(())
    }
}

/// The child: `threads` pooled connections on `DATABASE_URL`; after `go` on stdin, one window of
/// `claim_next` + `complete`, then its counts on stdout:
/// `ops items empty_ops p50_us p99_us cpu_us_per_op`.
pub(crate) fn run_child(threads: usize, window: Window) -> BenchResult<()> {
    let url = std::env::var("DATABASE_URL")?;
    let pool =
        diesel_lease::pool::build_pool::<diesel::PgConnection>(&url, u32::try_from(threads)?)?;
    let conns = (0..threads)
        .map(|_| pool.get())
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;
    if go.trim() != "go" {
        return Err(format!("expected `go`, got `{}`", go.trim()).into());
    }
    let s = measure::timed(conns, window, |conn| depth::job(conn, LAYOUT.order))?;
    writeln!(
        out,
        "{} {} {} {} {} {}",
        s.ops,
        s.items,
        s.empty_ops,
        s.p50_us,
        s.p99_us,
        s.client_cpu_us_per_op.unwrap_or(f64::NAN)
    )?;
    out.flush()?;
    Ok(())
}

fn parse_counts(line: &str, window: Window) -> BenchResult<Sample> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let bad = || format!("a width child printed `{line}`");
    if f.len() != 6 {
        return Err(bad().into());
    }
    let int = |i: usize| f[i].parse::<u64>().map_err(|_| bad());
    let float = |i: usize| f[i].parse::<f64>().map_err(|_| bad());
    let items = int(1)?;
    let cpu = float(5)?;
    Ok(Sample {
        ops: int(0)?,
        items,
        empty_ops: int(2)?,
        secs: window.measure_secs,
        rate: items as f64 / window.measure_secs,
        p50_us: float(3)?,
        p99_us: float(4)?,
        client_cpu_us_per_op: cpu.is_finite().then_some(cpu),
    })
}

/// The children's samples as one: counts and rates add up, CPU is weighted by operations.
fn combine(samples: &[Sample], window: Window) -> Sample {
    let ops: u64 = samples.iter().map(|s| s.ops).sum();
    let items: u64 = samples.iter().map(|s| s.items).sum();
    let mut p50s: Vec<f64> = samples.iter().map(|s| s.p50_us).collect();
    p50s.sort_by(f64::total_cmp);
    let cpu: Option<f64> = samples
        .iter()
        .map(|s| s.client_cpu_us_per_op.map(|c| c * s.ops as f64))
        .sum();
    Sample {
        ops,
        items,
        empty_ops: samples.iter().map(|s| s.empty_ops).sum(),
        secs: window.measure_secs,
        rate: items as f64 / window.measure_secs,
        p50_us: p50s.get(p50s.len() / 2).copied().unwrap_or(f64::NAN),
        p99_us: samples.iter().map(|s| s.p99_us).fold(f64::NAN, f64::max),
        client_cpu_us_per_op: cpu.filter(|_| ops > 0).map(|c| c / ops as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_counts_add_up() {
        let window = Window {
            warmup_secs: 0.0,
            measure_secs: 2.0,
        };
        let a = parse_counts("100 100 0 250.5 900 40", window).unwrap();
        let b = parse_counts("300 300 0 300 1200 60", window).unwrap();
        let c = combine(&[a, b], window);
        assert_eq!((c.ops, c.items), (400, 400));
        assert_eq!(c.rate, 200.0);
        assert_eq!(c.p99_us, 1200.0);
        // (100 x 40 + 300 x 60) / 400
        assert_eq!(c.client_cpu_us_per_op, Some(55.0));
        assert!(parse_counts("1 2 3", window).is_err());
    }
}
