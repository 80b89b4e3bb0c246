//! The isolation checker against FORD, fixed and deliberately broken.
//!
//! Goal: histories of dmtx's FORD are serializable, and each broken variant
//! ([`FordVariant`]) produces a history the checker rejects (or breaks an invariant).
//! Method: randomized concurrent transactions on a few hot accounts, recorded by
//! `dmtx-check`'s recorder; a variant must be caught within `SEEDS_MAX` seeds. The
//! failure-path variants use the stall knob and a crashed memory node to force the
//! exact interleaving they need.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use dmtx_check::history::History;
use dmtx_check::recorder::Recorder;
use dmtx_check::{FindingKind, Level};
use dmtx_protocols::ford::{Ford, FordConfig, FordVariant};
use dmtx_runtime::{AbortReason, Coordinator};
use dmtx_verbs::{MnId, StallKind};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: u64 = 8;
const SEEDS_MAX: u64 = 5;

/// Transfers (RW, RW), audits (RO over 3 keys) and read-one-write-another (RO, RW) on
/// `KEYS` hot accounts from 2 threads × 6 coroutines.
fn mixed(variant: FordVariant, seed: u64) -> (Env, History) {
    let env = Env::new(
        KEYS,
        100,
        64,
        4,
        FordConfig {
            variant,
            ..FordConfig::default()
        },
    );
    let history = run_parallel(&env, 2, 6, |t, k, c| {
        Box::pin(async move {
            let mut rng = SmallRng::seed_from_u64(seed << 16 | (t as u64) << 8 | k as u64);
            for _ in 0..600 {
                let a = rng.random_range(0..KEYS);
                let b = (a + rng.random_range(1..KEYS)) % KEYS;
                let mut z = rng.random_range(0..KEYS);
                while z == a || z == b {
                    z = (z + 1) % KEYS;
                }
                let _ = match rng.random_range(0..20) {
                    0..8 => {
                        async {
                            let mut tx = c.begin();
                            let x = tx.add_rw(ACCTS, a);
                            let y = tx.add_rw(ACCTS, b);
                            tx.execute().await?;
                            tx.get_mut(x).balance -= 3;
                            tx.get_mut(y).balance += 3;
                            tx.commit().await
                        }
                        .await
                    }
                    8..13 => {
                        async {
                            let mut tx = c.begin();
                            for key in [a, b, z] {
                                tx.add_ro(ACCTS, key);
                            }
                            tx.commit().await
                        }
                        .await
                    }
                    _ => {
                        async {
                            let mut tx = c.begin();
                            let x = tx.add_ro(ACCTS, a);
                            let y = tx.add_rw(ACCTS, b);
                            tx.execute().await?;
                            let seen = tx.get(x).balance;
                            tx.get_mut(y).writes = seen as u64;
                            tx.commit().await
                        }
                        .await
                    }
                };
            }
        })
    });
    (env, history)
}

fn caught(variant: FordVariant, what: impl Fn(&dmtx_check::Report, &Env) -> bool) {
    for seed in 0..SEEDS_MAX {
        let (env, history) = mixed(variant, seed);
        let report = check(&history);
        if what(&report, &env) {
            return;
        }
    }
    panic!("{variant:?} went unnoticed in {SEEDS_MAX} seeds");
}

#[test]
fn fixed_ford_histories_are_serializable() {
    for seed in 0..2 {
        let (env, history) = mixed(FordVariant::Fixed, seed);
        assert_serializable(&history);
        assert_eq!(env.scan(0).0, KEYS as i64 * 100, "money was created or destroyed");
        env.assert_replicas_agree();
    }
}

#[test]
fn skipping_read_only_validation_is_caught() {
    caught(FordVariant::SkipRoValidation, |r, _| !r.is_clean());
}

#[test]
fn version_only_validation_is_caught_as_write_skew() {
    caught(FordVariant::VersionOnlyValidation, |r, _| !r.is_clean());
}

#[test]
fn unlocking_before_the_commit_write_is_caught() {
    caught(FordVariant::UnlockBeforeCommitWrite, |r, env| {
        let lost = !r.is_clean();
        let money = env.scan(0).0 != KEYS as i64 * 100;
        lost || money
    });
}

/// Write skew: each of two transactions withdraws 100 from its own account if the two
/// accounts together hold at least 100, reading the other one read-only. Two coroutines
/// on one executor interleave at every round trip, so both execute and validate before
/// either commits. Returns the final total and the history.
fn write_skew(variant: FordVariant) -> (i64, History) {
    let env = Env::new(
        2,
        50,
        8,
        4,
        FordConfig {
            variant,
            ..FordConfig::default()
        },
    );
    let history = run_parallel(&env, 1, 2, |_, mine, c| {
        Box::pin(async move {
            let mine = mine as u64;
            // Warm the cache so both transactions lock in their first round, then race.
            let _ = read_one(c, 0);
            let _ = read_one(c, 1);
            let _ = async {
                let mut tx = c.begin();
                let own = tx.add_rw(ACCTS, mine);
                let other = tx.add_ro(ACCTS, 1 - mine);
                tx.execute().await?;
                if tx.get(own).balance + tx.get(other).balance >= 100 {
                    tx.get_mut(own).balance -= 100;
                }
                tx.commit().await
            }
            .await;
        })
    });
    (env.scan(0).0, history)
}

#[test]
fn validation_with_the_lock_check_prevents_write_skew() {
    let (total, history) = write_skew(FordVariant::Fixed);
    assert!(total >= 0, "constraint a + b >= 0 broken");
    assert_serializable(&history);
}

