//! Lock & validate in one round trip, FORD §3.2 and §4.2 (DrTM+H), with the lock check
//! the paper is silent on, and the strict mode that closes the cross-node window.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};
use dmtx_verbs::Post;

use super::{Drtmh, DrtmhVariant};
use crate::farm::{FarmObj, LockTry};
use crate::onever::record::{VERSION, VLOCK};

/// Whether `o` is locked in this round: read-write and delete objects not locked yet
/// (an insert locked its slot during execution).
fn to_lock(access: Access, o: &FarmObj) -> bool {
    access.writes() && access != Access::Insert && !o.holds.locked
}

/// Lock & validate (see the module doc of [`super`]): per read-write and delete object
/// `CAS(vlock, 0 → me)` and an 8-byte READ of its version behind it; per read-only
/// object a 16-byte READ (`vlock` + `version`); every CAS before every read-only READ.
/// With `strict`, the read-only READs go in a second round trip, once every lock is
/// held. Fails with `LockConflict` on a failed CAS (no waiting, unless `lock_wait_us`) and with `Validation`
/// when a version changed or a read-only record is locked by another coordinator.
///
/// The read-only READs are skipped when the transaction writes nothing and read one
/// object whose lock word was clear in that READ (FaRM's rule, [`crate::farm`]).
pub(super) async fn lock_validate(txn: &mut Txn<'_, Drtmh>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let ro = c.set.objs.iter().filter(|o| o.access == Access::ReadOnly).count();
    let lone = !writes && ro == 1 && c.set.objs.iter().any(|o| o.proto.read_unlocked);
    let check_ro = ro > 0 && !lone;
    let strict = c.proto.config().strict;
    let lock = c.state.lock;
    let wait_us = c.proto.config().lock_wait_us;
    let timed = crate::onever::lock_time::timed(c.set.txn_seq, wait_us);
    let now = timed.then(|| c.ctx.clock.now_ns());

    // Round 1: the write set's CAS + version READ, and (unless strict) the read-only
    // READs after every CAS.
    let post = &mut c.state.post;
    post.clear();
    let mut locking = 0;
    for o in c.set.objs.iter_mut() {
        o.proto.read = None;
        o.proto.cas = None;
        if to_lock(o.access, &o.proto) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            o.proto.cas = Some(post.cas(info.ptr(0, o.proto.rel + VLOCK as u64), 0, lock));
            o.proto.read = Some(post.read(info.ptr(0, o.proto.rel + VERSION as u64), 8));
            if let Some(now) = now {
                o.proto.holds.times.asking(now);
            }
            locking += 1;
        }
    }
    if check_ro && !strict {
        push_ro_reads(post, &mut c.set.objs, &c.ctx.catalog);
    }
    if post.is_empty() {
        return validate_ro_alone(txn, check_ro).await;
    }
    let checked = locking + if strict || !check_ro { 0 } else { ro };
    c.ctx.step(super::STEP_LOCK_VALIDATE, checked as u32);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        crate::farm::give_back_unknown(txn);
        return Err(Abort::new(AbortReason::Fault));
    }
    let now = timed.then(|| c.ctx.clock.now_ns());
    let taken = take_locks(now, wait_us, &c.state.post, &mut c.set.objs);
    match taken {
        Taken::All { changed: true } | Taken::Waiting { changed: true } => {
            return Err(Abort::new(AbortReason::Validation))
        }
        Taken::Refused => return Err(Abort::new(AbortReason::LockConflict)),
        Taken::Waiting { changed: false } => {
            // Wait mode: retry the refused locks; this round's read-only READs are
            // stale by then, so they go in a round of their own after.
            wait_for_locks(txn).await?;
            return validate_ro_alone(txn, check_ro).await;
        }
        Taken::All { changed: false } => {}
    }
    if !check_ro {
        return Ok(());
    }
    if strict {
        // Round 2: every lock is held now.
        return validate_ro_alone(txn, true).await;
    }
    check_ro_reads(c.proto.config().variant, &c.state.post, &c.set.objs)
}

/// What a lock round's CASes did.
enum Taken {
    /// Every lock is held; `changed`: a locked record's version moved since execution.
    All { changed: bool },
    /// Some CAS failed and wait mode (`lock_wait_us`) lets it be retried.
    Waiting { changed: bool },
    /// Some CAS failed: abort.
    Refused,
}

