//! TATP's records, their keys, and the initial population (TATP description v1.0).
//!
//! Every record is `#[repr(C)]` plain old data with no padding the compiler adds, so it
//! can be viewed in place in a transaction's buffer. Each carries its own key fields
//! (`s_id`, and `ai_type`/`sf_type`/`start_time` where the key has them), which the
//! invariant check compares with the key the record is stored under.
//!
//! The population is a pure function of `s_id` (a hash of `s_id` and a field tag), so
//! every table's loader, the invariant check and the tests regenerate the same rows
//! without storing them and without per-row allocation.

use bytemuck::{Pod, Zeroable};
use dmtx_runtime::Table;
use dmtx_store::{attrs, key_hash, Attr};

/// Id of SUBSCRIBER.
pub const SUBSCRIBER_TABLE_ID: u32 = 0;
/// Id of ACCESS_INFO.
pub const ACCESS_INFO_TABLE_ID: u32 = 1;
/// Id of SPECIAL_FACILITY.
pub const SPECIAL_FACILITY_TABLE_ID: u32 = 2;
/// Id of CALL_FORWARDING.
pub const CALL_FORWARDING_TABLE_ID: u32 = 3;
/// Id of CF_INDEX, the Call_Forwarding rows present per Special_Facility row.
pub const CF_INDEX_TABLE_ID: u32 = 4;
/// Id of SUB_NBR_INDEX (sub_nbr → s_id), present when the `sub_nbr_index` knob is on.
pub const SUB_NBR_INDEX_TABLE_ID: u32 = 5;

pub(crate) const SUBSCRIBER: Table<Subscriber> = Table::new(SUBSCRIBER_TABLE_ID);
pub(crate) const ACCESS_INFO: Table<AccessInfo> = Table::new(ACCESS_INFO_TABLE_ID);
pub(crate) const SPECIAL_FACILITY: Table<SpecialFacility> = Table::new(SPECIAL_FACILITY_TABLE_ID);
pub(crate) const CALL_FORWARDING: Table<CallForwarding> = Table::new(CALL_FORWARDING_TABLE_ID);
pub(crate) const CF_INDEX: Table<CfIndex> = Table::new(CF_INDEX_TABLE_ID);
pub(crate) const SUB_NBR_INDEX: Table<SubNbrIndex> = Table::new(SUB_NBR_INDEX_TABLE_ID);

/// Digits of a `sub_nbr` (the spec's CHAR(15)).
pub const SUB_NBR_DIGITS: usize = 15;
/// Call_Forwarding start times; slot `k` of a Special_Facility row starts at `8k`.
pub const START_TIMES: [u8; 3] = [0, 8, 16];
/// Largest `end_time` (hours 1..=24).
pub const END_TIME_MAX: u8 = 24;
/// Low bits of every key that hold the low bits of `s_id` (LOTUS §4.2's shard number).
pub const SHARD_BITS: u32 = 12;

const SHARD_MASK: u64 = (1 << SHARD_BITS) - 1;

/// Pack `(s_id, ty, slot)` into a key: bits 0..12 are `s_id`'s low 12 bits (LOTUS §4.2:
/// the critical field's low 12 bits are the key's low 12 bits), bits 12..14 `ty` (an
/// `ai_type`/`sf_type` minus 1), bits 14..16 `slot` (`start_time / 8`), bits 16.. the
/// rest of `s_id`. Injective for `s_id < 2^48`, `ty < 4`, `slot < 4`.
#[inline]
pub const fn pack_key(s_id: u64, ty: u8, slot: u8) -> u64 {
    (s_id & SHARD_MASK)
        | ((ty as u64 & 3) << SHARD_BITS)
        | ((slot as u64 & 3) << (SHARD_BITS + 2))
        | ((s_id >> SHARD_BITS) << (SHARD_BITS + 4))
}

/// The inverse of [`pack_key`]: `(s_id, ty, slot)`.
#[inline]
pub const fn unpack_key(key: u64) -> (u64, u8, u8) {
    let s_id = (key & SHARD_MASK) | ((key >> (SHARD_BITS + 4)) << SHARD_BITS);
    (
        s_id,
        ((key >> SHARD_BITS) & 3) as u8,
        ((key >> (SHARD_BITS + 2)) & 3) as u8,
    )
}

