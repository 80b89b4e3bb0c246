//! FORD-LV: FORD with localized validation (Zhang et al., ACM TOS 2023, ford.txt §4.7,
//! Fig. 10, evaluated in §6.3.2). Isolation: **serializable**.
//!
//! FORD-LV is FORD ([`crate::ford`]) with the read-only versions checked in a Vcache
//! ([`crate::vcache`]): a hash table `(table, key) → 8-byte version` in a compute
//! node's DRAM, shared by its coordinators. FORD's execution, remote validation and
//! coalescent commit run unchanged (the same code, through
//! `crate::ford::FordBase`); this directory adds what happens between them.
//!
//! # Phases (Fig. 10)
//!
//! 1. **Execution**: FORD's (hitchhiked locking, backup reads), §4.2, §4.4.
//! 2. **Publish** (`localized.rs`, Fig. 10 ③, moved before ②): every read-write,
//!    insert and delete record's new version (the transaction's id) goes into the
//!    Vcache, marked *pending*. The coordinator holds the record's remote lock since
//!    execution, so it is the only writer of that entry (§4.7).
//! 3. **Localized validation** (`localized.rs`, Fig. 10 ②): each read-only version is
//!    looked up. A hit on the version read passes; a hit on another version or on a
//!    pending entry fails the transaction (`validation`). A miss is validated over RDMA
//!    by FORD's validation round (16-byte READ of the primary's lock and version, lock
//!    checked), and the fetched version is then inserted.
//! 4. **Commit**: FORD's coalescent commit (§4.3) and background release; once its
//!    writes landed, the published entries lose their pending mark. An abort after
//!    step 2 removes them.
//!
//! # Round trips per transaction (`tests/fordlv_rtt.rs`)
//!
//! | kind | every RO version hits | a version misses (FORD's budget) |
//! | --- | --- | --- |
//! | read-only, 1 record, key declared | 1 (validation skipped, as FORD; checked when the primary was locked) | 1 (2 when locked) |
//! | read-only, 1 record, undeclared (backup read) | 1 | 2 |
//! | read-only, several | 1 | 2 |
//! | read-write, no RO data | 2 (+ release) | 2 |
//! | read-write with RO data | 2 (+ release) | 3 |
//!
//! Every read-write record is locked during execution in dmtx's FORD, so the issue's
//! other fallback (a read-write record not locked during execution) does not arise.
//! Vcache accesses are not round trips. CN↔CN messages (the multi-CN modes below) are
//! counted apart, in `msg_rtts_per_commit` and the `vcache_msg_rtts` figure; one-way
//! messages in `vcache_msgs`.
//!
//! # Vcache modes (`--set vcache=`, §4.7 "multiple compute nodes")
//!
//! - `local` (default, the paper's measured setup: one CN): every CN keeps its own
//!   Vcache. Correct only when every writer publishes into it, so a run of more than
//!   one compute node is refused.
//! - `partition` (request partition): CN `t mod nodes` owns table `t` and keeps its
//!   versions. Read-only data of a table this CN owns are checked in its own Vcache;
//!   of other tables, over RDMA (no Vcache). Writes to another CN's table reach the
//!   owner's Vcache by one CN↔CN call (all owners at once, one message round trip)
//!   before the local checks; the pending mark is cleared, or the entry removed, by
//!   one-way messages. dmtx publishes by message rather than routing writers to the
//!   owner: a transaction may write tables of several owners (SmallBank's checking and
//!   savings), which no routing can send to one node.
//! - `global` (in-compute-node global Vcache): CN 0 keeps the only Vcache. Its own
//!   coordinators use it directly; every other CN's coordinator sends its publishes and
//!   checks in one call to the same thread of CN 0 (one message round trip per
//!   transaction that publishes or checks), and finalize, remove and insert as one-way
//!   messages. The in-switch Vcache is out of scope.
//!
//! # Rules the paper is silent on (all required for serializability)
//!
//! The paper gives the Vcache's steps but not their order against concurrent writers.
//! dmtx keeps three rules, each with a broken variant the isolation checker catches
//! ([`FordLvVariant`], `tests/fordlv_broken.rs`):
//!
//! - **An absent key is a miss**, never "unchanged" (FORD's authors' code treats it as
//!   unchanged, and overwrites silently when a bucket is full): an evicted or
//!   never-cached version says nothing about writers.
//! - **Publish before validating**, pending until the writes land: FORD's lock check
//!   (its validation fails on a locked record) has no local counterpart otherwise. Two
//!   crossing transactions (T1 writes B and reads A, T2 writes A and reads B) each
//!   publish, then look up the other's key; with sequentially consistent Vcache
//!   operations at least one sees the other's pending entry. A missed key falls back to
//!   RDMA, which sees the remote lock, held from execution to release. An abort removes
//!   the published entries (only if still its own version).
//! - **A miss-path insert never installs a version older than a published one**: the
//!   lookup that missed stamps the bucket's sequence word (taken before the RDMA fetch
//!   is issued); the insert happens only if the fetched record was unlocked and no
//!   writer wrote into the bucket since the stamp.
//!
//! Finalize and remove are conditional (the entry must still be the writer's pending
//! version), so a late one — a one-way message, or a finalize after a release that let
//! the next writer publish — never overwrites a later writer's entry. A lookup that
//! keeps meeting a writer in its bucket gives up with a miss.
//!
//! # Deviations
//!
//! - From the paper: ③ (publish) runs before ② (validate), pending; Fig. 10 updates
//!   the versions after validation. Versions are writer ids, as in dmtx's FORD.
//! - From FORD's code (`core/cache/version_status.h`): there an absent key counts as
//!   unchanged (`CheckVersion`), a cached version is "changed" when newer than the
//!   reader's transaction id, `SetVersion` writes after validation with no pending
//!   mark and takes a bucket's first slot when it is full, and misses are filled in
//!   unguarded. dmtx: absent is a miss; a version is unchanged only if equal to the
//!   version read and settled; publishes are pending until the writes land; inserts are
//!   guarded; eviction prefers settled entries. The Vcache has a fixed size
//!   (`vcache_bytes`, default 16 MiB; the paper used 1 GB, §6.3.2) and never grows.
//! - Everything FORD's module lists (lock check in validation, undo logs in the commit
//!   batch, checksums) holds here too: the code is FORD's.
//!
//! # Failures
//!
//! As FORD (§4.8). The Vcache is volatile and losing it is safe (§4.7): a lost entry is
//! a miss. A compute node crashing between publish and finalize leaves pending entries
//! that fail readers until the next writer of those keys, which its remote locks block
//! anyway (dmtx has no recovery; the suite's fault menu runs without `crash_cn`).

