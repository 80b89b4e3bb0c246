//! Motor (Zhang et al., OSDI'24, `motor.txt`): multi-versioning on disaggregated
//! memory with consecutive version tuples (CVTs), on one-sided verbs. Isolation:
//! **serializable** (default) or **snapshot isolation** (`--set isolation=si`, §5.2).
//!
//! # Memory store (§4)
//!
//! A record is a CVT in a hash-bucket slot (so a bucket READ returns CVTs, §4.1) and a
//! Vpkg in the table's value region; the old attributes of older versions are in an
//! attribute bar, also in the value region (§4.2). All pointers are table-relative, so
//! every replica holds the same bytes.
//!
//! ```text
//! CVT (slot)  = header 40 B + VNum × Vcell 56 B          (VNum 4: 264 B)
//!   header    = lock 8 | table id 4 + occupied 1 + bar size 3 | key 8 | AttrBarPtr 8 | VpkgPtr 8
//!   Vcell     = VcellSA 1 | Valid 1 | flags 1 | pad 1 | StartOffset 4 | Version 8
//!             | writer txn id 8 | Bitmap 8 | attr check 8 | prev version 8
//!             | cell check 4 | pad 3 | VcellEA 1
//! Vpkg        = VpkgSA (word) 8 | version 8 | check 8 | value (padded to 8) | VpkgEA (word) 8
//! bar         = ABS bytes: the old attributes of successive versions, packed, as a ring
//! value region = [64 B header][loaded Vpkgs]...[delta_spaces delta spaces]
//!   (`delta_bytes` each; by default the region is twice the larger of its loaded part
//!   and the table's wanted delta area, a full value per record of its capacity and a
//!   Vpkg per record it may grow by, and the spaces split its second half)
//! ```
//!
//! Tear detector, beyond the paper's four one-byte anchors (`VcellSA/EA`,
//! `VpkgSA/EA`, which catch a READ crossing one write boundary only): a 4-byte check in
//! every Vcell over its other bytes, the version and an 8-byte checksum in every Vpkg,
//! and an 8-byte checksum of every bar entry in the Vcell that describes it. Any mixture
//! of old and new words in a CVT, a Vpkg or a bar entry fails one of them (except with
//! probability about 2^-32 for a Vcell, 2^-64 otherwise). A CVT READ racing GC may also
//! return some Vcells from before and some from after an overwrite, each intact; every
//! Vcell therefore names the version it replaced (`prev`), and a read takes its version
//! only from what the cells prove ([`layout::pick`]). Cost per record: 20 B per Vcell
//! (checks and `prev`) + 16 B per Vpkg, beyond the paper's anchors (2 B each). The
//! anchors-only check is kept as [`MotorVariant::AnchorsOnly`], which the tear tests
//! catch.
//!
//! VNum is fixed for a run (§4.1): `vnum` (default 4, the paper's KVS and TPC-C value;
//! §7.2 uses TATP 2, SmallBank 3), overridden per table by `vnum_tables=name:n,...`.
//! The attribute bar size (ABS) is §4.2's formula over TotAttrSize frequencies
//! ([`layout::attr_bar_bytes`]), sampled from the run: each coordinator counts the
//! TotAttrSizes its writes change per table, and sizes a record's bar from its counts
//! so far when it allocates it (at least the entry at hand), or `bar_bytes` when set.
//! A bar that cannot hold an entry at all is replaced by a larger one (the versions
//! whose attributes were in the old bar are reclaimed); the bar's size is in the CVT
//! header (24 bits of the table word), so every writer knows it.
//!
//! # Protocol (§5.1–5.2)
//!
//! | phase | verbs |
//! | --- | --- |
//! | T_start | SR read-write: the raw counter; read-only (hinted) and every SI transaction: the completed-commit watermark |
//! | execution round 1 | RO data: READ the CVT (cache hit) or the bucket (miss); RW data: CAS lock + READ CVT (hit) or bucket READ (miss); insert: CAS home-bucket insert lock + bucket READ |
//! | execution round 2 | READ the old attributes, then the Vpkg; RW data found by bucket: CAS lock + re-READ of the CVT in front; insert: CAS lock + re-READ of the free CVT |
//! | T_commit | after every lock is held |
//! | validation (SR, RO data) | re-READ each RO CVT: abort if locked or V' ≠ V0 |
//! | commit | per replica: Vpkg, bar entry, reclaimed Vcells, header, the new Vcell; once all are acknowledged, unlock the primary (CAS owner → 0) in the background |
//!
//! # Round trips per `execute()` + `commit()` (`MOTOR_BUDGET` in `tests/motor_rtt.rs`)
//!
//! | kind | RTTs | |
//! | --- | --- | --- |
//! | read-only | 2 | CVT, value; no validation |
//! | read-write, no RO data | 3 | CVT (+lock), value, commit |
//! | read-write with RO data | 4 SR / 3 SI | + validation in SR |
//! | insert | 3 | bucket (+insert lock), CVT lock + re-read, commit |
//! | delete | 3 | as read-write |
//!
//! Every writer adds one background post (the release). An insert into a full chain
//! adds three rounds (overflow FAA, link CAS, backup links); a torn CVT READ adds a
//! re-read round (`reread_max`).
//!
//! An address-cache miss adds none (the bucket READ replaces the CVT READ). Timestamps
//! (§5: sequential numbers, also the versions) are free with the default `ts=oracle`
//! (one counter shared by every coordinator of the process, as Motor's code runs on its
//! one CN, and every compute node of a `mem` or `sim` run); a run of several processes
//! takes `ts=rpc` (the counter on cn0/t0, reached by CN↔CN messages: up to three per
//! read-write transaction, T_start, T_commit and its completion) or `ts=faa` (FAA on a
//! memory node: up to two round trips per read-write transaction, more for a watermark).
//! Timestamp round trips are counted in `ts_rtts`, never in `rtts`.
//!
//! # Rules the paper leaves open, and the choices taken
//!
//! - **SI keeps first-committer-wins**: a read-write record whose (locked) CVT holds a
//!   version above the snapshot aborts the transaction; SI drops only the RO-data
//!   validation (and the early abort of RO data).
//! - **Snapshots never miss a commit still being written**: read-only transactions and
//!   every SI transaction read at the timestamp service's completed-commit watermark;
//!   each first waits until the watermark passes the coordinator's own last commit
//!   (session order; bounded, then `session_lag`). SR read-write transactions take the
//!   raw counter: locks and validation cover their reads.
//! - **A snapshot is inclusive**: `start_ts` is the largest version it may see (the
//!   watermark, or the raw `T_start − 1`), as the checker reads it.
//! - **Which version a snapshot reads**: the paper's "largest version below T_start"
//!   trusts one CVT READ to be one moment's; a READ racing GC is not. Every Vcell names
//!   the version it replaced, and the read takes the version the cells prove
//!   ([`layout::pick`]); a missing link (reclaimed, or overwritten during the READ) is
//!   `version_gone`, an insert's [`layout::FIRST`] successor is absence.
//! - **GC** (§4.3, Fig. 4b): a write with no invalid Vcell overwrites the oldest; a bar
//!   entry that overlaps older entries reclaims them and invalidates (Valid = 0) every
//!   version up to the newest reclaimed, in the same commit batch, before the new
//!   entry's bytes.
//! - **Bar entries are a ring**: StartOffset = the newest Vcell's StartOffset + its
//!   entry's bytes, wrapping to 0 when the entry would pass ABS.
//! - **The anchor** is one byte, the newest Vcell's plus one (wrapping); it is compared,
//!   and the detector decides.
//! - **Reads take attributes before the Vpkg** in their batch (issue 28 item 3).
//! - **Inserts take the home bucket's insert lock** (the FORD index's) with the bucket
//!   READ, so two inserts of one key never both find it absent; it is released with the
//!   CVT locks. A chain with no free CVT reserves an overflow bucket (FAA on the
//!   table's overflow cursor, one round trip), links it on the primary (CAS, one round
//!   trip) and on the backups (WRITEs, one round trip), as FORD's index does.
//! - **A read-write transaction that writes nothing** (no hint) validates its reads as
//!   the RO data of a read-write one (SR), at a fresh timestamp.
//!
//! # Deviations
//!
//! - **Deletes write a tombstone Vcell** at T_commit (its Vpkg rewritten with the same
//!   value and the new anchor) instead of invalidating V0 and rolling the full value
//!   back (§5.1), which would make the previous version visible again. A deleted key
//!   keeps its CVT; an insert of it later is a new version over the tombstone.
//! - **Delta spaces**: each coordinator takes one of `delta_spaces` spaces in every
//!   table's value region at setup (handed out in process order; more coordinators
//!   than spaces fail setup naming `delta_spaces`); bars and inserted Vpkgs come from
//!   it, and when it runs out the transaction aborts `delta_full`, naming `delta_bytes`
//!   (the paper asks the MN's CPU for more). The Vpkgs and bars of deleted records are
//!   not reclaimed.
//! - **ABS sampling is per coordinator** and from the run so far, not from a previous
//!   run: early bars are sized from few samples (a bar too small for an entry is
//!   replaced).
//! - **Locks** hold the owner (`coordinator + 1`) and are released by CAS owner → 0.
//! - **The unlock follows the commit WRITEs' acknowledgements** (a background post, as
//!   FORD's release) instead of riding in their batch (§5.1): in one batch the primary's
//!   unlock can land before a backup's WRITE, and the next writer's WRITE to that backup
//!   can overtake it (replicas then disagree; seen on `tcp`). The commit is still one
//!   round trip.
//!
//! # Broken variants ([`MotorVariant`], tests only)
//!
//! Anchors only (the paper's check, `tests/motor_tear.rs`), anchors only with the Vpkg
//! read before the attributes, SR without RO validation, raw-counter T_start for
//! read-only transactions, SI without first-committer-wins (`tests/motor_isolation.rs`):
//! each is caught by the tear tests, a bank invariant or the isolation checker.
//!
//! # Not done
//!
//! Coordinator-active GC's read-queue scheme (Fig. 4a); recovery itself (the hooks are
//! here: owners in lock words, [`oplog`]); the O2N/N2O and FaRMv2-DM baselines;
//! reclaiming the Vpkgs and bars of deleted
//! records; the per-MN memory footprint in results (issue 28 item 8 is on main).

