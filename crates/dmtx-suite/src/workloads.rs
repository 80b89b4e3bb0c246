//! Every workload of `dmtx-workloads` under any protocol: load it, run its mix on `mem`
//! or `sim` with aborted transactions retried on the same inputs (as the driver does),
//! record the history, then check the workload's own invariants
//! ([`Workload::check`]) on the quiesced tables and the history at the protocol's level.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use dmtx_check::history::History;
use dmtx_check::recorder::Recorder;
use dmtx_runtime::{AbortReason, Coordinator, Knobs, Protocol, Worker};
use dmtx_sim::SimExecutor;
use dmtx_workloads::{Kvs, Outcome as TxnOutcome, RunHint, SmallBank, Snapshot, Tatp, Tpcc, Workload, Ycsb};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::env::{Env, Setup, Transport};
use crate::serving::{serve_mem, MemLive, SimLive};

/// Attempts of one drawn transaction before the coordinator gives up on it.
const TRIES_MAX: u32 = 10_000;

/// What a workload run produced.
#[derive(Debug)]
pub struct WorkloadRun {
    /// Commits (successful or not).
    pub committed: u64,
    /// Commits the benchmark counts as successful.
    pub successful: u64,
    /// Transactions the workload rolled back on purpose.
    pub rolled_back: u64,
    /// Transactions given up after [`TRIES_MAX`] retryable aborts in a row.
    pub gave_up: u64,
    /// Aborts by reason.
    pub aborts: BTreeMap<AbortReason, u64>,
    /// The workload's invariant check: what it checked, or what broke.
    pub invariant: Result<String, String>,
    /// The isolation checker's verdict (`None` for an unchecked protocol).
    pub check: Option<dmtx_check::Report>,
}

impl WorkloadRun {
    /// Aborts of `reason`.
    pub fn aborts_of(&self, reason: AbortReason) -> u64 {
        self.aborts.get(&reason).copied().unwrap_or(0)
    }
}

struct Done<L> {
    local: Option<L>,
    committed: u64,
    successful: u64,
    rolled_back: u64,
    gave_up: u64,
    aborts: BTreeMap<AbortReason, u64>,
}

async fn coordinator_loop<P: Protocol, W: Workload>(
    w: &W,
    c: &mut Coordinator<P>,
    mut local: W::Local,
    txns: u32,
) -> Done<W::Local> {
    let mut d = Done {
        local: None,
        committed: 0,
        successful: 0,
        rolled_back: 0,
        gave_up: 0,
        aborts: BTreeMap::new(),
    };
    let mut rng = SmallRng::seed_from_u64(c.ctx.id.global());
    for _ in 0..txns {
        let (_, input) = w.draw(&mut local);
        let mut done = false;
        for attempt in 0..TRIES_MAX {
            if attempt > 0 {
                let clock = std::sync::Arc::clone(&c.ctx.clock);
                backoff(clock.as_ref(), &mut rng, attempt).await;
            }
            let res = w.run(&mut local, &input, c).await;
            c.cleanup().await;
            match res {
                Ok(TxnOutcome::Committed) => {
                    d.committed += 1;
                    d.successful += 1;
                }
                Ok(TxnOutcome::Unsuccessful) => d.committed += 1,
                Ok(TxnOutcome::RolledBack) => d.rolled_back += 1,
                Err(a) => {
                    *d.aborts.entry(a.reason).or_default() += 1;
                    // The driver's rule: as the reason's spec says (shared or the
                    // protocol's own `ABORT_REASONS`).
                    if a.reason.retryable(P::ABORT_REASONS) {
                        continue;
                    }
                }
            }
            done = true;
            break;
        }
        d.gave_up += u64::from(!done);
    }
    c.drain().await;
    d.local = Some(local);
    d
}

/// Largest exponent of the backoff before a retry.
const BACKOFF_EXP_MAX: u32 = 8;
/// Unit of the backoff, in ns of the coordinator's clock.
const BACKOFF_UNIT_NS: u64 = 1_000;

/// Wait a random time below `BACKOFF_UNIT_NS << min(attempt, BACKOFF_EXP_MAX)` on the
/// coordinator's clock before retry `attempt` (virtual time on `sim`, where yields
/// alone leave every coordinator retrying in step at the same instant): without it,
/// transactions that abort each other on partly taken locks retry together and abort
/// each other again.
async fn backoff(clock: &dyn dmtx_runtime::Clock, rng: &mut SmallRng, attempt: u32) {
    let ns = rng.random_range(0..BACKOFF_UNIT_NS << attempt.min(BACKOFF_EXP_MAX));
    dmtx_runtime::sleep(clock, ns).await;
}

