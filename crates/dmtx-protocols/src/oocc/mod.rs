//! OOCC: one-RTT read-only transactions by implicit leases, delayed write lock, one-op
//! write-unlock (oocc.txt §III–VII). Isolation: **strict serializable** (§VI-B); the
//! suite checks histories in the checker's real-time mode.
//!
//! # Phases (Alg. 1, Fig. 7)
//!
//! - **Read-only** (`execute.rs`, `validate.rs`): one READ per record from its primary
//!   (a bucket READ on an address-cache miss returns it). A record's implicit lease runs
//!   from its READ's *post* time on this coordinator's clock. At the completion `c1` of
//!   the last round, a record needs no validation iff its lock word read 0 and
//!   `c1 − post < rv` (§III-B case 1). A record seen with `W` aborts the transaction
//!   (case 2.2); one seen with `I`, or out of lease at `c1`, gets one 16-byte validation
//!   READ (`lock`, `version`), which passes if `W` is clear and the version unchanged (`I`
//!   alone passes, case 2.1). Records in lease at `c1` need none even if the lease ends
//!   later: the transaction serializes at `c1`.
//! - **Read-write** (`execute.rs`, `commit.rs`), three round trips:
//!   - RTT1: a READ per read-set record; per write-set record `[CAS(lock, 0 → I|me),
//!     READ]` in one batch. A failed CAS aborts. The deadline `D = now + ww` is taken once
//!     the last CAS completion is seen (never at post).
//!   - RTT2: `WRITE(lock, I|W|me)` per written record; the redo log (new images, txn id)
//!     to every memory node holding a replica of a written record, each followed by a
//!     FLUSH; a validation READ of **every** record read but not written, in lease or
//!     not: it fails if the version changed or the lock word is not 0 (`I` too). A
//!     read-set record that showed `I` or `W` in RTT1 aborts before RTT2 (Alg. 1 line 4).
//!   - RTT3 at `max(D, end of RTT2)`: per written record and replica the commit batch
//!     `[WRITE(bytes 8..), WRITE(lock, 0)]` on the primary, `WRITE(bytes 8..)` on each
//!     backup, waited for before the commit is reported.
//!
//! # Round trips (`OOCC_BUDGET` in `tests/oocc_suite.rs`)
//!
//! | kind | RTTs | verbs (address cache warm) |
//! | --- | --- | --- |
//! | read-only, all in lease and unlocked | 1 | n READ |
//! | read-only, fallback | 2 | n READ + one READ(16 B) per record seen with `I` or out of lease |
//! | read-write | 3 + max(0, D − end of RTT2) | RTT1 CAS + READ per written, READ per read; RTT2 WRITE(8 B) per written, per MN one log WRITE + FLUSH, READ(16 B) per read; RTT3 per written record WRITE + WRITE(8 B) on the primary, WRITE per backup; with backups the WRITE(8 B) unlock goes in the background once RTT3 is ACKed (batches to different nodes keep no order: a later writer's backup WRITE could overtake ours) |
//! | read-write aborted after RTT2 | + 1 (log invalidation, awaited before any lock is released) | per MN one 8-byte WRITE |
//! | address-cache miss | + 1 for a written record (its bucket READ first), + 0 for a read one | |
//! | insert | + 1 (bucket-lock CAS + bucket READ), then as read-write | |
//! | abort before RTT2 | no extra RTT: locks released in the background | |
//!
//! The paper counts RW at 3 with Write-Unlock; without it (and with undo logs) OCC takes 4.
//!
//! Ablation knobs (§VIII-D, Fig. 6, `ablations_meet_their_round_trip_budgets`):
//!
//! | knobs | read-only | read-write |
//! | --- | --- | --- |
//! | all on (default) | 1 (2 fallback) | 3 + wait |
//! | `lease=false` | 2: every record validated | 3, no wait |
//! | `write_unlock=false` | 1 (2) | 4 + wait: RTT2 undo log (old images), RTT3 data with the locks held, RTT4 `CAS(held → 0)` |
//! | `delayed_lock=false` | 1 (2); a record write-locked since RTT1 aborts readers | 3 + wait, no upgrade WRITE |
//! | all three off (the paper's OCC, Fig. 6a) | 2 | 4 |
//! | `upper_bound=true` | 1, never validated: **unsafe**, isolation unchecked | 3 + wait |
//!
//! # Record layout
//!
//! See [`layout`]: `lock | version | key | meta | checksum | value`, the lock word
//! first. The paper puts the lock last (`[version | payload | lock]`) so one WRITE
//! updates and unlocks; a READ crossing that WRITE twice (R reads version and payload
//! old, W writes everything and clears the lock, R reads the lock 0) sees an old record
//! "unlocked" whose writer had locked it before R's post, and so commits in lease with a
//! fractured read. With the lock first, a lock read 0 means every word after it comes
//! from a commit that finished, or from a writer that locked after the READ began and
//! waits out the READ's lease before writing (layout invariant 2). The price is one
//! more 8-byte WRITE in the same batch. Tears are caught by the checksum
//! ([`crate::onever::tear`]) on every execution READ (a torn record is re-read, at most
//! `reread_max` times).
//!
//! Knob `one_op_unlock` selects the paper's layout ([`layout::OneOpLayout`]: lock and a
//! version copy after the data, one commit WRITE per replica, validation READs the whole
//! record since lock and version are apart). Its detector is the copy, valid for a READ
//! crossed at most once; `tests/oocc_broken.rs` shows two crossings commit a fractured
//! read there and not in the default layout, and the copy's absence a torn one.
//!
//! # Why it is strict serializable
//!
//! - A leased record read at `post` with lock 0: a writer that locks it afterwards sees
//!   its CAS complete after `post`, so writes no earlier than `post + ww ≥ post + rv >
//!   c1` (rv and ww are widened by the drift offset, [`crate::onever::lease`]). The
//!   record is unchanged through `c1`.
//! - A validated record read its lock without `W` and the same version after `c1`;
//!   versions are unique writer ids, so no commit wrote it between the READ and the
//!   validation, and no data WRITE was in flight at the validation (invariant 2).
//! - Read-write transactions validate every read record after all their locks are held
//!   (RTT2), so two that read each other's write sets cannot both commit (write skew);
//!   their writes land only after `W` is set on every one of them.
//!
//! # Leases, their manager and clock drift (§VII)
//!
//! Each compute node keeps one lease word (`rv`, `ww`; [`crate::onever::lease`]) that
//! every coordinator samples per round: `rv` when it posts a READ round, `ww` when it
//! sees its intention CASes complete. Widened for drift: `rv = lease − offset`, `ww =
//! lease + offset`, `offset = lease × drift_ppm_max / 10⁶` (`offset_ns` overrides).
//! With `lease_adjust` the manager ([`lease_manager`]) runs on node 0, thread 0, as a
//! service task, and changes every node's word in two phases over CN↔CN messages, the
//! intermediate word `(min, max)` in between and a wait of the old write-wait lease
//! after its last ACK; `lease_manager`'s doc argues both directions. With
//! `clock_check` every other node samples node 0's clock every
//! `clock_check_period_ms` and stops itself (aborting every later transaction with
//! `clock_stopped`) once its rate is off by more than 80 % of `drift_ppm_max`, so a
//! node never runs past the bound the offset covers. Memory nodes keep no time.
//! Either service turns messaging on; round-trip budgets are measured with both off.
//!
//! # Choices where the paper is silent or inconsistent (issue 29's)
//!
//! - **Every read-not-written record is validated in RTT2**, lease or not. Alg. 1 skips
//!   in-lease ones, which admits write skew: T1 reads X and writes Y, T2 the reverse,
//!   each READ lands before the other's CAS, both validate nothing and commit. The
//!   paper's rule is kept as [`OoccVariant::SkipInLeaseValidation`], which the checker
//!   catches.
//! - **The lock word comes first**, with a separate unlock WRITE (see above).
//! - **Redo log to every replica's node, flushed**: Alg. 1 says "store the redo logs";
//!   dmtx writes each record's new image to the log area of this coordinator on every
//!   memory node holding a replica of it (f + 1 copies), with a FLUSH behind, all in
//!   RTT2. An abort after RTT2 invalidates its logs (status word 0, awaited) before any
//!   lock is released, so recovery never replays an aborted transaction.
//! - **Leases are sampled per round**: `rv` when each READ round is posted, `ww` when
//!   the deadline is computed (§VII-A samples once per transaction).
//! - **Inserts and deletes** (paper silent): FORD's, with this lock: the home bucket's
//!   insert lock while picking a slot, the slot taken by the intention CAS, a delete
//!   writes the record back unoccupied.
//! - **Lease policy** (paper: "compute a new lease"): below `omit_target`, grow to the
//!   80th percentile of read-only read phases plus a quarter and 1 µs; shrink to that
//!   when the lease exceeds twice the percentile; within `lease_us_min..=lease_us_max`.
//! - **Clock check**: "exceeds max_drift_offset by more than 80 %" read as "the measured
//!   rate error exceeds 80 % of `drift_ppm_max`"; the rate is measured against node 0
//!   from message round trips, counting only what exceeds half the round trips.
//! - **A torn READ of a record we just locked** is read again under our lock rather
//!   than asserted impossible: a READ behind our CAS may have begun while the previous
//!   holder's commit WRITE was in service.
//!
//! # Where dmtx differs from the authors' code (`haobayuxi/oocc`)
//!
//! - No RPC or SMART coroutine framework: the verbs are dmtx's, and the lease waits are
//!   timers on the coordinator's clock (`sleep_until`), which cost no CPU.
//! - The lock is first and released by its own WRITE (above); the authors' record keeps
//!   the lock after the data.
//! - Every read record of a read-write transaction is validated (above).
//!
//! # Failures
//!
//! - A verb fails before RTT2: abort; locks released in the background.
//! - RTT2 fails: the logs may be partly written; they are invalidated (awaited, best
//!   effort) before the locks are released.
//! - RTT3 fails: the transaction is committed (every log ACKed). Each primary whose lock
//!   word still holds `I|W|me` gets its image, its backups' images and its unlock again,
//!   until they land (bounded); a primary already unlocked had its image land first
//!   (batch order). A backup WRITE lost while its primary's unlock landed is left to
//!   recovery from the redo log (a later issue).

