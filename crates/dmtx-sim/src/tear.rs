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
//! Per READ or WRITE op that spans two words or more, one record at submit (an op
//! within one word cannot tear: a READ sees it whole, old or new, either way). A WRITE's
//! record waits with its post slot. A READ's is an entry of one cache line in its
//! memory node's slab, chained by the hash of its first 256-byte block, so a WRITE
//! visits only the few READs that start on or just before its blocks. The slab holds
//! four to eight times the READs in service (as many chain heads), so chains are short
//! and a full rebuild is rare, and its free list is LIFO, so a new READ mostly lands on
//! a line a stale one just left; stale entries are unlinked when a WRITE meets
//! them, and all at once when the free list runs dry. A chain's head bounds its READs'
//! service ends, so a WRITE that begins after all of them skips the chain without
//! touching an entry (most do). When its batch is timed, a READ's
//! entry gets the batch's service end and completion; a WRITE's record needs neither (it
//! is resolved at its batch's service end). Per applied batch without WRITEs, an
//! emptiness test; per poll of a completed post, another. Nothing is allocated once the
//! slab has grown.
//! On the 4-op streams of `examples/speed.rs` this is about 16% of the instructions and
//! a third of the L1 misses and mispredictions (cachegrind, against a build that records
//! nothing), 16–24% of the time; per-bucket vectors swept periodically, the simpler
//! alternative, cost 20% of the instructions and over a third of the misses.
//!
//! # Limits
//!
//! - Two overlapping WRITEs do not mix memory: the one applied later wins whole.
//! - A READ whose reply has landed when the WRITE is applied is not torn (its result may
//!   be handed out already).
//! - A word that an earlier op of the WRITE's own batch also modifies is shown new: its
//!   old value (between the two ops) is not reconstructed.
//! - A READ applied after the WRITE's batch that reads, below the WRITE's words, a word a
//!   later op of that batch wrote untracked (one word, or an atomic: shown new) is not
//!   torn by the WRITE: it read that word after the WRITE had run (batch order), so the
//!   WRITE's words too. (OOCC's commit `[WRITE image, WRITE lock 0]` with the lock
//!   first relies on it.) A later multi-word WRITE is not looked at.
//! - A READ applied after the WRITE whose batch has, before it, an atomic on a word the
//!   WRITE writes sees the WRITE's words up to that word new: the atomic ran after
//!   them, and the READ after the atomic (batch order). 2PL's "CAS the lock (the
//!   record's highest word), READ the record" relies on it.
//! - While a fault script is installed, the fault injector applies batches on its own
//!   path, which calls [`before_apply`] too, except for a batch whose path was cut (it
//!   never runs): tears go on (`tests/physics.rs::tears_happen_under_a_fault_script_too`).

use dmtx_verbs::{MnId, Op, Region};
use rand::rngs::SmallRng;
use rand::RngCore;

use crate::sim::State;
use crate::Sim;

/// log2 of the index's block size: 256 bytes, so that a READ spans one to a few blocks
/// and a WRITE visits few chains.
const BLOCK_SHIFT: u32 = 8;

/// End of a chain or of the free list.
const NIL: u32 = u32::MAX;

/// [`ReadEntry::done`] of a READ whose batch is still being timed.
const PENDING: u64 = u64::MAX;

/// Entries of a node's index when its first READ arrives (it doubles as needed).
const ENTRIES_MIN: usize = 64;

/// Counters of torn reads.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TearStats {
    /// READ/WRITE pairs of different posts found in service together on common words.
    pub overlaps: u64,
    /// Of those, the pairs whose READ saw both old and new words.
    pub torn: u64,
}

/// A READ in service, in its memory node's index: one cache line, so that recording
/// one and meeting one each touch a single line.
#[derive(Copy, Clone, Debug, Default)]
#[repr(C, align(64))]
struct ReadEntry {
    /// Its batch's completion ([`PENDING`] while the batch is timed): once it is past,
    /// the READ's result may be handed out and the entry is free to reuse.
    done: u64,
    /// Service interval.
    begin: u64,
    end: u64,
    /// Region offset.
    off: u64,
    /// Its batch's service end (when it is applied) and the batch's number: batches
    /// applied at one instant are applied in the order they were numbered (submitted).
    applied: u64,
    seq: u64,
    len: u32,
    /// The post slot that owns it.
    slot: u32,
    /// Offset in the post's read buffer.
    buf: u32,
    /// The next entry of its chain, or of the free list.
    next: u32,
}

