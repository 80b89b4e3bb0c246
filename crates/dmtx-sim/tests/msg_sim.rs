//! CN↔CN messaging on the simulator (`dmtx_sim::msg`): the transport contract suite, the
//! cost model (every expected time is computed from the model's parameters), RPC driven
//! by `serve` on the `SimExecutor`, a LOTUS-style lock service (§4.1), determinism, and
//! crashed compute nodes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use dmtx_runtime::rpc::RpcStats;
use dmtx_runtime::{Handled, Request, Rpc, RpcConfig, RpcError};
use dmtx_sim::faults::FaultAction;
use dmtx_sim::msg::MsgStats;
use dmtx_sim::nic::FabricState;
use dmtx_sim::{
    serve, CpuId, CpuMode, FaultScript, NicModel, ServeStop, Sim, SimConfig, SimExecutor, SimFabric, SimMailbox,
    SimMsgNet, SimStats, SimTransport,
};
use dmtx_verbs::msg::{
    conformance, Entry, EntryKind, Event, Mailbox, MsgError, MsgFabric, WorkerAddr, ENTRY_HEADER_BYTES,
};
use dmtx_verbs::{MnId, Post, Region, RemotePtr, Submitted, Transport};
use rand::Rng;

fn sim_with(seed: u64, cpu: CpuMode) -> Sim {
    let mut config = SimConfig::new(seed);
    config.cpu.mode = cpu;
    Sim::new(config, vec![Arc::new(Region::new(1 << 16))])
}

fn rpc_on(net: &SimMsgNet, addr: WorkerAddr, config: RpcConfig) -> Rc<Rpc> {
    let mailbox = net.mailbox(addr).unwrap();
    let clock = Arc::new(net.sim().clock(0, 0).unwrap());
    Rc::new(Rpc::new(Box::new(mailbox), clock, config))
}

/// Replies with `len` bytes of 0xab, whatever the request.
fn reply_of(len: usize) -> impl FnMut(&Rpc, Request<'_>, &mut Vec<u8>) -> Handled {
    move |_: &Rpc, _: Request<'_>, out: &mut Vec<u8>| {
        out.resize(len, 0xab);
        Handled::Reply
    }
}

// ---------------------------------------------------------------------------------------
// The contract suite

/// A fabric whose mailboxes run the simulation's pending events before each drain: the
/// suite drives mailboxes from the test thread and never touches an executor.
struct Stepped {
    sim: Sim,
    inner: dmtx_sim::SimMsgFabric,
}

struct SteppedMailbox {
    sim: Sim,
    inner: Box<dyn Mailbox>,
}

impl MsgFabric for Stepped {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn workers(&self) -> Vec<WorkerAddr> {
        self.inner.workers()
    }
    fn mailbox(&self, thread: u16) -> Result<Box<dyn Mailbox>, MsgError> {
        Ok(Box::new(SteppedMailbox {
            sim: self.sim.clone(),
            inner: self.inner.mailbox(thread)?,
        }))
    }
}

impl Mailbox for SteppedMailbox {
    fn addr(&self) -> WorkerAddr {
        self.inner.addr()
    }
    fn workers(&self) -> &[WorkerAddr] {
        self.inner.workers()
    }
    fn push(&self, to: WorkerAddr, entry: Entry<'_>) -> Result<(), MsgError> {
        self.inner.push(to, entry)
    }
    fn flush(&self) {
        self.inner.flush()
    }
    fn drain(&self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        while self.sim.step() {}
        self.inner.drain(f)
    }
}

/// Goal: the sim transport passes `dmtx_verbs::msg::conformance` (intact entries, FIFO
/// per pair over many flushes, refused pushes) on 2 CNs × 2 threads.
#[test]
fn conformance_suite() {
    let sim = sim_with(11, CpuMode::Model);
    let net = SimMsgNet::new(&sim, 2, 2);
    let fabrics: Vec<Arc<dyn MsgFabric>> = (0..2)
        .map(|cn| {
            Arc::new(Stepped {
                sim: sim.clone(),
                inner: net.fabric(cn),
            }) as _
        })
        .collect();
    conformance::run_all(&fabrics);
    let s = net.stats();
    assert_eq!((s.dropped, s.peer_lost), (0, 0), "{s:?}");
    assert!(s.entries > s.messages, "entries share messages: {s:?}");
}

// ---------------------------------------------------------------------------------------
// Cost model

/// One message's latency from its flush to its delivery, uncontended, CPU off.
fn one_way_ns(sim: &Sim, encoded_bytes: usize) -> u64 {
    let m = &sim.config().nic;
    m.one_way_latency_ns + m.link_ns(m.send_bytes(encoded_bytes as u64)) + m.recv_service_ns
}

fn spawn_maybe_on<'a>(ex: &mut SimExecutor<'a>, cpu: Option<CpuId>, task: impl std::future::Future<Output = ()> + 'a) {
    match cpu {
        Some(cpu) => ex.spawn_on(cpu, task),
        None => ex.spawn(task),
    }
}

/// Run one call of `req_len` bytes from cn0/t0 to cn1/t0 answered with `reply_len`
/// bytes, on a fresh simulation; returns its round-trip time. With `on_cpu`, both
/// workers' tasks run on their virtual CPUs.
fn round_trip_ns(cpu: CpuMode, on_cpu: bool, req_len: usize, reply_len: usize) -> (Sim, u64) {
    round_trip_under(None, cpu, on_cpu, req_len, reply_len)
}

