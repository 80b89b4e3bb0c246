//! Motor's execution, validation and commit (§5.1–5.2). See the module doc.

use std::sync::Arc;

use dmtx_runtime::timestamp::TimestampService;
use dmtx_runtime::{Abort, AbortReason, Access, CommitTs, Coordinator, TsError};
use dmtx_store::{
    attrs_bytes, attrs_changed, pack_attrs, unpack_attrs, TableInfo, BUCKET_LOCK_OFFSET, BUCKET_NEXT_OFFSET,
    OVERFLOW_CURSOR_OFFSET,
};
use dmtx_verbs::{AtomicId, Post, ReadId, VerbError};

use super::layout::{self, cell_off, Cvt, Pick, Vcell, FIRST, H_BAR, H_LOCK, TOMBSTONE};
use super::{
    Hold, Motor, MotorVariant, Stage, METRIC_BAR_RECLAIMS, METRIC_GC_OVERWRITES, METRIC_OLD_READS, METRIC_OPLOG_BYTES,
    METRIC_REREADS, METRIC_TS_UNRESOLVED, R_ANCHOR, R_DELTA_FULL, R_NEWER, R_SESSION_LAG, R_VERSION_GONE,
};

/// Longest a watermark snapshot waits for the coordinator's own last commit.
const SESSION_WAIT_MAX_NS: u64 = 20_000_000;
/// Pause between two watermark reads while waiting.
const SESSION_WAIT_NS: u64 = 1_000;
/// Install posts tried before a committed transaction gives up (faults).
const INSTALL_TRIES_MAX: u32 = 50;
/// Pause between install tries.
const INSTALL_RETRY_NS: u64 = 10_000;
/// Rounds of one `execute` before it gives up (a walk that never ends).
const ROUNDS_MAX: u32 = 64;

fn abort(reason: AbortReason) -> Abort {
    Abort::new(reason)
}

fn fault(_: VerbError) -> Abort {
    abort(AbortReason::Fault)
}

fn ts_fault(_: TsError) -> Abort {
    abort(AbortReason::Fault)
}

fn proto(r: u8) -> Abort {
    abort(AbortReason::Protocol(r))
}

/// Whether the transaction reads at the watermark (module doc).
fn watermark_snapshot(c: &Coordinator<Motor>) -> bool {
    let read_only = c.set.hints.read_only;
    if c.proto.cfg.variant == MotorVariant::RawStartForRo {
        return c.proto.cfg.si;
    }
    read_only || c.proto.cfg.si
}

/// Take the snapshot: `start_ts` is the largest version it sees.
async fn snapshot(c: &mut Coordinator<Motor>) -> Result<u64, Abort> {
    if !watermark_snapshot(c) {
        let t = c.state.ts.next(&mut c.ctx).await.map_err(ts_fault)?;
        return Ok(t - 1);
    }
    let clock = Arc::clone(&c.ctx.clock);
    let began = clock.now_ns();
    loop {
        let w = c.state.ts.watermark(&mut c.ctx).await.map_err(ts_fault)?;
        if w >= c.state.session_floor {
            return Ok(w);
        }
        if clock.now_ns() - began > SESSION_WAIT_MAX_NS {
            return Err(proto(R_SESSION_LAG));
        }
        dmtx_runtime::sleep(&*clock, SESSION_WAIT_NS).await;
    }
}

/// A verb of one object's round.
#[derive(Copy, Clone, Debug, Default)]
struct Ops {
    cas: Option<AtomicId>,
    bucket_cas: Option<AtomicId>,
    cvt: Option<ReadId>,
    vpkg: Option<ReadId>,
    /// The overflow cursor's FAA, or the link's CAS.
    atomic: Option<AtomicId>,
    /// First index into the round's attribute reads.
    attrs_from: usize,
    attrs_to: usize,
}

fn home_bucket_lock(info: &TableInfo, key: u64) -> (u64, u64) {
    let b = info.shape.home_bucket(key);
    (b, info.shape.bucket_off(b) + BUCKET_LOCK_OFFSET)
}

