//! A multi-version protocol on the timestamp service's completed-commit watermark, under
//! the real driver with 3 compute nodes on `mem`, `sim` and `tcp`, and through the
//! protocol suite.
//!
//! Goal: the kit's hooks carry a snapshot-isolation protocol end to end: its snapshots
//! read at [`TimestampService::watermark`], it takes commit timestamps with
//! `next_commit` and resolves them with `complete`/`abandon`, its FAA timestamp area is
//! set up once per run (`Protocol::setup_run`) and found by name on every compute node
//! (`dmtx_runtime::named`), it waits with the timer hook (`dmtx_runtime::sleep`),
//! releases its locks in the awaited cleanup, and names its own abort reasons and
//! figures; the history records what it read (absent keys too) and installed with its
//! start and commit timestamps, and the checker's snapshot check (with session edges)
//! passes at snapshot isolation. Two broken variants are caught: a snapshot at the last
//! commit timestamp granted, not the watermark, misses commits still being written (the
//! snapshot check); a snapshot that does not wait for the coordinator's own last commit
//! misses its session's write (a session cycle). Method: [`MvToy`], a test-only protocol
//! with three versions per record, on transfers and read-only audits over a few hot
//! accounts (the balances' sum is constant; every audit sees it whole), on inserts and
//! deletes of a tiny table, on every workload, and through `dmtx_suite::run_all`; the
//! protocol can sleep between taking its commit timestamp and installing, so that the
//! broken variants' window is real.
//!
//! [`MvToy`] is not registered in the CLI. Its record (8-byte words; every replica holds
//! the same cells, the lock word is used on the primary only):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0 | lock: 0, or the writer's `coordinator + 1` |
//! | 8 | `key + 1` |
//! | 16 + c·C | version cell `c` of [`CELLS`] (or fewer, [`MvToy::with_cells`]), `C` = [`cell_bytes`]: `commit_ts`, `writer` (the version's id: its writer's txn id, 0 as loaded), `prev_ts` (the commit timestamp of the version it replaced), `flags` ([`TOMBSTONE`], [`FIRST`]), `check`, the value |
//!
//! A cell is empty when all zero. `check` ([`check_of`]) hashes the cell's other words
//! and is never 0, so a READ that overlapped a WRITE of the cell (a tear) shows as a
//! mismatch and is read again.
//!
//! Round trips of an attempt: `execute` takes the snapshot (the watermark: free with
//! `oracle`, two or three FAA-area round trips with `faa`, counted as timestamp round
//! trips) and reads each object's bucket (the slot is in it); a torn slot is read again.
//! A writer's `commit` is one round of `CAS + READ` per written record (lock, and the
//! slot under the lock), the commit timestamp, the install WRITEs (to every replica),
//! and `complete`; the cleanup releases the locks (one round of CASes).
//!
//! # Faults
//!
//! Lost replies, delays and outages shorter than the transport timeout: a lock CAS that
//! failed as a verb may have applied, so the cleanup releases it as if held (a CAS from
//! the owner to 0 changes nothing otherwise); a validated transaction with its commit
//! timestamp commits, so its install, and every release, is posted again until it lands
//! ([`POST_TRIES_MAX`]). Not survived: a compute node's crash (its locks and unresolved
//! commit timestamp stay; no recovery), and `faa` timestamp round trips that fail (a
//! commit timestamp whose FAA landed but whose reply was lost is never resolved, and the
//! watermark stops below it).
//!
//! # Which version a read takes
//!
//! The newest version with `commit_ts <= start_ts` (visibility as the checker's). Every
//! such version was installed before the snapshot was taken (the watermark passed its
//! commit timestamp), and a writer overwrites the cell of the *oldest* version, so the
//! version `V` the snapshot holds leaves the cells only when a newer one replaces it in
//! place. A slot READ is not atomic, so the choice is made from what the cells prove:
//! - no cell holds a version newer than `start_ts`: `V` is still in its cell, and it is
//!   the newest seen;
//! - some do: the one whose `prev_ts <= start_ts` is `V`'s successor, so `V`'s commit
//!   timestamp is that `prev_ts`; the read takes the cell holding it, or aborts
//!   (overwritten out of the cells) when none does. A successor marked [`FIRST`] has no
//!   predecessor: the key is absent at the snapshot.
//!
//! `V` a tombstone, or no `V`, is a key absent at the snapshot: a read or a delete
//! aborts `not_found`, an insert goes on (and records the absent read).
//!
//! # Inserts and deletes
//!
//! A delete installs a [`TOMBSTONE`] version; slots are never freed, so a deleted key
//! keeps its slot and a later insert of it is a new version over the tombstone. An
//! insert of a key no slot holds takes the chain's first free slot (as read) that no
//! other insert of its transaction took, or, when the chain is full, reserves an
//! overflow bucket (FAA on the table's overflow cursor) and links it after the chain's
//! last bucket (CAS on its `next` word; an insert that loses the race walks on into the
//! winner's bucket, and its reserved bucket stays unused); its version is marked
//! [`FIRST`] and installed with the key word. No key is placed twice: a key word, once
//! written, never changes, and an insert claims a slot only under the slot's lock with
//! no version in it (first committer wins sees another insert's version), so every
//! slot before the claimed one held another key, or is claimed by the same
//! transaction. [`MvLayout::key`] hides a key whose newest version is a tombstone from
//! scans; the protocol reads key words itself.
//!
//! # Commit (first committer wins)
//!
//! Lock every written record (CAS) and read it under the lock, take the commit timestamp
//! (`next_commit`), and abort unless each record's newest version is still the one read
//! (a concurrent writer committed first), abandoning the timestamp (`abandon`). Then
//! install each new version into its record's oldest cell with `prev_ts` = the version
//! it replaces, `complete` the timestamp, and release the locks in the cleanup. Version
//! chains are in commit-timestamp order: a writer takes its timestamp while holding the
//! lock its predecessor released after taking its own.
//!
//! # Sessions
//!
//! A coordinator's transactions are a session, which the checker holds (on by default):
//! a snapshot older than the coordinator's last commit would miss its own write. So a
//! snapshot is at least the coordinator's last snapshot, and `execute` sleeps until the
//! watermark reaches the coordinator's last commit timestamp (at most
//! [`SESSION_WAIT_MAX_NS`], then abort `session_lag`).
//!
//! # Results
//!
//! Abort reasons of its own: `version_gone` (the snapshot's version was overwritten out
//! of the cells) and `session_lag`; figures (`protocol_metrics`): `older_version_reads`,
//! `torn_rereads`, `session_wait_ns`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dmtx::config::{SimSetup, TransportKind};
use dmtx::driver::{self, RunHooks, Silent};
use dmtx::results::BenchResult;
use dmtx::{BenchArgs, BenchConfig, OutTarget};
use dmtx_memnode::Control;
use dmtx_runtime::timestamp::{FaaTimestamps, OracleTimestamps, TimestampService, Timestamps, TsError, TsKind};
use dmtx_runtime::{
    named, Abort, AbortReason, AbortReasonSpec, Access, CoordCtx, CoordId, Coordinator, Isolation, KnobError, KnobSpec,
    Knobs, MetricKind, MetricSpec, Obj, Protocol, Table, Txn, TxnHints,
};
use dmtx_store::{SlotLayout, StoreError, TableSpec, BUCKET_NEXT_OFFSET, OVERFLOW_CURSOR_OFFSET};
use dmtx_verbs::{AtomicId, MnId, Post, ReadId};
use dmtx_workloads::{InvariantError, Outcome, RecordSink, Snapshot, Workload};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const LOCK: usize = 0;
const KEY: usize = 8;
const CELLS_AT: usize = 16;
/// Versions a record keeps unless told otherwise ([`MvToy::with_cells`]).
const CELLS: usize = 3;
const C_TS: usize = 0;
const C_WRITER: usize = 8;
const C_PREV: usize = 16;
const C_FLAGS: usize = 24;
const C_CHECK: usize = 32;
const C_VALUE: usize = 40;
/// A cell's flag: the version is a delete's tombstone.
const TOMBSTONE: u64 = 1;
/// A cell's flag: the version has no predecessor (an insert into a free slot).
const FIRST: u64 = 2;
/// READ, FAA and CAS rounds of one execute: bucket-chain hops, overflow links and
/// re-reads of torn slots.
const READ_ROUNDS_MAX: u32 = 64;
/// Longest a snapshot waits for the watermark to pass the coordinator's last commit
/// (the session rule) before it aborts `session_lag`: bounded in time, since a commit
/// held up (a stalled install, an outage) holds the watermark back for as long.
const SESSION_WAIT_MAX_NS: u64 = 1_000_000;
/// How long one such sleep is.
const SESSION_WAIT_NS: u64 = 1_000;
/// Posts of an install or a release before it is given up (a fault that outlasts them
/// all breaks the run, which the checks then report).
const POST_TRIES_MAX: u32 = 100;
/// Wait between two such posts.
const RETRY_WAIT_NS: u64 = 10_000;
/// `MvToy::ABORT_REASONS` entries.
const R_VERSION_GONE: u8 = 0;
const R_SESSION_LAG: u8 = 1;
/// `MvToy::METRICS` entries.
const M_OLDER_READS: usize = 0;
const M_TORN_REREADS: usize = 1;
const M_SESSION_WAIT_NS: usize = 2;
/// Where the `faa` timestamp area is published.
const TS_AREA: &str = "test/mv-watermark/timestamps";

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Bytes of one version cell for values of `value_bytes`.
fn cell_bytes(value_bytes: u32) -> usize {
    C_VALUE + value_bytes.next_multiple_of(8) as usize
}