/// [`round_trip_ns`] with `script` installed (if any).
fn round_trip_under(script: Option<&str>, cpu: CpuMode, on_cpu: bool, req_len: usize, reply_len: usize) -> (Sim, u64) {
    let sim = sim_with(5, cpu);
    if let Some(s) = script {
        sim.install_faults(s.parse().unwrap()).unwrap();
    }
    let net = SimMsgNet::new(&sim, 2, 1);
    let (a, b) = (WorkerAddr::new(0, 0), WorkerAddr::new(1, 0));
    let ra = rpc_on(&net, a, RpcConfig::default());
    let rb = rpc_on(&net, b, RpcConfig::default());
    rb.set_handler(reply_of(reply_len));
    let stop = ServeStop::after(1);
    let rtt = Rc::new(Cell::new(0));
    let mut ex = SimExecutor::new(&sim);
    let cpu = |w: WorkerAddr| on_cpu.then(|| sim.cpu_of(u32::from(w.cn), w.thread));
    ex.spawn(serve(&net, Rc::clone(&ra), stop.clone()));
    ex.spawn(serve(&net, Rc::clone(&rb), stop.clone()));
    let (s, r, st) = (sim.clone(), Rc::clone(&rtt), stop.clone());
    spawn_maybe_on(
        &mut ex,
        cpu(a),
        Box::pin(async move {
            let t0 = s.now();
            let reply = ra.call(b, &vec![7u8; req_len]).await.unwrap();
            assert_eq!(reply.len(), reply_len);
            r.set(s.now() - t0);
            st.done_one();
        }),
    );
    ex.run().unwrap();
    let s = net.stats();
    assert_eq!((s.messages, s.entries, s.delivered), (2, 2, 2), "{s:?}");
    (sim, rtt.get())
}

/// Goal: with CPU costs off, an RPC between two CNs takes exactly the model's
/// request one-way time plus the reply's: Σ (latency + link(send bytes) + RECV
/// processing), for a small request and one of three MTU packets.
#[test]
fn rpc_round_trip_is_the_model() {
    for (req, rep) in [(8usize, 40usize), (10_000, 8)] {
        let (sim, rtt) = round_trip_ns(CpuMode::Off, false, req, rep);
        let want = one_way_ns(&sim, ENTRY_HEADER_BYTES + req) + one_way_ns(&sim, ENTRY_HEADER_BYTES + rep);
        eprintln!("RPC {req} B -> {rep} B: {rtt} ns (model {want} ns)");
        assert_eq!(rtt, want);
        // The same with the tasks on their (free) CPUs.
        assert_eq!(round_trip_ns(CpuMode::Off, true, req, rep).1, want);
    }
    let m = &sim_with(0, CpuMode::Off).config().nic.clone();
    assert_eq!(
        m.send_bytes(10_016),
        3 * m.packet_header_bytes + 10_016,
        "MTU segmentation"
    );
}

/// Goal: with the CPU model on, a round trip also pays the caller's poll that pushed the
/// request, `msg.send` on each side and `msg.recv` on each side before the reply is
/// handed over, plus at most one poll of the waiting caller's phase.
#[test]
fn rpc_round_trip_pays_cpu_steps() {
    let (sim, rtt) = round_trip_ns(CpuMode::Model, true, 8, 8);
    let wire = 2 * one_way_ns(&sim, ENTRY_HEADER_BYTES + 8);
    let cpu = &sim.config().cpu;
    let (send, recv, poll) = (
        cpu.step_ns("msg.send"),
        cpu.step_ns("msg.recv"),
        cpu.scaled(cpu.poll_ns),
    );
    eprintln!("RPC with CPU: {rtt} ns (wire {wire}, send {send}, recv {recv}, poll {poll})");
    // The request leaves after the caller's poll and its send; the reply after the
    // server's recv and send; the caller resumes after its recv, at its next poll (it
    // waits by polling, so it may be up to one poll into its CPU's quantum).
    let least = wire + poll + 2 * send + 2 * recv;
    assert!(
        rtt >= least && rtt <= least + poll,
        "{rtt} ns, expected {least}..={}",
        least + poll
    );
    let busy: u64 = sim.cpu_busy().iter().map(|c| c.busy_ns).sum();
    assert!(
        busy >= 2 * send + 2 * recv,
        "steps are charged to the workers' CPUs: {busy} ns"
    );
}

/// Goal: calls that coordinators of one worker make at one instant to one peer travel as
/// one message, and the handler's replies to them as one message back.
#[test]
fn calls_at_one_instant_share_a_message() {
    let sim = sim_with(2, CpuMode::Off);
    let net = SimMsgNet::new(&sim, 2, 1);
    let (a, b) = (WorkerAddr::new(0, 0), WorkerAddr::new(1, 0));
    let ra = rpc_on(&net, a, RpcConfig::default());
    let rb = rpc_on(&net, b, RpcConfig::default());
    rb.set_handler(reply_of(8));
    let calls = 4;
    let stop = ServeStop::after(calls);
    let done = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    ex.spawn(serve(&net, Rc::clone(&ra), stop.clone()));
    ex.spawn(serve(&net, Rc::clone(&rb), stop.clone()));
    for i in 0..calls {
        let (ra, s, d, st) = (Rc::clone(&ra), sim.clone(), Rc::clone(&done), stop.clone());
        ex.spawn(async move {
            ra.call(b, &[i as u8]).await.unwrap();
            d.borrow_mut().push(s.now());
            st.done_one();
        });
    }
    ex.run().unwrap();
    let s = net.stats();
    assert_eq!((s.messages, s.entries), (2, 2 * calls as u64), "{s:?}");
    let want = one_way_ns(&sim, calls * (ENTRY_HEADER_BYTES + 1)) + one_way_ns(&sim, calls * (ENTRY_HEADER_BYTES + 8));
    assert_eq!(*done.borrow(), vec![want; calls]);
    assert_eq!(rb.stats().busy_drains, 1);
}

