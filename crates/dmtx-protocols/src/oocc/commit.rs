//! Validate&Logging and Commit of a read-write transaction, Alg. 1 lines 17–25 with
//! issue 29's rules: RTT2 upgrades every intention lock to `W`, writes the redo logs and
//! validates every record read but not written; RTT3, at `max(D, end of RTT2)`, writes
//! each record and then its unlock, on every replica.

use dmtx_runtime::{sleep_until, Abort, AbortReason, Access, Txn};
use dmtx_verbs::RemotePtr;

use super::layout::{encode_image, meta, write_locked, VERSION};
use super::validate::{checked, in_lease, post_check};
use super::{Oocc, OoccVariant};
use crate::onever::replicas;
use crate::onever::undo_log::LOG_STATUS_OFFSET;

/// Rounds [`settle`] tries before leaving the rest to recovery.
const SETTLE_ROUNDS_MAX: u32 = 256;

pub(super) async fn commit(txn: &mut Txn<'_, Oocc>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let variant = c.proto.config().variant;
    // Alg. 1 line 4: a read-write transaction aborts on any lock it read.
    if c.set
        .objs
        .iter()
        .any(|o| o.access == Access::ReadOnly && o.proto.lock_seen != 0)
    {
        return Err(Abort::new(AbortReason::LockConflict));
    }
    c.ctx.fault_point("oocc.commit.after_execute");
    let owner = c.state.owner;
    let st = &mut c.state;
    replicas::collect_mns(&mut st.mns, &c.set.objs, &c.ctx.catalog);
    let writes = c.set.objs.iter().filter(|o| o.access.writes()).count();
    c.ctx.step(super::STEP_COMMIT, writes as u32);

    // New images (bytes 8..), which the redo logs and RTT3 both carry.
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
        if c.proto.words(info.shape.slot_bytes).copy.is_some() {
            // The paper's layout: the lock word (0) and the version copy end the image.
            let end = at + len;
            st.images[end - 8..end].copy_from_slice(&c.set.txn_id.to_le_bytes());
        }
        c.set.objs[i].proto.image_at = at as u32;
    }
    let cfg = c.proto.config();
    let (delayed_lock, write_unlock) = (cfg.delayed_lock, cfg.write_unlock);
    if !write_unlock {
        // The undo log (Fig. 6a): the old images, at the offsets of the new ones.
        st.old_images.clear();
        st.old_images.resize(st.images.len(), 0);
        for o in c.set.objs.iter().filter(|o| o.access.writes()) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            let len = info.shape.slot_bytes as usize - VERSION;
            let (to, from) = (o.proto.image_at as usize, o.proto.undo_at as usize);
            st.old_images[to..to + len].copy_from_slice(&st.undo[from..from + len]);
        }
    }

    // RTT2: W on every lock (held since RTT1 without the delayed write lock), the logs
    // (each flushed), a validation READ of every record read but not written.
    st.post.clear();
    for o in c.set.objs.iter().filter(|o| o.access.writes() && delayed_lock) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        debug_assert!(o.proto.holds.locked);
        let lock_at = c.proto.words(info.shape.slot_bytes).lock as u64;
        st.post
            .write(info.ptr(0, o.proto.rel + lock_at), &write_locked(owner).to_le_bytes());
    }
    let header = (c.ctx.id.global(), c.set.txn_seq);
    let logged = if write_unlock { &st.images } else { &st.old_images };
    for &mn in &st.mns {
        if let Err(needed) = st
            .log
            .post_write(&mut st.post, mn, header, &c.set.objs, &c.ctx.catalog, logged)
        {
            let area = st.log.bytes() as u64;
            c.ctx.last_log_full = Some(format!(
                "a transaction's redo log needs {needed} bytes, more than the {area}-byte log area of `oocc` \
                 (`log_bytes`); raise it, e.g. --set log_bytes={}",
                (needed as u64).next_power_of_two().max(area * 2)
            ));
            // Nothing is in place and the W words are not sent: the abort path releases.
            return Err(Abort::new(AbortReason::LogFull));
        }
        st.post.flush(st.log.area(mn));
    }
    let now = c.ctx.clock.now_ns();
    let mut checks = 0;
    for o in c.set.objs.iter_mut().filter(|o| o.access == Access::ReadOnly) {
        o.proto.read = None;
        // The paper's rule skips records still in lease: write skew.
        if variant == OoccVariant::SkipInLeaseValidation && in_lease(&o.proto, now) {
            continue;
        }
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        post_check(&mut st.post, info, c.proto.words(info.shape.slot_bytes), &mut o.proto);
        checks += 1;
    }
    c.ctx.step(super::STEP_VALIDATE, checks);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        invalidate_logs(txn).await;
        return Err(Abort::new(AbortReason::Fault));
    }
    let c = &mut *txn.coord;
    let post = &c.state.post;
    let valid = c.set.objs.iter().filter(|o| o.proto.read.is_some()).all(|o| {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let words = c.proto.words(info.shape.slot_bytes);
        checked(post, words, &o.proto, variant) == (0, o.proto.version, true)
    });
    if !valid {
        invalidate_logs(txn).await;
        return Err(Abort::new(AbortReason::Validation));
    }
    c.ctx.fault_point("oocc.commit.after_log");

    // RTT3 at max(D, end of RTT2): the implicit leases of every reader that saw a lock
    // 0 before our CAS have ended.
    let deadline = c.state.deadline_ns;
    let now = c.ctx.clock.now_ns();
    if variant != OoccVariant::NoLeaseWait && now < deadline {
        c.ctx.metric(super::METRIC_LEASE_WAIT_NS, deadline - now);
        let clock = c.ctx.clock.clone();
        sleep_until(&*clock, deadline).await;
    }
    if !write_unlock {
        return commit_then_unlock(txn).await;
    }
    let c = &mut *txn.coord;
    let st = &mut c.state;
    st.post.clear();
    st.bg.clear();
    for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        push_commit(
            &mut st.post,
            &mut st.bg,
            info,
            c.proto.as_ref(),
            &st.images,
            o.proto.rel,
            o.proto.image_at,
        );
        o.proto.holds.locked = false;
        if let Some(b) = o.proto.holds.bucket_lock.take() {
            // The chain's insert lock goes after the slot is occupied (same node, in order).
            st.post
                .write(info.ptr(0, b + dmtx_store::BUCKET_LOCK_OFFSET), &0u64.to_le_bytes());
        }
        o.version_written = Some(c.set.txn_id);
    }
    if c.ctx.post(&mut c.state.post).await.is_err() {
        settle(txn).await;
    } else {
        c.ctx.post_background(&mut c.state.bg);
    }
    note_addresses(txn);
    Ok(())
}

