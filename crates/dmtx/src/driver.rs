//! One benchmark run on an in-process cluster (the `mem` transport).
//!
//! [`run`] does, in order:
//!
//! 1. builds every table of the workload in local memory with the protocol's slot
//!    layout and loads it through [`Workload::load`];
//! 2. sizes the memory nodes (tables per node from [`placement`], plus what one
//!    coordinator allocates, measured by calling `coord_state` against a counting
//!    control interface, times the coordinator count, plus headroom), starts a
//!    [`LocalCluster`] and ships the tables to their replicas;
//! 3. connects compute node 0 with a [`RealClock`] and starts `threads` OS threads.
//!    Each sets up its worker and `coroutines` coordinators, reports ready, waits for
//!    the common start, and runs its coordinators on one [`LocalExecutor`](dmtx_runtime::LocalExecutor) until the
//!    stop flag (deadline, Ctrl-C, a failed thread) or the `--txns` budget ends them;
//! 4. merges the threads' counters, reads every table back from its primary into a
//!    [`Snapshot`] and calls [`Workload::check`] on it with every coordinator's local
//!    state;
//! 5. returns a [`BenchResult`].
//!
//! Each coordinator draws a transaction ([`Workload::draw`]) and runs it
//! ([`Workload::run`]) until it commits; an attempt aborted by a conflict
//! ([`retryable`]) is run again with the same inputs after a short randomized backoff,
//! as often as `--set retry_aborts` allows ([`Retries`]). A committed transaction's
//! latency runs from its first attempt to its commit.
//!
//! The hot path (one attempt of one coordinator) reads the clock twice, loads the
//! stop flag, and records into its thread's [`RunStats`] through a `RefCell` and into
//! its own progress counters (plain stores of single-writer atomics): no lock, no
//! allocation but a time-series bucket's first commit, no shared write. The `--txns`
//! budget is taken from a shared counter in batches ([`CREDIT_BATCH_MAX`]) and kept per
//! thread; a transaction that ends without committing gives its credit back, so
//! exactly `N` transactions commit unless the run is interrupted.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dmtx_check::format::write_history;
use dmtx_check::history::History;
use dmtx_check::recorder::Recorder;
use dmtx_check::{check as check_history, check_options};
use dmtx_memnode::{Control, ControlError, LocalCluster, TableMeta};
use dmtx_runtime::{
    block_on, scan_table, AbortReason, AbortReasonSpec, AddrCache, CacheStats, Clock, Cn, CoordCtx, CoordId,
    Coordinator, KnobError, KnobSpec, Knobs, MetricSum, Protocol, RealClock, Route, ServiceStop, ServiceTask,
    SharedAddrCache,
};
use dmtx_sim::{NodeClock, Sim, SimConfig, SimExecutor, SimFabric};
use dmtx_store::{create_table, Catalog, TableBuilder, TableSpec};
use dmtx_verbs::{Fabric, MemFabric, MnCounters, MnId, Region, Transport};
use dmtx_workloads::{Outcome, Snapshot, TypeCounts, Workload};

use crate::config::{BenchConfig, OnFault, StopRule};
use crate::error::RunError;
use crate::results::{BenchResult, CheckResult, InvariantResult, RawRun, SimRaw, StopReason, TimeSeries};
use crate::stats::RunStats;

/// Largest batch of `--txns` credits a thread takes from the shared budget at once.
pub const CREDIT_BATCH_MAX: u64 = 256;
/// How often the main thread checks the deadline and reports progress.
pub const TICK: Duration = Duration::from_millis(50);
/// Virtual time a simulated run gets after an interrupt for its coordinators to finish
/// the transactions in hand; any still running then are dropped (a healthy run needs
/// microseconds).
pub const INTERRUPT_GRACE_NS: u64 = 10_000_000;
/// Virtual time a simulated `--duration` run gives its coordinators after the deadline
/// to finish the transactions in hand (a healthy run needs microseconds); any still
/// running then, held by a `delay` or by a peer that will never answer, are dropped
/// there and reported as stranded.
pub const DRAIN_MAX_NS: u64 = 1_000_000_000;
/// How often a simulated run reports progress: virtual time.
pub const SIM_TICK_NS: u64 = 1_000_000;

/// What the driver reports while it works (a progress bar, or nothing).
pub trait Monitor: Sync {
    /// A setup phase began (`loading tables`, ...).
    fn phase(&self, _what: &str) {}
    /// The measured run began.
    fn running(&self, _stop: StopRule) {}
    /// Progress, every [`TICK`].
    fn tick(&self, _progress: &Progress) {}
    /// The measured run ended (threads joined).
    fn finished(&self) {}
}

/// A [`Monitor`] that shows nothing.
#[derive(Copy, Clone, Debug, Default)]
pub struct Silent;

impl Monitor for Silent {}

/// A progress report.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Progress {
    /// Since the start of the measured run.
    pub elapsed: Duration,
    /// Committed transactions so far.
    pub committed: u64,
    /// Attempts so far.
    pub attempted: u64,
    /// Commits so far by latency (first attempt to commit), warm-up included.
    pub latency: LatencyCounts,
}

/// Sub-buckets per power of two of [`latency_bucket`]: 2^3, so a bucket is at most
/// 1/8 of its lower edge wide (12.5%).
pub const LATENCY_SUB_BITS: u32 = 3;
/// Largest latency told apart by [`latency_bucket`]: 2^37 ns (137 s), above
/// [`LATENCY_NS_MAX`](crate::stats::LATENCY_NS_MAX).
pub const LATENCY_BUCKET_NS_MAX: u64 = (1 << 37) - 1;
/// Buckets of [`latency_bucket`].
pub const LATENCY_BUCKETS: usize = latency_bucket(LATENCY_BUCKET_NS_MAX) + 1;

/// The bucket of a latency in a coarse log-linear histogram: exact below 8 ns, then 8
/// buckets per power of two. Cheap enough for every commit of the hot path, which
/// keeps the exact HDR histograms apart, for the results.
#[inline]
pub const fn latency_bucket(ns: u64) -> usize {
    let v = if ns > LATENCY_BUCKET_NS_MAX {
        LATENCY_BUCKET_NS_MAX
    } else {
        ns
    };
    if v < 1 << LATENCY_SUB_BITS {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let sub = (v >> (e - LATENCY_SUB_BITS)) & ((1 << LATENCY_SUB_BITS) - 1);
    (((e - LATENCY_SUB_BITS + 1) << LATENCY_SUB_BITS) as u64 + sub) as usize
}

/// The largest latency in bucket `b` of [`latency_bucket`], in ns.
pub const fn latency_bucket_ns_max(b: usize) -> u64 {
    if b < 1 << LATENCY_SUB_BITS {
        return b as u64;
    }
    let e = (b >> LATENCY_SUB_BITS) as u32 + LATENCY_SUB_BITS - 1;
    let sub = (b & ((1 << LATENCY_SUB_BITS) - 1)) as u64;
    let lo = ((1 << LATENCY_SUB_BITS) + sub) << (e - LATENCY_SUB_BITS);
    lo + (1 << (e - LATENCY_SUB_BITS)) - 1
}

/// Commits per latency bucket ([`latency_bucket`]), summed over the threads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LatencyCounts(pub [u64; LATENCY_BUCKETS]);

impl LatencyCounts {
    /// No commits.
    pub const ZERO: LatencyCounts = LatencyCounts([0; LATENCY_BUCKETS]);

    /// The commits counted here and not in `earlier` (a snapshot of the same run).
    pub fn since(&self, earlier: &LatencyCounts) -> LatencyCounts {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(earlier.0) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// The upper edge of the bucket holding quantile `q` (0 to 1) in ns: at most 12.5%
    /// above the exact value. `None` without commits.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        let total: u64 = self.0.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, &n) in self.0.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(latency_bucket_ns_max(b));
            }
        }
        unreachable!("rank {rank} is at most the total {total}")
    }
}

/// `--set retry_aborts`: retries of an aborted transaction, with the same inputs.
pub const RETRY_ABORTS: KnobSpec = KnobSpec {
    name: "retry_aborts",
    default: "unbounded",
    help: "retries of a transaction aborted by a conflict, with the same inputs: `unbounded` (until it commits: \
           TPC-C, BenchBase), 0 (draw a new one: FORD's and Motor's code) or N (OOCC's TPC-C: 19, 20 attempts)",
};

/// `--set addr_cache_entries`: the bound of each level of a compute node's address cache.
pub const ADDR_CACHE_ENTRIES: KnobSpec = KnobSpec {
    name: "addr_cache_entries",
    default: "2097152",
    help: "addresses each level of a compute node's address cache keeps per generation (the CN's and each \
           thread's; two generations, the older dropped when the younger fills): bounds the CN's memory in runs \
           that insert",
};

/// Knobs of the driver, which every run accepts.
pub const KNOBS: &[KnobSpec] = &[RETRY_ABORTS, ADDR_CACHE_ENTRIES];

/// `--set addr_cache_entries`, checked: at least 1.
pub fn addr_cache_entries(knobs: &Knobs) -> Result<usize, KnobError> {
    let n: u64 = knobs.get(&ADDR_CACHE_ENTRIES)?;
    if n == 0 || n > (1 << 40) {
        return Err(KnobError::Invalid {
            key: ADDR_CACHE_ENTRIES.name.into(),
            value: n.to_string(),
            why: "expected 1 to 2^40 entries; e.g. `--set addr_cache_entries=1000000`".into(),
        });
    }
    Ok(n as usize)
}

/// How often an aborted transaction is run again with the same inputs
/// ([`RETRY_ABORTS`]). Only [`retryable`] aborts are; a run's stop flag ends retrying.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Retries {
    /// Until it commits (or the run stops).
    Unbounded,
    /// At most this many times; 0 draws a new transaction after every abort.
    AtMost(u32),
}

impl Retries {
    /// From `--set retry_aborts` (or its default).
    pub fn from_knobs(knobs: &Knobs) -> Result<Self, KnobError> {
        let raw: String = knobs.get(&RETRY_ABORTS)?;
        if raw.eq_ignore_ascii_case("unbounded") {
            return Ok(Retries::Unbounded);
        }
        raw.parse().map(Retries::AtMost).map_err(|_| KnobError::Invalid {
            key: RETRY_ABORTS.name.into(),
            value: raw.clone(),
            why: format!(
                "expected `unbounded` or a count of retries up to {}; e.g. `--set retry_aborts=20`",
                u32::MAX
            ),
        })
    }

    /// Whether a transaction that has been retried `done` times may be retried again.
    #[inline]
    pub fn allows(self, done: u32) -> bool {
        match self {
            Retries::Unbounded => true,
            Retries::AtMost(n) => done < n,
        }
    }
}

/// Bucket of the time series on a real clock (`mem`, `tcp`): 1 s.
pub const SERIES_BUCKET_NS_REAL: u64 = 1_000_000_000;
/// Bucket of the time series on the simulator's virtual clock: 1 ms.
pub const SERIES_BUCKET_NS_SIM: u64 = 1_000_000;

/// How the caller talks to a run in progress.
pub struct RunHooks<'a> {
    /// Set it (from a Ctrl-C handler) to stop the run early; results are still built.
    pub stop: &'a AtomicBool,
    /// Receives progress.
    pub monitor: &'a dyn Monitor,
    /// Probes for every worker thread on `mem` (`dmtx sim calibrate` counts named steps);
    /// simulated runs use the simulator's own.
    pub probes: Option<Arc<dyn dmtx_runtime::ProbeSource>>,
}

/// One thread's progress counters, on their own cache lines; written by that thread only.
#[repr(align(128))]
struct ThreadProgress {
    committed: AtomicU64,
    attempted: AtomicU64,
    /// Commits by latency bucket ([`latency_bucket`]).
    latency: [AtomicU64; LATENCY_BUCKETS],
}

