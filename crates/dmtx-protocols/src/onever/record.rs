//! The one-version record: a hash-table slot holding one version of one record, with
//! its lock word, version and checksum in front (FORD §5.1 FObj, plus dmtx's detector).
//!
//! ```text
//! byte  0  vlock     8 B  bit 63: invisible; bits 0-62: lock owner (coordinator + 1), 0 = free
//! byte  8  version   8 B  id of the transaction that wrote the record (0 = as loaded)
//! byte 16  key       8 B
//! byte 24  meta      8 B  bit 0: occupied; bits 32-63: table id
//! byte 32  checksum  8 B  hash of bytes 8..32 and the value (the tear detector)
//! byte 40  value     value_bytes rounded up to 8
//! ```
//!
//! Invariants:
//! 1. Only the coordinator whose id is in `vlock` writes bytes 8.. of a primary slot, and
//!    only while it holds the lock.
//! 2. A slot whose `vlock` has neither bit set is intact: its checksum matches bytes
//!    8..32 and the value. (A commit sets the invisible bit before its WRITE and clears
//!    it only after every replica acknowledged.)
//! 3. On a backup, `vlock` is 0 or `INVISIBLE | owner` of the commit in progress.
//!
//! The checksum ([`super::tear`]) exists for reads that no validation round covers (a
//! read-only transaction of one object). Bytes 8.. are the record's *image*: what a
//! commit WRITE replaces and an undo log keeps.
//!
//! FORD's record (§5.1); FaRM and DrTM+H also keep a lock word and a version in front of
//! the value, and FORD-LV, OOCC, DrTM-lease and DSLR change only what the lock word
//! means. Cost: 40 header bytes per record, moved by every READ and WRITE of it.

use dmtx_store::SlotLayout;

use super::tear::checksum;

/// Byte offset of the lock/visibility word.
pub const VLOCK: usize = 0;
/// Byte offset of the version.
pub const VERSION: usize = 8;
/// Byte offset of the key.
pub const KEY: usize = 16;
/// Byte offset of the meta word.
pub const META: usize = 24;
/// Byte offset of the checksum.
pub const CHECKSUM: usize = 32;
/// Byte offset of the value.
pub const VALUE: usize = 40;
/// Header bytes before the value.
pub const HEADER_BYTES: usize = VALUE;

/// The version of a bulk-loaded record; transactions install their own (non-zero) ids.
pub const LOADED_VERSION: u64 = 0;

/// The invisible flag of `vlock`.
pub const INVISIBLE: u64 = 1 << 63;
const OCCUPIED: u64 = 1;

const _: () = assert!(VERSION == VLOCK + 8 && CHECKSUM + 8 == VALUE && VALUE.is_multiple_of(8));

#[inline]
fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The meta word of a record.
#[inline]
pub fn meta(table: u32, occupied: bool) -> u64 {
    ((table as u64) << 32) | occupied as u64
}

/// Bits of the write sequence in the meta word (bits 1-31).
pub const SEQ_MASK: u64 = 0x7fff_ffff;

/// The meta word of a record whose write sequence is `seq` (wrapping, 31 bits): the
/// number of commits that wrote this slot since it was loaded. Protocols that install
/// logged records into backups out of order (FaRM's and DrTM+H's truncation,
/// [`super::redo_log`]) compare it to tell the newer image; FORD leaves it 0.
#[inline]
pub fn meta_seq(table: u32, occupied: bool, seq: u64) -> u64 {
    meta(table, occupied) | ((seq & SEQ_MASK) << 1)
}

/// Whether write sequence `a` is newer than `b` (wrapping: within 2^30 of each other).
#[inline]
pub fn seq_newer(a: u64, b: u64) -> bool {
    let d = a.wrapping_sub(b) & SEQ_MASK;
    d != 0 && d < (1 << 30)
}

/// A read-only view of a fetched slot.
#[derive(Copy, Clone)]
pub struct SlotView<'a>(pub &'a [u8]);

