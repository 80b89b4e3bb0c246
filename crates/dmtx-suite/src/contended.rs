//! Randomized contended transactions on the bank ([`crate::bank`]), on `mem` with tear
//! injection or on `sim`, recorded and judged.
//!
//! On `mem` every worker is an OS thread; beside them a tear injector stalls a READ or
//! a WRITE of a random hot record at a random word (`Region::arm_stall`) for a few
//! hundred microseconds while the other threads commit, so reads see old and new words
//! mixed. On `sim` the simulator tears READs racing WRITEs by its own model, and the
//! run is deterministic for its seed.
//!
//! [`Outcome::findings`] lists everything that breaks the protocol's claims: the
//! isolation checker's findings at `proto.isolation()`, torn values in committed
//! transactions, bad audits, money created or destroyed, and replicas that differ.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dmtx_check::history::History;
use dmtx_check::recorder::Recorder;
use dmtx_runtime::{AbortReason, Coordinator, Isolation, Protocol, Worker};
use dmtx_sim::{FaultScript, SimExecutor};
use dmtx_verbs::StallKind;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::bank::{self, Seen};
use crate::env::{Env, Transport};
use crate::serving::{run_on, serve_mem, serve_only, MemLive, SimLive};

/// What one run left behind.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Every transaction, recorded.
    pub history: History,
    /// Commits.
    pub commits: u64,
    /// Aborts by reason.
    pub aborts: BTreeMap<AbortReason, u64>,
    /// What the transactions saw.
    pub seen: Seen,
    /// Tear injections that caught an op (`mem` only).
    pub stalls: u64,
    /// Faults fired, with their virtual time (`sim` with a fault script).
    pub faults: Vec<String>,
    /// Background posts a fault failed (`sim`).
    pub lost_background: u64,
    /// Virtual end time and the simulator's counters (`sim`).
    pub sim: Option<(u64, dmtx_sim::SimStats)>,
    /// A fault crashed a compute node: its half-applied commits stay for a recovery, so
    /// the state checks (money, replicas) do not apply.
    pub crashed: bool,
}

impl Outcome {
    fn absorb(&mut self, t: Tally) {
        self.commits += t.commits;
        for (r, n) in t.aborts {
            *self.aborts.entry(r).or_default() += n;
        }
        self.seen.torn.extend(t.seen.torn);
        self.seen.bad_audits.extend(t.seen.bad_audits);
    }

    /// Everything in this run that breaks `env.proto`'s claims; empty when it passed.
    /// An [`Isolation::Unchecked`] protocol claims nothing: only torn values count.
    pub fn findings<P: Protocol>(&self, env: &Env<P>) -> Vec<String> {
        let mut out: Vec<String> = self.seen.torn.clone();
        let isolation = env.proto.isolation();
        if !isolation.is_checked() {
            return out;
        }
        let report = dmtx_check::check(&self.history, &env.check_options());
        if !report.is_clean() {
            out.push(format!("the isolation checker at {}: {report}", isolation.name()));
        }
        out.extend(self.seen.bad_audits.iter().cloned());
        if self.crashed {
            return out;
        }
        let rows = env.scan(bank::TABLE.id(), 0);
        let total: i64 = rows
            .iter()
            .map(|(k, v, _)| bank::decode(*k, v).map_or(0, |x| x.0))
            .sum();
        let keys = env.setup.keys;
        if total != keys as i64 * bank::INITIAL || rows.len() as u64 != keys {
            out.push(format!(
                "money was created or destroyed: {} accounts hold {total}, not {} accounts holding {}",
                rows.len(),
                keys,
                keys as i64 * bank::INITIAL
            ));
        }
        for (k, v, _) in &rows {
            if bank::decode(*k, v).is_none() {
                out.push(format!("account {k} is torn in memory after the run"));
            }
        }
        if let Some(d) = env.replicas_differ(bank::TABLE.id()) {
            out.push(d);
        }
        out
    }

