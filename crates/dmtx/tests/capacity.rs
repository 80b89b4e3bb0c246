//! Growing tables get their room from the run (issue 25 §2), and room that is reserved
//! but never written costs no memory (§1).

mod common;

use std::process::Command;

use common::run_registry;
use dmtx::BenchArgs;

/// A TPC-C small enough to load in well under a second: one warehouse, 1000 items, 60
/// customers per district.
fn tiny_tpcc(duration: Option<&str>, txns: Option<u64>, set: &[&str]) -> BenchArgs {
    let mut knobs = vec!["warehouses=1", "items=1000", "customers=60"];
    knobs.extend_from_slice(set);
    BenchArgs {
        workload: "tpcc".into(),
        threads: 1,
        coroutines: 2,
        duration: duration.map(str::to_string),
        txns,
        set: knobs.iter().map(|s| s.to_string()).collect(),
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    }
}

/// Goal: a longer run gets more room, and a knob that sizes the room wins over the
/// run's length. Method: compare the memory-node regions (sized for the tables) of
/// short and longer timed runs, with and without `new_orders_max`/`payments_max`.
#[test]
fn room_follows_the_run_length_unless_a_knob_fixes_it() {
    let short = run_registry(&tiny_tpcc(Some("100ms"), None, &[]));
    let long = run_registry(&tiny_tpcc(Some("2s"), None, &[]));
    for r in [&short, &long] {
        assert!(r.invariant.ok, "{:?}", r.invariant);
    }
    assert!(
        long.config.mn_bytes > short.config.mn_bytes + (8 << 20),
        "a 2 s run reserved {} bytes per memory node, a 100 ms run {}",
        long.config.mn_bytes,
        short.config.mn_bytes
    );
    let fixed = ["new_orders_max=200", "payments_max=200"];
    let fixed_short = run_registry(&tiny_tpcc(Some("100ms"), None, &fixed));
    let fixed_long = run_registry(&tiny_tpcc(Some("2s"), None, &fixed));
    assert_eq!(fixed_short.config.mn_bytes, fixed_long.config.mn_bytes);
    assert!(fixed_long.config.mn_bytes < long.config.mn_bytes);
}

/// Goal: loading writes only the pages that hold records, so room reserved for a long
/// run is free. Method: run the binary with 600 k NewOrders and Payments of room per
/// warehouse (1.5 GB per memory node reserved, each node holding a replica of every
/// table) and a few transactions, and read the child's peak resident memory: a loader
/// that wrote the whole image would hold three times the reserve.
#[cfg(target_os = "linux")]
#[test]
fn reserved_room_costs_no_resident_memory() {
    let out = Command::new(env!("CARGO_BIN_EXE_dmtx"))
        .args([
            "bench",
            "-w",
            "tpcc",
            "--threads",
            "1",
            "--coroutines",
            "2",
            "--txns",
            "50",
            "-q",
            "-o",
            "-",
        ])
        .args(["--set", "warehouses=1", "--set", "items=1000", "--set", "customers=60"])
        .args(["--set", "new_orders_max=600000", "--set", "payments_max=600000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reserved = record["config"]["mn_bytes"].as_u64().unwrap();
    assert!(
        reserved > 1 << 30,
        "the room reserved only {reserved} bytes per memory node"
    );
    // SAFETY: getrusage fills the struct it is given.
    let peak_kib = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut u), 0);
        u.ru_maxrss as u64
    };
    assert!(
        peak_kib < 512 << 10,
        "peak resident memory {peak_kib} KiB for {reserved} bytes reserved per memory node"
    );
}
