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
    assert!(r1.is_ok() && r2.is_ok(), "both commit: write skew ({r1:?}, {r2:?})");
    let (r1, r2) = write_skew(OoccVariant::Fixed);
    assert_eq!(
        r1.expect_err("T1 validates X, locked by T2").reason,
        AbortReason::Validation
    );
    assert_eq!(
        r2.expect_err("T2 validates Y, locked by T1").reason,
        AbortReason::Validation
    );
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

/// The paper's layout (`one_op_unlock`) with a long lease and one replica.
fn one_op(variant: OoccVariant) -> Oocc {
    Oocc::with_variant(
        OoccConfig {
            lease_us: 100_000,
            one_op_unlock: true,
            ..OoccConfig::default()
        },
        variant,
    )
}

/// What a reader of `keys` returned: per key the version read and whether the value
/// decodes as a bank record.
type Read = Vec<(Option<u64>, bool)>;

/// Writer W restamps `keys_w` (one transaction, one batch per node in that order);
/// `gap` after W's locks are in, reader R reads `keys_r` in one read-only round. R's
/// READ of slot word `read_stall` (byte offset) of A stalls until W's commit has run
/// (and, when `write_stall` names a byte offset of A's slot, until W's commit WRITE of
/// A has stalled there). Returns R's outcome and W's id.
fn race(
    proto: Oocc,
    keys_w: &[u64],
    keys_r: &[u64],
    read_stall: impl Fn(usize) -> usize,
    write_stall: Option<&dyn Fn(usize) -> usize>,
) -> (Result<Read, Abort>, u64) {
    let e = env(proto, 1);
    let info = e.catalog().get(bank::TABLE.id()).expect("bank").clone();
    let slot_bytes = info.shape.slot_bytes as usize;
    let ptr_a = info.ptr(0, e.slots(bank::TABLE.id())[&A]);
    let region = e.region(ptr_a.mn);
    let (locked_tx, locked_rx) = std::sync::mpsc::channel::<u64>();
    std::thread::scope(|s| {
        let e = &e;
        let writer = s.spawn(move || {
            let w = e.mem_cn(0).worker(1).expect("worker");
            let mut c = w.coordinator(&e.proto, 0).expect("coordinator");
            block_on(async {
                let mut t = c.begin();
                for &k in keys_w {
                    t.add_rw(bank::TABLE, k);
                }
                t.execute().await.expect("idle: W locks");
                for i in 0..keys_w.len() {
                    restamp(&mut t, i);
                }
                locked_tx.send(t.id()).expect("main waits");
                t.commit().await.expect("W commits");
            });
        });
        let writer_id = locked_rx.recv().expect("W locked");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let read_gate = region.arm_stall(StallKind::Read, ptr_a.offset + read_stall(slot_bytes) as u64);
        let write_gate = write_stall.map(|at| region.arm_stall(StallKind::Write, ptr_a.offset + at(slot_bytes) as u64));
        let reader = s.spawn(move || {
            let w = e.mem_cn(0).worker(2).expect("worker");
            let mut c = w.coordinator(&e.proto, 0).expect("coordinator");
            block_on(async {
                let mut t = c.begin_with(TxnHints::READ_ONLY_DECLARED);
                for &k in keys_r {
                    t.add_ro(bank::TABLE, k);
                }
                t.execute().await?;
                let got = (0..keys_r.len())
                    .map(|i| {
                        let o = &t.coord.set.objs[i];
                        (o.version_read, bank::decode(o.key, t.coord.set.value(i)).is_some())
                    })
                    .collect::<Read>();
                t.commit().await.map(|()| got)
            })
        });
        read_gate.wait_stalled();
        // W's commit runs while R is stalled: whole, or up to its own stall.
        let mut writer = Some(writer);
        match &write_gate {
            Some(g) => g.wait_stalled(),
            None => writer.take().expect("writer").join().expect("writer"),
        }
        read_gate.release();
        let got = reader.join().expect("reader");
        if let Some(g) = write_gate {
            g.release();
        }
        if let Some(w) = writer {
            w.join().expect("writer");
        }
        (got, writer_id)
    })
}

/// Byte offset of value word 2 of a slot (the paper's layout has the default header).
fn value_word_2(_slot_bytes: usize) -> usize {
    dmtx_protocols::onever::record::VALUE + 16
}

/// Goal: in the paper's layout, the version copy is what tells a READ that a commit
/// WRITE overtook it once; without it the READ returns a torn record.
/// Method: R's READ of A stalls in the value (its version and first value words old); W's
/// whole commit runs; R reads the rest new, the lock 0 and the copy new. Without the copy
/// check R commits a torn value in lease; with it, R reads A again.
#[test]
fn no_version_copy_is_caught() {
    let (got, writer) = race(one_op(OoccVariant::NoVersionCopy), &[A], &[A], value_word_2, None);
    let got = got.expect("the broken variant commits");
    assert_ne!(got[0].0, Some(writer), "version read old");
    assert!(!got[0].1, "a torn value committed: {got:?}");

    let (got, writer) = race(one_op(OoccVariant::Fixed), &[A], &[A], value_word_2, None);
    let got = got.expect("the re-read commits");
    assert_eq!(
        got[0],
        (Some(writer), true),
        "the copy caught the tear; A read again, new"
    );
}

