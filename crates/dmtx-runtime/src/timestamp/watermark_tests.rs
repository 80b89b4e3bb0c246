//! The completed-commit watermark of every kind, and the `hybrid` kind, on `mem`.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use dmtx_memnode::LocalCluster;
use dmtx_store::Catalog;
use dmtx_verbs::msg::{MemMsgNet, MsgFabric};
use dmtx_verbs::{MnId, OpKind, Transport};
use proptest::prelude::*;

use super::*;
use crate::rpc::tests::run_all;
use crate::rpc::RpcConfig;
use crate::{block_on, AddrCache, Clock, RealClock, SharedAddrCache};

/// A clock the test moves by hand.
#[derive(Default)]
struct HandClock(AtomicU64);

impl HandClock {
    fn at(ns: u64) -> Arc<Self> {
        Arc::new(Self(AtomicU64::new(ns)))
    }
    fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::SeqCst);
    }
}

impl Clock for HandClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn coord(cn: u16, thread: u16, coroutine: u16) -> CoordId {
    CoordId { cn, thread, coroutine }
}

fn ctx_on(id: CoordId, transport: Rc<dyn Transport>, clock: Arc<dyn Clock>, rpc: Option<Rc<Rpc>>) -> CoordCtx {
    let mut ctx = CoordCtx::new(
        id,
        transport,
        clock,
        Arc::new(Catalog::default()),
        Rc::new(AddrCache::new(Arc::new(SharedAddrCache::new()))),
    );
    ctx.rpc = rpc;
    ctx
}

/// One step of a coordinator's use of the service.
#[derive(Clone, Debug)]
enum Step {
    /// `next()` (a `T_start`).
    Start,
    /// `next_range(n)`.
    Range(u32),
    /// `next_commit()`, held.
    Commit,
    /// Complete the i-th held commit timestamp (mod how many are held).
    Complete(usize),
    /// Abandon it instead.
    Abandon(usize),
    /// Read the watermark and check it against the model.
    Watermark,
    /// Move the (hand) clock on by this many ns.
    Tick(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        2 => Just(Step::Start),
        1 => (1..5u32).prop_map(Step::Range),
        3 => Just(Step::Commit),
        2 => (0..8usize).prop_map(Step::Complete),
        1 => (0..8usize).prop_map(Step::Abandon),
        3 => Just(Step::Watermark),
        1 => (0..3_000u64).prop_map(Step::Tick),
    ];
    proptest::collection::vec(step, 1..150)
}

/// What the model demands of a kind's watermark.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Expect {
    /// Exactly the smallest unresolved commit − 1, or the last grant (`oracle`, `rpc`).
    Exact,
    /// Between the model's bounds (`faa`: past the resolved prefix of commits, and the
    /// last grant once none is unresolved).
    Counter,
    /// Safe, and past every commit once all are resolved (`hybrid`: the floors of the
    /// nodes' clocks may put it above the last grant).
    Hybrid,
}

