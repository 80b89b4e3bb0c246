//! Coalescent commit, selective remote flush, release and rollback, FORD §4.3, §4.5, §4.8.

use dmtx_runtime::{yield_now, Abort, AbortReason, Access, Txn};
use dmtx_store::BUCKET_LOCK_OFFSET;
use dmtx_verbs::{MnId, Post, RemotePtr};

use super::layout::{encode_image, meta, INVISIBLE, VERSION, VLOCK};
use super::{Ford, FordVariant};

/// Undo-log header: coordinator, txn sequence, entry count, status.
const LOG_HEADER_BYTES: usize = 32;
/// Offset of the status word in the log header.
const LOG_STATUS_OFFSET: u64 = 24;
/// Entry header: table id, table-relative slot offset.
const LOG_ENTRY_HEADER_BYTES: usize = 16;
const LOG_PENDING: u64 = 1;
const LOG_COMMITTED: u64 = 2;

fn push_mn(mns: &mut Vec<MnId>, mn: MnId) {
    if !mns.contains(&mn) {
        mns.push(mn);
    }
}

pub(super) async fn commit(txn: &mut Txn<'_, Ford>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    if !c.set.objs.iter().any(|o| o.access.writes()) {
        return Ok(());
    }
    c.ctx.fault_point("ford.commit.after_lock");
    let lock = c.state.lock;
    let st = &mut c.state;
    st.mns.clear();
    for o in c.set.objs.iter().filter(|o| o.access.writes()) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        for &(mn, _) in &info.meta.replicas {
            push_mn(&mut st.mns, mn);
        }
    }

    // 1. One undo log per memory node, first in that node's batch.
    let writes = c.set.objs.iter().filter(|o| o.access.writes()).count();
    c.ctx.step(super::STEP_COMMIT, writes as u32);
    st.post.clear();
    for mi in 0..st.mns.len() {
        let mn = st.mns[mi];
        let mut len = LOG_HEADER_BYTES;
        let mut count = 0u64;
        for o in c.set.objs.iter().filter(|o| o.access.writes()) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            if info.meta.replicas.iter().any(|&(m, _)| m == mn) {
                len += LOG_ENTRY_HEADER_BYTES + info.shape.slot_bytes as usize - VERSION;
                count += 1;
            }
        }
        if len > st.log_bytes as usize {
            // Nothing is written yet: the abort path releases the locks. The driver stops
            // the run on this reason, since the transaction can never commit.
            return Err(Abort::new(AbortReason::LogFull));
        }
        let (objs, undo, catalog) = (&c.set.objs, &st.undo, &c.ctx.catalog);
        let header = [c.ctx.id.global(), c.set.txn_seq, count, LOG_PENDING];
        st.post
            .write_with(RemotePtr::new(mn, st.log_base[mn.index()]), len, |buf| {
                for (i, w) in header.iter().enumerate() {
                    buf[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
                }
                let mut at = LOG_HEADER_BYTES;
                for o in objs.iter().filter(|o| o.access.writes()) {
                    let info = catalog.get(o.table).expect("table checked at add");
                    if !info.meta.replicas.iter().any(|&(m, _)| m == mn) {
                        continue;
                    }
                    let img = info.shape.slot_bytes as usize - VERSION;
                    buf[at..at + 8].copy_from_slice(&(o.table as u64).to_le_bytes());
                    buf[at + 8..at + 16].copy_from_slice(&o.proto.rel.to_le_bytes());
                    let u = o.proto.undo_at as usize;
                    buf[at + 16..at + 16 + img].copy_from_slice(&undo[u..u + img]);
                    at += LOG_ENTRY_HEADER_BYTES + img;
                }
            });
    }

    let unlock_early = c.proto.config().variant == FordVariant::UnlockBeforeCommitWrite;
    if unlock_early {
        // Broken on purpose: the locks go before the new values are in place.
        st.bg.clear();
        for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            st.bg
                .write(info.ptr(0, o.proto.rel + VLOCK as u64), &0u64.to_le_bytes());
            o.proto.locked = false;
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
        for r in 1..info.replica_count() {
            st.post.write(info.ptr(r, rel), &img);
        }
        o.proto.backups_marked = info.replica_count() > 1;
        o.version_written = Some(version);
    }
    st.undo_scratch = img;

    // 3. Selective remote flush: once per backup node, after its last WRITE (§4.5).
    for mi in 0..st.mns.len() {
        let mn = st.mns[mi];
        let hosts_backup = c.set.objs.iter().filter(|o| o.access.writes()).any(|o| {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            info.meta.replicas[1..].iter().any(|&(m, _)| m == mn)
        });
        if hosts_backup {
            st.post.flush(RemotePtr::new(mn, st.log_base[mn.index()]));
        }
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

/// Append the ops that release everything the transaction holds.
fn push_release(txn: &mut Txn<'_, Ford>, post_is_bg: bool) {
    let c = &mut *txn.coord;
    let lock = c.state.lock;
    let post: &mut Post = if post_is_bg { &mut c.state.bg } else { &mut c.state.post };
    for o in c.set.objs.iter_mut() {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let p = &mut o.proto;
        if p.locked {
            post.write(info.ptr(0, p.rel + VLOCK as u64), &0u64.to_le_bytes());
            p.locked = false;
        }
        if p.backups_marked {
            for r in 1..info.replica_count() {
                post.cas(info.ptr(r, p.rel + VLOCK as u64), INVISIBLE | lock, 0);
            }
            p.backups_marked = false;
        }
        if let Some(b) = p.bucket_lock.take() {
            post.write(info.ptr(0, b + BUCKET_LOCK_OFFSET), &0u64.to_le_bytes());
        }
    }
}

/// Background release (§4.3.2): unlock and make visible, mark the undo logs committed.
/// Never waited for; also the abort path.
pub(super) fn release(txn: &mut Txn<'_, Ford>, committed: bool) {
    txn.coord.state.bg.clear();
    push_release(txn, true);
    let c = &mut *txn.coord;
    if committed {
        for &mn in &c.state.mns {
            let at = RemotePtr::new(mn, c.state.log_base[mn.index()] + LOG_STATUS_OFFSET);
            c.state.bg.write(at, &LOG_COMMITTED.to_le_bytes());
        }
    }
    c.ctx.post_background(&mut c.state.bg);
}

/// The commit post failed (§4.8 case 2): put the old images back on every replica that
/// can still be reached, then release, in one post so each node restores before it
/// unlocks.
async fn rollback(txn: &mut Txn<'_, Ford>) {
    let c = &mut *txn.coord;
    c.ctx.fault_point("ford.commit.rollback");
    c.state.post.clear();
    let restore = c.proto.config().variant != FordVariant::SkipUndoOnFailedCommit;
    for o in c.set.objs.iter().filter(|o| o.access.writes()) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let img = info.shape.slot_bytes as usize - VERSION;
        let u = o.proto.undo_at as usize;
        for r in (0..info.replica_count()).filter(|_| restore) {
            c.state
                .post
                .write(info.ptr(r, o.proto.rel + VERSION as u64), &c.state.undo[u..u + img]);
        }
        // A rolled-back insert or delete may have moved the key: drop the hint.
        c.ctx.cache.evict(o.table, o.key, o.proto.rel);
    }
    for o in c.set.objs.iter_mut() {
        o.version_written = None;
    }
    push_release(txn, false);
    let c = &mut *txn.coord;
    // Nodes that cannot be reached keep what recovery will repair from the undo logs.
    let _ = c.ctx.post(&mut c.state.post).await;
}