/// First and last blocks ([`BLOCK_SHIFT`]) of `len > 0` bytes at `off`.
#[inline]
fn blocks(off: u64, len: u32) -> (u64, u64) {
    (off >> BLOCK_SHIFT, (off + u64::from(len) - 1) >> BLOCK_SHIFT)
}

impl ReadEntry {
    /// Its first block.
    #[inline]
    fn first_block(&self) -> u64 {
        self.off >> BLOCK_SHIFT
    }
}

/// A memory node's READs not yet known to be completed: entries in a slab, chained by
/// the hash of their first block.
///
/// The slab holds four to eight entries per READ in service and its free list is LIFO,
/// so a new READ mostly lands on a line that a stale one just left; a chain mostly holds
/// one entry or none. Stale entries are unlinked when a WRITE's walk meets them, and all at
/// once when the free list runs dry ([`NodeReads::reclaim`]).
#[derive(Clone, Debug)]
struct NodeReads {
    /// Chain heads, `entries.len()` of them (a power of two).
    heads: Vec<Head>,
    entries: Vec<ReadEntry>,
    /// Head of the free list.
    free: u32,
    /// Blocks of the longest READ indexed since the last reclaim: a WRITE's first block
    /// minus this (plus one) is the first block a READ overlapping it can start at.
    blocks_max: u64,
}

impl Default for NodeReads {
    fn default() -> Self {
        Self {
            heads: Vec::new(),
            entries: Vec::new(),
            free: NIL,
            blocks_max: 1,
        }
    }
}

/// A chain's first entry, and a bound on the service ends of its entries: a WRITE that
/// begins no earlier overlaps none of them, and skips the chain without touching an
/// entry (most WRITEs skip every chain they visit, and entry loads were the misses of
/// resolving).
#[derive(Copy, Clone, Debug)]
struct Head {
    /// At least [`ReadEntry::end`] of every entry in the chain: the latest end linked
    /// since the chain was last empty (unlinking does not lower it).
    end: u64,
    first: u32,
}

impl Head {
    const EMPTY: Head = Head { end: 0, first: NIL };

    /// Put entry `i`, holding `r`, first in the chain.
    #[inline]
    fn link(&mut self, i: u32, r: &mut ReadEntry) {
        self.end = match self.first {
            NIL => r.end,
            _ => self.end.max(r.end),
        };
        r.next = self.first;
        self.first = i;
    }
}

/// The chain of block `block` among `n` heads (Fibonacci hashing; `n` a power of two).
#[inline]
fn chain(block: u64, n: usize) -> usize {
    (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - n.trailing_zeros())) as usize
}

impl NodeReads {
    /// Index `r` (its `next` is ignored), its batch still being timed; returns its
    /// entry. Stale entries are those whose `done` is at most `now`.
    #[inline]
    fn add(&mut self, mut r: ReadEntry, now: u64) -> u32 {
        if self.free == NIL {
            self.reclaim(now);
        }
        let i = self.free;
        let (first, last) = blocks(r.off, r.len);
        self.blocks_max = self.blocks_max.max(last - first + 1);
        let h = chain(first, self.heads.len());
        let e = &mut self.entries[i as usize];
        self.free = e.next;
        let head = &mut self.heads[h];
        head.link(i, &mut r);
        *e = r;
        i
    }

    /// Free every stale entry and rebuild the chains; double the slab when more than a
    /// quarter of it stays live. Amortized over the adds that emptied the free list, this
    /// is about one entry's scan per add. (Doubling at three quarters, as this once did,
    /// rebuilt twice as often on longer chains: the LOTUS-sized 4-op stream of
    /// `examples/speed.rs` ran 2-3% slower.)
    #[cold]
    fn reclaim(&mut self, now: u64) {
        let live = self.relink(now);
        if self.free == NIL || live * 4 > self.entries.len() {
            let n = (self.entries.len() * 2).max(ENTRIES_MIN);
            self.entries.resize(n, ReadEntry::default());
            self.heads.resize(n, Head::EMPTY);
            self.relink(now);
        }
    }

    /// Rebuild the chains from the live entries and the free list from the others;
    /// returns the live count.
    fn relink(&mut self, now: u64) -> usize {
        self.heads.fill(Head::EMPTY);
        self.free = NIL;
        self.blocks_max = 1;
        let n = self.heads.len();
        let mut live = 0;
        // Backwards, so that the free list hands entries out in address order.
        for i in (0..self.entries.len()).rev() {
            let e = &mut self.entries[i];
            if e.done > now {
                live += 1;
                let (first, last) = blocks(e.off, e.len);
                self.blocks_max = self.blocks_max.max(last - first + 1);
                let h = chain(first, n);
                self.heads[h].link(i as u32, e);
            } else {
                e.done = 0;
                e.next = self.free;
                self.free = i as u32;
            }
        }
        live
    }