/// Fetch every object added since the last call (§5.1 Phase 1).
pub(crate) async fn execute(c: &mut Coordinator<Motor>) -> Result<(), Abort> {
    let snap = match c.set.start_ts {
        Some(s) => s,
        None => {
            reset(c);
            let s = snapshot(c).await?;
            c.set.start_ts = Some(s);
            s
        }
    };
    let (from, n) = (c.set.fetched, c.set.objs.len());
    let catalog = Arc::clone(&c.ctx.catalog);
    let me = c.state.me;
    let si = c.proto.cfg.si;
    let variant = c.proto.cfg.variant;
    let reread_max = c.proto.cfg.reread_max;
    // SR read-write transactions abort early on a newer version of any record (§5.1).
    let early_abort = !si && !c.set.hints.read_only;
    // Insert siblings homing to one bucket share the first one's insert lock.
    for i in from..n {
        let o = &c.set.objs[i];
        if o.access != Access::Insert {
            continue;
        }
        let info = catalog.get(o.table).unwrap();
        let home = info.shape.home_bucket(o.key);
        let shares = c.set.objs[..i].iter().any(|p| {
            p.access == Access::Insert
                && p.table == o.table
                && catalog.get(p.table).unwrap().shape.home_bucket(p.key) == home
        });
        c.set.objs[i].proto.shares_bucket_lock = shares;
    }
    let mut round = 0;
    let mut post = Post::new();
    let mut attr_reads: Vec<ReadId> = Vec::new();
    let mut ops: Vec<(usize, Ops)> = Vec::new();
    loop {
        round += 1;
        post.clear();
        attr_reads.clear();
        ops.clear();
        for i in from..n {
            let o = &mut c.set.objs[i];
            let info = catalog.get(o.table).unwrap();
            let shape = &info.shape;
            if o.proto.stage == Stage::New {
                o.proto.stage = match (o.access, c.ctx.cache.get(o.table, o.key)) {
                    (Access::Insert, _) | (_, None) => Stage::Bucket(shape.home_bucket(o.key)),
                    (_, Some(rel)) => {
                        o.proto.rel = Some(rel);
                        Stage::Cvt
                    }
                };
            }
            let mut op = Ops::default();
            match o.proto.stage {
                Stage::New => unreachable!(),
                Stage::Done => continue,
                Stage::Bucket(b) => {
                    if o.access == Access::Insert
                        && !o.proto.shares_bucket_lock
                        && o.proto.bucket_lock.is_none()
                        && b == shape.home_bucket(o.key)
                    {
                        let (home, lock) = home_bucket_lock(info, o.key);
                        c.state.oplog.lock(o.table, o.key, true);
                        op.bucket_cas = Some(post.cas(info.ptr(0, lock), 0, me));
                        o.proto.bucket_lock = Some((home, Hold::Maybe));
                    }
                    op.cvt = Some(post.read(info.ptr(0, shape.bucket_off(b)), shape.bucket_bytes as usize));
                }
                Stage::Reserve(_) => op.atomic = Some(post.faa(info.ptr(0, OVERFLOW_CURSOR_OFFSET), 1)),
                Stage::Link(last, ov) => {
                    let next = shape.bucket_off(last) + BUCKET_NEXT_OFFSET;
                    op.atomic = Some(post.cas(info.ptr(0, next), 0, ov + 1));
                }
                Stage::Cvt => {
                    let rel = o.proto.rel.unwrap();
                    if o.access.writes() && o.proto.hold == Hold::Free {
                        c.state.oplog.lock(o.table, o.key, false);
                        op.cas = Some(post.cas(info.ptr(0, rel + H_LOCK as u64), 0, me));
                        o.proto.hold = Hold::Maybe;
                    }
                    op.cvt = Some(post.read(info.ptr(0, rel), shape.slot_bytes as usize));
                }
                Stage::Value => {
                    let rel = o.proto.rel.unwrap();
                    if o.access.writes() && o.proto.hold == Hold::Free {
                        c.state.oplog.lock(o.table, o.key, false);
                        op.cas = Some(post.cas(info.ptr(0, rel + H_LOCK as u64), 0, me));
                        o.proto.hold = Hold::Maybe;
                        op.cvt = Some(post.read(info.ptr(0, rel), shape.slot_bytes as usize));
                    }
                    if let Some(v0) = o.proto.v0 {
                        // Old attributes first, then the Vpkg (module doc).
                        let vpkg_at = info.ptr(0, o.proto.cvt.vpkg);
                        if variant == MotorVariant::VpkgFirst {
                            op.vpkg = Some(post.read(vpkg_at, layout::vpkg_bytes(o.value_len)));
                        }
                        op.attrs_from = attr_reads.len();
                        let attrs = &info.meta.attrs;
                        let _ = v0;
                        for cell in &o.proto.chain {
                            let len = attrs_bytes(attrs, o.value_len, cell.bitmap) as usize;
                            if len > 0 {
                                attr_reads.push(post.read(info.ptr(0, o.proto.cvt.bar + cell.start as u64), len));
                            }
                        }
                        op.attrs_to = attr_reads.len();
                        if variant != MotorVariant::VpkgFirst {
                            op.vpkg = Some(post.read(vpkg_at, layout::vpkg_bytes(o.value_len)));
                        }
                    }
                }
            }
            ops.push((i, op));
        }
        if ops.is_empty() {
            break;
        }
        if round > ROUNDS_MAX {
            return Err(abort(AbortReason::Torn));
        }
        if let Err(e) = c.ctx.post(&mut post).await {
            return Err(fault(e));
        }
        for &(i, op) in &ops {
            on_round(c, i, op, &post, &attr_reads, snap, early_abort, si, variant, reread_max)?;
        }
        post_links(c).await?;
    }
    c.set.fetched = n;
    Ok(())
}

