//! The verb contract suite (`dmtx_verbs::conformance`) on the `sim` transport, driven by
//! `Transport::progress` (one simulation event per call) instead of the `SimExecutor`.
//! `reads_tear_by_word` is left out: the simulator applies a batch at one instant and
//! never tears (see the crate doc, "Not done yet").

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
