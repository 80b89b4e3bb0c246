//! TPC-C tests: keys, NURand, knobs, population, each transaction under FORD, the
//! consistency conditions after runs in both variants, and corrupted snapshots.

use std::collections::HashSet;

use bytemuck::Pod;
use dmtx_runtime::{AbortReason, CoordId};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::schema::*;
use super::*;
use crate::testkit::{self, knobs};
use crate::{InvariantError, Outcome, RecordSink, Snapshot, Workload};
use dmtx_runtime::{Abort, Coordinator, KnobError, KnobSpec, Knobs, Protocol};
use dmtx_store::{StoreError, TableSpec};

fn tpcc(pairs: &[&str]) -> Tpcc {
    Tpcc::from_knobs(&knobs(pairs)).unwrap()
}

/// A small database: fast to load, still every table and path.
fn small(extra: &[&str]) -> Tpcc {
    let mut pairs = vec!["items=1000", "customers=60", "new_orders_max=3000", "payments_max=3000"];
    pairs.extend_from_slice(extra);
    tpcc(&pairs)
}

fn coord(coroutine: u16) -> CoordId {
    CoordId {
        cn: 0,
        thread: 0,
        coroutine,
    }
}

#[test]
fn keys_put_the_warehouse_in_the_low_12_bits_and_are_unique() {
    let mut seen: Vec<HashSet<u64>> = vec![HashSet::new(); TABLE_COUNT as usize];
    let mut put = |t: u32, k: u64| assert!(seen[t as usize].insert(k), "table {t}: key {k:#x} twice");
    for w in [1u32, 2, 7, 4095] {
        assert_eq!(shard(warehouse_key(w)), w);
        put(WAREHOUSE_ID, warehouse_key(w));
        for d in 1..=DISTRICTS {
            let dk = district_key(w, d);
            assert_eq!((key_w(dk), key_wd(DISTRICT_ID, dk).1), (w, d));
            put(DISTRICT_ID, dk);
            for c in [1u32, 2, 1000, 2999, 3000] {
                let k = customer_key(w, d, c);
                assert_eq!(unpack_customer(k), (w, d, c));
                put(CUSTOMER_ID, k);
            }
            for name in [0u32, 1, 999] {
                let k = customer_name_key(w, d, name);
                assert_eq!(key_wd(CUSTOMER_NAME_ID, k), (w, d));
                put(CUSTOMER_NAME_ID, k);
            }
            for o in [1u32, 2, 3000, 3001, u32::MAX] {
                let k = order_key(w, d, o);
                assert_eq!(unpack_order(k), (w, d, o));
                put(ORDER_ID, k);
                for ol in [1u32, 2, 15] {
                    let k = order_line_key(w, d, o, ol);
                    assert_eq!(unpack_order_line(k), (w, d, o, ol));
                    assert_eq!(shard(k), w);
                    put(ORDER_LINE_ID, k);
                }
            }
            for coord in [0u32, 1, (1 << 24) - 1, 1 << 24] {
                for seq in [0u32, 1, (1 << HISTORY_SEQ_BITS) - 1] {
                    let k = history_key(w, d, coord, seq);
                    assert_eq!(key_wd(HISTORY_ID, k), (w, d));
                    put(HISTORY_ID, k);
                }
            }
        }
        for i in [1u32, 2, 99_999, 100_000] {
            let k = stock_key(w, i);
            assert_eq!(shard(k), w, "STOCK's critical field is the supplying warehouse");
            assert_eq!(k >> SHARD_BITS, i as u64);
            put(STOCK_ID, k);
        }
    }
    // ITEM: unique, and spread over shards (no critical field).
    let mut shards = HashSet::new();
    for i in 1..=100_000u32 {
        let k = item_key(i);
        assert_eq!(k >> SHARD_BITS, i as u64);
        put(ITEM_ID, k);
        shards.insert(shard(k));
    }
    assert!(shards.len() > 4000, "{} shards", shards.len());
}

