//! The address cache is a hint (FORD §4.2): a slot reused under a cached address is
//! detected by its key and the coordinator falls back to a bucket read, releasing any
//! lock it took on the wrong slot.

mod common;

use common::*;
use dmtx_protocols::ford::Ford;
use dmtx_protocols::ford::FordConfig;
use dmtx_runtime::{block_on, AbortReason, Coordinator};

fn insert(c: &mut Coordinator<Ford>, key: u64, balance: i64) {
    block_on(async {
        let mut t = c.begin();
        let o = t.add_insert(ACCTS, key);
        t.execute().await?;
        *t.get_mut(o) = Acct::new(balance);
        t.commit().await
    })
    .unwrap();
}

fn delete(c: &mut Coordinator<Ford>, key: u64) {
    block_on(async {
        let mut t = c.begin();
        t.add_delete(ACCTS, key);
        t.commit().await
    })
    .unwrap();
}

#[test]
fn stale_cached_addresses_are_detected_by_key() {
    // One hashed bucket of 4 slots: every key shares it, so slots get reused.
    let env = Env::new(0, 0, 1, 4, FordConfig::default());
    let cn2 = env.other_cn(1);
    let (w1, w2) = (env.worker(0), cn2.worker(0).unwrap());
    let mut a = env.coord(&w1, 0);
    let mut b: Coordinator<Ford> = w2.coordinator(&env.ford, 0).unwrap();
    insert(&mut b, 10, 1); // slot 0
    insert(&mut b, 11, 2); // slot 1
    assert_eq!(read_one_declared(&mut a, 10).unwrap().balance, 1); // CN 0 caches slot 0 for key 10
    delete(&mut b, 10);
    insert(&mut b, 12, 3); // reuses slot 0
    insert(&mut b, 10, 4); // key 10 now lives in slot 2

    // Read through the stale address: key mismatch, then a bucket read.
    assert_eq!(read_one_declared(&mut a, 10).unwrap().balance, 4);
    assert_eq!(a.ctx.txn_counters.rtts, 2, "stale slot READ + bucket READ");
    assert_eq!(read_one_declared(&mut a, 10).unwrap().balance, 4);
    assert_eq!(a.ctx.txn_counters.rtts, 1, "the cache was repaired");

    // Lock through a stale address: the wrong slot's lock is given back.
    delete(&mut b, 10); // frees slot 2
    insert(&mut b, 13, 5); // reuses slot 2
    insert(&mut b, 10, 6); // key 10 moves to slot 3
    bump(&mut a, 10, 1).unwrap();
    assert_eq!(
        a.ctx.txn_counters.rtts, 4,
        "stale CAS+READ, bucket READ, CAS+READ, commit"
    );
    assert_eq!(read_one(&mut b, 10).unwrap().balance, 7);
    for k in [11, 12, 13] {
        bump(&mut b, k, 100).unwrap(); // none of them was left locked
    }

    // A deleted key read through its cached address is not found.
    read_one(&mut a, 11).unwrap();
    delete(&mut b, 11);
    assert_eq!(read_one(&mut a, 11).unwrap_err().reason, AbortReason::NotFound);
}
