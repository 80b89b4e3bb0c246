//! Errors a verb can complete with.

use crate::{MnId, OpKind, RemotePtr};

/// Why a post (or one op of it) failed.
///
/// A verb error is an operating error: the MN refused the op or could not be reached.
/// It is never a transaction abort; protocols turn it into a rollback.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbError {
    /// The op touches bytes outside the node's registered region.
    #[error("{kind:?} at {ptr} of {len} bytes is outside the region of {region_bytes} bytes on {}; check the table metadata or the region size", ptr.mn)]
    OutOfRange {
        /// The op that was refused.
        kind: OpKind,
        /// Its first byte.
        ptr: RemotePtr,
        /// Its length in bytes.
        len: u64,
        /// The size of the region on that node.
        region_bytes: u64,
    },
    /// An atomic (CAS/FAA) on an address that is not 8-byte aligned.
    #[error("{kind:?} at {ptr} is not 8-byte aligned; atomics work on aligned words only")]
    Misaligned {
        /// The op that was refused.
        kind: OpKind,
        /// The address it named.
        ptr: RemotePtr,
    },
    /// The memory node does not exist in this cluster.
    #[error("{mn} is not a memory node of this cluster ({mn_count} nodes)")]
    UnknownNode {
        /// The node named.
        mn: MnId,
        /// How many nodes the cluster has.
        mn_count: usize,
    },
    /// The node is down, fenced, or the connection to it was lost; ops in flight to it
    /// fail with this error and never hang.
    #[error("{mn} is unreachable: {why}")]
    Unreachable {
        /// The node that could not be reached.
        mn: MnId,
        /// What the transport knows about the cause.
        why: String,
    },
}

/// `Result` with a [`VerbError`].
pub type Result<T> = std::result::Result<T, VerbError>;
