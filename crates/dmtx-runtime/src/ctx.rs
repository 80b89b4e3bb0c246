//! What every coordinator carries: its identity, its thread's transport, clock and
//! caches, and its counters.

use std::rc::Rc;
use std::sync::Arc;

use dmtx_memnode::Control;
use dmtx_store::Catalog;
use dmtx_verbs::{MnCounters, Post, PostCounters, Submitted, Ticket, Transport, VerbError};

use dmtx_verbs::msg::WorkerAddr;

use crate::rpc::{Rpc, RpcError};
use crate::{yield_now, AddrCache, Clock, MetricSum, Probe};

/// A coordinator's id: unique in the cluster, never 0 when used as a lock owner.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoordId {
    /// Compute node.
    pub cn: u16,
    /// Worker thread within the CN.
    pub thread: u16,
    /// Coroutine within the thread.
    pub coroutine: u16,
}

impl CoordId {
    /// Bits of a transaction id that hold the per-coordinator sequence number.
    pub const SEQ_BITS: u32 = 40;

    /// A 24-bit cluster-wide number: 8 bits each of CN, thread and coroutine.
    #[inline]
    pub fn compact(self) -> u32 {
        assert!(
            self.cn < 256 && self.thread < 256 && self.coroutine < 256,
            "{self}: transaction ids hold at most 256 CNs x 256 threads x 256 coroutines"
        );
        ((self.cn as u32) << 16) | ((self.thread as u32) << 8) | self.coroutine as u32
    }

    /// The cluster-unique id of this coordinator's transaction number `seq` (`seq >= 1`):
    /// never 0, and what protocols install as the version a transaction writes.
    #[inline]
    pub fn txn_id(self, seq: u64) -> u64 {
        debug_assert!(seq > 0 && seq < 1 << Self::SEQ_BITS);
        ((self.compact() as u64) << Self::SEQ_BITS) | seq
    }

    /// A dense cluster-wide number, `< 2^48`.
    #[inline]
    pub fn global(self) -> u64 {
        ((self.cn as u64) << 32) | ((self.thread as u64) << 16) | self.coroutine as u64
    }
}

impl std::fmt::Display for CoordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cn{}/t{}/c{}", self.cn, self.thread, self.coroutine)
    }
}

/// Most deferred posts ([`CoordCtx::post_deferred`]) a coordinator may have in flight:
/// they are settled after every attempt, so a protocol that reaches this leaks them.
pub const DEFERRED_POSTS_MAX: usize = 4096;

/// The runtime side of a coordinator, shared by every protocol.
pub struct CoordCtx {
    /// Who this is.
    pub id: CoordId,
    /// The worker thread's connections.
    pub transport: Rc<dyn Transport>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Table metadata.
    pub catalog: Arc<Catalog>,
    /// Slot addresses.
    pub cache: Rc<AddrCache>,
    /// Counters of the current transaction attempt.
    pub txn_counters: PostCounters,
    /// Load sent to each memory node, over the coordinator's life.
    pub per_mn: Vec<MnCounters>,
    /// The last verb error seen, for reporting faults.
    pub last_fault: Option<VerbError>,
    /// The table whose room an insert found used up, set with every `table_full` abort a
    /// protocol returns (the driver stops the run and names the table and its knob).
    pub last_table_full: Option<u32>,
    /// Why the last `log_full` abort happened, in the protocol's words (what the
    /// transaction needed, the area, the knob that sizes it): the driver stops the run
    /// with it.
    pub last_log_full: Option<String>,
    /// The worker thread's CN↔CN messaging endpoint, when the node has messaging.
    pub rpc: Option<Rc<Rpc>>,
    /// Where table metadata is refetched from after a memory node restarted.
    pub control: Option<Arc<dyn Control>>,
    /// The worker thread's probe (the simulator's CPU model and fault points).
    pub probe: Option<Rc<dyn Probe>>,
    /// The protocol's own figures (`Protocol::METRICS`), by index; grown on first use.
    pub metrics: Vec<MetricSum>,
    /// [`Transport::restarts`] when this context last refreshed.
    seen_restarts: u64,
    /// Deferred posts in flight, with the buffers the transport fills.
    deferred: Vec<(Ticket, Post)>,
    /// Emptied buffers of settled deferred posts, reused.
    deferred_spare: Vec<Post>,
}

impl CoordCtx {
    /// A context on the given thread resources.
    pub fn new(
        id: CoordId,
        transport: Rc<dyn Transport>,
        clock: Arc<dyn Clock>,
        catalog: Arc<Catalog>,
        cache: Rc<AddrCache>,
    ) -> Self {
        let per_mn = vec![MnCounters::default(); transport.mn_count()];
        Self {
            id,
            transport,
            clock,
            catalog,
            cache,
            txn_counters: PostCounters::default(),
            per_mn,
            last_fault: None,
            last_table_full: None,
            last_log_full: None,
            rpc: None,
            control: None,
            probe: None,
            metrics: Vec::new(),
            seen_restarts: 0,
            deferred: Vec::new(),
            deferred_spare: Vec::new(),
        }
    }