#[test]
fn nurand_stays_in_range_skews_and_keeps_the_c_delta_rule() {
    let mut rng = SmallRng::seed_from_u64(5);
    for _ in 0..2000 {
        let load = NuRandC::load(&mut rng);
        assert!(load.c_last <= A_C_LAST && load.c_id <= A_C_ID && load.ol_i_id <= A_OL_I_ID);
        let run = NuRandC::run(&mut rng, &load);
        assert!(run.c_last_delta_ok(&load), "{load:?} {run:?}");
        let delta = run.c_last.abs_diff(load.c_last);
        assert!((65..=119).contains(&delta) && delta != 96 && delta != 112);
        assert!(run.c_last <= A_C_LAST);
    }
    // The workload's own constants obey the rule too.
    let (load, run) = tpcc(&[]).nurand_c();
    assert!(run.c_last_delta_ok(&load));
    // In range, and non-uniform: the most frequent C_ID is far above the mean.
    let mut counts = vec![0u32; 3001];
    for _ in 0..300_000 {
        let c = nurand(&mut rng, A_C_ID, 1, 3000, 17);
        assert!((1..=3000).contains(&c));
        counts[c as usize] += 1;
    }
    assert_eq!(counts[0], 0);
    assert!(*counts.iter().max().unwrap() > 3 * 100, "NURand(1023) is skewed");
    for _ in 0..10_000 {
        assert!(nurand(&mut rng, A_OL_I_ID, 1, 100_000, 4000) <= 100_000);
        assert!(nurand(&mut rng, A_C_LAST, 0, 999, 200) <= 999);
    }
    assert_eq!(&last_name(371)[..], b"PRICALLYOUGHT\0\0\0");
    assert_eq!(&last_name(0)[..9], b"BARBARBAR");
}

#[test]
fn knobs_defaults_mix_and_errors() {
    let w = tpcc(&[]);
    assert_eq!(w.config(), &TpccConfig::default());
    assert_eq!(w.txn_types(), &TXN_TYPES);
    // Weights are normalized: OOCC's 45/40/4/4/4 sums to 97, RCBench's runs two types.
    for (mix, want) in [
        ("45,40,4,4,4", [45u32, 40, 4, 4, 4]),
        ("50,50,0,0,0", [50, 50, 0, 0, 0]),
    ] {
        let w = tpcc(&[&format!("mix={mix}")]);
        let total: u32 = want.iter().sum();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut counts = [0u32; 5];
        for _ in 0..100_000 {
            counts[w.pick_type(&mut rng)] += 1;
        }
        for t in 0..5 {
            let share = counts[t] as f64 / 100_000.0;
            let expect = want[t] as f64 / total as f64;
            assert!((share - expect).abs() < 0.01, "{mix}: type {t} {share} vs {expect}");
        }
    }
    let w = tpcc(&["tpcc_variant=ford", "home_warehouse=coordinator", "warehouses=3"]);
    assert_eq!(w.config().variant, Variant::Ford);
    let homes: Vec<_> = (0..6).map(|c| w.local(coord(c), 1).home.unwrap()).collect();
    assert_eq!(homes, [1, 2, 3, 1, 2, 3]);
    for (bad, needle) in [
        ("tpcc_variant=tpcc", "`spec` or `ford`"),
        ("warehouses=0", "1..=4095"),
        ("warehouses=4096", "1..=4095"),
        ("home_warehouse=x", "`uniform` or `coordinator`"),
        ("mix=1,2,3", "five comma-separated"),
        ("mix=0,0,0,0,0", "positive"),
        ("mix=1,x,0,0,0", "`x`"),
        ("items=99", "100..=100000"),
        ("customers=35", "multiple of 10"),
        ("customers=3010", "30..=3000"),
        ("new_orders_max=-1", "`new_orders_max` = `-1`"),
    ] {
        let e = Tpcc::from_knobs(&knobs(&[bad])).unwrap_err().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
    }
}