mod commit;
mod execute;
pub mod layout;
pub mod lease_manager;
mod validate;

use std::rc::Rc;
use std::sync::Arc;

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, AbortReasonSpec, Cn, CoordCtx, Handled, Isolation, KnobError, KnobSpec, Knobs, MetricKind, MetricSpec,
    Protocol, Request, Result, Rpc, ServiceStop, ServiceTask, Txn, Worker,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::{AtomicId, MnId, Post, ReadId};

use crate::onever::index_walk::{Stage, Walk};
use crate::onever::lease::{Lease, LeaseWord};
use crate::onever::record::OneVersionLayout;
use crate::onever::undo_log::UndoLog;
use crate::onever::{Holds, OneVersionObj};

/// Per record: building its execution ops and checking the slot it read.
pub const STEP_EXECUTE: &str = "oocc.execute";
/// Per validated record: its validation read and checks.
pub const STEP_VALIDATE: &str = "oocc.validate";
/// Per written record: its image, redo entry and commit writes.
pub const STEP_COMMIT: &str = "oocc.commit";

/// OOCC's CPU steps; costs not fitted yet (0: the `txn.add` and polls carry the cost).
pub const CPU_STEPS: &[(&str, u64)] = &[(STEP_COMMIT, 0), (STEP_EXECUTE, 0), (STEP_VALIDATE, 0)];

