//! The lease manager (§VII-A) and the clock-rate monitor (§VII-B), over CN↔CN messages.
//!
//! Every compute node holds one lease word ([`crate::onever::lease::LeaseWord`]) in its
//! [`super::OoccCn`]; thread 0 of every node answers two requests ([`handle`]):
//! `SET(word)` stores the word (every thread of the node reads it at its next round, so
//! the ACK means all of them see it) and `STATS` hands over, and resets, the node's
//! read-only statistics ([`RoStats`]). The manager runs as a service task on thread 0
//! of node 0 ([`run`]): every `lease_adjust_period_ms` it pulls the statistics, and
//! when the lease is off target it adjusts in two phases:
//!
//! 1. **Prepare**: `SET(rv = min(old, new), ww = max(old, new))` on every node, all ACKs
//!    awaited; then a wait of at least the old write-wait lease.
//! 2. **Commit**: `SET(new)` on every node.
//!
//! Why readers and writers stay safe, both ways. What must hold is: a writer that locks
//! a record after a reader's READ of it writes after the reader's lease check `c1`. A
//! reader samples `rv` when it posts a READ round; a writer samples `ww` when it sees its
//! intention CAS complete, which is after the reader's READ ran (else the reader saw the
//! lock), so after the reader sampled; it writes at `t_W + ww` or later. At any instant
//! the nodes hold at most two adjacent words of `old → mid → new`, where `mid = (min(old,
//! new), max(old, new))`.
//! - Reader sampled `old`: it did so before its node ACKed `mid`, so its check ends by
//!   `post + rv_old`, before the commit phase starts (the manager waits `≥ ww_old ≥
//!   rv_old` after the last ACK). A writer sampling then holds `old` or `mid`, both with
//!   `ww ≥ rv_old`; one sampling `new` does so after the commit phase began, after the
//!   reader's check.
//! - Reader sampled `mid` (`rv = min`): every `ww` in use from then on is `old`, `max` or
//!   `new`, all `≥ min`.
//! - Reader sampled `new`: the commit phase had begun, every node had ACKed `mid`, so a
//!   later writer samples `max ≥ new` or `new`.
//!
//! Increase and decrease are the same cases with `min` and `max` swapped. Sampling per
//! round (not per transaction, as §VII-A does) is what makes "later" hold for long
//! transactions. Without the intermediate word a decrease breaks the first case at once:
//! a node still on `rv_old` races a node already on `ww_new < rv_old` (test-only
//! [`OoccVariant::AdjustWithoutIntermediate`]).
//!
//! The policy (the paper gives none): with fewer than `omit_target` of the read-only
//! commits skipping validation, grow to the 80th percentile of their read phase plus a
//! quarter and 1 µs; when the lease exceeds twice that percentile, shrink to it.
//!
//! The clock-rate monitor runs on thread 0 of every other node: each period it asks node
//! 0 for its clock, takes the midpoint of its own send and receive times, and compares
//! the two clocks' advance since its first sample; a rate off by more than 80 % of
//! `drift_ppm_max` (our reading of "exceeds max_drift_offset by more than 80 %") stops
//! the node: its coordinators abort every later transaction with `clock_stopped`.

use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dmtx_runtime::{Clock, Rpc, ServiceStop};
use dmtx_verbs::msg::WorkerAddr;

use super::{OoccCn, OoccConfig, OoccVariant};
use crate::onever::lease::{drift_offset_ns, Lease};

/// Request: store the lease word that follows (8 bytes).
pub const OP_SET: u8 = 1;
/// Request: hand over and reset the read-only statistics.
pub const OP_STATS: u8 = 2;
/// Request: the node's clock now.
pub const OP_CLOCK: u8 = 3;

/// Buckets of the read-phase histogram, each [`BUCKET_NS`] wide; the last holds
/// everything longer.
const BUCKETS: usize = 512;
/// Width of a histogram bucket.
const BUCKET_NS: u64 = 250;
/// Read-only commits a period needs before the manager acts on it.
const COMMITS_MIN: u64 = 16;