/// The tear detector of a cell: its words but `check`, mixed; never 0 (an empty cell's).
fn check_of(head: [u64; 4], value: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    let mut mix = |w: u64| {
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    };
    head.into_iter().for_each(&mut mix);
    for chunk in value.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        mix(u64::from_le_bytes(w));
    }
    h | 1
}

/// A version cell's image: `value` padded to `value_bytes` rounded up to 8.
fn cell_image(ts: u64, writer: u64, prev: u64, flags: u64, value: &[u8]) -> Vec<u8> {
    let mut cell = vec![0u8; cell_bytes(value.len() as u32)];
    cell[C_VALUE..C_VALUE + value.len()].copy_from_slice(value);
    let check = check_of([ts, writer, prev, flags], &cell[C_VALUE..]);
    for (at, w) in [
        (C_TS, ts),
        (C_WRITER, writer),
        (C_PREV, prev),
        (C_FLAGS, flags),
        (C_CHECK, check),
    ] {
        cell[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }
    cell
}

/// One version, as a cell holds it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Version {
    cell: usize,
    ts: u64,
    writer: u64,
    prev: u64,
    flags: u64,
}

impl Version {
    fn tombstone(&self) -> bool {
        self.flags & TOMBSTONE != 0
    }
    fn first(&self) -> bool {
        self.flags & FIRST != 0
    }
}

/// What a READ of a slot shows.
#[derive(Debug, PartialEq, Eq)]
enum Cells {
    /// A cell did not match its check: read again.
    Torn,
    /// The versions seen (empty cells left out).
    Seen(Vec<Version>),
}

fn cell_at(slot: &[u8], c: usize, value_bytes: u32) -> &[u8] {
    let at = CELLS_AT + c * cell_bytes(value_bytes);
    &slot[at..at + cell_bytes(value_bytes)]
}

/// The cells a slot of `value_bytes` values has.
fn cell_count(slot: &[u8], value_bytes: u32) -> usize {
    (slot.len() - CELLS_AT) / cell_bytes(value_bytes)
}

/// Cell `c` of a slot: `None` when empty, `Some(Err(()))` when torn.
fn cell_version(slot: &[u8], c: usize, value_bytes: u32) -> Option<Result<Version, ()>> {
    let cell = cell_at(slot, c, value_bytes);
    if cell.iter().all(|&b| b == 0) {
        return None;
    }
    let v = Version {
        cell: c,
        ts: word(cell, C_TS),
        writer: word(cell, C_WRITER),
        prev: word(cell, C_PREV),
        flags: word(cell, C_FLAGS),
    };
    let whole = word(cell, C_CHECK) == check_of([v.ts, v.writer, v.prev, v.flags], &cell[C_VALUE..]);
    Some(if whole { Ok(v) } else { Err(()) })
}

fn cells(slot: &[u8], value_bytes: u32) -> Cells {
    let n = cell_count(slot, value_bytes);
    let mut seen = Vec::with_capacity(n);
    for c in 0..n {
        match cell_version(slot, c, value_bytes) {
            None => {}
            Some(Ok(v)) => seen.push(v),
            Some(Err(())) => return Cells::Torn,
        }
    }
    Cells::Seen(seen)
}

/// What a snapshot holds of a record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Pick {
    /// A live version.
    Live(Version),
    /// No live version: a delete's tombstone, or nothing (inserted later, or never).
    Absent(Option<Version>),
    /// The snapshot's version was overwritten out of the cells.
    Gone,
}

/// The version a snapshot at `start` holds, of the versions a READ saw (module doc,
/// "Which version a read takes").
fn pick(seen: &[Version], start: u64) -> Pick {
    let best = seen.iter().filter(|v| v.ts <= start).max_by_key(|v| v.ts).copied();
    let at = if seen.iter().all(|v| v.ts <= start) {
        best
    } else {
        match seen.iter().find(|v| v.ts > start && (v.first() || v.prev <= start)) {
            None => return Pick::Gone,
            Some(s) if s.first() => None,
            Some(s) => match best {
                Some(b) if b.ts == s.prev => Some(b),
                _ => return Pick::Gone,
            },
        }
    };
    match at {
        Some(v) if !v.tombstone() => Pick::Live(v),
        other => Pick::Absent(other),
    }
}

/// `lock | key + 1 | cells x (commit_ts | writer | prev_ts | flags | check | value)`.
/// Counts the taken lock words it sees in `value`, which only the driver's read-back
/// after the run calls.
struct MvLayout {
    cells: usize,
    locks_left: Arc<AtomicU64>,
}

impl Default for MvLayout {
    fn default() -> Self {
        Self {
            cells: CELLS,
            locks_left: Arc::default(),
        }
    }
}

impl MvLayout {
    /// The value size (rounded up to 8) of a slot of this layout.
    fn value_bytes(&self, slot: &[u8]) -> u32 {
        ((slot.len() - CELLS_AT) / self.cells - C_VALUE) as u32
    }

    /// The newest whole version of a slot. A quiesced table has no torn cell; a scan of
    /// a live one (the suite's tear injector looks up where keys live while its workers
    /// run) may meet one, and skips it.
    fn newest(&self, slot: &[u8]) -> Option<Version> {
        let value_bytes = self.value_bytes(slot);
        (0..self.cells)
            .filter_map(|c| cell_version(slot, c, value_bytes)?.ok())
            .max_by_key(|v| v.ts)
    }
}

impl SlotLayout for MvLayout {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        (CELLS_AT + self.cells * cell_bytes(value_bytes)) as u32
    }
    fn encode(&self, _table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        slot.fill(0);
        slot[KEY..KEY + 8].copy_from_slice(&(key + 1).to_le_bytes());
        let cell = cell_image(0, 0, 0, 0, value);
        slot[CELLS_AT..CELLS_AT + cell.len()].copy_from_slice(&cell);
    }
    /// The key, unless the slot is free or its newest version is a tombstone (what
    /// scans of a quiesced table see; the protocol reads key words itself).
    fn key(&self, slot: &[u8]) -> Option<u64> {
        let key = word(slot, KEY).checked_sub(1)?;
        match self.newest(slot) {
            Some(v) => (!v.tombstone()).then_some(key),
            // Every cell torn (a scan of a live table): the key is there.
            None if (0..self.cells).any(|c| cell_version(slot, c, self.value_bytes(slot)).is_some()) => Some(key),
            // No version yet: an insert into a free slot being installed.
            None => None,
        }
    }
    /// The newest version's value (cell 0's when no cell is whole, which only a scan of
    /// a live table can see).
    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        if word(slot, LOCK) != 0 {
            self.locks_left.fetch_add(1, Ordering::Relaxed);
        }
        let cell = self.newest(slot).map_or(0, |v| v.cell);
        &cell_at(slot, cell, value_bytes)[C_VALUE..C_VALUE + value_bytes as usize]
    }
}

/// How a snapshot is taken.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Start {
    /// The completed-commit watermark (correct).
    Watermark,
    /// The broken variant: the last timestamp granted (`next() - 1`), which may name
    /// commits whose versions are not installed yet.
    LastGranted,
    /// A second broken variant: the watermark without waiting for it to pass the
    /// coordinator's last commit, so a transaction may miss its own session's write.
    WatermarkNoSession,
}

/// Coverage marks, shared with the test that runs the protocol.
#[derive(Clone, Debug, Default)]
struct Marks {
    /// Reads that took a version older than the newest they saw (multi-version reads).
    older_reads: Arc<AtomicU64>,
    /// Slot READs that found a torn cell and read again.
    torn_rereads: Arc<AtomicU64>,
    /// Attempts aborted because the snapshot's version left the cells.
    overwritten: Arc<AtomicU64>,
    /// Commits aborted by first-committer-wins validation.
    first_committer_lost: Arc<AtomicU64>,
    /// Session waits: sleeps until the watermark passed the coordinator's last commit.
    session_waits: Arc<AtomicU64>,
    /// Installs and releases posted again after a verb failed.
    reposts: Arc<AtomicU64>,
    /// Locks a release gave up on (every retry failed).
    stranded_locks: Arc<AtomicU64>,
    /// Lock words found taken by the driver's read-back after the run (and by any scan
    /// of a live table: the suite's tear injector scans while its workers run).
    locks_left: Arc<AtomicU64>,
    /// Committed inserts into a free slot, over a tombstone, and deletes.
    fresh_inserts: Arc<AtomicU64>,
    tombstone_inserts: Arc<AtomicU64>,
    deletes: Arc<AtomicU64>,
    /// Overflow buckets an insert linked to a full chain.
    overflow_links: Arc<AtomicU64>,
    /// Compute nodes whose coordinators were set up, one bit each.
    cns: Arc<AtomicU64>,
}

/// Test-only snapshot isolation over three versions per record (module doc).
struct MvToy {
    layout: MvLayout,
    ts_kind: TsKind,
    /// The `oracle` kind's counter, shared by every coordinator of the process.
    oracle: OracleTimestamps,
    start: Start,
    /// Time between taking the commit timestamp and installing, ns: the window in which
    /// a snapshot that is not the watermark misses a commit.
    install_delay_ns: u64,
    marks: Marks,
}

