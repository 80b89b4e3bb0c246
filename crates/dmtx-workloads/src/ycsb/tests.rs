//! YCSB's tests: knobs, distributions, the value scheme, the invariant check, runs under FORD.

use std::cell::RefCell;
use std::sync::Arc;

use dmtx_memnode::LocalCluster;
use dmtx_protocols::ford::{Ford, FordConfig, FordVariant};
use dmtx_runtime::{block_on, scan_table, Cn, LocalExecutor, RealClock};
use dmtx_store::{create_table, placement, TableBuilder};

use super::record::{stamp, write_field, Damage};
use super::*;
use crate::testkit::{self, knobs};

fn ycsb(pairs: &[&str]) -> Ycsb {
    Ycsb::from_knobs(&knobs(pairs)).unwrap()
}

fn coord(coroutine: u16) -> CoordId {
    CoordId {
        cn: 0,
        thread: 0,
        coroutine,
    }
}

#[test]
fn from_knobs_defaults_presets_and_errors() {
    let y = Ycsb::from_knobs(&Knobs::default()).unwrap();
    assert_eq!(y.config(), &YcsbConfig::default());
    assert_eq!(y.record_bytes(), 1000);
    assert_eq!(y.txn_types(), ["read_only", "read_write"]);
    let a = ycsb(&["core=A"]);
    assert_eq!(a.config(), &YcsbConfig::preset(Preset::A));
    assert_eq!((a.config().write_ratio, a.config().zipf_theta), (0.5, 0.99));
    assert_eq!(ycsb(&["core=c", "zipf_theta=0.5"]).config().zipf_theta, 0.5);
    assert_eq!(ycsb(&["core=d"]).txn_types(), ["read_only", "insert"]);
    let t = ycsb(&["write_unit=TXN", "update=field", "write_ratio=1"])
        .config()
        .clone();
    assert_eq!(
        (t.write_unit, t.update, t.write_ratio),
        (WriteUnit::Txn, UpdateScope::Field, 1.0)
    );
    for (bad, needle) in [
        ("core=e", "range"),
        ("core=g", "expected one of none, a, b, c, d, f"),
        ("write_unit=ops", "did you mean `op`"),
        ("update=fields", "did you mean `field`"),
        ("records=0", "`records` = `0`"),
        ("records=x", "`records` = `x`"),
        ("fields=0", "1..=64"),
        ("fields=65", "1..=64"),
        ("field_bytes=7", "8-byte stamp"),
        ("ops_per_txn=0", "1..=32"),
        ("ops_per_txn=33", "1..=32"),
        ("zipf_theta=1", "[0, 1)"),
        ("write_ratio=1.5", "must be in [0, 1]"),
        ("partitions=0", "1..=256"),
        ("partitions=257", "1..=256"),
        ("nodes_per_txn=3", "raise `partitions`"),
        ("insert_room=5", "only core workload d inserts"),
    ] {
        let e = Ycsb::from_knobs(&knobs(&[bad])).unwrap_err().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
    }
    for (bad, needle) in [
        (
            &["core=a", "write_ratio=0.1"][..],
            "knob `write_ratio` = `0.1`: core workload a fixes the mix",
        ),
        (&["core=b", "write_unit=txn"], "drop `write_unit` or set core=none"),
        (&["fields=64", "field_bytes=65536"], "lower `fields` or `field_bytes`"),
        (&["records=5"], "raise `records` or lower `ops_per_txn`"),
        (
            &["partitions=4", "nodes_per_txn=4", "ops_per_txn=3"],
            "`ops_per_txn` is 3",
        ),
        (
            &["records=10", "partitions=2", "nodes_per_txn=1"],
            "a partition holds 5 records",
        ),
    ] {
        let e = Ycsb::from_knobs(&knobs(bad)).unwrap_err().to_string();
        assert!(e.contains(needle), "{bad:?}: {e}");
    }
    // The config API refuses a preset with another mix, too.
    let cfg = YcsbConfig {
        write_ratio: 0.3,
        ..YcsbConfig::preset(Preset::B)
    };
    assert!(Ycsb::new(cfg)
        .unwrap_err()
        .to_string()
        .contains("core workload b fixes"));
}