mod exec;
pub mod layout;
pub mod oplog;

use dmtx_memnode::Control;
use dmtx_runtime::named;
use dmtx_runtime::timestamp::TimestampService;
use dmtx_runtime::{
    Abort, AbortReasonSpec, CoordCtx, FaaTimestamps, Isolation, KnobError, KnobSpec, Knobs, MetricKind, MetricSpec,
    OracleTimestamps, Protocol, Result, RpcTimestamps, Timestamps, TsKind, Txn,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::{MnId, Post};
use std::sync::atomic::{AtomicU32, Ordering};

pub use layout::MotorLayout;

/// Abort reason: the version the snapshot holds was reclaimed by GC.
pub const R_VERSION_GONE: u8 = 0;
/// Abort reason: a CVT holds a version newer than the snapshot (SR early abort, SI
/// first-committer-wins, or a newer version in the re-read CVT).
pub const R_NEWER: u8 = 1;
/// Abort reason: the value did not match its version (anchors or detector).
pub const R_ANCHOR: u8 = 2;
/// Abort reason: the coordinator's delta space is full.
pub const R_DELTA_FULL: u8 = 3;
/// Abort reason: the watermark did not reach the coordinator's last commit in time.
pub const R_SESSION_LAG: u8 = 4;

/// Motor's own abort reasons.
pub const ABORT_REASONS: &[AbortReasonSpec] = &[
    AbortReasonSpec::new(
        "version_gone",
        true,
        "the version the snapshot holds was reclaimed by GC (raise `vnum`)",
    ),
    AbortReasonSpec::new(
        "newer_version",
        true,
        "a CVT held a version newer than the snapshot (early abort, first-committer-wins)",
    ),
    AbortReasonSpec::new(
        "anchor_mismatch",
        true,
        "the value read did not match its version (anchors or tear detector)",
    ),
    AbortReasonSpec::new(
        "delta_full",
        false,
        "the coordinator's delta space is full: raise `delta_bytes`",
    ),
    AbortReasonSpec::new(
        "session_lag",
        true,
        "the watermark did not reach the coordinator's last commit in time",
    ),
];

/// Metric: Vcells overwritten by GC (the oldest version, no free Vcell).
pub const METRIC_GC_OVERWRITES: usize = 0;
/// Metric: Vcells invalidated because a bar reclaim overwrote their attributes.
pub const METRIC_BAR_RECLAIMS: usize = 1;
/// Metric: reads that rebuilt an older version from bar attributes.
pub const METRIC_OLD_READS: usize = 2;
/// Metric: CVT re-reads after a torn READ.
pub const METRIC_REREADS: usize = 3;

/// Metric: bytes of the operation log of each committing writer (§7.9: ≤ 556 B).
pub const METRIC_OPLOG_BYTES: usize = 4;

/// Metric: commit timestamps whose completion (or abandon) failed: the watermark stays
/// below them.
pub const METRIC_TS_UNRESOLVED: usize = 5;

/// Motor's figures.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec::new(
        "gc_overwrites",
        MetricKind::Counter,
        "Vcells of the oldest version overwritten because none was free",
    ),
    MetricSpec::new(
        "bar_reclaims",
        MetricKind::Counter,
        "Vcells invalidated because a bar reclaim overwrote their attributes",
    ),
    MetricSpec::new(
        "old_version_reads",
        MetricKind::Counter,
        "reads that rebuilt an older version from attribute-bar entries",
    ),
    MetricSpec::new(
        "cvt_rereads",
        MetricKind::Counter,
        "CVT READs found torn and read again",
    ),
    MetricSpec::new(
        "oplog_bytes",
        MetricKind::Value,
        "bytes of a committing writer's operation log (keys it locked; §5.3, §7.9)",
    ),
    MetricSpec::new(
        "ts_unresolved",
        MetricKind::Counter,
        "commit timestamps whose completion failed (the watermark stays below them)",
    ),
];

