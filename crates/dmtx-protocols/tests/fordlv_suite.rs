//! FORD-LV passes the protocol suite (`dmtx_suite::run_all`) in each Vcache mode:
//! contended transactions on `mem` with injected tears and on `sim`, with 1, 2 and 3
//! replicas, through the isolation checker (session order included); every workload's
//! invariants; and a seeded fault sweep. `local` runs one compute node (it refuses
//! more); `partition` and `global` run two, so versions travel in CN↔CN messages.
//!
//! A failure names the case and prints `DMTX_SEED=<n>`; running the test with that
//! environment variable replays exactly that seed.

use dmtx_protocols::fordlv::FordLv;
use dmtx_runtime::{Knobs, Protocol};
use dmtx_suite::{contended, FaultMenu, Options, Setup, Transport};

/// The faults FORD survives without recovery (FORD-LV's are FORD's).
const FORDLV_FAULTS: FaultMenu = FaultMenu {
    crash_cn: false,
    ..FaultMenu::ALL
};

fn make(k: &Knobs) -> FordLv {
    FordLv::from_knobs(k).expect("suite knobs are FORD-LV's")
}

fn knobs(set: &[&str]) -> Knobs {
    Knobs::parse(set.iter().copied()).expect("FORD-LV knobs")
}

/// `local`: `run_all` on `mem` and `tcp` (its `sim` determinism case runs two compute
/// nodes, which `local` refuses), then the `sim` cases and determinism on one node here.
#[test]
fn fordlv_local_passes_the_suite() {
    let sets = vec![
        knobs(&[]),
        knobs(&["backup_read=false"]),
        // A Vcache of one bucket: entries are evicted all the time.
        knobs(&["vcache_bytes=104"]),
    ];
    let opts = Options {
        knob_sets: sets.clone(),
        transports: vec![Transport::Mem, Transport::Tcp],
        faults: Some(FORDLV_FAULTS),
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    let mut sim = 0;
    for k in &sets {
        for replicas in [1, 2, 3] {
            let env = dmtx_suite::Env::bank(make(k), Setup::new(replicas, 44));
            let seed = contended::seed_or_env(0);
            let out = contended::run(&env, Transport::Sim, seed, None);
            out.assert_clean(&env, &format!("{k:?}, {replicas} replica(s) on sim"), seed);
            sim += 1;
        }
        contended::assert_deterministic(|| make(k), &Setup::new(2, 20), contended::seed_or_env(0x5eed));
    }
    // Every workload on `sim` too (`run_all` ran them on `mem`).
    for (i, (name, set)) in dmtx_suite::workloads::SMALL.iter().enumerate() {
        let seed = contended::seed_or_env(i as u64);
        let setup = Setup {
            txns: 40,
            ..Setup::new(2, 20)
        };
        let run = dmtx_suite::workloads::run_named(|| make(&sets[0]), name, set, setup, Transport::Sim, seed);
        dmtx_suite::workloads::assert_clean(&format!("fordlv {name} on sim"), &run, seed);
        sim += 1;
    }
    eprintln!("fordlv local: {} suite cases + {sim} sim cases", ran.cases);
}

/// `partition` and `global` on two compute nodes, the fault sweep included.
#[test]
fn fordlv_partition_and_global_pass_the_suite() {
    // `global` also with a one-bucket Vcache, so remote inserts and evictions race.
    for (mode, tiny) in [("partition", false), ("global", true)] {
        let mut knob_sets = vec![knobs(&[&format!("vcache={mode}")])];
        if tiny {
            knob_sets.push(knobs(&[&format!("vcache={mode}"), "vcache_bytes=104"]));
        }
        let opts = Options {
            knob_sets,
            compute_nodes: 2,
            faults: Some(FORDLV_FAULTS),
            ..Options::default()
        };
        let ran = dmtx_suite::run_all(make, &opts);
        eprintln!("fordlv {mode}: {} suite cases", ran.cases);
    }
}

/// Goal: `local` refuses a second compute node, naming the knob that fixes it.
#[test]
fn local_refuses_a_second_compute_node() {
    let env = dmtx_suite::Env::bank(make(&knobs(&[])), Setup::new(2, 20));
    assert!(env.mem_cn(0).worker(0).unwrap().coordinator(&env.proto, 0).is_ok());
    let err = env
        .mem_cn(1)
        .worker(0)
        .unwrap()
        .coordinator(&env.proto, 0)
        .err()
        .expect("a second node is refused");
    assert!(err.to_string().contains("vcache=partition"), "{err}");
}
