//! DrTM+H (Wei et al., OSDI'18) re-implemented on one-sided verbs for disaggregated
//! memory as FORD's evaluation does (ford.txt §3.2, §4.2, §4.6, §6.1). Isolation:
//! **serializable**, except for the cross-node window below, which only `strict=true`
//! closes.
//!
//! DrTM+H is FaRM with the lock and validation phases merged into one round trip
//! (§3.2: "DrTM+H merges the locking and validation phases but still consumes an RTT to
//! validate the read-write set"; §4.2 lists its lock duration as lock&validate +
//! commit-backup + commit-primary&unlock). Execution, commit and truncation are FaRM's
//! own code ([`crate::farm`]); only the lock&validate round is here.
//!
//! # Phases
//!
//! 1. **Execution** (FaRM's, [`crate::farm`]): every object is READ from its primary
//!    without a lock; backups are never read (§3.2, §4.4). The address cache is on by
//!    default (FORD's code gives DrTM+H one, unlike FaRM): a warm record is READ from
//!    its slot, a cold one from its home bucket. An insert reads the bucket under the
//!    chain's insert lock, picks a free slot and locks it (§3.2).
//! 2. **Lock & validate** (`validate.rs`, one round trip): per read-write and delete
//!    object, `CAS(vlock, 0 → me)` on its primary with an 8-byte READ of its version
//!    behind it in the same batch (CAS first, as FORD's code does); per read-only
//!    object a 16-byte READ (`vlock` + `version`) of its primary. Every CAS precedes
//!    every read-only READ in the post. A failed CAS aborts (no waiting, unless
//!    `lock_wait_us`: then the refused CASes are re-posted with their version READs, a
//!    round per try, and the read-only records validated in a round after); validation
//!    fails if a version changed or a read-only record is locked by another
//!    coordinator.
//! 3. **Commit-backup** (FaRM's): redo records into this coordinator's log area on
//!    every node holding a backup, one selective FLUSH per node after its last WRITE,
//!    every ACK awaited ([`crate::onever::redo_log`]).
//! 4. **Commit-primary** (FaRM's): per primary the in-place WRITE of the new image, then
//!    `WRITE(vlock, 0)`, in one round trip; the commit is reported on its ACK.
//! 5. **Truncation** (FaRM's, `Protocol::cleanup` every `truncate_batch` commits and
//!    `Protocol::drain`): version-guarded installs of the logged images into the
//!    backups, then the logs are freed; a full log area stalls its commit (counted).
//!
//! # Round trips per transaction (`DRTMH_BUDGET` in `tests/drtmh_suite.rs`)
//!
//! | kind | RTTs (f ≥ 1) | `strict=true` | verbs |
//! | --- | --- | --- | --- |
//! | read-only, 1 record | 1 (2 when the primary was locked) | same | 1 READ (slot warm, bucket cold) (+ 1 READ(16 B)) |
//! | read-only, n records | 2 | same | n READs + n READ(16 B) |
//! | read-write, no RO data | 4 | same | READs; per record CAS + READ(8 B); per backup node a log WRITE + FLUSH; per primary WRITE + WRITE(vlock) |
//! | read-write with RO data | 4 | 5 | the above + the RO records' READs and READ(16 B) |
//! | insert | 4: lookup (bucket lock CAS + bucket READ), slot CAS + READ, commit-backup, commit-primary | same | |
//! | delete | 4, as read-write | same | |
//! | truncation (cleanup) | 2 per `truncate_batch` committed transactions with backups | same | as FaRM |
//!
//! With one replica there is no backup: commit-backup and truncation are left out.
//! `strict=true` adds its round trip only where there is something to order: a
//! transaction that locks nothing, or reads nothing it does not lock, has no window.
//!
//! # The window (why DrTM+H's one round trip is not serializable)
//!
//! One node runs a batch's ops in order, so on one memory node a transaction's CASes
//! precede its read-only READs. Batches to different nodes run in parallel, with no
//! order between them: a read-only READ on node X may run before the same post's CAS on
//! node Y. Take T1 reading A (primary on X) and writing B (primary on Y), and T2
//! reading B and writing A. If T1's READ of A runs at X before T2's CAS of A, and T2's
//! READ of B runs at Y before T1's CAS of B, each sees the other's read record unlocked
//! and unchanged, both lock&validate rounds pass, and both commit: write skew, a cycle
//! the isolation checker reports. On one node the same interleaving is impossible
//! (each transaction's CAS precedes its READ there, which would order the four ops in a
//! cycle). FaRM does not have the window: it validates only after its lock round
//! completed, so whichever of T1 and T2 validates second sees the other's lock.
//! `tests/drtmh_window.rs` runs exactly this interleaving (memory nodes' batches
//! executed in an order the verb contract allows) and shows the checker catch it.
//!
//! `strict=true` closes it at +1 round trip for read-write transactions with read-only
//! data: the write set is locked and its versions read in the first round, and the
//! read-only records are validated in a second, after every lock is held (FaRM's
//! argument). The default keeps the single round trip, since that round trip is what
//! DrTM+H is measured for (issue 27).
//!
//! # Record layout and tear detection
//!
//! FaRM's: the one-version record ([`crate::onever::record`], 40 header bytes), bits
//! 1-31 of `meta` the write sequence ordering truncation installs, and the checksum
//! ([`crate::onever::tear`], 8 B per record) checked on every execution READ; a torn
//! READ is re-read (`reread_max` times, counted in `rereads`).
//!
//! # Rules the paper is silent on, and deviations
//!
//! - **Validation fails on a read-only record locked by another coordinator**, not only
//!   on a changed version (issue 27 item 3): versions alone let T1 (locks B, reads A)
//!   and T2 (locks A, reads B) both commit, even on one memory node. The
//!   versions-only rule is kept as [`DrtmhVariant::VersionOnlyValidation`], which the
//!   isolation checker catches.
//! - **The order of ops in the lock&validate post** (CAS before its own version READ,
//!   every CAS before every read-only READ) is FORD's code's; the paper does not say.
//!   It is what closes the window on one memory node.
//! - **A lone read-only record skips validation only when its READ saw the lock word
//!   clear** (FORD's code skips it always).
//! - **Versions are writer ids**, compared for equality only; inserts lock the home
//!   bucket's chain while picking a slot; a delete writes the record back invalid
//!   (§3.2); truncation is awaited in `cleanup` — all as FaRM ([`crate::farm`]).
//!
//! # Lock times (§6.2.1)
//!
//! Every lock this protocol takes is timed ([`crate::onever::lock_time`]): its
//! `lock_duration_ns` (first attempt to release, the paper's figure), `lock_hold_ns` and
//! `lock_wait_ns`, with p50, p99 and share of coordinator time in `protocol_metrics`.
//! `--set lock_wait_us=N` is the paper's measuring mode: a refused lock is retried for up
//! to N µs, one round trip per try, instead of aborting at once (the default, 0).
//!
//! # Failures
//!
//! As FaRM's: a failed verb before commit-primary aborts and releases the locks (a
//! lock&validate post that fails gives back, by CAS, every lock it may have taken); a
//! failed commit-primary post is committed (every backup holds the redo log) and its
//! writes and unlocks are repeated until they land; a failed truncation round is
//! retried. A compute node crashing mid-commit leaves its locks and logs to a recovery
//! dmtx does not have.

