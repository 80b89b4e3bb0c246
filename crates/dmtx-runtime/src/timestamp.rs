//! The timestamp service of MVCC and T/O protocols (DESIGN §4): strictly increasing,
//! cluster-unique `u64` timestamps, never 0, behind one trait with three kinds.
//!
//! Motor (§5 "Timestamp Generation") and LOTUS (§5) take a start timestamp when a
//! transaction begins and a commit timestamp once its writes are locked, from "a
//! scalable timestamp service in the compute pool" that they leave out of scope and
//! count as free; RCBench's T/O, MVCC and Silo (§5.2, Alg. 5 line 7) take "the current
//! timestamp" locally, with no remote step. What differs between deployments is what a
//! timestamp costs, so the kinds differ only in that:
//!
//! | [`TsKind`] | where the counter lives | a timestamp costs | who assumes it |
//! | --- | --- | --- | --- |
//! | `oracle` ([`OracleTimestamps`]) | one atomic shared by every coordinator of the process | nothing: no message, no round trip, no virtual time | Motor §4, LOTUS §5, RCBench §5.2 (the default) |
//! | `rpc` ([`RpcTimestamps`]) | one worker thread of one CN (cn0/t0 by default), reached by CN↔CN RPC ([`crate::Rpc`]) | one CN↔CN round trip plus the host's handler CPU; nothing on the host thread itself | what a multi-host deployment of the oracle runs |
//! | `faa` ([`FaaTimestamps`]) | an 8-byte word on a memory node | one FAA: one memory-node round trip | the one-sided alternative (DESIGN §4) |
//!
//! The `oracle` kind is right for `mem` and `sim`, where every CN lives in one process;
//! across hosts its counter would not be shared, so there a protocol runs `rpc` or `faa`.
//!
//! A fourth kind, `hybrid` ([`HybridTimestamps`]), gives timestamps with a physical-clock
//! component (LOTUS §5: "timestamps are assumed to include a physical clock component",
//! which its 500 ms garbage collection compares with the local clock): `µs << 16 |
//! cn << 8 | counter`, taken on the coordinator's own compute node, free. It is built by
//! the protocol that needs it and is not a knob value ([`TsKind::ALL`] lists the counter
//! kinds); its doc says how uniqueness and order hold.
//!
//! # Completed-commit watermark (Motor §5, LOTUS §5)
//!
//! Motor (§5.1, Phase 3) and LOTUS (§5.1, "Write Visible") install a transaction's
//! versions after taking `T_commit`; between that grant and the last write, a reader
//! whose `T_start` exceeds `T_commit` can miss the commit and read an older version. A snapshot that never misses a smaller commit still being written reads at
//! the **watermark** instead: the largest timestamp `w` such that every commit timestamp
//! `<= w` that was handed out has completed (all its writes installed) or been abandoned
//! (its transaction aborted), and no commit timestamp `<= w` will be handed out later.
//!
//! - [`TimestampService::next_commit`] hands out a commit timestamp as a [`CommitTs`],
//!   which holds the watermark back until it is given to [`TimestampService::complete`]
//!   or [`TimestampService::abandon`] (it is not `Copy`: it is resolved once). Plain
//!   [`TimestampService::next`] timestamps (`T_start`) are not tracked: they install
//!   nothing, so the watermark does not wait for them.
//! - [`TimestampService::watermark`] reads it. It never decreases as published, and it
//!   passes a commit timestamp once it and every smaller one are resolved.
//!
//! | kind | `next_commit` | `complete` / `abandon` | `watermark` |
//! | --- | --- | --- | --- |
//! | `oracle` | free (a lock around the grant and a set insert) | free | free: the smallest pending commit − 1, or the last grant |
//! | `rpc` | one CN↔CN round trip (free on the host thread) | one round trip | one round trip |
//! | `faa` | one MN round trip: the FAA and a READ of the watermark word in one doorbell | one MN round trip: an 8-byte WRITE | two MN round trips (READ the words, READ the ring), three when it moves (a CAS publishes it) |
//! | `hybrid` | free | free | free (in process; see [`HybridTimestamps`]) |
//!
//! Each round trip adds one to `ts_rtts`, each call one to `ts_requests`, as for grants.
//! The `faa` kind keeps its state in one memory-node area ([`FaaTimestamps`]: a
//! watermark word, the counter word, a ring of [`WATERMARK_RING_SLOTS`] resolution
//! slots): correct with any number of compute nodes, since every step is a verb on it
//! and every shared word moves by FAA or CAS.
//!
//! # How a protocol uses it
//!
//! A protocol holds a [`Timestamps`] (its paper's kind by default, [`TsKind`] parsed from
//! a knob otherwise, built once by [`Timestamps::setup`]), calls
//! [`TimestampService::attach`] from `Protocol::coord_state` for every coordinator (the
//! `rpc` kind installs its handler on the host thread there and refuses coordinators
//! without messaging; the `hybrid` kind registers the node's clock), then awaits
//! [`TimestampService::next`] once for `T_start` and once for `T_commit`. A protocol
//! whose snapshots read at the watermark takes `T_commit` with
//! [`TimestampService::next_commit`] instead, and completes it once its writes are
//! installed or abandons it on abort. [`TimestampService::next_range`] takes `n` consecutive timestamps in
//! one request, so a later combiner can serve several coordinators of a thread that ask
//! at once with one message or one FAA.
//!
//! # Counting (DESIGN §4: "timestamp round trips are counted apart from MN RTTs")
//!
//! Every request adds one to `ctx.txn_counters.ts_requests`; one the coordinator waited
//! a round trip for (an RPC to another thread, a FAA) adds one to `ts_rtts` as well. A
//! FAA timestamp is a verb, but it is **not** in `rtts`, `ops` or the byte counts: those
//! stay the protocol's own budget, comparable across timestamp kinds. The memory node's
//! load (`ctx.per_mn`) does count it, since its NIC serves it.
//!
//! # Invariants
//!
//! 1. Every timestamp granted is `>= 1` and granted once: each kind advances one counter
//!    by `n` per request with an atomic read-modify-write (`fetch_add`, or the NIC's FAA)
//!    and grants `old + 1 ..= old + n`; a request the RPC layer delivers twice (a retry)
//!    advances it twice and the caller uses one of the two ranges, so numbers may be
//!    skipped, never repeated.
//! 2. Real-time order: a timestamp is greater than every timestamp granted before its
//!    request was issued, because the counter is advanced between issue and reply (what
//!    MVCC needs of `T_start`, Motor §5.1 Phase 1). Hence a coordinator's timestamps
//!    strictly increase. A range must therefore be used at once, never kept for later.
//!    (The `hybrid` kind keeps it per compute node only; across nodes, up to clock skew.)
//! 3. The watermark never passes a commit timestamp that is unresolved: the `oracle` and
//!    `rpc` ledgers insert a commit timestamp in the same critical section that advances
//!    the counter, and compute the watermark under that lock; the `faa` kind's
//!    watermark passes a tracked index only when its ring slot holds that index's tag.
//! 4. No commit timestamp `<=` a watermark is handed out after it was computed: every
//!    grant comes after the counter (or, for `hybrid`, every node's floor) it was
//!    computed from.
//!
//! # Not done
//!
//! - The counter kinds carry no physical-clock component; `hybrid` does.
//! - The `hybrid` watermark covers the compute nodes of one process (`mem`, `sim`);
//!   across hosts it would need every node's floor, which no service gathers yet.
//! - Across hosts, the `faa` counter's address must be handed to every compute process
//!   (a later issue); [`FaaTimestamps::reserve`] serves in-process clusters, and
//!   [`FaaTimestamps::at`] takes an address reserved elsewhere.

