//! OOCC's record: the one-version record ([`crate::onever::record`]) with its lock word
//! first, read by OOCC as an intention/write lock (§III-B, §IV).
//!
//! ```text
//! byte  0  lock      8 B  bit 63 W (write), bit 62 I (intention), bits 0-61 owner (coordinator + 1); 0 = free
//! byte  8  version   8 B  id of the transaction that wrote the record
//! byte 16  key       8 B
//! byte 24  meta      8 B  bit 0: occupied; bits 32-63: table id
//! byte 32  checksum  8 B  hash of bytes 8..32 and the value (tear detector)
//! byte 40  value
//! ```
//!
//! Invariants of the lock word:
//! 1. It leaves 0 only by `CAS(0 → I | owner)`; only its owner writes it afterwards:
//!    `I | W | owner` (the upgrade, a plain WRITE) and then 0 (the release).
//! 2. Bytes 8.. of a primary change only while its word has `W` set, and the word goes
//!    back to 0 by a WRITE posted after the data WRITE in the same batch (one memory
//!    node runs a batch in order): a word read as 0 means no commit's data WRITE is in
//!    flight, and a READ that saw it 0 *first* reads the rest from commits that had
//!    finished, or from a writer that locked after that READ began (whose write waits
//!    out the reader's lease).
//! 3. On backups the word stays 0: backups are written, never read or locked.

//!
//! # The paper's layout (`one_op_unlock`)
//!
//! ```text
//! byte  0       unused    8 B  always 0 (kept so the shared bucket walk's offsets hold)
//! byte  8       version | key | meta | checksum | value   as above
//! byte  n − 16  lock      8 B  as above, after the data
//! byte  n − 8   copy      8 B  the version again, written last
//! ```
//!
//! One WRITE of bytes 8.. updates the record, clears the lock and rewrites the copy, in
//! increasing address order (§V). A READ accepts the record when the lock has no `W` and
//! `version == copy` (the checksum is not consulted: the copy is the paper's detector).
//! That catches a READ the commit WRITE overtakes once; a READ crossed twice (it reads
//! version and value old, the WRITE passes it entirely up to the lock, it reads the lock
//! 0 and the copy old) accepts an old record whose writer had locked it before the READ
//! began, so in lease the reader commits a fractured read. The default layout has no
//! such case.

use dmtx_store::SlotLayout;

pub use crate::onever::record::{encode_image, meta, OneVersionLayout, SlotView, HEADER_BYTES, VERSION, VLOCK};

/// The write bit: the owner is writing or about to (§IV); readers abort on it.
pub const W: u64 = 1 << 63;
/// The intention bit: the owner may write later; read-write transactions abort on it,
/// read-only ones validate the record instead (§IV case 2.1).
pub const I: u64 = 1 << 62;
/// The owner bits.
pub const OWNER: u64 = I - 1;

const _: () = assert!(VLOCK == 0, "the lock word comes first (invariant 2)");

/// The intention-lock word of `owner`.
#[inline]
pub fn intention(owner: u64) -> u64 {
    debug_assert!(owner != 0 && owner & !OWNER == 0);
    I | owner
}

/// The write-lock word of `owner`.
#[inline]
pub fn write_locked(owner: u64) -> u64 {
    W | intention(owner)
}

/// Where a record's lock word and version copy are, in a slot of `slot_bytes`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Words {
    /// Offset of the lock word.
    pub lock: usize,
    /// Offset of the version copy (the paper's layout only).
    pub copy: Option<usize>,
}

impl Words {
    /// The words of the default layout.
    pub const FIRST: Words = Words {
        lock: VLOCK,
        copy: None,
    };

    /// The words of `one_op_unlock`'s layout, in a slot of `slot_bytes`.
    pub fn last(slot_bytes: usize) -> Words {
        Words {
            lock: slot_bytes - 16,
            copy: Some(slot_bytes - 8),
        }
    }

    /// The lock word of a fetched slot.
    #[inline]
    pub fn lock_of(self, slot: &[u8]) -> u64 {
        word(slot, self.lock)
    }

    /// Whether a fetched slot is one commit's record: the version copy matches (the
    /// paper's layout) or the checksum does (the default).
    #[inline]
    pub fn intact(self, slot: &[u8], value_len: usize) -> bool {
        match self.copy {
            Some(c) => word(slot, c) == SlotView(slot).version(),
            None => SlotView(slot).intact(value_len),
        }
    }
}

#[inline]
fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The slot layout of `one_op_unlock`: the default record, then the lock and the
/// version copy (module doc).
#[derive(Debug, Default, Clone, Copy)]
pub struct OneOpLayout;

impl SlotLayout for OneOpLayout {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        OneVersionLayout.slot_bytes(value_bytes) + 16
    }

    fn encode(&self, table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        let n = slot.len();
        OneVersionLayout.encode(table, key, value, &mut slot[..n - 16]);
        let version = SlotView(slot).version();
        slot[n - 16..n - 8].fill(0);
        slot[n - 8..].copy_from_slice(&version.to_le_bytes());
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
    fn the_papers_layout_puts_lock_and_copy_last_and_the_copy_detects_one_crossing() {
        let l = OneOpLayout;
        let n = l.slot_bytes(20) as usize;
        let mut slot = vec![0u8; n];
        l.encode(3, 9, &[5u8; 20], &mut slot);
        let w = Words::last(n);
        assert_eq!(w.lock_of(&slot), 0);
        assert!(w.intact(&slot, 20));
        assert_eq!(l.key(&slot), Some(9));
        // A commit WRITE overtaking a READ once: version old, copy new.
        // The commit WRITE's bytes (8..): the image, the lock 0, the copy.
        let mut bytes = vec![0u8; n - VERSION];
        encode_image(&mut bytes[..n - 16 - VERSION], 77, 9, meta(3, true), &[6u8; 20]);
        bytes[n - 16..].copy_from_slice(&77u64.to_le_bytes());
        let mut torn = slot.clone();
        torn[n - 8..].copy_from_slice(&bytes[bytes.len() - 8..]);
        assert!(!w.intact(&torn, 20));
        let mut new = slot.clone();
        new[VERSION..].copy_from_slice(&bytes);
        assert!(w.intact(&new, 20) && SlotView(&new).version() == 77);
    }

    #[test]
    fn lock_words_keep_owner_and_bits_apart() {
        let o = 0x1234;
        assert_eq!(intention(o) & OWNER, o);
        assert_eq!(write_locked(o) & (I | W), I | W);
        assert_eq!(intention(o) & W, 0);
    }
}
