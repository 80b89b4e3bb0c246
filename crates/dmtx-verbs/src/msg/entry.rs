//! The byte layout of a message: entries back to back, little-endian.
//!
//! | bytes | field |
//! |-------|-------|
//! | 0     | kind u8: 1 request, 2 reply, 3 one-way |
//! | 1     | flags u8: bit 0 = retry; other bits zero |
//! | 2..4  | reserved, zero |
//! | 4..8  | payload length u32 (≤ [`PAYLOAD_MAX`]) |
//! | 8..16 | id u64 |
//! | 16..  | payload |
//!
//! Shared by every transport that moves messages as bytes (`mem` and `tcp`). Decoding is
//! bounds-checked and never panics: a peer's bytes are not trusted.

use super::{Entry, EntryKind, PAYLOAD_MAX};

/// Bytes before each entry's payload.
pub const ENTRY_HEADER_BYTES: usize = 16;

const FLAG_RETRY: u8 = 1;

/// Why a message's bytes are not a list of entries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The bytes end inside an entry.
    #[error("message truncated inside an entry at byte {at}")]
    Truncated {
        /// Where the entry started.
        at: usize,
    },
    /// An unknown kind, flag or reserved bit.
    #[error("malformed entry header at byte {at}")]
    BadHeader {
        /// Where the entry started.
        at: usize,
    },
    /// A payload over [`PAYLOAD_MAX`].
    #[error("entry payload of {len} bytes exceeds {PAYLOAD_MAX}")]
    TooLarge {
        /// The length claimed.
        len: usize,
    },
}

/// Append `e` to `out`.
pub fn encode_entry(out: &mut Vec<u8>, e: &Entry<'_>) {
    debug_assert!(e.payload.len() <= PAYLOAD_MAX);
    out.push(e.kind.to_u8());
    out.push(if e.retry { FLAG_RETRY } else { 0 });
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&(e.payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&e.id.to_le_bytes());
    out.extend_from_slice(e.payload);
}

/// Hand each entry of `msg` to `f`, in order. Entries before a malformed one are handed
/// over before the error is returned.
pub fn decode_entries<'a>(msg: &'a [u8], f: &mut dyn FnMut(Entry<'a>)) -> Result<usize, EntryError> {
    let mut at = 0;
    let mut n = 0;
    while at < msg.len() {
        let Some(h) = msg.get(at..at + ENTRY_HEADER_BYTES) else {
            return Err(EntryError::Truncated { at });
        };
        let kind = EntryKind::from_u8(h[0]).ok_or(EntryError::BadHeader { at })?;
        if h[1] & !FLAG_RETRY != 0 || h[2] != 0 || h[3] != 0 {
            return Err(EntryError::BadHeader { at });
        }
        let len = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
        if len > PAYLOAD_MAX {
            return Err(EntryError::TooLarge { len });
        }
        let id = u64::from_le_bytes(h[8..16].try_into().unwrap());
        let start = at + ENTRY_HEADER_BYTES;
        let payload = msg.get(start..start + len).ok_or(EntryError::Truncated { at })?;
        f(Entry {
            kind,
            retry: h[1] & FLAG_RETRY != 0,
            id,
            payload,
        });
        n += 1;
        at = start + len;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind(k: u8) -> EntryKind {
        EntryKind::from_u8(k % 3 + 1).unwrap()
    }

    proptest! {
        #[test]
        fn entries_round_trip(es in prop::collection::vec((0u8..3, any::<bool>(), any::<u64>(),
                prop::collection::vec(any::<u8>(), 0..40)), 0..8)) {
            let mut msg = Vec::new();
            for (k, retry, id, p) in &es {
                encode_entry(&mut msg, &Entry { kind: kind(*k), retry: *retry, id: *id, payload: p });
            }
            let mut back = Vec::new();
            let n = decode_entries(&msg, &mut |e| back.push((e.kind, e.retry, e.id, e.payload.to_vec()))).unwrap();
            prop_assert_eq!(n, es.len());
            let want: Vec<_> = es.iter().map(|(k, r, i, p)| (kind(*k), *r, *i, p.clone())).collect();
            prop_assert_eq!(back, want);
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_entries(&bytes, &mut |_| {});
        }
    }

    #[test]
    fn a_cut_or_bad_entry_is_an_error() {
        let mut msg = Vec::new();
        encode_entry(
            &mut msg,
            &Entry {
                kind: EntryKind::Request,
                retry: false,
                id: 9,
                payload: b"abc",
            },
        );
        let mut seen = 0;
        assert_eq!(
            decode_entries(&msg[..msg.len() - 1], &mut |_| seen += 1),
            Err(EntryError::Truncated { at: 0 })
        );
        assert_eq!(seen, 0);
        let mut bad = msg.clone();
        bad[0] = 9;
        assert_eq!(decode_entries(&bad, &mut |_| {}), Err(EntryError::BadHeader { at: 0 }));
        let mut huge = msg.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_entries(&huge, &mut |_| {}),
            Err(EntryError::TooLarge { .. })
        ));
    }
}