    /// `n` units of the named CPU step (see [`Probe`]); free unless a model listens.
    #[inline]
    pub fn step(&self, name: &'static str, n: u32) {
        if let Some(p) = &self.probe {
            p.step(name, n);
        }
    }

    /// Add `value` to the protocol's figure `index` (its entry in `Protocol::METRICS`):
    /// an array add. Results sum it over coordinators after the warm-up.
    #[inline]
    pub fn metric(&mut self, index: usize, value: u64) {
        match self.metrics.get_mut(index) {
            Some(m) => m.add(value),
            None => self.metric_grow(index).add(value),
        }
    }

    /// Add a time, in ns, to entry `index` of the protocol's `METRICS` table, a
    /// [`MetricKind::Duration`](crate::MetricKind::Duration): its sums and its histogram.
    #[inline]
    pub fn metric_ns(&mut self, index: usize, ns: u64) {
        match self.metrics.get_mut(index) {
            Some(m) => m.add_ns(ns),
            None => self.metric_grow(index).add_ns(ns),
        }
    }

    #[cold]
    fn metric_grow(&mut self, index: usize) -> &mut MetricSum {
        assert!(
            index < crate::metric::PROTOCOL_METRICS_MAX,
            "metric index {index} is beyond PROTOCOL_METRICS_MAX ({}): the protocol's METRICS table has no such entry",
            crate::metric::PROTOCOL_METRICS_MAX
        );
        self.metrics.resize(index + 1, MetricSum::default());
        &mut self.metrics[index]
    }

    /// Call `to` over CN↔CN messaging and wait for its reply: one message round trip
    /// of the attempt, counted in `txn_counters.msg_rtts` (never in `rtts`). The
    /// protocol must have messaging on (`Protocol::messaging`).
    pub async fn call(&mut self, to: WorkerAddr, req: &[u8]) -> Result<Vec<u8>, RpcError> {
        let rpc = Rc::clone(
            self.rpc
                .as_ref()
                .expect("CoordCtx::call without messaging: the protocol's `messaging()` must return true"),
        );
        self.txn_counters.msg_rtts += 1;
        rpc.call(to, req).await
    }

    /// Call every `(to, req)` at once and wait for all ([`Rpc::call_many`]): one message
    /// round trip, however many peers, counted in `txn_counters.msg_rtts`.
    pub async fn call_many(&mut self, reqs: &[(WorkerAddr, &[u8])]) -> Vec<Result<Vec<u8>, RpcError>> {
        let rpc = Rc::clone(
            self.rpc
                .as_ref()
                .expect("CoordCtx::call_many without messaging: the protocol's `messaging()` must return true"),
        );
        self.txn_counters.msg_rtts += u64::from(!reqs.is_empty());
        rpc.call_many(reqs).await
    }

    /// An attempt of transaction type `txn_type` ended (the driver calls it; see
    /// [`Probe::attempt_end`]).
    #[inline]
    pub fn attempt_end(&self, txn_type: usize) {
        if let Some(p) = &self.probe {
            p.attempt_end(txn_type);
        }
    }

    /// The named fault point (see [`Probe`]); nothing happens unless a fault script
    /// names it.
    #[inline]
    pub fn fault_point(&self, name: &'static str) {
        if let Some(p) = &self.probe {
            p.point(name);
        }
    }

    #[inline]
    fn count(&mut self, post: &Post, critical: bool) {
        let t = &mut self.txn_counters;
        if critical {
            t.rtts += 1;
        } else {
            t.background_posts += 1;
        }
        // One pass over the ops for both counts: this runs on every post.
        for op in post.ops() {
            let (kind, out, back) = (op.kind() as usize, op.bytes_out(), op.bytes_in());
            t.ops[kind] += 1;
            t.bytes_out += out;
            t.bytes_in += back;
            load_op(&mut self.per_mn, op);
        }
    }

    /// The memory nodes' load (`per_mn`) alone, for posts that are not the protocol's
    /// own (timestamps): every post of any purpose loads its memory nodes.
    #[inline]
    fn count_load(&mut self, post: &Post) {
        for op in post.ops() {
            load_op(&mut self.per_mn, op);
        }
    }

    /// Post and wait: one round trip on the critical path. Yields to the thread's other
    /// coordinators even when the transport completed the post at once.
    pub async fn post(&mut self, post: &mut Post) -> Result<(), VerbError> {
        debug_assert!(!post.is_empty(), "an empty post would count a round trip for nothing");
        self.count(post, true);
        self.wait(post).await
    }

