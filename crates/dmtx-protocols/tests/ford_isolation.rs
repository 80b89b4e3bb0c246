//! The isolation checker against FORD, fixed and deliberately broken.
//!
//! Goal: each broken variant ([`FordVariant`]) fails the protocol suite's checks (the
//! checker, the bank's invariants, torn values) within `SEEDS_MAX` seeds
//! (`dmtx_suite::assert_caught`), while fixed FORD passes them (`ford_suite.rs`). The
//! failure-path variants and the session-order case use the stall knob and a crashed
//! memory node to force the exact interleaving they need.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use dmtx_check::history::History;
use dmtx_check::recorder::Recorder;
use dmtx_check::{FindingKind, Level};
use dmtx_protocols::ford::{Ford, FordConfig, FordVariant};
use dmtx_runtime::{Abort, AbortReason, Coordinator};
use dmtx_suite::{Setup, Transport};
use dmtx_verbs::{MnId, StallKind};

/// Seeds within which the suite must catch each broken variant.
const SEEDS_MAX: u64 = 5;

fn variant(variant: FordVariant) -> impl Fn() -> Ford {
    move || {
        Ford::new(FordConfig {
            variant,
            ..FordConfig::default()
        })
    }
}

/// The suite's contended bank, 2 replicas, on `transport`.
fn caught(v: FordVariant, transport: Transport) {
    dmtx_suite::assert_caught(&format!("{v:?}"), variant(v), &Setup::new(2, 44), transport, SEEDS_MAX);
}

#[test]
fn skipping_read_only_validation_is_caught() {
    caught(FordVariant::SkipRoValidation, Transport::Mem);
    caught(FordVariant::SkipRoValidation, Transport::Sim);
    caught(FordVariant::SkipRoValidation, Transport::Tcp);
}

#[test]
fn version_only_validation_is_caught_as_write_skew() {
    caught(FordVariant::VersionOnlyValidation, Transport::Mem);
}

#[test]
fn unlocking_before_the_commit_write_is_caught() {
    caught(FordVariant::UnlockBeforeCommitWrite, Transport::Mem);
}

/// The paper's reads (trust the invisible bit, no checksum) return torn records to the
/// suite's single-object reads once the tear injector stalls their READs mid-record.
#[test]
fn trusting_the_invisible_bit_is_caught_by_injected_tears() {
    let setup = Setup {
        sessions: false,
        ..Setup::new(2, 44)
    };
    let c = dmtx_suite::assert_caught(
        "NoTearDetector",
        variant(FordVariant::NoTearDetector),
        &setup,
        Transport::Mem,
        SEEDS_MAX,
    );
    assert!(c.findings.iter().any(|f| f.contains("torn")), "{:?}", c.findings);
}

/// A lone read-only read while a writer that serializes before this coordinator's last
/// write has validated but not committed. Writer W (reads key 1, locks key 0)
/// validates, then its commit is held back by a stalled undo-log WRITE; coordinator C
/// then overwrites key 1 (so W -rw-> C's write) and reads key 0 alone, with its key
/// declared or not. Returns C's read and the history.
fn lone_read_of_a_pending_write(variant: FordVariant, declared: bool) -> (Result<Acct, Abort>, History) {
    let env = Env::new(
        2,
        100,
        8,
        4,
        FordConfig {
            variant,
            ..FordConfig::default()
        },
    );
    let w0 = env.worker(0);
    let mut c = env.coord(&w0, 0);
    let h = recorded(&mut c);
    bump(&mut c, 0, 0).unwrap(); // warm the CN's cache for both keys
    bump(&mut c, 1, 0).unwrap();
    // The writer's undo log is the first area allocated on memory node 0 after `mark`.
    let mark = dmtx_memnode::Control::alloc(&env.cluster, MnId(0), 8, 64).unwrap();
    let stall = env
        .region(0)
        .arm_stall(StallKind::Write, (mark + 8).next_multiple_of(64));
    let writer = {
        let (cn, ford) = (env.cn.clone(), env.ford.clone());
        std::thread::spawn(move || {
            let w = cn.worker(1).unwrap();
            let mut wc: Coordinator<Ford> = w.coordinator(&ford, 0).unwrap();
            let h = recorded(&mut wc);
            let res = dmtx_runtime::block_on(async {
                let mut t = wc.begin();
                let seen = t.add_ro(ACCTS, 1);
                let own = t.add_rw(ACCTS, 0);
                t.execute().await?;
                let s = t.get(seen).balance;
                t.get_mut(own).writes = s as u64;
                t.get_mut(own).balance += 1;
                t.commit().await
            });
            (res, take(wc, h))
        })
    };
    stall.wait_stalled();
    bump(&mut c, 1, 5).unwrap();
    let read = match declared {
        true => read_one_declared(&mut c, 0),
        false => read_one(&mut c, 0),
    };
    stall.release();
    let (res, wh) = writer.join().unwrap();
    res.unwrap();
    let mut history = take(c, h);
    history.append(wh);
    (read, history)
}

/// FORD's published rule (a lone read from a backup, never validated) returns the old
/// value, and the checker finds the cycle W -rw-> C's write -so-> C's read -rw-> W
/// with sessions on (none with sessions off: the history is serializable).
#[test]
fn the_papers_unvalidated_lone_read_breaks_session_order_and_is_caught() {
    let (read, history) = lone_read_of_a_pending_write(FordVariant::UnvalidatedSingleRead, true);
    assert_eq!(read.unwrap().balance, 100, "the old value");
    let with = check(&history);
    assert!(with.findings.iter().any(|f| f.kind == FindingKind::Session), "{with}");
    let without = dmtx_check::check(
        &history,
        &dmtx_check::CheckOptions {
            sessions: false,
            ..Default::default()
        },
    );
    assert!(without.is_clean(), "{without}");
}

/// dmtx's FORD: the declared lone read goes to the primary, finds W's lock and is
/// validated; an undeclared one read from a backup is validated too. Either way it
/// aborts while W is pending, and the history is clean with sessions on.
#[test]
fn a_lone_read_of_a_pending_write_is_validated_and_aborts() {
    for declared in [true, false] {
        let (read, history) = lone_read_of_a_pending_write(FordVariant::Fixed, declared);
        let abort = read.expect_err("W's lock is held");
        assert_eq!(abort.reason, AbortReason::Validation, "declared {declared}");
        let report = check(&history);
        assert!(report.is_clean(), "declared {declared}: {report}");
    }
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
