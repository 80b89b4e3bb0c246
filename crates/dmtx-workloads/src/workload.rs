//! The workload abstraction.

use std::future::Future;
use std::time::Duration;

use dmtx_runtime::{Abort, CoordId, Coordinator, KnobError, KnobSpec, Knobs, Protocol, TxnHints};
use dmtx_store::{StoreError, TableSpec};

use crate::Snapshot;

/// How a transaction that was not aborted by the protocol ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Committed and did what it set out to do.
    Committed,
    /// Committed, but the benchmark's spec does not count it as successful (TATP: the
    /// subscriber or row was not found, an insert found a duplicate). Counted as a commit
    /// (what the papers count) and apart from `successful` (the spec's throughput).
    Unsuccessful,
    /// The workload rolled it back on purpose (TPC-C NewOrder's 1% unused item): neither a
    /// commit nor a concurrency abort, counted as `rolled_back`.
    RolledBack,
}

/// A benchmark: its tables, their initial records, its transaction mix and the
/// invariants that must hold after any run.
///
/// Workloads are protocol-agnostic: they speak only the `Txn` API.
pub trait Workload: Send + Sync + Sized + 'static {
    /// Per-coordinator state: RNG, and whatever the invariants need (committed deltas).
    type Local: Send + 'static;
    /// One transaction's type and random inputs, drawn by [`Workload::draw`] and reused
    /// by every attempt of it. `Send`: a transaction drawn on one compute node may run on
    /// another's thread ([`Workload::route_key`]).
    type Input: Send;

    /// Name used on the command line.
    const NAME: &'static str;
    /// One-line description for `dmtx list`.
    const ABOUT: &'static str;
    /// Knobs accepted with `--set`.
    const KNOBS: &'static [KnobSpec];
    /// The CPU step the driver charges once per attempt: the workload's choice of
    /// transaction and its inputs, and the driver's accounting. Its cost differs from
    /// workload to workload (TATP's non-uniform keys, TPC-C's order lines), so each
    /// names its own (`kvs.txn`); `dmtx sim calibrate` fits each.
    const TXN_STEP: &'static str = dmtx_runtime::GENERIC_TXN_STEP;

    /// The knob that scales the dataset (`keys`, `warehouses`, ...), an integer: memory
    /// planning searches it for the largest value that fits when a run does not.
    const SCALE_KNOB: Option<&'static str> = None;

    /// Build from `--set` values (unknown keys are refused before this is called).
    fn from_knobs(knobs: &Knobs) -> Result<Self, KnobError>;

    /// Names of the transaction types, indexed as `draw` reports them.
    fn txn_types(&self) -> &'static [&'static str];

    /// What every transaction of type `ty` promises at begin: read-only, and every key
    /// declared before the first execute ([`TxnHints`]); `run` begins each transaction
    /// with at least these hints. One transaction may promise more than its type (TPC-C's
    /// Payment by customer id declares its keys; by last name it reads the id first). The
    /// registry pairs a protocol that requires declared keys only with a workload whose
    /// every type declares them. The default promises nothing.
    fn txn_hints(&self, ty: usize) -> TxnHints {
        let _ = ty;
        TxnHints::NONE
    }

    /// The tables to create.
    fn tables(&self) -> Vec<TableSpec>;

    /// This workload with the room of its growing tables (the records its transactions
    /// insert) sized for a run like `hint`, unless a knob fixed that room. The driver
    /// calls it once, before [`Workload::tables`]; a workload whose tables never grow
    /// keeps the default.
    fn fit_to_run(self, hint: &RunHint) -> Self {
        let _ = hint;
        self
    }

    /// Produce the initial records of `table`, handing each to `insert`.
    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError>;

    /// Per-coordinator state; `seed` is derived from the run seed and `coord`.
    fn local(&self, coord: CoordId, seed: u64) -> Self::Local;

    /// Draw the next transaction: its type index (into [`Workload::txn_types`]) and
    /// everything random about it. Drawing is apart from running so that the driver can
    /// retry an aborted transaction with the same inputs (TPC-C §5.2.5, BenchBase,
    /// OLTPBench).
    fn draw(&self, local: &mut Self::Local) -> (usize, Self::Input);

    /// The key that places transaction `input` for a protocol that routes transactions
    /// to compute nodes ([`dmtx_runtime::Protocol::route`]: LOTUS runs a read-write
    /// transaction on the node that owns its shard). `None`, the default, gives the
    /// protocol no key.
    fn route_key(&self, input: &Self::Input) -> Option<u64> {
        let _ = input;
        None
    }

    /// Run one attempt of the transaction `input` describes. Whatever `local` records
    /// about committed effects (deltas, counts the invariants use) is updated only when
    /// this attempt commits, so an attempt that aborts and is retried leaves no trace.
    fn run<P: Protocol>(
        &self,
        local: &mut Self::Local,
        input: &Self::Input,
        coord: &mut Coordinator<P>,
    ) -> impl Future<Output = Result<Outcome, Abort>>;

    /// Draw and run one transaction; report its type index and outcome. Retrying an
    /// aborted transaction is the driver's business, not the workload's.
    fn run_one<P: Protocol>(
        &self,
        local: &mut Self::Local,
        coord: &mut Coordinator<P>,
    ) -> impl Future<Output = (usize, Result<Outcome, Abort>)> {
        async move {
            let (ty, input) = self.draw(local);
            (ty, self.run(local, &input, coord).await)
        }
    }

    /// Headline figures of a run beyond transactions per second (TPC-C's tpmC), from
    /// each type's counts over `elapsed_s` seconds of measured run. None by default.
    fn metrics(&self, _counts: &[TypeCounts], _elapsed_s: f64) -> Vec<Metric> {
        Vec::new()
    }

    /// Check the invariants on the quiesced database, given every coordinator's local
    /// state. `Ok` carries a one-line description of what was checked.
    fn check(&self, locals: &[Self::Local], snapshot: &Snapshot) -> Result<String, InvariantError>;
}

