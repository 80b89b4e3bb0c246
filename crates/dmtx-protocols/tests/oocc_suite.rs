//! OOCC passes the protocol suite (`dmtx_suite::run_all`): contended transactions on
//! `mem` with injected tears and on `sim`, with 1, 2 and 3 replicas, through the
//! isolation checker in its real-time (strict serializable) mode, session order
//! included; every workload's invariants; its round-trip budget. Its broken variants
//! are caught, each by a test.

use dmtx_protocols::oocc::{Oocc, METRIC_LEASE_WAIT_NS, METRIC_RO_OMITTED};
use dmtx_runtime::{Isolation, Knobs, Protocol};
use dmtx_suite::{Cache, Options, RttBudget, Setup, TxnKind};
use dmtx_verbs::OpKind;

/// A lease long enough that a debug build on a loaded host reads every record of an
/// idle transaction within it: the fast path is taken deterministically.
const LONG_LEASE: &str = "lease_us=20000";

/// OOCC's round trips with the lease held (issue 29: RO 1, RW 3; the wait until `D` is
/// a timer, not a round trip). Execute is RTT1; commit is RTT2 + RTT3.
const OOCC_BUDGET: [RttBudget; 10] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Cold, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 1, 0),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 2),
    RttBudget::new(TxnKind::ReadWrite, Cache::Cold, 2, 2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 2),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Cold, 2, 2),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 2),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 1, 2),
];

/// With no lease every read-only record is out of lease at `c1`: the fallback's one
/// validation round (§III-B case 3). Read-write transactions are unchanged.
const OOCC_BUDGET_NO_LEASE: [RttBudget; 4] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 1, 1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 2),
];

fn make(k: &Knobs) -> Oocc {
    Oocc::from_knobs(k).expect("suite knobs are OOCC's")
}

fn knobs(pairs: &[&str]) -> Knobs {
    Knobs::parse(pairs.iter().copied()).expect("OOCC knobs")
}

/// `pairs` with the lease manager and clock monitor off: budgets are measured on one
/// coordinator outside any executor, which cannot drive CN↔CN messages.
fn quiet(pairs: &[&str]) -> Knobs {
    let mut k = knobs(pairs);
    k.set("lease_adjust", "false");
    k.set("clock_check", "false");
    k
}

/// `budget` with the background post of a writer's deferred unlocks (with backups, the
/// default layout unlocks once RTT3 is ACKed).
fn with_backups<const N: usize>(budget: [RttBudget; N], replicas: usize) -> [RttBudget; N] {
    budget.map(|b| match b.kind {
        TxnKind::ReadWrite | TxnKind::ReadWriteWithRo | TxnKind::Insert | TxnKind::Delete if replicas > 1 => {
            b.background(1)
        }
        _ => b,
    })
}

/// Goal: the budget of the issue, from the verb counters: RO 1 RTT of READs only, the
/// fallback 2, RW 3 (and its wait for `D` is no round trip, but is waited).
#[test]
fn oocc_meets_its_round_trip_budget() {
    for replicas in [1, 2, 3] {
        let budget = with_backups(OOCC_BUDGET, replicas);
        let got = dmtx_suite::assert_budgets(|| make(&quiet(&[LONG_LEASE])), replicas, 20, &budget);
        for (row, m) in OOCC_BUDGET.iter().zip(&got) {
            let a = &m.attempt;
            if matches!(row.kind, TxnKind::ReadOnlyOne | TxnKind::ReadOnlyMany) {
                let others: u64 = [OpKind::Write, OpKind::Cas, OpKind::Faa, OpKind::Flush]
                    .iter()
                    .map(|&k| a.ops_of(k))
                    .sum();
                assert_eq!(others, 0, "{row:?}: a read-only transaction posts READs only");
                let reads = if row.kind == TxnKind::ReadOnlyOne { 1 } else { 3 };
                assert_eq!(a.ops_of(OpKind::Read), reads, "{row:?}: one READ per record");
            }
            if row.kind == TxnKind::ReadWrite && row.cache == Cache::Warm {
                // RTT1 CAS + READ each; RTT2 W each, a log + FLUSH per node; RTT3 image +
                // unlock each on the primary (the unlock in the background with backups),
                // image per backup.
                let w = 2;
                assert_eq!(a.ops_of(OpKind::Cas), w);
                assert_eq!(a.ops_of(OpKind::Read), w);
                assert_eq!(a.ops_of(OpKind::Flush), replicas as u64);
                assert_eq!(
                    a.ops_of(OpKind::Write),
                    w + replicas as u64 + 2 * w + w * (replicas as u64 - 1)
                );
            }
        }
    }
    dmtx_suite::assert_budgets(
        || make(&quiet(&["lease_us=0"])),
        2,
        20,
        &with_backups(OOCC_BUDGET_NO_LEASE, 2),
    );
    // The paper's layout: the same round trips; RW commits with one WRITE per replica.
    let got = dmtx_suite::assert_budgets(
        || make(&quiet(&[LONG_LEASE, "one_op_unlock=true"])),
        2,
        20,
        &OOCC_BUDGET,
    );
    let rw = &got[4].attempt;
    assert_eq!(
        rw.ops_of(OpKind::Write),
        2 + 2 + 2 * 2,
        "W each, log per node, one commit WRITE per replica"
    );
}

