//! FaRM (Dragojević et al., NSDI'14/SOSP'15) re-implemented on one-sided verbs for
//! disaggregated memory as FORD's evaluation does (ford.txt §2.3 and Fig. 2, §3.2,
//! §4.2, §4.6, §6.1). Isolation: **serializable**.
//!
//! Execution, commit-backup, commit-primary and truncation are the FaRM family's
//! (`RedoFamily`): DrTM+H ([`crate::drtmh`]) runs the same code and differs only in its
//! lock&validate round.
//!
//! # Phases (Fig. 2)
//!
//! 1. **Execution** (`execute.rs`): every object is READ from its primary without a
//!    lock; backups are never read (§3.2, §4.4). With the address cache off (the
//!    default: FORD's code gives FaRM none) each object's home bucket is READ and the
//!    record taken out of it: the same round trips, more bytes. An insert reads the
//!    bucket under the chain's insert lock, picks a free slot and locks it (§3.2).
//! 2. **Lock** (`validate.rs`): `CAS(vlock, 0 → me)` on the primary of every read-write
//!    and delete object, one round trip; a failed CAS aborts (no waiting, unless
//!    `lock_wait_us`).
//! 3. **Validation** (`validate.rs`): one 16-byte READ (`vlock` + `version`) of the
//!    primary per read-only **and** read-write object; fails if a version changed or
//!    the record is locked by another coordinator.
//! 4. **Commit-backup** (`commit.rs`): the new images as redo records into this
//!    coordinator's log area on every node holding a backup, one selective FLUSH per
//!    such node after its last WRITE, every ACK awaited ([`crate::onever::redo_log`]).
//! 5. **Commit-primary** (`commit.rs`): per primary the in-place WRITE of the new image,
//!    then `WRITE(vlock, 0)`, in one round trip; the commit is reported on its ACK.
//! 6. **Truncation** (`Protocol::cleanup` once `truncate_batch` commits are queued, and
//!    `Protocol::drain` at the run's end, which tries again, after a pause, while a copy
//!    stays locked by another truncator; off the transaction's round trips and
//!    latency): version-guarded installs of the logged images into the backups, then
//!    the logs are freed ([`crate::onever::redo_log::Truncation`]). A commit whose log
//!    does not fit in what is left of an area stalls: it truncates first, inside its
//!    commit (counted in `log_full_stalls`, its round trips in the transaction's).
//!
//! # Round trips per transaction (`FARM_BUDGET` in `tests/farm_suite.rs`)
//!
//! | kind | RTTs (f ≥ 1) | verbs (address cache off) |
//! | --- | --- | --- |
//! | read-only, 1 record | 1 (2 when the primary was locked) | 1 bucket READ (+ 1 READ(16 B)) |
//! | read-only, n records | 2 | n bucket READs + n READ(16 B) |
//! | read-write, no RO data | 5 | bucket READs; CAS each; READ(16 B) each; per backup node a log WRITE + FLUSH; per primary WRITE + WRITE(vlock) |
//! | read-write with RO data | 5 | the above + the RO records' bucket READs and READ(16 B) |
//! | insert | 4: lookup (bucket lock CAS + bucket READ), slot CAS + READ, commit-backup, commit-primary | |
//! | delete | 5, as read-write | |
//! | truncation (cleanup) | 2 per `truncate_batch` committed transactions with backups (+2 per retry) | per backup copy CAS + READ(8 B), then WRITE (if newer) + WRITE(8 B); per log a status WRITE |
//!
//! With one replica there is no backup: commit-backup and truncation are left out (4
//! round trips for read-write). A warm address cache (`addr_cache=true`) changes only
//! bytes: the record's slot is READ instead of its bucket.
//!
//! # Record layout and tear detection
//!
//! The one-version record ([`crate::onever::record`]): `vlock | version | key | meta |
//! checksum | value`, 40 header bytes. FaRM never sets the invisible bit; bits 1-31 of
//! `meta` hold the record's write sequence, which orders truncation installs. Tears:
//! the checksum ([`crate::onever::tear`], 8 B per record) rather than FaRM's
//! per-cache-line versions: every execution READ is checked, and a torn one is re-read
//! (`reread_max` times, counted in `rereads`). A lone read-only record read with its
//! lock word clear is intact and unlocked, so it skips validation.
//!
//! # Rules the paper is silent on, and deviations
//!
//! - **Validation fails on a record locked by another coordinator**, not only on a
//!   changed version (issue 27 item 3): versions alone let T1 (locks B, reads A) and T2
//!   (locks A, reads B) both commit (write skew). The versions-only rule is kept as
//!   [`FarmVariant::VersionOnlyValidation`], which the isolation checker catches.
//! - **The write set's versions are validated in their own round** after the lock
//!   round (§4.6 counts FaRM at 5 round trips); the execution READ was unlocked.
//! - **A lone read-only record skips validation only when its READ saw the lock word
//!   clear** (FORD's code skips it always).
//! - **Truncation is awaited in `cleanup`** (every `truncate_batch` commits), not left as
//!   unawaited WRITEs (FORD's authors' code): the install needs the backup copy's lock
//!   and write sequence before it writes. Its round trips are cleanup's, never the
//!   transaction's, except a stall on a full area. A record queued twice is installed
//!   once, with its newer image. A transaction whose log alone exceeds an area aborts
//!   with `LogFull`.
//! - **Versions are writer ids** as in FORD's module; FaRM compares them for equality
//!   only. The write sequence in `meta` orders installs.
//! - **Inserts lock the home bucket's chain** (the shared insert lock) while picking a
//!   slot, so two transactions never insert one key twice; a delete writes the record
//!   back invalid (§3.2).
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
//! - A verb fails before commit-primary: abort, release the locks (nothing is in place;
//!   a redo log already written stays marked logged for recovery).
//! - The commit-primary post fails: every backup holds the redo log, so the transaction
//!   is committed (FaRM's commit point) and may already be visible; nothing is rolled
//!   back. Each lock word still held is found by READ and its image WRITE and unlock are
//!   repeated until they land (bounded; beyond that recovery, which dmtx lacks, would
//!   finish from the redo logs).
//! - A truncation post fails: the round is retried (a backup lock whose CAS response
//!   was lost is found holding our own word and taken as held); what is still not
//!   installed after the retries stays queued for the next cleanup or the drain.
//! - A compute node crashing mid-commit leaves its locks and logs to a recovery dmtx
//!   does not have (the suite's fault menu runs without `crash_cn`).

