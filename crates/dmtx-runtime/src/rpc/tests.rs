use std::cell::RefCell;
use std::collections::HashSet;

use dmtx_verbs::msg::{MemMsgNet, MsgFabric};

use super::*;
use crate::{LocalExecutor, RealClock};

fn rpc_on(net: &Arc<MemMsgNet>, cn: u16, thread: u16, config: RpcConfig) -> Rc<Rpc> {
    let mailbox = net.fabric(cn).mailbox(thread).unwrap();
    Rc::new(Rpc::new(mailbox, Arc::new(RealClock::new()), config))
}

fn u64_of(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap())
}

/// Run `tasks` on one executor driving every endpoint in `rpcs`, to completion.
pub(crate) fn run_all<'a>(rpcs: &[Rc<Rpc>], tasks: Vec<Pin<Box<dyn Future<Output = ()> + 'a>>>) {
    let mut ex = LocalExecutor::new();
    for r in rpcs {
        ex.add_poller(Rc::clone(r) as Rc<dyn Progress>);
    }
    for t in tasks {
        ex.spawn(t);
    }
    let fabric = dmtx_verbs::MemFabric::new(vec![]);
    ex.run(&fabric.transport());
}

/// An adder: replies with payload + its thread's running total.
fn adder(total: Rc<RefCell<u64>>) -> impl Handler {
    move |_: &Rpc, req: Request<'_>, out: &mut Vec<u8>| {
        *total.borrow_mut() += u64_of(req.payload);
        out.extend_from_slice(&total.borrow().to_le_bytes());
        Handled::Reply
    }
}

/// Goal: calls reach the handler of the named worker and their replies come back to the
/// right caller; many coordinators' calls in one pass share messages.
#[test]
fn calls_are_answered_by_the_target_workers_handler() {
    let net = MemMsgNet::new(2, 2);
    let rpcs: Vec<Rc<Rpc>> = (0..2)
        .flat_map(|cn| (0..2).map(move |t| (cn, t)))
        .map(|(cn, t)| rpc_on(&net, cn, t, RpcConfig::default()))
        .collect();
    let totals: Vec<Rc<RefCell<u64>>> = rpcs.iter().map(|_| Rc::new(RefCell::new(0))).collect();
    for (r, t) in rpcs.iter().zip(&totals) {
        r.set_handler(adder(Rc::clone(t)));
    }
    let caller = Rc::clone(&rpcs[0]);
    let mut tasks: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
    for c in 0..8u64 {
        let caller = Rc::clone(&caller);
        tasks.push(Box::pin(async move {
            for i in 0..50u64 {
                let to = WorkerAddr::new(1, (c % 2) as u16);
                let reply = caller.call(to, &(i + 1).to_le_bytes()).await.unwrap();
                assert!(u64_of(&reply) > i);
            }
        }));
    }
    run_all(&rpcs, tasks);
    // Each of cn1's workers got 4 coordinators × Σ(1..=50).
    assert_eq!(*totals[2].borrow(), 4 * 1275);
    assert_eq!(*totals[3].borrow(), 4 * 1275);
    assert_eq!(*totals[0].borrow() + *totals[1].borrow(), 0);
    let s = caller.stats();
    assert_eq!((s.calls, s.retries, s.failed, s.stray_replies), (400, 0, 0, 0));
    assert_eq!(rpcs[2].stats().handled + rpcs[3].stats().handled, 400);
    // 8 coordinators call in the same passes, so a drain hands over several requests.
    for r in &rpcs[2..] {
        let s = r.stats();
        assert!(s.handled >= 2 * s.busy_drains, "requests are not batched: {s:?}");
    }
}

/// Goal: call_many batches requests to several peers and returns results in order.
#[test]
fn call_many_returns_results_in_request_order() {
    let net = MemMsgNet::new(3, 1);
    let rpcs: Vec<Rc<Rpc>> = (0..3).map(|cn| rpc_on(&net, cn, 0, RpcConfig::default())).collect();
    for (i, r) in rpcs.iter().enumerate() {
        let k = i as u64 * 100;
        r.set_handler(move |_: &Rpc, req: Request<'_>, out: &mut Vec<u8>| {
            out.extend_from_slice(&(u64_of(req.payload) + k).to_le_bytes());
            Handled::Reply
        });
    }
    let caller = Rc::clone(&rpcs[0]);
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = Rc::clone(&got);
    let task = Box::pin(async move {
        let reqs: Vec<(WorkerAddr, Vec<u8>)> = [2u16, 1, 2, 0]
            .iter()
            .enumerate()
            .map(|(i, cn)| (WorkerAddr::new(*cn, 0), (i as u64).to_le_bytes().to_vec()))
            .collect();
        let borrowed: Vec<(WorkerAddr, &[u8])> = reqs.iter().map(|(a, b)| (*a, b.as_slice())).collect();
        for r in caller.call_many(&borrowed).await {
            g.borrow_mut().push(u64_of(&r.unwrap()));
        }
    });
    run_all(&rpcs, vec![task]);
    assert_eq!(*got.borrow(), [200, 101, 202, 3]);
}

