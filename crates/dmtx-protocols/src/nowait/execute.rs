//! Execution: per item in turn (as RCBench does), getRtItemAddr, then the lock and the
//! ReadDI in one batch (Alg. 1 l. 1–8, 25–33).

use dmtx_runtime::{Abort, AbortReason, Access, Txn};
use dmtx_store::cuckoo::RtLookup;
use dmtx_store::TableInfo;
use dmtx_verbs::RemotePtr;

use super::{Fresh, Hold, LockMode, NowaitVariant, Policy, TwoPl, ABORT_INDEX_FULL, ES_CAS_TRIES_MAX, TOMBSTONE};
use crate::rcbench::insert::{self, FreshFail, FreshStage};
use crate::rcbench::prims::{state_word, tg_view, ST_AB, ST_RN};
use crate::rcbench::CtxVerbs;

fn abort(reason: AbortReason) -> Abort {
    Abort::new(reason)
}

fn word(b: &[u8], off: u32) -> u64 {
    u64::from_le_bytes(b[off as usize..off as usize + 8].try_into().expect("8 bytes"))
}

pub(crate) async fn execute<P: TwoPl>(txn: &mut Txn<'_, P>) -> Result<(), Abort> {
    let start = txn.coord.set.fetched;
    let n = txn.coord.set.objs.len();
    for i in start..n {
        fetch_one(txn, i).await?;
        txn.coord.set.fetched = i + 1;
    }
    Ok(())
}