#[test]
fn tables_and_load_partition_the_key_space() {
    let y = ycsb(&["records=1003", "partitions=4", "fields=3", "field_bytes=12"]);
    let specs = y.tables();
    assert_eq!(specs.len(), 4);
    let mut all = Vec::new();
    for (p, spec) in specs.iter().enumerate() {
        assert_eq!((spec.id, spec.value_bytes), (p as u32, 36));
        let loaded = y.partition_len(p as u32);
        assert_eq!(loaded, 250 + u64::from(p < 3));
        assert_eq!(spec.capacity, loaded);
        y.load(p as u32, &mut |key, v| {
            assert_eq!(key % 4, p as u64);
            assert_eq!(y.damage(key, v), Ok((0, 0)));
            assert!(y.damage(key + 4, v).is_err(), "a record does not pass for another key");
            all.push(key);
            Ok(())
        })
        .unwrap();
    }
    all.sort_unstable();
    assert_eq!(all, (0..1003).collect::<Vec<_>>());
    assert!(matches!(
        y.load(4, &mut |_, _| Ok(())),
        Err(StoreError::UnknownTable(4))
    ));
    // Preset D leaves room for inserts.
    let d = ycsb(&["core=d", "records=1000", "partitions=2"]);
    assert_eq!(d.tables()[1].capacity, 500 + 500);
    let d = ycsb(&["core=d", "records=1000", "insert_room=300"]);
    assert_eq!(d.tables()[0].capacity, 1300);
}

#[test]
fn fields_detect_tears_anywhere() {
    let y = ycsb(&["fields=2", "field_bytes=13", "records=100"]);
    let mut rec = vec![0u8; 26];
    y.fill_initial(7, &mut rec);
    assert_eq!(y.apply_update(7, 0, &mut rec), 2);
    assert_eq!(y.damage(7, &rec), Ok((1, 2)));
    for i in 0..rec.len() {
        let mut torn = rec.clone();
        torn[i] ^= 0x10;
        assert!(y.damage(7, &torn).is_err(), "byte {i}");
    }
    // Half a record updated: every field intact, the record not.
    let mut half = rec.clone();
    write_field(&mut half[13..], stamp(7, 1, 2));
    assert_eq!(y.damage(7, &half), Err(Damage::Mixed { min: 1, max: 2 }));
    assert_eq!(y.damage(7, &[0u8; 26]), Err(Damage::Torn { field: 0 }));
    // update=field: fields move on their own.
    let f = ycsb(&["fields=2", "field_bytes=13", "records=100", "update=field"]);
    assert_eq!(f.apply_update(7, 1, &mut rec), 1);
    assert_eq!(f.damage(7, &rec), Ok((2, 3)));
}

/// Write ops and read-write transactions over `txns` plans.
fn mix(y: &Ycsb, txns: usize) -> (f64, f64) {
    let mut local = y.local(coord(1), 3);
    let mut plan = Plan::EMPTY;
    let (mut w_ops, mut ops, mut rw) = (0, 0, 0);
    for _ in 0..txns {
        y.plan(&mut local, &mut plan);
        let w = plan.ops().iter().filter(|o| o.kind != OpKind::Read).count();
        assert_eq!(plan.ty, usize::from(w > 0));
        if y.config().write_unit == WriteUnit::Txn {
            assert!(w == 0 || w == plan.n, "a read-write txn writes every key");
        }
        w_ops += w;
        ops += plan.n;
        rw += plan.ty;
    }
    (w_ops as f64 / ops as f64, rw as f64 / txns as f64)
}

#[test]
fn write_ratio_follows_its_unit() {
    for w in [0.0, 0.05, 0.2, 0.5, 1.0] {
        let ratio = format!("write_ratio={w}");
        let (ops, txns) = mix(&ycsb(&[&ratio, "records=1000"]), 20_000);
        assert!((ops - w).abs() < 0.01, "op unit {w}: {ops} of ops write");
        let want = 1.0 - (1.0 - w).powi(10);
        assert!(
            (txns - want).abs() < 0.015,
            "op unit {w}: {txns} of txns write, want {want}"
        );
        let (ops, txns) = mix(&ycsb(&[&ratio, "records=1000", "write_unit=txn"]), 20_000);
        assert!((txns - w).abs() < 0.015, "txn unit {w}: {txns}");
        assert!((ops - w).abs() < 0.015, "txn unit {w}: {ops}");
    }
    // Presets fix the per-op share (D's writes are inserts).
    for (preset, w) in [("a", 0.5), ("b", 0.05), ("c", 0.0), ("d", 0.05), ("f", 0.5)] {
        let y = ycsb(&[&format!("core={preset}"), "records=1000"]);
        let (ops, _) = mix(&y, 10_000);
        assert!((ops - w).abs() < 0.01, "preset {preset}: {ops}");
    }
}

