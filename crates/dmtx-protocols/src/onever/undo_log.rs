//! Undo logs: each coordinator's log area on each memory node, the format of one log,
//! its status word, and the WRITE that fills it (FORD §4.3.1). FaRM and DrTM+H keep redo
//! logs on backups, which a memory pool without CPUs cannot apply (FORD §4.3), so their
//! one-sided versions (FORD §6.1) are expected to log here too. OOCC writes redo logs
//! (OOCC §V, Write-Unlock: new images, replayed on recovery) to the same kind of area;
//! this writer takes its images from the caller's buffer, but only FORD's undo images
//! go there today.
//!
//! ```text
//! header (32 B)  coordinator (global id) | txn sequence | entry count | status
//! entry          table id (8 B) | table-relative slot offset (8 B) | old image (slot_bytes - 8)
//! ```
//!
//! One log per memory node covers the records of the transaction that node holds a
//! replica of. Status: `PENDING` while the transaction may still roll back, `COMMITTED`
//! once every replica holds the new images (written in the background with the release).
//!
//! Invariants:
//! 1. A log's WRITE precedes, in the same batch, every in-place update on its node
//!    (batches execute in order, DESIGN §2), so the old images are in place first.
//! 2. A log never exceeds its area (`log_bytes`); a transaction that would need more
//!    aborts with `LogFull` before anything is written.
//!
//! Cost: one WRITE per memory node, in the commit batch (no round trip of its own), of
//! `32 + Σ (16 + slot_bytes - 8)` bytes; one 8-byte status WRITE per node in the
//! background.

use dmtx_memnode::Control;
use dmtx_runtime::{Obj, Result};
use dmtx_store::Catalog;
use dmtx_verbs::{MnId, Post, RemotePtr};

use super::record::VERSION;
use super::OneVersionObj;

/// Header bytes: coordinator, txn sequence, entry count, status.
pub const LOG_HEADER_BYTES: usize = 32;
/// Offset of the status word in the header.
pub const LOG_STATUS_OFFSET: u64 = 24;
/// Entry header bytes: table id, table-relative slot offset.
pub const LOG_ENTRY_HEADER_BYTES: usize = 16;
/// Status: the transaction may still roll back.
pub const LOG_PENDING: u64 = 1;
/// Status: the transaction committed; the log is garbage.
pub const LOG_COMMITTED: u64 = 2;

/// One coordinator's undo-log areas, one per memory node.
#[derive(Debug)]
pub struct UndoLog {
    /// Area base per memory node.
    base: Vec<u64>,
    /// Bytes of each area.
    bytes: u32,
}

impl UndoLog {
    /// Allocate an area of `bytes` on every memory node.
    pub fn alloc(control: &dyn Control, bytes: u32) -> Result<Self> {
        let mut base = Vec::with_capacity(control.mn_count());
        for mn in 0..control.mn_count() {
            base.push(control.alloc(MnId(mn as u16), bytes as u64, 64)?);
        }
        Ok(Self { base, bytes })
    }

    /// Bytes of each area.
    #[inline]
    pub fn bytes(&self) -> u32 {
        self.bytes
    }

    /// The start of the area on `mn` (also where a selective FLUSH is aimed).
    #[inline]
    pub fn area(&self, mn: MnId) -> RemotePtr {
        RemotePtr::new(mn, self.base[mn.index()])
    }

