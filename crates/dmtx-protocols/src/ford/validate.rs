//! Validation of read-only data, FORD §4.6 (2), with dmtx's lock check.

use dmtx_runtime::{Abort, AbortReason, Access, Txn};

use super::layout::VLOCK;
use super::{FordBase, FordVariant};

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
pub(super) async fn validate<P: FordBase>(txn: &mut Txn<'_, P>) -> Result<(), Abort> {
    if !needs_validation(txn) {
        return Ok(());
    }
    validate_remote(txn, |_| true).await
}

/// Whether the transaction's read-only data need validating at all: not when it reads
/// none, nor when it is a lone read settled by its own READ (see [`validate`]).
pub(crate) fn needs_validation<P: FordBase>(txn: &Txn<'_, P>) -> bool {
    let c = &*txn.coord;
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let reads = c.set.objs.iter().filter(|o| o.access == Access::ReadOnly).count();
    let variant = c.proto.ford_config().variant;
    let lone_read_settled = !writes
        && reads == 1
        && (variant.papers_lone_read()
            || c.set
                .objs
                .iter()
                .any(|o| o.access == Access::ReadOnly && o.proto.read_unlocked));
    !(reads == 0 || lone_read_settled || variant == FordVariant::SkipRoValidation)
}

/// The validation round over RDMA of the read-only objects `pick` selects (by index),
/// in one round trip: fails if a version changed or a record is locked. Each picked
/// object's 16-byte READ stays in `state.post` under `proto.read` ([`fetched`]).
pub(crate) async fn validate_remote<P: FordBase>(
    txn: &mut Txn<'_, P>,
    pick: impl Fn(usize) -> bool,
) -> Result<(), Abort> {
    let c = &mut *txn.coord;
    let writes = c.set.objs.iter().any(|o| o.access.writes());
    let papers_rule = c.proto.ford_config().variant == FordVariant::VersionOnlyValidation;
    let post = &mut c.state.post;
    post.clear();
    let mut reads = 0;
    for (i, o) in c.set.objs.iter_mut().enumerate() {
        if o.access != Access::ReadOnly || !pick(i) {
            continue;
        }
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        let r = if papers_rule && !writes {
            o.proto.replica as usize
        } else {
            0
        };
        o.proto.read = Some(post.read(info.ptr(r, o.proto.rel + VLOCK as u64), 16));
        reads += 1;
    }
    c.ctx.step(super::STEP_VALIDATE, reads);
    if c.ctx.post(&mut c.state.post).await.is_err() {
        return Err(Abort::new(AbortReason::Fault));
    }
    let post = &c.state.post;
    for (i, o) in c.set.objs.iter().enumerate() {
        if o.access != Access::ReadOnly || !pick(i) {
            continue;
        }
        let (vlock, version) = fetched(post, &o.proto);
        if version != o.proto.version || (!papers_rule && vlock != 0) {
            return Err(Abort::new(AbortReason::Validation));
        }
    }
    Ok(())
}

/// The `(vlock, version)` a validation READ of `obj` returned ([`validate_remote`]).
pub(crate) fn fetched(post: &dmtx_verbs::Post, obj: &super::FordObj) -> (u64, u64) {
    let b = post.bytes(obj.read.expect("validation posts a read"));
    let vlock = u64::from_le_bytes(b[0..8].try_into().unwrap());
    let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
    (vlock, version)
}
