//! Transaction histories and the isolation checker of dmtx.
//!
//! A [`History`](history::History) holds what every finished transaction read and wrote
//! (compact [`TxnMeta`](history::TxnMeta) plus flat read and write arrays; build small
//! ones by hand from [`TxnRecord`](history::TxnRecord)s). [`check`](fn@check) builds Adya's direct
//! serialization graph over its committed transactions and returns a [`Report`]: counts
//! and [`Finding`]s of G0, G1a, G1b, G1c, G-single, G2, lost updates, broken versions
//! and, with [`CheckOptions::real_time`], real-time violations, each with its evidence (a
//! cycle prints as `T1/5 -ww[t0:k5 v0->v1/5]-> T1/7 -rw[t0:k9 v0]-> T1/5`). Each
//! coordinator's transactions form a session whose order the serialization must keep
//! ([`CheckOptions::sessions`], on by default). In histories with start and commit
//! timestamps (multi-version and timestamp-ordered protocols), every read must also see
//! exactly the snapshot its start timestamp names ([`FindingKind::Snapshot`]). The algorithm
//! and its complexity are in [`check`](mod@check)'s module doc: a sort, one scan, CSR
//! adjacency and iterative Tarjan, a few seconds per million transactions.
//!
//! [`recorder::Recorder`] records a running coordinator's transactions (the runtime's
//! `TxnObserver` hook) and [`format`](mod@format) reads and writes histories as versioned JSON
//! lines (`dmtx bench --history FILE`, `dmtx check FILE`).
//!
//! Depends on `dmtx-runtime` (for [`Isolation`](dmtx_runtime::Isolation) and the
//! transaction id layout) and never on a protocol, a transport or a workload: protocols
//! are checked from what they record, not from what they claim.
//!
//! ```
//! use dmtx_check::history::{History, Outcome, Read, TxnRecord, Write, WriteKind};
//! use dmtx_check::{check, CheckOptions, FindingKind, Level};
//!
//! // Write skew: T1 and T2 (on coordinators 1 and 2) each read x and y (initial
//! // versions), then write the other.
//! let rw = |id, read: u64, write: u64| TxnRecord {
//!     id,
//!     coord: id as u32,
//!     start_ns: 0,
//!     end_ns: 0,
//!     start_ts: None,
//!     commit_ts: None,
//!     outcome: Outcome::Committed,
//!     reads: vec![Read::of(0, read, 0)],
//!     writes: vec![Write { table: 0, key: write, prev: Some(0), version: id, kind: WriteKind::Update }],
//! };
//! let h = History::from_records(&[rw(1, 1, 2), rw(2, 2, 1)]);
//!
//! let ser = check(&h, &CheckOptions::default());
//! assert!(!ser.is_clean());
//! assert_eq!(ser.count(FindingKind::G2), 1);
//!
//! let si = check(&h, &CheckOptions { level: Level::SnapshotIsolation, ..Default::default() });
//! assert!(si.is_clean(), "write skew is allowed under SI: {si}");
//! assert_eq!(si.count(FindingKind::WriteSkew), 1);
//! ```

#![warn(missing_docs)]

pub mod check;
pub mod format;
pub mod history;
pub mod recorder;
pub mod report;

pub use check::{check, check_options, CheckOptions};
pub use report::{Access, Edge, EdgeCounts, Evidence, Finding, FindingKind, Level, Overwrite, Report, Step};
