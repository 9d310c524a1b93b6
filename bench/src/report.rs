//! What a run found: the JSON written to `target/bench/results.json`, the printed table and the
//! target ratios.

use serde::Serialize;

use crate::measure::{Sample, Window};
use crate::pg::{Autovacuum, Index, ServerFacts, VacuumStats};
pub(crate) use crate::target::TargetCheck;

/// One measurement of one shape at one worker count.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Measurement {
    /// Section of the run: `claim`, `batch`, `guard`, `sqlite`.
    pub(crate) group: &'static str,
    /// What ran, e.g. `claim_next` or `raw (sql_query)`.
    pub(crate) name: String,
    pub(crate) backend: &'static str,
    pub(crate) workers: usize,
    /// `claims/s`, `rows/s` or `guards/s`.
    pub(crate) unit: &'static str,
    #[serde(flatten)]
    pub(crate) sample: Sample,
    /// Every round's rate in the order the rounds ran, when the section ran several (the sample
    /// above is the median round): what [`Report::paired`] pairs with the other shape's rounds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) round_rates: Vec<f64>,
}

/// Two shapes measured in the same interleaved rounds, compared round by round: each round's
/// ratio `a / b` (both measured minutes apart on the same machine state), their median and range.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Paired {
    /// The rounds' own ratios, in the order the rounds ran.
    pub(crate) ratios: Vec<f64>,
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Paired {
    /// Round `i` of `a` over round `i` of `b`; `None` unless both ran the same number of rounds,
    /// at least two, all with a rate above zero in `b`.
    pub(crate) fn of(a: &[f64], b: &[f64]) -> Option<Paired> {
        if a.len() != b.len() || a.len() < 2 || b.iter().any(|r| *r <= 0.0) {
            return None;
        }
        let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
        let mut sorted = ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Paired {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            ratios,
        })
    }

    /// `paired rounds: median 0.93, 0.88-1.01 (5 rounds)`, and whether the rounds straddle
    /// `target` (some above it, some below): then one run's verdict is within its own spread.
    pub(crate) fn describe(&self, target: f64) -> String {
        let straddles = self.min < target && self.max >= target;
        format!(
            "paired rounds: median {:.2}, {:.2}-{:.2} ({} rounds){}",
            self.median,
            self.min,
            self.max,
            self.ratios.len(),
            if straddles {
                "; the rounds fall on both sides of the target"
            } else {
                ""
            }
        )
    }
}

/// Per-claim cost at one table size (`claim_next`, one worker, fresh table).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScalePoint {
    pub(crate) ready_rows: u64,
    pub(crate) index: Index,
    /// Mean cost of one claim (the inverse of the rate), µs.
    pub(crate) mean_us: f64,
    #[serde(flatten)]
    pub(crate) sample: Sample,
}

/// Throughput over consecutive claims, per tenth of the run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Consecutive {
    /// What each item is: `claim_next` (a claim) or `claim_next + complete` (a whole job).
    pub(crate) shape: &'static str,
    pub(crate) claims: u64,
    pub(crate) workers: usize,
    pub(crate) index: Index,
    pub(crate) autovacuum: Autovacuum,
    pub(crate) tenths_per_sec: Vec<f64>,
    pub(crate) first_tenth: f64,
    pub(crate) last_tenth: f64,
    /// Last tenth over first tenth.
    pub(crate) ratio: f64,
    pub(crate) secs: f64,
    pub(crate) vacuum_after: Option<VacuumStats>,
}

/// Semaphore cycles and hand-off latency on one backend.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SemaphoreRun {
    pub(crate) backend: &'static str,
    /// Whether waiters are woken by LISTEN/NOTIFY (PostgreSQL) or only poll (SQLite).
    pub(crate) listen_notify: bool,
    pub(crate) permits: u32,
    pub(crate) contenders: usize,
    /// Per-call counts of `acquire_on` + `release` (calls that started in the warm-up are not
    /// counted here; `handoff.grants_per_sec` counts them).
    pub(crate) sample: Sample,
    pub(crate) handoff: crate::coordination::Handoff,
}

