//! One memory node: region, allocator, catalog.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use dmtx_verbs::region::RegionAllocError;
use dmtx_verbs::{MnId, Region};

use crate::backing::{BackingError, NodeMeta, Sidecar};
use crate::control::{check_named, NamedLimitKind, NAMED_COUNT_MAX};
use crate::{ControlError, Result, TableMeta};

/// A memory node's state. The region is shared with whatever serves verbs on it.
#[derive(Debug)]
pub struct MemNode {
    id: MnId,
    region: Arc<Region>,
    state: Mutex<NodeState>,
    /// Where a file-backed node keeps its allocator and catalog ([`crate::backing`]).
    sidecar: Option<Sidecar>,
}

#[derive(Debug)]
struct NodeState {
    /// Invariant: every byte below `next_free` was handed out by `alloc`; none above.
    next_free: u64,
    tables: Vec<TableMeta>,
    /// Invariant: every entry passed [`check_named`], and there are at most
    /// [`NAMED_COUNT_MAX`]; an entry, once published, never changes.
    named: BTreeMap<String, Vec<u8>>,
}

/// The first bytes of a region are never handed out, so offset 0 can mean "null".
const RESERVED_PREFIX: u64 = 64;

impl MemNode {
    /// A node with a fresh zeroed region of `region_bytes`.
    ///
    /// # Panics
    ///
    /// If the region cannot be allocated; sizes from users go through [`MemNode::try_new`].
    pub fn new(id: MnId, region_bytes: u64) -> Self {
        Self::with_region(id, Region::new(region_bytes))
    }

    /// A node with a fresh zeroed region of `region_bytes`, or why the OS would not give
    /// that much memory.
    pub fn try_new(id: MnId, region_bytes: u64) -> std::result::Result<Self, RegionAllocError> {
        Ok(Self::with_region(id, Region::try_new(region_bytes)?))
    }

    /// A node serving an existing region whose allocator and catalog start empty.
    pub fn with_region(id: MnId, region: Region) -> Self {
        Self {
            id,
            region: Arc::new(region),
            state: Mutex::new(NodeState {
                next_free: RESERVED_PREFIX,
                tables: Vec::new(),
                named: BTreeMap::new(),
            }),
            sidecar: None,
        }
    }

