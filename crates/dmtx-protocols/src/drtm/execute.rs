//! Execution: per record `[CAS(lock, expect → lease or W|me), READ]`, one round trip per
//! round; an expired lease returned by the CAS is CASed again next round.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::{exclusive, shared, Drtm, DrtmVariant, END_MASK, W};
use crate::onever::index_walk::{self, Found, Stage};
use crate::onever::record::{SlotView, VLOCK};

/// Rounds one `execute` may take before something is wrong.
const ROUNDS_MAX: u32 = 64;

pub(super) async fn execute(txn: &mut Txn<'_, Drtm>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let start = c.set.fetched;
    let n = c.set.objs.len();
    for o in &mut c.set.objs[start..n] {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        o.proto.expect = 0;
        o.proto.stage = match (o.access, c.ctx.cache.get(o.table, o.key)) {
            (Access::Insert, _) | (_, None) => Stage::Lookup(info.shape.home_bucket(o.key)),
            (_, Some(rel)) => {
                o.proto.rel = rel;
                Stage::Fetch
            }
        };
    }
    let cfg = c.proto.config().clone();
    let owner = c.state.owner;
    let delta = cfg.delta_us as u64;
    for _round in 0..ROUNDS_MAX {
        let c = &mut *txn.coord;
        let post = &mut c.state.post;
        post.clear();
        let walks = &mut c.state.insert_walks;
        walks.rebuild(&c.set.objs, &c.ctx.catalog);
        let now_us = c.ctx.clock.now_ns() / 1_000;
        // Every lease this round installs ends here.
        let lease = shared(now_us + cfg.lease_us as u64);
        for o in &mut c.set.objs[start..n] {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            let p = &mut o.proto;
            p.read = None;
            p.cas = None;
            match p.stage {
                Stage::Done | Stage::New => {}
                Stage::Lookup(b) => {
                    let what = (o.table, o.access);
                    if let Some((cas, read)) = walks.post_lookup(post, info, what, b, &mut p.walk, 0, exclusive(owner))
                    {
                        p.cas = cas;
                        p.read = Some(read);
                    }
                }
                Stage::Fetch if p.walk.reserving() => p.cas = Some(index_walk::post_reserve(post, info)),
                Stage::Fetch => {
                    let want = if o.access.writes() { exclusive(owner) } else { lease };
                    if !p.holds.locked && !p.leased {
                        index_walk::post_link(post, info, &p.walk);
                        p.cas = Some(post.cas(info.ptr(0, p.rel + VLOCK as u64), p.expect, want));
                    }
                    p.read = Some(post.read(info.ptr(0, p.rel), info.shape.slot_bytes as usize));
                }
            }
        }
        if post.is_empty() {
            c.set.fetched = n;
            return Ok(());
        }
        c.ctx.step(super::STEP_EXECUTE, (n - start) as u32);
        if c.ctx.post(&mut c.state.post).await.is_err() {
            let c = &mut *txn.coord;
            index_walk::give_back_round(
                &mut c.state.bg,
                &c.set.objs[start..n],
                &c.ctx.catalog,
                exclusive(owner),
                VLOCK as u64,
            );
            c.ctx.post_background(&mut c.state.bg);
            return Err(Abort::new(AbortReason::Fault));
        }
        let c = &mut *txn.coord;
        let granted_end = lease & END_MASK;
        let now_us = c.ctx.clock.now_ns() / 1_000;
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
            let value_len = o.value_len as usize;
            let (table, key, access) = (o.table, o.key, o.access);
            let p = &mut o.proto;
            let mut copy_from: Option<&[u8]> = None;
            match p.stage {
                Stage::Done | Stage::New => continue,
                Stage::Lookup(_) if p.read.is_none() => continue,
                Stage::Lookup(b) => {
                    let ids = (p.cas, p.read.expect("lookup posts a read"));
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
                        // The record's lock is taken by the next round's CAS.
                        Found::At { rel, .. } => {
                            p.rel = rel;
                            p.stage = Stage::Fetch;
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
                    let Some(rel) = index_walk::on_reserve(&info.shape, &mut p.walk, reserved) else {
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
                        let old = post.old(cas);
                        if old == p.expect {
                            // Granted: a new lease, or our write lock.
                            if access.writes() {
                                p.holds.locked = true;
                            } else {
                                p.leased = true;
                                p.lease_end_us = granted_end;
                            }
                        } else if old & W != 0 {
                            result = Err(Abort::new(AbortReason::LockConflict));
                            continue;
                        } else {
                            let end = old & END_MASK;
                            let live_for_reader = end > now_us + delta;
                            let expired_for_writer = now_us > end + delta;
                            // Readers renew only a lease writers may take over too: one
                            // renewed before that would starve writers for good.
                            let take =
                                expired_for_writer || (access.writes() && cfg.variant == DrtmVariant::IgnoreLiveLeases);
                            if !access.writes() && live_for_reader {
                                // Another reader's lease covers us: the READ behind the
                                // CAS saw a record no writer can take before it ends.
                                p.leased = true;
                                p.lease_end_us = end;
                            } else if take {
                                // Expired (or, for a reader, about to): CAS again on it.
                                p.expect = old;
                                p.retries += 1;
                                c.ctx.metric(super::METRIC_LEASE_RETRIES, 1);
                                if p.retries > cfg.retry_max {
                                    result = Err(Abort::new(AbortReason::LockConflict));
                                }
                                continue;
                            } else {
                                // A live lease stops a writer; a lease about to end (within
                                // Δ either side) stops a reader too.
                                result = Err(Abort::new(AbortReason::LockConflict));
                                continue;
                            }
                        }
                    }
                    if access == Access::Insert {
                        if v.occupied() {
                            result = Err(Abort::new(AbortReason::LockConflict));
                            continue;
                        }
                        p.version = v.version();
                        p.stage = Stage::Done;
                    } else if v.live_key() != Some(key) {
                        p.stage =
                            index_walk::evict_stale(&c.ctx.cache, bg, info, (table, key), p.rel, &mut p.holds.locked);
                        p.expect = 0;
                        p.leased = false;
                    } else if !v.intact(value_len) {
                        // Read under our lock or lease, but while the last commit WRITE
                        // was in service: read again.
                        p.retries += 1;
                        if p.retries > cfg.retry_max {
                            result = Err(Abort::new(AbortReason::Torn));
                        }
                    } else {
                        p.version = v.version();
                        p.stage = Stage::Done;
                        copy_from = Some(v.value(value_len));
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
    panic!("execute did not finish in {ROUNDS_MAX} rounds");
}