/// The machine the run happened on.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    pub(crate) nproc: usize,
    pub(crate) cpu_model: String,
    pub(crate) memory: String,
}

impl Machine {
    pub(crate) fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
                .unwrap_or_else(|| "unknown".to_owned())
        };
        Machine {
            nproc: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model: field(&cpuinfo, "model name"),
            memory: field(&meminfo, "MemTotal"),
        }
    }
}

/// Where the PostgreSQL numbers came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PgInfo {
    /// `throwaway` (started by this program) or `DATABASE_URL`.
    pub(crate) source: &'static str,
    /// Settings written into the throwaway server's `postgresql.conf`.
    pub(crate) started_with: Vec<(String, String)>,
    /// Version and settings as the server reports them.
    pub(crate) server: ServerFacts,
    /// Autovacuum options of the queue table.
    pub(crate) queue_table_autovacuum: Autovacuum,
}

/// What the run measured and under what load: the commit the program was built from and the
/// machine's load average when the run started and ended, so a table in BENCHMARKS.md can say
/// which code it measured and how busy the machine was.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Provenance {
    /// The workspace's commit (`git rev-parse --short HEAD`), `-dirty` when a tracked file other
    /// than the results and docs differs from it (a run's own `--write-docs` output does not
    /// count); `unknown` without git.
    pub(crate) commit: String,
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages when the run started.
    pub(crate) load_before: String,
    /// The same when the run ended (filled in before the results are written).
    pub(crate) load_after: String,
    /// When the run ended (RFC 3339).
    pub(crate) finished_at: String,
}

impl Provenance {
    /// The commit and the load now; the run's end is filled in by [`Provenance::finish`].
    pub(crate) fn start(workspace: &std::path::Path) -> Provenance {
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(workspace)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        let commit = match git(&["rev-parse", "--short", "HEAD"]) {
            None => "unknown".to_owned(),
            Some(head) => {
                let code_changed = git(&[
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                    "--",
                    ".",
                    ":(exclude)docs",
                    ":(exclude)*.md",
                ])
                .is_some_and(|changed| !changed.is_empty());
                if code_changed {
                    format!("{head}-dirty")
                } else {
                    head
                }
            }
        };
        Provenance {
            commit,
            load_before: load_average(),
            load_after: String::new(),
            finished_at: String::new(),
        }
    }

