//! The compute node's copy of table metadata (FORD §4.1 ❷).

use std::collections::BTreeMap;

use dmtx_memnode::{Control, TableMeta};
use dmtx_verbs::{MnId, RemotePtr};

use crate::cuckoo::{cuckoo_name, CuckooPlace};
use crate::{Result, Shape, StoreError};

/// One table as a coordinator needs it: metadata plus derived geometry.
#[derive(Clone, Debug)]
pub struct TableInfo {
    /// As published by the memory nodes.
    pub meta: TableMeta,
    /// Address arithmetic.
    pub shape: Shape,
    /// The table's cuckoo index on each replica, primary first, when its layout chose
    /// [`crate::IndexKind::Cuckoo`]; empty for FORD's hash index.
    pub cuckoo: Vec<CuckooPlace>,
}

impl TableInfo {
    /// Number of replicas (f+1).
    #[inline]
    pub fn replica_count(&self) -> usize {
        self.meta.replicas.len()
    }

    /// Node of replica `r` (0 = primary).
    #[inline]
    pub fn replica_mn(&self, r: usize) -> MnId {
        self.meta.replicas[r].0
    }

    /// Address of table-relative offset `rel` on replica `r`.
    #[inline]
    pub fn ptr(&self, r: usize, rel: u64) -> RemotePtr {
        let (mn, base) = self.meta.replicas[r];
        RemotePtr::new(mn, base + rel)
    }
}

/// Every table of the cluster, indexed by id.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    tables: Vec<Option<TableInfo>>,
}

impl Catalog {
    /// Fetch metadata from every memory node (the init-time handshake).
    pub fn fetch(control: &dyn Control) -> Result<Self> {
        let mut all: BTreeMap<u32, TableMeta> = BTreeMap::new();
        for mn in 0..control.mn_count() {
            for meta in control.tables(MnId(mn as u16))? {
                if let Some(prev) = all.get(&meta.id) {
                    if *prev != meta {
                        return Err(StoreError::InconsistentMeta { id: meta.id });
                    }
                }
                all.insert(meta.id, meta);
            }
        }
        let mut catalog = Self::from_metas(all.into_values());
        // Cuckoo indexes are published by name beside the tables' metadata.
        for mn in 0..control.mn_count() {
            let mn = MnId(mn as u16);
            let names = control.names(mn)?;
            for t in catalog.tables.iter_mut().flatten() {
                let name = cuckoo_name(t.meta.id);
                if !names.contains(&name) {
                    continue;
                }
                let value = control.named(mn, &name)?;
                let place =
                    CuckooPlace::from_named(mn, &value).ok_or(StoreError::InconsistentMeta { id: t.meta.id })?;
                t.cuckoo.push(place);
            }
        }
        for t in catalog.tables.iter_mut().flatten() {
            // Primary first, as the replicas are.
            let order = |p: &CuckooPlace| t.meta.replicas.iter().position(|r| r.0 == p.mn);
            t.cuckoo.sort_by_key(|p| order(p));
            if !t.cuckoo.is_empty() && t.cuckoo.len() != t.meta.replicas.len() {
                return Err(StoreError::InconsistentMeta { id: t.meta.id });
            }
        }
        Ok(catalog)
    }

    /// A catalog of the given tables.
    pub fn from_metas(metas: impl IntoIterator<Item = TableMeta>) -> Self {
        let mut tables = Vec::new();
        for meta in metas {
            let id = meta.id as usize;
            if tables.len() <= id {
                tables.resize(id + 1, None);
            }
            let shape = Shape::of(&meta);
            tables[id] = Some(TableInfo {
                meta,
                shape,
                cuckoo: Vec::new(),
            });
        }
        Self { tables }
    }

    /// The table with id `id`.
    #[inline]
    pub fn get(&self, id: u32) -> Result<&TableInfo> {
        // The error is built only on a miss: `StoreError` owns strings, so an eager
        // `ok_or` built and dropped one per lookup (every object of every round).
        match self.tables.get(id as usize).and_then(Option::as_ref) {
            Some(t) => Ok(t),
            None => Err(StoreError::UnknownTable(id)),
        }
    }

    /// The table called `name`.
    pub fn by_name(&self, name: &str) -> Option<&TableInfo> {
        self.iter().find(|t| t.meta.name == name)
    }

    /// All tables, by id.
    pub fn iter(&self) -> impl Iterator<Item = &TableInfo> {
        self.tables.iter().flatten()
    }
}
