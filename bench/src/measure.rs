//! Running an operation on N threads for a fixed time, or for a fixed number of items.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::BenchResult;

/// How long a measurement warms up, then counts.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Window {
    /// Seconds run before counting starts (statements get prepared, caches fill).
    pub(crate) warmup_secs: f64,
    /// Seconds counted.
    pub(crate) measure_secs: f64,
}

/// What one measurement counted.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    /// Operations completed inside the counted window.
    pub(crate) ops: u64,
    /// Items (claimed rows, won guards) those operations returned.
    pub(crate) items: u64,
    /// Operations that returned no item (a claim that found no ready row: the table ran dry).
    pub(crate) empty_ops: u64,
    /// Length of the counted window.
    pub(crate) secs: f64,
    /// Items per second.
    pub(crate) rate: f64,
    /// Median latency of one operation, µs.
    pub(crate) p50_us: f64,
    /// 99th percentile latency of one operation, µs.
    pub(crate) p99_us: f64,
    /// CPU time this process (the client: Diesel, diesel-lease, libpq) spent per operation in the
    /// counted window, µs; from /proc/self/stat, so `null` where that is unavailable.
    pub(crate) client_cpu_us_per_op: Option<f64>,
}

/// Runs `op` on one thread per state until the window ends. `op` returns the items it produced.
///
/// Only operations that start after the warm-up and finish inside the window are counted.
pub(crate) fn timed<S, F>(states: Vec<S>, window: Window, op: F) -> BenchResult<Sample>
where
    S: Send,
    F: Fn(&mut S) -> BenchResult<u64> + Sync,
{
    let start = Instant::now();
    let from = start + Duration::from_secs_f64(window.warmup_secs);
    let until = from + Duration::from_secs_f64(window.measure_secs);
    let op = &op;
    let mut cpu: (Option<u64>, Option<u64>) = (None, None);
    let per_thread: Vec<BenchResult<Counts>> = std::thread::scope(|s| {
        let handles: Vec<_> = states
            .into_iter()
            .map(|mut state| {
                s.spawn(move || -> BenchResult<Counts> {
                    let mut c = Counts::default();
                    loop {
                        let t = Instant::now();
                        if t >= until {
                            return Ok(c);
                        }
                        let n = op(&mut state)?;
                        let done = Instant::now();
                        if t >= from && done <= until {
                            c.ops += 1;
                            c.items += n;
                            c.empty += u64::from(n == 0);
                            c.latencies_ns.push(duration_ns(done - t));
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(from.saturating_duration_since(Instant::now()));
        cpu.0 = process_cpu_ticks();
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        cpu.1 = process_cpu_ticks();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect()
    });
    let mut total = Counts::default();
    for c in per_thread {
        let c = c?;
        total.ops += c.ops;
        total.items += c.items;
        total.empty += c.empty;
        total.latencies_ns.extend(c.latencies_ns);
    }
    total.latencies_ns.sort_unstable();
    Ok(Sample {
        ops: total.ops,
        items: total.items,
        empty_ops: total.empty,
        secs: window.measure_secs,
        rate: total.items as f64 / window.measure_secs,
        p50_us: percentile_us(&total.latencies_ns, 0.50),
        p99_us: percentile_us(&total.latencies_ns, 0.99),
        client_cpu_us_per_op: match cpu {
            (Some(a), Some(b)) if total.ops > 0 => {
                Some((b.saturating_sub(a)) as f64 * 1e6 / CLOCK_TICKS_PER_SEC / total.ops as f64)
            }
            _ => None,
        },
    })
}

/// `sysconf(_SC_CLK_TCK)` on Linux: the unit of /proc's CPU times.
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

/// User plus system CPU of this process so far, in clock ticks (/proc/self/stat fields 14, 15).
fn process_cpu_ticks() -> Option<u64> {
    stat_cpu_ticks("/proc/self/stat", false)
}

/// Clock ticks to µs.
pub(crate) fn ticks_to_us(ticks: u64) -> f64 {
    ticks as f64 * 1e6 / CLOCK_TICKS_PER_SEC
}

/// User plus system CPU in clock ticks from a `/proc/<pid>/stat` file; with `children`, the CPU
/// of waited-for children instead (fields 16, 17): what a child program such as pgbench used.
pub(crate) fn stat_cpu_ticks(path: &str, children: bool) -> Option<u64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may contain spaces; the fields after it start past the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3, so fields 14 and 15 are at indexes 11 and 12.
    let at = if children { 13 } else { 11 };
    let utime: u64 = fields.get(at)?.parse().ok()?;
    let stime: u64 = fields.get(at + 1)?.parse().ok()?;
    Some(utime + stime)
}

/// Runs `op` on one thread per state until `total` items are produced; returns the items per
/// second of each tenth of the run, in order.
pub(crate) fn consecutive<S, F>(states: Vec<S>, total: u64, op: F) -> BenchResult<Vec<f64>>
where
    S: Send,
    F: Fn(&mut S) -> BenchResult<u64> + Sync,
{
    let done = AtomicU64::new(0);
    let start = Instant::now();
    // marks[k]: when item number (k + 1) * total / 10 was produced.
    let marks: Mutex<Vec<Option<Instant>>> = Mutex::new(vec![None; 10]);
    let tenth = |k: usize| (k as u64 + 1) * total / 10;
    let (op, done, marks) = (&op, &done, &marks);
    let results: Vec<BenchResult<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = states
            .into_iter()
            .map(|mut state| {
                s.spawn(move || -> BenchResult<()> {
                    while done.load(Ordering::Relaxed) < total {
                        let n = op(&mut state)?;
                        if n == 0 {
                            return Err("the table ran dry before the run's last claim".into());
                        }
                        let before = done.fetch_add(n, Ordering::Relaxed);
                        let now = Instant::now();
                        let mut m = marks.lock().unwrap_or_else(|p| p.into_inner());
                        for (k, slot) in m.iter_mut().enumerate() {
                            let boundary = tenth(k);
                            if slot.is_none() && before < boundary && before + n >= boundary {
                                *slot = Some(now);
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    let marks = marks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut prev = start;
    let mut rates = Vec::with_capacity(10);
    for (k, m) in marks.into_iter().enumerate() {
        let at = m.ok_or("a tenth of the run was never reached")?;
        let items = tenth(k) - if k == 0 { 0 } else { tenth(k - 1) };
        let secs = (at - prev).as_secs_f64().max(1e-9);
        rates.push(items as f64 / secs);
        prev = at;
    }
    Ok(rates)
}

#[derive(Debug, Default)]
struct Counts {
    ops: u64,
    items: u64,
    empty: u64,
    latencies_ns: Vec<u64>,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn percentile_us(sorted_ns: &[u64], q: f64) -> f64 {
    if sorted_ns.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted_ns.len() - 1) as f64 * q).round() as usize;
    sorted_ns[i.min(sorted_ns.len() - 1)] as f64 / 1000.0
}

/// Runs `op` on this thread `warmup` times uncounted, then `ops` times counted.
pub(crate) fn counted<S, F>(mut state: S, warmup: u64, ops: u64, op: F) -> BenchResult<Sample>
where
    F: Fn(&mut S) -> BenchResult<u64>,
{
    for _ in 0..warmup {
        op(&mut state)?;
    }
    let mut c = Counts::default();
    let start = Instant::now();
    for _ in 0..ops {
        let t = Instant::now();
        let n = op(&mut state)?;
        c.latencies_ns.push(duration_ns(t.elapsed()));
        c.ops += 1;
        c.items += n;
        c.empty += u64::from(n == 0);
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    c.latencies_ns.sort_unstable();
    Ok(Sample {
        ops: c.ops,
        items: c.items,
        empty_ops: c.empty,
        secs,
        rate: c.items as f64 / secs,
        p50_us: percentile_us(&c.latencies_ns, 0.50),
        p99_us: percentile_us(&c.latencies_ns, 0.99),
        client_cpu_us_per_op: None,
    })
}

/// How long each inserted row took to reach a waiter (its claim's instant minus its insert's; 0
/// when the claim was noted first), in `per_sec` units of a second (1e6: microseconds), sorted.
/// Rows never claimed are left out.
pub(crate) fn insert_to_claim(
    inserted: &HashMap<i64, Instant>,
    claimed: &HashMap<i64, Instant>,
    per_sec: f64,
) -> Vec<f64> {
    let mut latencies: Vec<f64> = inserted
        .iter()
        .filter_map(|(id, at)| {
            Some(
                claimed
                    .get(id)?
                    .saturating_duration_since(*at)
                    .as_secs_f64()
                    * per_sec,
            )
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

/// Waits until `claimed` holds `rows` rows, or `grace` has passed.
pub(crate) fn wait_for_claims(
    claimed: &Mutex<HashMap<i64, Instant>>,
    rows: usize,
    grace: Duration,
) -> BenchResult<()> {
    let until = Instant::now() + grace;
    while claimed.lock().map_err(|_| "poisoned")?.len() < rows && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The `p` quantile (0 to 1) of `sorted`, by the nearest rank; NaN when it is empty.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn percentiles_pick_from_sorted_samples() {
        let ns: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile_us(&ns, 0.5), 51.0);
        assert_eq!(percentile_us(&ns, 0.99), 99.0);
        assert!(percentile_us(&[], 0.5).is_nan());
    }

    #[test]
    fn consecutive_reports_ten_tenths_and_stops_at_the_total() {
        let produced = AtomicU64::new(0);
        let rates = consecutive(vec![(); 3], 1_000, |_| {
            produced.fetch_add(1, Ordering::Relaxed);
            Ok(1)
        })
        .unwrap();
        assert_eq!(rates.len(), 10);
        assert!(rates.iter().all(|r| *r > 0.0));
        // Each of 3 threads may finish one item past the total.
        assert!((1_000..=1_003).contains(&produced.load(Ordering::Relaxed)));
    }

    #[test]
    fn timed_counts_only_the_window() {
        let window = Window {
            warmup_secs: 0.05,
            measure_secs: 0.1,
        };
        let s = timed(vec![(); 2], window, |_| {
            std::thread::sleep(Duration::from_millis(1));
            Ok(2)
        })
        .unwrap();
        assert_eq!(s.items, 2 * s.ops);
        assert_eq!(s.empty_ops, 0);
        assert!(s.ops > 0);
        // Two threads at ≤ 1 op/ms for 0.1 s: never more than 200 ops.
        assert!(s.ops <= 200, "{} ops", s.ops);
    }

    #[test]
    fn process_cpu_ticks_reads_proc() {
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(process_cpu_ticks().is_some());
        }
    }
}