/// Key of a SUBSCRIBER row.
#[inline]
pub const fn subscriber_key(s_id: u64) -> u64 {
    pack_key(s_id, 0, 0)
}

/// Key of an ACCESS_INFO row; `ai_type` in 1..=4.
#[inline]
pub const fn access_info_key(s_id: u64, ai_type: u8) -> u64 {
    pack_key(s_id, ai_type.wrapping_sub(1), 0)
}

/// Key of a SPECIAL_FACILITY row and of its CF_INDEX row; `sf_type` in 1..=4.
#[inline]
pub const fn special_facility_key(s_id: u64, sf_type: u8) -> u64 {
    pack_key(s_id, sf_type.wrapping_sub(1), 0)
}

/// Key of a CALL_FORWARDING row; `start_time` in {0, 8, 16}.
#[inline]
pub const fn call_forwarding_key(s_id: u64, sf_type: u8, start_time: u8) -> u64 {
    pack_key(s_id, sf_type.wrapping_sub(1), start_time / 8)
}

/// The spec's `sub_nbr` of `s_id`: its decimal digits, zero-padded to 15 (ASCII).
#[inline]
pub fn sub_nbr(s_id: u64) -> [u8; SUB_NBR_DIGITS] {
    let mut out = [b'0'; SUB_NBR_DIGITS];
    let mut v = s_id;
    for d in out.iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out
}

/// The `s_id` a `sub_nbr` spells (the identity mapping), or `None` if it holds a
/// non-digit.
#[inline]
pub fn parse_sub_nbr(nbr: &[u8; SUB_NBR_DIGITS]) -> Option<u64> {
    nbr.iter()
        .try_fold(0u64, |acc, &d| d.is_ascii_digit().then(|| acc * 10 + (d - b'0') as u64))
}

/// Key of a SUB_NBR_INDEX row: the 15 digits of `sub_nbr` as 4-bit BCD (60 bits, as
/// FORD's `tatp_sub_number_t`), a function of the string alone. Non-digits are taken
/// modulo 16.
#[inline]
pub fn sub_nbr_key(nbr: &[u8; SUB_NBR_DIGITS]) -> u64 {
    nbr.iter()
        .fold(0u64, |acc, &d| (acc << 4) | (d.wrapping_sub(b'0') & 0xf) as u64)
}

/// SUBSCRIBER: 48 bytes (the spec's fields take 44; FORD §6.1: TATP records are "up to
/// 48B"). Key [`subscriber_key`]`(s_id)`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Subscriber {
    /// The record's own key field, 1..=subscribers.
    pub s_id: u32,
    /// msc_location, random in 1..=2^32-1.
    pub msc_location: u32,
    /// vlr_location, random in 1..=2^32-1; UpdateLocation sets it.
    pub vlr_location: u32,
    /// bit_1..bit_10 in bits 0..10; UpdateSubscriberData sets bit_1.
    pub bits: u16,
    /// Committed UpdateLocation writes of this row, modulo 2^16 (dmtx's stamp).
    pub ul_stamp: u16,
    /// hex_1..hex_10, a nibble each (hex_1 in the low nibble of byte 0).
    pub hex: [u8; 5],
    /// byte2_1..byte2_10.
    pub byte2: [u8; 10],
    /// sub_nbr: [`sub_nbr`]`(s_id)`.
    pub sub_nbr: [u8; SUB_NBR_DIGITS],
    /// Committed UpdateSubscriberData writes of this row, modulo 2^16 (dmtx's stamp).
    pub usd_stamp: u16,
}

/// ACCESS_INFO: 16 bytes. Key [`access_info_key`]`(s_id, ai_type)`. Never written.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct AccessInfo {
    /// Key field.
    pub s_id: u32,
    /// Key field, 1..=4.
    pub ai_type: u8,
    /// data1, 0..=255.
    pub data1: u8,
    /// data2, 0..=255.
    pub data2: u8,
    /// data3, 3 upper-case letters.
    pub data3: [u8; 3],
    /// data4, 5 upper-case letters.
    pub data4: [u8; 5],
    /// Padding.
    pub _pad: u8,
}

