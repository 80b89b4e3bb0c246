//! The init-time control interface and table metadata.

use dmtx_verbs::MnId;

/// Metadata of one hash table, as FORD §5.1 Table 1 lists it, plus where its replicas
/// live. Every replica has the same layout; only the base offset differs per node, and
/// everything stored inside a table (overflow links) is relative to that base, so one
/// cached table-relative address serves every replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableMeta {
    /// Dense, cluster-unique table id.
    pub id: u32,
    /// Human name (`savings`, `checking`, ...).
    pub name: String,
    /// Bytes of a record's value.
    pub value_bytes: u32,
    /// Bytes of one slot (protocol header + key + value + detector), a multiple of 8.
    pub slot_bytes: u32,
    /// Slots per bucket (S).
    pub slots_per_bucket: u32,
    /// Bytes of one bucket: header + S slots.
    pub bucket_bytes: u32,
    /// Buckets addressed by hash.
    pub bucket_count: u64,
    /// Buckets in the reserved overflow space after the hashed ones.
    pub overflow_bucket_count: u64,
    /// Replicas, primary first: (node, byte offset of the table on that node).
    pub replicas: Vec<(MnId, u64)>,
    /// How keys map to hashed buckets when the table grows by runs of keys: `None`
    /// hashes every key over all buckets (FORD §5.1).
    pub runs: Option<Runs>,
}

/// Placement by runs for a table whose keys grow along one field (TPC-C's O_ID): the
/// hashed buckets are split into segments of `segment_buckets`; a key goes to segment
/// `(field >> run_log2) mod segments`, where `field` is the `seq_bits` bits of the key
/// at `seq_shift`, and within it to bucket `murmur3_fmix64(key) mod segment_buckets`.
/// Keys of one run share a segment, so a table reserved for a long run touches only
/// the segments its keys have reached.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Runs {
    /// Bit position of the growing field.
    pub seq_shift: u8,
    /// Its width in bits, 1..=64.
    pub seq_bits: u8,
    /// Consecutive field values per run: `2^run_log2`.
    pub run_log2: u8,
    /// Hashed buckets per segment, ≥ 1, dividing the hashed bucket count.
    pub segment_buckets: u64,
}

impl TableMeta {
    /// The primary replica's node.
    pub fn primary(&self) -> MnId {
        self.replicas[0].0
    }
}

/// Why a control call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The region has no room left.
    #[error("{mn}: cannot allocate {requested} bytes, {free} of {region_bytes} free; raise the memory-node region size (`dmtx bench --mn-bytes`)")]
    OutOfMemory {
        /// The node.
        mn: MnId,
        /// Bytes asked for.
        requested: u64,
        /// Bytes still free.
        free: u64,
        /// The region size.
        region_bytes: u64,
    },
    /// A load touched bytes outside the region.
    #[error("{mn}: load of {len} bytes at {offset:#x} is outside the region of {region_bytes} bytes")]
    OutOfRange {
        /// The node.
        mn: MnId,
        /// First byte.
        offset: u64,
        /// Length.
        len: u64,
        /// The region size.
        region_bytes: u64,
    },
    /// No such node.
    #[error("{mn} is not a memory node of this cluster ({mn_count} nodes)")]
    UnknownNode {
        /// The node named.
        mn: MnId,
        /// Nodes in the cluster.
        mn_count: usize,
    },
    /// The node could not be reached (a remote control interface lost its connection).
    #[error("{mn} is unreachable for control calls: {why}; check that `dmtx memnode` runs there and the cluster file's address")]
    Unreachable {
        /// The node.
        mn: MnId,
        /// What the transport knows.
        why: String,
    },
    /// A file-backed node could not make its allocator or catalog durable.
    #[error("{mn}: cannot persist node metadata: {why}; check the --backing file's disk")]
    Persist {
        /// The node.
        mn: MnId,
        /// What failed.
        why: String,
    },
    /// A table with this id was already published on the node: a remote node still holds
    /// the tables of an earlier run (or, in one run, two tables share an id).
    #[error(
        "{mn}: table id {id} is already defined (as `{name}`): the memory nodes already hold tables \
         from an earlier run; restart them, or use `dmtx cluster up`, which starts fresh ones"
    )]
    DuplicateTable {
        /// The node.
        mn: MnId,
        /// The id.
        id: u32,
        /// The existing table's name.
        name: String,
    },
}

/// `Result` with a [`ControlError`].
pub type Result<T> = std::result::Result<T, ControlError>;

/// The init-time control interface of the memory pool (FORD §4.1 step ❶–❷).
///
/// Used before a run only; nothing here is on a transaction's path.
pub trait Control: Send + Sync {
    /// Number of memory nodes.
    fn mn_count(&self) -> usize;
    /// Reserve `bytes` on `mn`, aligned to `align` (a power of two); returns the offset.
    fn alloc(&self, mn: MnId, bytes: u64, align: u64) -> Result<u64>;
    /// Bulk-load bytes at `offset` on `mn`.
    fn load(&self, mn: MnId, offset: u64, bytes: &[u8]) -> Result<()>;
    /// Publish a table's metadata on `mn`.
    fn put_table(&self, mn: MnId, meta: &TableMeta) -> Result<()>;
    /// Every table published on `mn`.
    fn tables(&self, mn: MnId) -> Result<Vec<TableMeta>>;
}
