//! The protocol abstraction: what a concurrency-control protocol plugs into.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use dmtx_memnode::Control;
use dmtx_store::SlotLayout;

use crate::{
    Abort, AbortReasonSpec, Cn, CoordCtx, Coordinator, KnobError, KnobSpec, Knobs, MetricSpec, Result, ServiceStop,
    ServiceTask, Txn, Worker,
};

/// The isolation level a protocol claims; histories of its runs are checked against it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// Serializable: committed transactions are equivalent to some serial order.
    Serializable,
    /// Serializable, and that order respects real time (OOCC).
    StrictSerializable,
    /// Snapshot isolation (write skew allowed).
    SnapshotIsolation,
    /// No guarantee: a paper's unsafe upper bound (OOCC's `upper_bound`, LOTUS's
    /// idealized RDMA lock). It runs and is measured, its results are marked unsafe, and
    /// an isolation check does not apply to it.
    Unchecked,
}

impl Isolation {
    /// Lower-case name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Serializable => "serializable",
            Isolation::StrictSerializable => "strict serializable",
            Isolation::SnapshotIsolation => "snapshot isolation",
            Isolation::Unchecked => "unchecked",
        }
    }

    /// Whether a history can be checked against it (every level but [`Isolation::Unchecked`]).
    pub fn is_checked(self) -> bool {
        self != Isolation::Unchecked
    }
}

/// A drawn transaction, as [`Protocol::route`] sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The compute node whose coordinator drew it.
    pub from: u16,
    /// Compute nodes of the run in this process (ids `0..nodes`).
    pub nodes: u16,
    /// Its type, an index into the workload's transaction types.
    pub ty: usize,
    /// The key the workload places it by (a shard's key), if it names one.
    pub key: Option<u64>,
    /// A uniformly random number, fresh for every drawn transaction and replayed by the
    /// run's seed: LOTUS sends a read-only transaction to a random node.
    pub random: u64,
}

