//! Compute nodes as separate processes over `tcp`: `dmtx cluster up --compute-nodes`,
//! `dmtx report` merging one run's CN records, `dmtx check` over several histories.
//!
//! Goal: three FORD compute-node processes meet at two memory-node processes, run one
//! run together, and their records and histories merge into cluster totals and one clean
//! check; records of different runs stay apart; an anomaly whose transactions are split
//! across two history files is caught only when the files are checked together.
//! Method: the built binary on loopback (one run shared by the tests that read its
//! records), and hand-written histories.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{dmtx, scratch_dir, text};
use dmtx::results::BenchResult;

/// Commits of the shared run, over all compute nodes.
const TXNS: u64 = 3000;

/// The shared three-CN run: its stdout, stderr, exit code and records.
struct Run {
    stdout: String,
    stderr: String,
    code: Option<i32>,
    records: Vec<PathBuf>,
}

fn three_cn_run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = scratch_dir("three_cn_run");
        let out = dir.join("run.json");
        let out_s = out.display().to_string();
        let txns = TXNS.to_string();
        let o = dmtx(&[
            "cluster",
            "up",
            "--local",
            "2",
            "--size",
            "256MiB",
            "--compute-nodes",
            "3",
            "--",
            "bench",
            "--protocol",
            "ford",
            "-w",
            "kvs",
            "--set",
            "keys=2000",
            "--threads",
            "1",
            "--coroutines",
            "4",
            "--txns",
            &txns,
            "--check",
            "-o",
            &out_s,
        ]);
        Run {
            stdout: text(&o.stdout),
            stderr: text(&o.stderr),
            code: o.status.code(),
            records: (0..3).map(|i| dir.join(format!("run-cn{i}.json"))).collect(),
        }
    })
}

