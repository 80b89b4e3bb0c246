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
//!
//! Records of a multi-process run (`dmtx bench --cn`, each with a `cn` object) are
//! merged first, one row per run id ([`merge_cn_runs`]): counts, counters, throughput and
//! per-node load are summed, and the latency percentiles are recomputed from the merged
//! histograms (never averaged). Records of different runs are never merged.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::registry::{DRIVER, PROTOCOLS, WORKLOADS};
use crate::results::{BenchResult, Bytes, Counters, Latency, Ops, StopReason, TxnTypeResult};

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
        // Every run records the driver's knobs too (`retry_aborts`, `addr_cache_entries`).
        .chain(std::iter::once(&DRIVER))
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
        None => (
            r.cn.as_ref().map_or(1, |c| c.compute_nodes).to_string(),
            "-".into(),
            "-".into(),
            "-".into(),
        ),
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
        // A compute node of several checks no invariant alone (`cn_join`).
        verdict(Some(r.invariant.ok).filter(|_| r.cn.as_ref().is_none_or(|c| c.compute_nodes <= 1))).into(),
        verdict(r.check.as_ref().map(|c| c.clean)).into(),
        faults,
        short(path),
        if knobs.is_empty() { "-".into() } else { knobs.join(" ") },
    ]
}

/// What [`merge_cn_runs`] did.
#[derive(Debug)]
pub struct Merged {
    /// The records: each multi-process run's CN records replaced by one merged record,
    /// at the place of its first; every other record as it was.
    pub runs: Vec<(PathBuf, BenchResult)>,
    /// One line per merged run: "merged N CN records of run X (files)", and a warning
    /// when records of the run are missing.
    pub notes: Vec<String>,
}

/// Merge the records of each multi-process run (same `cn.run_id`) into cluster totals.
pub fn merge_cn_runs(runs: Vec<(PathBuf, BenchResult)>) -> Merged {
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, (_, r)) in runs.iter().enumerate() {
        if let Some(c) = &r.cn {
            groups.entry(c.run_id.clone()).or_default().push(i);
        }
    }
    let mut notes = Vec::new();
    let mut merged_at: BTreeMap<usize, (PathBuf, BenchResult)> = BTreeMap::new();
    let mut dropped = BTreeSet::new();
    for (run_id, idx) in &groups {
        let members: Vec<&BenchResult> = idx.iter().map(|&i| &runs[i].1).collect();
        let files: Vec<String> = idx.iter().map(|&i| short(&runs[i].0)).collect();
        let ids: BTreeSet<u16> = members.iter().filter_map(|r| r.cn.as_ref().map(|c| c.id)).collect();
        let expect = members[0].cn.as_ref().map_or(1, |c| c.compute_nodes);
        notes.push(format!(
            "merged {} CN records of run {run_id} ({})",
            members.len(),
            files.join(", ")
        ));
        if ids.len() != members.len() {
            notes.push(format!(
                "warning: run {run_id}: {} records for {} compute nodes; a record was given twice",
                members.len(),
                ids.len()
            ));
        }
        if ids.len() < usize::from(expect) {
            notes.push(format!(
                "warning: run {run_id}: records of {} of its {expect} compute nodes; its totals cover only those",
                ids.len()
            ));
        }
        let path = PathBuf::from(format!("run-{run_id}"));
        merged_at.insert(idx[0], (path, merge_records(&members)));
        dropped.extend(idx.iter().copied());
    }
    let mut out = Vec::with_capacity(runs.len());
    for (i, r) in runs.into_iter().enumerate() {
        if let Some(m) = merged_at.remove(&i) {
            out.push(m);
        } else if !dropped.contains(&i) {
            out.push(r);
        }
    }
    Merged { runs: out, notes }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn add_ops(a: &mut Ops<u64>, b: &Ops<u64>) {
    a.read += b.read;
    a.write += b.write;
    a.cas += b.cas;
    a.faa += b.faa;
    a.flush += b.flush;
}

fn add_counters(a: &mut Counters, b: &Counters) {
    a.rtts += b.rtts;
    a.background_posts += b.background_posts;
    add_ops(&mut a.ops, &b.ops);
    a.bytes_out += b.bytes_out;
    a.bytes_in += b.bytes_in;
    a.ts_requests += b.ts_requests;
    a.ts_rtts += b.ts_rtts;
    a.msg_rtts += b.msg_rtts;
}

