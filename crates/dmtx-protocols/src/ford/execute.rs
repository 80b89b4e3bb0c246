//! Execution phase: hitchhiked locking and (backup-enabled) reads, FORD §4.2, §4.4, §5.1.
//!
//! Every object added since the last `execute` moves through
//! `New → (Lookup(bucket)…) → Fetch → Done` ([`crate::onever::index_walk`]); all objects
//! advance together, one round trip per round, so a warm address cache costs exactly one
//! round trip. FORD's own decisions here: a writer's `Fetch` locks the slot in the same
//! batch as its READ (hitchhiking), read-only objects read from a backup, and a
//! read-only object found by a bucket READ is taken out of that bucket.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::layout::{SlotView, INVISIBLE, VLOCK};
use super::{FordBase, FordVariant};
use crate::onever::index_walk::{self, Found, Stage};
use crate::onever::lock_time;

/// Rounds one `execute` may take before something is wrong (a chain longer than the
/// overflow space, or a livelock).
const ROUNDS_MAX: u32 = 64;

fn abort(reason: AbortReason) -> Abort {
    Abort::new(reason)
}

/// What a lock-free read of a slot found.
enum Seen {
    Ok,
    Invisible,
    Torn,
}

fn check_unlocked_read(v: SlotView<'_>, value_len: usize, variant: FordVariant) -> Seen {
    let detector = variant != FordVariant::NoTearDetector;
    if v.vlock() & INVISIBLE != 0 && variant != FordVariant::ReadInvisible {
        Seen::Invisible
    } else if detector && !v.intact(value_len) {
        Seen::Torn
    } else {
        Seen::Ok
    }
}

