//! Workloads of dmtx: protocol-agnostic transaction logic over the `Txn` API, with the
//! invariants each must keep.
//!
//! Depends on `dmtx-runtime` and `dmtx-store`; never names a protocol or a transport.

#![warn(missing_docs)]
#![allow(async_fn_in_trait)]

mod snapshot;
mod workload;

pub use snapshot::Snapshot;
pub use workload::{InvariantError, Workload};
