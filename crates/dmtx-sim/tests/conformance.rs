//! The verb contract suite (`dmtx_verbs::conformance`) on the `sim` transport, driven by
//! `Transport::progress` (one simulation event per call) instead of the `SimExecutor`.
//! `reads_tear_by_word` is left out: it stalls a region's word loop from OS threads, while
//! the simulator tears by its own model (see the crate doc, "Not done yet", and
//! `tests/physics.rs`).

use std::sync::Arc;

use dmtx_sim::{Sim, SimConfig, SimFabric};
use dmtx_verbs::conformance::{self, REGION_BYTES_MIN};
use dmtx_verbs::Region;

fn fabric() -> SimFabric {
    let regions = (0..2).map(|_| Arc::new(Region::new(REGION_BYTES_MIN))).collect();
    SimFabric::new(&Sim::new(SimConfig::new(3), regions), 0)
}

/// Goal: batches run in order and reach every node.
#[test]
fn batch_order() {
    conformance::batch_order(&fabric());
}

/// Goal: atomics stay atomic when several OS threads share one simulation.
#[test]
fn atomics_are_atomic() {
    conformance::atomics_are_atomic(&fabric());
}

/// Goal: bad ops are errors and the node keeps serving.
#[test]
fn bad_ops_are_errors() {
    conformance::bad_ops_are_errors(&fabric());
}

/// Goal: a post lent to the transport comes back whole. A waited post gets its own ops
/// and its results back when it completes, however many posts ran in between in the
/// slots it passed through; a detached post is copied, so its caller keeps its ops and
/// may reuse it at once.
#[test]
fn posts_come_back_whole() {
    use dmtx_verbs::{MnId, Op, Post, RemotePtr, Submitted};
    let fabric = fabric();
    let t = fabric.transport();
    let at = |i: u64| RemotePtr::new(MnId((i % 2) as u16), 64 * i);
    let wait = |p: &mut Post| {
        let Submitted::Pending(ticket) = dmtx_verbs::Transport::submit(&t, p) else {
            panic!("the sim transport never completes at once")
        };
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(r) = dmtx_verbs::Transport::poll(&t, ticket, p, &mut cx) {
                return r;
            }
            assert!(fabric.sim().step(), "events left while the post is pending");
        }
    };
    for round in 0..20u64 {
        let mut bg = Post::new();
        bg.write(at(round + 100), &[round as u8; 16]);
        dmtx_verbs::Transport::submit_detached(&t, &mut bg);
        assert_eq!(bg.ops().len(), 1, "a detached post stays with its caller");
        let mut p = Post::new();
        p.write(at(round), &round.to_le_bytes());
        let w = p.faa(at(round + 40), 1);
        let r = p.read(at(round), 8);
        let ops: Vec<Op> = p.ops().to_vec();
        wait(&mut p).unwrap();
        assert_eq!(p.ops(), &ops[..], "round {round}: the ops came back");
        assert_eq!(p.bytes(r), round.to_le_bytes(), "round {round}: the READ's result");
        assert_eq!(p.old(w), 0, "round {round}: the FAA's result");
    }
}