/// SPECIAL_FACILITY: 16 bytes. Key [`special_facility_key`]`(s_id, sf_type)`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct SpecialFacility {
    /// Key field.
    pub s_id: u32,
    /// Key field, 1..=4.
    pub sf_type: u8,
    /// is_active: 1 for 85% of the rows, else 0.
    pub is_active: u8,
    /// error_cntl, 0..=255.
    pub error_cntl: u8,
    /// data_a, 0..=255; UpdateSubscriberData sets it.
    pub data_a: u8,
    /// data_b, 5 upper-case letters.
    pub data_b: [u8; 5],
    /// Padding.
    pub _pad: u8,
    /// Committed UpdateSubscriberData writes of this row, modulo 2^16 (dmtx's stamp).
    pub usd_stamp: u16,
}

/// CALL_FORWARDING: 24 bytes. Key [`call_forwarding_key`]`(s_id, sf_type, start_time)`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct CallForwarding {
    /// Key field.
    pub s_id: u32,
    /// Key field, 1..=4.
    pub sf_type: u8,
    /// Key field, 0, 8 or 16.
    pub start_time: u8,
    /// end_time: `start_time + 1..=8` at load; 1..=24 when InsertCallForwarding wrote it.
    pub end_time: u8,
    /// numberx, 15 decimal digits.
    pub numberx: [u8; 15],
    /// Padding.
    pub _pad: [u8; 2],
}

/// CF_INDEX (dmtx's): which Call_Forwarding rows of one Special_Facility row exist, so
/// that GetNewDestination never names a missing key (a missing key aborts `execute`).
/// 8 bytes; key [`special_facility_key`]`(s_id, sf_type)`; one row per SPECIAL_FACILITY
/// row. Insert/DeleteCallForwarding update it in the same transaction as the row.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct CfIndex {
    /// Key field.
    pub s_id: u32,
    /// Key field, 1..=4.
    pub sf_type: u8,
    /// Bit `k` set when the row with `start_time = 8k` exists.
    pub slots: u8,
    /// Padding.
    pub _pad: [u8; 2],
}

/// SUB_NBR_INDEX: sub_nbr → s_id, loaded once and never written (FORD's and Motor's
/// `sec_subscriber` table). 8 bytes; key [`sub_nbr_key`].
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct SubNbrIndex {
    /// The subscriber whose sub_nbr the key spells.
    pub s_id: u32,
    /// Padding.
    pub _pad: [u8; 4],
}

const _: () = {
    assert!(std::mem::size_of::<Subscriber>() == 48);
    assert!(std::mem::size_of::<AccessInfo>() == 16);
    assert!(std::mem::size_of::<SpecialFacility>() == 16);
    assert!(std::mem::size_of::<CallForwarding>() == 24);
    assert!(std::mem::size_of::<CfIndex>() == 8);
    assert!(std::mem::size_of::<SubNbrIndex>() == 8);
};

