//! T/O with cascading aborts on RCBench's primitives (rcbench.txt §4.1, §5.2, Alg. 3,
//! §5.5; issue 30 item 6). Isolation: **serializable** (timestamp order by bts).
//!
//! ```text
//! item: [pk 8 B][X^d][version 8 B][rts 8 B][wts 8 B][wL: WL_MAX Tids, 0 = free][latch 8 B]
//! T^g:  [tid 8 B][state 8 B: tid << 2 | RN/CM/AB]    (crate::rcbench::tg, as Wound-Wait)
//! ```
//!
//! - **Read** (Alg. 3 l. 12–24), every item in execute, one at a time: ReadDI; abort
//!   (`lock_conflict`) if `wts > bts` or the latch is held. Then a second ReadDI, always
//!   (l. 16 is outside the `if`); when `rts < bts` the CAS `rts → bts` goes before it in
//!   its batch (§5.5), retried from the returned word while that is `< bts`. The two
//!   READs must agree on every word but rts, with the latch 0 in both (a READ races a
//!   WriteDI word by word: new, old, new; end stamps would miss it), else
//!   `lock_conflict`. `bL ∪= wL`.
//! - **Write** (l. 1–10) of every written item, one at a time, at the start of the
//!   commit (the workload hands its new values to `commit`): the latch CAS with ReadDI
//!   after it (the own T^g ⟨Tid, RN⟩ WRITE rides with the first). Refused latch,
//!   `max(rts, wts) > bts` or a dirty item (`wL ≠ ∅`) ⇒ abort. Then a WriteDI:
//!   `X^d = new`, `wts = bts`, `wL ∪= {Tid}`, latch 0 (the highest word, last). The old
//!   image is kept for a restore. A later item's refusal aborts with earlier writes out:
//!   their readers cascade.
//! - **Commit** (l. 26–41): ReadTM every bL entry, all in one post, until none is RN;
//!   AB ⇒ abort `cascade`, a reused slot (another Tid) ⇒ abort `tmeta_gone` (the
//!   outcome is unknown, issue 30 item 3). bL holds only older transactions (a
//!   readable wL writer has `wts ≤ bts`), so the waits form no cycle. Then one post: own
//!   st ← CM, each written item's latch CAS (spin on refusal) with ReadDI after it, the
//!   backups' final images; then WriteDI with `wL −= Tid` and latch 0.
//! - **Abort** (cleanup): items latched but not yet written are unlatched (CAS latch →
//!   0). When writes are out: own st ← AB with each written item's latch CAS and ReadDI
//!   in one post, then WriteDI of the old X^d, version and wts with the current rts,
//!   `wL −= Tid`, latch 0.
//!
//! # The restore rule
//!
//! The paper (§5.2) lets a write land over a dirty write and has a restorer skip its
//! restore when a predecessor aborted. That races: T2 sees T1 RN, T1 restores v0, T2's
//! restore of T1's value v1 lands last and v1, aborted, stays. Here a write over a dirty
//! write (`wL ≠ ∅`) aborts (`lock_conflict`), so wL holds at most one Tid and a restore
//! is unconditional. The paper's rule is kept as the broken variant
//! [`ToVariant::PaperRestore`] (its restore also unlatched, as the text has it), which the
//! checker catches.
//!
//! # Round trips (`BUDGET` in `tests/rcbench_to.rs`)
//!
//! After index lookups (`addr_cache=on` or ≈1.6 cuckoo READs per item), db+or on, one
//! replica, uncontended; n items, each read in execute:
//!
//! | | execute | commit | total |
//! | --- | --- | --- | --- |
//! | read-only | 2n | 0 (+k if bL ≠ ∅) | 2n (+k) |
//! | read-write, w written | 2n | 2w + 2 (+k) | 2n + 2w + 2 (+k) |
//!
//! A writer's commit: per written item latch + ReadDI (own RN with the first) and the
//! dirty WriteDI; k bL polls; own CM + every latch + ReadDI in one post; the final
//! WriteDIs. Backups ride in the CM post. The issue's row counts a read-modify-write as
//! a Read and a Write among the n (`2n + 2`); that is the read-write row here. A
//! read-only commit writes no state (the issue's `2n + 1` writes CM): no Tid of a
//! read-only transaction is ever in a wL, so nobody reads its T^g.
//!
//! With db and or off (Table 3 "one-sided") every verb waits alone: a Read is 3 (ReadDI,
//! rts CAS, ReadDI), a Write 3 (latch CAS, ReadDI, WriteDI; +1 for the first's RN
//! WRITE), the commit's CM post 1 + 2w and its final WriteDIs w.
//!
//! # What dmtx pays beyond RCBench
//!
//! Every item and T^g is remote; a write's value is only known at commit, so the Writes
//! run there (the paper's run in execution) and a read-modify-write costs its Read and
//! its Write; backups (RCBench has none) get the final image before the latch goes.
//!
//! # Choices where the paper is silent
//!
//! - **bts** `(clock ns / 16 + 1) << 24 | CN ‖ thread ‖ coroutine` (as Wait-Die), raised
//!   above the coordinator's previous one, new for every attempt (a restart is a new T/O
//!   transaction). A new Tid per attempt, from the coordinator's T^g ring.
//! - **Latch word**: `(coordinator id + 1) << 1 | 1`, so an unlatch CAS frees only its own.
//! - **Waits**: bL polls and commit latch spins pause [`WAIT_PAUSE_NS`]; the bL wait
//!   gives up after [`BL_POLLS_MAX`] polls (`lock_conflict`), a bound, not a policy.
//!   The latch spins of the commit's wL removal and of a restore are not bounded by an
//!   abort (the transaction is decided, or must undo): a coordinator paused while it
//!   holds that latch holds them up until it resumes (after [`LATCH_SPINS_MAX`] tries
//!   the spinner panics).
//! - **rts CAS** retried at most [`RTS_CAS_TRIES_MAX`] times, then `lock_conflict`.
//! - **Inserts**: an insert over a deleted item (tombstone) is a Read and a Write; an
//!   insert of a key the index lacks claims a fresh slot in execute, latched
//!   ([`crate::rcbench::insert`], as No-Wait), and keeps the latch until its Write at
//!   commit (its old image the claimed tombstone); an abort before indexing frees the
//!   slot, after it leaves a tombstone.
//! - **Version word** (X^m's first): the last writer's transaction id, bit 63 a tombstone,
//!   as No-Wait.
//! - **Failures**: no log; a verb failing mid-commit leaves it partial (the suite runs
//!   without faults), and a coordinator that stops while in a wL leaves its readers
//!   waiting until its slot is reused or their bound.
//! - **cascade=off** (§5.2 Discussion, [6]): not built; `--set cascade=off` is refused.
//!   The design it would follow, for the record: X^m gets pwL, a fixed list of pending
//!   ⟨Tid, bts⟩ in place of wL (full ⇒ abort). A commit pre-writes each written item
//!   (latch + ReadDI; `max(rts, wts) > bts` ⇒ abort; pwL ∪= ⟨Tid, bts⟩; WriteDI of X^m
//!   with latch 0, X^d untouched), then polls each item (ReadDI) until no older pending
//!   entry remains, then installs (latch + ReadDI; X^d = new, wts = bts, pwL −= Tid;
//!   WriteDI with latch 0). A Read whose item has a pending entry older than its bts
//!   polls until it is gone, then reads as above; a younger entry does not stop it (the
//!   read orders before that write). Reads are never buffered, so prL is not needed;
//!   an abort removes its pwL entries under the latch. Every wait is on an older
//!   transaction, so none forms a cycle.

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, AbortReason, AbortReasonSpec, Access, CoordCtx, Coordinator, Isolation, KnobError, KnobSpec, Knobs,
    MetricKind, MetricSpec, Phase, Protocol, Result, Txn,
};
use dmtx_store::cuckoo::RtLookup;
use dmtx_store::SlotLayout;
use dmtx_verbs::{Post, RemotePtr};