/// A distributed transaction protocol over one-sided verbs.
///
/// A protocol owns its record layout ([`SlotLayout`]) and its per-transaction state
/// machine. Workloads never see either: they speak the [`Txn`] API, which calls
/// [`execute`](Protocol::execute) to fetch what was added since the last call and
/// [`commit`](Protocol::commit) to finish. When either returns `Err`, the `Txn` calls
/// [`abort`](Protocol::abort) to release whatever the transaction still holds, so a
/// protocol's `execute`/`commit` only undo what they themselves made visible.
pub trait Protocol: Send + Sync + Sized + 'static {
    /// Per-coordinator resources (post buffers, log areas).
    type CoordState: 'static;
    /// Per-object scratch state (addresses, lock state).
    type ObjState: Default + 'static;
    /// State of one compute node, shared by its worker threads (FORD-LV's Vcache, LOTUS's
    /// lock tables and version-table cache, OOCC's lease words): built once per CN by
    /// [`cn_state`](Protocol::cn_state), reached as `coord.cn_state`. `()` when none.
    /// `Default` is what a coordinator built outside a compute node gets
    /// ([`Coordinator::new`]), and what the default hook builds.
    type CnState: Default + Send + Sync + 'static;
    /// State of one worker thread, shared by its coordinators and services, never by
    /// other threads (LOTUS serves the i-th coordinator's locks on the i-th thread): built
    /// by [`thread_state`](Protocol::thread_state), reached as `coord.thread_state`. `()`
    /// when none.
    type ThreadState: Default + 'static;

    /// Name used on the command line.
    const NAME: &'static str;
    /// One-line description for `dmtx list`.
    const ABOUT: &'static str;
    /// Knobs accepted with `--set`.
    const KNOBS: &'static [KnobSpec];

    // ---- What the protocol counts and costs, beyond the shared counters ----

    /// Abort reasons of the protocol's own, beyond [`crate::AbortReason`]'s shared ones:
    /// it aborts with `AbortReason::Protocol(i)` for entry `i`, results name it, and the
    /// driver retries it when the entry says `retryable`. At most
    /// [`crate::PROTOCOL_ABORT_REASONS_MAX`], names unique (checked before a run).
    const ABORT_REASONS: &'static [AbortReasonSpec] = &[];
    /// Figures of the protocol's own ([`crate::metric`]): it adds to entry `i` with
    /// `ctx.metric(i, value)`; results show them under `protocol_metrics`.
    const METRICS: &'static [MetricSpec] = &[];
    /// The CPU steps its code declares with `ctx.step(name, n)` and their default cost
    /// in ns of the simulator's calibration host (`dmtx_sim::cpu`): the simulator
    /// charges a profile's `[cpu.steps]` entry where it has one, else this.
    const CPU_STEPS: &'static [(&'static str, u64)] = &[];

    /// Build from `--set` values (unknown keys are refused before this is called).
    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError>;

    /// The isolation level this instance provides: a knob may pick it (Motor and LOTUS
    /// run SR or SI), and an unsafe upper bound says [`Isolation::Unchecked`].
    fn isolation(&self) -> Isolation;

    /// Whether its coordinators message other compute nodes (LOTUS lock RPCs, OOCC
    /// leases, Calvin): the runtime then gives every worker an [`crate::Rpc`]
    /// (`ctx.rpc`), driven by the worker's executor. Protocols that only use verbs keep
    /// the default `false` and pay nothing for messaging.
    fn messaging(&self) -> bool {
        false
    }

    /// Whether [`route`](Protocol::route) may send a transaction to another compute node.
    /// Only then does a run of several nodes in one process route: the driver sets up
    /// the nodes' inboxes and consults `route` for every drawn transaction. The default
    /// is `false`: every transaction runs where it was drawn, at no cost.
    fn routes(&self) -> bool {
        false
    }

    /// The compute node that runs a transaction a coordinator of node `txn.from` drew
    /// (`--compute-nodes` above 1, in one process, when [`routes`](Protocol::routes)):
    /// the driver hands it to a coordinator of that node. LOTUS runs read-write
    /// transactions on the node that owns their shard, read-only ones on a random node.
    /// Called once per drawn transaction, not per attempt. The default keeps it where it
    /// was drawn.
    fn route(&self, txn: &Route) -> u16 {
        txn.from
    }

    /// How records look in a slot; tables are created with it.
    fn layout(&self) -> &dyn SlotLayout;

    /// Set up one coordinator (allocate its log areas through `control`, ...).
    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<Self::CoordState>;

    // ---- State per compute node and per worker thread, and service tasks ----
    //
    // Built once, when the node's (the thread's) first coordinator is set up
    // ([`Worker::coordinator`]); a coordinator holds an `Arc` (an `Rc`) of each, cloned at
    // its setup, so a transaction reaches them at no cost beyond a field access.

    /// Build the state of compute node `cn` (once per CN and run). The default is
    /// `CnState::default()`.
    fn cn_state(&self, cn: &Cn) -> Result<Self::CnState> {
        let _ = cn;
        Ok(Self::CnState::default())
    }

    /// Build the state of worker thread `worker` of the node whose state is `cn` (once
    /// per thread). A protocol that serves CN↔CN requests installs the thread's handler
    /// here (`worker.rpc()`, [`crate::Rpc::set_handler`] or [`crate::Rpc::add_service`]),
    /// capturing `cn`. The default is `ThreadState::default()`.
    fn thread_state(&self, cn: &Arc<Self::CnState>, worker: &Worker) -> Result<Self::ThreadState> {
        let _ = (cn, worker);
        Ok(Self::ThreadState::default())
    }

    /// The service tasks of worker thread `worker` ([`crate::service`]): futures the
    /// driver spawns on the thread's executor beside its coordinators, after they are
    /// set up. Each must end once `stop` is raised, which the driver does after every
    /// coordinator of the run finished; a service waits for time with
    /// [`ServiceStop::sleep_until`]. The default has none.
    fn services(
        &self,
        cn: &Arc<Self::CnState>,
        thread: &Rc<Self::ThreadState>,
        worker: &Worker,
        stop: &ServiceStop,
    ) -> Vec<ServiceTask> {
        let _ = (cn, thread, worker, stop);
        Vec::new()
    }

    // Run-wide setup: areas the whole run shares, found by name.

    /// Set up what the whole run shares, once per run, after the memory nodes are up and
    /// before any compute node sets up a coordinator: allocate run-wide areas through
    /// `control` (a cluster-wide counter, T/O's timestamp slots, a latency region, log
    /// areas recovery must find) and publish each under a name with
    /// [`named::publish`](crate::named::publish) or
    /// [`named::alloc_and_publish`](crate::named::alloc_and_publish). Coordinators, on
    /// every compute node, find them in [`coord_state`](Protocol::coord_state) with
    /// [`named::fetch`](crate::named::fetch).
    ///
    /// The driver calls it on the run's memory pool and, before measuring what one
    /// coordinator allocates, on its sizing control, so `coord_state` can fetch there too.
    /// Names are per run: memory nodes refuse a name published twice, so a protocol
    /// publishes each name once, from here. The default publishes nothing.
    fn setup_run(&self, control: &dyn Control) -> Result<()> {
        let _ = control;
        Ok(())
    }

    /// Fetch every object added since the last call, in as few round trips as the
    /// protocol allows. Must leave `set.fetched == set.objs.len()` on success.
    fn execute(txn: &mut Txn<'_, Self>) -> impl Future<Output = std::result::Result<(), Abort>>;

    /// Validate and commit. On `Err`, nothing the transaction wrote may remain visible.
    fn commit(txn: &mut Txn<'_, Self>) -> impl Future<Output = std::result::Result<(), Abort>>;

    /// Release every lock the transaction holds (in the background).
    fn abort(txn: &mut Txn<'_, Self>);

    // ---- Cleanup and background work: steps that take round trips after an attempt ----
    //
    // `abort` above runs synchronously (it is called from `Txn`'s `Drop`), so it can only
    // post without waiting. What must wait for completions (2PL's shared/exclusive release
    // loops, T/O and MVCC restores, MaaT's list removal, FaRM's log truncation) goes here.
    // Three ways to leave work after an attempt, by when it must have landed:
    // - `ctx.post_background`: never waited for (FORD's release);
    // - `ctx.post_deferred` (also from the synchronous `abort`): not waited for by the
    //   attempt, but before the coordinator's next transaction and before the run ends;
    // - `cleanup` below: awaited steps, each round trip counted as the cleanup's.

    /// The per-attempt cleanup: awaited after every attempt, committed or aborted, before
    /// the coordinator's next attempt or retry (the driver calls it through
    /// [`Coordinator::cleanup`]). `coord.set` still holds the finished attempt: its
    /// objects with their per-object state, and its `phase`.
    ///
    /// Its posts (waited for with `ctx.post`, or left with `ctx.post_background`) are
    /// counted apart from the attempt's: in the results' `cleanup_rtts_per_commit` and
    /// `cleanup_counters`, never in `rtt_per_commit`. They are not in the transaction's
    /// latency either: its outcome is known before cleanup starts. The default does
    /// nothing and costs nothing (FORD releases with `abort` and its commit batch).
    fn cleanup(coord: &mut Coordinator<Self>) -> impl Future<Output = ()> {
        let _ = coord;
        std::future::ready(())
    }

    /// Per-coordinator background work still to finish when the coordinator stops:
    /// awaited once, at the end of the run, after the last attempt's
    /// [`cleanup`](Protocol::cleanup) (the driver calls it through
    /// [`Coordinator::drain`]), so no run ends with a protocol's work in flight. Work that
    /// must end before the coordinator's *next* transaction belongs in `cleanup`. Its
    /// posts load the memory nodes (`per_mn`) and are in no transaction type's counters.
    /// The default does nothing and costs nothing.
    fn drain(coord: &mut Coordinator<Self>) -> impl Future<Output = ()> {
        let _ = coord;
        std::future::ready(())
    }

    /// Whether this instance can run only transactions that declare every key before
    /// their first execute ([`crate::TxnHints::keys_declared`]): Calvin's sequencer
    /// orders and locks a transaction's whole read/write set before it runs. The
    /// registry refuses to pair such a protocol with a workload whose transaction types
    /// cannot declare their keys, and [`Coordinator::begin_with`] asserts it. Default
    /// `false`.
    fn requires_declared_keys(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_but_unchecked_is_checked() {
        for level in [
            Isolation::Serializable,
            Isolation::StrictSerializable,
            Isolation::SnapshotIsolation,
        ] {
            assert!(level.is_checked(), "{}", level.name());
        }
        assert!(!Isolation::Unchecked.is_checked());
        assert_eq!(Isolation::Unchecked.name(), "unchecked");
    }
}
