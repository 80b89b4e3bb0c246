//! Finding a record's slot: the walk down a key's bucket chain of the hash index
//! (`dmtx_store`), the per-bucket insert lock, reserving an overflow bucket by FAA and
//! linking it, and evicting a stale cached address (FORD §4.2 last paragraph, §5.1
//! S4–S5; FaRM and DrTM+H locate records the same way when they run on one-sided verbs,
//! FORD §6.1).
//!
//! An object moves through `New → (Lookup(bucket)…) → Fetch → Done` ([`Stage`]); what
//! `Fetch` sends (a plain READ, or FORD's hitchhiked CAS + READ) is the protocol's.
//!
//! Cost per object, each step one round trip shared with every other object of the round:
//! - a warm address cache: no step here;
//! - a miss: one READ of `bucket_bytes` per bucket of the chain (the home bucket, then
//!   overflow buckets); the READ returns the record's slot with its bucket;
//! - an insert: `CAS(bucket lock, 0 → me)` on the primary in front of the home bucket's
//!   READ; at the chain's end with no free slot, one `FAA(overflow cursor, 1)` round, then
//!   one 8-byte WRITE per replica linking the new bucket, sent in front of the first
//!   access to its slot;
//! - a stale cached address: the protocol's fetch round is wasted, the lock it took (if
//!   any) is released in the background, and the walk restarts at the home bucket.
//!
//! Invariants:
//! 1. Only the holder of a chain's insert lock (the home bucket's lock word) claims a
//!    free slot of the chain or links an overflow bucket to it, so two transactions never
//!    insert one key twice.
//! 2. An overflow bucket is linked on every replica before any of its slots is locked.

use dmtx_runtime::{AbortReason, Access, AddrCache};
use dmtx_store::{
    scan_bucket, Shape, SlotLayout, TableInfo, BUCKET_LOCK_OFFSET, BUCKET_NEXT_OFFSET, OVERFLOW_CURSOR_OFFSET,
};
use dmtx_verbs::{AtomicId, Post, ReadId};

use super::record::VLOCK;

/// Where an object is in its execution.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Stage {
    /// Not started: look in the address cache.
    #[default]
    New,
    /// Read bucket `0` of the key's chain.
    Lookup(u64),
    /// Read (and, for writers, lock) the slot at the object's address.
    Fetch,
    /// Fetched.
    Done,
}

/// `Walk::new_overflow` while an overflow bucket is yet to be reserved.
const RESERVE: u64 = u64::MAX;

/// An insert's progress down its chain.
#[derive(Debug, Default)]
pub struct Walk {
    /// Free slot found for an insert while walking the chain.
    free_rel: Option<u64>,
    /// Last bucket of the chain (for linking an overflow bucket).
    last_bucket: u64,
    /// Overflow bucket: [`RESERVE`] until the FAA returns, then its number until linked.
    new_overflow: Option<u64>,
}

impl Walk {
    /// Whether the object waits for an overflow bucket ([`post_reserve`]).
    #[inline]
    pub fn reserving(&self) -> bool {
        self.new_overflow == Some(RESERVE)
    }

    /// The link was sent with the post that just completed.
    #[inline]
    pub fn linked(&mut self) {
        self.new_overflow = None;
    }
}

/// What reading one bucket of the chain found.
#[derive(Debug)]
pub enum Found<'a> {
    /// The key lives at `rel` (now in the address cache); `slot` is its slot as the
    /// bucket READ returned it.
    At {
        /// Table-relative slot offset.
        rel: u64,
        /// The slot's bytes.
        slot: &'a [u8],
    },
    /// Not in this bucket: read this one next.
    Next(u64),
    /// An insert reached the end of the chain: its slot is at `Some(rel)`, or an overflow
    /// bucket must be reserved first (`None`; [`post_reserve`]).
    End(Option<u64>),
    /// The transaction cannot go on: `LockConflict` (insert lock busy), `Duplicate`
    /// (insert of a present key) or `NotFound`.
    Abort(AbortReason),
}

/// Table-relative offset of the insert lock word of bucket `b`.
#[inline]
pub fn bucket_lock_at(shape: &Shape, b: u64) -> u64 {
    shape.bucket_off(b) + BUCKET_LOCK_OFFSET
}

