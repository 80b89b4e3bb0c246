//! The timestamp service (`dmtx_runtime::timestamp`) on the simulator: every kind's
//! timestamps are unique, increase per coordinator and follow real (virtual) time
//! across compute nodes; each kind costs what its module doc says (the free oracle
//! nothing, the RPC oracle one CN↔CN round trip by the NIC model's `time_send` plus the
//! host's CPU, FAA one lone FAA's latency); and an oracle whose host is crashed or cut
//! off fails its callers after the RPC retries instead of hanging or repeating a
//! timestamp.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use dmtx_memnode::{Control, LocalCluster};
use dmtx_runtime::timestamp::STEP_GRANT;
use dmtx_runtime::{
    Cn, CoordCtx, RpcConfig, RpcError, RpcTimestamps, TimestampService, Timestamps, TsError, TsKind, Worker,
};
use dmtx_sim::nic::FabricState;
use dmtx_sim::{serve, CpuMode, ServeStop, Sim, SimConfig, SimExecutor, SimFabric, SimMsgNet};
use dmtx_verbs::msg::ENTRY_HEADER_BYTES;
use dmtx_verbs::{MnId, OpKind, Post, RemotePtr};
use rand::Rng;

/// A simulated cluster: one memory node, `cns × threads` workers with messaging and
/// probes (their steps are charged to their virtual CPUs), and a timestamp service.
struct Cluster {
    sim: Sim,
    net: Arc<SimMsgNet>,
    workers: Vec<Worker>,
    ts: Timestamps,
}

fn cluster(seed: u64, cpu: CpuMode, cns: u16, threads: u16, kind: TsKind, rpc: RpcConfig) -> Cluster {
    let control = Arc::new(LocalCluster::new(1, 1 << 16));
    let ts = Timestamps::setup(kind, control.as_ref()).unwrap();
    let region = Arc::clone(control.node(MnId(0)).unwrap().region());
    let mut config = SimConfig::new(seed);
    config.cpu.mode = cpu;
    let sim = Sim::new(config, vec![region]);
    let net = SimMsgNet::new(&sim, cns, threads);
    let mut workers = Vec::new();
    for id in 0..cns {
        let fabric = Arc::new(SimFabric::new(&sim, u32::from(id)));
        let cn = Cn::connect(
            id,
            fabric.clone(),
            Arc::clone(&control) as Arc<dyn Control>,
            Arc::new(sim.clock(0, 0).unwrap()),
        )
        .unwrap()
        .with_messaging(Arc::new(net.fabric(id)), rpc)
        .with_probes(fabric);
        for t in 0..threads {
            workers.push(cn.worker(t).unwrap());
        }
    }
    Cluster { sim, net, workers, ts }
}

impl Cluster {
    /// Coordinator contexts `0..coros` of every worker, attached to the service.
    fn contexts(&self, coros: u16) -> Vec<CoordCtx> {
        let mut out = Vec::new();
        for w in &self.workers {
            for k in 0..coros {
                let ctx = w.ctx(k);
                self.ts.attach(&ctx).unwrap();
                out.push(ctx);
            }
        }
        out
    }

    /// Spawn every worker's `serve` task on its CPU.
    fn serve_all<'a>(&self, ex: &mut SimExecutor<'a>, stop: &ServeStop) {
        for w in &self.workers {
            let rpc = Rc::clone(w.rpc().unwrap());
            let cpu = self.sim.cpu_of(u32::from(rpc.addr().cn), rpc.addr().thread);
            ex.spawn_on(cpu, serve(&self.net, rpc, stop.clone()));
        }
    }

    fn cpu_of(&self, ctx: &CoordCtx) -> dmtx_sim::CpuId {
        self.sim.cpu_of(u32::from(ctx.id.cn), ctx.id.thread)
    }
}

fn rpc_default() -> RpcConfig {
    RpcConfig::default()
}

// ---------------------------------------------------------------------------------------
// Uniqueness, monotonicity, real-time order

const CNS: u16 = 3;
const THREADS: u16 = 2;
const COROS: u16 = 3;
const REQS: usize = 40;