use std::collections::BTreeMap;
use std::ops::Range;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dmtx_memnode::{Control, ControlError};
use dmtx_verbs::msg::WorkerAddr;
use dmtx_verbs::{MnId, Post, RemotePtr, VerbError};

use crate::rpc::{Handled, Request, Rpc, RpcError, TAG_TIMESTAMPS};
use crate::{yield_now, CoordCtx, CoordId, Probe};

mod hybrid;
pub use hybrid::{HybridTimestamps, HYBRID_RANGE_MAX};
#[cfg(test)]
mod watermark_tests;

/// Most timestamps one request may take.
pub const RANGE_MAX: u32 = 1 << 16;

/// The CPU step the `rpc` host charges per request it grants (the handler's work).
pub const STEP_GRANT: &str = "ts.grant";

/// Bytes of an `rpc` request after its service tag: `n` as a little-endian `u32`.
const REQUEST_BYTES: usize = 4;
/// Bytes of an `rpc` reply: the first timestamp of the range, little-endian.
const REPLY_BYTES: usize = 8;

/// `rpc` requests other than a range are an op byte, and a timestamp for a resolve:
///
/// | request (after the tag) | reply |
/// | --- | --- |
/// | `n: u32` (4 bytes) | the range's first timestamp (8 bytes) |
/// | [`OP_COMMIT`] (1 byte) | the commit timestamp (8 bytes) |
/// | [`OP_WATERMARK`] (1 byte) | the watermark (8 bytes) |
/// | [`OP_RESOLVE`], `ts: u64` (9 bytes) | one byte, 1 |
///
/// A malformed request, or a commit asked of a full ledger, gets an empty reply. The op
/// codes are high so that no short or stray byte reads as one.
const OP_COMMIT: u8 = 0xc1;
/// See [`OP_COMMIT`].
const OP_WATERMARK: u8 = 0xc2;
/// See [`OP_COMMIT`].
const OP_RESOLVE: u8 = 0xc3;

/// Most commit timestamps an in-process ledger (`oracle`, the `rpc` host) holds
/// unresolved: far above one per coordinator, and a bound on what a host keeps for its
/// callers.
pub const PENDING_MAX: usize = 1 << 20;

/// Which timestamp service to run (a knob value: `oracle`, `rpc` or `faa`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum TsKind {
    /// A counter shared in process, free (Motor §4, LOTUS §5).
    #[default]
    Oracle,
    /// A counter on one CN worker thread, reached by RPC.
    Rpc,
    /// A counter on a memory node, advanced by FAA.
    Faa,
    /// Physical µs with a per-node counter, taken on the coordinator's node (LOTUS §5);
    /// built by the protocol that needs it, not a knob value.
    Hybrid,
}

impl TsKind {
    /// Every counter kind, the knob values, in the order they are listed in messages
    /// ([`TsKind::Hybrid`] is not a knob value: its grants are not one sequence).
    pub const ALL: [TsKind; 3] = [TsKind::Oracle, TsKind::Rpc, TsKind::Faa];

    /// The name used in knobs and results.
    pub fn name(self) -> &'static str {
        match self {
            TsKind::Oracle => "oracle",
            TsKind::Rpc => "rpc",
            TsKind::Faa => "faa",
            TsKind::Hybrid => "hybrid",
        }
    }
}

