//! The compute-node runtime of dmtx (DESIGN §4).
//!
//! A compute node ([`Cn`]) runs `threads × coroutines` coordinators. Each worker thread
//! ([`Worker`]) has its own [`Transport`](dmtx_verbs::Transport) and runs a
//! [`LocalExecutor`]; each [`Coordinator`] is an async task on it that runs one
//! transaction after another through the [`Txn`] API and yields at every post. The
//! [`Protocol`] trait is what a concurrency-control protocol implements to plug in;
//! workloads see only [`Txn`], [`Table`] and [`ObjRef`]. Coordinators count every post
//! ([`CoordCtx::post`]); a [`TxnObserver`] receives every finished transaction (the
//! isolation checker's hook). The [`AddrCache`] maps keys to slot addresses per CN.
//! Time comes from a [`Clock`], so the simulator can supply virtual time; a task waits
//! for time with [`sleep_until`] on any executor ([`timer`]).
//! MVCC and T/O protocols take timestamps from a [`TimestampService`] ([`timestamp`]),
//! which also keeps a completed-commit watermark for snapshots that must not miss a commit.
//!
//! Depends on `dmtx-verbs`, `dmtx-memnode` and `dmtx-store`; never names a transport.
//!
//! ```
//! use dmtx_runtime::{block_on, yield_now};
//! let v = block_on(async { yield_now().await; 7 });
//! assert_eq!(v, 7);
//! ```

#![warn(missing_docs)]
#![allow(async_fn_in_trait)]

mod abort;
mod cache;
mod clock;
mod ctx;
mod error;
mod executor;
mod knobs;
pub mod metric;
pub mod named;
mod probe;
mod protocol;
pub mod rpc;
mod scan;
pub mod service;
pub mod timer;
pub mod timestamp;
mod txn;
mod worker;

pub use abort::{check_abort_reasons, Abort, AbortReason, AbortReasonSpec, PROTOCOL_ABORT_REASONS_MAX};
pub use cache::{AddrCache, CacheStats, SharedAddrCache, ADDR_CACHE_ENTRIES_DEFAULT};
pub use clock::{Clock, RealClock, DRIFT_BOUND_PPM_DEFAULT};
pub use ctx::{CoordCtx, CoordId, DEFERRED_POSTS_MAX};
pub use error::{Result, RuntimeError};
pub use executor::{block_on, yield_now, LocalExecutor};
pub use knobs::{did_you_mean, KnobError, KnobSpec, Knobs};
pub use metric::{MetricKind, MetricSpec, MetricSum};
pub use probe::{Probe, ProbeSource, GENERIC_TXN_STEP};
pub use protocol::{Isolation, Protocol, Route};
pub use rpc::{Handled, Request, Rpc, RpcConfig, RpcError};
pub use scan::scan_table;
pub use service::{ServiceStop, ServiceTask};
pub use timer::{sleep, sleep_until, Sleep};
pub use timestamp::{
    CommitTs, FaaTimestamps, HybridTimestamps, OracleTimestamps, RpcTimestamps, TimestampService, Timestamps, TsError,
    TsKind, TsKindError,
};
pub use txn::{
    Access, Coordinator, Obj, ObjRef, ObjSummary, Phase, Table, Txn, TxnHints, TxnObserver, TxnSet, TxnSummary,
    STEP_ADD,
};
pub use worker::{Cn, Worker};
