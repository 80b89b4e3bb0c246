//! FORD on the real workloads under heavy contention: 2 worker threads × 8 coroutines
//! on a handful of hot records, through the bench driver. Goal: the workloads'
//! invariants (SmallBank money conservation, KVS sums and per-record checksums) hold,
//! every recorded history is serializable, and contention really happened (lock
//! conflicts and validation aborts were seen).

mod common;

use common::run_registry;
use dmtx::results::BenchResult;
use dmtx::BenchArgs;

fn run(workload: &str, set: &[&str], seed: u64) -> BenchResult {
    let args = BenchArgs {
        workload: workload.into(),
        threads: 2,
        coroutines: 8,
        txns: Some(20_000),
        seed,
        set: set.iter().map(|s| s.to_string()).collect(),
        out: "-".into(),
        quiet: true,
        check: true,
        ..BenchArgs::default()
    };
    let r = run_registry(&args);
    let check = r.check.as_ref().expect("--check records and checks the history");
    assert!(check.clean, "{}\n{}", check.summary, check.findings.join("\n"));
    assert_eq!(check.committed, r.committed, "every commit is in the history");
    r
}

fn aborts(r: &BenchResult, reason: &str) -> u64 {
    let v = serde_json::to_value(r).unwrap();
    v["abort_reasons"][reason].as_u64().unwrap_or(0)
}

#[test]
fn smallbank_conserves_money_on_a_few_hot_accounts() {
    for seed in 1..=3 {
        let r = run("smallbank", &["accounts=64", "hot_accounts=8", "hot_pct=90"], seed);
        assert!(r.invariant.ok, "seed {seed}: {}", r.invariant.detail);
        assert_eq!(r.committed, 20_000);
        assert!(aborts(&r, "lock_conflict") > 0, "seed {seed}: no contention happened");
    }
}

#[test]
fn kvs_sums_hold_under_skew_with_read_only_and_read_write_mixes() {
    for (seed, set) in [
        (1, ["keys=32", "zipf_theta=0.99", "rw_ratio=0.5", "objects=3"]),
        (2, ["keys=16", "zipf_theta=0.5", "rw_ratio=0.2", "objects=4"]),
        (3, ["keys=256", "zipf_theta=0.99", "rw_ratio=0.9", "objects=2"]),
    ] {
        let r = run("kvs", &set, seed);
        assert!(r.invariant.ok, "seed {seed}: {}", r.invariant.detail);
        assert!(
            aborts(&r, "lock_conflict") + aborts(&r, "validation") > 0,
            "seed {seed}: no contention"
        );
    }
}

#[test]
fn backup_reads_off_is_just_as_correct() {
    let r = run("smallbank", &["accounts=64", "hot_accounts=8", "backup_read=false"], 4);
    assert!(r.invariant.ok, "{}", r.invariant.detail);
}