mod localized;
mod serve;

use std::sync::Arc;

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, Cn, CoordCtx, Isolation, KnobError, KnobSpec, Knobs, MetricKind, MetricSpec, Protocol, Result, RuntimeError,
    Txn, Worker,
};
use dmtx_store::SlotLayout;

use crate::ford::{self, Ford, FordBase, FordConfig, FordCoord, FordObj};
use crate::vcache::Vcache;

/// Per read-only record: its Vcache lookup (and publish per written record).
pub const STEP_VCACHE: &str = "fordlv.vcache";

/// FORD-LV's CPU steps: FORD's, and the Vcache's (a few atomic loads, not fitted yet).
pub const CPU_STEPS: &[(&str, u64)] = &[
    (ford::STEP_COMMIT, 0),
    (ford::STEP_EXECUTE, 0),
    (ford::STEP_VALIDATE, 72),
    (STEP_VCACHE, 0),
];

/// FORD's figures come first, at FORD's indices: FORD's execution and commit add to
/// them (re-reads, invisible re-read time, lock times).
const FORD_METRICS: usize = 5;
const _: () = assert!(
    ford::METRICS.len() == FORD_METRICS,
    "FORD-LV's table starts with all of FORD's figures"
);
/// Metric index: FORD's re-reads.
pub const METRIC_REREADS: usize = ford::METRIC_REREADS;
/// Metric index: read-only versions found in the Vcache (changed ones included).
pub const METRIC_HITS: usize = FORD_METRICS;
/// Metric index: read-only versions not in the Vcache, validated over RDMA.
pub const METRIC_MISSES: usize = FORD_METRICS + 1;
/// Metric index: 1 per Vcache lookup that hit, 0 per miss: its mean is the hit rate.
pub const METRIC_HIT_RATE: usize = FORD_METRICS + 2;
/// Metric index: hits on another version or a pending entry (the transaction aborts).
pub const METRIC_CHANGED: usize = FORD_METRICS + 3;
/// Metric index: read-only versions of another compute node's table (`partition`),
/// validated over RDMA without a Vcache.
pub const METRIC_REMOTE: usize = FORD_METRICS + 4;
/// Metric index: fetched versions inserted after a miss.
pub const METRIC_INSERTS: usize = FORD_METRICS + 5;
/// Metric index: miss-path inserts refused (record locked, or a writer in the bucket
/// since the miss).
pub const METRIC_STALE_SKIPS: usize = FORD_METRICS + 6;
/// Metric index: versions published by writers.
pub const METRIC_PUBLISHES: usize = FORD_METRICS + 7;
/// Metric index: Vcache bytes of the compute node (or of CN 0, `global`), added once
/// per attempt that used it: its mean is the size.
pub const METRIC_BYTES: usize = FORD_METRICS + 8;
/// Metric index: CN↔CN message round trips to a Vcache (every attempt).
pub const METRIC_MSG_RTTS: usize = FORD_METRICS + 9;
/// Metric index: one-way messages to a Vcache (finalize, remove, insert).
pub const METRIC_MSGS: usize = FORD_METRICS + 10;

