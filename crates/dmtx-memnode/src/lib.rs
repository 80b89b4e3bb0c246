//! Memory nodes (DESIGN §3).
//!
//! A [`MemNode`] owns one registered [`Region`](dmtx_verbs::Region), a bump allocator
//! over it and a catalog of [`TableMeta`]. Before a run, compute nodes talk to it
//! through the [`Control`] interface: allocate space, bulk-load bytes, publish and fetch
//! table metadata, allocate per-coordinator log areas, and publish and fetch small named
//! entries (run-wide metadata such as a shared counter's address, found by name). During a run the node only
//! serves verbs; it never runs concurrency control, walks an index or installs a log.
//!
//! [`LocalCluster`] is a set of in-process nodes with their [`MemFabric`](dmtx_verbs::MemFabric).
//! The TCP server ([`server::Server`], `dmtx memnode`) serves the same [`Control`] calls and
//! the verbs over the network, in the wire format of [`server::wire`].
//!
//! Depends only on `dmtx-verbs` (and `libc` for `poll(2)` in the server).
//!
//! ```
//! use dmtx_memnode::{Control, LocalCluster};
//! use dmtx_verbs::MnId;
//!
//! let cluster = LocalCluster::new(2, 1 << 20);
//! let at = cluster.alloc(MnId(1), 4096, 64).unwrap();
//! cluster.load(MnId(1), at, b"hello, world").unwrap();
//! ```

#![warn(missing_docs)]

mod backing;
mod control;
mod local;
mod node;
pub mod server;

pub use backing::BackingError;
pub use control::{
    check_named, Attr, Control, ControlError, NamedLimitKind, Result, Runs, TableMeta, ValueRegion, NAMED_COUNT_MAX,
    NAMED_VALUE_BYTES_MAX, NAME_BYTES_MAX,
};
pub use local::LocalCluster;
pub use node::MemNode;
