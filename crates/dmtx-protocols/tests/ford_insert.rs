//! Several inserts of one transaction into one bucket chain (TPC-C's order lines of one
//! order often home to one bucket).
//!
//! Goal: the transaction commits, each key in its own slot. The chain's insert lock is
//! taken once, by the first of them; the others wait until it has claimed its slot and
//! then walk under the same lock, never picking a slot a sibling claimed. A second CAS
//! of the lock would conflict with the transaction's own lock on every attempt, and a
//! retry with the same inputs would abort for ever (it stalled `--txns` runs).
//! Method: a table of one hashed bucket, so every key homes to it.

mod common;

use common::*;
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{block_on, Abort, Coordinator};

fn insert_all(c: &mut Coordinator<Ford>, keys: &[u64]) -> Result<(), Abort> {
    block_on(async {
        let mut t = c.begin();
        let objs: Vec<_> = keys.iter().map(|&k| t.add_insert(ACCTS, k)).collect();
        t.execute().await?;
        for (o, &k) in objs.into_iter().zip(keys) {
            *t.get_mut(o) = Acct::new(k as i64);
        }
        t.commit().await
    })
}

#[test]
fn inserts_homing_to_one_bucket_commit_together() {
    // One hashed bucket of 4 slots and its overflow reserve.
    let env = Env::new(0, 0, 1, 4, FordConfig::default());
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    insert_all(&mut c, &[10, 11, 12]).expect("three inserts into one bucket commit");
    // More keys than the bucket has slots: the later ones reserve and link overflow
    // buckets under the same lock.
    insert_all(&mut c, &[20, 21, 22, 23]).expect("inserts past the bucket's slots commit");
    for k in [10, 11, 12, 20, 21, 22, 23] {
        assert_eq!(read_one(&mut c, k).unwrap().balance, k as i64, "key {k}");
    }
    let (_, records, rows) = env.scan(0);
    assert_eq!(records, 7, "{rows:?}");
    env.assert_replicas_agree();
    // Every lock was given back: another coordinator inserts into the same chain.
    let mut d = env.coord(&w, 1);
    insert_all(&mut d, &[30]).expect("the chain's insert lock was released");
    assert_eq!(read_one(&mut d, 30).unwrap().balance, 30);
}