impl std::fmt::Display for TsKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A timestamp-service name that is none of [`TsKind::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown timestamp service `{given}`{hint}; valid values: oracle, rpc, faa")]
pub struct TsKindError {
    /// The name given.
    pub given: String,
    /// " (did you mean `x`?)" or empty.
    pub hint: String,
}

impl FromStr for TsKind {
    type Err = TsKindError;

    fn from_str(s: &str) -> Result<Self, TsKindError> {
        let given = s.trim();
        TsKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(given))
            .ok_or_else(|| TsKindError {
                given: given.to_string(),
                hint: crate::did_you_mean(given, &TsKind::ALL.map(TsKind::name)),
            })
    }
}

/// Why no timestamp could be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TsError {
    /// The `rpc` kind on a coordinator whose node has no CN↔CN messaging.
    #[error("{coord}: `rpc` timestamps need CN↔CN messaging, and this coordinator's compute node has none; give the node messaging (Cn::with_messaging) or choose `oracle` or `faa` timestamps")]
    NoMessaging {
        /// The coordinator.
        coord: CoordId,
    },
    /// The oracle's host did not answer (crashed, cut off, or not serving timestamps).
    #[error("timestamp oracle on {host}: {source}; the compute node hosting it is down or unreachable: restart it, or choose `faa` timestamps")]
    Rpc {
        /// The oracle's worker thread.
        host: WorkerAddr,
        /// What the RPC layer reported.
        source: RpcError,
    },
    /// The oracle's host answered with something that is not a range.
    #[error("timestamp oracle on {host} answered {len} bytes instead of {REPLY_BYTES}; is another service registered under tag {TAG_TIMESTAMPS}?")]
    BadReply {
        /// The oracle's worker thread.
        host: WorkerAddr,
        /// Bytes in the reply.
        len: usize,
    },
    /// The FAA on the memory-node counter failed.
    #[error("timestamp counter at {counter}: {source}")]
    Verb {
        /// The counter word.
        counter: RemotePtr,
        /// What the transport reported.
        source: VerbError,
    },
    /// The counter word could not be reserved on its memory node.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The `faa` kind's resolution ring is full: the commit timestamp `index` places
    /// lies a whole ring beyond the watermark, and the watermark did not move. That
    /// timestamp was taken and can never be resolved: the watermark stops below it.
    #[error("timestamp area at {counter}: commit timestamp #{index} is {WATERMARK_RING_SLOTS} or more past the watermark (#{watermark_index}) after {rounds} tries to advance it; a coordinator holds a commit timestamp it neither completes nor abandons, or more than {WATERMARK_RING_SLOTS} commits are in flight at once: resolve every CommitTs")]
    RingFull {
        /// The counter word.
        counter: RemotePtr,
        /// The tracked index of the commit timestamp (mod 2^24).
        index: u64,
        /// The watermark word's index.
        watermark_index: u64,
        /// Tries made.
        rounds: u32,
    },
    /// The `rpc` host refused a commit timestamp: its ledger holds [`PENDING_MAX`]
    /// unresolved ones.
    #[error("timestamp oracle on {host}: {PENDING_MAX} commit timestamps are unresolved; a coordinator holds a commit timestamp it neither completes nor abandons: resolve every CommitTs")]
    LedgerFull {
        /// The oracle's worker thread.
        host: WorkerAddr,
    },
}

/// A commit timestamp that holds the watermark back until it is given to
/// [`TimestampService::complete`] or [`TimestampService::abandon`] (module doc,
/// "Completed-commit watermark").
#[must_use = "an unresolved commit timestamp holds the watermark back for ever: complete or abandon it"]
#[derive(Debug, PartialEq, Eq)]
pub struct CommitTs {
    ts: u64,
    /// The `faa` kind's tracked index (mod 2^24); 0 for the others.
    index: u64,
}

impl CommitTs {
    /// The timestamp (what the transaction installs as its version).
    pub fn get(&self) -> u64 {
        self.ts
    }
}

/// A source of timestamps for coordinators. See the module doc for the kinds, their
/// costs and the invariants every implementation keeps.
pub trait TimestampService {
    /// Which kind this is.
    fn kind(&self) -> TsKind;

    /// Prepare for coordinator `ctx` (once per coordinator, at setup, on its thread);
    /// nothing to do unless the kind hosts something (the `rpc` handler).
    fn attach(&self, _ctx: &CoordCtx) -> Result<(), TsError> {
        Ok(())
    }

    /// `n` consecutive timestamps (`1 <= n <= RANGE_MAX`) in one request; use them at
    /// once (invariant 2).
    async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError>;

    /// One timestamp (`T_start`, `T_commit`).
    async fn next(&self, ctx: &mut CoordCtx) -> Result<u64, TsError> {
        Ok(self.next_range(ctx, 1).await?.start)
    }

    /// A commit timestamp the watermark waits for (invariant 3): from the same sequence
    /// as [`TimestampService::next`], resolved later by `complete` or `abandon`.
    async fn next_commit(&self, ctx: &mut CoordCtx) -> Result<CommitTs, TsError>;

    /// Every write of `ts`'s transaction is installed: the watermark may pass it.
    async fn complete(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError>;

    /// `ts`'s transaction aborted and installs nothing: the watermark may pass it (the
    /// watermark treats it as `complete` does).
    async fn abandon(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError> {
        self.complete(ctx, ts).await
    }

    /// The completed-commit watermark: every commit timestamp `<=` it that was handed
    /// out is resolved, and none `<=` it will be handed out (invariants 3–4). A snapshot
    /// read at it misses no commit.
    async fn watermark(&self, ctx: &mut CoordCtx) -> Result<u64, TsError>;
}

/// A counter with its ledger of unresolved commit timestamps (the `oracle` kind's, and
/// the `rpc` host's).
#[derive(Debug, Default)]
struct Counter {
    /// The last timestamp granted.
    last: AtomicU64,
    /// Invariant 3: every commit timestamp granted from `last` and not yet resolved, with
    /// the (caller, request id) it was granted to over RPC, so a retried request gets the
    /// same one. Inserted under this lock in the same critical section that advanced
    /// `last`, and the watermark is computed under it.
    pending: Mutex<BTreeMap<u64, Option<(WorkerAddr, u64)>>>,
}

impl Counter {
    fn pending(&self) -> MutexGuard<'_, BTreeMap<u64, Option<(WorkerAddr, u64)>>> {
        // A panic elsewhere while holding it cannot leave the map half-updated: every
        // update is one call.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A commit timestamp for `origin`; the same one again for a retried request of an
    /// origin that holds one. `None` when [`PENDING_MAX`] are unresolved.
    fn grant_commit(&self, origin: Option<(WorkerAddr, u64)>, retry: bool) -> Option<u64> {
        let mut pending = self.pending();
        if retry && origin.is_some() {
            if let Some((&ts, _)) = pending.iter().find(|(_, o)| **o == origin) {
                return Some(ts);
            }
        }
        if pending.len() >= PENDING_MAX {
            return None;
        }
        let ts = grant(&self.last, 1).start;
        let fresh = pending.insert(ts, origin).is_none();
        assert!(fresh, "commit timestamp {ts} granted twice");
        Some(ts)
    }

    /// `ts` is resolved. Idempotent, and a timestamp never granted is ignored: a resolve
    /// may come twice over RPC, and the host never trusts a peer.
    fn resolve(&self, ts: u64) {
        self.pending().remove(&ts);
    }

    /// Invariants 3–4: below the smallest unresolved commit timestamp, and at most the
    /// last grant (every later grant exceeds it).
    fn watermark(&self) -> u64 {
        let pending = self.pending();
        match pending.keys().next() {
            Some(&first) => first - 1,
            // Under the lock, so no commit timestamp is between its grant and its insert.
            None => self.last.load(Ordering::Relaxed),
        }
    }
}

/// Advance `counter` by `n` and return the range granted (invariant 1).
#[inline]
fn grant(counter: &AtomicU64, n: u32) -> Range<u64> {
    assert!(
        (1..=RANGE_MAX).contains(&n),
        "{n} timestamps asked; 1..={RANGE_MAX} allowed"
    );
    // A read-modify-write always reads the latest value of its word, so Relaxed keeps
    // grants unique and in real-time order; no other memory is published through it.
    let old = counter.fetch_add(u64::from(n), Ordering::Relaxed);
    range_after(old, n)
}

/// The range after a counter value `old` that was advanced by `n`.
#[inline]
fn range_after(old: u64, n: u32) -> Range<u64> {
    let end = old
        .checked_add(u64::from(n) + 1)
        .expect("the timestamp counter wrapped around u64");
    old + 1..end
}

/// The free in-process oracle: one counter shared by every coordinator of the process.
#[derive(Clone, Debug, Default)]
pub struct OracleTimestamps {
    counter: Arc<Counter>,
}

impl OracleTimestamps {
    /// An oracle whose first timestamp is 1.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TimestampService for OracleTimestamps {
    fn kind(&self) -> TsKind {
        TsKind::Oracle
    }

    async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError> {
        // No await: the oracle is assumed free, so it does not even yield the thread.
        ctx.txn_counters.ts_requests += 1;
        Ok(grant(&self.counter.last, n))
    }

    async fn next_commit(&self, ctx: &mut CoordCtx) -> Result<CommitTs, TsError> {
        ctx.txn_counters.ts_requests += 1;
        let ts = self
            .counter
            .grant_commit(None, false)
            .unwrap_or_else(|| panic!("{PENDING_MAX} commit timestamps unresolved: a CommitTs was dropped unresolved"));
        Ok(CommitTs { ts, index: 0 })
    }

    async fn complete(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError> {
        ctx.txn_counters.ts_requests += 1;
        self.counter.resolve(ts.ts);
        Ok(())
    }

    async fn watermark(&self, ctx: &mut CoordCtx) -> Result<u64, TsError> {
        ctx.txn_counters.ts_requests += 1;
        Ok(self.counter.watermark())
    }
}

/// The oracle on one CN worker thread (the host), reached by the other coordinators with
/// a CN↔CN RPC under [`TAG_TIMESTAMPS`]; coordinators of the host thread take from the
/// counter directly.
///
/// The counter is touched only on the host thread (by its handler and its own
/// coordinators); it is atomic only so that one `RpcTimestamps` can be shared by every
/// thread's protocol instance. In a multi-host run each process has a copy, and only
/// the host's copy is ever advanced.
#[derive(Clone, Debug)]
pub struct RpcTimestamps {
    host: WorkerAddr,
    counter: Arc<Counter>,
}

impl RpcTimestamps {
    /// Where the oracle runs unless told otherwise.
    pub const DEFAULT_HOST: WorkerAddr = WorkerAddr::new(0, 0);

    /// An oracle hosted on worker `host`, first timestamp 1.
    pub fn new(host: WorkerAddr) -> Self {
        Self {
            host,
            counter: Arc::new(Counter::default()),
        }
    }

    /// The host worker thread.
    pub fn host(&self) -> WorkerAddr {
        self.host
    }

    fn is_host(&self, id: CoordId) -> bool {
        id.cn == self.host.cn && id.thread == self.host.thread
    }

    /// Serve timestamps on `rpc` (the host thread's endpoint), charging [`STEP_GRANT`] to
    /// `probe` per request. [`TimestampService::attach`] does this for a coordinator of
    /// the host thread; call it directly on a host that runs no coordinator.
    pub fn serve_on(&self, rpc: &Rpc, probe: Option<Rc<dyn Probe>>) {
        assert_eq!(rpc.addr(), self.host, "the oracle serves on its host thread only");
        let counter = Arc::clone(&self.counter);
        rpc.add_service(TAG_TIMESTAMPS, move |_: &Rpc, req: Request<'_>, out: &mut Vec<u8>| {
            if let Some(p) = &probe {
                p.step(STEP_GRANT, 1);
            }
            // Any range is fresh (invariant 1), so a retried request needs no dedup: the
            // caller keeps whichever reply comes first and the other is a stray.
            // A malformed request gets an empty reply, which its caller reports.
            if let Ok(n @ 1..=RANGE_MAX) = <[u8; REQUEST_BYTES]>::try_from(req.payload).map(u32::from_le_bytes) {
                out.extend_from_slice(&grant(&counter.last, n).start.to_le_bytes());
                return Handled::Reply;
            }
            match req.payload {
                // A commit timestamp is tracked, so a retry must get the one its first
                // copy got: messages of a pair are FIFO, so a copy always reaches the
                // host before the caller's resolve of it, while it is still pending.
                [OP_COMMIT] => {
                    if let Some(ts) = counter.grant_commit(Some((req.from, req.id)), req.retry) {
                        out.extend_from_slice(&ts.to_le_bytes());
                    }
                }
                [OP_WATERMARK] => out.extend_from_slice(&counter.watermark().to_le_bytes()),
                [OP_RESOLVE, ts @ ..] => {
                    if let Ok(ts) = <[u8; 8]>::try_from(ts) {
                        counter.resolve(u64::from_le_bytes(ts));
                        out.push(1);
                    }
                }
                _ => {}
            }
            Handled::Reply
        });
    }
}

impl Default for RpcTimestamps {
    fn default() -> Self {
        Self::new(Self::DEFAULT_HOST)
    }
}

impl TimestampService for RpcTimestamps {
    fn kind(&self) -> TsKind {
        TsKind::Rpc
    }

    fn attach(&self, ctx: &CoordCtx) -> Result<(), TsError> {
        let Some(rpc) = &ctx.rpc else {
            return Err(TsError::NoMessaging { coord: ctx.id });
        };
        if self.is_host(ctx.id) {
            self.serve_on(rpc, ctx.probe.clone());
        }
        Ok(())
    }

    async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError> {
        assert!(
            (1..=RANGE_MAX).contains(&n),
            "{n} timestamps asked; 1..={RANGE_MAX} allowed"
        );
        ctx.txn_counters.ts_requests += 1;
        if self.is_host(ctx.id) {
            // On the host thread the counter is local memory: no message, as a real
            // deployment's host would do.
            return Ok(grant(&self.counter.last, n));
        }
        let Some(rpc) = ctx.rpc.clone() else {
            return Err(TsError::NoMessaging { coord: ctx.id });
        };
        ctx.txn_counters.ts_rtts += 1;
        let mut req = [0u8; 1 + REQUEST_BYTES];
        req[0] = TAG_TIMESTAMPS;
        req[1..].copy_from_slice(&n.to_le_bytes());
        let host = self.host;
        let reply = rpc
            .call(host, &req)
            .await
            .map_err(|source| TsError::Rpc { host, source })?;
        let first = <[u8; REPLY_BYTES]>::try_from(reply.as_slice())
            .map(u64::from_le_bytes)
            .map_err(|_| TsError::BadReply { host, len: reply.len() })?;
        match first.checked_add(u64::from(n)) {
            Some(end) if first > 0 => Ok(first..end),
            _ => Err(TsError::BadReply { host, len: reply.len() }),
        }
    }

    async fn next_commit(&self, ctx: &mut CoordCtx) -> Result<CommitTs, TsError> {
        ctx.txn_counters.ts_requests += 1;
        let host = self.host;
        if self.is_host(ctx.id) {
            let ts = self
                .counter
                .grant_commit(None, false)
                .ok_or(TsError::LedgerFull { host })?;
            return Ok(CommitTs { ts, index: 0 });
        }
        let reply = self.call_host(ctx, &[TAG_TIMESTAMPS, OP_COMMIT]).await?;
        match <[u8; 8]>::try_from(reply.as_slice()).map(u64::from_le_bytes) {
            Ok(ts) if ts > 0 => Ok(CommitTs { ts, index: 0 }),
            _ if reply.is_empty() => Err(TsError::LedgerFull { host }),
            _ => Err(TsError::BadReply { host, len: reply.len() }),
        }
    }

    async fn complete(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError> {
        ctx.txn_counters.ts_requests += 1;
        if self.is_host(ctx.id) {
            self.counter.resolve(ts.ts);
            return Ok(());
        }
        let mut req = [0u8; 10];
        req[..2].copy_from_slice(&[TAG_TIMESTAMPS, OP_RESOLVE]);
        req[2..].copy_from_slice(&ts.ts.to_le_bytes());
        let reply = self.call_host(ctx, &req).await?;
        match reply.as_slice() {
            [1] => Ok(()),
            _ => Err(TsError::BadReply {
                host: self.host,
                len: reply.len(),
            }),
        }
    }

    async fn watermark(&self, ctx: &mut CoordCtx) -> Result<u64, TsError> {
        ctx.txn_counters.ts_requests += 1;
        if self.is_host(ctx.id) {
            return Ok(self.counter.watermark());
        }
        let reply = self.call_host(ctx, &[TAG_TIMESTAMPS, OP_WATERMARK]).await?;
        <[u8; 8]>::try_from(reply.as_slice())
            .map(u64::from_le_bytes)
            .map_err(|_| TsError::BadReply {
                host: self.host,
                len: reply.len(),
            })
    }
}

impl RpcTimestamps {
    /// One round trip to the host, counted in `ts_rtts`.
    async fn call_host(&self, ctx: &mut CoordCtx, req: &[u8]) -> Result<Vec<u8>, TsError> {
        let Some(rpc) = ctx.rpc.clone() else {
            return Err(TsError::NoMessaging { coord: ctx.id });
        };
        ctx.txn_counters.ts_rtts += 1;
        let host = self.host;
        rpc.call(host, req)
            .await
            .map_err(|source| TsError::Rpc { host, source })
    }
}

/// Slots of the `faa` kind's resolution ring: how far (in commit timestamps) the
/// tracked grants may run ahead of the published watermark. Far above the number of
/// coordinators, each of which holds at most one commit timestamp at a time.
pub const WATERMARK_RING_SLOTS: u64 = 4096;

/// Bits of the `faa` counter word that count timestamps; the bits above count commit
/// timestamps (tracked indices, mod 2^24), so one FAA advances both.
const TS_BITS: u32 = 40;
const TS_MASK: u64 = (1 << TS_BITS) - 1;
const INDEX_MASK: u64 = (1 << (64 - TS_BITS)) - 1;
/// Ring slots one watermark call reads at most (4 KiB).
const SCAN_MAX: u64 = 512;
/// Tries a commit grant makes to move the watermark when its slot is a ring ahead.
const RING_ROUNDS_MAX: u32 = 1_000;

/// The counter as an 8-byte word on a memory node, advanced by one FAA per request;
/// with the completed-commit watermark beside it.
///
/// The area (reserved zeroed by [`FaaTimestamps::reserve`], [`FaaTimestamps::AREA_BYTES`]):
///
/// ```text
/// +0   watermark word   index: 24 | ts: 40   every commit index < `index` is resolved,
///                                            and `ts` is a watermark (published by CAS)
/// +8   counter word     index: 24 | ts: 40   FAA +n (plain grants), FAA +(1<<40)+1 (commit)
/// +16  ring             WATERMARK_RING_SLOTS × 8 bytes: slot[i % SLOTS] = i << 40 | ts
///                                            once commit index i is resolved
/// ```
///
/// Invariants (numbered after the module's):
///
/// 5. A commit grant's FAA gives it both its timestamp and its index, so index order is
///    timestamp order.
/// 6. Commit index `i` writes its slot only when the watermark word's index exceeds
///    `i − SLOTS` (the grant checks it, and the word only grows): the slot's previous
///    tenant was consumed, so no resolution is ever overwritten unread.
/// 7. The watermark word moves only by CAS from the value its writer read, and to an
///    index and timestamp no smaller: it never goes back. A reader reads it before the
///    counter word (lower address first in one READ), so its index never exceeds the
///    counter's.
///
/// Plain grants cost what they did (one FAA); timestamps are limited to 2^40 (about
/// 10^12).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FaaTimestamps {
    area: RemotePtr,
}

