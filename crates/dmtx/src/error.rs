//! Errors of setting up, running and recording a benchmark.

use std::path::PathBuf;

use dmtx_runtime::{KnobError, RuntimeError};
use dmtx_store::StoreError;
use dmtx_verbs::VerbError;

/// Why a run could not be set up, finished or written. An invariant that fails is not
/// an error: it is part of the result (`invariant.ok = false`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A knob value was refused while building the protocol or workload.
    #[error("--set: {0}")]
    Knob(KnobError),
    /// Creating or loading a table failed.
    #[error("loading tables: {0}")]
    Store(StoreError),
    /// Connecting the compute node or setting up a coordinator failed.
    #[error("setting up coordinators: {0}")]
    Runtime(RuntimeError),
    /// The run does not fit `--mn-bytes` or this host's memory; nothing was built.
    #[error("{0}")]
    DoesNotFit(Box<crate::plan::PlanError>),
    /// The in-process memory nodes' regions could not be mapped (the message names the
    /// size and the flags that set it).
    #[error("{0}")]
    Region(dmtx_verbs::region::RegionAllocError),
    /// Ctrl-C came before the measured run started; nothing was run or written.
    #[error("interrupted while {phase}; nothing was run")]
    Interrupted {
        /// What was under way (`loading tables`, ...).
        phase: &'static str,
    },
    /// Reading the tables back for the invariant check failed.
    #[error("reading table `{table}` back for the invariant check: {error}")]
    Scan {
        /// The table.
        table: String,
        /// The verb error.
        error: VerbError,
    },
    /// The memory nodes of the cluster file could not be reached or set up.
    #[error(transparent)]
    Net(#[from] dmtx_net::NetError),
    /// The cluster's token file is unusable.
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// A memory node of the cluster file is smaller than the run needs.
    #[error("memory node {mn} has {has} bytes, the run needs {needed}; start it with a larger `--size` or shrink the workload")]
    RemoteTooSmall {
        /// The node.
        mn: u16,
        /// Its region.
        has: u64,
        /// What the tables and coordinators need there.
        needed: u64,
    },
    /// A memory node was lost mid-run and `--on-fault stop` ended the run.
    #[error("{why}; stopped the run after {after:.1?} (`--on-fault continue` keeps running with fault aborts)")]
    Fault {
        /// The verb error a coordinator saw (names the node).
        why: String,
        /// Time from the start barrier to the fault.
        after: std::time::Duration,
    },
    /// A transaction's undo log outgrew the protocol's log area: it can never commit, so
    /// the run stopped.
    #[error("{why}; stopped the run after {after:.1?}")]
    LogFull {
        /// The protocol's words: what the transaction needed, the area, the knob.
        why: String,
        /// Time from the start barrier to the abort.
        after: std::time::Duration,
    },
    /// Tables ran out of room for inserts mid-run, and the run stopped at that moment
    /// (past it, every insert aborts `table_full` and the figures are no longer the
    /// workload's).
    #[error("{}", tables_full_message(tables, after))]
    TablesFull {
        /// Every exhausted table, with the knob that sizes its room (if one does).
        tables: Vec<(String, Option<String>)>,
        /// Time from the start barrier to the first `table_full` abort.
        after: std::time::Duration,
    },
    /// The run asks for something this build cannot do yet; the message says what to do.
    #[error("{0}")]
    Unsupported(String),
    /// The compute nodes of a `--cn` run could not meet (or listen for each other).
    #[error(transparent)]
    Join(#[from] crate::cn_join::JoinError),
    /// The history could not be written (`--history`).
    #[error("writing the history: {0}")]
    History(dmtx_check::format::FormatError),
    /// A worker thread panicked; the run's results are incomplete.
    #[error("worker thread {thread} panicked: {message}")]
    WorkerPanicked {
        /// Thread index.
        thread: u16,
        /// The panic message.
        message: String,
    },
    /// The name is not in the registry (the config was not built by `from_args`).
    #[error("no {what} named `{name}` is registered; see `dmtx list`")]
    Unregistered {
        /// `protocol` or `workload`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The results file could not be written.
    #[error("writing results to {}: {error}; check --out", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// "table `a` is full (raise `k`), table `b` is full (...); stopped the run after 61.2 s ...".
fn tables_full_message(tables: &[(String, Option<String>)], after: &std::time::Duration) -> String {
    let each: Vec<String> = tables
        .iter()
        .map(|(table, knob)| match knob {
            Some(knob) => format!("table `{table}` is full (raise `--set {knob}=...`)"),
            None => format!("table `{table}` is full (no knob sizes it; run shorter)"),
        })
        .collect();
    format!(
        "{}; stopped the run after {:.1} s, since every insert after it aborts `table_full`",
        each.join(", "),
        after.as_secs_f64()
    )
}

// The wrapped errors' text is part of each message, so none is also a `source`: a
// one-line `{:#}` chain would print it twice.
impl From<KnobError> for RunError {
    fn from(e: KnobError) -> Self {
        Self::Knob(e)
    }
}

impl From<StoreError> for RunError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<dmtx_check::format::FormatError> for RunError {
    fn from(e: dmtx_check::format::FormatError) -> Self {
        Self::History(e)
    }
}

impl From<RuntimeError> for RunError {
    fn from(e: RuntimeError) -> Self {
        Self::Runtime(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_full_names_every_table_and_its_knob() {
        let e = RunError::TablesFull {
            tables: vec![
                ("order_line".into(), Some("new_orders_max".into())),
                ("history".into(), Some("payments_max".into())),
                ("call_forwarding".into(), None),
            ],
            after: std::time::Duration::from_millis(61_240),
        };
        assert_eq!(
            e.to_string(),
            "table `order_line` is full (raise `--set new_orders_max=...`), table `history` is full \
             (raise `--set payments_max=...`), table `call_forwarding` is full (no knob sizes it; run \
             shorter); stopped the run after 61.2 s, since every insert after it aborts `table_full`"
        );
    }
}
