//! RCBench's six primitives (rcbench §4.2, Prim. 1–6), every call counted (σ, Table 2),
//! the global transaction metadata T^g (§4.1, Eq. 2) and the §5.5 switches that decide
//! how a batch of primitives reaches the memory nodes.
//!
//! | primitive | verbs |
//! | --- | --- |
//! | ReadDI | getRtItemAddr (cuckoo READs, once per item per txn) + READ(addr, size) |
//! | WriteDI | WRITE(item or its tail) |
//! | AModIM | CAS(addr + offset) → granted? |
//! | ReadTM | READ(slot, Θ) + Tid check (mismatch ⇒ NULL) |
//! | WriteTM | READ(slot, Θ), then WRITE if the Tid matches; own T^g: one WRITE |
//! | AModTM | READ(slot, Θ), then CAS on the state word if the Tid matches; own T^g: one CAS |
//!
//! No primitive uses FAA. The getRtItemAddr READs are counted apart (`index_reads`).
//!
//! # T^g
//!
//! A fixed Θ-byte slot at `buf_Tg + Θ·(Tid % Δ)` (Eq. 2) on the node
//! `(Tid % Δ) / R mod MNs`, with `Δ = coordinators · R`: each coordinator owns a ring of
//! `R` = [`TG_RING`] slots and its `seq`-th transaction gets Tid `(seq + 1)·Δ + coord·R +
//! seq mod R` ([`tid_of`]), so `Tid % Δ` walks its ring and no two transactions share a
//! Tid.
//!
//! ```text
//! slot: [tid 8 B][state 8 B: tid << 2 | st][protocol words ...]     (Θ = 16 + 8·extra)
//! ```
//!
//! Invariants:
//! 1. Word 0 is the Tid of the slot's current owner; a reader whose Tid differs sees
//!    NULL: "finished, outcome unknown", never "aborted" (the slot was reused).
//! 2. The state word carries the Tid (`st = Tid‖st`), so an AModTM whose READ saw the
//!    right Tid still fails if the slot is reused before its CAS lands.
//! 3. A transaction writes its own T^g with one WRITE or CAS, no Tid check (nobody else
//!    reuses its slot while it runs).

use dmtx_store::cuckoo::{rt_lookup, CuckooPlace, RtLookup};
use dmtx_verbs::{AtomicId, MnId, Op, Post, ReadId, RemotePtr, VerbError};

pub use dmtx_store::cuckoo::CuckooVerbs as Verbs;

/// T^g slots per coordinator (R).
pub const TG_RING: u64 = 4;
/// T^g state: running.
pub const ST_RN: u64 = 1;
/// T^g state: committed.
pub const ST_CM: u64 = 2;
/// T^g state: aborted.
pub const ST_AB: u64 = 3;
/// Bytes of the T^g words every protocol has (Tid, state).
pub const TG_BASE_BYTES: u64 = 16;
/// Offset of the state word in a T^g slot.
pub const TG_STATE_OFFSET: u64 = 8;

/// The Tid of coordinator `coord`'s (of `coords`) `seq`-th transaction (never 0).
#[inline]
pub fn tid_of(coord: u64, seq: u64, coords: u64) -> u64 {
    assert!(coord < coords);
    let delta = coords * TG_RING;
    (seq + 1) * delta + coord * TG_RING + seq % TG_RING
}

/// A state word: Tid and state (invariant 2).
#[inline]
pub fn state_word(tid: u64, st: u64) -> u64 {
    debug_assert!(st <= 3 && tid < 1 << 62);
    tid << 2 | st
}

/// Where every T^g slot is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TgArea {
    /// Θ: bytes per slot (a multiple of 8, at least [`TG_BASE_BYTES`]).
    pub theta: u64,
    /// Δ: slots per node area (coordinators · R).
    pub delta: u64,
    /// `buf_Tg` on each node, by node index.
    pub bases: Vec<(MnId, u64)>,
}

