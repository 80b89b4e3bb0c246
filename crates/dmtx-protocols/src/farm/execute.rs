//! Execution phase: lock-free reads of primaries, FORD §2.3 (FaRM's execution), §3.2.
//!
//! Every object added since the last `execute` moves through
//! `New → (Lookup(bucket)…) → Fetch → Done` ([`crate::onever::index_walk`]); all objects
//! advance together, one round trip per round. FaRM's decisions here: every object is
//! read from its primary without a lock (the write set is locked at commit), an object
//! found by a bucket READ is taken out of that bucket, and only an insert locks during
//! execution: the free slot it picked (§3.2). DrTM+H executes the same way (§4.2), so
//! this is the FaRM family's ([`super::RedoFamily`]).

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::RedoFamily;
use crate::onever::index_walk::{self, Found, Stage};
use crate::onever::record::{SlotView, VLOCK};

/// Rounds one `execute` may take before something is wrong (a chain longer than the
/// overflow space, or a livelock).
const ROUNDS_MAX: u32 = 64;

fn abort(reason: AbortReason) -> Abort {
    Abort::new(reason)
}

/// Whether a lock-free read returned a whole record (FaRM never marks records
/// invisible: a locked record is read as it is, and validation or the lock round
/// rejects it if it changes).
fn intact(v: SlotView<'_>, value_len: usize) -> bool {
    v.intact(value_len)
}

pub(crate) async fn execute<P: RedoFamily>(txn: &mut Txn<'_, P>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let start = c.set.fetched;
    let n = c.set.objs.len();
    if start == 0 {
        c.state.undo.clear();
    }
    let use_cache = c.proto.addr_cache();
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

    let lock = c.state.lock;
    let reread_max = c.proto.reread_max();
    for _round in 0..ROUNDS_MAX {
        let c = &mut *txn.coord;
        let post = &mut c.state.post;
        post.clear();
        // Inserts homing to one bucket walk its chain one at a time (`InsertWalks`).
        let walks = &mut c.state.insert_walks;
        walks.rebuild(&c.set.objs, &c.ctx.catalog);
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
                    if let Some((cas, read)) = walks.post_lookup(post, info, what, b, &mut p.walk, 0, lock) {
                        p.cas = cas;
                        p.read = Some(read);
                    }
                }
                Stage::Fetch if p.walk.reserving() => {
                    p.cas = Some(index_walk::post_reserve(post, info));
                }
                Stage::Fetch => {
                    if o.access == Access::Insert && !p.holds.locked {
                        // A reserved overflow bucket is linked before its first slot is
                        // locked; we hold the chain's insert lock.
                        index_walk::post_link(post, info, &p.walk);
                        p.cas = Some(post.cas(info.ptr(0, p.rel + VLOCK as u64), 0, lock));
                    }
                    p.read = Some(post.read(info.ptr(0, p.rel), shape.slot_bytes as usize));
                }
            }
        }
        if post.is_empty() {
            c.set.fetched = n;
            return Ok(());
        }
        // Building each record's ops, then checking its slot: the simulator's CPU model.
        c.ctx.step(P::STEP_EXECUTE, (n - start) as u32);
        if c.ctx.post(&mut c.state.post).await.is_err() {
            let c = &mut *txn.coord;
            index_walk::give_back_round(
                &mut c.state.bg,
                &c.set.objs[start..n],
                &c.ctx.catalog,
                lock,
                VLOCK as u64,
            );
            c.ctx.post_background(&mut c.state.bg);
            return Err(abort(AbortReason::Fault));
        }

        let c = &mut *txn.coord;
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
            let p = &mut o.proto;
            let mut copy_from: Option<&[u8]> = None;
            match p.stage {
                Stage::Done | Stage::New => continue,
                Stage::Lookup(_) if p.read.is_none() => continue, // waiting for a sibling's insert lock
                Stage::Lookup(b) => {
                    let read = p.read.expect("lookup posts a read");
                    let ids = (p.cas, read);
                    let (walk, bucket_lock) = (&mut p.walk, &mut p.holds.bucket_lock);
                    match index_walk::on_lookup(
                        post,
                        info,
                        layout,
                        use_cache.then_some(&c.ctx.cache),
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
                            if access != Access::Insert {
                                // The bucket READ returned the record itself: no second trip.
                                let v = SlotView(slot);
                                if intact(v, value_len) {
                                    p.version = v.version();
                                    p.seq = v.seq();
                                    p.read_unlocked = v.vlock() == 0;
                                    p.stage = Stage::Done;
                                    if access.writes() {
                                        p.undo_at = c.state.undo.len() as u32;
                                        c.state.undo.extend_from_slice(v.image());
                                    }
                                    copy_from = Some(v.value(value_len));
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
                            result = Err(abort(reason));
                            continue;
                        }
                    }
                }
                Stage::Fetch if p.walk.reserving() => {
                    let reserved = post.old(p.cas.expect("overflow posts an FAA"));
                    let Some(rel) = index_walk::on_reserve(shape, &mut p.walk, reserved) else {
                        c.ctx.last_table_full = Some(table);
                        result = Err(abort(AbortReason::TableFull));
                        continue;
                    };
                    p.rel = rel;
                }
                Stage::Fetch => {
                    let v = SlotView(post.bytes(p.read.expect("fetch posts a read")));
                    if let Some(cas) = p.cas {
                        p.walk.linked();
                        if post.old(cas) != 0 {
                            result = Err(abort(AbortReason::LockConflict));
                            continue;
                        }
                        p.holds.locked = true;
                    }
                    if access == Access::Insert {
                        if v.occupied() {
                            result = Err(abort(AbortReason::LockConflict));
                            continue;
                        }
                        p.version = v.version();
                        p.seq = v.seq();
                        p.undo_at = c.state.undo.len() as u32;
                        c.state.undo.extend_from_slice(v.image());
                        p.stage = Stage::Done;
                    } else if intact(v, value_len) && v.live_key() != Some(key) {
                        // Stale cached address (§4.2): the slot was reused. Walk the
                        // bucket chain instead.
                        p.stage =
                            index_walk::evict_stale(&c.ctx.cache, bg, info, (table, key), p.rel, &mut p.holds.locked);
                    } else if intact(v, value_len) {
                        p.version = v.version();
                        p.seq = v.seq();
                        p.read_unlocked = v.vlock() == 0;
                        p.stage = Stage::Done;
                        if access.writes() {
                            p.undo_at = c.state.undo.len() as u32;
                            c.state.undo.extend_from_slice(v.image());
                        }
                        copy_from = Some(v.value(value_len));
                    } else {
                        p.rereads += 1;
                        c.ctx.metric(super::METRIC_REREADS, 1);
                        if p.rereads > reread_max {
                            result = Err(abort(AbortReason::Torn));
                            continue;
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
