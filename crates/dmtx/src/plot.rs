//! `dmtx report --plot FILE.svg`: simulated runs' throughput over virtual time, one line
//! per run, with the faults each fired marked where they fired (recovery plots in the
//! manner of LOTUS Fig. 15).
//!
//! A simulated run records its commits per 1 ms of virtual time (`sim.timeseries_ms`,
//! counted from the end of its warm-up), so a bucket's count is also its throughput in
//! thousands of transactions per second. Faults are listed in `sim.faults` as
//! `"<virtual ms>: <what>"` from the start of the run; they are shifted by the warm-up to
//! share the series' axis. Runs on real transports record no series and are left out;
//! if none has one, that is an error that says so.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::results::BenchResult;

/// Why no plot was drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No record has a time series.
    #[error("no simulated run among the records: only `--transport sim` runs record `sim.timeseries_ms`")]
    NoSeries,
    /// The drawing library failed.
    #[error("drawing the plot: {0}")]
    Draw(String),
}

/// One run's line: its label, (ms, k txn/s) points and (ms, fault) markers.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
    faults: Vec<(f64, String)>,
}

/// Size of the picture (pixels).
const SIZE: (u32, u32) = (1000, 500);

/// Line colours, in run order (then again).
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// The SVG of the throughput of every simulated run in `runs`.
pub fn throughput_svg(runs: &[(PathBuf, BenchResult)]) -> Result<String, PlotError> {
    let lines: Vec<Line> = runs.iter().filter_map(|(p, r)| line(p, r)).collect();
    if lines.is_empty() {
        return Err(PlotError::NoSeries);
    }
    let x_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0).chain(l.faults.iter().map(|f| f.0)))
        .fold(1.0, f64::max);
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let draw = |e: &dyn std::fmt::Display| PlotError::Draw(e.to_string());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption("committed per 1 ms of virtual time (simulated)", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| draw(&e))?;
        chart
            .configure_mesh()
            .x_desc("virtual time since the warm-up, ms")
            .y_desc("k txn/s")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(|e| draw(&e))?;
        // Fault labels step down the top of the plot so that close ones stay legible.
        let mut marked = 0usize;
        for (i, l) in lines.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(l.points.iter().copied(), colour.stroke_width(2)))
                .map_err(|e| draw(&e))?
                .label(l.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            for (at, what) in &l.faults {
                chart
                    .draw_series(DashedLineSeries::new(
                        [(*at, 0.0), (*at, y_max)],
                        6,
                        4,
                        colour.stroke_width(1),
                    ))
                    .map_err(|e| draw(&e))?;
                let y = y_max * (0.97 - 0.05 * (marked % 6) as f64);
                marked += 1;
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!(" {what}"),
                        (*at, y),
                        ("sans-serif", 12).into_font().color(&colour),
                    )))
                    .map_err(|e| draw(&e))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw(&e))?;
        root.present().map_err(|e| draw(&e))?;
    }
    Ok(svg)
}

/// The line of one record, if it has a series.
fn line(path: &Path, r: &BenchResult) -> Option<Line> {
    let sim = r.sim.as_ref()?;
    if sim.timeseries_ms.is_empty() {
        return None;
    }
    let warmup_ms = r.config.warmup_s * 1e3;
    let faults = sim
        .faults
        .iter()
        .filter_map(|f| {
            let (at, what) = f.split_once(" ms: ")?;
            let at: f64 = at.trim().parse().ok()?;
            Some(((at - warmup_ms).max(0.0), what.to_string()))
        })
        .collect();
    let stem = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    Some(Line {
        label: format!("{} {} ({stem})", r.protocol, r.workload),
        // Bucket k holds the commits of [k, k + 1) ms: drawn at its middle.
        points: sim
            .timeseries_ms
            .iter()
            .enumerate()
            .map(|(k, &n)| (k as f64 + 0.5, n as f64))
            .collect(),
        faults,
    })
}
