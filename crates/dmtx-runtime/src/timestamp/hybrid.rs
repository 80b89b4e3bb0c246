//! The `hybrid` kind: timestamps with a physical-clock component (LOTUS §5).

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{CommitTs, TimestampService, TsError, TsKind, PENDING_MAX};
use crate::{Clock, CoordCtx};

/// Most timestamps one `hybrid` request may take: one (µs, cn) block.
pub const HYBRID_RANGE_MAX: u32 = 256;

/// Compute nodes the layout has room for.
const NODES_MAX: usize = 256;

/// The `hybrid` timestamp service (LOTUS §5).
///
/// ```text
/// bit 63 ............ 16 15 ..... 8 7 ...... 0
///     physical µs (48)   cn (8)      counter (8)
/// ```
///
/// Each compute node grants from its own word (`last`, shared by its worker threads, one
/// CAS loop per grant): the next grant is the larger of `last + 1` and its clock's
/// `µs << 16 | cn << 8`, and a range stays inside one (µs, cn) block of 256 values, moving
/// to the next µs when the counter would overflow.
///
/// - **Cluster-unique**: bits 8–15 hold the node id, so two nodes' values never meet.
/// - **Strictly increasing per node**, hence per caller: each grant exceeds `last`.
/// - **Tracks real time**: `ts >> 16` is the node clock's µs at the grant, unless the
///   node granted more than 256 timestamps within one µs, in which case it runs ahead
///   of the clock (as a hybrid logical clock does) until the clock catches up.
/// - **Order across nodes** holds only up to their clocks' skew (what LOTUS's bounded
///   drift assumes); invariant 2 of the module holds per node.
///
/// Cost: no message and no round trip (`ts_requests` only), like the `oracle`.
///
/// The watermark is kept in process, for the nodes that [`TimestampService::attach`]ed:
/// a commit grant inserts its timestamp into a ledger under the lock the watermark is
/// computed under (invariant 3); the watermark first raises every attached node's
/// `last` to its clock's present (so none of them can grant at or below it again,
/// invariant 4, even if its clock later jumps back) and is the smallest of those, below
/// the smallest unresolved commit. A node attaches with its `last` raised to the current
/// watermark, so a late node with a slow clock never grants below it.
#[derive(Clone)]
pub struct HybridTimestamps {
    inner: Arc<Inner>,
}

struct Inner {
    /// Per compute node: the last timestamp it granted (or its floor, raised by the
    /// watermark). Only ever raised.
    last: Box<[AtomicU64]>,
    ledger: Mutex<Ledger>,
}

#[derive(Default)]
struct Ledger {
    /// Invariant 3: every commit timestamp granted and not yet resolved.
    pending: BTreeSet<u64>,
    /// The attached nodes and their clocks.
    nodes: Vec<(u16, Arc<dyn Clock>)>,
}

impl std::fmt::Debug for HybridTimestamps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = self.ledger();
        f.debug_struct("HybridTimestamps")
            .field("nodes", &l.nodes.iter().map(|n| n.0).collect::<Vec<_>>())
            .field("pending", &l.pending.len())
            .finish()
    }
}

impl Default for HybridTimestamps {
    fn default() -> Self {
        Self::new()
    }
}

/// The first value of node `cn`'s block at the clock's present.
fn floor_of(clock: &dyn Clock, cn: u16) -> u64 {
    let us = clock.now_ns() / 1_000;
    assert!(us < 1 << 48, "the clock reads {us} µs; the hybrid layout holds 2^48");
    (us << 16) | (u64::from(cn) << 8)
}