/// The results of object `i`'s round.
#[allow(clippy::too_many_arguments)]
fn on_round(
    c: &mut Coordinator<Motor>,
    i: usize,
    op: Ops,
    post: &Post,
    attr_reads: &[ReadId],
    snap: u64,
    early_abort: bool,
    si: bool,
    variant: MotorVariant,
    reread_max: u32,
) -> Result<(), Abort> {
    let catalog = Arc::clone(&c.ctx.catalog);
    let (table, key, access, value_len) = {
        let o = &c.set.objs[i];
        (o.table, o.key, o.access, o.value_len)
    };
    let info = catalog.get(table).unwrap();
    let shape = info.shape;
    let vnum = super::MotorLayout::vnum_of_slot(shape.slot_bytes);
    // Locks first: recorded before any abort, so the release finds them.
    if let Some(b) = op.bucket_cas {
        let o = &mut c.set.objs[i];
        let (home, _) = o.proto.bucket_lock.unwrap();
        if post.old(b) == 0 {
            o.proto.bucket_lock = Some((home, Hold::Held));
        } else {
            o.proto.bucket_lock = None;
            return Err(abort(AbortReason::LockConflict));
        }
    }
    if let Some(cas) = op.cas {
        let o = &mut c.set.objs[i];
        if post.old(cas) == 0 {
            o.proto.hold = Hold::Held;
        } else {
            o.proto.hold = Hold::Free;
            return Err(abort(AbortReason::LockConflict));
        }
    }
    let stage = c.set.objs[i].proto.stage;
    match stage {
        Stage::Bucket(b) => {
            let bytes = post.bytes(op.cvt.unwrap());
            let mut found = None;
            let mut free = Vec::new();
            for s in 0..shape.slots {
                let rel = shape.slot_off(b, s);
                let at = (rel - shape.bucket_off(b)) as usize;
                let slot = &bytes[at..at + shape.slot_bytes as usize];
                let occupied = layout::word(slot, layout::H_TABLE) >> 32 != 0;
                if occupied && layout::word(slot, layout::H_KEY) == key {
                    found = Some((rel, at));
                    break;
                }
                if !occupied {
                    free.push(rel);
                }
            }
            let next = layout::word(bytes, 8);
            match found {
                Some((rel, at)) => {
                    c.ctx.cache.put(table, key, rel);
                    c.set.objs[i].proto.rel = Some(rel);
                    let slot = bytes[at..at + shape.slot_bytes as usize].to_vec();
                    on_cvt(c, i, &slot, vnum, snap, early_abort, si, variant, reread_max)
                }
                None if next != 0 => {
                    c.set.objs[i].proto.stage = Stage::Bucket(shape.overflow_bucket(next - 1));
                    Ok(())
                }
                None if access != Access::Insert => {
                    c.set.objs[i].read_absent = true;
                    Err(abort(AbortReason::NotFound))
                }
                None => {
                    let taken = |rel: u64| {
                        c.set
                            .objs
                            .iter()
                            .any(|p| p.table == table && p.proto.fresh && p.proto.rel == Some(rel))
                    };
                    let Some(rel) = free.into_iter().find(|&r| !taken(r)) else {
                        // The chain is full: reserve an overflow bucket and link it.
                        c.set.objs[i].proto.stage = Stage::Reserve(b);
                        return Ok(());
                    };
                    let o = &mut c.set.objs[i];
                    o.proto.rel = Some(rel);
                    o.proto.fresh = true;
                    o.proto.v0 = None;
                    o.read_absent = true;
                    o.proto.stage = Stage::Value;
                    Ok(())
                }
            }
        }
        Stage::Reserve(last) => {
            let ov = post.old(op.atomic.unwrap());
            if ov >= shape.overflow_count {
                c.ctx.last_table_full = Some(table);
                return Err(abort(AbortReason::TableFull));
            }
            c.set.objs[i].proto.stage = Stage::Link(last, ov);
            Ok(())
        }
        Stage::Link(last, ov) => match post.old(op.atomic.unwrap()) {
            0 => {
                // Linked on the primary under the chain's insert lock; the backups get
                // the same link before any slot of the bucket is used.
                let next = shape.bucket_off(last) + BUCKET_NEXT_OFFSET;
                let o = &mut c.set.objs[i];
                for r in 1..info.replica_count() {
                    c.state.links.push((info.ptr(r, next), ov + 1));
                }
                o.proto.rel = Some(shape.slot_off(shape.overflow_bucket(ov), 0));
                o.proto.fresh = true;
                o.proto.v0 = None;
                o.read_absent = true;
                o.proto.stage = Stage::Value;
                Ok(())
            }
            // A sibling insert linked one first: walk on into it.
            l => {
                c.set.objs[i].proto.stage = Stage::Bucket(shape.overflow_bucket(l - 1));
                Ok(())
            }
        },
        Stage::Cvt => {
            let slot = post.bytes(op.cvt.unwrap()).to_vec();
            on_cvt(c, i, &slot, vnum, snap, early_abort, si, variant, reread_max)
        }
        Stage::Value => {
            if let Some(read) = op.cvt {
                // Re-read under the lock just taken.
                let Ok(cvt) = Cvt::decode_with(post.bytes(read), vnum, variant.anchors_only()) else {
                    return Err(abort(AbortReason::Torn));
                };
                let o = &mut c.set.objs[i];
                if o.proto.fresh {
                    if cvt.occupied {
                        return Err(abort(AbortReason::LockConflict));
                    }
                } else {
                    let was = o.proto.cvt.newest().map(|v| v.version);
                    if cvt.key != key || cvt.newest().map(|v| v.version) != was {
                        return Err(proto(R_NEWER));
                    }
                }
                o.proto.cvt = cvt;
            }
            if let Some(vpkg) = op.vpkg {
                let o = &c.set.objs[i];
                let v0 = o.proto.v0.unwrap();
                let newest = *o.proto.cvt.newest().unwrap();
                let bytes = post.bytes(vpkg);
                let p = layout::decode_vpkg(bytes, value_len);
                let anchors = p.sa == newest.anchor && p.ea == newest.anchor;
                let detector = variant.anchors_only() || (p.intact && p.version == newest.version);
                if !anchors || !detector {
                    return Err(proto(R_ANCHOR));
                }
                let mut value = layout::vpkg_value(bytes, value_len).to_vec();
                let attrs = info.meta.attrs.clone();
                let mut k = op.attrs_from;
                let _ = v0;
                let newer = &o.proto.chain;
                for cell in newer {
                    let len = attrs_bytes(&attrs, value_len, cell.bitmap);
                    if len == 0 {
                        continue;
                    }
                    let packed = post.bytes(attr_reads[k]);
                    k += 1;
                    if !variant.anchors_only() && layout::attr_check(cell.version, packed) != cell.attr_check {
                        return Err(proto(R_ANCHOR));
                    }
                    unpack_attrs(&attrs, cell.bitmap, packed, &mut value);
                }
                debug_assert_eq!(k, op.attrs_to);
                if !newer.is_empty() {
                    c.ctx.metric(METRIC_OLD_READS, 1);
                }
                if access.writes() {
                    let at = c.state.old.len();
                    c.state.old.extend_from_slice(&value);
                    c.set.objs[i].proto.old_at = at;
                }
                if access != Access::Insert {
                    c.set.value_mut(i).copy_from_slice(&value);
                }
            }
            c.set.objs[i].proto.stage = Stage::Done;
            Ok(())
        }
        Stage::New | Stage::Done => unreachable!(),
    }
}