    /// Panic with every finding, naming the case and the seed that replays it.
    pub fn assert_clean<P: Protocol>(&self, env: &Env<P>, case: &str, seed: u64) {
        let f = self.findings(env);
        assert!(
            f.is_empty(),
            "{}: {case}: DMTX_SEED={seed} replays it:\n{}",
            P::NAME,
            f.join("\n")
        );
        assert!(
            self.commits > 0,
            "{}: {case}: DMTX_SEED={seed}: nothing committed, the run checked nothing ({:?})",
            P::NAME,
            self.aborts
        );
    }
}

/// One coordinator's counts.
#[derive(Default)]
struct Tally {
    commits: u64,
    aborts: BTreeMap<AbortReason, u64>,
    seen: Seen,
}

/// Run `s.txns` transactions of the bank's mix (or transfers only) on `c`, awaiting the
/// protocol's cleanup after every attempt and its drain at the end, as the driver does.
async fn coordinator_loop<P: Protocol>(
    c: &mut Coordinator<P>,
    s: &crate::Setup,
    mut rng: SmallRng,
    stop: &dyn Fn() -> bool,
) -> Tally {
    let mut tally = Tally::default();
    let keys = s.keys;
    for _ in 0..s.txns {
        if stop() {
            break;
        }
        let res = if s.transfers_only {
            let a = rng.random_range(0..keys);
            let b = (a + rng.random_range(1..keys)) % keys;
            bank::transfer(c, a, b, rng.random_range(1..10), &mut tally.seen).await
        } else {
            bank::one(c, keys, &mut rng, &mut tally.seen).await
        };
        match res {
            Ok(()) => tally.commits += 1,
            Err(a) => *tally.aborts.entry(a.reason).or_default() += 1,
        }
        c.cleanup().await;
    }
    c.drain().await;
    tally
}

fn coord_seed(seed: u64, cn: u16, thread: u16, k: u16) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((cn as u64) << 32 | (thread as u64) << 16 | k as u64)
}

/// Run the bank's mix on `transport`; `faults` only on `sim`.
pub fn run<P: Protocol>(env: &Env<P>, transport: Transport, seed: u64, faults: Option<FaultScript>) -> Outcome {
    match transport {
        Transport::Mem | Transport::Tcp => {
            assert!(faults.is_none(), "fault scripts run on sim only");
            run_threaded(env, transport, seed, true)
        }
        Transport::Sim => run_sim(env, seed, faults),
    }
}

/// On `mem`: one OS thread per worker of every compute node, and the tear injector when
/// `tears`.
///
/// For a protocol that messages other compute nodes, every worker serves requests until
/// every coordinator of the run is done. The injector and its reader are workers
/// `threads` and `threads + 1` of node 0, with mailboxes too; a protocol may call the
/// same thread of another node, so those mailboxes of the other nodes are served by
/// threads of their own. The injector's and the reader's own mailboxes are served while
/// they run a transaction.
pub fn run_mem<P: Protocol>(env: &Env<P>, seed: u64, tears: bool) -> Outcome {
    run_threaded(env, Transport::Mem, seed, tears)
}