/// Inserted records' addresses into the cache, deleted ones out.
fn note_addresses(txn: &mut Txn<'_, Oocc>) {
    let c = &mut *txn.coord;
    let use_cache = c.proto.config().addr_cache;
    for o in c.set.objs.iter().filter(|o| o.access.writes()) {
        match o.access {
            Access::Insert if use_cache => c.ctx.cache.put(o.table, o.key, o.proto.rel),
            Access::Delete => c.ctx.cache.evict(o.table, o.key, o.proto.rel),
            _ => {}
        }
    }
}

/// Rounds the unlock round of [`commit_then_unlock`] is retried before leaving the rest
/// to recovery.
const UNLOCK_ROUNDS_MAX: u32 = 256;

/// Without Write-Unlock (Fig. 6a/b): RTT3 writes every replica with the locks held,
/// RTT4 releases them once every record is in place (so no reader sees part of the
/// transaction unlocked). A failed RTT3 rolls back from the old images (still locked,
/// nobody saw the new ones); a failed RTT4 is retried by `CAS(held → 0)`, which leaves a
/// lock someone took after our unlock landed alone.
async fn commit_then_unlock(txn: &mut Txn<'_, Oocc>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let owner = c.state.owner;
    let held = write_locked(owner);
    let st = &mut c.state;
    st.post.clear();
    for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let len = info.shape.slot_bytes as usize - VERSION;
        let img = &st.images[o.proto.image_at as usize..o.proto.image_at as usize + len];
        for r in 0..info.replica_count() {
            st.post.write(info.ptr(r, o.proto.rel + VERSION as u64), img);
        }
    }
    if c.ctx.post(&mut c.state.post).await.is_err() {
        let c = &mut *txn.coord;
        let st = &mut c.state;
        st.post.clear();
        for o in c.set.objs.iter().filter(|o| o.access.writes()) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            let len = info.shape.slot_bytes as usize - VERSION;
            let old = &st.undo[o.proto.undo_at as usize..o.proto.undo_at as usize + len];
            for r in 0..info.replica_count() {
                st.post.write(info.ptr(r, o.proto.rel + VERSION as u64), old);
            }
            c.ctx.cache.evict(o.table, o.key, o.proto.rel);
        }
        // Unreached nodes keep what recovery repairs from the undo logs; the abort path
        // releases the locks after this post.
        let _ = c.ctx.post(&mut c.state.post).await;
        return Err(Abort::new(AbortReason::Fault));
    }
    let c = &mut *txn.coord;
    for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
        o.version_written = Some(c.set.txn_id);
    }
    // RTT4: the release, awaited before the commit is reported.
    let st = &mut c.state;
    st.post.clear();
    for o in c.set.objs.iter_mut() {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        if std::mem::take(&mut o.proto.holds.locked) {
            let lock_at = c.proto.words(info.shape.slot_bytes).lock as u64;
            st.post.cas(info.ptr(0, o.proto.rel + lock_at), held, 0);
        }
        if let Some(b) = o.proto.holds.bucket_lock.take() {
            st.post.cas(info.ptr(0, b + dmtx_store::BUCKET_LOCK_OFFSET), owner, 0);
        }
    }
    for _ in 0..UNLOCK_ROUNDS_MAX {
        if c.ctx.post(&mut c.state.post).await.is_ok() {
            break;
        }
    }
    note_addresses(txn);
    Ok(())
}