/// One transaction type over several CNs: sums, and per-commit figures of the sums.
/// Per-type latency is not kept per CN as a histogram, so it is `None` unless there
/// is one record.
fn merge_type(parts: &[&TxnTypeResult]) -> TxnTypeResult {
    if let [one] = parts {
        return (*one).clone();
    }
    let mut m = TxnTypeResult {
        committed: 0,
        aborted: 0,
        successful: 0,
        rolled_back: 0,
        abort_rate: 0.0,
        abort_reasons: BTreeMap::new(),
        rtt_per_commit: None,
        msg_rtts_per_commit: None,
        ops_per_commit: None,
        bytes_per_commit: None,
        background_posts_per_commit: None,
        wasted_rtts_per_commit: None,
        attempts_per_commit: None,
        ts_per_commit: None,
        ts_rtts_per_commit: None,
        cleanup_rtts_per_commit: None,
        latency_us: None,
        committed_counters: Counters::default(),
        aborted_counters: Counters::default(),
        cleanup_counters: Counters::default(),
    };
    let mut attempts = 0.0;
    for p in parts {
        m.committed += p.committed;
        m.aborted += p.aborted;
        m.successful += p.successful;
        m.rolled_back += p.rolled_back;
        for (k, v) in &p.abort_reasons {
            *m.abort_reasons.entry(k.clone()).or_default() += v;
        }
        add_counters(&mut m.committed_counters, &p.committed_counters);
        add_counters(&mut m.aborted_counters, &p.aborted_counters);
        add_counters(&mut m.cleanup_counters, &p.cleanup_counters);
        attempts += p.attempts_per_commit.unwrap_or(1.0) * p.committed as f64;
    }
    let attempted = m.committed + m.aborted + m.rolled_back;
    m.abort_rate = if attempted == 0 {
        0.0
    } else {
        (m.aborted as f64 / attempted as f64 * 1e6).round() / 1e6
    };
    let n = m.committed;
    let per = |x: u64| (n > 0).then(|| round3(x as f64 / n as f64));
    let c = m.committed_counters;
    m.rtt_per_commit = per(c.rtts);
    m.msg_rtts_per_commit = per(c.msg_rtts);
    m.ops_per_commit = (n > 0).then(|| Ops {
        read: per(c.ops.read).unwrap_or_default(),
        write: per(c.ops.write).unwrap_or_default(),
        cas: per(c.ops.cas).unwrap_or_default(),
        faa: per(c.ops.faa).unwrap_or_default(),
        flush: per(c.ops.flush).unwrap_or_default(),
    });
    m.bytes_per_commit = (n > 0).then(|| Bytes {
        out: per(c.bytes_out).unwrap_or_default(),
        r#in: per(c.bytes_in).unwrap_or_default(),
    });
    m.background_posts_per_commit = per(c.background_posts);
    m.wasted_rtts_per_commit = per(m.aborted_counters.rtts);
    m.attempts_per_commit = (n > 0).then(|| round3(attempts / n as f64));
    m.ts_per_commit = per(c.ts_requests);
    m.ts_rtts_per_commit = per(c.ts_rtts);
    m.cleanup_rtts_per_commit = per(m.cleanup_counters.rtts);
    m
}