pub(crate) mod commit;
pub(crate) mod execute;
mod validate;

use dmtx_memnode::Control;
use dmtx_runtime::{
    Abort, CoordCtx, Coordinator, Isolation, KnobError, KnobSpec, Knobs, MetricKind, MetricSpec, Protocol, Result, Txn,
};
use dmtx_store::SlotLayout;
use dmtx_verbs::{AtomicId, MnId, Post, ReadId};

use crate::onever::index_walk::{Stage, Walk};
use crate::onever::lock_time;
use crate::onever::record::OneVersionLayout;
use crate::onever::redo_log::{RedoEntry, RedoLog, Truncation};
use crate::onever::{Holds, OneVersionObj};

/// Per record: building its execution ops and checking the slot it read.
pub const STEP_EXECUTE: &str = "farm.execute";
/// Per validated record: its validation read and checks.
pub const STEP_VALIDATE: &str = "farm.validate";
/// Per written record: its image, redo entry and primary write.
pub const STEP_COMMIT: &str = "farm.commit";

/// FaRM's CPU steps; costs not fitted yet (0: the `txn.add` and polls carry the cost).
pub const CPU_STEPS: &[(&str, u64)] = &[(STEP_COMMIT, 0), (STEP_EXECUTE, 0), (STEP_VALIDATE, 0)];

/// Metric index: re-reads of a record found torn.
pub const METRIC_REREADS: usize = 0;
/// Metric index: backup copies truncation installed.
pub const METRIC_INSTALLS: usize = 1;
/// Metric index: installs retried because another truncator held the copy.
pub const METRIC_INSTALL_RETRIES: usize = 2;