/// Protocol variants. Every one but [`MotorVariant::Fixed`] is deliberately broken and
/// exists only so tests can show the checks catch it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum MotorVariant {
    /// As documented.
    #[default]
    Fixed,
    /// The paper's checks only: each Vcell by its two anchors, the Vpkg by its anchors
    /// against the newest Vcell's, no check of bar entries, and a version picked from one
    /// CVT READ as if it were one moment's ([`layout::pick_paper`]).
    AnchorsOnly,
    /// [`MotorVariant::AnchorsOnly`], reading the Vpkg before the old attributes in its
    /// batch: a GC overwrite of the attributes between the two passes the anchors.
    VpkgFirst,
    /// SR without validating the RO data of read-write transactions.
    NoRoValidation,
    /// Read-only transactions take T_start from the raw counter, not the watermark.
    RawStartForRo,
    /// SI without first-committer-wins: a RW record newer than the snapshot is
    /// overwritten.
    SiNoFirstCommitterWins,
}

/// Motor's settings.
#[derive(Clone, Debug)]
pub struct MotorConfig {
    /// Snapshot isolation instead of serializability.
    pub si: bool,
    /// Timestamp kind (`oracle` or `faa`).
    pub ts: TsKind,
    /// Re-reads of a torn CVT before aborting.
    pub reread_max: u32,
    /// Test-only variant.
    pub variant: MotorVariant,
    /// Test-only: time between taking T_commit and installing, ns (widens the window in
    /// which a snapshot that is not the watermark misses a commit).
    pub install_delay_ns: u64,
}