/// Post the backup links of overflow buckets linked this round (one round trip; a
/// failure aborts the transaction before any of their slots is written).
async fn post_links(c: &mut Coordinator<Motor>) -> Result<(), Abort> {
    if c.state.links.is_empty() {
        return Ok(());
    }
    let mut post = Post::new();
    for (ptr, link) in c.state.links.drain(..) {
        post.write(ptr, &link.to_le_bytes());
    }
    c.ctx.post(&mut post).await.map_err(fault)
}

/// A CVT of object `i` was read (its slot, or inside its bucket): check it and pick V0.
#[allow(clippy::too_many_arguments)]
fn on_cvt(
    c: &mut Coordinator<Motor>,
    i: usize,
    slot: &[u8],
    vnum: u32,
    snap: u64,
    early_abort: bool,
    si: bool,
    variant: MotorVariant,
    reread_max: u32,
) -> Result<(), Abort> {
    let (table, key, access) = {
        let o = &c.set.objs[i];
        (o.table, o.key, o.access)
    };
    let cvt = match Cvt::decode_with(slot, vnum, variant.anchors_only()) {
        Ok(cvt) => cvt,
        Err(layout::Torn) => {
            let o = &mut c.set.objs[i];
            o.proto.rereads += 1;
            if o.proto.rereads > reread_max {
                return Err(abort(AbortReason::Torn));
            }
            o.proto.stage = Stage::Cvt;
            c.ctx.metric(METRIC_REREADS, 1);
            return Ok(());
        }
    };
    if !cvt.occupied || cvt.key != key {
        // A stale cached address: walk from the home bucket (a lock taken on the
        // wrong CVT is given back).
        let rel = c.set.objs[i].proto.rel.unwrap();
        c.ctx.cache.evict(table, key, rel);
        let o = &mut c.set.objs[i];
        if o.proto.hold != Hold::Free {
            let info = c.ctx.catalog.get(table).unwrap();
            c.state.bg.clear();
            c.state.bg.cas(info.ptr(0, rel + H_LOCK as u64), c.state.me, 0);
            o.proto.hold = Hold::Free;
            c.ctx.post_background(&mut c.state.bg);
        }
        let home = c.ctx.catalog.get(table).unwrap().shape.home_bucket(key);
        c.set.objs[i].proto.stage = Stage::Bucket(home);
        return Ok(());
    }
    let o = &mut c.set.objs[i];
    let newest = cvt.newest().copied();
    if access.writes() {
        // The version a write replaces is the newest: in SR a newer one than the
        // snapshot is an early abort, in SI first-committer-wins.
        let newer = newest.is_some_and(|v| v.version > snap);
        if newer && !(si && variant == MotorVariant::SiNoFirstCommitterWins) {
            return Err(proto(R_NEWER));
        }
        match (access, newest) {
            (Access::Insert, Some(v)) if !v.tombstone() => return Err(abort(AbortReason::Duplicate)),
            (Access::Insert, Some(v)) => {
                o.read_absent = true;
                o.version_read = Some(v.writer);
            }
            (Access::Insert, None) => {
                o.read_absent = true;
            }
            (_, Some(v)) if v.tombstone() => {
                o.read_absent = true;
                o.version_read = Some(v.writer);
                return Err(abort(AbortReason::NotFound));
            }
            (_, None) => {
                o.read_absent = true;
                return Err(abort(AbortReason::NotFound));
            }
            (_, Some(v)) => o.version_read = Some(v.writer),
        }
        o.proto.v0 = newest;
        o.proto.chain.clear();
        o.proto.fresh = newest.is_none();
    } else {
        if early_abort && newest.is_some_and(|v| v.version > snap) {
            return Err(proto(R_NEWER));
        }
        let picked = if variant.anchors_only() {
            layout::pick_paper(&cvt, snap)
        } else {
            layout::pick(&cvt, snap)
        };
        match picked {
            Pick::Gone => return Err(proto(R_VERSION_GONE)),
            Pick::Absent => {
                o.read_absent = true;
                return Err(abort(AbortReason::NotFound));
            }
            Pick::Version(v, _) if v.tombstone() => {
                o.read_absent = true;
                o.version_read = Some(v.writer);
                return Err(abort(AbortReason::NotFound));
            }
            Pick::Version(v, chain) => {
                o.version_read = Some(v.writer);
                o.proto.v0 = Some(v);
                o.proto.chain = chain;
            }
        }
    }
    o.proto.cvt = cvt;
    o.proto.stage = Stage::Value;
    Ok(())
}

