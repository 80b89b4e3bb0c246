//! Commit and release (Alg. 1 l. 9–24, 34–43): the buffered writes as WriteDIs whose
//! lock word (the item's highest) is 0, read locks released in the same post; an abort
//! only releases (in `cleanup`, where E/S release loops can wait).

use dmtx_runtime::{Abort, AbortReason, Access, Coordinator, Phase, Txn};
use dmtx_verbs::{AtomicId, ReadId, RemotePtr};

use super::{Fresh, Hold, Policy, TwoPl, ES_RELEASE_TRIES_MAX, TOMBSTONE};
use crate::rcbench::prims::{state_word, ST_CM, ST_RN};
use crate::rcbench::CtxVerbs;

/// A shared lock being released.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Pending {
    obj: usize,
    lock: RemotePtr,
    word: u64,
    read: Option<ReadId>,
    cas: Option<AtomicId>,
}

/// The lock word of object `i`.
fn lock_ptr<P: TwoPl>(c: &Coordinator<P>, i: usize) -> (RemotePtr, u32) {
    let o = &c.set.objs[i];
    let info = c.ctx.catalog.get(o.table).expect("table checked at add");
    let layout = c.proto.item_layout();
    let vb = info.meta.value_bytes;
    let item = info.ptr(0, o.proto.rel);
    (
        RemotePtr::new(item.mn, item.offset + layout.lock_off(vb) as u64),
        layout.item_bytes(vb),
    )
}

/// Add object `i`'s release to the post (shared: its lock-word READ, into `pending`).
fn push_release<P: TwoPl>(c: &mut Coordinator<P>, i: usize) {
    let (lock, item_len) = lock_ptr(c, i);
    let o = &c.set.objs[i];
    let st = &mut c.state;
    match o.proto.hold {
        Hold::None => {}
        Hold::Shared => {
            let read = st.prims.read_di(&mut st.post, lock, 8);
            st.pending.push(Pending {
                obj: i,
                lock,
                word: 0,
                read: Some(read),
                cas: None,
            });
        }
        Hold::Excl if o.proto.fresh == Fresh::Claimed => {
            // Not indexed: give the slot back whole (zeros, lock last).
            let item = RemotePtr::new(lock.mn, lock.offset + 8 - item_len as u64);
            st.prims
                .write_di_with(&mut st.post, item, item_len as usize, |b| b.fill(0));
        }
        Hold::Excl => {
            st.prims.amod_im(&mut st.post, lock, st.lock_val, 0);
        }
    }
}

pub(crate) async fn commit<P: TwoPl>(txn: &mut Txn<'_, P>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let catalog = std::sync::Arc::clone(&c.ctx.catalog);
    let layout = c.proto.item_layout();
    let txn_id = c.set.txn_id;
    assert!(txn_id & TOMBSTONE == 0, "transaction ids stay below bit 63");
    if P::POLICY == Policy::WoundWait && !c.state.tg_pending {
        // Alg. 2 l. 12: CAS own st RN → CM; refused: wounded, abort (nothing written).
        let st = &mut c.state;
        let tg = st.tg.as_ref().expect("wound-wait coordinators have a T^g area");
        st.post.clear();
        let cas = st.prims.amod_own_tm(&mut st.post, tg, st.tid, ST_RN, ST_CM);
        st.prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await
            .map_err(|_| Abort::new(AbortReason::Fault))?;
        if st.post.old(cas) != state_word(st.tid, ST_RN) {
            return Err(Abort::new(AbortReason::LockConflict));
        }
    }
    c.state.post.clear();
    c.state.backups.clear();
    c.state.pending.clear();
    for i in 0..c.set.objs.len() {
        let o = &c.set.objs[i];
        if o.proto.hold != Hold::Excl || !o.access.writes() {
            push_release(c, i);
            continue;
        }
        let info = catalog.get(o.table).expect("table checked at add");
        let vb = info.meta.value_bytes;
        let st = &mut c.state;
        // The image: pk, value, version (tombstone for a delete), lock 0 last.
        let len = layout.item_bytes(vb) as usize;
        st.image.clear();
        st.image.resize(len, 0);
        st.image[..8].copy_from_slice(&(o.key + 1).to_le_bytes());
        let d = layout.data_off() as usize;
        if o.access != Access::Delete {
            st.image[d..d + o.value_len as usize].copy_from_slice(c.set.value(i));
        }
        let v = layout.meta_off(vb) as usize;
        let version = match o.access {
            Access::Delete => txn_id | TOMBSTONE,
            _ => txn_id,
        };
        st.image[v..v + 8].copy_from_slice(&version.to_le_bytes());
        for r in 1..info.replica_count() {
            st.prims.write_di(&mut st.backups, info.ptr(r, o.proto.rel), &st.image);
        }
        st.prims.write_di(&mut st.post, info.ptr(0, o.proto.rel), &st.image);
    }
    let st = &mut c.state;
    if !st.backups.is_empty() {
        // Backups first, in their own round trip: once the primary's WRITE releases the
        // lock, the next writer's backup WRITE must not race this one.
        st.prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.backups)
            .await
            .map_err(|_| Abort::new(AbortReason::Fault))?;
    }
    st.prims
        .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
        .await
        .map_err(|_| Abort::new(AbortReason::Fault))?;
    for o in &mut c.set.objs {
        if o.proto.hold == Hold::Excl {
            o.proto.hold = Hold::None;
            o.proto.fresh = Fresh::No;
        }
    }
    cas_rounds(c).await;
    Ok(())
}

