//! No-Wait 2PL on RCBench's primitives (rcbench.txt §4.1, §5.1, Alg. 1; issue 30 item
//! 5). Isolation: **serializable** (strict 2PL: every lock held to commit).
//!
//! Its execution (`execute.rs`) and commit (`commit.rs`) are generic over what a refused
//! lock does (`TwoPl`, `Policy`): [`crate::waitdie`] and [`crate::woundwait`] run them
//! too.
//!
//! Each item is found through the table's cuckoo index (getRtItemAddr, §4.2.1) and then
//! locked and read in one batch: AModIM on its lock word with ReadDI after it. Any
//! refused lock aborts at once (no waiting). Writes are buffered in the transaction
//! and applied at commit, one WriteDI per item and replica whose image carries lock 0
//! as its highest word, so the write is also the release; read locks are released in
//! the same post. An abort only releases.
//!
//! # Lock words (`--set lock=e|es`, default `e`, §5.1 Discussion)
//!
//! - **E**: every access takes the exclusive lock, `CAS(0 → EL)` with the item READ
//!   batched after it. Release: `CAS(EL → 0)` for reads, the WriteDI with lock 0 for
//!   writes.
//! - **E/S**: bit 0 is the type (1 = EL), bits 1–63 count shared holders; EL is taken
//!   only from 0. A read: ReadDI; EL ⇒ abort; else `CAS(old → old + 2)` with a data
//!   READ batched after it (the data of the first ReadDI is never used: a writer may
//!   have locked, written and unlocked in between, ABA). A refused CAS retries from the
//!   returned word, at most [`ES_CAS_TRIES_MAX`] times (the paper aborts; the authors'
//!   code retries once). Release: READ the lock word, `CAS(old → old − 2)`, retried.
//!   Written items (`read_for_update`, AddRW) take EL at once, so there is no upgrade.
//!
//! EL is `(coordinator id + 1) << 1 | 1`, so a release CAS can only free its own lock.
//!
//! # Round trips (`NOWAIT_BUDGET` in `tests/rcbench_nowait.rs`)
//!
//! After index lookups (cuckoo READs, ≈1.65 per item at the loader's load), db+or on,
//! n items of which r read and w written, one replica (backups add one round trip to a
//! commit that writes):
//!
//! | lock | read-only | read-write | abort |
//! | --- | --- | --- | --- |
//! | E | n + 1 | n + 1 | the refused item's round trip; release in cleanup (1) |
//! | E/S | 2n + 2 | 2r + w + 2 | as E; shared release 2 in cleanup |
//!
//! With db off the CAS and the READ of an item go apart (+1 per item); with or off
//! the commit post goes one memory node at a time. An insert of a new key: 3 index
//! READs, the home bucket READ (plus an FAA for a fresh overflow bucket when the home
//! bucket is full), the slot's CAS + READ, one WRITE marking it claimed, and the run-time
//! cuckoo insert (READ, CAS, WRITE).
//!
//! # What dmtx pays beyond RCBench
//!
//! Every item is remote (RCBench reads its own partition locally); replicas (RCBench
//! has none) get the item image at the same table offset in a round trip of their own
//! before the primary's WRITE releases the lock (+1 round trip for a writer with f ≥ 1:
//! otherwise the next writer's backup WRITE could race this one and leave the older
//! image); a fresh insert claims a slot and indexes it with verbs.
//!
//! # Choices where the paper is silent
//!
//! - **Version word**: X^m holds the last writer's transaction id (0 as loaded), for
//!   histories; bit 63 marks a deleted item (a tombstone, still indexed: entries are
//!   never freed at run time). A read of a tombstone aborts `not_found`.
//! - **Inserts**: a free slot of the key's home bucket, else of an overflow bucket the
//!   coordinator took by FAA on the table's overflow cursor (not a primitive: the
//!   paper's executors allocate locally). The slot is locked and marked claimed (PK
//!   set, tombstone) before the run-time cuckoo insert, so scans never see it; an insert
//!   that then finds the key indexed by someone else aborts `lock_conflict`, and one
//!   whose three candidates are full aborts `index_full`. Backups' cuckoo indexes keep
//!   what was loaded: only primaries are looked up.
//! - **Run-time inserts and the index's load**: the loader sizes a table's cuckoo index
//!   for its capacity at load 0.5, and run-time inserts never kick, so an insert finds
//!   its three candidates taken with probability about load³ and aborts `index_full`
//!   (not retried). Deletes keep their entry and slot (entries never go free at run
//!   time, which is what lets racing inserters of one key meet), so a table with
//!   insert/delete churn (TPC-C's new_order) fills its index: on the defaults about one
//!   `index_full` per two commits after a few seconds.
//! - **Failures**: nowait has no log; a verb that fails mid-commit leaves the commit
//!   partial, so it claims no fault tolerance (the suite runs it without faults).