// ---------------------------------------------------------------------------------------
// A LOTUS-style lock service

const CNS: u16 = 2;
const THREADS: u16 = 2;
const COORDS: usize = 4;
const ROUNDS: u64 = 40;
const KEYS: u64 = 6;
const LOCK: u8 = 1;
const UNLOCK: u8 = 2;

fn lock_req(op: u8, key: u64) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[0] = op;
    b[1..].copy_from_slice(&key.to_le_bytes());
    b
}

/// The word on memory node 0 that counts the increments of `key`.
fn counter(key: u64) -> RemotePtr {
    RemotePtr::new(MnId(0), 64 + 8 * key)
}

async fn post(t: &SimTransport, p: &mut Post) {
    match t.submit(p) {
        Submitted::Done(r) => r.unwrap(),
        Submitted::Pending(ticket) => std::future::poll_fn(|cx| t.poll(ticket, p, cx)).await.unwrap(),
    }
}

/// A worker's lock table: key → holder. Only its own worker's handler touches it.
fn lock_handler() -> impl FnMut(&Rpc, Request<'_>, &mut Vec<u8>) -> Handled {
    let mut table: BTreeMap<u64, WorkerAddr> = BTreeMap::new();
    move |_: &Rpc, r: Request<'_>, out: &mut Vec<u8>| {
        let key = u64::from_le_bytes(r.payload[1..9].try_into().unwrap());
        match r.payload[0] {
            LOCK => {
                let granted = match table.get(&key) {
                    None => {
                        table.insert(key, r.from);
                        true
                    }
                    // A retried request of the holder itself is a duplicate: grant again.
                    Some(h) => *h == r.from && r.retry,
                };
                out.push(granted as u8);
            }
            UNLOCK => assert_eq!(table.remove(&key), Some(r.from), "unlock by the holder"),
            op => panic!("unknown op {op}"),
        }
        Handled::Reply
    }
}

/// What a lock-service run produced; two runs of one seed must agree on all of it.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    end_ns: u64,
    sim: SimStats,
    msg: MsgStats,
    grants: u64,
    denials: u64,
    counters: Vec<u64>,
    rpc: Vec<RpcStats>,
}

/// Every worker homes the locks of some keys and runs coordinators that lock a random
/// key by RPC, increment its counter on the memory node with a READ and a WRITE (not
/// atomic: only the lock keeps increments from being lost), and unlock by RPC.
fn lock_service(seed: u64) -> Outcome {
    lock_service_under(seed, None)
}

/// [`lock_service`] with a fault `script` installed (if any).
fn lock_service_under(seed: u64, script: Option<&str>) -> Outcome {
    let sim = sim_with(seed, CpuMode::Model);
    if let Some(s) = script {
        sim.install_faults(s.parse().unwrap()).unwrap();
    }
    let net = SimMsgNet::new(&sim, CNS, THREADS);
    let workers: Vec<WorkerAddr> = net.fabric(0).workers();
    let stop = ServeStop::after(workers.len() * COORDS);
    let holders: Rc<RefCell<BTreeMap<u64, (WorkerAddr, usize)>>> = Rc::default();
    let grants_of: Rc<RefCell<Vec<u64>>> = Rc::new(RefCell::new(vec![0; KEYS as usize]));
    let denials = Rc::new(Cell::new(0u64));
    let config = RpcConfig {
        timeout: Duration::from_millis(1),
        retries: 1,
    };
    let mut rpcs = Vec::new();
    let mut ex = SimExecutor::new(&sim);
    for &me in &workers {
        let cpu = sim.cpu_of(u32::from(me.cn), me.thread);
        let rpc = rpc_on(&net, me, config);
        rpc.set_handler(lock_handler());
        ex.spawn_on(cpu, serve(&net, Rc::clone(&rpc), stop.clone()));
        let verbs = Rc::new(SimFabric::new(&sim, u32::from(me.cn)).transport_of(me.thread));
        for c in 0..COORDS {
            let mut rng = sim.fork_rng();
            let (rpc, verbs, workers, stop) = (Rc::clone(&rpc), Rc::clone(&verbs), workers.clone(), stop.clone());
            let (holders, grants_of, denials, sim) = (
                Rc::clone(&holders),
                Rc::clone(&grants_of),
                Rc::clone(&denials),
                sim.clone(),
            );
            ex.spawn_on(cpu, async move {
                for _ in 0..ROUNDS {
                    let key = rng.random_range(0..KEYS);
                    let home = workers[(key % workers.len() as u64) as usize];
                    if rpc.call(home, &lock_req(LOCK, key)).await.unwrap() != [1] {
                        denials.set(denials.get() + 1);
                        sim.sleep(rng.random_range(500..3_000)).await;
                        continue;
                    }
                    assert!(
                        holders.borrow_mut().insert(key, (me, c)).is_none(),
                        "two holders of key {key}"
                    );
                    grants_of.borrow_mut()[key as usize] += 1;
                    let mut p = Post::new();
                    let r = p.read(counter(key), 8);
                    post(&verbs, &mut p).await;
                    let v = u64::from_le_bytes(p.bytes(r).try_into().unwrap());
                    let mut p = Post::new();
                    p.write(counter(key), &(v + 1).to_le_bytes());
                    post(&verbs, &mut p).await;
                    assert_eq!(holders.borrow_mut().remove(&key), Some((me, c)));
                    rpc.call(home, &lock_req(UNLOCK, key)).await.unwrap();
                }
                stop.done_one();
            });
        }
        rpcs.push(rpc);
    }
    let report = ex.run().unwrap();
    let region = &sim.regions()[0];
    let counters: Vec<u64> = (0..KEYS).map(|k| region.load(counter(k).offset).unwrap()).collect();
    let grants_of = grants_of.borrow().clone();
    assert_eq!(
        counters, grants_of,
        "an increment was lost: the lock let two holders in"
    );
    let grants: u64 = grants_of.iter().sum();
    assert_eq!(grants + denials.get(), workers.len() as u64 * COORDS as u64 * ROUNDS);
    assert!(holders.borrow().is_empty());
    let rpc: Vec<RpcStats> = rpcs.iter().map(|r| r.stats()).collect();
    for (w, s) in workers.iter().zip(&rpc) {
        assert_eq!(
            (s.failed, s.retries, s.stray_replies, s.unhandled),
            (0, 0, 0, 0),
            "{w}: {s:?}"
        );
    }
    Outcome {
        end_ns: report.end_ns,
        sim: sim.stats(),
        msg: net.stats(),
        grants,
        denials: denials.get(),
        counters,
        rpc,
    }
}

