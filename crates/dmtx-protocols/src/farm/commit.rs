//! Commit-backup and commit-primary, FORD §2.3 Fig. 2 (FaRM), and the truncation queue.
//!
//! The machinery (redo-log WRITE, selective FLUSH, release, rollback) is shared
//! ([`crate::onever`]); FaRM's decisions here: redo records to every backup's log area
//! in one round trip with all ACKs awaited, then the in-place WRITE and the unlock of
//! every primary in one round trip, the commit reported on its ACK. DrTM+H commits the
//! same way (§4.2's lock-duration list), so this is the FaRM family's
//! ([`super::RedoFamily`]).

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::RedoFamily;
use dmtx_store::BUCKET_LOCK_OFFSET;
use dmtx_verbs::Post;

use crate::onever::record::{encode_image, meta_seq, VERSION, VLOCK};
use crate::onever::redo_log::{RedoEntry, Room};
use crate::onever::{release as rel, replicas};

pub(crate) async fn commit<P: RedoFamily>(txn: &mut Txn<'_, P>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    if !c.set.objs.iter().any(|o| o.access.writes()) {
        return Ok(());
    }
    c.ctx.fault_point(P::POINT_AFTER_VALIDATE);
    let st = &mut c.state;
    replicas::collect_mns(&mut st.mns, &c.set.objs, &c.ctx.catalog);
    let writes = c.set.objs.iter().filter(|o| o.access.writes()).count();
    c.ctx.step(P::STEP_COMMIT, writes as u32);

    // New images, bytes 8.. of each written slot. The version names the writer; the
    // write sequence orders truncation installs (`onever::redo_log`).
    st.images.clear();
    st.entries.clear();
    for i in 0..c.set.objs.len() {
        let o = &c.set.objs[i];
        if !o.access.writes() {
            continue;
        }
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let len = info.shape.slot_bytes as usize - VERSION;
        let at = st.images.len();
        st.images.resize(at + len, 0);
        let m = meta_seq(o.table, o.access != Access::Delete, o.proto.seq + 1);
        encode_image(&mut st.images[at..], c.set.txn_id, o.key, m, c.set.value(i));
        st.entries.push(RedoEntry {
            table: o.table,
            rel: o.proto.rel,
            at: at as u32,
            len: len as u32,
        });
    }

    // 1. Commit-backup: redo records to every backup's log area, FLUSH after each
    //    node's last one, every ACK awaited. A log area without room for this log
    //    stalls the commit until truncation has emptied it (counted).
    match st.log.room(&st.mns, &st.entries, &c.ctx.catalog) {
        Room::Fits => {}
        Room::AfterTruncation => {
            c.ctx.metric(super::METRIC_LOG_FULL_STALLS, 1);
            if let Err(e) = st.trunc.run(&mut c.ctx, &mut st.log, st.lock).await {
                c.ctx.last_fault = Some(e);
                return Err(Abort::new(AbortReason::Fault));
            }
        }
        Room::Never(needed) => {
            // Nothing is written yet: the abort path releases the locks. The driver
            // stops the run on this reason, since the transaction can never commit.
            let area = st.log.bytes() as u64;
            c.ctx.last_log_full = Some(format!(
                "a transaction's redo log needs {needed} bytes, more than the {area}-byte log area of `{}` \
                 (`log_bytes`); raise it, e.g. --set log_bytes={}",
                P::NAME,
                (needed as u64).next_power_of_two().max(area * 2)
            ));
            return Err(Abort::new(AbortReason::LogFull));
        }
    }
    st.post.clear();
    let header = (c.ctx.id.global(), c.set.txn_seq);
    for &mn in &st.mns {
        st.log
            .post_write(&mut st.post, mn, header, &st.entries, &st.images, &c.ctx.catalog)
            .expect("room checked above");
    }
    let log = &st.log;
    replicas::post_selective_flush(&mut st.post, &st.mns, &c.set.objs, &c.ctx.catalog, |mn| log.area(mn));
    if !st.post.is_empty() && c.ctx.post(&mut c.state.post).await.is_err() {
        // Nothing is in place yet: `abort` releases the locks.
        return Err(Abort::new(AbortReason::Fault));
    }
    let c = &mut *txn.coord;
    c.ctx.fault_point(P::POINT_AFTER_BACKUP);

    // 2. Commit-primary: the new image in place, then the unlock, on each primary (one
    //    node's ops run in order, so nobody sees the record unlocked before its WRITE).
    let st = &mut c.state;
    st.post.clear();
    for (o, e) in c.set.objs.iter().filter(|o| o.access.writes()).zip(&st.entries) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let img = &st.images[e.at as usize..(e.at + e.len) as usize];
        st.post.write(info.ptr(0, e.rel + VERSION as u64), img);
    }
    // What the release below gives back, in case its post fails (`settle_primaries`).
    st.unlocks.clear();
    let mut entry = 0;
    for o in c.set.objs.iter() {
        let mine = o.access.writes().then(|| {
            entry += 1;
            entry - 1
        });
        if o.proto.holds.locked {
            st.unlocks.push((o.table, o.proto.rel + VLOCK as u64, mine));
        }
        if let Some(b) = o.proto.holds.bucket_lock {
            st.unlocks.push((o.table, b + BUCKET_LOCK_OFFSET, None));
        }
    }
    crate::onever::lock_time::note_release(&mut c.ctx, &mut c.set.objs, super::LOCK_METRICS);
    rel::push_release(&mut st.post, &mut c.set.objs, &c.ctx.catalog, st.lock);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        settle_primaries(txn).await;
    }
    let c = &mut *txn.coord;
    let cache = c.proto.addr_cache();
    for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
        o.version_written = Some(c.set.txn_id);
        match o.access {
            Access::Insert if cache => c.ctx.cache.put(o.table, o.key, o.proto.rel),
            Access::Delete => c.ctx.cache.evict(o.table, o.key, o.proto.rel),
            _ => {}
        }
    }
    let st = &mut c.state;
    // Truncation installs the logged images into the backups (`cleanup`, every
    // `truncate_batch` commits, or a stall when a log area is full).
    let with_backup: Vec<RedoEntry> = st
        .entries
        .iter()
        .copied()
        .filter(|e| {
            c.ctx
                .catalog
                .get(e.table)
                .expect("table checked at add")
                .replica_count()
                > 1
        })
        .collect();
    if !with_backup.is_empty() {
        st.trunc.push(&with_backup, &st.images);
    }
    Ok(())
}

