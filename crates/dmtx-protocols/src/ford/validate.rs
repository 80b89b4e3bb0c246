//! Validation of read-only data, FORD §4.6 (2), with dmtx's lock check.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::layout::VLOCK;
use super::{Ford, FordVariant};

/// One 16-byte READ (`vlock` + `version`) of the primary per read-only object, all in
/// one round trip. Fails if a version changed **or the record is locked**.
///
/// Skipped when the transaction writes nothing and read one object from the primary
/// with its lock word clear: that READ saw the latest committed value with no writer
/// pending, so it serializes at the READ, after everything this coordinator did before.
/// FORD also skips it for a lone read from a backup (or of a locked primary), which can
/// return the old value of a record whose validated writer has not committed yet: after
/// this coordinator saw a write that writer serializes before, that breaks its session
/// order (kept as [`FordVariant::UnvalidatedSingleRead`]).
///
/// Why the lock matters, for both kinds of transaction (found by the isolation checker
/// on FORD's published rule, which compares versions only and reads them from the
/// replica the data came from):
/// - write skew: read-write T1 locks B and reads A, T2 locks A and reads B; both see
///   unchanged versions and commit;
/// - read-only transactions too: read-write T2 validates its read-only x (unchanged),
///   so it serializes there, but its locked write of y lands only at its commit. T3
///   then overwrites x and commits; read-only T1 reads T3's write and the old y, and its
///   versions are still unchanged when it validates. T2 < T3 < T1 < T2: a cycle. A
///   record locked at T1's validation is exactly such a pending write.
///
/// Locks live on primaries only, so validation reads primaries even when the data came
/// from a backup (FORD §4.4 also reads versions from backups).
pub(super) async fn validate(txn: &mut Txn<'_, Ford>) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let reads = c.set.objs.iter().filter(|o| o.access == Access::ReadOnly).count();
    let variant = c.proto.config().variant;
    let lone_read_settled = !writes
        && reads == 1
        && (variant.papers_lone_read()
            || c.set
                .objs
                .iter()
                .any(|o| o.access == Access::ReadOnly && o.proto.read_unlocked));
    if reads == 0 || lone_read_settled || variant == FordVariant::SkipRoValidation {
        return Ok(());
    }
    let papers_rule = c.proto.config().variant == FordVariant::VersionOnlyValidation;
    let post = &mut c.state.post;
    post.clear();
    for o in c.set.objs.iter_mut().filter(|o| o.access == Access::ReadOnly) {
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let r = if papers_rule && !writes {
            o.proto.replica as usize
        } else {
            0
        };
        o.proto.read = Some(post.read(info.ptr(r, o.proto.rel + VLOCK as u64), 16));
    }
    c.ctx.step(super::STEP_VALIDATE, reads as u32);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        return Err(Abort::new(AbortReason::Fault));
    }
    let post = &c.state.post;
    for o in c.set.objs.iter().filter(|o| o.access == Access::ReadOnly) {
        let b = post.bytes(o.proto.read.expect("validation posts a read"));
        let vlock = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
        if version != o.proto.version || (!papers_rule && vlock != 0) {
            return Err(Abort::new(AbortReason::Validation));
        }
    }
    Ok(())
}