/// Goal: locks served by RPC on the workers of two simulated CNs never admit two
/// holders, so non-atomic increments under them are never lost; every call is
/// answered, with no retries, and the executor ends (no livelock, no deadlock).
#[test]
fn lock_service_on_the_simulator() {
    let o = lock_service(42);
    eprintln!(
        "lock service: {} grants, {} denials, end {} ns, {:?}",
        o.grants, o.denials, o.end_ns, o.msg
    );
    assert!(o.grants > 0 && o.denials > 0, "the keys were contended: {o:?}");
    assert_eq!((o.msg.dropped, o.msg.peer_lost), (0, 0));
    assert!(o.msg.wire_bytes > 0, "some locks live on the other CN");
}

/// Goal: one seed gives one run (end time, every counter, every RPC's stats); another
/// seed gives another.
#[test]
fn same_seed_same_run() {
    let a = lock_service(7);
    let b = lock_service(7);
    assert_eq!(a, b);
    let c = lock_service(8);
    assert_ne!(
        (a.end_ns, a.counters),
        (c.end_ns, c.counters),
        "the seed drives the run"
    );
}

// ---------------------------------------------------------------------------------------
// Crashes

fn one_way(id: u64) -> Entry<'static> {
    Entry {
        kind: EntryKind::OneWay,
        retry: false,
        id,
        payload: b"x",
    }
}

/// Lost peers and ids of entries `m` hands over, running the simulation first.
fn drain(sim: &Sim, m: &dyn Mailbox) -> (Vec<WorkerAddr>, Vec<u64>) {
    while sim.step() {}
    let (mut lost, mut ids) = (Vec::new(), Vec::new());
    m.drain(&mut |ev| match ev {
        Event::PeerLost { peer, .. } => lost.push(peer),
        Event::Entry { entry, .. } => ids.push(entry.id),
    });
    (lost, ids)
}

/// Goal: a crash is reported once to each worker that talked to the crashed workers,
/// even when it also took a message in flight; messages to and from it are dropped and
/// its inbox emptied; a later send to it is lost and reported; after revival messages
/// flow again, and a second crash is reported again.
#[test]
fn a_crash_is_reported_once_per_peer() {
    let sim = sim_with(3, CpuMode::Model);
    let net = SimMsgNet::new(&sim, 3, 2);
    let mb = |cn, t| net.mailbox(WorkerAddr::new(cn, t)).unwrap();
    let (a, quiet, b, b2, c) = (mb(0, 0), mb(0, 1), mb(1, 0), mb(1, 1), mb(2, 0));
    for to in [b.addr(), b2.addr(), c.addr()] {
        a.push(to, one_way(1)).unwrap();
    }
    a.flush();
    assert_eq!(drain(&sim, &b), (vec![], vec![1]));
    assert_eq!(drain(&sim, &b2), (vec![], vec![1]));
    // One message in flight to b, one waiting undrained in b2's inbox, then cn1 crashes.
    a.push(b2.addr(), one_way(2)).unwrap();
    a.flush();
    a.push(b.addr(), one_way(3)).unwrap();
    a.flush();
    assert!(sim.step(), "the message to b2 was flushed first and arrives first");
    net.set_down(1, true);
    assert!(net.is_down(1));
    assert_eq!(drain(&sim, &a), (vec![b.addr(), b2.addr()], vec![]), "once per peer");
    assert_eq!(drain(&sim, &a), (vec![], vec![]), "and only once");
    assert_eq!(drain(&sim, &quiet), (vec![], vec![]), "no traffic with cn1, no report");
    assert_eq!(drain(&sim, &c), (vec![], vec![1]), "cn2 is not affected");
    // A send to the crashed node is a new attempt, lost and reported; it sends nothing.
    a.push(b.addr(), one_way(4)).unwrap();
    a.flush();
    b.push(a.addr(), one_way(5)).unwrap();
    b.flush();
    assert_eq!(drain(&sim, &a), (vec![b.addr()], vec![]));
    let dropped = net.stats().dropped;
    assert_eq!(dropped, 3, "in flight to b, a's new send, b's send");
    // Revival: an empty inbox, then messages flow both ways.
    net.set_down(1, false);
    assert_eq!(drain(&sim, &b2), (vec![], vec![]), "the crash emptied the inbox");
    a.push(b.addr(), one_way(6)).unwrap();
    a.flush();
    b.push(a.addr(), one_way(7)).unwrap();
    b.flush();
    assert_eq!(drain(&sim, &b), (vec![], vec![6]));
    assert_eq!(drain(&sim, &a), (vec![], vec![7]));
    net.set_down(1, true);
    assert_eq!(drain(&sim, &a), (vec![b.addr(), b2.addr()], vec![]), "a new crash");
    assert_eq!(net.stats().peer_lost, 5);
}

