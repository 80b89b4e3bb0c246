//! DrTM+H's cross-node window (module doc of `dmtx_protocols::drtmh`), made to happen
//! deterministically, caught by the isolation checker, and closed by `strict=true`
//! (and absent from FaRM, which validates after its lock round).
//!
//! Setup: record A's primary on memory node 1, record B's on node 0. T1 reads A and
//! writes B; T2 reads B and writes A. Method: on a `mem` cluster whose transport runs
//! each post's per-node batches from the highest node to the lowest (the verb contract
//! orders one node's ops only; batches of different nodes run in parallel, so this is
//! an order a NIC may produce), T1's lock&validate post runs its READ of A (node 1)
//! before its CAS of B (node 0). A stall holds that READ after it read A's lock word
//! (clear) and before A's version; meanwhile T2 locks A, reads B unlocked and passes,
//! and is stalled at its in-place WRITE of A. T1 then reads A's version, unchanged,
//! locks B and commits; T2 commits after it. Each read what the other overwrote: a
//! cycle.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use dmtx_check::history::History;
use dmtx_check::recorder::Recorder;
use dmtx_protocols::drtmh::Drtmh;
use dmtx_protocols::farm::Farm;
use dmtx_runtime::{block_on, Abort, AbortReason, Cn, Knobs, Protocol, RealClock, Table};
use dmtx_store::TableSpec;
use dmtx_suite::{bank, Env, Setup};
use dmtx_verbs::apply::apply_op;
use dmtx_verbs::{Fabric, MemFabric, Post, Region, StallKind, Submitted, Ticket, Transport, VerbError};

/// Record A's table: primary on node 1 (placement is round-robin by table id over
/// `dmtx_suite::env::MNS` = 3 nodes).
const TA: Table<[u8]> = Table::new(1);
/// Record A's table when it shares B's node: primary on node 0.
const TA_BESIDE_B: Table<[u8]> = Table::new(3);
/// Record B's table: primary on node 0.
const TB: Table<[u8]> = Table::new(0);
const A: u64 = 1;
const B: u64 = 2;

/// The `mem` transport with each post's per-node batches run from the highest node to
/// the lowest, each batch's ops in order.
struct Reversed(MemFabric);

struct ReversedTransport(MemFabric);

impl Fabric for Reversed {
    fn name(&self) -> &'static str {
        "mem-reversed"
    }
    fn mn_count(&self) -> usize {
        self.0.mn_count()
    }
    fn endpoint(&self, _worker: u32) -> dmtx_verbs::Result<Box<dyn Transport>> {
        Ok(Box::new(ReversedTransport(self.0.clone())))
    }
}

impl ReversedTransport {
    fn run(&self, post: &mut Post) -> dmtx_verbs::Result<()> {
        let parts = post.parts_mut();
        let mut mns: Vec<usize> = parts.ops.iter().map(|op| op.ptr().mn.index()).collect();
        mns.sort_unstable();
        mns.dedup();
        let mut first_err: Option<(usize, VerbError)> = None;
        for &mn in mns.iter().rev() {
            let region: &Arc<Region> = self.0.region(dmtx_verbs::MnId(mn as u16));
            for (i, op) in parts.ops.iter().enumerate() {
                if op.ptr().mn.index() != mn {
                    continue;
                }
                if let Err(e) = apply_op(region, i, op, parts.write_data, parts.read_buf, parts.old) {
                    if first_err.as_ref().is_none_or(|(j, _)| i < *j) {
                        first_err = Some((i, e));
                    }
                    break;
                }
            }
        }
        first_err.map_or(Ok(()), |(_, e)| Err(e))
    }
}

impl Transport for ReversedTransport {
    fn mn_count(&self) -> usize {
        self.0.mn_count()
    }
    fn submit(&self, post: &mut Post) -> Submitted {
        Submitted::Done(self.run(post))
    }
    fn poll(&self, ticket: Ticket, _post: &mut Post, _cx: &mut Context<'_>) -> Poll<dmtx_verbs::Result<()>> {
        unreachable!("posts complete at submit; no ticket {ticket:?} exists")
    }
    fn submit_detached(&self, post: &mut Post) {
        let _ = self.run(post);
    }
}

/// Tables `ta` and B, 2 replicas each, four bank accounts in each.
fn env<P: Protocol>(proto: P, ta: Table<[u8]>) -> Env<P> {
    let setup = Setup::new(2, 20);
    let specs = [TB, ta].map(|t| TableSpec::new(t.id(), format!("t{}", t.id()), setup.value_bytes, 64));
    let vb = setup.value_bytes as usize;
    Env::with_tables(proto, setup, &specs, |_, insert| {
        let mut v = vec![0u8; vb];
        for k in 0..4 {
            bank::encode(k, bank::INITIAL, 0, &mut v);
            insert(k, &v)?;
        }
        Ok(())
    })
}

/// Read `read` and restamp `write` on worker `w` of `cn`; `between` runs after execute,
/// before commit. Returns the outcome and the recorded history.
fn read_then_write<P: Protocol>(
    env: &Env<P>,
    cn: &Cn,
    w: u16,
    read: (Table<[u8]>, u64),
    write: (Table<[u8]>, u64),
    between: impl FnOnce(),
) -> (Result<(), Abort>, History) {
    let worker = cn.worker(w).expect("worker");
    let history = Rc::new(RefCell::new(History::new()));
    let mut c = worker.coordinator(&env.proto, 0).expect("coordinator");
    c.set_observer(Box::new(Recorder::new(history.clone())));
    let res = block_on(async {
        let mut t = c.begin();
        t.add_ro(read.0, read.1);
        let x = t.add_rw(write.0, write.1);
        t.execute().await?;
        between();
        let v = t.bytes_mut(x);
        let (b, s) = bank::decode(write.1, v).expect("an intact account");
        bank::encode(write.1, b, s + 1, v);
        t.commit().await
    });
    drop(c);
    (res, Rc::try_unwrap(history).expect("recorder dropped").into_inner())
}