#[test]
fn population_of_one_warehouse_follows_4_3_3_1() {
    // Goal: the full-scale population of one warehouse has the spec's cardinalities,
    // and the secondary paths agree with the base tables.
    let w = tpcc(&["warehouses=1", "new_orders_max=10000", "payments_max=10000"]);
    let mut counts = [0u64; TABLE_COUNT as usize];
    let mut names_listed = 0u64;
    let mut first_new_orders = Vec::new();
    let mut lines_by_order = std::collections::HashMap::<u64, u8>::new();
    let mut ol_cnt_sum = 0u64;
    for t in 0..TABLE_COUNT {
        w.load(t, &mut |k, v| {
            assert_eq!(v.len(), VALUE_BYTES[t as usize] as usize);
            counts[t as usize] += 1;
            match t {
                CUSTOMER_NAME_ID => {
                    let rec: CustomerName = bytemuck::pod_read_unaligned(v);
                    assert!(rec.count >= 1 && rec.count as usize <= NAME_IDS_MAX);
                    names_listed += rec.count as u64;
                }
                NEW_ORDER_ID => first_new_orders.push(unpack_order(k).2),
                ORDER_ID => {
                    let o: Order = bytemuck::pod_read_unaligned(v);
                    assert!((5..=15).contains(&o.ol_cnt));
                    assert_eq!(o.carrier_id == 0, unpack_order(k).2 >= 2101);
                    ol_cnt_sum += o.ol_cnt as u64;
                    lines_by_order.insert(k, o.ol_cnt);
                }
                _ => {}
            }
            Ok(())
        })
        .unwrap();
    }
    assert_eq!(counts[WAREHOUSE_ID as usize], 1);
    assert_eq!(counts[DISTRICT_ID as usize], 10);
    assert_eq!(counts[CUSTOMER_ID as usize], 30_000);
    assert_eq!(counts[HISTORY_ID as usize], 30_000);
    assert_eq!(counts[ORDER_ID as usize], 30_000);
    assert_eq!(counts[NEW_ORDER_ID as usize], 9_000);
    assert_eq!(counts[ITEM_ID as usize], 100_000);
    assert_eq!(counts[STOCK_ID as usize], 100_000);
    assert_eq!(counts[ORDER_LINE_ID as usize], ol_cnt_sum);
    let avg = ol_cnt_sum as f64 / 30_000.0;
    assert!((avg - 10.0).abs() < 0.2, "{avg} lines per order");
    assert_eq!(
        counts[CUSTOMER_NAME_ID as usize],
        10 * 1000,
        "every name in every district"
    );
    assert_eq!(names_listed, 30_000);
    assert_eq!(counts[LAST_ORDER_ID as usize], 30_000);
    assert_eq!(counts[DELIVERY_CURSOR_ID as usize], 10);
    assert_eq!(*first_new_orders.iter().min().unwrap(), 2101);
    assert_eq!(*first_new_orders.iter().max().unwrap(), 3000);
    // Every table fits its spec capacity, and CUSTOMER is the largest record (672 B).
    for spec in w.tables() {
        assert!(counts[spec.id as usize] <= spec.capacity, "{}", spec.name);
    }
    assert_eq!(VALUE_BYTES.iter().max(), Some(&672));
    assert_eq!(VALUE_BYTES[CUSTOMER_ID as usize], 672);
    // Names list customers by C_FIRST.
    let d_names = w.district_names(1, 1);
    let mut checked = 0;
    w.load(CUSTOMER_NAME_ID, &mut |k, v| {
        let rec: CustomerName = bytemuck::pod_read_unaligned(v);
        let (wk, d) = key_wd(CUSTOMER_NAME_ID, k);
        if (wk, d) == (1, 1) {
            let name = ((k >> SHARD_BITS) & 0xfff) as u16;
            let ids = &rec.c_ids[..rec.count as usize];
            assert!(ids
                .windows(2)
                .all(|p| d_names[p[0] as usize - 1].1 <= d_names[p[1] as usize - 1].1));
            assert!(ids.iter().all(|&c| d_names[c as usize - 1].0 == name));
            checked += 1;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(checked, 1000);
}

/// Every loaded record, after `edit` (which may change the value, or drop it by
/// returning false).
fn loaded(w: &Tpcc, mut edit: impl FnMut(u32, u64, &mut [u8]) -> bool) -> Snapshot {
    let mut s = Snapshot::new();
    for spec in w.tables() {
        w.load(spec.id, &mut |k, v| {
            let mut v = v.to_vec();
            if edit(spec.id, k, &mut v) {
                s.push(spec.id, k, &v);
            }
            Ok(())
        })
        .unwrap();
    }
    s.seal();
    s
}

/// Change a record in place.
fn modify<T: Pod>(v: &mut [u8], f: impl FnOnce(&mut T)) {
    let mut r: T = bytemuck::pod_read_unaligned(v);
    f(&mut r);
    v.copy_from_slice(bytemuck::bytes_of(&r));
}

#[test]
fn each_condition_catches_a_corrupted_snapshot() {
    // Goal: every check fires on the corruption it is for (and not an earlier one).
    // Method: load a small database into a snapshot, corrupt one thing, check.
    let w = tpcc(&[
        "warehouses=2",
        "items=100",
        "customers=30",
        "new_orders_max=100",
        "payments_max=100",
    ]);
    let n = 30u32;
    w.check(&[], &loaded(&w, |_, _, _| true)).unwrap();
    type Edit = Box<dyn FnMut(u32, u64, &mut [u8]) -> bool>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "tpcc_condition_1",
            Box::new(|t, k, v| {
                if t == WAREHOUSE_ID && k == warehouse_key(2) {
                    modify::<Warehouse>(v, |r| r.ytd += 1);
                }
                true
            }),
        ),
        (
            "tpcc_condition_8",
            Box::new(|t, k, v| {
                if t == WAREHOUSE_ID && k == warehouse_key(1) {
                    modify::<Warehouse>(v, |r| r.ytd += 5);
                }
                if t == DISTRICT_ID && k == district_key(1, 3) {
                    modify::<District>(v, |r| r.ytd += 5);
                }
                true
            }),
        ),
        (
            "tpcc_condition_9",
            Box::new(|t, k, v| {
                if t == DISTRICT_ID && k == district_key(1, 3) {
                    modify::<District>(v, |r| r.ytd += 5);
                }
                if t == DISTRICT_ID && k == district_key(1, 4) {
                    modify::<District>(v, |r| r.ytd -= 5);
                }
                true
            }),
        ),
        (
            "tpcc_condition_2",
            Box::new(|t, k, v| {
                if t == DISTRICT_ID && k == district_key(2, 10) {
                    modify::<District>(v, |r| r.next_o_id += 1);
                }
                true
            }),
        ),
        (
            // The newest NEW-ORDER row gone: max(NO_O_ID) ≠ max(O_ID).
            "tpcc_condition_2",
            Box::new(move |t, k, _| !(t == NEW_ORDER_ID && k == order_key(1, 1, n))),
        ),
        (
            // A NEW-ORDER row from the middle gone (its order marked delivered, for 5).
            "tpcc_condition_3",
            Box::new(move |t, k, v| {
                if t == ORDER_ID && k == order_key(1, 2, n - 3) {
                    modify::<Order>(v, |r| r.carrier_id = 1);
                }
                !(t == NEW_ORDER_ID && k == order_key(1, 2, n - 3))
            }),
        ),
        (
            "tpcc_condition_4",
            Box::new(|t, k, _| !(t == ORDER_LINE_ID && k == order_line_key(2, 5, 3, 2))),
        ),
        (
            "tpcc_condition_5",
            Box::new(move |t, k, v| {
                if t == ORDER_ID && k == order_key(1, 1, n) {
                    modify::<Order>(v, |r| r.carrier_id = 4);
                }
                true
            }),
        ),
        (
            // An undelivered order without its NEW-ORDER row (the oldest, so 2 and 3 hold).
            "tpcc_condition_5",
            Box::new(move |t, k, _| !(t == NEW_ORDER_ID && k == order_key(2, 7, n / 10 * 7 + 1))),
        ),
        (
            // O_OL_CNT moved between two orders of a district: Σ unchanged, 4 holds.
            "tpcc_condition_6",
            Box::new(|t, k, v| {
                if t == ORDER_ID && k == order_key(1, 1, 1) {
                    modify::<Order>(v, |r| r.ol_cnt += 1);
                }
                if t == ORDER_ID && k == order_key(1, 1, 2) {
                    modify::<Order>(v, |r| r.ol_cnt -= 1);
                }
                true
            }),
        ),
        (
            "tpcc_condition_7",
            Box::new(move |t, k, v| {
                if t == ORDER_LINE_ID && k == order_line_key(1, 1, n, 1) {
                    modify::<OrderLine>(v, |r| r.delivery_d = 9);
                }
                true
            }),
        ),
        (
            "tpcc_condition_12",
            Box::new(|t, k, v| {
                if t == CUSTOMER_ID && k == customer_key(2, 2, 2) {
                    modify::<Customer>(v, |r| r.balance += 1);
                }
                true
            }),
        ),
        (
            "tpcc_last_order",
            Box::new(|t, k, v| {
                if t == LAST_ORDER_ID && k == customer_key(1, 6, 9) {
                    modify::<LastOrder>(v, |r| r.o_id += 1);
                }
                true
            }),
        ),
        (
            "tpcc_delivery_cursor",
            Box::new(|t, k, v| {
                if t == DELIVERY_CURSOR_ID && k == district_key(2, 1) {
                    modify::<DeliveryCursor>(v, |r| r.next_o_id += 1);
                }
                true
            }),
        ),
        (
            "tpcc_capacity",
            Box::new(move |t, k, v| {
                if t == DISTRICT_ID && k == district_key(1, 1) {
                    modify::<District>(v, |r| r.next_o_id = n + 1 + 10);
                }
                true
            }),
        ),
        (
            "tpcc_capacity",
            Box::new(|t, k, v| {
                if t == DISTRICT_ID && k == district_key(1, 1) {
                    modify::<District>(v, |r| r.payments = 10);
                }
                true
            }),
        ),
        (
            "tpcc_records",
            Box::new(|t, k, _| !(t == DISTRICT_ID && k == district_key(2, 2))),
        ),
    ];
    for (want, edit) in cases {
        let e = w.check(&[], &loaded(&w, edit)).unwrap_err();
        assert_eq!(e.invariant, want, "{e}");
    }
    // Committed transactions the tables do not show.
    let s = loaded(&w, |_, _, _| true);
    for ty in [NEW_ORDER_TXN, PAYMENT_TXN] {
        let mut l = w.local(coord(0), 1);
        l.committed[ty] = 1;
        let e = w.check(&[l], &s).unwrap_err();
        assert_eq!(e.invariant, "tpcc_rows", "{e}");
    }
    // The ford variant delivers out of order: 3 is not its condition, 5 still is.
    let f = tpcc(&[
        "warehouses=2",
        "items=100",
        "customers=30",
        "new_orders_max=100",
        "payments_max=100",
        "tpcc_variant=ford",
    ]);
    let hole = |t: u32, k: u64, v: &mut [u8]| {
        if t == ORDER_ID && k == order_key(1, 2, n - 3) {
            modify::<Order>(v, |r| r.carrier_id = 1);
        }
        if t == ORDER_LINE_ID && unpack_order_line(k).2 == n - 3 && key_wd(t, k) == (1, 2) {
            // Delivered lines, their amounts not yet billed (12 holds).
            modify::<OrderLine>(v, |r| {
                r.delivery_d = 1;
                r.amount = 0;
            });
        }
        !(t == NEW_ORDER_ID && k == order_key(1, 2, n - 3))
    };
    f.check(&[], &loaded(&f, hole)).unwrap();
}

fn run(w: &Tpcc, coordinators: u16, txns: usize, seed: u64) -> testkit::Run<Tpcc> {
    let run = testkit::run_under_ford(w, coordinators, txns, seed);
    let desc = w
        .check(&run.locals, &run.snapshot)
        .unwrap_or_else(|e| panic!("{e}; {run:?}"));
    assert!(desc.contains("consistency conditions"), "{desc}");
    let local: u64 = run.locals.iter().flat_map(|l| l.committed.iter()).sum::<u64>()
        + run.locals.iter().map(|l| l.rolled_back).sum::<u64>();
    assert_eq!(local, run.committed.iter().sum::<u64>(), "{run:?}");
    run
}

#[test]
fn new_order_commits_inserts_and_rolls_back_one_percent() {
    let w = small(&["warehouses=2", "mix=1,0,0,0,0"]);
    let r = run(&w, 4, 150, 11);
    let rolled: u64 = r.locals.iter().map(|l| l.rolled_back).sum();
    let committed: u64 = r.locals.iter().map(|l| l.committed[NEW_ORDER_TXN]).sum();
    // Skewed items (NURand over 1000) and 20 districts: many lock conflicts.
    assert!(committed > 200, "{r:?}");
    assert!(rolled > 0 && rolled < 30, "{rolled} rolled back of 600; {r:?}");
    assert_eq!(r.snapshot.len(ORDER_ID) as u64, 2 * 10 * 60 + committed);
    // No lines from an unused item.
    assert!(r
        .snapshot
        .iter(ORDER_LINE_ID)
        .all(|(_, v)| bytemuck::pod_read_unaligned::<OrderLine>(v).i_id <= 1000));
    // Remote supply happened somewhere, and S_REMOTE_CNT counts it.
    let remote: u64 = r
        .snapshot
        .iter(STOCK_ID)
        .map(|(_, v)| bytemuck::pod_read_unaligned::<Stock>(v).remote_cnt as u64)
        .sum();
    let all_local_false = r
        .snapshot
        .iter(ORDER_ID)
        .filter(|(_, v)| bytemuck::pod_read_unaligned::<Order>(v).all_local == 0)
        .count();
    assert!(remote > 0 && all_local_false > 0, "{remote} {all_local_false}");

    // The ford variant never rolls back.
    let f = small(&["warehouses=2", "mix=1,0,0,0,0", "tpcc_variant=ford"]);
    let r = run(&f, 4, 100, 12);
    assert_eq!(r.locals.iter().map(|l| l.rolled_back).sum::<u64>(), 0);
}

#[test]
fn payment_moves_money_by_id_by_name_and_remote() {
    let w = small(&["warehouses=2", "mix=0,1,0,0,0"]);
    let r = run(&w, 4, 150, 21);
    let committed: u64 = r.locals.iter().map(|l| l.committed[PAYMENT_TXN]).sum();
    // Every Payment writes its W_YTD: with 2 warehouses most conflict.
    assert!(committed > 80, "{r:?}");
    let remote = r
        .snapshot
        .iter(HISTORY_ID)
        .filter(|&(k, v)| bytemuck::pod_read_unaligned::<History>(v).c_w_id as u32 != key_w(k))
        .count();
    assert!(remote > 3, "{remote} remote payments");
    // "BC" customers got the payment in front of C_DATA.
    let bc_paid = r
        .snapshot
        .iter(CUSTOMER_ID)
        .map(|(_, v)| bytemuck::pod_read_unaligned::<Customer>(v))
        .filter(|c| &c.credit == b"BC" && c.payment_cnt > 1)
        .count();
    assert!(bc_paid > 0);
    let f = small(&["warehouses=1", "mix=0,1,0,0,0", "tpcc_variant=ford"]);
    run(&f, 3, 100, 22);
}

#[test]
fn order_status_reads_in_both_variants() {
    for variant in ["spec", "ford"] {
        let w = small(&["warehouses=1", "mix=1,0,1,0,0", &format!("tpcc_variant={variant}")]);
        let r = run(&w, 4, 100, 31);
        assert!(r.committed[ORDER_STATUS_TXN] > 50, "{variant}: {r:?}");
    }
}

#[test]
fn delivery_delivers_the_oldest_and_skips_empty_districts() {
    // 60 customers per district: 18 loaded new orders each. 25 Deliveries (with no
    // NewOrders) empty every district, so the last ones skip, after a cursor refresh.
    let w = small(&["warehouses=1", "mix=0,0,0,1,0"]);
    let r = run(&w, 1, 25, 41);
    let delivered: u64 = r.locals.iter().map(|l| l.delivered).sum();
    let skipped: u64 = r.locals.iter().map(|l| l.deliveries_skipped).sum();
    let commits = r.committed[DELIVERY_TXN];
    assert_eq!(delivered + skipped, 10 * commits, "{r:?}");
    assert_eq!(delivered, 180, "every loaded new order delivered: {r:?}");
    assert_eq!(skipped, 70);
    assert_eq!(r.snapshot.len(NEW_ORDER_ID), 0);
    // With NewOrders in the mix, deliveries continue past the loaded orders.
    let w = small(&["warehouses=2", "mix=6,0,0,1,0"]);
    let r = run(&w, 4, 120, 42);
    assert!(r.committed[DELIVERY_TXN] > 5, "{r:?}");
    // Ford: random loaded orders; delivered ones are skipped.
    let f = small(&["warehouses=2", "mix=0,0,0,1,0", "tpcc_variant=ford"]);
    let r = run(&f, 2, 20, 43);
    let delivered: u64 = r.locals.iter().map(|l| l.delivered).sum();
    let skipped: u64 = r.locals.iter().map(|l| l.deliveries_skipped).sum();
    assert_eq!(delivered + skipped, 10 * r.committed[DELIVERY_TXN]);
    assert!(delivered > 0 && skipped > 0, "{delivered} {skipped}");
}

#[test]
fn stock_level_reads_the_last_twenty_orders() {
    // Read-only, it aborts when a NewOrder of its district commits meanwhile.
    let w = small(&["warehouses=2", "mix=1,0,0,0,1"]);
    let r = run(&w, 3, 40, 51);
    assert!(r.committed[STOCK_LEVEL_TXN] > 5, "{r:?}");
}

#[test]
fn the_standard_mix_keeps_every_condition_in_both_variants() {
    for (variant, home) in [("spec", "uniform"), ("ford", "uniform"), ("spec", "coordinator")] {
        let w = small(&[
            "warehouses=2",
            &format!("tpcc_variant={variant}"),
            &format!("home_warehouse={home}"),
        ]);
        let r = run(&w, 6, 80, 61);
        assert!(
            r.committed[NEW_ORDER_TXN] > 20 && r.committed[PAYMENT_TXN] > 20,
            "{variant}: {r:?}"
        );
    }
}

#[test]
fn a_used_up_budget_aborts_table_full_and_fails_the_check() {
    // 10 NewOrders per warehouse: one per district.
    let w = small(&["warehouses=1", "mix=1,0,0,0,0", "new_orders_max=10"]);
    let r = testkit::run_under_ford(&w, 1, 60, 71);
    assert!(r.aborts.get(&AbortReason::TableFull).copied().unwrap_or(0) > 0, "{r:?}");
    let e = w.check(&r.locals, &r.snapshot).unwrap_err();
    assert_eq!(e.invariant, "tpcc_capacity");
    assert!(e.to_string().contains("raise `new_orders_max`"), "{e}");
}

/// TPC-C that records the RTTs of each committed transaction, by type.
struct Measured(Tpcc);

impl Workload for Measured {
    type Local = (TpccLocal, Vec<Vec<u64>>);
    type Input = TpccInput;
    const NAME: &'static str = "tpcc_measured";
    const ABOUT: &'static str = "";
    const KNOBS: &'static [KnobSpec] = &[];
    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        unreachable!()
    }
    fn txn_types(&self) -> &'static [&'static str] {
        self.0.txn_types()
    }
    fn tables(&self) -> Vec<TableSpec> {
        self.0.tables()
    }
    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        self.0.load(table, insert)
    }
    fn local(&self, coord: CoordId, seed: u64) -> Self::Local {
        (self.0.local(coord, seed), vec![Vec::new(); 5])
    }
    fn draw(&self, local: &mut Self::Local) -> (usize, TpccInput) {
        self.0.draw(&mut local.0)
    }
    async fn run<P: Protocol>(
        &self,
        local: &mut Self::Local,
        input: &TpccInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let res = self.0.run(&mut local.0, input, coord).await;
        if res == Ok(Outcome::Committed) {
            local.1[input.type_index()].push(coord.ctx.txn_counters.rtts);
        }
        res
    }
    fn check(&self, locals: &[Self::Local], snapshot: &Snapshot) -> Result<String, InvariantError> {
        let locals: Vec<_> = locals.iter().map(|l| TpccLocal { ..l.0.clone_counts() }).collect();
        self.0.check(&locals, snapshot)
    }
}

