//! Tears: a READ and a WRITE of overlapping words, in service at the same time on one
//! memory node, give the READ a mixture of old and new words (DESIGN §2).
//!
//! A batch's ops take effect together when its service ends (one `Apply` event per
//! batch), so on its own the simulator would show a READ a concurrent WRITE entirely or
//! not at all. A NIC moves READ and WRITE payloads word by word, and either side can
//! stall at any word; dmtx promises only 8-byte atomicity, so the simulator produces
//! every mixture a NIC may.
//!
//! # Model
//!
//! - **Service interval** of a READ or WRITE: from when its processing unit starts on it
//!   to when its payload has crossed the responder's PCIe (READ) or landed in memory,
//!   after PCIe or on the PM media (WRITE). [`NicModel::time_batch_pm`](crate::NicModel::time_batch_pm) records it at
//!   submit, with the op's bytes, its buffer offset, its batch's service end (when the
//!   batch is applied) and its completion.
//! - A READ `R` and a WRITE `W` of different posts **overlap** when their intervals do
//!   (`R.begin < W.end && W.begin < R.end`) and so do their byte ranges.
//! - The pair is resolved when `W`'s batch is applied, just before its ops run. Every
//!   overlapping `R` is known then: `R.begin < W.end ≤ now`, so `R` was submitted.
//! - **Shape.** Over the overlapping words, a reader and a writer cursor walk in
//!   increasing address order; a coin from the simulation's RNG picks which one moves
//!   next, so either may stall at any word. `R` sees a word new iff the writer passed it
//!   first. All-old, all-new, new-prefix, old-prefix and alternating shapes all occur,
//!   and the seed decides which.
//! - If `R` was applied first, it read old words: the words it sees new are copied from
//!   `W`'s payload into `R`'s result. If `R` is applied later, it will read `W`'s new
//!   words: the words it sees old are read from memory now and patched into `R`'s result
//!   when its post is polled ([`before_poll`]).
//! - Only READ results change. Memory never holds a word that no op wrote, and CAS/FAA
//!   never take part, so atomics stay atomic and every word a READ returns is whole.
//!
//! # Cost
//!
//! Per READ or WRITE op that spans two words or more, one record pushed at submit (an
//! op within one word cannot tear: a READ sees it whole, old or new, either way). READs
//! are indexed per memory node by the hash of their first 256-byte block, so a WRITE
//! visits only the few READs that start on or just before its blocks; completed READs
//! are dropped when met and swept periodically. Per applied batch without WRITEs, an
//! emptiness test; per poll, another. The vectors are reused: nothing is allocated once
//! they have grown. On the FORD simulation (`tests/ford_sim.rs`) this is about 8% of the
//! simulator's instructions.
//!
//! # Limits
//!
//! - Two overlapping WRITEs do not mix memory: the one applied later wins whole.
//! - A READ whose reply has landed when the WRITE is applied is not torn (its result may
//!   be handed out already).
//! - A word that an earlier op of the WRITE's own batch also modifies is shown new: its
//!   old value (between the two ops) is not reconstructed.
//! - While a fault script is installed, the fault injector applies batches on its own
//!   path, which calls [`before_apply`] too, except for a batch whose path was cut (it
//!   never runs): tears go on (`tests/physics.rs::tears_happen_under_a_fault_script_too`).

use dmtx_verbs::{MnId, Op, Region};
use rand::rngs::SmallRng;
use rand::RngCore;

use crate::sim::State;
use crate::Sim;

/// Buckets of a node's READ index (by the hash of a READ's first block).
const BUCKETS: usize = 256;

/// log2 of the index's block size: 256 bytes, so that a record or a hash bucket spans
/// one to three blocks and a WRITE visits few buckets.
const BLOCK_SHIFT: u32 = 8;

/// [`Tears::batch`] entry of a WRITE (READs give their bucket).
const WRITE_LOC: u32 = u32::MAX;

/// Sweep a node's completed READs once this many READs, or as many as were left at the
/// last sweep, were recorded since.
const SWEEP_MIN: usize = 256;

/// Counters of torn reads.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TearStats {
    /// READ/WRITE pairs of different posts found in service together on common words.
    pub overlaps: u64,
    /// Of those, the pairs whose READ saw both old and new words.
    pub torn: u64,
}