/// What the interleaving gave: T1's and T2's outcomes and the checker's findings
/// (empty when clean).
struct Window {
    t1: Result<(), Abort>,
    t2: Result<(), Abort>,
    findings: String,
}

/// T1 and T2 as in the module doc, A in table `ta`; with `across` A's primary is on
/// node 1 and the transport runs node 1's batches first, else A shares node 0 with B on
/// the plain `mem` transport.
fn run_window<P: Protocol>(proto: P, across: bool) -> Window {
    let ta = if across { TA } else { TA_BESIDE_B };
    let env = env(proto, ta);
    let cn = if across {
        Cn::connect(
            0,
            Arc::new(Reversed(env.cluster.fabric().clone())),
            Arc::new(env.cluster.clone()),
            Arc::new(RealClock::new()),
        )
        .expect("connect to an in-process cluster")
    } else {
        env.mem_cn(0)
    };
    let a_ptr = env
        .catalog()
        .get(ta.id())
        .expect("table A")
        .ptr(0, env.slots(ta.id())[&A]);
    assert_eq!(a_ptr.mn.index(), usize::from(across), "A's primary");
    let b_ptr = env
        .catalog()
        .get(TB.id())
        .expect("table B")
        .ptr(0, env.slots(TB.id())[&B]);
    assert_eq!(b_ptr.mn.index(), 0, "B's primary on node 0");
    let region = env.region(a_ptr.mn);
    let a_version = a_ptr.offset + 8;

    let (executed_tx, executed) = mpsc::channel();
    let (go_tx, go) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (env, cn) = (&env, &cn);
        let t1 = s.spawn(move || {
            read_then_write(env, cn, 0, (ta, A), (TB, B), || {
                executed_tx.send(()).unwrap();
                go.recv().unwrap();
            })
        });
        executed.recv().expect("T1 executed");
        // Armed once both executions are behind them: T1's READ of A's version in its
        // validation, and T2's in-place WRITE of it.
        let read_gate = region.arm_stall(StallKind::Read, a_version);
        let write_gate = region.arm_stall(StallKind::Write, a_version);
        go_tx.send(()).unwrap();
        read_gate.wait_stalled();
        let t2 = s.spawn(move || read_then_write(env, cn, 1, (TB, B), (ta, A), || {}));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !write_gate.is_stalled() && !t2.is_finished() {
            assert!(Instant::now() < deadline, "T2 neither stalled nor finished");
            std::thread::sleep(Duration::from_micros(50));
        }
        drop(read_gate);
        let (r1, mut h) = t1.join().expect("T1");
        drop(write_gate);
        let (r2, h2) = t2.join().expect("T2");
        h.append(h2);
        let report = dmtx_check::check(&h, &env.check_options());
        Window {
            t1: r1,
            t2: r2,
            findings: if report.is_clean() {
                String::new()
            } else {
                report.to_string()
            },
        }
    })
}

/// Goal: the window is real: both transactions pass their one lock&validate round and
/// commit, and the isolation checker reports the cycle.
#[test]
fn the_cross_node_window_commits_write_skew_and_the_checker_catches_it() {
    let w = run_window(Drtmh::from_knobs(&Knobs::default()).unwrap(), true);
    assert!(w.t1.is_ok(), "T1: {:?}", w.t1);
    assert!(w.t2.is_ok(), "T2: {:?}", w.t2);
    assert!(!w.findings.is_empty(), "the checker missed the write skew");
    eprintln!("caught: {}", w.findings);
}

/// Goal: `strict=true` closes the window: T1 holds B's lock before it reads A, so T2's
/// validation sees B locked and aborts; the history is clean.
#[test]
fn strict_mode_closes_the_window() {
    let w = run_window(
        Drtmh::from_knobs(&Knobs::parse(["strict=true"]).unwrap()).unwrap(),
        true,
    );
    assert!(w.t1.is_ok(), "T1: {:?}", w.t1);
    assert_eq!(w.t2.map_err(|a| a.reason), Err(AbortReason::Validation));
    assert_eq!(w.findings, "");
}

/// Goal: FaRM has no window: its validation round follows its lock round.
#[test]
fn farm_has_no_window() {
    let w = run_window(Farm::from_knobs(&Knobs::default()).unwrap(), true);
    assert!(w.t1.is_ok(), "T1: {:?}", w.t1);
    assert_eq!(w.t2.map_err(|a| a.reason), Err(AbortReason::Validation));
    assert_eq!(w.findings, "");
}

/// Goal: on one memory node there is no window: the lock&validate post puts every CAS
/// before every read-only READ, and one node runs a post's ops in order, so T1 holds
/// B's lock before its READ of A stalls, and T2's validation sees it. (READs first
/// would let both commit.)
#[test]
fn one_node_has_no_window() {
    let w = run_window(Drtmh::from_knobs(&Knobs::default()).unwrap(), false);
    assert!(w.t1.is_ok(), "T1: {:?}", w.t1);
    assert_eq!(w.t2.map_err(|a| a.reason), Err(AbortReason::Validation));
    assert_eq!(w.findings, "");
}