/// Metric index: commits stalled because a redo-log area was full, until truncation
/// emptied it.
pub const METRIC_LOG_FULL_STALLS: usize = 3;
/// Where the FaRM family's lock times are in [`METRICS`].
pub const LOCK_METRICS: lock_time::LockMetrics = lock_time::LockMetrics {
    duration: 4,
    hold: 5,
    wait: 6,
};

/// FaRM's figures, in `protocol_metrics`.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec::new(
        "rereads",
        MetricKind::Counter,
        "re-reads of a record an execution READ found torn (each bounded by `reread_max`)",
    ),
    MetricSpec::new(
        "truncation_installs",
        MetricKind::Counter,
        "backup copies truncation wrote with a logged image",
    ),
    MetricSpec::new(
        "truncation_retries",
        MetricKind::Counter,
        "truncation installs retried because another truncator held the backup copy",
    ),
    MetricSpec::new(
        "log_full_stalls",
        MetricKind::Counter,
        "commits stalled on a full redo-log area until truncation emptied it",
    ),
    lock_time::DURATION,
    lock_time::HOLD,
    lock_time::WAIT,
];

/// Protocol variants. Every one but [`FarmVariant::Fixed`] is deliberately broken and
/// exists only so tests can show the isolation checker catches it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum FarmVariant {
    /// Validation checks versions and locks.
    #[default]
    Fixed,
    /// The paper's silence taken literally: validate versions only (write skew).
    VersionOnlyValidation,
}

/// FaRM's settings.
#[derive(Clone, Debug)]
pub struct FarmConfig {
    /// Use the address cache (FORD's code gives FaRM none).
    pub addr_cache: bool,
    /// Re-reads of a torn record before aborting.
    pub reread_max: u32,
    /// Bytes of each coordinator's redo-log area on each memory node.
    pub log_bytes: u32,
    /// Committed transactions queued before the cleanup truncates them.
    pub truncate_batch: u32,
    /// Retry a failed lock for up to this many µs instead of aborting (0: abort;
    /// [`lock_time`]).
    pub lock_wait_us: u64,
    /// Test-only variant.
    pub variant: FarmVariant,
}

impl Default for FarmConfig {
    fn default() -> Self {
        Self {
            addr_cache: false,
            reread_max: 4,
            log_bytes: 64 << 10,
            truncate_batch: 1,
            lock_wait_us: 0,
            variant: FarmVariant::Fixed,
        }
    }
}

const ADDR_CACHE: KnobSpec = KnobSpec {
    name: "addr_cache",
    default: "false",
    help: "cache record addresses (FORD's code gives FaRM none: bucket READs instead)",
};
pub(crate) const REREAD_MAX: KnobSpec = KnobSpec {
    name: "reread_max",
    default: "4",
    help: "re-reads of a torn record before the transaction aborts",
};
pub(crate) const LOG_BYTES: KnobSpec = KnobSpec {
    name: "log_bytes",
    default: "65536",
    help: "redo-log bytes per coordinator per memory node",
};

pub(crate) const TRUNCATE_BATCH: KnobSpec = KnobSpec {
    name: "truncate_batch",
    default: "1",
    help: "committed transactions whose redo logs a coordinator truncates together (a full log area truncates at once)",
};

/// `log_bytes`, checked: a multiple of 8, at least 4096.
pub(crate) fn log_bytes(knobs: &Knobs) -> std::result::Result<u32, KnobError> {
    knobs.get_checked(&LOG_BYTES, |v: u32| {
        if v >= 4096 && v.is_multiple_of(8) {
            Ok(())
        } else {
            Err("must be a multiple of 8, at least 4096".into())
        }
    })
}

/// `truncate_batch`, checked: at least 1.
pub(crate) fn truncate_batch(knobs: &Knobs) -> std::result::Result<u32, KnobError> {
    knobs.get_checked(&TRUNCATE_BATCH, |v: u32| {
        if v >= 1 {
            Ok(())
        } else {
            Err("must be at least 1".into())
        }
    })
}