impl FaaTimestamps {
    /// Bytes of the area: the watermark word, the counter word and the ring.
    pub const AREA_BYTES: u64 = 16 + 8 * WATERMARK_RING_SLOTS;

    /// Reserve the zeroed, 8-byte-aligned area on `mn` (setup, once per cluster).
    pub fn reserve(control: &dyn Control, mn: MnId) -> Result<Self, TsError> {
        let offset = control.alloc(mn, Self::AREA_BYTES, 8)?;
        control.load(mn, offset, &vec![0u8; Self::AREA_BYTES as usize])?;
        Ok(Self::at(RemotePtr::new(mn, offset)))
    }

    /// Use the area at `area` (reserved and zeroed by [`FaaTimestamps::reserve`] in some
    /// process).
    pub fn at(area: RemotePtr) -> Self {
        assert_eq!(area.offset % 8, 0, "{area}: an FAA needs 8-byte-aligned words");
        Self { area }
    }

    /// The counter word.
    pub fn counter(&self) -> RemotePtr {
        RemotePtr::new(self.area.mn, self.area.offset + 8)
    }

    /// The watermark word.
    fn watermark_word(&self) -> RemotePtr {
        self.area
    }

    /// The ring slot of commit index `index`.
    fn slot(&self, index: u64) -> RemotePtr {
        RemotePtr::new(self.area.mn, self.area.offset + 16 + 8 * (index % WATERMARK_RING_SLOTS))
    }