/// How the victim CN goes down.
#[derive(Copy, Clone, Debug)]
enum Crash {
    /// `SimMsgNet::set_down`: the network tells the peers at once.
    SetDown,
    /// A `crash-cn` fault script: `Sim::cn_down` turns true, the victim's tasks stop, and
    /// the peers notice at their next transport action or serve tick.
    Script,
}

/// A worker on cn0 calls cn1 ("ping", then "hold", which cn1 answers never), cn1
/// crashes at `crash_at_ns`, then cn0 calls cn1 again and cn2 once. Returns when the two
/// calls to cn1 failed, and the caller's stats.
fn call_a_crashing_cn(crash: Crash, crash_at_ns: u64) -> (Vec<u64>, RpcStats) {
    let sim = sim_with(9, CpuMode::Model);
    let net = SimMsgNet::new(&sim, 3, 1);
    let (a, victim, other) = (WorkerAddr::new(0, 0), WorkerAddr::new(1, 0), WorkerAddr::new(2, 0));
    let config = RpcConfig {
        timeout: Duration::from_millis(10),
        retries: 2,
    };
    let rpcs: Vec<Rc<Rpc>> = [a, victim, other].iter().map(|&w| rpc_on(&net, w, config)).collect();
    rpcs[1].set_handler(|_: &Rpc, r: Request<'_>, _: &mut Vec<u8>| {
        if r.payload == b"ping" {
            Handled::Reply
        } else {
            Handled::Later
        }
    });
    rpcs[2].set_handler(reply_of(1));
    let stop = ServeStop::after(1);
    let mut ex = SimExecutor::new(&sim);
    for r in &rpcs {
        ex.spawn(serve(&net, Rc::clone(r), stop.clone()));
    }
    let failed_at = Rc::new(RefCell::new(Vec::new()));
    let (ra, s, f, st) = (Rc::clone(&rpcs[0]), sim.clone(), Rc::clone(&failed_at), stop.clone());
    ex.spawn_on(sim.cpu_of(0, 0), async move {
        ra.call(victim, b"ping").await.unwrap();
        let held = ra.call(victim, b"hold").await;
        assert!(
            matches!(held, Err(RpcError::PeerLost { to, .. }) if to == victim),
            "{held:?}"
        );
        f.borrow_mut().push(s.now());
        let later = ra.call(victim, b"ping").await;
        assert!(
            matches!(later, Err(RpcError::PeerLost { to, .. }) if to == victim),
            "{later:?}"
        );
        f.borrow_mut().push(s.now());
        assert_eq!(ra.call(other, b"hi").await.unwrap(), [0xab]);
        st.done_one();
    });
    match crash {
        Crash::SetDown => {
            let (n, s) = (Arc::clone(&net), sim.clone());
            ex.spawn(async move {
                s.sleep(crash_at_ns).await;
                n.set_down(1, true);
            });
        }
        Crash::Script => {
            let script = format!("crash-cn cn=1 at={crash_at_ns}ns").parse().unwrap();
            sim.install_faults(script).unwrap();
        }
    }
    let report = ex.run().unwrap();
    assert_eq!((report.pending, report.crashed), (0, 0), "every task ended: {report:?}");
    let t = failed_at.borrow().clone();
    eprintln!("{crash:?}: crash at {crash_at_ns} ns; calls failed at {t:?} ns");
    (t, rpcs[0].stats())
}

/// Goal: when the network reports a CN down, an RPC in flight to it fails with
/// `PeerLost` right away (not after its 10 ms timeouts), later calls to it fail the same
/// way after their retries, calls to other CNs still succeed, and the run ends.
#[test]
fn calls_to_a_crashed_cn_fail_fast() {
    let crash_at_ns = 20_000;
    let (t, s) = call_a_crashing_cn(Crash::SetDown, crash_at_ns);
    // A few CPU steps after the crash.
    assert!(t[0] >= crash_at_ns && t[0] < crash_at_ns + 2_000, "{t:?}");
    assert!(t[1] < t[0] + 2_000, "{t:?}");
    assert_eq!(
        (s.failed, s.retries),
        (2, 4),
        "each failed call used its 2 retries: {s:?}"
    );
}

/// Goal: a crash only the fault script knows of (`Sim::cn_down`) is noticed within one
/// serve tick by a worker waiting on the crashed CN, with the same outcome.
#[test]
fn calls_to_a_cn_crashed_by_a_fault_script_fail() {
    let crash_at_ns = 20_000;
    let (t, s) = call_a_crashing_cn(Crash::Script, crash_at_ns);
    assert!(
        t[0] >= crash_at_ns && t[0] < crash_at_ns + dmtx_sim::msg::SERVE_TICK_NS_DEFAULT + 2_000,
        "{t:?}"
    );
    assert!(t[1] < t[0] + 2_000, "{t:?}");
    assert_eq!((s.failed, s.retries), (2, 4), "{s:?}");
}