/// [`run_mem`] on `transport` (`Mem` or `Tcp`).
pub fn run_threaded<P: Protocol>(env: &Env<P>, transport: Transport, seed: u64, tears: bool) -> Outcome {
    let s = &env.setup;
    let messaging = env.proto.messaging();
    let extra: u16 = if tears { 2 } else { 0 };
    let threaded = env.threaded(transport, s.threads + extra);
    let cns = &threaded.cns;
    let coordinators = s.compute_nodes as usize * s.threads as usize * s.coroutines as usize;
    // The workers' coordinators not finished yet: a messaging run's injector stops with
    // the last (its threads wait for the injector, so `done` would come too late).
    let left = messaging.then(|| MemLive::new(coordinators));
    // Everything that may still call: those, the injector and its reader.
    let live = messaging.then(|| MemLive::new(coordinators + extra as usize));
    let done = AtomicBool::new(false);
    let mut out = Outcome::default();
    std::thread::scope(|scope| {
        let injector = tears.then(|| {
            let (cn, done, live, left) = (&cns[0], &done, live.as_ref(), left.as_ref());
            let (to_reader, keys) = std::sync::mpsc::sync_channel(1);
            let (read_done, from_reader) = std::sync::mpsc::sync_channel(1);
            let reader = scope.spawn(move || {
                let _share = live.map(MemLive::share);
                let w = cn.worker(s.threads + 1).expect("the injector's reader");
                injected_reader(env, &w, &keys, &read_done)
            });
            let injector = scope.spawn(move || {
                let _share = live.map(MemLive::share);
                let w = cn.worker(s.threads).expect("the injector's worker");
                let stop = || done.load(Ordering::Relaxed) || left.is_some_and(MemLive::is_done);
                inject_tears(env, &w, &to_reader, &from_reader, seed, &stop)
            });
            (injector, reader)
        });
        if let (Some(live), true) = (live.as_ref(), tears) {
            for cn in &cns[1..] {
                for t in s.threads..s.threads + extra {
                    scope.spawn(move || {
                        let w = cn.worker(t).expect("a serving worker");
                        serve_only(&w, env.proto.as_ref(), live)
                    });
                }
            }
        }
        let handles: Vec<_> = cns
            .iter()
            .flat_map(|cn| (0..s.threads).map(move |t| (cn, t)))
            .map(|(cn, t)| {
                let (live, left) = (live.as_ref(), left.as_ref());
                scope.spawn(move || {
                    let w = cn.worker(t).expect("worker");
                    run_thread(env, &w, seed, live.zip(left))
                })
            })
            .collect();
        let parts: Vec<_> = handles.into_iter().map(|h| h.join().expect("worker thread")).collect();
        done.store(true, Ordering::Relaxed);
        if let Some((i, r)) = injector {
            let (h, t, caught) = i.join().expect("tear injector");
            out.history.append(h);
            out.absorb(t);
            out.stalls = caught;
            let (h, t) = r.join().expect("the injector's reader");
            out.history.append(h);
            out.absorb(t);
        }
        for (h, tallies) in parts {
            out.history.append(h);
            for t in tallies {
                out.absorb(t);
            }
        }
    });
    out
}

/// One worker thread's coordinators; with `live` (a messaging protocol: everything that
/// may still call, and the workers' coordinators), it serves until the first is done.
fn run_thread<P: Protocol>(
    env: &Env<P>,
    w: &Worker,
    seed: u64,
    live: Option<(&MemLive, &MemLive)>,
) -> (History, Vec<Tally>) {
    let s = &env.setup;
    let history = Rc::new(RefCell::new(History::new()));
    let mut coords: Vec<_> = (0..s.coroutines)
        .map(|k| {
            let mut c = w.coordinator(&env.proto, k).expect("coordinator");
            c.set_observer(Box::new(Recorder::new(history.clone())));
            c
        })
        .collect();
    let tallies = RefCell::new(Vec::new());
    let mut ex = w.executor();
    for c in coords.iter_mut() {
        let rng = SmallRng::seed_from_u64(coord_seed(seed, w.cn().id, w.thread(), c.ctx.id.coroutine));
        let tallies = &tallies;
        let share = live.map(|(live, left)| (live.share(), left.share()));
        ex.spawn(async move {
            let t = coordinator_loop(c, s, rng, &|| false).await;
            tallies.borrow_mut().push(t);
            drop(share);
        });
    }
    if let Some((live, _)) = live {
        serve_mem(&mut ex, w, env.proto.as_ref(), live);
    }
    ex.run(w.transport().as_ref());
    drop(coords);
    let h = Rc::try_unwrap(history).expect("recorders dropped").into_inner();
    (h, tallies.into_inner())
}

