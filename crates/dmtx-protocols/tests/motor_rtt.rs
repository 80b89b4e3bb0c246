//! Motor's round-trip budget (issue 28 item 6), through the verb counters: read-only 2,
//! read-write without RO data 3, read-write with RO data 4 (SR) or 3 (SI), insert 3,
//! delete 3; an address-cache miss adds none (the bucket READ replaces the CVT READ).
//! Timestamps are `oracle` (free); with `ts=faa` they are counted in `ts_rtts`, never in
//! `rtts`.

use dmtx_protocols::motor::Motor;
use dmtx_runtime::{Knobs, Protocol};
use dmtx_suite::{Cache, RttBudget, TxnKind};

const SR_BUDGET: [RttBudget; 11] = [
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Warm, 2, 0),
    RttBudget::new(TxnKind::ReadOnlyOne, Cache::Cold, 2, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Warm, 2, 0),
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 2, 0),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 2, 1).background(1),
    RttBudget::new(TxnKind::ReadWrite, Cache::Cold, 2, 1).background(1),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 2, 2).background(1),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Cold, 2, 2).background(1),
    RttBudget::new(TxnKind::Insert, Cache::Cold, 2, 1).background(1),
    RttBudget::new(TxnKind::Delete, Cache::Warm, 2, 1).background(1),
    RttBudget::new(TxnKind::Delete, Cache::Cold, 2, 1).background(1),
];

const SI_BUDGET: [RttBudget; 4] = [
    RttBudget::new(TxnKind::ReadOnlyMany, Cache::Cold, 2, 0),
    RttBudget::new(TxnKind::ReadWrite, Cache::Warm, 2, 1).background(1),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Warm, 2, 1).background(1),
    RttBudget::new(TxnKind::ReadWriteWithRo, Cache::Cold, 2, 1).background(1),
];

fn make<'a>(knobs: &'a [&'a str]) -> impl Fn() -> Motor + 'a {
    move || Motor::from_knobs(&Knobs::parse(knobs.iter().copied()).unwrap()).unwrap()
}

#[test]
fn motor_sr_meets_its_round_trip_budget() {
    for replicas in [1, 3] {
        dmtx_suite::assert_budgets(make(&[]), replicas, 20, &SR_BUDGET);
    }
}

#[test]
fn motor_si_drops_the_validation_round() {
    dmtx_suite::assert_budgets(make(&["isolation=si"]), 2, 20, &SI_BUDGET);
}

/// Goal: FAA timestamps cost timestamp round trips, never memory-node ones: the same
/// budget holds, and `ts_rtts` counts the FAAs.
#[test]
fn faa_timestamps_are_counted_apart() {
    let m = dmtx_suite::assert_budgets(make(&["ts=faa"]), 2, 20, &SR_BUDGET[4..6]);
    for row in m {
        assert!(row.attempt.ts_rtts >= 2, "{:?}", row.attempt);
    }
}