/// Goal: a scripted partition between two compute nodes drops their messages while it
/// lasts: calls across it time out (no peer is reported lost: none crashed), and calls
/// succeed again once it heals.
#[test]
fn a_partition_drops_messages_until_it_heals() {
    let sim = sim_with(4, CpuMode::Model);
    let script = "partition side=cn1 at=20us for=200us".parse().unwrap();
    sim.install_faults(script).unwrap();
    let net = SimMsgNet::new(&sim, 2, 1);
    let (a, b) = (WorkerAddr::new(0, 0), WorkerAddr::new(1, 0));
    let config = RpcConfig {
        timeout: Duration::from_micros(30),
        retries: 0,
    };
    let (ra, rb) = (rpc_on(&net, a, config), rpc_on(&net, b, config));
    rb.set_handler(reply_of(8));
    let stop = ServeStop::after(1);
    let mut ex = SimExecutor::new(&sim);
    ex.spawn_on(sim.cpu_of(0, 0), serve(&net, Rc::clone(&ra), stop.clone()));
    ex.spawn_on(sim.cpu_of(1, 0), serve(&net, Rc::clone(&rb), stop.clone()));
    let outcomes = Rc::new(RefCell::new(Vec::new()));
    let (o, s, st) = (Rc::clone(&outcomes), sim.clone(), stop.clone());
    ex.spawn_on(sim.cpu_of(0, 0), async move {
        while s.now() < 400_000 {
            let started = s.now();
            let r = ra.call(b, b"ping").await;
            o.borrow_mut()
                .push((started, r.map(|v| v.len()).map_err(|e| e.to_string())));
            s.sleep(10_000).await;
        }
        st.done_one();
    });
    ex.run().unwrap();
    let outcomes = outcomes.borrow();
    for (started, r) in outcomes.iter() {
        // A call is cut if it overlaps the partition [20, 220) µs.
        let overlaps = *started < 220_000 && started + 30_000 > 20_000;
        match r {
            Ok(n) => {
                assert_eq!(*n, 8);
                assert!(
                    !(*started >= 20_000 && *started < 190_000),
                    "a call at {started} ns crossed the partition"
                );
            }
            Err(e) => {
                assert!(overlaps, "a call at {started} ns failed outside the partition: {e}");
                assert!(e.contains("no reply"), "a timeout, not a lost peer: {e}");
            }
        }
    }
    let after = outcomes.iter().filter(|(t, _)| *t >= 230_000);
    assert!(
        after.clone().count() > 5 && after.clone().all(|(_, r)| r.is_ok()),
        "{outcomes:?}"
    );
    assert!(outcomes.iter().any(|(_, r)| r.is_err()), "{outcomes:?}");
    assert!(net.stats().dropped > 0);
}

// ---------------------------------------------------------------------------------------
// Slow NICs and delays (fault script)

/// `m` with the times a `slow-nic` fault of factor `k` scales on a message's path (the
/// fields `NicModel::time_send` reads; the packet format is not scaled).
fn slowed(m: &NicModel, k: u64) -> NicModel {
    let mut s = m.clone();
    s.link_ps_per_byte *= k;
    s.one_way_latency_ns *= k;
    s.recv_service_ns *= k;
    s
}

/// Run the simulation's events up to virtual time `at` (a timer event gets it there),
/// recording in `delivered[id]` when each entry reaches a mailbox of `mbs`.
fn run_to(sim: &Sim, at: u64, mbs: &[SimMailbox], delivered: &mut [Option<u64>]) {
    let record = |delivered: &mut [Option<u64>]| {
        for mb in mbs {
            mb.drain(&mut |ev| match ev {
                Event::Entry { entry, .. } => {
                    let d = &mut delivered[entry.id as usize];
                    assert!(d.is_none(), "entry {} delivered twice", entry.id);
                    *d = Some(sim.now());
                }
                Event::PeerLost { peer, why } => panic!("{peer} lost: {why}"),
            });
        }
    };
    if at > sim.now() && at != u64::MAX {
        let mut timer = sim.sleep(at - sim.now());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut timer).poll(&mut cx).is_pending());
    }
    while sim.next_event_time().is_some_and(|t| t <= at) {
        assert!(sim.step());
        record(delivered);
    }
}

/// One message per `(at ns, from cn, to cn, payload bytes)`, sent at `at` by the only
/// worker of `from` to the only worker of `to`, among `cns` compute nodes with `script`
/// installed and CPU costs off. Returns each message's one-way time (flush to delivery,
/// in send order) and the network's counters.
fn one_way_times(script: &str, cns: u16, sends: &[(u64, u16, u16, usize)]) -> (Vec<u64>, MsgStats) {
    let sim = sim_with(6, CpuMode::Off);
    sim.install_faults(script.parse().unwrap()).unwrap();
    let net = SimMsgNet::new(&sim, cns, 1);
    let mbs: Vec<SimMailbox> = (0..cns).map(|c| net.mailbox(WorkerAddr::new(c, 0)).unwrap()).collect();
    let mut delivered = vec![None; sends.len()];
    for (id, &(at, from, to, len)) in sends.iter().enumerate() {
        assert!(at >= sim.now(), "sends are listed in time order");
        run_to(&sim, at, &mbs, &mut delivered);
        let payload = vec![0x5a; len];
        let entry = Entry {
            kind: EntryKind::OneWay,
            retry: false,
            id: id as u64,
            payload: &payload,
        };
        mbs[usize::from(from)].push(WorkerAddr::new(to, 0), entry).unwrap();
        mbs[usize::from(from)].flush();
    }
    run_to(&sim, u64::MAX, &mbs, &mut delivered);
    let times = sends
        .iter()
        .zip(&delivered)
        .map(|(s, d)| d.unwrap_or_else(|| panic!("{s:?} was never delivered")) - s.0)
        .collect();
    (times, net.stats())
}