#[test]
fn nodes_per_txn_touches_exactly_k_partitions_home_first() {
    for (n, k, ops) in [
        (15u32, 15u32, 15u32),
        (15, 3, 15),
        (4, 2, 10),
        (4, 4, 4),
        (3, 1, 10),
        (4, 3, 10),
    ] {
        let y = ycsb(&[
            &format!("partitions={n}"),
            &format!("nodes_per_txn={k}"),
            &format!("ops_per_txn={ops}"),
            "records=3000",
            "zipf_theta=0.99",
        ]);
        let mut local = y.local(coord(2), 9);
        let mut plan = Plan::EMPTY;
        let mut home = vec![0u64; n as usize];
        let txns = 4000;
        for _ in 0..txns {
            y.plan(&mut local, &mut plan);
            let parts = &plan.parts[..plan.k];
            assert_eq!(parts.len(), k as usize);
            let mut sorted = parts.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), k as usize, "{parts:?} not distinct");
            assert!(parts.iter().all(|&p| p < n));
            assert_eq!(plan.ops[0].table, parts[0], "the first op is at home");
            home[parts[0] as usize] += 1;
            let mut per = vec![0u32; k as usize];
            let mut keys: Vec<u64> = plan.ops().iter().map(|o| o.key).collect();
            for o in plan.ops() {
                assert_eq!(o.key % n as u64, o.table as u64, "key {} in table {}", o.key, o.table);
                let at = parts
                    .iter()
                    .position(|&p| p == o.table)
                    .expect("op in a touched partition");
                per[at] += 1;
            }
            assert!(per.iter().all(|&c| c == ops / k || c == ops.div_ceil(k)), "{per:?}");
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), ops as usize, "keys distinct");
        }
        // Homes are uniform over the partitions.
        let expect = txns as f64 / n as f64;
        for (p, &h) in home.iter().enumerate() {
            assert!(
                (h as f64 - expect).abs() < 5.0 * expect.sqrt() + 1.0,
                "n {n} k {k}: home {p} {h}x"
            );
        }
    }
    // RCBench §6.6.1: 15 ops over 15 partitions, 14 of them away from home.
    let y = ycsb(&["partitions=15", "nodes_per_txn=15", "ops_per_txn=15", "records=1500"]);
    let mut local = y.local(coord(2), 1);
    let mut plan = Plan::EMPTY;
    y.plan(&mut local, &mut plan);
    assert_eq!(plan.ops().iter().filter(|o| o.table != plan.parts[0]).count(), 14);
}

#[test]
fn keys_are_distinct_even_when_crowded() {
    for pairs in [
        &["records=10", "zipf_theta=0.99", "ops_per_txn=10"][..],
        &[
            "records=10",
            "zipf_theta=0",
            "ops_per_txn=10",
            "partitions=2",
            "nodes_per_txn=2",
        ],
        &["records=32", "core=d", "ops_per_txn=32"],
    ] {
        let y = ycsb(pairs);
        let mut local = y.local(coord(3), 4);
        let mut plan = Plan::EMPTY;
        for _ in 0..500 {
            y.plan(&mut local, &mut plan);
            let mut keys: Vec<u64> = plan.ops().iter().map(|o| o.key).collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), plan.n, "{pairs:?}");
        }
    }
}

