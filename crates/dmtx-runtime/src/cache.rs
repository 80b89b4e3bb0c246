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
//!
//! Each level is bounded (a compute node has little memory, and a run that inserts
//! learns a new address per insert): it keeps two generations of at most `capacity`
//! entries each. Entries go into the young one; when it is full it becomes the old
//! one and the previous old one is dropped; a hit in the old one moves the entry back
//! to the young one. What was used within the last `capacity` insertions stays.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

const SHARDS: usize = 16;

/// Entries a level keeps per generation unless told otherwise
/// ([`SharedAddrCache::with_capacity`]): 2 Mi, about 50 MB a generation, room for the
/// hot keys of every preset's workload.
pub const ADDR_CACHE_ENTRIES_DEFAULT: usize = 1 << 21;

type Key = (u32, u64);

/// One bounded level: two generations of at most `capacity` entries.
#[derive(Debug, Default)]
struct Generations {
    young: FxHashMap<Key, u64>,
    old: FxHashMap<Key, u64>,
    capacity: usize,
}

impl Generations {
    fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ..Self::default()
        }
    }

    #[inline]
    fn get(&mut self, key: Key) -> Option<u64> {
        if let Some(&rel) = self.young.get(&key) {
            return Some(rel);
        }
        let rel = self.old.remove(&key)?;
        self.insert(key, rel);
        Some(rel)
    }

    #[inline]
    fn insert(&mut self, key: Key, rel: u64) {
        if self.young.len() >= self.capacity && !self.young.contains_key(&key) {
            self.old = std::mem::take(&mut self.young);
        }
        // The old generation may still hold a stale address of `key`: the young entry
        // is found first, and the stale one ages out.
        self.young.insert(key, rel);
    }

    /// Forget `key` if it is cached at `stale_rel`.
    fn evict(&mut self, key: Key, stale_rel: u64) {
        for map in [&mut self.young, &mut self.old] {
            if map.get(&key) == Some(&stale_rel) {
                map.remove(&key);
            }
        }
    }

    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
    }
}

/// The CN-wide level.
#[derive(Debug)]
pub struct SharedAddrCache {
    shards: [Mutex<Generations>; SHARDS],
    /// Entries per generation of each level (a shard holds its share).
    capacity: usize,
}

impl Default for SharedAddrCache {
    fn default() -> Self {
        Self::with_capacity(ADDR_CACHE_ENTRIES_DEFAULT)
    }
}

impl SharedAddrCache {
    /// An empty cache of [`ADDR_CACHE_ENTRIES_DEFAULT`] entries per generation.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache whose levels each keep at most `entries` per generation (the CN
    /// level spreads them over its shards).
    pub fn with_capacity(entries: usize) -> Self {
        let entries = entries.max(1);
        Self {
            shards: std::array::from_fn(|_| Mutex::new(Generations::new(entries.div_ceil(SHARDS)))),
            capacity: entries,
        }
    }

    /// Entries each level keeps per generation.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn shard(&self, key: u64) -> &Mutex<Generations> {
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
    /// Cached addresses a protocol found stale (the slot held another key) and evicted.
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
    local: RefCell<Generations>,
    shared: Arc<SharedAddrCache>,
    /// Counted in `Cell`s, one per counter so a lookup adds to one word: the thread's
    /// coordinators share the cache and never hold a borrow of it across an await; an
    /// add, no atomic.
    hits_local: Cell<u64>,
    hits_shared: Cell<u64>,
    misses: Cell<u64>,
    evictions: Cell<u64>,
}

#[inline]
fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

impl AddrCache {
    /// A thread-level cache in front of the CN-wide one, bounded as it is.
    pub fn new(shared: Arc<SharedAddrCache>) -> Self {
        Self {
            local: RefCell::new(Generations::new(shared.capacity)),
            shared,
            hits_local: Cell::new(0),
            hits_shared: Cell::new(0),
            misses: Cell::new(0),
            evictions: Cell::new(0),
        }
    }

    /// What this thread's lookups found since it was made or last
    /// [reset](Self::reset_stats).
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits_local: self.hits_local.get(),
            hits_shared: self.hits_shared.get(),
            misses: self.misses.get(),
            evictions: self.evictions.get(),
        }
    }

    /// Start counting afresh (at the end of a warm-up).
    pub fn reset_stats(&self) {
        for c in [&self.hits_local, &self.hits_shared, &self.misses, &self.evictions] {
            c.set(0);
        }
    }

    /// The cached slot offset of `key` in `table`.
    #[inline]
    pub fn get(&self, table: u32, key: u64) -> Option<u64> {
        if let Some(rel) = self.local.borrow_mut().get((table, key)) {
            bump(&self.hits_local);
            return Some(rel);
        }
        let Some(rel) = self.shared.shard(key).lock().unwrap().get((table, key)) else {
            bump(&self.misses);
            return None;
        };
        bump(&self.hits_shared);
        self.local.borrow_mut().insert((table, key), rel);
        Some(rel)
    }

    /// Remember where `key` lives.
    #[inline]
    pub fn put(&self, table: u32, key: u64, rel: u64) {
        self.local.borrow_mut().insert((table, key), rel);
        self.shared.shard(key).lock().unwrap().insert((table, key), rel);
    }

    /// Entries this thread's level holds.
    pub fn len(&self) -> usize {
        self.local.borrow().len()
    }

    /// True when this thread's level holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget every address, on this thread and CN-wide (a memory node restarted).
    pub fn clear(&self) {
        self.local.borrow_mut().clear();
        self.shared.clear();
    }

    /// Forget `key` if it is still cached at `stale_rel` (another thread may already
    /// have cached the new address).
    pub fn evict(&self, table: u32, key: u64, stale_rel: u64) {
        bump(&self.evictions);
        self.local.borrow_mut().evict((table, key), stale_rel);
        self.shared.shard(key).lock().unwrap().evict((table, key), stale_rel);
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

    #[test]
    fn a_level_keeps_two_generations_and_what_was_used_lately() {
        let shared = Arc::new(SharedAddrCache::with_capacity(SHARDS * 4));
        let a = AddrCache::new(Arc::clone(&shared));
        for k in 0..1000u64 {
            a.put(0, k, k * 8);
            // A key read all along stays, however many others come after it.
            assert_eq!(a.get(0, 0), Some(0), "after {k} puts");
        }
        assert!(a.len() <= 2 * SHARDS * 4, "thread level holds {}", a.len());
        assert!(shared.len() <= 2 * SHARDS * 4, "CN level holds {}", shared.len());
        assert_eq!(a.get(0, 1), None, "an entry not used since long ago is gone");
        assert_eq!(a.get(0, 999), Some(999 * 8), "the latest stays");
    }

    #[test]
    fn eviction_reaches_both_generations_and_a_new_address_wins() {
        let mut g = Generations::new(2);
        g.insert((0, 1), 10);
        g.insert((0, 2), 20);
        g.insert((0, 3), 30); // (0,1) and (0,2) are now old
        g.insert((0, 1), 11); // a new address of an old key
        assert_eq!(g.get((0, 1)), Some(11));
        g.evict((0, 2), 20);
        assert_eq!(g.get((0, 2)), None);
        g.evict((0, 3), 99);
        assert_eq!(g.get((0, 3)), Some(30), "a different address is not evicted");
    }
}