/// Goal: a `slow-nic` fault of factor k on a message's receiver gives it exactly the
/// one-way time of `NicModel::time_send` with the scaled model (k × latency, the slow
/// rx link, k × RECV); on its sender, k × latency and the slow tx link but the
/// receiver's own RECV; messages between two other CNs at the same instant, and
/// messages after the fault's `for`, take the unfaulted time.
#[test]
fn a_slow_nic_stretches_messages_to_and_from_its_cn_only() {
    let (k, len) = (4, 3_000usize);
    let m = SimConfig::new(0).nic;
    let slow = slowed(&m, k);
    let b = (ENTRY_HEADER_BYTES + len) as u64;
    let base = m.time_send(&mut FabricState::default(), 0, 1, b, 0);
    let to_slow = slow.time_send(&mut FabricState::default(), 0, 1, b, 0);
    let from_slow = k * m.one_way_latency_ns + slow.link_ns(slow.send_bytes(b)) + m.recv_service_ns;
    let script = format!("slow-nic node=cn1 factor={k} at=0 for=100us");
    // The receiver cn1 is slow.
    let sends = [(0, 0, 1, len), (0, 2, 3, len), (200_000, 0, 1, len)];
    let (t, s) = one_way_times(&script, 4, &sends);
    eprintln!("slow receiver x{k}: {t:?} ns (unfaulted {base}, closed form {to_slow})");
    assert_eq!(t, vec![to_slow, base, base]);
    assert_eq!((s.delivered, s.dropped, s.delayed), (3, 0, 0), "{s:?}");
    // The sender cn1 is slow.
    let sends = [(0, 1, 0, len), (0, 2, 3, len), (200_000, 1, 0, len)];
    let (t, _) = one_way_times(&script, 4, &sends);
    eprintln!("slow sender x{k}: {t:?} ns (unfaulted {base}, closed form {from_slow})");
    assert_eq!(t, vec![from_slow, base, base]);
    assert!(
        from_slow > base && to_slow > from_slow,
        "both stretch; the slow RECV more"
    );
}

/// Goal: `delay by=30us path=cn0->cn1` (in effect 20..120 µs) delays exactly the
/// messages cn0 sends cn1 inside its window by 30 µs; the reverse path, another sender
/// to cn1, cn0 to another receiver, and cn0→cn1 before and after the window are not
/// delayed, except that a message sent just after the window waits behind a delayed one
/// of its pair (FIFO per pair).
#[test]
fn a_delay_fault_delays_its_path_during_its_window() {
    let m = SimConfig::new(0).nic;
    let by = 30_000;
    let len = 8;
    let base = m.time_send(&mut FabricState::default(), 0, 1, (ENTRY_HEADER_BYTES + len) as u64, 0);
    let sends = [
        (0, 0, 1, len),       // before the window
        (50_000, 0, 1, len),  // in it
        (50_000, 1, 0, len),  // the reverse path
        (60_000, 2, 1, len),  // another sender to cn1
        (70_000, 0, 2, len),  // cn0 to another receiver
        (119_000, 0, 1, len), // the window's last microsecond
        (121_000, 0, 1, len), // after it, behind the delayed one
        (300_000, 0, 1, len), // well after
    ];
    let (t, s) = one_way_times(&format!("delay by={by}ns path=cn0->cn1 at=20us for=100us"), 3, &sends);
    eprintln!("delay {by} ns on cn0->cn1: {t:?} ns (unfaulted {base})");
    let held = 119_000 + base + by - 121_000;
    assert_eq!(t, vec![base, base + by, base, base, base, base + by, held, base]);
    assert_eq!((s.delivered, s.delayed), (8, 2), "{s:?}");
    // Without the script, the same sends take the unfaulted time.
    let (t, s) = one_way_times("delay by=30us path=cn0->cn1 at=1s", 3, &sends);
    assert_eq!(t, vec![base; sends.len()]);
    assert_eq!(s.delayed, 0);
}

/// Goal: `delay by=30us node=cn1` (in effect 20..120 µs) delays every message cn1
/// sends or receives inside its window by 30 µs, and no other.
#[test]
fn a_node_delay_delays_everything_it_sends_or_receives() {
    let m = SimConfig::new(0).nic;
    let (by, len) = (30_000, 8);
    let base = m.time_send(&mut FabricState::default(), 0, 1, (ENTRY_HEADER_BYTES + len) as u64, 0);
    let sends = [
        (0, 0, 1, len),       // before the window
        (50_000, 0, 1, len),  // to cn1
        (50_000, 1, 0, len),  // from cn1
        (60_000, 2, 3, len),  // between two others
        (70_000, 2, 1, len),  // to cn1 from another
        (300_000, 0, 1, len), // after it
    ];
    let (t, s) = one_way_times(&format!("delay by={by}ns node=cn1 at=20us for=100us"), 4, &sends);
    assert_eq!(t, vec![base, base + by, base + by, base, base + by, base]);
    assert_eq!((s.delivered, s.delayed), (6, 3), "{s:?}");
}

