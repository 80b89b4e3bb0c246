//! FORD: fast one-sided RDMA-based distributed transactions for disaggregated
//! persistent memory (Zhang et al., FAST'22 / ACM TOS 2023), §4.2–4.6 and the §4.8
//! rollback path. Isolation: **serializable**.
//!
//! # Phases (Fig. 9)
//!
//! 1. **Execution** (`execute.rs`): read-write objects are locked and read in one
//!    doorbell batch per primary, `CAS(vlock, 0 → me)` then `READ(slot)` (hitchhiked
//!    locking, §4.2). Read-only objects are plain READs, from a backup when
//!    `backup_read` is on (§4.4), except the one object of a transaction begun
//!    read-only with its keys declared (`TxnHints`), which is read from the primary. On an address-cache miss the home bucket is read
//!    first; a read-only object is taken straight out of that bucket, a read-write one
//!    is locked in the next round (§4.2, last paragraph).
//! 2. **Validation** (`validate.rs`): one READ of the primary's `vlock`+`version` (16 B)
//!    per read-only object, skipped when the transaction writes nothing and read a single
//!    object from the primary, unlocked.
//! 3. **Commit** (`commit.rs`): one round trip to all replicas (coalescent commit, §4.3).
//!    Per memory node the batch is: the undo log WRITE, then per record on a primary
//!    `CAS(vlock, me → me|INVISIBLE)` + `WRITE(bytes 8..)`, on a backup
//!    `WRITE(INVISIBLE|me, bytes 8..)`, and on a backup a final FLUSH (selective remote
//!    flush, §4.5).
//! 4. **Release** (background, never waited for, §4.3.2): `WRITE(vlock, 0)` on
//!    primaries, `CAS(vlock, INVISIBLE|me → 0)` on backups, undo-log status `committed`.
//!
//! # What is FORD's and what is shared
//!
//! The record, the tear detector, the bucket walk, the undo log, the replica fan-out
//! and release and rollback are the shared one-version machinery ([`crate::onever`]).
//! This directory holds FORD's decisions on top of it: hitchhiked locking and backup
//! reads (`execute.rs`), the validation rule (`validate.rs`), what one commit batch
//! holds and the primary's invisible CAS (`commit.rs`), its settings and its broken
//! test variants.
//!
//! # Round trips per transaction (`FORD_BUDGET` in `tests/common/mod.rs`, asserted by `tests/ford_suite.rs`)
//!
//! | kind | RTTs | verbs (address cache warm, f = 1) |
//! | --- | --- | --- |
//! | read-only, 1 object, key declared | 1 (2 when the primary is locked) | 1 READ of the primary (+ 1 READ(16 B)) |
//! | read-only, 1 object, undeclared | 2 | 1 READ of a backup + 1 READ(16 B) |
//! | read-only, n objects | 2 | n READ + n READ(16 B) |
//! | read-write, no RO data | 2 (+ release) | per object: CAS+READ, CAS+WRITE, WRITE, per MN log WRITE, FLUSH |
//! | read-write with RO data | 3 (+ release) | the above + RO READs and validation READs |
//! | address-cache miss | +1 for a locked object, +0 for a read-only one (its bucket READ returns the record) |
//! | insert | lookup round (bucket lock CAS + bucket READ) + lock round + commit |
//! | abort | no extra RTT: locks are released in the background |
//!
//! # Record layout and tear detection
//!
//! See [`layout`]: `vlock | version | key | meta | checksum | value`. A read covered by
//! a validation round is protected by it (a writer's lock or version bump makes
//! validation fail); every unlocked read also checks the checksum, which catches every
//! mixture of old and new words, so a read-only transaction of one object never
//! returns a torn record (8 B per record).
//!
//! # Deviations from the paper
//!
//! - **Validation checks the lock, not only the version, on the primary**, for
//!   read-write and multi-object read-only transactions alike. FORD's Fig. 9 and its
//!   code compare versions only (read-only transactions on the replica they read),
//!   which admits write skew (T1 locks B and reads A, T2 locks A and reads B, both
//!   validate before either commits, both commit) and, as dmtx's isolation checker
//!   found, read-only anomalies too: a read-write transaction that validated is
//!   serialized but its locked writes land only at its commit, so a read-only reader can
//!   see a later transaction's write without its. dmtx reads the `vlock` word in the same
//!   16-byte validation READ and fails if anyone holds it, at no extra round trip (see
//!   `validate.rs`). The published rule is kept as [`FordVariant::VersionOnlyValidation`],
//!   a test-only broken variant the checker catches.
//! - **Undo logs ride in the commit batch.** Instead of a separate post during
//!   execution, each memory node's undo log WRITE is placed first in that node's
//!   commit batch; batches execute in order, so the log is in place before any
//!   in-place update on that node, and no wait is added to the critical path. This
//!   also needs no completion check between log and commit (FORD §4.3.1 waits for log
//!   ACKs before updating). Each node's log covers the records on that node.
//! - **Backups carry the committer's id in `vlock`** (`INVISIBLE | owner`) and are
//!   released by CAS, so a late release of an earlier transaction can never clear the
//!   invisible bit of a later one.
//! - **Inserts lock the home bucket** (a per-bucket lock word taken only by inserters)
//!   so two transactions can never insert the same key into different free slots.
//! - **Tear detector**: a checksum rather than FORD's reliance on the invisible bit,
//!   which only protects reads that start after the commit's CAS.
//! - **A lone read is validated unless it saw the primary unlocked.** FORD skips
//!   validation for a transaction that reads one object and writes nothing. A read from
//!   a backup, or of a locked primary, can then return the old value of a record whose
//!   writer has validated (so serializes before a write this coordinator already made
//!   or saw) but not yet committed: each history stays serializable, but the
//!   coordinator's session order is broken (a cycle through session-order edges, which the checker reports). dmtx
//!   reads the lone object of a declared read-only transaction from the primary and
//!   skips validation only when its lock word was clear in that READ; any other lone
//!   read is validated (one more round trip). The published rule is kept as
//!   [`FordVariant::UnvalidatedSingleRead`], which the checker catches.
//! - **Versions are writer ids.** FORD bumps a counter; dmtx installs the writing
//!   transaction's cluster-unique id ([`dmtx_runtime::CoordId::txn_id`]). FORD only
//!   compares versions for equality, so nothing changes for the protocol, and every read
//!   in a history names exactly the transaction it read from (a counter repeats when a
//!   key is deleted and re-inserted elsewhere).
//!
//! # Lock times (§6.2.1)
//!
//! Every lock this protocol takes is timed ([`crate::onever::lock_time`]): its
//! `lock_duration_ns` (first attempt to release, the paper's figure), `lock_hold_ns` and
//! `lock_wait_ns`, with p50, p99 and share of coordinator time in `protocol_metrics`.
//! `--set lock_wait_us=N` is the paper's measuring mode: a refused lock is retried for up
//! to N µs, one round trip per try, instead of aborting at once (the default, 0).
//! `invisible_reread_ns` times each record a READ found invisible until a re-read sees
//! it visible (or the abort): its `share` is §6.2.2's figure.
//! `--set selective_flush=false` FLUSHes after every WRITE of the commit (each undo log,
//! primary and backup) instead of once per backup node: §6.2.4's full flush, in the same
//! batch (the same round trips, more FLUSHes).
//!
//! # Failures (§4.8)
//!
//! - A verb fails before commit: abort, release locks.
//! - A verb fails during the commit post: the coordinator writes the old images (kept
//!   locally, and in the undo logs for recovery by others) back to every reachable
//!   replica, in the same batch as the release, and aborts with `fault`.
//! - A verb fails during release: the transaction is already committed; a node that
//!   missed its release is repaired by recovery.