/// One request: when it was issued and answered (virtual ns), and what it got.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Grant {
    coord: u64,
    start_ns: u64,
    end_ns: u64,
    first: u64,
    n: u64,
}

/// Every coordinator of 3 CNs × 2 threads × 3 coroutines makes [`REQS`] requests (one
/// timestamp or a range of 1–4), with random think time between them.
fn grants(seed: u64, kind: TsKind) -> (Vec<Grant>, Vec<dmtx_verbs::PostCounters>) {
    let c = cluster(seed, CpuMode::Model, CNS, THREADS, kind, rpc_default());
    let mut ctxs = c.contexts(COROS);
    let stop = ServeStop::after(ctxs.len());
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&c.sim);
    c.serve_all(&mut ex, &stop);
    for ctx in ctxs.iter_mut() {
        let (sim, ts, log, stop) = (c.sim.clone(), &c.ts, Rc::clone(&log), stop.clone());
        let mut rng = c.sim.fork_rng();
        let cpu = c.cpu_of(ctx);
        ex.spawn_on(cpu, async move {
            for _ in 0..REQS {
                let n = rng.random_range(1..=4u32);
                let start_ns = sim.now();
                let r = ts.next_range(ctx, n).await.unwrap();
                log.borrow_mut().push(Grant {
                    coord: ctx.id.global(),
                    start_ns,
                    end_ns: sim.now(),
                    first: r.start,
                    n: r.end - r.start,
                });
                sim.sleep(rng.random_range(0..3_000)).await;
            }
            stop.done_one();
        });
    }
    let report = ex.run().unwrap();
    assert_eq!(report.pending, 0);
    let counters = ctxs.iter().map(|c| c.txn_counters).collect();
    let log = log.borrow().clone();
    (log, counters)
}

