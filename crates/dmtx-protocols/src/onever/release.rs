//! Release and rollback: giving back what a transaction holds on memory nodes (slot
//! locks on primaries, the invisible mark on backups, an insert lock of a bucket chain),
//! and, when the commit post failed, putting the old images back first (FORD §4.3.2,
//! §4.8). Every lock-based one-version protocol ends this way (FaRM's and DrTM+H's
//! "commit primary & unlock", FORD §2.2).
//!
//! Invariants:
//! 1. A primary's lock is cleared by WRITE only by its holder ([`Holds::locked`]).
//! 2. A backup's mark is cleared by `CAS(INVISIBLE | owner → 0)`, so a late release of an
//!    earlier transaction never clears the mark of a later one (record invariant 3).
//! 3. A rollback's restore WRITEs precede its releases in one post, so each node has its
//!    old image back before the record is unlocked.
//!
//! Cost: release: per held lock one 8-byte WRITE, per marked backup one CAS, in the
//! background (never waited for). Rollback: one WRITE of the old image per replica of
//! each written record plus the release, in one awaited post.

use dmtx_runtime::{AddrCache, Obj};
use dmtx_store::{Catalog, BUCKET_LOCK_OFFSET};
use dmtx_verbs::Post;

use super::record::{INVISIBLE, VERSION, VLOCK};
use super::OneVersionObj;

/// What one object holds on memory nodes.
#[derive(Debug, Default)]
pub struct Holds {
    /// The primary's slot lock (`vlock` = owner).
    pub locked: bool,
    /// The backups' `vlock` were set to `INVISIBLE | owner` by a commit batch.
    pub backups_marked: bool,
    /// The insert lock of this chain (table-relative offset of its home bucket).
    pub bucket_lock: Option<u64>,
    /// When the primary's lock was asked for and taken ([`super::lock_time`]).
    pub times: super::lock_time::LockTimes,
}

/// Append to `post` the ops that release everything the objects hold (`lock` is the
/// owner word the coordinator locks with), and forget them.
pub fn push_release<S: OneVersionObj>(post: &mut Post, objs: &mut [Obj<S>], catalog: &Catalog, lock: u64) {
    for o in objs.iter_mut() {
        let info = catalog.get(o.table).expect("table checked at add");
        let rel = o.proto.rel();
        let h = o.proto.holds();
        if h.locked {
            post.write(info.ptr(0, rel + VLOCK as u64), &0u64.to_le_bytes());
            h.locked = false;
        }
        if h.backups_marked {
            for r in 1..info.replica_count() {
                post.cas(info.ptr(r, rel + VLOCK as u64), INVISIBLE | lock, 0);
            }
            h.backups_marked = false;
        }
        if let Some(b) = h.bucket_lock.take() {
            post.write(info.ptr(0, b + BUCKET_LOCK_OFFSET), &0u64.to_le_bytes());
        }
    }
}

/// Append to `post` the rollback of a failed commit: the old image of every written
/// record (at `undo[obj.undo_at()..]`) back on every replica, unless `restore` is false
/// (a deliberately broken test variant), then the release (invariant 3). The written
/// records' cached addresses are dropped (a rolled-back insert or delete may have moved
/// the key) and no object reports a version written.
pub fn push_rollback<S: OneVersionObj>(
    post: &mut Post,
    objs: &mut [Obj<S>],
    catalog: &Catalog,
    cache: &AddrCache,
    (undo, restore): (&[u8], bool),
    lock: u64,
) {
    for o in objs.iter().filter(|o| o.access.writes()) {
        let info = catalog.get(o.table).expect("table checked at add");
        let img = info.shape.slot_bytes as usize - VERSION;
        let u = o.proto.undo_at();
        for r in (0..info.replica_count()).filter(|_| restore) {
            post.write(info.ptr(r, o.proto.rel() + VERSION as u64), &undo[u..u + img]);
        }
        cache.evict(o.table, o.key, o.proto.rel());
    }
    for o in objs.iter_mut() {
        o.version_written = None;
    }
    push_release(post, objs, catalog, lock);
}

#[cfg(test)]
mod tests {
    use dmtx_runtime::Access;

    use super::super::testkit::{cache, catalog, obj, ops, table};
    use super::*;

    const ME: u64 = 7;

    fn zero() -> Vec<u8> {
        0u64.to_le_bytes().to_vec()
    }

    #[test]
    fn release_gives_back_every_lock_and_mark_once() {
        let cat = catalog([table(0, &[0, 1, 2])]);
        let mut objs = [obj(0, 1, Access::ReadWrite, 64, 0), obj(0, 2, Access::Insert, 128, 0)];
        objs[0].proto.holds.locked = true;
        objs[0].proto.holds.backups_marked = true;
        objs[1].proto.holds.bucket_lock = Some(512);
        let mut post = Post::new();
        push_release(&mut post, &mut objs, &cat, ME);
        let unmark = [(INVISIBLE | ME).to_le_bytes(), 0u64.to_le_bytes()].concat();
        assert_eq!(
            ops(&post),
            [
                ("write", 0, 1000 + 64, zero()),
                ("cas", 1, 2000 + 64, unmark.clone()),
                ("cas", 2, 3000 + 64, unmark),
                ("write", 0, 1000 + 512 + BUCKET_LOCK_OFFSET, zero()),
            ]
        );
        post.clear();
        push_release(&mut post, &mut objs, &cat, ME);
        assert!(post.is_empty(), "nothing is held any more");
    }

    #[test]
    fn rollback_restores_every_replica_before_releasing() {
        let cat = catalog([table(0, &[0, 1])]);
        let img = cat.get(0).unwrap().shape.slot_bytes as usize - VERSION;
        let undo: Vec<u8> = (0..img).map(|i| i as u8).collect();
        let mut objs = [obj(0, 1, Access::Insert, 64, 0), obj(0, 2, Access::ReadOnly, 128, 0)];
        objs[0].proto.holds.locked = true;
        let cache = cache();
        cache.put(0, 1, 64);
        let mut post = Post::new();
        push_rollback(&mut post, &mut objs, &cat, &cache, (&undo, true), ME);
        assert_eq!(
            ops(&post),
            [
                ("write", 0, 1000 + 64 + VERSION as u64, undo.clone()),
                ("write", 1, 2000 + 64 + VERSION as u64, undo.clone()),
                ("write", 0, 1000 + 64, zero()),
            ]
        );
        assert_eq!(cache.get(0, 1), None, "a rolled-back insert's address is dropped");
        assert!(objs.iter().all(|o| o.version_written.is_none()));

        // The broken variant only releases.
        objs[0].proto.holds.locked = true;
        post.clear();
        push_rollback(&mut post, &mut objs, &cat, &cache, (&undo, false), ME);
        assert_eq!(ops(&post), [("write", 0, 1000 + 64, zero())]);
    }
}