async fn fetch_one<P: TwoPl>(txn: &mut Txn<'_, P>, i: usize) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let catalog = std::sync::Arc::clone(&c.ctx.catalog);
    let (table, key, access) = {
        let o = &c.set.objs[i];
        (o.table, o.key, o.access)
    };
    let info = catalog.get(table).expect("table checked at add");
    let place = *info
        .cuckoo
        .first()
        .expect("nowait's layout chooses the cuckoo index for every table");
    let layout = c.proto.item_layout();
    let vb = info.meta.value_bytes;
    let item_len = layout.item_bytes(vb) as usize;
    let lock_off = layout.lock_off(vb) as u64;
    let version_off = layout.meta_off(vb);
    let st = &mut c.state;
    // Items never move (a deleted item keeps its slot and entry), so a cached address
    // is always the key's.
    let cached = match c.proto.cfg().addr_cache {
        true => c.ctx.cache.get(table, key),
        false => None,
    };
    let found = match cached {
        Some(addr) => RtLookup::Found {
            addr,
            size: item_len as u64,
        },
        None => st
            .prims
            .locate(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &place, key, &mut st.post)
            .await
            .map_err(|_| abort(AbortReason::Fault))?,
    };
    if let (true, None, RtLookup::Found { addr, .. }) = (c.proto.cfg().addr_cache, cached, found) {
        c.ctx.cache.put(table, key, addr);
    }
    let rel = match (found, access) {
        (RtLookup::Found { addr, .. }, _) => addr,
        (RtLookup::InFlight, _) => return Err(abort(AbortReason::LockConflict)),
        (RtLookup::Absent, Access::Insert) => {
            return insert_fresh(txn, i, info, &place).await;
        }
        (RtLookup::Absent, _) => return Err(abort(AbortReason::NotFound)),
    };
    let c = &mut *txn.coord;
    c.set.objs[i].proto.rel = rel;
    let item = info.ptr(0, rel);
    let lock = RemotePtr::new(item.mn, item.offset + lock_off);
    let shared = c.proto.cfg().lock == LockMode::Es && access == Access::ReadOnly;
    let variant = c.proto.cfg().variant;
    let st = &mut c.state;
    let el = st.lock_val;
    let bytes_at;
    if !shared {
        let mut waits = 0;
        let read = loop {
            st.post.clear();
            if st.tg_pending {
                // Wound-Wait: the own T^g slot (Tid, RN) rides with the first lock.
                let tg = st.tg.as_ref().expect("wound-wait coordinators have a T^g area");
                let tid = st.tid;
                let mut words = [0u8; 16];
                words[..8].copy_from_slice(&tid.to_le_bytes());
                words[8..].copy_from_slice(&state_word(tid, ST_RN).to_le_bytes());
                st.prims.write_own_tm(&mut st.post, tg, tid, &words);
                st.tg_pending = false;
            }
            let cas = st.prims.amod_im(&mut st.post, lock, 0, el);
            let read = st.prims.read_di(&mut st.post, item, item_len);
            st.prims
                .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
                .await
                .map_err(|_| {
                    // The CAS may have landed: cleanup's CAS(EL → 0) frees only our own word.
                    abort(AbortReason::Fault)
                })
                .inspect_err(|_| c.set.objs[i].proto.hold = Hold::Excl)?;
            let holder = st.post.old(cas);
            if holder == 0 {
                break read;
            }
            // Wait-Die (Alg. 2 with ">" and "abort", l. 5–6): the refusal returns the
            // holder's bts; an older requester waits (yields and retries, bounded),
            // a younger one dies.
            let die = match P::POLICY {
                Policy::NoWait => true,
                Policy::WaitDie => el > holder,
                Policy::WoundWait => false,
            };
            if die || waits >= c.proto.cfg().wait_retries_max {
                return Err(abort(AbortReason::LockConflict));
            }
            waits += 1;
            c.ctx.metric(super::METRIC_WAIT_RETRIES, 1);
            if P::POLICY == Policy::WoundWait {
                // Alg. 2 l. 3–6: READ the holder's pL with the own state (re-read on
                // every retry: a wounded waiter must abort, or two could wait on
                // each other forever).
                let tg = st.tg.as_ref().expect("wound-wait coordinators have a T^g area");
                let pl = RemotePtr::new(item.mn, item.offset + c.proto.item_layout().meta_off(vb) as u64 + 8);
                st.post.clear();
                let pl_read = st.prims.read_di(&mut st.post, pl, 16);
                let own = st.prims.read_tm_batched(&mut st.post, tg, st.tid);
                st.prims
                    .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
                    .await
                    .map_err(|_| abort(AbortReason::Fault))?;
                let me = tg_view(st.post.bytes(own), st.tid).expect("own T^g slot holds own Tid");
                if me.st == ST_AB {
                    return Err(abort(AbortReason::LockConflict));
                }
                let b = st.post.bytes(pl_read);
                let (pl_bts, pl_tid) = (word(b, 0), word(b, 8));
                // An empty or stale pL (another holder's, or none yet): just retry.
                if pl_bts == holder && pl_tid != 0 && el < holder {
                    let tg = st.tg.clone().expect("wound-wait coordinators have a T^g area");
                    // Wound: AModTM(holder, st, RN → AB); NULL (slot reused) or a refusal
                    // (it committed or aborted already) means its locks go soon.
                    st.prims
                        .amod_tm(
                            &mut CtxVerbs(&mut c.ctx, &mut st.meter),
                            &mut st.post,
                            &tg,
                            pl_tid,
                            ST_RN,
                            ST_AB,
                        )
                        .await
                        .map_err(|_| abort(AbortReason::Fault))?;
                }
            }
            let clock = std::sync::Arc::clone(&c.ctx.clock);
            st.meter.pause(clock.now_ns());
            dmtx_runtime::sleep(clock.as_ref(), super::WAIT_PAUSE_NS).await;
            st.meter.resume(clock.now_ns());
        };
        c.set.objs[i].proto.hold = Hold::Excl;
        if P::POLICY != Policy::NoWait {
            // Granted: pL ← ⟨bts, Tid⟩ (l. 7–9; §4.1), one WriteDI of the pL words.
            let pl = RemotePtr::new(item.mn, item.offset + c.proto.item_layout().meta_off(vb) as u64 + 8);
            let mut words = [0u8; 16];
            words[..8].copy_from_slice(&el.to_le_bytes());
            let tid = match P::POLICY {
                Policy::WoundWait => st.tid,
                _ => c.set.txn_id,
            };
            words[8..].copy_from_slice(&tid.to_le_bytes());
            // The item READ of the granted batch is kept: copy it out before reusing
            // the post.
            let b = st.post.bytes(read).to_vec();
            st.post.clear();
            st.prims.write_di(&mut st.post, pl, &words);
            st.prims
                .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
                .await
                .map_err(|_| abort(AbortReason::Fault))?;
            return finish_read(txn, i, &b, version_off, access).await;
        }
        bytes_at = read;
    } else {
        // AcqIMShLock: ReadDI, then CAS(old → old + 2) with the data READ after it.
        st.post.clear();
        let first = st.prims.read_di(&mut st.post, item, item_len);
        st.prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await
            .map_err(|_| abort(AbortReason::Fault))?;
        let mut w = word(st.post.bytes(first), lock_off as u32);
        let pre = st.image.len();
        if variant == NowaitVariant::ReusePreCasRead {
            let b = st.post.bytes(first).to_vec();
            st.image.extend_from_slice(&b);
        }
        let mut granted = None;
        for tries in 0..ES_CAS_TRIES_MAX {
            if w & 1 == 1 {
                break;
            }
            if tries > 0 {
                c.ctx.metric(super::METRIC_ES_RETRIES, 1);
            }
            st.post.clear();
            let cas = st.prims.amod_im(&mut st.post, lock, w, w + 2);
            let read = st.prims.read_di(&mut st.post, item, item_len);
            st.prims
                .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
                .await
                .map_err(|_| abort(AbortReason::Fault))?;
            let old = st.post.old(cas);
            if old == w {
                granted = Some(read);
                break;
            }
            w = old;
        }
        let Some(read) = granted else {
            st.image.truncate(pre);
            return Err(abort(AbortReason::LockConflict));
        };
        c.set.objs[i].proto.hold = Hold::Shared;
        if variant == NowaitVariant::ReusePreCasRead {
            // Broken on purpose: the pre-CAS READ's data replaces the locked READ's.
            let len = item_len;
            let b = st.image[pre..pre + len].to_vec();
            st.image.truncate(pre);
            return finish_read(txn, i, &b, version_off, access).await;
        }
        bytes_at = read;
    }
    let b = c.state.post.bytes(bytes_at).to_vec();
    finish_read(txn, i, &b, version_off, access).await
}