/// Apply `steps` to `ts` from one coordinator and compare every watermark with a serial
/// model: never at or above an unresolved commit timestamp, never below one it read
/// before, never above a later grant, and past every commit whose predecessors are all
/// resolved. Returns how many watermarks moved.
fn check_steps(
    ts: &Timestamps,
    ctx: &mut CoordCtx,
    clock: Option<&HandClock>,
    steps: &[Step],
    expect: Expect,
) -> usize {
    block_on(async {
        let mut held: Vec<CommitTs> = Vec::new();
        let mut pending = BTreeSet::new();
        let mut commits = BTreeSet::new();
        let mut granted_max = 0u64;
        let mut w_max = 0u64;
        let mut moved = 0;
        // Grants `lo..=hi`: above the watermark read (invariant 4), increasing (invariant 2).
        fn grant(lo: u64, hi: u64, w_max: u64, granted_max: &mut u64) {
            assert!(
                lo > w_max,
                "{lo} handed out at or below watermark {w_max} (invariant 4)"
            );
            assert!(lo > *granted_max, "{lo} after {granted_max}: not increasing");
            *granted_max = hi;
        }
        for step in steps {
            match *step {
                Step::Start => {
                    let t = ts.next(ctx).await.unwrap();
                    grant(t, t, w_max, &mut granted_max);
                }
                Step::Range(n) => {
                    let r = ts.next_range(ctx, n).await.unwrap();
                    assert_eq!(r.end - r.start, u64::from(n));
                    grant(r.start, r.end - 1, w_max, &mut granted_max);
                }
                Step::Commit => {
                    let c = ts.next_commit(ctx).await.unwrap();
                    grant(c.get(), c.get(), w_max, &mut granted_max);
                    pending.insert(c.get());
                    commits.insert(c.get());
                    held.push(c);
                }
                Step::Complete(i) | Step::Abandon(i) if !held.is_empty() => {
                    let c = held.swap_remove(i % held.len());
                    pending.remove(&c.get());
                    if matches!(step, Step::Complete(_)) {
                        ts.complete(ctx, c).await.unwrap();
                    } else {
                        ts.abandon(ctx, c).await.unwrap();
                    }
                }
                Step::Complete(_) | Step::Abandon(_) => {}
                Step::Watermark => {
                    let w = ts.watermark(ctx).await.unwrap();
                    assert!(w >= w_max, "watermark went back: {w_max} -> {w}");
                    if let Some(&p) = pending.first() {
                        assert!(w < p, "watermark {w} passes unresolved commit {p} (invariant 3)");
                    }
                    // Liveness: past every commit whose predecessors are all resolved.
                    let resolved_prefix = commits.range(..pending.first().copied().unwrap_or(u64::MAX)).last();
                    if let Some(&r) = resolved_prefix {
                        assert!(w >= r, "watermark {w} stays below {r}, resolved with all before it");
                    }
                    match expect {
                        Expect::Exact => {
                            assert_eq!(w, pending.first().map_or(granted_max, |p| p - 1));
                        }
                        Expect::Counter => {
                            assert!(w <= granted_max, "watermark {w} above the last grant {granted_max}");
                            if pending.is_empty() {
                                assert_eq!(w, granted_max, "nothing unresolved");
                            }
                        }
                        Expect::Hybrid => {}
                    }
                    moved += usize::from(w > w_max);
                    w_max = w;
                }
                Step::Tick(ns) => {
                    if let Some(c) = clock {
                        c.set(c.now_ns() + ns);
                    }
                }
            }
        }
        // Resolving everything lets the watermark pass every commit.
        for c in held.drain(..) {
            ts.complete(ctx, c).await.unwrap();
        }
        let w = ts.watermark(ctx).await.unwrap();
        assert!(commits.last().is_none_or(|&c| w >= c), "{w} below a resolved commit");
        if expect != Expect::Hybrid {
            assert_eq!(w, granted_max);
        }
        moved
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Goal: the `oracle` watermark is exactly the smallest unresolved commit − 1, or the
    /// last grant (invariants 3–4), under random interleavings of grants, commits,
    /// completions, abandons and reads.
    #[test]
    fn oracle_watermark_follows_the_model(steps in steps()) {
        let ts = Timestamps::Oracle(OracleTimestamps::new());
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let mut ctx = ctx_on(coord(0, 0, 0), Rc::new(fabric.transport()), Arc::new(RealClock::new()), None);
        check_steps(&ts, &mut ctx, None, &steps, Expect::Exact);
    }

    /// Goal: the same of the `rpc` kind's ledger, on its host thread.
    #[test]
    fn rpc_host_watermark_follows_the_model(steps in steps()) {
        let ts = Timestamps::Rpc(RpcTimestamps::default());
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let mut ctx = ctx_on(coord(0, 0, 1), Rc::new(fabric.transport()), Arc::new(RealClock::new()), None);
        check_steps(&ts, &mut ctx, None, &steps, Expect::Exact);
    }

    /// Goal: the `faa` watermark (memory-node words and ring) never passes an unresolved
    /// commit, never goes back, passes every commit whose predecessors are resolved, and
    /// reaches the last grant when none is unresolved.
    #[test]
    fn faa_watermark_follows_the_model(steps in steps()) {
        let cluster = LocalCluster::new(1, 1 << 16);
        let ts = Timestamps::setup(TsKind::Faa, &cluster).unwrap();
        let mut ctx = ctx_on(coord(0, 0, 0), Rc::new(cluster.fabric().transport()), Arc::new(RealClock::new()), None);
        check_steps(&ts, &mut ctx, None, &steps, Expect::Counter);
        assert_eq!(ctx.txn_counters.rtts, 0, "not the protocol's round trips");
    }

    /// Goal: the `hybrid` watermark is safe and live as the others, with the clock moving.
    #[test]
    fn hybrid_watermark_follows_the_model(steps in steps()) {
        let ts = Timestamps::setup(TsKind::Hybrid, &LocalCluster::new(1, 4096)).unwrap();
        let clock = HandClock::at(1_000_000);
        let fabric = dmtx_verbs::MemFabric::new(vec![]);
        let mut ctx = ctx_on(coord(3, 0, 0), Rc::new(fabric.transport()), clock.clone(), None);
        ts.attach(&ctx).unwrap();
        check_steps(&ts, &mut ctx, Some(&clock), &steps, Expect::Hybrid);
    }
}

/// Goal: the model check can fail: a watermark that ignores unresolved commits (the last
/// grant, always) is caught. Method: a service wrapper that lies.
#[test]
#[should_panic(expected = "passes unresolved commit")]
fn a_watermark_that_ignores_pending_commits_is_caught() {
    struct Liar(OracleTimestamps);
    impl TimestampService for Liar {
        fn kind(&self) -> TsKind {
            TsKind::Oracle
        }
        async fn next_range(&self, ctx: &mut CoordCtx, n: u32) -> Result<Range<u64>, TsError> {
            self.0.next_range(ctx, n).await
        }
        async fn next_commit(&self, ctx: &mut CoordCtx) -> Result<CommitTs, TsError> {
            self.0.next_commit(ctx).await
        }
        async fn complete(&self, ctx: &mut CoordCtx, ts: CommitTs) -> Result<(), TsError> {
            self.0.complete(ctx, ts).await
        }
        async fn watermark(&self, _: &mut CoordCtx) -> Result<u64, TsError> {
            Ok(self.0.counter.last.load(Ordering::SeqCst))
        }
    }
    let liar = Liar(OracleTimestamps::new());
    let fabric = dmtx_verbs::MemFabric::new(vec![]);
    let mut ctx = ctx_on(
        coord(0, 0, 0),
        Rc::new(fabric.transport()),
        Arc::new(RealClock::new()),
        None,
    );
    block_on(async {
        let c = liar.next_commit(&mut ctx).await.unwrap();
        let w = liar.watermark(&mut ctx).await.unwrap();
        assert!(w < c.get(), "watermark {w} passes unresolved commit {}", c.get());
    });
}

/// Goal: the `rpc` kind over messages: commit, complete, abandon and watermark each cost
/// the caller one CN↔CN round trip, and the watermark follows the host's ledger.
#[test]
fn rpc_watermark_over_messages() {
    let net = MemMsgNet::new(2, 1);
    let rpc_of = |cn| {
        Rc::new(Rpc::new(
            net.fabric(cn).mailbox(0).unwrap(),
            Arc::new(RealClock::new()),
            RpcConfig::default(),
        ))
    };
    let (host, caller) = (rpc_of(0), rpc_of(1));
    let ts = RpcTimestamps::default();
    ts.serve_on(&host, None);
    let fabric = dmtx_verbs::MemFabric::new(vec![]);
    let mut ctx = ctx_on(
        coord(1, 0, 0),
        Rc::new(fabric.transport()),
        Arc::new(RealClock::new()),
        Some(Rc::clone(&caller)),
    );
    let seen = Rc::new(RefCell::new(Vec::new()));
    let (s, ts2) = (Rc::clone(&seen), ts.clone());
    let task = Box::pin(async move {
        let start = ts2.next(&mut ctx).await.unwrap();
        let a = ts2.next_commit(&mut ctx).await.unwrap();
        let b = ts2.next_commit(&mut ctx).await.unwrap();
        let (a_ts, b_ts) = (a.get(), b.get());
        let w0 = ts2.watermark(&mut ctx).await.unwrap();
        ts2.complete(&mut ctx, b).await.unwrap();
        let w1 = ts2.watermark(&mut ctx).await.unwrap();
        ts2.abandon(&mut ctx, a).await.unwrap();
        let w2 = ts2.watermark(&mut ctx).await.unwrap();
        let c = ctx.txn_counters;
        s.borrow_mut()
            .extend([start, a_ts, b_ts, w0, w1, w2, c.ts_requests, c.ts_rtts, c.rtts]);
    });
    run_all(&[Rc::clone(&host), Rc::clone(&caller)], vec![task]);
    // T_start 1 is not tracked: the watermark waits only for the commits 2 and 3.
    assert_eq!(*seen.borrow(), [1, 2, 3, 1, 1, 3, 8, 8, 0]);
}

/// Goal: a commit request the RPC layer delivers twice (its first attempt timed out) is
/// granted once: the retry gets the same timestamp, so the caller's one `complete`
/// frees the watermark (a second grant would hold it back for ever).
#[test]
fn a_retried_commit_request_gets_the_same_timestamp() {
    let net = MemMsgNet::new(2, 1);
    let clock = HandClock::at(0);
    let config = RpcConfig {
        timeout: Duration::from_micros(10),
        retries: 1,
    };
    let rpc_of = |cn| Rc::new(Rpc::new(net.fabric(cn).mailbox(0).unwrap(), clock.clone(), config));
    let (host, caller) = (rpc_of(0), rpc_of(1));
    let ts = RpcTimestamps::default();
    ts.serve_on(&host, None);
    let fabric = dmtx_verbs::MemFabric::new(vec![]);
    let mut ctx = ctx_on(
        coord(1, 0, 0),
        Rc::new(fabric.transport()),
        clock.clone(),
        Some(Rc::clone(&caller)),
    );
    let mut cx = Context::from_waker(Waker::noop());
    let c = {
        let mut fut = pin!(ts.next_commit(&mut ctx));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        caller.progress(); // the request leaves; the host does not look yet
        clock.set(20_000);
        caller.progress(); // past the deadline: sent again, same id, retry flag
        host.progress(); // handles both copies
        caller.progress();
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(r) => r.unwrap(),
            Poll::Pending => panic!("the call did not complete"),
        }
    };
    assert_eq!((host.stats().handled, caller.stats().retries), (2, 1));
    assert_eq!(c.get(), 1);
    let mut host_ctx = ctx_on(coord(0, 0, 0), Rc::new(fabric.transport()), clock.clone(), None);
    assert_eq!(block_on(ts.watermark(&mut host_ctx)), Ok(0), "commit 1 unresolved");
    block_on(ts.complete(&mut host_ctx, c)).unwrap();
    let later = block_on(ts.next(&mut host_ctx)).unwrap();
    assert_eq!(later, 2, "the retry took no timestamp");
    assert_eq!(
        block_on(ts.watermark(&mut host_ctx)),
        Ok(2),
        "no second commit holds it back"
    );
}

/// Goal: the `faa` kind's costs as documented: a commit grant one round trip (FAA and
/// READ in one doorbell), a resolve one (a WRITE), a watermark two, three when it
/// moves; all in `ts_rtts`, none in the protocol's `rtts`, ops or bytes; the memory
/// node's load counts them.
#[test]
fn faa_watermark_costs() {
    let cluster = LocalCluster::new(1, 1 << 16);
    let f = FaaTimestamps::reserve(&cluster, MnId(0)).unwrap();
    let mut ctx = ctx_on(
        coord(0, 0, 0),
        Rc::new(cluster.fabric().transport()),
        Arc::new(RealClock::new()),
        None,
    );
    // The round trips of the last call; never the protocol's round trips, ops or bytes.
    let rtts_of = |ctx: &mut CoordCtx| {
        let c = std::mem::take(&mut ctx.txn_counters);
        assert_eq!((c.rtts, c.ops_total(), c.bytes_out, c.bytes_in), (0, 0, 0, 0));
        c.ts_rtts
    };
    let c = block_on(f.next_commit(&mut ctx)).unwrap();
    assert_eq!((c.get(), rtts_of(&mut ctx)), (1, 1));
    assert_eq!(block_on(f.watermark(&mut ctx)), Ok(0));
    assert_eq!(
        rtts_of(&mut ctx),
        2,
        "READ the words, READ the ring; nothing to publish"
    );
    block_on(f.complete(&mut ctx, c)).unwrap();
    assert_eq!(rtts_of(&mut ctx), 1);
    assert_eq!(block_on(f.watermark(&mut ctx)), Ok(1));
    assert_eq!(rtts_of(&mut ctx), 3, "and a CAS publishes it");
    assert_eq!(block_on(f.watermark(&mut ctx)), Ok(1));
    assert_eq!(rtts_of(&mut ctx), 1, "published: no ring left to read");
    let load = &ctx.per_mn[0];
    assert_eq!(
        (
            load.ops[OpKind::Faa as usize],
            load.ops[OpKind::Write as usize],
            load.ops[OpKind::Cas as usize]
        ),
        (1, 1, 1)
    );
}

/// Goal: invariant 6. With a whole ring of commits resolved but the watermark never
/// read, the next commit grant moves the watermark itself and proceeds; with a whole
/// ring unresolved, it gives up with `RingFull`, naming the fix, instead of overwriting
/// a slot.
#[test]
fn faa_commit_grants_wait_for_the_ring() {
    let cluster = LocalCluster::new(1, 1 << 16);
    let f = FaaTimestamps::reserve(&cluster, MnId(0)).unwrap();
    let mut ctx = ctx_on(
        coord(0, 0, 0),
        Rc::new(cluster.fabric().transport()),
        Arc::new(RealClock::new()),
        None,
    );
    block_on(async {
        for _ in 0..WATERMARK_RING_SLOTS {
            let c = f.next_commit(&mut ctx).await.unwrap();
            f.complete(&mut ctx, c).await.unwrap();
        }
        let c = f.next_commit(&mut ctx).await.unwrap();
        assert_eq!(c.get(), WATERMARK_RING_SLOTS + 1);
        f.abandon(&mut ctx, c).await.unwrap();
        // One call reads at most 512 slots; a few catch up.
        let mut w = 0;
        for _ in 0..WATERMARK_RING_SLOTS / 512 + 1 {
            w = f.watermark(&mut ctx).await.unwrap();
        }
        assert_eq!(w, WATERMARK_RING_SLOTS + 1);
        let mut held = Vec::new();
        for _ in 0..WATERMARK_RING_SLOTS {
            held.push(f.next_commit(&mut ctx).await.unwrap());
        }
        let e = f.next_commit(&mut ctx).await.unwrap_err();
        assert!(matches!(e, TsError::RingFull { .. }), "{e}");
        assert!(e.to_string().contains("resolve every CommitTs"), "{e}");
        // The slots of the unresolved ones were not touched.
        let w = f.watermark(&mut ctx).await.unwrap();
        assert_eq!(w, WATERMARK_RING_SLOTS + 1, "stops below the first unresolved");
        drop(held);
    });
}

/// Goal: hybrid timestamps of several compute nodes (each with its own threads)
/// are unique across the cluster, strictly increase per caller, carry the node id in
/// bits 8–15, and track real time: `ts >> 16` is the clock's µs at the grant.
#[test]
fn hybrid_timestamps_are_unique_increasing_and_track_real_time() {
    const CNS: u16 = 3;
    const THREADS: u16 = 2;
    const REQS: usize = 3_000;
    let ts = HybridTimestamps::new();
    let out = std::sync::Mutex::new(Vec::new());
    // One clock for all: a node attached later than another with a clock behind runs
    // ahead of its own (invariant 4), which `hybrid_watermark_holds_across_skewed_nodes`
    // covers.
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    std::thread::scope(|s| {
        for cn in 0..CNS {
            for t in 0..THREADS {
                let (ts, out, clock) = (&ts, &out, Arc::clone(&clock));
                s.spawn(move || {
                    let fabric = dmtx_verbs::MemFabric::new(vec![]);
                    let mut ctx = ctx_on(coord(cn, t, 0), Rc::new(fabric.transport()), clock, None);
                    ts.attach(&ctx).unwrap();
                    let mut got = Vec::with_capacity(REQS * 2);
                    for i in 0..REQS {
                        let before_us = ctx.clock.now_ns() / 1_000;
                        let r = if i % 3 == 0 {
                            block_on(ts.next_range(&mut ctx, 4)).unwrap()
                        } else {
                            let t = block_on(ts.next(&mut ctx)).unwrap();
                            t..t + 1
                        };
                        let after_us = ctx.clock.now_ns() / 1_000;
                        for t in r {
                            assert_eq!((t >> 8) & 0xff, u64::from(cn), "{t:#x}: node id");
                            assert!(t >> 16 >= before_us, "{t:#x}: behind the clock ({before_us} µs)");
                            // Ahead only if a node granted > 256 in one µs; bounded.
                            assert!(t >> 16 <= after_us + 64, "{t:#x}: far ahead of {after_us} µs");
                            got.push(t);
                        }
                    }
                    assert_eq!(ctx.txn_counters.ts_requests, REQS as u64);
                    assert_eq!(ctx.txn_counters.ts_rtts, 0, "free, as the oracle");
                    out.lock().unwrap().push(got);
                });
            }
        }
    });
    let mut all = BTreeSet::new();
    for got in out.into_inner().unwrap() {
        assert!(got.windows(2).all(|w| w[0] < w[1]), "not increasing per caller");
        for t in got {
            assert!(all.insert(t), "{t:#x} granted twice");
        }
    }
    assert_eq!(all.len(), (CNS * THREADS) as usize * REQS * 2);
}

/// Goal: a node that grants more than a block (256) within one µs moves to the next µs,
/// staying in its own block and increasing; the clock catches up later.
#[test]
fn hybrid_counter_overflow_runs_ahead_of_the_clock() {
    let ts = HybridTimestamps::new();
    let clock = HandClock::at(5_000); // 5 µs, frozen
    let fabric = dmtx_verbs::MemFabric::new(vec![]);
    let mut ctx = ctx_on(coord(7, 0, 0), Rc::new(fabric.transport()), clock.clone(), None);
    ts.attach(&ctx).unwrap();
    let first = block_on(ts.next(&mut ctx)).unwrap();
    assert_eq!(first, 5 << 16 | 7 << 8);
    let r = block_on(ts.next_range(&mut ctx, 255)).unwrap();
    assert_eq!(r, first + 1..first + 256, "the rest of the block");
    let next = block_on(ts.next_range(&mut ctx, 2)).unwrap();
    assert_eq!(next.start, 6 << 16 | 7 << 8, "next µs, same node");
    clock.set(9_000);
    assert_eq!(
        block_on(ts.next(&mut ctx)).unwrap(),
        9 << 16 | 7 << 8,
        "the clock again"
    );
}

/// Goal: invariant 4 across nodes with skewed clocks: after a watermark is read, a node
/// whose clock is far behind (or jumps back) never hands out a commit timestamp at or
/// below it; a node attached later neither; and the watermark waits for the slow node's
/// unresolved commit.
#[test]
fn hybrid_watermark_holds_across_skewed_nodes() {
    let ts = HybridTimestamps::new();
    let fabric = dmtx_verbs::MemFabric::new(vec![]);
    let (fast, slow) = (HandClock::at(50_000_000), HandClock::at(1_000_000));
    let mut a = ctx_on(coord(0, 0, 0), Rc::new(fabric.transport()), fast.clone(), None);
    let mut b = ctx_on(coord(1, 0, 0), Rc::new(fabric.transport()), slow.clone(), None);
    ts.attach(&a).unwrap();
    ts.attach(&b).unwrap();
    block_on(async {
        let ca = ts.next_commit(&mut a).await.unwrap();
        ts.complete(&mut a, ca).await.unwrap();
        let w = ts.watermark(&mut a).await.unwrap();
        assert!(w >= 1_000 << 16, "raised to the slow node's clock: {w:#x}");
        slow.set(0); // jumps back
        let cb = ts.next_commit(&mut b).await.unwrap();
        assert!(cb.get() > w, "{:#x} at or below watermark {w:#x}", cb.get());
        let w2 = ts.watermark(&mut a).await.unwrap();
        assert!(w2 >= w && w2 < cb.get(), "waits for the slow node's commit");
        ts.complete(&mut b, cb).await.unwrap();
        let mut late = ctx_on(coord(2, 0, 0), Rc::new(fabric.transport()), HandClock::at(0), None);
        ts.attach(&late).unwrap();
        let w3 = ts.watermark(&mut a).await.unwrap();
        let cl = ts.next_commit(&mut late).await.unwrap();
        assert!(cl.get() > w3, "a late node's first commit {:#x} <= {w3:#x}", cl.get());
        ts.abandon(&mut late, cl).await.unwrap();
    });
}

/// Goal: the `rpc` host refuses a commit timestamp once [`PENDING_MAX`] are unresolved
/// (it never grows without bound on what peers send), locally and over messages, with
/// an error naming the fix; a resolve frees room again.
#[test]
fn a_full_rpc_ledger_refuses_commits() {
    let net = MemMsgNet::new(2, 1);
    let rpc_of = |cn| {
        Rc::new(Rpc::new(
            net.fabric(cn).mailbox(0).unwrap(),
            Arc::new(RealClock::new()),
            RpcConfig::default(),
        ))
    };
    let (host, caller) = (rpc_of(0), rpc_of(1));
    let ts = RpcTimestamps::default();
    ts.serve_on(&host, None);
    let fabric = dmtx_verbs::MemFabric::new(vec![]);
    let mut host_ctx = ctx_on(
        coord(0, 0, 0),
        Rc::new(fabric.transport()),
        Arc::new(RealClock::new()),
        None,
    );
    let mut held = Vec::with_capacity(PENDING_MAX);
    block_on(async {
        for _ in 0..PENDING_MAX {
            held.push(ts.next_commit(&mut host_ctx).await.unwrap());
        }
        let e = ts.next_commit(&mut host_ctx).await.unwrap_err();
        assert_eq!(e, TsError::LedgerFull { host: ts.host() });
        assert!(e.to_string().contains("resolve every CommitTs"), "{e}");
    });
    let mut ctx = ctx_on(
        coord(1, 0, 0),
        Rc::new(fabric.transport()),
        Arc::new(RealClock::new()),
        Some(Rc::clone(&caller)),
    );
    let got = Rc::new(RefCell::new(Vec::new()));
    let (g, ts2) = (Rc::clone(&got), ts.clone());
    let first = held.swap_remove(0);
    let task = Box::pin(async move {
        let refused = ts2.next_commit(&mut ctx).await.map(|c| c.get());
        g.borrow_mut().push(refused);
        ts2.complete(&mut ctx, first).await.unwrap();
        let c = ts2.next_commit(&mut ctx).await.unwrap();
        g.borrow_mut().push(Ok(c.get()));
        ts2.abandon(&mut ctx, c).await.unwrap();
    });
    run_all(&[Rc::clone(&host), Rc::clone(&caller)], vec![task]);
    let host_addr = ts.host();
    assert_eq!(
        *got.borrow(),
        [Err(TsError::LedgerFull { host: host_addr }), Ok(PENDING_MAX as u64 + 1)]
    );
}
