//! Validation of read-only data, FORD §4.6 (2) with dmtx's lock check.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::layout::{INVISIBLE, VLOCK};
use super::{Ford, FordVariant};

/// One 16-byte READ (`vlock` + `version`) per read-only object, all in one round trip.
///
/// Skipped when the transaction writes nothing and read one object: that read was
/// checked by the tear detector and needs no second look.
///
/// A read-write transaction reads the primaries and fails if a read-only record's
/// version changed *or another transaction holds its lock* (see the module doc: the
/// paper's version-only rule admits write skew). A read-only transaction validates
/// versions on the replicas it read from; that alone orders it before any writer it
/// raced with.
pub(super) async fn validate(txn: &mut Txn<'_, Ford>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let reads = c.set.objs.iter().filter(|o| o.access == Access::ReadOnly).count();
    if reads == 0 || (!writes && reads == 1) {
        return Ok(());
    }
    let check_lock = writes && c.proto.config().variant != FordVariant::VersionOnlyValidation;
    let post = &mut c.state.post;
    post.clear();
    for o in c.set.objs.iter_mut().filter(|o| o.access == Access::ReadOnly) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let r = if writes { 0 } else { o.proto.replica as usize };
        o.proto.read = Some(post.read(info.ptr(r, o.proto.rel + VLOCK as u64), 16));
    }
    if c.ctx.post(&mut c.state.post).await.is_err() {
        return Err(Abort::new(AbortReason::Fault));
    }
    let post = &c.state.post;
    for o in c.set.objs.iter().filter(|o| o.access == Access::ReadOnly) {
        let b = post.bytes(o.proto.read.expect("validation posts a read"));
        let vlock = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
        if version != o.proto.version {
            return Err(Abort::new(AbortReason::Validation));
        }
        if check_lock && vlock & !INVISIBLE != 0 {
            return Err(Abort::new(AbortReason::Validation));
        }
    }
    Ok(())
}
