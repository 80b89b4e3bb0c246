//! DrTM's lease-based shared lock on one-sided verbs, without HTM: OOCC's baseline
//! (oocc.txt §II-A, §VIII-A; DrTM, SOSP'15, §4.3). Isolation: **serializable**.
//!
//! # Lock word
//!
//! ```text
//! bit 63      W: write-locked by `owner`
//! bits 39-62  owner (the coordinator's compact id) when W is set
//! bits 0-38   shared: the lease's end, µs on the granting coordinator's clock
//! 0           free
//! ```
//!
//! Invariants:
//! 1. A word leaves 0 or an expired lease only by CAS; `W` is cleared only by its
//!    owner's WRITE of 0.
//! 2. A reader relies on a lease ending at `E` only while its clock reads before
//!    `E − Δ`; a writer takes over a lease only once its clock reads after `E + Δ`.
//!    With clocks within `Δ` (`drtm_delta_us`) of each other that orders every reader
//!    that relied on the lease before every writer that took it over.
//!
//! # Phases and round trips (address cache warm)
//!
//! | kind | RTTs | verbs |
//! | --- | --- | --- |
//! | read-only | 1 (+1 per expired lease met: the CAS again on the word it returned) | per record `[CAS(0 → lease), READ]` |
//! | read-write | 3 | RTT1 `[CAS(0 or expired → W|me), READ]` per written record, the read set as above; RTT2 the redo log (new images) per memory node + FLUSH; RTT3 per written record `[WRITE(bytes 8..), WRITE(lock, 0)]` on the primary with no backup; with backups `WRITE(bytes 8..)` per replica, the unlock in the background once they are ACKed (batches to different nodes keep no order: a later writer's backup WRITE could overtake ours) |
//! | abort | no extra RTT: W locks released in the background; after RTT2 the logs are invalidated first (one awaited RTT) | |
//!
//! A reader uses a lease that runs past `now + Δ`, renews (by CAS on the word) one that
//! ended more than `Δ` ago, as a writer may take it over, and aborts in between:
//! renewing a lease still live would starve writers for good. A read-only transaction
//! commits if, at the end of its last round, every lease it holds still runs past
//! `now + Δ`; a read-write one checks its read leases so after
//! RTT2 (its serialization point: every write lock held, every read lease valid). A
//! record met write-locked, or (for a writer) under a live lease, aborts.
//!
//! # Choices (the paper describes DrTM in a sentence)
//!
//! - No HTM: the local part of DrTM's protocol is not modelled; every record is remote.
//! - The lease length is `drtm_lease_us` (400), DrTM's default range.
//! - Inserts and deletes as FORD's, with this lock; the slot's lock word may hold an
//!   expired lease, which an insert takes over like a writer.
//! - The redo log and commit batch are OOCC's (`crate::oocc`).
//!
//! # Known limits
//!
//! - A transaction that reads a record and later writes it meets its own live lease
//!   and aborts until the lease ends (DrTM upgrades in place; here the lease word names
//!   no holder). TPC-C's read-then-update transactions therefore retry for up to a lease
//!   each; the suite runs DrTM without its workloads.
//! - A failed commit post is not recovered (no fault sweep).
//! - Under steady readers a writer waits for a gap of `Δ` after a lease's end: the bank's
//!   audits starve its transfers at the default lease; the suite runs 30 µs leases.

mod commit;
mod execute;

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, CoordCtx, Isolation, KnobError, KnobSpec, Knobs, MetricKind, MetricSpec, Protocol, Result, Txn,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::{AtomicId, MnId, Post, ReadId};

use crate::onever::index_walk::{Stage, Walk};
use crate::onever::record::OneVersionLayout;
use crate::onever::undo_log::UndoLog;
use crate::onever::{Holds, OneVersionObj};

/// The write bit.
pub const W: u64 = 1 << 63;
/// Shift of the owner bits.
const OWNER_SHIFT: u32 = 39;
/// The lease-end bits (µs).
pub const END_MASK: u64 = (1 << OWNER_SHIFT) - 1;

/// A shared lease ending at `end_us`.
#[inline]
pub fn shared(end_us: u64) -> u64 {
    end_us & END_MASK
}

/// The write lock of `owner`.
#[inline]
pub fn exclusive(owner: u32) -> u64 {
    W | (owner as u64) << OWNER_SHIFT
}

const _: () = assert!(OWNER_SHIFT + 24 == 63, "24 owner bits between the lease end and W");

/// Per record: building its execution ops and checking the slot it read.
pub const STEP_EXECUTE: &str = "drtm.execute";
/// Per written record: its image, redo entry and commit writes.
pub const STEP_COMMIT: &str = "drtm.commit";
/// DrTM's CPU steps; costs not fitted.
pub const CPU_STEPS: &[(&str, u64)] = &[(STEP_COMMIT, 0), (STEP_EXECUTE, 0)];

/// Metric index: CASes sent again on an expired lease.
pub const METRIC_LEASE_RETRIES: usize = 0;
/// DrTM's figures.
pub const METRICS: &[MetricSpec] = &[MetricSpec::new(
    "lease_retries",
    MetricKind::Counter,
    "CASes sent again on the expired lease word the last one returned (one round trip each)",
)];

/// Test-only broken variants.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum DrtmVariant {
    /// As documented.
    #[default]
    Fixed,
    /// Writers take a record under a live shared lease (readers' snapshots break).
    IgnoreLiveLeases,
}