/// Longest a tear injection waits for an op to reach its word.
const STALL_REACH: Duration = Duration::from_millis(2);
/// Attempts of the injector's own transaction while an op is held.
const INJECT_TRIES_MAX: u32 = 8;

/// Until `done`, inject tears: stall a READ (3 in 4) or a WRITE of a random account on a
/// random replica at a random word past the first (mostly inside the value), start a
/// read of that account on the injector's reader thread (`reader`) so a single-object
/// read is among the ops that may be caught, and once an op is held there run, on the
/// injector's own coordinator, a transfer of that account (against a held READ) or a
/// read of it (against a held WRITE), then release. Every injector transaction is
/// recorded like any other. Returns the history, the counts and how many stalls caught
/// an op.
fn inject_tears<P: Protocol>(
    env: &Env<P>,
    w: &Worker,
    reader: &std::sync::mpsc::SyncSender<Option<u64>>,
    read_done: &std::sync::mpsc::Receiver<()>,
    seed: u64,
    done: &dyn Fn() -> bool,
) -> (History, Tally, u64) {
    let catalog = env.catalog();
    let info = catalog.get(bank::TABLE.id()).expect("bank table");
    let slots: Vec<(u64, u64)> = env.slots(bank::TABLE.id()).into_iter().collect();
    let words = info.shape.slot_bytes as u64 / 8;
    // Where the layout puts the value: a READ held inside it returns old and new value
    // words, which the bank's check bytes expose.
    // A layout with a value region keeps no value in the slot: stalls land anywhere in it.
    let in_value = if info.shape.value_region.is_some() {
        1..words
    } else {
        let mut slot = vec![0u8; info.shape.slot_bytes as usize];
        let vb = info.meta.value_bytes;
        env.proto
            .layout()
            .encode(bank::TABLE.id(), 0, &vec![0u8; vb as usize], &mut slot);
        let value_word = (env.proto.layout().value(&slot, vb).as_ptr() as usize - slot.as_ptr() as usize) as u64 / 8;
        (value_word + 1).max(1)..words
    };
    let keys = env.setup.keys;
    let history = Rc::new(RefCell::new(History::new()));
    let mut c = w.coordinator(&env.proto, 0).expect("injector's coordinator");
    c.set_observer(Box::new(Recorder::new(history.clone())));
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x7ea2);
    let mut tally = Tally::default();
    let mut caught = 0;
    while !done() {
        let (key, rel) = slots[rng.random_range(0..slots.len())];
        let ptr = info.ptr(rng.random_range(0..info.replica_count()), rel);
        let kind = if rng.random_range(0..4) < 3 {
            StallKind::Read
        } else {
            StallKind::Write
        };
        // Mostly inside the value; one in four anywhere past the lock word.
        let word = if !in_value.is_empty() && rng.random_range(0..4) > 0 {
            rng.random_range(in_value.clone())
        } else {
            rng.random_range(1..words)
        };
        let gate = env.region(ptr.mn).arm_stall(kind, ptr.offset + 8 * word);
        let reading = kind == StallKind::Read;
        if reading {
            reader.send(Some(key)).expect("the injector's reader");
        }
        let start = Instant::now();
        while !gate.is_stalled() && start.elapsed() < STALL_REACH && !done() {
            std::thread::yield_now();
        }
        if gate.is_stalled() {
            caught += 1;
            for _ in 0..INJECT_TRIES_MAX {
                let res = run_on(w, async {
                    let res = match kind {
                        StallKind::Read => {
                            let other = (key + rng.random_range(1..keys)) % keys;
                            bank::transfer(&mut c, key, other, 1, &mut tally.seen).await
                        }
                        StallKind::Write => bank::read_one(&mut c, key, &mut tally.seen).await.map(|_| ()),
                    };
                    c.cleanup().await;
                    res
                });
                match res {
                    Ok(()) => {
                        tally.commits += 1;
                        break;
                    }
                    Err(a) => *tally.aborts.entry(a.reason).or_default() += 1,
                }
            }
        }
        gate.release();
        if reading {
            read_done.recv().expect("the injector's reader");
        }
    }
    reader.send(None).expect("the injector's reader");
    run_on(w, c.drain());
    drop(c);
    let h = Rc::try_unwrap(history).expect("recorder dropped").into_inner();
    (h, tally, caught)
}