pub(crate) async fn execute<P: FordBase>(txn: &mut Txn<'_, P>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let start = c.set.fetched;
    let n = c.set.objs.len();
    if start == 0 {
        c.state.undo.clear();
    }
    // A declared lone read goes to the primary, whose lock word tells whether it may
    // skip validation (`validate.rs`).
    let hints = c.set.hints;
    let lone_read = start == 0
        && n == 1
        && hints.read_only
        && hints.keys_declared
        && !c.proto.ford_config().variant.papers_lone_read();
    let backup_read = c.proto.ford_config().backup_read && !lone_read;
    let spread = c.ctx.id.thread as usize + c.ctx.id.coroutine as usize;
    for o in &mut c.set.objs[start..n] {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let replicas = info.replica_count();
        o.proto.replica = if o.access == Access::ReadOnly && backup_read && replicas > 1 {
            (1 + spread % (replicas - 1)) as u8
        } else {
            0
        };
        o.proto.stage = match (o.access, c.ctx.cache.get(o.table, o.key)) {
            (Access::Insert, _) | (_, None) => Stage::Lookup(info.shape.home_bucket(o.key)),
            (_, Some(rel)) => {
                o.proto.rel = rel;
                Stage::Fetch
            }
        };
    }

    let lock = c.state.lock;
    let reread_max = c.proto.ford_config().reread_max;
    let variant = c.proto.ford_config().variant;
    let wait_us = c.proto.ford_config().lock_wait_us;
    // Rounds that only retried a lock (wait mode) are bounded by `lock_wait_us`, not here.
    let mut rounds = 0;
    while rounds < ROUNDS_MAX {
        let c = &mut *txn.coord;
        let timed = lock_time::timed(c.set.txn_seq, wait_us);
        let now = if timed { c.ctx.clock.now_ns() } else { 0 };
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
                    if let Some((cas, read)) =
                        walks.post_lookup(post, info, what, b, &mut p.walk, p.replica as usize, lock)
                    {
                        p.cas = cas;
                        p.read = Some(read);
                    }
                }
                Stage::Fetch if p.walk.reserving() => {
                    p.cas = Some(index_walk::post_reserve(post, info));
                }
                Stage::Fetch if p.holds.times.polling() => {
                    // Wait mode: poll the lock word until it is clear (`lock_time`).
                    p.read = Some(post.read(info.ptr(0, p.rel + VLOCK as u64), 8));
                }
                Stage::Fetch => {
                    if o.access.writes() && !p.holds.locked {
                        // A reserved overflow bucket is linked before its first slot is
                        // locked; we hold the chain's insert lock.
                        index_walk::post_link(post, info, &p.walk);
                        p.cas = Some(post.cas(info.ptr(0, p.rel + VLOCK as u64), 0, lock));
                        if timed {
                            p.holds.times.asking(now);
                        }
                    }
                    let r = if o.access.writes() { 0 } else { p.replica as usize };
                    p.read = Some(post.read(info.ptr(r, p.rel), shape.slot_bytes as usize));
                }
            }
        }
        if post.is_empty() {
            c.set.fetched = n;
            return Ok(());
        }
        // Building each record's ops, then checking its slot: the simulator's CPU model.
        c.ctx.step(super::STEP_EXECUTE, (n - start) as u32);
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
        let now = if timed { c.ctx.clock.now_ns() } else { 0 };
        let mut waiting = false;
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
                        Some(&c.ctx.cache),
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
                                // The bucket READ returned the record itself: no second trip.
                                let v = SlotView(slot);
                                if let Seen::Ok = check_unlocked_read(v, value_len, variant) {
                                    p.version = v.version();
                                    p.read_unlocked = p.replica == 0 && v.vlock() == 0;
                                    p.stage = Stage::Done;
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
                Stage::Fetch if p.holds.times.polling() => {
                    let b = post.bytes(p.read.expect("a poll posts a read"));
                    let word = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
                    if p.holds.times.polled(word, now, wait_us) {
                        waiting = true;
                    } else {
                        result = Err(abort(AbortReason::LockConflict));
                    }
                    continue;
                }
                Stage::Fetch => {
                    let v = SlotView(post.bytes(p.read.expect("fetch posts a read")));
                    if let Some(cas) = p.cas {
                        p.walk.linked();
                        if post.old(cas) != 0 {
                            if access != Access::Insert && p.holds.times.refused(now, wait_us) {
                                waiting = true;
                            } else {
                                result = Err(abort(AbortReason::LockConflict));
                            }
                            continue;
                        }
                        p.holds.locked = true;
                        if timed {
                            p.holds.times.taken(now);
                        }
                    }
                    if access == Access::Insert {
                        if v.occupied() {
                            result = Err(abort(AbortReason::LockConflict));
                            continue;
                        }
                        p.version = v.version();
                        p.undo_at = c.state.undo.len() as u32;
                        c.state.undo.extend_from_slice(v.image());
                        p.stage = Stage::Done;
                    } else if v.live_key() != Some(key) {
                        // Stale cached address (§4.2): the slot was reused. Let go of it
                        // and walk the bucket chain instead.
                        p.stage =
                            index_walk::evict_stale(&c.ctx.cache, bg, info, (table, key), p.rel, &mut p.holds.locked);
                    } else if access.writes() {
                        // Invariant 2: we took the lock from 0, so nobody is writing (the
                        // broken early-unlock variant breaks exactly this).
                        debug_assert!(
                            variant == FordVariant::UnlockBeforeCommitWrite || v.intact(value_len),
                            "locked record of table {table} key {key} is torn"
                        );
                        p.version = v.version();
                        p.undo_at = c.state.undo.len() as u32;
                        c.state.undo.extend_from_slice(v.image());
                        p.stage = Stage::Done;
                        copy_from = Some(v.value(value_len));
                    } else {
                        let seen = check_unlocked_read(v, value_len, variant);
                        if p.invisible_at_ns != 0 && !matches!(seen, Seen::Invisible) {
                            let ns = c.ctx.clock.now_ns().saturating_sub(p.invisible_at_ns);
                            c.ctx.metric_ns(super::METRIC_INVISIBLE_NS, ns);
                            p.invisible_at_ns = 0;
                        }
                        match seen {
                            Seen::Ok => {
                                p.version = v.version();
                                p.read_unlocked = p.replica == 0 && v.vlock() == 0;
                                p.stage = Stage::Done;
                                copy_from = Some(v.value(value_len));
                            }
                            seen => {
                                p.rereads += 1;
                                c.ctx.metric(super::METRIC_REREADS, 1);
                                if matches!(seen, Seen::Invisible) && p.invisible_at_ns == 0 {
                                    p.invisible_at_ns = c.ctx.clock.now_ns().max(1);
                                }
                                if p.rereads > reread_max {
                                    if p.invisible_at_ns != 0 {
                                        let ns = c.ctx.clock.now_ns().saturating_sub(p.invisible_at_ns);
                                        c.ctx.metric_ns(super::METRIC_INVISIBLE_NS, ns);
                                    }
                                    result = Err(abort(match seen {
                                        Seen::Invisible => AbortReason::Invisible,
                                        _ => AbortReason::Torn,
                                    }));
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
        if !waiting {
            rounds += 1;
        }
    }
    panic!("execute did not finish in {ROUNDS_MAX} rounds: bucket chains longer than the overflow space?");
}
