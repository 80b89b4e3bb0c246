//! What a table costs in memory, computed from its spec and its format before anything
//! is built: the hash index and, when the format has one, the value region.

use crate::image::PAGE_BYTES;
use crate::shape::{Shape, SlotLayout, TABLE_HEADER_BYTES};
use crate::TableSpec;

/// A table's memory on one replica, in bytes. Resident figures count 4 KiB pages; a
/// region mapped with transparent huge pages may round each touched run of pages up
/// to 2 MiB.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Region space the table takes (address space; costs memory only where written):
    /// header, hashed buckets and the overflow reserve, then the value region if the
    /// format has one, `Shape::table_bytes`.
    pub reserved_bytes: u64,
    /// Expected resident memory once the `initial` records are loaded: the pages the
    /// loader writes (the header, every page of hashed buckets that receives a record,
    /// the overflow buckets the load takes, the value region's header and loaded
    /// values), since [`crate::create_table`] ships only those.
    pub loaded_bytes: u64,
    /// Expected resident memory when the table holds `capacity` records, the most it
    /// reaches if the run uses all its room: every page of hashed buckets its records
    /// can reach, plus the overflow buckets that many records take; and the whole value
    /// region, which the run may fill.
    pub full_bytes: u64,
    /// Bytes of one slot, as the protocol's format for this table sizes it.
    pub slot_bytes: u32,
    /// Region space of the value region (0: none); part of `reserved_bytes`.
    pub value_region_bytes: u64,
    /// Expected resident bytes of the value region once loaded (its header and the
    /// loaded records' values, whole pages); part of `loaded_bytes`.
    pub value_region_loaded_bytes: u64,
}

/// The footprint of a table built for `spec` in `layout`'s format for it (the same
/// geometry as [`Shape::for_spec`]; nothing is allocated).
pub fn footprint(spec: &TableSpec, layout: &dyn SlotLayout) -> Footprint {
    let format = layout.format(spec);
    let shape = Shape::for_format(spec, &format);
    let reserved_bytes = shape.table_bytes();
    let index_reserved = shape.index_bytes();
    // The hashed buckets `records` records can reach: all of them, or with runs the
    // segments of the runs they fill (records are counted in run order).
    let reach = |records: u64| -> u64 {
        match (spec.runs, shape.runs) {
            (Some(r), Some(s)) => {
                let segments = shape.bucket_count / s.segment_buckets;
                records.div_ceil(r.records_per_run).clamp(1, segments) * s.segment_buckets
            }
            _ => shape.bucket_count,
        }
    };
    let resident = |records: u64| -> u64 {
        let buckets = reach(records);
        let hashed_bytes = buckets * shape.bucket_bytes as u64;
        let pages = hashed_bytes.div_ceil(PAGE_BYTES as u64);
        // Records land on pages as Poisson arrivals; a page is written once any does.
        let per_page = records as f64 / pages as f64;
        let touched = (pages as f64 * (1.0 - (-per_page).exp())).ceil() as u64;
        let overflow = overflow_buckets(records, buckets, shape.slots).min(shape.overflow_count);
        let bytes = PAGE_BYTES as u64 // the header's page
            + touched * PAGE_BYTES as u64
            + (overflow * shape.bucket_bytes as u64).next_multiple_of(PAGE_BYTES as u64);
        bytes.min(index_reserved.next_multiple_of(PAGE_BYTES as u64))
    };
    debug_assert!(TABLE_HEADER_BYTES as usize <= PAGE_BYTES);
    // The loader writes the region from its start, in order: whole pages of it.
    let page = PAGE_BYTES as u64;
    let (region_loaded, region_full) = match shape.value_region {
        Some(r) => (
            format
                .loaded_region_bytes(spec.initial)
                .min(r.bytes)
                .next_multiple_of(page),
            r.bytes.next_multiple_of(page),
        ),
        None => (0, 0),
    };
    Footprint {
        reserved_bytes,
        loaded_bytes: resident(spec.initial) + region_loaded,
        full_bytes: resident(spec.capacity) + region_full,
        slot_bytes: shape.slot_bytes,
        value_region_bytes: shape.value_region.map_or(0, |r| r.bytes),
        value_region_loaded_bytes: region_loaded,
    }
}

/// Expected overflow buckets when `records` keys hash over `buckets` buckets of `slots`
/// slots: a bucket that receives `k > slots` keys chains `ceil((k - slots) / slots)`.
fn overflow_buckets(records: u64, buckets: u64, slots: u32) -> u64 {
    if records == 0 {
        return 0;
    }
    let mean = records as f64 / buckets as f64;
    let s = slots as u64;
    let k_max = (mean + 12.0 * mean.sqrt() + 32.0) as u64;
    // Poisson(mean) probabilities, built up term by term from P(0).
    let mut p = (-mean).exp();
    let mut expected = 0.0;
    for k in 0..=k_max {
        if k > 0 {
            p *= mean / k as f64;
        }
        if k > s {
            expected += p * (k - s).div_ceil(s) as f64;
        }
    }
    (expected * buckets as f64).ceil() as u64
}
