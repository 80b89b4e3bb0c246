//! Replica fan-out with selective remote flush (FORD §4.3.2, §4.5): a commit writes the
//! new record to the primary and to every backup in place, and FLUSHes once per memory
//! node that holds a backup, after its last WRITE. FaRM and DrTM+H commit backups before
//! primaries (FORD §2.2, §6.1); the fan-out and the flush are the same verbs.
//!
//! Invariant: a FLUSH follows every backup WRITE of the commit on its node (a FLUSH
//! persists everything written before it on its connection, DESIGN §2), and the flush
//! is left out where only primaries were written, which FORD §4.5 argues need no flush
//! (the undo log covers them).
//!
//! Cost: per written record, one WRITE of the whole slot per backup; per memory node
//! holding a backup, one FLUSH. All in the commit batch: no round trip of their own.

use dmtx_runtime::Obj;
use dmtx_store::{Catalog, TableInfo};
use dmtx_verbs::{MnId, Post, RemotePtr};

/// Collect into `mns` (cleared first) every memory node holding a replica of a record the
/// transaction writes, in the order first met.
pub fn collect_mns<S>(mns: &mut Vec<MnId>, objs: &[Obj<S>], catalog: &Catalog) {
    mns.clear();
    for o in objs.iter().filter(|o| o.access.writes()) {
        let info = catalog.get(o.table).expect("table checked at add");
        for &(mn, _) in &info.meta.replicas {
            if !mns.contains(&mn) {
                mns.push(mn);
            }
        }
    }
}

/// Append a WRITE of the whole slot `slot` (lock word included) at `rel` to every backup
/// of `info`; whether there is one.
pub fn post_backup_writes(post: &mut Post, info: &TableInfo, rel: u64, slot: &[u8]) -> bool {
    for r in 1..info.replica_count() {
        post.write(info.ptr(r, rel), slot);
    }
    info.replica_count() > 1
}

/// Append one FLUSH (aimed at `flush_at(mn)`) per node of `mns` that holds a backup of a
/// written record, after everything already in `post`.
pub fn post_selective_flush<S>(
    post: &mut Post,
    mns: &[MnId],
    objs: &[Obj<S>],
    catalog: &Catalog,
    flush_at: impl Fn(MnId) -> RemotePtr,
) {
    for &mn in mns {
        let hosts_backup = objs.iter().filter(|o| o.access.writes()).any(|o| {
            let info = catalog.get(o.table).expect("table checked at add");
            info.meta.replicas[1..].iter().any(|&(m, _)| m == mn)
        });
        if hosts_backup {
            post.flush(flush_at(mn));
        }
    }
}
