//! FORD-LV (`fordlv`) through the registry, as `dmtx bench` runs it.
//!
//! Goal: the Vcache validates most read-only versions locally on TATP (its figures
//! reach `protocol_metrics`), which cuts round trips per commit below FORD's on the
//! same run; the multi-CN modes run two compute nodes with the isolation checker clean
//! and count their CN↔CN round trips apart from the memory nodes' round trips; `local`
//! refuses a second compute node with the fix in the message. Method: short `sim` runs
//! with `--check`.

mod common;

use common::{run_error, run_registry};
use dmtx::config::TransportKind;
use dmtx::results::BenchResult;
use dmtx::{BenchArgs, BenchConfig};

fn args(protocol: &str, workload: &str, set: &[&str], compute_nodes: u32) -> BenchArgs {
    BenchArgs {
        protocol: protocol.into(),
        workload: workload.into(),
        set: set.iter().map(|s| s.to_string()).collect(),
        transport: TransportKind::Sim,
        threads: 2,
        coroutines: 4,
        txns: Some(3000),
        compute_nodes: Some(compute_nodes),
        check: true,
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    }
}

fn assert_clean(r: &BenchResult) {
    assert!(r.invariant.ok, "{}", r.invariant.detail);
    let check = r.check.as_ref().expect("--check on a serializable protocol");
    assert!(check.clean, "{}", check.summary);
    assert!(r.committed > 0);
}

fn sum(r: &BenchResult, name: &str) -> u64 {
    r.protocol_metrics[name].sum
}

#[test]
fn the_vcache_cuts_tatps_round_trips_below_fords() {
    let lv = run_registry(&args("fordlv", "tatp", &["subscribers=100"], 1));
    let ford = run_registry(&args("ford", "tatp", &["subscribers=100"], 1));
    assert_clean(&lv);
    assert_clean(&ford);
    let (hits, misses) = (sum(&lv, "vcache_hits"), sum(&lv, "vcache_misses"));
    assert!(hits > misses, "{hits} hits, {misses} misses");
    let rate = &lv.protocol_metrics["vcache_hit_rate"];
    assert_eq!(rate.count, hits + misses, "one value per lookup");
    assert!(sum(&lv, "vcache_publishes") > 0 && sum(&lv, "vcache_inserts") > 0);
    assert!(lv.protocol_metrics["vcache_bytes"].max >= 16 << 20 >> 1);
    let (a, b) = (lv.total.rtt_per_commit.unwrap(), ford.total.rtt_per_commit.unwrap());
    assert!(a < b, "fordlv {a} round trips per commit, ford {b}");
    assert_eq!(sum(&lv, "vcache_msg_rtts"), 0, "local: no messages");
}

#[test]
fn partition_and_global_run_two_compute_nodes_and_count_messages_apart() {
    for mode in ["partition", "global"] {
        let set = format!("vcache={mode}");
        let r = run_registry(&args("fordlv", "smallbank", &[&set], 2));
        assert_clean(&r);
        let msgs = sum(&r, "vcache_msg_rtts");
        assert!(msgs > 0, "{mode}: no CN↔CN round trip");
        let per = r.total.msg_rtts_per_commit.expect("a messaging protocol counts them");
        assert!(per > 0.0, "{mode}");
        assert!(sum(&r, "vcache_hits") > 0, "{mode}: {:?}", r.protocol_metrics);
        // The memory nodes' round trips per commit stay FORD's or fewer: messages are
        // never counted in them (SmallBank commits take 1 to 3).
        let rtts = r.total.rtt_per_commit.unwrap();
        assert!(rtts <= 3.5, "{mode}: {rtts}");
    }
}

#[test]
fn local_refuses_two_compute_nodes() {
    let cfg = BenchConfig::from_args(&args("fordlv", "smallbank", &[], 2)).unwrap();
    let err = run_error(&cfg);
    assert!(err.contains("vcache=partition"), "{err}");
}
