//! What RCBench's protocols share (rcbench.txt §3–4): the item layout
//! ([`layout`]: X^d and X^m side by side, the lock word highest, found through the
//! cuckoo index of `dmtx_store::cuckoo`), and the six primitives with σ, T^g and the
//! §5.5 switches ([`prims`]).
//!
//! An RCBench node is compute and memory in one; in dmtx a `MemStore` is a memory-node
//! region and an executor is a coordinator, so every item and every T^g, the
//! coordinator's own included, is reached by verbs. What dmtx pays beyond RCBench:
//! a node's local items cost a round trip here, not a memory access; a write to one's
//! own T^g is one WRITE or CAS (no Tid-check READ).
//!
//! Choices where the paper is silent:
//! - **PK word** `key + 1`, so key 0 is indexable and 0 means "no key" (§4.2.1 reserves
//!   0); key `u64::MAX` is refused.
//! - **Tid** `(seq + 1)·Δ + coord·R + seq mod R` with Δ = coordinators · R, R = 4: the
//!   ring of Eq. 2 without a shared counter.
//! - **db/or off** split one logical batch: db off posts each op alone (ops to one node
//!   in order, one per node per wave when or is on); or off posts each node's batch
//!   alone. All off is each verb waited alone (Table 3 "one-sided").

pub mod layout;
pub mod prims;

use dmtx_runtime::{CoordCtx, KnobError, KnobSpec, Knobs};
use dmtx_verbs::{Post, VerbError};

use prims::Switches;

/// A coordinator's context as the primitives' [`prims::Verbs`]: every post is one of the
/// transaction's round trips.
pub struct CtxVerbs<'a>(pub &'a mut CoordCtx);

impl prims::Verbs for CtxVerbs<'_> {
    async fn post(&mut self, post: &mut Post) -> Result<(), VerbError> {
        self.0.post(post).await
    }
}

/// `--set db=on|off` (§5.5 doorbell batching).
pub const DB: KnobSpec = KnobSpec {
    name: "db",
    default: "on",
    help: "doorbell batching: dependency-free primitives to one memory node in one batch (§5.5)",
};
/// `--set or=on|off` (§5.5 outstanding requests).
pub const OR: KnobSpec = KnobSpec {
    name: "or",
    default: "on",
    help: "outstanding requests: batches for several memory nodes posted together (§5.5)",
};
/// `--set pa=on|off` (§5.5 passive ack).
pub const PA: KnobSpec = KnobSpec {
    name: "pa",
    default: "on",
    help: "passive ack: one completion per batch (§5.5; costs only on sim)",
};

/// A switch value: `on` or `off` (also `true`/`false`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OnOff(pub bool);

impl std::str::FromStr for OnOff {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" | "true" => Ok(OnOff(true)),
            "off" | "false" => Ok(OnOff(false)),
            _ => Err("expected on or off".into()),
        }
    }
}

/// The §5.5 switches from `--set db=, or=, pa=`.
pub fn switches(knobs: &Knobs) -> Result<Switches, KnobError> {
    Ok(Switches {
        db: knobs.get::<OnOff>(&DB)?.0,
        or: knobs.get::<OnOff>(&OR)?.0,
        pa: knobs.get::<OnOff>(&PA)?.0,
    })
}
