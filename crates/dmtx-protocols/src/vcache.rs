//! A version cache (FORD's Vcache, ford.txt §4.7): a fixed-size hash table of
//! `(table, key) → 8-byte version` in a compute node's DRAM, shared by its coordinators.
//!
//! - **Reads take no lock.** Each bucket has a sequence word, odd while a writer is in
//!   it (a seqlock): a lookup reads the word, the bucket's ways, and the word again,
//!   and retries when it moved. A lookup that keeps meeting writers gives up and
//!   reports a miss (a miss is always safe: the caller validates over RDMA).
//! - **Writers serialize per bucket** on the same word, for a few stores, never across
//!   an `await`. Which writers may write an entry is the caller's rule (FORD-LV: only
//!   the holder of the record's remote lock, plus guarded miss-path inserts).
//! - **An absent key is a miss, never "unchanged"**; entries are lost to eviction when a
//!   bucket is full, and losing one is safe for the same reason.
//! - **Pending entries**: a writer publishes its new version marked pending before it
//!   validates, and clears the mark once its writes landed ([`Vcache::finalize`]). A
//!   reader treats a pending entry as changed.
//! - **Stale inserts are refused**: a lookup that misses returns the bucket's sequence
//!   word ([`Stamp`]); [`Vcache::insert`] installs only while the bucket is still at that
//!   word, so no writer published into the bucket between the miss (taken before the
//!   caller's fetch was issued) and the insert.
//!
//! Every operation uses sequentially consistent atomics: a writer's publish followed by
//! its own lookups, against another writer's publish and lookups, must see each other
//! in at least one direction (FORD-LV's publish-before-validate argument).

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// Ways per bucket.
pub const WAYS: usize = 4;

/// Lookups that meet a writer this many times in a row give up with a miss.
const READ_TRIES: u32 = 64;

/// The pending bit of an entry's tag.
const PENDING: u64 = 1;

#[derive(Default)]
struct Way {
    key: AtomicU64,
    /// 0: empty; else `(table + 1) << 1 | pending`.
    tag: AtomicU64,
    version: AtomicU64,
}

#[derive(Default)]
struct Bucket {
    /// Odd while a writer is in the bucket; +2 per write.
    seq: AtomicU64,
    ways: [Way; WAYS],
}

/// Bytes of one bucket (its sequence word and [`WAYS`] entries of 24 bytes).
pub const BUCKET_BYTES: u64 = std::mem::size_of::<Bucket>() as u64;

/// What a lookup found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The key's entry.
    Hit {
        /// Its version.
        version: u64,
        /// Published by a writer whose writes have not all landed.
        pending: bool,
    },
    /// No entry: validate remotely; [`Vcache::insert`] may install what that fetched.
    Miss(Stamp),
}

/// The state of the bucket a miss looked in, for [`Vcache::insert`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    bucket: u32,
    seq: u64,
}

impl Stamp {
    /// A stamp no insert succeeds with (the bucket was busy).
    const BUSY: Stamp = Stamp { bucket: 0, seq: 1 };

    /// The raw parts, to send to the node that owns the cache.
    pub fn to_parts(self) -> (u32, u64) {
        (self.bucket, self.seq)
    }

    /// A stamp from [`Stamp::to_parts`].
    pub fn from_parts(bucket: u32, seq: u64) -> Self {
        Self { bucket, seq }
    }
}

/// See the module doc.
pub struct Vcache {
    buckets: Box<[Bucket]>,
}

impl std::fmt::Debug for Vcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vcache").field("buckets", &self.buckets.len()).finish()
    }
}

fn tag(table: u32) -> u64 {
    (u64::from(table) + 1) << 1
}

impl Vcache {
    /// A cache of at most `bytes` (at least one bucket; the bucket count is a power of
    /// two).
    pub fn new(bytes: u64) -> Self {
        let n = (bytes / BUCKET_BYTES).max(1);
        let n = if n.is_power_of_two() {
            n
        } else {
            n.next_power_of_two() / 2
        };
        let n = n.min(1 << 31) as usize;
        Self {
            buckets: (0..n).map(|_| Bucket::default()).collect(),
        }
    }

    /// Bytes the table takes.
    pub fn bytes(&self) -> u64 {
        self.buckets.len() as u64 * BUCKET_BYTES
    }

    /// Entries a full table holds.
    pub fn capacity(&self) -> u64 {
        self.buckets.len() as u64 * WAYS as u64
    }