/// One node's read-only statistics since the manager last took them.
#[derive(Debug)]
pub struct RoStats {
    commits: AtomicU64,
    omitted: AtomicU64,
    hist: Vec<AtomicU64>,
}

impl Default for RoStats {
    fn default() -> Self {
        Self {
            commits: AtomicU64::new(0),
            omitted: AtomicU64::new(0),
            hist: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl RoStats {
    /// A read-only commit whose read phase (first post to `c1`) took `read_ns`; whether
    /// it skipped validation.
    pub fn record(&self, read_ns: u64, omitted: bool) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        if omitted {
            self.omitted.fetch_add(1, Ordering::Relaxed);
        }
        let b = ((read_ns / BUCKET_NS) as usize).min(BUCKETS - 1);
        self.hist[b].fetch_add(1, Ordering::Relaxed);
    }

    /// `(commits, omitted, histogram)` since the last take; resets them.
    fn take(&self) -> (u64, u64, Vec<u64>) {
        let hist = self.hist.iter().map(|h| h.swap(0, Ordering::Relaxed)).collect();
        (
            self.commits.swap(0, Ordering::Relaxed),
            self.omitted.swap(0, Ordering::Relaxed),
            hist,
        )
    }
}

/// What the manager did, on node 0 (read by tests and reports).
#[derive(Debug, Default)]
pub struct ManagerStats {
    /// Adjustments completed.
    pub adjustments: AtomicU64,
    /// Of which increases.
    pub increases: AtomicU64,
    /// Total ns from prepare to the last commit ACK.
    pub adjust_ns: AtomicU64,
    /// The lease now, ns (before the drift offset).
    pub lease_ns: AtomicU64,
}

/// State the monitor and the manager keep per node beside the lease word.
#[derive(Debug, Default)]
pub struct NodeControl {
    /// Read-only statistics.
    pub ro: RoStats,
    /// The node measured its clock rate off by more than 80 % of the bound and stopped.
    pub stopped: AtomicBool,
    /// The manager's figures (node 0).
    pub manager: ManagerStats,
}

/// Answer a request to thread 0 of the node whose state is `cn`.
pub fn handle(cn: &OoccCn, clock: &dyn Clock, req: &[u8], reply: &mut Vec<u8>) {
    match req.first() {
        Some(&OP_SET) if req.len() == 9 => {
            let w = u64::from_le_bytes(req[1..9].try_into().unwrap());
            cn.lease.set(Lease::unpack(w));
        }
        Some(&OP_STATS) => {
            let (commits, omitted, hist) = cn.control.ro.take();
            reply.extend_from_slice(&commits.to_le_bytes());
            reply.extend_from_slice(&omitted.to_le_bytes());
            for h in hist {
                reply.extend_from_slice(&h.to_le_bytes());
            }
        }
        Some(&OP_CLOCK) => reply.extend_from_slice(&clock.now_ns().to_le_bytes()),
        _ => {}
    }
}

/// The lease word of a lease of `lease_ns` under `cfg`'s drift bound (or its fixed
/// offset).
pub fn word(cfg: &OoccConfig, lease_ns: u32) -> Lease {
    let offset = cfg
        .offset_ns
        .unwrap_or_else(|| drift_offset_ns(lease_ns, cfg.drift_ppm_max));
    Lease::with_offset(lease_ns, offset)
}

/// The lease the policy wants after a period of `commits` read-only commits, `omitted`
/// of them without validation, whose read phases are `hist`; `None` to keep `lease_ns`.
pub fn policy(cfg: &OoccConfig, lease_ns: u32, commits: u64, omitted: u64, hist: &[u64]) -> Option<u32> {
    if commits < COMMITS_MIN {
        return None;
    }
    let total: u64 = hist.iter().sum();
    let mut seen = 0;
    let mut p80 = (hist.len() as u64) * BUCKET_NS;
    for (i, &h) in hist.iter().enumerate() {
        seen += h;
        if seen * 5 >= total * 4 {
            p80 = (i as u64 + 1) * BUCKET_NS;
            break;
        }
    }
    let target = (p80 + p80 / 4 + 1_000).clamp(cfg.lease_us_min as u64 * 1_000, cfg.lease_us_max as u64 * 1_000) as u32;
    let low = (omitted as f64) < cfg.omit_target * commits as f64;
    if (low && target > lease_ns) || (!low && lease_ns as u64 > 2 * p80 && target < lease_ns) {
        Some(target)
    } else {
        None
    }
}

/// `fut`'s output, or `None` once `stop` is raised first: a service must end soon after
/// the stop, and a call to a node that stopped serving would wait for its timeout.
async fn until_stopped<T>(stop: &ServiceStop, fut: impl Future<Output = T>) -> Option<T> {
    let mut fut = std::pin::pin!(fut);
    let mut raised = std::pin::pin!(stop.raised());
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(v));
        }
        if raised.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(None);
        }
        std::task::Poll::Pending
    })
    .await
}

