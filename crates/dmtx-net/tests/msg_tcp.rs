//! CN↔CN messaging end to end: a LOTUS-style lock service whose locks live on the
//! worker threads of two compute nodes, served by each worker's handler between its
//! coordinators, over `mem` and over `tcp`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::TcpListener;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dmtx_memnode::server::{Server, ServerConfig};
use dmtx_net::msg::{PeerNode, TcpMsgFabric};
use dmtx_net::{TcpConfig, TcpFabric};
use dmtx_runtime::rpc::Progress;
use dmtx_runtime::{yield_now, Handled, LocalExecutor, RealClock, Request, Rpc, RpcConfig};
use dmtx_verbs::msg::{MemMsgNet, MsgFabric, WorkerAddr};
use dmtx_verbs::{Fabric, MemFabric, MnId, Post, Region, RemotePtr, Submitted, Transport};

const CNS: u16 = 2;
const THREADS: u16 = 2;
const COROUTINES: u64 = 4;
const ROUNDS: u64 = 100;
const KEYS: u64 = 16;

const LOCK: u8 = 1;
const UNLOCK: u8 = 2;

fn req(op: u8, key: u64) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[0] = op;
    b[1..].copy_from_slice(&key.to_le_bytes());
    b
}

/// Who holds each key, as every thread of the test sees it: the lock service must never
/// let two coordinators in at once.
#[derive(Default)]
struct Truth {
    /// Coordinators finished, over all workers: a worker serves until all are.
    finished: AtomicU64,
    holders: Mutex<HashMap<u64, (WorkerAddr, u64)>>,
    grants: AtomicU64,
    denials: AtomicU64,
}

/// One worker: installs the lock handler for the keys homed here, and runs coordinators
/// that lock random keys on their home workers, hold them across a few passes, unlock.
/// Post and wait on a bare transport (no coordinator context needed here).
async fn post(t: &dyn Transport, p: &mut Post) {
    match t.submit(p) {
        Submitted::Done(r) => r.unwrap(),
        Submitted::Pending(ticket) => std::future::poll_fn(|cx| t.poll(ticket, p, cx)).await.unwrap(),
    }
}

/// The word on memory node 0 that counts the grants of `key`.
fn grant_counter(key: u64) -> RemotePtr {
    RemotePtr::new(MnId(0), 64 + 8 * key)
}

fn worker(fabric: &dyn MsgFabric, verbs: &dyn Fabric, cn: u16, thread: u16, truth: &Truth) {
    let transport: Rc<dyn Transport> = Rc::from(verbs.endpoint(u32::from(cn) * 100 + u32::from(thread)).unwrap());
    let rpc = Rc::new(Rpc::new(
        fabric.mailbox(thread).unwrap(),
        Arc::new(RealClock::new()),
        RpcConfig {
            timeout: Duration::from_secs(5),
            retries: 1,
        },
    ));
    // Lock table of this thread: key -> (holder, request id). Only this thread touches it.
    let table: Rc<RefCell<HashMap<u64, WorkerAddr>>> = Rc::default();
    let t2 = Rc::clone(&table);
    rpc.set_handler(move |_: &Rpc, r: Request<'_>, out: &mut Vec<u8>| {
        let key = u64::from_le_bytes(r.payload[1..9].try_into().unwrap());
        let mut t = t2.borrow_mut();
        match r.payload[0] {
            LOCK => {
                // A retried request from the holder itself is a duplicate: grant again.
                let granted = match t.get(&key) {
                    None => {
                        t.insert(key, r.from);
                        true
                    }
                    Some(h) => *h == r.from && r.retry,
                };
                out.push(granted as u8);
            }
            UNLOCK => {
                assert_eq!(t.remove(&key), Some(r.from), "unlock by the holder");
            }
            op => panic!("unknown op {op}"),
        }
        Handled::Reply
    });
    let workers: Vec<WorkerAddr> = rpc.workers().to_vec();
    let me = WorkerAddr::new(cn, thread);
    let mut ex = LocalExecutor::new();
    ex.add_poller(Rc::clone(&rpc) as Rc<dyn Progress>);
    let done = Rc::new(Cell::new(0u64));
    for c in 0..COROUTINES {
        let (rpc, workers, done, t) = (
            Rc::clone(&rpc),
            workers.clone(),
            Rc::clone(&done),
            Rc::clone(&transport),
        );
        ex.spawn(async move {
            let mut seed = (u64::from(me.cn) << 32) ^ (u64::from(me.thread) << 16) ^ c ^ 0x9e37_79b9;
            for _ in 0..ROUNDS {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let key = seed % KEYS;
                let home = workers[(key % workers.len() as u64) as usize];
                let granted = rpc.call(home, &req(LOCK, key)).await.unwrap() == [1];
                if !granted {
                    truth.denials.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                {
                    let mut h = truth.holders.lock().unwrap();
                    assert!(h.insert(key, (me, c)).is_none(), "two holders of key {key}");
                }
                truth.grants.fetch_add(1, Ordering::Relaxed);
                // Work under the lock with a verb, so the executor also waits on the
                // memory node while its handler must keep answering lock requests.
                let mut p = Post::new();
                p.faa(grant_counter(key), 1);
                post(t.as_ref(), &mut p).await;
                yield_now().await;
                assert_eq!(truth.holders.lock().unwrap().remove(&key), Some((me, c)));
                // Unlock as a call, so the key is free before this coordinator goes on.
                rpc.call(home, &req(UNLOCK, key)).await.unwrap();
            }
            done.set(done.get() + 1);
        });
    }
    // After its own coordinators finish, a worker keeps serving until everyone is done.
    let all = COROUTINES * u64::from(CNS) * u64::from(THREADS);
    let finished = &truth.finished;
    let rpc2 = Rc::clone(&rpc);
    ex.spawn(async move {
        while done.get() < COROUTINES {
            yield_now().await;
        }
        finished.fetch_add(COROUTINES, Ordering::SeqCst);
        while finished.load(Ordering::SeqCst) < all {
            rpc2.progress();
            std::thread::yield_now();
            yield_now().await;
        }
    });
    ex.run(transport.as_ref());
    let s = rpc.stats();
    assert_eq!(s.failed, 0, "{me}: {s:?}");
}

