//! The CN CPU model: every worker thread of a simulated compute node has a virtual CPU.
//!
//! A worker thread's coordinators share one core, as in every paper's testbed (FORD
//! §6.3.1 Fig. 22: throughput rises with coroutines per thread until the core
//! saturates). The simulator keeps, per worker thread, the instant its CPU has executed
//! up to (`cursor`):
//!
//! - **Polls.** The executor polls a coordinator only when its CPU is idle
//!   (`cursor <= now`); a coordinator woken while its CPU is busy is polled when it
//!   frees. Each poll costs [`CpuModel::poll_ns`] (the executor's pass and the coroutine
//!   switch).
//! - **Verbs** ([`SimTransport`](crate::SimTransport)): a post costs a WQE per op and one
//!   doorbell MMIO per batch (Kalia et al., ATC'16; RCBench §5.5), and each batch's
//!   doorbell rings at the CPU instant it is reached, so a batch built after expensive
//!   logic leaves later. Collecting a completion costs a CQE per batch plus the copy of
//!   the READ payload.
//! - **Named steps** ([`dmtx_runtime::Probe`]): protocol and workload code declares the
//!   work it does (`ford.validate`, `txn.add`, `tatp.txn`, ...); each costs its entry
//!   in [`CpuModel::steps`], or [`CpuModel::step_default_ns`] (a workload's per-attempt
//!   step `<workload>.txn` not listed costs what `workload.txn` does). The model's own
//!   defaults cover the runtime's and the workloads' steps; a protocol declares its steps
//!   and their default costs (`Protocol::CPU_STEPS`), which the driver adds with
//!   [`CpuModel::add_protocol_steps`] before a run: a profile's `[cpu.steps]` entry for the
//!   same name wins.
//!
//! All costs are nanoseconds of the calibration host times [`CpuModel::scale`].
//! [`CpuMode::Off`] makes compute free (the NIC alone limits throughput);
//! [`CpuMode::Measured`] charges each poll's real elapsed time, for cross-checks only
//! (it is not deterministic). `dmtx sim calibrate` fits the step costs from `mem` runs;
//! `docs/sim-model.md` says how to recalibrate.

use std::collections::BTreeMap;

use dmtx_runtime::GENERIC_TXN_STEP;
use serde::{Deserialize, Serialize};

use crate::Sim;

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
    /// Per KiB of verb payload: building a WRITE's (record images, checksums) before its
    /// doorbell, and copying and checking a READ's after its completion.
    pub copy_ns_per_kib: u64,
    /// Resuming a coroutine (the executor's pass and the context switch), per poll.
    pub poll_ns: u64,
    /// One named step not listed in `steps`.
    pub step_default_ns: u64,
    /// Named steps (`ford.validate`, `txn.add`, `workload.txn`, ...) and their cost.
    pub steps: BTreeMap<String, u64>,
}

/// Named steps of the default model: fitted by `dmtx sim calibrate --duration 3s` on
/// the project's 2-vCPU build machine (2026-11-24; FORD on KVS, SmallBank, TATP, TPC-C
/// and YCSB, 22 transaction types; each workload's mean attempt within 3% but TATP,
/// −11%, and YCSB, −8%). FORD's own steps, fitted in the same run, are FORD's
/// declaration (`dmtx_protocols::ford::CPU_STEPS`). `workload.txn` prices a workload
/// that names no step of its own (the 2026-11-23 fit).
const CALIBRATED_STEPS: [(&str, u64); 7] = [
    ("txn.add", 98),
    ("kvs.txn", 0),
    ("smallbank.txn", 9),
    ("tatp.txn", 400),
    ("tpcc.txn", 0),
    ("ycsb.txn", 96),
    (GENERIC_TXN_STEP, 61),
];

impl Default for CpuModel {
    /// `poll_ns`, `copy_ns_per_kib` and the steps are calibrated (see
    /// `CALIBRATED_STEPS`); the doorbell, WQE and CQE costs are assumed, of the order
    /// Kalia et al. (ATC'16) report for an MMIO doorbell and WQE/CQE handling.
    fn default() -> Self {
        Self {
            mode: CpuMode::Model,
            scale: 1.0,
            doorbell_ns: 60,
            wqe_ns: 15,
            cqe_ns: 25,
            copy_ns_per_kib: 684,
            poll_ns: 153,
            step_default_ns: 20,
            steps: CALIBRATED_STEPS.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        }
    }
}