pub(crate) mod commit;
pub(crate) mod execute;
pub mod layout;
pub(crate) mod validate;

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, CoordCtx, Isolation, KnobError, KnobSpec, Knobs, MetricKind, MetricSpec, Protocol, Result, Txn,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::{AtomicId, MnId, Post, ReadId};

use crate::onever::index_walk::{Stage, Walk};
use crate::onever::lock_time;
use crate::onever::undo_log::UndoLog;
use crate::onever::{Holds, OneVersionObj};

/// CPU steps FORD declares (see `dmtx_runtime::Probe`), per record: building its
/// execution ops and checking the slot it read.
pub const STEP_EXECUTE: &str = "ford.execute";
/// Per read-only record: its validation read and version check.
pub const STEP_VALIDATE: &str = "ford.validate";
/// Per written record: its undo-log entry, new image and replica writes.
pub const STEP_COMMIT: &str = "ford.commit";

/// FORD's CPU steps and their default costs (ns on the simulator's calibration host),
/// fitted by `dmtx sim calibrate --duration 3s` on the project's 2-vCPU build machine
/// (2026-11-24, with the workloads' steps in `dmtx_sim::cpu`). A zero is a step the fit
/// finds nothing beyond: `ford.execute` and `ford.commit` always come with a `txn.add`
/// and polls, which carry the cost.
pub const CPU_STEPS: &[(&str, u64)] = &[(STEP_COMMIT, 0), (STEP_EXECUTE, 0), (STEP_VALIDATE, 72)];

