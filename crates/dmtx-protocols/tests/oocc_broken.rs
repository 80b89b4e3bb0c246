//! OOCC's broken variants, each caught by a scenario that drives two coordinators
//! through the interleaving the paper's argument rules out (issue 29, "Broken variants,
//! each caught by a test"), and the fixed protocol refusing the same interleaving.
//!
//! Every scenario runs on `mem`, one bank table, an address cache warmed by a first
//! read; versions are writer ids, so a read's `version_read` names its writer exactly.

use dmtx_protocols::oocc::{Oocc, OoccConfig, OoccVariant};
use dmtx_runtime::{block_on, Abort, AbortReason, Coordinator, TxnHints};
use dmtx_suite::{bank, Env, Setup};
use dmtx_verbs::StallKind;

const A: u64 = 1;
const B: u64 = 2;

fn oocc(lease_us: u32, variant: OoccVariant) -> Oocc {
    Oocc::with_variant(
        OoccConfig {
            lease_us,
            ..OoccConfig::default()
        },
        variant,
    )
}

fn env(p: Oocc, replicas: usize) -> Env<Oocc> {
    Env::bank(p, Setup::new(replicas, 20))
}

/// Read every key once so the coordinator's cache is warm (one round per transaction).
async fn warm(c: &mut Coordinator<Oocc>) {
    let mut seen = bank::Seen::default();
    for k in [A, B] {
        bank::read_one(c, k, &mut seen).await.expect("idle read");
    }
}

/// Restamp the value of object `i` of the running transaction (balance unchanged).
fn restamp(t: &mut dmtx_runtime::Txn<'_, Oocc>, i: usize) {
    let key = t.coord.set.objs[i].key;
    let v = t.coord.set.value_mut(i);
    let (b, s) = bank::decode(key, v).unwrap_or((bank::INITIAL, 0));
    bank::encode(key, b, s + 1, v);
}

/// Goal: a read-only transaction must validate a record it saw intention-locked (§IV):
/// the writer's lease wait started at its CAS, before the read, so the read's lease
/// can outlast the wait.
/// Method: W intention-locks A and B; 20 ms later R reads A (I seen); W commits after
/// its 100 ms wait; R then reads B (new) and commits at about 80 ms after reading A,
/// inside its lease. Ignoring I, R commits A old and B new: a fractured read. Fixed, R
/// validates A and aborts.
fn intention_scenario(variant: OoccVariant) -> Result<(Option<u64>, Option<u64>, u64), Abort> {
    let e = env(oocc(100_000, variant), 1);
    let w = e.mem_cn(0).worker(0).expect("worker");
    let mut cw = w.coordinator(&e.proto, 0).expect("coordinator");
    let mut cr = w.coordinator(&e.proto, 1).expect("coordinator");
    block_on(async {
        warm(&mut cw).await;
        warm(&mut cr).await;
        let mut tw = cw.begin();
        tw.add_rw(bank::TABLE, A);
        tw.add_rw(bank::TABLE, B);
        tw.execute().await.expect("idle: W locks");
        restamp(&mut tw, 0);
        restamp(&mut tw, 1);
        let writer = tw.id();
        dmtx_runtime::sleep(&dmtx_runtime::RealClock::new(), 20_000_000).await;
        let mut tr = cr.begin_with(TxnHints::READ_ONLY);
        tr.add_ro(bank::TABLE, A);
        tr.execute().await.expect("R reads A under W's intention lock");
        tw.commit().await.expect("W commits");
        tr.add_ro(bank::TABLE, B);
        tr.execute().await.expect("R reads B, unlocked");
        let a = tr.coord.set.objs[0].version_read;
        let b = tr.coord.set.objs[1].version_read;
        tr.commit().await.map(|()| (a, b, writer))
    })
}

#[test]
fn ro_ignoring_intention_is_caught() {
    let (a, b, writer) = intention_scenario(OoccVariant::RoIgnoresIntention).expect("the broken variant commits");
    assert_eq!(b, Some(writer), "B read new");
    assert_ne!(a, Some(writer), "A read old: a fractured read committed");
    let fixed = intention_scenario(OoccVariant::Fixed).expect_err("validating A finds W's write");
    assert_eq!(fixed.reason, AbortReason::Validation);
}

