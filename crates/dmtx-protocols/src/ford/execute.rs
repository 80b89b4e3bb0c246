//! Execution phase: hitchhiked locking and (backup-enabled) reads, FORD §4.2, §4.4, §5.1.
//!
//! Every object added since the last `execute` moves through
//! `New → (Lookup(bucket)…) → Fetch → Done`; all objects advance together, one round
//! trip per round, so a warm address cache costs exactly one round trip.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};
use dmtx_store::{scan_bucket, BUCKET_LOCK_OFFSET, BUCKET_NEXT_OFFSET, OVERFLOW_CURSOR_OFFSET};

use super::layout::{SlotView, INVISIBLE, VLOCK};
use super::{Ford, FordVariant, Stage};

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

pub(super) async fn execute(txn: &mut Txn<'_, Ford>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let start = c.set.fetched;
    let n = c.set.objs.len();
    if start == 0 {
        c.state.undo.clear();
    }
    let backup_read = c.proto.config().backup_read;
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
    let reread_max = c.proto.config().reread_max;
    let variant = c.proto.config().variant;
    for _round in 0..ROUNDS_MAX {
        let c = &mut *txn.coord;
        let post = &mut c.state.post;
        post.clear();
        for o in &mut c.set.objs[start..n] {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            let shape = &info.shape;
            let p = &mut o.proto;
            p.read = None;
            p.cas = None;
            match p.stage {
                Stage::Done | Stage::New => {}
                Stage::Lookup(b) => {
                    let r = p.replica as usize;
                    if o.access == Access::Insert && p.bucket_lock.is_none() {
                        // Inserters serialize per home bucket: no two can claim two free
                        // slots for the same key.
                        let at = shape.bucket_off(b) + BUCKET_LOCK_OFFSET;
                        p.cas = Some(post.cas(info.ptr(0, at), 0, lock));
                    }
                    p.read = Some(post.read(info.ptr(r, shape.bucket_off(b)), shape.bucket_bytes as usize));
                }
                Stage::Fetch if p.new_overflow == Some(u64::MAX) => {
                    // Reserve an overflow bucket (FORD's RS-Ptr), one FAA on the primary.
                    p.cas = Some(post.faa(info.ptr(0, OVERFLOW_CURSOR_OFFSET), 1));
                }
                Stage::Fetch => {
                    if o.access.writes() && !p.locked {
                        if let Some(ov) = p.new_overflow {
                            // Link the reserved bucket on every replica before locking its
                            // first slot; we hold the chain's insert lock.
                            let link = shape.bucket_off(p.last_bucket) + BUCKET_NEXT_OFFSET;
                            for r in 0..info.replica_count() {
                                post.write(info.ptr(r, link), &(ov + 1).to_le_bytes());
                            }
                        }
                        p.cas = Some(post.cas(info.ptr(0, p.rel + VLOCK as u64), 0, lock));
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
            // Which ops of a failed post ran is unknown: give back every lock this round
            // may have taken, by CAS so a lock we never got is left alone.
            let c = &mut *txn.coord;
            c.state.bg.clear();
            for o in &c.set.objs[start..n] {
                let info = c.ctx.catalog.get(o.table).expect("table checked at add");
                let word = match o.proto.stage {
                    Stage::Lookup(b) if o.proto.cas.is_some() => info.shape.bucket_off(b) + BUCKET_LOCK_OFFSET,
                    Stage::Fetch if o.proto.cas.is_some() && o.proto.new_overflow != Some(u64::MAX) => {
                        o.proto.rel + VLOCK as u64
                    }
                    _ => continue,
                };
                c.state.bg.cas(info.ptr(0, word), lock, 0);
            }
            c.ctx.post_background(&mut c.state.bg);
            return Err(abort(AbortReason::Fault));
        }

        let c = &mut *txn.coord;
        let post = &c.state.post;
        let bg = &mut c.state.bg;
        bg.clear();
        let layout = dmtx_runtime::Protocol::layout(c.proto.as_ref());
        let mut result = Ok(());
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
                Stage::Lookup(b) => {
                    if let Some(cas) = p.cas {
                        if post.old(cas) != 0 {
                            result = Err(abort(AbortReason::LockConflict));
                            continue;
                        }
                        p.bucket_lock = Some(shape.bucket_off(b));
                    }
                    let bucket = post.bytes(p.read.expect("lookup posts a read"));
                    let scan = scan_bucket(shape, layout, bucket, key);
                    if let Some(s) = scan.found {
                        if access == Access::Insert {
                            result = Err(abort(AbortReason::Duplicate));
                            continue;
                        }
                        p.rel = shape.slot_off(b, s);
                        c.ctx.cache.put(table, key, p.rel);
                        p.stage = Stage::Fetch;
                        if access == Access::ReadOnly {
                            // The bucket READ returned the record itself: no second trip.
                            let at = (p.rel - shape.bucket_off(b)) as usize;
                            let slot = &bucket[at..at + shape.slot_bytes as usize];
                            let v = SlotView(slot);
                            if let Seen::Ok = check_unlocked_read(v, value_len, variant) {
                                p.version = v.version();
                                p.stage = Stage::Done;
                                copy_from = Some(v.value(value_len));
                            }
                        }
                    } else {
                        if access == Access::Insert && p.free_rel.is_none() {
                            p.free_rel = scan.free.map(|f| shape.slot_off(b, f));
                        }
                        match (scan.next, access) {
                            (Some(next), _) => p.stage = Stage::Lookup(next),
                            (None, Access::Insert) => {
                                p.last_bucket = b;
                                p.stage = Stage::Fetch;
                                match p.free_rel {
                                    Some(rel) => p.rel = rel,
                                    None => p.new_overflow = Some(u64::MAX),
                                }
                            }
                            (None, _) => {
                                result = Err(abort(AbortReason::NotFound));
                                continue;
                            }
                        }
                    }
                }
                Stage::Fetch if p.new_overflow == Some(u64::MAX) => {
                    let reserved = post.old(p.cas.expect("overflow posts an FAA"));
                    if reserved >= shape.overflow_count {
                        p.new_overflow = None;
                        c.ctx.last_table_full = Some(table);
                        result = Err(abort(AbortReason::TableFull));
                        continue;
                    }
                    let idx = shape.overflow_bucket(reserved);
                    p.new_overflow = Some(reserved);
                    p.rel = shape.slot_off(idx, 0);
                }
                Stage::Fetch => {
                    let v = SlotView(post.bytes(p.read.expect("fetch posts a read")));
                    if let Some(cas) = p.cas {
                        p.new_overflow = None;
                        if post.old(cas) != 0 {
                            result = Err(abort(AbortReason::LockConflict));
                            continue;
                        }
                        p.locked = true;
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
                        c.ctx.cache.evict(table, key, p.rel);
                        if p.locked {
                            bg.write(info.ptr(0, p.rel + VLOCK as u64), &0u64.to_le_bytes());
                            p.locked = false;
                        }
                        p.stage = Stage::Lookup(shape.home_bucket(key));
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
                        match check_unlocked_read(v, value_len, variant) {
                            Seen::Ok => {
                                p.version = v.version();
                                p.stage = Stage::Done;
                                copy_from = Some(v.value(value_len));
                            }
                            seen => {
                                p.rereads += 1;
                                if p.rereads > reread_max {
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
    }
    panic!("execute did not finish in {ROUNDS_MAX} rounds: bucket chains longer than the overflow space?");
}