/// DrTM's settings.
#[derive(Clone, Debug)]
pub struct DrtmConfig {
    /// Length of a shared lease, µs.
    pub lease_us: u32,
    /// Bound on the offset between compute nodes' clocks, µs (Δ).
    pub delta_us: u32,
    /// Rounds of lease CASes on one record before aborting.
    pub retry_max: u32,
    /// Bytes of each coordinator's redo-log area on each memory node.
    pub log_bytes: u32,
    /// Test-only variant.
    pub variant: DrtmVariant,
}

impl Default for DrtmConfig {
    fn default() -> Self {
        Self {
            lease_us: 400,
            delta_us: 10,
            retry_max: 8,
            log_bytes: 64 << 10,
            variant: DrtmVariant::Fixed,
        }
    }
}

const LEASE_US: KnobSpec = KnobSpec {
    name: "drtm_lease_us",
    default: "400",
    help: "length of a shared read lease, µs",
};
const DELTA_US: KnobSpec = KnobSpec {
    name: "drtm_delta_us",
    default: "10",
    help: "bound on the clock offset between compute nodes, µs: readers trust a lease until Δ before its end, writers take it over Δ after",
};
const RETRY_MAX: KnobSpec = KnobSpec {
    name: "drtm_retry_max",
    default: "8",
    help: "lease CASes sent again on one record before the transaction aborts",
};
const LOG_BYTES: KnobSpec = KnobSpec {
    name: "log_bytes",
    default: "65536",
    help: "redo-log bytes per coordinator per memory node",
};

/// The DrTM protocol.
#[derive(Debug, Clone)]
pub struct Drtm {
    cfg: DrtmConfig,
}

impl Drtm {
    /// DrTM with `cfg`.
    pub fn new(cfg: DrtmConfig) -> Self {
        Self { cfg }
    }

    /// The settings.
    pub fn config(&self) -> &DrtmConfig {
        &self.cfg
    }
}

/// DrTM's per-object state.
#[derive(Debug, Default)]
pub struct DrtmObj {
    stage: Stage,
    rel: u64,
    holds: Holds,
    version: u64,
    /// The word the next lock CAS expects (0, or the expired lease last seen).
    expect: u64,
    /// End of the shared lease relied on, µs (read set).
    lease_end_us: u64,
    /// A lease covers the record (read set): a re-read needs no CAS.
    leased: bool,
    /// Lease CASes sent again.
    retries: u32,
    /// Offset of the new image in `DrtmCoord::images`.
    image_at: u32,
    walk: Walk,
    read: Option<ReadId>,
    cas: Option<AtomicId>,
}

impl crate::onever::index_walk::WalkingObj for DrtmObj {
    fn stage(&self) -> Stage {
        self.stage
    }
    fn walk(&self) -> &Walk {
        &self.walk
    }
    fn slot(&self) -> u64 {
        self.rel
    }
    fn cas_posted(&self) -> bool {
        self.cas.is_some()
    }
    fn holds_bucket_lock(&self) -> bool {
        self.holds.bucket_lock.is_some()
    }
}

impl OneVersionObj for DrtmObj {
    fn rel(&self) -> u64 {
        self.rel
    }
    /// The new image's offset: the log writer copies it into the redo log.
    fn undo_at(&self) -> usize {
        self.image_at as usize
    }
    fn holds(&mut self) -> &mut Holds {
        &mut self.holds
    }
}

/// DrTM's per-coordinator state.
pub struct DrtmCoord {
    /// This coordinator's compact id (the owner bits).
    owner: u32,
    post: Post,
    bg: Post,
    log: UndoLog,
    images: Vec<u8>,
    mns: Vec<MnId>,
    insert_walks: crate::onever::index_walk::InsertWalks,
    claimed: Vec<(u32, u64)>,
}

impl Protocol for Drtm {
    type CoordState = DrtmCoord;
    type ObjState = DrtmObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "drtm";
    const ABOUT: &'static str =
        "DrTM's lease-based shared lock on one-sided verbs, no HTM (OOCC's baseline): CAS a lease per read, W per write";
    const KNOBS: &'static [KnobSpec] = &[LEASE_US, DELTA_US, RETRY_MAX, LOG_BYTES];
    const METRICS: &'static [MetricSpec] = METRICS;
    const CPU_STEPS: &'static [(&'static str, u64)] = CPU_STEPS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        Ok(Self::new(DrtmConfig {
            lease_us: knobs.get(&LEASE_US)?,
            delta_us: knobs.get(&DELTA_US)?,
            retry_max: knobs.get(&RETRY_MAX)?,
            log_bytes: knobs.get_checked(&LOG_BYTES, |v: u32| {
                if v >= 4096 && v.is_multiple_of(8) {
                    Ok(())
                } else {
                    Err("must be a multiple of 8, at least 4096".into())
                }
            })?,
            variant: DrtmVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }

    fn layout(&self) -> &dyn SlotLayout {
        &OneVersionLayout
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<DrtmCoord> {
        Ok(DrtmCoord {
            owner: ctx.id.compact(),
            post: Post::new(),
            bg: Post::new(),
            log: UndoLog::alloc(control, self.cfg.log_bytes)?,
            images: Vec::new(),
            mns: Vec::new(),
            insert_walks: Default::default(),
            claimed: Vec::new(),
        })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        commit::commit(txn).await
    }

    fn abort(txn: &mut Txn<'_, Self>) {
        let c = &mut *txn.coord;
        let st = &mut c.state;
        st.bg.clear();
        crate::onever::release::push_release(&mut st.bg, &mut c.set.objs, &c.ctx.catalog, 0);
        c.ctx.post_background(&mut st.bg);
    }
}

impl Drtm {
    /// DrTM with a test-only broken `variant`.
    pub fn with_variant(mut cfg: DrtmConfig, variant: DrtmVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }
}
