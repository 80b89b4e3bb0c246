//! T/O with cascading aborts on RCBench's primitives (rcbench §5.2, Alg. 3) passes the
//! protocol suite (contended bank on `mem` with tears, `tcp` and `sim`, 1–3 replicas;
//! every workload; determinism), meets its round-trip rows, passes the checker on YCSB
//! at θ = 0.99 and SmallBank, and its broken variants (no bL wait, the paper's restore)
//! are caught.

use dmtx_protocols::to::{To, ToConfig, ToVariant, ABORT_CASCADE, ABORT_TMETA_GONE};
use dmtx_runtime::{AbortReason, Knobs, Protocol};
use dmtx_suite::{contended, Cache, Options, RttBudget, Setup, Transport, TxnKind};

fn make(k: &Knobs) -> To {
    To::from_knobs(k).expect("suite knobs are to's")
}

fn knobs(pairs: &[&str]) -> Knobs {
    Knobs::parse(pairs.iter().copied()).unwrap()
}

/// After index lookups (`addr_cache=on`, warm), db+or on, one replica, uncontended:
/// execute 2 per item (ReadDI; rts CAS + ReadDI); a read-only commit posts nothing (bL
/// empty); a writer's commit: per written item latch + ReadDI (own RN with the first)
/// and the dirty WriteDI, then own CM + every latch + ReadDI, the final WriteDIs. An
/// insert of a new key: 3 index READs, the home bucket READ, the slot's CAS + READ, the
/// claim WRITE and the run-time cuckoo insert (READ, CAS, WRITE) in execute; its Write
/// skips the latch (held since the claim), so the own RN goes alone.
const BUDGET: [RttBudget; 6] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 2, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 6, 0),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 4, 6),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 4, 4),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 2, 4),
    RttBudget::new(TxnKind::Insert, Cache::Warm, 9, 4),
];

/// All switches off (Table 3 "one-sided"): every verb waits alone. A Read is 3 (ReadDI,
/// the rts CAS, ReadDI); a writer's commit: per written item its latch CAS, ReadDI
/// (the own RN WRITE before the first's) and WriteDI; then the CM WRITE, every latch
/// CAS and ReadDI, and every final WriteDI.
const BUDGET_OFF: [RttBudget; 3] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 3, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 9, 0),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 6, 14),
];

#[test]
fn to_meets_its_round_trip_budget() {
    dmtx_suite::assert_budgets(
        || make(&knobs(&["addr_cache=on", "db=off", "or=off"])),
        1,
        20,
        &BUDGET_OFF,
    );
    dmtx_suite::assert_budgets(|| make(&knobs(&["addr_cache=on"])), 1, 20, &BUDGET);
    // Backups ride in the CM post: no extra round trip.
    dmtx_suite::assert_budgets(|| make(&knobs(&["addr_cache=on"])), 2, 20, &BUDGET);
}

#[test]
fn cascade_off_is_refused() {
    let e = To::from_knobs(&knobs(&["cascade=off"])).expect_err("cascade=off is not built");
    assert!(e.to_string().contains("cascade"), "{e}");
}

#[test]
fn to_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![Knobs::default(), knobs(&["addr_cache=on", "db=off", "or=off"])],
        rtt_budget: Vec::new(),
        // No log, no recovery.
        faults: None,
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("to: {} suite cases", ran.cases);
}

/// Goal: the checker runs: YCSB at zipf_theta 0.99, write_ratio 0.5, 10 ops per
/// transaction over 10000 records, and SmallBank, on `mem` with tears and on `sim`; the
/// contention reaches the bL wait.
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
            let case = format!("to {name} on {transport:?}");
            dmtx_suite::workloads::assert_clean(&case, &run, seed);
            assert!(run.check.is_some(), "{case}: not checked");
            assert!(run.committed > 0, "{case}: nothing committed");
        }
    }
}

/// Goal: dirty reads happen and their writers' aborts cascade: the contended bank on
/// `mem` stays clean and counts cascading aborts.
#[test]
fn contended_bank_cascades() {
    let mut cascades = 0;
    for seed in 0..4 {
        let env = dmtx_suite::Env::bank(make(&Knobs::default()), Setup::new(1, 20));
        let out = contended::run(&env, Transport::Mem, seed, None);
        out.assert_clean(&env, "mem", seed);
        assert!(out.commits > 0);
        cascades += out
            .aborts
            .get(&AbortReason::Protocol(ABORT_CASCADE))
            .copied()
            .unwrap_or(0);
        cascades += out
            .aborts
            .get(&AbortReason::Protocol(ABORT_TMETA_GONE))
            .copied()
            .unwrap_or(0);
        eprintln!("seed {seed}: {} commits, aborts {:?}", out.commits, out.aborts);
    }
    assert!(cascades > 0, "no transaction ever read a dirty write that aborted");
}

/// Goal: committing without waiting for bL lets a transaction commit on a dirty read
/// whose writer then aborts; the suite catches it.
#[test]
fn no_bl_wait_is_caught() {
    dmtx_suite::assert_caught(
        "to without the bL wait",
        || To::with_variant(ToConfig::default(), ToVariant::NoBlWait),
        &Setup::new(1, 20),
        Transport::Mem,
        40,
    );
}

/// Goal: the paper's restore rule (writes over dirty writes, restore skipped when a
/// predecessor aborted, unlatched) leaves an aborted value behind; the suite catches it.
#[test]
fn paper_restore_is_caught() {
    dmtx_suite::assert_caught(
        "to with the paper's unlatched restore",
        || To::with_variant(ToConfig::default(), ToVariant::PaperRestore),
        &Setup::new(1, 20),
        Transport::Mem,
        60,
    );
}

