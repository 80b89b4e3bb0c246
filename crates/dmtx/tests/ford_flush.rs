//! FORD's selective remote flush (§4.5) against the full flush of §6.2.4's comparison,
//! through `dmtx bench`'s verb counts.

mod common;

use common::run_registry;
use dmtx::config::TransportKind;
use dmtx::results::BenchResult;
use dmtx::BenchArgs;

/// One coordinator writing one record per transaction, 2 memory nodes × 2 replicas.
fn run(selective: bool) -> BenchResult {
    run_registry(&BenchArgs {
        protocol: "ford".into(),
        workload: "kvs".into(),
        set: vec![
            "keys=1000".into(),
            "objects=1".into(),
            "rw_ratio=1".into(),
            format!("selective_flush={selective}"),
        ],
        transport: TransportKind::Sim,
        threads: 1,
        coroutines: 1,
        txns: Some(300),
        replicas: Some(2),
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    })
}

/// Goal: the selective flush FLUSHes once per commit (the backup's node, after its last
/// WRITE); the full flush after every WRITE: the undo log on each of the 2 nodes, the
/// primary and the backup. Both commit in the same round trips (the FLUSHes ride in the
/// commit batch).
#[test]
fn selective_flush_flushes_the_backup_once_and_full_flush_every_write() {
    let sel = run(true);
    let full = run(false);
    let (s, f) = (sel.total.ops_per_commit.unwrap(), full.total.ops_per_commit.unwrap());
    assert_eq!(s.flush, 1.0, "{s:?}");
    assert_eq!(f.flush, 4.0, "{f:?}");
    assert_eq!(s.write, f.write);
    assert_eq!(sel.total.rtt_per_commit, full.total.rtt_per_commit);
}