/// The attributes (columns) of table `table`'s value, by id, in record order. Columns
/// packed below a byte (bit_1..bit_10, hex_1..hex_10) are one attribute per packed
/// group; byte2_1..byte2_10 are one each; padding is `_pad`.
pub fn table_attrs(table: u32) -> Vec<Attr> {
    match table {
        SUBSCRIBER_TABLE_ID => {
            let mut a = attrs!(Subscriber {
                "s_id" => s_id,
                "msc_location" => msc_location,
                "vlr_location" => vlr_location,
                "bits" => bits,
                "ul_stamp" => ul_stamp,
                "hex" => hex,
            });
            let byte2 = std::mem::offset_of!(Subscriber, byte2) as u32;
            a.extend((0..10u32).map(|i| Attr::new(format!("byte2_{}", i + 1), byte2 + i, 1)));
            a.extend(attrs!(Subscriber { "sub_nbr" => sub_nbr, "usd_stamp" => usd_stamp }));
            a
        }
        ACCESS_INFO_TABLE_ID => attrs!(AccessInfo {
            "s_id" => s_id,
            "ai_type" => ai_type,
            "data1" => data1,
            "data2" => data2,
            "data3" => data3,
            "data4" => data4,
            "_pad" => _pad,
        }),
        SPECIAL_FACILITY_TABLE_ID => attrs!(SpecialFacility {
            "s_id" => s_id,
            "sf_type" => sf_type,
            "is_active" => is_active,
            "error_cntl" => error_cntl,
            "data_a" => data_a,
            "data_b" => data_b,
            "_pad" => _pad,
            "usd_stamp" => usd_stamp,
        }),
        CALL_FORWARDING_TABLE_ID => attrs!(CallForwarding {
            "s_id" => s_id,
            "sf_type" => sf_type,
            "start_time" => start_time,
            "end_time" => end_time,
            "numberx" => numberx,
            "_pad" => _pad,
        }),
        CF_INDEX_TABLE_ID => attrs!(CfIndex {
            "s_id" => s_id,
            "sf_type" => sf_type,
            "slots" => slots,
            "_pad" => _pad,
        }),
        SUB_NBR_INDEX_TABLE_ID => attrs!(SubNbrIndex { "s_id" => s_id, "_pad" => _pad }),
        _ => panic!("TATP has no table {table}"),
    }
}

/// Masks of `{1, 2, 3, 4}` (bit `t-1` for type `t`) by size - 1.
const SUBSETS_OF_4: [&[u8]; 4] = [
    &[0b0001, 0b0010, 0b0100, 0b1000],
    &[0b0011, 0b0101, 0b0110, 0b1001, 0b1010, 0b1100],
    &[0b0111, 0b1011, 0b1101, 0b1110],
    &[0b1111],
];
/// Masks of the three start-time slots by size.
const SUBSETS_OF_3: [&[u8]; 4] = [&[0], &[0b001, 0b010, 0b100], &[0b011, 0b101, 0b110], &[0b111]];

/// A uniform value in `0..n` from 16 bits of `h` (multiply-shift).
#[inline]
fn below(h: u64, n: u64) -> u64 {
    ((h & 0xffff) * n) >> 16
}

/// `N <= 5` upper-case letters from 60 bits of `h`.
#[inline]
fn letters<const N: usize>(h: u64) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, c) in out.iter_mut().enumerate() {
        *c = b'A' + ((((h >> (12 * i)) & 0xfff) * 26) >> 12) as u8;
    }
    out
}

/// Random digits of `h` (of its value modulo 10^N).
#[inline]
fn digits<const N: usize>(h: u64) -> [u8; N] {
    let mut v = h;
    let mut out = [b'0'; N];
    for d in out.iter_mut() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out
}

/// A value in 1..=2^32-1 from 32 bits of `h`.
#[inline]
fn location(h: u64) -> u32 {
    ((h & 0xffff_ffff) % 0xffff_ffff) as u32 + 1
}

/// The load-time population: every field a hash of `s_id` and a tag.
pub(crate) mod population {
    use super::*;

    const SALT: u64 = 0x7461_7470_5f70_6f70; // "tatp_pop"