/// Metric index: re-reads of a record found torn.
pub const METRIC_REREADS: usize = 0;
/// Metric index: read-only commits that skipped validation (every record in lease).
pub const METRIC_RO_OMITTED: usize = 1;
/// Metric index: read-only commits that validated some record.
pub const METRIC_RO_VALIDATED: usize = 2;
/// Metric index: ns read-write commits waited for their deadline `D`.
pub const METRIC_LEASE_WAIT_NS: usize = 3;

/// OOCC's figures, in `protocol_metrics`.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec::new(
        "rereads",
        MetricKind::Counter,
        "re-reads of a record an execution READ found torn (each bounded by `reread_max`)",
    ),
    MetricSpec::new(
        "ro_validation_omitted",
        MetricKind::Counter,
        "read-only commits that skipped validation: every record read unlocked and in lease (§III-B case 1)",
    ),
    MetricSpec::new(
        "ro_validated",
        MetricKind::Counter,
        "read-only commits that validated a record seen with I or out of lease (§III-B case 3, §IV case 2.1)",
    ),
    MetricSpec::new(
        "lease_wait_ns",
        MetricKind::Counter,
        "ns read-write commits waited after RTT2 for the write-wait deadline D",
    ),
];

/// Protocol variants. Every one but [`OoccVariant::Fixed`] is deliberately broken and
/// exists only so tests can show the isolation checker catches it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum OoccVariant {
    /// The protocol as documented.
    #[default]
    Fixed,
    /// Writers do not wait for `D` (§III-B case 3: fractured reads in lease).
    NoLeaseWait,
    /// Read-only transactions treat `I` as free (a record about to be written is
    /// taken as leased).
    RoIgnoresIntention,
    /// Alg. 1 literally: read-write transactions validate only records seen with `I` or
    /// out of lease (write skew).
    SkipInLeaseValidation,
    /// One commit WRITE of the whole slot, lock word first (`0`, then the image): a
    /// reader sees the lock 0 before the data lands.
    OneOpLockFirst,
    /// The paper's layout (`one_op_unlock`) without its version copy check: a READ
    /// the commit WRITE overtakes once returns a torn record.
    NoVersionCopy,
    /// The lease manager sets the new lease at once, without the intermediate word
    /// (`rv = min`, `ww = max`): for a moment a reader's `rv` exceeds a writer's `ww`.
    AdjustWithoutIntermediate,
}