#[test]
fn preset_d_inserts_fresh_keys_and_reads_the_latest() {
    for pairs in [
        &["core=d", "records=1000"][..],
        &["core=d", "records=1000", "partitions=3", "nodes_per_txn=2"],
    ] {
        let y = ycsb(pairs);
        let mut local = y.local(coord(5), 6);
        let compact = coord(5).compact() as u64;
        let mut plan = Plan::EMPTY;
        let (mut newest, mut reads, mut own) = (0u64, 0u64, 0u64);
        for _ in 0..3000 {
            y.plan(&mut local, &mut plan);
            for o in plan.ops() {
                match o.kind {
                    OpKind::Insert => {
                        let (p, i, c) = y.decode_insert(o.key).expect("an insert key");
                        assert_eq!((p, c), (o.table, compact));
                        assert!(i >= local.inserted[p as usize] && i == o.arg);
                    }
                    OpKind::Read => {
                        reads += 1;
                        match y.decode_insert(o.key) {
                            Some((p, i, c)) => {
                                assert_eq!(c, compact);
                                assert!(i < local.inserted[p as usize], "reads only committed inserts");
                                own += 1;
                                newest += u64::from(i + 1 == local.inserted[p as usize]);
                            }
                            None => assert!(o.key < 1000),
                        }
                    }
                    OpKind::Update => panic!("D has no updates"),
                }
            }
            // Pretend it committed.
            for o in plan.ops().iter().filter(|o| o.kind == OpKind::Insert) {
                local.inserted[o.table as usize] += 1;
                local.inserted_total += 1;
            }
        }
        assert!(local.inserted_total > 1000, "{}", local.inserted_total);
        // Latest with θ 0.99: the newest records take the largest share of reads.
        assert!(
            own as f64 > 0.5 * reads as f64,
            "{pairs:?}: {own} of {reads} reads hit own inserts"
        );
        assert!(
            newest as f64 > 0.05 * reads as f64,
            "{pairs:?}: {newest} of {reads} read the newest"
        );
    }
}

/// The loaded tables of `y`, with `edit` applied to every record.
fn snapshot(y: &Ycsb, edit: &dyn Fn(u32, u64, &mut Vec<u8>) -> bool) -> Snapshot {
    let mut s = Snapshot::new();
    for p in 0..y.config().partitions {
        y.load(p, &mut |key, v| {
            let mut v = v.to_vec();
            if edit(p, key, &mut v) {
                s.push(p, key, &v);
            }
            Ok(())
        })
        .unwrap();
    }
    s.seal();
    s
}

#[test]
fn check_catches_broken_tables() {
    let y = ycsb(&["records=40", "partitions=2", "fields=3", "field_bytes=16"]);
    let locals = || vec![y.local(coord(1), 1), y.local(coord(2), 2)];
    let keep = |_: u32, _: u64, _: &mut Vec<u8>| true;
    assert!(y.check(&locals(), &snapshot(&y, &keep)).is_ok());
    type Edit<'a> = Box<dyn Fn(u32, u64, &mut Vec<u8>) -> bool + 'a>;
    let cases: Vec<(&str, Edit)> = vec![
        ("ycsb_key_set", Box::new(|_, k, _| k != 17)),
        (
            "ycsb_record_intact",
            Box::new(|_, k, v| {
                if k == 3 {
                    v[40] ^= 1;
                }
                true
            }),
        ),
        (
            "ycsb_record_intact",
            Box::new(|_, k, v| {
                if k == 6 {
                    y.fill_initial(8, v);
                }
                true
            }),
        ),
        (
            "ycsb_record_atomic",
            Box::new(|_, k, v| {
                if k == 9 {
                    write_field(&mut v[16..32], stamp(9, 1, 1));
                }
                true
            }),
        ),
        (
            "ycsb_write_count",
            Box::new(|_, k, v| {
                if k == 12 {
                    y.apply_update(12, 0, v);
                }
                true
            }),
        ),
        (
            "ycsb_record_size",
            Box::new(|_, _, v| {
                v.push(0);
                true
            }),
        ),
    ];
    for (want, edit) in cases {
        let e = y.check(&locals(), &snapshot(&y, &*edit)).unwrap_err();
        assert_eq!(e.invariant, want, "{e}");
    }
    // A key in the other table, a key no one loaded or inserted.
    let mut s = snapshot(&y, &keep);
    let mut rec = vec![0u8; 48];
    y.fill_initial(5, &mut rec);
    s.push(0, 5, &rec);
    s.seal();
    assert_eq!(y.check(&locals(), &s).unwrap_err().invariant, "ycsb_partition");
    let mut s = snapshot(&y, &keep);
    y.fill_initial(40, &mut rec);
    s.push(0, 40, &rec);
    s.seal();
    assert_eq!(y.check(&locals(), &s).unwrap_err().invariant, "ycsb_key_set");
    // Write counts: what the coordinators counted must be in the table.
    let mut ls = locals();
    ls[1].field_writes = 3;
    assert_eq!(
        y.check(&ls, &snapshot(&y, &keep)).unwrap_err().invariant,
        "ycsb_write_count"
    );
    let mut ls = locals();
    ls[0].bad_reads = 1;
    let e = y.check(&ls, &snapshot(&y, &keep)).unwrap_err();
    assert_eq!(e.invariant, "ycsb_committed_reads_intact");
}

