//! Tables in the memory pool: FORD's hash index (FORD §5.1, Fig. 11, Table 1), in a
//! format each protocol chooses per table (Motor §4.1–4.2).
//!
//! A table is an array of buckets; each bucket holds `S` fixed-size slots and a `next`
//! link to an overflow bucket in a reserved space after the hashed buckets. What a slot
//! holds (lock words, versions, detector, key, value or the value's address) belongs to
//! the protocol, which describes it through [`SlotLayout`]; the index only needs to find
//! keys and free slots. [`Shape`] does the address arithmetic, [`scan_bucket`] the search
//! inside one fetched bucket, [`TableBuilder`] builds a table image for bulk loading, and
//! [`create_table`] places it on `f+1` memory nodes. [`Catalog`] is the CN-side copy of
//! every table's metadata.
//!
//! # Per-table format
//!
//! A workload describes each table with a [`TableSpec`]: value size, capacity, and the
//! value's attribute schema ([`Attr`]: name, offset, size; [`TableSpec::with_attrs`],
//! offsets from the record type with [`attrs!`]), which must tile the value
//! ([`check_attrs`]). The protocol's layout turns a spec into a [`TableFormat`]
//! ([`SlotLayout::format`]): the slot size, which may differ per table (Motor sizes a
//! table's CVT slots from its VNum), and an optional value region, space after the
//! buckets on every replica where the layout keeps values the slots point to (Motor's
//! Vpkgs and attribute bars). FORD and FaRM keep the default format: the value in the
//! slot, no region. The region's place and the schema are part of the table's metadata
//! ([`dmtx_memnode::TableMeta`]), published on each replica, sent over the memnode wire
//! and kept in `--backing` sidecars. [`check_spec`] refuses a spec that does not fit its
//! format (a schema that does not tile the value, a region too small for the load)
//! before anything is built.
//!
//! A value is decoded into a buffer, never borrowed from the slot by generic code: the
//! loader writes it through [`SlotLayout::encode_record`] (which may allocate in the
//! region, [`ValueArea`]) and readers decode it with [`SlotLayout::value_into`] from the
//! slot and the fetched region ([`RegionBytes`]). A protocol that stores only the
//! attributes a write changed diffs values with [`attrs_changed`], packs the old
//! attributes with [`pack_attrs`] and assembles an older value with [`unpack_attrs`].
//!
//! Layout of a table on every replica (all links and value addresses are
//! table-relative, so the bytes are identical on each replica):
//!
//! ```text
//! table:  [header 64 B: word 0 = overflow cursor][bucket 0]...[bucket B-1][overflow 0]...[overflow R-1]
//!         [value region, page-aligned, if the format has one]
//! bucket: [insert lock 8 B][next 8 B: overflow index + 1, 0 = none][slot 0]...[slot S-1]
//! region: [header 64 B: word 0 = cursor, region-relative offset of the first free byte][values]...
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
//! (fresh region space reads as zero), overflow buckets are handed out in order by FAA,
//! and so is value-region room past the loaded values. [`footprint`] tells the reserved,
//! loaded and full bytes of a spec (its value region included) before anything is
//! built.
//!
//! # Index kinds
//!
//! A layout chooses per table how its records are found ([`SlotLayout::index_kind`],
//! [`IndexKind`]): FORD's hash index (the bucket chain, the default) or RCBench's 3-way
//! cuckoo index ([`cuckoo`], rcbench §4.2.1), which [`create_table`] builds over the
//! loaded slots on every replica and publishes by name; [`Catalog::fetch`] puts its place
//! in [`TableInfo::cuckoo`]. Records stay in the buckets either way, so loading and scans
//! do not depend on the kind.
//!
//! Depends on `dmtx-verbs` and `dmtx-memnode` only.
//!
//! ```
//! use dmtx_store::{attrs, attrs_changed, check_attrs, pack_attrs, unpack_attrs, TableSpec};
//!
//! #[repr(C)]
//! struct District { ytd: i64, tax: u32, next_o_id: u32 }
//!
//! let spec = TableSpec::new(1, "district", 16, 10).with_attrs(attrs!(District {
//!     "d_ytd" => ytd, "d_tax" => tax, "d_next_o_id" => next_o_id,
//! }));
//! check_attrs(&spec.name, spec.value_bytes, &spec.attrs).unwrap();
//!
//! // A write changes D_NEXT_O_ID only: 4 bytes to keep for the old version.
//! let old = [1u8; 16];
//! let mut new = old;
//! new[12] = 2;
//! let changed = attrs_changed(&spec.attrs, &old, &new);
//! assert_eq!(changed, 0b100);
//! let mut bar = [0u8; 16];
//! let n = pack_attrs(&spec.attrs, changed, &old, &mut bar);
//! assert_eq!(n, 4);
//! // The old value, assembled in a buffer from the new one and the kept attribute.
//! let mut value = new;
//! unpack_attrs(&spec.attrs, changed, &bar[..n], &mut value);
//! assert_eq!(value, old);
//! ```

#![warn(missing_docs)]

mod builder;
mod catalog;
pub mod cuckoo;
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
    key_hash, scan_bucket, BucketScan, IndexKind, Shape, SlotLayout, BUCKET_HEADER_BYTES, BUCKET_LOCK_OFFSET,
    BUCKET_NEXT_OFFSET, OVERFLOW_CURSOR_OFFSET, TABLE_HEADER_BYTES,
};
