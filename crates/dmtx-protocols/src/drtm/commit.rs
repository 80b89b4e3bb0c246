//! Commit: read-only transactions check their leases; read-write ones log (RTT2), check
//! their read leases, then write and unlock (RTT3).

use dmtx_runtime::{Abort, AbortReason, Access, Txn};
use dmtx_verbs::RemotePtr;

use super::Drtm;
use crate::onever::record::{encode_image, meta, VERSION, VLOCK};
use crate::onever::replicas;
use crate::onever::undo_log::LOG_STATUS_OFFSET;

/// Whether every read lease of the transaction still runs past `now + Δ`.
fn leases_hold(txn: &Txn<'_, Drtm>) -> bool {
    let c = &*txn.coord;
    let now_us = c.ctx.clock.now_ns() / 1_000;
    let delta = c.proto.config().delta_us as u64;
    c.set
        .objs
        .iter()
        .filter(|o| o.access == Access::ReadOnly)
        .all(|o| now_us + delta < o.proto.lease_end_us)
}

pub(super) async fn commit(txn: &mut Txn<'_, Drtm>) -> Result<(), Abort> {
    if !txn.coord.set.objs.iter().any(|o| o.access.writes()) {
        return if leases_hold(txn) {
            Ok(())
        } else {
            Err(Abort::new(AbortReason::Validation))
        };
    }
    let c = &mut *txn.coord;
    let st = &mut c.state;
    replicas::collect_mns(&mut st.mns, &c.set.objs, &c.ctx.catalog);
    let writes = c.set.objs.iter().filter(|o| o.access.writes()).count();
    c.ctx.step(super::STEP_COMMIT, writes as u32);
    st.images.clear();
    for i in 0..c.set.objs.len() {
        let o = &c.set.objs[i];
        if !o.access.writes() {
            continue;
        }
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let len = info.shape.slot_bytes as usize - VERSION;
        let at = st.images.len();
        st.images.resize(at + len, 0);
        let m = meta(o.table, o.access != Access::Delete);
        encode_image(&mut st.images[at..], c.set.txn_id, o.key, m, c.set.value(i));
        c.set.objs[i].proto.image_at = at as u32;
    }
    // RTT2: the redo logs, each flushed.
    st.post.clear();
    let header = (c.ctx.id.global(), c.set.txn_seq);
    for &mn in &st.mns {
        if let Err(needed) = st
            .log
            .post_write(&mut st.post, mn, header, &c.set.objs, &c.ctx.catalog, &st.images)
        {
            let area = st.log.bytes() as u64;
            c.ctx.last_log_full = Some(format!(
                "a transaction's redo log needs {needed} bytes, more than the {area}-byte log area of `drtm` \
                 (`log_bytes`); raise it, e.g. --set log_bytes={}",
                (needed as u64).next_power_of_two().max(area * 2)
            ));
            return Err(Abort::new(AbortReason::LogFull));
        }
        st.post.flush(st.log.area(mn));
    }
    if c.ctx.post(&mut c.state.post).await.is_err() {
        invalidate_logs(txn).await;
        return Err(Abort::new(AbortReason::Fault));
    }
    // The serialization point: every write lock held, every read lease still valid.
    if !leases_hold(txn) {
        invalidate_logs(txn).await;
        return Err(Abort::new(AbortReason::Validation));
    }
    // RTT3: the records, and the unlocks: with the primary's WRITE where there is no
    // backup; else once every backup WRITE is ACKed (in the background), since batches
    // to different memory nodes keep no order: a writer that took the lock after an
    // unlock in this batch could land its backup WRITE before ours, leaving the backup
    // older than the primary.
    let c = &mut *txn.coord;
    let st = &mut c.state;
    st.post.clear();
    st.bg.clear();
    for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let len = info.shape.slot_bytes as usize - VERSION;
        let img = &st.images[o.proto.image_at as usize..o.proto.image_at as usize + len];
        st.post.write(info.ptr(0, o.proto.rel + VERSION as u64), img);
        for r in 1..info.replica_count() {
            st.post.write(info.ptr(r, o.proto.rel + VERSION as u64), img);
        }
        let unlocks = if info.replica_count() > 1 {
            &mut st.bg
        } else {
            &mut st.post
        };
        unlocks.write(info.ptr(0, o.proto.rel + VLOCK as u64), &0u64.to_le_bytes());
        o.proto.holds.locked = false;
        if let Some(b) = o.proto.holds.bucket_lock.take() {
            unlocks.write(info.ptr(0, b + dmtx_store::BUCKET_LOCK_OFFSET), &0u64.to_le_bytes());
        }
        o.version_written = Some(c.set.txn_id);
    }
    // Committed once the logs were ACKed. A failed post is retried whole; that is right
    // only when none of its unlocks landed (then the locks are still ours), so DrTM
    // claims no fault tolerance here (its suite runs without the fault sweep).
    for _ in 0..64 {
        if c.ctx.post(&mut c.state.post).await.is_ok() {
            break;
        }
    }
    c.ctx.post_background(&mut c.state.bg);
    for o in c.set.objs.iter().filter(|o| o.access.writes()) {
        match o.access {
            Access::Insert => c.ctx.cache.put(o.table, o.key, o.proto.rel),
            Access::Delete => c.ctx.cache.evict(o.table, o.key, o.proto.rel),
            _ => {}
        }
    }
    Ok(())
}

/// An abort after RTT2: every redo log invalid before any lock is released.
async fn invalidate_logs(txn: &mut Txn<'_, Drtm>) {
    let c = &mut *txn.coord;
    let st = &mut c.state;
    st.bg.clear();
    for &mn in &st.mns {
        let at = st.log.area(mn);
        st.bg
            .write(RemotePtr::new(mn, at.offset + LOG_STATUS_OFFSET), &0u64.to_le_bytes());
    }
    let _ = c.ctx.post(&mut c.state.bg).await;
}
