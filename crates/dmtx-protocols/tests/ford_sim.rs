//! FORD on the `sim` transport with 2 compute nodes (their clocks skewed and drifting):
//! the suite's contended bank is serializable, conserves money and keeps replicas equal,
//! and a seed replays bit for bit while another seed gives another run
//! (`dmtx_suite::assert_deterministic`). `DMTX_SEED=<n>` picks the seed.

use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_suite::{contended, Setup};

#[test]
fn ford_on_sim_is_deterministic_serializable_and_conserves_money() {
    let setup = Setup {
        compute_nodes: 2,
        keys: 64,
        capacity: 160,
        ..Setup::new(2, 40)
    };
    let seed = contended::seed_or_env(0x5eed);
    eprintln!("DMTX_SEED={seed}");
    let out = dmtx_suite::assert_deterministic(|| Ford::new(FordConfig::default()), &setup, seed);
    assert!(out.commits > 100, "only {} commits", out.commits);
    let (end_ns, stats) = out.sim.expect("a sim run");
    eprintln!(
        "seed {seed}: {} commits, virtual {end_ns} ns, {} verbs, {} events",
        out.commits, stats.ops, stats.events
    );
}
