//! Wound-Wait 2PL on RCBench's primitives (rcbench §5.1, Alg. 2) passes the protocol
//! suite (contended bank on `mem` with tears, `tcp` and `sim`, 1–3 replicas; every
//! workload; determinism), meets its round-trip rows (2n + 2), passes the checker on
//! YCSB at θ = 0.99 and SmallBank, wounds a younger holder and waits for an older one,
//! and its read locks released before commit are caught.

use dmtx_memnode::Control;
use dmtx_protocols::nowait::{NowaitConfig, NowaitVariant, METRIC_WAIT_RETRIES, TG_COORDS, TG_THETA};
use dmtx_protocols::rcbench::layout::ItemLayout;
use dmtx_protocols::rcbench::prims::{state_word, tid_of, TgArea, ST_AB, ST_RN, TG_RING};
use dmtx_protocols::woundwait::Woundwait;
use dmtx_runtime::{block_on, named, AbortReason, Knobs, Protocol};
use dmtx_suite::{bank, contended, Cache, Options, RttBudget, Setup, Transport, TxnKind};

fn make(k: &Knobs) -> Woundwait {
    Woundwait::from_knobs(k).expect("suite knobs are woundwait's")
}

fn knobs(pairs: &[&str]) -> Knobs {
    Knobs::parse(pairs.iter().copied()).unwrap()
}

/// The row for Wound-Wait E (2n + 2), after index lookups (`addr_cache=on`,
/// warm), db+or on, one replica: 2 per item, the state CAS RN → CM, the release post.
const BUDGET: [RttBudget; 5] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 2, 2),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 6, 2),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 4, 2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 4, 2),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 2, 2),
];

#[test]
fn woundwait_meets_its_round_trip_budget() {
    dmtx_suite::assert_budgets(|| make(&knobs(&["addr_cache=on"])), 1, 20, &BUDGET);
}

#[test]
fn woundwait_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![knobs(&["addr_cache=on", "db=off", "or=off"])],
        // The rows hold after index lookups: `woundwait_meets_its_round_trip_budget`.
        rtt_budget: Vec::new(),
        // No log, no recovery (as No-Wait).
        faults: None,
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("woundwait: {} suite cases", ran.cases);
}

/// Goal: a refused lock whose pL names a younger holder gets that holder wounded (its
/// T^g state RN → AB) and is taken once released; one held by an older holder is
/// waited on, not wounded.
#[test]
fn older_wounds_younger_waits() {
    let env = dmtx_suite::Env::bank(make(&knobs(&["wait_retries_max=10000000"])), Setup::new(1, 20));
    let table = bank::TABLE.id();
    let info = env.catalog().get(table).unwrap().clone();
    let layout = ItemLayout { meta_words: 3 };
    let vb = info.meta.value_bytes;
    let rel = env.slots(table)[&1];
    let lock = info.ptr(0, rel + layout.lock_off(vb) as u64);
    let pl = info.ptr(0, rel + layout.meta_off(vb) as u64 + 8);
    let region = env.region(lock.mn);
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    let tg = TgArea {
        theta: TG_THETA,
        delta: TG_COORDS * TG_RING,
        bases: (0..env.cluster.mn_count())
            .map(|mn| {
                let a = named::fetch(&env.cluster, &format!("rcbench.tg.{mn}")).unwrap();
                (a.at.mn, a.at.offset)
            })
            .collect(),
    };
    // A fake holder: T^g slot of a coordinator ring nobody runs, state RN.
    let holder_tid = tid_of(TG_COORDS - 1, 0, TG_COORDS);
    let slot = tg.slot(holder_tid);
    let slot_region = env.region(slot.mn);
    let mut words = [0u8; 16];
    words[..8].copy_from_slice(&holder_tid.to_le_bytes());
    words[8..].copy_from_slice(&state_word(holder_tid, ST_RN).to_le_bytes());
    slot_region.write(slot.offset, &words).unwrap();
    let state = |r: &dmtx_verbs::Region| r.load(slot.offset + 8).unwrap() & 3;

    for (holder_bts, wounded) in [(u64::MAX - 1, true), (1, false)] {
        slot_region.write(slot.offset, &words).unwrap();
        let mut p = [0u8; 16];
        p[..8].copy_from_slice(&holder_bts.to_le_bytes());
        p[8..].copy_from_slice(&holder_tid.to_le_bytes());
        region.write(pl.offset, &p).unwrap();
        assert_eq!(region.cas(lock.offset, 0, holder_bts).unwrap(), 0);
        let freer = {
            let region = std::sync::Arc::clone(&region);
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                assert_eq!(region.cas(lock.offset, holder_bts, 0).unwrap(), holder_bts);
            })
        };
        let mut seen = bank::Seen::default();
        block_on(bank::read_one(&mut c, 1, &mut seen)).expect("the waiter commits once the lock is free");
        block_on(c.cleanup());
        freer.join().unwrap();
        let expect = if wounded { ST_AB } else { ST_RN };
        assert_eq!(state(&slot_region), expect, "holder bts {holder_bts}");
    }
    assert!(
        c.ctx.metrics.get(METRIC_WAIT_RETRIES).map_or(0, |m| m.sum) > 0,
        "no wait"
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
            let case = format!("woundwait {name} on {transport:?}");
            dmtx_suite::workloads::assert_clean(&case, &run, seed);
            assert!(run.check.is_some(), "{case}: not checked");
        }
    }
}