/// FORD's figure (`Protocol::METRICS`) index: re-reads of a record found torn or
/// invisible by a lock-free read (§5.2; each one a round trip, bounded by `reread_max`).
pub const METRIC_REREADS: usize = 0;

/// FORD's figure index: time from a READ that found a record invisible to the re-read
/// that found it visible (or the abort), §6.2.2.
pub const METRIC_INVISIBLE_NS: usize = 1;
/// Where FORD's lock times are in [`METRICS`].
pub const LOCK_METRICS: lock_time::LockMetrics = lock_time::LockMetrics {
    duration: 2,
    hold: 3,
    wait: 4,
};

/// FORD's figures, in `protocol_metrics`.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec::new(
        "rereads",
        MetricKind::Counter,
        "re-reads of a record a lock-free read found torn or invisible (each bounded by `reread_max`)",
    ),
    MetricSpec::new(
        "invisible_reread_ns",
        MetricKind::Duration,
        "per record found invisible, from that READ's completion to the re-read that saw it visible or the abort (§6.2.2: its `share` of coordinator time)",
    ),
    lock_time::DURATION,
    lock_time::HOLD,
    lock_time::WAIT,
];

pub use layout::FordLayout;

/// Protocol variants. Every one but [`FordVariant::Fixed`] is deliberately broken and
/// exists only so tests can show that the isolation checker, the workload invariants or
/// the tear tests catch it; none is reachable from the command line.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum FordVariant {
    /// dmtx's FORD: validation checks versions and locks.
    #[default]
    Fixed,
    /// The paper's rule: validate versions only, read-only transactions on the replica
    /// they read from (admits write skew and read-only anomalies).
    VersionOnlyValidation,
    /// The paper's reads: trust the invisible bit and skip the checksum (returns torn
    /// records when a READ started before the commit's CAS).
    NoTearDetector,
    /// Skip the validation of read-only data altogether (read skew).
    SkipRoValidation,
    /// Release the primaries' locks before the commit WRITE lands (lost updates).
    UnlockBeforeCommitWrite,
    /// Read records whose invisible bit is set (reads of uncommitted data: G1a when the
    /// writer then rolls back).
    ReadInvisible,
    /// On a failed commit, release without restoring the old images (the aborted
    /// transaction's writes stay visible).
    SkipUndoOnFailedCommit,
    /// The paper's single read: a transaction that reads one object and writes nothing
    /// reads it from a backup and is never validated (breaks a coordinator's session
    /// order: it can miss a validated writer's pending write after seeing a later one).
    UnvalidatedSingleRead,
}

