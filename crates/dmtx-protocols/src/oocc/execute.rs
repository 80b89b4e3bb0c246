//! Execution&Locking, Alg. 1 lines 1–10: READs of the read set (each starting an
//! implicit lease at its post), `[CAS(lock, 0 → I|me), READ]` per write-set record.
//!
//! Every object added since the last `execute` moves through
//! `New → (Lookup(bucket)…) → Fetch → Done` ([`crate::onever::index_walk`]); all advance
//! together, one round trip per round. A read-set record found by a bucket READ is taken
//! out of that bucket (its lease starts at the bucket READ's post).

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::layout::{intention, write_locked, SlotView, Words, W};
use super::{lease_now, Oocc, OoccVariant};
use crate::onever::index_walk::{self, Found, Stage};

/// Rounds one `execute` may take before something is wrong (a chain longer than the
/// overflow space, or a livelock).
const ROUNDS_MAX: u32 = 64;

/// What an unlocked READ of a record found.
enum Seen {
    /// Intact and not write-locked.
    Ok,
    /// Write-locked: §III-B case 2.2, abort.
    WriteLocked,
    /// A mixture of two commits (the checksum fails): read again.
    Torn,
}

fn check_read(slot: &[u8], words: Words, value_len: usize, variant: OoccVariant) -> Seen {
    let detector = variant != OoccVariant::NoVersionCopy;
    if words.lock_of(slot) & W != 0 {
        Seen::WriteLocked
    } else if detector && !words.intact(slot, value_len) {
        Seen::Torn
    } else {
        Seen::Ok
    }
}

