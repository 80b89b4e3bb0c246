//! The one-version record machinery: what every protocol that keeps one version of each
//! record in place, behind a lock word, on FORD's hash index needs, whatever its
//! concurrency-control rule. FORD uses all of it; FaRM and DrTM+H on one-sided verbs
//! (FORD §2.2, §6.1), FORD-LV, OOCC, DrTM-lease and DSLR are its planned users.
//!
//! | module | holds | verbs and round trips |
//! | --- | --- | --- |
//! | [`record`] | the slot layout `vlock \| version \| key \| meta \| checksum \| value` | none |
//! | [`tear`] | the checksum tear detector | none; 8 B per record |
//! | [`index_walk`] | bucket walk, insert lock, overflow FAA and link, stale-address eviction | per bucket one READ; insert +1 CAS; overflow +1 round (FAA) and one WRITE per replica |
//! | [`undo_log`] | log areas, log format and status word, the log WRITE | one WRITE per MN in the commit batch; status WRITE in the background |
//! | [`replicas`] | fan-out to backups, selective FLUSH | per record one WRITE per backup; one FLUSH per backup MN; no round trip of their own |
//! | [`release`] | release and rollback | per held lock one WRITE or CAS, in the background; rollback: one awaited post |
//!
//! What stays with each protocol: when to lock (FORD hitchhikes the lock on the
//! execution READ), where to read (FORD's backup reads), the validation rule, what the
//! commit batch writes to the primary, and its broken test variants.
//!
//! The modules take plain data (a [`dmtx_verbs::Post`], a [`dmtx_store::TableInfo`],
//! offsets) and, where they walk a transaction's objects, the protocol's per-object
//! state through [`OneVersionObj`].

pub mod index_walk;
pub mod record;
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
