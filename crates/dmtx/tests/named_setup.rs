//! The driver runs a protocol's run-wide setup: once on the run's memory pool before any
//! coordinator is set up, and on its sizing control before measuring one coordinator.
//! Goal: a protocol whose coordinators need a run-wide named area can run, and that area
//! is not counted per coordinator. Method: a test-only protocol publishes an FAA counter
//! in `setup_run`, fetches it in `coord_state` (which fails if nothing was published),
//! and FAAs it in every attempt, which it then rolls back; the KVS tables it never
//! touches pass their check.

use std::sync::atomic::AtomicBool;

use dmtx::driver::{self, RunHooks, Silent};
use dmtx::memnode::Control;
use dmtx::protocols::ford::{Ford, FordConfig};
use dmtx::runtime::{named, Abort, AbortReason, CoordCtx, Isolation, KnobError, KnobSpec, Knobs, Protocol, Txn};
use dmtx::store::SlotLayout;
use dmtx::verbs::{MnId, Post, RemotePtr};
use dmtx::workloads::{Kvs, Workload};
use dmtx::{BenchArgs, BenchConfig};

const COUNTER: &str = "test/run-counter";

/// Test-only: one cluster-wide counter, taken by every attempt, which then rolls back.
struct RunCounter {
    ford: Ford,
}

impl Protocol for RunCounter {
    type CoordState = RemotePtr;
    type ObjState = ();
    type CnState = ();
    type ThreadState = ();
    const NAME: &'static str = "test-run-counter";
    const ABOUT: &'static str = "a run-wide FAA counter (test only)";
    const KNOBS: &'static [KnobSpec] = &[];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(proto())
    }
    fn isolation(&self) -> Isolation {
        Isolation::Unchecked
    }
    fn layout(&self) -> &dyn SlotLayout {
        self.ford.layout()
    }
    fn setup_run(&self, control: &dyn Control) -> dmtx::runtime::Result<()> {
        named::alloc_and_publish(control, COUNTER, MnId(1), 4096, 64, &[])?;
        Ok(())
    }
    fn coord_state(&self, _: &CoordCtx, control: &dyn Control) -> dmtx::runtime::Result<RemotePtr> {
        Ok(named::fetch(control, COUNTER)?.at)
    }
    async fn execute(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let mut post = Post::new();
        post.faa(txn.coord.state, 1);
        txn.coord
            .ctx
            .post(&mut post)
            .await
            .map_err(|_| Abort::new(AbortReason::Fault))?;
        Err(Abort::new(AbortReason::User))
    }
    async fn commit(_: &mut Txn<'_, Self>) -> Result<(), Abort> {
        unreachable!("execute always rolls back")
    }
    fn abort(_: &mut Txn<'_, Self>) {}
}

fn proto() -> RunCounter {
    RunCounter {
        ford: Ford::new(FordConfig::default()),
    }
}

#[test]
fn a_run_sets_up_named_areas_before_its_coordinators() {
    let cfg = BenchConfig::from_args(&BenchArgs {
        workload: "kvs".into(),
        set: vec!["keys=256".into()],
        threads: 2,
        coroutines: 2,
        duration: Some("20ms".into()),
        warmup: Some("1ms".into()),
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    })
    .unwrap();
    let stop = AtomicBool::new(false);
    let hooks = RunHooks {
        stop: &stop,
        monitor: &Silent,
        probes: None,
    };
    let kvs = Kvs::from_knobs(&cfg.knobs).unwrap();
    let r = driver::run(proto(), kvs, &cfg, &hooks).unwrap();
    assert!(
        r.attempted > 0,
        "coordinators ran: {} attempts, {} aborted, {} rolled back",
        r.attempted,
        r.aborted,
        r.rolled_back
    );
    assert_eq!(r.committed, 0);
    assert!(r.invariant.ok, "{}", r.invariant.detail);
}

/// The run-wide area (4 KiB on mn1) is the run's: one coordinator allocates nothing.
#[test]
fn sizing_runs_setup_first_and_counts_only_the_coordinator() {
    assert_eq!(driver::coordinator_bytes(&proto(), 2).unwrap(), vec![0, 0]);
}