impl TgArea {
    /// The slot of `tid` (Eq. 2).
    #[inline]
    pub fn slot(&self, tid: u64) -> RemotePtr {
        let i = tid % self.delta;
        let (mn, base) = self.bases[((i / TG_RING) % self.bases.len() as u64) as usize];
        RemotePtr::new(mn, base + self.theta * i)
    }

    /// The state word of `tid`'s slot.
    #[inline]
    pub fn state_ptr(&self, tid: u64) -> RemotePtr {
        let s = self.slot(tid);
        RemotePtr::new(s.mn, s.offset + TG_STATE_OFFSET)
    }
}

/// σ: primitive calls (Table 2).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Sigma {
    /// ReadDI calls.
    pub read_di: u64,
    /// WriteDI calls.
    pub write_di: u64,
    /// AModIM calls.
    pub amod_im: u64,
    /// ReadTM calls.
    pub read_tm: u64,
    /// WriteTM calls.
    pub write_tm: u64,
    /// AModTM calls.
    pub amod_tm: u64,
    /// getRtItemAddr READs (inside ReadDI, counted apart).
    pub index_reads: u64,
}

impl Sigma {
    /// Calls of the six primitives.
    pub fn total(&self) -> u64 {
        self.read_di + self.write_di + self.amod_im + self.read_tm + self.write_tm + self.amod_tm
    }
}

/// The §5.5 switches.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Switches {
    /// Doorbell batching: consecutive dependency-free primitives to one node in one batch.
    pub db: bool,
    /// Outstanding requests: batches for several nodes posted together.
    pub or: bool,
}

impl Default for Switches {
    fn default() -> Self {
        Self { db: true, or: true }
    }
}

/// One T^g slot as READ.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TgView {
    /// The state (`ST_*`).
    pub st: u64,
    /// The raw state word (Tid‖st).
    pub word: u64,
}

/// A coordinator's primitives: the σ counters, the switches, scratch posts (allocated
/// once, reused).
#[derive(Debug, Default)]
pub struct Prims {
    /// Calls so far.
    pub sigma: Sigma,
    /// How batches are posted.
    pub switches: Switches,
    /// Round trips posted (waits), for the RTT table.
    pub waits: u64,
    scratch: Post,
    groups: Vec<(MnId, usize)>,
}

impl Prims {
    /// Primitives posted under `switches`.
    pub fn new(switches: Switches) -> Self {
        Self {
            switches,
            ..Self::default()
        }
    }

    /// getRtItemAddr: the item's table-relative offset and size (cuckoo READs, counted).
    pub async fn locate(
        &mut self,
        v: &mut impl Verbs,
        place: &CuckooPlace,
        key: u64,
        post: &mut Post,
    ) -> Result<RtLookup, VerbError> {
        let (found, reads) = rt_lookup(v, place, key, post).await?;
        self.sigma.index_reads += reads as u64;
        self.waits += reads as u64;
        Ok(found)
    }

    /// Prim. 1 ReadDI: READ the item (after [`locate`](Self::locate)).
    #[inline]
    pub fn read_di(&mut self, post: &mut Post, item: RemotePtr, len: usize) -> ReadId {
        self.sigma.read_di += 1;
        post.read(item, len)
    }

    /// Prim. 2 WriteDI: WRITE (part of) the item.
    #[inline]
    pub fn write_di(&mut self, post: &mut Post, at: RemotePtr, bytes: &[u8]) {
        self.sigma.write_di += 1;
        post.write(at, bytes)
    }

    /// Prim. 2 WriteDI with the bytes encoded in place.
    #[inline]
    pub fn write_di_with(&mut self, post: &mut Post, at: RemotePtr, len: usize, fill: impl FnOnce(&mut [u8])) {
        self.sigma.write_di += 1;
        post.write_with(at, len, fill)
    }

    /// Prim. 3 AModIM: CAS a word of the item; granted iff the old word is `expect`.
    #[inline]
    pub fn amod_im(&mut self, post: &mut Post, word: RemotePtr, expect: u64, swap: u64) -> AtomicId {
        self.sigma.amod_im += 1;
        post.cas(word, expect, swap)
    }

