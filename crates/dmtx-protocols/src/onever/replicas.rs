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

#[cfg(test)]
mod tests {
    use dmtx_runtime::Access;

    use super::super::testkit::{catalog, obj, ops, table};
    use super::*;

    #[test]
    fn the_nodes_of_a_commit_are_those_of_written_records_in_order_met() {
        let cat = catalog([table(0, &[2, 0]), table(1, &[1, 2]), table(2, &[3])]);
        let objs = [
            obj(2, 1, Access::ReadOnly, 0, 0),
            obj(0, 1, Access::ReadWrite, 0, 0),
            obj(1, 1, Access::Delete, 0, 0),
        ];
        let mut mns = vec![MnId(9)];
        collect_mns(&mut mns, &objs, &cat);
        assert_eq!(mns, [MnId(2), MnId(0), MnId(1)]);
    }

    #[test]
    fn backups_get_the_whole_slot_and_primaries_nothing() {
        let cat = catalog([table(0, &[0, 1, 2]), table(1, &[0])]);
        let mut post = Post::new();
        assert!(post_backup_writes(&mut post, cat.get(0).unwrap(), 64, &[5u8; 56]));
        assert_eq!(
            ops(&post),
            [
                ("write", 1, 2000 + 64, vec![5u8; 56]),
                ("write", 2, 3000 + 64, vec![5u8; 56])
            ]
        );
        post.clear();
        assert!(!post_backup_writes(&mut post, cat.get(1).unwrap(), 64, &[5u8; 56]));
        assert!(post.is_empty());
    }

    #[test]
    fn only_nodes_holding_a_written_backup_are_flushed() {
        // Node 0: primary of table 0 only. Node 1: backup of table 0. Node 2: backup of
        // table 1, which is only read.
        let cat = catalog([table(0, &[0, 1]), table(1, &[3, 2])]);
        let objs = [obj(0, 1, Access::ReadWrite, 0, 0), obj(1, 1, Access::ReadOnly, 0, 0)];
        let mut post = Post::new();
        let mns = [MnId(0), MnId(1), MnId(2)];
        post_selective_flush(&mut post, &mns, &objs, &cat, |mn| RemotePtr::new(mn, 77));
        assert_eq!(ops(&post), [("flush", 1, 77, vec![])]);
    }
}