pub(crate) mod commit;
pub(crate) mod execute;

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, AbortReasonSpec, CoordCtx, Coordinator, Isolation, KnobError, KnobSpec, Knobs, MetricKind, MetricSpec,
    Protocol, Result, Txn,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::Post;

use crate::rcbench::layout::ItemLayout;
use crate::rcbench::prims::{Prims, Sigma, Switches};

/// Refused shared-lock CASes retried from the returned word before aborting.
pub const ES_CAS_TRIES_MAX: u32 = 4;
/// Release CAS rounds of a shared lock before giving up (a bug: the count only grows
/// and shrinks by our own ±2 and others').
pub const ES_RELEASE_TRIES_MAX: u32 = 1000;
pub use crate::rcbench::layout::TOMBSTONE;

/// Abort reason: an insert found its key's three cuckoo candidates taken.
pub const ABORT_INDEX_FULL: u8 = 0;

/// Metric indexes (σ and the E/S retries).
pub const METRIC_SIGMA_READ_DI: usize = 0;
/// σ WriteDI.
pub const METRIC_SIGMA_WRITE_DI: usize = 1;
/// σ AModIM.
pub const METRIC_SIGMA_AMOD_IM: usize = 2;
/// getRtItemAddr READs.
pub const METRIC_INDEX_READS: usize = 3;
/// Refused shared-lock CASes retried.
pub const METRIC_ES_RETRIES: usize = 4;
/// CPU time of committed attempts ([`crate::rcbench::CpuMeter`]).
pub const METRIC_CPU_COMMITTED: usize = 5;
/// Wait-Die: refused locks an older requester waited on and retried.
pub const METRIC_WAIT_RETRIES: usize = 6;

pub use crate::rcbench::tg::{TG_COORDS, TG_THETA};

/// Wait-Die: default tries of one refused lock before the waiter gives up (aborts;
/// `--set wait_retries_max`): a bound, not a policy (the holder is younger, so it never waits on the waiter).
pub const WAIT_RETRIES_MAX: u32 = 100;
/// Wait-Die: pause between two tries of a refused lock.
pub const WAIT_PAUSE_NS: u64 = 1_000;

pub(crate) const METRICS: &[MetricSpec] = &[
    MetricSpec::new(
        "sigma_read_di",
        MetricKind::Counter,
        "ReadDI calls (σ, rcbench Table 2)",
    ),
    MetricSpec::new("sigma_write_di", MetricKind::Counter, "WriteDI calls (σ)"),
    MetricSpec::new("sigma_amod_im", MetricKind::Counter, "AModIM calls (σ)"),
    MetricSpec::new(
        "index_reads",
        MetricKind::Counter,
        "getRtItemAddr READs of the cuckoo index",
    ),
    MetricSpec::new(
        "es_cas_retries",
        MetricKind::Counter,
        "refused shared-lock CASes retried from the returned word (lock=es)",
    ),
    MetricSpec::new(
        "cpu_committed",
        MetricKind::Duration,
        "CPU time of committed attempts between verb waits; U_CPU^e (rcbench §1) = its share × coroutines per thread",
    ),
    MetricSpec::new(
        "wait_retries",
        MetricKind::Counter,
        "refused locks an older transaction waited on and tried again (waitdie)",
    ),
];

pub(crate) const ABORT_REASONS: &[AbortReasonSpec] = &[AbortReasonSpec::new(
    "index_full",
    false,
    "an insert found its key's three cuckoo candidates held by other keys (no run-time kicks); load fewer keys or grow the table's capacity",
)];

/// `--set wait_retries_max` (Wait-Die).
pub(crate) const WAIT_RETRIES: KnobSpec = KnobSpec {
    name: "wait_retries_max",
    default: "100",
    help: "tries of a refused lock an older transaction makes, 1 µs apart, before it aborts",
};

pub(crate) const ADDR_CACHE: KnobSpec = KnobSpec {
    name: "addr_cache",
    default: "off",
    help: "keep item addresses across transactions (on) or look every item up once per transaction (off)",
};

const LOCK: KnobSpec = KnobSpec {
    name: "lock",
    default: "e",
    help: "lock word: e (exclusive only) or es (exclusive/shared, §5.1)",
};

/// The lock word's kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum LockMode {
    /// Exclusive only.
    #[default]
    E,
    /// Exclusive/shared.
    Es,
}

impl std::str::FromStr for LockMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "e" => Ok(LockMode::E),
            "es" => Ok(LockMode::Es),
            _ => Err("expected e or es".into()),
        }
    }
}