/// FORD-LV's figures, in `protocol_metrics`.
pub const METRICS: &[MetricSpec] = &[
    ford::METRICS[0],
    ford::METRICS[1],
    ford::METRICS[2],
    ford::METRICS[3],
    ford::METRICS[4],
    MetricSpec::new(
        "vcache_hits",
        MetricKind::Counter,
        "read-only versions found in the Vcache, changed ones included",
    ),
    MetricSpec::new(
        "vcache_misses",
        MetricKind::Counter,
        "read-only versions not in the Vcache, validated over RDMA",
    ),
    MetricSpec::new(
        "vcache_hit_rate",
        MetricKind::Value,
        "1 per Vcache lookup that hit, 0 per miss: the mean is the hit rate",
    ),
    MetricSpec::new(
        "vcache_changed",
        MetricKind::Counter,
        "hits on another version or a pending entry (the transaction aborts)",
    ),
    MetricSpec::new(
        "vcache_remote_tables",
        MetricKind::Counter,
        "read-only versions of another compute node's table (partition), validated over RDMA",
    ),
    MetricSpec::new(
        "vcache_inserts",
        MetricKind::Counter,
        "fetched versions inserted after a miss",
    ),
    MetricSpec::new(
        "vcache_stale_skips",
        MetricKind::Counter,
        "miss-path inserts refused: record locked, or a writer in the bucket since the miss",
    ),
    MetricSpec::new(
        "vcache_publishes",
        MetricKind::Counter,
        "versions published by writers (pending until their commit lands)",
    ),
    MetricSpec::new(
        "vcache_bytes",
        MetricKind::Value,
        "bytes of the Vcache used, added once per attempt that used it: the mean is its size",
    ),
    MetricSpec::new(
        "vcache_msg_rtts",
        MetricKind::Counter,
        "CN↔CN message round trips to a Vcache on another compute node (every attempt)",
    ),
    MetricSpec::new(
        "vcache_msgs",
        MetricKind::Counter,
        "one-way messages to a Vcache on another compute node (finalize, remove, insert)",
    ),
];

/// Where the versions live when there are several compute nodes (§4.7).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum VcacheMode {
    /// One Vcache per compute node; one compute node only.
    #[default]
    Local,
    /// Each compute node keeps the versions of the tables it owns (`t mod nodes`).
    Partition,
    /// Compute node 0 keeps every version and serves the others by message.
    Global,
}

impl std::str::FromStr for VcacheMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "local" => Ok(Self::Local),
            "partition" => Ok(Self::Partition),
            "global" => Ok(Self::Global),
            _ => Err(format!("`{s}` is not a Vcache mode: use local, partition or global")),
        }
    }
}

/// Protocol variants. Every one but [`FordLvVariant::Fixed`] is deliberately broken and
/// exists only so tests can show that the isolation checker catches it; none is
/// reachable from the command line.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum FordLvVariant {
    /// dmtx's FORD-LV.
    #[default]
    Fixed,
    /// FORD's authors' rule: a key absent from the Vcache counts as unchanged.
    AbsentAsUnchanged,
    /// Fig. 10's order: validate (misses over RDMA included), then publish: T2 (writes
    /// A, reads B) validates B over RDMA while T1 (writes B, reads A) finds A unchanged
    /// in the Vcache; both commit (write skew). Applies to this node's Vcache only.
    ValidateBeforePublish,
    /// A miss-path insert overwrites whatever the key holds, whenever it lands: an older
    /// version can replace a writer's newer one.
    StaleInsert,
}

/// FORD-LV's settings.
#[derive(Clone, Debug)]
pub struct FordLvConfig {
    /// FORD's (its variant must be `Fixed`).
    pub ford: FordConfig,
    /// Where versions live.
    pub mode: VcacheMode,
    /// Bytes of each Vcache.
    pub vcache_bytes: u64,
    /// Test-only variant.
    pub variant: FordLvVariant,
}

impl Default for FordLvConfig {
    fn default() -> Self {
        Self {
            ford: FordConfig::default(),
            mode: VcacheMode::Local,
            vcache_bytes: 16 << 20,
            variant: FordLvVariant::Fixed,
        }
    }
}

const VCACHE: KnobSpec = KnobSpec {
    name: "vcache",
    default: "local",
    help: "where versions live: local (one compute node), partition (owner CN per table), global (CN 0 serves all)",
};
const VCACHE_BYTES: KnobSpec = KnobSpec {
    name: "vcache_bytes",
    default: "16777216",
    help: "bytes of each Vcache (the paper used 1 GB); entries are lost to eviction when full",
};

