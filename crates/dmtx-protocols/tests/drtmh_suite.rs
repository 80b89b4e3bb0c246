//! DrTM+H passes the protocol suite (`dmtx_suite::run_all`): contended transactions on
//! `mem` with injected tears and on `sim`, with 1, 2 and 3 replicas, through the
//! isolation checker; every workload's invariants; replica agreement after the run;
//! its round-trip budget, strict mode's too; and a seeded fault sweep. The
//! paper-silent versions-only validation is caught.

use dmtx_protocols::drtmh::{Drtmh, DrtmhConfig, DrtmhVariant};
use dmtx_runtime::{block_on, AbortReason, Knobs, Protocol, TxnHints};
use dmtx_suite::{bank, contended, Cache, FaultMenu, Options, RttBudget, Setup, Transport, TxnKind};

/// DrTM+H's round trips with backups (f ≥ 1), address cache on (its default): issue 27
/// item 6's DrTM+H row (RO 1: 1, RO several: 2, RW: 4, RW with RO: 4). Truncation is 2
/// cleanup round trips per committed writer, as FaRM's.
const DRTMH_BUDGET: [RttBudget; 10] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Cold, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 1, 1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 3).cleanup(2),
    RttBudget::new(TxnKind::ReadWrite, Cache::Cold, 1, 3).cleanup(2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 3).cleanup(2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Cold, 1, 3).cleanup(2),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 2).cleanup(2),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 1, 3).cleanup(2),
];

/// `strict=true`: read-write transactions with read-only data validate those in a round
/// of their own (+1); nothing else changes.
const DRTMH_STRICT_BUDGET: [RttBudget; 6] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 3).cleanup(2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 4).cleanup(2),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 2).cleanup(2),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 1, 3).cleanup(2),
];

/// With one replica there is no backup: no commit-backup round, no truncation.
const DRTMH_BUDGET_ONE_REPLICA: [RttBudget; 5] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 2),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 1),
];

/// The faults DrTM+H survives without recovery: a compute node crashing mid-commit
/// leaves locks only a recovery would release.
const DRTMH_FAULTS: FaultMenu = FaultMenu {
    crash_cn: false,
    ..FaultMenu::ALL
};

fn make(k: &Knobs) -> Drtmh {
    Drtmh::from_knobs(k).expect("suite knobs are DrTM+H's")
}

fn strict() -> Knobs {
    Knobs::parse(["strict=true"]).unwrap()
}

#[test]
fn drtmh_meets_its_round_trip_budget() {
    for replicas in [2, 3] {
        dmtx_suite::assert_budgets(|| make(&Knobs::default()), replicas, 20, &DRTMH_BUDGET);
        dmtx_suite::assert_budgets(|| make(&strict()), replicas, 20, &DRTMH_STRICT_BUDGET);
    }
    dmtx_suite::assert_budgets(|| make(&Knobs::default()), 1, 20, &DRTMH_BUDGET_ONE_REPLICA);
}

#[test]
fn drtmh_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![
            Knobs::default(),
            Knobs::parse(["addr_cache=false"]).unwrap(),
            strict(),
            // Batched truncation, and areas small enough that commits stall on them.
            Knobs::parse(["truncate_batch=1000", "log_bytes=4096"]).unwrap(),
        ],
        faults: Some(DRTMH_FAULTS),
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("drtmh: {} suite cases", ran.cases);
}

/// Goal: the contended case really contends, on both the lock and the validation, and
/// truncation really installs (3 replicas agree after the run).
#[test]
fn contended_run_conflicts_and_truncation_installs() {
    let setup = Setup::new(3, 44);
    let env = dmtx_suite::Env::bank(make(&Knobs::default()), setup.clone());
    let out = contended::run(&env, Transport::Mem, contended::seed_or_env(3), None);
    out.assert_clean(&env, "mem, 3 replicas", 3);
    let conflicts = out.aborts.get(&AbortReason::LockConflict).copied().unwrap_or(0);
    assert!(conflicts > 0, "no contention: {:?}", out.aborts);
    assert_eq!(env.replicas_differ(0), None);
}

/// Goal: validation that compares versions only (the paper is silent on locks) admits
/// write skew even on one memory node, and the suite catches it, on `mem` and `sim`.
#[test]
fn versions_only_validation_is_caught() {
    let setup = Setup::new(2, 20);
    for transport in [Transport::Mem, Transport::Sim] {
        dmtx_suite::assert_caught(
            &format!("drtmh versions-only validation on {transport:?}"),
            || Drtmh::with_variant(DrtmhConfig::default(), DrtmhVariant::VersionOnlyValidation),
            &setup,
            transport,
            40,
        );
    }
}

/// Goal: a read-only record locked by another coordinator fails validation in the
/// lock&validate round, though its version is unchanged (the lock check); and a lone
/// read-only record skips that round only when its READ saw the lock word clear.
#[test]
fn a_read_only_record_locked_by_another_fails_validation() {
    let env = dmtx_suite::Env::bank(make(&Knobs::default()), Setup::new(2, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    let unlocked = dmtx_suite::rtt::measure_one(&mut c, TxnKind::ReadOnlyOne, 0);
    assert_eq!((unlocked.execute, unlocked.commit), (1, 0));

    let rel = env.slots(bank::TABLE.id())[&1];
    let ptr = env.catalog().get(bank::TABLE.id()).expect("bank table").ptr(0, rel);
    let other = 999;
    assert_eq!(env.region(ptr.mn).cas(ptr.offset, 0, other).unwrap(), 0);
    block_on(async {
        // A lone read of the locked record: validated, and refused.
        let mut t = c.begin_with(TxnHints::READ_ONLY_DECLARED);
        t.add_ro(bank::TABLE, 1);
        t.execute().await.expect("the record is read as it is");
        let before = t.coord.ctx.txn_counters.rtts;
        let abort = t.commit().await.expect_err("validated, and locked by another");
        assert_eq!(abort.reason, AbortReason::Validation);
        assert_eq!(c.ctx.txn_counters.rtts - before, 1, "one validation round");

        // Read it beside a write: the lock&validate round refuses it, and releases the
        // lock it took on the written record.
        let mut t = c.begin();
        t.add_ro(bank::TABLE, 1);
        let w = t.add_rw(bank::TABLE, 2);
        t.execute().await.expect("nothing locked yet");
        let v = t.bytes_mut(w);
        let (b, s) = bank::decode(2, v).expect("intact");
        bank::encode(2, b, s + 1, v);
        let abort = t.commit().await.expect_err("record 1 is locked by another");
        assert_eq!(abort.reason, AbortReason::Validation);
    });
    assert_eq!(env.region(ptr.mn).cas(ptr.offset, other, 0).unwrap(), other);
    // Record 2's lock was given back: a transfer takes it and commits.
    let mut seen = bank::Seen::default();
    block_on(bank::transfer(&mut c, 2, 3, 1, &mut seen)).expect("record 2 is unlocked");
}
