//! The init-time control interface and table metadata.

use dmtx_verbs::MnId;

/// Metadata of one hash table, as FORD §5.1 Table 1 lists it, plus where its replicas
/// live. Every replica has the same layout; only the base offset differs per node, and
/// everything stored inside a table (overflow links) is relative to that base, so one
/// cached table-relative address serves every replica.
///
/// A table may also carry a value region ([`ValueRegion`]): space after its buckets, on
/// every replica, where a protocol that keeps values out of its slots (Motor's Vpkgs and
/// attribute bars) puts them. And it carries its value's attribute schema ([`Attr`]),
/// which such a protocol needs to store only the attributes a write changed.
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
    /// Where the table's value region lies, table-relative; `None` when the protocol
    /// keeps every value in its slot (FORD, FaRM).
    pub value_region: Option<ValueRegion>,
    /// The value's attributes in offset order, tiling `0..value_bytes`; empty when the
    /// workload declared none (the value is then one attribute).
    pub attrs: Vec<Attr>,
}

/// A table's value region on each replica: `bytes` bytes at table-relative `offset`,
/// after the buckets, so what a slot stores about it (a value's offset) is the same on
/// every replica. Its first 8 bytes are a cursor, the bytes handed out from the start of
/// the region (the cursor word included); the loader leaves it past the values it
/// wrote, and coordinators reserve space by FAA on it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ValueRegion {
    /// Table-relative offset of the region's first byte, a multiple of 64.
    pub offset: u64,
    /// Bytes of the region, its cursor word included.
    pub bytes: u64,
}

/// One attribute of a table's value (a column of its rows, Motor §4.2): `bytes` bytes at
/// `offset` in the value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attr {
    /// The attribute's name, as the workload's schema spells it.
    pub name: String,
    /// Byte offset in the value.
    pub offset: u32,
    /// Bytes.
    pub bytes: u32,
}

impl Attr {
    /// `bytes` bytes at `offset`, called `name`.
    pub fn new(name: impl Into<String>, offset: u32, bytes: u32) -> Self {
        Self {
            name: name.into(),
            offset,
            bytes,
        }
    }

    /// One past its last byte.
    #[inline]
    pub fn end(&self) -> u32 {
        self.offset + self.bytes
    }
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

/// Longest name of a named entry, in UTF-8 bytes (names are 1..=this).
pub const NAME_BYTES_MAX: usize = 128;
/// Largest value of a named entry: small records (an area's address, a counter's
/// word), not data; bulk bytes go into the region through `alloc` and `load`.
pub const NAMED_VALUE_BYTES_MAX: usize = 4096;
/// Most named entries one memory node keeps. With [`NAMED_VALUE_BYTES_MAX`] and
/// [`NAME_BYTES_MAX`] this bounds a node's named store (and a NAMES reply) at about 1 MiB.
pub const NAMED_COUNT_MAX: usize = 256;

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
    /// A named entry with this name was already published on the node: a remote node
    /// still holds the named metadata of an earlier run (or one run published it twice).
    #[error(
        "{mn}: name `{name}` is already published: the memory nodes hold named metadata from an \
         earlier run; restart them, or use `dmtx cluster up`, which starts fresh ones"
    )]
    DuplicateName {
        /// The node.
        mn: MnId,
        /// The name.
        name: String,
    },
    /// No entry of this name is published on the node.
    #[error(
        "{mn}: nothing is published under the name `{name}`; the protocol's `setup_run` must \
         publish it before compute nodes set up their coordinators"
    )]
    UnknownName {
        /// The node.
        mn: MnId,
        /// The name asked for.
        name: String,
    },
    /// A named entry broke one of the store's limits (name length, value size, count).
    #[error("{mn}: named entry `{name}`: {what} is {value}, over the limit of {limit}; {}", what.fix())]
    NamedLimit {
        /// The node.
        mn: MnId,
        /// The name (cut to [`NAME_BYTES_MAX`] bytes when it is itself too long).
        name: String,
        /// Which limit: [`NamedLimitKind`].
        what: NamedLimitKind,
        /// The offending size or count.
        value: u64,
        /// The limit.
        limit: u64,
    },
}

/// Which limit of a node's named store an entry broke.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NamedLimitKind {
    /// The name is empty or longer than [`NAME_BYTES_MAX`] bytes.
    NameBytes,
    /// The value is longer than [`NAMED_VALUE_BYTES_MAX`] bytes.
    ValueBytes,
    /// The node already keeps [`NAMED_COUNT_MAX`] entries.
    Count,
}

impl NamedLimitKind {
    /// Its wire code.
    pub fn code(self) -> u8 {
        match self {
            NamedLimitKind::NameBytes => 1,
            NamedLimitKind::ValueBytes => 2,
            NamedLimitKind::Count => 3,
        }
    }

    /// The kind with wire code `c`.
    pub fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => NamedLimitKind::NameBytes,
            2 => NamedLimitKind::ValueBytes,
            3 => NamedLimitKind::Count,
            _ => return None,
        })
    }
}

impl std::fmt::Display for NamedLimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NamedLimitKind::NameBytes => "its name's length in bytes (1 at least)",
            NamedLimitKind::ValueBytes => "its value's length in bytes",
            NamedLimitKind::Count => "the node's entry count with it",
        })
    }
}

impl NamedLimitKind {
    /// What to do about it.
    fn fix(self) -> &'static str {
        match self {
            NamedLimitKind::NameBytes => "use a non-empty, shorter name",
            NamedLimitKind::ValueBytes => {
                "publish a small record (node, offset, length) and keep the bytes in an allocated area"
            }
            NamedLimitKind::Count => "publish fewer entries, or restart the memory nodes to drop old ones",
        }
    }
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
    /// Publish `value` under `name` on `mn`: run-wide metadata any compute node can
    /// fetch (a protocol's shared areas, found by name). A name is published once per
    /// node ([`ControlError::DuplicateName`]); names are 1..=[`NAME_BYTES_MAX`] UTF-8
    /// bytes, values at most [`NAMED_VALUE_BYTES_MAX`], at most [`NAMED_COUNT_MAX`] per node.
    fn put_named(&self, mn: MnId, name: &str, value: &[u8]) -> Result<()>;
    /// The value published under `name` on `mn` ([`ControlError::UnknownName`] if none).
    fn named(&self, mn: MnId, name: &str) -> Result<Vec<u8>>;
    /// Every name published on `mn`, in byte order.
    fn names(&self, mn: MnId) -> Result<Vec<String>>;
}

/// Check `name` and `value` against the named store's size limits (not the count).
/// Every implementation of [`Control::put_named`] applies it, so a bad entry fails alike
/// in-process, over the wire and in a sizing pass.
pub fn check_named(mn: MnId, name: &str, value: &[u8]) -> Result<()> {
    let limit = |what: NamedLimitKind, value: usize, limit: usize| ControlError::NamedLimit {
        mn,
        name: cut(name, NAME_BYTES_MAX).to_owned(),
        what,
        value: value as u64,
        limit: limit as u64,
    };
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(limit(NamedLimitKind::NameBytes, name.len(), NAME_BYTES_MAX));
    }
    if value.len() > NAMED_VALUE_BYTES_MAX {
        return Err(limit(NamedLimitKind::ValueBytes, value.len(), NAMED_VALUE_BYTES_MAX));
    }
    Ok(())
}

/// `s` cut to at most `n` bytes, at a character boundary.
fn cut(s: &str, n: usize) -> &str {
    let mut n = n.min(s.len());
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}