/// One call's round-trip time, CPU costs off, with `script` installed (if any).
fn rpc_rtt_under(script: Option<&str>, req_len: usize, reply_len: usize) -> u64 {
    round_trip_under(script, CpuMode::Off, false, req_len, reply_len).1
}

/// Goal: an RPC to a CN whose NIC is k times slower takes the request's one-way time
/// into the slow receiver plus the reply's out of the slow sender (the closed forms of
/// the one-way test); a `delay path=` on the reply path adds its `by` to the RPC.
#[test]
fn an_rpc_across_a_slow_cn_pays_for_it() {
    let (k, req, rep) = (3, 64usize, 512usize);
    let m = SimConfig::new(0).nic;
    let slow = slowed(&m, k);
    let (bq, bp) = ((ENTRY_HEADER_BYTES + req) as u64, (ENTRY_HEADER_BYTES + rep) as u64);
    let base = rpc_rtt_under(None, req, rep);
    assert_eq!(
        base,
        m.time_send(&mut FabricState::default(), 0, 1, bq, 0) + m.time_send(&mut FabricState::default(), 1, 0, bp, 0)
    );
    let rtt = rpc_rtt_under(Some(&format!("slow-nic node=cn1 factor={k} at=0")), req, rep);
    let want = slow.time_send(&mut FabricState::default(), 0, 1, bq, 0)
        + k * m.one_way_latency_ns
        + slow.link_ns(slow.send_bytes(bp))
        + m.recv_service_ns;
    eprintln!("RPC {req} B -> {rep} B: {base} ns; server NIC x{k}: {rtt} ns (model {want} ns)");
    assert_eq!(rtt, want);
    // The slow CN as the caller: each message still has one slow end, now the other
    // one, and the sum is the same (k·RECV on the reply instead of the request).
    let caller_slow = rpc_rtt_under(Some(&format!("slow-nic node=cn0 factor={k} at=0")), req, rep);
    assert_eq!(caller_slow, rtt);
    let delayed = rpc_rtt_under(Some("delay by=7us path=cn1->cn0 at=0"), req, rep);
    assert_eq!(delayed, base + 7_000);
}

/// Goal: `delay` takes `path=cnA->cnB [for=DUR]` in both script forms, and refuses a
/// path inside one CN or through a memory node, `for` without a path, and `count` with
/// one, naming the fix.
#[test]
fn delay_path_parses() {
    let a: FaultScript = "delay by=5us path=cn0->cn2 for=1ms at=2ms".parse().unwrap();
    let b = FaultScript::from_toml(
        r#"
        [[fault]]
        kind = "delay"
        by = "5us"
        path = "cn0->cn2"
        for = "1ms"
        at = "2ms"
        "#,
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(
        a.faults[0].action,
        FaultAction::DelayMessages {
            from: 0,
            to: 2,
            by_ns: 5_000,
            for_ns: Some(1_000_000)
        }
    );
    let op: FaultScript = "delay by=5us on=kind:cas".parse().unwrap();
    assert_eq!(op.faults[0].action, FaultAction::Delay { by_ns: 5_000 });
    let err = |s: &str| s.parse::<FaultScript>().unwrap_err().to_string();
    assert!(err("delay by=1us path=cn1->cn1 at=0").contains("inside one compute node"));
    assert!(err("delay by=1us path=mn0->cn1 at=0").contains("write path=cnA->cnB"));
    assert!(err("delay by=1us path=cn0,cn1 at=0").contains("write path=cnA->cnB"));
    assert!(err("delay by=1us for=1ms on=kind:cas").contains("add path=cnA->cnB"));
    assert!(err("delay by=1us path=cn0->cn1 at=0 count=2").contains("`count` applies to"));
    assert!(err("delay path=cn0->cn1 at=0").contains("field `by` is missing"));
    let node: FaultScript = "delay by=5us node=mn1 for=1ms at=2ms".parse().unwrap();
    assert_eq!(
        node.faults[0].action,
        FaultAction::DelayNode {
            node: dmtx_sim::Node::Mn(1),
            by_ns: 5_000,
            for_ns: Some(1_000_000)
        }
    );
    assert!(err("delay by=1us node=cn0 path=cn0->cn1 at=0").contains("keep one"));
    assert!(err("delay by=1us node=xx0 at=0").contains("node"));
}

/// Goal: the LOTUS-style lock service stays correct (no lost increment, every call
/// answered without a retry) with cn1's NIC 5× slower and cn0→cn1 messages 20 µs late
/// for part of the run; those faults lengthen the run, and one seed still gives one run.
#[test]
fn lock_service_under_a_slow_nic_and_a_delay() {
    let script = "slow-nic node=cn1 factor=5 at=50us for=150us; delay by=20us path=cn0->cn1 at=100us for=150us";
    let clean = lock_service(7);
    let a = lock_service_under(7, Some(script));
    eprintln!(
        "lock service: end {} ns clean, {} ns under faults; {:?}",
        clean.end_ns, a.end_ns, a.msg
    );
    assert!(a.msg.delayed > 0, "some messages crossed the delayed path: {:?}", a.msg);
    assert!(a.end_ns > clean.end_ns, "{} <= {}", a.end_ns, clean.end_ns);
    assert_eq!(a, lock_service_under(7, Some(script)));
}
