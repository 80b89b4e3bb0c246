//! Address arithmetic and bucket search.

use dmtx_memnode::{Runs, TableMeta, ValueRegion};

use crate::format::{RegionBytes, TableFormat, ValueArea};
use crate::image::PAGE_BYTES;
use crate::{Result, TableSpec};

/// Bytes before bucket 0.
pub const TABLE_HEADER_BYTES: u64 = 64;
/// Table-relative offset of the overflow cursor: the number of overflow buckets handed
/// out (an FAA on it reserves the next one, FORD's RS-Ptr).
pub const OVERFLOW_CURSOR_OFFSET: u64 = 0;
/// Bytes before slot 0 of a bucket.
pub const BUCKET_HEADER_BYTES: u32 = 16;
/// Bucket-relative offset of the insert lock (taken by inserters only).
pub const BUCKET_LOCK_OFFSET: u64 = 0;
/// Bucket-relative offset of the `next` link (overflow index + 1; 0 = end of chain).
pub const BUCKET_NEXT_OFFSET: u64 = 8;

/// How a protocol lays a record out in a slot, and each table out on a memory node.
///
/// A layout that keeps the value in the slot (FORD, FaRM) implements the four required
/// methods and leaves the rest. One that keeps values elsewhere (Motor's Vpkgs and
/// attribute bars) gives each table a value region ([`format`](SlotLayout::format)),
/// writes values there when loading ([`encode_record`](SlotLayout::encode_record)) and
/// assembles them into a buffer when reading ([`value_into`](SlotLayout::value_into)).
pub trait SlotLayout: Send + Sync + 'static {
    /// Bytes of a slot for values of `value_bytes` (a multiple of 8): the slot size of
    /// the default [`format`](SlotLayout::format).
    fn slot_bytes(&self, value_bytes: u32) -> u32;
    /// Encode a committed record for bulk loading into a zeroed slot.
    fn encode(&self, table: u32, key: u64, value: &[u8], slot: &mut [u8]);
    /// The key of an occupied slot, `None` for a free one.
    fn key(&self, slot: &[u8]) -> Option<u64>;
    /// The value bytes of an occupied slot, for layouts that keep the value in the slot.
    ///
    /// # Panics
    ///
    /// The default panics: a layout that keeps values outside its slots has no value to
    /// borrow, and generic code reads values with [`value_into`](SlotLayout::value_into).
    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        let _ = (slot, value_bytes);
        panic!("this layout keeps values outside its slots; read them with `SlotLayout::value_into`")
    }

    /// The format of the table `spec` describes: its slot size (a protocol may size
    /// slots per table, from a per-table VNum), its value region, if any. The default
    /// keeps values in slots of [`slot_bytes`](SlotLayout::slot_bytes)`(spec.value_bytes)`.
    fn format(&self, spec: &TableSpec) -> TableFormat {
        TableFormat::in_slot(self.slot_bytes(spec.value_bytes))
    }

    /// Encode a committed record for bulk loading: its slot, zeroed, and whatever the
    /// layout keeps in the table's value region, allocated from `values`. The default
    /// is [`encode`](SlotLayout::encode).
    fn encode_record(
        &self,
        spec: &TableSpec,
        key: u64,
        value: &[u8],
        slot: &mut [u8],
        values: &mut ValueArea<'_>,
    ) -> Result<()> {
        let _ = values;
        self.encode(spec.id, key, value, slot);
        Ok(())
    }

    /// Which index finds this table's records ([`IndexKind`]); FORD's hash index by
    /// default. A layout may choose per table.
    fn index_kind(&self, spec: &TableSpec) -> IndexKind {
        let _ = spec;
        IndexKind::Hash
    }

    /// Decode the newest value of an occupied slot into `out` (the table's value size),
    /// reading what the slot points to in `region`. The default copies
    /// [`value`](SlotLayout::value).
    fn value_into(&self, slot: &[u8], region: &RegionBytes<'_>, out: &mut [u8]) -> Result<()> {
        let _ = region;
        out.copy_from_slice(self.value(slot, out.len() as u32));
        Ok(())
    }
}

/// The index a table's records are found by. Records always live in the table's
/// buckets (loading and scans are the same for every kind); the kind says how a
/// coordinator finds a key's slot at run time.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum IndexKind {
    /// FORD's hash index: walk the key's bucket chain (FORD §5.1).
    #[default]
    Hash,
    /// RCBench's 3-way cuckoo index of ⟨addr, size, PK⟩ entries beside the buckets
    /// (rcbench §4.2.1; [`crate::cuckoo`]), built by [`crate::create_table`] on every
    /// replica and found through [`crate::TableInfo::cuckoo`].
    Cuckoo,
}