/// The FaRM protocol.
#[derive(Debug, Clone)]
pub struct Farm {
    cfg: FarmConfig,
    layout: OneVersionLayout,
}

impl Farm {
    /// FaRM with `cfg`.
    pub fn new(cfg: FarmConfig) -> Self {
        Self {
            cfg,
            layout: OneVersionLayout,
        }
    }

    /// The settings.
    pub fn config(&self) -> &FarmConfig {
        &self.cfg
    }
}

/// FaRM's per-object state.
#[derive(Debug, Default)]
pub struct FarmObj {
    pub(crate) stage: Stage,
    pub(crate) rel: u64,
    pub(crate) holds: Holds,
    /// Version read.
    pub(crate) version: u64,
    /// Write sequence read (`onever::record::meta_seq`).
    pub(crate) seq: u64,
    /// The execution READ saw the lock word clear.
    pub(crate) read_unlocked: bool,
    pub(crate) rereads: u32,
    /// Offset of the old image in `FarmCoord::undo`.
    pub(crate) undo_at: u32,
    pub(crate) walk: Walk,
    pub(crate) read: Option<ReadId>,
    pub(crate) cas: Option<AtomicId>,
}

impl crate::onever::index_walk::WalkingObj for FarmObj {
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

impl OneVersionObj for FarmObj {
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

/// FaRM's per-coordinator state.
pub struct FarmCoord {
    /// This coordinator's lock word (`global id + 1`).
    pub(crate) lock: u64,
    pub(crate) post: Post,
    pub(crate) bg: Post,
    pub(crate) log: RedoLog,
    /// Old images of written objects (bytes 8..), for a failed commit's rollback.
    pub(crate) undo: Vec<u8>,
    /// New images of the commit (bytes 8..).
    pub(crate) images: Vec<u8>,
    pub(crate) entries: Vec<RedoEntry>,
    pub(crate) mns: Vec<MnId>,
    pub(crate) trunc: Truncation,
    /// Scratch of commit-primary: (table, lock word, entry of its image) of every word
    /// the release gives back.
    pub(crate) unlocks: Vec<(u32, u64, Option<usize>)>,
    pub(crate) insert_walks: crate::onever::index_walk::InsertWalks,
    pub(crate) claimed: Vec<(u32, u64)>,
}

/// The FaRM family: protocols that execute as FaRM does (lock-free READs of primaries,
/// `execute.rs`), commit through redo logs on the backups and then in place on the
/// primaries (`commit.rs`), and truncate those logs ([`truncate`]). FaRM and DrTM+H
/// ([`crate::drtmh`]) differ only in how they lock and validate between the two.
pub(crate) trait RedoFamily: Protocol<CoordState = FarmCoord, ObjState = FarmObj> {
    /// CPU step per record of execution (`ctx.step`).
    const STEP_EXECUTE: &'static str;
    /// CPU step per written record of the commit.
    const STEP_COMMIT: &'static str;
    /// Fault point before commit-backup.
    const POINT_AFTER_VALIDATE: &'static str;
    /// Fault point between commit-backup and commit-primary.
    const POINT_AFTER_BACKUP: &'static str;
    /// Fault point of a failed commit-primary's settling.
    const POINT_SETTLE: &'static str;
    /// Whether record addresses are cached.
    fn addr_cache(&self) -> bool;
    /// Re-reads of a torn record before aborting.
    fn reread_max(&self) -> u32;
    /// Committed transactions queued before the cleanup truncates them.
    fn truncate_batch(&self) -> u32;
}

impl FarmCoord {
    /// A coordinator's state with a redo-log area of `log_bytes` on every memory node.
    pub(crate) fn new(ctx: &CoordCtx, control: &dyn Control, log_bytes: u32) -> Result<Self> {
        let log = RedoLog::alloc(control, log_bytes)?;
        let lock = ctx.id.global() + 1;
        assert!(lock & crate::onever::record::INVISIBLE == 0);
        Ok(FarmCoord {
            lock,
            post: Post::new(),
            bg: Post::new(),
            log,
            undo: Vec::new(),
            images: Vec::new(),
            entries: Vec::new(),
            mns: Vec::new(),
            trunc: Truncation::default(),
            unlocks: Vec::new(),
            insert_walks: Default::default(),
            claimed: Vec::new(),
        })
    }
}

/// What a try at a record's lock did (the FaRM family's lock rounds).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum LockTry {
    /// The CAS took the lock.
    Taken,
    /// The CAS was refused, or the polled lock word was read, and the wait mode
    /// (`lock_wait_us`) keeps trying.
    Waiting,
    /// Refused: abort.
    Refused,
}

/// Post a try at `o`'s lock (`o` not locked yet): its CAS, with an 8-byte READ of its
/// version behind it when `version` (DrTM+H's lock&validate); or, while the wait mode
/// polls the record ([`lock_time`]), an 8-byte READ of its lock word. `now` is the
/// clock in a timed transaction ([`lock_time::timed`]).
pub(crate) fn post_lock_try(
    post: &mut Post,
    o: &mut dmtx_runtime::Obj<FarmObj>,
    info: &dmtx_store::TableInfo,
    lock: u64,
    now: Option<u64>,
    version: bool,
) {
    let p = &mut o.proto;
    let vlock = info.ptr(0, p.rel + crate::onever::record::VLOCK as u64);
    if p.holds.times.polling() {
        p.cas = None;
        p.read = Some(post.read(vlock, 8));
        return;
    }
    p.cas = Some(post.cas(vlock, 0, lock));
    p.read = version.then(|| post.read(info.ptr(0, p.rel + crate::onever::record::VERSION as u64), 8));
    if let Some(now) = now {
        p.holds.times.asking(now);
    }
}

/// What the try [`post_lock_try`] posted for `o` did, once `post` completed at `now` (a
/// timed transaction's clock); `None` when it posted none. A taken lock is recorded in
/// `o`'s holds.
pub(crate) fn lock_try_result(
    post: &Post,
    o: &mut dmtx_runtime::Obj<FarmObj>,
    now: Option<u64>,
    wait_us: u64,
) -> Option<LockTry> {
    let p = &mut o.proto;
    if p.holds.locked {
        return None;
    }
    let waiting = |keep: bool| if keep { LockTry::Waiting } else { LockTry::Refused };
    if p.holds.times.polling() {
        let b = post.bytes(p.read.take()?);
        let word = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        return Some(waiting(now.is_some_and(|now| p.holds.times.polled(word, now, wait_us))));
    }
    let cas = p.cas.take()?;
    if post.old(cas) == 0 {
        p.holds.locked = true;
        if let Some(now) = now {
            p.holds.times.taken(now);
        }
        return Some(LockTry::Taken);
    }
    Some(waiting(now.is_some_and(|now| p.holds.times.refused(now, wait_us))))
}

/// A lock round's post failed: which CASes ran is unknown, so give back, by CAS, every
/// lock the round may have taken (a lock never got is left alone).
pub(crate) fn give_back_unknown<P: RedoFamily>(txn: &mut Txn<'_, P>) {
    let c = &mut *txn.coord;
    let lock = c.state.lock;
    let bg = &mut c.state.bg;
    bg.clear();
    for o in c.set.objs.iter_mut() {
        if o.proto.cas.take().is_some() {
            let info = c.ctx.catalog.get(o.table).expect("table checked at add");
            bg.cas(info.ptr(0, o.proto.rel + crate::onever::record::VLOCK as u64), lock, 0);
        }
    }
    c.ctx.post_background(&mut c.state.bg);
}

/// Release every lock an aborting transaction holds, in the background.
pub(crate) fn release_on_abort<P: RedoFamily>(txn: &mut Txn<'_, P>) {
    let c = &mut *txn.coord;
    let st = &mut c.state;
    st.bg.clear();
    lock_time::note_release(&mut c.ctx, &mut c.set.objs, LOCK_METRICS);
    crate::onever::release::push_release(&mut st.bg, &mut c.set.objs, &c.ctx.catalog, st.lock);
    c.ctx.post_background(&mut st.bg);
}

/// Truncate what is queued, when `batch` transactions are (1 at the run's end).
pub(crate) async fn truncate<P: RedoFamily>(coord: &mut Coordinator<P>, batch: u32) {
    let st = &mut coord.state;
    if st.trunc.is_empty() || st.trunc.txns() < batch {
        return;
    }
    if let Ok(done) = st.trunc.run(&mut coord.ctx, &mut st.log, st.lock).await {
        coord.ctx.metric(METRIC_INSTALLS, done.installed);
        coord.ctx.metric(METRIC_INSTALL_RETRIES, done.retries);
    }
}

/// Truncation runs [`drain`] tries before leaving the rest to recovery.
const DRAIN_TRIES_MAX: u32 = 1000;
/// Pause between two drain tries.
const DRAIN_PAUSE_NS: u64 = 20_000;

/// Truncate everything queued, at the run's end. One truncation gives up on a backup
/// copy another truncator keeps locked through all its rounds (that truncator may be
/// descheduled between its two rounds); nothing would install it after the drain, so
/// the drain pauses and tries again (bounded).
pub(crate) async fn drain<P: RedoFamily>(coord: &mut Coordinator<P>) {
    for _ in 0..DRAIN_TRIES_MAX {
        truncate(coord, 1).await;
        if coord.state.trunc.is_empty() {
            return;
        }
        let clock = std::sync::Arc::clone(&coord.ctx.clock);
        dmtx_runtime::sleep(clock.as_ref(), DRAIN_PAUSE_NS).await;
    }
}

impl RedoFamily for Farm {
    const STEP_EXECUTE: &'static str = STEP_EXECUTE;
    const STEP_COMMIT: &'static str = STEP_COMMIT;
    const POINT_AFTER_VALIDATE: &'static str = "farm.commit.after_validate";
    const POINT_AFTER_BACKUP: &'static str = "farm.commit.after_backup";
    const POINT_SETTLE: &'static str = "farm.commit.settle";
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

impl Protocol for Farm {
    type CoordState = FarmCoord;
    type ObjState = FarmObj;
    type CnState = ();
    type ThreadState = ();