/// Validate and commit (§5.1 Phases 2–3).
pub(crate) async fn commit(c: &mut Coordinator<Motor>) -> Result<(), Abort> {
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let has_ro = c.set.objs.iter().any(|o| o.access == Access::ReadOnly);
    // SR validates the RO data of every transaction that did not promise to be
    // read-only (read-only ones read a watermark snapshot and skip validation, §5.1).
    let validate =
        !c.proto.cfg.si && !c.set.hints.read_only && has_ro && c.proto.cfg.variant != MotorVariant::NoRoValidation;
    if !writes {
        c.state.oplog.idle();
        if validate {
            let t = c.state.ts.next(&mut c.ctx).await.map_err(ts_fault)?;
            validate_ro(c, t).await?;
            c.state.session_floor = c.state.session_floor.max(t);
        }
        return Ok(());
    }
    let cts = c.state.ts.next_commit(&mut c.ctx).await.map_err(ts_fault)?;
    let res = commit_at(c, &cts, validate).await;
    let t = cts.get();
    // Installed, the transaction is committed whatever its completion's fate: a
    // completion that fails (an `rpc` oracle not answering in time) leaves the
    // watermark below `t`, and later snapshots wait for it (`session_lag`), but the
    // commit stands. An abandon that fails changes nothing either: the abort stands.
    match res {
        Ok(()) => {
            if c.state.ts.complete(&mut c.ctx, cts).await.is_err() {
                c.ctx.metric(METRIC_TS_UNRESOLVED, 1);
            }
            c.set.commit_ts = Some(t);
            c.state.session_floor = c.state.session_floor.max(t);
            Ok(())
        }
        Err((e, installed)) => {
            let resolved = if installed {
                c.state.ts.complete(&mut c.ctx, cts).await
            } else {
                c.state.ts.abandon(&mut c.ctx, cts).await
            };
            if resolved.is_err() {
                c.ctx.metric(METRIC_TS_UNRESOLVED, 1);
            }
            Err(e)
        }
    }
}

