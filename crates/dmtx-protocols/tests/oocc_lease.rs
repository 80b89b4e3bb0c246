//! OOCC's lease manager (§VII-A) and clock-drift guard (§VII-B) on the simulator, with
//! two compute nodes: histories through the real-time checker while the lease changes
//! both ways every few tens of µs; a node whose clock rate runs past the bound stops
//! itself, and within the bound none does; the manager's policy; Property 2 through an
//! adjustment with and without the intermediate word.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dmtx_protocols::onever::lease::Lease;
use dmtx_protocols::oocc::lease_manager::{policy, word, ManagerStats};
use dmtx_protocols::oocc::{Oocc, OoccConfig, OoccVariant, ABORT_CLOCK_STOPPED};
use dmtx_runtime::AbortReason;
use dmtx_sim::FaultScript;
use dmtx_suite::{contended, Env, Setup, Transport};

fn two_nodes() -> Setup {
    Setup {
        compute_nodes: 2,
        txns: 80,
        ..Setup::new(2, 20)
    }
}

/// Goal: what the manager must keep, through an adjustment up and down: a reader's `rv`
/// is at most the `ww` of any writer that samples after it while the reader's lease may
/// still run. With the intermediate word it holds; without it, it fails.
/// Method: two nodes step through the manager's broadcasts one at a time (node 0 first);
/// a reader samples on either node at step `i`, a writer on either node at a step
/// `j ≥ i`. The manager's wait after the intermediate word's last ACK outlives every
/// `old` reader, so a reader sampling before that ACK races only writers sampling before
/// the commit phase.
#[test]
fn the_intermediate_word_keeps_property_2_both_ways() {
    let cfg = OoccConfig::default();
    for (old, new) in [(10_000, 4_000), (4_000, 14_000)] {
        let (o, n) = (word(&cfg, old), word(&cfg, new));
        for intermediate in [true, false] {
            let broadcasts: Vec<Lease> = if intermediate { vec![o.between(n), n] } else { vec![n] };
            // States of (node 0, node 1), one broadcast landing on one node at a time.
            let mut states = vec![(o, o)];
            for &b in &broadcasts {
                let last = *states.last().unwrap();
                states.push((b, last.1));
                states.push((b, b));
            }
            // With the wait: readers sampling in states 0..2 (before both ACKed the
            // intermediate word) have expired before the commit phase (state 3 on).
            let horizon = |i: usize| if intermediate && i < 2 { 3 } else { states.len() };
            let mut holds = true;
            for (i, si) in states.iter().enumerate() {
                for sj in &states[i..horizon(i)] {
                    for rv in [si.0.rv_ns, si.1.rv_ns] {
                        for ww in [sj.0.ww_ns, sj.1.ww_ns] {
                            holds &= rv <= ww;
                        }
                    }
                }
            }
            assert_eq!(holds, intermediate, "{old} -> {new} ns, intermediate {intermediate}");
        }
    }
}

/// Goal: the policy grows the lease when too few read-only commits skip validation,
/// shrinks it when it is over twice the read phase, and leaves it alone otherwise.
#[test]
fn the_policy_grows_and_shrinks_the_lease() {
    let cfg = OoccConfig::default();
    // Read phases of 3 µs (bucket 12 of 250 ns).
    let mut hist = vec![0u64; 512];
    hist[12] = 100;
    let target = policy(&cfg, 2_000, 100, 10, &hist).expect("too few omitted: grow");
    assert!(target > 3_000 && target < 6_000, "{target}");
    assert_eq!(policy(&cfg, 5_000, 100, 95, &hist), None, "on target");
    let shrunk = policy(&cfg, 40_000, 100, 100, &hist).expect("over twice the read phase: shrink");
    assert!(shrunk < 10_000, "{shrunk}");
    assert_eq!(policy(&cfg, 2_000, 5, 0, &hist), None, "too few commits to judge");
}

/// Goal: histories stay strict serializable while the manager changes every node's
/// lease both ways every 40 µs (Property 2 kept by the intermediate word), and the
/// changes happen.
#[test]
fn adjustments_both_ways_keep_histories_clean() {
    let report = Arc::new(ManagerStats::default());
    let cfg = OoccConfig {
        lease_adjust_period_ms: 0.04,
        adjust_script: Some(vec![4, 30, 10, 2]),
        report: Some(report.clone()),
        ..OoccConfig::default()
    };
    for seed in contended::seeds(0..3) {
        let env = Env::bank(Oocc::new(cfg.clone()), two_nodes());
        let out = contended::run(&env, Transport::Sim, seed, None);
        out.assert_clean(&env, "oocc, lease adjusted every 40 µs", seed);
        assert!(out.commits > 0);
    }
    let (n, up) = (
        report.adjustments.load(Ordering::Relaxed),
        report.increases.load(Ordering::Relaxed),
    );
    assert!(up >= 2 && n - up >= 2, "{n} adjustments, {up} up");
    let mean = report.adjust_ns.load(Ordering::Relaxed) / n;
    eprintln!("oocc: {n} lease adjustments, mean {mean} ns from prepare to the last commit ACK");
}