/// OOCC's settings.
#[derive(Clone, Debug)]
pub struct OoccConfig {
    /// Implicit lease, µs (§VIII-F: 10).
    pub lease_us: u32,
    /// Clock-rate bound in ppm that widens the lease both ways (§VII-B: 1000).
    pub drift_ppm_max: u64,
    /// Use the address cache.
    pub addr_cache: bool,
    /// Re-reads of a torn record before aborting.
    pub reread_max: u32,
    /// Bytes of each coordinator's redo-log area on each memory node.
    pub log_bytes: u32,
    /// The paper's layout: lock and version copy after the data, one commit WRITE
    /// (§V; valid only for READs crossed at most once by a WRITE, see [`layout`]).
    pub one_op_unlock: bool,
    /// Ablation (§VIII-D): implicit leases (off: every read-only record is validated,
    /// writers never wait).
    pub lease: bool,
    /// Ablation: redo log and the unlock in the commit batch (off: an undo log in RTT2,
    /// the data in RTT3 and the unlock in an RTT4 of its own, Fig. 6a/b).
    pub write_unlock: bool,
    /// Ablation: intention lock at execution, `W` only in RTT2 (off: `W` taken by the
    /// execution CAS, so readers abort on it from RTT1 on).
    pub delayed_lock: bool,
    /// Read-only transactions never validate: the paper's unsafe upper bound.
    pub upper_bound: bool,
    /// A fixed drift offset in ns instead of `lease × drift_ppm_max`.
    pub offset_ns: Option<u32>,
    /// Run the lease manager on node 0 (§VII-A).
    pub lease_adjust: bool,
    /// Period of the manager's statistics pull, ms.
    pub lease_adjust_period_ms: f64,
    /// Share of read-only commits the manager wants to skip validation.
    pub omit_target: f64,
    /// Bounds of the leases the manager picks, µs.
    pub lease_us_min: u32,
    /// See `lease_us_min`.
    pub lease_us_max: u32,
    /// Every node but 0 measures its clock rate against node 0's and stops itself past
    /// 80 % of `drift_ppm_max` (§VII-B).
    pub clock_check: bool,
    /// Period of the clock-rate measurement, ms.
    pub clock_check_period_ms: f64,
    /// Test-only: the manager cycles through these leases (µs), one per period, instead
    /// of following its policy.
    pub adjust_script: Option<Vec<u32>>,
    /// Test-only: the manager also counts its adjustments here.
    pub report: Option<Arc<lease_manager::ManagerStats>>,
    /// Test-only variant.
    pub variant: OoccVariant,
}

impl Default for OoccConfig {
    fn default() -> Self {
        Self {
            lease_us: 10,
            drift_ppm_max: 1_000,
            addr_cache: true,
            reread_max: 4,
            log_bytes: 64 << 10,
            one_op_unlock: false,
            lease: true,
            write_unlock: true,
            delayed_lock: true,
            upper_bound: false,
            offset_ns: None,
            lease_adjust: true,
            lease_adjust_period_ms: 1000.0,
            omit_target: 0.8,
            lease_us_min: 1,
            lease_us_max: 1000,
            clock_check: true,
            clock_check_period_ms: 100.0,
            adjust_script: None,
            report: None,
            variant: OoccVariant::Fixed,
        }
    }
}

