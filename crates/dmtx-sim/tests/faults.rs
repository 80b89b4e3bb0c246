//! Every fault and every trigger of the fault script, on small hand-made posts (no
//! protocol), plus the lease-based membership service. Times are checked against the
//! script (timeouts, delays) or against a fault-free run, never against NIC constants.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;

use dmtx_runtime::Clock;
use dmtx_sim::membership::Change;
use dmtx_sim::{FaultScript, MembershipConfig, Node, Sim, SimConfig, SimExecutor, SimFabric, SimTransport};
use dmtx_verbs::{MnId, Post, Region, RemotePtr, Submitted, Transport, VerbError};

const REGION_BYTES: u64 = 1 << 16;

fn sim(seed: u64, mns: usize) -> Sim {
    let regions = (0..mns).map(|_| Arc::new(Region::new(REGION_BYTES))).collect();
    Sim::new(SimConfig::new(seed), regions)
}

fn script(s: &str) -> FaultScript {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ptr(mn: u16, offset: u64) -> RemotePtr {
    RemotePtr::new(MnId(mn), offset)
}

fn word(sim: &Sim, mn: usize, offset: u64) -> u64 {
    sim.regions()[mn].load(offset).unwrap()
}

/// Post and wait; returns the result and the virtual time it completed.
async fn post(sim: &Sim, t: &SimTransport, p: &mut Post) -> (Result<(), VerbError>, u64) {
    let Submitted::Pending(ticket) = t.submit(p) else {
        panic!("the sim transport never completes at submit")
    };
    let r = poll_fn(|cx| t.poll(ticket, p, cx)).await;
    (r, sim.now())
}

/// Results of `spawn_write`s, in spawn order.
type Log = Rc<RefCell<Vec<Option<(Result<(), VerbError>, u64)>>>>;

fn results(log: &Log) -> Vec<(Result<(), VerbError>, u64)> {
    log.borrow()
        .iter()
        .map(|r| r.clone().expect("every write completed"))
        .collect()
}

fn unreachable(r: &Result<(), VerbError>) -> bool {
    matches!(r, Err(VerbError::Unreachable { .. }))
}

/// One write of `v` at `(mn, offset)` from a fresh connection of `cn`, started at
/// virtual time `at`; the result is logged.
#[allow(clippy::too_many_arguments)]
fn spawn_write<'a>(ex: &mut SimExecutor<'a>, sim: &Sim, cn: u32, at: u64, mn: u16, offset: u64, v: u64, log: &Log) {
    let t = SimFabric::new(sim, cn).transport();
    let (sim, log) = (sim.clone(), log.clone());
    let id = {
        let mut l = log.borrow_mut();
        l.push(None);
        l.len() - 1
    };
    ex.spawn(async move {
        sim.sleep(at).await;
        let mut p = Post::new();
        p.write(ptr(mn, offset), &v.to_le_bytes());
        let r = post(&sim, &t, &mut p).await;
        log.borrow_mut()[id] = Some(r);
    });
}

/// Completion time of one 8-byte READ at time 0 without faults (a reference).
fn read_latency(slow: Option<&str>) -> u64 {
    let sim = sim(1, 1);
    if let Some(s) = slow {
        sim.install_faults(script(s)).unwrap();
    }
    let t = SimFabric::new(&sim, 0).transport();
    let out = Rc::new(RefCell::new(0));
    let mut ex = SimExecutor::new(&sim);
    let (s, o) = (sim.clone(), out.clone());
    ex.spawn(async move {
        let mut p = Post::new();
        p.read(ptr(0, 64), 8);
        let (r, at) = post(&s, &t, &mut p).await;
        r.unwrap();
        *o.borrow_mut() = at;
    });
    ex.run().unwrap();
    let v = *out.borrow();
    v
}

/// Goal: a DRAM crash zeroes the region, and ops to the crashed node fail with
/// `Unreachable` exactly one transport timeout after they were posted.
#[test]
fn crash_mn_dram_zeroes_and_ops_fail_after_the_timeout() {
    let sim = sim(1, 2);
    sim.install_faults(script("timeout=30us; crash-mn mn=0 mode=dram at=10us"))
        .unwrap();
    let log: Log = Default::default();
    let mut ex = SimExecutor::new(&sim);
    spawn_write(&mut ex, &sim, 0, 0, 0, 128, 7, &log); // lands before the crash
    spawn_write(&mut ex, &sim, 0, 0, 1, 128, 9, &log); // the other node keeps it
    spawn_write(&mut ex, &sim, 0, 20_000, 0, 256, 5, &log); // the node is down
    ex.run().unwrap();
    let log = results(&log);
    assert!(log[0].0.is_ok() && log[1].0.is_ok());
    assert!(unreachable(&log[2].0), "{:?}", log[2]);
    assert_eq!(log[2].1, 20_000 + 30_000, "fails one timeout after the post");
    let mut buf = vec![0xffu8; REGION_BYTES as usize];
    sim.regions()[0].read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "a DRAM crash zeroes the whole region");
    assert_eq!(word(&sim, 1, 128), 9);
    assert!(sim.mn_down(MnId(0)));
    assert_eq!(sim.fault_log().len(), 1);
}