/// The paper's rule commits both withdrawals; the checker names it G2 under
/// serializability and accepts it under snapshot isolation.
#[test]
fn version_only_validation_commits_write_skew_which_is_g2_under_serializability_only() {
    let (total, history) = write_skew(FordVariant::VersionOnlyValidation);
    assert_eq!(total, -100, "both withdrawals committed");
    let ser = check(&history);
    assert!(ser.findings.iter().any(|f| f.kind == FindingKind::G2), "{ser}");
    let si = dmtx_check::check(
        &history,
        &dmtx_check::CheckOptions {
            level: Level::SnapshotIsolation,
            ..Default::default()
        },
    );
    assert!(si.is_clean(), "write skew is allowed under SI: {si}");
}

/// Attach a recorder to `c`; the returned handle yields its history.
fn recorded(c: &mut Coordinator<Ford>) -> Rc<RefCell<History>> {
    let h = Rc::new(RefCell::new(History::new()));
    c.set_observer(Box::new(Recorder::new(h.clone())));
    h
}

fn take(c: Coordinator<Ford>, h: Rc<RefCell<History>>) -> History {
    drop(c);
    Rc::try_unwrap(h)
        .expect("the coordinator held the only other handle")
        .into_inner()
}

/// A writer commits key 1 while its backup WRITE is stalled; a reader reads the
/// primary's (invisible) record; the backup then dies, the writer's FLUSH fails and it
/// rolls back. Returns the history and the reader's outcome.
fn dirty_read_race(variant: FordVariant) -> (History, Result<Acct, dmtx_runtime::Abort>) {
    let cfg = FordConfig {
        backup_read: false,
        reread_max: 0,
        variant,
        ..FordConfig::default()
    };
    let env = Env::new(4, 100, 16, 4, cfg);
    let fabric = env.cluster.fabric().clone();
    let w0 = env.worker(0);
    read_one(&mut env.coord(&w0, 0), 1).unwrap(); // warm the CN's address cache
    let rel = w0.ctx(0).cache.get(0, 1).unwrap();
    let backup = env.cn.catalog.get(0).unwrap().ptr(1, rel);
    let stall = env.region(backup.mn.0).arm_stall(StallKind::Write, backup.offset + 16);
    let writer = {
        let (cn, ford) = (env.cn.clone(), env.ford.clone());
        std::thread::spawn(move || {
            let w = cn.worker(1).unwrap();
            let mut c: Coordinator<Ford> = w.coordinator(&ford, 0).unwrap();
            let h = recorded(&mut c);
            let res = bump(&mut c, 1, 1000);
            (res, take(c, h))
        })
    };
    stall.wait_stalled();
    let mut reader = env.coord(&w0, 1);
    let h = recorded(&mut reader);
    let seen = read_one(&mut reader, 1);
    let mut history = take(reader, h);
    fabric.set_down(backup.mn, true);
    stall.release();
    let (res, wh) = writer.join().unwrap();
    assert_eq!(
        res.unwrap_err().reason,
        AbortReason::Fault,
        "the writer's flush to the dead backup fails"
    );
    fabric.set_down(backup.mn, false);
    history.append(wh);
    (history, seen)
}

#[test]
fn reading_invisible_records_is_caught_as_an_aborted_read() {
    let (h, seen) = dirty_read_race(FordVariant::Fixed);
    assert_eq!(
        seen.unwrap_err().reason,
        AbortReason::Invisible,
        "fixed FORD does not read it"
    );
    let r = check(&h);
    assert!(r.is_clean(), "{r}");

    let (h, seen) = dirty_read_race(FordVariant::ReadInvisible);
    assert_eq!(
        seen.unwrap().balance,
        1100,
        "the broken variant read the uncommitted value"
    );
    let r = check(&h);
    assert!(r.findings.iter().any(|f| f.kind == FindingKind::G1a), "{r}");
}

/// A replica dies during the commit: the primary took the new value, the transaction
/// aborts. Without the undo, its value stays and a later reader reads an aborted write.
#[test]
fn skipping_the_undo_on_a_failed_commit_is_caught() {
    for (variant, expect_clean) in [(FordVariant::Fixed, true), (FordVariant::SkipUndoOnFailedCommit, false)] {
        let cfg = FordConfig {
            variant,
            backup_read: false,
            ..FordConfig::default()
        };
        let env = Env::new(4, 100, 16, 4, cfg);
        let fabric = env.cluster.fabric().clone();
        let history = run_parallel(&env, 1, 1, |_, _, c| {
            let fabric = fabric.clone();
            // Table 0's backup lives on memory node 1: it fails just for the commit.
            let fail = move |down| fabric.set_down(MnId(1), down);
            Box::pin(async move {
                bump(c, 2, 0).unwrap();
                let res = async {
                    let mut tx = c.begin();
                    let o = tx.add_rw(ACCTS, 2);
                    tx.execute().await?;
                    tx.get_mut(o).balance += 500;
                    fail(true);
                    tx.commit().await
                }
                .await;
                fail(false);
                assert_eq!(res.unwrap_err().reason, AbortReason::Fault);
                let _ = read_one(c, 2);
            })
        });
        let r = check(&history);
        assert_eq!(r.is_clean(), expect_clean, "{variant:?}: {r}");
        if !expect_clean {
            assert!(r.findings.iter().any(|f| f.kind == FindingKind::G1a), "{r}");
            assert_ne!(env.scan(0).0, 400, "the aborted deposit stayed");
        }
    }
}