impl FordVariant {
    /// Whether it keeps FORD's published lone read (from a backup, never validated):
    /// [`FordVariant::UnvalidatedSingleRead`], and the variants of the paper's reads
    /// ([`FordVariant::ReadInvisible`], [`FordVariant::NoTearDetector`]), whose dirty or
    /// torn lone reads validation would otherwise abort.
    fn papers_lone_read(self) -> bool {
        matches!(
            self,
            FordVariant::UnvalidatedSingleRead | FordVariant::ReadInvisible | FordVariant::NoTearDetector
        )
    }
}

/// FORD's settings.
#[derive(Clone, Debug)]
pub struct FordConfig {
    /// Read read-only data from backups (§4.4).
    pub backup_read: bool,
    /// Re-reads of an invisible or torn record before aborting.
    pub reread_max: u32,
    /// Bytes of each coordinator's undo-log area on each memory node.
    pub log_bytes: u32,
    /// Retry a failed lock for up to this many µs instead of aborting (0: abort; the
    /// lock-duration mode of §6.2.1, [`lock_time`]).
    pub lock_wait_us: u64,
    /// FLUSH once per backup node after its last WRITE (§4.5, the default) or after every
    /// WRITE of the commit to every replica and log (`false`: §6.2.4's full flush).
    pub selective_flush: bool,
    /// Test-only variant.
    pub variant: FordVariant,
}

impl Default for FordConfig {
    fn default() -> Self {
        Self {
            backup_read: true,
            reread_max: 4,
            log_bytes: 64 << 10,
            lock_wait_us: 0,
            selective_flush: true,
            variant: FordVariant::Fixed,
        }
    }
}

pub(crate) const BACKUP_READ: KnobSpec = KnobSpec {
    name: "backup_read",
    default: "true",
    help: "read read-only data from backups (FORD §4.4)",
};
pub(crate) const REREAD_MAX: KnobSpec = KnobSpec {
    name: "reread_max",
    default: "4",
    help: "re-reads of an invisible or torn record before the transaction aborts",
};
pub(crate) const LOG_BYTES: KnobSpec = KnobSpec {
    name: "log_bytes",
    default: "65536",
    help: "undo-log bytes per coordinator per memory node",
};
pub(crate) const SELECTIVE_FLUSH: KnobSpec = KnobSpec {
    name: "selective_flush",
    default: "true",
    help: "FLUSH each backup node once after its last WRITE (§4.5); false: after every WRITE to every replica and log (§6.2.4's full flush)",
};

/// The FORD protocol.
#[derive(Debug, Clone)]
pub struct Ford {
    cfg: FordConfig,
    layout: FordLayout,
}

impl Ford {
    /// FORD with `cfg`.
    pub fn new(cfg: FordConfig) -> Self {
        Self {
            cfg,
            layout: crate::onever::record::OneVersionLayout,
        }
    }

    /// The settings.
    pub fn config(&self) -> &FordConfig {
        &self.cfg
    }
}

/// FORD's per-object state.
#[derive(Debug, Default)]
pub struct FordObj {
    stage: Stage,
    /// Table-relative slot offset once known.
    pub(crate) rel: u64,
    /// Replica the object is read from (0 = primary).
    replica: u8,
    /// Locks and marks held on memory nodes.
    holds: Holds,
    /// Version read.
    pub(crate) version: u64,
    /// Read from the primary and found unlocked: a lone read-only object read so needs no
    /// validation (`validate.rs`).
    pub(crate) read_unlocked: bool,
    /// Re-reads so far (invisible or torn).
    rereads: u32,
    /// When a READ last found the record invisible (0: it has not).
    invisible_at_ns: u64,
    /// Offset of the old image in `FordCoord::undo`.
    undo_at: u32,
    /// An insert's walk down its bucket chain.
    walk: Walk,
    pub(crate) read: Option<ReadId>,
    cas: Option<AtomicId>,
}

impl crate::onever::index_walk::WalkingObj for FordObj {
    #[inline]
    fn stage(&self) -> Stage {
        self.stage
    }
    #[inline]
    fn walk(&self) -> &Walk {
        &self.walk
    }
    #[inline]
    fn slot(&self) -> u64 {
        self.rel
    }
    #[inline]
    fn cas_posted(&self) -> bool {
        self.cas.is_some()
    }
    #[inline]
    fn holds_bucket_lock(&self) -> bool {
        self.holds.bucket_lock.is_some()
    }
}

