//! In-process memory nodes.

use std::sync::Arc;

use dmtx_verbs::region::RegionAllocError;
use dmtx_verbs::{MemFabric, MnId};

use crate::{Control, ControlError, MemNode, TableMeta};

type Result<T, E = ControlError> = std::result::Result<T, E>;

/// `mn_count` in-process memory nodes and the `mem` fabric over their regions.
#[derive(Clone, Debug)]
pub struct LocalCluster {
    nodes: Vec<Arc<MemNode>>,
    fabric: MemFabric,
}

impl LocalCluster {
    /// Nodes with `region_bytes` of lazily zeroed memory each.
    ///
    /// # Panics
    ///
    /// If a region cannot be allocated; sizes from users go through
    /// [`LocalCluster::try_new`].
    pub fn new(mn_count: usize, region_bytes: u64) -> Self {
        Self::try_new(mn_count, region_bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Nodes with `region_bytes` of lazily zeroed memory each, or why the OS would not
    /// give that much memory (the error names the size).
    pub fn try_new(mn_count: usize, region_bytes: u64) -> Result<Self, RegionAllocError> {
        assert!(mn_count > 0, "a cluster needs at least one memory node");
        let nodes = (0..mn_count)
            .map(|i| MemNode::try_new(MnId(i as u16), region_bytes).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let fabric = MemFabric::new(nodes.iter().map(|n| Arc::clone(n.region())).collect());
        Ok(Self { nodes, fabric })
    }

    /// The `mem` fabric over these nodes.
    pub fn fabric(&self) -> &MemFabric {
        &self.fabric
    }

    /// One node.
    pub fn node(&self, mn: MnId) -> Result<&Arc<MemNode>> {
        self.nodes.get(mn.index()).ok_or(ControlError::UnknownNode {
            mn,
            mn_count: self.nodes.len(),
        })
    }
}

impl Control for LocalCluster {
    fn mn_count(&self) -> usize {
        self.nodes.len()
    }
    fn alloc(&self, mn: MnId, bytes: u64, align: u64) -> Result<u64> {
        self.node(mn)?.alloc(bytes, align)
    }
    fn load(&self, mn: MnId, offset: u64, bytes: &[u8]) -> Result<()> {
        self.node(mn)?.load(offset, bytes)
    }
    fn put_table(&self, mn: MnId, meta: &TableMeta) -> Result<()> {
        self.node(mn)?.put_table(meta)
    }
    fn tables(&self, mn: MnId) -> Result<Vec<TableMeta>> {
        Ok(self.node(mn)?.tables())
    }
    fn put_named(&self, mn: MnId, name: &str, value: &[u8]) -> Result<()> {
        self.node(mn)?.put_named(name, value)
    }
    fn named(&self, mn: MnId, name: &str) -> Result<Vec<u8>> {
        self.node(mn)?.named(name)
    }
    fn names(&self, mn: MnId) -> Result<Vec<String>> {
        Ok(self.node(mn)?.names())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a region size the OS cannot map is an error naming it, so the bench driver
    /// can report it instead of aborting.
    #[test]
    fn try_new_reports_a_size_that_cannot_be_mapped() {
        let e = LocalCluster::try_new(2, u64::MAX).unwrap_err();
        assert_eq!(e.bytes, u64::MAX);
        assert!(e.to_string().contains(&format!("{} bytes", u64::MAX)), "{e}");
        let c = LocalCluster::try_new(2, 1 << 20).unwrap();
        assert_eq!(c.mn_count(), 2);
        assert_eq!(c.node(MnId(1)).unwrap().region().bytes(), 1 << 20);
    }

    /// Goal: named entries are per node, and an unknown node is an error, not a panic.
    #[test]
    fn named_entries_are_kept_per_node() {
        let c = LocalCluster::new(2, 1 << 16);
        c.put_named(MnId(1), "x", b"on one").unwrap();
        assert_eq!(c.named(MnId(1), "x").unwrap(), b"on one");
        assert!(matches!(c.named(MnId(0), "x"), Err(ControlError::UnknownName { .. })));
        assert_eq!(c.names(MnId(0)).unwrap(), Vec::<String>::new());
        assert!(matches!(
            c.put_named(MnId(2), "x", b""),
            Err(ControlError::UnknownNode { mn_count: 2, .. })
        ));
    }
}