/// Goal: a restart brings the node back and every transport's `restarts()` grows by
/// one; posts during the outage fail, posts after it succeed.
#[test]
fn crash_mn_restart_bumps_restarts() {
    let sim = sim(1, 1);
    sim.install_faults(script("timeout=10us; crash-mn mn=0 mode=dram at=5us restart=40us"))
        .unwrap();
    let t = SimFabric::new(&sim, 0).transport();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    let (s, seen2) = (sim.clone(), seen.clone());
    ex.spawn(async move {
        for at in [0u64, 20_000, 60_000] {
            s.sleep(at.saturating_sub(s.now())).await;
            let mut p = Post::new();
            p.faa(ptr(0, 0), 1);
            let (r, _) = post(&s, &t, &mut p).await;
            seen2.borrow_mut().push((r.is_ok(), t.restarts()));
        }
    });
    ex.run().unwrap();
    assert_eq!(*seen.borrow(), [(true, 0), (false, 0), (true, 1)]);
    assert!(!sim.mn_down(MnId(0)));
    assert_eq!(
        word(&sim, 0, 0),
        1,
        "the DRAM crash lost the first FAA; the third applied"
    );
}

/// Goal: PM persistence. A WRITE followed by a FLUSH, or by a READ on the same
/// connection, survives every PM crash; an unflushed WRITE is lost for some seed and
/// kept for another; a READ on another connection does not make it durable (writes
/// drain in order per node, so only a write after every drained one stays volatile).
#[test]
fn pm_crash_loses_unflushed_writes_only() {
    let (mut lost, mut kept) = (0, 0);
    for seed in 0..40 {
        let sim = sim(seed, 1);
        sim.install_faults(script("crash-mn mn=0 mode=pm at=50us")).unwrap();
        let fabric = SimFabric::new(&sim, 0);
        let (a, b, c) = (fabric.transport(), fabric.transport(), fabric.transport());
        let mut ex = SimExecutor::new(&sim);
        let s = sim.clone();
        ex.spawn(async move {
            let mut p = Post::new();
            p.write(ptr(0, 0), &1u64.to_le_bytes());
            p.flush(ptr(0, 0));
            post(&s, &a, &mut p).await.0.unwrap();
            let mut p = Post::new();
            p.write(ptr(0, 2048), &3u64.to_le_bytes());
            p.read(ptr(0, 4096), 8);
            post(&s, &c, &mut p).await.0.unwrap();
            // The last write to the node: nothing after it drains it.
            let mut p = Post::new();
            p.write(ptr(0, 1024), &2u64.to_le_bytes());
            post(&s, &b, &mut p).await.0.unwrap();
            // A READ on connection `a` drains `a`'s writes only, not `b`'s.
            let mut p = Post::new();
            p.read(ptr(0, 1024), 8);
            post(&s, &a, &mut p).await.0.unwrap();
            s.sleep(100_000 - s.now()).await; // past the crash
        });
        ex.run().unwrap();
        assert!(sim.mn_down(MnId(0)));
        assert_eq!(word(&sim, 0, 0), 1, "seed {seed}: a flushed WRITE was lost");
        assert_eq!(
            word(&sim, 0, 2048),
            3,
            "seed {seed}: a WRITE followed by a READ was lost"
        );
        match word(&sim, 0, 1024) {
            0 => lost += 1,
            2 => kept += 1,
            v => panic!("seed {seed}: unflushed word is {v}, neither old nor new"),
        }
    }
    assert!(
        lost > 0 && kept > 0,
        "unflushed write: lost {lost}, kept {kept} of 40 seeds"
    );
}

/// Goal: a CN crash leaves, per connection, a prefix of its in-flight ops applied (the
/// next WRITE possibly torn at a word) and nothing after; its later posts never
/// complete; other CNs go on; `cn_down` turns true; the durable area keeps what was
/// written before the crash and refuses writes after.
#[test]
fn crash_cn_applies_a_prefix_and_keeps_the_durable_area() {
    const WRITES: u64 = 8;
    let mut prefixes = std::collections::BTreeSet::new();
    let mut torn_seen = false;
    for seed in 0..24 {
        let sim = sim(seed, 1);
        sim.install_faults(script("crash-cn cn=0 at=300ns")).unwrap();
        let durable = sim.cn_durable(0);
        assert!(durable.write(0, b"log:txn 41 committed"));
        let t0 = SimFabric::new(&sim, 0).transport();
        let t1 = SimFabric::new(&sim, 1).transport();
        let later = Rc::new(RefCell::new(None));
        let other = Rc::new(RefCell::new(None));
        let mut ex = SimExecutor::new(&sim);
        let (s, l) = (sim.clone(), later.clone());
        ex.spawn(async move {
            // 8 WRITEs of 16 bytes (two words each, all 0x..ff) in one batch, posted at 0.
            let mut p = Post::new();
            for i in 0..WRITES {
                p.write(ptr(0, i * 16), &[0xffu8; 16]);
            }
            let _ = post(&s, &t0, &mut p).await;
            // Never reached: the post above never completes for a crashed node.
            *l.borrow_mut() = Some(s.now());
        });
        let (s, o) = (sim.clone(), other.clone());
        ex.spawn(async move {
            s.sleep(1_000).await;
            let mut p = Post::new();
            p.write(ptr(0, 4096), &5u64.to_le_bytes());
            *o.borrow_mut() = Some(post(&s, &t1, &mut p).await.0);
        });
        let s = sim.clone();
        ex.spawn(async move { s.sleep(1_000_001).await }); // the run ends at the deadline
        ex.run_until(1_000_000).unwrap();
        assert!(sim.cn_down(0) && !sim.cn_down(1));
        assert_eq!(*later.borrow(), None, "seed {seed}: a crashed node's post completed");
        assert_eq!(*other.borrow(), Some(Ok(())), "seed {seed}: another CN was disturbed");
        assert!(
            !durable.write(0, b"after"),
            "a crashed node cannot write its durable area"
        );
        assert!(durable.read().starts_with(b"log:txn 41 committed"));
        // Words written: a prefix of the 16 words.
        let words: Vec<bool> = (0..WRITES * 2).map(|w| word(&sim, 0, w * 8) != 0).collect();
        let n = words.iter().take_while(|&&w| w).count();
        assert!(words[n..].iter().all(|&w| !w), "seed {seed}: not a prefix: {words:?}");
        prefixes.insert(n);
        torn_seen |= n % 2 == 1;
    }
    assert!(prefixes.len() >= 4, "the seed picks the prefix: {prefixes:?}");
    assert!(torn_seen, "some seed tears a WRITE at a word");
}

