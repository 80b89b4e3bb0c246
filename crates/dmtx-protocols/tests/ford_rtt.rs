//! FORD's round-trip budget per transaction kind (module doc of `ford`), asserted
//! through the verb counters. Method: warm the address cache (or not), run one
//! transaction of each kind on an idle cluster, read `ctx.txn_counters`.

mod common;

use common::*;
use dmtx_runtime::{block_on, AbortReason};
use dmtx_verbs::{OpKind, PostCounters};

fn counters(c: &dmtx_runtime::Coordinator<dmtx_protocols::ford::Ford>) -> PostCounters {
    c.ctx.txn_counters
}

#[test]
fn read_only_one_object_is_one_rtt_warm_or_cold() {
    let env = Env::small(16);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    read_one(&mut c, 3).unwrap();
    let cold = counters(&c);
    assert_eq!(cold.rtts, 1, "cold: the bucket READ returns the record");
    assert_eq!(cold.ops_total(), 1);
    read_one(&mut c, 3).unwrap();
    let warm = counters(&c);
    assert_eq!(warm.rtts, 1);
    assert_eq!(warm.ops_of(OpKind::Read), 1);
    assert_eq!(warm.background_posts, 0);
    assert!(warm.bytes_in < cold.bytes_in, "warm reads one slot, cold a bucket");
}

#[test]
fn read_only_several_objects_is_two_rtts() {
    let env = Env::small(16);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    for _ in 0..2 {
        block_on(async {
            let mut t = c.begin();
            let objs: Vec<_> = (0..3).map(|k| t.add_ro(ACCTS, k)).collect();
            t.execute().await.unwrap();
            let sum: i64 = objs.iter().map(|&o| t.get(o).balance).sum();
            assert_eq!(sum, 300);
            t.commit().await.unwrap();
        });
        let n = counters(&c);
        assert_eq!(n.rtts, 2, "execute + validation");
        assert_eq!(n.ops_of(OpKind::Read), 6);
        assert_eq!(n.ops_of(OpKind::Cas), 0);
    }
}

#[test]
fn read_write_without_ro_data_is_two_rtts_plus_background_release() {
    let env = Env::small(16);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    bump(&mut c, 5, 1).unwrap(); // cold: +1 bucket read
    let cold = counters(&c);
    assert_eq!(cold.rtts, 3);
    bump(&mut c, 5, 1).unwrap();
    let n = counters(&c);
    assert_eq!(n.rtts, 2, "CAS+READ, then the coalescent commit");
    assert_eq!(n.background_posts, 1, "release is not waited for");
    // execute: CAS + READ; commit: log WRITE on 2 MNs, CAS+WRITE primary, WRITE backup,
    // FLUSH backup; release: WRITE primary vlock, CAS backup vlock, log status on 2 MNs.
    assert_eq!(n.ops_of(OpKind::Cas), 3);
    assert_eq!(n.ops_of(OpKind::Read), 1);
    assert_eq!(n.ops_of(OpKind::Write), 2 + 2 + 1 + 2);
    assert_eq!(n.ops_of(OpKind::Flush), 1);
    assert_eq!(read_one(&mut c, 5).unwrap().balance, 102);
}

#[test]
fn read_write_with_ro_data_is_three_rtts() {
    let env = Env::small(16);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    let txn = |c: &mut dmtx_runtime::Coordinator<_>| {
        block_on(async {
            let mut t = c.begin();
            let src = t.add_ro(ACCTS, 1);
            let dst = t.add_rw(ACCTS, 2);
            t.execute().await.unwrap();
            let add = t.get(src).balance;
            t.get_mut(dst).balance += add;
            t.commit().await.unwrap();
        })
    };
    txn(&mut c);
    assert_eq!(counters(&c).rtts, 4, "cold cache: +1 for the locked object only");
    txn(&mut c);
    let n = counters(&c);
    assert_eq!(n.rtts, 3, "execute + validation + commit");
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
    assert_eq!(counters(&c).rtts, 4, "two execute rounds, validation, commit");
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
