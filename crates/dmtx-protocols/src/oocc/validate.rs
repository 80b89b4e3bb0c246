//! Validate, Alg. 1 lines 11–16: whether a read record needs a validation READ, and the
//! read-only commit (the fast path of §III-B case 1, the fallback of case 3 and §IV
//! case 2.1).

use dmtx_runtime::{Abort, AbortReason, Access, Txn};
use dmtx_verbs::Post;

use super::layout::{Words, I, VERSION, W};
use super::{Oocc, OoccObj, OoccVariant};

/// Whether the read record `p` of a read-only transaction whose last round completed at
/// `c1` needs a validation READ: it showed `I` (no lease was taken, §IV), or its lease
/// had ended at `c1` (§III-B case 3).
pub(super) fn needs_validation(p: &OoccObj, c1: u64, variant: OoccVariant) -> bool {
    let intention = p.lock_seen & I != 0 && variant != OoccVariant::RoIgnoresIntention;
    intention || !in_lease(p, c1)
}

/// Whether `p`'s implicit lease still held at `c1`: `c1 − post < rv`.
#[inline]
pub(super) fn in_lease(p: &OoccObj, c1: u64) -> bool {
    c1.saturating_sub(p.post_ns) < p.rv_ns as u64
}

/// Post the validation READ of `o`: 16 bytes (`lock`, `version`) with the lock first;
/// in the paper's layout everything from the version to the copy, since lock and version
/// are apart and only the copy tells a READ the commit WRITE overtook.
pub(super) fn post_check(post: &mut Post, info: &dmtx_store::TableInfo, words: Words, o: &mut OoccObj) {
    o.read = Some(match words.copy {
        None => post.read(info.ptr(0, o.rel + words.lock as u64), 16),
        Some(_) => post.read(
            info.ptr(0, o.rel + VERSION as u64),
            info.shape.slot_bytes as usize - VERSION,
        ),
    });
}

/// What the validation READ of `o` returned: `(lock, version, intact)`.
pub(super) fn checked(post: &Post, words: Words, o: &OoccObj, variant: OoccVariant) -> (u64, u64, bool) {
    let b = post.bytes(o.read.expect("validation posts a read"));
    let w = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    match words.copy {
        None => (w(0), w(8), true),
        Some(copy) => {
            let version = w(0);
            let intact = variant == OoccVariant::NoVersionCopy || w(copy - VERSION) == version;
            (w(words.lock - VERSION), version, intact)
        }
    }
}

/// Commit a transaction that wrote nothing. With every record read unlocked and in
/// lease at `c1` it commits with no round trip; otherwise the records seen with `I` or
/// out of lease are validated in one round trip: each passes if `W` is clear and its
/// version unchanged.
pub(super) async fn read_only(txn: &mut Txn<'_, Oocc>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    if c.set.objs.is_empty() {
        return Ok(());
    }
    if c.proto.config().upper_bound {
        // Unsafe on purpose (the paper's upper bound): never validate.
        c.ctx.metric(super::METRIC_RO_OMITTED, 1);
        return Ok(());
    }
    let c1 = c.state.done_ns;
    let variant = c.proto.config().variant;
    let post = &mut c.state.post;
    post.clear();
    let mut checks = 0;
    for o in c.set.objs.iter_mut() {
        debug_assert_eq!(o.access, Access::ReadOnly);
        debug_assert!(o.proto.lock_seen & W == 0, "a write-locked read aborts in execute");
        o.proto.read = None;
        if needs_validation(&o.proto, c1, variant) {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            post_check(post, info, c.proto.words(info.shape.slot_bytes), &mut o.proto);
            checks += 1;
        }
    }
    if c.proto.config().lease_adjust {
        let first = c.set.objs.iter().map(|o| o.proto.post_ns).min().unwrap_or(c1);
        c.cn_state.control.ro.record(c1.saturating_sub(first), checks == 0);
    }
    if checks == 0 {
        c.ctx.metric(super::METRIC_RO_OMITTED, 1);
        return Ok(());
    }
    c.ctx.metric(super::METRIC_RO_VALIDATED, 1);
    c.ctx.step(super::STEP_VALIDATE, checks);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        return Err(Abort::new(AbortReason::Fault));
    }
    let post = &c.state.post;
    for o in c.set.objs.iter().filter(|o| o.proto.read.is_some()) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let words = c.proto.words(info.shape.slot_bytes);
        let (lock, version, intact) = checked(post, words, &o.proto, variant);
        if lock & W != 0 || version != o.proto.version || !intact {
            return Err(Abort::new(AbortReason::Validation));
        }
    }
    Ok(())
}