/// Store `w` on every node: the local one directly, the others by `SET`, every ACK
/// awaited. False if a node did not answer or the run ended.
async fn set_all(rpc: &Rpc, stop: &ServiceStop, me: &OoccCn, peers: &[WorkerAddr], w: Lease) -> bool {
    me.lease.set(w);
    let mut req = vec![OP_SET];
    req.extend_from_slice(&w.pack().to_le_bytes());
    let reqs: Vec<(WorkerAddr, &[u8])> = peers.iter().map(|&p| (p, req.as_slice())).collect();
    until_stopped(stop, rpc.call_many(&reqs))
        .await
        .is_some_and(|r| r.iter().all(|r| r.is_ok()))
}

/// Adjust every node from `old_ns` to `new_ns` (two phases, module doc). False if a
/// node did not answer; the nodes then hold `old` or the intermediate word, or `new` or
/// the intermediate word, both safe pairs.
pub async fn adjust(
    cfg: &OoccConfig,
    (rpc, stop): (&Rpc, &ServiceStop),
    clock: &dyn Clock,
    me: &OoccCn,
    peers: &[WorkerAddr],
    (old_ns, new_ns): (u32, u32),
) -> bool {
    let (old, new) = (word(cfg, old_ns), word(cfg, new_ns));
    let start = clock.now_ns();
    if cfg.variant != OoccVariant::AdjustWithoutIntermediate {
        if !set_all(rpc, stop, me, peers, old.between(new)).await {
            return false;
        }
        // Every use of the old word began before its node's ACK.
        if !stop.sleep_until(clock, clock.now_ns() + old.ww_ns as u64).await {
            return false;
        }
    }
    if !set_all(rpc, stop, me, peers, new).await {
        return false;
    }
    let took = clock.now_ns() - start;
    for m in std::iter::once(&me.control.manager).chain(cfg.report.as_deref()) {
        m.adjustments.fetch_add(1, Ordering::Relaxed);
        if new_ns > old_ns {
            m.increases.fetch_add(1, Ordering::Relaxed);
        }
        m.adjust_ns.fetch_add(took, Ordering::Relaxed);
        m.lease_ns.store(new_ns as u64, Ordering::Relaxed);
    }
    true
}

/// Thread 0 of every node other than 0, its peers (thread 0 of every other node).
pub fn peers(rpc: &Rpc, me: u16) -> Vec<WorkerAddr> {
    rpc.workers()
        .iter()
        .copied()
        .filter(|w| w.thread == 0 && w.cn != me)
        .collect()
}

