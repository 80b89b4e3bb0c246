//! Motor passes the protocol suite (`dmtx_suite::run_all`) in SR (serializable) and SI
//! (snapshot isolation): contended transactions on `mem` with injected tears, `tcp` and
//! `sim`, with 1, 2 and 3 replicas, through the isolation checker; every workload's
//! invariants; a seeded fault sweep.

use dmtx_protocols::motor::Motor;
use dmtx_runtime::{Knobs, Protocol};
use dmtx_suite::{contended, FaultMenu, Options, Setup, Transport};

fn make(k: &Knobs) -> Motor {
    Motor::from_knobs(k).expect("suite knobs are Motor's")
}

/// Without recovery, a compute node crashing mid-commit leaves its locks.
const MOTOR_FAULTS: FaultMenu = FaultMenu {
    crash_cn: false,
    ..FaultMenu::ALL
};

#[test]
fn motor_sr_contended_on_mem_with_tears() {
    let env = dmtx_suite::Env::bank(make(&Knobs::default()), Setup::new(2, 20));
    let out = contended::run(&env, Transport::Mem, contended::seed_or_env(1), None);
    out.assert_clean(&env, "sr mem", 1);
    eprintln!("commits {} aborts {:?}", out.commits, out.aborts);
    assert!(out.commits > 0);
}

/// Delta spaces of a fixed size: the suite's memory nodes (64 MiB) cannot hold TPC-C's
/// default delta areas (twice the value region of its growing tables).
const SUITE_DELTA: [&str; 2] = ["delta_spaces=16", "delta_bytes=65536"];

#[test]
fn motor_sr_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![Knobs::parse(SUITE_DELTA).unwrap()],
        faults: Some(MOTOR_FAULTS),
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("motor sr: {} suite cases", ran.cases);
}

#[test]
fn motor_si_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![Knobs::parse(SUITE_DELTA.iter().copied().chain(["isolation=si"])).unwrap()],
        faults: Some(MOTOR_FAULTS),
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("motor si: {} suite cases", ran.cases);
}

/// Goal: the CN-hosted oracle over CN↔CN messages (`ts=rpc`, what several compute
/// processes run) keeps the contended bank serializable with two compute nodes, on
/// `sim` and on `mem` (without the tear injector there: a stalled verb blocks its OS
/// thread, and a blocked host thread times its timestamp calls out, which leaves the
/// watermark behind for the rest of the run).
#[test]
fn motor_with_rpc_timestamps_on_two_compute_nodes() {
    let setup = Setup {
        compute_nodes: 2,
        txns: 60,
        ..Setup::new(2, 20)
    };
    let make_env = || dmtx_suite::Env::bank(make(&Knobs::parse(["ts=rpc"]).unwrap()), setup.clone());
    let seed = contended::seed_or_env(2);
    let env = make_env();
    let out = contended::run(&env, Transport::Sim, seed, None);
    out.assert_clean(&env, "ts=rpc, 2 compute nodes, sim", seed);
    let env = make_env();
    let out = contended::run_mem(&env, seed, false);
    out.assert_clean(&env, "ts=rpc, 2 compute nodes, mem", seed);
}
