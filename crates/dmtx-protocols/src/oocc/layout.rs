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

pub use crate::onever::record::{encode_image, meta, SlotView, HEADER_BYTES, VERSION, VLOCK};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_words_keep_owner_and_bits_apart() {
        let o = 0x1234;
        assert_eq!(intention(o) & OWNER, o);
        assert_eq!(write_locked(o) & (I | W), I | W);
        assert_eq!(intention(o) & W, 0);
    }
}
