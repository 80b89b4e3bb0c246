//! Probes: where protocol and workload code says what it is doing, for models that
//! charge for it.
//!
//! On real transports a probe is absent and these calls cost a branch. On the simulator
//! (`dmtx-sim`) every worker thread has a virtual CPU: [`Probe::step`] charges the
//! named step's cost (from the NIC/CPU profile) to it, and [`Probe::point`] is where a
//! fault script can strike (crash this compute node right after FORD wrote its undo log,
//! say), because the windows that matter are narrower than any timer could hit.
//!
//! Names are `&'static str` of the form `protocol.step` (`ford.validate`,
//! `lotus.lock_table_probe`) or `workload.step`; the profile's `[cpu.steps]` table
//! prices them, and a step it does not list costs `cpu.step_default_ns`.

use std::rc::Rc;
use std::sync::Arc;

/// The step the driver charges per attempt for a workload that names none of its own
/// (`Workload::TXN_STEP`); a profile that lists no `<workload>.txn` prices one with it.
pub const GENERIC_TXN_STEP: &str = "workload.txn";

/// Receives a worker thread's named steps and fault points.
pub trait Probe {
    /// `n` units of the CPU work named `name` happened.
    fn step(&self, name: &'static str, n: u32);
    /// Control passed the fault point `name`.
    fn point(&self, name: &'static str);
    /// An attempt of the workload's transaction type `txn_type` (an index into
    /// `Workload::txn_types`) ended, whatever its outcome; the driver says so. Steps
    /// since the previous call belong to it: `dmtx sim calibrate` counts them, and the
    /// time, per type.
    fn attempt_end(&self, _txn_type: usize) {}
}

/// Hands each worker thread of a compute node its probe.
pub trait ProbeSource: Send + Sync {
    /// The probe of worker thread `thread`, created on that thread.
    fn probe(&self, thread: u16) -> Rc<dyn Probe>;
}

/// A probe source that hands out nothing (real transports).
pub(crate) type Probes = Option<Arc<dyn ProbeSource>>;