/// Goal: link down. Ops in flight fail one timeout after the link went down (one that
/// already reached the memory node stays applied: its reply was lost, one that had not
/// never applies); posts while it is down fail after the timeout; the first post after
/// it is back succeeds.
#[test]
fn link_down_fails_in_flight_ops_and_the_connection_recovers() {
    let base = read_latency(None);
    let sim = sim(1, 1);
    // The link goes down between the WRITE's arrival at the node and its reply.
    let down_at = base * 3 / 4;
    sim.install_faults(script(&format!(
        "timeout=10us; link-down node=cn0 for=20us at={down_at}ns"
    )))
    .unwrap();
    let log: Log = Default::default();
    let mut ex = SimExecutor::new(&sim);
    spawn_write(&mut ex, &sim, 0, 0, 0, 0, 1, &log); // applied, reply lost
    spawn_write(&mut ex, &sim, 0, down_at - 100, 0, 8, 2, &log); // request lost
    spawn_write(&mut ex, &sim, 0, 15_000, 0, 16, 3, &log); // posted while down
    spawn_write(&mut ex, &sim, 0, down_at + 25_000, 0, 24, 4, &log); // after
    ex.run().unwrap();
    let log = results(&log);
    assert!(unreachable(&log[0].0) && unreachable(&log[1].0), "{log:?}");
    assert_eq!(log[0].1, down_at + 10_000);
    assert_eq!(log[1].1, down_at + 10_000);
    assert!(unreachable(&log[2].0));
    assert_eq!(log[2].1, 15_000 + 10_000);
    assert_eq!(log[3].0, Ok(()));
    assert_eq!(word(&sim, 0, 0), 1, "reached the node before the link went down");
    assert_eq!(word(&sim, 0, 8), 0, "never left");
    assert_eq!(word(&sim, 0, 16), 0);
    assert_eq!(word(&sim, 0, 24), 4);
}

/// Goal: a lost response. The matched op (the 2nd CAS to mn0) applies, its post fails
/// after the timeout; the ops before and after are untouched.
#[test]
fn lose_response_applies_the_op_but_reports_an_error() {
    let sim = sim(1, 1);
    sim.install_faults(script("timeout=10us; lose-response on=kind:cas,mn:0 nth=2"))
        .unwrap();
    let t = SimFabric::new(&sim, 0).transport();
    let out = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    let (s, o) = (sim.clone(), out.clone());
    ex.spawn(async move {
        for v in 0..3u64 {
            let start = s.now();
            let mut p = Post::new();
            p.read(ptr(0, 64), 8); // not a CAS: never matched
            let cas = p.cas(ptr(0, 0), v, v + 1);
            let (r, at) = post(&s, &t, &mut p).await;
            o.borrow_mut()
                .push((r.is_ok(), at - start, r.is_ok().then(|| p.old(cas))));
        }
    });
    ex.run().unwrap();
    let out = out.borrow();
    assert_eq!((out[0].0, out[1].0, out[2].0), (true, false, true), "{out:?}");
    assert_eq!(out[1].1, 10_000, "fails exactly one timeout after the post");
    assert_eq!(out[2].2, Some(2), "the lost CAS applied: the third CAS saw 2");
    assert_eq!(word(&sim, 0, 0), 3);
}

/// Goal: a delay holds the matched post's completion back by exactly `by`, and only
/// that post's.
#[test]
fn delay_postpones_matched_completions() {
    let base = read_latency(None);
    let delayed = read_latency(Some("delay by=5us on=kind:read nth=1"));
    assert_eq!(delayed, base + 5_000);
    assert_eq!(read_latency(Some("delay by=5us on=kind:write nth=1")), base);
}