/// Goal: for every kind, on the simulator with CPU costs on, timestamps are never 0 and
/// never granted twice, increase per coordinator, and respect real time: a request
/// answered before another was issued got smaller timestamps (invariant 2, what MVCC's
/// `T_start` needs). The same seed gives the same grants.
#[test]
fn timestamps_are_unique_and_follow_virtual_time_for_every_kind() {
    for kind in TsKind::ALL {
        let (log, counters) = grants(17, kind);
        assert_eq!(log.len(), (CNS * THREADS * COROS) as usize * REQS);
        let mut seen = BTreeSet::new();
        for g in &log {
            assert!(g.first > 0 && g.n >= 1, "{kind}: {g:?}");
            for t in g.first..g.first + g.n {
                assert!(seen.insert(t), "{kind}: timestamp {t} granted twice");
            }
        }
        // Per coordinator, in issue order.
        let mut last = std::collections::BTreeMap::new();
        for g in &log {
            if let Some(prev) = last.insert(g.coord, g.first + g.n - 1) {
                assert!(prev < g.first, "{kind}: coordinator {} went back", g.coord);
            }
        }
        // Real time: sort by answer time; every grant exceeds all answered strictly
        // before it was issued.
        let mut by_end: Vec<&Grant> = log.iter().collect();
        by_end.sort_by_key(|g| g.end_ns);
        let mut max_before = Vec::with_capacity(by_end.len());
        let mut m = 0;
        for g in &by_end {
            m = m.max(g.first + g.n - 1);
            max_before.push(m);
        }
        let mut checked = 0;
        for g in &log {
            let k = by_end.partition_point(|h| h.end_ns < g.start_ns);
            if k > 0 {
                assert!(
                    max_before[k - 1] < g.first,
                    "{kind}: {g:?} is below a timestamp granted before it was asked for"
                );
                checked += 1;
            }
        }
        assert!(checked > log.len() / 2, "{kind}: the order was barely exercised");
        // Counting: one request each; waited for unless local.
        for (i, c) in counters.iter().enumerate() {
            assert_eq!(c.ts_requests, REQS as u64);
            let on_host = i < COROS as usize; // cn0/t0's coordinators come first
            let waited = match kind {
                TsKind::Oracle => 0,
                TsKind::Rpc if on_host => 0,
                _ => REQS as u64,
            };
            assert_eq!(c.ts_rtts, waited, "{kind} coordinator {i}");
            assert_eq!((c.rtts, c.ops_total()), (0, 0), "{kind}: not the protocol's verbs");
        }
        assert_eq!(grants(17, kind).0, log, "{kind}: one seed, one run");
        eprintln!(
            "{kind}: {} grants, {} timestamps, {checked} real-time pairs checked",
            log.len(),
            seen.len()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Cost

/// Virtual ns of one `next()` by coordinator 0 of worker `(cn, thread)`, measured inside
/// its task, after `warm` earlier `next()`s; and the coordinator's counters.
fn one_timestamp_ns(
    cpu: CpuMode,
    kind: TsKind,
    cn: u16,
    thread: u16,
    warm: usize,
) -> (Sim, u64, dmtx_verbs::PostCounters) {
    let c = cluster(3, cpu, 2, 2, kind, rpc_default());
    let mut ctxs = c.contexts(1);
    let stop = ServeStop::after(1);
    let took = Rc::new(Cell::new(0));
    let mut ex = SimExecutor::new(&c.sim);
    c.serve_all(&mut ex, &stop);
    let at = ctxs
        .iter()
        .position(|x| x.id.cn == cn && x.id.thread == thread)
        .unwrap();
    let ctx = &mut ctxs[at];
    let cpu_id = c.cpu_of(ctx);
    let (sim, ts, t, st) = (c.sim.clone(), &c.ts, Rc::clone(&took), stop.clone());
    ex.spawn_on(cpu_id, async move {
        for _ in 0..warm {
            ts.next(ctx).await.unwrap();
        }
        // Let the link and CPU go idle so the measured request is uncontended.
        sim.sleep(100_000).await;
        ctx.txn_counters = Default::default();
        let t0 = sim.now();
        ts.next(ctx).await.unwrap();
        t.set(sim.now() - t0);
        st.done_one();
    });
    ex.run().unwrap();
    let counters = ctxs[at].txn_counters;
    (c.sim, took.get(), counters)
}

/// Virtual ns of a lone FAA on memory node 0 posted by cn1/t0 through its
/// `CoordCtx::post`, on the same cluster shape.
fn lone_faa_ns(cpu: CpuMode) -> u64 {
    let c = cluster(3, cpu, 2, 2, TsKind::Oracle, rpc_default());
    let mut ctxs = c.contexts(1);
    let at = ctxs.iter().position(|x| x.id.cn == 1 && x.id.thread == 0).unwrap();
    let ctx = &mut ctxs[at];
    let took = Rc::new(Cell::new(0));
    let mut ex = SimExecutor::new(&c.sim);
    let (sim, t) = (c.sim.clone(), Rc::clone(&took));
    let cpu_id = c.cpu_of(ctx);
    ex.spawn_on(cpu_id, async move {
        sim.sleep(100_000).await;
        let mut p = Post::new();
        p.faa(RemotePtr::new(MnId(0), 4096), 1);
        let t0 = sim.now();
        ctx.post(&mut p).await.unwrap();
        t.set(sim.now() - t0);
        assert_eq!(ctx.txn_counters.rtts, 1);
    });
    ex.run().unwrap();
    took.get()
}

/// Goal: the free oracle, and the RPC oracle taken on its host thread, cost no virtual
/// time and no round trip, even with the CPU model on (no message, not even a yield).
#[test]
fn the_oracle_is_free_and_so_is_the_rpc_oracle_on_its_host_thread() {
    for (kind, cn) in [(TsKind::Oracle, 1), (TsKind::Oracle, 0), (TsKind::Rpc, 0)] {
        let (_, ns, c) = one_timestamp_ns(CpuMode::Model, kind, cn, 0, 3);
        eprintln!("{kind} on cn{cn}/t0: {ns} ns");
        assert_eq!(ns, 0, "{kind} on cn{cn}");
        assert_eq!((c.ts_requests, c.ts_rtts, c.rtts), (1, 0, 0), "{kind} on cn{cn}");
    }
}

/// Goal: with CPU costs off, an RPC timestamp from another CN takes exactly the NIC
/// model's two `time_send`s (the 5-byte request and the 8-byte reply, each with its
/// entry header, one after the other on idle links); with CPU costs on, it also pays four
/// polls, the messaging CPU steps and the host's `ts.grant` (within one more poll).
#[test]
fn an_rpc_timestamp_costs_one_cn_round_trip() {
    let (sim, ns, c) = one_timestamp_ns(CpuMode::Off, TsKind::Rpc, 1, 1, 3);
    let nic = &sim.config().nic;
    let mut st = FabricState::default();
    let req = (ENTRY_HEADER_BYTES + 1 + 4) as u64;
    let reply = (ENTRY_HEADER_BYTES + 8) as u64;
    let arrive = nic.time_send(&mut st, 1, 0, req, 0);
    let want = nic.time_send(&mut st, 0, 1, reply, arrive);
    eprintln!("rpc timestamp, CPU off: {ns} ns (time_send model {want} ns)");
    assert_eq!(ns, want);
    assert_eq!((c.ts_requests, c.ts_rtts, c.rtts), (1, 1, 0));

    let (sim, ns, _) = one_timestamp_ns(CpuMode::Model, TsKind::Rpc, 1, 1, 3);
    let cpu = &sim.config().cpu;
    let (send, recv, poll, grant) = (
        cpu.step_ns("msg.send"),
        cpu.step_ns("msg.recv"),
        cpu.scaled(cpu.poll_ns),
        cpu.step_ns(STEP_GRANT),
    );
    // Every worker's `serve` task runs on its CPU (as LOTUS runs its RPCs on the worker
    // threads), so four polls are on the path: the caller's (it pushes the request), its
    // thread's serve pass (flush: send), the host's serve pass (recv, grant, send), and
    // the caller thread's serve pass (recv) that wakes the caller.
    let least = want + 4 * poll + 2 * send + 2 * recv + grant;
    eprintln!("rpc timestamp, CPU model: {ns} ns (least {least}, + up to one poll {poll})");
    assert!(
        ns >= least && ns <= least + poll,
        "{ns} ns, expected {least}..={}",
        least + poll
    );
}

/// Goal: a FAA timestamp costs exactly what a lone FAA on the same memory node costs
/// (CPU off and on), and is counted as a timestamp round trip, not a protocol RTT.
#[test]
fn a_faa_timestamp_costs_one_memory_node_round_trip() {
    for cpu in [CpuMode::Off, CpuMode::Model] {
        let (_, ns, c) = one_timestamp_ns(cpu, TsKind::Faa, 1, 0, 3);
        let lone = lone_faa_ns(cpu);
        eprintln!("faa timestamp, CPU {cpu:?}: {ns} ns (lone FAA {lone} ns)");
        assert_eq!(ns, lone, "CPU {cpu:?}");
        assert_eq!((c.ts_requests, c.ts_rtts, c.rtts), (1, 1, 0));
        assert_eq!(c.ops_of(OpKind::Faa), 0, "the FAA is not one of the protocol's ops");
    }
}

// ---------------------------------------------------------------------------------------
// Failures

/// What callers on cn1 saw while the oracle's host (cn0/t0) failed.
#[derive(Debug, Default)]
struct Seen {
    /// (virtual ns, timestamp) of every success.
    ok: Vec<(u64, u64)>,
    /// (virtual ns, error) of every failure.
    err: Vec<(u64, TsError)>,
}

/// Two coordinators on cn1 take a timestamp every 5 µs until `until_ns`, under the
/// fault script `faults`; the host's own CN may crash (its tasks end).
fn callers_under(faults: &str, rpc: RpcConfig, until_ns: u64) -> (Seen, dmtx_runtime::rpc::RpcStats) {
    let c = cluster(5, CpuMode::Model, 2, 1, TsKind::Rpc, rpc);
    c.sim.install_faults(faults.parse().unwrap()).unwrap();
    let mut ctxs = c.contexts(2);
    let callers = ctxs.iter().filter(|x| x.id.cn == 1).count();
    let stop = ServeStop::after(callers);
    let seen = Rc::new(RefCell::new(Seen::default()));
    let mut ex = SimExecutor::new(&c.sim);
    c.serve_all(&mut ex, &stop);
    for ctx in ctxs.iter_mut().filter(|x| x.id.cn == 1) {
        let (sim, ts, seen, stop) = (c.sim.clone(), &c.ts, Rc::clone(&seen), stop.clone());
        let cpu = c.cpu_of(ctx);
        ex.spawn_on(cpu, async move {
            let mut last = 0;
            while sim.now() < until_ns {
                match ts.next(ctx).await {
                    Ok(t) => {
                        assert!(t > last, "{}: {t} after {last}", ctx.id);
                        last = t;
                        seen.borrow_mut().ok.push((sim.now(), t));
                    }
                    Err(e) => seen.borrow_mut().err.push((sim.now(), e)),
                }
                sim.sleep(5_000).await;
            }
            stop.done_one();
        });
    }
    let report = ex.run().expect("no hang: every caller ends");
    assert_eq!(report.pending, 0, "{report:?}");
    let stats = c.workers[1].rpc().unwrap().stats();
    drop(ctxs);
    let seen = Rc::try_unwrap(seen).unwrap().into_inner();
    let mut unique = BTreeSet::new();
    for (_, t) in &seen.ok {
        assert!(unique.insert(*t), "timestamp {t} granted twice");
    }
    (seen, stats)
}

/// Goal: when the oracle's host CN crashes (fault script), every later request fails
/// with `TsError::Rpc` after the RPC layer's retries — fast, since the network reports
/// the lost peer — instead of hanging; nothing is granted after the crash and nothing
/// twice before it.
#[test]
fn a_crashed_oracle_host_fails_its_callers() {
    let crash_ns = 50_000;
    let rpc = RpcConfig {
        timeout: Duration::from_millis(1),
        retries: 2,
    };
    let (seen, stats) = callers_under(&format!("crash-cn cn=0 at={crash_ns}ns"), rpc, 200_000);
    eprintln!(
        "crash at {crash_ns} ns: {} grants, {} failures, first at {:?} ns; {stats:?}",
        seen.ok.len(),
        seen.err.len(),
        seen.err.first().map(|e| e.0)
    );
    // Two callers, one request per RTT (~3.6 µs) + 5 µs, for 50 µs.
    assert!(seen.ok.len() >= 2 * 4, "grants before the crash: {}", seen.ok.len());
    assert!(
        seen.ok.iter().all(|(t, _)| *t < crash_ns + 10_000),
        "a grant after the crash"
    );
    assert!(!seen.err.is_empty());
    let host = RpcTimestamps::DEFAULT_HOST;
    for (at, e) in &seen.err {
        assert!(*at >= crash_ns, "{e} at {at} ns");
        assert!(
            matches!(e, TsError::Rpc { host: h, source: RpcError::PeerLost { .. } } if *h == host),
            "{e}"
        );
        assert!(e.to_string().contains("choose `faa` timestamps"), "{e}");
    }
    // Noticed within a serve tick, not after the 1 ms timeouts.
    let first = seen.err[0].0;
    assert!(
        first < crash_ns + dmtx_sim::msg::SERVE_TICK_NS_DEFAULT + 20_000,
        "first failure at {first} ns"
    );
    assert_eq!(stats.failed, seen.err.len() as u64);
    assert_eq!(stats.retries, 2 * stats.failed, "each failed call used its retries");
}

/// Goal: when the host is cut off by a partition, requests fail with a timeout after
/// `timeout × (retries + 1)` (no peer crashed, so nothing is reported earlier); once the
/// partition heals, timestamps resume above every one granted before (no repeat).
#[test]
fn a_partitioned_oracle_host_times_out_then_resumes() {
    let rpc = RpcConfig {
        timeout: Duration::from_micros(100),
        retries: 1,
    };
    let (cut, heal) = (50_000, 500_000);
    let (seen, stats) = callers_under(
        &format!("partition side=cn0 at={cut}ns for={}ns", heal - cut),
        rpc,
        800_000,
    );
    eprintln!(
        "partition {cut}..{heal} ns: {} grants, {} failures; {stats:?}",
        seen.ok.len(),
        seen.err.len()
    );
    assert!(!seen.err.is_empty());
    for (at, e) in &seen.err {
        assert!(
            matches!(
                e,
                TsError::Rpc {
                    source: RpcError::Timeout { attempts: 2, .. },
                    ..
                }
            ),
            "{e}"
        );
        // A call that failed was issued at or after the cut and waited its two attempts.
        assert!(
            *at >= cut + 190_000 && *at <= heal + 200_000 + 2 * dmtx_sim::msg::SERVE_TICK_NS_DEFAULT,
            "{e} at {at} ns"
        );
    }
    let before = seen
        .ok
        .iter()
        .filter(|(t, _)| *t < cut)
        .map(|(_, ts)| *ts)
        .max()
        .unwrap();
    let after: Vec<u64> = seen.ok.iter().filter(|(t, _)| *t > heal).map(|(_, ts)| *ts).collect();
    assert!(after.len() > 10, "timestamps resume after the heal: {}", after.len());
    assert!(
        after.iter().all(|t| *t > before),
        "a timestamp after the heal repeats one from before"
    );
    assert_eq!(stats.failed, seen.err.len() as u64);
}

// ---------------------------------------------------------------------------------------
// Completed-commit watermark

/// What the coordinators of a watermark run know, at each instant of virtual time (the
/// simulation runs on one thread, so this is exact).
#[derive(Default)]
struct WatermarkModel {
    /// Commit timestamps granted (reply in hand) whose resolve was not yet called.
    unresolved: BTreeSet<u64>,
    /// Every commit timestamp granted.
    commits: BTreeSet<u64>,
    /// The largest watermark any coordinator has read so far.
    w_max: u64,
    /// Watermark reads, and how many moved past the previous maximum.
    reads: u64,
    moved: u64,
}

/// Every coordinator of 3 CNs × 2 threads × 3 coroutines runs [`REQS`] transactions: a
/// `T_start`, a watermark read (checked against the model: below every unresolved
/// commit), a commit timestamp (checked: above every watermark read before it was asked
/// for), a random virtual-time "install", then complete (or, one in four, abandon).
/// Returns the log of (coordinator, commit, watermark) and the final watermark.
fn watermark_run(seed: u64, kind: TsKind) -> (Vec<(u64, u64, u64)>, u64, Vec<dmtx_verbs::PostCounters>) {
    let c = cluster(seed, CpuMode::Model, CNS, THREADS, kind, rpc_default());
    let mut ctxs = c.contexts(COROS);
    let stop = ServeStop::after(ctxs.len());
    let model = Rc::new(RefCell::new(WatermarkModel::default()));
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&c.sim);
    c.serve_all(&mut ex, &stop);
    for ctx in ctxs.iter_mut() {
        let (sim, ts, model, log, stop) = (c.sim.clone(), &c.ts, Rc::clone(&model), Rc::clone(&log), stop.clone());
        let mut rng = c.sim.fork_rng();
        let cpu = c.cpu_of(ctx);
        ex.spawn_on(cpu, async move {
            for _ in 0..REQS {
                ts.next(ctx).await.unwrap();
                let w = ts.watermark(ctx).await.unwrap();
                {
                    let mut m = model.borrow_mut();
                    if let Some(&u) = m.unresolved.first() {
                        assert!(w < u, "{kind}: watermark {w} passes unresolved commit {u}");
                    }
                    m.reads += 1;
                    if w > m.w_max {
                        m.moved += 1;
                        m.w_max = w;
                    }
                }
                let w_before = model.borrow().w_max;
                let commit = ts.next_commit(ctx).await.unwrap();
                let t = commit.get();
                assert!(
                    t > w_before,
                    "{kind}: commit {t} at or below watermark {w_before} read before it"
                );
                {
                    let mut m = model.borrow_mut();
                    m.unresolved.insert(t);
                    m.commits.insert(t);
                }
                sim.sleep(rng.random_range(0..5_000)).await;
                model.borrow_mut().unresolved.remove(&t);
                if rng.random_range(0..4) == 0 {
                    ts.abandon(ctx, commit).await.unwrap();
                } else {
                    ts.complete(ctx, commit).await.unwrap();
                }
                log.borrow_mut().push((ctx.id.global(), t, w));
            }
            stop.done_one();
        });
    }
    let report = ex.run().unwrap();
    assert_eq!(report.pending, 0);
    let m = model.borrow();
    assert!(
        m.moved > m.reads / 10,
        "{kind}: the watermark barely moved: {} of {}",
        m.moved,
        m.reads
    );
    assert!(m.unresolved.is_empty());
    let counters = ctxs.iter().map(|c| c.txn_counters).collect();
    // Everything resolved: a last read passes every commit.
    let ctx = &mut ctxs[0];
    let last = Rc::new(Cell::new(0));
    let mut ex = SimExecutor::new(&c.sim);
    let stop = ServeStop::after(1);
    c.serve_all(&mut ex, &stop);
    let (o, ts, st, cpu) = (Rc::clone(&last), &c.ts, stop.clone(), c.cpu_of(ctx));
    ex.spawn_on(cpu, async move {
        o.set(ts.watermark(ctx).await.unwrap());
        st.done_one();
    });
    ex.run().unwrap();
    let last = last.get();
    assert!(
        m.commits.last().is_none_or(|&t| last >= t),
        "{kind}: final watermark {last} below a resolved commit"
    );
    let log = log.borrow().clone();
    (log, last, counters)
}

/// Goal: on the simulator with CPU costs on, every kind's watermark (and the hybrid
/// kind's) never passes a commit timestamp whose resolve was not yet called, no commit
/// timestamp is handed out at or below a watermark read before it was asked for, the
/// watermark keeps moving, and once all are resolved it passes every commit. Each call
/// is one timestamp request, waited for as the module doc's table says; none is the
/// protocol's round trip. The same seed gives the same run.
#[test]
fn the_watermark_never_passes_an_unresolved_commit_for_every_kind() {
    for kind in [TsKind::Oracle, TsKind::Rpc, TsKind::Faa, TsKind::Hybrid] {
        let (log, last, counters) = watermark_run(23, kind);
        assert_eq!(log.len(), (CNS * THREADS * COROS) as usize * REQS);
        let commits: BTreeSet<u64> = log.iter().map(|l| l.1).collect();
        assert_eq!(commits.len(), log.len(), "{kind}: a commit timestamp granted twice");
        for (i, c) in counters.iter().enumerate() {
            // next, watermark, next_commit, complete or abandon.
            assert_eq!(c.ts_requests, 4 * REQS as u64, "{kind} coordinator {i}");
            let on_host = i < COROS as usize;
            match kind {
                TsKind::Oracle | TsKind::Hybrid => assert_eq!(c.ts_rtts, 0, "{kind}"),
                TsKind::Rpc if on_host => assert_eq!(c.ts_rtts, 0, "{kind}"),
                TsKind::Rpc => assert_eq!(c.ts_rtts, 4 * REQS as u64, "{kind}"),
                // A watermark read is two or three round trips.
                TsKind::Faa => assert!(
                    (5 * REQS as u64..=6 * REQS as u64).contains(&c.ts_rtts),
                    "{kind} coordinator {i}: {} round trips",
                    c.ts_rtts
                ),
            }
            assert_eq!((c.rtts, c.ops_total()), (0, 0), "{kind}: not the protocol's verbs");
        }
        assert_eq!(watermark_run(23, kind).0, log, "{kind}: one seed, one run");
        eprintln!("{kind}: {} commits, final watermark {last}", log.len());
    }
}