    const NAME: &'static str = "farm";
    const ABOUT: &'static str =
        "FaRM on one-sided verbs (as in FORD §6.1): lock, validate, commit-backup redo logs, commit-primary";
    const KNOBS: &'static [KnobSpec] = &[
        ADDR_CACHE,
        REREAD_MAX,
        LOG_BYTES,
        TRUNCATE_BATCH,
        lock_time::LOCK_WAIT_US,
    ];
    const METRICS: &'static [MetricSpec] = METRICS;
    const CPU_STEPS: &'static [(&'static str, u64)] = CPU_STEPS;

    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError> {
        Ok(Self::new(FarmConfig {
            addr_cache: knobs.get(&ADDR_CACHE)?,
            reread_max: knobs.get(&REREAD_MAX)?,
            log_bytes: log_bytes(knobs)?,
            truncate_batch: truncate_batch(knobs)?,
            lock_wait_us: knobs.get(&lock_time::LOCK_WAIT_US)?,
            variant: FarmVariant::Fixed,
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
        execute::execute(txn).await
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> std::result::Result<(), Abort> {
        validate::lock(txn).await?;
        validate::validate(txn).await?;
        commit::commit(txn).await
    }

    fn abort(txn: &mut Txn<'_, Self>) {
        release_on_abort(txn)
    }

    async fn cleanup(coord: &mut Coordinator<Self>) {
        let batch = coord.proto.truncate_batch();
        truncate(coord, batch).await
    }

    async fn drain(coord: &mut Coordinator<Self>) {
        drain(coord).await
    }
}

impl Farm {
    /// FaRM with a test-only broken `variant` (see [`FarmVariant`]).
    pub fn with_variant(mut cfg: FarmConfig, variant: FarmVariant) -> Self {
        cfg.variant = variant;
        Self::new(cfg)
    }
}