/// Latencies of lone READs (8 B at offset 64), each posted by compute node `cn` to the
/// memory nodes `mns` at virtual time `at`, in turn, on a 2-CN 2-MN simulation with
/// `faults` installed.
fn lone_read_latencies(faults: &str, posts: &[(u32, &[u16], u64)]) -> Vec<u64> {
    let sim = sim(1, 2);
    sim.install_faults(script(faults)).unwrap();
    let ts: Vec<Rc<SimTransport>> = (0..2).map(|cn| Rc::new(SimFabric::new(&sim, cn).transport())).collect();
    let out = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    let (s, o) = (sim.clone(), out.clone());
    let posts: Vec<(u32, Vec<u16>, u64)> = posts.iter().map(|&(c, m, at)| (c, m.to_vec(), at)).collect();
    ex.spawn(async move {
        for (cn, mns, at) in posts {
            s.sleep(at.saturating_sub(s.now())).await;
            let mut p = Post::new();
            for &mn in &mns {
                p.read(ptr(mn, 64), 8);
            }
            let start = s.now();
            let (r, end) = post(&s, &ts[cn as usize], &mut p).await;
            r.unwrap();
            o.borrow_mut().push(end - start);
        }
    });
    ex.run().unwrap();
    let v = out.borrow().clone();
    v
}

/// Goal: `delay by=D node=NODE` holds back the replies of everything the node is part
/// of while it lasts: the posts of a delayed compute node, the posts to a delayed
/// memory node (a post to two nodes waits for the delayed one), and nothing else; after
/// `for`, nothing.
#[test]
fn a_node_delay_postpones_its_posts() {
    let d = 5_000;
    // The same posts with the fault armed after the run: undelayed latencies.
    let check = |node: &str, posts: &[(u32, &[u16], u64)], delayed: &[bool]| {
        let base = lone_read_latencies(&format!("delay by=5us node={node} at=1s"), posts);
        let got = lone_read_latencies(&format!("delay by=5us node={node} at=10us for=100us"), posts);
        let want: Vec<u64> = base
            .iter()
            .zip(delayed)
            .map(|(&b, &x)| b + if x { d } else { 0 })
            .collect();
        assert_eq!(got, want, "delay node={node} (undelayed {base:?})");
    };
    let mn: &[(u32, &[u16], u64)] = &[
        (0, &[1], 0),         // before the window
        (0, &[1], 20_000),    // in it
        (0, &[0], 40_000),    // another memory node
        (1, &[0, 1], 60_000), // both: it waits for the delayed one
        (0, &[1], 200_000),   // after it
    ];
    check("mn1", mn, &[false, true, false, true, false]);
    let cn: &[(u32, &[u16], u64)] = &[
        (0, &[0], 0),
        (1, &[0], 20_000),
        (1, &[1], 40_000),
        (0, &[1], 60_000),
        (1, &[0], 200_000),
    ];
    check("cn1", cn, &[false, true, true, false, false]);
}

/// Goal: a slow NIC stretches its node's batches (here: factor 3 on the memory node
/// gives at least 2.5x the fault-free READ latency) and no other node's.
#[test]
fn slow_nic_scales_its_times() {
    let base = read_latency(None);
    let slow = read_latency(Some("slow-nic node=mn0 factor=3 at=0"));
    assert!(slow * 2 >= base * 5, "slow {slow} ns vs {base} ns");
    assert_eq!(read_latency(Some("slow-nic node=cn1 factor=3 at=0")), base);
}

/// Goal: a partition cuts the paths across it in both directions for its duration and
/// leaves paths within a side alone.
#[test]
fn partition_cuts_paths_across() {
    let sim = sim(1, 2);
    sim.install_faults(script("timeout=10us; partition side=cn1,mn1 for=50us at=0"))
        .unwrap();
    let log: Log = Default::default();
    let mut ex = SimExecutor::new(&sim);
    spawn_write(&mut ex, &sim, 0, 10, 0, 0, 1, &log); // same side (outside)
    spawn_write(&mut ex, &sim, 0, 10, 1, 0, 1, &log); // across
    spawn_write(&mut ex, &sim, 1, 10, 1, 8, 1, &log); // same side (inside)
    spawn_write(&mut ex, &sim, 1, 10, 0, 8, 1, &log); // across
    spawn_write(&mut ex, &sim, 1, 60_000, 0, 16, 1, &log); // healed
    ex.run().unwrap();
    let ok: Vec<bool> = results(&log).iter().map(|(r, _)| r.is_ok()).collect();
    assert_eq!(ok, [true, false, true, false, true]);
}

/// Goal: clock faults change exactly the readings of the named node's clock: a jump at
/// once, a drift from its start on; other nodes' clocks are untouched.
#[test]
fn clock_jump_and_drift_move_node_clocks() {
    let sim = sim(1, 1);
    let c1 = sim.node_clock(Node::Cn(1), 1_000, 0).unwrap();
    let c0 = sim.node_clock(Node::Cn(0), 0, 0).unwrap();
    sim.install_faults(script(
        "clock-jump node=cn1 by=-4us at=10us; clock-drift node=cn1 ppm=100000 at=20us",
    ))
    .unwrap();
    let mut ex = SimExecutor::new(&sim);
    let readings = Rc::new(RefCell::new(Vec::new()));
    let (s, r) = (sim.clone(), readings.clone());
    ex.spawn(async move {
        for at in [9_000u64, 11_000, 40_000] {
            s.sleep(at - s.now()).await;
            r.borrow_mut().push((c0.now_ns(), c1.now_ns()));
        }
    });
    ex.run().unwrap();
    assert_eq!(
        *readings.borrow(),
        [
            (9_000, 10_000),
            (11_000, 11_000 + 1_000 - 4_000),
            (40_000, 40_000 + 1_000 - 4_000 + 2_000)
        ]
    );
}