/// Rounds [`settle_primaries`] tries before leaving the rest to recovery.
const SETTLE_ROUNDS_MAX: u32 = 256;

/// The commit-primary post failed after every backup acknowledged its redo log: the
/// transaction is committed (FaRM's commit point), and some of the post's WRITEs may have
/// landed, unlocks included, so nothing may be rolled back (a reader may already have
/// seen the new image). Per word this coordinator unlocked, READ it: still ours means
/// the unlock (and maybe the image) did not land, so WRITE the image again and unlock
/// (the lock is still held, so nobody else wrote the record); anything else means the
/// unlock landed after the image (one node's ops run in order). Repeated until every
/// word is settled or [`SETTLE_ROUNDS_MAX`] rounds failed (then recovery, which dmtx
/// lacks, would finish from the redo logs).
async fn settle_primaries<P: RedoFamily>(txn: &mut Txn<'_, P>) {
    let c = &mut *txn.coord;
    c.ctx.fault_point(P::POINT_SETTLE);
    let lock = c.state.lock;
    let mut reads = Vec::new();
    for _ in 0..SETTLE_ROUNDS_MAX {
        let st = &mut c.state;
        if st.unlocks.is_empty() {
            return;
        }
        st.post.clear();
        reads.clear();
        for &(table, word, _) in &st.unlocks {
            let info = c.ctx.catalog.get(table).expect("table checked at add");
            reads.push(st.post.read(info.ptr(0, word), 8));
        }
        if c.ctx.post(&mut c.state.post).await.is_err() {
            continue;
        }
        let st = &mut c.state;
        let first = std::mem::take(&mut st.post);
        let mut redo = Post::new();
        let mut still = Vec::new();
        for (&(table, word, entry), &read) in st.unlocks.iter().zip(&reads) {
            if u64::from_le_bytes(first.bytes(read)[..8].try_into().unwrap()) != lock {
                continue;
            }
            let info = c.ctx.catalog.get(table).expect("table checked at add");
            if let Some(i) = entry {
                let e = &st.entries[i];
                redo.write(
                    info.ptr(0, e.rel + VERSION as u64),
                    &st.images[e.at as usize..(e.at + e.len) as usize],
                );
            }
            redo.write(info.ptr(0, word), &0u64.to_le_bytes());
            still.push((table, word, entry));
        }
        st.post = first;
        st.unlocks = still;
        if st.unlocks.is_empty() {
            return;
        }
        if c.ctx.post(&mut redo).await.is_ok() {
            // The redo post's ops all landed: settled.
            c.state.unlocks.clear();
            return;
        }
    }
}
