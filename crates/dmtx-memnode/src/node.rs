//! One memory node: region, allocator, catalog.

use std::sync::{Arc, Mutex};

use dmtx_verbs::{MnId, Region};

use crate::{ControlError, Result, TableMeta};

/// A memory node's state. The region is shared with whatever serves verbs on it.
#[derive(Debug)]
pub struct MemNode {
    id: MnId,
    region: Arc<Region>,
    state: Mutex<NodeState>,
}

#[derive(Debug)]
struct NodeState {
    /// Invariant: every byte below `next_free` was handed out by `alloc`; none above.
    next_free: u64,
    tables: Vec<TableMeta>,
}

/// The first bytes of a region are never handed out, so offset 0 can mean "null".
const RESERVED_PREFIX: u64 = 64;

impl MemNode {
    /// A node with a fresh zeroed region of `region_bytes`.
    pub fn new(id: MnId, region_bytes: u64) -> Self {
        Self {
            id,
            region: Arc::new(Region::new(region_bytes)),
            state: Mutex::new(NodeState {
                next_free: RESERVED_PREFIX,
                tables: Vec::new(),
            }),
        }
    }

    /// A node serving an existing region (a file-backed one, say).
    pub fn with_region(id: MnId, region: Region) -> Self {
        Self {
            id,
            region: Arc::new(region),
            state: Mutex::new(NodeState {
                next_free: RESERVED_PREFIX,
                tables: Vec::new(),
            }),
        }
    }

    /// The node's id.
    pub fn id(&self) -> MnId {
        self.id
    }

    /// The registered region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Reserve `bytes` aligned to `align`.
    pub fn alloc(&self, bytes: u64, align: u64) -> Result<u64> {
        assert!(align.is_power_of_two(), "alignment {align} is not a power of two");
        let mut st = self.state.lock().unwrap();
        let start = st.next_free.next_multiple_of(align);
        let end = start.checked_add(bytes).filter(|&e| e <= self.region.bytes());
        let Some(end) = end else {
            return Err(ControlError::OutOfMemory {
                mn: self.id,
                requested: bytes,
                free: self.region.bytes().saturating_sub(st.next_free),
                region_bytes: self.region.bytes(),
            });
        };
        st.next_free = end;
        Ok(start)
    }

    /// Bytes handed out so far.
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().unwrap().next_free
    }

    /// Bulk-load bytes.
    pub fn load(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.region.write(offset, bytes).map_err(|_| ControlError::OutOfRange {
            mn: self.id,
            offset,
            len: bytes.len() as u64,
            region_bytes: self.region.bytes(),
        })
    }

    /// Publish table metadata.
    pub fn put_table(&self, meta: &TableMeta) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        if let Some(t) = st.tables.iter().find(|t| t.id == meta.id) {
            return Err(ControlError::DuplicateTable {
                mn: self.id,
                id: meta.id,
                name: t.name.clone(),
            });
        }
        st.tables.push(meta.clone());
        Ok(())
    }

    /// Published tables.
    pub fn tables(&self) -> Vec<TableMeta> {
        self.state.lock().unwrap().tables.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_aligns_and_runs_out_with_a_clear_error() {
        let n = MemNode::new(MnId(3), 4096);
        let a = n.alloc(100, 64).unwrap();
        assert_eq!(a, 64);
        let b = n.alloc(8, 256).unwrap();
        assert_eq!(b, 256);
        let e = n.alloc(8192, 8).unwrap_err();
        assert!(e.to_string().contains("--mn-bytes"), "{e}");
        assert!(matches!(e, ControlError::OutOfMemory { requested: 8192, .. }));
    }

    #[test]
    fn duplicate_table_ids_are_refused() {
        let n = MemNode::new(MnId(0), 4096);
        let m = TableMeta {
            id: 1,
            name: "t".into(),
            value_bytes: 8,
            slot_bytes: 48,
            slots_per_bucket: 4,
            bucket_bytes: 208,
            bucket_count: 2,
            overflow_bucket_count: 1,
            replicas: vec![(MnId(0), 64)],
        };
        n.put_table(&m).unwrap();
        assert!(matches!(
            n.put_table(&m),
            Err(ControlError::DuplicateTable { id: 1, .. })
        ));
        assert_eq!(n.tables(), vec![m]);
    }
}