    /// One round trip for the timestamp service, counted in `ts_rtts`.
    async fn round_trip(&self, ctx: &mut CoordCtx, post: &mut Post) -> Result<(), TsError> {
        ctx.txn_counters.ts_rtts += 1;
        ctx.post_for_timestamp(post).await.map_err(|source| TsError::Verb {
            counter: self.counter(),
            source,
        })
    }

    /// Read the words and the ring's resolved run after the watermark word's index,
    /// publish the watermark if it moved; returns it and the watermark word's index.
    async fn advance(&self, ctx: &mut CoordCtx) -> Result<(u64, u64), TsError> {
        let mut post = Post::new();
        let words = post.read(self.watermark_word(), 16);
        self.round_trip(ctx, &mut post).await?;
        let bytes = post.bytes(words);
        let w_word = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let c_word = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        let (w_index, w_ts) = (w_word >> TS_BITS, w_word & TS_MASK);
        let (c_index, c_ts) = (c_word >> TS_BITS, c_word & TS_MASK);
        // Invariant 7: the watermark word was read first, so it is not ahead.
        let unconsumed = c_index.wrapping_sub(w_index) & INDEX_MASK;
        assert!(
            unconsumed < 1 << 23,
            "{}: watermark index {w_index} ahead of the counter's {c_index}",
            self.counter()
        );
        let mut index = w_index;
        let mut ts = w_ts;
        let scan = unconsumed.min(SCAN_MAX);
        if scan > 0 {
            // The run [w_index, w_index + scan) of slots, in one or two READs (the ring wraps).
            let first = w_index % WATERMARK_RING_SLOTS;
            let head = scan.min(WATERMARK_RING_SLOTS - first);
            let mut post = Post::new();
            let a = post.read(self.slot(w_index), 8 * head as usize);
            let b = (head < scan).then(|| post.read(self.slot(0), 8 * (scan - head) as usize));
            self.round_trip(ctx, &mut post).await?;
            let tail = b.map_or(&[][..], |b| post.bytes(b));
            for word in post.bytes(a).chunks_exact(8).chain(tail.chunks_exact(8)) {
                let slot = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                // Invariant 3: a slot counts only with this index's tag.
                if slot >> TS_BITS != index & INDEX_MASK || slot & TS_MASK == 0 {
                    break;
                }
                ts = ts.max(slot & TS_MASK);
                index = (index + 1) & INDEX_MASK;
            }
        }
        // Every commit index the counter had handed out is resolved: every timestamp up to
        // the counter's is covered (invariant 4: later grants exceed it).
        if (index.wrapping_sub(w_index) & INDEX_MASK) == unconsumed {
            ts = ts.max(c_ts);
        }
        if index != w_index || ts != w_ts {
            let mut post = Post::new();
            let swap = (index << TS_BITS) | ts;
            post.cas(self.watermark_word(), w_word, swap);
            // A failed CAS means another caller published first; what this one computed
            // is still a watermark (invariant 7 keeps the word from going back).
            self.round_trip(ctx, &mut post).await?;
        }
        Ok((ts, index))
    }
}

impl TimestampService for FaaTimestamps {
    fn kind(&self) -> TsKind {
        TsKind::Faa
    }

    async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError> {
        assert!(
            (1..=RANGE_MAX).contains(&n),
            "{n} timestamps asked; 1..={RANGE_MAX} allowed"
        );
        ctx.txn_counters.ts_requests += 1;
        let mut post = Post::new();
        let old = post.faa(self.counter(), u64::from(n));
        self.round_trip(ctx, &mut post).await?;
        let old = post.old(old) & TS_MASK;
        assert!(old + u64::from(n) < TS_MASK, "the `faa` timestamp counter reached 2^40");
        Ok(range_after(old, n))
    }

    async fn next_commit(&self, ctx: &mut CoordCtx) -> Result<CommitTs, TsError> {
        ctx.txn_counters.ts_requests += 1;
        let mut post = Post::new();
        let old = post.faa(self.counter(), (1 << TS_BITS) + 1);
        let w = post.read(self.watermark_word(), 8);
        self.round_trip(ctx, &mut post).await?;
        let old = post.old(old);
        let (index, ts) = (old >> TS_BITS, (old & TS_MASK) + 1);
        assert!(ts < TS_MASK, "the `faa` timestamp counter reached 2^40");
        let mut w_index = u64::from_le_bytes(post.bytes(w).try_into().expect("8 bytes")) >> TS_BITS;
        // Invariant 6: wait, moving the watermark, until this index's slot is free.
        let mut rounds = 0;
        while index.wrapping_sub(w_index) & INDEX_MASK >= WATERMARK_RING_SLOTS {
            if rounds == RING_ROUNDS_MAX {
                return Err(TsError::RingFull {
                    counter: self.counter(),
                    index,
                    watermark_index: w_index,
                    rounds,
                });
            }
            rounds += 1;
            yield_now().await;
            w_index = self.advance(ctx).await?.1;
        }
        Ok(CommitTs { ts, index })
    }

