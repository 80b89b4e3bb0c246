//! Lock and validation, FORD §2.3 Fig. 2 (FaRM's lock and validate phases), with the
//! lock check the paper is silent on.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::{Farm, FarmVariant, LockTry};
use crate::onever::record::VLOCK;

/// Lock: one `CAS(vlock, 0 → me)` on the primary of every read-write and delete object
/// (inserts locked their slot during execution), all in one round trip. A failed CAS
/// aborts at once (no waiting; with `lock_wait_us` the refused CASes are re-posted, a
/// round per try, until taken or out of time); the locks taken are released by `abort`.
pub(super) async fn lock(txn: &mut Txn<'_, Farm>) -> Result<(), Abort> {
    // Only wait mode (`lock_wait_us`) takes more than one round: it re-posts the CASes
    // that failed.
    loop {
        if lock_round(txn).await? {
            return Ok(());
        }
    }
}

/// One lock round over the write set's records not locked yet: `Ok(true)` once all are,
/// `Ok(false)` when a failed CAS may be retried.
async fn lock_round(txn: &mut Txn<'_, Farm>) -> Result<bool, Abort> {
    let c = &mut *txn.coord;
    let lock = c.state.lock;
    let wait_us = c.proto.config().lock_wait_us;
    let timed = crate::onever::lock_time::timed(c.set.txn_seq, wait_us);
    let now = timed.then(|| c.ctx.clock.now_ns());
    let post = &mut c.state.post;
    post.clear();
    for o in c
        .set
        .objs
        .iter_mut()
        .filter(|o| o.access.writes() && !o.proto.holds.locked)
    {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        super::post_lock_try(post, o, info, lock, now, false);
    }
    if post.is_empty() {
        return Ok(true);
    }
    if c.ctx.post(&mut c.state.post).await.is_err() {
        super::give_back_unknown(txn);
        return Err(Abort::new(AbortReason::Fault));
    }
    let now = timed.then(|| c.ctx.clock.now_ns());
    let (mut all, mut refused) = (true, false);
    for o in c.set.objs.iter_mut().filter(|o| o.access.writes()) {
        match super::lock_try_result(&c.state.post, o, now, wait_us) {
            None | Some(LockTry::Taken) => {}
            Some(LockTry::Waiting) => all = false,
            Some(LockTry::Refused) => refused = true,
        }
    }
    if refused {
        return Err(Abort::new(AbortReason::LockConflict));
    }
    Ok(all)
}

/// Validation: one 16-byte READ (`vlock` + `version`) of the primary per read-only
/// **and** read-write object, in one round trip. Fails if a version changed or the
/// record is locked by another coordinator (a read-write object is locked by us).
///
/// Skipped when the transaction writes nothing and read one object whose lock word was
/// clear in that READ: it saw the latest committed value with no writer pending, so it
/// serializes at the READ (the rule of FORD's `validate.rs`; FaRM reads primaries
/// anyway). Versions alone (the paper's rule, kept as
/// [`FarmVariant::VersionOnlyValidation`]) let two transactions that each lock what the
/// other only reads both commit (write skew).
pub(super) async fn validate(txn: &mut Txn<'_, Farm>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let checked = |a: Access| a == Access::ReadOnly || a == Access::ReadWrite || a == Access::Delete;
    let count = c.set.objs.iter().filter(|o| checked(o.access)).count();
    let lone = !writes && count == 1 && c.set.objs.iter().any(|o| o.proto.read_unlocked);
    if count == 0 || lone {
        return Ok(());
    }
    let papers_rule = c.proto.config().variant == FarmVariant::VersionOnlyValidation;
    let lock = c.state.lock;
    let post = &mut c.state.post;
    post.clear();
    for o in c.set.objs.iter_mut().filter(|o| checked(o.access)) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        o.proto.read = Some(post.read(info.ptr(0, o.proto.rel + VLOCK as u64), 16));
    }
    c.ctx.step(super::STEP_VALIDATE, count as u32);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        return Err(Abort::new(AbortReason::Fault));
    }
    let post = &c.state.post;
    for o in c.set.objs.iter().filter(|o| checked(o.access)) {
        let b = post.bytes(o.proto.read.expect("validation posts a read"));
        let vlock = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let mine = if o.access == Access::ReadOnly { 0 } else { lock };
        if version != o.proto.version || (!papers_rule && vlock != mine) {
            return Err(Abort::new(AbortReason::Validation));
        }
    }
    Ok(())
}