/// Goal: a request that is never answered times out after the configured retries, each
/// retry carries the same id with the retry flag, and a late reply is dropped as stray.
#[test]
fn unanswered_calls_retry_then_time_out() {
    let net = MemMsgNet::new(2, 1);
    let config = RpcConfig {
        timeout: Duration::from_millis(20),
        retries: 2,
    };
    let a = rpc_on(&net, 0, 0, config);
    let b = rpc_on(&net, 1, 0, config);
    let seen: Rc<RefCell<Vec<(u64, bool)>>> = Rc::default();
    let kept: Rc<RefCell<Vec<ReplyTo>>> = Rc::default();
    let (s2, k2) = (Rc::clone(&seen), Rc::clone(&kept));
    b.set_handler(move |_: &Rpc, req: Request<'_>, _: &mut Vec<u8>| {
        s2.borrow_mut().push((req.id, req.retry));
        k2.borrow_mut().push(req.reply_to());
        Handled::Later
    });
    let result = Rc::new(RefCell::new(None));
    let r2 = Rc::clone(&result);
    let a2 = Rc::clone(&a);
    let task = Box::pin(async move {
        *r2.borrow_mut() = Some(a2.call(WorkerAddr::new(1, 0), b"never answered").await);
    });
    run_all(&[Rc::clone(&a), Rc::clone(&b)], vec![task]);
    assert_eq!(
        result.borrow_mut().take().unwrap(),
        Err(RpcError::Timeout {
            to: WorkerAddr::new(1, 0),
            attempts: 3,
            timeout: Duration::from_millis(20)
        })
    );
    let ids: HashSet<u64> = seen.borrow().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 1, "retries reuse the id");
    assert_eq!(
        seen.borrow().iter().map(|(_, r)| *r).collect::<Vec<_>>(),
        [false, true, true]
    );
    // The deferred answer arrives after the caller gave up: a stray, not a crash.
    b.reply(kept.borrow()[0], b"too late").unwrap();
    b.progress();
    a.progress();
    assert_eq!(a.stats().stray_replies, 1);
    assert_eq!(a.in_flight(), 0);
}

/// Goal: a deferred reply (Handled::Later) completes the call when it is sent.
#[test]
fn deferred_replies_complete_calls() {
    let net = MemMsgNet::new(2, 1);
    let a = rpc_on(&net, 0, 0, RpcConfig::default());
    let b = rpc_on(&net, 1, 0, RpcConfig::default());
    let parked: Rc<RefCell<Vec<ReplyTo>>> = Rc::default();
    let p2 = Rc::clone(&parked);
    b.set_handler(move |_: &Rpc, req: Request<'_>, _: &mut Vec<u8>| {
        p2.borrow_mut().push(req.reply_to());
        Handled::Later
    });
    let a2 = Rc::clone(&a);
    let done = Rc::new(RefCell::new(None));
    let d2 = Rc::clone(&done);
    let caller = Box::pin(async move {
        *d2.borrow_mut() = Some(a2.call(WorkerAddr::new(1, 0), b"grant?").await.unwrap());
    });
    let b2 = Rc::clone(&b);
    let granter = Box::pin(async move {
        // A coordinator on b's thread grants the parked request a few passes later.
        loop {
            if let Some(to) = parked.borrow_mut().pop() {
                b2.reply(to, b"granted").unwrap();
                break;
            }
            crate::yield_now().await;
        }
    });
    run_all(&[Rc::clone(&a), Rc::clone(&b)], vec![caller, granter]);
    assert_eq!(done.borrow().as_deref(), Some(&b"granted"[..]));
}

