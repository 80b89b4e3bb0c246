//! The timestamp service of MVCC and T/O protocols (DESIGN §4): strictly increasing,
//! cluster-unique `u64` timestamps, never 0, behind one trait with three kinds.
//!
//! Motor (§4 "Timestamp Generation") and LOTUS (§5) take a start timestamp when a
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
//! # How a protocol uses it
//!
//! A protocol holds a [`Timestamps`] (its paper's kind by default, [`TsKind`] parsed from
//! a knob otherwise, built once by [`Timestamps::setup`]), calls
//! [`TimestampService::attach`] from `Protocol::coord_state` for every coordinator (the
//! `rpc` kind installs its handler on the host thread there and refuses coordinators
//! without messaging), then awaits [`TimestampService::next`] once for `T_start` and once
//! for `T_commit`. [`TimestampService::next_range`] takes `n` consecutive timestamps in
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
//!    MVCC needs of `T_start`, Motor §4 Phase 1). Hence a coordinator's timestamps
//!    strictly increase. A range must therefore be used at once, never kept for later.
//!
//! # Not done
//!
//! - Timestamps carry no physical-clock component (LOTUS §5's garbage collection assumes
//!   one); the counters are pure sequence numbers, as Motor's are.
//! - Across hosts, the `faa` counter's address must be handed to every compute process
//!   (a later issue); [`FaaTimestamps::reserve`] serves in-process clusters, and
//!   [`FaaTimestamps::at`] takes an address reserved elsewhere.

use std::ops::Range;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dmtx_memnode::{Control, ControlError};
use dmtx_verbs::msg::WorkerAddr;
use dmtx_verbs::{MnId, Post, RemotePtr, VerbError};

use crate::rpc::{Handled, Request, Rpc, RpcError, TAG_TIMESTAMPS};
use crate::{CoordCtx, CoordId, Probe};

/// Most timestamps one request may take.
pub const RANGE_MAX: u32 = 1 << 16;

/// The CPU step the `rpc` host charges per request it grants (the handler's work).
pub const STEP_GRANT: &str = "ts.grant";

/// Bytes of an `rpc` request after its service tag: `n` as a little-endian `u32`.
const REQUEST_BYTES: usize = 4;
/// Bytes of an `rpc` reply: the first timestamp of the range, little-endian.
const REPLY_BYTES: usize = 8;

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
}

impl TsKind {
    /// Every kind, in the order they are listed in messages.
    pub const ALL: [TsKind; 3] = [TsKind::Oracle, TsKind::Rpc, TsKind::Faa];

    /// The name used in knobs and results.
    pub fn name(self) -> &'static str {
        match self {
            TsKind::Oracle => "oracle",
            TsKind::Rpc => "rpc",
            TsKind::Faa => "faa",
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
    /// The last timestamp granted.
    last: Arc<AtomicU64>,
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
        Ok(grant(&self.last, n))
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
    last: Arc<AtomicU64>,
}

impl RpcTimestamps {
    /// Where the oracle runs unless told otherwise.
    pub const DEFAULT_HOST: WorkerAddr = WorkerAddr::new(0, 0);

    /// An oracle hosted on worker `host`, first timestamp 1.
    pub fn new(host: WorkerAddr) -> Self {
        Self {
            host,
            last: Arc::new(AtomicU64::new(0)),
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
        let last = Arc::clone(&self.last);
        rpc.add_service(TAG_TIMESTAMPS, move |_: &Rpc, req: Request<'_>, out: &mut Vec<u8>| {
            if let Some(p) = &probe {
                p.step(STEP_GRANT, 1);
            }
            // Any range is fresh (invariant 1), so a retried request needs no dedup: the
            // caller keeps whichever reply comes first and the other is a stray.
            // A malformed request gets an empty reply, which its caller reports.
            if let Ok(n @ 1..=RANGE_MAX) = <[u8; REQUEST_BYTES]>::try_from(req.payload).map(u32::from_le_bytes) {
                out.extend_from_slice(&grant(&last, n).start.to_le_bytes());
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
            return Ok(grant(&self.last, n));
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
}

/// The counter as an 8-byte word on a memory node, advanced by one FAA per request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FaaTimestamps {
    counter: RemotePtr,
}

impl FaaTimestamps {
    /// Reserve a zeroed, 8-byte-aligned counter word on `mn` (setup, once per cluster).
    pub fn reserve(control: &dyn Control, mn: MnId) -> Result<Self, TsError> {
        let offset = control.alloc(mn, 8, 8)?;
        control.load(mn, offset, &0u64.to_le_bytes())?;
        Ok(Self::at(RemotePtr::new(mn, offset)))
    }

    /// Use the counter word at `counter` (reserved and zeroed by [`FaaTimestamps::reserve`]
    /// in some process).
    pub fn at(counter: RemotePtr) -> Self {
        assert_eq!(counter.offset % 8, 0, "{counter}: an FAA needs an 8-byte-aligned word");
        Self { counter }
    }

    /// The counter word.
    pub fn counter(&self) -> RemotePtr {
        self.counter
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
        ctx.txn_counters.ts_rtts += 1;
        let mut post = Post::new();
        let old = post.faa(self.counter, u64::from(n));
        ctx.post_for_timestamp(&mut post)
            .await
            .map_err(|source| TsError::Verb {
                counter: self.counter,
                source,
            })?;
        Ok(range_after(post.old(old), n))
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
        })
    }
}

impl TimestampService for Timestamps {
    fn kind(&self) -> TsKind {
        match self {
            Timestamps::Oracle(t) => t.kind(),
            Timestamps::Rpc(t) => t.kind(),
            Timestamps::Faa(t) => t.kind(),
        }
    }

    fn attach(&self, ctx: &CoordCtx) -> Result<(), TsError> {
        match self {
            Timestamps::Oracle(t) => t.attach(ctx),
            Timestamps::Rpc(t) => t.attach(ctx),
            Timestamps::Faa(t) => t.attach(ctx),
        }
    }

    async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError> {
        match self {
            Timestamps::Oracle(t) => t.next_range(ctx, n).await,
            Timestamps::Rpc(t) => t.next_range(ctx, n).await,
            Timestamps::Faa(t) => t.next_range(ctx, n).await,
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
                .with_messaging(Arc::new(net.fabric(id)), RpcConfig::default())
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
                    TsKind::Oracle => 0,
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