use crate::rcbench::layout::{ItemLayout, TOMBSTONE};
use crate::rcbench::prims::{state_word, tg_view, tid_of, Prims, Sigma, Switches, TgArea, ST_AB, ST_CM, ST_RN};
use crate::rcbench::tg::TG_COORDS;
use crate::rcbench::{CpuMeter, CtxVerbs, OnOff};

/// wL entries per item (the authors' code: 10).
pub const WL_MAX: usize = 10;
/// Polls of the bL states before giving up.
pub const BL_POLLS_MAX: u32 = 100_000;
/// Pause between two bL polls or latch tries.
pub const WAIT_PAUSE_NS: u64 = 1_000;
/// Refused rts CASes retried from the returned word.
pub const RTS_CAS_TRIES_MAX: u32 = 16;
/// Latch tries at commit or restore before the spinner panics (holders are short
/// unless paused).
pub const LATCH_SPINS_MAX: u32 = 1_000_000;

/// Meta word indexes (after X^d).
const M_VERSION: u32 = 0;
const M_RTS: u32 = 1;
const M_WTS: u32 = 2;
const M_WL: u32 = 3;

/// Abort reason: a bL transaction aborted.
pub const ABORT_CASCADE: u8 = 0;
/// Abort reason: a bL transaction's T^g slot holds another Tid.
pub const ABORT_TMETA_GONE: u8 = 1;
/// Abort reason: an insert found its key's three cuckoo candidates taken.
pub const ABORT_INDEX_FULL: u8 = 2;

/// Metric: ReadDI calls (σ).
pub const METRIC_SIGMA_READ_DI: usize = 0;
/// Metric: WriteDI calls.
pub const METRIC_SIGMA_WRITE_DI: usize = 1;
/// Metric: AModIM calls.
pub const METRIC_SIGMA_AMOD_IM: usize = 2;
/// Metric: ReadTM calls.
pub const METRIC_SIGMA_READ_TM: usize = 3;
/// Metric: WriteTM and AModTM calls.
pub const METRIC_SIGMA_TM_WRITES: usize = 4;
/// Metric: getRtItemAddr READs.
pub const METRIC_INDEX_READS: usize = 5;
/// Metric: CPU time of committed attempts.
pub const METRIC_CPU_COMMITTED: usize = 6;
/// Metric: bL polls that found a transaction still running.
pub const METRIC_WAIT_RETRIES: usize = 7;

const METRICS: &[MetricSpec] = &[
    MetricSpec::new(
        "sigma_read_di",
        MetricKind::Counter,
        "ReadDI calls (σ, rcbench Table 2)",
    ),
    MetricSpec::new("sigma_write_di", MetricKind::Counter, "WriteDI calls (σ)"),
    MetricSpec::new("sigma_amod_im", MetricKind::Counter, "AModIM calls (σ)"),
    MetricSpec::new("sigma_read_tm", MetricKind::Counter, "ReadTM calls (σ)"),
    MetricSpec::new("sigma_tm_writes", MetricKind::Counter, "WriteTM and AModTM calls (σ)"),
    MetricSpec::new(
        "index_reads",
        MetricKind::Counter,
        "getRtItemAddr READs of the cuckoo index",
    ),
    MetricSpec::new(
        "cpu_committed",
        MetricKind::Duration,
        "CPU time of committed attempts between verb waits; U_CPU^e (rcbench §1) = its share × coroutines per thread",
    ),
    MetricSpec::new(
        "wait_retries",
        MetricKind::Counter,
        "bL polls that found a transaction still running (commit waits, Alg. 3 l. 29)",
    ),
];

