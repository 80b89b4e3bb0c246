//! The CN CPU model: every worker thread of a simulated compute node has a virtual CPU.
//!
//! (Work in progress: the model's parameters are defined here; the executor and the
//! transport charge them.)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How CN CPU time is charged.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuMode {
    /// Charge the profile's constants (deterministic).
    #[default]
    Model,
    /// Charge nothing: compute is free (the NIC alone limits throughput).
    Off,
    /// Charge the real elapsed time of every poll, scaled: for cross-checks only, not
    /// deterministic.
    Measured,
}

/// Costs of CN-side work, in nanoseconds of the calibration host's CPU, multiplied by
/// [`CpuModel::scale`].
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuModel {
    /// How CPU time is charged.
    pub mode: CpuMode,
    /// Host-CPU scale: every cost below is multiplied by it (2.0 = a CPU half as fast as
    /// the one the constants were calibrated on).
    pub scale: f64,
    /// Ringing a doorbell (one MMIO write), once per batch (per memory node of a post).
    pub doorbell_ns: u64,
    /// Building one work-queue entry, once per op.
    pub wqe_ns: u64,
    /// Polling one completion-queue entry, once per batch.
    pub cqe_ns: u64,
    /// Copying a READ's payload out of the receive buffer, per KiB.
    pub copy_ns_per_kib: u64,
    /// Resuming a coroutine (the executor's pass and the context switch), per poll.
    pub poll_ns: u64,
    /// One named step not listed in `steps`.
    pub step_default_ns: u64,
    /// Named steps (`ford.validate`, `txn.add`, `workload.txn`, ...) and their cost.
    pub steps: BTreeMap<String, u64>,
}

impl Default for CpuModel {
    fn default() -> Self {
        Self {
            mode: CpuMode::Model,
            scale: 1.0,
            doorbell_ns: 60,
            wqe_ns: 15,
            cqe_ns: 25,
            copy_ns_per_kib: 100,
            poll_ns: 30,
            step_default_ns: 20,
            steps: BTreeMap::new(),
        }
    }
}