/// Goal: a read-write commit waits until `D` = last CAS completion + write-wait lease,
/// on the clock, and the read-only commit inside the lease skips validation.
#[test]
fn a_writer_waits_out_the_lease_and_a_reader_in_lease_omits_validation() {
    let env = dmtx_suite::Env::bank(make(&quiet(&["lease_us=30000"])), Setup::new(2, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    dmtx_suite::rtt::measure_one(&mut c, TxnKind::ReadWrite, 0); // warms the cache
    let t0 = std::time::Instant::now();
    let m = dmtx_suite::rtt::measure_one(&mut c, TxnKind::ReadWrite, 0);
    let took = t0.elapsed();
    assert_eq!((m.execute, m.commit), (1, 2));
    assert!(
        took >= std::time::Duration::from_micros(30_000),
        "RTT3 waited for D: {took:?}"
    );
    let waited = c.ctx.metrics.get(METRIC_LEASE_WAIT_NS).map_or(0, |m| m.sum);
    assert!(waited > 0, "the wait is counted");
    let m = dmtx_suite::rtt::measure_one(&mut c, TxnKind::ReadOnlyMany, 0);
    assert_eq!((m.execute, m.commit), (1, 0));
    let omitted = c.ctx.metrics.get(METRIC_RO_OMITTED).map_or(0, |m| m.sum);
    assert_eq!(omitted, 1);
}

#[test]
fn oocc_claims_strict_serializability() {
    assert_eq!(make(&Knobs::default()).isolation(), Isolation::StrictSerializable);
}

/// The suite at the default 10 µs lease (on `mem` in a debug build most read-only
/// transactions fall back to validation; on `sim` most are in lease), with no lease
/// (every read validated) and with a long one (every read in lease, every writer
/// waits). The paper's layout (`one_op_unlock`) is left out: it is safe for one crossing
/// of a READ and a WRITE only, and the suite's injected tears may cross twice
/// (`oocc_broken.rs::two_crossings_break_the_papers_layout_not_the_default`).
#[test]
fn oocc_passes_the_suite() {
    let opts = Options {
        knob_sets: vec![
            Knobs::default(),
            knobs(&["lease_us=0", "addr_cache=false"]),
            // The paper's OCC (Fig. 6a): every ablation off.
            knobs(&["lease=false", "write_unlock=false", "delayed_lock=false"]),
            knobs(&["write_unlock=false", "lease_us=50"]),
        ],
        faults: None,
        ..Options::default()
    };
    let ran = dmtx_suite::run_all(make, &opts);
    eprintln!("oocc: {} suite cases", ran.cases);
}

#[test]
fn oocc_passes_the_suite_with_a_long_lease_on_two_compute_nodes() {
    let opts = Options {
        knob_sets: vec![knobs(&["lease_us=300"])],
        replicas: vec![2],
        value_bytes: vec![20],
        compute_nodes: 2,
        txns: 60,
        workloads: false,
        faults: None,
        ..Options::default()
    };
    dmtx_suite::run_all(make, &opts);
}

/// Goal: the ablations of §VIII-D cost what Fig. 6 says: without the lease every
/// read-only transaction validates (2 RTTs) and writers never wait; without Write-Unlock
/// a read-write transaction takes 4 (RTT3 writes, RTT4 unlocks); with everything off,
/// the paper's OCC: RO 2, RW 4. The upper bound never validates.
#[test]
fn ablations_meet_their_round_trip_budgets() {
    let no_lease = [
        RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
        RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 2),
    ];
    dmtx_suite::assert_budgets(
        || make(&quiet(&["lease=false", LONG_LEASE])),
        2,
        20,
        &with_backups(no_lease, 2),
    );
    let no_write_unlock = [
        RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 0),
        RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 3),
        RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 1, 3),
        RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 3),
    ];
    dmtx_suite::assert_budgets(
        || make(&quiet(&["write_unlock=false", LONG_LEASE])),
        2,
        20,
        &no_write_unlock,
    );
    let occ = [
        RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 1, 1),
        RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 1),
        RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 1, 3),
        RttBudget::new(TxnKind::Delete, Cache::Warm, 1, 3),
    ];
    let all_off = ["lease=false", "write_unlock=false", "delayed_lock=false"];
    let got = dmtx_suite::assert_budgets(|| make(&quiet(&all_off)), 2, 20, &occ);
    // No W upgrade in RTT2: the execution CAS took the write lock.
    let rw = &got[2].attempt;
    assert_eq!(
        rw.ops_of(OpKind::Cas),
        2 + 2,
        "2 lock CAS in RTT1, 2 unlock CAS in RTT4"
    );
    let upper = [RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 1, 0)];
    dmtx_suite::assert_budgets(|| make(&quiet(&["lease_us=0", "upper_bound=true"])), 2, 20, &upper);
    assert_eq!(make(&quiet(&["upper_bound=true"])).isolation(), Isolation::Unchecked);
    assert!(Oocc::from_knobs(&knobs(&["one_op_unlock=true", "write_unlock=false"])).is_err());
}

/// Goal: every knob `from_knobs` reads is declared, so the command line accepts it.
#[test]
fn every_knob_is_declared() {
    let all = knobs(&[
        "lease_us=7",
        "drift_ppm_max=500",
        "addr_cache=false",
        "reread_max=2",
        "log_bytes=8192",
        "one_op_unlock=true",
        "lease=true",
        "write_unlock=true",
        "delayed_lock=true",
        "upper_bound=false",
        "offset_ns=20",
        "lease_adjust=true",
        "lease_adjust_period_ms=0.5",
        "omit_target=0.9",
        "lease_us_min=2",
        "lease_us_max=100",
        "clock_check=true",
        "clock_check_period_ms=10",
    ]);
    all.check_known(&[Oocc::KNOBS]).expect("every knob declared");
    let p = make(&all);
    let lease = p.config().lease();
    assert_eq!(
        (lease.rv_ns, lease.ww_ns),
        (7_000 - 20, 7_000 + 20),
        "offset_ns overrides"
    );
    assert!(Oocc::from_knobs(&knobs(&["omit_target=2"])).is_err());
}
