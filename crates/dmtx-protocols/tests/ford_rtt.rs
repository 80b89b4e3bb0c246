//! FORD's verbs per transaction kind, beyond its round-trip budget (the budget table,
//! `common::FORD_BUDGET`, is checked phase by phase by `dmtx_suite::run_all` in
//! `ford_suite.rs`, with 1, 2 and 3 replicas). Method: run one transaction of each kind
//! on an idle cluster with the suite's `rtt::measure`, or by hand, and read the verb
//! counters.

mod common;

use common::*;
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{block_on, AbortReason};
use dmtx_suite::rtt::{measure, Cache, TxnKind};
use dmtx_suite::{Env as SuiteEnv, Setup};
use dmtx_verbs::OpKind;

fn bank(replicas: usize) -> SuiteEnv<Ford> {
    SuiteEnv::bank(Ford::new(FordConfig::default()), Setup::new(replicas, 44))
}

#[test]
fn read_only_one_object_reads_a_bucket_cold_and_a_slot_warm() {
    let env = bank(2);
    let cold = measure(&env, TxnKind::ReadOnlyOne, Cache::Cold, 0).attempt;
    assert_eq!(cold.ops_total(), 1, "cold: the bucket READ returns the record");
    let warm = measure(&env, TxnKind::ReadOnlyOne, Cache::Warm, 1).attempt;
    assert_eq!(warm.ops_total(), 1);
    assert_eq!(warm.ops_of(OpKind::Read), 1);
    assert!(warm.bytes_in < cold.bytes_in, "warm reads one slot, cold a bucket");
}

#[test]
fn read_only_several_objects_read_each_twice_and_lock_nothing() {
    let env = bank(2);
    for (i, cache) in [Cache::Cold, Cache::Warm].into_iter().enumerate() {
        let n = measure(&env, TxnKind::ReadOnlyMany, cache, i as u16).attempt;
        assert_eq!(n.ops_of(OpKind::Read), 6, "{cache:?}: 3 reads, 3 validation reads");
        assert_eq!(n.ops_of(OpKind::Cas), 0);
    }
}

/// Per written object on each replica: execute CAS+READ on the primary; commit
/// CAS+WRITE on the primary, WRITE on each backup; one undo-log WRITE per memory node
/// and one FLUSH per backup node; release WRITE on the primary, CAS on each backup, one
/// log-status WRITE per node.
#[test]
fn read_write_verbs_follow_the_replica_count() {
    for replicas in 1..=3u64 {
        let env = bank(replicas as usize);
        let n = measure(&env, TxnKind::ReadWrite, Cache::Warm, 0).attempt;
        let objs = 2;
        let backups = replicas - 1;
        assert_eq!(n.ops_of(OpKind::Cas), objs * (2 + backups), "{replicas} replicas");
        assert_eq!(n.ops_of(OpKind::Read), objs, "{replicas} replicas");
        assert_eq!(
            n.ops_of(OpKind::Write),
            replicas + objs + objs * backups + objs + replicas,
            "{replicas} replicas"
        );
        assert_eq!(n.ops_of(OpKind::Flush), backups, "{replicas} replicas");
    }
}

#[test]
fn read_write_with_ro_data_reads_three_times() {
    let env = bank(2);
    let n = measure(&env, TxnKind::ReadWriteWithRo, Cache::Warm, 0).attempt;
    assert_eq!(n.ops_of(OpKind::Read), 2 + 1, "RO READ, RW READ, validation READ");
}

#[test]
fn execute_called_twice_fetches_only_new_objects() {
    let env = Env::small(16);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    read_one(&mut c, 1).unwrap();
    read_one(&mut c, 2).unwrap();
    block_on(async {
        let mut t = c.begin();
        let a = t.add_ro(ACCTS, 1);
        t.execute().await.unwrap();
        let b = t.add_rw(ACCTS, 2);
        t.execute().await.unwrap();
        t.execute().await.unwrap(); // nothing new: no round trip
        let x = t.get(a).balance;
        t.get_mut(b).balance += x;
        t.commit().await.unwrap();
    });
    assert_eq!(c.ctx.txn_counters.rtts, 4, "two execute rounds, validation, commit");
}

#[test]
fn lock_conflict_aborts_in_execute_and_releases_in_background() {
    let env = Env::small(16);
    let w = env.worker(0);
    let mut holder = env.coord(&w, 0);
    let mut other = env.coord(&w, 1);
    bump(&mut other, 7, 0).unwrap(); // warm the cache, so both keys are locked in round 1
    bump(&mut other, 9, 0).unwrap();
    block_on(async {
        let mut t = holder.begin();
        let a = t.add_rw(ACCTS, 7);
        let b = t.add_rw(ACCTS, 8);
        t.execute().await.unwrap();
        // While `holder` keeps the locks, `other` conflicts on key 7 but gets key 9.
        let res = async {
            let mut u = other.begin();
            u.add_rw(ACCTS, 9);
            u.add_rw(ACCTS, 7);
            u.execute().await
        }
        .await;
        assert_eq!(res.unwrap_err().reason, AbortReason::LockConflict);
        let n = other.ctx.txn_counters;
        assert_eq!(n.background_posts, 1, "abort releases key 9's lock in the background");
        t.get_mut(a).balance += 1;
        t.get_mut(b).balance -= 1;
        t.commit().await.unwrap();
    });
    // Key 9's lock was released: another transaction can take it.
    bump(&mut other, 9, 5).unwrap();
    assert_eq!(read_one(&mut other, 9).unwrap().balance, 105);
    assert_eq!(read_one(&mut other, 7).unwrap().balance, 101);
}

/// The budget check fails on a row that is off by one round trip (test of the test).
#[test]
#[should_panic(expected = "round trips differ from the declared budget")]
fn a_budget_off_by_one_round_trip_is_refused() {
    let mut wrong = FORD_BUDGET[4];
    wrong.commit += 1;
    dmtx_suite::assert_budgets(|| Ford::new(FordConfig::default()), 2, 44, &[wrong]);
}