/// Protocol variants. Every one but [`NowaitVariant::Fixed`] is deliberately broken and
/// exists only so tests can show the isolation checker catches it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum NowaitVariant {
    /// As documented.
    #[default]
    Fixed,
    /// Read locks released right after the read, before commit (not 2PL).
    EarlyReadRelease,
    /// E/S: the data of the ReadDI before the shared CAS is used (the text drops
    /// Alg. 1 l. 29): ABA.
    ReusePreCasRead,
}

/// No-Wait's settings.
#[derive(Copy, Clone, Debug)]
pub struct NowaitConfig {
    /// The lock word's kind.
    pub lock: LockMode,
    /// §5.5 switches.
    pub switches: Switches,
    /// Cross-transaction address cache (`--set addr_cache=on`; one lookup per item per
    /// transaction without it).
    pub addr_cache: bool,
    /// Wait-Die: tries of one refused lock before the waiter aborts.
    pub wait_retries_max: u32,
    /// Test-only variant.
    pub variant: NowaitVariant,
}

impl Default for NowaitConfig {
    fn default() -> Self {
        Self {
            lock: LockMode::E,
            switches: Switches::default(),
            addr_cache: false,
            wait_retries_max: WAIT_RETRIES_MAX,
            variant: NowaitVariant::Fixed,
        }
    }
}

/// No-Wait 2PL.
#[derive(Clone, Debug)]
pub struct Nowait {
    cfg: NowaitConfig,
    layout: ItemLayout,
}

impl Nowait {
    /// No-Wait with `cfg`.
    pub fn new(cfg: NowaitConfig) -> Self {
        Self {
            cfg,
            layout: ItemLayout { meta_words: 1 },
        }
    }

    /// The settings.
    pub fn config(&self) -> &NowaitConfig {
        &self.cfg
    }
}

/// What an object holds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Nothing.
    #[default]
    None,
    /// The exclusive lock.
    Excl,
    /// A shared lock.
    Shared,
}

/// An insert's slot.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Fresh {
    /// Not a fresh slot (the item was indexed already).
    #[default]
    No,
    /// Claimed and locked, not yet indexed: an abort frees it.
    Claimed,
    /// Claimed and indexed: an abort leaves it a tombstone.
    Indexed,
}

/// No-Wait's per-object state.
#[derive(Debug, Default)]
pub struct NowaitObj {
    /// Table-relative offset of the item.
    pub(crate) rel: u64,
    pub(crate) hold: Hold,
    pub(crate) fresh: Fresh,
}

/// No-Wait's per-coordinator state.
pub struct NowaitCoord {
    pub(crate) prims: Prims,
    pub(crate) post: Post,
    /// The commit's backup WRITEs.
    pub(crate) backups: Post,
    /// This coordinator's EL word (No-Wait).
    pub(crate) el: u64,
    /// What this attempt's exclusive locks hold: EL (No-Wait) or its bts (Wait-Die).
    pub(crate) lock_val: u64,
    /// Wait-Die's beginning timestamp, kept across aborts (0 = take a new one).
    pub(crate) bts: u64,
    /// Coordinator id (24 bits: CN, thread, coroutine), for the bts.
    pub(crate) coord: u64,
    /// The `txn_seq` of the attempt the Tid was taken for.
    pub(crate) attempt_seq: u64,
    /// Wound-Wait: the attempt's Tid, this coordinator's T^g ring index and its next
    /// sequence number, the T^g area, and whether the own slot is still to be written.
    pub(crate) tid: u64,
    pub(crate) dense: u64,
    pub(crate) seq: u64,
    pub(crate) tg: Option<crate::rcbench::prims::TgArea>,
    pub(crate) tg_pending: bool,
    /// Per table: the next free slot of the overflow bucket this coordinator took and
    /// how many are left.
    pub(crate) overflow: Vec<(u32, u64, u32)>,
    /// An item image being built.
    pub(crate) image: Vec<u8>,
    /// σ already reported in metrics.
    pub(crate) reported: Sigma,
    /// Shared locks being released.
    pub(crate) pending: Vec<commit::Pending>,
    /// The attempt's CPU time.
    pub(crate) meter: crate::rcbench::CpuMeter,
}

/// The 2PL protocols that share this module's execution and commit: they differ in
/// what an exclusive lock word holds and in what a refused lock does.
/// What a refused exclusive lock does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Abort.
    NoWait,
    /// The lock word holds the holder's bts: an older requester waits, a younger dies.
    WaitDie,
    /// The lock word holds the holder's bts and pL its Tid: an older requester wounds
    /// the holder (AModTM RN → AB) and waits, a younger one waits.
    WoundWait,
}

pub(crate) trait TwoPl: Protocol<CoordState = NowaitCoord, ObjState = NowaitObj> {
    /// What a refused lock does.
    const POLICY: Policy;
    /// Settings.
    fn cfg(&self) -> &NowaitConfig;
    /// The item layout.
    fn item_layout(&self) -> ItemLayout;
}

