//! `dmtx report --plot FILE.svg`: simulated runs' throughput over virtual time, one line
//! per run, with the faults each fired marked where they fired (recovery plots in the
//! manner of LOTUS Fig. 15). With `--plot-vs FIELD`, a sweep instead: throughput and
//! median latency against a setting that varies from run to run (FORD Fig. 22 against
//! `coroutines`), one line per protocol, workload and transport.
//!
//! A simulated run records its commits per 1 ms of virtual time (`sim.timeseries_ms`,
//! counted from the end of its warm-up), so a bucket's count is also its throughput in
//! thousands of transactions per second. Faults are listed in `sim.faults` as
//! `"<virtual ms>: <what>"` from the start of the run; they are shifted by the warm-up to
//! share the series' axis. Runs on real transports record no series and are left out;
//! if none has one, that is an error that says so.

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::results::BenchResult;

/// Why no plot was drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No record was given (an empty directory).
    #[error("no run records to plot; give the JSON files `dmtx bench --out` wrote")]
    Empty,
    /// No record has a time series.
    #[error("no simulated run among the records: only `--transport sim` runs record `sim.timeseries_ms`")]
    NoSeries,
    /// `--plot-vs` names no setting a record has.
    #[error("--plot-vs {field}: {path} has no numeric `{field}`; give threads, coroutines, compute-nodes, memory-nodes, replicas or a numeric knob of the runs (`dmtx list`)")]
    NoField {
        /// The field asked for.
        field: String,
        /// The first record without it.
        path: PathBuf,
    },
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

/// The charts drawn here: f64 against f64, into an SVG string.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn drawing(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// A run's (or a group's) line, with its legend entry.
fn draw_line(
    chart: &mut Chart<'_, '_>,
    points: impl IntoIterator<Item = (f64, f64)>,
    label: &str,
    colour: RGBColor,
) -> Result<(), PlotError> {
    chart
        .draw_series(LineSeries::new(points, colour.stroke_width(2)))
        .map_err(drawing)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    Ok(())
}

/// The legend, lower right (where throughput curves leave room).
fn draw_legend<'a>(chart: &mut Chart<'a, 'a>) -> Result<(), PlotError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(drawing)
}

/// The SVG of the throughput of every simulated run in `runs`.
pub fn throughput_svg(runs: &[(PathBuf, BenchResult)]) -> Result<String, PlotError> {
    if runs.is_empty() {
        return Err(PlotError::Empty);
    }
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
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("committed per 1 ms of virtual time (simulated)", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(drawing)?;
        chart
            .configure_mesh()
            .x_desc("virtual time since the warm-up, ms")
            .y_desc("k txn/s")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(drawing)?;
        // Fault labels step down the top of the plot so that close ones stay legible.
        let mut marked = 0usize;
        for (i, l) in lines.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            draw_line(&mut chart, l.points.iter().copied(), &l.label, colour)?;
            for (at, what) in &l.faults {
                chart
                    .draw_series(DashedLineSeries::new(
                        [(*at, 0.0), (*at, y_max)],
                        6,
                        4,
                        colour.stroke_width(1),
                    ))
                    .map_err(drawing)?;
                let y = y_max * (0.97 - 0.05 * (marked % 6) as f64);
                marked += 1;
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!(" {what}"),
                        (*at, y),
                        ("sans-serif", 12).into_font().color(&colour),
                    )))
                    .map_err(drawing)?;
            }
        }
        draw_legend(&mut chart)?;
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

/// Which value of a sweep point a panel shows.
type Pick = fn(&(f64, f64, f64)) -> f64;

/// One group's sweep: (x, k txn/s, p50 µs) per run, in x order.
struct Sweep {
    label: String,
    points: Vec<(f64, f64, f64)>,
}

/// `field` of record `r`: a setting of the run, or a numeric knob.
fn setting(r: &BenchResult, field: &str) -> Option<f64> {
    let c = &r.config;
    match field {
        "threads" => Some(f64::from(c.threads)),
        "coroutines" => Some(f64::from(c.coroutines)),
        "compute-nodes" | "compute_nodes" => Some(r.sim.as_ref().map_or(1.0, |s| f64::from(s.compute_nodes))),
        "memory-nodes" | "memory_nodes" => Some(f64::from(c.memory_nodes)),
        "replicas" => Some(f64::from(c.replicas)),
        knob => c.knobs.get(knob)?.parse().ok(),
    }
}

/// The SVG of throughput and median latency against `field`, one line per protocol,
/// workload and transport.
pub fn sweep_svg(runs: &[(PathBuf, BenchResult)], field: &str) -> Result<String, PlotError> {
    let mut sweeps: Vec<Sweep> = Vec::new();
    for (path, r) in runs {
        let x = setting(r, field).ok_or_else(|| PlotError::NoField {
            field: field.to_string(),
            path: path.clone(),
        })?;
        let label = format!("{} {} {}", r.protocol, r.workload, r.transport);
        let p50 = r.latency_us.as_ref().map_or(0.0, |l| l.p50);
        let point = (x, r.committed_tps / 1e3, p50);
        match sweeps.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push(point),
            None => sweeps.push(Sweep {
                label,
                points: vec![point],
            }),
        }
    }
    if sweeps.is_empty() {
        return Err(PlotError::Empty);
    }
    for s in &mut sweeps {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let all = || sweeps.iter().flat_map(|s| s.points.iter());
    let x_min = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let (x_lo, x_hi) = match x_max > x_min {
        true => (x_min, x_max),
        false => (x_min - 1.0, x_max + 1.0),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let (left, right) = root.split_horizontally(SIZE.0 / 2);
        let panels: [(_, &str, Pick); 2] = [
            (left, "committed, k txn/s", |p| p.1),
            (right, "median latency, µs", |p| p.2),
        ];
        for (area, what, pick) in panels {
            let y_max = all().map(pick).fold(1e-9, f64::max) * 1.1;
            let mut chart = ChartBuilder::on(&area)
                .caption(format!("{what} against {field}"), ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(x_lo..x_hi, 0.0..y_max)
                .map_err(drawing)?;
            chart
                .configure_mesh()
                .x_desc(field)
                .y_desc(what)
                .x_label_formatter(&|v| format!("{v}"))
                .draw()
                .map_err(drawing)?;
            for (i, s) in sweeps.iter().enumerate() {
                let colour = COLOURS[i % COLOURS.len()];
                let points: Vec<(f64, f64)> = s.points.iter().map(|p| (p.0, pick(p))).collect();
                draw_line(&mut chart, points.iter().copied(), &s.label, colour)?;
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                    .map_err(drawing)?;
            }
            draw_legend(&mut chart)?;
        }
        root.present().map_err(drawing)?;
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