#[test]
fn check_catches_missing_extra_and_duplicate_inserts() {
    let y = ycsb(&["core=d", "records=20", "partitions=2", "fields=2", "field_bytes=8"]);
    let mut ls = vec![y.local(coord(1), 1), y.local(coord(2), 2)];
    let c1 = ls[0].compact;
    ls[0].inserted = vec![2, 1];
    let with = |inserts: &[(u32, u64, u64)]| {
        let mut s = snapshot(&y, &|_, _, _| true);
        for &(p, i, c) in inserts {
            let key = y.insert_key(p, i, c);
            let mut rec = vec![0u8; 16];
            y.fill_initial(key, &mut rec);
            s.push(p, key, &rec);
        }
        s.seal();
        s
    };
    let good = [(0, 0, c1), (0, 1, c1), (1, 0, c1)];
    let desc = y.check(&ls, &with(&good)).unwrap();
    assert!(desc.contains("3 inserted"), "{desc}");
    for bad in [
        &good[..2],                                            // a committed insert is missing
        &[(0, 0, c1), (0, 1, c1), (1, 0, c1), (1, 1, c1)][..], // one more than committed
        &[(0, 0, c1), (0, 0, c1), (1, 0, c1)],                 // one twice
        &[(0, 0, c1), (0, 1, c1), (1, 0, c1), (0, 0, 77)],     // an unknown coordinator's
    ] {
        let e = y.check(&ls, &with(bad)).unwrap_err();
        assert!(matches!(e.invariant, "ycsb_inserts" | "ycsb_key_set"), "{bad:?}: {e}");
    }
    let mut s = with(&good[..2]);
    let key = y.insert_key(1, 0, c1);
    let mut rec = vec![0u8; 16];
    y.fill_initial(key, &mut rec);
    s.push(0, key, &rec);
    s.seal();
    assert_eq!(y.check(&ls, &s).unwrap_err().invariant, "ycsb_partition");
}

/// Run `y` under FORD with 4 coordinators and check its invariants.
fn run_checked(pairs: &[&str], txns: usize) -> (Ycsb, testkit::Run<Ycsb>) {
    let y = ycsb(pairs);
    let run = testkit::run_under_ford(&y, 4, txns, 7);
    assert_eq!(run.attempted(), 4 * txns as u64);
    if let Err(e) = y.check(&run.locals, &run.snapshot) {
        panic!("{pairs:?}: {e} ({run:?})");
    }
    (y, run)
}

#[test]
fn presets_under_ford_keep_the_invariants() {
    // Goal: every preset, run by interleaved coordinators whose transactions conflict
    // on a small hot table, keeps every invariant. Method: run, scan, check.
    let small = ["records=300", "fields=4", "field_bytes=24", "ops_per_txn=4"];
    for preset in ["a", "b", "c", "d", "f"] {
        let p = format!("core={preset}");
        let mut pairs = small.to_vec();
        pairs.push(&p);
        let (_, run) = run_checked(&pairs, 300);
        assert!(run.committed[0] > 0, "{preset}: {run:?}");
        if preset != "c" {
            assert!(run.committed[1] > 0, "{preset}: {run:?}");
        } else {
            assert_eq!(run.committed[1], 0);
        }
        if preset == "d" {
            let inserts: u64 = run.locals.iter().map(|l| l.inserts_committed()).sum();
            assert!(inserts > 0);
            assert_eq!(run.snapshot.len(0), 300 + inserts as usize);
        }
    }
}

