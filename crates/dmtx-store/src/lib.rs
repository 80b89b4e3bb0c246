//! Tables in the memory pool: FORD's hash index (FORD §5.1, Fig. 11, Table 1).
//!
//! A table is an array of buckets; each bucket holds `S` fixed-size slots and a `next`
//! link to an overflow bucket in a reserved space after the hashed buckets. What a slot
//! holds (lock words, versions, detector, key, value) belongs to the protocol, which
//! describes it through [`SlotLayout`]; the index only needs to find keys and free
//! slots. [`Shape`] does the address arithmetic, [`scan_bucket`] the search inside one
//! fetched bucket, [`TableBuilder`] builds a table image for bulk loading, and
//! [`create_table`] places it on `f+1` memory nodes. [`Catalog`] is the CN-side copy of
//! every table's metadata.
//!
//! Layout of a table on every replica (all links are table-relative, so the bytes are
//! identical on each replica):
//!
//! ```text
//! table:  [header 64 B: word 0 = overflow cursor][bucket 0]...[bucket B-1][overflow 0]...[overflow R-1]
//! bucket: [insert lock 8 B][next 8 B: overflow index + 1, 0 = none][slot 0]...[slot S-1]
//! ```
//!
//! A key's home bucket is its hash modulo B (FORD §5.1). A table whose keys grow along
//! one field (TPC-C's O_ID) may instead be placed by runs ([`KeyRuns`], [`Runs`]): the B
//! hashed buckets form segments, one per run of consecutive field values, and a key
//! hashes within its run's segment. Lookups, chains and overflow are unchanged; only
//! which bucket is home differs, so such a table can be reserved for a long run and
//! cost memory only for the segments its keys reach.
//!
//! Reserved room costs no memory until written: [`TableBuilder`] builds in an image
//! that is resident only where written, [`create_table`] ships only the written pages
//! (fresh region space reads as zero), and overflow buckets are handed out in order
//! by FAA. [`footprint`] tells the reserved, loaded and full bytes of a spec before
//! anything is built.
//!
//! Depends on `dmtx-verbs` and `dmtx-memnode` only.

#![warn(missing_docs)]

mod builder;
mod catalog;
mod error;
mod footprint;
mod format;
mod image;
mod shape;

pub use builder::{create_table, placement, KeyRuns, TableBuilder, TableSpec};
pub use catalog::{Catalog, TableInfo};
pub use dmtx_memnode::Runs;
pub use error::{Result, StoreError};
pub use footprint::{footprint, Footprint};
pub use format::{
    attrs_bytes, attrs_changed, check_attrs, check_spec, field_bytes, pack_attrs, unpack_attrs, Attr, RegionBytes,
    TableFormat, ValueArea, ValueRegion, ATTRS_MAX, VALUE_REGION_CURSOR_OFFSET, VALUE_REGION_HEADER_BYTES,
};
pub use shape::{
    key_hash, scan_bucket, BucketScan, Shape, SlotLayout, BUCKET_HEADER_BYTES, BUCKET_LOCK_OFFSET, BUCKET_NEXT_OFFSET,
    OVERFLOW_CURSOR_OFFSET, TABLE_HEADER_BYTES,
};
