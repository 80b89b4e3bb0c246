//! FaRM passes the protocol suite (`dmtx_suite::run_all`): contended transactions on
//! `mem` with injected tears and on `sim`, with 1, 2 and 3 replicas, through the
//! isolation checker (session order included); every workload's invariants; replica
//! agreement after the run (truncation installed every logged image into the backups);
//! its round-trip budget; and a seeded fault sweep. The paper-silent versions-only
//! validation is caught.

use dmtx_protocols::farm::{Farm, FarmConfig, FarmVariant, METRIC_LOG_FULL_STALLS};
use dmtx_runtime::{block_on, AbortReason, Access, Coordinator, Knobs, Protocol, TxnHints};
use dmtx_suite::{bank, contended, Cache, FaultMenu, Options, RttBudget, Setup, Transport, TxnKind};

/// FaRM's round trips with backups (f ≥ 1), address cache off (warm = cold): issue 27
/// item 6's FaRM row (RO 1: 1, RO several: 2, RW: 5, RW with RO: 5). Truncation is 2
/// cleanup round trips per committed writer.
const FARM_BUDGET: [RttBudget; 10] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Cold, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 1, 1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 4).cleanup(2),
    RttBudget::new(TxnKind::ReadWrite, Cache::Cold, 1, 4).cleanup(2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 4).cleanup(2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Cold, 1, 4).cleanup(2),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 2).cleanup(2),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 1, 4).cleanup(2),
];

/// With one replica there is no backup: no commit-backup round, no truncation.
const FARM_BUDGET_ONE_REPLICA: [RttBudget; 5] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 3),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 3),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 1),
];

/// The faults FaRM survives without recovery: a compute node crashing mid-commit
/// leaves locks only a recovery would release.
const FARM_FAULTS: FaultMenu = FaultMenu {
    crash_cn: false,
    ..FaultMenu::ALL
};

fn make(k: &Knobs) -> Farm {
    Farm::from_knobs(k).expect("suite knobs are FaRM's")
}

#[test]
fn farm_meets_its_round_trip_budget() {
    for replicas in [2, 3] {
        dmtx_suite::assert_budgets(|| make(&Knobs::default()), replicas, 20, &FARM_BUDGET);
    }
    dmtx_suite::assert_budgets(|| make(&Knobs::default()), 1, 20, &FARM_BUDGET_ONE_REPLICA);
}

#[test]
fn farm_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![
            Knobs::default(),
            Knobs::parse(["addr_cache=true"]).unwrap(),
            // Batched truncation, and areas small enough that commits stall on them.
            Knobs::parse(["truncate_batch=1000", "log_bytes=4096"]).unwrap(),
        ],
        faults: Some(FARM_FAULTS),
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("farm: {} suite cases", ran.cases);
}

/// Goal: the contended case really contends and truncation really installs: with 3
/// replicas the backups end equal to the primary only if every logged image landed.
#[test]
fn truncation_installs_logged_records_into_backups() {
    let setup = Setup::new(3, 44);
    let env = dmtx_suite::Env::bank(make(&Knobs::default()), setup.clone());
    let out = contended::run(&env, Transport::Mem, contended::seed_or_env(3), None);
    out.assert_clean(&env, "mem, 3 replicas", 3);
    assert!(out.commits > 0);
    let conflicts = out.aborts.get(&AbortReason::LockConflict).copied().unwrap_or(0);
    assert!(conflicts > 0, "no contention: {:?}", out.aborts);
    assert_eq!(env.replicas_differ(0), None);
}

/// Goal: validation that compares versions only (the paper is silent on locks) admits
/// write skew, and the suite catches it.
#[test]
fn versions_only_validation_is_caught() {
    let setup = Setup::new(2, 20);
    dmtx_suite::assert_caught(
        "farm versions-only validation",
        || Farm::with_variant(FarmConfig::default(), FarmVariant::VersionOnlyValidation),
        &setup,
        Transport::Mem,
        40,
    );
}

/// Commit one restamp of bank account `key` on `c`, leaving its truncation queued.
async fn restamp(c: &mut Coordinator<Farm>, key: u64) {
    let mut t = c.begin();
    t.add_rw(bank::TABLE, key);
    t.execute().await.expect("idle cluster: execute commits");
    let o = &t.coord.set.objs[0];
    assert_eq!(o.access, Access::ReadWrite);
    let v = t.coord.set.value_mut(0);
    let (b, s) = bank::decode(key, v).unwrap_or((bank::INITIAL, 0));
    bank::encode(key, b, s + 1, v);
    t.commit().await.expect("idle cluster: commit commits");
}

