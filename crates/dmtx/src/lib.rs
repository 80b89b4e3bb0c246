//! The `dmtx` command line as a library: `dmtx bench` and `dmtx list`.
//!
//! `dmtx bench` runs one protocol on one workload on an in-process cluster (the `mem`
//! transport) and records throughput, latency, aborts and verbs. The parts, in the
//! order a run uses them:
//!
//! - [`config`]: clap's raw [`BenchArgs`] become one validated [`BenchConfig`];
//! - [`registry`]: the protocols and workloads by name, and the dispatch from names to
//!   one generic [`driver::run::<P, W>`](driver::run);
//! - [`driver`]: builds and loads the cluster, runs `threads × coroutines`
//!   coordinators, checks the workload's invariants;
//! - [`stats`]: what each worker thread counts, lock-free, merged after the run;
//! - [`results`]: the JSON record (its schema is documented there) and the summary.
//!
//! The binary (`src/main.rs`) adds clap's top level, the progress bar, Ctrl-C and exit
//! codes. This crate is the top of the stack: nothing depends on it.
//!
//! ```
//! use dmtx::{BenchArgs, BenchConfig};
//!
//! let err = BenchConfig::from_args(&BenchArgs { protocol: "frod".into(), ..BenchArgs::default() })
//!     .unwrap_err()
//!     .to_string();
//! assert!(err.contains("did you mean `ford`"), "{err}");
//! ```

#![warn(missing_docs)]

// The layers, for programs that embed dmtx (see `examples/bank.rs`).
pub use dmtx_memnode as memnode;
pub use dmtx_net as net;
pub use dmtx_protocols as protocols;
pub use dmtx_runtime as runtime;
pub use dmtx_store as store;
pub use dmtx_verbs as verbs;
pub use dmtx_workloads as workloads;

pub mod calibrate;
pub mod cluster;
pub mod cn_join;
pub mod config;
pub mod driver;
pub mod error;
pub mod plan;
pub mod plot;
pub mod preset;
pub mod registry;
pub mod report;
pub mod results;
pub mod stats;
pub mod units;

pub use config::{BenchArgs, BenchConfig, ConfigError, OutTarget, StopRule};
pub use driver::{Monitor, Progress, RunHooks, Silent};
pub use error::RunError;
pub use results::BenchResult;
