//! `dmtx report --plot FILE.svg`: runs' throughput over time, one line per run, with the
//! faults simulated runs fired marked where they fired (recovery plots in the manner of
//! LOTUS Fig. 15). With `--plot-vs FIELD`, a sweep instead: throughput and median
//! latency against a setting that varies from run to run (FORD Fig. 22 against
//! `coroutines`), one line per group of runs that agree on every other setting.
//!
//! A run's series is its `timeseries`: commits per bucket of real time (1 s on `mem` and
//! `tcp`) or of virtual time (1 ms on `sim`), counted from the end of its warm-up; a
//! simulated record written before `timeseries` existed has `sim.timeseries_ms`, its
//! 1 ms virtual series, used instead. The x axis is seconds of real time or
//! milliseconds of virtual time; the two never share a plot (their axes mean different
//! things), so records of both clocks are an error that says so. A bucket's count over
//! its width is a throughput, drawn in thousands of transactions per second (a last
//! bucket that the measured window ends inside holds fewer commits and reads low). A
//! record without a series is left out with a warning; if none has one, that is an
//! error.
//! Faults are listed in `sim.faults` as `"<virtual ms> ms: <what>"` from the start of
//! the run; they are shifted by the warm-up to share the series' axis.
//!
//! A sweep's groups: two runs share a line when they agree on protocol, workload,
//! transport, threads, coroutines, compute nodes, memory nodes, replicas, preset, the
//! simulator's profile and CPU mode, and every knob, except the swept setting. Seed and
//! run length do not split a line: runs differing only there are repetitions, each
//! drawn as a dot, with the line through their mean. A run that committed nothing has
//! no median latency and no dot in that panel. Each line's legend names protocol,
//! workload and transport, and every other setting whose value differs between the
//! lines of those three (`threads=2`).

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::results::{BenchResult, Clock};

/// Why no plot was drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No record was given (an empty directory).
    #[error("no run records to plot; give the JSON files `dmtx bench --out` wrote")]
    Empty,
    /// No record has a time series.
    #[error("no run among the records has a time series (`timeseries`, or `sim.timeseries_ms` of a simulated run); records of mem/tcp runs written before `timeseries` existed have none: run them again")]
    NoSeries,
    /// The records count in real time and in virtual time.
    #[error("{real} counts commits per bucket of real time and {virt} per bucket of virtual time; one plot has one time axis: plot the `sim` runs and the mem/tcp runs separately")]
    MixedClocks {
        /// A record with a real-time series.
        real: PathBuf,
        /// A record with a virtual-time series.
        virt: PathBuf,
    },
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

/// One run's line: its label, (time, k txn/s) points and (time, fault) markers, time
/// in seconds (real clock) or milliseconds (virtual clock).
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

/// A throughput plot and what it left out.
#[derive(Debug)]
pub struct Drawn {
    /// The SVG.
    pub svg: String,
    /// One line per record left out (it has no time series).
    pub warnings: Vec<String>,
}

/// A record's series: its clock, bucket width (s) and commits per bucket.
struct Series<'a> {
    clock: Clock,
    bucket_s: f64,
    committed: &'a [u64],
}

/// The series of `r`: `timeseries`, else an older simulated record's `sim.timeseries_ms`.
fn series(r: &BenchResult) -> Option<Series<'_>> {
    if let Some(t) = r
        .timeseries
        .as_ref()
        .filter(|t| !t.committed.is_empty() && t.bucket_s > 0.0)
    {
        return Some(Series {
            clock: t.clock,
            bucket_s: t.bucket_s,
            committed: &t.committed,
        });
    }
    let sim = r.sim.as_ref().filter(|s| !s.timeseries_ms.is_empty())?;
    Some(Series {
        clock: Clock::Virtual,
        bucket_s: 1e-3,
        committed: &sim.timeseries_ms,
    })
}

/// Axis units per second of a clock: seconds for real time, ms for virtual time.
fn per_second(clock: Clock) -> f64 {
    match clock {
        Clock::Real => 1.0,
        Clock::Virtual => 1e3,
    }
}

