//! The `dmtx` binary as a user meets it: `list`, a short `bench`, bad input.
//!
//! Goal: exit codes (0 ok, 2 error) and one-line errors hold for clap's refusals and
//! for our own validation; `--out -` prints parseable JSON; `--quiet` prints nothing.
//! Method: run the built binary with `std::process::Command`.

mod common;

use common::{dmtx, scratch_dir, text};

use std::path::PathBuf;
use std::process::Output;

fn assert_one_line_error(out: &Output, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(needle), "`{needle}` not in {err}");
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
}

const SMALL: &[&str] = &[
    "bench",
    "--threads",
    "1",
    "--coroutines",
    "2",
    "--txns",
    "500",
    "--set",
    "accounts=500",
];

#[test]
fn list_shows_protocols_workloads_and_knobs() {
    let out = dmtx(&["list"]);
    assert_eq!(out.status.code(), Some(0));
    let s = text(&out.stdout);
    for needle in [
        "protocols:",
        "ford",
        "workloads:",
        "kvs",
        "smallbank",
        "--set accounts=100000",
        "--set backup_read=true",
        "txn types: amalgamate",
    ] {
        assert!(s.contains(needle), "`{needle}` not in {s}");
    }
}

#[test]
fn unknown_flag_is_exit_2_on_one_line() {
    let out = dmtx(&["bench", "--thread", "2"]);
    assert_one_line_error(&out, "unexpected argument '--thread'");
    assert_one_line_error(&out, "--threads");
}

#[test]
fn bad_value_is_exit_2_on_one_line() {
    assert_one_line_error(&dmtx(&["bench", "--threads", "many"]), "--threads");
    assert_one_line_error(&dmtx(&["bench", "--threads", "0"]), "--threads 0");
    assert_one_line_error(
        &dmtx(&["bench", "--duration", "1", "--txns", "5"]),
        "--duration 1 and --txns 5 both given",
    );
}

#[test]
fn unknown_names_list_the_valid_ones() {
    assert_one_line_error(&dmtx(&["bench", "--protocol", "frod"]), "did you mean `ford`");
    assert_one_line_error(&dmtx(&["bench", "--workload", "smallbnk"]), "valid: kvs, smallbank");
    let out = dmtx(&["bench", "--set", "acounts=5"]);
    assert_one_line_error(&out, "did you mean `accounts`");
    assert_eq!(
        text(&out.stderr).matches("unknown knob").count(),
        1,
        "the cause is printed once"
    );
}