    /// Prim. 4 ReadTM: READ `tid`'s slot; `None` if the slot holds another Tid
    /// (invariant 1).
    pub async fn read_tm(
        &mut self,
        v: &mut impl Verbs,
        post: &mut Post,
        tg: &TgArea,
        tid: u64,
    ) -> Result<Option<TgView>, VerbError> {
        self.sigma.read_tm += 1;
        post.clear();
        let id = post.read(tg.slot(tid), tg.theta as usize);
        self.post(v, post).await?;
        Ok(view(post.bytes(id), tid))
    }

    /// Prim. 4 ReadTM as part of a batch: the READ of `tid`'s slot; check it with
    /// [`tg_view`] once posted.
    #[inline]
    pub fn read_tm_batched(&mut self, post: &mut Post, tg: &TgArea, tid: u64) -> ReadId {
        self.sigma.read_tm += 1;
        post.read(tg.slot(tid), tg.theta as usize)
    }

    /// Prim. 5 WriteTM on another transaction's slot: READ, then WRITE `bytes` at
    /// `offset` (≥ 16) if the Tid matches; false (NULL) otherwise.
    pub async fn write_tm(
        &mut self,
        v: &mut impl Verbs,
        post: &mut Post,
        tg: &TgArea,
        tid: u64,
        offset: u64,
        bytes: &[u8],
    ) -> Result<bool, VerbError> {
        assert!(
            offset >= TG_BASE_BYTES,
            "WriteTM never overwrites the Tid or state word"
        );
        self.sigma.write_tm += 1;
        post.clear();
        let slot = tg.slot(tid);
        let id = post.read(slot, tg.theta as usize);
        self.post(v, post).await?;
        if view(post.bytes(id), tid).is_none() {
            return Ok(false);
        }
        post.clear();
        post.write(RemotePtr::new(slot.mn, slot.offset + offset), bytes);
        self.post(v, post).await?;
        Ok(true)
    }

    /// Prim. 5 WriteTM on the transaction's own slot: one WRITE of its words from 0
    /// (invariant 3).
    #[inline]
    pub fn write_own_tm(&mut self, post: &mut Post, tg: &TgArea, tid: u64, words: &[u8]) {
        self.sigma.write_tm += 1;
        post.write(tg.slot(tid), words)
    }

    /// Prim. 6 AModTM on another transaction's state: READ, then CAS `st_from → st_to`
    /// with the Tid in the word (invariant 2). `None` when the slot holds another Tid
    /// (at the READ or at the CAS), else whether the CAS took.
    pub async fn amod_tm(
        &mut self,
        v: &mut impl Verbs,
        post: &mut Post,
        tg: &TgArea,
        tid: u64,
        st_from: u64,
        st_to: u64,
    ) -> Result<Option<bool>, VerbError> {
        self.sigma.amod_tm += 1;
        post.clear();
        let id = post.read(tg.slot(tid), tg.theta as usize);
        self.post(v, post).await?;
        let Some(seen) = view(post.bytes(id), tid) else {
            return Ok(None);
        };
        if seen.st != st_from {
            return Ok(Some(false));
        }
        post.clear();
        let cas = post.cas(tg.state_ptr(tid), state_word(tid, st_from), state_word(tid, st_to));
        self.post(v, post).await?;
        let old = post.old(cas);
        Ok(match old >> 2 == tid {
            false => None,
            true => Some(old == state_word(tid, st_from)),
        })
    }

    /// Prim. 6 AModTM on the transaction's own state: one CAS (invariant 3).
    #[inline]
    pub fn amod_own_tm(&mut self, post: &mut Post, tg: &TgArea, tid: u64, st_from: u64, st_to: u64) -> AtomicId {
        self.sigma.amod_tm += 1;
        post.cas(tg.state_ptr(tid), state_word(tid, st_from), state_word(tid, st_to))
    }