    fn bucket_of(&self, table: u32, key: u64) -> u32 {
        let h = (key ^ u64::from(table).rotate_left(40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((h >> 32) as usize & (self.buckets.len() - 1)) as u32
    }

    /// The key's entry, or a miss with the bucket's stamp. Takes no lock.
    pub fn lookup(&self, table: u32, key: u64) -> Lookup {
        let bi = self.bucket_of(table, key);
        let b = &self.buckets[bi as usize];
        let want = tag(table);
        for _ in 0..READ_TRIES {
            let s1 = b.seq.load(SeqCst);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut found = None;
            for w in &b.ways {
                let t = w.tag.load(SeqCst);
                if t & !PENDING == want && w.key.load(SeqCst) == key {
                    found = Some((w.version.load(SeqCst), t & PENDING != 0));
                    break;
                }
            }
            if b.seq.load(SeqCst) != s1 {
                continue;
            }
            return match found {
                Some((version, pending)) => Lookup::Hit { version, pending },
                None => Lookup::Miss(Stamp { bucket: bi, seq: s1 }),
            };
        }
        Lookup::Miss(Stamp::BUSY)
    }

    /// Run `f` on the key's bucket with its writer lock held. `at` = the bucket's
    /// sequence word it must still have, or any.
    fn write<R>(&self, bi: u32, at: Option<u64>, f: impl FnOnce(&Bucket) -> R) -> Option<R> {
        let b = &self.buckets[bi as usize];
        let s = loop {
            let s = b.seq.load(SeqCst);
            if let Some(at) = at {
                if s != at {
                    return None;
                }
            }
            if s & 1 == 0 && b.seq.compare_exchange(s, s + 1, SeqCst, SeqCst).is_ok() {
                break s;
            }
            std::hint::spin_loop();
        };
        let r = f(b);
        b.seq.store(s + 2, SeqCst);
        Some(r)
    }

    fn find(b: &Bucket, table: u32, key: u64) -> Option<&Way> {
        let want = tag(table);
        b.ways
            .iter()
            .find(|w| w.tag.load(SeqCst) & !PENDING == want && w.key.load(SeqCst) == key)
    }

    /// The way to put a new key in: an empty one, else a settled one (rotating by key),
    /// else any. Returns it and whether an entry is evicted.
    fn room(b: &Bucket, key: u64) -> (&Way, bool) {
        if let Some(w) = b.ways.iter().find(|w| w.tag.load(SeqCst) == 0) {
            return (w, false);
        }
        let start = (key as usize) % WAYS;
        let pick = (0..WAYS)
            .map(|i| &b.ways[(start + i) % WAYS])
            .find(|w| w.tag.load(SeqCst) & PENDING == 0)
            .unwrap_or(&b.ways[start]);
        (pick, true)
    }

    fn set(w: &Way, table: u32, key: u64, version: u64, pending: bool) {
        w.tag.store(0, SeqCst);
        w.key.store(key, SeqCst);
        w.version.store(version, SeqCst);
        w.tag.store(tag(table) | u64::from(pending), SeqCst);
    }

    /// Publish `version` for the key, marked pending (the caller holds the record's
    /// remote lock). Returns whether another entry was evicted to make room.
    pub fn publish(&self, table: u32, key: u64, version: u64) -> bool {
        let bi = self.bucket_of(table, key);
        self.write(bi, None, |b| match Self::find(b, table, key) {
            Some(w) => {
                Self::set(w, table, key, version, true);
                false
            }
            None => {
                let (w, evicted) = Self::room(b, key);
                Self::set(w, table, key, version, true);
                evicted
            }
        })
        .unwrap_or(false)
    }

    /// The writer of `version` has landed its writes: clear the pending mark (or drop
    /// the entry when `keep` is false, for a delete). Does nothing unless the entry is
    /// still that pending version: a late call never overwrites a later writer's.
    pub fn finalize(&self, table: u32, key: u64, version: u64, keep: bool) {
        let bi = self.bucket_of(table, key);
        self.write(bi, None, |b| {
            if let Some(w) = Self::find(b, table, key) {
                if w.version.load(SeqCst) == version && w.tag.load(SeqCst) & PENDING != 0 {
                    if keep {
                        w.tag.store(tag(table), SeqCst);
                    } else {
                        w.tag.store(0, SeqCst);
                    }
                }
            }
        });
    }

    /// The writer of `version` aborted: drop its entry, if it is still there.
    pub fn remove(&self, table: u32, key: u64, version: u64) {
        let bi = self.bucket_of(table, key);
        self.write(bi, None, |b| {
            if let Some(w) = Self::find(b, table, key) {
                if w.version.load(SeqCst) == version {
                    w.tag.store(0, SeqCst);
                }
            }
        });
    }

    /// Install a version fetched over RDMA after a miss stamped `stamp`, settled: only
    /// if nobody wrote into the bucket since the miss, else skipped. Returns whether it
    /// was installed.
    pub fn insert(&self, table: u32, key: u64, version: u64, stamp: Stamp) -> bool {
        if stamp.seq & 1 == 1 || stamp.bucket as usize >= self.buckets.len() {
            return false;
        }
        debug_assert_eq!(
            stamp.bucket,
            self.bucket_of(table, key),
            "a stamp of another key's bucket"
        );
        self.write(stamp.bucket, Some(stamp.seq), |b| {
            if Self::find(b, table, key).is_none() {
                let (w, _) = Self::room(b, key);
                Self::set(w, table, key, version, false);
            }
        })
        .is_some()
    }

    /// Set the key's entry to `version`, settled, whatever it held: no guard at all.
    /// Only FORD-LV's broken `StaleInsert` variant uses it, to show why
    /// [`Vcache::insert`] is guarded.
    pub fn overwrite(&self, table: u32, key: u64, version: u64) {
        let bi = self.bucket_of(table, key);
        self.write(bi, None, |b| {
            let w = match Self::find(b, table, key) {
                Some(w) => w,
                None => Self::room(b, key).0,
            };
            Self::set(w, table, key, version, false);
        });
    }

    /// Whether the bucket of a stamp was written since it was taken.
    pub fn moved(&self, stamp: Stamp) -> bool {
        self.buckets
            .get(stamp.bucket as usize)
            .is_none_or(|b| b.seq.load(SeqCst) != stamp.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(version: u64, pending: bool) -> Lookup {
        Lookup::Hit { version, pending }
    }

    #[test]
    fn an_absent_key_misses_and_a_published_one_is_pending_until_finalized() {
        let c = Vcache::new(1 << 12);
        assert!(matches!(c.lookup(1, 7), Lookup::Miss(_)));
        c.publish(1, 7, 70);
        assert_eq!(c.lookup(1, 7), hit(70, true));
        assert!(matches!(c.lookup(2, 7), Lookup::Miss(_)), "another table's key 7");
        c.finalize(1, 7, 69, true);
        assert_eq!(c.lookup(1, 7), hit(70, true), "another writer's finalize");
        c.finalize(1, 7, 70, true);
        assert_eq!(c.lookup(1, 7), hit(70, false));
        c.remove(1, 7, 69);
        assert_eq!(c.lookup(1, 7), hit(70, false), "another writer's remove");
        c.remove(1, 7, 70);
        assert!(matches!(c.lookup(1, 7), Lookup::Miss(_)));
        c.publish(1, 7, 71);
        c.finalize(1, 7, 71, false);
        assert!(matches!(c.lookup(1, 7), Lookup::Miss(_)), "a delete drops its entry");
    }

    #[test]
    fn an_insert_after_a_write_into_the_bucket_is_refused() {
        let c = Vcache::new(1 << 12);
        let Lookup::Miss(stamp) = c.lookup(3, 9) else { panic!() };
        // A writer publishes (and lands) a newer version between the miss and the insert.
        c.publish(3, 9, 2);
        c.finalize(3, 9, 2, true);
        c.remove(3, 9, 2);
        assert!(c.moved(stamp));
        assert!(!c.insert(3, 9, 1, stamp), "stale insert");
        assert!(matches!(c.lookup(3, 9), Lookup::Miss(_)));
        let Lookup::Miss(stamp) = c.lookup(3, 9) else { panic!() };
        assert!(c.insert(3, 9, 2, stamp));
        assert_eq!(c.lookup(3, 9), hit(2, false));
    }

    #[test]
    fn a_full_bucket_evicts_settled_entries_before_pending_ones() {
        // One bucket: every key shares it.
        let c = Vcache::new(1);
        assert_eq!(c.capacity(), WAYS as u64);
        for k in 0..WAYS as u64 {
            assert!(!c.publish(0, k, 100 + k));
        }
        c.finalize(0, 2, 102, true);
        assert!(c.publish(0, 50, 150), "full: one entry goes");
        assert!(matches!(c.lookup(0, 2), Lookup::Miss(_)), "the settled entry went");
        for k in [0, 1, 3] {
            assert_eq!(c.lookup(0, k), hit(100 + k, true));
        }
    }

    #[test]
    fn threads_never_see_a_torn_entry() {
        let c = std::sync::Arc::new(Vcache::new(1));
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let c = &c;
                s.spawn(move || {
                    for i in 0..20_000u64 {
                        let k = t * 2 + i % 2;
                        let v = k << 32 | i;
                        c.publish(0, k, v);
                        if let Lookup::Hit { version, .. } = c.lookup(0, k ^ 1) {
                            assert_eq!(version >> 32, k ^ 1, "a version of another key");
                        }
                        c.finalize(0, k, v, true);
                    }
                });
            }
        });
    }
}
