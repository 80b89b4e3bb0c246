//! `dmtx report`: one table from many runs' JSON records (a sweep's points, say), and
//! with `--csv` every scalar of every record as one CSV row per run.
//!
//! Each row is one file; rows keep the order the files were given (a shell glob sorts
//! them by name; a directory's `*.json` files are taken in name order). A file named on
//! the command line that is not a run record is an error naming it; a JSON file found
//! in a directory that is not one is skipped with a warning naming it (a directory may
//! hold other JSON); a directory that yields no record at all is an error naming it.
//!
//! The table shows what a reader needs to tell two runs apart and to tell a failed run
//! from a passing one: the workload's invariant (`inv`) and the isolation check
//! (`check`) as `ok`, `FAIL` or `-` (not checked), with a count of failed runs under
//! the table; the run's length (`10s`, `500tx`, marked `intr` when Ctrl-C cut it
//! short); seed; memory nodes × replicas; the faults a simulated run fired (`-` on real
//! transports, which inject none); and, last because it is long, the preset and every
//! knob whose value differs from the registry's default.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::registry::{PROTOCOLS, WORKLOADS};
use crate::results::{BenchResult, StopReason};

/// Why a report could not be made. The cause is each variant's `source`, not part of
/// its message, so a `{:#}` chain prints it once, last.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read.
    #[error("{path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not a run record of this schema.
    #[error("{path}: not a dmtx run record (give the JSON files `dmtx bench --out` wrote)")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A directory holds no run record.
    #[error("{dir}: no dmtx run record in this directory ({skipped} other JSON file(s) skipped); give a directory `dmtx bench --out DIR/` wrote to, or the record files themselves")]
    NoRecords {
        /// The directory.
        dir: PathBuf,
        /// JSON files in it that were not records.
        skipped: usize,
    },
}

/// The records read, and a warning per file skipped.
#[derive(Debug)]
pub struct Loaded {
    /// Each record with its file, in the order given.
    pub runs: Vec<(PathBuf, BenchResult)>,
    /// One line per JSON file found in a directory that is not a record.
    pub warnings: Vec<String>,
}

/// Read `paths` (files, or directories whose `*.json` files are taken in name order).
pub fn load(paths: &[PathBuf]) -> Result<Loaded, ReportError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| ReportError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let mut loaded = Loaded {
        runs: Vec::new(),
        warnings: Vec::new(),
    };
    for p in paths {
        if !p.is_dir() {
            let r = serde_json::from_str(&read(p)?).map_err(|source| ReportError::Parse {
                path: p.clone(),
                source,
            })?;
            loaded.runs.push((p.clone(), r));
            continue;
        }
        let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|source| ReportError::Read {
                path: p.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "json"))
            .collect();
        inside.sort();
        let before = loaded.runs.len();
        let mut skipped = 0;
        for f in inside {
            match serde_json::from_str::<BenchResult>(&read(&f)?) {
                Ok(r) => loaded.runs.push((f, r)),
                Err(e) => {
                    skipped += 1;
                    loaded
                        .warnings
                        .push(format!("{}: not a dmtx run record ({e}); skipped", f.display()));
                }
            }
        }
        if loaded.runs.len() == before {
            return Err(ReportError::NoRecords {
                dir: p.clone(),
                skipped,
            });
        }
    }
    Ok(loaded)
}

/// `ok`, `FAIL`, or `-` when nothing was checked.
fn verdict(checked: Option<bool>) -> &'static str {
    match checked {
        Some(true) => "ok",
        Some(false) => "FAIL",
        None => "-",
    }
}

/// Seconds as the CLI takes them: `4ms`, `1.5s`, `10s`.
fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{}ms", (s * 1e6).round() / 1e3)
    } else {
        format!("{}s", (s * 1e3).round() / 1e3)
    }
}

/// The run's length as asked (`10s`, `500tx`), marked `intr` when Ctrl-C ended it.
fn length(r: &BenchResult) -> String {
    let c = &r.config;
    let mut s = match (c.duration_s, c.txns) {
        (Some(d), _) => secs(d),
        (_, Some(n)) => format!("{n}tx"),
        _ => "?".into(),
    };
    if r.stop_reason == StopReason::Interrupt {
        s += " intr";
    }
    s
}

