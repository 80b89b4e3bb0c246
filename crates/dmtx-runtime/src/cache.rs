//! The per-CN address cache (FORD §4.2, §5.1, §6.2.5).
//!
//! Maps (table, key) to the table-relative offset of the key's slot, which is valid on
//! every replica. It is a hint: a coordinator that reads a slot through a cached
//! address checks the key it finds and, on a mismatch, evicts the entry and falls back
//! to a bucket read. Losing the cache costs misses, never correctness.
//!
//! Two levels keep the hot path free of synchronisation: each worker thread has a plain
//! map shared by its coordinators; behind it, one map per compute node (sharded
//! mutexes) lets a thread pick up what another thread of the same CN already learned.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

const SHARDS: usize = 16;

/// The CN-wide level.
#[derive(Default, Debug)]
pub struct SharedAddrCache {
    shards: [Mutex<FxHashMap<(u32, u64), u64>>; SHARDS],
}

impl SharedAddrCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn shard(&self, key: u64) -> &Mutex<FxHashMap<(u32, u64), u64>> {
        &self.shards[(dmtx_store::key_hash(key) as usize) % SHARDS]
    }

    /// Entries cached CN-wide.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().len()).sum()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget everything (after an MN restart, say).
    pub fn clear(&self) {
        for s in &self.shards {
            s.lock().unwrap().clear();
        }
    }
}

/// One worker thread's view of the address cache.
#[derive(Debug)]
pub struct AddrCache {
    local: RefCell<FxHashMap<(u32, u64), u64>>,
    shared: Arc<SharedAddrCache>,
}

impl AddrCache {
    /// A thread-level cache in front of the CN-wide one.
    pub fn new(shared: Arc<SharedAddrCache>) -> Self {
        Self {
            local: RefCell::default(),
            shared,
        }
    }

    /// The cached slot offset of `key` in `table`.
    #[inline]
    pub fn get(&self, table: u32, key: u64) -> Option<u64> {
        if let Some(&rel) = self.local.borrow().get(&(table, key)) {
            return Some(rel);
        }
        let rel = *self.shared.shard(key).lock().unwrap().get(&(table, key))?;
        self.local.borrow_mut().insert((table, key), rel);
        Some(rel)
    }

    /// Remember where `key` lives.
    #[inline]
    pub fn put(&self, table: u32, key: u64, rel: u64) {
        self.local.borrow_mut().insert((table, key), rel);
        self.shared.shard(key).lock().unwrap().insert((table, key), rel);
    }

    /// Forget every address, on this thread and CN-wide (a memory node restarted).
    pub fn clear(&self) {
        self.local.borrow_mut().clear();
        self.shared.clear();
    }

    /// Forget `key` if it is still cached at `stale_rel` (another thread may already
    /// have cached the new address).
    pub fn evict(&self, table: u32, key: u64, stale_rel: u64) {
        let mut local = self.local.borrow_mut();
        if local.get(&(table, key)) == Some(&stale_rel) {
            local.remove(&(table, key));
        }
        let mut shard = self.shared.shard(key).lock().unwrap();
        if shard.get(&(table, key)) == Some(&stale_rel) {
            shard.remove(&(table, key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_share_through_the_cn_level_and_evict_only_stale_entries() {
        let shared = Arc::new(SharedAddrCache::new());
        let a = AddrCache::new(Arc::clone(&shared));
        let b = AddrCache::new(Arc::clone(&shared));
        a.put(1, 42, 640);
        assert_eq!(b.get(1, 42), Some(640), "learned by another thread of the CN");
        b.evict(1, 42, 999);
        assert_eq!(b.get(1, 42), Some(640), "evicting a different address is a no-op");
        b.evict(1, 42, 640);
        assert_eq!(b.get(1, 42), None);
        assert_eq!(shared.len(), 0);
        assert_eq!(a.get(2, 42), None, "tables are separate");
    }
}