const ISOLATION: KnobSpec = KnobSpec {
    name: "isolation",
    default: "sr",
    help: "sr (serializable) or si (snapshot isolation, §5.2)",
};
const VNUM: KnobSpec = KnobSpec {
    name: "vnum",
    default: "4",
    help: "Vcells per CVT (VNum, §4.1), fixed for the run; 2..=15",
};
const VNUM_TABLES: KnobSpec = KnobSpec {
    name: "vnum_tables",
    default: "",
    help: "per-table VNum overrides: name:n,name:n",
};
const DELTA_BYTES: KnobSpec = KnobSpec {
    name: "delta_bytes",
    default: "0",
    help: "bytes of each coordinator's delta space in each table (attribute bars, inserted Vpkgs); 0: the table's delta area (a full value per record it may hold, and a Vpkg per record it may grow by) split in `delta_spaces`",
};
const DELTA_SPACES: KnobSpec = KnobSpec {
    name: "delta_spaces",
    default: "64",
    help: "delta spaces reserved in each table's value region: at least the run's coordinators",
};
const BAR_BYTES: KnobSpec = KnobSpec {
    name: "bar_bytes",
    default: "0",
    help: "attribute-bar size (ABS) in bytes; 0: §4.2's formula over the TotAttrSizes sampled in the run",
};
const TS: KnobSpec = KnobSpec {
    name: "ts",
    default: "oracle",
    help: "timestamps: oracle (one counter in this process, free), rpc (hosted on cn0/t0, CN-to-CN messages; runs of several processes) or faa (FAA on memory node 0)",
};
const REREAD_MAX: KnobSpec = KnobSpec {
    name: "reread_max",
    default: "4",
    help: "re-reads of a torn CVT before the transaction aborts",
};

