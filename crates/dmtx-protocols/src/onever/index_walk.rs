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
//!    Several inserts of one transaction homing to one bucket walk it one at a time:
//!    the first takes the lock, each later one walks under it ([`Walk::share_lock`])
//!    once those before it claimed their slots, and never picks a slot a sibling
//!    claimed (`claimed` of [`on_lookup`]): a second CAS of the lock would conflict
//!    with the transaction's own lock on every retry, and two walks at once would claim
//!    one slot or link two overflow buckets to one chain.
//! 2. An overflow bucket is linked on every replica before any of its slots is locked.

use dmtx_runtime::{AbortReason, Access, AddrCache, Obj};
use dmtx_store::{
    scan_bucket, Catalog, Shape, SlotLayout, TableInfo, BUCKET_HEADER_BYTES, BUCKET_LOCK_OFFSET, BUCKET_NEXT_OFFSET,
    OVERFLOW_CURSOR_OFFSET,
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
    /// The chain's insert lock is held by another insert of the same transaction (two
    /// keys homing to one bucket): this walk neither takes nor releases it.
    shared_lock: bool,
    /// The walk has posted its first lookup.
    started: bool,
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

    /// Walk under the insert lock a sibling insert of the same transaction holds.
    #[inline]
    pub fn share_lock(&mut self) {
        self.shared_lock = true;
    }

    /// Whether the walk runs under a sibling's insert lock.
    #[inline]
    pub fn shares_lock(&self) -> bool {
        self.shared_lock
    }

    /// The first lookup is posted.
    #[inline]
    pub fn start(&mut self) {
        self.started = true;
    }

    /// Whether the first lookup was posted.
    #[inline]
    pub fn started(&self) -> bool {
        self.started
    }
}

/// What the walk needs of a protocol's per-object state during an execution round.
pub trait WalkingObj {
    /// Where the object is.
    fn stage(&self) -> Stage;
    /// Its walk down the chain (inserts).
    fn walk(&self) -> &Walk;
    /// Table-relative offset of its slot, once located.
    fn slot(&self) -> u64;
    /// This round posted a CAS for it (a bucket's insert lock or its slot's lock).
    fn cas_posted(&self) -> bool;
    /// It holds its chain's insert lock.
    fn holds_bucket_lock(&self) -> bool;
}

/// Slots the inserts of `objs` claimed (locked, not yet written, so a bucket READ shows
/// them free), into `claimed` as (table, slot offset). A chain has one insert walk at a
/// time, so what a round's walks claim is on other chains.
pub fn note_claimed<S: WalkingObj>(claimed: &mut Vec<(u32, u64)>, objs: &[Obj<S>]) {
    claimed.clear();
    claimed.extend(
        objs.iter()
            .filter(|q| q.access == Access::Insert && matches!(q.proto.stage(), Stage::Fetch | Stage::Done))
            .map(|q| (q.table, q.proto.slot())),
    );
}

/// After an execution post of `objs` failed (which of its ops ran is unknown): give
/// back by CAS, in `bg`, every lock word the round may have taken with `lock`, so a
/// lock never taken is left alone. The slot's lock word is at `lock_word` in the slot.
pub fn give_back_round<S: WalkingObj>(bg: &mut Post, objs: &[Obj<S>], catalog: &Catalog, lock: u64, lock_word: u64) {
    bg.clear();
    for o in objs.iter().filter(|o| o.proto.cas_posted()) {
        let info = catalog.get(o.table).expect("table checked at add");
        let word = match o.proto.stage() {
            Stage::Lookup(b) => bucket_lock_at(&info.shape, b),
            Stage::Fetch if !o.proto.walk().reserving() => o.proto.slot() + lock_word,
            _ => continue,
        };
        bg.cas(info.ptr(0, word), lock, 0);
    }
}

/// One transaction's insert walks per (table, home bucket), rebuilt every execution
/// round. Inserts of a transaction homing to one bucket go one at a time: the first
/// takes the chain's insert lock; each later one waits until those before it have
/// claimed their slots, then walks under the same lock. A second CAS of the lock would
/// conflict with the transaction's own lock on every retry of the same inputs, and two
/// walks at once would claim one slot or link two overflow buckets to one chain.
#[derive(Debug, Default)]
pub struct InsertWalks {
    /// (table, home bucket, an insert is still walking, one holds the chain's lock).
    chains: Vec<(u32, u64, bool, bool)>,
}

