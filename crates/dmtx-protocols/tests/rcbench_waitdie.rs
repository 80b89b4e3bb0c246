//! Wait-Die 2PL on RCBench's primitives (rcbench §5.1, Alg. 2 with ">" and "abort")
//! passes the protocol suite (contended bank on `mem` with tears, `tcp` and `sim`, 1–3
//! replicas; every workload; determinism), meets its round-trip rows (2n + 1), passes
//! the checker on YCSB at θ = 0.99 and SmallBank, really waits (older) and dies
//! (younger), and its read locks released before commit are caught.

use dmtx_protocols::nowait::{NowaitConfig, NowaitVariant, METRIC_WAIT_RETRIES};
use dmtx_protocols::rcbench::layout::ItemLayout;
use dmtx_protocols::waitdie::Waitdie;
use dmtx_runtime::{block_on, AbortReason, Knobs, Protocol};
use dmtx_suite::{bank, contended, Cache, Options, RttBudget, Setup, Transport, TxnKind};

fn make(k: &Knobs) -> Waitdie {
    Waitdie::from_knobs(k).expect("suite knobs are waitdie's")
}

fn knobs(pairs: &[&str]) -> Knobs {
    Knobs::parse(pairs.iter().copied()).unwrap()
}

/// The row for Wait-Die E (2n + 1), after index lookups (`addr_cache=on`,
/// warm), db+or on, one replica. An insert of a new key costs what No-Wait's does plus
/// nothing (a fresh slot's pL is not written: the claim WRITE covers it).
const BUDGET: [RttBudget; 5] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 2, 1),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 6, 1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 4, 1),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 4, 1),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 2, 1),
];

#[test]
fn waitdie_meets_its_round_trip_budget() {
    dmtx_suite::assert_budgets(|| make(&knobs(&["addr_cache=on"])), 1, 20, &BUDGET);
}

#[test]
fn waitdie_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![knobs(&[]), knobs(&["addr_cache=on", "db=off", "or=off"])],
        // The rows hold after index lookups: `waitdie_meets_its_round_trip_budget`.
        rtt_budget: Vec::new(),
        // No log, no recovery (as No-Wait).
        faults: None,
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("waitdie: {} suite cases", ran.cases);
}

/// Goal: a refused lock held by a younger transaction (larger bts in the lock word) is
/// waited on, and taken once released; one held by an older transaction kills the
/// requester at once, without waiting.
#[test]
fn older_waits_younger_dies() {
    // Waits long enough for the freeing thread, however loaded the host.
    let env = dmtx_suite::Env::bank(make(&knobs(&["wait_retries_max=10000000"])), Setup::new(1, 20));
    let table = bank::TABLE.id();
    let info = env.catalog().get(table).unwrap().clone();
    let lock_off = ItemLayout { meta_words: 3 }.lock_off(info.meta.value_bytes) as u64;
    let rel = env.slots(table)[&1];
    let ptr = info.ptr(0, rel + lock_off);
    let region = env.region(ptr.mn);
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");

    // Held by the youngest possible holder: we wait until a thread frees it.
    let young = u64::MAX - 1;
    assert_eq!(region.cas(ptr.offset, 0, young).unwrap(), 0);
    let freer = {
        let region = std::sync::Arc::clone(&region);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(region.cas(ptr.offset, young, 0).unwrap(), young);
        })
    };
    let mut seen = bank::Seen::default();
    block_on(bank::read_one(&mut c, 1, &mut seen)).expect("the waiter commits once the lock is free");
    block_on(c.cleanup());
    freer.join().unwrap();
    let waited = c.ctx.metrics.get(METRIC_WAIT_RETRIES).map_or(0, |m| m.sum);
    assert!(waited > 0, "no wait");

    // Held by the oldest possible holder: we die.
    assert_eq!(region.cas(ptr.offset, 0, 1).unwrap(), 0);
    let before = waited;
    let got = block_on(bank::read_one(&mut c, 1, &mut seen));
    assert_eq!(got.map(drop).map_err(|a| a.reason), Err(AbortReason::LockConflict));
    block_on(c.cleanup());
    assert_eq!(
        c.ctx.metrics.get(METRIC_WAIT_RETRIES).map_or(0, |m| m.sum),
        before,
        "a younger requester waited"
    );
    assert_eq!(
        region.cas(ptr.offset, 1, 0).unwrap(),
        1,
        "the dead requester left the lock alone"
    );
}

#[test]
fn ycsb_and_smallbank_pass_the_checker() {
    let ycsb: &[&str] = &["zipf_theta=0.99", "write_ratio=0.5", "ops_per_txn=10", "records=10000"];
    let smallbank: &[&str] = &["accounts=64", "hot_accounts=8", "hot_pct=90"];
    for transport in [Transport::Mem, Transport::Sim] {
        for (name, set) in [("ycsb", ycsb), ("smallbank", smallbank)] {
            let seed = contended::seed_or_env(11);
            let run = dmtx_suite::workloads::run_named(
                || make(&Knobs::default()),
                name,
                set,
                Setup::new(1, 20),
                transport,
                seed,
            );
            let case = format!("waitdie {name} on {transport:?}");
            dmtx_suite::workloads::assert_clean(&case, &run, seed);
            assert!(run.check.is_some(), "{case}: not checked");
        }
    }
}

/// Goal: read locks released before commit are caught.
#[test]
fn early_read_release_is_caught() {
    dmtx_suite::assert_caught(
        "waitdie read locks released before commit",
        || Waitdie::with_variant(NowaitConfig::default(), NowaitVariant::EarlyReadRelease),
        &Setup::new(1, 20),
        Transport::Mem,
        40,
    );
}
