//! `dmtx report`: one table from many runs' JSON records (a sweep's points, say).
//!
//! Each row is one file; rows keep the order the files were given (a shell glob sorts
//! them by name). Files that are not run records are an error naming the file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::results::BenchResult;

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
}

/// Read `paths` (files, or directories whose `*.json` files are taken in name order).
pub fn load(paths: &[PathBuf]) -> Result<Vec<(PathBuf, BenchResult)>, ReportError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|source| ReportError::Read {
                    path: p.clone(),
                    source,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(p.clone());
        }
    }
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|source| ReportError::Read {
                path: path.clone(),
                source,
            })?;
            let r = serde_json::from_str(&text).map_err(|source| ReportError::Parse {
                path: path.clone(),
                source,
            })?;
            Ok((path, r))
        })
        .collect()
}

/// The table: one row per run.
pub fn render(runs: &[(PathBuf, BenchResult)]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<10} {:<10} {:<5} {:>4} {:>8} {:>12} {:>7} {:>8} {:>8} {:>6} {:>6} {:>6}  file",
        "protocol",
        "workload",
        "via",
        "cns",
        "t x c",
        "committed/s",
        "abort%",
        "p50 us",
        "p99 us",
        "rtt/c",
        "cpu%",
        "link%"
    );
    for (path, r) in runs {
        let (cns, cpu, link) = match &r.sim {
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
                )
            }
            None => ("1".into(), "-".into(), "-".into()),
        };
        let (p50, p99) = r.latency_us.as_ref().map_or((0.0, 0.0), |l| (l.p50, l.p99));
        let _ = writeln!(
            o,
            "{:<10} {:<10} {:<5} {:>4} {:>8} {:>12.0} {:>7.2} {:>8.1} {:>8.1} {:>6.2} {:>6} {:>6}  {}",
            r.protocol,
            r.workload,
            r.transport,
            cns,
            format!("{}x{}", r.config.threads, r.config.coroutines),
            r.committed_tps,
            r.abort_rate * 100.0,
            p50,
            p99,
            r.total.rtt_per_commit.unwrap_or(0.0),
            cpu,
            link,
            short(path)
        );
    }
    o
}

fn short(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}