/// Name of the `faa` timestamp area.
const TS_AREA: &str = "motor/timestamps";

/// The Motor protocol.
#[derive(Debug)]
pub struct Motor {
    cfg: MotorConfig,
    layout: MotorLayout,
    oracle: OracleTimestamps,
    rpc: RpcTimestamps,
    /// Delta spaces handed out in this process.
    spaces: AtomicU32,
}

impl MotorVariant {
    /// Whether the variant keeps the paper's anchors as its only tear check.
    pub fn anchors_only(self) -> bool {
        matches!(self, MotorVariant::AnchorsOnly | MotorVariant::VpkgFirst)
    }
}

impl Motor {
    /// Motor with `cfg` and `layout`.
    pub fn new(cfg: MotorConfig, layout: MotorLayout) -> Self {
        Self {
            cfg,
            layout,
            oracle: OracleTimestamps::new(),
            rpc: RpcTimestamps::default(),
            spaces: AtomicU32::new(0),
        }
    }

    /// Motor from knobs with a test-only `variant`.
    pub fn with_variant(knobs: &Knobs, variant: MotorVariant) -> std::result::Result<Self, KnobError> {
        let mut m = Self::from_knobs(knobs)?;
        m.cfg.variant = variant;
        Ok(m)
    }

    /// The same protocol, installing `ns` after taking T_commit (tests).
    pub fn with_install_delay(mut self, ns: u64) -> Self {
        self.cfg.install_delay_ns = ns;
        self
    }

    /// The settings.
    pub fn config(&self) -> &MotorConfig {
        &self.cfg
    }

    /// The layout.
    pub fn motor_layout(&self) -> &MotorLayout {
        &self.layout
    }
}

fn parse_vnum_tables(s: &str) -> std::result::Result<Vec<(String, u32)>, KnobError> {
    let bad = |why: String| KnobError::Invalid {
        key: VNUM_TABLES.name.into(),
        value: s.into(),
        why,
    };
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (name, n) = part
            .split_once(':')
            .ok_or_else(|| bad(format!("`{part}` is not name:n")))?;
        let n: u32 = n.parse().map_err(|_| bad(format!("`{n}` is not a number")))?;
        if !(2..=15).contains(&n) {
            return Err(bad(format!("VNum {n} of `{name}` is outside 2..=15")));
        }
        out.push((name.to_owned(), n));
    }
    Ok(out)
}

/// A writer's hold on a lock word.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Hold {
    #[default]
    Free,
    Held,
    /// The CAS failed as a verb: it may have applied.
    Maybe,
}

/// Where an object is in its execution.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Stage {
    #[default]
    New,
    /// Read bucket `.0` of the key's chain.
    Bucket(u64),
    /// Read the CVT at `rel` (cache hit, or a torn read again).
    Cvt,
    /// An insert at the end of a full chain whose last bucket is `.0`: reserve an
    /// overflow bucket (FAA on the table's overflow cursor).
    Reserve(u64),
    /// Link overflow bucket `.1` after the chain's last bucket `.0` (CAS on its `next`).
    Link(u64, u64),
    /// Read the value (and lock + re-read the CVT where still unlocked).
    Value,
    Done,
}

