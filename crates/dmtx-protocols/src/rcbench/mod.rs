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
//! - **pa** (one completion per batch) is not offered: no transport signals
//!   completions per op, so there is nothing to switch.

pub mod insert;
pub mod layout;
pub mod prims;
pub mod tg;

use dmtx_runtime::{CoordCtx, KnobError, KnobSpec, Knobs};
use dmtx_verbs::{Post, VerbError};

use prims::Switches;

/// A coordinator's context as the primitives' [`prims::Verbs`]: every post is one of the
/// transaction's round trips, and the time between posts is the attempt's CPU time
/// ([`CpuMeter`]).
pub struct CtxVerbs<'a>(pub &'a mut CoordCtx, pub &'a mut CpuMeter);

impl prims::Verbs for CtxVerbs<'_> {
    async fn post(&mut self, post: &mut Post) -> Result<(), VerbError> {
        self.1.pause(self.0.clock.now_ns());
        let r = self.0.post(post).await;
        self.1.resume(self.0.clock.now_ns());
        r
    }
}

/// U_CPU^e's numerator for one coordinator (§1, issue 30 item 9): the time an attempt
/// runs between its verb waits, from its first execute to the end of its commit. A
/// coordinator does not yield between posts, so that time is its CPU time (on `sim`,
/// the CPU model's charges); waits, switches to other coordinators and aborted
/// attempts are left out. Workload logic before the first execute is not seen. On
/// `sim` the CPU model charges a coordinator's CPU inside its waits (virtual time does
/// not pass while it runs), so the meter reads 0 there: the simulator's `cpus`
/// utilisation is the figure to use.
#[derive(Copy, Clone, Debug, Default)]
pub struct CpuMeter {
    running: bool,
    resumed_ns: u64,
    cpu_ns: u64,
}

impl CpuMeter {
    /// The attempt starts running (no-op when it runs already).
    pub fn start(&mut self, now_ns: u64) {
        if !self.running {
            *self = CpuMeter {
                running: true,
                resumed_ns: now_ns,
                cpu_ns: 0,
            };
        }
    }

    /// A wait begins (a post or a sleep).
    pub fn pause(&mut self, now_ns: u64) {
        if self.running {
            self.cpu_ns += now_ns.saturating_sub(self.resumed_ns);
        }
    }

    /// The wait ended.
    pub fn resume(&mut self, now_ns: u64) {
        self.resumed_ns = now_ns;
    }

    /// The attempt committed: its CPU time.
    pub fn finish(&mut self, now_ns: u64) -> u64 {
        self.pause(now_ns);
        let ns = self.cpu_ns;
        *self = CpuMeter::default();
        ns
    }

    /// The attempt ended without committing: nothing counts.
    pub fn reset(&mut self) {
        *self = CpuMeter::default();
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

/// The §5.5 switches from `--set db=, or=` (pa is not offered: the transports have
/// no per-completion signalling to switch).
pub fn switches(knobs: &Knobs) -> Result<Switches, KnobError> {
    Ok(Switches {
        db: knobs.get::<OnOff>(&DB)?.0,
        or: knobs.get::<OnOff>(&OR)?.0,
    })
}

#[cfg(test)]
mod tests {
    use super::CpuMeter;

    #[test]
    fn cpu_meter_counts_time_between_waits_only() {
        let mut m = CpuMeter::default();
        m.start(100);
        m.pause(110); // 10 ns running, then a post
        m.resume(150);
        m.start(160); // already running: no restart
        m.pause(170); // 20 more
        m.resume(400);
        assert_eq!(m.finish(405), 35);
        // An aborted attempt counts nothing, and waits before start are not CPU.
        m.pause(500);
        m.resume(600);
        m.start(700);
        m.reset();
        m.start(800);
        assert_eq!(m.finish(801), 1);
    }
}