/// The injector's reader: a read of each key it is sent, until `None`.
fn injected_reader<P: Protocol>(
    env: &Env<P>,
    w: &Worker,
    keys: &std::sync::mpsc::Receiver<Option<u64>>,
    read_done: &std::sync::mpsc::SyncSender<()>,
) -> (History, Tally) {
    let history = Rc::new(RefCell::new(History::new()));
    let mut c = w.coordinator(&env.proto, 0).expect("reader's coordinator");
    c.set_observer(Box::new(Recorder::new(history.clone())));
    let mut tally = Tally::default();
    while let Ok(Some(key)) = keys.recv() {
        let res = run_on(w, async {
            let res = bank::read_one(&mut c, key, &mut tally.seen).await;
            c.cleanup().await;
            res
        });
        match res {
            Ok(_) => tally.commits += 1,
            Err(a) => *tally.aborts.entry(a.reason).or_default() += 1,
        }
        read_done.send(()).expect("the injector");
    }
    run_on(w, c.drain());
    drop(c);
    (Rc::try_unwrap(history).expect("recorder dropped").into_inner(), tally)
}

/// Virtual time a faulted run lasts at most; coordinators stop starting transactions at
/// half of it, so none is caught mid-transaction at the end.
pub const SIM_DEADLINE_NS: u64 = 200_000_000;

/// On `sim`: every coordinator of every compute node on one executor.
pub fn run_sim<P: Protocol>(env: &Env<P>, seed: u64, faults: Option<FaultScript>) -> Outcome {
    let s = &env.setup;
    let faulted = faults.is_some();
    let (sim, cns, net) = env.sim(seed, faults);
    let workers: Vec<Worker> = cns
        .iter()
        .flat_map(|cn| (0..s.threads).map(move |t| cn.worker(t).expect("worker")))
        .collect();
    let history = Rc::new(RefCell::new(History::new()));
    let mut coords: Vec<_> = workers
        .iter()
        .flat_map(|w| (0..s.coroutines).map(move |k| (w, k)))
        .map(|(w, k)| {
            let mut c = w.coordinator(&env.proto, k).expect("coordinator");
            c.set_observer(Box::new(Recorder::new(history.clone())));
            c
        })
        .collect();
    let tallies = RefCell::new(Vec::new());
    let stop = std::cell::Cell::new(false);
    let live = SimLive::new(coords.len());
    let mut ex = SimExecutor::new(&sim);
    if faulted {
        let (sim1, stop) = (sim.clone(), &stop);
        ex.spawn(async move {
            sim1.sleep(SIM_DEADLINE_NS / 2).await;
            stop.set(true);
        });
        let sim2 = sim.clone();
        // Past the deadline, so the run ends there even if a crashed node's tasks wait.
        ex.spawn(async move { sim2.sleep(SIM_DEADLINE_NS + 1).await });
    }
    for c in coords.iter_mut() {
        let id = c.ctx.id;
        let rng = SmallRng::seed_from_u64(coord_seed(seed, id.cn, id.thread, id.coroutine));
        let (tallies, stop, live) = (&tallies, &stop, &live);
        ex.spawn(async move {
            let t = coordinator_loop(c, s, rng, &|| stop.get()).await;
            tallies.borrow_mut().push(t);
            live.done_one();
        });
    }
    if let Some(net) = &net {
        for w in &workers {
            live.serve(&mut ex, net, w, env.proto.as_ref());
        }
    }
    let res = if faulted {
        ex.run_until(SIM_DEADLINE_NS)
    } else {
        ex.run()
    };
    let report = res.unwrap_or_else(|e| panic!("{}: DMTX_SEED={seed}: the simulation failed: {e}", P::NAME));
    drop(coords);
    let mut out = Outcome {
        history: Rc::try_unwrap(history).expect("recorders dropped").into_inner(),
        ..Outcome::default()
    };
    for t in tallies.into_inner() {
        out.absorb(t);
    }
    out.faults = sim
        .fault_log()
        .into_iter()
        .map(|r| format!("{} ns: {}", r.at_ns, r.what))
        .collect();
    out.crashed = out.faults.iter().any(|f| f.contains("crash"));
    out.lost_background = sim.lost_background_posts();
    out.sim = Some((report.end_ns, sim.stats()));
    out
}