#[test]
fn help_and_version_exit_0() {
    let out = dmtx(&["bench", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("--coroutines"));
    let out = dmtx(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("dmtx "));
}

#[test]
fn bench_json_to_stdout_and_quiet_file() {
    let mut args = SMALL.to_vec();
    args.extend(["--out", "-"]);
    let out = dmtx(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["committed"], 500);
    assert_eq!(v["invariant"]["ok"], true);
    assert!(text(&out.stderr).contains("committed"), "summary on stderr");

    let dir: PathBuf = std::env::temp_dir().join(format!("dmtx-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = SMALL.to_vec();
    let dir_s = dir.to_str().unwrap().to_string();
    args.extend(["--out", &dir_s, "--quiet"]);
    let out = dmtx(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with("ford-smallbank-1x2-") && files[0].ends_with(".json"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `dmtx bench --history` writes a history that `dmtx check` reads: 0 when clean, 1 on
/// an anomaly (a hand-made write skew), 2 for a file that is not a history.
#[test]
fn check_reads_histories_with_the_documented_exit_codes() {
    let dir = scratch_dir("check");
    let hist = dir.join("run.jsonl");
    let mut args = SMALL.to_vec();
    let hist_s = hist.to_str().unwrap();
    args.extend(["--history", hist_s, "--out", "-", "--quiet"]);
    let out = dmtx(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["check"]["clean"], true, "{json}");

    let out = dmtx(&["check", hist_s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no anomalies (serializable)"),
        "{}",
        text(&out.stdout)
    );

    let skew = dir.join("skew.jsonl");
    let txn = |id: u64, read: u64, write: u64| {
        format!(
            r#"{{"id":{id},"outcome":"committed","reads":[{{"table":0,"key":{read},"version":0}}],"writes":[{{"table":0,"key":{write},"prev":0,"version":{id},"kind":"update"}}]}}"#
        )
    };
    std::fs::write(
        &skew,
        format!(
            "{{\"format\":\"dmtx-history\",\"version\":1}}\n{}\n{}\n",
            txn(1, 1, 2),
            txn(2, 2, 1)
        ),
    )
    .unwrap();
    let out = dmtx(&["check", skew.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("G2"), "{}", text(&out.stdout));
    let out = dmtx(&["check", "--level", "si", skew.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "write skew is allowed under SI: {}",
        text(&out.stdout)
    );

    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "hello\n").unwrap();
    assert_one_line_error(&dmtx(&["check", bad.to_str().unwrap()]), "not a dmtx history");
    assert_one_line_error(&dmtx(&["check", dir.join("missing").to_str().unwrap()]), "missing");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: `dmtx report --plot` draws simulated runs' throughput over virtual time with
/// their faults marked, still prints the table, and refuses records that hold no series
/// (an older `mem` record) on one line with exit 2. Method: a 4 ms simulated run with a slow NIC
/// from 2 ms, then the SVG's line (one point per 1 ms bucket), label and fault text.
#[test]
fn report_plots_simulated_throughput_with_faults() {
    let dir = scratch_dir("plot");
    let at = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let sim = dmtx(&[
        "bench",
        "--transport",
        "sim",
        "-d",
        "4ms",
        "--set",
        "accounts=500",
        "--set",
        "fault=slow-nic node=mn0 factor=4 for=1ms at=2ms",
        "--quiet",
        "--out",
        &at("sim.json"),
    ]);
    assert_eq!(sim.status.code(), Some(0), "{}", text(&sim.stderr));
    let out = dmtx(&["report", "--plot", &at("t.svg"), &at("sim.json")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("sim.json"), "the table too");
    let svg = std::fs::read_to_string(at("t.svg")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(at("sim.json")).unwrap()).unwrap();
    let buckets = v["sim"]["timeseries_ms"].as_array().unwrap().len();
    assert!(buckets >= 4, "{buckets}");
    let line = svg
        .lines()
        .find(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
        .expect("the run's line");
    let points = line.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
    assert_eq!(points.split_whitespace().count(), buckets, "{line}");
    assert!(svg.contains("ford smallbank (sim)"), "legend");
    assert!(svg.contains("mn0 NIC 4x slower"), "fault marker");

    let mem = dmtx(&[
        "bench",
        "--txns",
        "200",
        "--set",
        "accounts=500",
        "--quiet",
        "--out",
        &at("mem.json"),
    ]);
    assert_eq!(mem.status.code(), Some(0), "{}", text(&mem.stderr));
    // A mem record as written before `timeseries` existed.
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(at("mem.json")).unwrap()).unwrap();
    v["timeseries"] = serde_json::Value::Null;
    std::fs::write(at("mem.json"), v.to_string()).unwrap();
    let out = dmtx(&["report", "--plot", &at("m.svg"), &at("mem.json")]);
    assert_one_line_error(&out, "no run among the records has a time series");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: `dmtx report --plot FILE --plot-vs FIELD` draws throughput and median latency
/// against a setting (FORD Fig. 22 against coroutines): one point per run, in the
/// setting's order whatever the files' order; a field the records lack is a one-line
/// error, and `--plot-vs` alone is refused.
#[test]
fn report_plots_a_sweep_against_a_setting() {
    let dir = scratch_dir("sweep");
    let at = |f: &str| dir.join(f).to_str().unwrap().to_string();
    // Names that sort against the coroutine counts: the plot must order by the setting.
    for (name, c) in [("a", "4"), ("b", "1"), ("c", "2")] {
        let out = dmtx(&[
            "bench",
            "--transport",
            "sim",
            "-d",
            "2ms",
            "-t",
            "1",
            "-c",
            c,
            "--set",
            "accounts=500",
            "--quiet",
            "--out",
            &at(&format!("{name}.json")),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let d = dir.to_str().unwrap();
    let out = dmtx(&["report", "--plot", &at("s.svg"), "--plot-vs", "coroutines", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(at("s.svg")).unwrap();
    assert!(svg.contains("against coroutines") && svg.contains("ford smallbank sim"));
    let lines: Vec<&str> = svg
        .lines()
        .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
        .collect();
    // Per panel the line, then its legend sample.
    let xs = |l: &str| -> Vec<f64> {
        let pts = l.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        pts.split_whitespace()
            .map(|p| p.split(',').next().unwrap().parse().unwrap())
            .collect()
    };
    let first = xs(lines[0]);
    assert_eq!(first.len(), 3, "{}", lines[0]);
    assert!(first.windows(2).all(|w| w[0] < w[1]), "in coroutine order: {first:?}");

    let out = dmtx(&["report", "--plot", &at("x.svg"), "--plot-vs", "nosuch", d]);
    assert_one_line_error(&out, "--plot-vs nosuch");
    let out = dmtx(&["report", "--plot-vs", "coroutines", d]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