impl InsertWalks {
    /// A round's table, from the inserts of `objs` that started walking.
    pub fn rebuild<S: WalkingObj>(&mut self, objs: &[Obj<S>], catalog: &Catalog) {
        self.chains.clear();
        for o in objs
            .iter()
            .filter(|o| o.access == Access::Insert && o.proto.walk().started())
        {
            let home = catalog
                .get(o.table)
                .expect("table checked at add")
                .shape
                .home_bucket(o.key);
            self.note(
                o.table,
                home,
                o.proto.stage() != Stage::Done,
                o.proto.holds_bucket_lock(),
            );
        }
    }

    /// Note an insert that started walking the chain of `home`: `walking` until it has
    /// claimed its slot, `locked` when it holds the chain's insert lock.
    fn note(&mut self, table: u32, home: u64, walking: bool, locked: bool) {
        match self.chains.iter_mut().find(|w| w.0 == table && w.1 == home) {
            Some(w) => {
                w.2 |= walking;
                w.3 |= locked;
            }
            None => self.chains.push((table, home, walking, locked)),
        }
    }

    /// Whether an insert that has not started walking (`walk`) may post its first
    /// lookup of the chain of `home` this round: `None` while a sibling's walk of it is
    /// under way; `Some(true)` when it takes the chain's insert lock; `Some(false)` when
    /// it walks under the lock a sibling that claimed its slot holds. Starts `walk`.
    pub fn turn(&mut self, table: u32, home: u64, walk: &mut Walk) -> Option<bool> {
        let take_lock = match self.chains.iter_mut().find(|w| w.0 == table && w.1 == home) {
            Some(w) if w.2 => return None,
            Some(w) => {
                debug_assert!(w.3, "a finished insert walk holds its chain's lock");
                walk.share_lock();
                w.2 = true;
                false
            }
            None => {
                self.chains.push((table, home, true, true));
                true
            }
        };
        walk.start();
        Some(take_lock)
    }

