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
}

/// `Result` with a [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;