/// Re-read every RO record's CVT: abort if locked or its version at `t` differs.
async fn validate_ro(c: &mut Coordinator<Motor>, t: u64) -> Result<(), Abort> {
    let catalog = Arc::clone(&c.ctx.catalog);
    let mut post = Post::new();
    let mut reads = Vec::new();
    for (i, o) in c.set.objs.iter().enumerate() {
        if o.access == Access::ReadOnly {
            let info = catalog.get(o.table).unwrap();
            reads.push((
                i,
                post.read(info.ptr(0, o.proto.rel.unwrap()), info.shape.slot_bytes as usize),
            ));
        }
    }
    c.ctx.post(&mut post).await.map_err(fault)?;
    for (i, read) in reads {
        let o = &c.set.objs[i];
        let vnum = super::MotorLayout::vnum_of_slot(catalog.get(o.table).unwrap().shape.slot_bytes);
        let anchors_only = c.proto.cfg.variant.anchors_only();
        let Ok(cvt) = Cvt::decode_with(post.bytes(read), vnum, anchors_only) else {
            return Err(abort(AbortReason::Validation));
        };
        if cvt.lock != 0 {
            return Err(abort(AbortReason::Validation));
        }
        let picked = if anchors_only {
            layout::pick_paper(&cvt, t - 1)
        } else {
            layout::pick(&cvt, t - 1)
        };
        let now = match picked {
            Pick::Version(v, _) => Some(v.version),
            _ => None,
        };
        if now != o.proto.v0.map(|v| v.version) {
            return Err(abort(AbortReason::Validation));
        }
    }
    Ok(())
}

/// What one written record installs.
struct Install {
    i: usize,
    /// (table-relative offset, bytes) in write order, for every replica.
    writes: Vec<(u64, Vec<u8>)>,
}

