//! `dmtx report` as a user meets it: a table, a CSV and plots that cannot mislead.
//!
//! Goal: a failed run never looks like a passing one in the table; runs that differ in
//! a setting other than the swept one are separate lines of a sweep; the CSV holds
//! every scalar under stable names; a stray JSON file in a directory is a warning, not
//! a failure; real-time runs are plotted from `timeseries`, and clocks never mix.
//! Method: two short runs of the built binary (a simulated smallbank run with
//! `--check` and a `mem` kvs run) written once per process, then hand-edited copies of
//! their JSON records standing for the runs each test needs.

mod common;

use common::{dmtx, scratch_dir, text};

use std::process::Output;
use std::sync::OnceLock;

use serde_json::{json, Value};

/// The records of two real runs: (simulated smallbank, 4 ms, checked; mem kvs, 200 txns).
fn base() -> &'static (Value, Value) {
    static BASE: OnceLock<(Value, Value)> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = scratch_dir("base");
        let run = |name: &str, args: &[&str]| -> Value {
            let path = dir.join(name);
            let mut all = vec!["bench", "--quiet", "--out", path.to_str().unwrap()];
            all.extend_from_slice(args);
            let out = dmtx(&all);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
        };
        let sim = run(
            "sim.json",
            &["--transport", "sim", "-d", "4ms", "--set", "accounts=500", "--check"],
        );
        let mem = run("mem.json", &["--txns", "200", "-w", "kvs", "--set", "keys=1000"]);
        std::fs::remove_dir_all(&dir).unwrap();
        (sim, mem)
    })
}

/// Write `v` as `dir/name`; its path as a string.
fn put(dir: &std::path::Path, name: &str, v: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(v).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

fn assert_one_line_error(out: &Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "`{needle}` not in {err}");
    }
}

/// The SVG's polylines of width 2: per chart its lines, then their legend samples.
fn polylines(svg: &str) -> Vec<&str> {
    svg.lines()
        .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
        .collect()
}

/// The number of points of a polyline.
fn points(line: &str) -> usize {
    line.split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .split_whitespace()
        .count()
}

/// The cell of column `col` in the table row of `file`: left-aligned columns start
/// under their header, right-aligned ones end under it.
fn cell(table: &str, file: &str, col: &str) -> String {
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let row = lines
        .find(|l| l.split_whitespace().any(|w| w == file))
        .unwrap_or_else(|| panic!("no row of {file} in\n{table}"));
    let start = header
        .find(&format!(" {col} "))
        .map(|i| i + 1)
        .or_else(|| header.find(col))
        .unwrap();
    let end = start + col.len();
    let left = ["protocol", "workload", "via", "inv", "check", "file", "knobs"].contains(&col);
    if left {
        row[start..].split_whitespace().next().unwrap_or("").to_string()
    } else {
        row[..end].split_whitespace().last().unwrap_or("").to_string()
    }
}