impl TpccLocal {
    fn clone_counts(&self) -> TpccLocal {
        TpccLocal {
            rng: SmallRng::seed_from_u64(0),
            home: self.home,
            hist_coord: self.hist_coord,
            hist_seq: self.hist_seq,
            committed: self.committed,
            rolled_back: self.rolled_back,
            delivered: self.delivered,
            deliveries_skipped: self.deliveries_skipped,
            scratch: Default::default(),
        }
    }
}

#[test]
fn round_trips_per_type_match_the_module_doc() {
    // Goal: the RTT column of the module doc's table, on FORD with a warm address cache.
    // Method: one coordinator (no conflicts); the fewest RTTs of a committed txn per
    // type is the warm-cache path (by C_ID, no cursor refresh; ford Delivery with
    // every district skipped).
    for (variant, want) in [("spec", [5u64, 3, 4, 4, 5]), ("ford", [5, 3, 3, 2, 5])] {
        let w = Measured(small(&[
            "warehouses=1",
            "mix=10,10,5,5,5",
            &format!("tpcc_variant={variant}"),
        ]));
        let r = testkit::run_under_ford(&w, 1, 400, 81);
        let locals: Vec<_> = r.locals.iter().map(|l| l.0.clone_counts()).collect();
        w.0.check(&locals, &r.snapshot).unwrap();
        let rtts = &r.locals[0].1;
        for ty in 0..5 {
            let min = rtts[ty].iter().min().copied();
            let max = rtts[ty].iter().max().copied();
            eprintln!(
                "{variant} {}: {} commits, rtts min {min:?} max {max:?}",
                TXN_TYPES[ty],
                rtts[ty].len()
            );
            assert_eq!(min, Some(want[ty]), "{variant} {}", TXN_TYPES[ty]);
        }
    }
}