/// Motor's per-object state.
#[derive(Debug, Default)]
pub struct MotorObj {
    pub(crate) stage: Stage,
    pub(crate) rel: Option<u64>,
    pub(crate) hold: Hold,
    /// Home bucket whose insert lock this object holds (or may hold).
    pub(crate) bucket_lock: Option<(u64, Hold)>,
    /// An insert sharing a sibling's bucket lock.
    pub(crate) shares_bucket_lock: bool,
    /// The CVT as last read.
    pub(crate) cvt: layout::Cvt,
    /// The version read (V0), `None` for an insert into a fresh CVT.
    pub(crate) v0: Option<layout::Vcell>,
    /// The Vcells whose old attributes rebuild V0, newest first.
    pub(crate) chain: Vec<layout::Vcell>,
    /// An insert into a free CVT.
    pub(crate) fresh: bool,
    /// Offset of the old full value in `MotorCoord::old`.
    pub(crate) old_at: usize,
    pub(crate) rereads: u32,
}

/// Motor's per-coordinator state.
pub struct MotorCoord {
    pub(crate) ts: Timestamps,
    /// Lock word: `global id + 1`.
    pub(crate) me: u64,
    /// Per table id: (next free, end) of this coordinator's delta space, table-relative.
    pub(crate) delta: Vec<(u64, u64)>,
    /// The largest timestamp this coordinator's transactions committed or validated at:
    /// its next watermark snapshot waits for it.
    pub(crate) session_floor: u64,
    /// Old full values of written objects.
    pub(crate) old: Vec<u8>,
    /// Per table id: the TotAttrSizes this coordinator's writes changed, `(bytes, count)`
    /// (§4.2's sampling, from this run).
    pub(crate) samples: Vec<Vec<(u32, u64)>>,
    pub(crate) bg: Post,
    /// The operation log (§5.3).
    pub(crate) oplog: oplog::OpLog,
    /// Backup links of overflow buckets linked in this round: (link word, value).
    pub(crate) links: Vec<(dmtx_verbs::RemotePtr, u64)>,
}

impl MotorCoord {
    /// The coordinator's operation log (a recovery hook, §5.3).
    pub fn oplog(&self) -> &oplog::OpLog {
        &self.oplog
    }

    /// The coordinator's lock word: `global id + 1`, what its locks hold.
    pub fn owner(&self) -> u64 {
        self.me
    }
}