    /// Append to `post` the log WRITE for memory node `mn`: one entry per written object
    /// with a replica there, its old image at `undo[obj.undo_at()..]`. `Err(needed)`, the
    /// log's length in bytes, with nothing appended, when it would exceed the area
    /// (invariant 2): the caller aborts with `LogFull`.
    pub fn post_write<S: OneVersionObj>(
        &self,
        post: &mut Post,
        mn: MnId,
        (coord, txn_seq): (u64, u64),
        objs: &[Obj<S>],
        catalog: &Catalog,
        undo: &[u8],
    ) -> std::result::Result<(), usize> {
        let mut len = LOG_HEADER_BYTES;
        let mut count = 0u64;
        for o in objs.iter().filter(|o| o.access.writes()) {
            let info = catalog.get(o.table).expect("table checked at add");
            if info.meta.replicas.iter().any(|&(m, _)| m == mn) {
                len += LOG_ENTRY_HEADER_BYTES + info.shape.slot_bytes as usize - VERSION;
                count += 1;
            }
        }
        if len > self.bytes as usize {
            return Err(len);
        }
        let header = [coord, txn_seq, count, LOG_PENDING];
        post.write_with(self.area(mn), len, |buf| {
            for (i, w) in header.iter().enumerate() {
                buf[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            let mut at = LOG_HEADER_BYTES;
            for o in objs.iter().filter(|o| o.access.writes()) {
                let info = catalog.get(o.table).expect("table checked at add");
                if !info.meta.replicas.iter().any(|&(m, _)| m == mn) {
                    continue;
                }
                let img = info.shape.slot_bytes as usize - VERSION;
                buf[at..at + 8].copy_from_slice(&(o.table as u64).to_le_bytes());
                buf[at + 8..at + 16].copy_from_slice(&o.proto.rel().to_le_bytes());
                let u = o.proto.undo_at();
                buf[at + 16..at + 16 + img].copy_from_slice(&undo[u..u + img]);
                at += LOG_ENTRY_HEADER_BYTES + img;
            }
            debug_assert_eq!(at, len);
        });
        Ok(())
    }

    /// Append to `post` the WRITEs marking the logs on `mns` committed.
    pub fn post_committed(&self, post: &mut Post, mns: &[MnId]) {
        for &mn in mns {
            let at = RemotePtr::new(mn, self.base[mn.index()] + LOG_STATUS_OFFSET);
            post.write(at, &LOG_COMMITTED.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use dmtx_runtime::Access;

    use super::super::testkit::{catalog, obj, ops, table};
    use super::*;

    fn word(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn a_log_holds_the_old_image_of_each_written_record_on_its_node() {
        // Table 0 on nodes 0 and 1, table 1 on node 1 only.
        let cat = catalog([table(0, &[0, 1]), table(1, &[1])]);
        let img = cat.get(0).unwrap().shape.slot_bytes as usize - VERSION;
        let undo: Vec<u8> = (0..2 * img).map(|i| i as u8).collect();
        let objs = [
            obj(0, 10, Access::ReadWrite, 64, 0),
            obj(0, 11, Access::ReadOnly, 128, 0),
            obj(1, 12, Access::Insert, 192, img),
        ];
        let log = UndoLog {
            base: vec![4096, 8192],
            bytes: 4096,
        };
        let mut post = Post::new();
        log.post_write(&mut post, MnId(0), (3, 44), &objs, &cat, &undo).unwrap();
        log.post_write(&mut post, MnId(1), (3, 44), &objs, &cat, &undo).unwrap();
        let got = ops(&post);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[0].1, got[0].2), ("write", 0, 4096));
        assert_eq!((got[1].0, got[1].1, got[1].2), ("write", 1, 8192));

        let node0 = &got[0].3;
        assert_eq!(node0.len(), LOG_HEADER_BYTES + LOG_ENTRY_HEADER_BYTES + img);
        assert_eq!([0, 8, 16, 24].map(|at| word(node0, at)), [3, 44, 1, LOG_PENDING]);
        assert_eq!([32, 40].map(|at| word(node0, at)), [0, 64], "table 0, slot 64");
        assert_eq!(&node0[48..], &undo[..img]);

        let node1 = &got[1].3;
        assert_eq!(node1.len(), LOG_HEADER_BYTES + 2 * (LOG_ENTRY_HEADER_BYTES + img));
        assert_eq!(word(node1, 16), 2, "the read-only record is not logged");
        let second = LOG_HEADER_BYTES + LOG_ENTRY_HEADER_BYTES + img;
        assert_eq!([second, second + 8].map(|at| word(node1, at)), [1, 192]);
        assert_eq!(&node1[second + 16..], &undo[img..]);
    }

    #[test]
    fn a_log_larger_than_its_area_is_refused_before_anything_is_written() {
        let cat = catalog([table(0, &[0])]);
        let img = cat.get(0).unwrap().shape.slot_bytes as usize - VERSION;
        let undo = vec![0u8; 2 * img];
        let objs = [
            obj(0, 10, Access::ReadWrite, 64, 0),
            obj(0, 11, Access::ReadWrite, 128, img),
        ];
        let fits = (LOG_HEADER_BYTES + 2 * (LOG_ENTRY_HEADER_BYTES + img)) as u32;
        let mut post = Post::new();
        let tight = UndoLog {
            base: vec![0],
            bytes: fits,
        };
        tight
            .post_write(&mut post, MnId(0), (1, 1), &objs, &cat, &undo)
            .unwrap();
        post.clear();
        let short = UndoLog {
            base: vec![0],
            bytes: fits - 8,
        };
        let got = short.post_write(&mut post, MnId(0), (1, 1), &objs, &cat, &undo);
        assert_eq!(got, Err(fits as usize));
        assert!(post.is_empty());
    }

    #[test]
    fn committing_marks_the_status_word_of_each_log() {
        let log = UndoLog {
            base: vec![4096, 8192],
            bytes: 4096,
        };
        let mut post = Post::new();
        log.post_committed(&mut post, &[MnId(1), MnId(0)]);
        let status = LOG_COMMITTED.to_le_bytes().to_vec();
        assert_eq!(
            ops(&post),
            [
                ("write", 1, 8192 + LOG_STATUS_OFFSET, status.clone()),
                ("write", 0, 4096 + LOG_STATUS_OFFSET, status),
            ]
        );
    }
}