/// The 64-bit finalizer of MurmurHash3: cheap, and every key bit moves every hash bit.
#[inline]
pub fn key_hash(key: u64) -> u64 {
    let mut h = key;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The geometry of one table; all offsets are table-relative.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Hashed buckets.
    pub bucket_count: u64,
    /// Overflow buckets.
    pub overflow_count: u64,
    /// Bytes per bucket.
    pub bucket_bytes: u32,
    /// Bytes per slot.
    pub slot_bytes: u32,
    /// Slots per bucket.
    pub slots: u32,
    /// Placement by runs of a growing key field; `None` hashes keys over all buckets.
    pub runs: Option<Runs>,
    /// The value region after the buckets, if the table's format has one.
    pub value_region: Option<ValueRegion>,
}

impl Shape {
    /// The shape described by table metadata.
    pub fn of(meta: &TableMeta) -> Self {
        Self {
            bucket_count: meta.bucket_count,
            overflow_count: meta.overflow_bucket_count,
            bucket_bytes: meta.bucket_bytes,
            slot_bytes: meta.slot_bytes,
            slots: meta.slots_per_bucket,
            runs: meta.runs,
            value_region: meta.value_region,
        }
    }

    /// The geometry of a table built for `spec` in `layout`'s format for it: what
    /// [`TableBuilder::new`](crate::TableBuilder::new) allocates, computed without
    /// allocating (memory planning sizes every table from this before loading any).
    pub fn for_spec(spec: &TableSpec, layout: &dyn SlotLayout) -> Self {
        Self::for_format(spec, &layout.format(spec))
    }

    /// The geometry of a table built for `spec` in `format`.
    pub fn for_format(spec: &TableSpec, format: &TableFormat) -> Self {
        assert!(
            spec.slots_per_bucket > 0,
            "table `{}`: slots_per_bucket must be > 0",
            spec.name
        );
        assert!(spec.load_factor > 0.0 && spec.load_factor <= 1.0);
        let slot_bytes = format.slot_bytes;
        assert!(
            slot_bytes > 0 && slot_bytes.is_multiple_of(8),
            "table `{}`: slot of {slot_bytes} bytes; slot layouts keep slots word-aligned and non-empty",
            spec.name
        );
        let per_bucket = spec.slots_per_bucket as f64 * spec.load_factor;
        let buckets_for = |records: u64| ((records.max(1) as f64 / per_bucket).ceil() as u64).max(1);
        let (bucket_count, runs) = match spec.runs {
            None => (buckets_for(spec.capacity), None),
            Some(r) => {
                assert!(
                    (1..=64).contains(&r.seq_bits) && (r.seq_shift as u32 + r.seq_bits as u32) <= 64,
                    "table `{}`: key field {}..{} does not fit 64 bits",
                    spec.name,
                    r.seq_shift,
                    r.seq_shift as u32 + r.seq_bits as u32
                );
                assert!(r.run_log2 < r.seq_bits && r.records_per_run > 0);
                let segment_buckets = buckets_for(r.records_per_run);
                let segments = spec.capacity.max(1).div_ceil(r.records_per_run);
                let runs = Runs {
                    seq_shift: r.seq_shift,
                    seq_bits: r.seq_bits,
                    run_log2: r.run_log2,
                    segment_buckets,
                };
                (segments * segment_buckets, Some(runs))
            }
        };
        // Keys land in buckets roughly as Poisson(slots × load): at 4 × 0.75 about 18.5% of
        // the buckets overflow, so the 20% reserve is just enough on average. Three
        // standard deviations more keep a table filled to its capacity loadable when it is
        // small (a few dozen buckets), at about 1% extra space on large tables.
        let reserve = bucket_count as f64 * spec.overflow_fraction;
        let overflow_count = ((reserve + 3.0 * reserve.sqrt()).ceil() as u64).max(1);
        let mut shape = Shape {
            bucket_count,
            overflow_count,
            bucket_bytes: BUCKET_HEADER_BYTES + spec.slots_per_bucket * slot_bytes,
            slot_bytes,
            slots: spec.slots_per_bucket,
            runs,
            value_region: None,
        };
        if format.value_region_bytes > 0 {
            assert!(
                format.value_region_bytes >= crate::format::VALUE_REGION_HEADER_BYTES,
                "table `{}`: a value region holds at least its header",
                spec.name
            );
            // Page-aligned, so the region's pages are its own and the bucket pages'
            // residency does not depend on it.
            shape.value_region = Some(ValueRegion {
                offset: shape.index_bytes().next_multiple_of(PAGE_BYTES as u64),
                bytes: format.value_region_bytes,
            });
        }
        shape
    }