    /// Post and wait for the timestamp service (FAA on a memory-node counter,
    /// [`crate::timestamp`]): waited for like [`CoordCtx::post`], but not one of the
    /// protocol's round trips. It adds to the memory nodes' load (`per_mn`) only; the
    /// caller counts it in `txn_counters.ts_rtts`, never in `rtts`, `ops` or bytes.
    pub(crate) async fn post_for_timestamp(&mut self, post: &mut Post) -> Result<(), VerbError> {
        debug_assert!(!post.is_empty());
        self.count_load(post);
        self.wait(post).await
    }

    async fn wait(&mut self, post: &mut Post) -> Result<(), VerbError> {
        let res = match self.transport.submit(post) {
            Submitted::Done(res) => {
                yield_now().await;
                res
            }
            Submitted::Pending(ticket) => {
                let transport = Rc::clone(&self.transport);
                std::future::poll_fn(|cx| transport.poll(ticket, post, cx)).await
            }
        };
        if let Err(e) = &res {
            self.last_fault = Some(e.clone());
        }
        if self.transport.restarts() != self.seen_restarts {
            self.after_restart();
        }
        res
    }

    /// A memory node restarted (the transport reconnected and found a new region key):
    /// its memory may be empty or reloaded, so every cached address goes and the table
    /// metadata is fetched again. A failed fetch keeps the old catalog and is reported as
    /// the last fault; the next post tries again.
    #[cold]
    fn after_restart(&mut self) {
        self.cache.clear();
        let Some(control) = &self.control else {
            self.seen_restarts = self.transport.restarts();
            return;
        };
        match Catalog::fetch(control.as_ref()) {
            Ok(c) => {
                self.catalog = Arc::new(c);
                self.seen_restarts = self.transport.restarts();
            }
            Err(e) => {
                self.last_fault = Some(VerbError::Unreachable {
                    mn: dmtx_verbs::MnId(0),
                    why: format!("refetching table metadata after a memory-node restart: {e}"),
                })
            }
        }
    }

    /// Post without waiting (background release); counted apart from round trips.
    pub fn post_background(&mut self, post: &mut Post) {
        if post.is_empty() {
            return;
        }
        self.count(post, false);
        self.transport.submit_detached(post);
    }

    /// Post without waiting now, and keep the post until [`CoordCtx::settle_deferred`]
    /// waits for it: background work (a release, a log truncation) that is off the
    /// attempt's critical path but must have landed before the coordinator's next
    /// transaction and before the run ends. `Coordinator::cleanup` settles after every
    /// attempt, and `Coordinator::drain` at the end. Counted like
    /// [`CoordCtx::post_background`] (`background_posts`, never a round trip). Takes the
    /// post's contents and leaves `post` empty, ready for reuse.
    pub fn post_deferred(&mut self, post: &mut Post) {
        if post.is_empty() {
            return;
        }
        assert!(
            self.deferred.len() < DEFERRED_POSTS_MAX,
            "{DEFERRED_POSTS_MAX} deferred posts in flight: the protocol never settles them"
        );
        self.count(post, false);
        let mut owned = self.deferred_spare.pop().unwrap_or_default();
        std::mem::swap(&mut owned, post);
        match self.transport.submit(&mut owned) {
            Submitted::Done(res) => {
                if let Err(e) = res {
                    self.last_fault = Some(e);
                }
                owned.clear();
                self.deferred_spare.push(owned);
            }
            Submitted::Pending(ticket) => self.deferred.push((ticket, owned)),
        }
    }

    /// Deferred posts still in flight.
    pub fn deferred_in_flight(&self) -> usize {
        self.deferred.len()
    }

    /// Wait for every deferred post ([`CoordCtx::post_deferred`]); not a round trip of
    /// any attempt. Returns the first error; every failure is kept as `last_fault`.
    pub async fn settle_deferred(&mut self) -> Result<(), VerbError> {
        let mut first = Ok(());
        while let Some((ticket, mut post)) = self.deferred.pop() {
            let transport = Rc::clone(&self.transport);
            let res = std::future::poll_fn(|cx| transport.poll(ticket, &mut post, cx)).await;
            if let Err(e) = res {
                self.last_fault = Some(e.clone());
                if first.is_ok() {
                    first = Err(e);
                }
            }
            post.clear();
            self.deferred_spare.push(post);
        }
        if self.transport.restarts() != self.seen_restarts {
            self.after_restart();
        }
        first
    }
}

/// Count `op` in the load of the memory node it names (`bytes_in` is what the node
/// receives, so the op's outgoing bytes).
#[inline]
fn load_op(per_mn: &mut [MnCounters], op: &dmtx_verbs::Op) {
    if let Some(mn) = per_mn.get_mut(op.ptr().mn.index()) {
        mn.ops[op.kind() as usize] += 1;
        mn.bytes_in += op.bytes_out();
        mn.bytes_out += op.bytes_in();
    }
}
