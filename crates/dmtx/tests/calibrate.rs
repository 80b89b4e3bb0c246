//! `dmtx sim calibrate` on short real runs: rows per transaction type, each workload's
//! own per-attempt step, and a profile that loads.

use dmtx::calibrate::{calibrate, measure_mem_cost, sample, MIN_ATTEMPTS};

/// Goal: a calibration run gives one row per transaction type, with the steps of that
/// type only (the driver tells the probe where each attempt ends): one `kvs.txn` per
/// attempt, a first poll plus one per round trip, commit steps only where the type
/// writes, and real time above what the `mem` transport itself costs.
#[test]
fn rows_are_per_transaction_type() {
    let mem = measure_mem_cost();
    assert!(mem.post_ns > 0.0 && mem.clock_ns > 0.0, "{mem:?}");
    let rows = sample("kvs", "500ms", mem, &[]).unwrap();
    let types: Vec<&str> = rows.iter().map(|r| r.txn_type.as_str()).collect();
    assert_eq!(types, ["read_only", "read_write"]);
    for r in &rows {
        assert!(r.attempts >= MIN_ATTEMPTS, "{r:?}");
        assert_eq!(r.steps["kvs.txn"], 1.0, "one per-attempt step per attempt: {r:?}");
        assert!(r.steps["poll"] >= 2.0, "a first poll and a round trip at least: {r:?}");
        assert!(
            r.ns_per_attempt > r.mem_ns_per_attempt && r.mem_ns_per_attempt > 0.0,
            "{r:?}"
        );
    }
    let commits = |i: usize| rows[i].steps.get("ford.commit").copied().unwrap_or(0.0);
    assert_eq!(commits(0), 0.0, "a read-only attempt writes nothing");
    assert!(commits(1) > 0.0, "a read-write attempt commits records");
}

/// Goal: the written profile is the base profile with the fitted costs, and loads.
#[test]
fn the_calibrated_profile_loads() {
    // KVS: two types, so each runs its 1000 attempts soon even on a debug build that
    // shares two cores with other tests.
    let (toml, report) = calibrate("cx5", &["kvs".to_string()], "500ms", 2).unwrap();
    assert!(
        report.contains("read_write") && report.contains("per workload"),
        "{report}"
    );
    let p = dmtx_sim::Profile::from_toml_str("calibrated", &toml).unwrap();
    assert_eq!(p.name, "cx5-calibrated");
    assert!(p.cpu.steps.contains_key("kvs.txn"), "{:?}", p.cpu.steps);
    assert_eq!(p.nic, dmtx_sim::Profile::load("cx5").unwrap().nic);
}