    /// Bytes of the hash index on a replica: header, hashed and overflow buckets.
    pub fn index_bytes(&self) -> u64 {
        TABLE_HEADER_BYTES + (self.bucket_count + self.overflow_count) * self.bucket_bytes as u64
    }

    /// Bytes the whole table occupies on a replica: the index, then the value region if
    /// the table has one.
    pub fn table_bytes(&self) -> u64 {
        match self.value_region {
            Some(v) => v.offset + v.bytes,
            None => self.index_bytes(),
        }
    }

    /// The hashed bucket of `key` (FORD §5.1 S1): its hash over all hashed buckets, or
    /// with [`Runs`] its hash over the segment of its run.
    #[inline]
    pub fn home_bucket(&self, key: u64) -> u64 {
        match &self.runs {
            None => key_hash(key) % self.bucket_count,
            Some(r) => {
                let field = (key >> r.seq_shift) & (u64::MAX >> (64 - r.seq_bits as u32));
                let segments = self.bucket_count / r.segment_buckets;
                let segment = (field >> r.run_log2) % segments;
                segment * r.segment_buckets + key_hash(key) % r.segment_buckets
            }
        }
    }

    /// Offset of bucket `idx` (hashed buckets first, then overflow) (S2, S6).
    #[inline]
    pub fn bucket_off(&self, idx: u64) -> u64 {
        debug_assert!(idx < self.bucket_count + self.overflow_count);
        TABLE_HEADER_BYTES + idx * self.bucket_bytes as u64
    }

    /// Index of overflow bucket `n`.
    #[inline]
    pub fn overflow_bucket(&self, n: u64) -> u64 {
        self.bucket_count + n
    }

    /// Offset of slot `slot` of bucket `idx`.
    #[inline]
    pub fn slot_off(&self, idx: u64, slot: u32) -> u64 {
        self.bucket_off(idx) + BUCKET_HEADER_BYTES as u64 + slot as u64 * self.slot_bytes as u64
    }

    /// The bucket that holds the slot at table-relative offset `slot_off`.
    #[inline]
    pub fn bucket_of_slot(&self, slot_off: u64) -> u64 {
        (slot_off - TABLE_HEADER_BYTES) / self.bucket_bytes as u64
    }
}

/// What one bucket says about a key.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct BucketScan {
    /// Slot holding the key.
    pub found: Option<u32>,
    /// First free slot.
    pub free: Option<u32>,
    /// The next bucket of the chain.
    pub next: Option<u64>,
}

/// Search a fetched bucket for `key` (FORD §5.1 S4–S5).
pub fn scan_bucket(shape: &Shape, layout: &dyn SlotLayout, bucket: &[u8], key: u64) -> BucketScan {
    debug_assert_eq!(bucket.len(), shape.bucket_bytes as usize);
    let next = u64::from_le_bytes(bucket[8..16].try_into().unwrap());
    let mut scan = BucketScan {
        next: (next != 0).then(|| shape.overflow_bucket(next - 1)),
        ..Default::default()
    };
    for i in 0..shape.slots {
        let at = BUCKET_HEADER_BYTES as usize + i as usize * shape.slot_bytes as usize;
        let slot = &bucket[at..at + shape.slot_bytes as usize];
        match layout.key(slot) {
            Some(k) if k == key => {
                scan.found = Some(i);
                break;
            }
            Some(_) => {}
            None => {
                scan.free.get_or_insert(i);
            }
        }
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_spreads_sequential_keys() {
        let shape = Shape {
            bucket_count: 1024,
            overflow_count: 0,
            bucket_bytes: 16,
            slot_bytes: 0,
            slots: 0,
            runs: None,
            value_region: None,
        };
        let mut hits = vec![0u32; 1024];
        for k in 0..1024 * 8 {
            hits[shape.home_bucket(k) as usize] += 1;
        }
        assert!(*hits.iter().max().unwrap() < 30, "sequential keys cluster");
    }
}