fn run(fabrics: Vec<Arc<dyn MsgFabric>>, verbs: Arc<dyn Fabric>, counters: impl Fn(u64) -> u64) {
    let truth = Truth::default();
    std::thread::scope(|s| {
        for (cn, f) in fabrics.iter().enumerate() {
            for t in 0..THREADS {
                let (f, v, truth) = (Arc::clone(f), Arc::clone(&verbs), &truth);
                s.spawn(move || worker(f.as_ref(), v.as_ref(), cn as u16, t, truth));
            }
        }
    });
    let (g, d) = (
        truth.grants.load(Ordering::Relaxed),
        truth.denials.load(Ordering::Relaxed),
    );
    assert_eq!(g + d, u64::from(CNS * THREADS) * COROUTINES * ROUNDS);
    assert!(g > 0 && d > 0, "the keys were contended: {g} grants, {d} denials");
    assert!(truth.holders.lock().unwrap().is_empty());
    assert_eq!(
        (0..KEYS).map(counters).sum::<u64>(),
        g,
        "one FAA per grant reached the memory node"
    );
}

/// Goal: over in-process queues, the lock service on worker threads never grants a key
/// twice, and every call is answered.
#[test]
fn lock_service_over_mem() {
    let net = MemMsgNet::new(CNS, THREADS);
    let region = Arc::new(Region::new(1 << 16));
    let verbs = Arc::new(MemFabric::new(vec![Arc::clone(&region)]));
    run(
        (0..CNS)
            .map(|cn| Arc::new(net.fabric(cn)) as Arc<dyn MsgFabric>)
            .collect(),
        verbs,
        |k| region.load(grant_counter(k).offset).unwrap(),
    );
}

/// Goal: the same over TCP between two compute nodes' listeners on loopback, with the
/// verbs over TCP too (the executor then drives the tcp transport without sleeping, so
/// lock requests are answered while verbs are in flight).
#[test]
fn lock_service_over_tcp() {
    let listeners: Vec<TcpListener> = (0..CNS).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<PeerNode> = listeners
        .iter()
        .enumerate()
        .map(|(cn, l)| PeerNode {
            cn: cn as u16,
            addr: l.local_addr().unwrap(),
            threads: THREADS,
        })
        .collect();
    let config = TcpConfig::new(1, b"0123456789abcdef");
    let fabrics: Vec<Arc<dyn MsgFabric>> = listeners
        .into_iter()
        .enumerate()
        .map(|(cn, l)| Arc::new(TcpMsgFabric::with_listener(cn as u16, l, peers.clone(), config.clone()).unwrap()) as _)
        .collect();
    let mut mn = ServerConfig::new(MnId(0), 1 << 16);
    mn.token = b"0123456789abcdef".to_vec();
    mn.cluster_id = 1;
    let mn = Server::bind(mn).unwrap().spawn();
    let verbs = Arc::new(TcpFabric::connect(vec![(MnId(0), mn.local_addr())], config).unwrap());
    run(fabrics, verbs, |k| mn.region().load(grant_counter(k).offset).unwrap());
}
