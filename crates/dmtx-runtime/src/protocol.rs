//! The protocol abstraction: what a concurrency-control protocol plugs into.

use std::future::Future;

use dmtx_memnode::Control;
use dmtx_store::SlotLayout;

use crate::{Abort, CoordCtx, KnobError, KnobSpec, Knobs, Result, Txn};

/// The isolation level a protocol claims; histories of its runs are checked against it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// Serializable: committed transactions are equivalent to some serial order.
    Serializable,
    /// Serializable, and that order respects real time (OOCC).
    StrictSerializable,
    /// Snapshot isolation (write skew allowed).
    SnapshotIsolation,
}

impl Isolation {
    /// Lower-case name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Serializable => "serializable",
            Isolation::StrictSerializable => "strict serializable",
            Isolation::SnapshotIsolation => "snapshot isolation",
        }
    }
}

/// A distributed transaction protocol over one-sided verbs.
///
/// A protocol owns its record layout ([`SlotLayout`]) and its per-transaction state
/// machine. Workloads never see either: they speak the [`Txn`] API, which calls
/// [`execute`](Protocol::execute) to fetch what was added since the last call and
/// [`commit`](Protocol::commit) to finish. When either returns `Err`, the `Txn` calls
/// [`abort`](Protocol::abort) to release whatever the transaction still holds, so a
/// protocol's `execute`/`commit` only undo what they themselves made visible.
pub trait Protocol: Send + Sync + Sized + 'static {
    /// Per-coordinator resources (post buffers, log areas).
    type CoordState: 'static;
    /// Per-object scratch state (addresses, lock state).
    type ObjState: Default + 'static;

    /// Name used on the command line.
    const NAME: &'static str;
    /// One-line description for `dmtx list`.
    const ABOUT: &'static str;
    /// Knobs accepted with `--set`.
    const KNOBS: &'static [KnobSpec];
    /// The isolation level it provides.
    const ISOLATION: Isolation;
    /// Whether its coordinators message other compute nodes (LOTUS lock RPCs, OOCC
    /// leases, Calvin): the runtime then gives every worker an [`crate::Rpc`]
    /// (`ctx.rpc`), driven by the worker's executor. Protocols that only use verbs leave
    /// it `false` and pay nothing for messaging.
    const MESSAGING: bool = false;

    /// Build from `--set` values (unknown keys are refused before this is called).
    fn from_knobs(knobs: &Knobs) -> std::result::Result<Self, KnobError>;

    /// How records look in a slot; tables are created with it.
    fn layout(&self) -> &dyn SlotLayout;

    /// Set up one coordinator (allocate its log areas through `control`, ...).
    fn coord_state(&self, ctx: &CoordCtx, control: &dyn Control) -> Result<Self::CoordState>;

    /// Fetch every object added since the last call, in as few round trips as the
    /// protocol allows. Must leave `set.fetched == set.objs.len()` on success.
    fn execute(txn: &mut Txn<'_, Self>) -> impl Future<Output = std::result::Result<(), Abort>>;

    /// Validate and commit. On `Err`, nothing the transaction wrote may remain visible.
    fn commit(txn: &mut Txn<'_, Self>) -> impl Future<Output = std::result::Result<(), Abort>>;

    /// Release every lock the transaction holds (in the background).
    fn abort(txn: &mut Txn<'_, Self>);
}
