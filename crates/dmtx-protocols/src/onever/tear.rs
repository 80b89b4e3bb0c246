//! The checksum tear detector: one 8-byte hash over a record's version, key, meta and
//! value, written with the record and checked on every read that no validation round
//! covers.
//!
//! A READ racing a WRITE may return any mixture of old and new words (DESIGN §2), and a
//! mixture that is neither the old nor the new record fails the checksum except with
//! probability about 2^-64. FORD's invisible bit and FaRM's per-cacheline versions only
//! catch a READ that crosses one WRITE boundary; this catches every mixture.
//!
//! Used by every protocol on the one-version record ([`super::record`]): FORD today;
//! FaRM, DrTM+H, FORD-LV, OOCC, DrTM-lease and DSLR read the same record.
//!
//! Cost: 8 bytes per record, no verb, no round trip; one multiply-xorshift per word on
//! each write and each unvalidated read.

#[inline]
fn mix(mut h: u64) -> u64 {
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^ (h >> 32)
}

/// The checksum of a record: covers version, key, meta and every value word, in order.
#[inline]
pub fn checksum(version: u64, key: u64, meta: u64, value: &[u8]) -> u64 {
    let mut h = mix(version ^ 0x9e37_79b9_7f4a_7c15);
    h = mix(h ^ key);
    h = mix(h ^ meta);
    let mut chunks = value.chunks_exact(8);
    for c in &mut chunks {
        h = mix(h ^ u64::from_le_bytes(c.try_into().unwrap()));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        h = mix(h ^ u64::from_le_bytes(last));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_covers_every_field_and_every_value_word() {
        let value = [7u8; 20];
        let base = checksum(1, 2, 3, &value);
        assert_ne!(base, checksum(9, 2, 3, &value));
        assert_ne!(base, checksum(1, 9, 3, &value));
        assert_ne!(base, checksum(1, 2, 9, &value));
        for at in 0..value.len() {
            let mut v = value;
            v[at] ^= 1;
            assert_ne!(base, checksum(1, 2, 3, &v), "byte {at} of the value is not covered");
        }
    }
}