/// One READ or WRITE op in service.
#[derive(Copy, Clone, Debug)]
struct Span {
    /// The post slot that owns it, and the memory node.
    slot: u32,
    mn: u16,
    /// Its index among its batch's ops.
    ord: u32,
    /// Region offset and length.
    off: u64,
    len: u32,
    /// Offset in the post's read buffer (READ) or write data (WRITE).
    buf: u32,
    /// Service interval.
    begin: u64,
    end: u64,
    /// Its batch's service end (when it is applied) and the batch's number: batches
    /// applied at one instant are applied in the order they were numbered (submitted).
    applied: u64,
    seq: u64,
    /// Its batch's completion.
    done: u64,
}

impl Span {
    /// Its first and last blocks ([`BLOCK_SHIFT`]).
    #[inline]
    fn blocks(&self) -> (u64, u64) {
        (
            self.off >> BLOCK_SHIFT,
            (self.off + u64::from(self.len) - 1) >> BLOCK_SHIFT,
        )
    }
}

/// A memory node's READs not yet known to be completed, indexed by their first block.
#[derive(Clone, Debug, Default)]
struct NodeReads {
    /// `buckets[bucket(first block)]`: READs, in no particular order.
    buckets: Vec<Vec<Span>>,
    /// Blocks of the longest READ recorded since the last sweep: a WRITE's first block
    /// minus this (plus one) is the first block a READ overlapping it can start at.
    blocks_max: u64,
    /// READs recorded since the last sweep, and the count that triggers the next.
    pushed: usize,
    sweep_at: usize,
}

/// The bucket of block `block` (Fibonacci hashing).
#[inline]
fn bucket(block: u64) -> usize {
    (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BUCKETS.trailing_zeros())) as usize
}

impl NodeReads {
    /// Index `r`; returns its bucket and position.
    #[inline]
    fn add(&mut self, r: Span) -> (u32, u32) {
        if self.buckets.is_empty() {
            self.buckets.resize_with(BUCKETS, Vec::new);
            self.sweep_at = SWEEP_MIN;
        }
        let (first, last) = r.blocks();
        self.blocks_max = self.blocks_max.max(last - first + 1);
        let b = bucket(first);
        self.buckets[b].push(r);
        self.pushed += 1;
        (b as u32, (self.buckets[b].len() - 1) as u32)
    }

    /// Drop the READs completed by `now`.
    fn sweep(&mut self, now: u64) {
        let mut live = 0;
        let mut blocks_max = 1;
        for b in &mut self.buckets {
            b.retain(|r| r.done > now);
            live += b.len();
            blocks_max = b
                .iter()
                .map(|r| r.blocks().1 - r.blocks().0 + 1)
                .fold(blocks_max, u64::max);
        }
        self.blocks_max = blocks_max;
        self.pushed = 0;
        self.sweep_at = live.max(SWEEP_MIN);
    }
}

/// Old bytes of one word (or part of one) for a READ's result, applied at poll.
#[derive(Copy, Clone, Debug)]
struct Patch {
    slot: u32,
    buf: u32,
    len: u8,
    bytes: [u8; 8],
}

/// The tear state of a fabric (kept in [`crate::nic::FabricState`]).
///
/// Invariants:
/// 1. Every READ (of two words or more) of a batch not yet completed is in
///    `nodes[mn]`, in the bucket of its first block, and spans at most `blocks_max`
///    blocks; completed ones may linger until met or swept.
/// 2. `slot_writes[slot]` holds the WRITEs of the slot's batches not yet applied, each
///    (slot, node)'s in op order; [`before_apply`] removes a batch's WRITEs when it is
///    applied.
/// 3. `patches` hold words only for posts that are neither detached nor polled yet, so
///    their slot cannot have been reused; [`before_poll`] consumes them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tears {
    /// Per memory node: its READs.
    nodes: Vec<NodeReads>,
    /// Per post slot: its WRITEs not yet applied, any memory node.
    slot_writes: Vec<Vec<Span>>,
    /// Where the batch being recorded put its ops: a READ's bucket (a WRITE:
    /// [`WRITE_LOC`]) and its position there (reused).
    batch: Vec<(u32, u32)>,
    /// Batches recorded so far, and the one being recorded.
    seq: u64,
    mark: Mark,
    patches: Vec<Patch>,
    stats: TearStats,
}

/// The batch being recorded ([`Tears::push`] … [`Tears::close`]).
#[derive(Copy, Clone, Debug, Default)]
struct Mark {
    mn: u16,
    slot: u32,
    seq: u64,
}

impl Tears {
    /// True when an op of `len` bytes at `off` may tear: it spans two words or more.
    /// An op within one word is atomic, and a READ sees it whole, old or new, either
    /// way; an op past the end of the address space fails and moves nothing.
    #[inline]
    pub(crate) fn may_tear(off: u64, len: u32) -> bool {
        off.checked_add(u64::from(len))
            .is_some_and(|end| off >> 3 != (end - 1) >> 3)
    }