/// Goal: read locks released before commit are caught.
#[test]
fn early_read_release_is_caught() {
    dmtx_suite::assert_caught(
        "woundwait read locks released before commit",
        || Woundwait::with_variant(NowaitConfig::default(), NowaitVariant::EarlyReadRelease),
        &Setup::new(1, 20),
        Transport::Mem,
        40,
    );
}

/// Goal: the two-transaction wound cycle ends: T_old holds A and wants B, T_young holds
/// B and wants A. T_old wounds T_young; T_young, waiting for A, re-reads its own state,
/// finds AB and aborts (releasing B), and T_old commits. Without the re-read T_young
/// would wait out its whole bound (`wait_retries_max`, a million tries here) first.
#[test]
fn two_transaction_wound_cycle_aborts_not_hangs() {
    let env = dmtx_suite::Env::bank(make(&knobs(&["wait_retries_max=1000000"])), Setup::new(1, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut old = w.coordinator(&env.proto, 0).expect("coordinator");
    let mut young = w.coordinator(&env.proto, 1).expect("coordinator");
    let (a, b) = (1u64, 2u64);
    let outcome = std::cell::RefCell::new(Vec::new());
    let clock = std::sync::Arc::clone(&old.ctx.clock);
    let outcome_ref = &outcome;
    let clock_ref = &clock;
    let mut ex = dmtx_runtime::LocalExecutor::new();
    ex.spawn(async move {
        let r = {
            let mut t = old.begin();
            t.add_rw(bank::TABLE, a);
            t.execute().await.expect("T_old locks A");
            dmtx_runtime::sleep(clock_ref.as_ref(), 10_000_000).await; // T_young locks B meanwhile
            t.add_rw(bank::TABLE, b);
            match t.execute().await {
                Ok(()) => t.commit().await,
                Err(e) => Err(e),
            }
        };
        outcome_ref.borrow_mut().push(("old", r.map_err(|e| e.reason)));
        old.cleanup().await;
    });
    ex.spawn(async move {
        dmtx_runtime::sleep(clock_ref.as_ref(), 2_500_000).await; // a later bts: younger
        let r = {
            let mut t = young.begin();
            t.add_rw(bank::TABLE, b);
            t.execute().await.expect("T_young locks B");
            dmtx_runtime::sleep(clock_ref.as_ref(), 20_000_000).await; // T_old now waits for B
            t.add_rw(bank::TABLE, a);
            match t.execute().await {
                Ok(()) => t.commit().await,
                Err(e) => Err(e),
            }
        };
        outcome_ref.borrow_mut().push(("young", r.map_err(|e| e.reason)));
        young.cleanup().await;
        let waited = young.ctx.metrics.get(METRIC_WAIT_RETRIES).map_or(0, |m| m.sum);
        assert!(
            waited < 1000,
            "T_young waited {waited} times: it did not notice its wound"
        );
    });
    ex.run(w.transport().as_ref());
    let mut got = outcome.into_inner();
    got.sort();
    assert_eq!(got, vec![("old", Ok(())), ("young", Err(AbortReason::LockConflict))]);
}