impl TwoPl for Nowait {
    const POLICY: Policy = Policy::NoWait;
    fn cfg(&self) -> &NowaitConfig {
        &self.cfg
    }
    fn item_layout(&self) -> ItemLayout {
        self.layout
    }
}

/// Start an attempt: the CPU meter and the lock value.
pub(crate) fn begin_attempt<P: TwoPl>(txn: &mut Txn<'_, P>) {
    let c = &mut *txn.coord;
    let now = c.ctx.clock.now_ns();
    c.state.meter.start(now);
    // Every begin is a new attempt (a new txn_seq): cleanup may not have run between
    // two (a test's warm-up), so the sequence number, not a flag, tells.
    let fresh = c.state.attempt_seq != c.set.txn_seq;
    c.state.attempt_seq = c.set.txn_seq;
    if P::POLICY == Policy::WoundWait && fresh {
        // A new attempt: the next Tid of this coordinator's T^g ring, its slot
        // written (RN) with the attempt's first lock batch.
        let st = &mut c.state;
        st.tid = crate::rcbench::prims::tid_of(st.dense, st.seq, TG_COORDS);
        st.seq += 1;
        st.tg_pending = true;
    }
    if P::POLICY != Policy::NoWait {
        if c.state.bts == 0 {
            // clock ‖ coordinator: unique, and older is smaller (issue 30 item 3).
            // 16-ns ticks in 40 bits: 2^44 ns, about 78 hours of run.
            debug_assert!(c.state.coord < 1 << 24);
            c.state.bts = ((now >> 4) + 1) << 24 | c.state.coord;
        }
        c.state.lock_val = c.state.bts;
    } else {
        c.state.lock_val = c.state.el;
    }
}

/// The commit of a 2PL protocol, with the CPU meter.
pub(crate) async fn commit_attempt<P: TwoPl>(txn: &mut Txn<'_, P>) -> std::result::Result<(), Abort> {
    begin_attempt(txn);
    commit::commit(txn).await?;
    let c = &mut *txn.coord;
    let ns = c.state.meter.finish(c.ctx.clock.now_ns());
    c.ctx.metric_ns(METRIC_CPU_COMMITTED, ns);
    // A committed transaction's successor is a new one: a new bts.
    c.state.bts = 0;
    Ok(())
}

/// After every attempt: release what an aborted one holds; report σ.
pub(crate) async fn cleanup_attempt<P: TwoPl>(coord: &mut Coordinator<P>) {
    coord.state.meter.reset();
    commit::release_all(coord).await;
    commit::report_sigma(coord);
}

impl Protocol for Nowait {
    type CoordState = NowaitCoord;
    type ObjState = NowaitObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "nowait";
    const ABOUT: &'static str = "No-Wait 2PL on RCBench's primitives and cuckoo index (rcbench §5.1)";
    const KNOBS: &'static [KnobSpec] = &[LOCK, ADDR_CACHE, crate::rcbench::DB, crate::rcbench::OR];
    const METRICS: &'static [MetricSpec] = METRICS;
    const ABORT_REASONS: &'static [AbortReasonSpec] = ABORT_REASONS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        Ok(Self::new(NowaitConfig {
            lock: knobs.get(&LOCK)?,
            switches: crate::rcbench::switches(knobs)?,
            addr_cache: knobs.get::<crate::rcbench::OnOff>(&ADDR_CACHE)?.0,
            wait_retries_max: 0,
            variant: NowaitVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }

    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }

    fn coord_state(&self, ctx: &CoordCtx, _control: &dyn Control) -> Result<NowaitCoord> {
        Ok(NowaitCoord {
            prims: Prims::new(self.cfg.switches),
            post: Post::new(),
            backups: Post::new(),
            el: (ctx.id.global() + 1) << 1 | 1,
            lock_val: 0,
            bts: 0,
            coord: ctx.id.compact() as u64,
            attempt_seq: 0,
            tid: 0,
            dense: 0,
            seq: 0,
            tg: None,
            tg_pending: false,
            overflow: Vec::new(),
            image: Vec::new(),
            reported: Sigma::default(),
            pending: Vec::new(),
            meter: Default::default(),
        })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        begin_attempt(txn);
        execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        commit_attempt(txn).await
    }

    fn abort(_txn: &mut Txn<'_, Self>) {
        // Releases wait for completions (E/S release loops): `cleanup` does them.
    }

    async fn cleanup(coord: &mut Coordinator<Self>) {
        cleanup_attempt(coord).await
    }
}

impl Nowait {
    /// No-Wait with a test-only broken `variant` (see [`NowaitVariant`]).
    pub fn with_variant(mut cfg: NowaitConfig, variant: NowaitVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }
}
