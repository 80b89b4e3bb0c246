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

use std::cell::{Cell, RefCell};
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

/// What a thread's lookups found ([`AddrCache::stats`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered by the thread's own level.
    pub hits_local: u64,
    /// Lookups answered by the CN-wide level (another thread had learned the address).
    pub hits_shared: u64,
    /// Lookups that found no address: the protocol read the bucket chain.
    pub misses: u64,
    /// Entries dropped because the slot held another key (stale after a delete).
    pub evictions: u64,
}

impl CacheStats {
    /// Lookups answered, at either level.
    pub fn hits(&self) -> u64 {
        self.hits_local + self.hits_shared
    }

    /// Add `other` into `self`.
    pub fn add(&mut self, other: &CacheStats) {
        self.hits_local += other.hits_local;
        self.hits_shared += other.hits_shared;
        self.misses += other.misses;
        self.evictions += other.evictions;
    }
}

/// One worker thread's view of the address cache.
#[derive(Debug)]
pub struct AddrCache {
    local: RefCell<FxHashMap<(u32, u64), u64>>,
    shared: Arc<SharedAddrCache>,
    /// Counted in a `Cell`: the thread's coordinators share the cache and never hold
    /// a borrow of it across an await; an add, no atomic.
    stats: Cell<CacheStats>,
}

impl AddrCache {
    /// A thread-level cache in front of the CN-wide one.
    pub fn new(shared: Arc<SharedAddrCache>) -> Self {
        Self {
            local: RefCell::default(),
            shared,
            stats: Cell::new(CacheStats::default()),
        }
    }

    /// What this thread's lookups found since it was made or last [reset](Self::reset_stats).
    pub fn stats(&self) -> CacheStats {
        self.stats.get()
    }

    /// Start counting afresh (at the end of a warm-up).
    pub fn reset_stats(&self) {
        self.stats.set(CacheStats::default());
    }

    #[inline]
    fn count(&self, f: impl FnOnce(&mut CacheStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// The cached slot offset of `key` in `table`.
    #[inline]
    pub fn get(&self, table: u32, key: u64) -> Option<u64> {
        if let Some(&rel) = self.local.borrow().get(&(table, key)) {
            self.count(|s| s.hits_local += 1);
            return Some(rel);
        }
        let Some(rel) = self.shared.shard(key).lock().unwrap().get(&(table, key)).copied() else {
            self.count(|s| s.misses += 1);
            return None;
        };
        self.count(|s| s.hits_shared += 1);
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
        self.count(|s| s.evictions += 1);
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

    #[test]
    fn lookups_count_hits_per_level_misses_and_evictions() {
        let shared = Arc::new(SharedAddrCache::new());
        let a = AddrCache::new(Arc::clone(&shared));
        let b = AddrCache::new(Arc::clone(&shared));
        assert_eq!(a.get(1, 7), None);
        a.put(1, 7, 64);
        assert_eq!(a.get(1, 7), Some(64));
        assert_eq!(b.get(1, 7), Some(64), "from the CN level");
        assert_eq!(b.get(1, 7), Some(64), "now from its own level");
        b.evict(1, 7, 64);
        let sa = a.stats();
        assert_eq!((sa.hits_local, sa.hits_shared, sa.misses, sa.evictions), (1, 0, 1, 0));
        let sb = b.stats();
        assert_eq!((sb.hits_local, sb.hits_shared, sb.misses, sb.evictions), (1, 1, 0, 1));
        let mut all = sa;
        all.add(&sb);
        assert_eq!((all.hits(), all.misses), (3, 1));
        b.reset_stats();
        assert_eq!(b.stats(), CacheStats::default());
        assert_eq!(shared.len(), 0);
    }
}
