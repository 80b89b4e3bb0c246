//! The history model: what every finished transaction did, in a compact in-memory form
//! that scales to tens of millions of transactions.
//!
//! Versions identify their writer: a protocol installs a version that no other
//! transaction installs for the same key (FORD uses the writer's transaction id), and a
//! write records the version it replaced (`prev`), which gives the checker each key's
//! version order. Version [`INITIAL_VERSION`] is what the loader wrote; it has no writer
//! transaction.

use serde::{Deserialize, Serialize};

/// The version of every record as bulk-loaded, before any transaction wrote it.
pub const INITIAL_VERSION: u64 = 0;

/// How a transaction ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Committed.
    Committed,
    /// Aborted; whatever it wrote must be invisible.
    Aborted,
}

/// What a write did to its key.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteKind {
    /// Replaced `prev` with a new value.
    Update,
    /// Created the key (no `prev`).
    Insert,
    /// Removed the key; `version` names the tombstone.
    Delete,
}

/// One transaction's metadata; its reads and writes are ranges of the history's arrays.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TxnMeta {
    /// Unique transaction id (the version it installs).
    pub id: u64,
    /// Coordinator that ran it (compact id).
    pub coord: u32,
    /// Clock reading at begin (ns).
    pub start_ns: u64,
    /// Clock reading at the outcome (ns).
    pub end_ns: u64,
    /// Outcome.
    pub outcome: Outcome,
    /// `reads[reads_at .. reads_at + reads_len]`.
    pub reads_at: u32,
    /// Number of reads.
    pub reads_len: u16,
    /// `writes[writes_at .. writes_at + writes_len]`.
    pub writes_at: u32,
    /// Number of writes.
    pub writes_len: u16,
}

/// A read of `version` of (`table`, `key`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Read {
    /// Table id.
    pub table: u32,
    /// Key.
    pub key: u64,
    /// The version observed.
    pub version: u64,
}

/// A write of (`table`, `key`) installing `version` over `prev`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Write {
    /// Table id.
    pub table: u32,
    /// Key.
    pub key: u64,
    /// The version replaced (`None` for an insert).
    pub prev: Option<u64>,
    /// The version installed.
    pub version: u64,
    /// Update, insert or delete.
    pub kind: WriteKind,
}

/// A whole history. Transactions appear in any order; merge per-coordinator buffers
/// with [`History::append`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Every transaction.
    pub txns: Vec<TxnMeta>,
    /// Reads of all transactions.
    pub reads: Vec<Read>,
    /// Writes of all transactions.
    pub writes: Vec<Write>,
}

/// A transaction as a self-contained value (for building histories by hand and for the
/// JSON-lines format).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRecord {
    /// Unique transaction id.
    pub id: u64,
    /// Coordinator (compact id).
    #[serde(default)]
    pub coord: u32,
    /// Begin (ns).
    #[serde(default)]
    pub start_ns: u64,
    /// Outcome (ns).
    #[serde(default)]
    pub end_ns: u64,
    /// Outcome.
    pub outcome: Outcome,
    /// Reads.
    #[serde(default)]
    pub reads: Vec<Read>,
    /// Writes.
    #[serde(default)]
    pub writes: Vec<Write>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of transactions.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    /// True when no transaction was recorded.
    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// Add one transaction.
    pub fn push(&mut self, t: &TxnRecord) {
        self.push_parts(t.id, t.coord, t.start_ns, t.end_ns, t.outcome, &t.reads, &t.writes);
    }

    /// Add one transaction from its parts.
    #[allow(clippy::too_many_arguments)]
    pub fn push_parts(
        &mut self,
        id: u64,
        coord: u32,
        start_ns: u64,
        end_ns: u64,
        outcome: Outcome,
        reads: &[Read],
        writes: &[Write],
    ) {
        let meta = TxnMeta {
            id,
            coord,
            start_ns,
            end_ns,
            outcome,
            reads_at: u32::try_from(self.reads.len()).expect("history of more than 4 G reads"),
            reads_len: u16::try_from(reads.len()).expect("transaction with more than 65535 reads"),
            writes_at: u32::try_from(self.writes.len()).expect("history of more than 4 G writes"),
            writes_len: u16::try_from(writes.len()).expect("transaction with more than 65535 writes"),
        };
        self.reads.extend_from_slice(reads);
        self.writes.extend_from_slice(writes);
        self.txns.push(meta);
    }

    /// Move every transaction of `other` into `self`.
    pub fn append(&mut self, other: History) {
        let (r, w) = (self.reads.len() as u32, self.writes.len() as u32);
        self.reads.extend(other.reads);
        self.writes.extend(other.writes);
        self.txns.extend(other.txns.into_iter().map(|mut t| {
            t.reads_at += r;
            t.writes_at += w;
            t
        }));
    }

    /// The reads of transaction `t`.
    #[inline]
    pub fn reads_of(&self, t: &TxnMeta) -> &[Read] {
        &self.reads[t.reads_at as usize..t.reads_at as usize + t.reads_len as usize]
    }

    /// The writes of transaction `t`.
    #[inline]
    pub fn writes_of(&self, t: &TxnMeta) -> &[Write] {
        &self.writes[t.writes_at as usize..t.writes_at as usize + t.writes_len as usize]
    }

    /// Transaction `i` as a self-contained record.
    pub fn record(&self, i: usize) -> TxnRecord {
        let t = &self.txns[i];
        TxnRecord {
            id: t.id,
            coord: t.coord,
            start_ns: t.start_ns,
            end_ns: t.end_ns,
            outcome: t.outcome,
            reads: self.reads_of(t).to_vec(),
            writes: self.writes_of(t).to_vec(),
        }
    }

    /// Build from records.
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a TxnRecord>) -> Self {
        let mut h = History::new();
        for r in records {
            h.push(r);
        }
        h
    }
}