/// Validation and commit at `cts`; `Err((abort, installed))`.
async fn commit_at(c: &mut Coordinator<Motor>, cts: &CommitTs, validate: bool) -> Result<(), (Abort, bool)> {
    if validate {
        validate_ro(c, cts.get()).await.map_err(|e| (e, false))?;
    }
    let t = cts.get();
    let catalog = Arc::clone(&c.ctx.catalog);
    let delta_before = c.state.delta.clone();
    let mut installs = Vec::new();
    let mut gc = (0, 0);
    for i in 0..c.set.objs.len() {
        if !c.set.objs[i].access.writes() {
            continue;
        }
        match prepare(c, i, t, &catalog, &mut gc) {
            Ok(ins) => installs.push(ins),
            Err(e) => {
                c.state.delta = delta_before;
                return Err((e, false));
            }
        }
    }
    c.state.oplog.committing(t);
    let logged = c.state.oplog.bytes().len() as u64;
    c.ctx.metric(METRIC_OPLOG_BYTES, logged);
    c.ctx.metric(METRIC_GC_OVERWRITES, gc.0);
    c.ctx.metric(METRIC_BAR_RECLAIMS, gc.1);
    if c.proto.cfg.install_delay_ns > 0 {
        let clock = Arc::clone(&c.ctx.clock);
        dmtx_runtime::sleep(&*clock, c.proto.cfg.install_delay_ns).await;
    }
    let mut post = Post::new();
    for tries in 0..INSTALL_TRIES_MAX {
        if tries > 0 {
            let clock = Arc::clone(&c.ctx.clock);
            dmtx_runtime::sleep(&*clock, INSTALL_RETRY_NS).await;
        }
        post.clear();
        for ins in &installs {
            let o = &c.set.objs[ins.i];
            let info = catalog.get(o.table).unwrap();
            for r in 0..info.replica_count() {
                for (rel, bytes) in &ins.writes {
                    post.write(info.ptr(r, *rel), bytes);
                }
            }
        }
        if c.ctx.post(&mut post).await.is_ok() {
            // Unlocked once every replica acknowledged (module doc, "Deviations"),
            // in the background; the locks' owners are recorded for the release.
            release_in_background(c);
            return Ok(());
        }
    }
    Err((abort(AbortReason::Fault), true))
}

/// Build the writes of written object `i` at commit timestamp `t` (§5.1 Phase 3).
fn prepare(
    c: &mut Coordinator<Motor>,
    i: usize,
    t: u64,
    catalog: &dmtx_store::Catalog,
    gc: &mut (u64, u64),
) -> Result<Install, Abort> {
    let o = &c.set.objs[i];
    let info = catalog.get(o.table).unwrap();
    let value_len = o.value_len;
    let attrs = &info.meta.attrs;
    let vnum = super::MotorLayout::vnum_of_slot(info.shape.slot_bytes);
    let rel = o.proto.rel.unwrap();
    let new_value = c.set.value(i).to_vec();
    let mut writes = Vec::new();
    let cvt = &o.proto.cvt;
    let newest = cvt.newest().copied();
    let tomb = o.access == Access::Delete;
    let old = newest.map(|_| &c.state.old[o.proto.old_at..o.proto.old_at + value_len as usize]);
    let value: &[u8] = if tomb { old.unwrap() } else { &new_value };
    let bitmap = match old {
        Some(old) if !tomb => attrs_changed(attrs, old, value),
        _ => 0,
    };
    let len = attrs_bytes(attrs, value_len, bitmap);
    // The Vcell: a free one, or the oldest (GC, §4.3).
    let target = match cvt.free.first() {
        Some(&f) => f,
        None => {
            gc.0 += 1;
            cvt.oldest().unwrap().index
        }
    };
    let table = o.table;
    let fresh = o.proto.fresh;
    let (mut bar, mut start) = (cvt.bar, 0u32);
    let mut header = None;
    let mut reclaimed = Vec::new();
    let mut packed = Vec::new();
    let mut bar_bytes = cvt.bar_bytes;
    if len > 0 {
        let samples = &mut c.state.samples[table as usize];
        match samples.iter_mut().find(|s| s.0 == len) {
            Some(s) => s.1 += 1,
            None => samples.push((len, 1)),
        }
        let mut cut = None;
        if bar == 0 || len > bar_bytes {
            // A record's first update, or attributes the bar cannot hold at all: a new
            // bar, sized from the sizes sampled so far; the versions whose attributes are
            // in the old one are reclaimed with it.
            let bar_bytes_was = if bar == 0 { 0 } else { bar_bytes };
            bar_bytes = c.proto.layout.bar_bytes_for(vnum, samples, len);
            bar = alloc_delta(&mut c.state.delta, table, bar_bytes as usize)?;
            header = Some(H_BAR);
            if bar_bytes_was > 0 {
                cut = cvt.cells.iter().filter(|v| v.index != target).map(|v| v.version).max();
            }
        } else {
            let n = newest.unwrap();
            start = n.start + attrs_bytes(attrs, value_len, n.bitmap);
            if start + len > bar_bytes {
                start = 0;
            }
            // Coordinator-active GC (§4.3): entries the new one overwrites are reclaimed,
            // and with them every version up to the newest reclaimed.
            for v in &cvt.cells {
                let l = attrs_bytes(attrs, value_len, v.bitmap);
                if v.index != target && l > 0 && v.start < start + len && start < v.start + l {
                    cut = Some(cut.map_or(v.version, |c: u64| c.max(v.version)));
                }
            }
        }
        if let Some(cut) = cut {
            for v in &cvt.cells {
                if v.index != target && v.version <= cut {
                    reclaimed.push(*v);
                }
            }
        }
        packed = vec![0u8; len as usize];
        pack_attrs(attrs, bitmap, old.unwrap(), &mut packed);
    }
    gc.1 += reclaimed.len() as u64;
    let vpkg = if fresh {
        alloc_delta(&mut c.state.delta, table, layout::vpkg_bytes(value_len))?
    } else {
        cvt.vpkg
    };
    let anchor = newest.map_or(1, |n| n.anchor.wrapping_add(1));
    let mut vpkg_bytes = vec![0u8; layout::vpkg_bytes(value_len)];
    layout::encode_vpkg(anchor, t, value, &mut vpkg_bytes);
    writes.push((vpkg, vpkg_bytes));
    if len > 0 {
        writes.push((bar + start as u64, packed.clone()));
    }
    for v in &reclaimed {
        let mut cell = vec![0u8; layout::VCELL_BYTES];
        Vcell { valid: false, ..*v }.encode(&mut cell);
        writes.push((rel + cell_off(v.index) as u64, cell));
    }
    if fresh {
        let mut h = vec![0u8; layout::HEADER_BYTES];
        layout::encode_header(table, c.set.objs[i].key, bar, bar_bytes, vpkg, &mut h);
        writes.push((rel + 8, h[8..].to_vec()));
    } else if header.is_some() {
        let mut h = vec![0u8; layout::HEADER_BYTES];
        layout::encode_header(table, c.set.objs[i].key, bar, bar_bytes, vpkg, &mut h);
        writes.push((rel + 8, h[8..H_BAR + 8].to_vec()));
    }
    let flags = if tomb {
        TOMBSTONE
    } else if fresh {
        FIRST
    } else {
        0
    };
    let cell = Vcell {
        index: target,
        anchor,
        valid: true,
        flags,
        start,
        version: t,
        writer: c.set.txn_id,
        bitmap,
        attr_check: layout::attr_check(t, &packed),
        prev: if fresh { 0 } else { newest.map_or(0, |n| n.version) },
    };
    let mut cb = vec![0u8; layout::VCELL_BYTES];
    cell.encode(&mut cb);
    writes.push((rel + cell_off(target) as u64, cb));
    Ok(Install { i, writes })
}