    /// Unlink stale entry `i`, whose predecessor in chain `h` is `prev`, and free it.
    #[inline]
    fn unlink(&mut self, h: usize, prev: u32, i: u32) {
        let next = self.entries[i as usize].next;
        match prev {
            NIL => self.heads[h].first = next,
            p => self.entries[p as usize].next = next,
        }
        let e = &mut self.entries[i as usize];
        e.done = 0;
        e.next = self.free;
        self.free = i;
    }
}

/// A WRITE op in service, kept with its post slot until its batch is applied.
#[derive(Copy, Clone, Debug)]
struct WriteSpan {
    /// Service interval.
    begin: u64,
    end: u64,
    /// Region offset and length, and offset in the post's write data.
    off: u64,
    len: u32,
    buf: u32,
    /// Its batch's number (as [`ReadEntry`]'s; its service end is when it is resolved).
    seq: u64,
    /// Its index among its batch's ops, and the memory node.
    ord: u32,
    mn: u16,
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
/// 1. Every READ (of two words or more) of a batch not yet completed has an entry in
///    `nodes[mn]`, in the chain of its first block, and spans at most `blocks_max`
///    blocks; entries of completed READs may stay linked until met or reclaimed.
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
    slot_writes: Vec<Vec<WriteSpan>>,
    /// The entries of the batch being recorded's READs (reused), each with whether an
    /// atomic of its batch precedes it.
    batch_reads: Vec<(u32, bool)>,
    /// Batches recorded so far, and the one being recorded.
    seq: u64,
    mark: Mark,
    /// Virtual time when the posts being recorded were submitted ([`Tears::clock`]).
    now: u64,
    patches: Vec<Patch>,
    stats: TearStats,
}

/// The batch being recorded ([`Tears::push`] … [`Tears::close`]).
#[derive(Copy, Clone, Debug, Default)]
struct Mark {
    /// A batch is being recorded.
    open: bool,
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

    /// The virtual time is `now`: READs completed by then are stale. Called before
    /// batches are recorded.
    #[inline]
    pub(crate) fn clock(&mut self, now: u64) {
        self.now = now;
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
            open: true,
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
    /// `interval = (begin, end)`. Only ops that [`Tears::may_tear`]. A READ `fenced` by
    /// an atomic earlier in its batch begins, for tearing, no earlier than its batch is
    /// applied ([`Tears::close`]): the simulator decides the atomic's outcome at that
    /// instant, so the READ behind it must see every batch applied before as a whole (a
    /// READ hitchhiked on a lock's CAS that wins the lock a commit batch just released
    /// sees that commit's data, which the batch wrote before the unlock).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push(
        &mut self,
        (slot, mn): (u32, u16),
        write: bool,
        ord: usize,
        at: (u64, u32, u32),
        interval: (u64, u64),
        fenced: bool,
    ) {
        debug_assert!(Self::may_tear(at.0, at.1));
        if !self.mark.open {
            self.begin(slot, mn);
        }
        let m = self.mark;
        debug_assert_eq!((m.slot, m.mn), (slot, mn), "one batch at a time");
        if write {
            self.slot_writes[slot as usize].push(WriteSpan {
                begin: interval.0,
                end: interval.1,
                off: at.0,
                len: at.1,
                buf: at.2,
                seq: m.seq,
                ord: ord as u32,
                mn,
            });
        } else {
            let r = ReadEntry {
                done: PENDING,
                begin: interval.0,
                end: interval.1,
                off: at.0,
                applied: 0,
                seq: m.seq,
                len: at.1,
                slot,
                buf: at.2,
                next: NIL,
            };
            let i = self.nodes[mn as usize].add(r, self.now);
            self.batch_reads.push((i, fenced));
        }
    }

    /// Finish recording the batch being timed: it is applied at `applied` and completes
    /// at `done`.
    #[inline]
    pub(crate) fn close(&mut self, applied: u64, done: u64) {
        let m = self.mark;
        if !m.open {
            return;
        }
        self.mark.open = false;
        // Only READs: a WRITE is resolved when its batch is applied, so at `applied`.
        let entries = &mut self.nodes[m.mn as usize].entries;
        for &(i, fenced) in &self.batch_reads {
            let r = &mut entries[i as usize];
            if fenced {
                r.begin = r.begin.max(applied);
            }
            r.applied = applied;
            r.done = done;
        }
        self.batch_reads.clear();
    }
}

