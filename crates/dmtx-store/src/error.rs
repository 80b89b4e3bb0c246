//! Store errors.

use dmtx_memnode::ControlError;

/// Why building, loading or finding a table failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The memory pool refused a control call.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A key was loaded twice.
    #[error("table `{table}`: key {key} is loaded twice; keys must be unique")]
    DuplicateKey {
        /// Table name.
        table: String,
        /// The key.
        key: u64,
    },
    /// The table (hashed buckets and overflow space) has no free slot for a key.
    #[error("table `{table}`: no free slot for key {key} (capacity {capacity} records); raise the table's capacity")]
    TableFull {
        /// Table name.
        table: String,
        /// The key that did not fit.
        key: u64,
        /// Records the table was sized for.
        capacity: u64,
    },
    /// A value of the wrong size.
    #[error("table `{table}`: value of {got} bytes, but the table stores {expected}-byte values")]
    ValueSize {
        /// Table name.
        table: String,
        /// The table's value size.
        expected: u32,
        /// The size given.
        got: usize,
    },
    /// More replicas than memory nodes.
    #[error("{replicas} replicas need {replicas} memory nodes, the cluster has {mn_count}; lower `replicas` or add memory nodes")]
    TooManyReplicas {
        /// Replicas asked for (f+1).
        replicas: usize,
        /// Nodes available.
        mn_count: usize,
    },
    /// Loading was stopped (Ctrl-C) before the table was complete.
    #[error("table `{table}`: loading interrupted")]
    Interrupted {
        /// Table name.
        table: String,
    },
    /// A table id the catalog does not know.
    #[error("no table with id {0} in the catalog")]
    UnknownTable(u32),
    /// Replicas disagree about a table.
    #[error("table {id}: memory nodes publish different metadata for it")]
    InconsistentMeta {
        /// Table id.
        id: u32,
    },
    /// A table's attribute schema does not tile its value.
    #[error("table `{table}`: attribute schema {detail}; declare attributes that tile the value in offset order (`TableSpec::with_attrs`)")]
    AttrSchema {
        /// Table name.
        table: String,
        /// What is wrong, naming the attribute.
        detail: String,
    },
    /// A table's value region cannot hold the values of its loaded records.
    #[error(
        "table `{table}`: value region of {bytes} bytes cannot hold its {records} loaded records \
         ({need} bytes: 64 header + {per_record} per record); {fix}"
    )]
    ValueRegionTooSmall {
        /// Table name.
        table: String,
        /// The region's size.
        bytes: u64,
        /// What the load needs.
        need: u64,
        /// Records loaded.
        records: u64,
        /// Region bytes per loaded record.
        per_record: u32,
        /// The knob to raise.
        fix: String,
    },
    /// A table's value region ran out while the loader filled it.
    #[error("table `{table}`: value region of {bytes} bytes is full ({free} free, {asked} asked for); {fix}")]
    ValueRegionFull {
        /// Table name.
        table: String,
        /// The region's size.
        bytes: u64,
        /// Bytes asked for.
        asked: u64,
        /// Bytes still free.
        free: u64,
        /// The knob to raise.
        fix: String,
    },
    /// A layout put a value in the value region of a table whose format has none.
    #[error("table `{table}`: the layout stores a value in a value region, but its format gives the table none; give it `value_region_bytes` in `SlotLayout::format`")]
    NoValueRegion {
        /// Table name.
        table: String,
    },
    /// A slot points at bytes outside its table's value region (a damaged slot).
    #[error(
        "table `{table}`: a slot names {len} bytes at offset {at}, outside its value region \
         ({region_bytes} bytes at offset {region_offset}); the slot is damaged"
    )]
    ValueOutsideRegion {
        /// Table name.
        table: String,
        /// Table-relative offset named.
        at: u64,
        /// Bytes named.
        len: u64,
        /// The region's table-relative offset.
        region_offset: u64,
        /// The region's size (0: the table has none).
        region_bytes: u64,
    },
    /// The cuckoo index of a table could not be built.
    #[error(transparent)]
    Cuckoo(#[from] crate::cuckoo::CuckooError),
}

/// `Result` with a [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;