    /// Start recording the batch of post `slot` to memory node `mn`.
    #[inline]
    fn begin(&mut self, slot: u32, mn: u16) {
        let s = slot as usize;
        if self.slot_writes.len() <= s || self.nodes.len() <= mn as usize {
            self.grow(slot, mn);
        }
        let w = &mut self.slot_writes[s];
        if !w.is_empty() {
            // A previous batch of the slot to this node was never applied: drop it.
            w.retain(|w| w.mn != mn);
        }
        self.seq += 1;
        self.mark = Mark {
            mn,
            slot,
            seq: self.seq,
        };
    }

    #[cold]
    fn grow(&mut self, slot: u32, mn: u16) {
        let s = slot as usize;
        if self.slot_writes.len() <= s {
            self.slot_writes.resize_with(s + 1, Vec::new);
        }
        if self.nodes.len() <= mn as usize {
            self.nodes.resize_with(mn as usize + 1, NodeReads::default);
        }
    }

    /// Record op `ord` of the batch of post `slot` to `mn` being timed: a WRITE if
    /// `write`, else a READ, of `at = (offset, len, buffer offset)` in service during
    /// `interval = (begin, end)`. Only ops that [`Tears::may_tear`].
    #[inline(always)]
    pub(crate) fn push(
        &mut self,
        (slot, mn): (u32, u16),
        write: bool,
        ord: usize,
        at: (u64, u32, u32),
        interval: (u64, u64),
    ) {
        debug_assert!(Self::may_tear(at.0, at.1));
        if self.batch.is_empty() {
            self.begin(slot, mn);
        }
        let m = self.mark;
        debug_assert_eq!((m.slot, m.mn), (slot, mn), "one batch at a time");
        let span = Span {
            slot,
            mn,
            ord: ord as u32,
            off: at.0,
            len: at.1,
            buf: at.2,
            begin: interval.0,
            end: interval.1,
            applied: 0,
            seq: m.seq,
            done: 0,
        };
        let loc = if write {
            let w = &mut self.slot_writes[slot as usize];
            w.push(span);
            (WRITE_LOC, (w.len() - 1) as u32)
        } else {
            self.nodes[mn as usize].add(span)
        };
        self.batch.push(loc);
    }

    /// Finish recording the batch being timed: it is applied at `applied` and completes
    /// at `done`.
    #[inline]
    pub(crate) fn close(&mut self, applied: u64, done: u64) {
        if self.batch.is_empty() {
            return;
        }
        let m = self.mark;
        for &(b, i) in &self.batch {
            let span = if b == WRITE_LOC {
                &mut self.slot_writes[m.slot as usize][i as usize]
            } else {
                &mut self.nodes[m.mn as usize].buckets[b as usize][i as usize]
            };
            span.applied = applied;
            span.done = done;
        }
        self.batch.clear();
    }
}

/// Before the batch of post `slot` to `mn` is applied at `now`: resolve its WRITEs
/// against the READs they overlap (module doc).
#[inline]
pub(crate) fn before_apply(st: &mut State, region: &Region, slot: usize, mn: MnId, now: u64) {
    let t = &st.fabric.tears;
    let sweep = t.nodes.get(mn.index()).is_some_and(|n| n.pushed > n.sweep_at);
    if sweep || t.slot_writes.get(slot).is_some_and(|w| !w.is_empty()) {
        resolve(st, region, slot, mn, now);
    }
}

