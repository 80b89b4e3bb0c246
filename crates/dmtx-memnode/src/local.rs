//! In-process memory nodes.

use std::sync::Arc;

use dmtx_verbs::{MemFabric, MnId};

use crate::{Control, ControlError, MemNode, Result, TableMeta};

/// `mn_count` in-process memory nodes and the `mem` fabric over their regions.
#[derive(Clone, Debug)]
pub struct LocalCluster {
    nodes: Vec<Arc<MemNode>>,
    fabric: MemFabric,
}

impl LocalCluster {
    /// Nodes with `region_bytes` of lazily zeroed memory each.
    pub fn new(mn_count: usize, region_bytes: u64) -> Self {
        assert!(mn_count > 0, "a cluster needs at least one memory node");
        let nodes: Vec<_> = (0..mn_count)
            .map(|i| Arc::new(MemNode::new(MnId(i as u16), region_bytes)))
            .collect();
        let fabric = MemFabric::new(nodes.iter().map(|n| Arc::clone(n.region())).collect());
        Self { nodes, fabric }
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
}