impl Default for ThreadProgress {
    fn default() -> Self {
        Self {
            committed: AtomicU64::new(0),
            attempted: AtomicU64::new(0),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A [`Control`] that hands out addresses without memory: measures what a
/// coordinator's setup allocates on each node. Named entries go to a memory node of
/// one page each (same checks, same limits), so a `coord_state` can fetch what
/// `setup_run` published.
struct Sizing {
    used: Mutex<Vec<u64>>,
    named: Vec<dmtx_memnode::MemNode>,
}

impl Control for Sizing {
    fn mn_count(&self) -> usize {
        self.used.lock().expect("sizing lock").len()
    }
    fn alloc(&self, mn: MnId, bytes: u64, align: u64) -> dmtx_memnode::Result<u64> {
        let mut used = self.used.lock().expect("sizing lock");
        let mn_count = used.len();
        let u = used
            .get_mut(mn.index())
            .ok_or(ControlError::UnknownNode { mn, mn_count })?;
        let at = u.next_multiple_of(align.max(1));
        *u = at + bytes;
        Ok(at)
    }
    fn load(&self, _mn: MnId, _offset: u64, _bytes: &[u8]) -> dmtx_memnode::Result<()> {
        Ok(())
    }
    fn put_table(&self, _mn: MnId, _meta: &TableMeta) -> dmtx_memnode::Result<()> {
        Ok(())
    }
    fn tables(&self, _mn: MnId) -> dmtx_memnode::Result<Vec<TableMeta>> {
        Ok(Vec::new())
    }
    fn put_named(&self, mn: MnId, name: &str, value: &[u8]) -> dmtx_memnode::Result<()> {
        self.node(mn)?.put_named(name, value)
    }
    fn named(&self, mn: MnId, name: &str) -> dmtx_memnode::Result<Vec<u8>> {
        self.node(mn)?.named(name)
    }
    fn names(&self, mn: MnId) -> dmtx_memnode::Result<Vec<String>> {
        Ok(self.node(mn)?.names())
    }
}

impl Sizing {
    fn node(&self, mn: MnId) -> dmtx_memnode::Result<&dmtx_memnode::MemNode> {
        self.named.get(mn.index()).ok_or(ControlError::UnknownNode {
            mn,
            mn_count: self.named.len(),
        })
    }
}

/// `workload` with its growing tables sized for the run `cfg` describes
/// ([`Workload::fit_to_run`]).
pub fn fit_to_run<W: Workload>(workload: W, cfg: &BenchConfig) -> W {
    workload.fit_to_run(&dmtx_workloads::RunHint {
        duration: match cfg.stop {
            StopRule::Duration(d) => Some(cfg.warmup + d),
            StopRule::Txns(_) => None,
        },
        txns: match cfg.stop {
            StopRule::Txns(n) => Some(n),
            StopRule::Duration(_) => None,
        },
        coordinators: cfg.coordinators(),
    })
}

/// Bytes one coordinator's protocol state allocates on each memory node.
pub fn coordinator_bytes<P: Protocol>(proto: &P, mn_count: usize) -> Result<Vec<u64>, RunError> {
    let sizing = Sizing {
        used: Mutex::new(vec![0; mn_count]),
        named: (0..mn_count)
            .map(|i| dmtx_memnode::MemNode::new(MnId(i as u16), 4096))
            .collect(),
    };
    // The run-wide areas first, as in a run, so `coord_state` finds them; what they take
    // is the run's, not the coordinator's.
    proto.setup_run(&sizing)?;
    let run_bytes = sizing.used.lock().expect("sizing lock").clone();
    let regions = (0..mn_count).map(|_| Arc::new(Region::new(64))).collect();
    let transport: Rc<dyn Transport> = Rc::new(MemFabric::new(regions).transport());
    let ctx = CoordCtx::new(
        CoordId {
            cn: 0,
            thread: 0,
            coroutine: 0,
        },
        transport,
        Arc::new(RealClock::new()),
        Arc::new(Catalog::default()),
        Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
    );
    drop(proto.coord_state(&ctx, &sizing)?);
    // Each coordinator's areas start aligned; round up to the usual 64-byte alignment.
    Ok(sizing
        .used
        .into_inner()
        .expect("sizing lock")
        .into_iter()
        .zip(run_bytes)
        .map(|(b, run)| (b - run).next_multiple_of(64))
        .collect())
}

/// The per-coordinator seed handed to [`Workload::local`].
pub fn coordinator_seed(run_seed: u64, coord: CoordId) -> u64 {
    splitmix64(run_seed ^ splitmix64(coord.global()))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Run `workload` under `proto` as `cfg` says. The names in `cfg` label the results;
/// the caller guarantees they name `proto` and `workload`.
pub fn run<P: Protocol, W: Workload>(
    proto: P,
    workload: W,
    cfg: &BenchConfig,
    hooks: &RunHooks<'_>,
) -> Result<BenchResult, RunError> {
    // `--cn`: one compute node of a multi-process run, which runs its share of `--txns`.
    let role = crate::cn_join::Role::of(cfg);
    let cfg_share;
    let cfg = match &role {
        Some(r) => {
            cfg_share = r.share_of(cfg);
            &cfg_share
        }
        None => cfg,
    };
    // The protocol's own tables index fixed arrays of results: refused before anything
    // is built when they do not fit.
    dmtx_runtime::check_abort_reasons(P::NAME, P::ABORT_REASONS).map_err(RunError::Unsupported)?;
    dmtx_runtime::metric::check_metrics(P::NAME, P::METRICS).map_err(RunError::Unsupported)?;

    // 1. The plan: what the run needs, from the table specs alone. A run that cannot fit
    // `--mn-bytes` or this host is refused here, before anything is built.
    hooks.monitor.phase("planning memory");
    // Growing tables get room for a run this long (unless a knob fixed it).
    let workload = fit_to_run(workload, cfg);
    let per_coord = coordinator_bytes(&proto, cfg.memory_nodes as usize)?;
    let plan = crate::plan::plan_and_check(&proto, &workload, cfg, &per_coord, crate::plan::host_available_bytes())?;
    run_planned(proto, &Typed(workload), plan, role, cfg, hooks)
}

/// The rest of [`run`], once the plan fits: compiled once per protocol, with the workload
/// behind [`WorkloadLoop`], so the registry's protocol × workload pairs do not each
/// instantiate the whole driver.
fn run_planned<P: Protocol>(
    proto: P,
    workload: &dyn WorkloadLoop<P>,
    plan: crate::plan::MemoryPlan,
    role: Option<crate::cn_join::Role>,
    cfg: &BenchConfig,
    hooks: &RunHooks<'_>,
) -> Result<BenchResult, RunError> {
    let mn_count = cfg.memory_nodes as usize;
    let proto = Arc::new(proto);
    let specs: Vec<TableSpec> = workload.tables();

    // 2. Memory nodes: started (or reached, and their regions checked) before loading.
    let pool = match &cfg.cluster {
        None => local_pool(cfg, &plan)?,
        Some(view) => remote_pool(view, &plan.need_per_mn)?,
    };
    let mn_bytes = pool.mn_bytes;
    let mut join = role.map(|r| crate::cn_join::Join::new(r, Arc::clone(&pool.control)));
    // Of a `--cn` run's compute nodes, only one sets up the run and loads the tables.
    let loads = join.as_ref().is_none_or(|j| j.role().loads());
    if let Some(j) = &join {
        j.before_load()?;
    }
    // Run-wide areas, published by name before any coordinator is set up.
    if loads {
        proto.setup_run(pool.control.as_ref())?;
    }

    // 3. Tables, built locally in parallel (one thread each: TPC-C's nine, TATP's five;
    // the loaders only read the workload, and each builder owns its image), then shipped.
    hooks.monitor.phase("loading tables");
    let load_started = std::time::Instant::now();
    let builders = match loads {
        true => build_tables(workload, &specs, proto.layout(), hooks.stop),
        false => Vec::new(),
    };
    let mut records_loaded = 0;
    // What each table's load wrote per replica, in plan order (the measured footprint).
    let mut written_bytes = Vec::with_capacity(plan.tables.len());
    for (table, builder) in plan.tables.iter().zip(builders) {
        let builder = builder?;
        records_loaded += builder.len();
        written_bytes.push(builder.written_pages() * 4096);
        if hooks.stop.load(Ordering::Relaxed) {
            return Err(RunError::Interrupted {
                phase: "loading tables",
            });
        }
        create_table(pool.control.as_ref(), builder, &table.nodes)?;
    }
    if let Some(j) = &mut join {
        j.tables_loaded(hooks.stop)?;
    }
    let load = load_started.elapsed();

    // 3. The compute node and its threads.
    hooks.monitor.phase("starting coordinators");
    // `--transport sim`: the same regions, reached through the NIC model on virtual time.
    // The profile's CPU model, with the protocol's declared steps where it lists none.
    let sim_profile = cfg.sim.as_ref().map(|setup| {
        let mut profile = setup.profile.clone();
        profile.cpu.add_protocol_steps(P::CPU_STEPS);
        profile
    });
    let sim = sim_profile
        .as_ref()
        .map(|profile| Sim::new(SimConfig::from_profile(cfg.seed, profile), pool.regions.clone()));
    let direct = Arc::clone(&pool.fabric);
    let control = pool.control;
    let (clock, mut cns): (Arc<dyn Clock>, Vec<Cn>) = match &sim {
        Some(sim) => {
            if let Some(script) = cfg.sim.as_ref().and_then(|s| s.faults.clone()) {
                sim.install_faults(script)
                    .map_err(|e| RunError::Unsupported(format!("--faults: {e}")))?;
            }
            let clock: Arc<dyn Clock> = Arc::new(NodeClock::exact(sim.time()));
            let cns = (0..cfg.compute_nodes)
                .map(|i| {
                    let fabric = SimFabric::new(sim, i as u32);
                    // Each node reads its own clock, which a `clock-jump` fault can move.
                    let own: Arc<dyn Clock> = Arc::new(
                        sim.node_clock(dmtx_sim::Node::Cn(i as u32), 0, 0)
                            .map_err(|e| RunError::Unsupported(e.to_string()))?,
                    );
                    Ok(Cn::connect(i, Arc::new(fabric.clone()), Arc::clone(&control), own)?
                        .with_probes(Arc::new(fabric)))
                })
                .collect::<Result<_, RunError>>()?;
            (clock, cns)
        }
        None => {
            // `--compute-nodes N` in one process: N nodes on the same memory pool, each
            // with its own threads, caches, protocol state and mailboxes.
            let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
            // With --cluster, this process is the one node --cn names.
            let first = join.as_ref().map_or(0, |j| j.role().id);
            let cns = (0..cfg.compute_nodes)
                .map(|i| {
                    let mut cn = Cn::connect(
                        first + i,
                        Arc::clone(&pool.fabric),
                        Arc::clone(&control),
                        Arc::clone(&clock),
                    )?;
                    if let Some(p) = &hooks.probes {
                        cn = cn.with_probes(Arc::clone(p));
                    }
                    Ok(cn)
                })
                .collect::<Result<_, RunError>>()?;
            (clock, cns)
        }
    };
    let cache_entries = addr_cache_entries(&cfg.knobs)?;
    for cn in &mut cns {
        cn.cache = Arc::new(dmtx_runtime::SharedAddrCache::with_capacity(cache_entries));
    }
    let transport_name = cns[0].fabric.name();
    // CN↔CN messaging: one mailbox per worker thread of every node, on the simulator's
    // network model (virtual time) or in memory.
    let mut sim_net = None;
    if proto.messaging() {
        let nodes = cns.len() as u16;
        let fabrics: Vec<Arc<dyn dmtx_verbs::msg::MsgFabric>> = match (&sim, &join, &cfg.cluster) {
            (Some(sim), _, _) => {
                let net = dmtx_sim::SimMsgNet::new(sim, nodes, cfg.threads);
                let f = (0..nodes).map(|i| Arc::new(net.fabric(i)) as Arc<_>).collect();
                sim_net = Some(net);
                f
            }
            (None, Some(j), Some(view)) => vec![Arc::new(j.messaging(view, cfg.threads)?)],
            (None, None, Some(_)) => {
                return Err(RunError::Unsupported(format!(
                    "protocol `{}` messages other compute nodes, and a `--cluster` run without --cn has no \
                     compute-node address to message from; add --cn ID (a `[[compute_nodes]]` id)",
                    P::NAME
                )));
            }
            (None, _, None) => {
                let net = dmtx_verbs::msg::MemMsgNet::new(nodes, cfg.threads);
                (0..nodes).map(|i| Arc::new(net.fabric(i)) as Arc<_>).collect()
            }
        };
        for (cn, fabric) in cns.iter_mut().zip(fabrics) {
            *cn = cn.clone().with_messaging(fabric, dmtx_runtime::RpcConfig::default());
        }
    }
    let types = workload.txn_types();

    // `--txns`: each worker thread starts with its even share of the budget, so a thread
    // that starts a little later still runs its share; only what they give back or leave
    // over is shared.
    let budget = match cfg.stop {
        StopRule::Txns(n) => Some(AtomicU64::new(n % cfg.worker_threads() as u64)),
        StopRule::Duration(_) => None,
    };
    // An unsafe upper bound promises no isolation: there is nothing to check.
    let record_history = cfg.check && proto.isolation().is_checked();
    if cfg.check && !record_history && !cfg.quiet {
        eprintln!(
            "note: --check does not apply: `{}` is an unsafe upper bound (isolation `unchecked`)",
            P::NAME
        );
    }
    let series_bucket_ns = if sim.is_some() {
        SERIES_BUCKET_NS_SIM
    } else {
        SERIES_BUCKET_NS_REAL
    };
    let shared = Shared {
        record_history,
        cns: &cns,
        proto: &proto,
        workload,
        cfg,
        stop: AtomicBool::new(false),
        go: AtomicBool::new(false),
        ready: AtomicUsize::new(0),
        budget: budget.as_ref(),
        credit_batch: match cfg.stop {
            StopRule::Txns(n) => (n / (cfg.coordinators() as u64 * 8)).clamp(1, CREDIT_BATCH_MAX),
            StopRule::Duration(_) => 0,
        },
        progress: (0..cfg.worker_threads()).map(|_| ThreadProgress::default()).collect(),
        types: types.len(),
        fault: Mutex::new(None),
        limit: Mutex::new(Limits::default()),
        guard: MemoryGuard::new(
            plan.in_process,
            plan.loaded_tables_bytes() / cfg.replicas.max(1) as u64,
            cfg.replicas,
        ),
        memory_low: Mutex::new(None),
        measure_from_ns: AtomicU64::new(0),
        measure_until_ns: AtomicU64::new(u64::MAX),
        retries: Retries::from_knobs(&cfg.knobs)?,
        series_bucket_ns,
        series_origin_ns: AtomicU64::new(0),
        live: AtomicUsize::new(cfg.coordinators()),
        // Over `--cn`, a messaging protocol's nodes serve each other until every node's
        // coordinators are done (`cn_join`'s end barrier).
        peers_done: AtomicBool::new(join.is_none() || !proto.messaging()),
        routes: (cns.len() > 1 && proto.routes()).then(|| workload.routes(cns.len(), cfg.coordinators() / cns.len())),
    };
    let warmup_ns = cfg.warmup.as_nanos() as u64;
    // The measured window: from the end of the warm-up to the deadline.
    let open_window = |start_ns: u64| {
        let from = start_ns + warmup_ns;
        shared.measure_from_ns.store(from, Ordering::Relaxed);
        let origin = if sim.is_some() {
            from - from % series_bucket_ns
        } else {
            from
        };
        shared.series_origin_ns.store(origin, Ordering::Relaxed);
        if let StopRule::Duration(d) = cfg.stop {
            let until = start_ns + warmup_ns + d.as_nanos() as u64;
            shared.measure_until_ns.store(until, Ordering::Relaxed);
        }
    };

    let mut started_at_unix_s = 0.0;
    let mut start_ns = 0;
    let mut stop_reason = StopReason::Interrupt;
    let mut real_started = std::time::Instant::now();
    let mut sim_window: (Option<SimCounters>, Option<SimCounters>) = (None, None);
    let mut stranded = 0;
    let mut join_failed = None;
    let outcomes: Vec<Result<ThreadOutcome<Local>, RunError>> = if let Some(sim) = &sim {
        started_at_unix_s = crate::results::wall_clock_unix_s();
        start_ns = clock.now_ns();
        open_window(start_ns);
        hooks.monitor.phase("simulating");
        hooks.monitor.running(cfg.stop);
        real_started = std::time::Instant::now();
        let run = run_simulated(&shared, sim, sim_net.as_ref(), start_ns, hooks)?;
        stop_reason = run.reason;
        sim_window = (run.baseline, run.window_end);
        stranded = run.stranded;
        run.outcomes
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..cfg.worker_threads() as u16)
                .map(|t| {
                    let shared = &shared;
                    std::thread::Builder::new()
                        .name(format!("dmtx-worker-{t}"))
                        .spawn_scoped(s, move || worker_thread(t, shared))
                        .expect("spawn a worker thread")
                })
                .collect();
            // Start everyone at once, unless a thread already failed or panicked.
            while shared.ready.load(Ordering::Acquire) < cfg.worker_threads() {
                if handles.iter().any(|h| h.is_finished()) || hooks.stop.load(Ordering::Relaxed) {
                    shared.stop.store(true, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            // Every compute node of a `--cn` run starts when the last is ready.
            if let Some(j) = join.as_ref().filter(|_| !shared.stop.load(Ordering::Relaxed)) {
                if let Err(e) = j.start_barrier(hooks.stop) {
                    join_failed = Some(e);
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
            started_at_unix_s = crate::results::wall_clock_unix_s();
            start_ns = clock.now_ns();
            open_window(start_ns);
            real_started = std::time::Instant::now();
            shared.go.store(true, Ordering::Release);
            hooks.monitor.running(cfg.stop);

            loop {
                let elapsed = Duration::from_nanos(clock.now_ns().saturating_sub(start_ns));
                if hooks.stop.load(Ordering::Relaxed) {
                    stop_reason = StopReason::Interrupt;
                    break;
                }
                if shared.fault.lock().unwrap().is_some() || shared.limit.lock().unwrap().first.is_some() {
                    stop_reason = StopReason::Error;
                    break;
                }
                // Over `--cn` a thread serving other nodes ends only after the end barrier.
                let coordinators_done =
                    !shared.peers_done.load(Ordering::Relaxed) && shared.live.load(Ordering::Acquire) == 0;
                if coordinators_done || handles.iter().all(|h| h.is_finished()) {
                    stop_reason = match cfg.stop {
                        StopRule::Txns(_) => StopReason::Txns,
                        // Threads end before the deadline only when one failed or panicked.
                        StopRule::Duration(_) => StopReason::Error,
                    };
                    break;
                }
                if let Some(low) = shared.guard.check() {
                    *shared.memory_low.lock().unwrap() = Some((low, clock.now_ns()));
                    break;
                }
                let mut wait = TICK;
                if let StopRule::Duration(d) = cfg.stop {
                    let d = d + cfg.warmup;
                    if elapsed >= d {
                        stop_reason = StopReason::Duration;
                        break;
                    }
                    wait = wait.min(d - elapsed);
                }
                hooks.monitor.tick(&shared.progress_now(elapsed));
                std::thread::sleep(wait);
            }
            shared.stop.store(true, Ordering::Relaxed);
            if !shared.peers_done.load(Ordering::Relaxed) {
                // This node's coordinators finish their transactions in hand (the other
                // nodes still serve them), then the nodes wait for each other.
                while shared.live.load(Ordering::Acquire) > 0 && !handles.iter().all(|h| h.is_finished()) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                if let Some(j) = &join {
                    if let Err(e) = j.end_barrier(hooks.stop) {
                        join_failed.get_or_insert(e);
                    }
                }
                shared.peers_done.store(true, Ordering::Release);
            }
            handles
                .into_iter()
                .enumerate()
                .map(|(t, h)| {
                    h.join().unwrap_or_else(|panic| {
                        Err(RunError::WorkerPanicked {
                            thread: t as u16,
                            message: panic_message(panic.as_ref()),
                        })
                    })
                })
                .collect()
        })
    };
    if let Some(e) = join_failed {
        return Err(e.into());
    }
    let real = real_started.elapsed();
    hooks.monitor.finished();
    // What is reported starts after the warm-up.
    start_ns += warmup_ns;

    // 4. Merge, then check the invariants on the quiesced database.
    let mut stats = RunStats::new(types.len());
    let mut per_mn = vec![MnCounters::default(); mn_count];
    let mut locals = Vec::with_capacity(cfg.coordinators());
    let mut end_ns = start_ns;
    let mut last_fault = None;
    let mut history = shared.record_history.then(History::new);
    let mut series: Vec<u64> = Vec::new();
    let mut protocol_metrics = vec![MetricSum::default(); P::METRICS.len()];
    let mut cache_stats = CacheStats::default();
    for outcome in outcomes {
        let o = outcome?;
        for (a, b) in protocol_metrics.iter_mut().zip(&o.metrics) {
            a.merge(b);
        }
        cache_stats.add(&o.cache);
        if series.len() < o.series.len() {
            series.resize(o.series.len(), 0);
        }
        for (a, b) in series.iter_mut().zip(&o.series) {
            *a += b;
        }
        if let (Some(all), Some(h)) = (history.as_mut(), o.history) {
            all.append(h);
        }
        stats.merge(&o.stats);
        add_mn_counters(&mut per_mn, &o.per_mn);
        locals.extend(o.locals);
        end_ns = end_ns.max(o.end_ns);
        last_fault = last_fault.or(o.last_fault);
    }
    // Transactions in hand at the deadline finish after it, uncounted: the window ends
    // there.
    end_ns = end_ns.min(shared.measure_until_ns.load(Ordering::Relaxed));
    let mut stop_detail = None;
    let limits = std::mem::take(&mut *shared.limit.lock().unwrap());
    match limits.first {
        Some((AbortReason::LogFull, at_ns)) => {
            return Err(RunError::LogFull {
                why: limits
                    .log_full
                    .unwrap_or_else(|| format!("`{}` reported a full log", cfg.protocol)),
                after: Duration::from_nanos(at_ns.saturating_sub(start_ns)),
            });
        }
        Some((_, at_ns)) => {
            // Tables full: the run stopped there; what ran before it is still a result,
            // recorded with the reason.
            stop_reason = StopReason::TablesFull;
            let tables = specs
                .iter()
                .filter(|s| limits.tables_full.contains(&s.id))
                .map(|s| (s.name.clone(), s.growth_knob.map(String::from)))
                .collect();
            let after = Duration::from_nanos(at_ns.saturating_sub(start_ns));
            stop_detail = Some(RunError::TablesFull { tables, after }.to_string());
        }
        None => {}
    }
    if let Some((low, at_ns)) = shared.memory_low.lock().unwrap().take() {
        stop_reason = StopReason::Memory;
        stop_detail = Some(format!(
            "this host's available memory fell to {} (the guard keeps {} for the invariant check and the system); \
             stopped the run after {:.1} s; run shorter, use fewer --replicas or a smaller scale, or put the memory \
             nodes on other hosts (--cluster)",
            crate::units::bytes(low.available),
            crate::units::bytes(low.threshold),
            Duration::from_nanos(at_ns.saturating_sub(start_ns)).as_secs_f64()
        ));
    }
    if let Some((why, at_ns)) = shared.fault.lock().unwrap().take() {
        // The lost node cannot be scanned for the invariant check: report the fault.
        return Err(RunError::Fault {
            why,
            after: Duration::from_nanos(at_ns.saturating_sub(start_ns)),
        });
    }
    if stop_reason == StopReason::Error {
        // Every thread returned Ok, so none failed: they ran out of work early.
        stop_reason = StopReason::Duration;
    }

    hooks.monitor.phase("checking invariants");
    // The scan reads the quiesced regions directly: on the simulator nothing would move
    // virtual time forward outside the executor.
    let scan_cn = match &sim {
        Some(_) => Cn::connect(0, direct, Arc::clone(&control), Arc::new(RealClock::new()))?,
        None => {
            // The scanner is one thread more than messaging knows of: it sends nothing.
            let mut cn = cns[0].clone();
            cn.msg = None;
            cn
        }
    };
    let scanner = scan_cn.worker(cfg.threads)?;
    let mut ctx = scanner.ctx(0);
    let mut snapshot = Snapshot::new();
    for spec in &specs {
        block_on(scan_table(&mut ctx, spec.id, 0, proto.layout(), |k, v| {
            snapshot.push(spec.id, k, v)
        }))
        .map_err(|error| RunError::Scan {
            table: spec.name.clone(),
            error,
        })?;
    }
    snapshot.seal();
    let invariant = match workload.check(locals, &snapshot) {
        Ok(detail) => InvariantResult { ok: true, detail },
        Err(e) => InvariantResult {
            ok: false,
            detail: e.to_string(),
        },
    };
    // One of several `--cn` compute nodes counted only its own coordinators' work.
    let invariant = match join.as_ref().and_then(|j| j.unchecked_invariant()) {
        Some(detail) => InvariantResult { ok: true, detail },
        None => invariant,
    };

    // 5. The isolation check of the recorded history.
    let check = match history {
        None => None,
        Some(mut h) => {
            if join.is_some() {
                // Histories of several hosts are merged on Unix time (`cn_join`).
                h.shift_times(crate::cn_join::unix_offset_ns(clock.as_ref()));
            }
            if let Some(path) = &cfg.history {
                hooks.monitor.phase("writing the history");
                write_history(path, &h).map_err(RunError::History)?;
            }
            match join.as_ref().is_none_or(|j| j.checks_alone()) {
                true => {
                    hooks.monitor.phase("checking the history");
                    Some(CheckResult::of(&check_history(&h, &check_options(proto.isolation()))))
                }
                // It holds only this CN's transactions: `dmtx check` takes every CN's.
                false => None,
            }
        }
    };

    // 6. The record.
    let elapsed = Duration::from_nanos(end_ns.saturating_sub(start_ns));
    let counts: Vec<TypeCounts> = stats
        .types
        .iter()
        .map(|t| TypeCounts {
            committed: t.committed,
            rolled_back: t.rolled_back,
        })
        .collect();
    let metrics = workload.metrics(&counts, elapsed.as_secs_f64());
    let timeseries = Some(time_series(
        series.clone(),
        shared.series_bucket_ns,
        elapsed,
        if sim.is_some() {
            crate::results::Clock::Virtual
        } else {
            crate::results::Clock::Real
        },
    ));
    let cache_entries: u64 = cns.iter().map(|cn| cn.cache.len() as u64).sum();
    let mut result = BenchResult::from_run(RawRun {
        abort_reasons: P::ABORT_REASONS,
        protocol_metrics: P::METRICS.iter().copied().zip(protocol_metrics).collect(),
        addr_cache: Some((cache_stats, cache_entries)),
        memory: Some(crate::results::MemoryResult::of(&plan).with_written(&written_bytes)),
        metrics,
        timeseries,
        cfg,
        transport: transport_name,
        mn_bytes,
        txn_types: types,
        stats: &stats,
        per_mn: &per_mn,
        elapsed,
        stop_reason,
        stop_detail,
        invariant,
        check,
        isolation: proto.isolation(),
        last_fault,
        started_at_unix_s,
        load,
        records_loaded,
        real,
        sim: match (&sim, &sim_profile) {
            (Some(sim), Some(profile)) => {
                // The fabric's and CPUs' counters over the window: at the deadline (or the
                // end) less those at the end of the warm-up.
                let (mut load, mut cpus, mut stats) = match sim_window.1.take() {
                    Some(at_deadline) => at_deadline,
                    None => (sim.load(), sim.cpu_busy(), sim.stats()),
                };
                if let Some((l0, c0, s0)) = &sim_window.0 {
                    load = load.since(l0);
                    for (c, b) in cpus.iter_mut().zip(c0) {
                        c.busy_ns -= b.busy_ns;
                    }
                    stats = stats.since(s0);
                }
                Some(SimRaw {
                    profile: profile.clone(),
                    cpu_mode: profile.cpu.mode,
                    compute_nodes: cfg.compute_nodes,
                    load,
                    cpus,
                    stats,
                    series: series.clone(),
                    faults: sim
                        .fault_log()
                        .into_iter()
                        .map(|f| format!("{:.6} ms: {}", f.at_ns as f64 / 1e6, f.what))
                        .collect(),
                    tears: sim.tear_stats(),
                    stranded,
                    unpriced_steps: sim.unpriced_steps().into_iter().map(String::from).collect(),
                    simulated_ns: sim.now().saturating_sub(start_ns - warmup_ns),
                })
            }
            _ => None,
        },
    });
    result.cn = join.map(|j| j.record(&stats));
    Ok(result)
}

/// Where the run's memory nodes are and how to reach them.
struct MemoryPool {
    fabric: Arc<dyn Fabric>,
    control: Arc<dyn Control>,
    /// The in-process regions (empty for a remote pool): what the simulator serves.
    regions: Vec<Arc<Region>>,
    /// Region bytes per node (the smallest, for a remote pool).
    mn_bytes: u64,
}

/// An in-process cluster with the regions `plan` asks for (or `--mn-bytes`).
fn local_pool(cfg: &BenchConfig, plan: &crate::plan::MemoryPlan) -> Result<MemoryPool, RunError> {
    let mn_bytes = plan.mn_bytes(cfg.mn_bytes);
    let nodes = plan.need_per_mn.len();
    let cluster = Arc::new(LocalCluster::try_new(nodes, mn_bytes).map_err(RunError::Region)?);
    Ok(MemoryPool {
        fabric: Arc::new(cluster.fabric().clone()),
        regions: (0..nodes)
            .map(|i| Arc::clone(cluster.fabric().region(MnId(i as u16))))
            .collect(),
        control: cluster,
        mn_bytes,
    })
}

/// Build every table's image in parallel, one thread per table, loading it through
/// [`Workload::load`]. Ctrl-C (`stop`) ends each loader within a batch of records.
fn build_tables<'l, P: Protocol>(
    workload: &dyn WorkloadLoop<P>,
    specs: &[TableSpec],
    layout: &'l dyn dmtx_store::SlotLayout,
    stop: &AtomicBool,
) -> Vec<Result<TableBuilder<'l>, RunError>> {
    /// Records a loader inserts between looks at the stop flag.
    const STOP_CHECK_RECORDS: u64 = 1 << 14;
    std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .iter()
            .map(|spec| {
                s.spawn(move || {
                    let mut builder = TableBuilder::try_new(spec.clone(), layout)?;
                    let mut n = 0u64;
                    let loaded = workload.load(spec.id, &mut |key, value| {
                        n += 1;
                        if n.is_multiple_of(STOP_CHECK_RECORDS) && stop.load(Ordering::Relaxed) {
                            return Err(dmtx_store::StoreError::Interrupted {
                                table: spec.name.clone(),
                            });
                        }
                        builder.insert(key, value)
                    });
                    match loaded {
                        Ok(()) => Ok(builder),
                        Err(dmtx_store::StoreError::Interrupted { .. }) => Err(RunError::Interrupted {
                            phase: "loading tables",
                        }),
                        Err(e) => Err(e.into()),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// The memory nodes of a cluster file, over `tcp`.
fn remote_pool(view: &crate::cluster::ClusterView, need: &[u64]) -> Result<MemoryPool, RunError> {
    let tcp = view.tcp_config()?;
    let nodes: Vec<(MnId, std::net::SocketAddr)> = view.memory_nodes.iter().map(|m| (MnId(m.id), m.address)).collect();
    let control = dmtx_net::RemoteControl::connect(nodes.clone(), &tcp)?;
    let fabric = dmtx_net::TcpFabric::connect(nodes, tcp)?;
    let mut mn_bytes = u64::MAX;
    for (i, &needed) in need.iter().enumerate() {
        let has = fabric.region_bytes(MnId(i as u16));
        if has < needed {
            return Err(RunError::RemoteTooSmall {
                mn: i as u16,
                has,
                needed,
            });
        }
        mn_bytes = mn_bytes.min(has);
    }
    Ok(MemoryPool {
        fabric: Arc::new(fabric),
        regions: Vec::new(),
        control: Arc::new(control),
        mn_bytes,
    })
}

/// The first abort that no retry can cure (`log_full`, `table_full`) and when it
/// happened, with every table found full: the run stops there, whatever `--on-fault`
/// says.
#[derive(Default)]
struct Limits {
    first: Option<(AbortReason, u64)>,
    tables_full: std::collections::BTreeSet<u32>,
    /// The protocol's words for the first `log_full` abort.
    log_full: Option<String>,
}

/// Stops an in-process run before the host runs out of memory: the memory nodes'
/// inserts grow with the run, and the invariant check afterwards holds a snapshot of
/// every record. It reads `MemAvailable` at most every [`MemoryGuard::EVERY`] and
/// reports when it falls below what the check and the system need.
struct MemoryGuard {
    enabled: bool,
    origin: std::time::Instant,
    /// Milliseconds from `origin` of the last look.
    last_ms: AtomicU64,
    /// Bytes kept for the system beyond the check: the larger of 1 GiB and 5% of the host.
    floor: u64,
    /// One replica's loaded tables: the check's snapshot at the start.
    snapshot_base: u64,
    replicas: u64,
    rss_start: u64,
}

/// What the guard saw when it tripped.
#[derive(Copy, Clone, Debug)]
struct LowMemory {
    available: u64,
    threshold: u64,
}

impl MemoryGuard {
    const EVERY: Duration = Duration::from_millis(250);

    fn new(in_process: bool, snapshot_base: u64, replicas: u16) -> Self {
        let total = crate::plan::host_total_bytes().unwrap_or(0);
        Self {
            enabled: in_process && crate::plan::host_available_bytes().is_some(),
            origin: std::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            floor: (1u64 << 30).max(total / 20),
            snapshot_base,
            replicas: replicas.max(1) as u64,
            rss_start: crate::plan::process_resident_bytes().unwrap_or(0),
        }
    }

    /// `Some` when available memory is below what the rest of the run needs.
    fn check(&self) -> Option<LowMemory> {
        let now_ms = self.origin.elapsed().as_millis() as u64;
        if !self.enabled || now_ms < self.last_ms.load(Ordering::Relaxed) + Self::EVERY.as_millis() as u64 {
            return None;
        }
        self.last_ms.store(now_ms, Ordering::Relaxed);
        let available = crate::plan::host_available_bytes()?;
        // The snapshot grows with what the run inserted: one replica's share of it.
        let grown = crate::plan::process_resident_bytes()
            .unwrap_or(0)
            .saturating_sub(self.rss_start);
        let threshold = self.floor + self.snapshot_base + grown / self.replicas;
        (available < threshold).then_some(LowMemory { available, threshold })
    }
}

/// What every worker thread shares.
struct Shared<'a, P: Protocol> {
    /// Record every transaction (`--check`, on a protocol whose level can be checked).
    record_history: bool,
    /// The compute nodes (`--compute-nodes`; one per process over `--cluster`).
    cns: &'a [Cn],
    proto: &'a Arc<P>,
    workload: &'a dyn WorkloadLoop<P>,
    cfg: &'a BenchConfig,
    /// Set by the main thread (deadline, Ctrl-C) or a failing thread.
    stop: AtomicBool,
    /// Set by the main thread once every thread is ready.
    go: AtomicBool,
    /// Threads whose coordinators are set up.
    ready: AtomicUsize,
    /// Commits still to hand out (`--txns`).
    budget: Option<&'a AtomicU64>,
    credit_batch: u64,
    progress: Vec<ThreadProgress>,
    types: usize,
    /// The first fault of a `--on-fault stop` run, and when it happened.
    fault: Mutex<Option<(String, u64)>>,
    /// The aborts no retry can cure (`log_full`, `table_full`): the run stops at the
    /// first, whatever `--on-fault` says.
    limit: Mutex<Limits>,
    /// Stops an in-process run before the host runs out of memory: inserts grow the
    /// memory nodes, by what the data needs, which the plan cannot foresee.
    guard: MemoryGuard,
    /// What the guard saw when it stopped the run, and when.
    memory_low: Mutex<Option<(LowMemory, u64)>>,
    /// Clock time when measuring starts (the end of `--warmup`); attempts that start
    /// earlier are run but not counted.
    measure_from_ns: AtomicU64,
    /// Clock time when measuring ends (`--duration`'s deadline; `u64::MAX` for
    /// `--txns`): attempts that end later are finished but not counted.
    measure_until_ns: AtomicU64,
    /// How often an aborted transaction is run again (`retry_aborts`).
    retries: Retries,
    /// Width of a time-series bucket, ns of the run's clock.
    series_bucket_ns: u64,
    /// Clock time of the series' first bucket: the end of the warm-up (on the
    /// simulator, rounded down to its bucket, so buckets are whole ms of virtual time).
    series_origin_ns: AtomicU64,
    /// Coordinators of the run not finished yet (on every node): the protocol's services
    /// and CN↔CN request handlers serve until it is 0.
    live: AtomicUsize,
    /// Every other compute node of a `--cn` run is done too (true when there are none
    /// to serve): with `live` at 0, services and request handlers stop.
    peers_done: AtomicBool,
    /// Transactions routed between the process's compute nodes, when it has several.
    routes: Option<AnyRoutes>,
}

impl<P: Protocol> Shared<'_, P> {
    fn progress_now(&self, elapsed: Duration) -> Progress {
        let mut p = Progress {
            elapsed,
            committed: 0,
            attempted: 0,
            latency: LatencyCounts::ZERO,
        };
        for t in &self.progress {
            p.committed += t.committed.load(Ordering::Relaxed);
            p.attempted += t.attempted.load(Ordering::Relaxed);
            for (a, b) in p.latency.0.iter_mut().zip(&t.latency) {
                *a += b.load(Ordering::Relaxed);
            }
        }
        p
    }
}

/// What a worker thread hands back when joined.
struct ThreadOutcome<L> {
    stats: RunStats,
    locals: Vec<L>,
    per_mn: Vec<MnCounters>,
    end_ns: u64,
    last_fault: Option<String>,
    /// Every transaction of the thread's coordinators (with `--check`).
    history: Option<History>,
    /// Commits per bucket of the series.
    series: Vec<u64>,
    /// The protocol's figures, summed over the thread's coordinators.
    metrics: Vec<MetricSum>,
    /// The thread's address-cache lookups.
    cache: CacheStats,
}

/// Sets the stop flag if the thread unwinds, so the others end too.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// One worker thread's coordinators, their workload state, its history, and the
/// protocol's service tasks of the thread with their stop signal.
type ThreadSetup<P, L> = (
    dmtx_runtime::Worker,
    Vec<Coordinator<P>>,
    Vec<L>,
    Option<Rc<RefCell<History>>>,
    (ServiceStop, Vec<ServiceTask>),
);

/// Set up worker thread `g` of the run (thread `g % threads` of compute node
/// `g / threads`): its coordinators, their workload state, its history.
fn setup_thread<P: Protocol>(g: u16, shared: &Shared<'_, P>) -> Result<ThreadSetup<P, Local>, RunError> {
    let threads = shared.cfg.threads;
    let worker = shared.cns[(g / threads) as usize].worker(g % threads)?;
    let mut coords = Vec::with_capacity(shared.cfg.coroutines as usize);
    let mut locals = Vec::with_capacity(shared.cfg.coroutines as usize);
    // The thread's coordinators append to one history; no synchronisation needed.
    let history = shared.record_history.then(|| Rc::new(RefCell::new(History::new())));
    for c in 0..shared.cfg.coroutines {
        let mut coord = worker.coordinator(shared.proto, c)?;
        if let Some(h) = &history {
            coord.set_observer(Box::new(Recorder::new(Rc::clone(h))));
        }
        locals.push(
            shared
                .workload
                .local(coord.ctx.id, coordinator_seed(shared.cfg.seed, coord.ctx.id)),
        );
        coords.push(coord);
    }
    let stop = ServiceStop::new();
    let services = worker.services(shared.proto.as_ref(), &stop)?;
    Ok((worker, coords, locals, history, (stop, services)))
}

/// The per-thread counters and limits of thread `t`.
fn thread_ctx<'a, P: Protocol>(t: u16, shared: &'a Shared<'a, P>) -> ThreadCtx<'a> {
    ThreadCtx {
        stop: &shared.stop,
        budget: shared.budget,
        credit_batch: shared.credit_batch,
        credits: Cell::new(match shared.cfg.stop {
            StopRule::Txns(n) => n / shared.cfg.worker_threads() as u64,
            StopRule::Duration(_) => 0,
        }),
        stats: RefCell::new(RunStats::new(shared.types)),
        progress: &shared.progress[t as usize],
        committed: Cell::new(0),
        attempted: Cell::new(0),
        stop_on_fault: (shared.cfg.on_fault == OnFault::Stop).then_some(&shared.fault),
        stop_on_limit: &shared.limit,
        series: RefCell::new(Vec::new()),
        series_bucket_ns: shared.series_bucket_ns,
        series_origin_ns: &shared.series_origin_ns,
        retries: shared.retries,
        measure_from_ns: &shared.measure_from_ns,
        measure_until_ns: &shared.measure_until_ns,
        cache_measuring: Cell::new(false),
        abort_reasons: P::ABORT_REASONS,
    }
}

/// Gather what a thread's coordinators counted once they are done.
fn finish_thread<P: Protocol, L>(
    setup: ThreadSetup<P, L>,
    th: ThreadCtx<'_>,
    memory_nodes: usize,
    end_ns: u64,
) -> ThreadOutcome<L> {
    let (_worker, coords, locals, history, _services) = setup;
    let mut per_mn = vec![MnCounters::default(); memory_nodes];
    let mut last_fault = None;
    let mut metrics = vec![MetricSum::default(); P::METRICS.len()];
    // The thread's coordinators share one cache, and so its counters.
    let cache = coords.first().map(|c| c.ctx.cache.stats()).unwrap_or_default();
    for c in &coords {
        add_mn_counters(&mut per_mn, &c.ctx.per_mn);
        for (a, b) in metrics.iter_mut().zip(&c.ctx.metrics) {
            a.merge(b);
        }
        if let Some(f) = &c.ctx.last_fault {
            last_fault = Some(f.to_string());
        }
    }
    drop(coords);
    let history = history.map(|h| Rc::try_unwrap(h).expect("coordinators dropped").into_inner());
    // A budget handed out but not used (the run was interrupted) is simply dropped.
    ThreadOutcome {
        metrics,
        cache,
        history,
        series: th.series.into_inner(),
        stats: th.stats.into_inner(),
        locals,
        per_mn,
        end_ns,
        last_fault,
    }
}

fn worker_thread<P: Protocol>(t: u16, shared: &Shared<'_, P>) -> Result<ThreadOutcome<Local>, RunError> {
    let _guard = StopOnPanic(&shared.stop);
    // This thread's share of `live`, given back as each coordinator ends, or here if the
    // thread fails before they run, so other threads' services do not wait for them.
    let mut live: Vec<Live<'_>> = (0..shared.cfg.coroutines).map(|_| Live(&shared.live)).collect();
    let mut setup = match setup_thread(t, shared) {
        Ok(s) => s,
        Err(e) => {
            shared.stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    shared.ready.fetch_add(1, Ordering::Release);
    // Spin (yielding) rather than sleep: every thread leaves within microseconds of `go`.
    while !shared.go.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let th = thread_ctx(t, shared);
    {
        let (worker, coords, locals, _, (stop, services)) = &mut setup;
        let mut ex = worker.executor();
        // Services, and the thread's CN↔CN request handler (driven by the executor while
        // any task is left), run until every coordinator of the run is done.
        let serving = !services.is_empty() || worker.rpc().is_some();
        for (coord, local) in coords.iter_mut().zip(locals.iter_mut()) {
            let (th, routes) = (&th, shared.routes.as_ref());
            if serving || routes.is_some() {
                // Each coordinator gives its share back as it ends.
                let live = live.pop();
                ex.spawn(async move {
                    shared.workload.drive(coord, local, th, routes).await;
                    drop(live);
                });
            } else {
                // Nobody waits for this thread's coordinators: their shares go back with
                // the thread's, after the run (or as it unwinds).
                ex.spawn(shared.workload.drive(coord, local, th, routes));
            }
        }
        if serving {
            for s in services.drain(..) {
                ex.spawn(s);
            }
            let (clock, stop, live, peers_done) = (
                Arc::clone(&worker.cn().clock),
                stop.clone(),
                &shared.live,
                &shared.peers_done,
            );
            ex.spawn(async move {
                while live.load(Ordering::Acquire) > 0 || !peers_done.load(Ordering::Acquire) {
                    dmtx_runtime::sleep(clock.as_ref(), SERVICE_STOP_POLL_NS).await;
                }
                stop.raise();
            });
        }
        ex.run(worker.transport().as_ref());
    }
    let end_ns = setup.0.cn().clock.now_ns();
    Ok(finish_thread(setup, th, shared.cfg.memory_nodes as usize, end_ns))
}

/// How often a real-time worker thread whose coordinators are done looks whether every
/// coordinator of the run is ([`Shared::live`]), to stop its services.
const SERVICE_STOP_POLL_NS: u64 = 100_000;

/// One coordinator's share of [`Shared::live`], given back when dropped (the coordinator
/// finished, or its thread failed or unwound).
struct Live<'a>(&'a AtomicUsize);

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `--transport sim`: every thread's coordinators on one deterministic executor, on
/// virtual time; `--duration` is virtual time and the run started at `start_ns`.
/// `hooks.stop` (Ctrl-C) sets the stop flag, and coordinators still running
/// [`INTERRUPT_GRACE_NS`] later are dropped; after a deadline they get
/// [`DRAIN_MAX_NS`]. Progress goes to `hooks.monitor` every [`SIM_TICK_NS`].
fn run_simulated<P: Protocol>(
    shared: &Shared<'_, P>,
    sim: &Sim,
    net: Option<&Arc<dmtx_sim::SimMsgNet>>,
    start_ns: u64,
    hooks: &RunHooks<'_>,
) -> Result<SimRun<Local>, RunError> {
    let baseline: RefCell<Option<SimCounters>> = RefCell::new(None);
    let window_end: RefCell<Option<SimCounters>> = RefCell::new(None);
    let n = shared.cfg.worker_threads() as u16;
    let mut threads = Vec::with_capacity(n as usize);
    for g in 0..n {
        threads.push(setup_thread(g, shared)?);
    }
    let ths: Vec<ThreadCtx<'_>> = (0..n).map(|g| thread_ctx(g, shared)).collect();
    let interrupted = Cell::new(false);
    let counters = |s: &Sim| (s.load(), s.cpu_busy(), s.stats());
    // Timer tasks not yet done (an interrupt can drop them with the coordinators).
    let timers = Cell::new(0usize);
    // Service and request-serving tasks not yet done (dropped with the coordinators at
    // a deadline), and what stops them once every coordinator is done.
    let serving = Cell::new(0usize);
    let live = SimLive {
        left: Cell::new(shared.cfg.coordinators()),
        stops: RefCell::new(Vec::new()),
        serve: dmtx_sim::ServeStop::new(),
    };
    let report = {
        let mut ex = SimExecutor::new(sim);
        // The executor looks at the flag whenever it moves time, so a simulation whose
        // coordinators never end is stopped too.
        ex.interrupt_on(hooks.stop, INTERRUPT_GRACE_NS, || {
            interrupted.set(true);
            shared.stop.store(true, Ordering::Relaxed);
        });
        ex.on_progress(SIM_TICK_NS, |now| {
            let elapsed = Duration::from_nanos(now.saturating_sub(start_ns));
            hooks.monitor.tick(&shared.progress_now(elapsed));
            if let Some(low) = shared.guard.check() {
                shared.memory_low.lock().unwrap().get_or_insert((low, now));
                shared.stop.store(true, Ordering::Relaxed);
            }
        });
        for ((worker, coords, locals, _, (stop, services)), th) in threads.iter_mut().zip(&ths) {
            let cpu = sim.cpu_of(worker.cn().id as u32, worker.thread());
            for (coord, local) in coords.iter_mut().zip(locals.iter_mut()) {
                let (live, routes) = (&live, shared.routes.as_ref());
                ex.spawn_on(cpu, async move {
                    shared.workload.drive(coord, local, th, routes).await;
                    live.done_one();
                });
            }
            live.stops.borrow_mut().push(stop.clone());
            for s in services.drain(..) {
                serving.set(serving.get() + 1);
                let serving = &serving;
                ex.spawn_on(cpu, async move {
                    s.await;
                    serving.set(serving.get() - 1);
                });
            }
            if let (Some(net), Some(rpc)) = (net, worker.rpc()) {
                serving.set(serving.get() + 1);
                let (task, serving) = (dmtx_sim::serve(net, Rc::clone(rpc), live.serve.clone()), &serving);
                ex.spawn_on(cpu, async move {
                    task.await;
                    serving.set(serving.get() - 1);
                });
            }
        }
        let mut until = u64::MAX;
        if let StopRule::Duration(d) = shared.cfg.stop {
            let deadline = (d + shared.cfg.warmup).as_nanos() as u64;
            until = deadline.saturating_add(DRAIN_MAX_NS);
            let (stop, nap, s, snap, timers) = (&shared.stop, sim.sleep(deadline), sim.clone(), &window_end, &timers);
            timers.set(timers.get() + 1);
            ex.spawn(async move {
                nap.await;
                stop.store(true, Ordering::Relaxed);
                *snap.borrow_mut() = Some(counters(&s));
                timers.set(timers.get() - 1);
            });
        }
        if !shared.cfg.warmup.is_zero() {
            let (snap, nap, s, timers) = (
                &baseline,
                sim.sleep(shared.cfg.warmup.as_nanos() as u64),
                sim.clone(),
                &timers,
            );
            timers.set(timers.get() + 1);
            ex.spawn(async move {
                nap.await;
                *snap.borrow_mut() = Some(counters(&s));
                timers.set(timers.get() - 1);
            });
        }
        ex.run_until(until)
            .map_err(|e| RunError::Unsupported(format!("the simulation stopped: {e}")))?
    };
    let reason = match shared.cfg.stop {
        _ if interrupted.get() => StopReason::Interrupt,
        StopRule::Txns(_) => StopReason::Txns,
        StopRule::Duration(_) => StopReason::Duration,
    };
    let end_ns = sim.now();
    let outcomes = threads
        .into_iter()
        .zip(ths)
        .map(|(setup, th)| Ok(finish_thread(setup, th, shared.cfg.memory_nodes as usize, end_ns)))
        .collect();
    Ok(SimRun {
        outcomes,
        reason,
        baseline: baseline.into_inner(),
        window_end: window_end.into_inner(),
        stranded: (report.pending - timers.get() - serving.get()) as u64,
    })
}

/// The coordinators of a simulated run not finished yet, and the stops of the services
/// and request handlers that serve them: raised when the last one finishes.
struct SimLive {
    left: Cell<usize>,
    stops: RefCell<Vec<ServiceStop>>,
    serve: dmtx_sim::ServeStop,
}

impl SimLive {
    fn done_one(&self) {
        let left = self.left.get() - 1;
        self.left.set(left);
        if left == 0 {
            for s in self.stops.borrow().iter() {
                s.raise();
            }
            self.serve.stop();
        }
    }
}

/// The simulator's counters at one instant: fabric load, CPU busy times, event counts.
type SimCounters = (dmtx_sim::FabricLoad, Vec<dmtx_sim::CpuBusy>, dmtx_sim::SimStats);

/// What [`run_simulated`] hands back.
struct SimRun<L> {
    outcomes: Vec<Result<ThreadOutcome<L>, RunError>>,
    reason: StopReason,
    /// The counters at the end of the warm-up (none without one).
    baseline: Option<SimCounters>,
    /// The counters at the deadline (none for `--txns`, or when interrupted before it).
    window_end: Option<SimCounters>,
    /// Coordinators still in a transaction when the run stopped, dropped there.
    stranded: u64,
}

/// What the coordinators of one thread share; single-threaded, so `Cell`s suffice.
struct ThreadCtx<'a> {
    stop: &'a AtomicBool,
    budget: Option<&'a AtomicU64>,
    credit_batch: u64,
    /// `--txns` credits this thread holds.
    credits: Cell<u64>,
    stats: RefCell<RunStats>,
    progress: &'a ThreadProgress,
    committed: Cell<u64>,
    attempted: Cell<u64>,
    /// `--on-fault stop`: where the first fault goes (and the run stops).
    stop_on_fault: Option<&'a Mutex<Option<(String, u64)>>>,
    /// Where the aborts no retry can cure go (and the run stops).
    stop_on_limit: &'a Mutex<Limits>,
    /// Commits per bucket of [`ThreadCtx::series_bucket_ns`] from the series origin.
    series: RefCell<Vec<u64>>,
    /// [`SERIES_BUCKET_NS_REAL`] or [`SERIES_BUCKET_NS_SIM`].
    series_bucket_ns: u64,
    /// Clock time of the series' first bucket.
    series_origin_ns: &'a AtomicU64,
    /// How often an aborted transaction is run again.
    retries: Retries,
    /// When measuring starts (clock ns).
    measure_from_ns: &'a AtomicU64,
    /// When measuring ends (clock ns).
    measure_until_ns: &'a AtomicU64,
    /// Set by the thread's first coordinator past the warm-up, which restarts the
    /// shared address cache's counters.
    cache_measuring: Cell<bool>,
    /// The protocol's own abort reasons, whose specs say which are retried.
    abort_reasons: &'static [AbortReasonSpec],
}

impl ThreadCtx<'_> {
    /// Reserve one commit of the `--txns` budget; false when it is used up.
    #[inline]
    fn take_credit(&self) -> bool {
        let Some(budget) = self.budget else {
            return true;
        };
        let held = self.credits.get();
        if held > 0 {
            self.credits.set(held - 1);
            return true;
        }
        let batch = self.credit_batch;
        let Ok(before) = budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
            (r > 0).then(|| r - r.min(batch))
        }) else {
            return false;
        };
        let got = before.min(batch);
        debug_assert!(got > 0);
        self.credits.set(got - 1);
        true
    }

    /// `--on-fault stop`: a `fault` abort records why and stops the run.
    fn stop_on<P: Protocol>(&self, reason: AbortReason, coord: &Coordinator<P>) {
        if matches!(reason, AbortReason::LogFull | AbortReason::TableFull) {
            let mut limits = self.stop_on_limit.lock().unwrap();
            limits.first.get_or_insert((reason, coord.ctx.clock.now_ns()));
            match reason {
                AbortReason::TableFull => limits.tables_full.extend(coord.ctx.last_table_full),
                _ => {
                    if limits.log_full.is_none() {
                        limits.log_full.clone_from(&coord.ctx.last_log_full);
                    }
                }
            }
            self.stop.store(true, Ordering::Relaxed);
        }
        if let (AbortReason::Fault, Some(slot)) = (reason, self.stop_on_fault) {
            let why = coord
                .ctx
                .last_fault
                .as_ref()
                .map_or("a verb failed".into(), |f| f.to_string());
            slot.lock().unwrap().get_or_insert((why, coord.ctx.clock.now_ns()));
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// An aborted attempt hands its reservation back.
    #[inline]
    fn return_credit(&self) {
        if self.budget.is_some() {
            self.credits.set(self.credits.get() + 1);
        }
    }

    /// Count an attempt in the thread's progress counters (read by the main thread's
    /// status), and a commit's latency in the coarse histogram of [`LatencyCounts`].
    #[inline]
    fn publish(&self, committed: bool, latency_ns: u64) {
        // Single writer per thread: a plain store of the thread's own count.
        let a = self.attempted.get() + 1;
        self.attempted.set(a);
        self.progress.attempted.store(a, Ordering::Relaxed);
        if committed {
            let c = self.committed.get() + 1;
            self.committed.set(c);
            self.progress.committed.store(c, Ordering::Relaxed);
            let slot = &self.progress.latency[latency_bucket(latency_ns)];
            slot.store(slot.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    /// Count a commit that ended at `end_ns` in its bucket of the time series.
    #[inline]
    fn record_series(&self, end_ns: u64) {
        let at = end_ns.saturating_sub(self.series_origin_ns.load(Ordering::Relaxed)) / self.series_bucket_ns;
        let mut s = self.series.borrow_mut();
        let at = at as usize;
        if s.len() <= at {
            // Grows once per bucket of time; a run of 1 s buckets allocates a few times.
            s.resize(at + 1, 0);
        }
        s[at] += 1;
    }
}

/// Whether an abort for `reason` is retried, as its spec says ([`AbortReason::SHARED`]
/// for the shared reasons, `protocol` (the protocol's `ABORT_REASONS`) for its own):
/// the concurrency aborts, whose next attempt may well commit. Not the workload's own
/// decision (`user`: SmallBank's insufficient funds), a lost node (`fault`) or a full
/// table (`table_full`), which the same inputs would meet again.
#[inline]
pub fn retryable(reason: AbortReason, protocol: &'static [AbortReasonSpec]) -> bool {
    reason.retryable(protocol)
}

/// Run transaction `$input` (a reference) of type `$ty`, drawn at `$first_ns`, until it
/// commits or may not be retried ([`drive`]). A macro, not an `async fn`, so the loop of
/// a one-node run has no nested future to poll at every post.
macro_rules! run_txn {
    ($workload:expr, $coord:expr, $local:expr, $th:expr, $state:expr, $ty:expr, $input:expr, $first_ns:expr) => {{
        let (workload, coord, local, th, state, ty, input, first_ns) = (
            $workload,
            &mut *$coord,
            &mut *$local,
            $th,
            &mut *$state,
            $ty,
            $input,
            $first_ns,
        );
        let mut start_ns = first_ns;
        let mut attempts: u32 = 0;
        'attempt: loop {
            if !state.measuring && start_ns >= th.measure_from_ns.load(Ordering::Relaxed) {
                // The warm-up is over: count this coordinator's load from here.
                state.measuring = true;
                coord.ctx.per_mn.iter_mut().for_each(|m| *m = MnCounters::default());
                coord.ctx.metrics.iter_mut().for_each(|m| *m = MetricSum::default());
                if !th.cache_measuring.replace(true) {
                    coord.ctx.cache.reset_stats();
                }
            }
            if attempts > 0 {
                coord.ctx.step(W::TXN_STEP, 1);
            }
            attempts = attempts.saturating_add(1);
            let outcome = workload.run(local, input, coord).await;
            coord.ctx.attempt_end(ty);
            let end_ns = coord.ctx.clock.now_ns();
            let counters = coord.ctx.txn_counters;
            // Before the next attempt or retry (a retry must not meet this attempt's own
            // locks), counted apart from the attempt and outside its latency.
            let cleanup = coord.cleanup().await;
            // Attempts of the warm-up, and those that end after the deadline (the
            // transactions in hand when it came), are run, not counted.
            let counted = state.measuring && end_ns <= th.measure_until_ns.load(Ordering::Relaxed);
            let committed = matches!(outcome, Ok(Outcome::Committed | Outcome::Unsuccessful));
            // From the draw, on whichever node it was drawn (one clock per process).
            let latency_ns = end_ns.saturating_sub(first_ns);
            th.publish(committed, latency_ns);
            if counted {
                th.stats.borrow_mut().cleanup(ty, &cleanup);
            }
            match outcome {
                Ok(o @ (Outcome::Committed | Outcome::Unsuccessful)) => {
                    if counted {
                        th.record_series(end_ns);
                        th.stats
                            .borrow_mut()
                            .commit(ty, &counters, latency_ns, o == Outcome::Committed, attempts);
                    }
                    break 'attempt;
                }
                Ok(Outcome::RolledBack) => {
                    if counted {
                        th.stats.borrow_mut().rolled_back(ty, &counters);
                    }
                    th.return_credit();
                    break 'attempt;
                }
                Err(abort) => {
                    if counted {
                        th.stats.borrow_mut().abort(ty, abort.reason, &counters);
                    }
                    th.stop_on(abort.reason, coord);
                    if retryable(abort.reason, th.abort_reasons)
                        && th.retries.allows(attempts - 1)
                        && !th.stop.load(Ordering::Relaxed)
                    {
                        backoff(&mut state.backoff_rng, attempts).await;
                        start_ns = coord.ctx.clock.now_ns();
                        continue 'attempt;
                    }
                    th.return_credit();
                    break 'attempt;
                }
            }
        }
    }};
}

/// A coordinator's workload state behind one type ([`WorkloadLoop`]).
type Local = Box<dyn std::any::Any + Send>;
/// [`Routes`] of the workload's inputs behind one type ([`WorkloadLoop`]).
type AnyRoutes = Box<dyn std::any::Any + Send + Sync>;

/// What the driver asks of a workload, behind a `dyn` boundary: everything but the
/// planning is compiled once per protocol, not once per protocol and workload. The
/// boundary is around each coordinator's whole loop ([`WorkloadLoop::drive`], one boxed
/// future per coordinator and run), so no transaction crosses it.
trait WorkloadLoop<P: Protocol>: Sync {
    fn tables(&self) -> Vec<TableSpec>;
    fn txn_types(&self) -> &'static [&'static str];
    fn load(&self, table: u32, insert: &mut dmtx_workloads::RecordSink<'_>) -> Result<(), dmtx_store::StoreError>;
    fn local(&self, coord: CoordId, seed: u64) -> Local;
    fn check(&self, locals: Vec<Local>, snapshot: &Snapshot) -> Result<String, dmtx_workloads::InvariantError>;
    fn metrics(&self, counts: &[TypeCounts], elapsed_s: f64) -> Vec<dmtx_workloads::Metric>;
    /// Inboxes for transactions routed among `nodes` compute nodes.
    fn routes(&self, nodes: usize, coordinators_per_node: usize) -> AnyRoutes;
    /// The coordinator's loop ([`drive`]); `local` and `routes` are this workload's.
    fn drive<'a>(
        &'a self,
        coord: &'a mut Coordinator<P>,
        local: &'a mut Local,
        th: &'a ThreadCtx<'a>,
        routes: Option<&'a AnyRoutes>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;
}

/// A workload of type `W` as the driver sees it.
struct Typed<W>(W);

impl<P: Protocol, W: Workload> WorkloadLoop<P> for Typed<W> {
    fn tables(&self) -> Vec<TableSpec> {
        self.0.tables()
    }

    fn txn_types(&self) -> &'static [&'static str] {
        self.0.txn_types()
    }

    fn load(&self, table: u32, insert: &mut dmtx_workloads::RecordSink<'_>) -> Result<(), dmtx_store::StoreError> {
        self.0.load(table, insert)
    }

    fn local(&self, coord: CoordId, seed: u64) -> Local {
        Box::new(self.0.local(coord, seed))
    }

    fn check(&self, locals: Vec<Local>, snapshot: &Snapshot) -> Result<String, dmtx_workloads::InvariantError> {
        let locals: Vec<W::Local> = locals
            .into_iter()
            .map(|l| *l.downcast::<W::Local>().expect("every local was made by this workload"))
            .collect();
        self.0.check(&locals, snapshot)
    }

    fn metrics(&self, counts: &[TypeCounts], elapsed_s: f64) -> Vec<dmtx_workloads::Metric> {
        self.0.metrics(counts, elapsed_s)
    }

    fn routes(&self, nodes: usize, coordinators_per_node: usize) -> AnyRoutes {
        Box::new(Routes::<W::Input>::new(nodes, coordinators_per_node))
    }

    fn drive<'a>(
        &'a self,
        coord: &'a mut Coordinator<P>,
        local: &'a mut Local,
        th: &'a ThreadCtx<'a>,
        routes: Option<&'a AnyRoutes>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>> {
        let local = local.downcast_mut::<W::Local>().expect("a local of this workload");
        let routes = routes.map(|r| r.downcast_ref::<Routes<W::Input>>().expect("routes of this workload"));
        Box::pin(drive(&self.0, coord, local, th, routes))
    }
}

/// One coordinator's loop: draw a transaction, run it until it commits or may not be
/// retried ([`Retries`], [`retryable`]), then the next, until stopped; every attempt is
/// counted. After every attempt the protocol's cleanup is awaited
/// ([`Coordinator::cleanup`], counted apart), and before the loop ends its background
/// work ([`Coordinator::drain`]).
///
/// A committed transaction's latency runs from its first attempt's start to the commit
/// (what TPC-C and BenchBase report); every attempt, and every abort, goes through
/// [`ThreadCtx::stop_on`]. An attempt that ends outside the measured window is run but
/// not counted.
async fn drive<P: Protocol, W: Workload>(
    workload: &W,
    coord: &mut Coordinator<P>,
    local: &mut W::Local,
    th: &ThreadCtx<'_>,
    routes: Option<&Routes<W::Input>>,
) {
    let mut state = DriveState {
        measuring: false,
        backoff_rng: splitmix64(coord.ctx.id.global()),
    };
    if let Some(routes) = routes {
        // Boxed: its state (a held job, the inbox) is no part of a one-node run's future.
        return Box::pin(drive_routed(workload, coord, local, th, routes, state)).await;
    }
    // One node (or a protocol that does not route): every transaction runs where it is drawn.
    loop {
        if th.stop.load(Ordering::Relaxed) || !th.take_credit() {
            // The run ends with no protocol work in flight: the last attempt's cleanup
            // ran after it; what the protocol left running is finished here. Its posts load
            // the memory nodes and are in no transaction type's counters.
            coord.drain().await;
            return;
        }
        let first_ns = coord.ctx.clock.now_ns();
        coord.ctx.step(W::TXN_STEP, 1);
        let (ty, input) = workload.draw(local);
        run_txn!(workload, coord, local, th, &mut state, ty, &input, first_ns);
    }
}

/// [`drive`] for a protocol that routes transactions among the process's nodes.
async fn drive_routed<P: Protocol, W: Workload>(
    workload: &W,
    coord: &mut Coordinator<P>,
    local: &mut W::Local,
    th: &ThreadCtx<'_>,
    routes: &Routes<W::Input>,
    mut state: DriveState,
) {
    let me = coord.ctx.id.cn;
    let inbox = &routes.inboxes[me as usize];
    // Apart from the workload's draws, so routing leaves them unchanged.
    let mut route_rng = splitmix64(coord.ctx.id.global() ^ coord.ctx.id.global().rotate_left(32) ^ 0x726f_7574);
    // Drawn here, routed to a node whose inbox was full: pushed again next round.
    let mut held: Option<Job<W::Input>> = None;
    // Counted in `routes.drawing`.
    let mut drawing = true;
    loop {
        // What other nodes routed here runs first; the budget was taken where it was drawn.
        if let Some(Job { ty, input, first_ns }) = inbox.pop() {
            run_txn!(workload, coord, local, th, &mut state, ty, &input, first_ns);
            continue;
        }
        let job = match held.take() {
            Some(job) => job,
            None => {
                let draws = !th.stop.load(Ordering::Relaxed) && th.take_credit();
                // Counted among the coordinators that may route here while it draws
                // (again, after a budget came back).
                match (drawing, draws) {
                    (false, true) => routes.drawing.fetch_add(1, Ordering::AcqRel),
                    (true, false) => routes.drawing.fetch_sub(1, Ordering::AcqRel),
                    _ => 0,
                };
                drawing = draws;
                if !draws {
                    // Out of budget (`--txns`), a coordinator stays while others may still
                    // route here; once the run is stopped nobody draws again. A node's last
                    // coordinator leaves only with its inbox empty.
                    let others_draw = !th.stop.load(Ordering::Relaxed) && routes.drawing.load(Ordering::Acquire) > 0;
                    if others_draw || !inbox.leave() {
                        dmtx_runtime::yield_now().await;
                        continue;
                    }
                    coord.drain().await;
                    return;
                }
                let first_ns = coord.ctx.clock.now_ns();
                coord.ctx.step(W::TXN_STEP, 1);
                let (ty, input) = workload.draw(local);
                Job { ty, input, first_ns }
            }
        };
        route_rng = splitmix64(route_rng);
        let to = coord.proto.route(&Route {
            from: me,
            nodes: routes.inboxes.len() as u16,
            ty: job.ty,
            key: workload.route_key(&job.input),
            random: route_rng,
        });
        assert!(
            (to as usize) < routes.inboxes.len(),
            "`{}` routed a transaction to compute node {to} of {}",
            P::NAME,
            routes.inboxes.len()
        );
        let job = if to == me {
            job
        } else {
            match routes.inboxes[to as usize].push(job, routes.jobs_max) {
                Push::Queued => continue,
                Push::Full(job) => {
                    // Serve this node's inbox meanwhile: two full nodes waiting on each
                    // other would never drain.
                    held = Some(job);
                    dmtx_runtime::yield_now().await;
                    continue;
                }
                // Every coordinator there has stopped (a budget handed back late).
                Push::Closed(job) => job,
            }
        };
        run_txn!(workload, coord, local, th, &mut state, job.ty, &job.input, job.first_ns);
    }
}

/// What a coordinator's loop keeps from one transaction to the next.
struct DriveState {
    /// The warm-up is over for this coordinator.
    measuring: bool,
    backoff_rng: u64,
}

/// Transactions routed from one compute node to another of this process
/// ([`Protocol::route`]): one inbox per node, shared by the node's coordinators, which
/// run what it holds before drawing their own. A run of one node, or of a protocol that
/// does not route ([`Protocol::routes`]), has none.
struct Routes<I> {
    inboxes: Vec<Inbox<I>>,
    /// Coordinators (of every node) that may still draw, and so route: until it is 0 (or
    /// the run is stopped), a coordinator out of budget stays to run what is routed to
    /// its node.
    drawing: AtomicUsize,
    /// Jobs one inbox holds at most: a coordinator whose target is full serves its own
    /// node's inbox until there is room.
    jobs_max: usize,
}

impl<I> Routes<I> {
    /// Inboxes for `nodes` nodes of `coordinators` coordinators each.
    fn new(nodes: usize, coordinators: usize) -> Self {
        Self {
            drawing: AtomicUsize::new(nodes * coordinators),
            inboxes: (0..nodes)
                .map(|_| Inbox {
                    state: Mutex::new(InboxState {
                        jobs: std::collections::VecDeque::new(),
                        active: coordinators,
                    }),
                    queued: AtomicUsize::new(0),
                })
                .collect(),
            jobs_max: 2 * coordinators,
        }
    }
}

/// A drawn transaction: its type, inputs, and when it was drawn (its latency's start).
struct Job<I> {
    ty: usize,
    input: I,
    first_ns: u64,
}

/// One node's routed transactions.
struct Inbox<I> {
    state: Mutex<InboxState<I>>,
    /// Jobs queued: read without the lock before every draw.
    queued: AtomicUsize,
}

struct InboxState<I> {
    jobs: std::collections::VecDeque<Job<I>>,
    /// The node's coordinators still running; at 0 the inbox takes no more jobs.
    active: usize,
}

/// What [`Inbox::push`] did.
enum Push<I> {
    Queued,
    Full(Job<I>),
    Closed(Job<I>),
}

impl<I> Inbox<I> {
    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState<I>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn pop(&self) -> Option<Job<I>> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut st = self.lock();
        let job = st.jobs.pop_front();
        self.queued.store(st.jobs.len(), Ordering::Release);
        job
    }

    fn push(&self, job: Job<I>, jobs_max: usize) -> Push<I> {
        let mut st = self.lock();
        if st.active == 0 {
            return Push::Closed(job);
        }
        if st.jobs.len() >= jobs_max {
            return Push::Full(job);
        }
        st.jobs.push_back(job);
        self.queued.store(st.jobs.len(), Ordering::Release);
        Push::Queued
    }

    /// A coordinator of the node stops, unless jobs are queued (then it must run them:
    /// `false`). The last one to stop closes the inbox, so no job is left behind.
    fn leave(&self) -> bool {
        let mut st = self.lock();
        if !st.jobs.is_empty() {
            return false;
        }
        st.active -= 1;
        true
    }
}

/// The record's time series: `series` (commits per bucket from the start of the
/// window) cut to the buckets the window covers, `ceil(elapsed / bucket)`. A commit
/// that ends exactly at the deadline falls just past the last whole bucket and is
/// counted in the last one, so the buckets sum to the committed count.
fn time_series(mut series: Vec<u64>, bucket_ns: u64, elapsed: Duration, clock: crate::results::Clock) -> TimeSeries {
    let buckets = (elapsed.as_nanos() as u64).div_ceil(bucket_ns).max(1) as usize;
    if series.len() > buckets {
        let late: u64 = series.drain(buckets..).sum();
        series[buckets - 1] += late;
    }
    series.resize(buckets, 0);
    TimeSeries {
        bucket_s: bucket_ns as f64 / 1e9,
        clock,
        committed: series,
    }
}

/// Largest exponent of the backoff before a retry: at most 2^this yields.
pub const RETRY_BACKOFF_EXP_MAX: u32 = 10;

/// Wait before retry `attempts` of a transaction: yield to the thread's other
/// coordinators a random number of times below `2^min(attempts, RETRY_BACKOFF_EXP_MAX)`
/// (randomized exponential backoff, as Deneva's abort queue does in time). Without
/// it, transactions that abort each other on partly taken locks retry in step and
/// abort each other again. Counted in yields, not clock time, so it ends on the
/// simulator too whatever else is pending; a coordinator alone on its thread has
/// nobody to yield to and retries at once.
async fn backoff(rng: &mut u64, attempts: u32) {
    *rng = splitmix64(*rng);
    let yields = *rng % (1u64 << attempts.min(RETRY_BACKOFF_EXP_MAX));
    for _ in 0..yields {
        dmtx_runtime::yield_now().await;
    }
}

/// Add each node's counters of `from` into `into`.
fn add_mn_counters(into: &mut [MnCounters], from: &[MnCounters]) {
    for (a, b) in into.iter_mut().zip(from) {
        for (x, y) in a.ops.iter_mut().zip(b.ops) {
            *x += y;
        }
        a.bytes_in += b.bytes_in;
        a.bytes_out += b.bytes_out;
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the memory guard trips when available memory is below what the check and
    /// the system need, and not otherwise; it looks at most every `EVERY`.
    #[test]
    fn test_memory_guard_trips_below_its_threshold() {
        if crate::plan::host_available_bytes().is_none() {
            return; // no /proc/meminfo: the guard is off
        }
        let guard = |floor: u64| {
            let mut g = MemoryGuard::new(true, 0, 2);
            g.floor = floor;
            g
        };
        let low = guard(u64::MAX / 4);
        // Its first look waits one period from its creation.
        low.last_ms.store(0, Ordering::Relaxed);
        std::thread::sleep(MemoryGuard::EVERY);
        let tripped = low.check().expect("no host has that much memory available");
        assert!(tripped.available < tripped.threshold);
        assert!(low.check().is_none(), "looks again only after a period");
        let fine = guard(0);
        std::thread::sleep(MemoryGuard::EVERY);
        assert!(fine.check().is_none());
        let off = MemoryGuard::new(false, 0, 2);
        std::thread::sleep(MemoryGuard::EVERY);
        assert!(off.check().is_none(), "a --cluster run's memory nodes are elsewhere");
    }

    #[test]
    fn test_seeds_differ_per_coordinator_and_run() {
        let c = |thread, coroutine| CoordId {
            cn: 0,
            thread,
            coroutine,
        };
        let a = coordinator_seed(1, c(0, 0));
        assert_ne!(a, coordinator_seed(1, c(0, 1)));
        assert_ne!(a, coordinator_seed(1, c(1, 0)));
        assert_ne!(a, coordinator_seed(2, c(0, 0)));
        assert_eq!(a, coordinator_seed(1, c(0, 0)));
    }

    #[test]
    fn test_latency_buckets_are_ordered_and_within_an_eighth() {
        let mut last = 0;
        for ns in (0..100_000u64).chain((17..38).map(|e| (1 << e) - 1)).chain([u64::MAX]) {
            let b = latency_bucket(ns);
            assert!(b < LATENCY_BUCKETS, "{ns}");
            assert!(b >= last, "monotonic at {ns}");
            last = b;
            let top = latency_bucket_ns_max(b);
            let v = ns.min(LATENCY_BUCKET_NS_MAX);
            assert!(top >= v, "{ns}: bucket {b} tops at {top}");
            assert!(top - v <= v / 8, "{ns}: bucket {b} tops at {top}, over 1/8 above");
            assert_eq!(latency_bucket(top), b, "{ns}");
        }
        let mut c = LatencyCounts::ZERO;
        for ns in 1..=100u64 {
            c.0[latency_bucket(ns * 1000)] += 1;
        }
        let p99 = c.quantile_ns(0.99).unwrap();
        assert!((99_000..=99_000 + 99_000 / 8).contains(&p99), "{p99}");
        let earlier = c;
        c.0[latency_bucket(5_000_000)] += 1;
        assert_eq!(
            c.since(&earlier).quantile_ns(0.5),
            Some(latency_bucket_ns_max(latency_bucket(5_000_000)))
        );
        assert_eq!(LatencyCounts::ZERO.quantile_ns(0.99), None);
    }

    #[test]
    fn addr_cache_entries_default_is_the_runtime_default_and_zero_is_refused() {
        assert_eq!(
            addr_cache_entries(&Knobs::default()).unwrap(),
            dmtx_runtime::ADDR_CACHE_ENTRIES_DEFAULT
        );
        let e = addr_cache_entries(&Knobs::parse(["addr_cache_entries=0"]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("addr_cache_entries") && e.contains("1 to 2^40"), "{e}");
    }

    #[test]
    fn test_retries_knob() {
        let r = |v: &str| Retries::from_knobs(&Knobs::parse([format!("retry_aborts={v}").as_str()]).unwrap());
        assert_eq!(Retries::from_knobs(&Knobs::default()), Ok(Retries::Unbounded));
        assert_eq!(r("Unbounded"), Ok(Retries::Unbounded));
        assert_eq!(r("0"), Ok(Retries::AtMost(0)));
        assert_eq!(r("20"), Ok(Retries::AtMost(20)));
        let e = r("-1").unwrap_err().to_string();
        assert!(e.contains("retry_aborts") && e.contains("`unbounded`"), "{e}");
        assert!(!Retries::AtMost(0).allows(0));
        assert!(Retries::AtMost(2).allows(1) && !Retries::AtMost(2).allows(2));
        assert!(Retries::Unbounded.allows(u32::MAX));
        assert!(retryable(AbortReason::LockConflict, &[]) && retryable(AbortReason::Validation, &[]));
        for no in [
            AbortReason::User,
            AbortReason::Fault,
            AbortReason::TableFull,
            AbortReason::LogFull,
        ] {
            assert!(!retryable(no, &[]), "{no}");
        }
        const MINE: &[AbortReasonSpec] = &[
            AbortReasonSpec::new("lease_expired", true, ""),
            AbortReasonSpec::new("too_old", false, ""),
        ];
        assert!(retryable(AbortReason::Protocol(0), MINE), "the protocol's spec says so");
        assert!(!retryable(AbortReason::Protocol(1), MINE));
    }

    #[test]
    fn test_time_series_covers_the_window() {
        let s = |v: Vec<u64>, ms: u64| {
            time_series(v, 1_000_000_000, Duration::from_millis(ms), crate::results::Clock::Real).committed
        };
        assert_eq!(s(vec![5, 6], 2000), [5, 6]);
        // A commit at the deadline lands past the last whole bucket: counted in it.
        assert_eq!(s(vec![5, 6, 1], 2000), [5, 7]);
        assert_eq!(s(vec![5], 2500), [5, 0, 0], "buckets with no commit are zeros");
        assert_eq!(s(vec![], 0), [0]);
    }

    #[test]
    fn test_credits_hand_out_exactly_the_budget() {
        let budget = AtomicU64::new(10);
        let (measure_from, measure_until) = (AtomicU64::new(0), AtomicU64::new(u64::MAX));
        let progress = ThreadProgress::default();
        let stop = AtomicBool::new(false);
        let limits = Mutex::new(Limits::default());
        let th = ThreadCtx {
            stop: &stop,
            budget: Some(&budget),
            credit_batch: 4,
            credits: Cell::new(0),
            stats: RefCell::new(RunStats::new(1)),
            progress: &progress,
            committed: Cell::new(0),
            attempted: Cell::new(0),
            stop_on_fault: None,
            stop_on_limit: &limits,
            series: RefCell::new(Vec::new()),
            series_bucket_ns: SERIES_BUCKET_NS_REAL,
            series_origin_ns: &measure_from,
            retries: Retries::Unbounded,
            measure_from_ns: &measure_from,
            measure_until_ns: &measure_until,
            cache_measuring: Cell::new(false),
            abort_reasons: &[],
        };
        let (mut committed, mut aborted) = (0, 0);
        while th.take_credit() {
            if committed == 3 && aborted == 0 {
                aborted += 1;
                th.return_credit();
            } else {
                committed += 1;
            }
        }
        assert_eq!(committed, 10);
        assert_eq!(aborted, 1);
        assert_eq!(budget.load(Ordering::Relaxed), 0);
    }
}