/// [`before_apply`] when there is work.
fn resolve(st: &mut State, region: &Region, slot: usize, mn: MnId, now: u64) {
    let State { fabric, posts, rng, .. } = st;
    let Tears {
        nodes,
        slot_writes,
        patches,
        stats,
        ..
    } = &mut fabric.tears;
    let Some(node) = nodes.get_mut(mn.index()).filter(|n| !n.buckets.is_empty()) else {
        // No READ was ever recorded on the node: drop the batch's WRITEs, if any.
        if let Some(w) = slot_writes.get_mut(slot) {
            w.retain(|w| w.mn != mn.0);
        }
        return;
    };
    if node.pushed > node.sweep_at {
        node.sweep(now);
    }
    let Some(writes) = slot_writes.get_mut(slot).filter(|w| !w.is_empty()) else {
        return;
    };
    // The slot's WRITEs to this node, in op order (pushed so, and removals keep order).
    for w in writes.iter().filter(|w| w.mn == mn.0) {
        let mut executes = None;
        let (w_first, w_last) = w.blocks();
        // A READ is visited in the bucket of its own first block only, so once.
        for block in w_first.saturating_sub(node.blocks_max - 1)..=w_last {
            let bucket = &mut node.buckets[bucket(block)];
            let mut j = 0;
            while j < bucket.len() {
                let r = &bucket[j];
                if r.done <= now {
                    // Completed: its result may be handed out already.
                    bucket.swap_remove(j);
                    continue;
                }
                j += 1;
                if r.off >> BLOCK_SHIFT != block || r.slot == w.slot || r.begin >= w.end || w.begin >= r.end {
                    continue;
                }
                let r = *r;
                let lo = r.off.max(w.off);
                let hi = (r.off + u64::from(r.len)).min(w.off + u64::from(w.len));
                if lo >= hi {
                    continue;
                }
                let w_ops = posts[w.slot as usize].post.ops();
                if !*executes.get_or_insert_with(|| batch_reaches(w_ops, mn, w.ord, region.bytes())) {
                    break; // W fails or an op before it does: it never writes.
                }
                let read_first = (r.applied, r.seq) < (w.applied, w.seq);
                if !read_first && posts[r.slot as usize].detached {
                    continue; // nobody will look at its result
                }
                stats.overlaps += 1;
                let mut walk = Walk::new((hi.div_ceil(8) - lo / 8) as u32);
                let (mut saw_old, mut saw_new) = (false, false);
                let mut a = lo;
                while a < hi {
                    let b = ((a & !7) + 8).min(hi);
                    let n = (b - a) as usize;
                    let rb = (u64::from(r.buf) + a - r.off) as usize;
                    let mut new = walk.next(rng);
                    if read_first && new {
                        let wb = (u64::from(w.buf) + a - w.off) as usize;
                        let mut word = [0u8; 8];
                        word[..n].copy_from_slice(&posts[w.slot as usize].post.parts_mut().write_data[wb..wb + n]);
                        posts[r.slot as usize].post.parts_mut().read_buf[rb..rb + n].copy_from_slice(&word[..n]);
                    } else if !read_first && !new {
                        if modified_before(posts[w.slot as usize].post.ops(), mn, w.ord, a, b) {
                            new = true; // see the limits in the module doc
                        } else {
                            let mut bytes = [0u8; 8];
                            region
                                .read(a, &mut bytes[..n])
                                .expect("W executes, so its bytes are in the region");
                            patches.push(Patch {
                                slot: r.slot,
                                buf: rb as u32,
                                len: n as u8,
                                bytes,
                            });
                        }
                    }
                    saw_new |= new;
                    saw_old |= !new;
                    a = b;
                }
                if saw_old && saw_new {
                    stats.torn += 1;
                }
            }
        }
    }
    writes.retain(|w| w.mn != mn.0);
}

/// Before post `slot` is polled: once it completed, put the old words of the WRITEs
/// it overlapped into its READ results.
pub(crate) fn before_poll(st: &mut State, slot: usize) {
    let patches = &mut st.fabric.tears.patches;
    if patches.is_empty() {
        return;
    }
    let p = &mut st.posts[slot];
    if p.pending != 0 {
        return;
    }
    patches.retain(|x| {
        if x.slot as usize != slot {
            return true;
        }
        let (b, n) = (x.buf as usize, x.len as usize);
        p.post.parts_mut().read_buf[b..b + n].copy_from_slice(&x.bytes[..n]);
        false
    });
}

/// True when op `ord` of the batch of `ops` to `mn`, and every op before it, pass the
/// region's checks, so that [`Sim`]'s apply runs it (it stops at the first failure).
fn batch_reaches(ops: &[Op], mn: MnId, ord: u32, region_bytes: u64) -> bool {
    let fits = |off: u64, len: u64| off.checked_add(len).is_some_and(|e| e <= region_bytes);
    ops.iter()
        .filter(|o| o.ptr().mn == mn)
        .take(ord as usize + 1)
        .all(|o| match *o {
            Op::Read { ptr, len, .. } | Op::Write { ptr, len, .. } => fits(ptr.offset, u64::from(len)),
            Op::Cas { ptr, .. } | Op::Faa { ptr, .. } => ptr.offset.is_multiple_of(8) && fits(ptr.offset, 8),
            Op::Flush { ptr } => ptr.offset < region_bytes,
        })
}