const ABORT_REASONS: &[AbortReasonSpec] = &[
    AbortReasonSpec::new(
        "cascade",
        true,
        "a transaction whose dirty write this one read aborted (cascading abort, rcbench §5.2)",
    ),
    AbortReasonSpec::new(
        "tmeta_gone",
        true,
        "a transaction whose dirty write this one read finished and its T^g slot was reused before its outcome was seen; its outcome is unknown, so this one aborts",
    ),
    AbortReasonSpec::new(
        "index_full",
        false,
        "an insert found its key's three cuckoo candidates held by other keys (no run-time kicks); load fewer keys or grow the table's capacity",
    ),
];

const ADDR_CACHE: KnobSpec = KnobSpec {
    name: "addr_cache",
    default: "off",
    help: "keep item addresses across transactions (on) or look every item up once per transaction (off)",
};

const CASCADE: KnobSpec = KnobSpec {
    name: "cascade",
    default: "on",
    help: "on: writes in place, cascading aborts (rcbench Alg. 3); off (buffered writes, pending lists) is not built",
};

/// Protocol variants. Every one but [`ToVariant::Fixed`] is deliberately broken and
/// exists only so tests can show the isolation checker catches it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ToVariant {
    /// As documented.
    #[default]
    Fixed,
    /// The commit does not wait for bL: a dirty read commits before its writer's outcome.
    NoBlWait,
    /// The paper's rule: a write over a dirty write is allowed, and a restore, unlatched,
    /// is skipped when a predecessor on the item is seen aborted.
    PaperRestore,
}

/// T/O's settings.
#[derive(Copy, Clone, Debug, Default)]
pub struct ToConfig {
    /// §5.5 switches.
    pub switches: Switches,
    /// Cross-transaction address cache.
    pub addr_cache: bool,
    /// Test-only variant.
    pub variant: ToVariant,
}

/// T/O with cascading aborts.
#[derive(Clone, Debug)]
pub struct To {
    cfg: ToConfig,
    layout: ItemLayout,
}

impl To {
    /// T/O with `cfg`.
    pub fn new(cfg: ToConfig) -> Self {
        Self {
            cfg,
            layout: ItemLayout {
                meta_words: M_WL + WL_MAX as u32,
            },
        }
    }

    /// T/O with a test-only broken `variant`.
    pub fn with_variant(mut cfg: ToConfig, variant: ToVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }

    /// The item layout.
    pub fn item_layout(&self) -> ItemLayout {
        self.layout
    }
}

/// Where an object stands.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ToHold {
    /// Nothing held, nothing written.
    #[default]
    None,
    /// Latched for the Write, not yet written.
    Latched,
    /// Written (dirty, the Tid in wL): a restore or the commit's wL removal is due.
    Dirty,
    /// A fresh slot claimed and latched, not indexed: an abort frees it.
    Claimed,
}

/// T/O's per-object state.
#[derive(Debug, Default)]
pub struct ToObj {
    rel: u64,
    hold: ToHold,
    /// Offset of the item's image before the Write in the coordinator's `olds`.
    old_at: usize,
    /// An insert's fresh slot, latched since execute: its Write skips the latch.
    fresh: bool,
}

/// T/O's per-coordinator state.
pub struct ToCoord {
    prims: Prims,
    post: Post,
    backups: Post,
    latch: u64,
    bts: u64,
    coord: u64,
    dense: u64,
    seq: u64,
    tid: u64,
    attempt_seq: u64,
    tg: TgArea,
    /// bL: Tids this attempt depends on.
    bl: Vec<u64>,
    /// Item images before the Write, and scratch images.
    olds: Vec<u8>,
    image: Vec<u8>,
    first: Vec<u8>,
    /// Per table: this coordinator's overflow bucket (next free slot, slots left).
    overflow: Vec<(u32, u64, u32)>,
    reported: Sigma,
    meter: CpuMeter,
}

fn word(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn set_word(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn abort(reason: AbortReason) -> Abort {
    Abort::new(reason)
}

fn fault<E>(_: E) -> Abort {
    abort(AbortReason::Fault)
}

/// Offsets of an item's words for values of `vb` bytes.
#[derive(Copy, Clone)]
struct Offs {
    len: usize,
    data: usize,
    version: usize,
    rts: usize,
    wts: usize,
    wl: usize,
    lock: usize,
}

impl Offs {
    fn new(l: ItemLayout, vb: u32) -> Self {
        let m = l.meta_off(vb) as usize;
        Self {
            len: l.item_bytes(vb) as usize,
            data: l.data_off() as usize,
            version: m + 8 * M_VERSION as usize,
            rts: m + 8 * M_RTS as usize,
            wts: m + 8 * M_WTS as usize,
            wl: m + 8 * M_WL as usize,
            lock: l.lock_off(vb) as usize,
        }
    }

    /// The Tids in an item's wL.
    fn wl<'b>(&self, item: &'b [u8]) -> impl Iterator<Item = u64> + 'b {
        let wl = self.wl;
        (0..WL_MAX).map(move |k| word(item, wl + 8 * k)).filter(|&t| t != 0)
    }
}