/// Post the lookup of bucket `b` on replica `replica`: the insert lock of the chain first
/// when `lock_bucket` (an insert that does not hold it yet; invariant 1), then the
/// bucket READ.
pub fn post_lookup(
    post: &mut Post,
    info: &TableInfo,
    b: u64,
    replica: usize,
    lock_bucket: bool,
    lock: u64,
) -> (Option<AtomicId>, ReadId) {
    let shape = &info.shape;
    let cas = lock_bucket.then(|| post.cas(info.ptr(0, bucket_lock_at(shape, b)), 0, lock));
    let read = post.read(info.ptr(replica, shape.bucket_off(b)), shape.bucket_bytes as usize);
    (cas, read)
}

/// Post the reservation of an overflow bucket (FORD's RS-Ptr): one FAA on the primary's
/// overflow cursor.
pub fn post_reserve(post: &mut Post, info: &TableInfo) -> AtomicId {
    post.faa(info.ptr(0, OVERFLOW_CURSOR_OFFSET), 1)
}

/// Post the link of a reserved overflow bucket, if the walk holds one, on every replica
/// (invariant 2: the caller puts it before its first access to the bucket's slot).
pub fn post_link(post: &mut Post, info: &TableInfo, walk: &Walk) {
    if let Some(ov) = walk.new_overflow {
        let link = info.shape.bucket_off(walk.last_bucket) + BUCKET_NEXT_OFFSET;
        for r in 0..info.replica_count() {
            post.write(info.ptr(r, link), &(ov + 1).to_le_bytes());
        }
    }
}

/// What the lookup of bucket `b` found: `cas` and `read` are what [`post_lookup`]
/// returned; a taken insert lock is recorded in `bucket_lock`.
#[allow(clippy::too_many_arguments)]
pub fn on_lookup<'a>(
    post: &'a Post,
    info: &TableInfo,
    layout: &dyn SlotLayout,
    cache: &AddrCache,
    (table, key, access): (u32, u64, Access),
    b: u64,
    (cas, read): (Option<AtomicId>, ReadId),
    walk: &mut Walk,
    bucket_lock: &mut Option<u64>,
) -> Found<'a> {
    let shape = &info.shape;
    if let Some(cas) = cas {
        if post.old(cas) != 0 {
            return Found::Abort(AbortReason::LockConflict);
        }
        *bucket_lock = Some(shape.bucket_off(b));
    }
    let bucket = post.bytes(read);
    let scan = scan_bucket(shape, layout, bucket, key);
    if let Some(s) = scan.found {
        if access == Access::Insert {
            return Found::Abort(AbortReason::Duplicate);
        }
        let rel = shape.slot_off(b, s);
        cache.put(table, key, rel);
        let at = (rel - shape.bucket_off(b)) as usize;
        return Found::At {
            rel,
            slot: &bucket[at..at + shape.slot_bytes as usize],
        };
    }
    if access == Access::Insert && walk.free_rel.is_none() {
        walk.free_rel = scan.free.map(|f| shape.slot_off(b, f));
    }
    match (scan.next, access) {
        (Some(next), _) => Found::Next(next),
        (None, Access::Insert) => {
            walk.last_bucket = b;
            if walk.free_rel.is_none() {
                walk.new_overflow = Some(RESERVE);
            }
            Found::End(walk.free_rel)
        }
        (None, _) => Found::Abort(AbortReason::NotFound),
    }
}

/// The overflow FAA returned `reserved`: the first slot of the new bucket, or `None`
/// when the table's overflow space is used up (the caller aborts with `TableFull`).
pub fn on_reserve(shape: &Shape, walk: &mut Walk, reserved: u64) -> Option<u64> {
    debug_assert!(walk.reserving());
    if reserved >= shape.overflow_count {
        walk.new_overflow = None;
        return None;
    }
    let idx = shape.overflow_bucket(reserved);
    walk.new_overflow = Some(reserved);
    Some(shape.slot_off(idx, 0))
}

/// The slot at the cached address `rel` holds another key (FORD §4.2): forget the
/// address, give back the slot's lock in `bg` if `locked`, and restart the walk at the
/// key's home bucket (the returned stage).
pub fn evict_stale(
    cache: &AddrCache,
    bg: &mut Post,
    info: &TableInfo,
    (table, key): (u32, u64),
    rel: u64,
    locked: &mut bool,
) -> Stage {
    cache.evict(table, key, rel);
    if *locked {
        bg.write(info.ptr(0, rel + VLOCK as u64), &0u64.to_le_bytes());
        *locked = false;
    }
    Stage::Lookup(info.shape.home_bucket(key))
}