/// What a workload learns of a run before it sizes its tables.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RunHint {
    /// How long the run lasts, warm-up included, when it stops on time.
    pub duration: Option<Duration>,
    /// How many transactions it commits, when it stops on a count.
    pub txns: Option<u64>,
    /// Coordinators over all compute nodes.
    pub coordinators: usize,
}

impl RunHint {
    /// Committed transactions the run cannot exceed at `per_coordinator_second_max`
    /// commits per coordinator per second (for runs that stop on time), or `None` when
    /// the hint bounds nothing.
    pub fn txns_max(&self, per_coordinator_second_max: f64) -> Option<f64> {
        match (self.txns, self.duration) {
            (Some(n), _) => Some(n as f64),
            (None, Some(d)) => Some(d.as_secs_f64() * self.coordinators.max(1) as f64 * per_coordinator_second_max),
            (None, None) => None,
        }
    }
}

/// Room for `expected` inserts spread uniformly over `parts` parts (districts): the
/// most one part is expected to take, with a margin that no run observes exceeded (a
/// quarter more, six standard deviations of the binomial spread, and 100).
pub fn room_per_part(expected: f64, parts: u64) -> u64 {
    let mean = expected / parts.max(1) as f64;
    (mean * 1.25 + 6.0 * mean.sqrt() + 100.0).ceil() as u64
}

/// The error for knob `spec` given `value`, with why it is refused and the fix: every
/// workload's knob checks build theirs here.
pub(crate) fn invalid(spec: &KnobSpec, value: impl ToString, why: impl Into<String>) -> KnobError {
    KnobError::Invalid {
        key: spec.name.to_string(),
        value: value.to_string(),
        why: why.into(),
    }
}

/// What one transaction type did in a run, as [`Workload::metrics`] sees it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeCounts {
    /// Commits (successful or not).
    pub committed: u64,
    /// Transactions the workload rolled back on purpose (TPC-C NewOrder's 1%).
    pub rolled_back: u64,
}

/// A named headline figure of a run (`tpmc`).
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// Key in the JSON record (`tpmc`).
    pub name: &'static str,
    /// Its value.
    pub value: f64,
    /// What it counts, for the summary (`NewOrders per minute over 2 warehouses`).
    pub about: String,
}