/// The largest integer up to which every integer is an `f64`: below it, `ns as f64`
/// is exact, so scaling by 1.0 and rounding gives `ns` back.
const F64_EXACT_MAX: u64 = 1 << f64::MANTISSA_DIGITS;

/// A worker thread's virtual CPU, by index in the simulation ([`Sim::cpu_of`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub(crate) u32);

impl CpuId {
    /// The index (CPUs are numbered in the order they were first asked for).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A worker thread's CPU work so far ([`Sim::cpu_busy`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CpuBusy {
    /// Compute node.
    pub cn: u32,
    /// Worker thread.
    pub thread: u16,
    /// Virtual ns charged.
    pub busy_ns: u64,
}

/// One virtual CPU's account.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct CpuState {
    /// The compute node it belongs to.
    pub cn: u32,
    /// The instant the CPU has executed up to (work charged so far ends here).
    pub cursor: u64,
    /// Virtual ns of work charged in total.
    pub busy_ns: u64,
}

impl Sim {
    /// The virtual CPU of worker `thread` of compute node `cn`, created on first use.
    pub fn cpu_of(&self, cn: u32, thread: u16) -> CpuId {
        let mut st = self.lock();
        let next = st.cpus.len() as u32;
        let id = *st.cpu_ids.entry((cn, thread)).or_insert(next);
        if id == next {
            st.cpus.push(CpuState {
                cn,
                ..Default::default()
            });
        }
        CpuId(id)
    }

    /// Charge `ns` of work to `cpu`: it runs from the later of now and the end of its
    /// earlier work.
    pub(crate) fn charge(&self, cpu: CpuId, ns: u64) {
        let now = self.now();
        let mut st = self.lock();
        let c = &mut st.cpus[cpu.index()];
        c.cursor = c.cursor.max(now) + ns;
        c.busy_ns += ns;
    }

    /// Start running on `cpu` now if it is idle, charging `ns` (a poll's resume cost);
    /// else the instant it frees.
    pub(crate) fn claim(&self, cpu: CpuId, ns: u64) -> Result<(), u64> {
        let now = self.now();
        let mut st = self.lock();
        let c = &mut st.cpus[cpu.index()];
        if c.cursor > now {
            return Err(c.cursor);
        }
        c.cursor = now + ns;
        c.busy_ns += ns;
        Ok(())
    }

    /// The compute node `cpu` belongs to and the instant it has executed up to.
    pub(crate) fn cpu_state(&self, cpu: CpuId) -> (u32, u64) {
        let st = self.lock();
        let c = &st.cpus[cpu.index()];
        (c.cn, c.cursor)
    }

    /// Note that step `name` was charged without a price of its own (the model lists
    /// neither it nor, for a `.txn` step, the generic one): it cost `step_default_ns`.
    pub(crate) fn note_unpriced_step(&self, name: &'static str) {
        self.lock().unpriced_steps.insert(name);
    }

    /// Step names charged so far at `step_default_ns` because neither the profile nor the
    /// protocol's `CPU_STEPS` lists them: a protocol's undeclared step, or a typo.
    pub fn unpriced_steps(&self) -> Vec<&'static str> {
        self.lock().unpriced_steps.iter().copied().collect()
    }

    /// Virtual ns of work charged to each CPU so far, by [`CpuId`] index, with its
    /// compute node and worker thread.
    pub fn cpu_busy(&self) -> Vec<CpuBusy> {
        let st = self.lock();
        let mut out: Vec<CpuBusy> = st
            .cpu_ids
            .iter()
            .map(|(&(cn, thread), &id)| CpuBusy {
                cn,
                thread,
                busy_ns: st.cpus[id as usize].busy_ns,
            })
            .collect();
        out.sort_by_key(|c| (c.cn, c.thread));
        out
    }
}

impl CpuModel {
    /// Add a protocol's declared steps and their default costs (`Protocol::CPU_STEPS`):
    /// each name this model does not list yet gets the protocol's cost; one it lists (a
    /// profile's `[cpu.steps]`, a calibration) keeps its own.
    pub fn add_protocol_steps(&mut self, steps: &[(&str, u64)]) {
        for &(name, ns) in steps {
            self.steps.entry(name.to_string()).or_insert(ns);
        }
    }

