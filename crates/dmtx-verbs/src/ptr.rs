//! Remote addresses.

use std::fmt;

/// Index of a memory node in the cluster (dense, from 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MnId(pub u16);

impl MnId {
    /// The index as a `usize`, for indexing per-MN arrays.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for MnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mn{}", self.0)
    }
}

/// A byte address in the registered region of one memory node.
///
/// The offset is relative to the start of the region, never a host virtual address, so
/// the same pointer means the same bytes whichever transport carries it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemotePtr {
    /// The memory node that holds the bytes.
    pub mn: MnId,
    /// Byte offset from the start of that node's region.
    pub offset: u64,
}

impl RemotePtr {
    /// A pointer to `offset` on `mn`.
    #[inline]
    pub const fn new(mn: MnId, offset: u64) -> Self {
        Self { mn, offset }
    }

    /// The pointer `bytes` further on the same node.
    #[inline]
    pub const fn add(self, bytes: u64) -> Self {
        Self {
            mn: self.mn,
            offset: self.offset + bytes,
        }
    }
}

impl fmt::Display for RemotePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{:#x}", self.mn, self.offset)
    }
}