impl HybridTimestamps {
    /// A service with no node attached yet.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                last: (0..NODES_MAX).map(|_| AtomicU64::new(0)).collect(),
                ledger: Mutex::new(Ledger::default()),
            }),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.inner.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Node `cn` grants `n` timestamps at its clock's present.
    fn grant(&self, clock: &dyn Clock, cn: u16, n: u32) -> Range<u64> {
        assert!(
            (1..=HYBRID_RANGE_MAX).contains(&n),
            "{n} hybrid timestamps asked; 1..={HYBRID_RANGE_MAX} allowed"
        );
        assert!(usize::from(cn) < NODES_MAX, "cn{cn}: the hybrid layout holds 256 nodes");
        let floor = floor_of(clock, cn);
        let mut first = 0;
        let last = &self.inner.last[usize::from(cn)];
        let _ = last.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |prev| {
            let mut lo = floor.max(prev + 1);
            // Stay in this node's block; the counter's overflow moves to the next µs.
            if (lo >> 8) & 0xff != u64::from(cn) || (lo & 0xff) + u64::from(n) > 256 {
                lo = (((lo >> 16) + 1) << 16) | (u64::from(cn) << 8);
            }
            first = lo;
            Some(lo + u64::from(n) - 1)
        });
        first..first + u64::from(n)
    }

    /// Raise node `cn`'s `last` to at least `to`.
    fn raise(&self, cn: u16, to: u64) {
        self.inner.last[usize::from(cn)].fetch_max(to, Ordering::Relaxed);
    }

    /// Invariants 3–4 (module doc): under the ledger's lock.
    fn watermark_locked(&self, ledger: &Ledger) -> u64 {
        let mut w = u64::MAX;
        for (cn, clock) in &ledger.nodes {
            // Whatever the node grants from now on exceeds this.
            self.raise(*cn, floor_of(clock.as_ref(), *cn).saturating_sub(1));
            w = w.min(self.inner.last[usize::from(*cn)].load(Ordering::Relaxed));
        }
        if let Some(&first) = ledger.pending.first() {
            w = w.min(first - 1);
        }
        if w == u64::MAX {
            0
        } else {
            w
        }
    }
}

impl TimestampService for HybridTimestamps {
    fn kind(&self) -> TsKind {
        TsKind::Hybrid
    }

    /// Register the coordinator's node and its clock (once per node), raising its floor
    /// to the current watermark.
    fn attach(&self, ctx: &crate::CoordCtx) -> Result<(), TsError> {
        let mut ledger = self.ledger();
        if ledger.nodes.iter().all(|(cn, _)| *cn != ctx.id.cn) {
            let w = self.watermark_locked(&ledger);
            self.raise(ctx.id.cn, w);
            ledger.nodes.push((ctx.id.cn, Arc::clone(&ctx.clock)));
        }
        Ok(())
    }

    async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError> {
        ctx.txn_counters.ts_requests += 1;
        Ok(self.grant(ctx.clock.as_ref(), ctx.id.cn, n))
    }

    async fn next_commit(&self, ctx: &mut CoordCtx) -> Result<CommitTs, TsError> {
        ctx.txn_counters.ts_requests += 1;
        let mut ledger = self.ledger();
        assert!(
            ledger.nodes.iter().any(|(cn, _)| *cn == ctx.id.cn),
            "{}: attach coordinators before taking hybrid commit timestamps",
            ctx.id
        );
        assert!(
            ledger.pending.len() < PENDING_MAX,
            "{PENDING_MAX} commit timestamps unresolved: a CommitTs was dropped unresolved"
        );
        let ts = self.grant(ctx.clock.as_ref(), ctx.id.cn, 1).start;
        ledger.pending.insert(ts);
        Ok(CommitTs { ts, index: 0 })
    }

    async fn complete(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError> {
        ctx.txn_counters.ts_requests += 1;
        self.ledger().pending.remove(&ts.ts);
        Ok(())
    }

    async fn watermark(&self, ctx: &mut CoordCtx) -> Result<u64, TsError> {
        ctx.txn_counters.ts_requests += 1;
        let ledger = self.ledger();
        Ok(self.watermark_locked(&ledger))
    }
}
