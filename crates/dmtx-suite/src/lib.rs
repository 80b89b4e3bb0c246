//! The protocol test suite: what every protocol of dmtx must pass, in one call, as
//! `dmtx_verbs::conformance` is for transports.
//!
//! [`run_all`] runs, for any [`Protocol`] built by `make(&knobs)`:
//!
//! - **contended transactions** ([`contended`]) on a few hot accounts of the bank
//!   ([`bank`], values that check themselves), on `mem` and `tcp` with tears injected and
//!   on `sim`,
//!   with 1, 2 and 3 replicas and value sizes that are not a multiple of 8; the history
//!   goes through the isolation checker at `proto.isolation()` (skipped, with a note,
//!   for [`Isolation::Unchecked`](dmtx_runtime::Isolation::Unchecked)), and money,
//!   audits, torn values and replica agreement are checked;
//! - **every workload** of `dmtx-workloads` ([`workloads`]) with its own invariants and
//!   the checker;
//! - the protocol's **round-trip budget** table ([`rtt`]), phase by phase;
//! - **determinism** on `sim`: a seed replays bit for bit, with two compute nodes;
//! - a **seeded fault sweep** on `sim` ([`faults`]) whose failures print the seed;
//!   `DMTX_SEED=<n>` replays one.
//!
//! [`broken::assert_caught`] is the other half: a protocol's deliberately broken variant
//! must fail the same checks within a few seeds.
//!
//! A protocol that messages other compute nodes (`Protocol::messaging()`) gets a mailbox
//! per worker on an in-memory network (`mem`), over TCP (`tcp`) or on the simulator's
//! (`sim`); every worker
//! keeps serving requests, and the protocol's service tasks run, until every coordinator
//! of every node is done. Its round-trip budget cannot be measured (leave
//! [`Options::rtt_budget`] empty). Other protocols run as they would without this.
//!
//! Everything runs in this process on [`env::MNS`] in-process memory nodes (over `tcp`
//! each is served on a loopback port with its region in place); scans read the quiesced
//! regions directly. Depends on runtime, store, memnode, net, verbs, sim, workloads and
//! check; never on `dmtx-protocols` (protocols use it as a
//! dev-dependency) nor on the `dmtx` binary.
//!
//! ```no_run
//! # use dmtx_runtime::{Knobs, Protocol};
//! # fn suite<P: Protocol>() {
//! let opts = dmtx_suite::Options::default();
//! let ran = dmtx_suite::run_all(|k: &Knobs| P::from_knobs(k).unwrap(), &opts);
//! assert!(ran.cases > 0);
//! # }
//! ```

#![warn(missing_docs)]

pub mod bank;
pub mod broken;
pub mod contended;
pub mod env;
pub mod faults;
pub mod rtt;
mod serving;
pub mod workloads;

use std::ops::Range;

use dmtx_runtime::{Knobs, Protocol};

pub use broken::{assert_caught, assert_caught_by, Caught};
pub use contended::{assert_deterministic, seed_or_env, seeds, Outcome};
pub use env::{Env, Setup, Transport};
pub use faults::FaultMenu;
pub use rtt::{assert_budgets, Cache, Measured, RttBudget, TxnKind};

/// What [`run_all`] runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Knob sets: the whole suite runs once per set (`make` gets each).
    pub knob_sets: Vec<Knobs>,
    /// Replica counts of the contended cases and the budgets.
    pub replicas: Vec<usize>,
    /// Bank value sizes of the contended cases.
    pub value_bytes: Vec<u32>,
    /// Transports of the contended cases.
    pub transports: Vec<Transport>,
    /// Seeds per contended case.
    pub seeds: Range<u64>,
    /// Compute nodes of the contended and workload cases.
    pub compute_nodes: u16,
    /// Transactions per coordinator in the contended cases.
    pub txns: u32,
    /// Run every workload.
    pub workloads: bool,
    /// The protocol's declared round-trip budget (empty: not checked).
    pub rtt_budget: Vec<RttBudget>,
    /// Hold coordinators to session order in every isolation check (the checker's
    /// default).
    pub sessions: bool,
    /// Fault kinds the protocol survives (`None`: no sweep).
    pub faults: Option<FaultMenu>,
    /// Seeds of the fault sweep.
    pub fault_seeds: Range<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            knob_sets: vec![Knobs::default()],
            replicas: vec![1, 2, 3],
            value_bytes: vec![20, 44],
            transports: vec![Transport::Mem, Transport::Sim, Transport::Tcp],
            seeds: 0..1,
            compute_nodes: 1,
            txns: 150,
            workloads: true,
            rtt_budget: Vec::new(),
            sessions: true,
            faults: Some(FaultMenu::ALL),
            fault_seeds: 0..4,
        }
    }
}