/// Goal: read-write transactions validate every record read but not written, in lease
/// or not; Alg. 1's rule (skip records in lease) admits write skew.
/// Method: T1 reads X, T2 reads Y, then T1 intention-locks Y and T2 X (each READ landed
/// before the other's CAS); T1 commits, then T2. With a long lease both reads are in
/// lease: the paper's rule commits both. Fixed, T1's validation of X sees T2's I and
/// aborts.
fn write_skew(variant: OoccVariant) -> (Result<(), Abort>, Result<(), Abort>) {
    let e = env(oocc(5_000, variant), 2);
    let w = e.mem_cn(0).worker(0).expect("worker");
    let mut c1 = w.coordinator(&e.proto, 0).expect("coordinator");
    let mut c2 = w.coordinator(&e.proto, 1).expect("coordinator");
    block_on(async {
        warm(&mut c1).await;
        warm(&mut c2).await;
        let mut t1 = c1.begin();
        let mut t2 = c2.begin();
        t1.add_ro(bank::TABLE, A);
        t1.execute().await.expect("T1 reads X");
        t2.add_ro(bank::TABLE, B);
        t2.execute().await.expect("T2 reads Y");
        t1.add_rw(bank::TABLE, B);
        t1.execute().await.expect("T1 locks Y");
        t2.add_rw(bank::TABLE, A);
        t2.execute().await.expect("T2 locks X");
        restamp(&mut t1, 1);
        restamp(&mut t2, 1);
        // Both commits run together: each validates (RTT2) before either writes.
        join(t1.commit(), t2.commit()).await
    })
}

#[test]
fn rw_skipping_in_lease_validation_is_caught() {
    let (r1, r2) = write_skew(OoccVariant::SkipInLeaseValidation);
    assert!(
        r1.is_ok() && r2.is_ok(),
        "both commit: write skew ({r1:?}, {r2:?})"
    );
    let (r1, r2) = write_skew(OoccVariant::Fixed);
    assert_eq!(r1.expect_err("T1 validates X, locked by T2").reason, AbortReason::Validation);
    assert_eq!(r2.expect_err("T2 validates Y, locked by T1").reason, AbortReason::Validation);
}

/// Both futures to completion, polled in turn on the caller's executor.
async fn join<X, Y>(x: impl std::future::Future<Output = X>, y: impl std::future::Future<Output = Y>) -> (X, Y) {
    let (mut x, mut y) = (std::pin::pin!(x), std::pin::pin!(y));
    let (mut rx, mut ry) = (None, None);
    std::future::poll_fn(|cx| {
        if rx.is_none() {
            if let std::task::Poll::Ready(v) = x.as_mut().poll(cx) {
                rx = Some(v);
            }
        }
        if ry.is_none() {
            if let std::task::Poll::Ready(v) = y.as_mut().poll(cx) {
                ry = Some(v);
            }
        }
        if rx.is_some() && ry.is_some() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    (rx.expect("polled to completion"), ry.expect("polled to completion"))
}

/// Goal: the commit must clear the lock only after the record's data (layout invariant
/// 2); one WRITE of the whole slot with the lock word first clears it before.
/// Method: W updates B then A (one batch, one memory node); A's commit WRITE is stalled
/// at its version word (after the lock word). R, with a long lease, reads A and B
/// meanwhile. With the lock first R sees A unlocked and old, B new, in lease: a
/// fractured read commits. Fixed, A's lock word still has W: R aborts.
fn lock_first_scenario(variant: OoccVariant) -> Result<(Option<u64>, Option<u64>), Abort> {
    let e = env(oocc(100_000, variant), 1);
    let rel_a = e.slots(bank::TABLE.id())[&A];
    let ptr_a = e.catalog().get(bank::TABLE.id()).expect("bank").ptr(0, rel_a);
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    std::thread::scope(|s| {
        let e = &e;
        let writer = s.spawn(move || {
            let w = e.mem_cn(0).worker(1).expect("worker");
            let mut c = w.coordinator(&e.proto, 0).expect("coordinator");
            block_on(async {
                warm(&mut c).await;
                let mut t = c.begin();
                t.add_rw(bank::TABLE, B);
                t.add_rw(bank::TABLE, A);
                t.execute().await.expect("idle: W locks");
                restamp(&mut t, 0);
                restamp(&mut t, 1);
                tx.send(t.id()).expect("reader waits");
                t.commit().await.expect("W commits");
            });
        });
        let writer_id = rx.recv().expect("writer locked");
        let gate = e.region(ptr_a.mn).arm_stall(StallKind::Write, ptr_a.offset + 8);
        gate.wait_stalled();
        let w = e.mem_cn(0).worker(0).expect("worker");
        let mut c = w.coordinator(&e.proto, 0).expect("coordinator");
        let got = block_on(async {
            let mut t = c.begin_with(TxnHints::READ_ONLY_DECLARED);
            t.add_ro(bank::TABLE, A);
            t.add_ro(bank::TABLE, B);
            t.execute().await?;
            let (a, b) = (t.coord.set.objs[0].version_read, t.coord.set.objs[1].version_read);
            t.commit().await.map(|()| (a, b))
        });
        gate.release();
        writer.join().expect("writer");
        if let Ok((_, b)) = got {
            assert_eq!(b, Some(writer_id), "B's commit WRITE landed before A's");
        }
        got
    })
}

#[test]
fn one_op_commit_with_the_lock_first_is_caught() {
    let (a, b) = lock_first_scenario(OoccVariant::OneOpLockFirst).expect("the broken variant commits");
    assert_ne!(a, b, "A old, B new: a fractured read committed");
    let fixed = lock_first_scenario(OoccVariant::Fixed).expect_err("A is still write-locked");
    assert_eq!(fixed.reason, AbortReason::LockConflict);
}