/// Append the commit of one written record at `rel` (its new bytes 8.. at
/// `images[at..]`) to `post`: on the primary `[WRITE(bytes 8..), WRITE(lock, 0)]` with the
/// lock first; in the paper's layout one WRITE of bytes 8.., which carry the lock 0 and
/// the version copy last; on each backup the same bytes 8.. (lock word unused there).
///
/// With backups, the default layout's unlock goes to `unlocks`, posted once `post` is
/// ACKed: batches to different memory nodes keep no order, so a writer that took the
/// lock after an unlock in this batch could land its backup WRITE before ours and leave
/// the backup older than the primary. (The paper's one-WRITE layout cannot defer its
/// unlock; with backups it keeps that hazard, which its knob's help states.)
#[allow(clippy::too_many_arguments)]
fn push_commit(
    post: &mut dmtx_verbs::Post,
    unlocks: &mut dmtx_verbs::Post,
    info: &dmtx_store::TableInfo,
    proto: &Oocc,
    images: &[u8],
    rel: u64,
    at: u32,
) {
    let words = proto.words(info.shape.slot_bytes);
    let len = info.shape.slot_bytes as usize - VERSION;
    let img = &images[at as usize..at as usize + len];
    match (words.copy, proto.config().variant) {
        (Some(_), _) => post.write(info.ptr(0, rel + VERSION as u64), img),
        (None, OoccVariant::OneOpLockFirst) => {
            // Broken on purpose: the unlock is the first word of the one WRITE.
            post.write_with(info.ptr(0, rel), len + VERSION, |buf| {
                buf[..VERSION].fill(0);
                buf[VERSION..].copy_from_slice(img);
            });
        }
        (None, _) => {
            post.write(info.ptr(0, rel + VERSION as u64), img);
            if info.replica_count() == 1 {
                post.write(info.ptr(0, rel + words.lock as u64), &0u64.to_le_bytes());
            } else {
                unlocks.write(info.ptr(0, rel + words.lock as u64), &0u64.to_le_bytes());
            }
        }
    }
    for r in 1..info.replica_count() {
        post.write(info.ptr(r, rel + VERSION as u64), img);
    }
}

/// An abort after RTT2: mark every redo log invalid (status 0) and wait for it, so that
/// recovery never replays this transaction once its locks are released (the caller's
/// abort path releases them after this returns). A failed post leaves the rest to
/// recovery.
async fn invalidate_logs(txn: &mut Txn<'_, Oocc>) {
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

/// RTT3 failed after every redo log was ACKed: the transaction is committed and some of
/// its WRITEs may have landed, unlocks included, so nothing is rolled back. Per written
/// primary, READ the lock word: still `I|W|me` means its unlock did not land, so its
/// image (primary and backups) and unlock are written again (we still hold the lock);
/// anything else means the unlock landed after the image (batch order). Repeated until
/// every record is settled or [`SETTLE_ROUNDS_MAX`] rounds failed (then recovery would
/// finish from the redo logs).
async fn settle(txn: &mut Txn<'_, Oocc>) {
    let c = &mut *txn.coord;
    c.ctx.fault_point("oocc.commit.settle");
    let held = write_locked(c.state.owner);
    let mut pending: Vec<usize> = (0..c.set.objs.len())
        .filter(|&i| c.set.objs[i].access.writes())
        .collect();
    for _ in 0..SETTLE_ROUNDS_MAX {
        if pending.is_empty() {
            return;
        }
        let st = &mut c.state;
        st.post.clear();
        for &i in &pending {
            let o = &mut c.set.objs[i];
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            let lock_at = c.proto.words(info.shape.slot_bytes).lock as u64;
            o.proto.read = Some(st.post.read(info.ptr(0, o.proto.rel + lock_at), 8));
        }
        if c.ctx.post(&mut c.state.post).await.is_err() {
            continue;
        }
        let st = &mut c.state;
        pending.retain(|&i| {
            let b = st.post.bytes(c.set.objs[i].proto.read.expect("read posted"));
            u64::from_le_bytes(b[..8].try_into().unwrap()) == held
        });
        if pending.is_empty() {
            return;
        }
        st.bg.clear();
        st.post.clear();
        for &i in &pending {
            let o = &c.set.objs[i];
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            push_commit(
                &mut st.bg,
                &mut st.post,
                info,
                c.proto.as_ref(),
                &st.images,
                o.proto.rel,
                o.proto.image_at,
            );
        }
        if c.ctx.post(&mut c.state.bg).await.is_ok() {
            // The deferred unlocks (tables with backups) once the images are ACKed.
            if c.state.post.is_empty() || c.ctx.post(&mut c.state.post).await.is_ok() {
                return;
            }
        }
    }
}