    async fn complete(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError> {
        ctx.txn_counters.ts_requests += 1;
        let mut post = Post::new();
        post.write(self.slot(ts.index), &((ts.index << TS_BITS) | ts.ts).to_le_bytes());
        self.round_trip(ctx, &mut post).await
    }

    async fn watermark(&self, ctx: &mut CoordCtx) -> Result<u64, TsError> {
        ctx.txn_counters.ts_requests += 1;
        Ok(self.advance(ctx).await?.0)
    }
}

/// One of the three kinds, chosen at run time (what a protocol holds).
#[derive(Clone, Debug)]
pub enum Timestamps {
    /// See [`OracleTimestamps`].
    Oracle(OracleTimestamps),
    /// See [`RpcTimestamps`].
    Rpc(RpcTimestamps),
    /// See [`FaaTimestamps`].
    Faa(FaaTimestamps),
    /// See [`HybridTimestamps`].
    Hybrid(HybridTimestamps),
}

impl Timestamps {
    /// The service of `kind` with its defaults: the `rpc` oracle on
    /// [`RpcTimestamps::DEFAULT_HOST`], the `faa` counter reserved on memory node 0
    /// through `control`. Call once per cluster and share the result.
    pub fn setup(kind: TsKind, control: &dyn Control) -> Result<Self, TsError> {
        Ok(match kind {
            TsKind::Oracle => Timestamps::Oracle(OracleTimestamps::new()),
            TsKind::Rpc => Timestamps::Rpc(RpcTimestamps::default()),
            TsKind::Faa => Timestamps::Faa(FaaTimestamps::reserve(control, MnId(0))?),
            TsKind::Hybrid => Timestamps::Hybrid(HybridTimestamps::new()),
        })
    }
}

impl TimestampService for Timestamps {
    fn kind(&self) -> TsKind {
        match self {
            Timestamps::Oracle(t) => t.kind(),
            Timestamps::Rpc(t) => t.kind(),
            Timestamps::Faa(t) => t.kind(),
            Timestamps::Hybrid(t) => t.kind(),
        }
    }

    fn attach(&self, ctx: &CoordCtx) -> Result<(), TsError> {
        match self {
            Timestamps::Oracle(t) => t.attach(ctx),
            Timestamps::Rpc(t) => t.attach(ctx),
            Timestamps::Faa(t) => t.attach(ctx),
            Timestamps::Hybrid(t) => t.attach(ctx),
        }
    }

    async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError> {
        match self {
            Timestamps::Oracle(t) => t.next_range(ctx, n).await,
            Timestamps::Rpc(t) => t.next_range(ctx, n).await,
            Timestamps::Faa(t) => t.next_range(ctx, n).await,
            Timestamps::Hybrid(t) => t.next_range(ctx, n).await,
        }
    }

    async fn next_commit(&self, ctx: &mut CoordCtx) -> Result<CommitTs, TsError> {
        match self {
            Timestamps::Oracle(t) => t.next_commit(ctx).await,
            Timestamps::Rpc(t) => t.next_commit(ctx).await,
            Timestamps::Faa(t) => t.next_commit(ctx).await,
            Timestamps::Hybrid(t) => t.next_commit(ctx).await,
        }
    }