/// `CAS(old → old − 2)` on every pending shared lock word (one post per round), each
/// retried from the word it returned until it takes. The words' READs are in the
/// post just completed.
async fn cas_rounds<P: TwoPl>(c: &mut Coordinator<P>) {
    let st = &mut c.state;
    for p in &mut st.pending {
        let read = p.read.take().expect("pending shared release has its READ");
        p.word = u64::from_le_bytes(st.post.bytes(read).try_into().expect("8 bytes"));
    }
    for _ in 0..ES_RELEASE_TRIES_MAX {
        let st = &mut c.state;
        if st.pending.is_empty() {
            return;
        }
        st.post.clear();
        for p in &mut st.pending {
            let w = p.word;
            assert!(
                w >= 2 && w & 1 == 0,
                "shared release of a word holding no shared lock: {w:#x}"
            );
            p.cas = Some(st.prims.amod_im(&mut st.post, p.lock, w, w - 2));
        }
        if st
            .prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await
            .is_err()
        {
            st.pending.clear();
            return;
        }
        let post = &st.post;
        let set = &mut c.set;
        st.pending.retain_mut(|p| {
            let old = post.old(p.cas.take().expect("posted"));
            if old == p.word {
                set.objs[p.obj].proto.hold = Hold::None;
                false
            } else {
                p.word = old;
                true
            }
        });
    }
    panic!("shared release did not take in {ES_RELEASE_TRIES_MAX} rounds");
}

/// Release object `i`'s lock now (awaited): the broken early-release variant.
pub(crate) async fn release_one<P: TwoPl>(c: &mut Coordinator<P>, i: usize) {
    c.state.post.clear();
    c.state.pending.clear();
    push_release(c, i);
    let st = &mut c.state;
    if st
        .prims
        .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
        .await
        .is_ok()
    {
        cas_rounds(c).await;
    }
    c.set.objs[i].proto.hold = Hold::None;
}

/// After an attempt: release what an aborted one still holds, in one post (plus the
/// shared locks' CAS rounds).
pub(crate) async fn release_all<P: TwoPl>(c: &mut Coordinator<P>) {
    if c.set.phase == Phase::Committed {
        debug_assert!(c.set.objs.iter().all(|o| o.proto.hold == Hold::None));
        return;
    }
    c.state.post.clear();
    c.state.pending.clear();
    for i in 0..c.set.objs.len() {
        push_release(c, i);
    }
    let st = &mut c.state;
    if st.post.is_empty() {
        return;
    }
    let ok = st
        .prims
        .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
        .await
        .is_ok();
    if ok {
        cas_rounds(c).await;
    }
    for o in &mut c.set.objs {
        o.proto.hold = Hold::None;
    }
}

/// Add σ since the last report to the metrics.
pub(crate) fn report_sigma<P: TwoPl>(c: &mut Coordinator<P>) {
    let now = c.state.prims.sigma;
    let was = std::mem::replace(&mut c.state.reported, now);
    c.ctx.metric(super::METRIC_SIGMA_READ_DI, now.read_di - was.read_di);
    c.ctx.metric(super::METRIC_SIGMA_WRITE_DI, now.write_di - was.write_di);
    c.ctx.metric(super::METRIC_SIGMA_AMOD_IM, now.amod_im - was.amod_im);
    c.ctx
        .metric(super::METRIC_INDEX_READS, now.index_reads - was.index_reads);
}