    /// A PM-like node over the file `path` (created if missing): the region is the file's
    /// mapping, and the allocator cursor and table catalog are kept in `path.meta`, so a
    /// node restarted on the same file keeps its bytes, its tables and its free space.
    /// Returns the node and whether it came back from an earlier start.
    pub fn open_backed(id: MnId, path: &Path, region_bytes: u64) -> std::result::Result<(Self, bool), BackingError> {
        let sidecar = Sidecar::of(path);
        let saved = sidecar.load(id, region_bytes)?;
        if saved.is_none() && path.exists() {
            // Without a sidecar nothing in the file was ever published: start from zeros,
            // which loaders rely on (they ship only the pages they wrote).
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(0))
                .map_err(|error| BackingError::Io {
                    path: path.to_owned(),
                    error,
                })?;
        }
        let region = Region::map_file(path, region_bytes).map_err(|error| BackingError::Io {
            path: path.to_owned(),
            error,
        })?;
        let reopened = saved.is_some();
        let (next_free, tables, named) = match saved {
            Some(m) => (m.next_free, m.tables, m.named),
            None => (RESERVED_PREFIX, Vec::new(), BTreeMap::new()),
        };
        let node = Self {
            id,
            region: Arc::new(region),
            state: Mutex::new(NodeState {
                next_free,
                tables,
                named,
            }),
            sidecar: Some(sidecar),
        };
        if !reopened {
            node.save(&node.state.lock().unwrap())?;
        }
        Ok((node, reopened))
    }

    fn save(&self, st: &NodeState) -> std::result::Result<(), BackingError> {
        let Some(sidecar) = &self.sidecar else {
            return Ok(());
        };
        sidecar.save(&NodeMeta {
            node: self.id,
            region_bytes: self.region.bytes(),
            next_free: st.next_free,
            tables: st.tables.clone(),
            named: st.named.clone(),
        })
    }

    fn persist_error(&self, e: impl std::fmt::Display) -> ControlError {
        ControlError::Persist {
            mn: self.id,
            why: e.to_string(),
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
        let before = st.next_free;
        st.next_free = end;
        if let Err(e) = self.save(&st) {
            st.next_free = before;
            return Err(self.persist_error(e));
        }
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
        if self.sidecar.is_some() {
            // A published table's bytes must survive a restart before the catalog says so.
            self.region
                .persist(0, self.region.bytes())
                .map_err(|e| self.persist_error(e))?;
        }
        st.tables.push(meta.clone());
        if let Err(e) = self.save(&st) {
            st.tables.pop();
            return Err(self.persist_error(e));
        }
        Ok(())
    }

    /// Published tables.
    pub fn tables(&self) -> Vec<TableMeta> {
        self.state.lock().unwrap().tables.clone()
    }

    /// Publish `value` under `name` (see [`crate::Control::put_named`]).
    pub fn put_named(&self, name: &str, value: &[u8]) -> Result<()> {
        check_named(self.id, name, value)?;
        let mut st = self.state.lock().unwrap();
        if st.named.contains_key(name) {
            return Err(ControlError::DuplicateName {
                mn: self.id,
                name: name.to_owned(),
            });
        }
        if st.named.len() >= NAMED_COUNT_MAX {
            return Err(ControlError::NamedLimit {
                mn: self.id,
                name: name.to_owned(),
                what: NamedLimitKind::Count,
                value: st.named.len() as u64 + 1,
                limit: NAMED_COUNT_MAX as u64,
            });
        }
        if self.sidecar.is_some() {
            // An entry usually names bytes loaded into the region (a log area's header):
            // they must be durable before a restarted node hands the entry out.
            self.region
                .persist(0, self.region.bytes())
                .map_err(|e| self.persist_error(e))?;
        }
        st.named.insert(name.to_owned(), value.to_vec());
        if let Err(e) = self.save(&st) {
            st.named.remove(name);
            return Err(self.persist_error(e));
        }
        Ok(())
    }

    /// The value published under `name`.
    pub fn named(&self, name: &str) -> Result<Vec<u8>> {
        self.state
            .lock()
            .unwrap()
            .named
            .get(name)
            .cloned()
            .ok_or_else(|| ControlError::UnknownName {
                mn: self.id,
                name: name.to_owned(),
            })
    }

    /// Every published name, in byte order.
    pub fn names(&self) -> Vec<String> {
        self.state.lock().unwrap().named.keys().cloned().collect()
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
    fn a_backed_node_keeps_bytes_tables_and_free_space_across_restarts() {
        let dir = std::env::temp_dir().join(format!("dmtx-node-backed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mn0");
        let m = table(1);
        let at = {
            let (n, reopened) = MemNode::open_backed(MnId(0), &path, 1 << 16).unwrap();
            assert!(!reopened);
            let at = n.alloc(100, 64).unwrap();
            n.load(at, b"durable").unwrap();
            n.put_table(&m).unwrap();
            n.put_named("ts/counter", &at.to_le_bytes()).unwrap();
            at
        };
        let (n, reopened) = MemNode::open_backed(MnId(0), &path, 1 << 16).unwrap();
        assert!(reopened);
        assert_eq!(n.tables(), vec![m.clone()]);
        assert_eq!(n.names(), vec!["ts/counter".to_owned()]);
        assert_eq!(n.named("ts/counter").unwrap(), at.to_le_bytes());
        assert!(matches!(
            n.put_named("ts/counter", b"again"),
            Err(ControlError::DuplicateName { .. })
        ));
        let mut back = [0u8; 7];
        n.region().read(at, &mut back).unwrap();
        assert_eq!(&back, b"durable");
        assert!(
            n.alloc(8, 8).unwrap() >= at + 100,
            "space handed out before the restart is not reused"
        );
        assert!(matches!(n.put_table(&m), Err(ControlError::DuplicateTable { .. })));
        let e = MemNode::open_backed(MnId(0), &path, 1 << 17).unwrap_err().to_string();
        assert!(e.contains("--size 65536"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn table(id: u32) -> TableMeta {
        TableMeta {
            id,
            name: "t".into(),
            value_bytes: 8,
            slot_bytes: 48,
            slots_per_bucket: 4,
            bucket_bytes: 208,
            bucket_count: 2,
            overflow_bucket_count: 1,
            replicas: vec![(MnId(0), 64)],
            runs: None,
            value_region: None,
            attrs: Vec::new(),
        }
    }

    #[test]
    fn duplicate_table_ids_are_refused() {
        let n = MemNode::new(MnId(0), 4096);
        let m = table(1);
        n.put_table(&m).unwrap();
        assert!(matches!(
            n.put_table(&m),
            Err(ControlError::DuplicateTable { id: 1, .. })
        ));
        assert_eq!(n.tables(), vec![m]);
    }

    /// Loaders ship only the pages they wrote (`dmtx_store::create_table`), so a backed
    /// node that does not reopen its file must serve zeros, whatever the file held.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_backed_node_without_a_sidecar_starts_from_zeros() {
        let path = std::env::temp_dir().join(format!("dmtx-node-stale-{}.region", std::process::id()));
        std::fs::write(&path, vec![0xAB; 8192]).unwrap();
        let (n, reopened) = MemNode::open_backed(MnId(0), &path, 8192).unwrap();
        assert!(!reopened);
        let mut buf = vec![0xFF; 8192];
        n.region().read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "stale bytes survived a fresh open");
        drop(n);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("region.meta"));
    }

    /// Goal: the named store keeps what it is given, refuses a second entry of one name
    /// and anything past its limits with an error naming the limit, and is unchanged by
    /// a refusal.
    #[test]
    fn named_entries_publish_once_within_limits() {
        let n = MemNode::new(MnId(1), 4096);
        assert_eq!(n.names(), Vec::<String>::new());
        let e = n.named("nope").unwrap_err();
        assert!(matches!(&e, ControlError::UnknownName { name, .. } if name == "nope"));
        assert!(e.to_string().contains("setup_run"), "{e}");
        n.put_named("b", b"2").unwrap();
        n.put_named("a", b"").unwrap();
        let e = n.put_named("b", b"3").unwrap_err();
        assert!(e.to_string().contains("restart them"), "{e}");
        assert_eq!(n.named("b").unwrap(), b"2");
        assert_eq!(n.names(), vec!["a".to_owned(), "b".to_owned()]);

        let limit = |r: Result<()>| match r {
            Err(ControlError::NamedLimit { what, value, limit, .. }) => (what, value, limit),
            r => panic!("expected a limit error, got {r:?}"),
        };
        assert_eq!(limit(n.put_named("", b"x")), (NamedLimitKind::NameBytes, 0, 128));
        let e = n.put_named("", b"x").unwrap_err().to_string();
        assert!(e.contains("length in bytes (1 at least) is 0"), "{e}");
        let long = "é".repeat(100);
        assert_eq!(limit(n.put_named(&long, b"x")), (NamedLimitKind::NameBytes, 200, 128));
        let big = vec![0u8; crate::control::NAMED_VALUE_BYTES_MAX + 1];
        assert_eq!(
            limit(n.put_named("big", &big)),
            (NamedLimitKind::ValueBytes, 4097, 4096)
        );
        for i in 2..NAMED_COUNT_MAX {
            n.put_named(&format!("k{i:03}"), b"v").unwrap();
        }
        let e = n.put_named("one-too-many", b"v").unwrap_err();
        assert!(
            e.to_string()
                .contains("entry count with it is 257, over the limit of 256"),
            "{e}"
        );
        assert_eq!(n.names().len(), NAMED_COUNT_MAX);
    }
}
