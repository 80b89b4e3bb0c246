//! FORD under contention beyond the protocol suite's bank (`ford_suite.rs` runs
//! randomized transfers, audits and reads through the checker): concurrent inserts and
//! deletes, a full table, and memory-node failure during commit. Write skew lives in
//! `ford_isolation.rs` with the other broken-variant tests.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use dmtx_protocols::ford::FordConfig;
use dmtx_runtime::{block_on, AbortReason};
use dmtx_verbs::MnId;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Goal: of many coordinators inserting the same new key at once, exactly one wins.
#[test]
fn concurrent_inserts_of_one_key_commit_once() {
    let env = Env::new(8, 100, 128, 4, FordConfig::default());
    let wins = Arc::new(AtomicU64::new(0));
    let history = run_parallel(&env, 2, 6, |t, k, c| {
        let wins = wins.clone();
        Box::pin(async move {
            for key in 100..140u64 {
                let res = async {
                    let mut tx = c.begin();
                    let o = tx.add_insert(ACCTS, key);
                    tx.execute().await?;
                    *tx.get_mut(o) = Acct::new(1000 + ((t as i64) << 8) + k as i64);
                    tx.commit().await
                }
                .await;
                match res {
                    Ok(()) => {
                        wins.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(a) => assert!(
                        matches!(a.reason, AbortReason::Duplicate | AbortReason::LockConflict),
                        "{a}"
                    ),
                }
            }
        })
    });
    assert_serializable(&history);
    let (_, n, all) = env.scan(0);
    let mut keys: Vec<u64> = all.iter().map(|(k, _)| *k).collect();
    keys.dedup();
    assert_eq!(keys.len() as u64, n, "a key was inserted twice");
    // Every key was eventually inserted by someone, at most once.
    assert!(wins.load(Ordering::Relaxed) <= 40);
    assert_eq!(n, 8 + wins.load(Ordering::Relaxed));
    env.assert_replicas_agree();
}

/// Goal: inserts, deletes, updates and reads keep the table equal to a model, with
/// slot reuse, stale cached addresses and overflow buckets allocated at run time.
/// Method: each coordinator owns a disjoint key range of a tiny table (1 slot per
/// bucket), applies random operations and mirrors them in its model.
#[test]
fn inserts_and_deletes_match_a_model_with_runtime_overflow() {
    let env = Env::new(0, 0, 64, 1, FordConfig::default());
    let models: Arc<Vec<std::sync::Mutex<std::collections::BTreeMap<u64, i64>>>> =
        Arc::new((0..8).map(|_| Default::default()).collect());
    let history = run_parallel(&env, 2, 4, |t, k, c| {
        let models = models.clone();
        Box::pin(async move {
            let model = &models[(t * 4 + k) as usize];
            let mut rng = SmallRng::seed_from_u64(7 + ((t as u64) << 8) + k as u64);
            let base = (t as u64 * 4 + k as u64) * 1000;
            for step in 0..400i64 {
                let key = base + rng.random_range(0..6);
                let present = model.lock().unwrap().get(&key).copied();
                let res = match (present, rng.random_range(0..3)) {
                    (None, _) => async {
                        let mut tx = c.begin();
                        let o = tx.add_insert(ACCTS, key);
                        tx.execute().await?;
                        *tx.get_mut(o) = Acct::new(step);
                        tx.commit().await
                    }
                    .await
                    .map(|()| Some(step)),
                    (Some(_), 0) => async {
                        let mut tx = c.begin();
                        tx.add_delete(ACCTS, key);
                        tx.commit().await
                    }
                    .await
                    .map(|()| None),
                    (Some(v), 1) => async {
                        let mut tx = c.begin();
                        let o = tx.add_rw(ACCTS, key);
                        tx.execute().await?;
                        assert_eq!(tx.get(o).balance, v);
                        *tx.get_mut(o) = Acct::new(step);
                        tx.commit().await
                    }
                    .await
                    .map(|()| Some(step)),
                    (Some(v), _) => async {
                        let mut tx = c.begin();
                        let o = tx.add_ro(ACCTS, key);
                        tx.execute().await?;
                        assert_eq!(tx.get(o).balance, v, "read a value the model does not have");
                        tx.commit().await
                    }
                    .await
                    .map(|()| Some(v)),
                };
                match res {
                    Ok(v) => {
                        let mut m = model.lock().unwrap();
                        match v {
                            Some(v) => m.insert(key, v),
                            None => m.remove(&key),
                        };
                    }
                    // Other owners' inserts share buckets: bucket locks conflict.
                    Err(a) => {
                        assert_eq!(a.reason, AbortReason::LockConflict, "step {step} key {key}")
                    }
                }
            }
        })
    });
    assert_serializable(&history);
    let (_, _, all) = env.scan(0);
    let mut expect: Vec<(u64, i64)> = models.iter().flat_map(|m| m.lock().unwrap().clone()).collect();
    expect.sort();
    let got: Vec<(u64, i64)> = all.iter().map(|(k, a)| (*k, a.balance)).collect();
    assert_eq!(got, expect);
    env.assert_replicas_agree();
}

#[test]
fn a_full_table_aborts_inserts_with_table_full() {
    let env = Env::new(0, 0, 1, 1, FordConfig::default());
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    let mut outcomes = Vec::new();
    for key in 0..12 {
        outcomes.push(block_on(async {
            let mut tx = c.begin();
            let o = tx.add_insert(ACCTS, key);
            tx.execute().await?;
            *tx.get_mut(o) = Acct::new(1);
            tx.commit().await
        }));
    }
    // 2 hashed buckets + 3 overflow buckets (the reserve with its slack), one slot each:
    // 5 inserts at most fit.
    let ok = outcomes.iter().filter(|r| r.is_ok()).count();
    assert!((1..=5).contains(&ok), "{outcomes:?}");
    assert!(outcomes
        .iter()
        .any(|r| matches!(r, Err(a) if a.reason == AbortReason::TableFull)));
}

/// §4.8 case 2: a replica fails during the coalescent commit. The coordinator rolls the
/// reachable replicas back from its undo images, releases its locks and aborts.
#[test]
fn a_memory_node_failing_during_commit_rolls_back_and_unlocks() {
    let env = Env::small(4);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    bump(&mut c, 1, 0).unwrap(); // warm
    let fabric = env.cluster.fabric();
    let res = block_on(async {
        let mut tx = c.begin();
        let o = tx.add_rw(ACCTS, 1);
        tx.execute().await?;
        tx.get_mut(o).balance += 500;
        fabric.set_down(MnId(1), true); // the backup dies before the commit
        tx.commit().await
    });
    assert_eq!(res.unwrap_err().reason, AbortReason::Fault);
    assert!(c.ctx.last_fault.is_some());
    let (sum, _, _) = env.scan(0);
    assert_eq!(sum, 400, "the primary was rolled back");
    fabric.set_down(MnId(1), false);
    // The backup's batch failed at its first op, so it kept the old record; the primary
    // was restored and unlocked by the rollback post.
    bump(&mut c, 1, 5).unwrap();
    assert_eq!(read_one(&mut c, 1).unwrap().balance, 105);
    env.assert_replicas_agree();
}

/// A failure before commit (execution) aborts with `fault` and holds no lock.
#[test]
fn a_memory_node_failing_during_execution_aborts_cleanly() {
    let env = Env::small(4);
    let w = env.worker(0);
    let mut c = env.coord(&w, 0);
    bump(&mut c, 2, 0).unwrap();
    bump(&mut c, 3, 0).unwrap();
    env.cluster.fabric().set_down(MnId(1), true);
    let res = block_on(async {
        let mut tx = c.begin();
        tx.add_rw(ACCTS, 2);
        tx.add_ro(ACCTS, 3); // read from the dead backup
        tx.execute().await
    });
    assert_eq!(res.unwrap_err().reason, AbortReason::Fault);
    env.cluster.fabric().set_down(MnId(1), false);
    bump(&mut c, 2, 1).unwrap();
}