impl OneVersionObj for FordObj {
    #[inline]
    fn rel(&self) -> u64 {
        self.rel
    }
    #[inline]
    fn undo_at(&self) -> usize {
        self.undo_at as usize
    }
    #[inline]
    fn holds(&mut self) -> &mut Holds {
        &mut self.holds
    }
}

/// A protocol that runs FORD's phases (`execute.rs`, `validate.rs`, `commit.rs`) on
/// FORD's coordinator and object state: FORD itself, and FORD-LV
/// ([`crate::fordlv`]), which puts its Vcache between FORD's execution and commit.
pub(crate) trait FordBase: Protocol<CoordState = FordCoord, ObjState = FordObj> {
    /// FORD's settings of this instance.
    fn ford_config(&self) -> &FordConfig;
}

impl FordBase for Ford {
    #[inline]
    fn ford_config(&self) -> &FordConfig {
        &self.cfg
    }
}

/// FORD's per-coordinator state.
pub struct FordCoord {
    /// This coordinator's lock word (`global id + 1`, never 0, bit 63 clear).
    lock: u64,
    pub(crate) post: Post,
    bg: Post,
    /// Undo-log areas, one per memory node.
    log: UndoLog,
    /// Old images of locked objects (bytes 8.. of each slot).
    undo: Vec<u8>,
    /// Scratch: memory nodes touched by the commit.
    mns: Vec<MnId>,
    /// Scratch: one encoded record.
    undo_scratch: Vec<u8>,
    /// Scratch of `execute`: per (table, home bucket) of this transaction's inserts,
    /// whether a walk is under way and whether one holds the chain's insert lock.
    insert_walks: crate::onever::index_walk::InsertWalks,
    /// Scratch of `execute`: (table, slot) of every slot this transaction's inserts
    /// claimed (locked, not yet written).
    claimed: Vec<(u32, u64)>,
}

impl Protocol for Ford {
    type CoordState = FordCoord;
    type ObjState = FordObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "ford";
    const ABOUT: &'static str =
        "FORD (FAST'22/TOS'23): hitchhiked locking, coalescent commit, backup reads, selective flush";
    const KNOBS: &'static [KnobSpec] = &[
        BACKUP_READ,
        REREAD_MAX,
        LOG_BYTES,
        lock_time::LOCK_WAIT_US,
        SELECTIVE_FLUSH,
    ];
    const METRICS: &'static [MetricSpec] = METRICS;
    const CPU_STEPS: &'static [(&'static str, u64)] = CPU_STEPS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        Ok(Self::new(FordConfig {
            backup_read: knobs.get(&BACKUP_READ)?,
            reread_max: knobs.get(&REREAD_MAX)?,
            log_bytes: knobs.get_checked(&LOG_BYTES, |v: u32| {
                if v >= 4096 && v.is_multiple_of(8) {
                    Ok(())
                } else {
                    Err("must be a multiple of 8, at least 4096".into())
                }
            })?,
            lock_wait_us: knobs.get(&lock_time::LOCK_WAIT_US)?,
            selective_flush: knobs.get(&SELECTIVE_FLUSH)?,
            variant: FordVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }

    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<FordCoord> {
        let log = UndoLog::alloc(control, self.cfg.log_bytes)?;
        let lock = ctx.id.global() + 1;
        assert!(lock & layout::INVISIBLE == 0);
        Ok(FordCoord {
            lock,
            post: Post::new(),
            bg: Post::new(),
            log,
            undo: Vec::new(),
            mns: Vec::new(),
            undo_scratch: Vec::new(),
            insert_walks: Default::default(),
            claimed: Vec::new(),
        })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        validate::validate(txn).await?;
        commit::commit(txn).await
    }

    fn abort(txn: &mut Txn<'_, Self>) {
        commit::release(txn, false);
    }
}