    #[inline]
    fn h(s_id: u64, tag: u64) -> u64 {
        key_hash(key_hash(s_id ^ SALT).wrapping_add(tag.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    }

    /// The SUBSCRIBER row of `s_id` as loaded.
    pub(crate) fn subscriber(s_id: u64) -> Subscriber {
        let h0 = h(s_id, 0);
        let h1 = h(s_id, 1);
        let h2 = h(s_id, 2);
        let mut hex = [0u8; 5];
        for (i, b) in hex.iter_mut().enumerate() {
            *b = (h0 >> (16 + 8 * i)) as u8;
        }
        let mut byte2 = [0u8; 10];
        byte2[..8].copy_from_slice(&h1.to_le_bytes());
        byte2[8..].copy_from_slice(&h2.to_le_bytes()[6..]);
        Subscriber {
            s_id: s_id as u32,
            msc_location: location(h2),
            vlr_location: location(h(s_id, 3)),
            bits: (h0 & 0x3ff) as u16,
            ul_stamp: 0,
            hex,
            byte2,
            sub_nbr: sub_nbr(s_id),
            usd_stamp: 0,
        }
    }

    /// The ai_types of `s_id`'s ACCESS_INFO rows (bit `t-1`): 1..=4 distinct types.
    pub(crate) fn ai_types(s_id: u64) -> u8 {
        let x = h(s_id, 10);
        let set = SUBSETS_OF_4[(x & 3) as usize];
        set[below(x >> 8, set.len() as u64) as usize]
    }

    /// The ACCESS_INFO row `(s_id, ai_type)` as loaded.
    pub(crate) fn access_info(s_id: u64, ai_type: u8) -> AccessInfo {
        let x = h(s_id, 20 + ai_type as u64);
        let y = h(s_id, 30 + ai_type as u64);
        AccessInfo {
            s_id: s_id as u32,
            ai_type,
            data1: x as u8,
            data2: (x >> 8) as u8,
            data3: letters(x >> 16),
            data4: letters(y),
            _pad: 0,
        }
    }

    /// The sf_types of `s_id`'s SPECIAL_FACILITY rows (bit `t-1`): 1..=4 distinct types.
    pub(crate) fn sf_types(s_id: u64) -> u8 {
        let x = h(s_id, 40);
        let set = SUBSETS_OF_4[(x & 3) as usize];
        set[below(x >> 8, set.len() as u64) as usize]
    }

    /// The SPECIAL_FACILITY row `(s_id, sf_type)` as loaded.
    pub(crate) fn special_facility(s_id: u64, sf_type: u8) -> SpecialFacility {
        let x = h(s_id, 50 + sf_type as u64);
        SpecialFacility {
            s_id: s_id as u32,
            sf_type,
            is_active: u8::from(below(x, 100) < 85),
            error_cntl: (x >> 16) as u8,
            data_a: (x >> 24) as u8,
            data_b: letters(h(s_id, 60 + sf_type as u64)),
            _pad: 0,
            usd_stamp: 0,
        }
    }

    /// The start-time slots of the CALL_FORWARDING rows of `(s_id, sf_type)` as loaded
    /// (bit `k` for start time `8k`): 0..=3 distinct slots.
    pub(crate) fn cf_slots(s_id: u64, sf_type: u8) -> u8 {
        let x = h(s_id, 70 + sf_type as u64);
        let set = SUBSETS_OF_3[(x & 3) as usize];
        set[below(x >> 8, set.len() as u64) as usize]
    }

    /// The CALL_FORWARDING row `(s_id, sf_type, 8·slot)` as loaded.
    pub(crate) fn call_forwarding(s_id: u64, sf_type: u8, slot: u8) -> CallForwarding {
        let tag = 4 * sf_type as u64 + slot as u64;
        let start_time = START_TIMES[slot as usize];
        CallForwarding {
            s_id: s_id as u32,
            sf_type,
            start_time,
            end_time: start_time + 1 + below(h(s_id, 80 + tag), 8) as u8,
            numberx: digits(h(s_id, 100 + tag)),
            _pad: [0; 2],
        }
    }

    /// Rows of the tables whose size the population draws.
    #[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
    pub(crate) struct Counts {
        pub access_info: u64,
        pub special_facility: u64,
        pub call_forwarding: u64,
    }

    /// Row counts of `1..=subscribers`.
    pub(crate) fn counts(subscribers: u64) -> Counts {
        let mut c = Counts::default();
        for s in 1..=subscribers {
            c.access_info += ai_types(s).count_ones() as u64;
            let sf = sf_types(s);
            c.special_facility += sf.count_ones() as u64;
            for t in types(sf) {
                c.call_forwarding += cf_slots(s, t).count_ones() as u64;
            }
        }
        c
    }

    /// The types (1..=4) of a type mask, in order.
    #[inline]
    pub(crate) fn types(mask: u8) -> impl Iterator<Item = u8> {
        (1..=4u8).filter(move |t| mask & (1 << (t - 1)) != 0)
    }

    /// The slots (0..3) of a slot mask, in order.
    #[inline]
    pub(crate) fn slots(mask: u8) -> impl Iterator<Item = u8> {
        (0..3u8).filter(move |k| mask & (1 << k) != 0)
    }
}
