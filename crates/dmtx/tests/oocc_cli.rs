//! OOCC through the `dmtx` binary and the registry (issue 29 item 8): `--check` holds
//! its runs to strict serializability (the checker's real-time mode) on `mem` and on
//! `sim` with two compute nodes, with the lease manager adjusting and the workloads'
//! invariants; the knobs reach the protocol from the command line.

mod common;

use common::{dmtx, run_registry, scratch_dir, text};
use dmtx::config::TransportKind;
use dmtx::BenchArgs;

fn args(workload: &str, set: &[&str], transport: TransportKind, compute_nodes: u32) -> BenchArgs {
    BenchArgs {
        protocol: "oocc".into(),
        workload: workload.into(),
        threads: 2,
        coroutines: 4,
        txns: Some(400),
        seed: 3,
        set: set.iter().map(|s| s.to_string()).collect(),
        out: "-".into(),
        quiet: true,
        check: true,
        transport,
        compute_nodes: Some(compute_nodes),
        ..BenchArgs::default()
    }
}

/// Goal: the binary prints the real-time verdict of a clean OOCC run.
#[test]
fn bench_check_says_strict_serializable() {
    let dir = scratch_dir("oocc_check");
    let out = dmtx(&[
        "bench",
        "--protocol",
        "oocc",
        "--workload",
        "smallbank",
        "--threads",
        "2",
        "--coroutines",
        "2",
        "--txns",
        "300",
        "--set",
        "accounts=64",
        "--check",
        "--out",
        dir.to_str().expect("a UTF-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(summary.contains("no anomalies (strict serializable)"), "{summary}");
    std::fs::remove_dir_all(&dir).expect("scratch dir");
}

/// Goal: OOCC's runs pass the real-time check and the invariants on YCSB θ = 0.99 with
/// 10 % writes and on TATP, on `sim` with two compute nodes and the lease manager
/// adjusting every 50 µs, and on `mem`.
#[test]
fn oocc_runs_clean_on_sim_and_mem() {
    let ycsb = [
        "zipf_theta=0.99",
        "write_ratio=0.1",
        "records=256",
        "lease_adjust_period_ms=0.05",
    ];
    for (workload, set) in [
        ("ycsb", &ycsb[..]),
        (
            "tatp",
            &["subscribers=1000", "ro_keys=2", "lease_adjust_period_ms=0.05"][..],
        ),
    ] {
        for (transport, cns) in [(TransportKind::Sim, 2), (TransportKind::Mem, 1)] {
            let r = run_registry(&args(workload, set, transport, cns));
            let check = r.check.as_ref().expect("--check");
            assert!(
                check.clean,
                "{workload} on {transport:?}: {}\n{}",
                check.summary,
                check.findings.join("\n")
            );
            assert!(check.summary.contains("strict serializable"), "{}", check.summary);
            assert!(r.invariant.ok, "{}", r.invariant.detail);
            assert!(r.committed > 0);
        }
    }
}

/// Goal: an unknown or bad OOCC knob is refused on one line naming it.
#[test]
fn bad_knobs_are_refused() {
    let out = dmtx(&["bench", "--protocol", "oocc", "--set", "omit_target=3", "--txns", "10"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("omit_target"), "{}", text(&out.stderr));
}