/// Goal: a sweep against coroutines over runs of 1×c and 2×c threads × coroutines draws
/// one line per thread count, each with its own points, and the legend names the
/// threads; runs that differ only in seed (repetitions) join their group's line as
/// dots with the line through their mean; a run that committed nothing has no latency
/// point. Method: copies of one simulated record with threads, coroutines, seed and
/// results edited; count the polylines, their points and the dots, find the legend.
#[test]
fn sweep_draws_one_line_per_group_of_other_settings() {
    let dir = scratch_dir("groups");
    let (sim, _) = base();
    for (name, t, c, seed, tps) in [
        ("a", 1, 1, 1, 100e3),
        ("b", 1, 2, 1, 200e3),
        ("c", 1, 4, 7, 350e3),
        ("c2", 1, 4, 9, 370e3),
        ("d", 2, 4, 1, 600e3),
        ("e", 2, 8, 1, 900e3),
        ("f", 2, 16, 1, 0.0),
    ] {
        let mut v = sim.clone();
        v["config"]["threads"] = json!(t);
        v["config"]["coroutines"] = json!(c);
        v["config"]["seed"] = json!(seed);
        v["committed_tps"] = json!(tps);
        if tps == 0.0 {
            v["latency_us"] = Value::Null;
        }
        put(&dir, &format!("{name}.json"), &v);
    }
    let svg_path = dir.join("s.svg");
    let out = dmtx(&[
        "report",
        "--plot",
        svg_path.to_str().unwrap(),
        "--plot-vs",
        "coroutines",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let lines = polylines(&svg);
    // Per panel the two groups' lines, then their two legend samples.
    assert_eq!(lines.len(), 8, "{lines:#?}");
    assert_eq!(points(lines[0]), 3, "threads=1: coroutines 1, 2, 4: {}", lines[0]);
    assert_eq!(points(lines[1]), 3, "threads=2: coroutines 4, 8, 16: {}", lines[1]);
    assert_eq!(points(lines[4]), 3, "latency, threads=1: {}", lines[4]);
    assert_eq!(points(lines[5]), 2, "latency, threads=2: none at 16: {}", lines[5]);
    assert_eq!(
        svg.matches("<circle").count(),
        7 + 6,
        "a dot per run and panel with a value"
    );
    assert!(svg.contains("ford smallbank sim threads=1"), "legend");
    assert!(svg.contains("ford smallbank sim threads=2"), "legend");
    assert!(!svg.contains("seed="), "a seed does not split a line");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: the table shows length, seed, memory nodes × replicas, non-default knobs,
/// fired faults, and the invariant and isolation verdicts, so that a failed run reads
/// `FAIL` and is named under the table. Method: copies of the simulated and mem
/// records with those fields edited; read each cell under its header.
#[test]
fn table_shows_settings_faults_and_verdicts() {
    let dir = scratch_dir("table");
    let (sim, mem) = base();
    let mut ok = sim.clone();
    ok["config"]["seed"] = json!(42);
    ok["config"]["memory_nodes"] = json!(3);
    ok["config"]["replicas"] = json!(2);
    ok["sim"]["faults"] = json!(["1.000 ms: mn0 NIC 4x slower", "2.000 ms: mn0 NIC back"]);
    // The registry's default for smallbank: not listed.
    ok["config"]["knobs"]["accounts"] = json!("100000");
    ok["config"]["knobs"]["hot_pct"] = json!("50");
    let mut inv = sim.clone();
    inv["invariant"]["ok"] = json!(false);
    let mut iso = sim.clone();
    iso["check"]["clean"] = json!(false);
    let mut interrupted = mem.clone();
    interrupted["stop_reason"] = json!("interrupt");
    interrupted["config"]["txns"] = Value::Null;
    interrupted["config"]["duration_s"] = json!(10.0);
    let files = [
        put(&dir, "ok.json", &ok),
        put(&dir, "inv.json", &inv),
        put(&dir, "iso.json", &iso),
        put(&dir, "mem.json", mem),
        put(&dir, "intr.json", &interrupted),
    ];
    let args: Vec<&str> = std::iter::once("report")
        .chain(files.iter().map(String::as_str))
        .collect();
    let out = dmtx(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let c = |file: &str, col: &str| cell(&table, file, col);
    assert_eq!(c("ok.json", "inv"), "ok", "{table}");
    assert_eq!(c("ok.json", "check"), "ok", "{table}");
    assert_eq!(c("inv.json", "inv"), "FAIL", "{table}");
    assert_eq!(c("inv.json", "check"), "ok", "{table}");
    assert_eq!(c("iso.json", "inv"), "ok", "{table}");
    assert_eq!(c("iso.json", "check"), "FAIL", "{table}");
    assert_eq!(c("mem.json", "check"), "-", "not checked: {table}");
    assert_eq!(c("ok.json", "seed"), "42", "{table}");
    assert_eq!(c("ok.json", "mn x r"), "3x2", "{table}");
    assert_eq!(c("ok.json", "length"), "4ms", "{table}");
    assert_eq!(c("mem.json", "length"), "200tx", "{table}");
    assert_eq!(c("ok.json", "faults"), "2", "{table}");
    assert_eq!(c("inv.json", "faults"), "0", "{table}");
    assert_eq!(c("mem.json", "faults"), "-", "{table}");
    assert_eq!(c("ok.json", "knobs"), "hot_pct=50", "{table}");
    assert_eq!(c("inv.json", "knobs"), "accounts=500", "{table}");
    assert_eq!(c("mem.json", "knobs"), "keys=1000", "{table}");
    let intr = table.lines().find(|l| l.contains("intr.json")).unwrap();
    assert!(intr.contains("10s intr"), "{table}");
    let last = table.lines().last().unwrap();
    assert!(
        last.starts_with("FAILED: 2 of 5 runs: inv.json (invariant), iso.json (isolation check)"),
        "{table}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Split one CSV line (RFC 4180 quoting) into its cells.
fn csv_cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(ch) = chars.next() {
        match (ch, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                cells.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(String::new()),
            (ch, _) => cells.last_mut().unwrap().push(ch),
        }
    }
    cells
}

/// Goal: `--csv FILE` writes one row per run with every scalar under dotted names,
/// `file` first and the rest in name order, the same header whatever the order of
/// the files, and cells holding commas or quotes quoted. Method: a simulated and a mem
/// record, one with a knob value holding a comma and a quote; parse the CSV back and
/// compare cells with the records.
#[test]
fn csv_has_every_scalar_under_stable_names() {
    let dir = scratch_dir("csv");
    let (sim, mem) = base();
    let mut odd = mem.clone();
    odd["config"]["knobs"]["keys"] = json!("1,000 \"k\"");
    odd["timeseries"] = json!({"bucket_s": 1.0, "clock": "real", "committed": [5, 6]});
    let a = put(&dir, "a.json", sim);
    let b = put(&dir, "b.json", &odd);
    let csv_path = dir.join("r.csv");
    let csv_at = csv_path.to_str().unwrap();
    let out = dmtx(&["report", "--csv", csv_at, &a, &b]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two rows: {csv}");
    let header = csv_cells(lines[0]);
    assert_eq!(header[0], "file");
    let mut sorted = header[1..].to_vec();
    sorted.sort();
    assert_eq!(sorted, header[1..].to_vec(), "name order");
    let rows: Vec<Vec<String>> = lines[1..].iter().map(|l| csv_cells(l)).collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{r:?}");
    }
    let at = |row: usize, col: &str| -> &str {
        let i = header
            .iter()
            .position(|h| h == col)
            .unwrap_or_else(|| panic!("no column {col} in {header:?}"));
        &rows[row][i]
    };
    assert_eq!(at(0, "file"), a);
    assert_eq!(at(0, "config.threads"), sim["config"]["threads"].to_string());
    assert_eq!(at(0, "latency_us.p99"), sim["latency_us"]["p99"].to_string());
    assert_eq!(
        at(0, "abort_reasons.lock_conflict"),
        sim["abort_reasons"]["lock_conflict"].to_string()
    );
    assert_eq!(
        at(0, "per_txn_type.amalgamate.committed"),
        sim["per_txn_type"]["amalgamate"]["committed"].to_string()
    );
    assert_eq!(at(0, "check.clean"), "true");
    assert_eq!(at(1, "timeseries.clock"), "real");
    assert_eq!(at(0, "sim.nics.0.node"), "mn0");
    assert_eq!(at(1, "sim.nics.0.node"), "", "a mem run has no sim");
    assert_eq!(at(1, "config.knobs.keys"), "1,000 \"k\"");
    assert!(lines[2].contains(r#","1,000 ""k""","#), "quoted: {}", lines[2]);
    for series in ["sim.timeseries_ms", "timeseries.committed"] {
        assert!(
            !header.iter().any(|h| h == series),
            "{series} is plotted, not tabulated"
        );
    }

    let out = dmtx(&["report", "--csv", csv_at, &b, &a]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let again = std::fs::read_to_string(&csv_path).unwrap();
    assert_eq!(again.lines().next(), Some(lines[0]), "the same header");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: a JSON file in a directory that is not a run record is skipped with a warning
/// naming it; the same file named on the command line is an error; a directory with
/// no record (empty, or holding only other JSON) is an error naming the directory.
#[test]
fn directories_skip_other_json_and_must_hold_a_record() {
    let dir = scratch_dir("load");
    let (_, mem) = base();
    let runs = dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    put(&runs, "a.json", mem);
    let other = put(&runs, "other.json", &json!({"hello": 1}));
    let runs_at = runs.to_str().unwrap();
    let out = dmtx(&["report", runs_at]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("warning: ") && err.contains(&other) && err.contains("skipped"),
        "{err}"
    );
    assert!(text(&out.stdout).contains("a.json"), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains("other.json"), "{}", text(&out.stdout));

    assert_one_line_error(&dmtx(&["report", &other]), &[&other, "not a dmtx run record"]);

    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let empty_at = empty.to_str().unwrap();
    assert_one_line_error(&dmtx(&["report", runs_at, empty_at]), &[empty_at, "no dmtx run record"]);
    let stray = dir.join("stray");
    std::fs::create_dir_all(&stray).unwrap();
    put(&stray, "x.json", &json!([1, 2]));
    let stray_at = stray.to_str().unwrap();
    assert_one_line_error(
        &dmtx(&["report", stray_at]),
        &[stray_at, "1 other JSON file(s) skipped"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: `--plot` draws a real-time run from its `timeseries` (seconds on the x axis),
/// leaves out a run with no series with a warning naming it, prefers `timeseries` to
/// `sim.timeseries_ms`, and refuses real and virtual clocks on one plot, naming a file
/// of each. Method: hand-made `timeseries` fields on copies of the two records.
#[test]
fn plot_draws_real_time_series_and_never_mixes_clocks() {
    let dir = scratch_dir("series");
    let (sim, mem) = base();
    let mut real = mem.clone();
    real["timeseries"] = json!({"bucket_s": 1.0, "clock": "real", "committed": [1000, 2500, 2400]});
    let mut none = mem.clone();
    none["timeseries"] = Value::Null;
    let real_at = put(&dir, "real.json", &real);
    let none_at = put(&dir, "none.json", &none);
    let svg_path = dir.join("t.svg");
    let svg_at = svg_path.to_str().unwrap();
    let out = dmtx(&["report", "--plot", svg_at, &real_at, &none_at]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("warning: ") && l.contains(&none_at) && l.contains("left out")),
        "{err}"
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let lines = polylines(&svg);
    assert_eq!(lines.len(), 2, "one run: its line and legend sample: {lines:#?}");
    assert_eq!(points(lines[0]), 3, "{}", lines[0]);
    assert!(svg.contains("committed per 1 s of real time"), "caption");
    assert!(svg.contains("real time since the warm-up, s"), "x axis");
    assert!(svg.contains("ford kvs (real)"), "legend");

    let mut virt = sim.clone();
    let buckets = sim["sim"]["timeseries_ms"].as_array().unwrap().len();
    let counts: Vec<u64> = (1..=buckets as u64 + 3).collect();
    virt["timeseries"] = json!({"bucket_s": 0.001, "clock": "virtual", "committed": counts});
    let virt_at = put(&dir, "virt.json", &virt);
    let out = dmtx(&["report", "--plot", svg_at, &virt_at]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert_eq!(points(polylines(&svg)[0]), buckets + 3, "`timeseries` first");
    assert!(svg.contains("of virtual time (simulated)"), "caption");

    let out = dmtx(&["report", "--plot", svg_at, &real_at, &virt_at]);
    assert_one_line_error(&out, &[&real_at, &virt_at, "one plot has one time axis"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