/// Run `txns` transactions of `w` on each coordinator of `setup` (its replicas, compute
/// nodes, threads and coroutines; the bank fields are unused), under `make()`.
pub fn run<P: Protocol, W: Workload>(
    make: impl Fn() -> P,
    w: W,
    setup: Setup,
    transport: Transport,
    seed: u64,
) -> WorkloadRun {
    let coordinators = setup.compute_nodes as usize * setup.threads as usize * setup.coroutines as usize;
    let w = w.fit_to_run(&RunHint {
        duration: None,
        txns: Some(coordinators as u64 * setup.txns as u64),
        coordinators,
    });
    let specs = w.tables();
    let env = Env::with_tables(make(), setup, &specs, |t, insert| w.load(t, insert));
    let s = &env.setup;
    let history = Rc::new(RefCell::new(History::new()));
    let mut done: Vec<Done<W::Local>> = Vec::new();
    let local_seed = |c: &Coordinator<P>| seed ^ c.ctx.id.global().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    match transport {
        Transport::Mem | Transport::Tcp => {
            let threaded = env.threaded(transport, s.threads);
            let cns = &threaded.cns;
            let live = env.proto.messaging().then(|| MemLive::new(coordinators));
            std::thread::scope(|scope| {
                let handles: Vec<_> = cns
                    .iter()
                    .flat_map(|cn| (0..s.threads).map(move |t| (cn, t)))
                    .map(|(cn, t)| {
                        let (env, w, live) = (&env, &w, live.as_ref());
                        scope.spawn(move || {
                            let wk = cn.worker(t).expect("worker");
                            let h = Rc::new(RefCell::new(History::new()));
                            let mut coords = coordinators_of(env, &wk, &h);
                            let out = RefCell::new(Vec::new());
                            let mut ex = wk.executor();
                            for c in coords.iter_mut() {
                                let local = w.local(c.ctx.id, local_seed(c));
                                let out = &out;
                                let share = live.map(MemLive::share);
                                ex.spawn(async move {
                                    let d = coordinator_loop(w, c, local, s.txns).await;
                                    out.borrow_mut().push(d);
                                    drop(share);
                                });
                            }
                            if let Some(live) = live {
                                serve_mem(&mut ex, &wk, env.proto.as_ref(), live);
                            }
                            ex.run(wk.transport().as_ref());
                            drop(coords);
                            let h = Rc::try_unwrap(h).expect("recorders dropped").into_inner();
                            (h, out.into_inner())
                        })
                    })
                    .collect();
                for hd in handles {
                    let (h, d) = hd.join().expect("worker thread");
                    history.borrow_mut().append(h);
                    done.extend(d);
                }
            });
        }
        Transport::Sim => {
            let (sim, cns, net) = env.sim(seed, None);
            let workers: Vec<Worker> = cns
                .iter()
                .flat_map(|cn| (0..s.threads).map(move |t| cn.worker(t).expect("worker")))
                .collect();
            let mut coords: Vec<_> = workers
                .iter()
                .flat_map(|wk| coordinators_of(&env, wk, &history))
                .collect();
            let out = RefCell::new(Vec::new());
            let live = SimLive::new(coords.len());
            let mut ex = SimExecutor::new(&sim);
            for c in coords.iter_mut() {
                let local = w.local(c.ctx.id, local_seed(c));
                let (out, w, live) = (&out, &w, &live);
                ex.spawn(async move {
                    let d = coordinator_loop(w, c, local, s.txns).await;
                    out.borrow_mut().push(d);
                    live.done_one();
                });
            }
            if let Some(net) = &net {
                for wk in &workers {
                    live.serve(&mut ex, net, wk, env.proto.as_ref());
                }
            }
            ex.run()
                .unwrap_or_else(|e| panic!("{} on {}: DMTX_SEED={seed}: {e}", P::NAME, W::NAME));
            drop(coords);
            done = out.into_inner();
        }
    }
    let mut run = WorkloadRun {
        committed: 0,
        successful: 0,
        rolled_back: 0,
        gave_up: 0,
        aborts: BTreeMap::new(),
        invariant: Err("not checked".into()),
        check: None,
    };
    let mut locals = Vec::new();
    for d in done {
        run.committed += d.committed;
        run.successful += d.successful;
        run.rolled_back += d.rolled_back;
        run.gave_up += d.gave_up;
        for (r, n) in d.aborts {
            *run.aborts.entry(r).or_default() += n;
        }
        locals.push(d.local.expect("every coordinator finished"));
    }
    let mut snapshot = Snapshot::new();
    for spec in &specs {
        for (k, v, _) in env.scan(spec.id, 0) {
            snapshot.push(spec.id, k, &v);
        }
    }
    snapshot.seal();
    run.invariant = w.check(&locals, &snapshot).map_err(|e| e.to_string());
    let isolation = env.proto.isolation();
    if isolation.is_checked() {
        let history = Rc::try_unwrap(history).expect("recorders dropped").into_inner();
        run.check = Some(dmtx_check::check(&history, &env.check_options()));
    }
    run
}

