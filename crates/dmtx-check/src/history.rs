//! The history model: what every finished transaction did, in a compact in-memory form
//! that scales to tens of millions of transactions.
//!
//! Versions identify their writer: a protocol installs a version that no other
//! transaction installs for the same key (FORD uses the writer's transaction id), and a
//! write records the version it replaced (`prev`), which gives the checker each key's
//! version order. Version [`INITIAL_VERSION`] is what the loader wrote; it has no writer
//! transaction. A multi-version protocol reads older versions by the same names: a read
//! names the writer of the version the protocol's snapshot selected.
//!
//! A read may find its key **absent** ([`Read::absent`]): it then names the tombstone a
//! delete installed, or [`INITIAL_VERSION`] when the protocol saw no version at all
//! (the state of a key before its first insert).
//!
//! Protocols that order transactions by timestamps also record each transaction's start
//! (snapshot) timestamp and commit timestamp; the checker then verifies every read
//! against the snapshot its start timestamp names. [`NO_TS`] marks a timestamp not
//! taken.

use serde::{Deserialize, Serialize};

/// The version of every record as bulk-loaded, before any transaction wrote it.
pub const INITIAL_VERSION: u64 = 0;

/// A start or commit timestamp that the protocol did not take (in [`TxnMeta`]).
pub const NO_TS: u64 = u64::MAX;

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
    /// Start (snapshot) timestamp, or [`NO_TS`].
    pub start_ts: u64,
    /// Commit timestamp, or [`NO_TS`].
    pub commit_ts: u64,
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
    /// The version observed (its writer's id; [`INITIAL_VERSION`] for the initial state).
    pub version: u64,
    /// The key was absent: `version` is a delete's tombstone, or [`INITIAL_VERSION`]
    /// when no version was seen.
    #[serde(default, skip_serializing_if = "is_false")]
    pub absent: bool,
}

impl Read {
    /// A read of an existing `version`.
    pub fn of(table: u32, key: u64, version: u64) -> Self {
        Read {
            table,
            key,
            version,
            absent: false,
        }
    }

    /// A read that found the key absent (`version` as for [`Read::absent`]).
    pub fn absent(table: u32, key: u64, version: u64) -> Self {
        Read {
            table,
            key,
            version,
            absent: true,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
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
    /// Start (snapshot) timestamp, when the protocol took one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ts: Option<u64>,
    /// Commit timestamp, when the protocol took one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ts: Option<u64>,
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
        let ts = (t.start_ts.unwrap_or(NO_TS), t.commit_ts.unwrap_or(NO_TS));
        self.push_parts(
            t.id,
            t.coord,
            (t.start_ns, t.end_ns),
            ts,
            t.outcome,
            &t.reads,
            &t.writes,
        );
    }

    /// Add one transaction from its parts: `times_ns` is (start, end), `ts` is (start
    /// timestamp, commit timestamp), each [`NO_TS`] when not taken.
    ///
    /// # Panics
    ///
    /// When the history outgrows its `u32` read or write offsets, or the transaction
    /// its `u16` read or write counts.
    #[allow(clippy::too_many_arguments)]
    pub fn push_parts(
        &mut self,
        id: u64,
        coord: u32,
        times_ns: (u64, u64),
        ts: (u64, u64),
        outcome: Outcome,
        reads: &[Read],
        writes: &[Write],
    ) {
        let meta = TxnMeta {
            id,
            coord,
            start_ns: times_ns.0,
            end_ns: times_ns.1,
            start_ts: ts.0,
            commit_ts: ts.1,
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

    /// Add `by_ns` to every transaction's `start_ns` and `end_ns` (a compute node's
    /// clock readings made Unix time, so that histories of several hosts compare).
    pub fn shift_times(&mut self, by_ns: u64) {
        for t in &mut self.txns {
            t.start_ns = t.start_ns.saturating_add(by_ns);
            t.end_ns = t.end_ns.saturating_add(by_ns);
        }
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
            start_ts: (t.start_ts != NO_TS).then_some(t.start_ts),
            commit_ts: (t.commit_ts != NO_TS).then_some(t.commit_ts),
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
