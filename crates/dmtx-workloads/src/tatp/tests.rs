use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::*;
use crate::testkit::{self, knobs};

fn tatp(subscribers: u64) -> Tatp {
    Tatp::new(TatpConfig {
        subscribers,
        ..TatpConfig::default()
    })
    .unwrap()
}

fn coord_id(coroutine: u16) -> CoordId {
    CoordId {
        cn: 0,
        thread: 0,
        coroutine,
    }
}

/// Every table of `w` as loaded, as a snapshot; `edit` may change a record (return
/// false to drop it).
fn loaded_snapshot(w: &Tatp, mut edit: impl FnMut(u32, u64, &mut Vec<u8>) -> bool) -> Snapshot {
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

#[test]
fn nurand_follows_the_spec() {
    assert_eq!(nurand_a(1), 65_535);
    assert_eq!(nurand_a(1_000_000), 65_535);
    assert_eq!(nurand_a(1_000_001), 1_048_575);
    assert_eq!(nurand_a(10_000_000), 1_048_575);
    assert_eq!(nurand_a(10_000_001), 2_097_151);
    // ((rnd(0, A) | rnd(1, P)) % P) + 1
    assert_eq!(nurand_of(0b1010, 0b0101, 100), 16);
    assert_eq!(nurand_of(0, 100, 100), 1);
    assert_eq!(nurand_of(65_535, 1, 1000), 536);

    let w = tatp(1000);
    let mut rng = SmallRng::seed_from_u64(4);
    let mut counts = vec![0u32; 1001];
    for _ in 0..200_000 {
        let s = w.subscriber(&mut rng);
        assert!((1..=1000).contains(&s), "{s}");
        counts[s as usize] += 1;
    }
    let (min, max) = (counts[1..].iter().min().unwrap(), counts[1..].iter().max().unwrap());
    assert!(*min > 0, "every subscriber is drawn");
    assert!(*max as f64 > 1.5 * *min as f64, "NURand is not uniform: {min}..{max}");
    let w1 = tatp(1);
    assert!((0..100).all(|_| w1.subscriber(&mut rng) == 1));
    // ro_keys=2's second subscriber differs from the first.
    let w2 = Tatp::new(TatpConfig {
        subscribers: 2,
        ro_keys: 2,
        ..TatpConfig::default()
    })
    .unwrap();
    for s in [1, 2] {
        assert_eq!(w2.other_subscriber(&mut rng, s), 3 - s);
    }
}

#[test]
fn keys_pack_uniquely_with_the_shard_in_the_low_bits() {
    for s in [1, 2, 4095, 4096, 4097, 1_000_000, MAX_SUBSCRIBERS] {
        assert_eq!(subscriber_key(s) & 0xfff, s & 0xfff);
        assert_eq!(unpack_key(subscriber_key(s)), (s, 0, 0));
        for t in 1..=4 {
            assert_eq!(unpack_key(access_info_key(s, t)), (s, t - 1, 0));
            assert_eq!(special_facility_key(s, t) & 0xfff, s & 0xfff);
            for (k, st) in START_TIMES.into_iter().enumerate() {
                let key = call_forwarding_key(s, t, st);
                assert_eq!(key & 0xfff, s & 0xfff, "LOTUS shard number");
                assert_eq!(unpack_key(key), (s, t - 1, k as u8));
            }
        }
    }
    let mut cf = HashSet::new();
    let mut sf = HashSet::new();
    let mut sub = HashSet::new();
    for s in 1..=10_000 {
        assert!(sub.insert(subscriber_key(s)));
        for t in 1..=4 {
            assert!(sf.insert(special_facility_key(s, t)));
            for st in START_TIMES {
                assert!(cf.insert(call_forwarding_key(s, t, st)));
            }
        }
    }
    assert_eq!(&sub_nbr(42), b"000000000000042");
    assert_eq!(&sub_nbr(999_999_999_999_999), b"999999999999999");
    assert_eq!(sub_nbr_key(&sub_nbr(123)), 0x123);
    assert_eq!(sub_nbr_key(&sub_nbr(1_000_000_000)), 0x1_000_000_000);
    let mut nbr_keys = HashSet::new();
    for s in 1..=100_000 {
        assert_eq!(parse_sub_nbr(&sub_nbr(s)), Some(s));
        assert!(nbr_keys.insert(sub_nbr_key(&sub_nbr(s))));
    }
    assert_eq!(parse_sub_nbr(b"00000000000004x"), None);
}

#[test]
fn population_is_within_spec_ranges() {
    let p = 4000;
    let w = tatp(p);
    let (mut ai, mut sf, mut cf, mut active) = (0u64, 0u64, 0u64, 0u64);
    let mut ai_type_present = [0u64; 4];
    for s in 1..=p {
        let sub = population::subscriber(s);
        assert_eq!((sub.s_id as u64, sub.sub_nbr), (s, sub_nbr(s)));
        assert!(sub.bits < 1 << 10 && sub.msc_location > 0 && sub.vlr_location > 0);
        let a = population::ai_types(s);
        assert!((1..=4).contains(&a.count_ones()) && a <= 0b1111, "{a:#b}");
        ai += a.count_ones() as u64;
        for t in population::types(a) {
            ai_type_present[t as usize - 1] += 1;
            let row = population::access_info(s, t);
            assert_eq!((row.s_id as u64, row.ai_type), (s, t));
            assert!(row.data3.iter().chain(&row.data4).all(u8::is_ascii_uppercase));
        }
        let f = population::sf_types(s);
        assert!((1..=4).contains(&f.count_ones()) && f <= 0b1111);
        sf += f.count_ones() as u64;
        for t in population::types(f) {
            let row = population::special_facility(s, t);
            assert_eq!((row.s_id as u64, row.sf_type), (s, t));
            assert!(row.is_active <= 1 && row.data_b.iter().all(u8::is_ascii_uppercase));
            active += row.is_active as u64;
            let slots = population::cf_slots(s, t);
            assert!(slots <= 0b111);
            cf += slots.count_ones() as u64;
            for k in population::slots(slots) {
                let row = population::call_forwarding(s, t, k);
                assert_eq!((row.s_id as u64, row.sf_type, row.start_time), (s, t, 8 * k));
                assert!((row.start_time + 1..=row.start_time + 8).contains(&row.end_time));
                assert!(row.numberx.iter().all(u8::is_ascii_digit));
            }
        }
    }
    let n = p as f64;
    assert!(
        (ai as f64 / n - 2.5).abs() < 0.1,
        "access_info per subscriber {}",
        ai as f64 / n
    );
    assert!(
        (sf as f64 / n - 2.5).abs() < 0.1,
        "special_facility per subscriber {}",
        sf as f64 / n
    );
    assert!(
        (cf as f64 / sf as f64 - 1.5).abs() < 0.06,
        "call_forwarding per facility {}",
        cf as f64 / sf as f64
    );
    assert!(
        (active as f64 / sf as f64 - 0.85).abs() < 0.02,
        "is_active share {}",
        active as f64 / sf as f64
    );
    for c in ai_type_present {
        assert!(
            (c as f64 / n - 0.625).abs() < 0.03,
            "each ai_type exists for 62.5%: {}",
            c as f64 / n
        );
    }
    let counts = population::counts(p);
    assert_eq!(
        (counts.access_info, counts.special_facility, counts.call_forwarding),
        (ai, sf, cf)
    );
    assert_eq!(w.loaded_call_forwarding(), cf);

    // Each loader emits exactly the counted rows, with distinct keys, and the snapshot of
    // a fresh load passes the check.
    let specs = w.tables();
    assert_eq!(specs.iter().map(|s| s.id).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    let want = [p, ai, sf, cf, sf, p];
    for spec in &specs {
        let mut keys = HashSet::new();
        w.load(spec.id, &mut |k, v| {
            assert_eq!(v.len(), spec.value_bytes as usize);
            assert!(keys.insert(k), "table {} key {k:#x} twice", spec.name);
            Ok(())
        })
        .unwrap();
        assert_eq!(keys.len() as u64, want[spec.id as usize], "{}", spec.name);
        assert!(spec.capacity >= keys.len() as u64);
    }
    assert!(matches!(
        w.load(6, &mut |_, _| Ok(())),
        Err(StoreError::UnknownTable(6))
    ));
    let detail = w.check(&[], &loaded_snapshot(&w, |_, _, _| true)).unwrap();
    assert!(detail.contains("call_forwarding"), "{detail}");
}

/// GetNewDestination's success on the loaded population, by enumeration of the spec's
/// query parameters and population distributions.
#[test]
fn get_new_destination_loaded_success_by_enumeration() {
    // P(∃ row: st ≤ start ∧ et < end) over n ∈ 0..=3 rows with distinct start slots,
    // durations 1..=8, start ∈ {0, 8, 16}, et ∈ 1..=24.
    let mut p = 0.0;
    for slots in 0u8..8 {
        let n = slots.count_ones();
        let w_slots = 0.25 / [1.0, 3.0, 3.0, 1.0][n as usize];
        let rows: Vec<u8> = population::slots(slots).map(|k| 8 * k).collect();
        let combos = 8usize.pow(n);
        for c in 0..combos {
            let mut ends = Vec::new();
            let mut x = c;
            for &st in &rows {
                ends.push(st + 1 + (x % 8) as u8);
                x /= 8;
            }
            for start in START_TIMES {
                for et in 1..=24u8 {
                    if rows.iter().zip(&ends).any(|(&st, &end)| st <= start && et < end) {
                        p += w_slots / combos as f64 / 3.0 / 24.0;
                    }
                }
            }
        }
    }
    assert!((0.625 * 0.85 * p - GND_LOADED_SUCCESS).abs() < 1e-12, "{p}");
    assert!((GND_LOADED_SUCCESS - 0.1479).abs() < 1e-3);

    // The generated population agrees (uniform subscribers, the transaction's logic).
    let mut rng = SmallRng::seed_from_u64(11);
    let (mut hit, n) = (0u32, 200_000);
    for _ in 0..n {
        let s = 1 + uniform(&mut rng, 50_000);
        let t = 1 + uniform(&mut rng, 4) as u8;
        let start = START_TIMES[uniform(&mut rng, 3) as usize];
        let et = 1 + uniform(&mut rng, 24) as u8;
        if population::sf_types(s) & (1 << (t - 1)) == 0 || population::special_facility(s, t).is_active == 0 {
            continue;
        }
        let found = population::slots(population::cf_slots(s, t))
            .map(|k| population::call_forwarding(s, t, k))
            .any(|r| r.start_time <= start && et < r.end_time);
        hit += u32::from(found);
    }
    let share = hit as f64 / n as f64;
    assert!((share - GND_LOADED_SUCCESS).abs() < 0.005, "{share}");
}

#[test]
fn from_knobs_defaults_and_errors() {
    let w = Tatp::from_knobs(&Knobs::default()).unwrap();
    assert_eq!(w.config(), &TatpConfig::default());
    let w = Tatp::from_knobs(&knobs(&[
        "subscribers=10",
        "ro_keys=2",
        "sub_nbr_index=false",
        "mix=1, 0,0,0,0,0,3",
    ]))
    .unwrap();
    assert_eq!(
        w.config(),
        &TatpConfig {
            subscribers: 10,
            ro_keys: 2,
            sub_nbr_index: false,
            mix: [1, 0, 0, 0, 0, 0, 3],
        }
    );
    assert_eq!(w.tables().len(), 5, "no index table with sub_nbr_index=false");
    let mut rng = SmallRng::seed_from_u64(1);
    let picks: Vec<usize> = (0..1000).map(|_| w.pick_type(&mut rng)).collect();
    assert!(picks.iter().all(|&t| t == GSD || t == DCF));
    let dcf = picks.iter().filter(|&&t| t == DCF).count();
    assert!((650..850).contains(&dcf), "{dcf}");
    for (bad, needle) in [
        ("subscribers=0", "1..=1000000000"),
        ("subscribers=1000000001", "1..=1000000000"),
        ("subscribers=x", "`subscribers` = `x`"),
        ("ro_keys=3", "1 or 2"),
        ("ro_keys=0", "1 or 2"),
        ("sub_nbr_index=maybe", "`sub_nbr_index` = `maybe`"),
        ("mix=1,2,3", "7 comma-separated"),
        ("mix=1,2,3,4,5,6,7,8", "7 comma-separated"),
        ("mix=0,0,0,0,0,0,0", "positive"),
        ("mix=1,2,3,4,5,6,x", "`x`"),
        ("mix=1,2,3,4,5,6,-1", "`-1`"),
    ] {
        let e = Tatp::from_knobs(&knobs(&[bad])).unwrap_err().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
    }
    let e = Tatp::from_knobs(&knobs(&["subscribers=1", "ro_keys=2"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("two distinct subscribers"), "{e}");

    // The default mix.
    let w = tatp(100);
    let mut counts = [0u64; 7];
    let n = 200_000;
    for _ in 0..n {
        counts[w.pick_type(&mut rng)] += 1;
    }
    for ty in 0..7 {
        let share = counts[ty] as f64 / n as f64;
        assert!(
            (share - MIX_PERCENT[ty] as f64 / 100.0).abs() < 0.005,
            "{}: {share}",
            TXN_TYPES[ty]
        );
    }
}

fn one_insert_local(w: &Tatp) -> TatpLocal {
    let mut l = w.local(coord_id(0), 1);
    l.successful[ICF] = 1;
    l
}

#[test]
fn check_catches_corrupted_snapshots() {
    let w = tatp(300);
    let local = || w.local(coord_id(0), 1);
    assert!(w.check(&[local()], &loaded_snapshot(&w, |_, _, _| true)).is_ok());
    // A subscriber whose key holds another subscriber's record.
    let e = w
        .check(
            &[local()],
            &loaded_snapshot(&w, |t, k, v| {
                if t == SUBSCRIBER_TABLE_ID && k == subscriber_key(7) {
                    v.copy_from_slice(bytemuck::bytes_of(&population::subscriber(8)));
                }
                true
            }),
        )
        .unwrap_err();
    assert_eq!(e.invariant, "tatp_record_identity", "{e}");
    // A lost special_facility row.
    let (s, t) = (1..=300)
        .flat_map(|s| population::types(population::sf_types(s)).map(move |t| (s, t)))
        .find(|&(s, t)| population::cf_slots(s, t) != 0)
        .unwrap();
    let e = w
        .check(
            &[local()],
            &loaded_snapshot(&w, |tb, k, _| {
                !(tb == SPECIAL_FACILITY_TABLE_ID && k == special_facility_key(s, t))
            }),
        )
        .unwrap_err();
    assert_eq!(e.invariant, "tatp_rows", "{e}");
    // A call_forwarding row without its special_facility (and its facility's index row
    // listing it, so only the parent check can catch it).
    let orphan_s = (1..=300).find(|&s| population::sf_types(s) & 1 == 0).unwrap();
    let mut orphan = population::call_forwarding(orphan_s, 1, 0);
    orphan.end_time = 5;
    let mut snap = loaded_snapshot(&w, |_, _, _| true);
    snap.push(
        CALL_FORWARDING_TABLE_ID,
        call_forwarding_key(orphan_s, 1, 0),
        bytemuck::bytes_of(&orphan),
    );
    snap.seal();
    let e = w.check(&[one_insert_local(&w)], &snap).unwrap_err();
    assert_eq!(e.invariant, "tatp_call_forwarding_parent", "{e}");
    // A call_forwarding key held twice (an insert that missed the existing row).
    let (ds, dt) = (1..=300)
        .flat_map(|s| population::types(population::sf_types(s)).map(move |t| (s, t)))
        .find(|&(s, t)| population::cf_slots(s, t) & 1 != 0)
        .unwrap();
    let mut snap = loaded_snapshot(&w, |_, _, _| true);
    let dup = population::call_forwarding(ds, dt, 0);
    snap.push(
        CALL_FORWARDING_TABLE_ID,
        call_forwarding_key(ds, dt, 0),
        bytemuck::bytes_of(&dup),
    );
    snap.seal();
    let e = w.check(&[one_insert_local(&w)], &snap).unwrap_err();
    assert_eq!((e.invariant, e.detail.contains("twice")), ("tatp_rows", true), "{e}");
    // A call_forwarding row removed without its index entry.
    let e = w
        .check(
            &[local()],
            &loaded_snapshot(&w, |tb, k, _| {
                !(tb == CALL_FORWARDING_TABLE_ID && unpack_key(k).0 == s && unpack_key(k).1 == t - 1)
            }),
        )
        .unwrap_err();
    assert_eq!(e.invariant, "tatp_cf_index", "{e}");
    // A row and its index entry removed: consistent tables, but no committed delete
    // accounts for it.
    let k = population::slots(population::cf_slots(s, t)).next().unwrap();
    let snap = loaded_snapshot(&w, |tb, key, v| {
        if tb == CF_INDEX_TABLE_ID && key == special_facility_key(s, t) {
            let mut ix: CfIndex = bytemuck::pod_read_unaligned(v);
            ix.slots &= !(1 << k);
            v.copy_from_slice(bytemuck::bytes_of(&ix));
        }
        !(tb == CALL_FORWARDING_TABLE_ID && key == call_forwarding_key(s, t, 8 * k))
    });
    let e = w.check(&[local()], &snap).unwrap_err();
    assert_eq!(e.invariant, "tatp_cf_row_count", "{e}");
    assert!(e.detail.contains("0 committed deletes"), "{e}");
    let mut one_delete = local();
    one_delete.successful[DCF] = 1;
    assert!(w.check(&[one_delete], &snap).is_ok());
    // A half-applied update_subscriber_data: the subscriber's stamp without the facility's.
    let e = w
        .check(
            &[local()],
            &loaded_snapshot(&w, |tb, key, v| {
                if tb == SUBSCRIBER_TABLE_ID && key == subscriber_key(3) {
                    let mut sub: Subscriber = bytemuck::pod_read_unaligned(v);
                    sub.usd_stamp = 1;
                    v.copy_from_slice(bytemuck::bytes_of(&sub));
                }
                true
            }),
        )
        .unwrap_err();
    assert_eq!(e.invariant, "tatp_update_stamps", "{e}");
    // An update_location that landed but was never counted as committed (a phantom commit).
    let stamped = |tb: u32, key: u64, v: &mut Vec<u8>| {
        if tb == SUBSCRIBER_TABLE_ID && key == subscriber_key(9) {
            let mut sub: Subscriber = bytemuck::pod_read_unaligned(v);
            sub.ul_stamp = 1;
            sub.vlr_location ^= 1;
            v.copy_from_slice(bytemuck::bytes_of(&sub));
        }
        true
    };
    let e = w.check(&[local()], &loaded_snapshot(&w, stamped)).unwrap_err();
    assert_eq!(e.invariant, "tatp_update_stamps", "{e}");
    let mut one_ul = local();
    one_ul.successful[UL] = 1;
    assert!(w.check(&[one_ul], &loaded_snapshot(&w, stamped)).is_ok());
    // A changed vlr_location with no stamp: a write nobody committed.
    let e = w
        .check(
            &[local()],
            &loaded_snapshot(&w, |tb, key, v| {
                if tb == SUBSCRIBER_TABLE_ID && key == subscriber_key(9) {
                    let mut sub: Subscriber = bytemuck::pod_read_unaligned(v);
                    sub.vlr_location ^= 1;
                    v.copy_from_slice(bytemuck::bytes_of(&sub));
                }
                true
            }),
        )
        .unwrap_err();
    assert_eq!(e.invariant, "tatp_static_fields", "{e}");
    // A committed read of an inconsistent record; an unsuccessful update_location.
    let mut l = local();
    l.anomalies = 1;
    l.first_anomaly = Some(Anomaly {
        what: "test",
        table: CF_INDEX_TABLE_ID,
        key: 1,
    });
    let e = w.check(&[l], &loaded_snapshot(&w, |_, _, _| true)).unwrap_err();
    assert_eq!(e.invariant, "tatp_committed_reads", "{e}");
    let mut l = local();
    l.unsuccessful[UL] = 1;
    let e = w.check(&[l], &loaded_snapshot(&w, |_, _, _| true)).unwrap_err();
    assert_eq!(e.invariant, "tatp_success_ratio", "{e}");
    // The index table naming another subscriber.
    let e = w
        .check(
            &[local()],
            &loaded_snapshot(&w, |tb, key, v| {
                if tb == SUB_NBR_INDEX_TABLE_ID && key == sub_nbr_key(&sub_nbr(5)) {
                    v[0] = 6;
                }
                true
            }),
        )
        .unwrap_err();
    assert_eq!(e.invariant, "tatp_record_identity", "{e}");
}

/// Success ratios of a run, by type: (ratio, attempts).
fn ratios(locals: &[TatpLocal]) -> [(f64, u64); 7] {
    let mut out = [(0.0, 0); 7];
    for (ty, o) in out.iter_mut().enumerate() {
        let ok: u64 = locals.iter().map(|l| l.successful()[ty]).sum();
        let miss: u64 = locals.iter().map(|l| l.unsuccessful()[ty]).sum();
        *o = (ok as f64 / (ok + miss).max(1) as f64, ok + miss);
    }
    out
}

#[test]
fn end_to_end_under_ford_spec_mix() {
    // Goal: every type runs under FORD with several coordinators interleaved on one
    // thread; success ratios are near the spec's; every invariant holds.
    let w = tatp(1000);
    let run = testkit::run_under_ford(&w, 4, 4000, 5);
    assert_eq!(run.attempted(), 16_000);
    let r = ratios(&run.locals);
    let committed: u64 = run.committed.iter().sum();
    assert_eq!(committed, r.iter().map(|x| x.1).sum::<u64>(), "{run:?}");
    assert!(r.iter().all(|x| x.1 > 150), "every type ran: {r:?}");
    assert_eq!(r[GSD].0, 1.0);
    assert_eq!(r[UL].0, 1.0);
    for (ty, tol) in [(GAD, 0.05), (USD, 0.12), (ICF, 0.12), (DCF, 0.12)] {
        assert!(
            (r[ty].0 - SPEC_SUCCESS[ty]).abs() < tol,
            "{}: {:?}",
            TXN_TYPES[ty],
            r[ty]
        );
    }
    assert!((r[GND].0 - GND_LOADED_SUCCESS).abs() < 0.06, "{:?}", r[GND]);
    let detail = w.check(&run.locals, &run.snapshot).unwrap();
    assert!(detail.contains("get_new_destination"), "{detail}");
}

#[test]
fn end_to_end_two_key_reads_without_the_index() {
    // ro_keys=2 (OOCC) and the identity sub_nbr mapping keep the invariants and ratios.
    let w = Tatp::new(TatpConfig {
        subscribers: 300,
        ro_keys: 2,
        sub_nbr_index: false,
        mix: MIX_PERCENT,
    })
    .unwrap();
    let run = testkit::run_under_ford(&w, 3, 2000, 9);
    let r = ratios(&run.locals);
    assert_eq!(r[GSD].0, 1.0);
    assert!((r[GAD].0 - 0.625).abs() < 0.08, "{:?}", r[GAD]);
    w.check(&run.locals, &run.snapshot).unwrap();
}

#[test]
fn inserts_and_deletes_under_contention_keep_the_index_and_counts() {
    // Ten subscribers, a mix of call-forwarding inserts, deletes and joins: heavy
    // contention on the same rows and index records.
    let w = Tatp::new(TatpConfig {
        subscribers: 10,
        mix: [0, 20, 0, 10, 0, 35, 35],
        ..TatpConfig::default()
    })
    .unwrap();
    let run = testkit::run_under_ford(&w, 4, 1500, 3);
    let r = ratios(&run.locals);
    let ins: u64 = run.locals.iter().map(|l| l.successful()[ICF]).sum();
    let del: u64 = run.locals.iter().map(|l| l.successful()[DCF]).sum();
    assert!(ins > 100 && del > 100, "{ins} inserts, {del} deletes: {run:?}");
    assert!(
        r[ICF].0 > 0.0 && r[ICF].0 < 1.0 && r[DCF].0 > 0.0 && r[DCF].0 < 1.0,
        "{r:?}"
    );
    let detail = w.check(&run.locals, &run.snapshot).unwrap();
    assert!(detail.contains(&format!("{ins} inserts")), "{detail}");
}

/// RTTs per type and outcome under FORD: one coordinator, warm address cache.
#[test]
fn rtts_per_type_under_ford() {
    use dmtx_memnode::LocalCluster;
    use dmtx_protocols::ford::{Ford, FordConfig};
    use dmtx_runtime::{block_on, Cn, RealClock};
    use dmtx_store::{create_table, placement, TableBuilder};

    let mut measured = BTreeMap::new();
    for index in [true, false] {
        let w = Tatp::new(TatpConfig {
            subscribers: 50,
            sub_nbr_index: index,
            mix: [10, 10, 10, 10, 10, 25, 25],
            ..TatpConfig::default()
        })
        .unwrap();
        let cluster = LocalCluster::new(2, 64 << 20);
        let ford = Arc::new(Ford::new(FordConfig::default()));
        for spec in w.tables() {
            let mut table = TableBuilder::new(spec.clone(), ford.layout());
            w.load(spec.id, &mut |k, v| table.insert(k, v)).unwrap();
            create_table(&cluster, table, &placement(spec.id, 2, 2).unwrap()).unwrap();
        }
        let cn = Cn::connect(
            0,
            Arc::new(cluster.fabric().clone()),
            Arc::new(cluster.clone()),
            Arc::new(RealClock::new()),
        )
        .unwrap();
        let worker = cn.worker(0).unwrap();
        let mut coord = worker.coordinator(&ford, 0).unwrap();
        let mut local = w.local(coord.ctx.id, 2);
        // (type, successful) → histogram of RTTs.
        let mut hist: BTreeMap<(usize, bool), BTreeMap<u64, u32>> = BTreeMap::new();
        for i in 0..6000 {
            let (ty, res) = block_on(w.run_one(&mut local, &mut coord));
            let res = res.expect("one coordinator never conflicts");
            if i >= 2000 {
                *hist
                    .entry((ty, res == Outcome::Committed))
                    .or_default()
                    .entry(coord.ctx.txn_counters.rtts)
                    .or_default() += 1;
            }
        }
        for ((ty, ok), h) in hist {
            let mode = h.iter().max_by_key(|(_, &n)| n).map(|(&r, _)| r).unwrap();
            measured.insert((index, TXN_TYPES[ty], ok), mode);
        }
    }
    let expect = [
        // (index, type, successful) → RTTs
        ((true, "get_subscriber_data", true), 1),
        ((true, "get_access_data", true), 1),
        ((true, "get_access_data", false), 1),
        ((true, "get_new_destination", true), 3),
        ((true, "update_subscriber_data", true), 2),
        ((true, "update_location", true), 4),
        ((false, "update_location", true), 2),
        ((true, "insert_call_forwarding", true), 5),
        ((false, "insert_call_forwarding", true), 4),
        ((true, "delete_call_forwarding", true), 4),
        ((false, "delete_call_forwarding", true), 2),
    ];
    for (k, rtts) in expect {
        assert_eq!(measured.get(&k), Some(&rtts), "{k:?}: all {measured:?}");
    }
}

/// Goal: every TATP table declares its columns as attributes, tiling the value. Method:
/// the schemas with and without SUB_NBR_INDEX, and spot checks of the spec's widths.
#[test]
fn every_table_declares_its_columns_as_attributes() {
    for index in [true, false] {
        let w = Tatp::new(TatpConfig {
            subscribers: 100,
            sub_nbr_index: index,
            ..TatpConfig::default()
        })
        .unwrap();
        let s = testkit::declared_schemas(&w);
        assert_eq!(s.contains_key("sub_nbr_index"), index);
        let sub: BTreeMap<&str, u32> = s["subscriber"].iter().map(|(n, b)| (n.as_str(), *b)).collect();
        assert_eq!(sub["sub_nbr"], 15);
        assert_eq!(sub["vlr_location"], 4);
        assert!((1..=10).all(|i| sub[format!("byte2_{i}").as_str()] == 1));
        let cf: BTreeMap<&str, u32> = s["call_forwarding"].iter().map(|(n, b)| (n.as_str(), *b)).collect();
        assert_eq!(cf["numberx"], 15);
    }
}
