//! FORD-LV's round-trip budget (issue 27 item 6), through the verb counters: with every
//! read-only version in the Vcache, read-only transactions take 1 round trip and
//! read-write ones 2, with or without read-only data; a miss falls back to FORD's
//! budget. Vcache accesses are no round trips. Measured on one compute node (`local`),
//! one transaction at a time on an idle bank, per row on a fresh cluster.

use dmtx_protocols::fordlv::{FordLv, METRIC_HITS, METRIC_INSERTS, METRIC_MISSES};
use dmtx_runtime::{block_on, Coordinator, Knobs, Protocol};
use dmtx_suite::rtt::{self, Cache, RttBudget, TxnKind};
use dmtx_suite::{bank, Env, Setup};

/// FORD-LV's rows. Warm: the same transaction ran once before on the coordinator, so
/// its addresses are cached and its read-only versions were inserted into the Vcache
/// by that run's miss path. Cold: a fresh compute node, nothing cached: FORD's budget.
const FORDLV_BUDGET: [RttBudget; 11] = [
    // A declared lone read skips validation, as in FORD.
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Cold, 1, 0),
    // All versions hit: 1. Cold, they miss: FORD's validation round.
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 1, 1),
    // Nothing to validate: execute + coalescent commit, release in the background.
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 1).background(1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Cold, 2, 1).background(1),
    // The read-only version hits: 2. Cold: FORD's 2 + 2.
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 1).background(1),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Cold, 2, 2).background(1),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 1).background(1),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 1, 1).background(1),
    RttBudget::new(TxnKind::Delete, Cache::Cold, 2, 1).background(1),
];

fn make() -> FordLv {
    FordLv::from_knobs(&Knobs::default()).expect("default knobs")
}

/// `dmtx_suite::rtt::assert_budgets` measures row `i` on compute node `i`; `local`
/// runs one compute node, so every row here runs on node 0 of its own cluster.
#[test]
fn fordlv_meets_its_round_trip_budget() {
    for replicas in [1, 2, 3] {
        let mut wrong = Vec::new();
        for row in FORDLV_BUDGET {
            let env = Env::bank(make(), Setup::new(replicas, 20));
            let m = rtt::measure(&env, row.kind, row.cache, 0);
            let got = RttBudget {
                execute: m.execute,
                commit: m.commit,
                cleanup: m.cleanup,
                background: m.background,
                ..row
            };
            if got != row {
                wrong.push(format!("  declared {row:?}\n  measured {got:?}"));
            }
        }
        assert!(wrong.is_empty(), "{replicas} replica(s):\n{}", wrong.join("\n"));
    }
}

/// One undeclared read-only transaction of `keys` (read from backups), committed; its
/// round trips and the Vcache figures it added.
fn read(c: &mut Coordinator<FordLv>, keys: &[u64]) -> (u64, [u64; 3]) {
    let metric = |c: &Coordinator<FordLv>, i: usize| c.ctx.metrics.get(i).map_or(0, |m| m.sum);
    let before = [METRIC_HITS, METRIC_MISSES, METRIC_INSERTS].map(|i| metric(c, i));
    block_on(async {
        let mut t = c.begin();
        for &k in keys {
            t.add_ro(bank::TABLE, k);
        }
        t.execute().await.expect("idle: execute");
        t.commit().await.expect("idle: commit");
    });
    let rtts = c.ctx.txn_counters.rtts;
    let after = [METRIC_HITS, METRIC_MISSES, METRIC_INSERTS].map(|i| metric(c, i));
    (rtts, [0, 1, 2].map(|i| after[i] - before[i]))
}

/// Goal: a lone read FORD must validate (read from a backup, undeclared) takes one round
/// trip once its version is cached, and the figures count the miss, the insert and the
/// hit; a write to the key makes the next reader's lookup see the writer's version, so
/// it still hits (the writer published it) without a validation round.
#[test]
fn a_backup_read_validates_in_the_vcache_once_cached() {
    let env = Env::bank(make(), Setup::new(2, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    assert_eq!(
        read(&mut c, &[3]),
        (2, [0, 1, 1]),
        "cold: FORD's validation round, then inserted"
    );
    assert_eq!(read(&mut c, &[3]), (1, [1, 0, 0]), "warm: a hit, no validation round");
    assert_eq!(read(&mut c, &[3, 4]), (2, [1, 1, 1]), "one of two misses: FORD's round");
    assert_eq!(read(&mut c, &[3, 4]), (1, [2, 0, 0]));

    // A writer of key 3 (its own coordinator) publishes and settles the new version.
    let mut writer = w.coordinator(&env.proto, 1).expect("coordinator");
    block_on(async {
        let mut t = writer.begin();
        t.add_rw(bank::TABLE, 3);
        t.execute().await.expect("idle: execute");
        let v = t.coord.set.value_mut(0);
        let (b, s) = bank::decode(3, v).expect("intact");
        bank::encode(3, b, s + 1, v);
        t.commit().await.expect("idle: commit");
    });
    assert_eq!(
        read(&mut c, &[3, 4]),
        (1, [2, 0, 0]),
        "the writer's version is the cached one"
    );
}