    /// Post `post` as the switches allow (§5.5), results in `post` as if posted whole:
    /// db and or on, one post (one round trip); db off, each op alone; or off, each
    /// node's batch alone. Ops to one node keep their order either way.
    pub async fn post(&mut self, v: &mut impl Verbs, post: &mut Post) -> Result<(), VerbError> {
        if post.is_empty() {
            return Ok(());
        }
        let Switches { db, or, .. } = self.switches;
        if db && or {
            self.waits += 1;
            return v.post(post).await;
        }
        // Group ops: (node, op index) per group start; a group is a run of ops
        // to one node (db) or one op (!db).
        self.groups.clear();
        for (i, op) in post.ops().iter().enumerate() {
            self.groups.push((op.ptr().mn, i));
        }
        let n = post.ops().len();
        let mut waves: Vec<Vec<usize>> = Vec::new();
        if db {
            // One batch per node (op order kept within it); or off: one node at a time.
            let mut mns: Vec<MnId> = self.groups.iter().map(|g| g.0).collect();
            mns.dedup();
            let mut seen = Vec::new();
            for mn in mns {
                if seen.contains(&mn) {
                    continue;
                }
                seen.push(mn);
                waves.push((0..n).filter(|&i| self.groups[i].0 == mn).collect());
            }
        } else if or {
            // One op per node per wave: the k-th op of every node together.
            let mut done = vec![false; n];
            while done.iter().any(|d| !d) {
                let mut wave = Vec::new();
                let mut mns = Vec::new();
                for i in 0..n {
                    if !done[i] && !mns.contains(&self.groups[i].0) {
                        mns.push(self.groups[i].0);
                        // An op waits for every earlier op to its node.
                        if (0..i).all(|j| done[j] || self.groups[j].0 != self.groups[i].0) {
                            wave.push(i);
                        }
                    }
                }
                for &i in &wave {
                    done[i] = true;
                }
                waves.push(wave);
            }
        } else {
            waves.extend((0..n).map(|i| vec![i]));
        }
        for wave in waves {
            self.scratch.clear();
            let mut ids = Vec::with_capacity(wave.len());
            for &i in &wave {
                let op = post.ops()[i];
                let id = match op {
                    Op::Read { ptr, len, .. } => Some(self.scratch.read(ptr, len as usize).into()),
                    Op::Write { ptr, .. } => {
                        self.scratch.write(ptr, post.write_data(&op));
                        None
                    }
                    Op::Cas { ptr, expect, swap } => Some(Sub::Atomic(self.scratch.cas(ptr, expect, swap))),
                    Op::Faa { ptr, add } => Some(Sub::Atomic(self.scratch.faa(ptr, add))),
                    Op::Flush { ptr } => {
                        self.scratch.flush(ptr);
                        None
                    }
                };
                ids.push(id);
            }
            self.waits += 1;
            v.post(&mut self.scratch).await?;
            for (&i, id) in wave.iter().zip(ids) {
                match id {
                    Some(Sub::Read(r)) => post.read_dst(i).copy_from_slice(self.scratch.bytes(r)),
                    Some(Sub::Atomic(a)) => post.set_old(i, self.scratch.old(a)),
                    None => {}
                }
            }
        }
        Ok(())
    }
}

enum Sub {
    Read(ReadId),
    Atomic(AtomicId),
}

impl From<ReadId> for Sub {
    fn from(r: ReadId) -> Self {
        Sub::Read(r)
    }
}

/// The slot bytes as `tid`'s, or `None` when another Tid holds it (invariant 1).
pub fn tg_view(slot: &[u8], tid: u64) -> Option<TgView> {
    view(slot, tid)
}

fn view(slot: &[u8], tid: u64) -> Option<TgView> {
    let w = |o: usize| u64::from_le_bytes(slot[o..o + 8].try_into().expect("8 bytes"));
    let word = w(TG_STATE_OFFSET as usize);
    (w(0) == tid && word >> 2 == tid).then_some(TgView { st: word & 3, word })
}