/// Goal: one-way messages and broadcasts reach every other worker, FIFO per sender,
/// and never get a reply.
#[test]
fn one_way_and_broadcast_reach_everyone_in_order() {
    let net = MemMsgNet::new(2, 2);
    let rpcs: Vec<Rc<Rpc>> = (0..4)
        .map(|i| rpc_on(&net, i / 2, i % 2, RpcConfig::default()))
        .collect();
    type Log = Rc<RefCell<Vec<(WorkerAddr, u64)>>>;
    let logs: Vec<Log> = rpcs.iter().map(|_| Rc::default()).collect();
    for (r, log) in rpcs.iter().zip(&logs) {
        let log = Rc::clone(log);
        r.set_handler(move |_: &Rpc, req: Request<'_>, out: &mut Vec<u8>| {
            assert!(req.one_way);
            log.borrow_mut().push((req.from, u64_of(req.payload)));
            out.extend_from_slice(b"ignored");
            Handled::Reply
        });
    }
    for i in 0..10u64 {
        rpcs[1].broadcast(&i.to_le_bytes()).unwrap();
    }
    rpcs[3].send(WorkerAddr::new(0, 0), &99u64.to_le_bytes()).unwrap();
    for _ in 0..3 {
        for r in &rpcs {
            r.progress();
        }
    }
    let from1 = WorkerAddr::new(0, 1);
    for (i, log) in logs.iter().enumerate() {
        let got: Vec<u64> = log
            .borrow()
            .iter()
            .filter(|(f, _)| *f == from1)
            .map(|(_, v)| *v)
            .collect();
        if i == 1 {
            assert!(got.is_empty(), "a broadcast skips its sender");
        } else {
            assert_eq!(got, (0..10).collect::<Vec<_>>(), "worker {i}");
        }
    }
    assert!(logs[0].borrow().contains(&(WorkerAddr::new(1, 1), 99)));
    assert_eq!(rpcs[1].stats().one_way, 30);
    assert!(
        rpcs.iter().all(|r| r.stats().stray_replies == 0),
        "one-way messages get no reply"
    );
}

/// Goal: a crashed peer fails pending calls quickly (PeerLost after the retries), instead
/// of waiting out every timeout; requests to unknown workers are refused at once.
#[test]
fn a_crashed_peer_fails_calls_and_unknown_peers_are_refused() {
    let net = MemMsgNet::new(2, 1);
    let config = RpcConfig {
        timeout: Duration::from_secs(30),
        retries: 1,
    };
    let a = rpc_on(&net, 0, 0, config);
    net.set_down(1, true);
    let a2 = Rc::clone(&a);
    let out = Rc::new(RefCell::new(Vec::new()));
    let o2 = Rc::clone(&out);
    let task = Box::pin(async move {
        let lost = a2.call(WorkerAddr::new(1, 0), b"x").await;
        o2.borrow_mut().push(lost);
        let unknown = a2.call(WorkerAddr::new(5, 0), b"x").await;
        o2.borrow_mut().push(unknown);
    });
    let t0 = std::time::Instant::now();
    run_all(&[Rc::clone(&a)], vec![task]);
    assert!(t0.elapsed() < Duration::from_secs(5), "no timeout was waited for");
    let out = out.borrow();
    assert!(matches!(&out[0], Err(RpcError::PeerLost { .. })), "{:?}", out[0]);
    assert!(matches!(&out[1], Err(RpcError::Refused(MsgError::UnknownPeer { .. }))));
    assert_eq!(a.stats().retries, 1);
}

/// Goal: a compute node with messaging gives each worker an endpoint that its
/// coordinators reach through `ctx.rpc` and that `Worker::executor` drives, so a
/// request from one thread is handled on the other thread's executor.
#[test]
fn workers_of_a_node_with_messaging_call_each_other() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let cluster = Arc::new(dmtx_memnode::LocalCluster::new(1, 1 << 16));
    let net = MemMsgNet::new(1, 2);
    let cn = crate::Cn::connect(
        0,
        Arc::new(cluster.fabric().clone()),
        cluster,
        Arc::new(RealClock::new()),
    )
    .unwrap()
    .with_messaging(Arc::new(net.fabric(0)), RpcConfig::default());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (cn0, done0) = (cn.clone(), &done);
        s.spawn(move || {
            let w = cn0.worker(0).unwrap();
            let thread = std::thread::current().id();
            w.rpc()
                .unwrap()
                .set_handler(move |_: &Rpc, req: Request<'_>, out: &mut Vec<u8>| {
                    assert_eq!(
                        std::thread::current().id(),
                        thread,
                        "handled on the worker's own thread"
                    );
                    out.extend(req.payload.iter().rev());
                    Handled::Reply
                });
            let mut ex = w.executor();
            ex.spawn(async move {
                while !done0.load(Ordering::SeqCst) {
                    crate::yield_now().await;
                }
            });
            ex.run(w.transport().as_ref());
        });
        let w = cn.worker(1).unwrap();
        let ctx = w.ctx(0);
        let mut ex = w.executor();
        let done = &done;
        ex.spawn(async move {
            let rpc = ctx.rpc.as_ref().expect("messaging is on");
            let reply = rpc.call(WorkerAddr::new(0, 0), b"abc").await.unwrap();
            assert_eq!(reply, b"cba");
            done.store(true, Ordering::SeqCst);
        });
        ex.run(w.transport().as_ref());
    });
}