/// Goal: op-stream triggers. An op count on one node (`on=mn:1 nth=3`) crashes it at
/// the 3rd op to it, which then fails while the first two succeed; an address-range and
/// CN predicate strikes only the ops that match all of it.
#[test]
fn op_count_and_predicate_triggers() {
    let sim = sim(1, 2);
    sim.install_faults(script(
        "timeout=5us; crash-mn mn=1 mode=dram on=mn:1 nth=3; \
         lose-response on=kind:write,cn:0,addr:0x1000..0x2000 nth=2",
    ))
    .unwrap();
    let log: Log = Default::default();
    let mut ex = SimExecutor::new(&sim);
    for (i, (cn, mn, off)) in [
        (0, 1, 0u64),   // 1st op to mn1
        (0, 0, 0x1000), // 1st match of the predicate
        (1, 1, 8),      // 2nd op to mn1
        (1, 0, 0x1008), // cn1: no match
        (0, 0, 0x0ff8), // below the range: no match
        (0, 0, 0x1010), // 2nd match: response lost
        (0, 1, 16),     // 3rd op to mn1: crashes it
        (0, 0, 0x1018), // 3rd match: past nth (count 1)
    ]
    .into_iter()
    .enumerate()
    {
        spawn_write(&mut ex, &sim, cn, 10_000 * i as u64, mn, off, 1, &log);
    }
    ex.run().unwrap();
    let ok: Vec<bool> = results(&log).iter().map(|(r, _)| r.is_ok()).collect();
    assert_eq!(ok, [true, true, true, true, true, false, false, true]);
    assert_eq!(word(&sim, 0, 0x1010), 1, "the lost-response WRITE applied");
    assert!(sim.mn_down(MnId(1)));
}

/// Goal: fault-point triggers count passes (`occurrence`), crash the CN that passed
/// the point when the fault names none, and honour `after`.
#[test]
fn fault_point_triggers() {
    let sim = sim(1, 1);
    sim.install_faults(script(
        "crash-cn point=test.window occurrence=2; crash-mn mn=0 mode=dram point=test.other after=5us",
    ))
    .unwrap();
    sim.fault_point(3, "test.window");
    assert!(!sim.cn_down(3), "first pass: not yet");
    sim.fault_point(1, "test.unrelated");
    sim.fault_point(2, "test.window");
    assert!(
        sim.cn_down(2) && !sim.cn_down(3),
        "the second pass crashes its own node"
    );
    sim.fault_point(0, "test.other");
    assert!(!sim.mn_down(MnId(0)));
    let mut ex = SimExecutor::new(&sim);
    let s = sim.clone();
    ex.spawn(async move { s.sleep(4_999).await });
    ex.run().unwrap();
    assert!(!sim.mn_down(MnId(0)));
    let mut ex = SimExecutor::new(&sim);
    let s = sim.clone();
    ex.spawn(async move { s.sleep(1).await });
    ex.run().unwrap();
    assert!(sim.mn_down(MnId(0)), "down 5 µs after the point");
}

/// A small randomized run under many faults; returns everything that must repeat.
fn chaos(seed: u64) -> (Vec<dmtx_sim::faults::FaultRecord>, Vec<(bool, u64)>, Vec<u64>) {
    let sim = sim(seed, 2);
    sim.install_faults(script(
        "timeout=20us; crash-mn mn=1 mode=pm at=30us restart=40us; crash-cn cn=1 at=45us; \
         link-down node=mn0 for=10us at=60us; lose-response on=kind:cas nth=5 count=3; \
         delay by=3us on=kind:read,cn:0 nth=2 count=10",
    ))
    .unwrap();
    let out = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    for cn in 0..2u32 {
        let t = SimFabric::new(&sim, cn).transport();
        let (s, o) = (sim.clone(), out.clone());
        let mut rng = sim.fork_rng();
        ex.spawn(async move {
            use rand::Rng;
            for _ in 0..40 {
                let mut p = Post::new();
                for _ in 0..rng.random_range(1..5) {
                    let mn = rng.random_range(0..2u16);
                    let off = rng.random_range(0..64u64) * 8;
                    match rng.random_range(0..3) {
                        0 => {
                            p.read(ptr(mn, off), 8);
                        }
                        1 => p.write(ptr(mn, off), &rng.random::<u64>().to_le_bytes()),
                        _ => {
                            p.faa(ptr(mn, off), 1);
                        }
                    }
                    if rng.random_bool(0.2) {
                        p.cas(ptr(mn, off), 0, 1);
                    }
                }
                let (r, at) = post(&s, &t, &mut p).await;
                o.borrow_mut().push((r.is_ok(), at));
            }
        });
    }
    // Past the deadline, so the run ends there although the crashed node's task waits.
    let s = sim.clone();
    ex.spawn(async move { s.sleep(2_000_001).await });
    ex.run_until(2_000_000).unwrap();
    let words = (0..2)
        .flat_map(|mn| (0..64).map(move |w| (mn, w)))
        .map(|(mn, w)| word(&sim, mn, w * 8))
        .collect();
    let r = out.borrow().clone();
    (sim.fault_log(), r, words)
}