/// The cluster totals of one run's CN records (at least one).
fn merge_records(parts: &[&BenchResult]) -> BenchResult {
    assert!(!parts.is_empty(), "a run has at least one record");
    let mut m = parts[0].clone();
    if parts.len() == 1 {
        return m;
    }
    let sum = |f: fn(&BenchResult) -> u64| parts.iter().map(|r| f(r)).sum::<u64>();
    m.committed = sum(|r| r.committed);
    m.aborted = sum(|r| r.aborted);
    m.attempted = sum(|r| r.attempted);
    m.successful = sum(|r| r.successful);
    m.rolled_back = sum(|r| r.rolled_back);
    // The CNs ran at the same time: the cluster's rate is the sum of theirs, over the
    // longest window.
    m.committed_tps = (parts.iter().map(|r| r.committed_tps).sum::<f64>() * 10.0).round() / 10.0;
    m.attempted_tps = (parts.iter().map(|r| r.attempted_tps).sum::<f64>() * 10.0).round() / 10.0;
    m.elapsed_s = parts.iter().map(|r| r.elapsed_s).fold(0.0, f64::max);
    m.abort_rate = if m.attempted == 0 {
        0.0
    } else {
        (m.aborted as f64 / m.attempted as f64 * 1e6).round() / 1e6
    };
    m.abort_reasons = BTreeMap::new();
    for r in parts {
        for (k, v) in &r.abort_reasons {
            *m.abort_reasons.entry(k.clone()).or_default() += v;
        }
    }
    // Percentiles of the merged histograms, never averages of percentiles.
    let mut h = crate::stats::latency_histogram();
    for r in parts {
        for &(ns, n) in r.cn.as_ref().map_or(&[][..], |c| &c.latency_ns[..]) {
            h.saturating_record_n(ns, n);
        }
    }
    m.latency_us = Latency::of(&h);
    m.total = merge_type(&parts.iter().map(|r| &r.total).collect::<Vec<_>>());
    m.total.latency_us = m.latency_us;
    m.per_txn_type = BTreeMap::new();
    for name in parts
        .iter()
        .flat_map(|r| r.per_txn_type.keys())
        .collect::<BTreeSet<_>>()
    {
        let of: Vec<&TxnTypeResult> = parts.iter().filter_map(|r| r.per_txn_type.get(name)).collect();
        m.per_txn_type.insert(name.clone(), merge_type(&of));
    }
    for r in &parts[1..] {
        for (a, b) in m.per_mn.iter_mut().zip(&r.per_mn) {
            add_ops(&mut a.ops, &b.ops);
            a.bytes_in += b.bytes_in;
            a.bytes_out += b.bytes_out;
        }
    }
    m.config.txns = parts.iter().map(|r| r.config.txns).sum::<Option<u64>>();
    m.invariant.ok = parts.iter().all(|r| r.invariant.ok);
    if let Some(bad) = parts.iter().find(|r| !r.invariant.ok) {
        m.invariant.detail = bad.invariant.detail.clone();
    }
    // A CN of several checks no history alone (`dmtx check` takes them together).
    m.check = None;
    // Any CN's abnormal stop (an interrupt, a limit) is the run's.
    m.stop_reason = parts
        .iter()
        .map(|r| r.stop_reason)
        .find(|s| !matches!(s, StopReason::Duration | StopReason::Txns))
        .unwrap_or(parts[0].stop_reason);
    if let Some(d) = parts.iter().find_map(|r| r.stop_detail.clone()) {
        m.stop_detail = Some(d);
    }
    m.run_info.real_s = parts.iter().map(|r| r.run_info.real_s).fold(0.0, f64::max);
    m.run_info.load_s = parts.iter().map(|r| r.run_info.load_s).fold(0.0, f64::max);
    m.run_info.load_records = sum(|r| r.run_info.load_records);
    m.timeseries = match &m.timeseries {
        Some(first) => {
            let mut t = first.clone();
            for r in &parts[1..] {
                let Some(o) = r.timeseries.as_ref().filter(|o| o.bucket_s == t.bucket_s) else {
                    continue;
                };
                if t.committed.len() < o.committed.len() {
                    t.committed.resize(o.committed.len(), 0);
                }
                for (a, b) in t.committed.iter_mut().zip(&o.committed) {
                    *a += b;
                }
            }
            Some(t)
        }
        None => None,
    };
    // Workload metrics (TPC-C's tpmC, its warehouse count) do not all add up: they are
    // left out of the totals rather than guessed.
    m.metrics = BTreeMap::new();
    // The protocol's figures and the CNs' address caches add up.
    for r in &parts[1..] {
        crate::results::merge_protocol_metrics(&mut m.protocol_metrics, &r.protocol_metrics);
        if let (Some(a), Some(b)) = (m.addr_cache.as_mut(), &r.addr_cache) {
            a.merge(b);
        }
    }
    // Each CN's record covers its own coordinators over its own measured time.
    let coordinator_ns: f64 = parts
        .iter()
        .map(|r| r.config.threads as f64 * r.config.coroutines as f64 * r.elapsed_s * 1e9)
        .sum();
    for p in m.protocol_metrics.values_mut() {
        p.derive(m.committed, coordinator_ns as u64);
    }
    if let Some(c) = m.cn.as_mut() {
        c.id = parts
            .iter()
            .filter_map(|r| r.cn.as_ref().map(|c| c.id))
            .min()
            .unwrap_or(c.id);
        c.latency_ns = h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
    }
    m
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