/// The knobs of `r` whose value is not the registry's default for its protocol and
/// workload, as `name=value`, in name order. A knob this build does not declare is
/// listed too: its default is unknown here.
pub fn non_default_knobs(r: &BenchResult) -> Vec<String> {
    let defaults: BTreeMap<&str, &str> = PROTOCOLS
        .iter()
        .filter(|e| e.name == r.protocol)
        .chain(WORKLOADS.iter().filter(|e| e.name == r.workload))
        .flat_map(|e| e.knobs.iter().map(|k| (k.name, k.default)))
        .collect();
    r.config
        .knobs
        .iter()
        .filter(|(k, v)| defaults.get(k.as_str()) != Some(&v.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// Whether a column's cells are padded on the left (numbers) or the right (names).
#[derive(Copy, Clone, PartialEq)]
enum Align {
    Left,
    Right,
}

/// The table's columns: header and alignment. `knobs` comes last, unpadded.
const COLUMNS: [(&str, Align); 20] = [
    ("protocol", Align::Left),
    ("workload", Align::Left),
    ("via", Align::Left),
    ("cns", Align::Right),
    ("t x c", Align::Right),
    ("mn x r", Align::Right),
    ("length", Align::Right),
    ("seed", Align::Right),
    ("committed/s", Align::Right),
    ("abort%", Align::Right),
    ("p50 us", Align::Right),
    ("p99 us", Align::Right),
    ("rtt/c", Align::Right),
    ("cpu%", Align::Right),
    ("link%", Align::Right),
    ("inv", Align::Left),
    ("check", Align::Left),
    ("faults", Align::Right),
    ("file", Align::Left),
    ("knobs", Align::Left),
];

/// One run's cells, in [`COLUMNS`] order.
fn row(path: &Path, r: &BenchResult) -> Vec<String> {
    let (cns, cpu, link, faults) = match &r.sim {
        Some(s) => {
            let cpu = if s.cpus.is_empty() {
                0.0
            } else {
                s.cpus.iter().map(|c| c.utilisation).sum::<f64>() / s.cpus.len() as f64
            };
            let link = s.nics.iter().map(|n| n.link_utilisation).fold(0.0, f64::max);
            (
                s.compute_nodes.to_string(),
                format!("{:.0}", cpu * 100.0),
                format!("{:.0}", link * 100.0),
                s.faults.len().to_string(),
            )
        }
        None => ("1".into(), "-".into(), "-".into(), "-".into()),
    };
    let (p50, p99) = r.latency_us.as_ref().map_or_else(
        || ("-".into(), "-".into()),
        |l| (format!("{:.1}", l.p50), format!("{:.1}", l.p99)),
    );
    let c = &r.config;
    let knobs: Vec<String> = c
        .preset
        .iter()
        .map(|p| format!("preset={p}"))
        .chain(non_default_knobs(r))
        .collect();
    vec![
        r.protocol.clone(),
        r.workload.clone(),
        r.transport.clone(),
        cns,
        format!("{}x{}", c.threads, c.coroutines),
        format!("{}x{}", c.memory_nodes, c.replicas),
        length(r),
        c.seed.to_string(),
        format!("{:.0}", r.committed_tps),
        format!("{:.2}", r.abort_rate * 100.0),
        p50,
        p99,
        r.total.rtt_per_commit.map_or_else(|| "-".into(), |v| format!("{v:.2}")),
        cpu,
        link,
        verdict(Some(r.invariant.ok)).into(),
        verdict(r.check.as_ref().map(|c| c.clean)).into(),
        faults,
        short(path),
        if knobs.is_empty() { "-".into() } else { knobs.join(" ") },
    ]
}

/// The table: one row per run, then a line naming the runs that failed a check.
pub fn render(runs: &[(PathBuf, BenchResult)]) -> String {
    let mut rows: Vec<Vec<String>> = vec![COLUMNS.iter().map(|c| c.0.to_string()).collect()];
    rows.extend(runs.iter().map(|(p, r)| row(p, r)));
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut o = String::new();
    for cells in &rows {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let w = widths[i];
            if i > 0 {
                line.push_str(if COLUMNS[i].0 == "file" { "  " } else { " " });
            }
            match COLUMNS[i].1 {
                Align::Left if i + 1 == COLUMNS.len() => line.push_str(cell),
                Align::Left => {
                    let _ = write!(line, "{cell:<w$}");
                }
                Align::Right => {
                    let _ = write!(line, "{cell:>w$}");
                }
            }
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
    let failed: Vec<String> = runs
        .iter()
        .filter_map(|(p, r)| {
            let mut what = Vec::new();
            if !r.invariant.ok {
                what.push("invariant");
            }
            if r.check.as_ref().is_some_and(|c| !c.clean) {
                what.push("isolation check");
            }
            (!what.is_empty()).then(|| format!("{} ({})", short(p), what.join(", ")))
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            o,
            "FAILED: {} of {} runs: {}",
            failed.len(),
            runs.len(),
            failed.join(", ")
        );
    }
    o
}

/// Every scalar of every record as CSV: a header, then one row per run.
///
/// Columns are `file` (the path as given), then every field of the records, nested
/// objects flattened with dots (`config.threads`, `latency_us.p99`,
/// `abort_reasons.lock_conflict`, `per_txn_type.<type>.committed`, `sim.nics.0.node`:
/// arrays of objects by index), in name order; the header is the union over the runs,
/// so the same runs always give the same header, and a run without a field has an
/// empty cell. A `null` is an empty cell. Other arrays (`sim.faults`,
/// `check.findings`) are one cell, their items joined with `; `. The time series
/// (`sim.timeseries_ms`, `timeseries.committed`) are left out: `--plot` draws them.
/// Cells holding a comma, a quote or a line break are quoted, quotes doubled (RFC 4180).
pub fn csv(runs: &[(PathBuf, BenchResult)]) -> String {
    let rows: Vec<BTreeMap<String, String>> = runs
        .iter()
        .map(|(_, r)| {
            let mut cells = BTreeMap::new();
            let v = serde_json::to_value(r).expect("records serialize");
            flatten("", &v, &mut cells);
            cells
        })
        .collect();
    let all: BTreeSet<&String> = rows.iter().flat_map(|r| r.keys()).collect();
    // A field that is null in one run and an object in another is the object's columns.
    let columns: Vec<&String> = all
        .iter()
        .filter(|k| {
            let prefix = format!("{k}.");
            !all.iter().any(|o| o.starts_with(&prefix))
        })
        .copied()
        .collect();
    let mut o = String::new();
    let header: Vec<&str> = std::iter::once("file")
        .chain(columns.iter().map(|c| c.as_str()))
        .collect();
    o += &csv_line(header.iter().copied());
    for ((path, _), cells) in runs.iter().zip(&rows) {
        let file = path.display().to_string();
        let values = columns.iter().map(|c| cells.get(*c).map_or("", String::as_str));
        o += &csv_line(std::iter::once(file.as_str()).chain(values));
    }
    o
}

/// The records' time series: one number per bucket, thousands of them, not scalars.
const SERIES: [&str; 2] = ["sim.timeseries_ms", "timeseries.committed"];

/// Add the scalars of `v` to `out`, named `prefix.key...`.
fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
    use serde_json::Value;
    let name = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                flatten(&name(k), v, out);
            }
        }
        Value::Array(_) if SERIES.contains(&prefix) => {}
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_object) => {
            for (i, v) in a.iter().enumerate() {
                flatten(&name(&i.to_string()), v, out);
            }
        }
        Value::Array(a) => {
            let parts: Vec<String> = a
                .iter()
                .map(|x| match x {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            out.insert(prefix.to_string(), parts.join("; "));
        }
        Value::Null => {
            out.insert(prefix.to_string(), String::new());
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        Value::Bool(_) | Value::Number(_) => {
            out.insert(prefix.to_string(), v.to_string());
        }
    }
}

/// One CSV line of `cells`, quoted where needed, with its newline.
fn csv_line<'a>(cells: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = cells
        .map(|c| {
            if c.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.to_string()
            }
        })
        .collect();
    let mut line = quoted.join(",");
    line.push('\n');
    line
}

fn short(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_csv_line_quotes_commas_quotes_and_newlines() {
        let cells = ["plain", "a,b", "say \"hi\"", "two\nlines", ""];
        assert_eq!(
            csv_line(cells.into_iter()),
            "plain,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\n"
        );
    }

    #[test]
    fn test_flatten_names_nested_fields_with_dots() {
        let v = serde_json::json!({
            "a": {"b": 1, "c": null, "d": ["x", "y"], "e": [1, 2]},
            "per": [{"n": true}, {"n": false}],
            "none": [],
            "sim": {"timeseries_ms": [1, 2, 3]},
        });
        let mut out = BTreeMap::new();
        flatten("", &v, &mut out);
        let got: Vec<(&str, &str)> = out.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("a.b", "1"),
                ("a.c", ""),
                ("a.d", "x; y"),
                ("a.e", "1; 2"),
                ("none", ""),
                ("per.0.n", "true"),
                ("per.1.n", "false"),
            ]
        );
    }

    #[test]
    fn test_secs_reads_like_the_cli() {
        assert_eq!(secs(0.004), "4ms");
        assert_eq!(secs(0.0025), "2.5ms");
        assert_eq!(secs(10.0), "10s");
        assert_eq!(secs(1.5), "1.5s");
    }
}