#[test]
fn knob_combinations_under_ford_keep_the_invariants() {
    let (_, run) = run_checked(
        &["records=200", "write_unit=txn", "write_ratio=0.5", "zipf_theta=0.99"],
        300,
    );
    let writes: u64 = run.locals.iter().map(|l| l.field_writes_committed()).sum();
    assert_eq!(
        writes,
        run.committed[1] * 10 * 10,
        "every key of a read-write txn, every field"
    );
    assert!(run.committed[1] > 50, "{run:?}");
    run_checked(
        &[
            "records=400",
            "partitions=3",
            "nodes_per_txn=2",
            "update=field",
            "write_ratio=0.5",
            "ops_per_txn=6",
        ],
        300,
    );
    run_checked(
        &[
            "core=d",
            "records=200",
            "partitions=2",
            "nodes_per_txn=2",
            "fields=1",
            "field_bytes=8",
        ],
        300,
    );
    // The default geometry (1 KB records), OOCC's 8-byte records.
    run_checked(&["records=500", "write_ratio=0.5"], 100);
    run_checked(
        &[
            "records=500",
            "fields=1",
            "field_bytes=8",
            "zipf_theta=0.99",
            "write_ratio=0.5",
        ],
        300,
    );
}

/// Run `y` under FORD's `variant` (`coordinators` coroutines of one thread, `txns` each,
/// two memory nodes, two replicas) and check it: `testkit::run_under_ford` with a
/// variant.
fn check_under_ford_variant(
    y: &Ycsb,
    variant: FordVariant,
    coordinators: u16,
    txns: usize,
) -> Result<String, InvariantError> {
    let cluster = LocalCluster::new(2, 64 << 20);
    let ford = Arc::new(Ford::new(FordConfig {
        variant,
        ..FordConfig::default()
    }));
    for spec in y.tables() {
        let mut table = TableBuilder::new(spec.clone(), ford.layout());
        y.load(spec.id, &mut |k, v| table.insert(k, v)).unwrap();
        create_table(&cluster, table, &placement(spec.id, 2, 2).unwrap()).unwrap();
    }
    let fabric = Arc::new(cluster.fabric().clone());
    let cn = Cn::connect(0, fabric, Arc::new(cluster.clone()), Arc::new(RealClock::new())).unwrap();
    let worker = cn.worker(0).unwrap();
    let locals = RefCell::new(Vec::new());
    let mut executor = LocalExecutor::new();
    for c in 0..coordinators {
        let mut coord = worker.coordinator(&ford, c).unwrap();
        let mut local = y.local(coord.ctx.id, 11 + c as u64);
        let locals = &locals;
        executor.spawn(async move {
            for _ in 0..txns {
                let _ = y.run_one(&mut local, &mut coord).await;
            }
            locals.borrow_mut().push(local);
        });
    }
    executor.run(worker.transport().as_ref());
    let mut snapshot = Snapshot::new();
    let mut ctx = worker.ctx(999);
    for spec in y.tables() {
        block_on(scan_table(&mut ctx, spec.id, 0, ford.layout(), |k, v| {
            snapshot.push(spec.id, k, v)
        }))
        .unwrap();
    }
    snapshot.seal();
    y.check(&locals.into_inner(), &snapshot)
}

#[test]
fn check_catches_the_lost_updates_of_a_broken_ford() {
    // Goal: the invariants are not vacuous: a protocol that loses updates fails them.
    // Method: FORD releasing its locks before the commit write lands
    // (`UnlockBeforeCommitWrite`: another transaction locks and reads the old record,
    // then overwrites the first one's update) on a hot 16-record table, every
    // transaction read-write; the same harness with fixed FORD passes.
    let y = ycsb(&[
        "records=16",
        "ops_per_txn=2",
        "write_unit=txn",
        "write_ratio=1",
        "fields=2",
        "field_bytes=16",
        "zipf_theta=0.9",
    ]);
    let ok = check_under_ford_variant(&y, FordVariant::Fixed, 6, 300).unwrap();
    assert!(ok.contains("= committed field writes"), "{ok}");
    let e = check_under_ford_variant(&y, FordVariant::UnlockBeforeCommitWrite, 6, 300).unwrap_err();
    assert_eq!(e.invariant, "ycsb_write_count", "{e}");
}

/// Goal: a YCSB record declares its fields as attributes, per the `fields` and
/// `field_bytes` knobs, in every partition.
#[test]
fn every_partition_declares_its_fields_as_attributes() {
    let s = testkit::declared_schemas(&ycsb(&["fields=3", "field_bytes=16", "partitions=2", "records=100"]));
    let want: Vec<(String, u32)> = (0..3).map(|f| (format!("field{f}"), 16)).collect();
    assert_eq!(s.len(), 2);
    for (t, attrs) in &s {
        assert_eq!(attrs, &want, "{t}");
    }
}