    /// Post this round's bucket READ of an object at `Lookup(b)` (on replica `replica`),
    /// with, for an insert starting its walk, the chain's insert lock (`lock`) when
    /// [`InsertWalks::turn`] gives it: inserters serialize per home bucket, so no two can
    /// claim two free slots for one key. The (CAS, READ) posted, or `None` while the
    /// insert waits for a sibling's walk of its chain.
    #[allow(clippy::too_many_arguments)]
    pub fn post_lookup(
        &mut self,
        post: &mut Post,
        info: &TableInfo,
        (table, access): (u32, Access),
        b: u64,
        walk: &mut Walk,
        replica: usize,
        lock: u64,
    ) -> Option<(Option<AtomicId>, ReadId)> {
        let mut lock_bucket = false;
        if access == Access::Insert && !walk.started() {
            lock_bucket = self.turn(table, b, walk)?;
        }
        Some(post_lookup(post, info, b, replica, lock_bucket, lock))
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
/// returned; a taken insert lock is recorded in `bucket_lock`. `claimed` tells slots other
/// inserts of the same transaction already took in this table (locked, not yet
/// written, so they read as free): an insert never picks one. A found key's address goes
/// into `cache` when the protocol keeps one.
#[allow(clippy::too_many_arguments)]
pub fn on_lookup<'a>(
    post: &'a Post,
    info: &TableInfo,
    layout: &dyn SlotLayout,
    cache: Option<&AddrCache>,
    (table, key, access): (u32, u64, Access),
    b: u64,
    (cas, read): (Option<AtomicId>, ReadId),
    walk: &mut Walk,
    bucket_lock: &mut Option<u64>,
    claimed: &dyn Fn(u64) -> bool,
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
        if let Some(cache) = cache {
            cache.put(table, key, rel);
        }
        let at = (rel - shape.bucket_off(b)) as usize;
        return Found::At {
            rel,
            slot: &bucket[at..at + shape.slot_bytes as usize],
        };
    }
    if access == Access::Insert && walk.free_rel.is_none() {
        walk.free_rel = match scan.free {
            Some(f) if claimed(shape.slot_off(b, f)) => (f + 1..shape.slots)
                .find(|&i| {
                    let at = BUCKET_HEADER_BYTES as usize + i as usize * shape.slot_bytes as usize;
                    layout.key(&bucket[at..at + shape.slot_bytes as usize]).is_none() && !claimed(shape.slot_off(b, i))
                })
                .map(|i| shape.slot_off(b, i)),
            free => free.map(|f| shape.slot_off(b, f)),
        };
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

#[cfg(test)]
mod tests {
    use dmtx_store::{Shape, SlotLayout};
    use dmtx_verbs::Post;

    use super::super::record::OneVersionLayout;
    use super::super::testkit::{cache, catalog, complete, ops, table, VALUE_BYTES};
    use super::*;

    const ME: u64 = 7;

    /// A bucket holding `keys` (`None`: a free slot), its next link set to `next`.
    fn bucket(shape: &Shape, keys: &[Option<u64>], next: u64) -> Vec<u8> {
        let mut b = vec![0u8; shape.bucket_bytes as usize];
        b[8..16].copy_from_slice(&next.to_le_bytes());
        for (s, k) in keys.iter().enumerate() {
            if let Some(k) = k {
                let at = BUCKET_HEADER_BYTES as usize + s * shape.slot_bytes as usize;
                OneVersionLayout.encode(
                    0,
                    *k,
                    &[3u8; VALUE_BYTES as usize],
                    &mut b[at..at + shape.slot_bytes as usize],
                );
            }
        }
        b
    }

    /// Post the lookup of bucket `b` for `(key, access)`, complete it with `bytes` and
    /// the insert lock's old word `lock_old`, and say what it found.
    fn lookup(
        info: &TableInfo,
        walk: &mut Walk,
        bucket_lock: &mut Option<u64>,
        (key, access): (u64, Access),
        (b, bytes, lock_old): (u64, &[u8], u64),
    ) -> (Option<u64>, String) {
        let cache = cache();
        let mut post = Post::new();
        let ids = post_lookup(&mut post, info, b, 0, access == Access::Insert, ME);
        let olds: &[u64] = if ids.0.is_some() { &[lock_old] } else { &[] };
        complete(&mut post, &[bytes], olds);
        let found = on_lookup(
            &post,
            info,
            &OneVersionLayout,
            Some(&cache),
            (0, key, access),
            b,
            ids,
            walk,
            bucket_lock,
            &|_| false,
        );
        let found = match found {
            Found::At { rel, slot } => {
                assert_eq!(
                    OneVersionLayout.key(slot),
                    Some(key),
                    "the slot handed back holds the key"
                );
                format!("at {rel}")
            }
            other => format!("{other:?}"),
        };
        (cache.get(0, key), found)
    }

    #[test]
    fn an_insert_locks_its_chain_in_front_of_the_bucket_read() {
        let cat = catalog([table(0, &[0, 1])]);
        let info = cat.get(0).unwrap();
        let mut post = Post::new();
        post_lookup(&mut post, info, 2, 1, true, ME);
        let lock_word = 1000 + info.shape.bucket_off(2);
        let len = (info.shape.bucket_bytes as u64).to_le_bytes().to_vec();
        assert_eq!(
            ops(&post),
            [
                ("cas", 0, lock_word, [0u64.to_le_bytes(), ME.to_le_bytes()].concat()),
                ("read", 1, 2000 + info.shape.bucket_off(2), len.clone()),
            ]
        );
        post.clear();
        post_lookup(&mut post, info, 2, 0, false, ME);
        assert_eq!(ops(&post), [("read", 0, 1000 + info.shape.bucket_off(2), len)]);
    }

    #[test]
    fn a_bucket_read_finds_the_key_and_caches_its_address() {
        let cat = catalog([table(0, &[0])]);
        let info = cat.get(0).unwrap();
        let bytes = bucket(&info.shape, &[Some(4), Some(5)], 0);
        let (mut walk, mut held) = (Walk::default(), None);
        let rel = info.shape.slot_off(1, 1);
        let got = lookup(info, &mut walk, &mut held, (5, Access::ReadWrite), (1, &bytes, 0));
        assert_eq!(got, (Some(rel), format!("at {rel}")));
        assert_eq!(held, None, "only inserts take the chain's lock");
    }

    #[test]
    fn a_missing_key_follows_the_chain_and_is_not_found_at_its_end() {
        let cat = catalog([table(0, &[0])]);
        let info = cat.get(0).unwrap();
        let (mut walk, mut held) = (Walk::default(), None);
        let linked = bucket(&info.shape, &[Some(4), None], 1);
        let next = info.shape.overflow_bucket(0);
        let got = lookup(info, &mut walk, &mut held, (5, Access::ReadOnly), (1, &linked, 0));
        assert_eq!(got, (None, format!("Next({next})")));
        let last = bucket(&info.shape, &[Some(4), None], 0);
        let got = lookup(info, &mut walk, &mut held, (5, Access::ReadOnly), (next, &last, 0));
        assert_eq!(got, (None, "Abort(NotFound)".into()));
    }

    #[test]
    fn an_insert_takes_the_first_free_slot_of_its_chain() {
        let cat = catalog([table(0, &[0])]);
        let info = cat.get(0).unwrap();
        let (mut walk, mut held) = (Walk::default(), None);
        // A free slot in the home bucket, then a full overflow bucket ending the chain.
        let home = bucket(&info.shape, &[Some(4), None], 1);
        let got = lookup(info, &mut walk, &mut held, (5, Access::Insert), (1, &home, 0));
        assert_eq!(held, Some(info.shape.bucket_off(1)), "the chain's insert lock is held");
        assert!(got.1.starts_with("Next("));
        let next = info.shape.overflow_bucket(0);
        let full = bucket(&info.shape, &[Some(6), Some(8)], 0);
        let got = lookup(info, &mut walk, &mut held, (5, Access::Insert), (next, &full, 0));
        let free = info.shape.slot_off(1, 1);
        assert_eq!(got, (None, format!("End(Some({free}))")));
        assert!(!walk.reserving());
    }

    #[test]
    fn an_insert_into_a_full_chain_reserves_links_and_fills_an_overflow_bucket() {
        let cat = catalog([table(0, &[0, 1])]);
        let info = cat.get(0).unwrap();
        let (mut walk, mut held) = (Walk::default(), None);
        let full = bucket(&info.shape, &[Some(4), Some(6)], 0);
        let got = lookup(info, &mut walk, &mut held, (5, Access::Insert), (3, &full, 0));
        assert_eq!(got.1, "End(None)");
        assert!(walk.reserving());

        let mut post = Post::new();
        post_reserve(&mut post, info);
        assert_eq!(
            ops(&post),
            [("faa", 0, 1000 + OVERFLOW_CURSOR_OFFSET, 1u64.to_le_bytes().to_vec())]
        );
        let rel = on_reserve(&info.shape, &mut walk, 1).expect("overflow bucket 1 of 2 is free");
        assert_eq!(rel, info.shape.slot_off(info.shape.overflow_bucket(1), 0));

        // Invariant 2: the link goes to every replica.
        post.clear();
        post_link(&mut post, info, &walk);
        let link = info.shape.bucket_off(3) + BUCKET_NEXT_OFFSET;
        let word = 2u64.to_le_bytes().to_vec();
        assert_eq!(
            ops(&post),
            [("write", 0, 1000 + link, word.clone()), ("write", 1, 2000 + link, word)]
        );
        walk.linked();
        post.clear();
        post_link(&mut post, info, &walk);
        assert!(post.is_empty(), "a linked bucket is linked once");
    }

    #[test]
    fn a_reservation_past_the_overflow_space_is_refused() {
        let cat = catalog([table(0, &[0])]);
        let info = cat.get(0).unwrap();
        let (mut walk, mut held) = (Walk::default(), None);
        let full = bucket(&info.shape, &[Some(4), Some(6)], 0);
        lookup(info, &mut walk, &mut held, (5, Access::Insert), (3, &full, 0));
        assert_eq!(on_reserve(&info.shape, &mut walk, info.shape.overflow_count), None);
        assert!(!walk.reserving());
        let mut post = Post::new();
        post_link(&mut post, info, &walk);
        assert!(post.is_empty(), "nothing to link");
    }

    #[test]
    fn an_insert_aborts_on_a_present_key_or_a_busy_chain() {
        let cat = catalog([table(0, &[0])]);
        let info = cat.get(0).unwrap();
        let bytes = bucket(&info.shape, &[Some(5), None], 0);
        let (mut walk, mut held) = (Walk::default(), None);
        let got = lookup(info, &mut walk, &mut held, (5, Access::Insert), (1, &bytes, 0));
        assert_eq!(
            got,
            (None, "Abort(Duplicate)".into()),
            "an insert does not cache the key"
        );
        let (mut walk, mut held) = (Walk::default(), None);
        let got = lookup(info, &mut walk, &mut held, (9, Access::Insert), (1, &bytes, ME + 1));
        assert_eq!(got.1, "Abort(LockConflict)");
        assert_eq!(held, None, "a lock we did not get is not ours to release");
    }

    #[test]
    fn a_stale_address_is_evicted_its_lock_given_back_and_the_walk_restarted() {
        let cat = catalog([table(0, &[0])]);
        let info = cat.get(0).unwrap();
        let cache = cache();
        let rel = info.shape.slot_off(2, 0);
        cache.put(0, 5, rel);
        let mut bg = Post::new();
        let mut locked = true;
        let stage = evict_stale(&cache, &mut bg, info, (0, 5), rel, &mut locked);
        assert_eq!(stage, Stage::Lookup(info.shape.home_bucket(5)));
        assert_eq!(cache.get(0, 5), None);
        assert!(!locked);
        assert_eq!(ops(&bg), [("write", 0, 1000 + rel, 0u64.to_le_bytes().to_vec())]);
        bg.clear();
        evict_stale(&cache, &mut bg, info, (0, 5), rel, &mut locked);
        assert!(bg.is_empty(), "an unlocked slot is not written");
    }
}
