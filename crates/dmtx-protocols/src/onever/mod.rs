//! The one-version record machinery: what every protocol that keeps one version of each
//! record in place, behind a lock word, on FORD's hash index needs, whatever its
//! concurrency-control rule. FORD uses all of it; FaRM and DrTM+H on one-sided verbs
//! (FORD §2.2, §6.1), FORD-LV, OOCC, DrTM-lease and DSLR are its planned users.
//!
//! | module | holds | verbs and round trips |
//! | --- | --- | --- |
//! | [`record`] | the slot layout `vlock \| version \| key \| meta \| checksum \| value` | none |
//! | [`tear`] | the checksum tear detector | none; 8 B per record |
//! | [`lease`] | OOCC's implicit-lease word (read-validate and write-wait) and the drift offset | none |
//! | [`index_walk`] | bucket walk, insert lock, overflow FAA and link, stale-address eviction | per bucket one READ; insert +1 CAS; overflow +1 round (FAA) and one WRITE per replica |
//! | [`undo_log`] | log areas, log format and status word, the log WRITE | one WRITE per MN in the commit batch; status WRITE in the background |
//! | [`redo_log`] | redo logs on backups (FaRM, DrTM+H) and their version-guarded truncation into the backups | one WRITE per backup MN in the commit-backup batch; truncation: two round trips off the critical path |
//! | [`replicas`] | fan-out to backups, selective FLUSH | per record one WRITE per backup; one FLUSH per backup MN; no round trip of their own |
//! | [`release`] | release and rollback | per held lock one WRITE or CAS, in the background; rollback: one awaited post |
//! | [`lock_time`] | lock duration, hold and wait times (FORD §6.2.1) and the wait-on-conflict knob `lock_wait_us` | none (a retried lock CAS: one round trip per try) |
//!
//! What stays with each protocol: when to lock (FORD hitchhikes the lock on the
//! execution READ), where to read (FORD's backup reads), the validation rule, what the
//! commit batch writes to the primary, and its broken test variants.
//!
//! The modules take plain data (a [`dmtx_verbs::Post`], a [`dmtx_store::TableInfo`],
//! offsets) and, where they walk a transaction's objects, the protocol's per-object
//! state through [`OneVersionObj`].

pub mod index_walk;
pub mod lease;
pub mod lock_time;
pub mod record;
pub mod redo_log;
pub mod release;
pub mod replicas;
pub mod tear;
pub mod undo_log;

pub use release::Holds;

/// What the shared machinery needs of a protocol's per-object state.
pub trait OneVersionObj {
    /// Table-relative offset of the object's slot, once located.
    fn rel(&self) -> u64;
    /// Where the object's old image (bytes 8.. of its slot, [`record::VERSION`]) starts
    /// in the coordinator's undo buffer, once locked.
    fn undo_at(&self) -> usize;
    /// What the object holds on memory nodes.
    fn holds(&mut self) -> &mut Holds;
}

/// Tables, objects and completed posts for the unit tests of the shared modules.
#[cfg(test)]
mod testkit {
    use std::sync::Arc;

    use dmtx_memnode::TableMeta;
    use dmtx_runtime::{Access, AddrCache, Obj, SharedAddrCache};
    use dmtx_store::{Catalog, SlotLayout, BUCKET_HEADER_BYTES};
    use dmtx_verbs::{MnId, Op, Post};

    use super::record::OneVersionLayout;
    use super::{Holds, OneVersionObj};

    /// Value bytes of the test table.
    pub const VALUE_BYTES: u32 = 16;
    /// Slots per bucket of the test table.
    pub const SLOTS: u32 = 2;

    /// A table `id` of 4 hashed and 2 overflow buckets, replica `r` on node `mns[r]` at
    /// byte `1000 * (r + 1)`.
    pub fn table(id: u32, mns: &[u16]) -> TableMeta {
        let slot_bytes = OneVersionLayout.slot_bytes(VALUE_BYTES);
        TableMeta {
            id,
            name: format!("t{id}"),
            value_bytes: VALUE_BYTES,
            slot_bytes,
            slots_per_bucket: SLOTS,
            bucket_bytes: BUCKET_HEADER_BYTES + SLOTS * slot_bytes,
            bucket_count: 4,
            overflow_bucket_count: 2,
            runs: None,
            value_region: None,
            attrs: Vec::new(),
            replicas: mns
                .iter()
                .enumerate()
                .map(|(r, &mn)| (MnId(mn), 1000 * (r as u64 + 1)))
                .collect(),
        }
    }

    pub fn catalog(tables: impl IntoIterator<Item = TableMeta>) -> Catalog {
        Catalog::from_metas(tables)
    }

    pub fn cache() -> AddrCache {
        AddrCache::new(Arc::new(SharedAddrCache::new()))
    }

    /// Per-object state of a test protocol.
    #[derive(Debug, Default)]
    pub struct TestObj {
        pub rel: u64,
        pub undo_at: usize,
        pub holds: Holds,
    }

    impl OneVersionObj for TestObj {
        fn rel(&self) -> u64 {
            self.rel
        }
        fn undo_at(&self) -> usize {
            self.undo_at
        }
        fn holds(&mut self) -> &mut Holds {
            &mut self.holds
        }
    }

    pub fn obj(table: u32, key: u64, access: Access, rel: u64, undo_at: usize) -> Obj<TestObj> {
        Obj {
            table,
            key,
            access,
            value_word: 0,
            value_len: VALUE_BYTES,
            version_read: None,
            read_absent: false,
            version_written: Some(9),
            proto: TestObj {
                rel,
                undo_at,
                holds: Holds::default(),
            },
        }
    }

    /// Each op of `post` as `(kind, node, offset, data)`: a WRITE's bytes, a CAS's
    /// `expect` and `swap`, an FAA's addend, nothing for a READ or FLUSH.
    pub fn ops(post: &Post) -> Vec<(&'static str, u16, u64, Vec<u8>)> {
        post.ops()
            .iter()
            .map(|op| {
                let data = match *op {
                    Op::Write { .. } => post.write_data(op).to_vec(),
                    Op::Cas { expect, swap, .. } => [expect.to_le_bytes(), swap.to_le_bytes()].concat(),
                    Op::Faa { add, .. } => add.to_le_bytes().to_vec(),
                    Op::Read { len, .. } => (len as u64).to_le_bytes().to_vec(),
                    Op::Flush { .. } => Vec::new(),
                };
                (op.kind().name(), op.ptr().mn.0, op.ptr().offset, data)
            })
            .collect()
    }

    /// Complete `post` as a memory node would: READ `i` returns `reads[i]`, atomic op `i`
    /// returns `olds[i]`.
    pub fn complete(post: &mut Post, reads: &[&[u8]], olds: &[u64]) {
        let (mut r, mut a) = (0, 0);
        for i in 0..post.ops().len() {
            match post.ops()[i] {
                Op::Read { .. } => {
                    post.read_dst(i).copy_from_slice(reads[r]);
                    r += 1;
                }
                Op::Cas { .. } | Op::Faa { .. } => {
                    post.set_old(i, olds[a]);
                    a += 1;
                }
                _ => {}
            }
        }
        assert_eq!((r, a), (reads.len(), olds.len()), "every given result is used");
    }
}