/// Where [`Workload::load`] hands each initial record: `(key, value bytes)`, e.g.
/// [`dmtx_store::TableBuilder::insert`].
pub type RecordSink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), StoreError> + 'a;

/// An invariant that failed after a run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant `{invariant}` violated: {detail}")]
pub struct InvariantError {
    /// Short name (`money_conservation`).
    pub invariant: &'static str,
    /// What was expected and what was found.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use dmtx_runtime::TxnHints;

    use crate::testkit::{knobs, run_under_ford};
    use crate::{Kvs, SmallBank, Tatp, Tpcc, Workload, Ycsb};

    /// `ro+keys`, `ro`, `keys` or `none`: what every attempt of each type promised at
    /// begin in a run of `w` under FORD, by type name.
    fn begun<W: Workload>(w: &W, txns: usize) -> Vec<(&'static str, &'static str)> {
        let run = run_under_ford(w, 2, txns, 11);
        w.txn_types()
            .iter()
            .zip(&run.hints)
            .map(|(&name, h)| {
                let h = h.unwrap_or_else(|| panic!("no {name} ran in {txns} transactions: {run:?}"));
                let code = match (h.read_only, h.keys_declared) {
                    (true, true) => "ro+keys",
                    (true, false) => "ro",
                    (false, true) => "keys",
                    (false, false) => "none",
                };
                (name, code)
            })
            .collect()
    }

    fn build<W: Workload>(pairs: &[&str]) -> W {
        W::from_knobs(&knobs(pairs)).unwrap()
    }

    /// Goal: each workload's read-only types begin read-only, and the types that add
    /// every key before their first execute begin with `keys_declared`; the runtime's
    /// assertions hold each promise, so a run that finishes shows the hints are true.
    /// Method: a short run of each workload under FORD (the test kit also checks every
    /// attempt against its type's `txn_hints`); the weakest hints of each type's
    /// attempts, by name.
    #[test]
    fn every_workload_begins_its_types_with_their_hints() {
        let kvs: Kvs = build(&["keys=200", "objects=4"]);
        assert_eq!(begun(&kvs, 200), [("read_only", "ro+keys"), ("read_write", "keys")]);
        let bank: SmallBank = build(&["accounts=1000"]);
        let b = begun(&bank, 400);
        for (name, code) in &b {
            let want = if *name == "balance" { "ro+keys" } else { "keys" };
            assert_eq!(*code, want, "{name}: {b:?}");
        }
        let ycsb: Ycsb = build(&["records=2000", "fields=2", "field_bytes=8"]);
        assert_eq!(begun(&ycsb, 200), [("read_only", "ro+keys"), ("read_write", "keys")]);
        let tatp_types = |index: bool| {
            let last = if index { "none" } else { "keys" };
            vec![
                ("get_subscriber_data", "ro+keys"),
                ("get_new_destination", "ro"),
                ("get_access_data", "ro+keys"),
                ("update_subscriber_data", "keys"),
                ("update_location", last),
                ("insert_call_forwarding", last),
                ("delete_call_forwarding", last),
            ]
        };
        let tatp: Tatp = build(&["subscribers=1000"]);
        assert_eq!(begun(&tatp, 1000), tatp_types(true));
        let tatp: Tatp = build(&["subscribers=1000", "sub_nbr_index=false"]);
        assert_eq!(begun(&tatp, 1000), tatp_types(false));
        let small = ["warehouses=1", "items=1000", "customers=60", "mix=1,1,1,1,1"];
        let tpcc: Tpcc = build(&small);
        assert_eq!(
            begun(&tpcc, 60),
            [
                ("new_order", "none"),
                ("payment", "none"),
                ("order_status", "ro"),
                ("delivery", "none"),
                ("stock_level", "ro"),
            ]
        );
        let tpcc: Tpcc = build(&[&small[..], &["tpcc_variant=ford"]].concat());
        assert_eq!(begun(&tpcc, 60)[1], ("payment", "keys"), "FORD's Payment is by id");
        assert_eq!(tpcc.txn_hints(1), TxnHints::DECLARED);
    }
}
