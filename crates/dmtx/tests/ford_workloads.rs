//! FORD on the real workloads under heavy contention: 2 worker threads × 8 coroutines
//! on a handful of hot records, through the bench driver. Goal: the workloads'
//! invariants (SmallBank money conservation, KVS sums and per-record checksums, TATP's
//! rows and counts, TPC-C's consistency conditions, YCSB's write stamps) hold,
//! every recorded history is serializable, and contention really happened (lock
//! conflicts and validation aborts were seen).

mod common;

use common::run_registry;
use dmtx::results::BenchResult;
use dmtx::BenchArgs;

fn run(workload: &str, set: &[&str], seed: u64) -> BenchResult {
    let r = run_n(workload, set, seed, 20_000);
    assert_eq!(
        r.check.as_ref().unwrap().committed,
        r.committed,
        "every commit is in the history"
    );
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

fn run_n(workload: &str, set: &[&str], seed: u64, txns: u64) -> BenchResult {
    let args = BenchArgs {
        workload: workload.into(),
        threads: 2,
        coroutines: 8,
        txns: Some(txns),
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
    assert!(r.invariant.ok, "{workload} {set:?}: {}", r.invariant.detail);
    r
}

#[test]
fn tatp_keeps_its_invariants_with_unsuccessful_outcomes_apart() {
    let r = run_n("tatp", &["subscribers=200"], 5, 8_000);
    assert_eq!(r.committed, 8_000);
    assert!(
        r.successful < r.committed,
        "not-found and duplicate outcomes are unsuccessful"
    );
    assert!(r.successful > r.committed / 2, "{} of {}", r.successful, r.committed);
    let r = run_n(
        "tatp",
        &["subscribers=50", "ro_keys=2", "sub_nbr_index=false"],
        6,
        4_000,
    );
    assert!(
        aborts(&r, "lock_conflict") + aborts(&r, "validation") > 0,
        "no contention"
    );
}

#[test]
fn tpcc_keeps_its_consistency_conditions_in_both_variants() {
    for (seed, variant) in [(7, "spec"), (8, "ford")] {
        let set = [
            "warehouses=1",
            "items=1000",
            "customers=30",
            &format!("tpcc_variant={variant}"),
        ];
        let r = run_n("tpcc", &set, seed, 2_000);
        assert!(
            aborts(&r, "lock_conflict") + aborts(&r, "validation") > 0,
            "{variant}: no contention"
        );
        if variant == "spec" {
            assert!(r.rolled_back > 0, "NewOrder's 1% rollbacks are counted apart");
        } else {
            assert_eq!(r.rolled_back, 0, "FORD's variant never rolls back");
        }
    }
}

#[test]
fn ycsb_keeps_its_stamps_under_skew_and_with_inserts_over_partitions() {
    let r = run_n(
        "ycsb",
        &[
            "records=1024",
            "fields=4",
            "field_bytes=16",
            "ops_per_txn=4",
            "zipf_theta=0.99",
            "write_ratio=0.3",
        ],
        9,
        8_000,
    );
    assert!(
        aborts(&r, "lock_conflict") + aborts(&r, "validation") > 0,
        "no contention"
    );
    let r = run_n(
        "ycsb",
        &[
            "core=d",
            "records=512",
            "partitions=2",
            "fields=2",
            "field_bytes=16",
            "insert_room=4000",
        ],
        10,
        4_000,
    );
    assert_eq!(aborts(&r, "table_full"), 0, "insert_room covers the run's inserts");
}