    async fn complete(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError> {
        match self {
            Timestamps::Oracle(t) => t.complete(ctx, ts).await,
            Timestamps::Rpc(t) => t.complete(ctx, ts).await,
            Timestamps::Faa(t) => t.complete(ctx, ts).await,
            Timestamps::Hybrid(t) => t.complete(ctx, ts).await,
        }
    }

    async fn watermark(&self, ctx: &mut CoordCtx) -> Result<u64, TsError> {
        match self {
            Timestamps::Oracle(t) => t.watermark(ctx).await,
            Timestamps::Rpc(t) => t.watermark(ctx).await,
            Timestamps::Faa(t) => t.watermark(ctx).await,
            Timestamps::Hybrid(t) => t.watermark(ctx).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Barrier;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use dmtx_memnode::LocalCluster;
    use dmtx_store::Catalog;
    use dmtx_verbs::msg::{MemMsgNet, MsgFabric};
    use dmtx_verbs::{OpKind, PostCounters, Transport};

    use super::*;
    use crate::rpc::{Progress, RpcConfig};
    use crate::{yield_now, AddrCache, Clock, Cn, RealClock, SharedAddrCache};

    /// A bare context for coordinator `id` on `transport`, with `rpc` if given.
    fn ctx_of(id: CoordId, transport: Rc<dyn Transport>, rpc: Option<Rc<Rpc>>) -> CoordCtx {
        let mut ctx = CoordCtx::new(
            id,
            transport,
            Arc::new(RealClock::new()),
            Arc::new(Catalog::default()),
            Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
        );
        ctx.rpc = rpc;
        ctx
    }

    fn coord(cn: u16, thread: u16, coroutine: u16) -> CoordId {
        CoordId { cn, thread, coroutine }
    }

    /// Goal: each kind parses from its name (any case), and a wrong name is refused with
    /// every valid value and a suggestion.
    #[test]
    fn ts_kind_parses_and_names_the_valid_values() {
        for k in TsKind::ALL {
            assert_eq!(k.name().parse::<TsKind>(), Ok(k));
            assert_eq!(k.name().to_uppercase().parse::<TsKind>(), Ok(k));
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(
            TsKind::default(),
            TsKind::Oracle,
            "Motor and LOTUS assume the free oracle"
        );
        let e = "fa".parse::<TsKind>().unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown timestamp service `fa` (did you mean `faa`?); valid values: oracle, rpc, faa"
        );
        let e = "lamport".parse::<TsKind>().unwrap_err().to_string();
        assert!(
            e.ends_with("valid values: oracle, rpc, faa") && !e.contains("did you mean"),
            "{e}"
        );
    }

    const CNS: u16 = 2;
    const THREADS: u16 = 2;
    const COROS: u16 = 3;
    /// Requests per coordinator: half single timestamps, half ranges of [`RANGE_N`].
    const REQS: u64 = 60;
    const RANGE_N: u32 = 3;

    /// What one coordinator got: its id, its timestamps in order, its counters.
    type Taken = (CoordId, Vec<u64>, PostCounters, u64);

    /// Every coordinator of `CNS × THREADS` worker threads (one OS thread each, their own
    /// executors and mem mailboxes) takes [`REQS`] requests' worth of timestamps.
    fn take_on_threads(kind: TsKind) -> (Vec<Taken>, Arc<LocalCluster>, Timestamps) {
        let cluster = Arc::new(LocalCluster::new(1, 1 << 16));
        let ts = Timestamps::setup(kind, cluster.as_ref()).unwrap();
        assert_eq!(ts.kind(), kind);
        let net = MemMsgNet::new(CNS, THREADS);
        let cns: Vec<Cn> = (0..CNS)
            .map(|id| {
                Cn::connect(
                    id,
                    Arc::new(cluster.fabric().clone()),
                    Arc::clone(&cluster) as Arc<dyn Control>,
                    Arc::new(RealClock::new()),
                )
                .unwrap()
                // No retries: a loaded host must not turn a slow reply into a second
                // grant (the test counts every timestamp).
                .with_messaging(
                    Arc::new(net.fabric(id)),
                    RpcConfig {
                        timeout: Duration::from_secs(30),
                        retries: 0,
                    },
                )
            })
            .collect();
        let workers = (CNS * THREADS) as usize;
        let coords_total = workers * COROS as usize;
        let attached = Barrier::new(workers);
        let done = AtomicUsize::new(0);
        let out = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for cn in &cns {
                for t in 0..THREADS {
                    let (ts, attached, done, out) = (&ts, &attached, &done, &out);
                    s.spawn(move || {
                        let w = cn.worker(t).unwrap();
                        let mut ctxs: Vec<CoordCtx> = (0..COROS).map(|k| w.ctx(k)).collect();
                        for c in &ctxs {
                            ts.attach(c).unwrap();
                        }
                        // No request leaves before the host serves.
                        attached.wait();
                        let mut ex = w.executor();
                        for ctx in ctxs.iter_mut() {
                            ex.spawn(async move {
                                let mut got = Vec::new();
                                for i in 0..REQS {
                                    if i % 2 == 0 {
                                        got.push(ts.next(ctx).await.unwrap());
                                    } else {
                                        got.extend(ts.next_range(ctx, RANGE_N).await.unwrap());
                                    }
                                    yield_now().await;
                                }
                                let faa = ctx.per_mn[0].ops[OpKind::Faa as usize];
                                out.lock().unwrap().push((ctx.id, got, ctx.txn_counters, faa));
                                done.fetch_add(1, Ordering::SeqCst);
                            });
                        }
                        // Keep serving the other threads' calls until every coordinator is done.
                        ex.spawn(async move {
                            while done.load(Ordering::SeqCst) < coords_total {
                                yield_now().await;
                            }
                        });
                        ex.run(w.transport().as_ref());
                    });
                }
            }
        });
        let taken = out.into_inner().unwrap();
        assert_eq!(taken.len(), coords_total);
        (taken, cluster, ts)
    }

    /// Goal: for every kind, coordinators on several threads of several CNs get
    /// timestamps that are never 0, strictly increase per coordinator and are unique
    /// across the cluster (invariants 1–2), with none skipped when nothing is retried; a
    /// request is counted in `ts_requests`, a waited one in `ts_rtts`, and never in the
    /// protocol's `rtts` or ops.
    #[test]
    fn every_kind_grants_unique_increasing_timestamps_across_threads() {
        let per_coord = REQS / 2 + REQS / 2 * RANGE_N as u64;
        for kind in TsKind::ALL {
            let (taken, cluster, ts) = take_on_threads(kind);
            let mut all = BTreeSet::new();
            for (id, got, counters, faa) in &taken {
                assert_eq!(got.len() as u64, per_coord, "{kind} {id}");
                assert!(got[0] > 0, "{kind} {id}: timestamp 0");
                assert!(
                    got.windows(2).all(|w| w[0] < w[1]),
                    "{kind} {id}: not increasing: {got:?}"
                );
                for t in got {
                    assert!(all.insert(*t), "{kind} {id}: timestamp {t} granted twice");
                }
                let waited = match kind {
                    TsKind::Oracle | TsKind::Hybrid => 0,
                    TsKind::Rpc if id.cn == 0 && id.thread == 0 => 0,
                    TsKind::Rpc | TsKind::Faa => REQS,
                };
                assert_eq!((counters.ts_requests, counters.ts_rtts), (REQS, waited), "{kind} {id}");
                assert_eq!((counters.rtts, counters.ops_total()), (0, 0), "{kind} {id}");
                assert_eq!(*faa, if kind == TsKind::Faa { REQS } else { 0 }, "MN load of {kind}");
            }
            let total = per_coord * taken.len() as u64;
            assert_eq!(all.len() as u64, total);
            assert_eq!(
                (all.first().copied(), all.last().copied()),
                (Some(1), Some(total)),
                "{kind}: no retries, so no gaps"
            );
            if let Timestamps::Faa(f) = ts {
                let node = cluster.node(f.counter().mn).unwrap();
                assert_eq!(node.region().load(f.counter().offset).unwrap(), total);
            }
        }
    }

    /// Replies with its payload reversed.
    fn reverser(_: &Rpc, req: Request<'_>, out: &mut Vec<u8>) -> Handled {
        out.extend(req.payload.iter().rev());
        Handled::Reply
    }

    use crate::rpc::tests::run_all;

    /// Goal: the oracle's host thread serves another tagged service too (a lock service
    /// later): each request reaches its own service with the tag stripped, whichever was
    /// added first, and a request under an unknown tag is dropped and counted.
    #[test]
    fn the_oracle_shares_its_host_thread_with_other_services() {
        const TAG_OTHER: u8 = 9;
        let net = MemMsgNet::new(2, 1);
        let config = RpcConfig {
            timeout: Duration::from_millis(20),
            retries: 0,
        };
        let rpc_of = |cn| {
            Rc::new(Rpc::new(
                net.fabric(cn).mailbox(0).unwrap(),
                Arc::new(RealClock::new()),
                config,
            ))
        };
        let (host, caller) = (rpc_of(0), rpc_of(1));
        host.add_service(TAG_OTHER, reverser);
        let ts = RpcTimestamps::default();
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let host_ctx = ctx_of(coord(0, 0, 0), Rc::new(fabric.transport()), Some(Rc::clone(&host)));
        ts.attach(&host_ctx).unwrap();
        let mut ctx = ctx_of(coord(1, 0, 0), Rc::new(fabric.transport()), Some(Rc::clone(&caller)));
        let got = Rc::new(RefCell::new(Vec::new()));
        let (g, c, ts2) = (Rc::clone(&got), Rc::clone(&caller), ts.clone());
        let task = Box::pin(async move {
            let a = ts2.next(&mut ctx).await.unwrap();
            let other = c.call(ts2.host(), &[TAG_OTHER, 1, 2, 3]).await.unwrap();
            assert_eq!(other, [3, 2, 1], "tag stripped, the rest reversed");
            let b = ts2.next_range(&mut ctx, 4).await.unwrap();
            let unknown = c.call(ts2.host(), &[200, 0]).await;
            assert!(matches!(unknown, Err(RpcError::Timeout { .. })), "{unknown:?}");
            g.borrow_mut().extend([a, b.start, b.end]);
        });
        run_all(&[Rc::clone(&host), Rc::clone(&caller)], vec![task]);
        assert_eq!(*got.borrow(), [1, 2, 6]);
        assert_eq!(host.stats().unhandled, 1);
        // Added after the oracle, another service leaves it in place.
        host.add_service(TAG_OTHER + 1, reverser);
        let mut host_ctx = host_ctx;
        let local = crate::block_on(ts.next(&mut host_ctx)).unwrap();
        assert_eq!(local, 6, "the host thread takes from the same counter, locally");
        assert_eq!(host_ctx.txn_counters.ts_rtts, 0);
    }

    /// Goal: a thread cannot mix a plain handler (untagged requests) with tagged services.
    #[test]
    #[should_panic(expected = "plain handler")]
    fn add_service_refuses_a_thread_with_a_plain_handler() {
        let net = MemMsgNet::new(1, 1);
        let rpc = Rpc::new(
            net.fabric(0).mailbox(0).unwrap(),
            Arc::new(RealClock::new()),
            RpcConfig::default(),
        );
        rpc.set_handler(reverser);
        RpcTimestamps::default().serve_on(&rpc, None);
    }

    /// Goal: the `rpc` kind refuses, at attach, a coordinator whose node has no
    /// messaging, with a message that names the fix; the others need none.
    #[test]
    fn rpc_timestamps_need_messaging() {
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let mut ctx = ctx_of(coord(1, 0, 2), Rc::new(fabric.transport()), None);
        let ts = RpcTimestamps::default();
        let e = ts.attach(&ctx).unwrap_err();
        assert_eq!(e, TsError::NoMessaging { coord: ctx.id });
        assert!(e.to_string().contains("Cn::with_messaging"), "{e}");
        assert_eq!(crate::block_on(ts.next(&mut ctx)), Err(e));
        let oracle = OracleTimestamps::new();
        oracle.attach(&ctx).unwrap();
        assert_eq!(crate::block_on(oracle.next(&mut ctx)), Ok(1));
    }

    /// A clock the test moves by hand.
    #[derive(Default)]
    struct HandClock(AtomicU64);

    impl Clock for HandClock {
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Goal: a request the RPC layer delivers twice (its first attempt timed out while
    /// the host was busy) is granted twice; the caller keeps one range, the other reply
    /// is a stray, and no timestamp is ever handed out twice (invariant 1).
    #[test]
    fn a_retried_request_burns_a_range_but_never_repeats_one() {
        let net = MemMsgNet::new(2, 1);
        let clock = Arc::new(HandClock::default());
        let config = RpcConfig {
            timeout: Duration::from_micros(10),
            retries: 1,
        };
        let rpc_of = |cn| Rc::new(Rpc::new(net.fabric(cn).mailbox(0).unwrap(), clock.clone(), config));
        let (host, caller) = (rpc_of(0), rpc_of(1));
        let ts = RpcTimestamps::default();
        ts.serve_on(&host, None);
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let mut ctx = ctx_of(coord(1, 0, 0), Rc::new(fabric.transport()), Some(Rc::clone(&caller)));
        let mut cx = Context::from_waker(Waker::noop());
        let ranges = {
            let mut fut = pin!(ts.next_range(&mut ctx, 2));
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            caller.progress(); // the request leaves; the host does not look yet
            clock.0.store(20_000, Ordering::SeqCst);
            caller.progress(); // past the deadline: sent again, same id
            host.progress(); // handles both copies
            caller.progress(); // the first reply settles the call, the second is a stray
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(r) => r.unwrap(),
                Poll::Pending => panic!("the call did not complete"),
            }
        };
        assert_eq!((host.stats().handled, caller.stats().retries), (2, 1));
        assert_eq!(caller.stats().stray_replies, 1);
        assert_eq!(ranges, 1..3, "the first copy's range");
        let mut host_ctx = ctx_of(coord(0, 0, 0), Rc::new(fabric.transport()), Some(host));
        assert_eq!(
            crate::block_on(ts.next(&mut host_ctx)),
            Ok(5),
            "3 and 4 went to the stray reply"
        );
    }

    /// Goal: a malformed request gets an empty reply (the host does not panic on what a
    /// peer sends), and an answer that is not a range is an error, never a timestamp 0.
    #[test]
    fn malformed_requests_and_replies_are_refused() {
        let net = MemMsgNet::new(3, 1);
        let rpc_of = |cn| {
            Rc::new(Rpc::new(
                net.fabric(cn).mailbox(0).unwrap(),
                Arc::new(RealClock::new()),
                RpcConfig::default(),
            ))
        };
        let (host, caller, impostor) = (rpc_of(0), rpc_of(1), rpc_of(2));
        let ts = RpcTimestamps::default();
        ts.serve_on(&host, None);
        // Another service wrongly registered under the timestamp tag: 4-byte, then
        // 8-byte zero answers.
        let zeros = Rc::new(std::cell::Cell::new(false));
        let z = Rc::clone(&zeros);
        impostor.add_service(TAG_TIMESTAMPS, move |_: &Rpc, req: Request<'_>, out: &mut Vec<u8>| {
            if z.get() {
                out.extend([0u8; 8]);
            } else {
                out.extend(req.payload);
            }
            Handled::Reply
        });
        let bad = RpcTimestamps::new(WorkerAddr::new(2, 0));
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let mut ctx = ctx_of(coord(1, 0, 0), Rc::new(fabric.transport()), Some(Rc::clone(&caller)));
        let out = Rc::new(RefCell::new(Vec::new()));
        let errs = Rc::new(RefCell::new(Vec::new()));
        let (o, e, c) = (Rc::clone(&out), Rc::clone(&errs), Rc::clone(&caller));
        let task = Box::pin(async move {
            // n = 0, n above RANGE_MAX and a short request get an empty reply.
            let too_many = (RANGE_MAX + 1).to_le_bytes();
            let reqs: [&[u8]; 3] = [
                &[TAG_TIMESTAMPS, 0, 0, 0, 0],
                &[TAG_TIMESTAMPS, too_many[0], too_many[1], too_many[2], too_many[3]],
                &[TAG_TIMESTAMPS, 1],
            ];
            for req in reqs {
                let reply = c.call(WorkerAddr::new(0, 0), req).await.unwrap();
                o.borrow_mut().push(reply);
            }
            let four = bad.next(&mut ctx).await;
            zeros.set(true);
            let zero = bad.next(&mut ctx).await;
            e.borrow_mut().extend([four, zero]);
        });
        run_all(&[host, Rc::clone(&caller), impostor], vec![task]);
        assert_eq!(*out.borrow(), vec![Vec::<u8>::new(); 3]);
        let host = WorkerAddr::new(2, 0);
        assert_eq!(
            *errs.borrow(),
            [
                Err(TsError::BadReply { host, len: 4 }),
                Err(TsError::BadReply { host, len: 8 })
            ]
        );
    }

    /// Goal: the FAA counter word is reserved zeroed and aligned, and its first grant is 1.
    #[test]
    fn faa_counter_is_reserved_zeroed_and_aligned() {
        let cluster = LocalCluster::new(2, 1 << 16);
        let node = cluster.node(MnId(1)).unwrap();
        // Dirty the bytes the allocator hands out next, to see that reserve zeroes them.
        let dirty = cluster.alloc(MnId(1), 8, 8).unwrap() + 8;
        cluster.load(MnId(1), dirty, &[0xff; 4096]).unwrap();
        let f = FaaTimestamps::reserve(&cluster, MnId(1)).unwrap();
        assert_eq!(f.counter().mn, MnId(1));
        assert!(
            (dirty..dirty + 4096).contains(&f.counter().offset),
            "the check below would be vacuous"
        );
        assert_eq!(f.counter().offset % 8, 0);
        assert_eq!(node.region().load(f.counter().offset).unwrap(), 0);
        let t: Rc<dyn Transport> = Rc::new(cluster.fabric().transport());
        let mut ctx = ctx_of(coord(0, 0, 0), t, None);
        assert_eq!(crate::block_on(f.next(&mut ctx)), Ok(1));
        assert_eq!(crate::block_on(f.next_range(&mut ctx, 5)), Ok(2..7));
        assert_eq!(node.region().load(f.counter().offset).unwrap(), 6);
        assert_eq!(ctx.txn_counters.ts_rtts, 2);
        assert_eq!(ctx.txn_counters.rtts, 0, "not one of the protocol's round trips");
    }
}