    /// Records the load and the time at the run's end.
    pub(crate) fn finish(&mut self) {
        self.load_after = load_average();
        self.finished_at = chrono::Utc::now().to_rfc3339();
    }
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` writes them (`unknown` elsewhere).
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Everything `results.json` holds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) started_at: String,
    pub(crate) provenance: Provenance,
    pub(crate) mode: &'static str,
    pub(crate) command: String,
    pub(crate) window: Window,
    /// Rounds of the claim and batch sections (the median round is reported).
    pub(crate) rounds: usize,
    pub(crate) ready_rows: u64,
    pub(crate) machine: Machine,
    pub(crate) postgres: PgInfo,
    pub(crate) measurements: Vec<Measurement>,
    pub(crate) scale: Vec<ScalePoint>,
    pub(crate) consecutive: Vec<Consecutive>,
    /// Issue 23: consecutive jobs per queue-table layout, with the table's statistics.
    pub(crate) depth: Vec<crate::depth::DepthRun>,
    /// Issue 23: `claim_next` + `complete` at a small and a large table.
    pub(crate) depth_sizes: Vec<crate::depth::DepthSize>,
    /// Issue 23: the same two depths held constant over consecutive windows (`--only steady`).
    pub(crate) steady: Vec<crate::depth::SteadyRun>,
    pub(crate) semaphores: Vec<SemaphoreRun>,
    /// Idle waiters' cost where there are no notifications (section `idle`).
    pub(crate) idle: Vec<crate::idle::IdleRun>,
    /// Kept-alive holders in one process (section `holders`, issue 55).
    pub(crate) holders: Vec<crate::holders::HoldersRun>,
    /// Issue 23: per backend, our statements next to the floors' and the table checks.
    pub(crate) floors: Vec<crate::floors::FloorRun>,
    /// Client instructions per job, ours against the floors (section `instructions`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) instructions: Vec<crate::instructions::Count>,
    pub(crate) targets: Vec<TargetCheck>,
    pub(crate) not_measured: Vec<String>,
    pub(crate) warnings: Vec<String>,
}

impl Report {
    /// The measurement named `name` in `group` at `workers`, if it ran.
    pub(crate) fn measurement(
        &self,
        group: &str,
        name: &str,
        workers: usize,
    ) -> Option<&Measurement> {
        self.measurements
            .iter()
            .find(|m| m.group == group && m.name == name && m.workers == workers)
    }

    /// The rate of the measurement named `name` in `group` at `workers`, if it ran.
    pub(crate) fn rate(&self, group: &str, name: &str, workers: usize) -> Option<f64> {
        self.measurement(group, name, workers)
            .map(|m| m.sample.rate)
    }

    /// `a` over `b` in `group` at `workers`, round by round ([`Paired::of`]), if both recorded
    /// their rounds.
    pub(crate) fn paired(&self, group: &str, a: &str, b: &str, workers: usize) -> Option<Paired> {
        let rounds = |name: &str| {
            self.measurement(group, name, workers)
                .map(|m| m.round_rates.as_slice())
        };
        Paired::of(rounds(a)?, rounds(b)?)
    }

    /// Prints the results, the scale runs and the targets as plain-text tables.
    pub(crate) fn print(&self) {
        println!();
        println!(
            "commit {}; load average {} at the start ({}), {} at the end ({})",
            self.provenance.commit,
            self.provenance.load_before,
            self.started_at,
            self.provenance.load_after,
            self.provenance.finished_at
        );
        println!(
            "{:<8} {:<26} {:<9} {:>7} {:>12} {:<9} {:>9} {:>9} {:>11}",
            "group",
            "shape",
            "backend",
            "workers",
            "rate",
            "unit",
            "p50 µs",
            "p99 µs",
            "client µs/op"
        );
        for m in &self.measurements {
            println!(
                "{:<8} {:<26} {:<9} {:>7} {:>12.0} {:<9} {:>9.1} {:>9.1} {:>11}{}",
                m.group,
                m.name,
                m.backend,
                m.workers,
                m.sample.rate,
                m.unit,
                m.sample.p50_us,
                m.sample.p99_us,
                m.sample
                    .client_cpu_us_per_op
                    .map_or("-".to_owned(), |c| format!("{c:.1}")),
                if m.group == "lease" {
                    lease_note(&m.sample)
                } else {
                    dry_note(&m.sample).to_owned()
                }
            );
        }
        if !self.instructions.is_empty() {
            println!();
            println!(
                "{:<9} {:<52} {:>14} {:>14} {:>7}  floor",
                "backend", "client instructions per job", "ours", "floor", "ratio"
            );
            for c in &self.instructions {
                println!(
                    "{:<9} {:<52} {:>14.0} {:>14.0} {:>7.2}  {}",
                    c.backend,
                    c.shape,
                    c.ours,
                    c.floor,
                    c.ours / c.floor,
                    c.floor_is
                );
            }
        }
        if !self.scale.is_empty() {
            println!();
            println!(
                "{:<12} {:<14} {:>12} {:>10} {:>10} {:>10}",
                "ready rows", "index", "claims/s", "mean µs", "p50 µs", "p99 µs"
            );
            for p in &self.scale {
                println!(
                    "{:<12} {:<14} {:>12.0} {:>10.1} {:>10.1} {:>10.1}{}",
                    p.ready_rows,
                    format!("{:?}", p.index),
                    p.sample.rate,
                    p.mean_us,
                    p.sample.p50_us,
                    p.sample.p99_us,
                    dry_note(&p.sample)
                );
            }
        }
        self.print_floors();
        for c in &self.consecutive {
            println!();
            println!(
                "{} consecutive `{}`, {} workers, {:?}, autovacuum {:?}: {:.1} s; items/s per tenth:",
                c.claims, c.shape, c.workers, c.index, c.autovacuum, c.secs
            );
            let tenths: Vec<String> = c.tenths_per_sec.iter().map(|r| format!("{r:.0}")).collect();
            println!("  {}", tenths.join(" "));
            println!(
                "  last/first = {:.2}{}",
                c.ratio,
                c.vacuum_after
                    .as_ref()
                    .map(|v| format!(
                        "; afterwards {} dead rows, {} autovacuum runs",
                        v.dead_rows, v.autovacuum_runs
                    ))
                    .unwrap_or_default()
            );
        }
        crate::depth::print(&self.depth, &self.depth_sizes);
        crate::depth::print_steady(&self.steady);
        for sr in &self.semaphores {
            println!();
            println!(
                "semaphore ({} permit, {} contenders, {}{}): {:.0} acquire+release/s; \
                 release->grant p50 {:.2} ms, p99 {:.2} ms over {} hand-offs",
                sr.permits,
                sr.contenders,
                sr.backend,
                if sr.listen_notify {
                    ", LISTEN/NOTIFY"
                } else {
                    ", polling"
                },
                sr.handoff.grants_per_sec,
                sr.handoff.p50_ms,
                sr.handoff.p99_ms,
                sr.handoff.count
            );
        }
        println!();
        println!("targets (ratios from this run; nothing is asserted):");
        for t in &self.targets {
            let bound = match (t.at_least, t.at_most) {
                (Some(min), _) => format!(">= {min:.2}"),
                (_, Some(max)) => format!("<= {max:.2}"),
                _ => String::new(),
            };
            let ratio = t.ratio.map_or("-".to_owned(), |r| format!("{r:.2}"));
            println!(
                "  {:<62} {:>6} (target {:<7}) {:<12} {}",
                t.target, ratio, bound, t.verdict, t.detail
            );
        }
        for n in &self.not_measured {
            println!("  not measured: {n}");
        }
        for w in &self.warnings {
            println!("  warning: {w}");
        }
    }
}

impl Report {
    /// Issue 23: ours against each backend's literal floor, jobs/s and client CPU per job.
    fn print_floors(&self) {
        use crate::{e2e, floors};
        let pairs = [
            ("e2e", e2e::CLAIM_NEXT, e2e::PGBENCH),
            ("e2e", e2e::BATCH, e2e::PGBENCH_BATCH),
            ("e2e-mysql", e2e::CLAIM_NEXT, floors::SLAP),
            ("e2e-mysql", e2e::BATCH, floors::SLAP_BATCH),
            ("e2e-mysql", floors::CLAIM_NEXT_MARIADB, floors::SLAP),
            ("e2e-mysql", floors::BATCH_MARIADB, floors::SLAP_BATCH),
            ("e2e-sqlite", e2e::CLAIM_NEXT, floors::C_FLOOR),
            ("e2e-sqlite", e2e::BATCH, floors::C_BATCH),
            ("e2e-sqlite", e2e::CLAIM_NEXT, floors::C_FLOOR_THREADS),
            ("e2e-sqlite", e2e::BATCH, floors::C_BATCH_THREADS),
            ("e2e-sqlite", e2e::BATCH_NARROW, floors::C_BATCH),
        ];
        let find = |group: &str, name: &str, w: usize| self.measurement(group, name, w);
        // Client CPU per job: per call (one job, or one batch) times calls over jobs.
        let cpu_per_job = |m: &Measurement| {
            m.sample
                .client_cpu_us_per_op
                .filter(|_| m.sample.items > 0)
                .map(|c| c * m.sample.ops as f64 / m.sample.items as f64)
        };
        let fmt = |c: Option<f64>| c.map_or("-".to_owned(), |c| format!("{c:.1}"));
        let mut header = false;
        for (group, ours, floor) in pairs {
            let mut workers: Vec<usize> = self
                .measurements
                .iter()
                .filter(|m| m.group == group && m.name == floor)
                .map(|m| m.workers)
                .collect();
            workers.sort_unstable();
            workers.dedup();
            for w in workers {
                let (Some(o), Some(f)) = (find(group, ours, w), find(group, floor, w)) else {
                    continue;
                };
                if !header {
                    println!();
                    println!(
                        "{:<10} {:<32} {:<36} {:>7} {:>10} {:>10} {:>6} {:>14} {:>14}  rounds' own \
                         ratios: median (min-max)",
                        "floors",
                        "ours",
                        "floor",
                        "workers",
                        "ours/s",
                        "floor/s",
                        "ratio",
                        "ours µs/job",
                        "floor µs/job"
                    );
                    header = true;
                }
                let paired = self.paired(group, ours, floor, w).map_or_else(
                    || "-".to_owned(),
                    |p| format!("{:.2} ({:.2}-{:.2})", p.median, p.min, p.max),
                );
                println!(
                    "{:<10} {:<32} {:<36} {:>7} {:>10.0} {:>10.0} {:>6.2} {:>14} {:>14}  {}",
                    group,
                    ours,
                    floor,
                    w,
                    o.sample.rate,
                    f.sample.rate,
                    o.sample.rate / f.sample.rate,
                    fmt(cpu_per_job(o)),
                    fmt(cpu_per_job(f)),
                    paired
                );
            }
        }
    }
}

fn lease_note(s: &Sample) -> String {
    if s.empty_ops > 0 {
        format!(
            "  ({} of {} try_acquire calls found it held)",
            s.empty_ops, s.ops
        )
    } else {
        String::new()
    }
}

fn dry_note(s: &Sample) -> &'static str {
    if s.empty_ops > 0 {
        "  (table ran dry: some calls found no row)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_records_its_commit_and_the_load_at_both_ends() {
        let mut p = Provenance::start(std::path::Path::new(env!("CARGO_MANIFEST_DIR")));
        // The workspace is a git checkout in development and CI: a hash, perhaps `-dirty`.
        assert!(
            p.commit.len() >= 7 && p.commit != "unknown",
            "commit {:?}",
            p.commit
        );
        let numbers = |l: &str| {
            l.split(' ')
                .map(|n| n.parse::<f64>().is_ok())
                .collect::<Vec<_>>()
        };
        assert_eq!(numbers(&p.load_before), [true; 3], "{:?}", p.load_before);
        assert!(p.load_after.is_empty() && p.finished_at.is_empty());
        p.finish();
        assert_eq!(numbers(&p.load_after), [true; 3], "{:?}", p.load_after);
        assert!(chrono::DateTime::parse_from_rfc3339(&p.finished_at).is_ok());
    }

    #[test]
    fn paired_rounds_divide_round_by_round_and_say_when_they_straddle_the_target() {
        // The run of 2026-11-26's SQLite single jobs at K = 1, as ratios of two shapes.
        let floor = [100.0, 100.0, 100.0, 100.0, 100.0];
        let ours = [101.0, 95.0, 89.0, 93.0, 93.0];
        let p = Paired::of(&ours, &floor).expect("five rounds each");
        assert_eq!(p.ratios, [1.01, 0.95, 0.89, 0.93, 0.93]);
        assert_eq!((p.median, p.min, p.max), (0.93, 0.89, 1.01));
        let d = p.describe(0.9);
        assert!(
            d.starts_with("paired rounds: median 0.93, 0.89-1.01 (5 rounds)"),
            "{d}"
        );
        assert!(d.ends_with("on both sides of the target"), "{d}");
        assert!(!p.describe(0.85).contains("both sides"));
        // An even count takes the mean of the middle two; the order of the rounds is kept.
        let p = Paired::of(&[3.0, 1.0, 2.0, 4.0], &[1.0; 4]).expect("four rounds");
        assert_eq!(p.ratios, [3.0, 1.0, 2.0, 4.0]);
        assert_eq!(p.median, 2.5);
        // Nothing to pair: one round, unequal counts, a zero rate.
        assert_eq!(Paired::of(&[1.0], &[1.0]), None);
        assert_eq!(Paired::of(&[1.0, 2.0], &[1.0]), None);
        assert_eq!(Paired::of(&[1.0, 2.0], &[1.0, 0.0]), None);
    }
}