/// Goal: the same seed and script give the identical run (fault log, every post's
/// outcome and time, memory), and another seed a different one.
#[test]
fn same_seed_and_script_same_outcome() {
    let a = chaos(11);
    assert_eq!(a, chaos(11));
    assert!(a.0.len() >= 5, "{:?}", a.0);
    assert!(a.1.iter().any(|(ok, _)| !ok) && a.1.iter().any(|(ok, _)| *ok));
    assert_ne!(a, chaos(12));
}

/// Goal: scripts from TOML install like the one-line form, and a script naming a memory
/// node the simulation lacks is refused with the node count.
#[test]
fn toml_scripts_and_unknown_nodes() {
    let s = FaultScript::from_toml(
        r#"
        timeout = "5us"
        [[fault]]
        kind = "link-down"
        node = "mn1"
        for = "1ms"
        at = 0
        "#,
    )
    .unwrap();
    let e = sim(1, 1).install_faults(s.clone()).unwrap_err().to_string();
    assert!(
        e.contains("mn1 does not exist; this simulation has 1 memory nodes"),
        "{e}"
    );
    sim(1, 2).install_faults(s).unwrap();
}

fn step_until(sim: &Sim, t: u64) {
    let mut ex = SimExecutor::new(sim);
    let s = sim.clone();
    ex.spawn(async move { s.sleep(t.saturating_sub(s.now())).await });
    ex.run_until(t).unwrap();
}

const LEASE_NS: u64 = 300_000;

/// Goal: a crashed memory node is expelled by lease expiry, not by an oracle: no
/// sooner than a lease minus a renewal interval after the crash, no later than a lease
/// plus a renewal interval; the epoch bumps once and a restart rejoins it.
#[test]
fn mn_crash_is_detected_within_lease_plus_renewal() {
    let sim = sim(1, 2);
    let crash_at = 1_000_000u64;
    sim.install_faults(script(&format!(
        "membership lease={LEASE_NS}ns members=cn0,mn0,mn1; crash-mn mn=1 mode=dram at={crash_at}ns restart=2ms"
    )))
    .unwrap();
    step_until(&sim, crash_at + 2 * LEASE_NS);
    let h = sim.view_history();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!((h[0].node, h[0].change, h[0].epoch), (Node::Mn(1), Change::Expelled, 2));
    let renew = LEASE_NS / 3;
    let after = h[0].at_ns - crash_at;
    assert!(after <= LEASE_NS + renew, "detected {after} ns after the crash");
    assert!(after + renew >= LEASE_NS, "detected too early: {after} ns");
    assert!(!sim.view().contains(Node::Mn(1)) && sim.view().contains(Node::Mn(0)));
    step_until(&sim, crash_at + 2_000_000 + 10);
    let v = sim.view();
    assert!(v.contains(Node::Mn(1)) && v.epoch == 3, "{v:?}");
    assert_eq!(sim.view_history()[1].change, Change::Joined);
}

/// Goal: a live node whose lease messages are delayed past what its lease allows is
/// expelled, with no crash and no cut: renewals sent every third of a lease arrive a
/// third of a lease apart, so once a delay starts the membership node waits a renewal
/// interval plus the delay; a delay of a lease expels the node, half a lease does not.
#[test]
fn a_delayed_node_is_expelled_though_alive() {
    for (by, expelled) in [(LEASE_NS, true), (LEASE_NS / 2, false)] {
        let sim = sim(1, 1);
        sim.install_faults(script(&format!(
            "membership lease={LEASE_NS}ns members=cn0,cn1,mn0; delay by={by}ns node=cn1 at=500us"
        )))
        .unwrap();
        step_until(&sim, 3_000_000);
        let v = sim.view();
        assert_eq!(v.contains(Node::Cn(1)), !expelled, "delay {by} ns: {v:?}");
        assert!(v.contains(Node::Cn(0)) && v.contains(Node::Mn(0)));
        if expelled {
            let h = sim.view_history();
            assert_eq!((h[0].node, h[0].change), (Node::Cn(1), Change::Expelled), "{h:?}");
            assert!(
                h[0].at_ns > 500_000 && h[0].at_ns <= 500_000 + LEASE_NS + LEASE_NS / 3,
                "{h:?}"
            );
        }
    }
}