/// Check a locked item's READ and hand its value over.
async fn finish_read<P: TwoPl>(
    txn: &mut Txn<'_, P>,
    i: usize,
    item: &[u8],
    version_off: u32,
    access: Access,
) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let o = &c.set.objs[i];
    let layout = c.proto.item_layout();
    debug_assert_eq!(dmtx_store::SlotLayout::key(&layout, item), {
        let v = word(item, version_off);
        (v & TOMBSTONE == 0).then_some(o.key)
    });
    let version = word(item, version_off);
    let tomb = version & TOMBSTONE != 0;
    match (access, tomb) {
        (Access::Insert, false) => return Err(abort(AbortReason::Duplicate)),
        (Access::Insert, true) => return Ok(()),
        (_, true) => return Err(abort(AbortReason::NotFound)),
        (_, false) => {}
    }
    let len = o.value_len as usize;
    let data = layout.data_off() as usize;
    c.set.value_mut(i).copy_from_slice(&item[data..data + len]);
    c.set.objs[i].version_read = Some(version);
    if access == Access::ReadOnly && c.proto.cfg().variant == NowaitVariant::EarlyReadRelease {
        // Broken on purpose: the read lock goes before commit.
        super::commit::release_one(c, i).await;
    }
    Ok(())
}

/// Insert of a key the index lacks: [`crate::rcbench::insert::insert_fresh`].
async fn insert_fresh<P: TwoPl>(
    txn: &mut Txn<'_, P>,
    i: usize,
    info: &TableInfo,
    place: &dmtx_store::cuckoo::CuckooPlace,
) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let key = c.set.objs[i].key;
    let table = c.set.objs[i].table;
    // Slots this transaction already claimed are not free for it.
    let mine: Vec<u64> = c.set.objs[..i]
        .iter()
        .filter(|o| o.table == table && o.proto.hold != super::Hold::None)
        .map(|o| o.proto.rel)
        .collect();
    let st = &mut c.state;
    let f = insert::insert_fresh(
        &mut CtxVerbs(&mut c.ctx, &mut st.meter),
        &mut st.prims,
        &mut st.post,
        &mut st.overflow,
        insert::FreshCtx {
            info,
            place,
            layout: c.proto.item_layout(),
            key,
            lock_val: st.lock_val,
            mine: &mine,
        },
    )
    .await;
    let o = &mut c.set.objs[i].proto;
    if f.stage != FreshStage::None {
        o.rel = f.rel;
        o.hold = Hold::Excl;
    }
    o.fresh = match f.stage {
        FreshStage::None | FreshStage::Locked => Fresh::No,
        FreshStage::Claimed => Fresh::Claimed,
        FreshStage::Indexed => Fresh::Indexed,
    };
    match f.result {
        Ok(()) => {
            if c.proto.cfg().addr_cache {
                c.ctx.cache.put(table, key, f.rel);
            }
            Ok(())
        }
        Err(FreshFail::Fault) => Err(abort(AbortReason::Fault)),
        Err(FreshFail::TableFull) => {
            c.ctx.last_table_full = Some(table);
            Err(abort(AbortReason::TableFull))
        }
        Err(FreshFail::Conflict) => Err(abort(AbortReason::LockConflict)),
        Err(FreshFail::IndexFull) => Err(abort(AbortReason::Protocol(ABORT_INDEX_FULL))),
    }
}
