//! The item layout (rcbench §4.1, Fig. 5): X^d and X^m side by side in 8-byte words,
//! in a slot of the table's buckets, found through the cuckoo index.
//!
//! ```text
//! item: [pk 8 B: key + 1, 0 = free slot][X^d: value, padded to 8 B][X^m: meta words ...][lock 8 B]
//! ```
//!
//! Invariants:
//! 1. The lock word is the item's highest word. READ and WRITE move words in increasing
//!    address order, so "lock ← 0; WriteDI" (Alg. 1 l. 41, Alg. 3 l. 10, Alg. 4 l. 21–23)
//!    lands its lock word last, and a READ batched after a granted CAS on the lock sees
//!    the holder's whole item.
//! 2. The pk word is written once, by the loader or an insert, and never changes.
//! 3. `meta_words` counts X^m's words other than the lock (a protocol's rts, wts, pL,
//!    wL, version slots); the slot is `8 + pad8(value) + 8·meta_words + 8` bytes.
//! 4. With `meta_words ≥ 1`, bit 63 of X^m's first word ([`TOMBSTONE`]) marks a deleted
//!    (or claimed, not yet inserted) item: it keeps its slot and index entry, and scans
//!    and the loader's key view ([`SlotLayout::key`]) see no key there.

use dmtx_store::{IndexKind, SlotLayout, TableSpec};

/// Bit of X^m's first word marking a deleted or claimed item (invariant 4).
pub const TOMBSTONE: u64 = 1 << 63;

/// Bytes of the pk word before X^d.
pub const ITEM_PK_BYTES: u32 = 8;

/// RCBench's item layout with `meta_words` words of X^m besides the lock.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ItemLayout {
    /// X^m words other than the lock.
    pub meta_words: u32,
}

impl ItemLayout {
    /// Offset of X^d in an item.
    #[inline]
    pub const fn data_off(&self) -> u32 {
        ITEM_PK_BYTES
    }

    /// Offset of X^m's first word for values of `value_bytes`.
    #[inline]
    pub const fn meta_off(&self, value_bytes: u32) -> u32 {
        ITEM_PK_BYTES + value_bytes.next_multiple_of(8)
    }

    /// Offset of the lock word (the highest word, invariant 1).
    #[inline]
    pub const fn lock_off(&self, value_bytes: u32) -> u32 {
        self.meta_off(value_bytes) + 8 * self.meta_words
    }

    /// Bytes of an item.
    #[inline]
    pub const fn item_bytes(&self, value_bytes: u32) -> u32 {
        self.lock_off(value_bytes) + 8
    }
}

impl SlotLayout for ItemLayout {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        self.item_bytes(value_bytes)
    }

    fn encode(&self, _table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        assert!(key != u64::MAX, "key u64::MAX has no pk word (0 is reserved)");
        slot[..8].copy_from_slice(&(key + 1).to_le_bytes());
        slot[8..8 + value.len()].copy_from_slice(value);
    }

    fn key(&self, slot: &[u8]) -> Option<u64> {
        let word = |o: usize| u64::from_le_bytes(slot[o..o + 8].try_into().expect("8 bytes"));
        let pk = word(0);
        if pk == 0 {
            return None;
        }
        if self.meta_words > 0 {
            // The slot holds the whole item: the first meta word sits `8·meta_words + 8`
            // bytes from its end.
            let meta = slot.len() - 8 * (self.meta_words as usize + 1);
            if word(meta) & TOMBSTONE != 0 {
                return None;
            }
        }
        Some(pk - 1)
    }

    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        &slot[8..8 + value_bytes as usize]
    }

    fn index_kind(&self, _spec: &TableSpec) -> IndexKind {
        IndexKind::Cuckoo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_the_highest_word() {
        let l = ItemLayout { meta_words: 3 };
        for v in [1u32, 8, 13, 40] {
            assert_eq!(l.lock_off(v) + 8, l.item_bytes(v));
            assert!(l.meta_off(v) >= l.data_off() + v);
            assert_eq!(l.lock_off(v) % 8, 0);
        }
        let mut slot = vec![0u8; l.item_bytes(13) as usize];
        l.encode(0, 0, &[7; 13], &mut slot);
        assert_eq!(l.key(&slot), Some(0));
        assert_eq!(l.value(&slot, 13), &[7; 13]);
        assert_eq!(l.key(&[0u8; 40]), None);
        let m = l.meta_off(13) as usize;
        slot[m..m + 8].copy_from_slice(&TOMBSTONE.to_le_bytes());
        assert_eq!(l.key(&slot), None, "a tombstone has no key");
    }
}