impl Protocol for To {
    type CoordState = ToCoord;
    type ObjState = ToObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "to";
    const ABOUT: &'static str =
        "T/O with cascading aborts on RCBench's primitives, T^g and cuckoo index (rcbench §5.2, Alg. 3)";
    const KNOBS: &'static [KnobSpec] = &[CASCADE, ADDR_CACHE, crate::rcbench::DB, crate::rcbench::OR];
    const METRICS: &'static [MetricSpec] = METRICS;
    const ABORT_REASONS: &'static [AbortReasonSpec] = ABORT_REASONS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        if !knobs.get::<OnOff>(&CASCADE)?.0 {
            return Err(KnobError::Invalid {
                key: CASCADE.name.into(),
                value: "off".into(),
                why: "T/O without cascading aborts (buffered writes, pending lists) is not built; use cascade=on"
                    .into(),
            });
        }
        Ok(Self::new(ToConfig {
            switches: crate::rcbench::switches(knobs)?,
            addr_cache: knobs.get::<OnOff>(&ADDR_CACHE)?.0,
            variant: ToVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }

    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }

    fn setup_run(&self, control: &dyn Control) -> Result<()> {
        crate::rcbench::tg::setup_tg(control)
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<ToCoord> {
        let (dense, tg) = crate::rcbench::tg::tg_area(ctx, control, Self::NAME)?;
        Ok(ToCoord {
            prims: Prims::new(self.cfg.switches),
            post: Post::new(),
            backups: Post::new(),
            latch: (ctx.id.global() + 1) << 1 | 1,
            bts: 0,
            coord: ctx.id.compact() as u64,
            dense,
            seq: 0,
            tid: 0,
            attempt_seq: 0,
            tg,
            bl: Vec::new(),
            olds: Vec::new(),
            image: Vec::new(),
            first: Vec::new(),
            overflow: Vec::new(),
            reported: Sigma::default(),
            meter: CpuMeter::default(),
        })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        begin_attempt(txn.coord);
        let n = txn.coord.set.objs.len();
        for i in txn.coord.set.fetched..n {
            read_one(txn.coord, i).await?;
            txn.coord.set.fetched = i + 1;
        }
        Ok(())
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        begin_attempt(txn.coord);
        commit(txn.coord).await?;
        let c = &mut *txn.coord;
        let ns = c.state.meter.finish(c.ctx.clock.now_ns());
        c.ctx.metric_ns(METRIC_CPU_COMMITTED, ns);
        Ok(())
    }

    fn abort(_txn: &mut Txn<'_, Self>) {
        // Unlatches and restores wait for completions: `cleanup` does them.
    }

    async fn cleanup(coord: &mut Coordinator<Self>) {
        coord.state.meter.reset();
        if coord.set.phase != Phase::Committed {
            restore_all(coord).await;
        }
        report_sigma(coord);
    }
}

/// Start an attempt (once per `txn_seq`): the CPU meter, a new bts and Tid, empty bL.
fn begin_attempt(c: &mut Coordinator<To>) {
    let now = c.ctx.clock.now_ns();
    c.state.meter.start(now);
    if c.state.attempt_seq == c.set.txn_seq {
        return;
    }
    let st = &mut c.state;
    st.attempt_seq = c.set.txn_seq;
    debug_assert!(st.coord < 1 << 24);
    let clock_bts = ((now >> 4) + 1) << 24 | st.coord;
    st.bts = clock_bts.max(st.bts + (1 << 24));
    st.tid = tid_of(st.dense, st.seq, TG_COORDS);
    st.seq += 1;
    st.bl.clear();
    st.olds.clear();
}

fn add_bl(bl: &mut Vec<u64>, tid: u64) {
    if !bl.contains(&tid) {
        bl.push(tid);
    }
}

/// Alg. 3 Read: two ReadDIs, the rts CAS before the second.
async fn read_one(c: &mut Coordinator<To>, i: usize) -> std::result::Result<(), Abort> {
    let catalog = std::sync::Arc::clone(&c.ctx.catalog);
    let (table, key, access) = {
        let o = &c.set.objs[i];
        (o.table, o.key, o.access)
    };
    let info = catalog.get(table).expect("table checked at add");
    let place = *info
        .cuckoo
        .first()
        .expect("to's layout chooses the cuckoo index for every table");
    let layout = c.proto.layout;
    let vb = info.meta.value_bytes;
    let off = Offs::new(layout, vb);
    let st = &mut c.state;
    let cached = match c.proto.cfg.addr_cache {
        true => c.ctx.cache.get(table, key),
        false => None,
    };
    let found = match cached {
        Some(addr) => RtLookup::Found {
            addr,
            size: off.len as u64,
        },
        None => st
            .prims
            .locate(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &place, key, &mut st.post)
            .await
            .map_err(fault)?,
    };
    let rel = match found {
        RtLookup::Found { addr, .. } => {
            if c.proto.cfg.addr_cache && cached.is_none() {
                c.ctx.cache.put(table, key, addr);
            }
            addr
        }
        RtLookup::InFlight => return Err(abort(AbortReason::LockConflict)),
        RtLookup::Absent if access == Access::Insert => return insert_one(c, i, info, &place).await,
        RtLookup::Absent => return Err(abort(AbortReason::NotFound)),
    };
    c.set.objs[i].proto.rel = rel;
    let item = info.ptr(0, rel);
    let rts_ptr = RemotePtr::new(item.mn, item.offset + off.rts as u64);
    let st = &mut c.state;
    let bts = st.bts;
    st.post.clear();
    let r1 = st.prims.read_di(&mut st.post, item, off.len);
    st.prims
        .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
        .await
        .map_err(fault)?;
    st.first.clear();
    st.first.extend_from_slice(st.post.bytes(r1));
    if word(&st.first, off.lock) != 0 || word(&st.first, off.wts) > bts {
        return Err(abort(AbortReason::LockConflict));
    }
    let mut rts = word(&st.first, off.rts);
    let mut tries = 0;
    let r2 = loop {
        st.post.clear();
        let cas = (rts < bts).then(|| st.prims.amod_im(&mut st.post, rts_ptr, rts, bts));
        let r2 = st.prims.read_di(&mut st.post, item, off.len);
        st.prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await
            .map_err(fault)?;
        match cas.map(|a| st.post.old(a)) {
            Some(old) if old != rts && old < bts => {
                tries += 1;
                if tries >= RTS_CAS_TRIES_MAX {
                    return Err(abort(AbortReason::LockConflict));
                }
                rts = old;
            }
            _ => break r2,
        }
    };
    let second = st.post.bytes(r2);
    // Every word but rts the same, latch 0 in both.
    if second[..off.rts] != st.first[..off.rts] || second[off.rts + 8..] != st.first[off.rts + 8..] {
        return Err(abort(AbortReason::LockConflict));
    }
    for t in off.wl(second) {
        add_bl(&mut st.bl, t);
    }
    let version = word(second, off.version);
    let tomb = version & TOMBSTONE != 0;
    match (access, tomb) {
        (Access::Insert, false) => return Err(abort(AbortReason::Duplicate)),
        (Access::Insert, true) => return Ok(()),
        (_, true) => return Err(abort(AbortReason::NotFound)),
        (_, false) => {}
    }
    let len = c.set.objs[i].value_len as usize;
    c.set
        .value_mut(i)
        .copy_from_slice(&c.state.post.bytes(r2)[off.data..off.data + len]);
    c.set.objs[i].version_read = Some(version);
    Ok(())
}

/// The written objects' item pointers and offsets.
fn item_of(c: &Coordinator<To>, i: usize) -> (RemotePtr, Offs) {
    let o = &c.set.objs[i];
    let info = c.ctx.catalog.get(o.table).expect("table checked at add");
    (
        info.ptr(0, o.proto.rel),
        Offs::new(c.proto.layout, info.meta.value_bytes),
    )
}

fn lock_of(item: RemotePtr, off: &Offs) -> RemotePtr {
    RemotePtr::new(item.mn, item.offset + off.lock as u64)
}

/// Latch every object in `objs` (CAS 0 → latch, ReadDI after it, in one post per
/// round, `extra` added to the first), spinning on refusals; returns the READs' bytes
/// concatenated in `image` in `objs` order.
async fn latch_all(
    c: &mut Coordinator<To>,
    objs: &[usize],
    mut extra: impl FnMut(&mut ToCoord),
) -> std::result::Result<(), Abort> {
    let mut todo: Vec<usize> = objs.to_vec();
    let mut got: Vec<(usize, Vec<u8>)> = Vec::with_capacity(objs.len());
    let mut first = true;
    for _ in 0..LATCH_SPINS_MAX {
        if todo.is_empty() {
            break;
        }
        let ptrs: Vec<(RemotePtr, Offs)> = todo.iter().map(|&i| item_of(c, i)).collect();
        let st = &mut c.state;
        st.post.clear();
        if first {
            extra(st);
            first = false;
        }
        let ids: Vec<_> = ptrs
            .iter()
            .map(|(item, off)| {
                let cas = st.prims.amod_im(&mut st.post, lock_of(*item, off), 0, st.latch);
                let r = st.prims.read_di(&mut st.post, *item, off.len);
                (cas, r)
            })
            .collect();
        st.prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await
            .map_err(fault)?;
        let mut left = Vec::new();
        for (&i, (cas, r)) in todo.iter().zip(ids) {
            if st.post.old(cas) == 0 {
                got.push((i, st.post.bytes(r).to_vec()));
            } else {
                left.push(i);
            }
        }
        todo = left;
        if !todo.is_empty() {
            let clock = std::sync::Arc::clone(&c.ctx.clock);
            c.state.meter.pause(clock.now_ns());
            dmtx_runtime::sleep(clock.as_ref(), WAIT_PAUSE_NS).await;
            c.state.meter.resume(clock.now_ns());
        }
    }
    assert!(todo.is_empty(), "latches not taken in {LATCH_SPINS_MAX} tries");
    let st = &mut c.state;
    st.image.clear();
    for &i in objs {
        let b = &got.iter().find(|g| g.0 == i).expect("latched").1;
        st.image.extend_from_slice(b);
    }
    Ok(())
}

async fn commit(c: &mut Coordinator<To>) -> std::result::Result<(), Abort> {
    let writes: Vec<usize> = (0..c.set.objs.len())
        .filter(|&i| c.set.objs[i].access.writes())
        .collect();
    let variant = c.proto.cfg.variant;
    let bts = c.state.bts;
    let tid = c.state.tid;
    let txn_id = c.set.txn_id;
    assert!(txn_id & TOMBSTONE == 0, "transaction ids stay below bit 63");
    // Alg. 3 Write, one item at a time (as RCBench's items): latch + ReadDI (the own
    // ⟨Tid, RN⟩ with the first), the checks, then the dirty WriteDI.
    for (n, &i) in writes.iter().enumerate() {
        write_one(c, i, n == 0).await?;
    }
    if variant != ToVariant::NoBlWait {
        wait_bl(c).await?;
    }
    if writes.is_empty() {
        return Ok(());
    }
    // Own st ← CM, latch + ReadDI every written item (spin), backups' final images.
    let mut backups = std::mem::take(&mut c.state.backups);
    backups.clear();
    for &i in &writes {
        let (_, off) = item_of(c, i);
        let o = &c.set.objs[i];
        let info = c.ctx.catalog.get(o.table).expect("table checked at add");
        if info.replica_count() < 2 {
            continue;
        }
        let st = &mut c.state;
        st.image.clear();
        st.image
            .extend_from_slice(&st.olds[o.proto.old_at..o.proto.old_at + off.len]);
        if o.access != Access::Delete {
            st.image[off.data..off.data + o.value_len as usize].copy_from_slice(c.set.value(i));
        }
        let version = match o.access {
            Access::Delete => txn_id | TOMBSTONE,
            _ => txn_id,
        };
        set_word(&mut st.image, off.version, version);
        set_word(&mut st.image, off.wts, bts);
        set_word(&mut st.image, off.lock, 0);
        for r in 1..info.replica_count() {
            st.prims.write_di(&mut backups, info.ptr(r, o.proto.rel), &st.image);
        }
    }
    let mut cm = [0u8; 16];
    cm[..8].copy_from_slice(&tid.to_le_bytes());
    cm[8..].copy_from_slice(&state_word(tid, ST_CM).to_le_bytes());
    latch_all(c, &writes, |st| {
        st.prims.write_own_tm(&mut st.post, &st.tg, tid, &cm);
        for op in 0..backups.ops().len() {
            let o = backups.ops()[op];
            st.post.write(o.ptr(), backups.write_data(&o));
        }
    })
    .await?;
    c.state.backups = backups;
    // WriteDI: wL −= Tid, latch 0.
    remove_tid(c, &writes);
    let st = &mut c.state;
    st.prims
        .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
        .await
        .map_err(fault)?;
    for &i in &writes {
        c.set.objs[i].proto.hold = ToHold::None;
    }
    Ok(())
}

/// An insert of a key the index lacks ([`crate::rcbench::insert`]): the fresh slot
/// stays latched until the commit's Write; its old image is the claimed tombstone.
async fn insert_one(
    c: &mut Coordinator<To>,
    i: usize,
    info: &dmtx_store::TableInfo,
    place: &dmtx_store::cuckoo::CuckooPlace,
) -> std::result::Result<(), Abort> {
    use crate::rcbench::insert::{insert_fresh, FreshCtx, FreshFail, FreshStage};
    let (table, key) = (c.set.objs[i].table, c.set.objs[i].key);
    let mine: Vec<u64> = c.set.objs[..i]
        .iter()
        .filter(|o| o.table == table && o.proto.hold != ToHold::None)
        .map(|o| o.proto.rel)
        .collect();
    let layout = c.proto.layout;
    let st = &mut c.state;
    let f = insert_fresh(
        &mut CtxVerbs(&mut c.ctx, &mut st.meter),
        &mut st.prims,
        &mut st.post,
        &mut st.overflow,
        FreshCtx {
            info,
            place,
            layout,
            key,
            lock_val: st.latch,
            mine: &mine,
        },
    )
    .await;
    let o = &mut c.set.objs[i].proto;
    o.rel = f.rel;
    o.hold = match f.stage {
        FreshStage::None => ToHold::None,
        FreshStage::Locked | FreshStage::Indexed => ToHold::Latched,
        FreshStage::Claimed => ToHold::Claimed,
    };
    match f.result {
        Ok(()) => {
            let off = Offs::new(layout, info.meta.value_bytes);
            o.fresh = true;
            o.old_at = st.olds.len();
            let at = st.olds.len();
            st.olds.resize(at + off.len, 0);
            set_word(&mut st.olds[at..], 0, key + 1);
            set_word(&mut st.olds[at..], off.version, TOMBSTONE);
            if c.proto.cfg.addr_cache {
                c.ctx.cache.put(table, key, f.rel);
            }
            Ok(())
        }
        Err(FreshFail::Fault) => Err(abort(AbortReason::Fault)),
        Err(FreshFail::TableFull) => {
            c.ctx.last_table_full = Some(table);
            Err(abort(AbortReason::TableFull))
        }
        Err(FreshFail::Conflict) => Err(abort(AbortReason::LockConflict)),
        Err(FreshFail::IndexFull) => Err(abort(AbortReason::Protocol(ABORT_INDEX_FULL))),
    }
}

/// Alg. 3 Write of object `i`: latch + ReadDI (with the own ⟨Tid, RN⟩ when `first`);
/// refused latch, `max(rts, wts) > bts` or a dirty item ⇒ abort; else keep the old image
/// and WriteDI `X^d = new`, `wts = bts`, `wL ∪= {Tid}`, latch 0.
async fn write_one(c: &mut Coordinator<To>, i: usize, first: bool) -> std::result::Result<(), Abort> {
    let (item, off) = item_of(c, i);
    let variant = c.proto.cfg.variant;
    let (bts, tid) = (c.state.bts, c.state.tid);
    let st = &mut c.state;
    st.post.clear();
    if first {
        let mut rn = [0u8; 16];
        rn[..8].copy_from_slice(&tid.to_le_bytes());
        rn[8..].copy_from_slice(&state_word(tid, ST_RN).to_le_bytes());
        st.prims.write_own_tm(&mut st.post, &st.tg, tid, &rn);
    }
    if c.set.objs[i].proto.fresh {
        // Latched since the insert, old image kept: the own RN (if first) alone, then
        // the dirty WriteDI.
        st.prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await
            .map_err(fault)?;
        return write_dirty(c, i, item, off).await;
    }
    let cas = st.prims.amod_im(&mut st.post, lock_of(item, &off), 0, st.latch);
    let r = st.prims.read_di(&mut st.post, item, off.len);
    st.prims
        .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
        .await
        .map_err(fault)?;
    if st.post.old(cas) != 0 {
        return Err(abort(AbortReason::LockConflict));
    }
    c.set.objs[i].proto.hold = ToHold::Latched;
    let b = st.post.bytes(r);
    if word(b, off.rts).max(word(b, off.wts)) > bts {
        return Err(abort(AbortReason::LockConflict));
    }
    let dirty_writers = off.wl(b).count();
    match variant {
        ToVariant::PaperRestore => {
            if dirty_writers == WL_MAX {
                return Err(abort(AbortReason::LockConflict));
            }
            for t in off.wl(b) {
                add_bl(&mut st.bl, t);
            }
        }
        _ => {
            if dirty_writers > 0 {
                return Err(abort(AbortReason::LockConflict));
            }
        }
    }
    c.set.objs[i].proto.old_at = st.olds.len();
    st.olds.extend_from_slice(b);
    write_dirty(c, i, item, off).await
}

/// The dirty WriteDI of latched object `i` (old image in `olds`): `X^d = new`,
/// `wts = bts`, `wL ∪= {Tid}`, latch 0.
async fn write_dirty(c: &mut Coordinator<To>, i: usize, item: RemotePtr, off: Offs) -> std::result::Result<(), Abort> {
    let (bts, tid, txn_id) = (c.state.bts, c.state.tid, c.set.txn_id);
    let st = &mut c.state;
    let o = &c.set.objs[i];
    st.image.clear();
    st.image
        .extend_from_slice(&st.olds[o.proto.old_at..o.proto.old_at + off.len]);
    let img = &mut st.image;
    if o.access != Access::Delete {
        img[off.data..off.data + o.value_len as usize].copy_from_slice(c.set.value(i));
    }
    let version = match o.access {
        Access::Delete => txn_id | TOMBSTONE,
        _ => txn_id,
    };
    set_word(img, off.version, version);
    set_word(img, off.wts, bts);
    let free = (0..WL_MAX)
        .find(|&k| word(img, off.wl + 8 * k) == 0)
        .expect("wL has room");
    set_word(img, off.wl + 8 * free, tid);
    set_word(img, off.lock, 0);
    st.post.clear();
    st.prims.write_di(&mut st.post, item, &st.image);
    st.prims
        .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
        .await
        .map_err(fault)?;
    c.set.objs[i].proto.hold = ToHold::Dirty;
    Ok(())
}

/// Fill the post with one WriteDI per object of `objs`: its latched image (in `image`,
/// `objs` order) with `wL −= Tid` and latch 0.
fn remove_tid(c: &mut Coordinator<To>, objs: &[usize]) {
    let tid = c.state.tid;
    let ptrs: Vec<(RemotePtr, Offs)> = objs.iter().map(|&i| item_of(c, i)).collect();
    let st = &mut c.state;
    st.post.clear();
    let mut at = 0;
    for (item, off) in ptrs {
        let img = &mut st.image[at..at + off.len];
        for k in 0..WL_MAX {
            if word(img, off.wl + 8 * k) == tid {
                set_word(img, off.wl + 8 * k, 0);
            }
        }
        set_word(img, off.lock, 0);
        st.prims.write_di(&mut st.post, item, &st.image[at..at + off.len]);
        at += off.len;
    }
}

/// Alg. 3 l. 26–31: ReadTM every bL entry until none is RN.
async fn wait_bl(c: &mut Coordinator<To>) -> std::result::Result<(), Abort> {
    let mut pending = std::mem::take(&mut c.state.bl);
    let all = pending.clone();
    let r = async {
        for _ in 0..BL_POLLS_MAX {
            if pending.is_empty() {
                return Ok(());
            }
            let st = &mut c.state;
            st.post.clear();
            let ids: Vec<_> = pending
                .iter()
                .map(|&t| st.prims.read_tm_batched(&mut st.post, &st.tg, t))
                .collect();
            st.prims
                .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
                .await
                .map_err(fault)?;
            let mut left = Vec::new();
            for (&t, id) in pending.iter().zip(ids) {
                match tg_view(st.post.bytes(id), t) {
                    None => return Err(abort(AbortReason::Protocol(ABORT_TMETA_GONE))),
                    Some(v) if v.st == ST_AB => return Err(abort(AbortReason::Protocol(ABORT_CASCADE))),
                    Some(v) if v.st == ST_RN => left.push(t),
                    Some(_) => {}
                }
            }
            pending = left;
            if !pending.is_empty() {
                c.ctx.metric(METRIC_WAIT_RETRIES, 1);
                let clock = std::sync::Arc::clone(&c.ctx.clock);
                c.state.meter.pause(clock.now_ns());
                dmtx_runtime::sleep(clock.as_ref(), WAIT_PAUSE_NS).await;
                c.state.meter.resume(clock.now_ns());
            }
        }
        Err(abort(AbortReason::LockConflict))
    }
    .await;
    c.state.bl = all;
    r
}

/// After an aborted attempt: unlatch what is latched; restore what is written.
async fn restore_all(c: &mut Coordinator<To>) {
    let tid = c.state.tid;
    let variant = c.proto.cfg.variant;
    let claimed: Vec<usize> = (0..c.set.objs.len())
        .filter(|&i| c.set.objs[i].proto.hold == ToHold::Claimed)
        .collect();
    if !claimed.is_empty() {
        // Not indexed: give the slot back whole (zeros, lock last).
        let ptrs: Vec<(RemotePtr, Offs)> = claimed.iter().map(|&i| item_of(c, i)).collect();
        let st = &mut c.state;
        st.post.clear();
        for (item, off) in &ptrs {
            st.prims.write_di_with(&mut st.post, *item, off.len, |b| b.fill(0));
        }
        let _ = st
            .prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await;
        for &i in &claimed {
            c.set.objs[i].proto.hold = ToHold::None;
        }
    }
    let latched: Vec<usize> = (0..c.set.objs.len())
        .filter(|&i| c.set.objs[i].proto.hold == ToHold::Latched)
        .collect();
    let dirty: Vec<usize> = (0..c.set.objs.len())
        .filter(|&i| c.set.objs[i].proto.hold == ToHold::Dirty)
        .collect();
    if !latched.is_empty() {
        let ptrs: Vec<(RemotePtr, Offs)> = latched.iter().map(|&i| item_of(c, i)).collect();
        let st = &mut c.state;
        st.post.clear();
        for (item, off) in &ptrs {
            st.prims.amod_im(&mut st.post, lock_of(*item, off), st.latch, 0);
        }
        let _ = st
            .prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await;
    }
    for o in &mut c.set.objs {
        if o.proto.hold == ToHold::Latched {
            o.proto.hold = ToHold::None;
        }
    }
    if dirty.is_empty() {
        return;
    }
    let mut ab = [0u8; 16];
    ab[..8].copy_from_slice(&tid.to_le_bytes());
    ab[8..].copy_from_slice(&state_word(tid, ST_AB).to_le_bytes());
    if variant == ToVariant::PaperRestore {
        paper_restore(c, &dirty, &ab).await;
    } else if latch_all(c, &dirty, |st| st.prims.write_own_tm(&mut st.post, &st.tg, tid, &ab))
        .await
        .is_ok()
    {
        // Old X^d, version and wts back; current rts; wL −= Tid; latch 0.
        let mut at = 0;
        for &i in &dirty {
            let (_, off) = item_of(c, i);
            let old_at = c.set.objs[i].proto.old_at;
            let st = &mut c.state;
            let (olds, image) = (&st.olds, &mut st.image);
            let old = &olds[old_at..old_at + off.len];
            image[at..at + off.rts].copy_from_slice(&old[..off.rts]);
            image[at + off.wts..at + off.wts + 8].copy_from_slice(&old[off.wts..off.wts + 8]);
            at += off.len;
        }
        remove_tid(c, &dirty);
        let st = &mut c.state;
        let _ = st
            .prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await;
    }
    for &i in &dirty {
        c.set.objs[i].proto.hold = ToHold::None;
    }
}

/// The paper's restore (broken on purpose): st ← AB; per item, skip the restore if a wL
/// predecessor seen at the Write is aborted (or gone), else WRITE the old X^d, version
/// and wts without the latch; then wL −= Tid under the latch.
async fn paper_restore(c: &mut Coordinator<To>, dirty: &[usize], ab: &[u8; 16]) {
    let tid = c.state.tid;
    {
        let st = &mut c.state;
        st.post.clear();
        st.prims.write_own_tm(&mut st.post, &st.tg, tid, ab);
        let _ = st
            .prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await;
    }
    for &i in dirty {
        let (item, off) = item_of(c, i);
        let old_at = c.set.objs[i].proto.old_at;
        let preds: Vec<u64> = off.wl(&c.state.olds[old_at..old_at + off.len]).collect();
        let mut skip = false;
        for t in preds {
            let st = &mut c.state;
            let tg = st.tg.clone();
            match st
                .prims
                .read_tm(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post, &tg, t)
                .await
            {
                Ok(Some(v)) if v.st != ST_AB => {}
                _ => skip = true,
            }
        }
        if !skip {
            let st = &mut c.state;
            st.post.clear();
            let old = st.olds[old_at..old_at + off.len].to_vec();
            st.prims.write_di(&mut st.post, item, &old[..off.rts]);
            st.prims.write_di(
                &mut st.post,
                RemotePtr::new(item.mn, item.offset + off.wts as u64),
                &old[off.wts..off.wts + 8],
            );
            let _ = st
                .prims
                .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
                .await;
        }
    }
    if latch_all(c, dirty, |_| {}).await.is_ok() {
        remove_tid(c, dirty);
        let st = &mut c.state;
        let _ = st
            .prims
            .post(&mut CtxVerbs(&mut c.ctx, &mut st.meter), &mut st.post)
            .await;
    }
}

fn report_sigma(c: &mut Coordinator<To>) {
    let now = c.state.prims.sigma;
    let was = std::mem::replace(&mut c.state.reported, now);
    c.ctx.metric(METRIC_SIGMA_READ_DI, now.read_di - was.read_di);
    c.ctx.metric(METRIC_SIGMA_WRITE_DI, now.write_di - was.write_di);
    c.ctx.metric(METRIC_SIGMA_AMOD_IM, now.amod_im - was.amod_im);
    c.ctx.metric(METRIC_SIGMA_READ_TM, now.read_tm - was.read_tm);
    c.ctx.metric(
        METRIC_SIGMA_TM_WRITES,
        (now.write_tm + now.amod_tm) - (was.write_tm + was.amod_tm),
    );
    c.ctx.metric(METRIC_INDEX_READS, now.index_reads - was.index_reads);
}