pub(super) async fn execute(txn: &mut Txn<'_, Oocc>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    if c.cn_state.control.stopped.load(std::sync::atomic::Ordering::Acquire) {
        // §VII-B: this node's clock ran off the bound; it commits nothing more.
        return Err(Abort::new(AbortReason::Protocol(super::ABORT_CLOCK_STOPPED)));
    }
    let start = c.set.fetched;
    let n = c.set.objs.len();
    if start == 0 {
        c.state.undo.clear();
    }
    let use_cache = c.proto.config().addr_cache;
    for o in &mut c.set.objs[start..n] {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let cached = if use_cache {
            c.ctx.cache.get(o.table, o.key)
        } else {
            None
        };
        o.proto.stage = match (o.access, cached) {
            (Access::Insert, _) | (_, None) => Stage::Lookup(info.shape.home_bucket(o.key)),
            (_, Some(rel)) => {
                o.proto.rel = rel;
                Stage::Fetch
            }
        };
    }

    let owner = c.state.owner;
    let reread_max = c.proto.config().reread_max;
    let variant = c.proto.config().variant;
    let proto = c.proto.clone();
    // The execution CAS takes the intention lock, or the write lock when the delayed
    // write lock is off (§IV ablation).
    let take = if proto.config().delayed_lock {
        intention(owner)
    } else {
        write_locked(owner)
    };
    for _round in 0..ROUNDS_MAX {
        let c = &mut *txn.coord;
        let post = &mut c.state.post;
        post.clear();
        let walks = &mut c.state.insert_walks;
        walks.rebuild(&c.set.objs, &c.ctx.catalog);
        let mut intentions = false;
        for o in &mut c.set.objs[start..n] {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            let shape = &info.shape;
            let p = &mut o.proto;
            p.read = None;
            p.cas = None;
            match p.stage {
                Stage::Done | Stage::New => {}
                Stage::Lookup(b) => {
                    let what = (o.table, o.access);
                    if let Some((cas, read)) = walks.post_lookup(post, info, what, b, &mut p.walk, 0, owner) {
                        p.cas = cas;
                        p.read = Some(read);
                    }
                }
                Stage::Fetch if p.walk.reserving() => {
                    p.cas = Some(index_walk::post_reserve(post, info));
                }
                Stage::Fetch => {
                    if o.access.writes() && !p.holds.locked {
                        index_walk::post_link(post, info, &p.walk);
                        let lock_at = proto.words(shape.slot_bytes).lock as u64;
                        p.cas = Some(post.cas(info.ptr(0, p.rel + lock_at), 0, take));
                        intentions = true;
                    }
                    p.read = Some(post.read(info.ptr(0, p.rel), shape.slot_bytes as usize));
                }
            }
        }
        if post.is_empty() {
            c.set.fetched = n;
            return Ok(());
        }
        c.ctx.step(super::STEP_EXECUTE, (n - start) as u32);
        // The lease of every record this round returns starts here (before the post, so
        // before any READ runs), with the read-validate lease in use now (lease
        // invariant 2).
        let post_ns = c.ctx.clock.now_ns();
        let rv_ns = lease_now(&c.cn_state).rv_ns;
        if c.ctx.post(&mut c.state.post).await.is_err() {
            let c = &mut *txn.coord;
            // Every table's slot has its lock word at the same place relative to its
            // end or its start, so give back per table.
            c.state.bg.clear();
            for o in c.set.objs[start..n].iter().filter(|o| o.proto.cas.is_some()) {
                let info = c.ctx.catalog.get(o.table).expect("table checked at add");
                let lock_at = proto.words(info.shape.slot_bytes).lock as u64;
                let mut one = dmtx_verbs::Post::new();
                index_walk::give_back_round(
                    &mut one,
                    std::slice::from_ref(o),
                    &c.ctx.catalog,
                    intention(owner),
                    lock_at,
                );
                c.ctx.post_background(&mut one);
            }
            return Err(Abort::new(AbortReason::Fault));
        }
        let c = &mut *txn.coord;
        // c1 of this round, and D once the last intention CAS is seen complete.
        let done_ns = c.ctx.clock.now_ns();
        c.state.done_ns = done_ns;
        if intentions {
            c.state.deadline_ns = done_ns + lease_now(&c.cn_state).ww_ns as u64;
        }

        let post = &c.state.post;
        let bg = &mut c.state.bg;
        bg.clear();
        let layout = dmtx_runtime::Protocol::layout(c.proto.as_ref());
        let mut result = Ok(());
        let claimed = &mut c.state.claimed;
        index_walk::note_claimed(claimed, &c.set.objs);
        for i in start..n {
            let o = &mut c.set.objs[i];
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            let shape = &info.shape;
            let value_len = o.value_len as usize;
            let (table, key, access) = (o.table, o.key, o.access);
            let words = proto.words(shape.slot_bytes);
            let p = &mut o.proto;
            let mut copy_from: Option<&[u8]> = None;
            match p.stage {
                Stage::Done | Stage::New => continue,
                Stage::Lookup(_) if p.read.is_none() => continue,
                Stage::Lookup(b) => {
                    let read = p.read.expect("lookup posts a read");
                    let ids = (p.cas, read);
                    let (walk, bucket_lock) = (&mut p.walk, &mut p.holds.bucket_lock);
                    let cache = use_cache.then_some(&*c.ctx.cache);
                    match index_walk::on_lookup(
                        post,
                        info,
                        layout,
                        cache,
                        (table, key, access),
                        b,
                        ids,
                        walk,
                        bucket_lock,
                        &|rel| claimed.contains(&(table, rel)),
                    ) {
                        Found::At { rel, slot } => {
                            p.rel = rel;
                            p.stage = Stage::Fetch;
                            if access == Access::ReadOnly {
                                let v = SlotView(slot);
                                match check_read(slot, words, value_len, variant) {
                                    Seen::Ok => {
                                        p.version = v.version();
                                        p.lock_seen = words.lock_of(slot);
                                        p.post_ns = post_ns;
                                        p.rv_ns = rv_ns;
                                        p.stage = Stage::Done;
                                        copy_from = Some(v.value(value_len));
                                    }
                                    Seen::WriteLocked => {
                                        result = Err(Abort::new(AbortReason::LockConflict));
                                        continue;
                                    }
                                    Seen::Torn => {} // fetched again next round
                                }
                            }
                        }
                        Found::Next(next) => p.stage = Stage::Lookup(next),
                        Found::End(free) => {
                            p.stage = Stage::Fetch;
                            if let Some(rel) = free {
                                p.rel = rel;
                            }
                        }
                        Found::Abort(reason) => {
                            result = Err(Abort::new(reason));
                            continue;
                        }
                    }
                }
                Stage::Fetch if p.walk.reserving() => {
                    let reserved = post.old(p.cas.expect("overflow posts an FAA"));
                    let Some(rel) = index_walk::on_reserve(shape, &mut p.walk, reserved) else {
                        c.ctx.last_table_full = Some(table);
                        result = Err(Abort::new(AbortReason::TableFull));
                        continue;
                    };
                    p.rel = rel;
                }
                Stage::Fetch => {
                    let slot = post.bytes(p.read.expect("fetch posts a read"));
                    let v = SlotView(slot);
                    if let Some(cas) = p.cas {
                        p.walk.linked();
                        if post.old(cas) != 0 {
                            result = Err(Abort::new(AbortReason::LockConflict));
                            continue;
                        }
                        p.holds.locked = true;
                    }
                    if access == Access::Insert {
                        if v.occupied() {
                            result = Err(Abort::new(AbortReason::LockConflict));
                            continue;
                        }
                        p.version = v.version();
                        p.undo_at = c.state.undo.len() as u32;
                        c.state.undo.extend_from_slice(v.image());
                        p.stage = Stage::Done;
                    } else if v.live_key() != Some(key) {
                        // Stale cached address: the slot was reused. Give back its lock
                        // (wherever the layout keeps it) and walk the chain.
                        if std::mem::take(&mut p.holds.locked) {
                            bg.write(info.ptr(0, p.rel + words.lock as u64), &0u64.to_le_bytes());
                        }
                        p.stage = index_walk::evict_stale(&c.ctx.cache, bg, info, (table, key), p.rel, &mut false);
                    } else if access.writes() {
                        // Layout invariant 2: we took the lock from 0 and READ behind our
                        // CAS, so no commit's data WRITE lands after it; but the READ may
                        // have begun while the previous holder's commit WRITE was still in
                        // service (the simulator's tear model overlaps service intervals),
                        // so a torn image is read again under the lock we hold.
                        if words.intact(slot, value_len) {
                            p.version = v.version();
                            p.undo_at = c.state.undo.len() as u32;
                            c.state.undo.extend_from_slice(v.image());
                            p.stage = Stage::Done;
                            copy_from = Some(v.value(value_len));
                        } else {
                            p.rereads += 1;
                            c.ctx.metric(super::METRIC_REREADS, 1);
                            if p.rereads > reread_max {
                                result = Err(Abort::new(AbortReason::Torn));
                                continue;
                            }
                        }
                    } else {
                        match check_read(slot, words, value_len, variant) {
                            Seen::Ok => {
                                p.version = v.version();
                                p.lock_seen = words.lock_of(slot);
                                p.post_ns = post_ns;
                                p.rv_ns = rv_ns;
                                p.stage = Stage::Done;
                                copy_from = Some(v.value(value_len));
                            }
                            Seen::WriteLocked => {
                                result = Err(Abort::new(AbortReason::LockConflict));
                                continue;
                            }
                            Seen::Torn => {
                                p.rereads += 1;
                                c.ctx.metric(super::METRIC_REREADS, 1);
                                if p.rereads > reread_max {
                                    result = Err(Abort::new(AbortReason::Torn));
                                    continue;
                                }
                            }
                        }
                    }
                }
            }
            if p.stage == Stage::Done && access != Access::Insert {
                o.version_read = Some(p.version);
            }
            if let Some(src) = copy_from {
                c.set.value_mut(i).copy_from_slice(src);
            }
        }
        c.ctx.post_background(&mut c.state.bg);
        result?;
    }
    panic!("execute did not finish in {ROUNDS_MAX} rounds: bucket chains longer than the overflow space?");
}