impl MvToy {
    fn new(ts_kind: TsKind, start: Start, install_delay_ns: u64, marks: &Marks) -> Self {
        assert!(
            matches!(ts_kind, TsKind::Oracle | TsKind::Faa),
            "mv-watermark runs `oracle` or `faa` timestamps"
        );
        Self {
            layout: MvLayout {
                cells: CELLS,
                locks_left: Arc::clone(&marks.locks_left),
            },
            ts_kind,
            oracle: OracleTimestamps::new(),
            start,
            install_delay_ns,
            marks: marks.clone(),
        }
    }
}

impl MvToy {
    /// Keep `n` versions per record (`2..=CELLS`): fewer bytes per record, so large
    /// tables (TPC-C's order lines) fit the suite's memory nodes.
    fn with_cells(mut self, n: usize) -> Self {
        assert!((2..=CELLS).contains(&n), "{n} cells; 2..={CELLS} allowed");
        self.layout.cells = n;
        self
    }
}

/// Per coordinator: its timestamp service, and the session floor.
struct MvCoord {
    ts: Timestamps,
    /// The coordinator's last snapshot (a later one is never older).
    last_start: u64,
    /// The coordinator's last commit timestamp (its next snapshot must include it).
    last_commit: u64,
}

/// A writer's hold on a record's lock.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
enum Hold {
    #[default]
    Free,
    Held,
    /// The lock's CAS failed as a verb (its reply lost, or not applied): it may hold.
    Maybe,
}

/// Where an object is in its execution.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
enum Step {
    /// Not started: read the key's home bucket.
    #[default]
    New,
    /// Read this bucket of the key's chain.
    Bucket(u64),
    /// Read the slot at `rel` again (it was torn).
    Slot,
    /// An insert at the end of a full chain whose last bucket is this: reserve an
    /// overflow bucket (FAA on the table's overflow cursor).
    Reserve(u64),
    /// Link overflow bucket `.1` after the chain's last bucket `.0` (CAS on its `next`).
    Link(u64, u64),
    /// Fetched.
    Done,
}

#[derive(Debug, Default)]
struct MvObj {
    step: Step,
    /// Table-relative slot offset, once located.
    rel: Option<u64>,
    /// An insert's free slots of the chain, in chain order, while walking it.
    free: Vec<u64>,
    /// An insert into a free slot (installs the key word with its version).
    fresh: bool,
    /// The version the snapshot holds (a tombstone for an insert over a delete), as read.
    read: Option<Version>,
    /// The writer's hold on the record's lock.
    lock: Hold,
}

fn owner(ctx: &CoordCtx) -> u64 {
    ctx.id.global() + 1
}

fn fault(_: dmtx_verbs::VerbError) -> Abort {
    Abort::new(AbortReason::Fault)
}

fn ts_fault(_: TsError) -> Abort {
    Abort::new(AbortReason::Fault)
}

fn abort(reason: AbortReason) -> Abort {
    Abort::new(reason)
}

/// What one completed round trip of an object's walk says next.
enum Next {
    Step(Step),
    /// The object's slot is in the READ's bytes at this offset (its bucket's, or its own).
    Slot(u64),
}

impl MvToy {
    /// The snapshot of a new transaction (module doc, "Sessions").
    async fn snapshot(coord: &mut Coordinator<Self>) -> Result<u64, Abort> {
        let proto = Arc::clone(&coord.proto);
        let clock = Arc::clone(&coord.ctx.clock);
        let st = &mut coord.state;
        let ctx = &mut coord.ctx;
        let start = match proto.start {
            Start::LastGranted => st.ts.next(ctx).await.map_err(ts_fault)? - 1,
            Start::Watermark | Start::WatermarkNoSession => {
                let mut waits = 0;
                let began = clock.now_ns();
                loop {
                    let w = st.ts.watermark(ctx).await.map_err(ts_fault)?;
                    if w >= st.last_commit || proto.start == Start::WatermarkNoSession {
                        if waits > 0 {
                            ctx.metric(M_SESSION_WAIT_NS, clock.now_ns() - began);
                        }
                        break w;
                    }
                    waits += 1;
                    if clock.now_ns() - began > SESSION_WAIT_MAX_NS {
                        return Err(abort(AbortReason::Protocol(R_SESSION_LAG)));
                    }
                    proto.marks.session_waits.fetch_add(1, Ordering::Relaxed);
                    dmtx_runtime::sleep(&*clock, SESSION_WAIT_NS).await;
                }
            }
        };
        let start = start.max(st.last_start);
        st.last_start = start;
        Ok(start)
    }
}