impl OoccConfig {
    /// The lease word every compute node starts with: `lease_us` widened by the drift
    /// offset (`rv = lease − offset`, `ww = lease + offset`).
    pub fn lease(&self) -> Lease {
        if !self.lease {
            return Lease::default();
        }
        lease_manager::word(self, self.lease_us.saturating_mul(1_000))
    }

    /// Whether a node messages others: the lease manager or the clock monitor runs.
    fn messages(&self) -> bool {
        self.lease && (self.lease_adjust || self.clock_check)
    }
}

const LEASE_US: KnobSpec = KnobSpec {
    name: "lease_us",
    default: "10",
    help: "implicit lease in µs: read-only records read within it skip validation, writers wait it out (§III)",
};
const DRIFT_PPM_MAX: KnobSpec = KnobSpec {
    name: "drift_ppm_max",
    default: "1000",
    help: "clock-rate bound in ppm; the lease is shortened for readers and lengthened for writers by lease × bound (§VII-B)",
};
const ADDR_CACHE: KnobSpec = KnobSpec {
    name: "addr_cache",
    default: "true",
    help: "cache record addresses (a miss reads the bucket)",
};
const REREAD_MAX: KnobSpec = KnobSpec {
    name: "reread_max",
    default: "4",
    help: "re-reads of a torn record before the transaction aborts",
};
const LOG_BYTES: KnobSpec = KnobSpec {
    name: "log_bytes",
    default: "65536",
    help: "redo-log bytes per coordinator per memory node",
};

const ONE_OP_UNLOCK: KnobSpec = KnobSpec {
    name: "one_op_unlock",
    default: "false",
    help: "the paper's layout: lock and version copy after the data, one commit WRITE (safe only if a READ crosses a WRITE at most once; with backups a later writer's backup WRITE may overtake this one's)",
};

const LEASE: KnobSpec = KnobSpec {
    name: "lease",
    default: "true",
    help: "ablation (§VIII-D): implicit leases; off, every read-only record is validated and writers never wait",
};
const WRITE_UNLOCK: KnobSpec = KnobSpec {
    name: "write_unlock",
    default: "true",
    help: "ablation: redo log and unlock in the commit batch (3-RTT read-write); off, undo log and a separate unlock round (4 RTTs)",
};
const DELAYED_LOCK: KnobSpec = KnobSpec {
    name: "delayed_lock",
    default: "true",
    help: "ablation: intention lock at execution, write lock in RTT2; off, the execution CAS takes the write lock",
};
const UPPER_BOUND: KnobSpec = KnobSpec {
    name: "upper_bound",
    default: "false",
    help: "UNSAFE upper bound: read-only transactions never validate (results marked unchecked)",
};

const OFFSET_NS: KnobSpec = KnobSpec {
    name: "offset_ns",
    default: "auto",
    help: "drift offset in ns (rv = lease − offset, ww = lease + offset); auto: lease × drift_ppm_max (§VII-B)",
};
const LEASE_ADJUST: KnobSpec = KnobSpec {
    name: "lease_adjust",
    default: "true",
    help: "run the lease manager on compute node 0 (§VII-A): two-phase changes of every node's lease",
};
const LEASE_ADJUST_PERIOD_MS: KnobSpec = KnobSpec {
    name: "lease_adjust_period_ms",
    default: "1000",
    help: "how often the lease manager pulls read-only statistics and may adjust, ms (fractions allowed)",
};
const OMIT_TARGET: KnobSpec = KnobSpec {
    name: "omit_target",
    default: "0.8",
    help: "share of read-only commits the lease manager wants to skip validation",
};
const LEASE_US_MIN: KnobSpec = KnobSpec {
    name: "lease_us_min",
    default: "1",
    help: "shortest lease the manager picks, µs",
};
const LEASE_US_MAX: KnobSpec = KnobSpec {
    name: "lease_us_max",
    default: "1000",
    help: "longest lease the manager picks, µs",
};
const CLOCK_CHECK: KnobSpec = KnobSpec {
    name: "clock_check",
    default: "true",
    help:
        "every node but 0 measures its clock rate against node 0's and stops itself past 80 % of drift_ppm_max (§VII-B)",
};
const CLOCK_CHECK_PERIOD_MS: KnobSpec = KnobSpec {
    name: "clock_check_period_ms",
    default: "100",
    help: "how often a node samples node 0's clock, ms (fractions allowed)",
};