fn coordinators_of<P: Protocol>(env: &Env<P>, w: &Worker, history: &Rc<RefCell<History>>) -> Vec<Coordinator<P>> {
    (0..env.setup.coroutines)
        .map(|k| {
            let mut c = w.coordinator(&env.proto, k).expect("coordinator");
            c.set_observer(Box::new(Recorder::new(history.clone())));
            c
        })
        .collect()
}

/// Panic unless `run` kept its invariants, passed the checker and committed something.
pub fn assert_clean(name: &str, run: &WorkloadRun, seed: u64) {
    assert!(
        run.committed > 0,
        "{name}: DMTX_SEED={seed}: nothing committed: {run:?}"
    );
    if let Err(e) = &run.invariant {
        panic!("{name}: DMTX_SEED={seed}: {e}");
    }
    if let Some(r) = &run.check {
        assert!(r.is_clean(), "{name}: DMTX_SEED={seed}: {r}");
        // Unsuccessful outcomes (TATP's not-found) may have given up without committing.
        let recorded = r.committed as u64;
        assert!(
            (run.successful..=run.committed).contains(&recorded),
            "{name}: DMTX_SEED={seed}: {recorded} commits in the history, {} successful and {} committed counted",
            run.successful,
            run.committed
        );
    }
}

fn knobs(pairs: &[&str]) -> Knobs {
    Knobs::parse(pairs.iter().copied()).expect("suite knobs parse")
}

/// Each workload with a small, hot dataset (names the workload and its knobs).
/// YCSB's records are 3 × 13 bytes, not a multiple of 8.
pub const SMALL: [(&str, &[&str]); 5] = [
    ("kvs", &["keys=32", "zipf_theta=0.99", "rw_ratio=0.5", "objects=3"]),
    ("smallbank", &["accounts=64", "hot_accounts=8", "hot_pct=90"]),
    ("tatp", &["subscribers=100"]),
    ("tpcc", &["warehouses=1", "items=1000", "customers=30"]),
    (
        "ycsb",
        &[
            "records=128",
            "fields=3",
            "field_bytes=13",
            "ops_per_txn=4",
            "zipf_theta=0.99",
            "write_ratio=0.3",
        ],
    ),
];

/// Run workload `name` with `set` knobs under `make()`; see [`run`].
pub fn run_named<P: Protocol>(
    make: impl Fn() -> P,
    name: &str,
    set: &[&str],
    setup: Setup,
    transport: Transport,
    seed: u64,
) -> WorkloadRun {
    let k = knobs(set);
    fn bad<T>(name: &str, set: &[&str], e: dmtx_runtime::KnobError) -> T {
        panic!("{name} {set:?}: {e}")
    }
    match name {
        "kvs" => run(
            make,
            Kvs::from_knobs(&k).unwrap_or_else(|e| bad(name, set, e)),
            setup,
            transport,
            seed,
        ),
        "smallbank" => run(
            make,
            SmallBank::from_knobs(&k).unwrap_or_else(|e| bad(name, set, e)),
            setup,
            transport,
            seed,
        ),
        "tatp" => run(
            make,
            Tatp::from_knobs(&k).unwrap_or_else(|e| bad(name, set, e)),
            setup,
            transport,
            seed,
        ),
        "tpcc" => run(
            make,
            Tpcc::from_knobs(&k).unwrap_or_else(|e| bad(name, set, e)),
            setup,
            transport,
            seed,
        ),
        "ycsb" => run(
            make,
            Ycsb::from_knobs(&k).unwrap_or_else(|e| bad(name, set, e)),
            setup,
            transport,
            seed,
        ),
        other => panic!("unknown workload `{other}`; the suite knows kvs, smallbank, tatp, tpcc and ycsb"),
    }
}