impl Protocol for MvToy {
    type CoordState = MvCoord;
    type ObjState = MvObj;
    type CnState = ();
    type ThreadState = ();
    const NAME: &'static str = "test-mv-watermark";
    const ABOUT: &'static str = "test-only snapshot isolation reading at the timestamp watermark";
    const KNOBS: &'static [KnobSpec] = &[];
    const ABORT_REASONS: &'static [AbortReasonSpec] = &[
        AbortReasonSpec::new(
            "version_gone",
            true,
            "the version the snapshot holds was overwritten out of the record's cells",
        ),
        AbortReasonSpec::new(
            "session_lag",
            true,
            "the watermark did not reach the coordinator's last commit in time",
        ),
    ];
    const METRICS: &'static [MetricSpec] = &[
        MetricSpec::new(
            "older_version_reads",
            MetricKind::Counter,
            "reads that took a version older than the newest in the record's cells",
        ),
        MetricSpec::new(
            "torn_rereads",
            MetricKind::Counter,
            "slot READs that found a torn cell and read again",
        ),
        MetricSpec::new(
            "session_wait_ns",
            MetricKind::Value,
            "time a snapshot waited for the watermark to pass the coordinator's last commit",
        ),
    ];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(Self::new(TsKind::Faa, Start::Watermark, 0, &Marks::default()))
    }
    fn isolation(&self) -> Isolation {
        Isolation::SnapshotIsolation
    }
    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }
    fn setup_run(&self, control: &dyn Control) -> dmtx_runtime::Result<()> {
        if self.ts_kind == TsKind::Faa {
            let area = named::alloc_and_publish(control, TS_AREA, MnId(0), FaaTimestamps::AREA_BYTES, 8, &[])?;
            control.load(area.at.mn, area.at.offset, &vec![0; FaaTimestamps::AREA_BYTES as usize])?;
        }
        Ok(())
    }
    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> dmtx_runtime::Result<MvCoord> {
        let ts = match self.ts_kind {
            TsKind::Faa => Timestamps::Faa(FaaTimestamps::at(named::fetch(control, TS_AREA)?.at)),
            _ => Timestamps::Oracle(self.oracle.clone()),
        };
        ts.attach(ctx).expect("oracle and faa timestamps attach anywhere");
        self.marks.cns.fetch_or(1 << ctx.id.cn, Ordering::Relaxed);
        Ok(MvCoord {
            ts,
            last_start: 0,
            last_commit: 0,
        })
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let coord = &mut *txn.coord;
        let start = match coord.set.start_ts {
            Some(s) => s,
            None => {
                let s = Self::snapshot(coord).await?;
                coord.set.start_ts = Some(s);
                s
            }
        };
        let (from, n) = (coord.set.fetched, coord.set.objs.len());
        let catalog = Arc::clone(&coord.ctx.catalog);
        let proto = Arc::clone(&coord.proto);
        let marks = &proto.marks;
        for round in 1.. {
            let mut post = Post::new();
            let mut ops = Vec::new();
            for i in from..n {
                let o = &mut coord.set.objs[i];
                let info = catalog.get(o.table).unwrap();
                let shape = &info.shape;
                if o.proto.step == Step::New {
                    o.proto.step = Step::Bucket(shape.home_bucket(o.key));
                }
                let op = match o.proto.step {
                    Step::Done => continue,
                    Step::New => unreachable!(),
                    Step::Bucket(b) => post
                        .read(info.ptr(0, shape.bucket_off(b)), shape.bucket_bytes as usize)
                        .into(),
                    Step::Slot => post
                        .read(info.ptr(0, o.proto.rel.unwrap()), shape.slot_bytes as usize)
                        .into(),
                    Step::Reserve(_) => post.faa(info.ptr(0, OVERFLOW_CURSOR_OFFSET), 1).into(),
                    Step::Link(last, ov) => {
                        let next = shape.bucket_off(last) + BUCKET_NEXT_OFFSET;
                        post.cas(info.ptr(0, next), 0, ov + 1).into()
                    }
                };
                ops.push((i, op));
            }
            if ops.is_empty() {
                break;
            }
            if round > READ_ROUNDS_MAX {
                return Err(abort(AbortReason::Torn));
            }
            coord.ctx.post(&mut post).await.map_err(fault)?;
            for (i, op) in ops {
                let info = catalog.get(coord.set.objs[i].table).unwrap();
                let shape = &info.shape;
                let (table, key, step, access) = {
                    let o = &coord.set.objs[i];
                    (o.table, o.key, o.proto.step, o.access)
                };
                let next = match (step, op) {
                    (Step::Bucket(b), Op::Read(read)) => {
                        let bucket = post.bytes(read);
                        let o = &mut coord.set.objs[i];
                        let mut found = None;
                        for s in 0..shape.slots {
                            let rel = shape.slot_off(b, s);
                            let at = (rel - shape.bucket_off(b)) as usize;
                            match word(&bucket[at..], KEY) {
                                k if k == key + 1 => {
                                    found = Some(rel);
                                    break;
                                }
                                0 if access == Access::Insert => o.proto.free.push(rel),
                                _ => {}
                            }
                        }
                        let link = word(bucket, BUCKET_NEXT_OFFSET as usize);
                        match (found, link) {
                            (Some(rel), _) => {
                                o.proto.rel = Some(rel);
                                Next::Slot(rel - shape.bucket_off(b))
                            }
                            (None, l) if l != 0 => Next::Step(Step::Bucket(shape.overflow_bucket(l - 1))),
                            (None, _) if access != Access::Insert => return Err(abort(AbortReason::NotFound)),
                            (None, _) => {
                                // The chain's first free slot that no other insert of this
                                // transaction took (module doc, "Inserts").
                                let free = std::mem::take(&mut o.proto.free);
                                match free.into_iter().find(|&rel| !claimed(&coord.set.objs, table, rel)) {
                                    Some(rel) => {
                                        let o = &mut coord.set.objs[i];
                                        o.proto.rel = Some(rel);
                                        o.proto.fresh = true;
                                        o.read_absent = true;
                                        Next::Step(Step::Done)
                                    }
                                    None => Next::Step(Step::Reserve(b)),
                                }
                            }
                        }
                    }
                    (Step::Slot, Op::Read(_)) => Next::Slot(0),
                    (Step::Reserve(last), Op::Atomic(faa)) => {
                        let ov = post.old(faa);
                        if ov >= shape.overflow_count {
                            return Err(abort(AbortReason::TableFull));
                        }
                        Next::Step(Step::Link(last, ov))
                    }
                    (Step::Link(last, ov), Op::Atomic(cas)) => match post.old(cas) {
                        0 => {
                            // Linked on the primary; the backups get the same link.
                            let next = shape.bucket_off(last) + BUCKET_NEXT_OFFSET;
                            let backups: Vec<_> = (1..info.replica_count()).map(|r| info.ptr(r, next)).collect();
                            if !backups.is_empty() {
                                let linked = retry(&mut coord.ctx, marks, |p| {
                                    for &ptr in &backups {
                                        p.write(ptr, &(ov + 1).to_le_bytes());
                                    }
                                })
                                .await;
                                if linked.is_none() {
                                    return Err(abort(AbortReason::Fault));
                                }
                            }
                            marks.overflow_links.fetch_add(1, Ordering::Relaxed);
                            let o = &mut coord.set.objs[i];
                            o.proto.rel = Some(shape.slot_off(shape.overflow_bucket(ov), 0));
                            o.proto.fresh = true;
                            o.read_absent = true;
                            Next::Step(Step::Done)
                        }
                        // Another insert linked a bucket first: walk on into it (the
                        // reserved one stays unused).
                        l => Next::Step(Step::Bucket(shape.overflow_bucket(l - 1))),
                    },
                    _ => unreachable!("op of another step"),
                };
                let at = match next {
                    Next::Step(s) => {
                        coord.set.objs[i].proto.step = s;
                        continue;
                    }
                    Next::Slot(at) => at as usize,
                };
                let Op::Read(read) = op else { unreachable!() };
                let slot = &post.bytes(read)[at..at + shape.slot_bytes as usize];
                let o = &mut coord.set.objs[i];
                let Cells::Seen(seen) = cells(slot, o.value_len) else {
                    marks.torn_rereads.fetch_add(1, Ordering::Relaxed);
                    coord.ctx.metric(M_TORN_REREADS, 1);
                    o.proto.step = Step::Slot;
                    continue;
                };
                let picked = pick(&seen, start);
                let v = match (picked, access) {
                    (Pick::Gone, _) => {
                        marks.overwritten.fetch_add(1, Ordering::Relaxed);
                        return Err(abort(AbortReason::Protocol(R_VERSION_GONE)));
                    }
                    (Pick::Live(_), Access::Insert) => return Err(abort(AbortReason::Duplicate)),
                    (Pick::Absent(t), Access::Insert) => {
                        o.read_absent = true;
                        t
                    }
                    (Pick::Absent(_), _) => return Err(abort(AbortReason::NotFound)),
                    (Pick::Live(v), _) => Some(v),
                };
                if let Some(v) = v {
                    if seen.iter().any(|s| s.ts > v.ts) {
                        marks.older_reads.fetch_add(1, Ordering::Relaxed);
                        coord.ctx.metric(M_OLDER_READS, 1);
                    }
                    o.version_read = Some(v.writer);
                }
                o.proto.read = v;
                o.proto.step = Step::Done;
                if let Some(v) = v.filter(|v| !v.tombstone()) {
                    let len = o.value_len;
                    let value = cell_at(slot, v.cell, len)[C_VALUE..C_VALUE + len as usize].to_vec();
                    coord.set.value_mut(i).copy_from_slice(&value);
                }
            }
        }
        coord.set.fetched = n;
        Ok(())
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let coord = &mut *txn.coord;
        let written: Vec<usize> = (0..coord.set.objs.len())
            .filter(|&i| coord.set.objs[i].access.writes())
            .collect();
        // A read-only transaction read one snapshot: nothing to validate or install.
        if written.is_empty() {
            return Ok(());
        }
        let catalog = Arc::clone(&coord.ctx.catalog);
        let me = owner(&coord.ctx);
        // Lock, and read the record under the lock (the CAS runs first).
        let mut post = Post::new();
        let ops: Vec<_> = written
            .iter()
            .map(|&i| {
                let o = &coord.set.objs[i];
                let info = catalog.get(o.table).unwrap();
                let rel = o.proto.rel.unwrap();
                (
                    i,
                    post.cas(info.ptr(0, rel + LOCK as u64), 0, me),
                    post.read(info.ptr(0, rel), info.shape.slot_bytes as usize),
                )
            })
            .collect();
        if let Err(e) = coord.ctx.post(&mut post).await {
            for &(i, _, _) in &ops {
                coord.set.objs[i].proto.lock = Hold::Maybe;
            }
            return Err(fault(e));
        }
        let mut conflict = false;
        for &(i, cas, _) in &ops {
            // Recorded before any abort: the cleanup releases what was taken.
            let o = &mut coord.set.objs[i];
            if post.old(cas) == 0 {
                o.proto.lock = Hold::Held;
            } else {
                conflict = true;
            }
        }
        if conflict {
            return Err(abort(AbortReason::LockConflict));
        }
        // The commit timestamp, taken under the locks (so a record's versions are in
        // timestamp order); from here every abort abandons it.
        let proto = Arc::clone(&coord.proto);
        let cts = coord.state.ts.next_commit(&mut coord.ctx).await.map_err(ts_fault)?;
        // First committer wins; the new version goes into an empty cell, or the oldest. A
        // free slot another insert took meanwhile holds its version now, so an insert
        // into a free slot (which read none) fails here too.
        let mut writes = Vec::new();
        for &(i, _, read) in &ops {
            let o = &coord.set.objs[i];
            let Cells::Seen(seen) = cells(post.bytes(read), o.value_len) else {
                panic!("a torn record under its lock: only the lock holder writes it");
            };
            let newest = seen.iter().max_by_key(|v| v.ts).copied();
            if newest.map(|v| (v.ts, v.writer)) != o.proto.read.map(|v| (v.ts, v.writer)) {
                proto.marks.first_committer_lost.fetch_add(1, Ordering::Relaxed);
                coord.state.ts.abandon(&mut coord.ctx, cts).await.map_err(ts_fault)?;
                return Err(abort(AbortReason::Validation));
            }
            let target = (0..cell_count(post.bytes(read), o.value_len))
                .find(|c| seen.iter().all(|v| v.cell != *c))
                .unwrap_or_else(|| seen.iter().min_by_key(|v| v.ts).unwrap().cell);
            let flags = match (o.access, newest) {
                (Access::Delete, _) => TOMBSTONE,
                (_, None) => FIRST,
                _ => 0,
            };
            let prev = newest.map_or(0, |v| v.ts);
            let cell = cell_image(cts.get(), coord.set.txn_id, prev, flags, coord.set.value(i));
            let info = catalog.get(o.table).unwrap();
            let rel = o.proto.rel.unwrap();
            let off = rel + (CELLS_AT + target * cell.len()) as u64;
            for r in 0..info.replica_count() {
                if o.proto.fresh {
                    writes.push((info.ptr(r, rel + KEY as u64), (o.key + 1).to_le_bytes().to_vec()));
                }
                writes.push((info.ptr(r, off), cell.clone()));
            }
        }
        if proto.install_delay_ns > 0 {
            let clock = Arc::clone(&coord.ctx.clock);
            dmtx_runtime::sleep(&*clock, proto.install_delay_ns).await;
        }
        // Validated with a commit timestamp, the transaction commits: a failed install
        // is posted again (its WRITEs are idempotent) until it lands, as an outage
        // shorter than the transport timeout allows.
        let installed = retry(&mut coord.ctx, &proto.marks, |post| {
            for (ptr, bytes) in &writes {
                post.write(*ptr, bytes);
            }
        })
        .await
        .is_some();
        let ts = cts.get();
        coord.state.ts.complete(&mut coord.ctx, cts).await.map_err(ts_fault)?;
        if !installed {
            // Some replicas may miss the version: the run is broken, and says so.
            return Err(abort(AbortReason::Fault));
        }
        coord.set.commit_ts = Some(ts);
        coord.state.last_commit = ts;
        for &i in &written {
            let o = &coord.set.objs[i];
            let mark = match (o.access, o.proto.fresh) {
                (Access::Insert, true) => &proto.marks.fresh_inserts,
                (Access::Insert, false) => &proto.marks.tombstone_inserts,
                (Access::Delete, _) => &proto.marks.deletes,
                _ => continue,
            };
            mark.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Nothing: the release needs a round trip, so it is the cleanup's.
    fn abort(_: &mut Txn<'_, Self>) {}

    async fn cleanup(coord: &mut Coordinator<Self>) {
        let catalog = Arc::clone(&coord.ctx.catalog);
        let me = owner(&coord.ctx);
        let mut locks = Vec::new();
        for o in &mut coord.set.objs {
            let hold = std::mem::take(&mut o.proto.lock);
            if hold != Hold::Free {
                let ptr = catalog.get(o.table).unwrap().ptr(0, o.proto.rel.unwrap() + LOCK as u64);
                locks.push((ptr, hold));
            }
        }
        if locks.is_empty() {
            return;
        }
        // A release whose reply was lost may have landed: posted again, its CAS finds the
        // lock free (or taken by the next writer) and changes nothing.
        let marks = coord.proto.marks.clone();
        let released = retry(&mut coord.ctx, &marks, |post| {
            locks.iter().map(|&(ptr, _)| post.cas(ptr, me, 0)).collect::<Vec<_>>()
        })
        .await;
        match released {
            // Landed at the first try, a lock known held was still ours.
            Some((post, cas, 0)) => {
                for (&(_, hold), c) in locks.iter().zip(cas) {
                    assert!(
                        hold != Hold::Held || post.old(c) == me,
                        "a lock word changed under its holder"
                    );
                }
            }
            Some(_) => {}
            None => {
                marks.stranded_locks.fetch_add(locks.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

/// A verb of one object's execution round.
#[derive(Copy, Clone)]
enum Op {
    Read(ReadId),
    Atomic(AtomicId),
}

impl From<ReadId> for Op {
    fn from(r: ReadId) -> Self {
        Op::Read(r)
    }
}

impl From<AtomicId> for Op {
    fn from(a: AtomicId) -> Self {
        Op::Atomic(a)
    }
}

/// Whether an insert of the transaction into `table` took the free slot `rel` (it is
/// locked only at commit, so it still reads as free).
fn claimed(objs: &[Obj<MvObj>], table: u32, rel: u64) -> bool {
    objs.iter()
        .any(|o| o.table == table && o.proto.fresh && o.proto.rel == Some(rel))
}

/// Post what `build` adds, again after each failure, up to [`POST_TRIES_MAX`] times with
/// [`RETRY_WAIT_NS`] between: the post that landed, what `build` returned for it, and
/// the failures before it; `None` when none landed.
async fn retry<T>(ctx: &mut CoordCtx, marks: &Marks, build: impl Fn(&mut Post) -> T) -> Option<(Post, T, u32)> {
    for attempt in 0..POST_TRIES_MAX {
        if attempt > 0 {
            marks.reposts.fetch_add(1, Ordering::Relaxed);
            let clock = Arc::clone(&ctx.clock);
            dmtx_runtime::sleep(&*clock, RETRY_WAIT_NS).await;
        }
        let mut post = Post::new();
        let made = build(&mut post);
        if ctx.post(&mut post).await.is_ok() {
            return Some((post, made, attempt));
        }
    }
    None
}

/// Goal: a read takes the version its snapshot holds, or says the key is absent, or
/// aborts; never a wrong version, from any mix of cells a non-atomic READ can show.
/// Method: a chain of versions 0 (loaded), 5, 9, 14 (each naming its predecessor), a
/// delete and an insert into a free slot, as cells a READ during overwrites can see.
#[test]
fn a_read_takes_the_snapshots_version_or_none() {
    let v = |cell, ts, prev, flags| Version {
        cell,
        ts,
        writer: 100 + ts,
        prev,
        flags,
    };
    let (v0, v5, v9, v14) = (v(0, 0, 0, 0), v(1, 5, 0, 0), v(2, 9, 5, 0), v(0, 14, 9, 0));
    // Nothing newer than the snapshot: the newest seen.
    assert_eq!(pick(&[v0, v5, v9], 9), Pick::Live(v9));
    assert_eq!(pick(&[v0, v5], 7), Pick::Live(v5));
    // Newer versions seen: the successor's prev names the one to take.
    assert_eq!(pick(&[v14, v5, v9], 6), Pick::Live(v5));
    assert_eq!(pick(&[v0, v5, v9], 4), Pick::Live(v0));
    // The snapshot's version (v5 at 6) not among the cells: gone, never an older one.
    assert_eq!(pick(&[v14, v9], 6), Pick::Gone);
    assert_eq!(pick(&[v0, v14], 6), Pick::Gone, "v0 is older than the snapshot's v5");
    assert_eq!(pick(&[v14], 3), Pick::Gone);
    // A delete at 20: absent from 20 on, with the tombstone named.
    let del = v(1, 20, 14, TOMBSTONE);
    assert_eq!(pick(&[v14, del, v9], 25), Pick::Absent(Some(del)));
    assert_eq!(pick(&[v14, del, v9], 19), Pick::Live(v14));
    // An insert into a free slot at 30 (and an update at 33): absent before 30.
    let (ins, up) = (v(0, 30, 0, FIRST), v(1, 33, 30, 0));
    assert_eq!(pick(&[ins, up], 29), Pick::Absent(None));
    assert_eq!(pick(&[ins, up], 31), Pick::Live(ins));
    assert_eq!(pick(&[up], 31), Pick::Gone);
    assert_eq!(pick(&[], 31), Pick::Absent(None), "a free slot being inserted into");
}

/// Goal: the tear detector changes with every word of a cell and is never 0 (an empty
/// cell's), so a cell that mixes two writes reads as torn. Method: a loaded record, each
/// of its cell's words changed in turn.
#[test]
fn a_cell_that_mixes_two_writes_reads_as_torn() {
    let vb = 12; // not a multiple of 8: the padding is hashed as zeros
    let layout = MvLayout::default();
    let mut slot = vec![0u8; layout.slot_bytes(vb) as usize];
    layout.encode(0, 7, &[3; 12], &mut slot);
    assert_eq!(layout.key(&slot), Some(7));
    assert_eq!(layout.value(&slot, vb), &[3; 12]);
    let Cells::Seen(seen) = cells(&slot, vb) else {
        panic!("a loaded record is whole");
    };
    assert_eq!(
        seen,
        [Version {
            cell: 0,
            ts: 0,
            writer: 0,
            prev: 0,
            flags: 0
        }]
    );
    for at in (0..cell_bytes(vb)).step_by(8) {
        let mut torn = slot.clone();
        torn[CELLS_AT + at] ^= 1;
        assert_eq!(cells(&torn, vb), Cells::Torn, "word at {at}");
    }
    assert_ne!(check_of([0; 4], &[]), 0);
    // A scan of a live table may meet a torn cell: the key stays, the value is the
    // newest whole version's.
    let mut torn = slot.clone();
    let cb = cell_bytes(vb);
    torn[CELLS_AT + cb..CELLS_AT + 2 * cb].copy_from_slice(&cell_image(4, 9, 0, 0, &[5; 12]));
    torn[CELLS_AT + cb + C_VALUE] ^= 1;
    assert_eq!((layout.key(&torn), layout.value(&torn, vb)), (Some(7), &[3u8; 12][..]));
    torn[CELLS_AT + C_VALUE] ^= 1;
    assert_eq!(layout.key(&torn), Some(7), "every cell torn");
    // A delete's tombstone as the newest version hides the key from scans.
    let tomb = cell_image(4, 9, 0, TOMBSTONE, &[0; 12]);
    slot[CELLS_AT + tomb.len()..CELLS_AT + 2 * tomb.len()].copy_from_slice(&tomb);
    assert_eq!(layout.key(&slot), None);
}

// ---------------------------------------------------------------------------------
// Transfers and audits over a few hot accounts.

const BALANCES: Table<u64> = Table::new(0);
const ACCOUNTS: u64 = 8;
const INITIAL: u64 = 100;

/// Transfers between two accounts and audits of all; an audit whose sum is not the
/// total is counted in `bad_audits` (a snapshot that is not one).
struct Bank {
    audits: Arc<AtomicU64>,
    bad_audits: Arc<AtomicU64>,
}

impl Bank {
    fn new() -> Self {
        Self {
            audits: Arc::default(),
            bad_audits: Arc::default(),
        }
    }
}

struct BankLocal {
    rng: SmallRng,
}

impl Workload for Bank {
    type Local = BankLocal;
    type Input = (usize, u64, u64);
    const NAME: &'static str = "test-mv-bank";
    const ABOUT: &'static str = "test-only transfers and audits";
    const KNOBS: &'static [KnobSpec] = &[];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(Self::new())
    }
    fn txn_types(&self) -> &'static [&'static str] {
        &["transfer", "audit"]
    }
    fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec::new(BALANCES.id(), "balances", 8, ACCOUNTS)]
    }
    fn load(&self, _table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        (0..ACCOUNTS).try_for_each(|k| insert(k, &INITIAL.to_le_bytes()))
    }
    fn local(&self, _coord: CoordId, seed: u64) -> BankLocal {
        BankLocal {
            rng: SmallRng::seed_from_u64(seed),
        }
    }
    fn draw(&self, local: &mut BankLocal) -> (usize, Self::Input) {
        let a = local.rng.random_range(0..ACCOUNTS);
        let b = (a + local.rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
        let ty = usize::from(local.rng.random_bool(0.4));
        (ty, (ty, a, b))
    }
    async fn run<P: Protocol>(
        &self,
        _local: &mut BankLocal,
        &(ty, a, b): &Self::Input,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        if ty == 0 {
            let mut txn = coord.begin_with(TxnHints::DECLARED);
            let (ra, rb) = (txn.add_rw(BALANCES, a), txn.add_rw(BALANCES, b));
            txn.execute().await?;
            *txn.get_mut(ra) -= 1;
            *txn.get_mut(rb) += 1;
            return txn.commit().await.map(|()| Outcome::Committed);
        }
        let mut txn = coord.begin_with(TxnHints::READ_ONLY_DECLARED);
        let refs: Vec<_> = (0..ACCOUNTS).map(|k| txn.add_ro(BALANCES, k)).collect();
        txn.execute().await?;
        let sum: u64 = refs.iter().map(|&r| *txn.get(r)).sum();
        txn.commit().await?;
        self.audits.fetch_add(1, Ordering::Relaxed);
        if sum != ACCOUNTS * INITIAL {
            self.bad_audits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Outcome::Committed)
    }
    fn check(&self, _locals: &[BankLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        let sum: u64 = snapshot
            .iter(BALANCES.id())
            .map(|(_, v)| u64::from_le_bytes(v.try_into().unwrap()))
            .sum();
        if sum != ACCOUNTS * INITIAL {
            return Err(InvariantError {
                invariant: "sum",
                detail: format!("balances sum to {sum}, not {}", ACCOUNTS * INITIAL),
            });
        }
        let bad = self.bad_audits.load(Ordering::Relaxed);
        if bad > 0 {
            return Err(InvariantError {
                invariant: "audit",
                detail: format!("{bad} audits saw a sum other than {}", ACCOUNTS * INITIAL),
            });
        }
        Ok(format!("balances sum to {sum}"))
    }
}

/// A run of `compute_nodes` CNs with 2 threads of 3 coordinators each, one replica.
fn config(transport: TransportKind, compute_nodes: u32, duration: &str, seed: u64) -> BenchConfig {
    config_replicated(transport, compute_nodes, duration, seed, 1)
}

/// The same with `replicas` replicas on as many memory nodes.
fn config_replicated(
    transport: TransportKind,
    compute_nodes: u32,
    duration: &str,
    seed: u64,
    replicas: u32,
) -> BenchConfig {
    let mut cfg = BenchConfig::from_args_unchecked(
        &BenchArgs {
            protocol: MvToy::NAME.into(),
            workload: Bank::NAME.into(),
            threads: 2,
            coroutines: 3,
            duration: Some(duration.into()),
            memory_nodes: Some(replicas.max(2)),
            replicas: Some(replicas),
            seed,
            check: true,
            transport,
            compute_nodes: Some(compute_nodes),
            out: "-".into(),
            quiet: true,
            ..BenchArgs::default()
        },
        Knobs::default(),
    )
    .unwrap();
    cfg.out = OutTarget::None;
    if transport == TransportKind::Sim {
        // `from_args_unchecked` leaves the simulator unset; the CPU is the profile's
        // model (not measured), so a seed replays the run.
        let mut profile = dmtx_sim::Profile::load("cx5").unwrap();
        profile.cpu.mode = dmtx_sim::CpuMode::Model;
        cfg.sim = Some(SimSetup { profile, faults: None });
    }
    cfg
}

fn run(proto: MvToy, bank: Bank, cfg: &BenchConfig) -> BenchResult {
    let stop = AtomicBool::new(false);
    driver::run(
        proto,
        bank,
        cfg,
        &RunHooks {
            stop: &stop,
            monitor: &Silent,
            probes: None,
        },
    )
    .unwrap()
}

/// What every correct run shows: a clean history at snapshot isolation with every
/// committed read checked against its snapshot, the invariant, whole audits, transfers
/// committing, and reads that took an older version than the newest.
fn assert_clean_si(r: &BenchResult, bank: &Bank, marks: &Marks) {
    let what = &r.transport;
    assert!(r.invariant.ok, "{what}: {}", r.invariant.detail);
    let check = r.check.as_ref().expect("--check on an SI protocol");
    assert_eq!(check.level, "snapshot isolation");
    assert!(check.clean, "{what}: {}\n{:?}", check.summary, check.findings);
    assert!(
        check
            .summary
            .contains("reads checked against their start timestamps' snapshots"),
        "{what}: {}",
        check.summary
    );
    assert_eq!(bank.bad_audits.load(Ordering::Relaxed), 0, "{what}");
    assert!(bank.audits.load(Ordering::Relaxed) > 10, "{what}");
    let t = &r.per_txn_type["transfer"];
    assert!(t.committed > 20, "{what}: {t:?}");
    assert!(
        marks.older_reads.load(Ordering::Relaxed) > 0,
        "{what}: a snapshot read an older version than the newest: {marks:?}"
    );
    assert_eq!(
        marks.locks_left.load(Ordering::Relaxed),
        0,
        "{what}: every lock released"
    );
    let older = &r.protocol_metrics["older_version_reads"];
    assert!(older.sum > 0, "{what}: {older:?}");
    assert!(
        r.per_txn_type
            .values()
            .all(|t| !t.abort_reasons.contains_key("invisible")),
        "{what}: the protocol's own reasons name its aborts"
    );
    // Each of those abandoned its commit timestamp; one left unresolved would hold the
    // watermark back and stall every session behind it.
    assert!(
        marks.first_committer_lost.load(Ordering::Relaxed) > 0,
        "{what}: {marks:?}"
    );
}

#[test]
fn watermark_snapshots_are_clean_on_mem() {
    for ts in [TsKind::Oracle, TsKind::Faa] {
        let (marks, bank) = (Marks::default(), Bank::new());
        let proto = MvToy::new(ts, Start::Watermark, 20_000, &marks);
        let r = run(proto, bank_clone(&bank), &config(TransportKind::Mem, 3, "300ms", 1));
        assert_clean_si(&r, &bank, &marks);
        assert_eq!(marks.cns.load(Ordering::Relaxed), 0b111, "three compute nodes ran");
    }
}

#[test]
fn watermark_snapshots_are_clean_on_sim_with_3_compute_nodes() {
    for ts in [TsKind::Oracle, TsKind::Faa] {
        let (marks, bank) = (Marks::default(), Bank::new());
        let proto = MvToy::new(ts, Start::Watermark, 20_000, &marks);
        let r = run(
            proto,
            bank_clone(&bank),
            &config_replicated(TransportKind::Sim, 3, "5ms", 1, 3),
        );
        assert_clean_si(&r, &bank, &marks);
        assert_eq!(r.sim.as_ref().unwrap().compute_nodes, 3);
        assert_eq!(marks.cns.load(Ordering::Relaxed), 0b111, "three compute nodes ran");
    }
}

/// Goal: lost replies, delays and a memory node's short outage leave the history clean
/// and the balances whole: a lock CAS whose reply was lost is released in the cleanup, an
/// install or a release that failed is posted again until it lands. Method: the 3-CN
/// `sim` run with 3 replicas under a fault script that hits each.
#[test]
fn lost_replies_and_an_outage_leave_snapshots_clean_on_sim() {
    let (marks, bank) = (Marks::default(), Bank::new());
    let proto = MvToy::new(TsKind::Oracle, Start::Watermark, 20_000, &marks);
    let mut cfg = config_replicated(TransportKind::Sim, 3, "5ms", 1, 3);
    cfg.on_fault = dmtx::config::OnFault::Continue;
    let script = "timeout=40us; lose-response on=kind:cas,mn:0 nth=30 count=30; \
                  delay by=30us on=kind:write,mn:1 nth=10 count=30; link-down node=mn2 at=400us for=30us";
    cfg.sim.as_mut().unwrap().faults = Some(script.parse().unwrap());
    let r = run(proto, bank_clone(&bank), &cfg);
    assert_clean_si(&r, &bank, &marks);
    let sim = r.sim.as_ref().unwrap();
    assert!(
        sim.faults.iter().any(|f| f.contains("link of mn2 down")),
        "{:?}",
        sim.faults
    );
    assert!(
        r.per_txn_type["transfer"].abort_reasons["fault"] > 0,
        "a lock CAS's reply was lost"
    );
    assert!(marks.reposts.load(Ordering::Relaxed) > 0, "{marks:?}");
    assert_eq!(marks.stranded_locks.load(Ordering::Relaxed), 0);
}

/// The same counters, for a run that takes the workload by value.
fn bank_clone(b: &Bank) -> Bank {
    Bank {
        audits: Arc::clone(&b.audits),
        bad_audits: Arc::clone(&b.bad_audits),
    }
}

/// Goal: the broken variant (snapshot at the last grant, not the watermark) is caught
/// by the checker's snapshot check within a few seeds, on `sim` and on `mem`. Method:
/// the same runs as the correct variant's, seeds 1 to 5, until one is caught.
#[test]
fn a_snapshot_at_the_last_grant_is_caught() {
    const SEEDS: u64 = 5;
    for (transport, cns, duration) in [(TransportKind::Sim, 3, "5ms"), (TransportKind::Mem, 3, "300ms")] {
        let caught = (1..=SEEDS).find(|&seed| {
            let (marks, bank) = (Marks::default(), Bank::new());
            let proto = MvToy::new(TsKind::Oracle, Start::LastGranted, 20_000, &marks);
            let r = run(proto, bank_clone(&bank), &config(transport, cns, duration, seed));
            let check = r.check.as_ref().unwrap();
            !check.clean && check.findings.iter().any(|f| f.starts_with("snapshot"))
        });
        assert!(
            caught.is_some(),
            "{transport:?}: the broken variant passed {SEEDS} seeds"
        );
    }
}

/// Goal: a snapshot at the watermark that may lag the coordinator's own last commit
/// (no session wait) is caught as a session cycle: the coordinator's next transaction
/// misses its own write. Method: as above, with the session wait left out.
#[test]
fn a_snapshot_behind_the_sessions_own_commit_is_caught() {
    // On `sim` seed 9 is the first caught (a lagging watermark needs another CN's
    // smaller commit in its install window just as the session's next one starts).
    const SEEDS: u64 = 12;
    for (transport, cns, duration) in [(TransportKind::Sim, 3, "5ms"), (TransportKind::Mem, 3, "300ms")] {
        let caught = (1..=SEEDS).find(|&seed| {
            let (marks, bank) = (Marks::default(), Bank::new());
            let proto = MvToy::new(TsKind::Oracle, Start::WatermarkNoSession, 20_000, &marks);
            let r = run(proto, bank_clone(&bank), &config(transport, cns, duration, seed));
            let check = r.check.as_ref().unwrap();
            !check.clean && check.findings.iter().any(|f| f.starts_with("session"))
        });
        assert!(
            caught.is_some(),
            "{transport:?}: the broken variant passed {SEEDS} seeds"
        );
    }
}

/// Goal: the protocol runs as three compute nodes over `tcp`, each a separate `driver`
/// run joined through the memory node (`--cluster FILE --cn I`): the `faa` timestamp
/// area the loader's `setup_run` published is found by name on every CN, the CNs'
/// histories checked together are clean at snapshot isolation with every read checked
/// against its snapshot, and every audit saw the whole total. Method: one memory-node
/// process on loopback and three compute-node views, each run on its own thread.
#[test]
fn three_compute_nodes_over_tcp_read_one_watermark() {
    const TXNS: u64 = 600;
    let dir = common::scratch_dir("mv_watermark_tcp");
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_dmtx"));
    let nodes = dmtx::cluster::LocalNodes::start(exe, 1, 64 << 20, 1, &dir.join("cluster")).unwrap();
    nodes.add_compute_nodes(3).unwrap();
    let view = dmtx::cluster::ClusterView::load(&nodes.cluster_file).unwrap();
    let (marks, bank) = (Marks::default(), Bank::new());
    let cfg = |cn: u16| {
        let mut c = BenchConfig::from_args_unchecked(
            &BenchArgs {
                protocol: MvToy::NAME.into(),
                workload: Bank::NAME.into(),
                threads: 1,
                coroutines: 3,
                txns: Some(TXNS),
                memory_nodes: Some(1),
                replicas: Some(1),
                check: true,
                quiet: true,
                ..BenchArgs::default()
            },
            Knobs::default(),
        )
        .unwrap();
        c.out = OutTarget::None;
        c.history = Some(dir.join(format!("cn{cn}.history")));
        let mut v = view.clone();
        v.select_cn(cn, &nodes.cluster_file).unwrap();
        c.cluster = Some(v);
        c
    };
    let results: Vec<BenchResult> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u16)
            .map(|cn| {
                let (c, proto, bank) = (
                    cfg(cn),
                    MvToy::new(TsKind::Faa, Start::Watermark, 20_000, &marks),
                    bank_clone(&bank),
                );
                s.spawn(move || run(proto, bank, &c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().map(|r| r.committed).sum::<u64>(), TXNS);
    for (cn, r) in results.iter().enumerate() {
        assert_eq!(r.cn.as_ref().unwrap().id, cn as u16);
        assert_eq!(r.transport, "tcp");
        assert!(r.per_txn_type["transfer"].committed > 0, "cn{cn}");
        assert!(
            r.per_txn_type["transfer"].ts_rtts_per_commit.unwrap() > 0.0,
            "faa timestamps cost round trips"
        );
    }
    let paths: Vec<_> = (0..3).map(|cn| dir.join(format!("cn{cn}.history"))).collect();
    let h = dmtx_check::format::read_histories(&paths).unwrap();
    let report = dmtx_check::check(&h, &dmtx_check::check_options(Isolation::SnapshotIsolation));
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.committed as u64, TXNS);
    assert!(report.snapshot_reads > 0, "{}", report.summary());
    assert_eq!(bank.bad_audits.load(Ordering::Relaxed), 0);
    assert!(bank.audits.load(Ordering::Relaxed) > 10);
    assert!(marks.older_reads.load(Ordering::Relaxed) > 0, "{marks:?}");
}

/// A run of workload `W` with knobs `set` under the correct protocol.
fn run_workload<W: Workload>(set: &[&str], transport: TransportKind, txns: u64) -> (BenchResult, Marks) {
    let knobs = Knobs::parse(set.iter().copied()).unwrap();
    let mut cfg = BenchConfig::from_args_unchecked(
        &BenchArgs {
            protocol: MvToy::NAME.into(),
            workload: W::NAME.into(),
            threads: 2,
            coroutines: 3,
            txns: Some(txns),
            replicas: Some(2),
            check: true,
            transport,
            out: "-".into(),
            quiet: true,
            ..BenchArgs::default()
        },
        knobs.clone(),
    )
    .unwrap();
    cfg.out = OutTarget::None;
    if transport == TransportKind::Sim {
        let mut profile = dmtx_sim::Profile::load("cx5").unwrap();
        profile.cpu.mode = dmtx_sim::CpuMode::Model;
        cfg.sim = Some(SimSetup { profile, faults: None });
    }
    let marks = Marks::default();
    let proto = MvToy::new(TsKind::Oracle, Start::Watermark, 0, &marks);
    let stop = AtomicBool::new(false);
    let r = driver::run(
        proto,
        W::from_knobs(&knobs).unwrap(),
        &cfg,
        &RunHooks {
            stop: &stop,
            monitor: &Silent,
            probes: None,
        },
    )
    .unwrap();
    (r, marks)
}

/// Goal: the protocol's inserts (into free slots, overflow buckets, over tombstones) and
/// deletes (tombstones) keep every workload's invariants and a clean history at snapshot
/// isolation. Method: each workload of `dmtx-workloads`, small and contended, on `mem`
/// and `sim` with 2 replicas.
#[test]
fn every_workload_keeps_its_invariants() {
    use dmtx_workloads::{Kvs, SmallBank, Tatp, Tpcc, Ycsb};
    for transport in [TransportKind::Mem, TransportKind::Sim] {
        let runs = [
            (
                "kvs",
                run_workload::<Kvs>(
                    &["keys=32", "zipf_theta=0.99", "rw_ratio=0.5", "objects=3"],
                    transport,
                    600,
                ),
            ),
            (
                "smallbank",
                run_workload::<SmallBank>(&["accounts=64", "hot_accounts=8", "hot_pct=90"], transport, 600),
            ),
            ("tatp", run_workload::<Tatp>(&["subscribers=100"], transport, 600)),
            (
                "tpcc",
                run_workload::<Tpcc>(&["warehouses=1", "items=1000", "customers=30"], transport, 300),
            ),
            (
                "ycsb",
                run_workload::<Ycsb>(
                    &[
                        "records=128",
                        "fields=3",
                        "field_bytes=13",
                        "ops_per_txn=4",
                        "zipf_theta=0.99",
                    ],
                    transport,
                    600,
                ),
            ),
        ];
        for (name, (r, marks)) in runs {
            let check = r.check.as_ref().unwrap();
            assert!(r.invariant.ok, "{name} {transport:?}: {}", r.invariant.detail);
            assert!(
                check.clean,
                "{name} {transport:?}: {}\n{:?}",
                check.summary, check.findings
            );
            assert_eq!(marks.locks_left.load(Ordering::Relaxed), 0, "{name}");
            if name == "tpcc" {
                assert!(marks.fresh_inserts.load(Ordering::Relaxed) > 0, "{marks:?}");
                assert!(marks.deletes.load(Ordering::Relaxed) > 0, "{marks:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Inserts and deletes of a few keys in a tiny table: chains overflow, deleted keys come
// back over their tombstones.

const MEMBERS: Table<u64> = Table::new(0);
const COUNT: Table<u64> = Table::new(1);
/// Keys that come and go.
const MEMBER_KEYS: u64 = 40;
/// Keys present as loaded: `0..LOADED`.
const LOADED: u64 = 12;

/// Adds and removes members, keeping their number in one counter record; the invariant
/// is that the counter equals the members present.
struct Members;

impl Workload for Members {
    type Local = SmallRng;
    type Input = (usize, u64);
    const NAME: &'static str = "test-mv-members";
    const ABOUT: &'static str = "test-only inserts and deletes";
    const KNOBS: &'static [KnobSpec] = &[];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(Self)
    }
    fn txn_types(&self) -> &'static [&'static str] {
        &["add", "remove", "count"]
    }
    fn tables(&self) -> Vec<TableSpec> {
        // Two slots per bucket, full buckets: most keys end in overflow buckets.
        let mut members = TableSpec::new(MEMBERS.id(), "members", 8, MEMBER_KEYS);
        members.slots_per_bucket = 2;
        members.load_factor = 1.0;
        members.overflow_fraction = 2.0;
        members.initial = LOADED;
        vec![members, TableSpec::new(COUNT.id(), "count", 8, 1)]
    }
    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        match table {
            0 => (0..LOADED).try_for_each(|k| insert(k, &k.to_le_bytes())),
            _ => insert(0, &LOADED.to_le_bytes()),
        }
    }
    fn local(&self, _coord: CoordId, seed: u64) -> SmallRng {
        SmallRng::seed_from_u64(seed)
    }
    fn draw(&self, rng: &mut SmallRng) -> (usize, Self::Input) {
        let ty = rng.random_range(0..3);
        (ty, (ty, rng.random_range(0..MEMBER_KEYS)))
    }
    async fn run<P: Protocol>(
        &self,
        _rng: &mut SmallRng,
        &(ty, k): &Self::Input,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let mut txn = coord.begin();
        let count = txn.add_rw(COUNT, 0);
        let member = match ty {
            0 => Some(txn.add_insert(MEMBERS, k)),
            1 => Some(txn.add_delete(MEMBERS, k)),
            _ => None,
        };
        match txn.execute().await {
            Err(a) if matches!(a.reason, AbortReason::Duplicate | AbortReason::NotFound) => {
                return Ok(Outcome::Unsuccessful)
            }
            r => r?,
        }
        match ty {
            0 => {
                *txn.get_mut(member.unwrap()) = k;
                *txn.get_mut(count) += 1;
            }
            1 => *txn.get_mut(count) -= 1,
            _ => {}
        }
        txn.commit().await.map(|()| Outcome::Committed)
    }
    fn check(&self, _locals: &[SmallRng], snapshot: &Snapshot) -> Result<String, InvariantError> {
        let members: Vec<(u64, u64)> = snapshot
            .iter(MEMBERS.id())
            .map(|(k, v)| (k, u64::from_le_bytes(v.try_into().unwrap())))
            .collect();
        let count = u64::from_le_bytes(snapshot.get(COUNT.id(), 0).unwrap().try_into().unwrap());
        if let Some((k, v)) = members.iter().find(|(k, v)| k != v) {
            return Err(InvariantError {
                invariant: "member",
                detail: format!("member {k} holds {v}"),
            });
        }
        if count != members.len() as u64 {
            return Err(InvariantError {
                invariant: "count",
                detail: format!("the counter says {count} members, the table holds {}", members.len()),
            });
        }
        Ok(format!("{count} members counted and present"))
    }
}

/// Goal: inserts claim free slots (linking overflow buckets when a chain is full) without
/// ever placing one key twice, deletes leave tombstones that hide the key from later
/// snapshots and from scans, and a deleted key is inserted again over its tombstone; the
/// counter of members always equals the members present, and the history (with absent
/// reads) is clean. Method: [`Members`] on a tiny table, on `mem` and on `sim` with 3
/// compute nodes and 2 replicas.
#[test]
fn inserts_and_deletes_come_and_go_over_tombstones_and_overflow() {
    for (transport, cns) in [(TransportKind::Mem, 3), (TransportKind::Sim, 3)] {
        let mut cfg = config_replicated(transport, cns, "5ms", 1, 2);
        cfg.workload = Members::NAME.into();
        if transport == TransportKind::Mem {
            cfg.stop = dmtx::config::StopRule::Txns(1500);
        }
        let marks = Marks::default();
        let proto = MvToy::new(TsKind::Oracle, Start::Watermark, 0, &marks);
        let stop = AtomicBool::new(false);
        let hooks = RunHooks {
            stop: &stop,
            monitor: &Silent,
            probes: None,
        };
        let r = driver::run(proto, Members, &cfg, &hooks).unwrap();
        let check = r.check.as_ref().unwrap();
        assert!(r.invariant.ok, "{transport:?}: {}", r.invariant.detail);
        assert!(check.clean, "{transport:?}: {}\n{:?}", check.summary, check.findings);
        for (what, n) in [
            ("fresh inserts", &marks.fresh_inserts),
            ("inserts over tombstones", &marks.tombstone_inserts),
            ("deletes", &marks.deletes),
            ("overflow links", &marks.overflow_links),
        ] {
            assert!(n.load(Ordering::Relaxed) > 0, "{transport:?}: no {what}: {marks:?}");
        }
        assert_eq!(marks.locks_left.load(Ordering::Relaxed), 0);
    }
}

// ---------------------------------------------------------------------------------
// The protocol suite.

/// The faults [`MvToy`] survives (module doc, "Faults"): no compute-node crash.
const MV_FAULTS: dmtx_suite::FaultMenu = dmtx_suite::FaultMenu {
    crash_cn: false,
    ..dmtx_suite::FaultMenu::ALL
};

/// [`MvToy`]'s round trips per phase on an idle cluster, with `oracle` timestamps (free)
/// and no address cache (warm and cold alike): one bucket READ per object to execute;
/// a writer's commit is the lock round and the install; its cleanup the release.
fn mv_budget() -> Vec<dmtx_suite::RttBudget> {
    use dmtx_suite::{Cache, RttBudget, TxnKind};
    let mut rows = Vec::new();
    for cache in [Cache::Warm, Cache::Cold] {
        rows.extend([
            RttBudget::new(TxnKind::ReadOnlyOne, cache, 1, 0),
            RttBudget::new(TxnKind::ReadOnlyMany, cache, 1, 0),
            RttBudget::new(TxnKind::ReadWrite, cache, 1, 2).cleanup(1),
            RttBudget::new(TxnKind::ReadWriteWithRo, cache, 1, 2).cleanup(1),
            RttBudget::new(TxnKind::Insert, cache, 1, 2).cleanup(1),
            RttBudget::new(TxnKind::Delete, cache, 1, 2).cleanup(1),
        ]);
    }
    rows
}

/// Goal: the protocol passes the whole protocol suite with `oracle` timestamps:
/// contended bank transactions on `mem` (tears injected) and `sim` with 1 to 3 replicas
/// and odd value sizes, with session order, its round-trip budget, determinism and the
/// fault sweep (no compute-node crash); every workload, with two versions per record (so
/// that TPC-C fits the suite's memory nodes); and with `faa` timestamps the contended
/// cases (an `faa` round trip that fails is not survived). Method: `dmtx_suite::run_all`
/// with 3 compute nodes, once per configuration.
#[test]
fn passes_the_protocol_suite() {
    let marks = Marks::default();
    let oracle = |cells| {
        let marks = marks.clone();
        move |_: &Knobs| MvToy::new(TsKind::Oracle, Start::Watermark, 0, &marks).with_cells(cells)
    };
    let opts = dmtx_suite::Options {
        compute_nodes: 3,
        workloads: false,
        rtt_budget: mv_budget(),
        faults: Some(MV_FAULTS),
        ..dmtx_suite::Options::default()
    };
    let mut cases = dmtx_suite::run_all(oracle(CELLS), &opts).cases;
    let workloads = dmtx_suite::Options {
        workloads: true,
        seeds: 0..0,
        rtt_budget: Vec::new(),
        faults: None,
        ..opts.clone()
    };
    cases += dmtx_suite::run_all(oracle(2), &workloads).cases;
    let faa = dmtx_suite::Options {
        replicas: vec![2],
        rtt_budget: Vec::new(),
        faults: None,
        ..opts
    };
    let m = marks.clone();
    cases += dmtx_suite::run_all(move |_: &Knobs| MvToy::new(TsKind::Faa, Start::Watermark, 0, &m), &faa).cases;
    eprintln!("mv-watermark: {cases} suite cases; {marks:?}");
    for (what, n) in [
        ("older-version reads", &marks.older_reads),
        ("fresh inserts", &marks.fresh_inserts),
        ("deletes", &marks.deletes),
        ("torn re-reads", &marks.torn_rereads),
        ("reposts under faults", &marks.reposts),
    ] {
        assert!(n.load(Ordering::Relaxed) > 0, "no {what}: {marks:?}");
    }
}

/// Goal: the suite catches both broken variants within a few seeds. Method:
/// `dmtx_suite::assert_caught` on the contended bank, on `sim` with 3 compute nodes and a
/// delay between the commit timestamp and the install.
#[test]
fn the_suite_catches_the_broken_variants() {
    let setup = dmtx_suite::Setup {
        compute_nodes: 3,
        ..dmtx_suite::Setup::new(1, 20)
    };
    for (name, start) in [
        ("snapshot at the last grant", Start::LastGranted),
        ("no session wait", Start::WatermarkNoSession),
    ] {
        let caught = dmtx_suite::assert_caught(
            name,
            || MvToy::new(TsKind::Oracle, start, 20_000, &Marks::default()),
            &setup,
            dmtx_suite::Transport::Sim,
            8,
        );
        eprintln!("{name}: seed {} {:?}", caught.seed, caught.findings.first());
    }
}