/// The SVG of the throughput over time of every run in `runs` that has a series.
pub fn throughput_svg(runs: &[(PathBuf, BenchResult)]) -> Result<Drawn, PlotError> {
    if runs.is_empty() {
        return Err(PlotError::Empty);
    }
    let with: Vec<(&PathBuf, &BenchResult, Series<'_>)> =
        runs.iter().filter_map(|(p, r)| Some((p, r, series(r)?))).collect();
    let real = with.iter().find(|w| w.2.clock == Clock::Real);
    let virt = with.iter().find(|w| w.2.clock == Clock::Virtual);
    if let (Some(real), Some(virt)) = (real, virt) {
        return Err(PlotError::MixedClocks {
            real: real.0.clone(),
            virt: virt.0.clone(),
        });
    }
    let Some(clock) = with.first().map(|w| w.2.clock) else {
        return Err(PlotError::NoSeries);
    };
    let warnings = runs
        .iter()
        .filter(|(_, r)| series(r).is_none())
        .map(|(p, r)| {
            format!(
                "{}: a {} run with no time series (`timeseries`); left out of the plot",
                p.display(),
                r.transport
            )
        })
        .collect();
    let lines: Vec<Line> = with.iter().map(|(p, r, s)| line(p, r, s)).collect();
    let x_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0).chain(l.faults.iter().map(|f| f.0)))
        .fold(f64::MIN_POSITIVE, f64::max);
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let unit = match clock {
        Clock::Real => "s",
        Clock::Virtual => "ms",
    };
    // One bucket width for all runs names it in the caption; mixed widths still share
    // the axes, since every point is a throughput at a time.
    let widths: Vec<f64> = with.iter().map(|w| w.2.bucket_s * per_second(clock)).collect();
    let per = match widths.iter().all(|&b| b == widths[0]) {
        true => format!("committed per {} {unit}", widths[0]),
        false => "throughput".to_string(),
    };
    let (caption, x_desc) = match clock {
        Clock::Real => (format!("{per} of real time"), "real time since the warm-up, s"),
        Clock::Virtual => (
            format!("{per} of virtual time (simulated)"),
            "virtual time since the warm-up, ms",
        ),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(drawing)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
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
    Ok(Drawn { svg, warnings })
}

/// A sweep point: x, k txn/s, and p50 µs (none when nothing committed).
type Point = (f64, f64, Option<f64>);

/// Which value of a sweep point a panel shows, if the point has it.
type Pick = fn(&Point) -> Option<f64>;

/// One group's sweep: the settings it shares, its label, and a point per run, in x
/// order.
struct Sweep {
    key: Vec<(String, String)>,
    label: String,
    points: Vec<Point>,
}

/// The line through `points` (in x order): at each x, the mean of the runs there
/// (repetitions of one setting differ by seed or length).
fn means(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64, usize)> = Vec::new();
    for &(x, y) in points {
        match out.last_mut() {
            Some(last) if last.0 == x => {
                last.1 += y;
                last.2 += 1;
            }
            _ => out.push((x, y, 1)),
        }
    }
    out.into_iter().map(|(x, sum, n)| (x, sum / n as f64)).collect()
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