/// `len` bytes (8-aligned) from this coordinator's delta space in `table`.
fn alloc_delta(delta: &mut [(u64, u64)], table: u32, len: usize) -> Result<u64, Abort> {
    let (next, end) = &mut delta[table as usize];
    let at = next.next_multiple_of(8);
    if at + len as u64 > *end {
        return Err(proto(R_DELTA_FULL));
    }
    *next = at + len as u64;
    Ok(at)
}

/// Release every lock the transaction holds, in the background (an abort).
pub(crate) fn release_in_background(c: &mut Coordinator<Motor>) {
    let catalog = Arc::clone(&c.ctx.catalog);
    let me = c.state.me;
    let bg = &mut c.state.bg;
    bg.clear();
    for o in &mut c.set.objs {
        let info = catalog.get(o.table).unwrap();
        if o.proto.hold != Hold::Free {
            bg.cas(info.ptr(0, o.proto.rel.unwrap() + H_LOCK as u64), me, 0);
            o.proto.hold = Hold::Free;
        }
        if let Some((home, hold)) = o.proto.bucket_lock.take() {
            if hold != Hold::Free {
                bg.cas(info.ptr(0, info.shape.bucket_off(home) + BUCKET_LOCK_OFFSET), me, 0);
            }
        }
    }
    if !bg.is_empty() {
        c.ctx.post_background(bg);
    }
    c.state.oplog.idle();
}

/// Reset the per-transaction scratch (at the first execute of a transaction).
pub(crate) fn reset(c: &mut Coordinator<Motor>) {
    c.state.old.clear();
    c.state.oplog.begin(c.set.txn_id);
}
