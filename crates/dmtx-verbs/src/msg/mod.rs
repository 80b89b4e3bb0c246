//! Two-sided messages between compute-node worker threads (SEND/RECV).
//!
//! Some protocols need compute nodes to talk to each other: LOTUS's lock RPCs (§4.1),
//! OOCC's lease manager, Calvin's sequencer, a global Vcache. This module is the
//! transport-level contract for that; the request/response layer with ids, timeouts and
//! retries sits on top of it in `dmtx-runtime` (`rpc`).
//!
//! - **Addressing**: a message goes to a [`WorkerAddr`] (compute node, worker thread)
//!   and is received by that worker's [`Mailbox`], which its executor drains between its
//!   coordinators. There are no RPC threads: LOTUS serves the i-th coordinator's locks on
//!   the i-th worker and spends no extra CPU on messaging.
//! - **Batching**: [`Mailbox::push`] queues an [`Entry`] for a destination;
//!   [`Mailbox::flush`] sends every destination's queued entries as **one message**, as a
//!   doorbell batch sends many WQEs with one MMIO. The runtime flushes once per executor
//!   pass, so every request a thread's coordinators make to one peer in a pass travels in
//!   one message.
//! - **Order**: FIFO per (sender, receiver) pair, entries of a message in push order.
//!   Nothing is promised across pairs.
//! - **Loss**: a transport that loses a peer (connection cut, peer down) reports it once
//!   as [`Event::PeerLost`]; entries queued to or in flight from that peer may be lost.
//!   The RPC layer turns that into errors or retries; it never hangs on it.
//!
//! Transports: [`MemMsgFabric`] (in-process queues) here, the `tcp` one in `dmtx-net`,
//! the simulator's later. [`conformance`] checks any of them.

pub mod conformance;
mod entry;
mod mem;
mod outbox;

use std::fmt;

pub use entry::{decode_entries, encode_entry, EntryError, ENTRY_HEADER_BYTES};
pub use mem::{MemMailbox, MemMsgFabric, MemMsgNet};
pub use outbox::Outbox;

/// A worker thread of a compute node: where messages go.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerAddr {
    /// Compute-node id.
    pub cn: u16,
    /// Worker thread on that node.
    pub thread: u16,
}

impl WorkerAddr {
    /// Worker `thread` of compute node `cn`.
    pub const fn new(cn: u16, thread: u16) -> Self {
        Self { cn, thread }
    }
}

impl fmt::Display for WorkerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cn{}/t{}", self.cn, self.thread)
    }
}

/// What an entry is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A request that expects a [`EntryKind::Reply`] with the same id.
    Request,
    /// The answer to a request.
    Reply,
    /// A message that expects no answer.
    OneWay,
}

impl EntryKind {
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            EntryKind::Request => 1,
            EntryKind::Reply => 2,
            EntryKind::OneWay => 3,
        }
    }

    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => EntryKind::Request,
            2 => EntryKind::Reply,
            3 => EntryKind::OneWay,
            _ => return None,
        })
    }
}

/// One request, reply or one-way message inside a message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// What it is.
    pub kind: EntryKind,
    /// Set on a request sent again after a timeout or a lost peer (same id as before), so
    /// that a handler can tell a duplicate it must not apply twice.
    pub retry: bool,
    /// Request id, chosen by the requester; a reply carries its request's id.
    pub id: u64,
    /// The bytes, opaque to the transport.
    pub payload: &'a [u8],
}

/// What a mailbox hands its owner.
#[derive(Debug)]
pub enum Event<'a> {
    /// An entry arrived from `from`.
    Entry {
        /// Who sent it.
        from: WorkerAddr,
        /// The entry.
        entry: Entry<'a>,
    },
    /// The transport lost `peer`: entries queued to it or in flight from it may be lost.
    PeerLost {
        /// The peer.
        peer: WorkerAddr,
        /// What the transport knows.
        why: String,
    },
}

/// Why a message could not be queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MsgError {
    /// The destination is not a worker of this cluster.
    #[error("{to} is not a compute-node worker of this cluster; check the cluster file's compute nodes and --threads")]
    UnknownPeer {
        /// The address named.
        to: WorkerAddr,
    },
    /// A payload over [`PAYLOAD_MAX`].
    #[error("message payload of {len} bytes exceeds {max} bytes; split it")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// The largest payload of one entry.
pub const PAYLOAD_MAX: usize = 1 << 20;

/// Refuse an entry whose payload exceeds [`PAYLOAD_MAX`] (every mailbox's first check).
pub fn check_size(entry: &Entry<'_>) -> Result<(), MsgError> {
    match entry.payload.len() {
        len if len > PAYLOAD_MAX => Err(MsgError::TooLarge { len, max: PAYLOAD_MAX }),
        _ => Ok(()),
    }
}

/// One worker thread's end of the messaging network.
///
/// Owned by one worker thread (like a [`Transport`](crate::Transport)): methods take
/// `&self` and use interior mutability, so the executor and its coordinators can share it.
pub trait Mailbox {
    /// This worker's address.
    fn addr(&self) -> WorkerAddr;

    /// Every worker of the cluster, this one included, in address order (broadcast goes
    /// to these).
    fn workers(&self) -> &[WorkerAddr];

    /// Queue `entry` for `to`; it leaves at the next [`Mailbox::flush`], in one message
    /// with everything else queued for `to`. Sending to oneself is allowed.
    fn push(&self, to: WorkerAddr, entry: Entry<'_>) -> Result<(), MsgError>;

    /// Send every queued message. Never blocks: what the network cannot take now stays
    /// queued for the next flush.
    fn flush(&self);

    /// Hand every arrived entry and loss report to `f`, in arrival order. Returns how
    /// many events were handed over.
    fn drain(&self, f: &mut dyn FnMut(Event<'_>)) -> usize;
}

/// A cluster's messaging network: hands each worker thread its [`Mailbox`].
pub trait MsgFabric: Send + Sync {
    /// Short name (`mem`, `tcp`, `sim`).
    fn name(&self) -> &'static str;
    /// Every worker of the cluster, in address order.
    fn workers(&self) -> Vec<WorkerAddr>;
    /// The mailbox of local worker `thread` (call on that thread).
    fn mailbox(&self, thread: u16) -> Result<Box<dyn Mailbox>, MsgError>;
}