/// Every setting of `r` that makes runs comparable, as (name, value), but `swept`: the
/// runs of one line agree on all of them. Names are `--plot-vs` names (knobs by their
/// own), so that a legend reads like the command line.
fn settings(r: &BenchResult, swept: &str) -> Vec<(String, String)> {
    let c = &r.config;
    let swept = match swept {
        "compute_nodes" => "compute-nodes",
        "memory_nodes" => "memory-nodes",
        other => other,
    };
    let mut all: Vec<(String, String)> = [
        ("protocol", r.protocol.clone()),
        ("workload", r.workload.clone()),
        ("transport", r.transport.clone()),
        ("threads", c.threads.to_string()),
        ("coroutines", c.coroutines.to_string()),
        (
            "compute-nodes",
            r.sim.as_ref().map_or(1, |s| s.compute_nodes).to_string(),
        ),
        ("memory-nodes", c.memory_nodes.to_string()),
        ("replicas", c.replicas.to_string()),
        ("preset", c.preset.clone().unwrap_or_else(|| "none".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Some(sim) = &r.sim {
        all.push(("profile".into(), sim.profile.clone()));
        all.push(("cpu".into(), sim.cpu_mode.clone()));
    }
    all.extend(c.knobs.iter().map(|(k, v)| (k.clone(), v.clone())));
    all.retain(|(k, _)| k != swept);
    all
}

/// Each group's legend: protocol, workload and transport, then every other setting of
/// the group whose value differs in another group of the same protocol, workload and
/// transport (across those three, the three tell the lines apart).
fn label_groups(sweeps: &mut [Sweep]) {
    const NAMED: [&str; 3] = ["protocol", "workload", "transport"];
    let value = |s: &Sweep, name: &str| s.key.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let labels: Vec<String> = sweeps
        .iter()
        .map(|s| {
            let peers: Vec<&Sweep> = sweeps
                .iter()
                .filter(|o| NAMED.iter().all(|n| value(o, n) == value(s, n)))
                .collect();
            let mut label: Vec<String> = NAMED.iter().filter_map(|n| value(s, n)).collect();
            label.extend(
                s.key
                    .iter()
                    .filter(|(k, v)| {
                        !NAMED.contains(&k.as_str()) && peers.iter().any(|o| value(o, k).as_ref() != Some(v))
                    })
                    .map(|(k, v)| format!("{k}={v}")),
            );
            label.join(" ")
        })
        .collect();
    for (s, l) in sweeps.iter_mut().zip(labels) {
        s.label = l;
    }
}

/// The SVG of throughput and median latency against `field`, one line per group of
/// runs that agree on every other setting.
pub fn sweep_svg(runs: &[(PathBuf, BenchResult)], field: &str) -> Result<String, PlotError> {
    let mut sweeps: Vec<Sweep> = Vec::new();
    for (path, r) in runs {
        let x = setting(r, field).ok_or_else(|| PlotError::NoField {
            field: field.to_string(),
            path: path.clone(),
        })?;
        let key = settings(r, field);
        let point = (x, r.committed_tps / 1e3, r.latency_us.as_ref().map(|l| l.p50));
        match sweeps.iter_mut().find(|s| s.key == key) {
            Some(s) => s.points.push(point),
            None => sweeps.push(Sweep {
                key,
                label: String::new(),
                points: vec![point],
            }),
        }
    }
    label_groups(&mut sweeps);
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
            (left, "committed, k txn/s", |p| Some(p.1)),
            (right, "median latency, µs", |p| p.2),
        ];
        for (area, what, pick) in panels {
            let y_max = all().filter_map(pick).fold(1e-9, f64::max) * 1.1;
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
                let points: Vec<(f64, f64)> = s.points.iter().filter_map(|p| Some((p.0, pick(p)?))).collect();
                draw_line(&mut chart, means(&points), &s.label, colour)?;
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

/// The line of one record's series.
fn line(path: &Path, r: &BenchResult, s: &Series<'_>) -> Line {
    let scale = per_second(s.clock);
    let warmup = r.config.warmup_s * scale;
    let faults = match (s.clock, &r.sim) {
        (Clock::Virtual, Some(sim)) => sim
            .faults
            .iter()
            .filter_map(|f| {
                let (at, what) = f.split_once(" ms: ")?;
                let at: f64 = at.trim().parse().ok()?;
                Some(((at - warmup).max(0.0), what.to_string()))
            })
            .collect(),
        _ => Vec::new(),
    };
    let stem = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    Line {
        label: format!("{} {} ({stem})", r.protocol, r.workload),
        points: points(s),
        faults,
    }
}

/// A series as (time in axis units, k txn/s) points. Bucket k holds the commits of
/// [k, k + 1) bucket widths and is drawn at its middle; its count over its width is
/// its throughput.
fn points(s: &Series<'_>) -> Vec<(f64, f64)> {
    let width = s.bucket_s * per_second(s.clock);
    s.committed
        .iter()
        .enumerate()
        .map(|(k, &n)| ((k as f64 + 0.5) * width, n as f64 / s.bucket_s / 1e3))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_points_are_bucket_middles_in_k_txn_per_s() {
        let real = Series {
            clock: Clock::Real,
            bucket_s: 1.0,
            committed: &[1000, 2500],
        };
        assert_eq!(points(&real), vec![(0.5, 1.0), (1.5, 2.5)]);
        let virt = Series {
            clock: Clock::Virtual,
            bucket_s: 1e-3,
            committed: &[7, 12],
        };
        assert_eq!(points(&virt), vec![(0.5, 7.0), (1.5, 12.0)]);
    }

    #[test]
    fn test_means_join_runs_at_one_x() {
        let line = means(&[(1.0, 2.0), (2.0, 3.0), (2.0, 5.0), (4.0, 1.0)]);
        assert_eq!(line, vec![(1.0, 2.0), (2.0, 4.0), (4.0, 1.0)]);
    }

    #[test]
    fn test_label_groups_names_what_differs_within_a_workload() {
        let key = |w: &str, t: &str, k: &str| -> Vec<(String, String)> {
            [
                ("protocol", "ford"),
                ("workload", w),
                ("transport", "sim"),
                ("threads", t),
                ("keys", k),
            ]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
        };
        let mut sweeps: Vec<Sweep> = [key("kvs", "1", "9"), key("kvs", "2", "9"), key("tatp", "2", "5")]
            .into_iter()
            .map(|key| Sweep {
                key,
                label: String::new(),
                points: Vec::new(),
            })
            .collect();
        label_groups(&mut sweeps);
        let labels: Vec<&str> = sweeps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            ["ford kvs sim threads=1", "ford kvs sim threads=2", "ford tatp sim"]
        );
    }
}