/// What [`run_all`] ran.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Ran {
    /// Contended runs, workload runs, budget rows and fault seeds, together.
    pub cases: usize,
}

/// Run the whole suite on the protocol `make` builds; panic on the first failure,
/// naming the case and the seed that replays it. Fails if the options leave nothing to
/// run.
pub fn run_all<P: Protocol>(make: impl Fn(&Knobs) -> P, opts: &Options) -> Ran {
    let mut ran = Ran::default();
    for knobs in &opts.knob_sets {
        let make = || make(knobs);
        let checked = contended::checked_or_note(P::NAME, make().isolation());
        for &replicas in &opts.replicas {
            for &value_bytes in &opts.value_bytes {
                for &transport in &opts.transports {
                    for seed in contended::seeds(opts.seeds.clone()) {
                        let setup = Setup {
                            compute_nodes: opts.compute_nodes,
                            txns: opts.txns,
                            sessions: opts.sessions,
                            ..Setup::new(replicas, value_bytes)
                        };
                        let env = Env::bank(make(), setup);
                        let out = contended::run(&env, transport, seed, None);
                        let case =
                            format!("{knobs:?}, {replicas} replica(s), {value_bytes}-byte values on {transport:?}");
                        out.assert_clean(&env, &case, seed);
                        ran.cases += 1;
                    }
                }
            }
        }
        if opts.transports.contains(&Transport::Sim) {
            let setup = Setup {
                compute_nodes: opts.compute_nodes.max(2),
                sessions: opts.sessions,
                ..Setup::new(opts.replicas[0], opts.value_bytes[0])
            };
            contended::assert_deterministic(make, &setup, contended::seed_or_env(0x5eed));
            ran.cases += 1;
        }
        if opts.workloads {
            for (i, (name, set)) in workloads::SMALL.iter().enumerate() {
                let replicas = opts.replicas[i % opts.replicas.len()];
                let transport = opts.transports[i % opts.transports.len()];
                let seed = contended::seed_or_env(i as u64);
                let setup = Setup {
                    compute_nodes: opts.compute_nodes,
                    txns: 40,
                    sessions: opts.sessions,
                    ..Setup::new(replicas, 20)
                };
                let start = std::time::Instant::now();
                let run = workloads::run_named(make, name, set, setup, transport, seed);
                let what = format!("{} {name} {knobs:?} ({replicas} replica(s), {transport:?})", P::NAME);
                eprintln!(
                    "{what}: {:?}, {} committed, aborts {:?}",
                    start.elapsed(),
                    run.committed,
                    run.aborts
                );
                if checked {
                    workloads::assert_clean(&what, &run, seed);
                }
                ran.cases += 1;
            }
        }
        if !opts.rtt_budget.is_empty() {
            for &replicas in &opts.replicas {
                rtt::assert_budgets(make, replicas, opts.value_bytes[0], &opts.rtt_budget);
                ran.cases += opts.rtt_budget.len();
            }
        }
        if let Some(menu) = &opts.faults {
            let setup = Setup {
                compute_nodes: if menu.crash_cn {
                    opts.compute_nodes.max(2)
                } else {
                    opts.compute_nodes
                },
                txns: 60,
                sessions: opts.sessions,
                ..Setup::new(*opts.replicas.last().expect("a replica count"), opts.value_bytes[0])
            };
            if checked {
                faults::sweep(make, &setup, menu, opts.fault_seeds.clone());
                ran.cases += opts.fault_seeds.clone().count();
            }
        }
    }
    assert!(ran.cases > 0, "the options left the suite nothing to run");
    ran
}