fn drifting(ppm: i64) -> FaultScript {
    format!("clock-drift node=cn1 ppm={ppm} at=0")
        .parse()
        .expect("fault script")
}

/// A bound of 1 % (so the monitor can tell 90 % of it from 80 % within a few ms of
/// virtual time, against a few µs of message round trip), checked every 0.5 ms.
fn checking() -> OoccConfig {
    OoccConfig {
        drift_ppm_max: 10_000,
        clock_check_period_ms: 0.25,
        lease_adjust: false,
        ..OoccConfig::default()
    }
}

/// The run's findings, with the real-time check allowed the offset that cn1's clock,
/// which stamps its transactions' start and end, gained by drifting `ppm` over the run
/// (plus the 5 µs it starts ahead): the protocol's clocks drift, the history's should
/// not (the suite stamps histories with node clocks).
fn assert_clean_drifting(env: &Env<Oocc>, out: &contended::Outcome, ppm: u64) {
    let end = out.sim.as_ref().expect("a sim run").0;
    let opts = dmtx_check::CheckOptions {
        clock_offset_ns_max: 5_000 + (end * ppm).div_ceil(1_000_000),
        ..env.check_options()
    };
    let report = dmtx_check::check(&out.history, &opts);
    assert!(report.is_clean(), "cn1 drifting {ppm} ppm: {report}");
    let rest: Vec<_> = out
        .findings(env)
        .into_iter()
        .filter(|f| !f.starts_with("the isolation checker"))
        .collect();
    assert!(rest.is_empty(), "cn1 drifting {ppm} ppm: {rest:?}");
}

/// Goal: a node whose clock rate runs past 80 % of `drift_ppm_max` (still within the
/// bound, so safe meanwhile) stops itself within a few periods (its later transactions
/// abort with `clock_stopped`), the other runs on, and the history is clean; below 80 %
/// no node stops.
#[test]
fn a_node_drifting_past_the_bound_stops_itself() {
    let stopped = AbortReason::Protocol(ABORT_CLOCK_STOPPED);
    let setup = Setup {
        txns: 2000,
        ..two_nodes()
    };
    let env = Env::bank(Oocc::new(checking()), setup.clone());
    let out = contended::run(&env, Transport::Sim, 1, Some(drifting(9_000)));
    assert_clean_drifting(&env, &out, 9_050);
    let n = out.aborts.get(&stopped).copied().unwrap_or(0);
    assert!(
        n > 0,
        "cn1 did not stop: {:?}, {:?}",
        out.aborts,
        out.sim.as_ref().map(|s| s.0)
    );
    assert!(out.commits > 0, "cn0 ran on");

    let env = Env::bank(Oocc::new(checking()), setup);
    let out = contended::run(&env, Transport::Sim, 1, Some(drifting(5_000)));
    assert_clean_drifting(&env, &out, 5_050);
    assert_eq!(out.aborts.get(&stopped), None, "within the bound nobody stops");
}

/// Goal: the canary: with the self-stop off and no drift offset, a node whose clock runs
/// ten times slow reads records "in lease" long after writers elsewhere stopped waiting,
/// and the checker catches the fractured reads.
#[test]
fn a_slow_clock_without_the_guard_is_caught() {
    let cfg = OoccConfig {
        clock_check: false,
        lease_adjust: false,
        offset_ns: Some(0),
        lease_us: 20,
        ..OoccConfig::default()
    };
    dmtx_suite::assert_caught_by("oocc slow clock without the guard", 20, |seed| {
        let env = Env::bank(Oocc::new(cfg.clone()), two_nodes());
        contended::run(&env, Transport::Sim, seed, Some(drifting(-900_000))).findings(&env)
    });
}

/// Goal: the broken manager (new lease at once) is the variant the model test above
/// refutes; it is reachable only through the test-only variant.
#[test]
fn the_variant_without_the_intermediate_word_is_test_only() {
    let p = Oocc::with_variant(OoccConfig::default(), OoccVariant::AdjustWithoutIntermediate);
    assert_eq!(p.config().variant, OoccVariant::AdjustWithoutIntermediate);
}