/// True when an op before op `ord` of the batch to `mn` modifies a byte of `[a, b)`.
fn modified_before(ops: &[Op], mn: MnId, ord: u32, a: u64, b: u64) -> bool {
    ops.iter().filter(|o| o.ptr().mn == mn).take(ord as usize).any(|o| {
        let (off, len) = match *o {
            Op::Write { ptr, len, .. } => (ptr.offset, u64::from(len)),
            Op::Cas { ptr, .. } | Op::Faa { ptr, .. } => (ptr.offset, 8),
            Op::Read { .. } | Op::Flush { .. } => return false,
        };
        off < b && a < off + len
    })
}

/// A reader's and a writer's cursor over `words` words, moved by coin flips.
#[derive(Debug)]
struct Walk {
    words: u32,
    written: u32,
    read: u32,
    bits: u64,
    bits_left: u32,
}

impl Walk {
    fn new(words: u32) -> Self {
        Self {
            words,
            written: 0,
            read: 0,
            bits: 0,
            bits_left: 0,
        }
    }

    /// Move the cursors until the reader takes its next word: true if it is new (the
    /// writer passed it first).
    fn next(&mut self, rng: &mut SmallRng) -> bool {
        debug_assert!(self.read < self.words, "the reader took every word already");
        while self.written < self.words && self.coin(rng) {
            self.written += 1;
        }
        let new = self.read < self.written;
        self.read += 1;
        new
    }

    fn coin(&mut self, rng: &mut SmallRng) -> bool {
        if self.bits_left == 0 {
            self.bits = rng.next_u64();
            self.bits_left = 64;
        }
        let c = self.bits & 1 == 1;
        self.bits >>= 1;
        self.bits_left -= 1;
        c
    }
}

impl Sim {
    /// Torn-read counters so far.
    pub fn tear_stats(&self) -> TearStats {
        self.lock().fabric.tears.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The shape a READ of `words` words sees, as a bit per word (1 = new).
    fn shape(rng: &mut SmallRng, words: u32) -> u32 {
        let mut w = Walk::new(words);
        (0..words).fold(0, |acc, i| acc | (u32::from(w.next(rng)) << i))
    }

    /// Goal: the cursor walk gives every kind of shape, alternating ones included, and
    /// is a function of the seed alone.
    #[test]
    fn walk_gives_every_shape() {
        const WORDS: u32 = 8;
        let all = (1u32 << WORDS) - 1;
        let mut rng = SmallRng::seed_from_u64(3);
        let mut seen = [false; 5]; // all old, all new, new prefix, old prefix, other
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            let s = shape(&mut rng, WORDS);
            distinct.insert(s);
            let kind = match s {
                0 => 0,
                _ if s == all => 1,
                _ if (s + 1).is_power_of_two() => 2, // low words new: 0b0000_0111
                _ if (s & (s.wrapping_neg())) + s == all + 1 => 3, // high words new
                _ => 4,
            };
            seen[kind] = true;
        }
        assert_eq!(seen, [true; 5], "every shape kind within 2000 draws");
        assert!(distinct.len() > 40, "only {} distinct shapes", distinct.len());
        let again: Vec<u32> = {
            let mut a = SmallRng::seed_from_u64(3);
            (0..100).map(|_| shape(&mut a, WORDS)).collect()
        };
        let mut b = SmallRng::seed_from_u64(3);
        assert!(
            again.iter().all(|&s| s == shape(&mut b, WORDS)),
            "same seed, same shapes"
        );
    }

    /// Goal: the op checks that decide whether a WRITE runs mirror the region's rules.
    #[test]
    fn batch_reaches_mirrors_region_checks() {
        use dmtx_verbs::RemotePtr;
        let p = |off| RemotePtr::new(MnId(0), off);
        let other = RemotePtr::new(MnId(1), 1 << 40);
        let write = Op::Write {
            ptr: p(64),
            src: 0,
            len: 64,
        };
        let bad_cas = Op::Cas {
            ptr: p(4),
            expect: 0,
            swap: 1,
        };
        let far_read = Op::Read {
            ptr: other,
            len: 8,
            dst: 0,
        };
        assert!(
            batch_reaches(&[far_read, write], MnId(0), 0, 4096),
            "other nodes' ops do not count"
        );
        assert!(
            !batch_reaches(&[bad_cas, write], MnId(0), 1, 4096),
            "a misaligned CAS stops the batch"
        );
        assert!(!batch_reaches(&[write], MnId(0), 0, 100), "out of range");
        assert!(modified_before(
            &[Op::Faa { ptr: p(64), add: 1 }, write],
            MnId(0),
            1,
            64,
            72
        ));
        assert!(!modified_before(
            &[Op::Faa { ptr: p(64), add: 1 }, write],
            MnId(0),
            1,
            72,
            80
        ));
    }
}
