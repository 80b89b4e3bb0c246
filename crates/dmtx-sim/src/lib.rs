//! The `sim` transport of dmtx: the same protocol and workload code, run
//! deterministically on virtual time against a model of an RDMA fabric.
//!
//! # What it is
//!
//! - [`Sim`]: one simulation — virtual time ([`VirtualTime`]), an event queue
//!   ([`EventQueue`], ordered by time then insertion), the fabric's resource state, the
//!   posts in flight, and a `SmallRng` seeded from [`SimConfig::seed`]
//!   ([`Sim::fork_rng`]).
//! - [`NodeClock`]: a node's [`dmtx_runtime::Clock`], reading virtual time through a
//!   per-node offset and drift (ppm), reporting that drift as its bound; a
//!   `dmtx_runtime::sleep_until` on it is one event at the instant it reads the deadline.
//! - [`NicModel`]: links (rate, latency, per-packet headers, MTU segmentation), responder
//!   processing units with per-kind service times, per-connection ordering and the
//!   outstanding READ/atomic bound, PCIe on both ends, the NIC-wide atomic rate and
//!   per-address atomic serialization. One batch costs one `Apply` and one `Complete`
//!   event, never one per op. [`NicModel::cx5`] is the default; the `nic` module doc
//!   and `docs/sim-model.md` give every parameter's source and whether it is measured,
//!   a spec value or assumed.
//! - [`SimFabric`] / [`SimTransport`]: a compute node's NIC and its worker threads'
//!   connections, implementing [`dmtx_verbs::Fabric`] and [`dmtx_verbs::Transport`] over
//!   the memory nodes' [`dmtx_verbs::Region`]s.
//! - [`SimExecutor`]: every coordinator of every simulated compute node as a task on one
//!   OS thread, with real wakers, polled in wake order (per worker CPU, FIFO); virtual
//!   time moves only when no task is runnable.
//! - [`SimMsgNet`] ([`msg`]): CN↔CN two-sided messages (the [`dmtx_verbs::msg`]
//!   contract) over the same links, and [`serve`], the task that drives a worker's
//!   [`dmtx_runtime::Rpc`] on the executor.
//!
//! - [`FaultScript`] ([`Sim::install_faults`], module [`faults`]): crashed memory nodes
//!   (DRAM or PM, with [`persist`]'s persistence domain) and compute nodes, link downs,
//!   partitions, lost replies, delays, slow NICs and clock faults, fired by virtual time,
//!   the op stream or named fault points; [`membership`]: failure detection by leases.
//!
//! Same seed, same configuration and the same tasks give bit-identical runs: nothing
//! reads the host's clock, nothing iterates a hash map, no OS thread is started.
//!
//! - [`CpuModel`] ([`cpu`]): each worker thread's virtual CPU, charged per poll, WQE,
//!   doorbell, CQE, payload KiB and named protocol step ([`dmtx_runtime::Probe`]);
//!   [`Profile`] ([`profile`]): NIC, CPU and PM parameters from TOML (`cx3`, `cx5`, `cx6`
//!   built in); [`FabricLoad`] ([`report`]): per-node link load and per-op-kind waits.
//!
//! Memory-node regions are sparse (the kernel fills a page on first touch), so regions
//! may be paper-sized (`tests/sparse.rs`).
//!
//! # Not done yet
//!
//! - Tears of two overlapping WRITEs (memory never holds a mixture: the later applied
//!   wins whole). READ/WRITE tears are modelled (the `tear` module, [`Sim::tear_stats`]);
//!   `dmtx_verbs::conformance::reads_tear_by_word` does not apply: it stalls a region's
//!   word loop from OS threads, while the simulator applies ops on one thread and tears
//!   by its model (`tests/physics.rs` checks the shapes).
//! - Speed: 1.1–6.3 M simulated verbs per real second on bare streams
//!   (`examples/speed.rs`, `docs/sim-model.md`): the 5 M aimed at is reached by 1-CN
//!   4-op streams on a core of their own, not on a shared one nor by LOTUS-sized ones.
//!
//! ```
//! use std::sync::Arc;
//! use dmtx_sim::{Sim, SimConfig, SimExecutor, SimFabric};
//! use dmtx_verbs::{MnId, Post, Region, RemotePtr, Submitted, Transport};
//!
//! let sim = Sim::new(SimConfig::new(7), vec![Arc::new(Region::new(1 << 16))]);
//! let t = SimFabric::new(&sim, 0).transport();
//! let mut ex = SimExecutor::new(&sim);
//! ex.spawn(async move {
//!     let mut post = Post::new();
//!     let old = post.faa(RemotePtr::new(MnId(0), 64), 5);
//!     let Submitted::Pending(ticket) = t.submit(&mut post) else { unreachable!() };
//!     std::future::poll_fn(|cx| t.poll(ticket, &mut post, cx)).await.unwrap();
//!     assert_eq!(post.old(old), 0);
//! });
//! let report = ex.run().unwrap();
//! assert!(report.end_ns > 2 * sim.config().nic.one_way_latency_ns);
//! ```

#![warn(missing_docs)]

pub mod calendar;
pub mod clock;
pub mod cpu;
pub mod dense_calendar;
pub mod events;
mod executor;
pub mod faults;
mod lock;
pub mod membership;
pub mod msg;
pub mod nic;
pub mod persist;
pub mod profile;
pub mod report;
mod sim;
mod tear;
mod transport;

pub use clock::{NodeClock, VirtualTime};
pub use cpu::{CpuBusy, CpuId, CpuMode, CpuModel};
pub use events::EventQueue;
pub use executor::{RunReport, SimExecutor};
pub use faults::{CnDurable, FaultError, FaultScript, Node};
pub use membership::{MembershipConfig, View, ViewChange};
pub use msg::{serve, ServeStop, SimMailbox, SimMsgFabric, SimMsgNet};
pub use nic::{BatchTiming, NicModel, PmModel};
pub use profile::{Profile, ProfileError};
pub use report::{FabricLoad, KindWaits, NodeLoad};
pub use sim::{Sim, SimConfig, SimStats, Sleep};
pub use tear::TearStats;
pub use transport::{SimFabric, SimTransport};

/// What can go wrong in a simulation run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// Tasks wait, but no event is left that could wake them.
    #[error("deadlock at virtual time {now_ns} ns: {pending} task(s) wait for something no event will deliver; a future waited on a non-sim source or lost its waker")]
    Deadlock {
        /// Tasks not finished.
        pending: usize,
        /// Virtual time when it was found.
        now_ns: u64,
    },
    /// Tasks keep waking themselves and no event is left to move virtual time.
    #[error("livelock at virtual time {now_ns} ns: {pending} task(s) only yield and no event is pending; wait with Sim::sleep instead of spinning on the clock")]
    Livelock {
        /// Tasks not finished.
        pending: usize,
        /// Virtual time when it was found.
        now_ns: u64,
    },
    /// A clock drift that would stop or reverse the clock.
    #[error("clock drift {drift_ppm} ppm is outside -999999..=999999 ppm")]
    Drift {
        /// The drift asked for.
        drift_ppm: i64,
    },
}