    /// The cost of one named step, scaled.
    pub fn step_ns(&self, name: &str) -> u64 {
        self.scaled(self.unscaled_step_ns(name))
    }

    /// Whether the model prices step `name` itself (its entry, or the generic
    /// `workload.txn` for a `.txn` step) rather than at [`CpuModel::step_default_ns`].
    pub fn prices_step(&self, name: &str) -> bool {
        self.steps.contains_key(name) || (name.ends_with(".txn") && self.steps.contains_key(GENERIC_TXN_STEP))
    }

    /// The cost of one named step on the calibration host: its entry in
    /// [`CpuModel::steps`]; for a workload's per-attempt step (`kvs.txn`) not listed,
    /// the generic `workload.txn` (profiles written before workloads had their own);
    /// else [`CpuModel::step_default_ns`].
    pub fn unscaled_step_ns(&self, name: &str) -> u64 {
        let generic = || {
            name.ends_with(".txn")
                .then(|| self.steps.get(GENERIC_TXN_STEP))
                .flatten()
        };
        self.steps
            .get(name)
            .or_else(generic)
            .copied()
            .unwrap_or(self.step_default_ns)
    }

    /// `ns` of the calibration host, on this host.
    #[inline]
    pub fn scaled(&self, ns: u64) -> u64 {
        if self.mode == CpuMode::Off {
            0
        } else if self.scale == 1.0 && ns <= F64_EXACT_MAX {
            // What the rounding gives, without the call to `round` (a few per post).
            ns
        } else {
            (ns as f64 * self.scale).round() as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: `scaled` at scale 1.0 gives what the rounding formula gives, on both sides
    /// of the largest integer every smaller one of which is an `f64`.
    #[test]
    fn unit_scale_matches_the_formula() {
        let m = CpuModel::default();
        assert_eq!(m.scale, 1.0);
        let edge = 1u64 << f64::MANTISSA_DIGITS;
        for ns in [0, 1, 276, edge - 1, edge, edge + 1, edge + 3, u64::MAX] {
            assert_eq!(m.scaled(ns), (ns as f64 * m.scale).round() as u64, "ns = {ns}");
        }
        let off = CpuModel {
            mode: CpuMode::Off,
            ..CpuModel::default()
        };
        assert_eq!(off.scaled(276), 0);
    }

    /// Goal: a workload's own per-attempt step costs its entry; one a profile does not
    /// list costs `workload.txn` (profiles written before workloads named their own),
    /// and any other unlisted step `step_default_ns`.
    #[test]
    fn an_unlisted_workload_step_costs_the_generic_one() {
        let model = CpuModel {
            steps: [(GENERIC_TXN_STEP, 50), ("kvs.txn", 7)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            step_default_ns: 20,
            ..CpuModel::default()
        };
        assert_eq!(model.unscaled_step_ns("kvs.txn"), 7);
        assert_eq!(model.unscaled_step_ns("tatp.txn"), 50);
        assert_eq!(model.unscaled_step_ns("ford.validate"), 20);
        let bare = CpuModel {
            steps: BTreeMap::new(),
            ..model
        };
        assert_eq!(bare.unscaled_step_ns("tatp.txn"), 20);
    }

    /// Goal: a protocol's declared step costs its declared default, unless the model
    /// already lists the name (a profile's or a calibration's value wins); an undeclared
    /// step costs `step_default_ns`.
    #[test]
    fn protocol_steps_fill_in_what_the_profile_does_not_list() {
        let mut model = CpuModel::default();
        model.steps.insert("p.commit".into(), 5);
        assert_eq!(model.unscaled_step_ns("p.validate"), model.step_default_ns);
        assert!(!model.prices_step("p.validate"));
        model.add_protocol_steps(&[("p.validate", 72), ("p.commit", 40)]);
        assert!(model.prices_step("p.validate") && model.prices_step("kvs.txn"));
        assert_eq!(model.unscaled_step_ns("p.validate"), 72);
        assert_eq!(model.unscaled_step_ns("p.commit"), 5, "the profile's value wins");
        assert!(
            !CpuModel::default().steps.keys().any(|k| k.starts_with("ford.")),
            "no protocol's steps are built into the model"
        );
    }
}
