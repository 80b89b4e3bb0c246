//! The verb contract of dmtx: what a compute node may do to memory-node memory.
//!
//! Memory nodes expose registered regions addressed by [`RemotePtr`]. A compute node
//! touches them only with one-sided verbs ([`Op`]): READ, WRITE, CAS, FAA and FLUSH.
//! Ops to one node form a doorbell batch that runs in order; a [`Post`] carries batches
//! for any number of nodes, which run in parallel; waiting for a post is one round trip.
//! [`Transport`] is how a worker thread's coordinators reach the nodes, and [`Fabric`]
//! hands each worker thread its transport. [`PostCounters`] and [`VerbStats`] count
//! every post.
//!
//! Atomicity (DESIGN §2): CAS and FAA are atomic on their 8-byte word. READ and WRITE
//! move 8-byte words in increasing address order and can stall at any word, so a READ
//! racing a WRITE may see any mixture of old and new words. [`Region`] implements that
//! memory and offers a stall knob to produce every tear shape in tests.
//!
//! This crate is the bottom of the stack: it depends on no other dmtx crate.
//!
//! ```
//! use std::sync::Arc;
//! use dmtx_verbs::{MemFabric, MnId, Post, Region, RemotePtr, Submitted, Transport};
//!
//! let fabric = MemFabric::new(vec![Arc::new(Region::new(1 << 20))]);
//! let t = fabric.transport();
//! let word = RemotePtr::new(MnId(0), 4096);
//! let mut post = Post::new();
//! let lock = post.cas(word, 0, 7); // lock ...
//! let data = post.read(word, 8); // ... and read in one round trip
//! let Submitted::Done(res) = t.submit(&mut post) else { unreachable!() };
//! res.unwrap();
//! assert_eq!(post.old(lock), 0);
//! assert_eq!(post.bytes(data), 7u64.to_le_bytes());
//! ```

#![warn(missing_docs)]

pub mod apply;
pub mod conformance;
mod error;
pub mod mem;
pub mod msg;
mod post;
mod prefetch;
mod ptr;
pub mod region;
mod stats;
mod transport;

pub use error::{Result, VerbError};
pub use mem::{MemFabric, MemTransport};
pub use post::{AtomicId, Op, OpKind, Post, PostParts, ReadId};
pub use prefetch::prefetch_lines;
pub use ptr::{MnId, RemotePtr};
pub use region::{Region, StallGate, StallKind};
pub use stats::{MnCounters, PostCounters, VerbStats};
pub use transport::{Fabric, Submitted, Ticket, Transport};
