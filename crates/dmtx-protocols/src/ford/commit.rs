//! Coalescent commit, selective remote flush, release and rollback, FORD §4.3, §4.5, §4.8.
//!
//! The machinery (log WRITE, backup fan-out, FLUSH, release, restore) is shared
//! ([`crate::onever`]); FORD's decisions here are what goes into one batch per memory
//! node (the undo log first, then the in-place updates, §4.3's coalescent commit), the
//! primary's `CAS(vlock, me → INVISIBLE | me)` in front of its WRITE, and releasing in
//! the background.

use dmtx_runtime::{yield_now, Abort, AbortReason, Access, Txn};

use super::layout::{encode_image, meta, INVISIBLE, VERSION, VLOCK};
use super::{FordBase, FordVariant};
use crate::onever::{lock_time, release as rel, replicas};

pub(crate) async fn commit<P: FordBase>(txn: &mut Txn<'_, P>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    if !c.set.objs.iter().any(|o| o.access.writes()) {
        return Ok(());
    }
    c.ctx.fault_point("ford.commit.after_lock");
    let lock = c.state.lock;
    let st = &mut c.state;
    replicas::collect_mns(&mut st.mns, &c.set.objs, &c.ctx.catalog);

    // 1. One undo log per memory node, first in that node's batch.
    let writes = c.set.objs.iter().filter(|o| o.access.writes()).count();
    c.ctx.step(super::STEP_COMMIT, writes as u32);
    st.post.clear();
    let header = (c.ctx.id.global(), c.set.txn_seq);
    let full_flush = !c.proto.ford_config().selective_flush;
    for &mn in &st.mns {
        // On `LogFull` nothing is written yet: the abort path releases the locks. The
        // driver stops the run on this reason, since the transaction can never commit.
        if let Err(needed) = st
            .log
            .post_write(&mut st.post, mn, header, &c.set.objs, &c.ctx.catalog, &st.undo)
        {
            let area = st.log.bytes() as u64;
            c.ctx.last_log_full = Some(format!(
                "a transaction's undo log needs {needed} bytes, more than the {area}-byte log area of `ford` \
                 (`log_bytes`); raise it, e.g. --set log_bytes={}",
                (needed as u64).next_power_of_two().max(area * 2)
            ));
            return Err(Abort::new(AbortReason::LogFull));
        }
        if full_flush {
            st.post.flush(st.log.area(mn));
        }
    }

    let unlock_early = c.proto.ford_config().variant == FordVariant::UnlockBeforeCommitWrite;
    if unlock_early {
        // Broken on purpose: the locks go before the new values are in place.
        st.bg.clear();
        for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            st.bg
                .write(info.ptr(0, o.proto.rel + VLOCK as u64), &0u64.to_le_bytes());
            o.proto.holds.locked = false;
        }
        c.ctx.post_background(&mut st.bg);
        yield_now().await;
    }

    // 2. In-place updates of every replica: invisible, then the new record (§4.3.2).
    let mut img = std::mem::take(&mut st.undo_scratch);
    for i in 0..c.set.objs.len() {
        let o = &c.set.objs[i];
        if !o.access.writes() {
            continue;
        }
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let slot_bytes = info.shape.slot_bytes as usize;
        // The version names its writer (unique per transaction), so histories can tell
        // exactly whom every read read from; FORD only ever compares versions for equality.
        let version = c.set.txn_id;
        let m = meta(o.table, o.access != Access::Delete);
        img.clear();
        img.resize(slot_bytes, 0);
        img[..8].copy_from_slice(&(INVISIBLE | lock).to_le_bytes());
        encode_image(&mut img[VERSION..], version, o.key, m, c.set.value(i));
        let rel = o.proto.rel;
        let o = &mut c.set.objs[i];
        o.proto.cas = (!unlock_early).then(|| st.post.cas(info.ptr(0, rel + VLOCK as u64), lock, INVISIBLE | lock));
        st.post.write(info.ptr(0, rel + VERSION as u64), &img[VERSION..]);
        if full_flush {
            st.post.flush(info.ptr(0, rel));
        }
        o.proto.holds.backups_marked = replicas::post_backup_writes(&mut st.post, info, rel, &img);
        if full_flush {
            for r in 1..info.replica_count() {
                st.post.flush(info.ptr(r, rel));
            }
        }
        o.version_written = Some(version);
    }
    st.undo_scratch = img;

    // 3. Selective remote flush: once per backup node, after its last WRITE (§4.5).
    let log = &st.log;
    if !full_flush {
        replicas::post_selective_flush(&mut st.post, &st.mns, &c.set.objs, &c.ctx.catalog, |mn| log.area(mn));
    }

    if c.ctx.post(&mut c.state.post).await.is_err() {
        rollback(txn).await;
        return Err(Abort::new(AbortReason::Fault));
    }
    let c = &mut *txn.coord;
    c.ctx.fault_point("ford.commit.after_write");
    for o in c.set.objs.iter().filter(|o| o.access.writes()) {
        // Pair assertion with invariant 1: nobody took our lock away.
        if let Some(cas) = o.proto.cas {
            let old = c.state.post.old(cas);
            assert_eq!(
                old, lock,
                "table {} key {}: lost the lock before commit",
                o.table, o.key
            );
        }
        match o.access {
            Access::Insert => c.ctx.cache.put(o.table, o.key, o.proto.rel),
            Access::Delete => c.ctx.cache.evict(o.table, o.key, o.proto.rel),
            _ => {}
        }
    }
    release(txn, true);
    Ok(())
}

/// Background release (§4.3.2): unlock and make visible, mark the undo logs committed.
/// Never waited for; also the abort path.
pub(crate) fn release<P: FordBase>(txn: &mut Txn<'_, P>, committed: bool) {
    let c = &mut *txn.coord;
    let st = &mut c.state;
    st.bg.clear();
    lock_time::note_release(&mut c.ctx, &mut c.set.objs, super::LOCK_METRICS);
    rel::push_release(&mut st.bg, &mut c.set.objs, &c.ctx.catalog, st.lock);
    if committed {
        st.log.post_committed(&mut st.bg, &st.mns);
    }
    c.ctx.post_background(&mut st.bg);
}

/// The commit post failed (§4.8 case 2): put the old images back on every replica that
/// can still be reached, then release, in one post so each node restores before it
/// unlocks.
async fn rollback<P: FordBase>(txn: &mut Txn<'_, P>) {
    let c = &mut *txn.coord;
    c.ctx.fault_point("ford.commit.rollback");
    let st = &mut c.state;
    st.post.clear();
    let restore = c.proto.ford_config().variant != FordVariant::SkipUndoOnFailedCommit;
    let (catalog, cache) = (&c.ctx.catalog, &c.ctx.cache);
    rel::push_rollback(
        &mut st.post,
        &mut c.set.objs,
        catalog,
        cache,
        (&st.undo, restore),
        st.lock,
    );
    // Nodes that cannot be reached keep what recovery will repair from the undo logs.
    let _ = c.ctx.post(&mut c.state.post).await;
}