/// The FORD-LV protocol.
#[derive(Debug, Clone)]
pub struct FordLv {
    ford: Ford,
    cfg: FordLvConfig,
}

impl FordLv {
    /// FORD-LV with `cfg`.
    pub fn new(cfg: FordLvConfig) -> Self {
        Self {
            ford: Ford::new(cfg.ford.clone()),
            cfg,
        }
    }

    /// The settings.
    pub fn config(&self) -> &FordLvConfig {
        &self.cfg
    }
}

impl FordBase for FordLv {
    #[inline]
    fn ford_config(&self) -> &FordConfig {
        self.ford.config()
    }
}

/// A compute node's FORD-LV state: its Vcache, when it keeps one.
#[derive(Debug, Default)]
pub struct LvCn {
    pub(crate) cache: Option<Vcache>,
}

impl LvCn {
    /// The node's Vcache, if it keeps one.
    pub fn cache(&self) -> Option<&Vcache> {
        self.cache.as_ref()
    }
}

/// A worker thread's FORD-LV state: how many compute nodes the cluster has (from its
/// messaging; 1 without).
#[derive(Debug)]
pub struct LvThread {
    nodes: u16,
}

impl Default for LvThread {
    fn default() -> Self {
        Self { nodes: 1 }
    }
}

impl Protocol for FordLv {
    type CoordState = FordCoord;
    type ObjState = FordObj;
    type CnState = LvCn;
    type ThreadState = LvThread;

    const NAME: &'static str = "fordlv";
    const ABOUT: &'static str =
        "FORD-LV (TOS'23 §4.7): FORD with read-only versions validated in a compute-node Vcache";
    const KNOBS: &'static [KnobSpec] = &[
        ford::BACKUP_READ,
        ford::REREAD_MAX,
        ford::LOG_BYTES,
        crate::onever::lock_time::LOCK_WAIT_US,
        ford::SELECTIVE_FLUSH,
        VCACHE,
        VCACHE_BYTES,
    ];
    const METRICS: &'static [MetricSpec] = METRICS;
    const CPU_STEPS: &'static [(&'static str, u64)] = CPU_STEPS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        let ford = Ford::from_knobs(knobs)?.config().clone();
        Ok(Self::new(FordLvConfig {
            ford,
            mode: knobs.get(&VCACHE)?,
            vcache_bytes: knobs.get_checked(&VCACHE_BYTES, |v: u64| {
                if v >= crate::vcache::BUCKET_BYTES {
                    Ok(())
                } else {
                    Err(format!("must be at least {} (one bucket)", crate::vcache::BUCKET_BYTES))
                }
            })?,
            variant: FordLvVariant::Fixed,
        }))
    }

    fn isolation(&self) -> Isolation {
        Isolation::Serializable
    }

    fn messaging(&self) -> bool {
        self.cfg.mode != VcacheMode::Local
    }

    fn layout(&self) -> &dyn SlotLayout {
        self.ford.layout()
    }

    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<FordCoord> {
        self.ford.coord_state(ctx, control)
    }

    fn cn_state(&self, cn: &Cn) -> Result<LvCn> {
        let keeps = match self.cfg.mode {
            VcacheMode::Local if cn.id > 0 => {
                return Err(RuntimeError::Protocol {
                    protocol: Self::NAME,
                    why: format!(
                        "vcache=local keeps one Vcache per compute node, which sees only its own writers, \
                         and this is compute node {}: run one compute node, or use --set vcache=partition \
                         or --set vcache=global",
                        cn.id
                    ),
                });
            }
            VcacheMode::Local | VcacheMode::Partition => true,
            VcacheMode::Global => cn.id == 0,
        };
        Ok(LvCn {
            cache: keeps.then(|| Vcache::new(self.cfg.vcache_bytes)),
        })
    }

    fn thread_state(&self, cn: &Arc<LvCn>, worker: &Worker) -> Result<LvThread> {
        let Some(rpc) = worker.rpc() else {
            return Ok(LvThread::default());
        };
        let nodes = rpc.workers().iter().map(|w| w.cn + 1).max().unwrap_or(1);
        if cn.cache.is_some() {
            serve::install(rpc, Arc::clone(cn), self.cfg.variant);
        }
        Ok(LvThread { nodes })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        ford::execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        localized::commit(txn).await
    }

    fn abort(txn: &mut Txn<'_, Self>) {
        ford::commit::release(txn, false);
    }
}

impl FordLv {
    /// A broken variant (tests only).
    pub fn with_variant(cfg: FordLvConfig, variant: FordLvVariant) -> Self {
        Self::new(FordLvConfig { variant, ..cfg })
    }
}