fn record(path: &Path) -> BenchResult {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn three_ford_cns_run_as_one_and_merge_into_a_clean_total() {
    let run = three_cn_run();
    assert_eq!(run.code, Some(0), "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let recs: Vec<BenchResult> = run.records.iter().map(|p| record(p)).collect();
    let run_id = &recs[0].cn.as_ref().expect("a --cn record").run_id;
    for (i, r) in recs.iter().enumerate() {
        let cn = r.cn.as_ref().unwrap();
        assert_eq!((cn.id, cn.compute_nodes), (i as u16, 3));
        assert_eq!(&cn.run_id, run_id, "one run id for every CN");
        assert_eq!(r.transport, "tcp");
        // Each CN ran its share; none checked alone.
        assert_eq!(r.committed, TXNS / 3, "cn{i}");
        assert!(r.check.is_none());
        assert!(
            r.invariant.detail.contains("not checked by cn"),
            "{}",
            r.invariant.detail
        );
    }
    assert!(
        run.stderr.contains(&format!("merged 3 CN records of run {run_id}")),
        "{}",
        run.stderr
    );
    // The merged row: 3 CNs, the whole budget, and one clean check of every history.
    let row = run
        .stdout
        .lines()
        .find(|l| l.contains(&format!("run-{run_id}")))
        .unwrap();
    assert!(row.contains("tcp   3"), "{row}");
    assert!(!row.contains(" ok "), "no invariant was checked across the CNs: {row}");
    assert!(
        run.stdout.contains(&format!("({TXNS} committed), no anomalies")),
        "{}",
        run.stdout
    );
}

#[test]
fn report_merges_one_runs_records_with_percentiles_of_the_merged_histogram() {
    let run = three_cn_run();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let recs: Vec<(PathBuf, BenchResult)> = run.records.iter().map(|p| (p.clone(), record(p))).collect();
    let merged = dmtx::report::merge_cn_runs(recs.clone());
    assert_eq!(merged.runs.len(), 1);
    let m = &merged.runs[0].1;
    assert_eq!(m.committed, TXNS);
    assert_eq!(m.attempted, recs.iter().map(|(_, r)| r.attempted).sum::<u64>());
    let tps: f64 = recs.iter().map(|(_, r)| r.committed_tps).sum();
    assert!((m.committed_tps - tps).abs() < 1.0, "{} vs {tps}", m.committed_tps);
    assert_eq!(
        m.total.committed_counters.rtts,
        recs.iter().map(|(_, r)| r.total.committed_counters.rtts).sum::<u64>()
    );
    for (i, mn) in m.per_mn.iter().enumerate() {
        let reads: u64 = recs.iter().map(|(_, r)| r.per_mn[i].ops.read).sum();
        assert_eq!(mn.ops.read, reads, "mn{i}");
    }
    // The percentiles are those of the union of the CNs' histograms.
    let mut h = dmtx::stats::latency_histogram();
    for (_, r) in &recs {
        for &(ns, n) in &r.cn.as_ref().unwrap().latency_ns {
            h.record_n(ns, n).unwrap();
        }
    }
    assert_eq!(h.len(), TXNS);
    assert_eq!(m.latency_us, dmtx::results::Latency::of(&h));

    // The CLI says what it merged, and shows one row.
    let paths: Vec<String> = run.records.iter().map(|p| p.display().to_string()).collect();
    let mut args = vec!["report"];
    args.extend(paths.iter().map(String::as_str));
    let o = dmtx(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let run_id = &recs[0].1.cn.as_ref().unwrap().run_id;
    assert!(text(&o.stderr).contains(&format!("merged 3 CN records of run {run_id}")));
    assert_eq!(
        text(&o.stdout).lines().count(),
        2,
        "header and one row:\n{}",
        text(&o.stdout)
    );
}

#[test]
fn report_never_merges_records_of_different_runs() {
    let run = three_cn_run();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let mut recs: Vec<(PathBuf, BenchResult)> = run.records.iter().map(|p| (p.clone(), record(p))).collect();
    // cn2's record, relabelled as another run's.
    recs[2].1.cn.as_mut().unwrap().run_id = "00000000000000aa".into();
    let merged = dmtx::report::merge_cn_runs(recs.clone());
    assert_eq!(merged.runs.len(), 2, "{:?}", merged.notes);
    let (first, other) = (&merged.runs[0].1, &merged.runs[1].1);
    assert_eq!(first.committed, recs[0].1.committed + recs[1].1.committed);
    assert_eq!(other.committed, recs[2].1.committed);
    assert!(
        merged.notes.iter().any(|n| n.contains("merged 2 CN records")),
        "{:?}",
        merged.notes
    );
    // Each run says records of its compute nodes are missing.
    assert!(
        merged
            .notes
            .iter()
            .any(|n| n.contains("records of 2 of its 3 compute nodes")),
        "{:?}",
        merged.notes
    );
    assert!(merged
        .notes
        .iter()
        .any(|n| n.contains("run 00000000000000aa: records of 1 of its 3")));
}

/// A committed transaction of coordinator `coord` (CN << 16), sequence 1, reading
/// `reads` (key, version) and updating `writes` (key, prev) of table 0.
fn txn(coord: u32, start_ns: u64, end_ns: u64, reads: &[(u64, u64)], writes: &[(u64, u64)]) -> String {
    let id = (u64::from(coord) << 40) | 1;
    let reads: Vec<String> = reads
        .iter()
        .map(|(k, v)| format!(r#"{{"table":0,"key":{k},"version":{v}}}"#))
        .collect();
    let writes: Vec<String> = writes
        .iter()
        .map(|(k, p)| format!(r#"{{"table":0,"key":{k},"prev":{p},"version":{id},"kind":"update"}}"#))
        .collect();
    format!(
        r#"{{"id":{id},"coord":{coord},"start_ns":{start_ns},"end_ns":{end_ns},"outcome":"committed","reads":[{}],"writes":[{}]}}"#,
        reads.join(","),
        writes.join(",")
    )
}

fn history(dir: &Path, name: &str, txns: &[String]) -> String {
    let p = dir.join(name);
    let mut s = String::from("{\"format\":\"dmtx-history\",\"version\":2}\n");
    for t in txns {
        s += t;
        s.push('\n');
    }
    std::fs::write(&p, s).unwrap();
    p.display().to_string()
}

#[test]
fn check_over_several_files_catches_a_cycle_split_across_them() {
    let dir = scratch_dir("split_cycle");
    // Write skew across CNs: cn0 reads x, writes y; cn1 reads y, writes x; both from the
    // load. Each file alone is serializable; together they are G2.
    let a = history(&dir, "cn0.history", &[txn(0, 10, 20, &[(1, 0)], &[(2, 0)])]);
    let b = history(&dir, "cn1.history", &[txn(1 << 16, 10, 20, &[(2, 0)], &[(1, 0)])]);
    for one in [&a, &b] {
        let o = dmtx(&["check", one]);
        assert_eq!(o.status.code(), Some(0), "{one} alone: {}", text(&o.stdout));
    }
    let o = dmtx(&["check", &a, &b]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("G2"), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("merged 2 histories: 2 txns"),
        "{}",
        text(&o.stderr)
    );
    // The same file twice is refused, not checked as a history of duplicates.
    let o = dmtx(&["check", &a, &a]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("is in both"), "{}", text(&o.stderr));
}

#[test]
fn real_time_across_files_needs_and_honours_a_clock_offset_bound() {
    let dir = scratch_dir("split_real_time");
    // cn0 updates x and ends at 1000 ns; cn1 begins at 1100 ns and reads the load's x:
    // a stale read in real time if the clocks agree within 100 ns, and no anomaly if they
    // may differ by more.
    let a = history(&dir, "cn0.history", &[txn(0, 900, 1000, &[], &[(1, 0)])]);
    let b = history(&dir, "cn1.history", &[txn(1 << 16, 1100, 1200, &[(1, 0)], &[])]);
    let o = dmtx(&["check", &a, &b, "--level", "strict"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--clock-offset-max"), "{}", text(&o.stderr));
    let o = dmtx(&["check", &a, &b, "--level", "strict", "--clock-offset-max", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).to_lowercase().contains("real"), "{}", text(&o.stdout));
    let o = dmtx(&["check", &a, &b, "--level", "strict", "--clock-offset-max", "1us"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    // Serializable order does not compare clocks: no bound needed.
    assert_eq!(dmtx(&["check", &a, &b]).status.code(), Some(0));
}

#[test]
fn cn_flag_needs_a_listed_compute_node() {
    let dir = scratch_dir("cn_flag");
    let cluster = dir.join("cluster.toml");
    std::fs::write(
        &cluster,
        "format = \"dmtx-cluster\"\nversion = 1\ncluster_id = 1\nepoch = 0\nreplicas = 1\n\n\
         [[memory_nodes]]\nid = 0\naddress = \"127.0.0.1:9\"\nbytes = \"64MiB\"\n\n\
         [[compute_nodes]]\nid = 0\naddress = \"127.0.0.1:10\"\n\n\
         [[compute_nodes]]\nid = 1\naddress = \"127.0.0.1:11\"\n",
    )
    .unwrap();
    let c = cluster.display().to_string();
    let o = dmtx(&["bench", "--cluster", &c, "--cn", "5", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(e.contains("--cn 5") && e.contains("listed: 0, 1"), "{e}");
    let o = dmtx(&["cluster", "up", "--local", "1", "--compute-nodes", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("give the bench"), "{}", text(&o.stderr));
    let o = dmtx(&[
        "cluster",
        "up",
        "--local",
        "1",
        "--size",
        "64MiB",
        "--compute-nodes",
        "2",
        "--",
        "bench",
        "--out",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("2 records"), "{}", text(&o.stderr));
    let o = dmtx(&["bench", "--cn", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--cluster"), "{}", text(&o.stderr));
}