/// Goal: the paper's layout is valid only for a READ crossed at most once by a WRITE;
/// two crossings let a reader in lease commit a fractured read. The default layout,
/// lock first, is safe under the same interleaving.
/// Method: W updates B then A. R's READ of A stalls at A's lock word (version and value
/// read old); W's commit WRITE of A stalls at the copy (lock already 0); R reads the lock
/// 0 and the copy old, then B new, all in lease.
#[test]
fn two_crossings_break_the_papers_layout_not_the_default() {
    let lock = |n: usize| n - 16;
    let copy = |n: usize| n - 8;
    let (got, writer) = race(one_op(OoccVariant::Fixed), &[B, A], &[A, B], lock, Some(&copy));
    let got = got.expect("one_op_unlock commits the fractured read");
    assert_ne!(got[0].0, Some(writer), "A old");
    assert_eq!(got[1].0, Some(writer), "B new");

    // Lock first: R reads the lock word before anything else and finds W set.
    let default = || oocc(100_000, OoccVariant::Fixed);
    let version = |_: usize| 8;
    let value_end = |n: usize| n - 8;
    let (got, _) = race(default(), &[B, A], &[A, B], version, Some(&value_end));
    assert_eq!(got.expect_err("A is write-locked").reason, AbortReason::LockConflict);
}

/// Goal: the delayed write lock lets a read-only transaction read a record a writer has
/// only intention-locked (§IV case 2.1: validate, commit); without it the execution CAS
/// takes the write lock and the reader aborts (case 2).
#[test]
fn the_delayed_write_lock_spares_readers_of_intention_locked_records() {
    for (delayed, want) in [(true, None), (false, Some(AbortReason::LockConflict))] {
        let e = env(
            Oocc::new(OoccConfig {
                delayed_lock: delayed,
                ..OoccConfig::default()
            }),
            1,
        );
        let w = e.mem_cn(0).worker(0).expect("worker");
        let mut cw = w.coordinator(&e.proto, 0).expect("coordinator");
        let mut cr = w.coordinator(&e.proto, 1).expect("coordinator");
        let got = block_on(async {
            let mut tw = cw.begin();
            tw.add_rw(bank::TABLE, A);
            tw.execute().await.expect("idle: W locks");
            let mut tr = cr.begin_with(TxnHints::READ_ONLY_DECLARED);
            tr.add_ro(bank::TABLE, A);
            let r = match tr.execute().await {
                Ok(()) => tr.commit().await,
                Err(a) => Err(a),
            };
            drop(tw);
            r
        });
        assert_eq!(got.err().map(|a| a.reason), want, "delayed_lock = {delayed}");
    }
}

/// Goal: a writer must not write before `D`, its CAS completion plus the write-wait
/// lease (§III-B case 3): a reader that read one of its records unlocked just before the
/// CAS holds a lease on it until then.
/// Method: R reads A (unlocked); W locks A and B and commits; R reads B and commits.
/// Without the wait W commits at once, R reads B new and commits in lease with A old: a
/// fractured read. With it, W's commit takes the whole lease, R's lease on A has ended,
/// and R's validation of A finds W's version.
fn lease_wait_scenario(variant: OoccVariant) -> Result<(Option<u64>, Option<u64>, u64), Abort> {
    let e = env(oocc(50_000, variant), 1);
    let w = e.mem_cn(0).worker(0).expect("worker");
    let mut cw = w.coordinator(&e.proto, 0).expect("coordinator");
    let mut cr = w.coordinator(&e.proto, 1).expect("coordinator");
    block_on(async {
        warm(&mut cw).await;
        warm(&mut cr).await;
        let mut tr = cr.begin_with(TxnHints::READ_ONLY);
        tr.add_ro(bank::TABLE, A);
        tr.execute().await.expect("R reads A, unlocked");
        let mut tw = cw.begin();
        tw.add_rw(bank::TABLE, A);
        tw.add_rw(bank::TABLE, B);
        tw.execute().await.expect("W locks");
        restamp(&mut tw, 0);
        restamp(&mut tw, 1);
        let writer = tw.id();
        tw.commit().await.expect("W commits");
        tr.add_ro(bank::TABLE, B);
        tr.execute().await.expect("R reads B, unlocked");
        let (a, b) = (tr.coord.set.objs[0].version_read, tr.coord.set.objs[1].version_read);
        tr.commit().await.map(|()| (a, b, writer))
    })
}

#[test]
fn no_lease_wait_is_caught() {
    let (a, b, writer) = lease_wait_scenario(OoccVariant::NoLeaseWait).expect("the broken variant commits");
    assert_eq!(b, Some(writer), "B read new");
    assert_ne!(a, Some(writer), "A read old: a fractured read committed");
    let fixed = lease_wait_scenario(OoccVariant::Fixed).expect_err("R's lease on A ended during W's wait");
    assert_eq!(fixed.reason, AbortReason::Validation);
}