/// OOCC's abort reason: the node stopped itself on a clock drifting past the bound.
pub const ABORT_CLOCK_STOPPED: u8 = 0;

/// The OOCC protocol.
#[derive(Debug, Clone)]
pub struct Oocc {
    cfg: OoccConfig,
}

impl Oocc {
    /// OOCC with `cfg`.
    pub fn new(cfg: OoccConfig) -> Self {
        assert!(
            cfg.lease_us <= 4_000_000,
            "lease_us = {} does not fit the lease word",
            cfg.lease_us
        );
        assert!(
            cfg.write_unlock || !cfg.one_op_unlock,
            "one_op_unlock unlocks with the commit WRITE: it needs write_unlock"
        );
        Self { cfg }
    }

    /// Where the lock word and version copy of a slot of `slot_bytes` are.
    #[inline]
    pub fn words(&self, slot_bytes: u32) -> layout::Words {
        if self.cfg.one_op_unlock {
            layout::Words::last(slot_bytes as usize)
        } else {
            layout::Words::FIRST
        }
    }

    /// OOCC with a test-only broken `variant` (see [`OoccVariant`]).
    pub fn with_variant(mut cfg: OoccConfig, variant: OoccVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }

    /// The settings.
    pub fn config(&self) -> &OoccConfig {
        &self.cfg
    }
}

/// One compute node's state: its lease word, read by every coordinator of the node,
/// and what the lease manager and the clock monitor keep.
#[derive(Debug, Default)]
pub struct OoccCn {
    /// The leases in use on this node (invariants in [`crate::onever::lease`]).
    pub lease: LeaseWord,
    /// Statistics, the stop flag and the manager's figures.
    pub control: lease_manager::NodeControl,
}

/// OOCC's per-object state.
#[derive(Debug, Default)]
pub struct OoccObj {
    stage: Stage,
    rel: u64,
    holds: Holds,
    /// Version read.
    version: u64,
    /// Lock word the execution READ saw (read set).
    lock_seen: u64,
    /// Clock when the READ that returned the record was posted (read set).
    post_ns: u64,
    /// Read-validate lease sampled at that post.
    rv_ns: u32,
    rereads: u32,
    /// Offset of the new image in `OoccCoord::images` (written records, at commit).
    image_at: u32,
    /// Offset of the old image in `OoccCoord::undo` (written records, from RTT1).
    undo_at: u32,
    walk: Walk,
    read: Option<ReadId>,
    cas: Option<AtomicId>,
}

impl crate::onever::index_walk::WalkingObj for OoccObj {
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

impl OneVersionObj for OoccObj {
    #[inline]
    fn rel(&self) -> u64 {
        self.rel
    }
    /// Where the object's *new* image starts in the image buffer: the log writer of
    /// [`crate::onever::undo_log`] copies whatever image it is pointed at, here the redo
    /// image.
    #[inline]
    fn undo_at(&self) -> usize {
        self.image_at as usize
    }
    #[inline]
    fn holds(&mut self) -> &mut Holds {
        &mut self.holds
    }
}

/// OOCC's per-coordinator state.
pub struct OoccCoord {
    /// This coordinator's owner bits (`global id + 1`).
    owner: u64,
    post: Post,
    bg: Post,
    /// Redo-log areas, one per memory node (the undo-log writer, fed new images).
    log: UndoLog,
    /// New images of the written records (bytes 8..).
    images: Vec<u8>,
    /// Old images of the written records as RTT1 read them (bytes 8..).
    undo: Vec<u8>,
    /// With `write_unlock` off: the old images at the offsets of `images` (the undo log).
    old_images: Vec<u8>,
    /// Scratch: memory nodes holding a replica of a written record.
    mns: Vec<MnId>,
    /// Clock when the last execution round's completion was seen (`c1`).
    done_ns: u64,
    /// Deadline `D`: last intention CAS completion seen + `ww` then.
    deadline_ns: u64,
    insert_walks: crate::onever::index_walk::InsertWalks,
    claimed: Vec<(u32, u64)>,
}

impl OoccCoord {
    /// This coordinator's log area on `mn` (its status word at
    /// [`crate::onever::undo_log::LOG_STATUS_OFFSET`]): for recovery and tests.
    pub fn log_area(&self, mn: MnId) -> dmtx_verbs::RemotePtr {
        self.log.area(mn)
    }
}

impl Protocol for Oocc {
    type CoordState = OoccCoord;
    type ObjState = OoccObj;
    type CnState = OoccCn;
    type ThreadState = ();