impl<'a> SlotView<'a> {
    /// The lock/visibility word.
    #[inline]
    pub fn vlock(&self) -> u64 {
        word(self.0, VLOCK)
    }
    /// The version.
    #[inline]
    pub fn version(&self) -> u64 {
        word(self.0, VERSION)
    }
    /// The key field (meaningful only if occupied).
    #[inline]
    pub fn key(&self) -> u64 {
        word(self.0, KEY)
    }
    /// The meta word.
    #[inline]
    pub fn meta(&self) -> u64 {
        word(self.0, META)
    }
    /// The write sequence in the meta word ([`meta_seq`]).
    #[inline]
    pub fn seq(&self) -> u64 {
        (word(self.0, META) >> 1) & SEQ_MASK
    }
    /// Whether a record lives here.
    #[inline]
    pub fn occupied(&self) -> bool {
        word(self.0, META) & OCCUPIED != 0
    }
    /// The key if the slot is occupied.
    #[inline]
    pub fn live_key(&self) -> Option<u64> {
        self.occupied().then(|| self.key())
    }
    /// The value bytes.
    #[inline]
    pub fn value(&self, value_bytes: usize) -> &'a [u8] {
        &self.0[VALUE..VALUE + value_bytes]
    }
    /// Whether the checksum matches (invariant 2).
    #[inline]
    pub fn intact(&self, value_bytes: usize) -> bool {
        word(self.0, CHECKSUM) == checksum(self.version(), self.key(), word(self.0, META), self.value(value_bytes))
    }
    /// Bytes 8.. of the slot: what a commit WRITE replaces and an undo log keeps.
    #[inline]
    pub fn image(&self) -> &'a [u8] {
        &self.0[VERSION..]
    }
}

/// Encode bytes 8.. of a slot (version, key, meta, checksum, value) into `out`.
#[inline]
pub fn encode_image(out: &mut [u8], version: u64, key: u64, meta: u64, value: &[u8]) {
    out[..8].copy_from_slice(&version.to_le_bytes());
    out[8..16].copy_from_slice(&key.to_le_bytes());
    out[16..24].copy_from_slice(&meta.to_le_bytes());
    out[24..32].copy_from_slice(&checksum(version, key, meta, value).to_le_bytes());
    out[32..32 + value.len()].copy_from_slice(value);
    out[32 + value.len()..].fill(0);
}

/// The one-version record's [`SlotLayout`].
#[derive(Debug, Default, Clone, Copy)]
pub struct OneVersionLayout;

impl SlotLayout for OneVersionLayout {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        (HEADER_BYTES as u32) + value_bytes.next_multiple_of(8)
    }

    fn encode(&self, table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        slot[VLOCK..VERSION].fill(0);
        encode_image(&mut slot[VERSION..], LOADED_VERSION, key, meta(table, true), value);
    }

    fn key(&self, slot: &[u8]) -> Option<u64> {
        SlotView(slot).live_key()
    }

    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        SlotView(slot).value(value_bytes as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_sequence_rides_in_meta_and_compares_wrapping() {
        let m = meta_seq(3, true, 5);
        let mut slot = vec![0u8; 48];
        slot[META..META + 8].copy_from_slice(&m.to_le_bytes());
        let v = SlotView(&slot);
        assert_eq!((v.seq(), v.occupied(), m >> 32), (5, true, 3));
        assert_eq!(meta_seq(3, true, 0), meta(3, true));
        assert!(seq_newer(6, 5) && !seq_newer(5, 5) && !seq_newer(5, 6));
        assert!(seq_newer(0, SEQ_MASK), "wraps");
    }

    #[test]
    fn encoded_records_are_intact_and_any_mixture_is_not() {
        let l = OneVersionLayout;
        let n = l.slot_bytes(40) as usize;
        let mut old = vec![0u8; n];
        let mut new = vec![0u8; n];
        l.encode(3, 77, &[1u8; 40], &mut old);
        encode_image(&mut new[VERSION..], 2, 77, meta(3, true), &[2u8; 40]);
        assert!(SlotView(&old).intact(40));
        assert!(SlotView(&new).intact(40));
        assert_eq!(SlotView(&old).live_key(), Some(77));
        // Every mixture of old and new words of bytes 8.. other than all-old and all-new.
        let words = (n - VERSION) / 8;
        for mask in 1u32..(1 << words) - 1 {
            let mut m = old.clone();
            for w in 0..words {
                if mask & (1 << w) != 0 {
                    let at = VERSION + w * 8;
                    m[at..at + 8].copy_from_slice(&new[at..at + 8]);
                }
            }
            let differs = m[VERSION..] != old[VERSION..] && m[VERSION..] != new[VERSION..];
            assert_eq!(SlotView(&m).intact(40), !differs, "mask {mask:#b}");
        }
    }
}