impl Protocol for Motor {
    type CoordState = MotorCoord;
    type ObjState = MotorObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "motor";
    const ABOUT: &'static str =
        "Motor (OSDI'24): multi-versioning in consecutive version tuples, SR or SI (`isolation=si`)";
    const KNOBS: &'static [KnobSpec] = &[
        ISOLATION,
        VNUM,
        VNUM_TABLES,
        DELTA_BYTES,
        DELTA_SPACES,
        BAR_BYTES,
        TS,
        REREAD_MAX,
    ];
    const ABORT_REASONS: &'static [AbortReasonSpec] = ABORT_REASONS;
    const METRICS: &'static [MetricSpec] = METRICS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        let si = match knobs.get::<String>(&ISOLATION)?.as_str() {
            "sr" => false,
            "si" => true,
            other => {
                return Err(KnobError::Invalid {
                    key: ISOLATION.name.into(),
                    value: other.into(),
                    why: "must be `sr` or `si`".into(),
                })
            }
        };
        let vnum = knobs.get_checked(&VNUM, |v: u32| {
            if (2..=15).contains(&v) {
                Ok(())
            } else {
                Err("must be in 2..=15 (§7.2's range)".into())
            }
        })?;
        let ts: TsKind = knobs.get(&TS)?;
        if !matches!(ts, TsKind::Oracle | TsKind::Faa | TsKind::Rpc) {
            return Err(KnobError::Invalid {
                key: TS.name.into(),
                value: ts.name().into(),
                why: "Motor runs `oracle`, `rpc` or `faa` timestamps (sequential numbers, §5)".into(),
            });
        }
        let delta_bytes = knobs.get_checked(&DELTA_BYTES, |v: u64| {
            if v == 0 || (v >= 1024 && v.is_multiple_of(8)) {
                Ok(())
            } else {
                Err("must be 0 (sized from the table) or a multiple of 8, at least 1024".into())
            }
        })?;
        let delta_spaces = knobs.get_checked(&DELTA_SPACES, |v: u32| {
            if v >= 1 {
                Ok(())
            } else {
                Err("must be at least 1".into())
            }
        })?;
        let bar_bytes = knobs.get_checked(&BAR_BYTES, |v: u32| {
            if v.is_multiple_of(8) {
                Ok(())
            } else {
                Err("must be a multiple of 8".into())
            }
        })?;
        let layout = MotorLayout {
            vnum,
            vnum_tables: parse_vnum_tables(&knobs.get::<String>(&VNUM_TABLES)?)?,
            delta_bytes,
            delta_spaces,
            bar_bytes,
        };
        Ok(Self::new(
            MotorConfig {
                si,
                ts,
                reread_max: knobs.get(&REREAD_MAX)?,
                variant: MotorVariant::Fixed,
                install_delay_ns: 0,
            },
            layout,
        ))
    }

    fn messaging(&self) -> bool {
        self.cfg.ts == TsKind::Rpc
    }

    fn isolation(&self) -> Isolation {
        if self.cfg.si {
            Isolation::SnapshotIsolation
        } else {
            Isolation::Serializable
        }
    }

    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }

    fn setup_run(&self, control: &dyn Control) -> Result<()> {
        if self.cfg.ts == TsKind::Faa {
            let area = named::alloc_and_publish(control, TS_AREA, MnId(0), FaaTimestamps::AREA_BYTES, 8, &[])?;
            control.load(area.at.mn, area.at.offset, &vec![0; FaaTimestamps::AREA_BYTES as usize])?;
        }
        Ok(())
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<MotorCoord> {
        let ts = match self.cfg.ts {
            TsKind::Faa => Timestamps::Faa(FaaTimestamps::at(named::fetch(control, TS_AREA)?.at)),
            TsKind::Rpc => Timestamps::Rpc(self.rpc.clone()),
            _ => Timestamps::Oracle(self.oracle.clone()),
        };
        ts.attach(ctx)
            .expect("timestamps attach: `rpc` runs with messaging (`Protocol::messaging`)");
        let space = self.spaces.fetch_add(1, Ordering::Relaxed);
        let mut delta = Vec::new();
        for info in ctx.catalog.iter() {
            let id = info.meta.id as usize;
            if delta.len() <= id {
                delta.resize(id + 1, (0, 0));
            }
            let Some(region) = info.shape.value_region else {
                continue;
            };
            let per_space = self.layout.delta_space_bytes(region.bytes);
            let area = per_space * self.layout.delta_spaces as u64;
            if space >= self.layout.delta_spaces || area > region.bytes {
                return Err(dmtx_store::StoreError::ValueRegionFull {
                    table: info.meta.name.clone(),
                    bytes: region.bytes,
                    asked: per_space,
                    free: 0,
                    fix: format!(
                        "coordinator {} needs delta space #{space} and the table reserves {}: raise \
                         `delta_spaces` to at least the run's coordinators",
                        ctx.id, self.layout.delta_spaces
                    ),
                }
                .into());
            }
            let base = region.offset + region.bytes - area + space as u64 * per_space;
            delta[id] = (base, base + per_space);
        }
        Ok(MotorCoord {
            samples: vec![Vec::new(); delta.len()],
            ts,
            me: ctx.id.global() + 1,
            delta,
            session_floor: 0,
            old: Vec::new(),
            bg: Post::new(),
            oplog: oplog::OpLog::default(),
            links: Vec::new(),
        })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        exec::execute(txn.coord).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        exec::commit(txn.coord).await
    }

    fn abort(txn: &mut Txn<'_, Self>) {
        exec::release_in_background(txn.coord);
    }
}
