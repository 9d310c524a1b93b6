//! The claims/s against workers plot, as SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Report;
use crate::BenchResult;

/// The lines of the plot: (group, shape name, legend, colour).
const LINES: &[(&str, &str, &str, RGBColor)] = &[
    (
        "claim",
        "raw (sql_query)",
        "raw SQL via sql_query (PG)",
        RGBColor(120, 120, 120),
    ),
    (
        "claim",
        "raw (prepared)",
        "raw SQL, prepared (PG)",
        RGBColor(0, 0, 0),
    ),
    (
        "claim",
        "claim_next",
        "claim_next (PG)",
        RGBColor(31, 119, 180),
    ),
    (
        "claim",
        "two-statement",
        "SELECT then UPDATE (PG)",
        RGBColor(214, 39, 40),
    ),
    (
        "sqlite",
        "claim_next",
        "claim_next (SQLite, WAL)",
        RGBColor(44, 160, 44),
    ),
];

/// The lines of the end-to-end plot (issue 12): jobs/s, claim + complete.
const E2E_LINES: &[(&str, &str, &str, RGBColor)] = &[
    (
        "e2e",
        crate::e2e::PGBENCH,
        "pgbench, literal values, prepared (floor)",
        RGBColor(0, 0, 0),
    ),
    (
        "e2e",
        crate::e2e::CLAIM_NEXT,
        "claim_next + complete",
        RGBColor(31, 119, 180),
    ),
    (
        "e2e",
        crate::e2e::BATCH,
        "claim_batch(50) + complete_batch",
        RGBColor(44, 160, 44),
    ),
    (
        "e2e",
        crate::e2e::BATCH_EACH,
        "claim_batch(50) + 50 x complete",
        RGBColor(148, 103, 189),
    ),
    (
        "e2e",
        crate::e2e::FANG,
        "fang fetch_and_touch + remove",
        RGBColor(214, 39, 40),
    ),
    (
        "e2e",
        crate::e2e::FANG_POOL,
        "fang WorkerPool",
        RGBColor(255, 127, 14),
    ),
];

/// One line of the plot: legend, colour, (log2 workers, claims/s) points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// Draws claims/s against workers (log2 axis) for every line that has points.
pub(crate) fn claims_vs_workers(report: &Report, path: &Path) -> BenchResult<()> {
    draw(
        report,
        path,
        LINES,
        "diesel-lease: claims/s against workers",
        "claims/s",
    )
}

/// Draws jobs/s end to end (claim + complete) against workers.
pub(crate) fn jobs_vs_workers(report: &Report, path: &Path) -> BenchResult<()> {
    draw(
        report,
        path,
        E2E_LINES,
        "PostgreSQL: jobs/s end to end (claim + complete)",
        "jobs/s",
    )
}

fn draw(
    report: &Report,
    path: &Path,
    lines: &[(&str, &str, &str, RGBColor)],
    caption: &str,
    unit: &str,
) -> BenchResult<()> {
    let series: Vec<Series<'_>> = lines
        .iter()
        .map(|(group, name, legend, colour)| {
            let pts: Vec<(f64, f64)> = report
                .measurements
                .iter()
                .filter(|m| m.group == *group && m.name == *name)
                .map(|m| ((m.workers as f64).log2(), m.sample.rate))
                .collect();
            (*legend, *colour, pts)
        })
        .filter(|(_, _, pts)| !pts.is_empty())
        .collect();
    let max_x = series
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|(x, _)| *x))
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let max_y = series
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|(_, y)| *y))
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.1;

    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2_f64..max_x + 0.2, 0.0_f64..max_y)?;
    chart
        .configure_mesh()
        .x_desc("workers (threads, one pooled connection each)")
        .y_desc(unit)
        .x_labels(max_x as usize + 1)
        .x_label_formatter(&|x| format!("{}", 2_f64.powf(x.round()) as u64))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (legend, colour, pts) in series {
        chart
            .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))?
            .label(legend)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The lines of the width plot (issue 23): jobs/s, claim + complete, against threads in all.
const WIDTH_LINES: &[(&str, &str, &str, RGBColor)] = &[
    (
        "width",
        crate::width::THREADS,
        "threads in one process",
        RGBColor(31, 119, 180),
    ),
    (
        "width",
        crate::width::PROCESSES,
        "processes of 4 threads",
        RGBColor(214, 39, 40),
    ),
];

/// Draws jobs/s (claim_next + complete) against threads in one process and in several.
pub(crate) fn width(report: &Report, path: &Path) -> BenchResult<()> {
    draw(
        report,
        path,
        WIDTH_LINES,
        "PostgreSQL: claim_next + complete, jobs/s against workers",
        "jobs/s",
    )
}
