//! Workloads of dmtx: protocol-agnostic transaction logic over the `Txn` API, with the
//! invariants each must keep (DESIGN §5, §6).
//!
//! A [`Workload`] declares its tables ([`dmtx_store::TableSpec`]), produces their initial
//! records, runs one transaction at a time on a coordinator through the `Txn` API
//! (AddRO / AddRW / Execute / Commit, FORD §5.2) and, after a run, checks its invariants
//! on a [`Snapshot`] of the quiesced tables given every coordinator's local state. It
//! states, per transaction type, what each transaction promises at begin
//! ([`Workload::txn_hints`]: read-only, every key declared before the first execute), so
//! protocols can take read-only paths and the registry can refuse a pair that cannot run.
//!
//! - [`Kvs`]: the key-value micro-benchmark of FORD §6.1 and Motor §7.1 (one table,
//!   40-byte values, Zipfian or uniform keys, read-only and read-write transactions);
//!   invariants: balance conservation, write counts, intact records.
//! - [`SmallBank`]: H-Store's SmallBank with FORD Table 2's mix; invariant: money
//!   conservation given the committed deltas.
//! - [`Tatp`]: the telecom benchmark (4 tables, 7 transactions, NURand subscribers);
//!   not-found and duplicate outcomes are committed but unsuccessful; invariants over
//!   rows, call-forwarding counts and update stamps.
//! - [`Tpcc`]: TPC-C 5.11 at transaction-logic level (9 tables, 5 transactions, the spec
//!   or FORD's simplified variant); consistency conditions 1–9 and 12.
//! - [`Ycsb`]: YCSB with RCBench's and OOCC's knobs (core mixes A–D, F; partitions and
//!   nodes per transaction); invariants over checksummed write stamps.
//! - [`Zipf`] and [`KeyGen`]: YCSB's scrambled Zipfian (Gray et al.) and uniform keys.
//!
//! Depends on `dmtx-runtime` and `dmtx-store`; never names a protocol or a transport.
//! The hot path (`draw` and `run`) allocates nothing and draws from one `SmallRng` per
//! coordinator.
//!
//! ```
//! use dmtx_runtime::Knobs;
//! use dmtx_workloads::{KeyGen, SmallBank, Workload};
//! use rand::{rngs::SmallRng, SeedableRng};
//!
//! let w = SmallBank::from_knobs(&Knobs::parse(["accounts=1000"]).unwrap()).unwrap();
//! assert_eq!(w.txn_types().len(), 6);
//! let keys = KeyGen::new(1000, 0.99);
//! let k = keys.next(&mut SmallRng::seed_from_u64(1));
//! assert!(k < 1000);
//! ```

#![warn(missing_docs)]
#![allow(async_fn_in_trait)]

pub mod kvs;
pub mod smallbank;
mod snapshot;
pub mod tatp;
#[cfg(test)]
mod testkit;
pub mod tpcc;
mod workload;
pub mod ycsb;
pub mod zipf;

pub use kvs::{Kvs, KvsConfig, KvsLocal, KvsValue};
pub use smallbank::{SmallBank, SmallBankConfig, SmallBankLocal};
pub use snapshot::Snapshot;
pub use tatp::{Tatp, TatpConfig, TatpLocal};
pub use tpcc::{Tpcc, TpccConfig, TpccLocal};
pub use workload::{room_per_part, InvariantError, Metric, Outcome, RecordSink, RunHint, TypeCounts, Workload};
pub use ycsb::{Ycsb, YcsbConfig, YcsbLocal};
pub use zipf::{KeyGen, Zipf};