/// Take the locks a completed round's tries won (each CAS with the version READ behind
/// it).
fn take_locks(now: Option<u64>, wait_us: u64, post: &Post, objs: &mut [dmtx_runtime::Obj<FarmObj>]) -> Taken {
    let (mut refused, mut wait, mut changed) = (false, false, false);
    for o in objs.iter_mut() {
        match crate::farm::lock_try_result(post, o, now, wait_us) {
            None => {}
            Some(LockTry::Taken) => {
                let b = post.bytes(o.proto.read.expect("a locked object's version is read"));
                changed |= u64::from_le_bytes(b[..8].try_into().unwrap()) != o.proto.version;
            }
            Some(LockTry::Waiting) => wait = true,
            Some(LockTry::Refused) => refused = true,
        }
    }
    match (refused, wait) {
        (true, _) => Taken::Refused,
        (false, true) => Taken::Waiting { changed },
        (false, false) => Taken::All { changed },
    }
}

/// Wait mode: re-post each refused lock's CAS and version READ, a round trip per try,
/// until every lock is held, a version moved or the wait ran out.
async fn wait_for_locks(txn: &mut Txn<'_, Drtmh>) -> Result<(), Abort> {
    loop {
        let c = &mut *txn.coord;
        let lock = c.state.lock;
        // Wait mode: every transaction is timed (`lock_time::timed`).
        let now = Some(c.ctx.clock.now_ns());
        let post = &mut c.state.post;
        post.clear();
        for o in c.set.objs.iter_mut().filter(|o| to_lock(o.access, &o.proto)) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            crate::farm::post_lock_try(post, o, info, lock, now, true);
        }
        if c.ctx.post(&mut c.state.post).await.is_err() {
            crate::farm::give_back_unknown(txn);
            return Err(Abort::new(AbortReason::Fault));
        }
        let now = Some(c.ctx.clock.now_ns());
        match take_locks(now, c.proto.config().lock_wait_us, &c.state.post, &mut c.set.objs) {
            Taken::All { changed: false } => return Ok(()),
            Taken::Waiting { changed: false } => {}
            Taken::All { changed: true } | Taken::Waiting { changed: true } => {
                return Err(Abort::new(AbortReason::Validation))
            }
            Taken::Refused => return Err(Abort::new(AbortReason::LockConflict)),
        }
    }
}

/// Post a 16-byte READ (`vlock` + `version`) of each read-only object's primary.
fn push_ro_reads(post: &mut Post, objs: &mut [dmtx_runtime::Obj<FarmObj>], catalog: &dmtx_store::Catalog) {
    for o in objs.iter_mut().filter(|o| o.access == Access::ReadOnly) {
        let info = catalog.get(o.table).expect("table checked at add");
        o.proto.read = Some(post.read(info.ptr(0, o.proto.rel + VLOCK as u64), 16));
    }
}

/// The read-only records' validation in a round of its own (a transaction that locks
/// nothing, or `strict` after its locks): nothing when `check` is false.
async fn validate_ro_alone(txn: &mut Txn<'_, Drtmh>, check: bool) -> Result<(), Abort> {
    if !check {
        return Ok(());
    }
    let c = &mut *txn.coord;
    let post = &mut c.state.post;
    post.clear();
    push_ro_reads(post, &mut c.set.objs, &c.ctx.catalog);
    let ro = c.set.objs.iter().filter(|o| o.access == Access::ReadOnly).count();
    c.ctx.step(super::STEP_LOCK_VALIDATE, ro as u32);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        return Err(Abort::new(AbortReason::Fault));
    }
    check_ro_reads(c.proto.config().variant, &c.state.post, &c.set.objs)
}

/// Each read-only object's READ: its version unchanged and (unless the broken variant)
/// its lock word clear.
fn check_ro_reads(variant: DrtmhVariant, post: &Post, objs: &[dmtx_runtime::Obj<FarmObj>]) -> Result<(), Abort> {
    let papers_rule = variant == DrtmhVariant::VersionOnlyValidation;
    for o in objs.iter().filter(|o| o.access == Access::ReadOnly) {
        let b = post.bytes(o.proto.read.expect("validation posts a read"));
        let vlock = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
        if version != o.proto.version || (!papers_rule && vlock != 0) {
            return Err(Abort::new(AbortReason::Validation));
        }
    }
    Ok(())
}