/// Goal: a read of a dirty write waits at commit for its writer's outcome (Alg. 3
/// l. 26–31): committed ⇒ the reader commits after polling; aborted ⇒ the reader
/// aborts `cascade`; the writer's T^g slot reused (another Tid) ⇒ `tmeta_gone`.
#[test]
fn commit_waits_for_the_dirty_writer() {
    use dmtx_memnode::Control;
    use dmtx_protocols::rcbench::prims::{state_word, tid_of, TgArea, ST_AB, ST_CM, ST_RN, TG_RING};
    use dmtx_protocols::rcbench::tg::{TG_COORDS, TG_THETA};
    use dmtx_protocols::to::{METRIC_WAIT_RETRIES, WL_MAX};
    use dmtx_runtime::{block_on, named};
    use dmtx_suite::bank;

    let env = dmtx_suite::Env::bank(make(&Knobs::default()), Setup::new(1, 20));
    let table = bank::TABLE.id();
    let info = env.catalog().get(table).unwrap().clone();
    let layout = env.proto.item_layout();
    let vb = info.meta.value_bytes;
    let key = 1u64;
    let rel = env.slots(table)[&key];
    let meta = info.ptr(0, rel + layout.meta_off(vb) as u64);
    let region = env.region(meta.mn);
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
    // A fake writer on a ring nobody runs: state RN, its Tid in the item's wL, wts 1.
    let writer = tid_of(TG_COORDS - 1, 0, TG_COORDS);
    let slot = tg.slot(writer);
    let slot_region = env.region(slot.mn);
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    let mut waited = 0;
    for (end, expect) in [
        (ST_CM, None),
        (ST_AB, Some(AbortReason::Protocol(ABORT_CASCADE))),
        (0, Some(AbortReason::Protocol(ABORT_TMETA_GONE))),
    ] {
        let mut words = [0u8; 16];
        words[..8].copy_from_slice(&writer.to_le_bytes());
        words[8..].copy_from_slice(&state_word(writer, ST_RN).to_le_bytes());
        slot_region.write(slot.offset, &words).unwrap();
        // meta: [version][rts][wts][wL ...]
        let mut m = vec![0u8; 8 * (3 + WL_MAX)];
        m[16..24].copy_from_slice(&1u64.to_le_bytes());
        m[24..32].copy_from_slice(&writer.to_le_bytes());
        region.write(meta.offset, &m).unwrap();
        let finisher = {
            let slot_region = std::sync::Arc::clone(&slot_region);
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let mut words = [0u8; 16];
                if end == 0 {
                    // The slot reused by the writer's successor on the ring.
                    let next = writer + TG_COORDS * TG_RING;
                    words[..8].copy_from_slice(&next.to_le_bytes());
                    words[8..].copy_from_slice(&state_word(next, ST_RN).to_le_bytes());
                } else {
                    words[..8].copy_from_slice(&writer.to_le_bytes());
                    words[8..].copy_from_slice(&state_word(writer, end).to_le_bytes());
                }
                slot_region.write(slot.offset, &words).unwrap();
            })
        };
        let mut seen = bank::Seen::default();
        let got = block_on(bank::read_one(&mut c, key, &mut seen))
            .map(|_| ())
            .map_err(|e| e.reason);
        block_on(c.cleanup());
        finisher.join().unwrap();
        assert_eq!(got.err(), expect, "writer ends in state {end}");
        let now = c.ctx.metrics.get(METRIC_WAIT_RETRIES).map_or(0, |m| m.sum);
        assert!(now > waited, "writer ends in state {end}: the reader did not wait");
        waited = now;
    }
}

/// Goal: a restarted transaction takes a new, larger bts (T/O orders by it; keeping it
/// would let a restart keep losing to the same younger writer): the rts its read leaves
/// on an item grows from the aborted attempt to the retry.
#[test]
fn a_restart_takes_a_new_bts() {
    use dmtx_runtime::block_on;
    use dmtx_suite::bank;

    let env = dmtx_suite::Env::bank(make(&Knobs::default()), Setup::new(1, 20));
    let table = bank::TABLE.id();
    let info = env.catalog().get(table).unwrap().clone();
    let layout = env.proto.item_layout();
    let vb = info.meta.value_bytes;
    let at = |key: u64| info.ptr(0, env.slots(table)[&key]);
    let rts = at(2).offset + layout.meta_off(vb) as u64 + 8;
    let latch = at(1).offset + layout.lock_off(vb) as u64;
    let region = env.region(at(1).mn);
    assert_eq!(env.region(at(2).mn).load(rts).unwrap(), 0);
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    let attempt = |c: &mut dmtx_runtime::Coordinator<To>| {
        let r = block_on(async {
            let mut t = c.begin();
            t.add_ro(bank::TABLE, 2);
            t.execute().await?;
            t.add_ro(bank::TABLE, 1);
            t.execute().await?;
            t.commit().await
        });
        block_on(c.cleanup());
        r.map_err(|e| e.reason)
    };
    // Key 1 latched by someone else: the first attempt reads key 2, then aborts.
    region.write(latch, &7u64.to_le_bytes()).unwrap();
    assert_eq!(attempt(&mut c), Err(AbortReason::LockConflict));
    let first = env.region(at(2).mn).load(rts).unwrap();
    assert!(first > 0, "the first attempt's read set rts");
    region.write(latch, &0u64.to_le_bytes()).unwrap();
    assert_eq!(attempt(&mut c), Ok(()));
    let second = env.region(at(2).mn).load(rts).unwrap();
    assert!(second > first, "the retry kept bts {first} (rts now {second})");
}
