//! FORD on the real workloads under heavy contention: 2 worker threads × 8 coroutines
//! on a handful of hot records, through the protocol suite's workload runner
//! (`dmtx_suite::workloads`, the same for every protocol) and, once, through the bench
//! driver. Goal: the workloads' invariants (SmallBank money conservation, KVS sums and
//! per-record checksums, TATP's rows and counts, TPC-C's consistency conditions, YCSB's
//! write stamps) hold, every recorded history is serializable, and contention really
//! happened (lock conflicts and validation aborts were seen).

mod common;

use common::run_registry;
use dmtx::BenchArgs;
use dmtx_protocols::ford::Ford;
use dmtx_runtime::{AbortReason, Knobs, Protocol};
use dmtx_suite::workloads::{assert_clean, run_named, WorkloadRun};
use dmtx_suite::{Setup, Transport};

/// Run `workload` with `set` under FORD (with `ford` knobs) on 2 threads × 8
/// coordinators, `txns` each, 2 replicas; it must keep its invariants and pass the
/// checker.
fn run_with(workload: &str, set: &[&str], ford: &[&str], seed: u64, txns: u32) -> WorkloadRun {
    let knobs = Knobs::parse(ford.iter().copied()).unwrap();
    let setup = Setup {
        threads: 2,
        coroutines: 8,
        txns,
        ..Setup::new(2, 40)
    };
    let r = run_named(
        || Ford::from_knobs(&knobs).unwrap(),
        workload,
        set,
        setup,
        Transport::Mem,
        seed,
    );
    assert_clean(&format!("ford {workload} {set:?} {ford:?}"), &r, seed);
    assert_eq!(r.gave_up, 0, "{workload}: a transaction never committed");
    r
}

fn run(workload: &str, set: &[&str], seed: u64, txns: u32) -> WorkloadRun {
    run_with(workload, set, &[], seed, txns)
}

fn contended(r: &WorkloadRun) -> bool {
    r.aborts_of(AbortReason::LockConflict) + r.aborts_of(AbortReason::Validation) > 0
}

#[test]
fn smallbank_conserves_money_on_a_few_hot_accounts() {
    for seed in 1..=3 {
        let r = run("smallbank", &["accounts=64", "hot_accounts=8", "hot_pct=90"], seed, 150);
        let user = r.aborts_of(AbortReason::User);
        assert_eq!(r.committed + user, 16 * 150, "seed {seed}: every transaction ended");
        assert!(
            r.aborts_of(AbortReason::LockConflict) > 0,
            "seed {seed}: no contention happened"
        );
    }
}

#[test]
fn kvs_sums_hold_under_skew_with_read_only_and_read_write_mixes() {
    for (seed, set) in [
        (1, ["keys=32", "zipf_theta=0.99", "rw_ratio=0.5", "objects=3"]),
        (2, ["keys=16", "zipf_theta=0.5", "rw_ratio=0.2", "objects=4"]),
        (3, ["keys=256", "zipf_theta=0.99", "rw_ratio=0.9", "objects=2"]),
    ] {
        let r = run("kvs", &set, seed, 150);
        assert!(contended(&r), "seed {seed}: no contention");
    }
}

#[test]
fn backup_reads_off_is_just_as_correct() {
    run_with(
        "smallbank",
        &["accounts=64", "hot_accounts=8"],
        &["backup_read=false"],
        4,
        150,
    );
}

#[test]
fn tatp_keeps_its_invariants_with_unsuccessful_outcomes_apart() {
    let r = run("tatp", &["subscribers=200"], 5, 100);
    assert_eq!(r.committed, 16 * 100);
    assert!(
        r.successful < r.committed,
        "not-found and duplicate outcomes are unsuccessful"
    );
    assert!(r.successful > r.committed / 2, "{} of {}", r.successful, r.committed);
    let r = run("tatp", &["subscribers=50", "ro_keys=2", "sub_nbr_index=false"], 6, 100);
    assert!(contended(&r), "no contention");
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
        let r = run("tpcc", &set, seed, 40);
        assert!(contended(&r), "{variant}: no contention");
        if variant == "spec" {
            assert!(r.rolled_back > 0, "NewOrder's 1% rollbacks are counted apart");
        } else {
            assert_eq!(r.rolled_back, 0, "FORD's variant never rolls back");
        }
    }
}

#[test]
fn ycsb_keeps_its_stamps_under_skew_and_with_inserts_over_partitions() {
    let r = run(
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
        100,
    );
    assert!(contended(&r), "no contention");
    let r = run(
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
        100,
    );
    assert_eq!(
        r.aborts_of(AbortReason::TableFull),
        0,
        "insert_room covers the run's inserts"
    );
}

/// The bench driver's `--check` records every commit of a contended run and the
/// workload's invariant verdict reaches the result.
#[test]
fn the_driver_records_every_commit_and_checks_invariants() {
    let args = BenchArgs {
        workload: "smallbank".into(),
        threads: 2,
        coroutines: 8,
        txns: Some(2_000),
        seed: 1,
        set: ["accounts=64", "hot_accounts=8", "hot_pct=90"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        out: "-".into(),
        quiet: true,
        check: true,
        ..BenchArgs::default()
    };
    let r = run_registry(&args);
    let check = r.check.as_ref().expect("--check records and checks the history");
    assert!(check.clean, "{}\n{}", check.summary, check.findings.join("\n"));
    assert!(r.invariant.ok, "{}", r.invariant.detail);
    assert_eq!(r.committed, 2_000);
    assert_eq!(check.committed, r.committed, "every commit is in the history");
}