mod validate;

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, CoordCtx, Coordinator, Isolation, KnobError, KnobSpec, Knobs, MetricSpec, Protocol, Result, Txn,
};
use dmtx_store::SlotLayout;

use crate::farm::{self, FarmCoord, FarmObj, RedoFamily};
use crate::onever::record::OneVersionLayout;

/// Per record: building its execution ops and checking the slot it read.
pub const STEP_EXECUTE: &str = "drtmh.execute";
/// Per locked or validated record: its lock&validate ops and checks.
pub const STEP_LOCK_VALIDATE: &str = "drtmh.lock_validate";
/// Per written record: its image, redo entry and primary write.
pub const STEP_COMMIT: &str = "drtmh.commit";

/// DrTM+H's CPU steps; costs not fitted yet (0: the `txn.add` and polls carry the cost).
pub const CPU_STEPS: &[(&str, u64)] = &[(STEP_COMMIT, 0), (STEP_EXECUTE, 0), (STEP_LOCK_VALIDATE, 0)];

/// DrTM+H's figures, in `protocol_metrics`: FaRM's, at the same indices
/// ([`farm::METRIC_REREADS`], [`farm::METRIC_INSTALLS`], [`farm::METRIC_INSTALL_RETRIES`],
/// [`farm::METRIC_LOG_FULL_STALLS`]), since the code that counts them is shared.
pub const METRICS: &[MetricSpec] = farm::METRICS;

/// Protocol variants. Every one but [`DrtmhVariant::Fixed`] is deliberately broken and
/// exists only so tests can show the isolation checker catches it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum DrtmhVariant {
    /// Validation checks versions and locks.
    #[default]
    Fixed,
    /// The paper's silence taken literally: validate read-only records' versions only
    /// (write skew, on one memory node too).
    VersionOnlyValidation,
}

