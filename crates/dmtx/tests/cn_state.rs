//! Several compute nodes in one process (`--compute-nodes N` on `mem`).
//!
//! Goal: a `mem` run with three compute nodes runs every node's coordinators on the
//! same memory nodes, and FORD's histories across them pass the isolation checker.
//! Method: a checked run through the registry that writes its history; the history's
//! coordinator ids name every node. The binary accepts the flag on `mem`.

mod common;

use std::collections::BTreeSet;

use common::{dmtx, run_registry, scratch_dir, text};
use dmtx::BenchArgs;

#[test]
fn three_compute_nodes_on_mem_share_the_memory_nodes_and_pass_the_check() {
    let dir = scratch_dir("three-cns");
    let history = dir.join("h.jsonl");
    let r = run_registry(&BenchArgs {
        protocol: "ford".into(),
        workload: "smallbank".into(),
        threads: 1,
        coroutines: 2,
        compute_nodes: Some(3),
        duration: Some("200ms".into()),
        check: true,
        history: Some(history.to_str().unwrap().into()),
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    });
    assert!(r.invariant.ok, "{}", r.invariant.detail);
    let check = r.check.as_ref().unwrap();
    assert!(check.clean, "{}", check.summary);
    let mut nodes = BTreeSet::new();
    for line in std::fs::read_to_string(&history).unwrap().lines().skip(1) {
        let txn: serde_json::Value = serde_json::from_str(line).unwrap();
        if txn["outcome"] == "committed" {
            nodes.insert(txn["coord"].as_u64().unwrap() >> 16);
        }
    }
    assert_eq!(nodes, BTreeSet::from([0, 1, 2]), "every node committed");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_binary_runs_several_compute_nodes_on_mem() {
    let out = dmtx(&[
        "bench",
        "--workload",
        "kvs",
        "--compute-nodes",
        "2",
        "--threads",
        "1",
        "--duration",
        "100ms",
        "--check",
        "--quiet",
        "--out",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