#[test]
fn one_full_scale_warehouse_fits_a_test_memory_node() {
    // Goal: the module doc's memory figures, and that `run_under_ford`'s 256 MiB per
    // memory node (each holds one replica of every table) takes one full warehouse.
    use dmtx_protocols::ford::{Ford, FordConfig};
    use dmtx_store::TableBuilder;
    let ford = Ford::new(FordConfig::default());
    let bytes = |w: &Tpcc| -> u64 {
        w.tables()
            .into_iter()
            .map(|spec| TableBuilder::new(spec, ford.layout()).shape().table_bytes())
            .sum()
    };
    let one = bytes(&tpcc(&["warehouses=1"]));
    let two = bytes(&tpcc(&["warehouses=2"]));
    let more = bytes(&tpcc(&["warehouses=1", "new_orders_max=40000", "payments_max=40000"]));
    let per_warehouse = two - one;
    eprintln!(
        "1 warehouse {one} B, per warehouse {per_warehouse} B, per NewOrder + Payment {} B",
        (more - one) / 10_000
    );
    assert!(one < 256 << 20, "{one}");
    assert!((200_000_000..230_000_000).contains(&per_warehouse), "{per_warehouse}");
}

/// Goal: every TPC-C table declares the spec's columns (§1.3) at the spec's widths, and
/// they tile the value. Method: the declared schemas against the widths of the spec's
/// character columns and the integer widths of the record types.
#[test]
fn every_table_declares_the_spec_columns_at_their_widths() {
    let s = testkit::declared_schemas(&small(&[]));
    assert_eq!(s.len(), TABLE_COUNT as usize);
    let width = |table: &str, col: &str| -> u32 {
        s[table]
            .iter()
            .find(|(n, _)| n == col)
            .unwrap_or_else(|| panic!("{table} has no attribute {col}"))
            .1
    };
    // The spec's character columns: (table, column, width).
    let spec_widths = [
        ("warehouse", "w_name", 10),
        ("warehouse", "w_street_1", 20),
        ("warehouse", "w_street_2", 20),
        ("warehouse", "w_city", 20),
        ("warehouse", "w_state", 2),
        ("warehouse", "w_zip", 9),
        ("district", "d_name", 10),
        ("district", "d_zip", 9),
        ("customer", "c_first", 16),
        ("customer", "c_middle", 2),
        ("customer", "c_last", 16),
        ("customer", "c_street_1", 20),
        ("customer", "c_phone", 16),
        ("customer", "c_credit", 2),
        ("customer", "c_data", 500),
        ("history", "h_data", 24),
        ("order_line", "ol_dist_info", 24),
        ("item", "i_name", 24),
        ("item", "i_data", 50),
        ("stock", "s_data", 50),
        ("stock", "s_dist_01", 24),
        ("stock", "s_dist_10", 24),
    ];
    for (t, c, w) in spec_widths {
        assert_eq!(width(t, c), w, "{t}.{c}");
    }
    // Motor §4.2's example: NewOrder changes DISTRICT's 4-byte D_NEXT_O_ID.
    assert_eq!(width("district", "d_next_o_id"), 4);
    assert_eq!(width("customer", "c_balance"), 8);
    assert_eq!(s["stock"].iter().filter(|(n, _)| n.starts_with("s_dist_")).count(), 10);
}