/// DrTM+H's settings.
#[derive(Clone, Debug)]
pub struct DrtmhConfig {
    /// Use the address cache (FORD's code gives DrTM+H one).
    pub addr_cache: bool,
    /// Re-reads of a torn record before aborting.
    pub reread_max: u32,
    /// Bytes of each coordinator's redo-log area on each memory node.
    pub log_bytes: u32,
    /// Committed transactions queued before the cleanup truncates them.
    pub truncate_batch: u32,
    /// Validate the read-only records in a round of their own, after every lock is
    /// held: closes the cross-node window at +1 round trip.
    pub strict: bool,
    /// Retry a failed lock for up to this many µs instead of aborting (0: abort;
    /// [`crate::onever::lock_time`]).
    pub lock_wait_us: u64,
    /// Test-only variant.
    pub variant: DrtmhVariant,
}

impl Default for DrtmhConfig {
    fn default() -> Self {
        Self {
            addr_cache: true,
            reread_max: 4,
            log_bytes: 64 << 10,
            truncate_batch: 1,
            strict: false,
            lock_wait_us: 0,
            variant: DrtmhVariant::Fixed,
        }
    }
}

const ADDR_CACHE: KnobSpec = KnobSpec {
    name: "addr_cache",
    default: "true",
    help: "cache record addresses (FORD's code gives DrTM+H one; off: bucket READs instead)",
};
const STRICT: KnobSpec = KnobSpec {
    name: "strict",
    default: "false",
    help: "validate read-only records after every lock is held: serializable across memory nodes, +1 round trip for read-write transactions with read-only data",
};

/// The DrTM+H protocol.
#[derive(Debug, Clone)]
pub struct Drtmh {
    cfg: DrtmhConfig,
    layout: OneVersionLayout,
}

impl Drtmh {
    /// DrTM+H with `cfg`.
    pub fn new(cfg: DrtmhConfig) -> Self {
        Self {
            cfg,
            layout: OneVersionLayout,
        }
    }

    /// DrTM+H with a test-only broken `variant` (see [`DrtmhVariant`]).
    pub fn with_variant(mut cfg: DrtmhConfig, variant: DrtmhVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }

    /// The settings.
    pub fn config(&self) -> &DrtmhConfig {
        &self.cfg
    }
}

impl RedoFamily for Drtmh {
    const STEP_EXECUTE: &'static str = STEP_EXECUTE;
    const STEP_COMMIT: &'static str = STEP_COMMIT;
    const POINT_AFTER_VALIDATE: &'static str = "drtmh.commit.after_validate";
    const POINT_AFTER_BACKUP: &'static str = "drtmh.commit.after_backup";
    const POINT_SETTLE: &'static str = "drtmh.commit.settle";
    fn addr_cache(&self) -> bool {
        self.cfg.addr_cache
    }
    fn reread_max(&self) -> u32 {
        self.cfg.reread_max
    }
    fn truncate_batch(&self) -> u32 {
        self.cfg.truncate_batch
    }
}

impl Protocol for Drtmh {
    type CoordState = FarmCoord;
    type ObjState = FarmObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "drtmh";
    const ABOUT: &'static str =
        "DrTM+H on one-sided verbs (as in FORD §6.1): one lock&validate round, commit-backup redo logs, commit-primary";
    const KNOBS: &'static [KnobSpec] = &[
        ADDR_CACHE,
        farm::REREAD_MAX,
        farm::LOG_BYTES,
        farm::TRUNCATE_BATCH,
        STRICT,
        crate::onever::lock_time::LOCK_WAIT_US,
    ];
    const METRICS: &'static [MetricSpec] = METRICS;
    const CPU_STEPS: &'static [(&'static str, u64)] = CPU_STEPS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        Ok(Self::new(DrtmhConfig {
            addr_cache: knobs.get(&ADDR_CACHE)?,
            reread_max: knobs.get(&farm::REREAD_MAX)?,
            log_bytes: farm::log_bytes(knobs)?,
            truncate_batch: farm::truncate_batch(knobs)?,
            strict: knobs.get(&STRICT)?,
            lock_wait_us: knobs.get(&crate::onever::lock_time::LOCK_WAIT_US)?,
            variant: DrtmhVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }

    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<FarmCoord> {
        FarmCoord::new(ctx, control, self.cfg.log_bytes)
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        farm::execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        validate::lock_validate(txn).await?;
        farm::commit::commit(txn).await
    }

    fn abort(txn: &mut Txn<'_, Self>) {
        farm::release_on_abort(txn)
    }

    async fn cleanup(coord: &mut Coordinator<Self>) {
        let batch = coord.proto.truncate_batch();
        farm::truncate(coord, batch).await
    }

    async fn drain(coord: &mut Coordinator<Self>) {
        farm::drain(coord).await
    }
}