/// Goal: two truncations of one record landing out of order leave the backup with the
/// newer image (the install is guarded by the write sequence): A commits, B commits
/// over it and truncates, then A's late truncation finds a newer copy and skips it.
/// Without the guard A's install would put the older image back and the backup would
/// differ from the primary.
#[test]
fn a_late_truncation_never_installs_an_older_image() {
    let env = dmtx_suite::Env::bank(make(&Knobs::default()), Setup::new(2, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut a = w.coordinator(&env.proto, 0).expect("coordinator");
    let mut b = w.coordinator(&env.proto, 1).expect("coordinator");
    block_on(async {
        restamp(&mut a, 4).await;
        restamp(&mut b, 4).await;
        let newer = b.cleanup().await;
        assert_eq!(newer.rtts, 2, "B's truncation: lock+read, then install+unlock");
        assert_eq!(env.replicas_differ(bank::TABLE.id()), None, "B installed");
        a.cleanup().await;
    });
    assert_eq!(env.replicas_differ(bank::TABLE.id()), None);
}

/// Goal: `truncate_batch` really batches (no truncation round trips until the batch is
/// full, backups behind meanwhile), a full log area stalls a commit until truncation
/// empties it (counted), and the drain finishes what is queued at the end.
#[test]
fn truncation_batches_stalls_on_a_full_area_and_drains() {
    let knobs = Knobs::parse(["truncate_batch=3"]).unwrap();
    let env = dmtx_suite::Env::bank(make(&knobs), Setup::new(2, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    block_on(async {
        for round in 1..=3 {
            restamp(&mut c, 4).await;
            let cleanup = c.cleanup().await;
            let differ = env.replicas_differ(bank::TABLE.id());
            if round < 3 {
                assert_eq!(cleanup.rtts, 0, "commit {round}: still batching");
                assert!(
                    differ.is_some(),
                    "commit {round}: the backup is behind until truncation"
                );
            } else {
                assert_eq!(cleanup.rtts, 2, "the third commit fills the batch");
                assert_eq!(differ, None);
            }
        }
    });

    // A 4096-byte area holds about 50 one-record logs: 120 commits must stall.
    let knobs = Knobs::parse(["truncate_batch=1000", "log_bytes=4096"]).unwrap();
    let env = dmtx_suite::Env::bank(make(&knobs), Setup::new(3, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    block_on(async {
        for i in 0..120 {
            restamp(&mut c, 1 + i % 7).await;
            c.cleanup().await;
        }
        let stalls = c.ctx.metrics.get(METRIC_LOG_FULL_STALLS).map_or(0, |m| m.sum);
        assert!(stalls >= 2, "{stalls} stalls");
        assert!(
            env.replicas_differ(bank::TABLE.id()).is_some(),
            "the last logs wait for the drain"
        );
        c.drain().await;
    });
    assert_eq!(env.replicas_differ(bank::TABLE.id()), None);
}

/// Goal: a lone read-only record skips validation only when its READ saw the primary's
/// lock word clear. Locked (a writer between its lock and its commit-primary), the read
/// is validated and aborts; skipping it would return the old value of a record whose
/// writer has already validated.
#[test]
fn a_lone_read_skips_validation_only_when_it_saw_no_lock() {
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
        let mut t = c.begin_with(TxnHints::READ_ONLY_DECLARED);
        t.add_ro(bank::TABLE, 1);
        t.execute().await.expect("the record is read as it is");
        let before = t.coord.ctx.txn_counters.rtts;
        let abort = t.commit().await.expect_err("validated, and locked by another");
        assert_eq!(abort.reason, AbortReason::Validation);
        assert_eq!(c.ctx.txn_counters.rtts - before, 1, "one validation round");
    });
}

/// Goal: the drain installs a backup copy that another truncator holds through all of
/// one truncation's rounds (a truncator descheduled between its two rounds): it pauses
/// and tries again, so the run ends with the backups equal to the primary. A drain of
/// one truncation would give up and leave the backup behind for good.
#[test]
fn the_drain_waits_out_a_copy_another_truncator_holds() {
    let env = dmtx_suite::Env::bank(make(&Knobs::default()), Setup::new(2, 20));
    let rel = env.slots(bank::TABLE.id())[&4];
    let backup = env.catalog().get(bank::TABLE.id()).expect("bank table").ptr(1, rel);
    let region = env.region(backup.mn);
    let other = 999;
    let (locked_tx, locked) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let env = &env;
        let (region, locked_tx) = (&region, locked_tx);
        let drainer = s.spawn(move || {
            let w = env.mem_cn(0).worker(0).expect("worker");
            let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
            block_on(async {
                restamp(&mut c, 4).await;
                assert_eq!(region.cas(backup.offset, 0, other).unwrap(), 0);
                locked_tx.send(()).unwrap();
                c.drain().await
            })
        });
        locked.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(region.cas(backup.offset, other, 0).unwrap(), other);
        let drained = drainer.join().expect("drainer");
        assert!(
            drained.rtts > 64,
            "the drain outlasted one truncation: {} round trips",
            drained.rtts
        );
    });
    assert_eq!(env.replicas_differ(bank::TABLE.id()), None);
}