/// Goal: a crashed membership node stops failure detection, not the members: while it
/// is down no lease is granted or expires at it, so the view stands (a compute node
/// that crashes meanwhile stays in it) while every member's own lease runs out; after
/// its restart the members hold leases again in the same epoch, and the dead node is
/// expelled within a lease (plus a renewal) of the restart.
#[test]
fn a_crashed_membership_node_stops_detection_until_it_restarts() {
    let sim = sim(1, 1);
    let (crash, restart) = (500_000u64, 2_500_000u64);
    sim.install_faults(script(&format!(
        "membership lease={LEASE_NS}ns members=cn0,cn1,mn0; crash-ms at={crash}ns restart={}ns; \
         crash-cn cn=1 at=1ms",
        restart - crash
    )))
    .unwrap();
    step_until(&sim, restart - 10_000);
    let v = sim.view();
    assert_eq!((v.epoch, v.members.len()), (1, 3), "no change while ms is down: {v:?}");
    assert!(
        !sim.lease_held(Node::Cn(0)) && !sim.lease_held(Node::Mn(0)),
        "their leases ran out"
    );
    step_until(&sim, restart + LEASE_NS / 3 + 20_000);
    assert!(
        sim.lease_held(Node::Cn(0)) && sim.lease_held(Node::Mn(0)),
        "renewed after the restart"
    );
    assert_eq!(sim.view().epoch, 1);
    step_until(&sim, restart + 2 * LEASE_NS);
    let h = sim.view_history();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!((h[0].node, h[0].change, h[0].epoch), (Node::Cn(1), Change::Expelled, 2));
    assert!(
        h[0].at_ns >= restart + LEASE_NS && h[0].at_ns <= restart + LEASE_NS + LEASE_NS / 3,
        "{h:?}"
    );
    assert!(sim.view().contains(Node::Cn(0)));
    // There is no membership node to crash without the service.
    let err = crate::sim(1, 1)
        .install_faults(script("crash-ms at=1ms"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no membership node to crash"), "{err}");
}

/// Goal: a compute node cut off from the membership node by a partition can no longer
/// renew and is expelled (and stays out when the partition heals), while the others stay.
#[test]
fn partitioned_cn_is_expelled() {
    let sim = sim(1, 1);
    sim.install_faults(script(&format!(
        "membership lease={LEASE_NS}ns members=cn0,cn1,mn0; partition side=cn1 at=500us for=1ms"
    )))
    .unwrap();
    step_until(&sim, 3_000_000);
    let v = sim.view();
    assert_eq!(v.members, [Node::Cn(0), Node::Mn(0)]);
    assert_eq!(v.epoch, 2);
    let h = sim.view_history();
    assert!(
        h[0].at_ns > 500_000 && h[0].at_ns <= 500_000 + LEASE_NS + LEASE_NS / 3,
        "{h:?}"
    );
    assert!(!sim.lease_held(Node::Cn(1)), "after healing, its renewals are rejected");
    assert!(sim.lease_held(Node::Cn(0)));
}

/// Goal: the stale-lease hazard of a clock that drifts beyond the bound (OOCC §VII-B).
/// Two compute nodes are cut off at the same instant; cn0's clock is exact, cn1's runs
/// at 40 % speed (−600 000 ppm). Sampling every microsecond: cn0 never believes it
/// holds a lease the membership node has revoked (its belief ends first, because it
/// counts from the send time of its last renewal); cn1 does, for longer than a lease —
/// a window in which a protocol trusting local leases would act on a revoked one.
#[test]
fn drifting_clock_shows_the_stale_lease_hazard() {
    let sim = sim(1, 1);
    sim.node_clock(Node::Cn(0), 0, 0).unwrap();
    sim.node_clock(Node::Cn(1), 0, 0).unwrap();
    sim.install_faults(script(&format!(
        "membership lease={LEASE_NS}ns members=cn0,cn1,mn0; clock-drift node=cn1 ppm=-600000 at=100us; \
         partition side=cn0,cn1 at=1ms"
    )))
    .unwrap();
    let mut stale = [0u64; 2];
    for t in (1_000_000..2_500_000).step_by(1_000) {
        step_until(&sim, t);
        let view = sim.view();
        for cn in 0..2 {
            if sim.lease_held(Node::Cn(cn)) && !view.contains(Node::Cn(cn)) {
                stale[cn as usize] += 1_000;
            }
        }
    }
    assert!(!sim.view().contains(Node::Cn(0)) && !sim.view().contains(Node::Cn(1)));
    assert_eq!(stale[0], 0, "an exact clock never outlives its lease");
    assert!(
        stale[1] > LEASE_NS,
        "the slow clock held a revoked lease for {} ns",
        stale[1]
    );
    assert_eq!(
        MembershipConfig::new(LEASE_NS, vec![Node::Cn(0)]).renew_ns,
        LEASE_NS / 3
    );
}

/// Goal: a crashed compute node's tasks end with it, even while the membership service's
/// renewals keep virtual time moving (were they dropped only once no event was left,
/// `dmtx bench` with `membership` and `crash-cn` would run for ever). Method: three tasks
/// on each node's CPU post in a loop, cn1 crashes mid-post, cn0's stop at 200 µs; a run
/// with a deadline of 1 s ends when cn0's do, cn1's counted as crashed.
#[test]
fn crashed_cn_tasks_end_a_run_under_membership() {
    let sim = sim(1, 1);
    sim.install_faults(script(&format!(
        "membership lease={LEASE_NS}ns members=cn0,cn1,mn0; crash-cn cn=1 at=50us"
    )))
    .unwrap();
    let fabrics = [SimFabric::new(&sim, 0), SimFabric::new(&sim, 1)];
    let mut ex = SimExecutor::new(&sim);
    for (cn, fabric) in fabrics.iter().enumerate() {
        for k in 0..3u64 {
            let (s, t) = (sim.clone(), fabric.transport_of(0));
            ex.spawn_on(sim.cpu_of(cn as u32, 0), async move {
                while s.now() < 200_000 {
                    let mut p = Post::new();
                    p.faa(ptr(0, 64 * k), 1);
                    post(&s, &t, &mut p).await.0.unwrap();
                }
            });
        }
    }
    let r = ex.run_until(1_000_000_000).unwrap();
    assert!(sim.cn_down(1));
    assert_eq!((r.pending, r.crashed, r.finished), (0, 3, 3), "{r:?}");
    assert!(
        r.end_ns < 250_000,
        "the run ended at {} ns, not with cn0's tasks",
        r.end_ns
    );
}

/// Goal: an interrupt stops a run whose tasks never end, while periodic events keep time
/// moving: `on_set` runs once, and the tasks still pending a grace later are dropped.
/// Method: membership renewals, a task that waits for ever and one that stops when asked.
#[test]
fn an_interrupt_ends_a_run_that_never_finishes() {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering};
    let sim = sim(1, 1);
    sim.install_faults(script(&format!("membership lease={LEASE_NS}ns members=cn0,mn0")))
        .unwrap();
    let (flag, asked, calls) = (AtomicBool::new(false), Cell::new(false), Cell::new(0));
    let mut ex = SimExecutor::new(&sim);
    ex.spawn(std::future::pending());
    let (s, asked_ref) = (sim.clone(), &asked);
    ex.spawn(async move {
        while !asked_ref.get() {
            s.sleep(1_000).await;
        }
    });
    // The interrupt arrives at 1 ms (virtual): a Ctrl-C handler would set it from its thread.
    let (s, flag_ref) = (sim.clone(), &flag);
    ex.spawn(async move {
        s.sleep(1_000_000).await;
        flag_ref.store(true, Ordering::Relaxed);
    });
    ex.interrupt_on(&flag, 50_000, || {
        calls.set(calls.get() + 1);
        asked.set(true);
    });
    // A deadline far beyond the grace, so that a run the interrupt misses fails, not hangs.
    let r = ex.run_until(1_000_000_000).unwrap();
    assert_eq!(calls.get(), 1);
    assert_eq!((r.pending, r.finished), (1, 2), "{r:?}");
    assert!(
        (1_000_000..=1_050_000).contains(&r.end_ns),
        "ended at {} ns, within the grace",
        r.end_ns
    );
}

/// Goal: a crashed compute node stops renewing its lease (its timer kept firing, sending
/// nothing, for the rest of the run). Method: the events of 10 ms long after `cn1`
/// crashed and was expelled, against a run in which `cn1` was never a member: the same
/// count, so nothing of `cn1` is left in the queue.
#[test]
fn a_crashed_cn_stops_renewing_its_lease() {
    let window_events = |members: &str, crash: &str| {
        let sim = sim(1, 1);
        sim.install_faults(script(&format!(
            "membership lease={LEASE_NS}ns members={members}{crash}"
        )))
        .unwrap();
        step_until(&sim, 2_000_000);
        let before = sim.stats().events;
        step_until(&sim, 12_000_000);
        sim.stats().events - before
    };
    let crashed = window_events("cn0,cn1,mn0", "; crash-cn cn=1 at=50us");
    let never = window_events("cn0,mn0", "");
    assert!(never > 0, "renewals of the live members run");
    assert_eq!(crashed, never, "events of a crashed node's timer remain");
}

/// Goal: a progress callback observes virtual time without changing the run (no event
/// of its own): the same memory, events and end as without it, and calls at least
/// `every` apart, the first at the start. Method: posting tasks under membership, run
/// with and without a callback every 7 µs.
#[test]
fn progress_calls_observe_without_changing_the_run() {
    let run = |every: Option<u64>| {
        let sim = sim(3, 1);
        sim.install_faults(script(&format!("membership lease={LEASE_NS}ns members=cn0,mn0")))
            .unwrap();
        let fabric = SimFabric::new(&sim, 0);
        let calls = RefCell::new(Vec::new());
        let mut ex = SimExecutor::new(&sim);
        for k in 0..4u64 {
            let (s, t) = (sim.clone(), fabric.transport_of(0));
            ex.spawn_on(sim.cpu_of(0, 0), async move {
                while s.now() < 300_000 {
                    let mut p = Post::new();
                    p.faa(ptr(0, 64 * k), 1);
                    post(&s, &t, &mut p).await.0.unwrap();
                }
            });
        }
        if let Some(every) = every {
            ex.on_progress(every, |now| calls.borrow_mut().push(now));
        }
        let r = ex.run_until(1_000_000).unwrap();
        let words: Vec<u64> = (0..4).map(|k| word(&sim, 0, 64 * k)).collect();
        ((words, sim.stats().events, r.end_ns), calls.into_inner())
    };
    let (plain, none) = run(None);
    let (watched, calls) = run(Some(7_000));
    assert!(none.is_empty());
    assert_eq!(plain, watched, "the callback changed the run");
    assert_eq!(calls.first(), Some(&0));
    assert!(calls.len() > 30, "{} calls over 300 µs", calls.len());
    assert!(calls.windows(2).all(|w| w[1] >= w[0] + 7_000), "{calls:?}");
}