/// The manager's loop on node 0 (module doc), until `stop`.
pub async fn run(cfg: OoccConfig, rpc: Rc<Rpc>, clock: Arc<dyn Clock>, stop: ServiceStop, me: Arc<OoccCn>) {
    let period_ns = (cfg.lease_adjust_period_ms * 1e6) as u64;
    let mut lease_ns = cfg.lease_us.saturating_mul(1_000);
    me.control.manager.lease_ns.store(lease_ns as u64, Ordering::Relaxed);
    let peers = peers(&rpc, 0);
    let mut step = 0usize;
    loop {
        if !stop.sleep_until(&*clock, clock.now_ns() + period_ns).await {
            return;
        }
        let want = if let Some(script) = &cfg.adjust_script {
            // Test-only: a fixed cycle of leases, one per period.
            step += 1;
            Some(script[step % script.len()] * 1_000)
        } else {
            let (mut commits, mut omitted, mut hist) = me.control.ro.take();
            let reqs: Vec<(WorkerAddr, &[u8])> = peers.iter().map(|&p| (p, &[OP_STATS][..])).collect();
            let Some(replies) = until_stopped(&stop, rpc.call_many(&reqs)).await else {
                return;
            };
            for r in replies {
                let Ok(b) = r else { continue };
                if b.len() != 16 + 8 * BUCKETS {
                    continue;
                }
                let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
                commits += w(0);
                omitted += w(1);
                for (i, h) in hist.iter_mut().enumerate() {
                    *h += w(2 + i);
                }
            }
            policy(&cfg, lease_ns, commits, omitted, &hist)
        };
        if stop.is_raised() {
            return;
        }
        if let Some(new_ns) = want.filter(|&n| n != lease_ns) {
            if adjust(&cfg, (&rpc, &stop), &*clock, &me, &peers, (lease_ns, new_ns)).await {
                lease_ns = new_ns;
            }
        }
    }
}

/// Samples of the clock monitor before it judges a rate.
const RATE_SAMPLES_MIN: u32 = 3;

/// The clock-rate monitor on thread 0 of node `me_id` (≠ 0), until `stop`: stops the
/// node once its rate against node 0's is off by more than 80 % of the bound.
pub async fn monitor(cfg: OoccConfig, rpc: Rc<Rpc>, clock: Arc<dyn Clock>, stop: ServiceStop, me: Arc<OoccCn>) {
    let period_ns = (cfg.clock_check_period_ms * 1e6) as u64;
    let zero = WorkerAddr::new(0, 0);
    // (local midpoint, remote, round trip) of the first sample.
    let mut first: Option<(u64, u64, u64)> = None;
    let mut samples = 0;
    loop {
        if !stop.sleep_until(&*clock, clock.now_ns() + period_ns).await {
            return;
        }
        let sent = clock.now_ns();
        let Some(reply) = until_stopped(&stop, rpc.call(zero, &[OP_CLOCK])).await else {
            return;
        };
        let Ok(b) = reply else { continue };
        let back = clock.now_ns();
        if b.len() != 8 {
            continue;
        }
        let remote = u64::from_le_bytes(b[..8].try_into().unwrap());
        let rtt = back - sent;
        let local = sent + rtt / 2;
        let Some((l0, r0, rtt0)) = first else {
            first = Some((local, remote, rtt));
            continue;
        };
        samples += 1;
        let (dl, dr) = (local.saturating_sub(l0) as f64, remote.saturating_sub(r0) as f64);
        if samples < RATE_SAMPLES_MIN || dr <= 0.0 {
            continue;
        }
        // The remote reading lies within half a round trip of each midpoint: only the
        // part of the difference beyond that is certain.
        let uncertain = (rtt0 + rtt) as f64 / 2.0;
        let off_ppm = ((dl - dr).abs() - uncertain).max(0.0) / dr * 1e6;
        if off_ppm > 0.8 * cfg.drift_ppm_max as f64 {
            me.control.stopped.store(true, Ordering::Release);
            return;
        }
    }
}
