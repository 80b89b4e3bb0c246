//! Test scaffolding shared by the workloads' end-to-end tests: load a workload into an
//! in-process two-node cluster with FORD's layout, run coordinators interleaved on one
//! worker thread (so their transactions conflict), then scan every table's primary.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use dmtx_memnode::LocalCluster;
use dmtx_protocols::ford::{Ford, FordConfig};
use dmtx_runtime::{block_on, scan_table, AbortReason, Cn, LocalExecutor, Protocol, RealClock, TxnHints};
use dmtx_store::{create_table, placement, TableBuilder};

use crate::{Snapshot, Workload};

/// Memory nodes of the test cluster.
const MN_COUNT: usize = 2;
/// Replicas per table (one primary, one backup, as FORD §6.1).
const REPLICAS: usize = 2;
/// Region bytes per memory node.
const REGION_BYTES: u64 = 256 << 20;
/// Coroutine id of the scanning context (outside every coordinator's).
const SCAN_COROUTINE: u16 = 999;

/// What a run left behind.
pub(crate) struct Run<W: Workload> {
    /// Every coordinator's local state, by coroutine.
    pub locals: Vec<W::Local>,
    /// The tables after the run, sealed.
    pub snapshot: Snapshot,
    /// Commits by transaction type.
    pub committed: Vec<u64>,
    /// Aborts by reason.
    pub aborts: BTreeMap<AbortReason, u64>,
    /// By type, what every attempt of it promised at begin (`None`: none ran).
    pub hints: Vec<Option<TxnHints>>,
}

impl<W: Workload> Run<W> {
    /// Transactions run.
    pub fn attempted(&self) -> u64 {
        self.committed.iter().sum::<u64>() + self.aborts.values().sum::<u64>()
    }
}

impl<W: Workload> std::fmt::Debug for Run<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("committed", &self.committed)
            .field("aborts", &self.aborts)
            .field("hints", &self.hints)
            .finish()
    }
}

/// Run `txns` transactions on each of `coordinators` coordinators of one thread under
/// FORD, then snapshot every table of `w`. Every attempt must begin with at least its
/// type's hints ([`Workload::txn_hints`]); the runtime holds it to them.
pub(crate) fn run_under_ford<W: Workload>(w: &W, coordinators: u16, txns: usize, seed: u64) -> Run<W> {
    let cluster = LocalCluster::new(MN_COUNT, REGION_BYTES);
    let ford = Arc::new(Ford::new(FordConfig::default()));
    let specs = w.tables();
    for spec in &specs {
        let mut table = TableBuilder::new(spec.clone(), ford.layout());
        w.load(spec.id, &mut |k, v| table.insert(k, v))
            .expect("load fits the table");
        let replicas = placement(spec.id, MN_COUNT, REPLICAS).expect("placement");
        create_table(&cluster, table, &replicas).expect("create table");
    }
    let cn = Cn::connect(
        0,
        Arc::new(cluster.fabric().clone()),
        Arc::new(cluster.clone()),
        Arc::new(RealClock::new()),
    )
    .expect("connect");
    let worker = cn.worker(0).expect("worker");

    let types = w.txn_types().len();
    let finished = RefCell::new(Vec::new());
    let mut executor = LocalExecutor::new();
    for c in 0..coordinators {
        let mut coord = worker.coordinator(&ford, c).expect("coordinator");
        let mut local = w.local(coord.ctx.id, seed ^ (c as u64).wrapping_mul(0x9e37_79b9));
        let finished = &finished;
        executor.spawn(async move {
            let mut committed = vec![0u64; types];
            let mut aborts = BTreeMap::<AbortReason, u64>::new();
            let mut hints = vec![None::<TxnHints>; types];
            for _ in 0..txns {
                let (ty, res) = w.run_one(&mut local, &mut coord).await;
                assert!(ty < types, "type index {ty} out of {types}");
                let begun = coord.set.hints;
                assert!(
                    begun.covers(w.txn_hints(ty)),
                    "{} begun with {begun:?}, weaker than its type's {:?}",
                    w.txn_types()[ty],
                    w.txn_hints(ty)
                );
                hints[ty] = Some(weakest(hints[ty], begun));
                match res {
                    Ok(_) => committed[ty] += 1,
                    Err(a) => *aborts.entry(a.reason).or_default() += 1,
                }
            }
            finished.borrow_mut().push((c, local, committed, aborts, hints));
        });
    }
    executor.run(worker.transport().as_ref());

    let mut finished = finished.into_inner();
    finished.sort_by_key(|f| f.0);
    assert_eq!(finished.len(), coordinators as usize);
    let mut run = Run {
        locals: Vec::new(),
        snapshot: Snapshot::new(),
        committed: vec![0; types],
        aborts: BTreeMap::new(),
        hints: vec![None; types],
    };
    for (_, local, committed, aborts, hints) in finished {
        run.locals.push(local);
        for (t, c) in committed.into_iter().enumerate() {
            run.committed[t] += c;
        }
        for (r, n) in aborts {
            *run.aborts.entry(r).or_default() += n;
        }
        for (t, h) in hints.into_iter().enumerate() {
            if let Some(h) = h {
                run.hints[t] = Some(weakest(run.hints[t], h));
            }
        }
    }

    let mut ctx = worker.ctx(SCAN_COROUTINE);
    for spec in &specs {
        let snapshot = &mut run.snapshot;
        block_on(scan_table(&mut ctx, spec.id, 0, ford.layout(), |k, v| {
            snapshot.push(spec.id, k, v)
        }))
        .expect("scan");
    }
    run.snapshot.seal();
    run
}

/// What both `a` (if any) and `b` promise.
fn weakest(a: Option<TxnHints>, b: TxnHints) -> TxnHints {
    let a = a.unwrap_or(b);
    TxnHints {
        read_only: a.read_only && b.read_only,
        keys_declared: a.keys_declared && b.keys_declared,
    }
}

/// Check that every table of `w` declares an attribute schema that tiles its value
/// (offset order, no gap, no overlap, sizes summing to the value's bytes), and return
/// each table's schema as `(name, bytes)` pairs, by table name.
pub(crate) fn declared_schemas<W: Workload>(w: &W) -> BTreeMap<String, Vec<(String, u32)>> {
    let mut out = BTreeMap::new();
    for spec in w.tables() {
        assert!(!spec.attrs.is_empty(), "table `{}` declares no attributes", spec.name);
        dmtx_store::check_attrs(&spec.name, spec.value_bytes, &spec.attrs).unwrap_or_else(|e| panic!("{e}"));
        let sum: u32 = spec.attrs.iter().map(|a| a.bytes).sum();
        assert_eq!(
            sum, spec.value_bytes,
            "table `{}`: attribute sizes sum to the value",
            spec.name
        );
        out.insert(
            spec.name.clone(),
            spec.attrs.iter().map(|a| (a.name.clone(), a.bytes)).collect(),
        );
    }
    out
}

/// Knobs from `key=value` pairs.
pub(crate) fn knobs(pairs: &[&str]) -> dmtx_runtime::Knobs {
    dmtx_runtime::Knobs::parse(pairs.iter().copied()).unwrap()
}