/// Before the batch of post `slot` to `mn` is applied at `now`: resolve its WRITEs
/// against the READs they overlap (module doc).
#[inline]
pub(crate) fn before_apply(st: &mut State, region: &Region, slot: usize, mn: MnId, now: u64) {
    if st.fabric.tears.slot_writes.get(slot).is_some_and(|w| !w.is_empty()) {
        resolve(st, region, slot, mn, now);
    }
}

/// [`before_apply`] when the slot has WRITEs.
fn resolve(st: &mut State, region: &Region, slot: usize, mn: MnId, now: u64) {
    let State { fabric, posts, rng, .. } = st;
    let Tears {
        nodes,
        slot_writes,
        patches,
        stats,
        ..
    } = &mut fabric.tears;
    let writes = &mut slot_writes[slot];
    let Some(node) = nodes.get_mut(mn.index()).filter(|n| !n.entries.is_empty()) else {
        // No READ was ever recorded on the node: drop the batch's WRITEs.
        drop_node(writes, mn);
        return;
    };
    // The slot's WRITEs to this node, in op order (pushed so, and removals keep order).
    'writes: for w in writes.iter().filter(|w| w.mn == mn.0) {
        let mut executes = None;
        let (w_first, w_last) = blocks(w.off, w.len);
        // A READ is met in the chain of its own first block only, so once.
        for block in w_first.saturating_sub(node.blocks_max - 1)..=w_last {
            let h = chain(block, node.heads.len());
            let head = node.heads[h];
            if head.end <= w.begin {
                continue; // every READ of the chain left service before W began
            }
            let (mut prev, mut i) = (NIL, head.first);
            while i != NIL {
                let r = node.entries[i as usize];
                if r.done <= now {
                    // Completed: its result may be handed out already.
                    node.unlink(h, prev, i);
                    i = r.next;
                    continue;
                }
                (prev, i) = (i, r.next);
                if r.first_block() != block || r.slot as usize == slot || r.begin >= w.end || w.begin >= r.end {
                    continue;
                }
                let lo = r.off.max(w.off);
                let hi = (r.off + u64::from(r.len)).min(w.off + u64::from(w.len));
                if lo >= hi {
                    continue;
                }
                let w_ops = posts[slot].post.ops();
                if !*executes.get_or_insert_with(|| batch_reaches(w_ops, mn, w.ord, region.bytes())) {
                    continue 'writes; // W fails or an op before it does: it never writes.
                }
                let read_first = (r.applied, r.seq) < (now, w.seq);
                if !read_first && posts[r.slot as usize].detached {
                    continue; // nobody will look at its result
                }
                if !read_first && modified_after_untracked(w_ops, mn, w.ord, r.off, w.off) {
                    // R read a word of a later op of W's batch, new, before it reached
                    // W's words: it read them after the whole of W (batch order).
                    continue;
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
                        word[..n].copy_from_slice(&posts[slot].post.parts_mut().write_data[wb..wb + n]);
                        posts[r.slot as usize].post.parts_mut().read_buf[rb..rb + n].copy_from_slice(&word[..n]);
                    } else if !read_first && !new {
                        if modified_before(posts[slot].post.ops(), mn, w.ord, a, b) {
                            new = true; // see the limits in the module doc
                        } else if atomic_saw(posts[r.slot as usize].post.ops(), mn, &r, w, a) {
                            // Batch order: an atomic before R in R's batch saw W's word at
                            // or above `a`, and W writes in increasing order.
                            new = true;
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
    drop_node(writes, mn);
}

/// Drop the WRITEs to `mn` (most posts name one node: then all of them).
#[inline]
fn drop_node(writes: &mut Vec<WriteSpan>, mn: MnId) {
    match writes.iter().all(|w| w.mn == mn.0) {
        true => writes.clear(),
        false => writes.retain(|w| w.mn != mn.0),
    }
}

/// Before post `slot`, completed, is polled: put the old words of the WRITEs it
/// overlapped into its READ results.
#[inline]
pub(crate) fn before_poll(st: &mut State, slot: usize) {
    let patches = &mut st.fabric.tears.patches;
    if patches.is_empty() {
        return;
    }
    let p = &mut st.posts[slot];
    debug_assert_eq!(p.pending, 0, "polled complete");
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

/// True when an atomic before READ `r` in its batch to `mn` is on a word that `w`
/// writes at or above address `a`. Applied after `w` (the caller's case), that atomic
/// ran after `w` had written its word there, so `w`'s words up to it had landed and the
/// READ, run after the atomic (batch order, DESIGN §2), sees them new.
fn atomic_saw(ops: &[Op], mn: MnId, r: &ReadEntry, w: &WriteSpan, a: u64) -> bool {
    for o in ops.iter().filter(|o| o.ptr().mn == mn) {
        match *o {
            Op::Read { ptr, dst, .. } if ptr.offset == r.off && dst == r.buf => return false,
            Op::Cas { ptr, .. } | Op::Faa { ptr, .. }
                if ptr.offset >= a && ptr.offset >= w.off && ptr.offset < w.off + u64::from(w.len) =>
            {
                return true;
            }
            _ => {}
        }
    }
    false
}

/// Whether an op of the batch after its op `ord` to `mn` writes, untracked (one word,
/// or an atomic: a READ applied after the batch always sees it new), a word in
/// `[a, b)`. A READ that starts at `a` reads such a word before the WRITE's words at
/// `b..`, and so after the whole WRITE, which the batch ran first.
fn modified_after_untracked(ops: &[Op], mn: MnId, ord: u32, a: u64, b: u64) -> bool {
    a < b
        && ops.iter().filter(|o| o.ptr().mn == mn).skip(ord as usize + 1).any(|o| {
            let (off, len) = match *o {
                Op::Write { ptr, len, .. } if !Tears::may_tear(ptr.offset, len) => (ptr.offset, u64::from(len)),
                Op::Cas { ptr, .. } | Op::Faa { ptr, .. } => (ptr.offset, 8),
                _ => return false,
            };
            off < b && a < off + len
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

    /// Goal: a node's index always holds every READ not yet completed, in the chain of
    /// its first block, once; through stale unlinks, reclaims and slab growth.
    #[test]
    fn index_holds_every_live_read() {
        use rand::Rng;
        let mut rng = SmallRng::seed_from_u64(7);
        let mut node = NodeReads::default();
        // Reference: entry index -> (first block, done), for entries never freed.
        let mut now = 0u64;
        for step in 0..20_000u32 {
            now += rng.random_range(0..20);
            let off = rng.random_range(0..64u64) * 64;
            let len = rng.random_range(9..700u32);
            let end = now + rng.random_range(1..300);
            let i = node.add(
                ReadEntry {
                    begin: now,
                    end,
                    off,
                    len,
                    slot: step,
                    ..ReadEntry::default()
                },
                now,
            );
            node.entries[i as usize].done = end + rng.random_range(0..200);
            if step % 7 == 0 {
                // A WRITE's walk: unlink what is stale in one chain.
                let h = rng.random_range(0..node.heads.len());
                let (mut prev, mut j) = (NIL, node.heads[h].first);
                while j != NIL {
                    let next = node.entries[j as usize].next;
                    match node.entries[j as usize].done <= now {
                        true => node.unlink(h, prev, j),
                        false => prev = j,
                    }
                    j = next;
                }
            }
            if step % 97 == 0 {
                let mut linked = vec![0u32; node.entries.len()];
                for (h, head) in node.heads.iter().enumerate() {
                    let mut j = head.first;
                    while j != NIL {
                        let e = &node.entries[j as usize];
                        assert_eq!(chain(e.first_block(), node.heads.len()), h, "in its block's chain");
                        assert!(e.end <= head.end, "the head bounds its entries' ends");
                        linked[j as usize] += 1;
                        j = e.next;
                    }
                }
                let mut free = node.free;
                while free != NIL {
                    assert_eq!(linked[free as usize], 0, "a free entry is in no chain");
                    free = node.entries[free as usize].next;
                }
                for (j, e) in node.entries.iter().enumerate() {
                    if e.done > now {
                        assert_eq!(linked[j], 1, "live READ {j} is linked once");
                        let blocks = ((e.off + u64::from(e.len) - 1) >> BLOCK_SHIFT) - e.first_block() + 1;
                        assert!(blocks <= node.blocks_max, "blocks_max covers READ {j}");
                    }
                }
            }
        }
        assert!(
            node.entries.len() <= 1024,
            "the slab stays near the live count: {}",
            node.entries.len()
        );
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
