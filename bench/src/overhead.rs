//! `--overhead`: what diesel-lease's instrumentation costs one operation, without a database.
//!
//! Runs the instrumentation of a claim (`diesel_lease::__private::overhead`: the span created,
//! entered, its outcome recorded, closed, and the metrics calls) in a loop, three ways:
//! no subscriber and no metrics recorder (the default for a program that installs neither), a
//! subscriber at WARN (spans filtered out by level), and a subscriber at DEBUG writing to a sink
//! (spans formatted). Prints ns per operation; the budget is 1 µs for the first two.

use std::time::Duration;

use crate::BenchResult;

const N: u64 = 2_000_000;

fn per_op(total: Duration, n: u64) -> f64 {
    total.as_nanos() as f64 / n as f64
}

/// The best of five runs of `n` operations, in ns per operation.
fn measure(n: u64) -> f64 {
    (0..5)
        .map(|_| per_op(diesel_lease::__private::overhead(n), n))
        .fold(f64::INFINITY, f64::min)
}

pub(crate) fn run() -> BenchResult<()> {
    // Warm up the callsite caches.
    diesel_lease::__private::overhead(10_000);
    let none = measure(N);
    let filtered = tracing::subscriber::with_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(std::io::sink)
            .finish(),
        || measure(N),
    );
    let formatted = tracing::subscriber::with_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::sink)
            .finish(),
        || measure(N / 20),
    );
    println!("instrumentation of one operation (span + metrics calls, no database):");
    println!("  no subscriber, no recorder        {none:8.1} ns");
    println!("  subscriber at WARN (span filtered) {filtered:8.1} ns");
    println!("  subscriber at DEBUG, formatted     {formatted:8.1} ns");
    let budget = 1_000.0;
    println!(
        "budget 1000 ns without a subscriber wanting the span: {}",
        if none.max(filtered) <= budget {
            "met"
        } else {
            "MISSED"
        }
    );
    Ok(())
}