    const NAME: &'static str = "oocc";
    const ABOUT: &'static str =
        "OOCC (oocc.txt): implicit leases for 1-RTT read-only txns, intention + delayed write lock, 3-RTT read-write";
    const KNOBS: &'static [KnobSpec] = &[
        LEASE_US,
        DRIFT_PPM_MAX,
        ADDR_CACHE,
        REREAD_MAX,
        LOG_BYTES,
        ONE_OP_UNLOCK,
        LEASE,
        WRITE_UNLOCK,
        DELAYED_LOCK,
        UPPER_BOUND,
        OFFSET_NS,
        LEASE_ADJUST,
        LEASE_ADJUST_PERIOD_MS,
        OMIT_TARGET,
        LEASE_US_MIN,
        LEASE_US_MAX,
        CLOCK_CHECK,
        CLOCK_CHECK_PERIOD_MS,
    ];
    const ABORT_REASONS: &'static [AbortReasonSpec] = &[AbortReasonSpec::new(
        "clock_stopped",
        false,
        "this compute node measured its clock rate off by more than 80 % of drift_ppm_max and stopped itself (§VII-B)",
    )];
    const METRICS: &'static [MetricSpec] = METRICS;
    const CPU_STEPS: &'static [(&'static str, u64)] = CPU_STEPS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        Ok(Self::new(OoccConfig {
            lease_us: knobs.get_checked(&LEASE_US, |v: u32| {
                if v <= 4_000_000 {
                    Ok(())
                } else {
                    Err("must be at most 4000000 (4 s)".into())
                }
            })?,
            drift_ppm_max: knobs.get_checked(&DRIFT_PPM_MAX, |v: u64| {
                if v < 1_000_000 {
                    Ok(())
                } else {
                    Err("must be below 1000000".into())
                }
            })?,
            addr_cache: knobs.get(&ADDR_CACHE)?,
            reread_max: knobs.get(&REREAD_MAX)?,
            log_bytes: knobs.get_checked(&LOG_BYTES, |v: u32| {
                if v >= 4096 && v.is_multiple_of(8) {
                    Ok(())
                } else {
                    Err("must be a multiple of 8, at least 4096".into())
                }
            })?,
            one_op_unlock: knobs.get(&ONE_OP_UNLOCK)?,
            lease: knobs.get(&LEASE)?,
            write_unlock: knobs.get_checked(&WRITE_UNLOCK, |v: bool| {
                if v || !knobs.get::<bool>(&ONE_OP_UNLOCK).unwrap_or(false) {
                    Ok(())
                } else {
                    Err("one_op_unlock=true unlocks with the commit WRITE; set one_op_unlock=false to turn write_unlock off".into())
                }
            })?,
            delayed_lock: knobs.get(&DELAYED_LOCK)?,
            upper_bound: knobs.get(&UPPER_BOUND)?,
            offset_ns: match knobs.get::<String>(&OFFSET_NS)?.as_str() {
                "auto" => None,
                _ => Some(knobs.get(&OFFSET_NS)?),
            },
            lease_adjust: knobs.get(&LEASE_ADJUST)?,
            lease_adjust_period_ms: knobs.get_checked(&LEASE_ADJUST_PERIOD_MS, positive)?,
            omit_target: knobs.get_checked(&OMIT_TARGET, |v: f64| {
                if (0.0..=1.0).contains(&v) {
                    Ok(())
                } else {
                    Err("must be within 0..=1".into())
                }
            })?,
            lease_us_min: knobs.get(&LEASE_US_MIN)?,
            lease_us_max: knobs.get_checked(&LEASE_US_MAX, |v: u32| {
                if v <= 4_000_000 {
                    Ok(())
                } else {
                    Err("must be at most 4000000 (4 s)".into())
                }
            })?,
            clock_check: knobs.get(&CLOCK_CHECK)?,
            clock_check_period_ms: knobs.get_checked(&CLOCK_CHECK_PERIOD_MS, positive)?,
            adjust_script: None,
            report: None,
            variant: OoccVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        if self.cfg.upper_bound {
            Isolation::Unchecked
        } else {
            Isolation::StrictSerializable
        }
    }

    fn messaging(&self) -> bool {
        self.cfg.messages()
    }

    fn thread_state(&self, cn: &Arc<OoccCn>, worker: &Worker) -> Result<()> {
        if let (true, 0, Some(rpc)) = (self.cfg.messages(), worker.thread(), worker.rpc()) {
            let (cn, clock) = (Arc::clone(cn), Arc::clone(&worker.cn().clock));
            rpc.set_handler(move |_: &Rpc, req: Request<'_>, reply: &mut Vec<u8>| {
                lease_manager::handle(&cn, &*clock, req.payload, reply);
                Handled::Reply
            });
        }
        Ok(())
    }

    fn services(&self, cn: &Arc<OoccCn>, _: &Rc<()>, worker: &Worker, stop: &ServiceStop) -> Vec<ServiceTask> {
        let (Some(rpc), 0) = (worker.rpc(), worker.thread()) else {
            return Vec::new();
        };
        let (rpc, clock, cn) = (Rc::clone(rpc), Arc::clone(&worker.cn().clock), Arc::clone(cn));
        let cfg = self.cfg.clone();
        let stop = stop.clone();
        match worker.cn().id {
            0 if cfg.lease && cfg.lease_adjust => vec![Box::pin(lease_manager::run(cfg, rpc, clock, stop, cn))],
            0 => Vec::new(),
            _ if cfg.lease && cfg.clock_check => vec![Box::pin(lease_manager::monitor(cfg, rpc, clock, stop, cn))],
            _ => Vec::new(),
        }
    }

    fn layout(&self) -> &dyn SlotLayout {
        if self.cfg.one_op_unlock {
            &layout::OneOpLayout
        } else {
            &OneVersionLayout
        }
    }

    fn cn_state(&self, _cn: &Cn) -> Result<OoccCn> {
        Ok(OoccCn {
            lease: LeaseWord::new(self.cfg.lease()),
            control: Default::default(),
        })
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<OoccCoord> {
        let log = UndoLog::alloc(control, self.cfg.log_bytes)?;
        let owner = ctx.id.global() + 1;
        assert!(owner & !layout::OWNER == 0, "owner {owner} overflows the lock word");
        Ok(OoccCoord {
            owner,
            post: Post::new(),
            bg: Post::new(),
            log,
            images: Vec::new(),
            undo: Vec::new(),
            old_images: Vec::new(),
            mns: Vec::new(),
            done_ns: 0,
            deadline_ns: 0,
            insert_walks: Default::default(),
            claimed: Vec::new(),
        })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        if txn.coord.set.objs.iter().any(|o| o.access.writes()) {
            commit::commit(txn).await
        } else {
            validate::read_only(txn).await
        }
    }

    fn abort(txn: &mut Txn<'_, Self>) {
        let c = &mut *txn.coord;
        let st = &mut c.state;
        st.bg.clear();
        for o in c.set.objs.iter_mut() {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            if std::mem::take(&mut o.proto.holds.locked) {
                let lock_at = c.proto.words(info.shape.slot_bytes).lock as u64;
                st.bg.write(info.ptr(0, o.proto.rel + lock_at), &0u64.to_le_bytes());
            }
            if let Some(b) = o.proto.holds.bucket_lock.take() {
                st.bg
                    .write(info.ptr(0, b + dmtx_store::BUCKET_LOCK_OFFSET), &0u64.to_le_bytes());
            }
        }
        c.ctx.post_background(&mut st.bg);
    }
}

fn positive(v: f64) -> std::result::Result<(), String> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err("must be a positive number".into())
    }
}

/// The lease word of the coordinator's node.
#[inline]
fn lease_now(cn: &Arc<OoccCn>) -> Lease {
    cn.lease.get()
}