/// Everything of a `sim` run that one seed must reproduce bit for bit.
type Replay = (
    u64,
    BTreeMap<AbortReason, u64>,
    usize,
    Option<(u64, dmtx_sim::SimStats)>,
    Vec<Vec<(u64, Vec<u8>, u64)>>,
);

fn replay<P: Protocol>(make: &impl Fn() -> P, setup: &crate::Setup, seed: u64) -> (Replay, Outcome, Env<P>) {
    let env = Env::bank(make(), setup.clone());
    let out = run_sim(&env, seed, None);
    let tables = (0..setup.replicas).map(|r| env.scan(bank::TABLE.id(), r)).collect();
    (
        (out.commits, out.aborts.clone(), out.history.len(), out.sim, tables),
        out,
        env,
    )
}

/// The simulator replays a seed exactly: two runs of `seed` give the same commits,
/// aborts, history length, virtual end time, simulator counters and bytes of every
/// replica, and `seed + 1` gives another run. Returns the first run, checked clean.
pub fn assert_deterministic<P: Protocol>(make: impl Fn() -> P, setup: &crate::Setup, seed: u64) -> Outcome {
    let (a, out, env) = replay(&make, setup, seed);
    out.assert_clean(&env, "determinism", seed);
    let (b, _, _) = replay(&make, setup, seed);
    assert!(
        a == b,
        "{}: DMTX_SEED={seed}: the same seed gave different runs",
        P::NAME
    );
    let (c, _, _) = replay(&make, setup, seed + 1);
    assert!(
        a.3 != c.3 && a.4 != c.4,
        "{}: seeds {seed} and {} gave the same run",
        P::NAME,
        seed + 1
    );
    out
}

/// The seed to run: `DMTX_SEED` when set (to replay a printed failure), else `default`.
pub fn seed_or_env(default: u64) -> u64 {
    match std::env::var("DMTX_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("DMTX_SEED={s} is not a number; give the seed a failure printed")),
        Err(_) => default,
    }
}

/// `seeds`, or only `DMTX_SEED` when it is set.
pub fn seeds(seeds: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var("DMTX_SEED") {
        Ok(_) => vec![seed_or_env(0)],
        Err(_) => seeds.collect(),
    }
}

/// Whether `isolation` can be checked; prints the note that says why not otherwise.
pub fn checked_or_note(name: &str, isolation: Isolation) -> bool {
    if !isolation.is_checked() {
        eprintln!(
            "{name}: isolation `{}` is an unsafe upper bound: the isolation checker and the state invariants do not apply, only torn values are checked",
            isolation.name()
        );
    }
    isolation.is_checked()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unchecked_protocol_skips_the_checker() {
        assert!(!checked_or_note("upper-bound", Isolation::Unchecked));
        for level in [
            Isolation::Serializable,
            Isolation::StrictSerializable,
            Isolation::SnapshotIsolation,
        ] {
            assert!(checked_or_note("p", level), "{}", level.name());
        }
    }

    #[test]
    fn dmtx_seed_is_read_when_set() {
        // Without DMTX_SEED the defaults run (the test harness does not set it).
        if std::env::var("DMTX_SEED").is_err() {
            assert_eq!(seed_or_env(7), 7);
            assert_eq!(seeds(3..6), [3, 4, 5]);
        }
    }
}
