//! Motor's store knobs and coordinator-active GC (issue 28 items 1–2): VNum per run and
//! per table, delta spaces sized from config with errors naming the knob, GC that
//! overwrites the oldest Vcell and reclaims bar space, and an old snapshot's read that
//! is rebuilt from the bar, or aborts once GC took its version.

use dmtx_protocols::motor::layout::{cvt_bytes, MotorLayout};
use dmtx_protocols::motor::{
    Motor, ABORT_REASONS, METRIC_BAR_RECLAIMS, METRIC_GC_OVERWRITES, METRIC_OLD_READS, R_DELTA_FULL, R_VERSION_GONE,
};
use dmtx_runtime::{block_on, AbortReason, Coordinator, Knobs, Protocol, TxnHints};
use dmtx_store::TableSpec;
use dmtx_suite::{bank, Env, Setup};

fn motor(k: &[&str]) -> Motor {
    Motor::from_knobs(&Knobs::parse(k.iter().copied()).unwrap()).unwrap()
}

#[test]
fn vnum_sizes_the_cvt_per_run_and_per_table() {
    let m = motor(&["vnum=3", "vnum_tables=stock:6"]);
    let spec = |name: &str| TableSpec::new(0, name, 40, 100);
    assert_eq!(m.layout().format(&spec("customer")).slot_bytes, cvt_bytes(3) as u32);
    assert_eq!(m.layout().format(&spec("stock")).slot_bytes, cvt_bytes(6) as u32);
    assert_eq!(MotorLayout::vnum_of_slot(cvt_bytes(6) as u32), 6);
    // Default: the region's second half holds the delta spaces, at least a full value
    // per record of the capacity.
    let f = m.layout().format(&spec("stock"));
    assert!(f.value_region_bytes / 2 >= 64 + 100 * f.region_bytes_per_record as u64);
    assert!(f.value_region_bytes / 2 >= 100 * 40);
    assert!(m.motor_layout().delta_space_bytes(f.value_region_bytes) * 64 <= f.value_region_bytes / 2);
    let fixed = motor(&["delta_bytes=4096", "delta_spaces=8"]);
    let f = fixed.layout().format(&spec("stock"));
    assert_eq!(
        f.value_region_bytes,
        64 + 100 * f.region_bytes_per_record as u64 + 8 * 4096
    );
    for bad in [
        &["vnum=1"][..],
        &["vnum=16"],
        &["vnum_tables=stock:1"],
        &["isolation=rc"],
        &["ts=hybrid"],
    ] {
        let e = Motor::from_knobs(&Knobs::parse(bad.iter().copied()).unwrap()).unwrap_err();
        eprintln!("{e}");
    }
}

/// Commit a restamp of bank account `key` on `c`.
async fn restamp(c: &mut Coordinator<Motor>, key: u64) {
    let mut t = c.begin_with(TxnHints::DECLARED);
    let o = t.add_rw(bank::TABLE, key);
    t.execute().await.expect("idle: executes");
    let v = t.bytes_mut(o);
    let (b, s) = bank::decode(key, v).unwrap();
    bank::encode(key, b, s + 1, v);
    t.commit().await.expect("idle: commits");
    c.cleanup().await;
}

/// A reader's snapshot is taken, `writes` restamps of key 2 commit, then the reader
/// reads key 2: the stamp it saw, or its abort.
fn old_snapshot_read(knobs: &[&str], writes: u32) -> (Result<u32, AbortReason>, Vec<u64>) {
    let env = Env::bank(motor(knobs), Setup::new(2, 44));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut reader = w.coordinator(&env.proto, 0).expect("coordinator");
    let mut writer = w.coordinator(&env.proto, 1).expect("coordinator");
    block_on(async {
        let mut t = reader.begin_with(TxnHints::READ_ONLY);
        t.add_ro(bank::TABLE, 1);
        t.execute().await.expect("the snapshot's first read");
        for _ in 0..writes {
            restamp(&mut writer, 2).await;
        }
        let o = t.add_ro(bank::TABLE, 2);
        let res = match t.execute().await {
            Ok(()) => Ok(bank::decode(2, t.bytes(o)).expect("an intact value").1),
            Err(a) => Err(a.reason),
        };
        drop(t);
        let m = &writer.ctx.metrics;
        let metric = |i: usize| m.get(i).map_or(0, |s| s.sum);
        let r = &reader.ctx.metrics;
        let old_reads = r.get(METRIC_OLD_READS).map_or(0, |s| s.sum);
        (
            res,
            vec![metric(METRIC_GC_OVERWRITES), metric(METRIC_BAR_RECLAIMS), old_reads],
        )
    })
}

/// Goal: an old snapshot's version is rebuilt from the newest value and the bar; once GC
/// overwrote it (no free Vcell: the oldest goes) the read aborts `version_gone`, never
/// returning a newer value under the old snapshot.
#[test]
fn an_old_snapshot_reads_through_the_bar_until_gc_takes_its_version() {
    let (res, m) = old_snapshot_read(&["vnum=4"], 3);
    assert_eq!(res, Ok(0), "the loaded stamp, rebuilt from three bar entries");
    assert_eq!(m, [0, 0, 1], "no GC with 4 Vcells, one old read");
    let (res, m) = old_snapshot_read(&["vnum=2"], 2);
    assert_eq!(res, Err(AbortReason::Protocol(R_VERSION_GONE)));
    assert_eq!(m[0], 1, "the second write overwrote the oldest Vcell");
    assert_eq!(ABORT_REASONS[R_VERSION_GONE as usize].name, "version_gone");
}

/// Goal: a bar too small for more than one entry reclaims from its start on every
/// write, invalidating the versions whose attributes it overwrote: the old snapshot
/// aborts though Vcells are free.
#[test]
fn bar_reclaims_invalidate_the_versions_they_overwrite() {
    let (res, m) = old_snapshot_read(&["vnum=4", "bar_bytes=48"], 2);
    assert_eq!(res, Err(AbortReason::Protocol(R_VERSION_GONE)));
    assert_eq!(m[0], 0, "Vcells were free");
    assert!(m[1] >= 1, "a bar reclaim: {m:?}");
}

/// Goal: a full delta space aborts with `delta_full`, whose help names the knob, and
/// more spaces than `delta_spaces` fail setup naming that knob.
#[test]
fn exhausted_delta_spaces_name_their_knobs() {
    let env = Env::bank(motor(&["delta_bytes=1024"]), Setup::new(1, 44));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    let reason = block_on(async {
        for key in 1000.. {
            let mut t = c.begin_with(TxnHints::DECLARED);
            let o = t.add_insert(bank::TABLE, key);
            if let Err(a) = t.execute().await {
                return a.reason;
            }
            bank::encode(key, 0, 0, t.bytes_mut(o));
            if let Err(a) = t.commit().await {
                return a.reason;
            }
            c.cleanup().await;
        }
        unreachable!()
    });
    assert_eq!(reason, AbortReason::Protocol(R_DELTA_FULL));
    assert!(ABORT_REASONS[R_DELTA_FULL as usize].help.contains("`delta_bytes`"));

    let env = Env::bank(motor(&["delta_spaces=2"]), Setup::new(1, 44));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let _a = w.coordinator(&env.proto, 0).expect("first space");
    let _b = w.coordinator(&env.proto, 1).expect("second space");
    let e = w.coordinator(&env.proto, 2).err().expect("no third space").to_string();
    assert!(e.contains("`delta_spaces`"), "{e}");
}

/// Goal: inserts into full chains reserve and link overflow buckets (on every replica),
/// and every inserted key is found again; without linking they would abort
/// `table_full`.
#[test]
fn inserts_into_full_chains_link_overflow_buckets() {
    let setup = Setup {
        slots_per_bucket: 1,
        ..Setup::new(2, 20)
    };
    let env = Env::bank(motor(&[]), setup);
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
    let keys: Vec<u64> = (1000..1040).collect();
    block_on(async {
        for &key in &keys {
            let mut t = c.begin_with(TxnHints::DECLARED);
            let o = t.add_insert(bank::TABLE, key);
            t.execute().await.unwrap_or_else(|a| panic!("insert {key}: {a}"));
            bank::encode(key, 0, 0, t.bytes_mut(o));
            t.commit().await.unwrap_or_else(|a| panic!("insert {key}: {a}"));
            c.cleanup().await;
        }
    });
    let catalog = env.catalog();
    let info = catalog.get(bank::TABLE.id()).unwrap();
    let p = info.ptr(0, 0);
    let mut w8 = [0u8; 8];
    env.region(p.mn).read(p.offset, &mut w8).unwrap();
    assert!(u64::from_le_bytes(w8) > 0, "no overflow bucket was reserved");
    for r in 0..2 {
        let found: Vec<u64> = env.scan(bank::TABLE.id(), r).iter().map(|row| row.0).collect();
        for key in &keys {
            assert!(found.contains(key), "replica {r} lacks key {key}");
        }
    }
    assert_eq!(env.replicas_differ(bank::TABLE.id()), None);
}

/// Goal: two inserts of one key never both commit: the first holds its chain's insert
/// lock from its bucket READ to its commit, so the second aborts; after the first
/// commits, a new insert of the key finds it (`duplicate`).
#[test]
fn concurrent_inserts_of_one_key_never_both_commit() {
    let env = Env::bank(motor(&[]), Setup::new(2, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut c1 = w.coordinator(&env.proto, 0).expect("coordinator");
    let mut c2 = w.coordinator(&env.proto, 1).expect("coordinator");
    block_on(async {
        let mut t1 = c1.begin_with(TxnHints::DECLARED);
        let o1 = t1.add_insert(bank::TABLE, 500);
        t1.execute().await.expect("the first insert executes");
        let mut t2 = c2.begin_with(TxnHints::DECLARED);
        t2.add_insert(bank::TABLE, 500);
        let e = t2.execute().await.expect_err("the second insert waits for nobody");
        assert_eq!(e.reason, AbortReason::LockConflict);
        drop(t2);
        bank::encode(500, 0, 0, t1.bytes_mut(o1));
        t1.commit().await.expect("the first insert commits");
        c1.cleanup().await;
        c2.cleanup().await;
        let mut t3 = c2.begin_with(TxnHints::DECLARED);
        t3.add_insert(bank::TABLE, 500);
        let e = t3.execute().await.expect_err("the key exists");
        assert_eq!(e.reason, AbortReason::Duplicate);
    });
    let n = env.scan(bank::TABLE.id(), 0).iter().filter(|r| r.0 == 500).count();
    assert_eq!(n, 1);
}

/// Goal: a delete installs a tombstone version: later reads find the key absent, a
/// snapshot from before the delete still reads the value, and a new insert of the key
/// is a version over the tombstone.
#[test]
fn deletes_are_tombstone_versions() {
    let env = Env::bank(motor(&[]), Setup::new(2, 20));
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut old = w.coordinator(&env.proto, 0).expect("coordinator");
    let mut c = w.coordinator(&env.proto, 1).expect("coordinator");
    block_on(async {
        let mut before = old.begin_with(TxnHints::READ_ONLY);
        before.add_ro(bank::TABLE, 1);
        before.execute().await.expect("the old snapshot");

        let mut t = c.begin_with(TxnHints::DECLARED);
        t.add_delete(bank::TABLE, 6);
        t.commit().await.expect("the delete commits");
        c.cleanup().await;

        let o = before.add_ro(bank::TABLE, 6);
        before.execute().await.expect("the old snapshot still has key 6");
        assert_eq!(bank::decode(6, before.bytes(o)).map(|v| v.0), Some(bank::INITIAL));
        drop(before);

        let mut t = c.begin_with(TxnHints::READ_ONLY_DECLARED);
        t.add_ro(bank::TABLE, 6);
        let e = t.execute().await.expect_err("deleted");
        assert_eq!(e.reason, AbortReason::NotFound);
        drop(t);

        let mut t = c.begin_with(TxnHints::DECLARED);
        let o = t.add_insert(bank::TABLE, 6);
        t.execute().await.expect("an insert over the tombstone");
        bank::encode(6, 7, 0, t.bytes_mut(o));
        t.commit().await.expect("commits");
        c.cleanup().await;
    });
    let row = env
        .scan(bank::TABLE.id(), 0)
        .into_iter()
        .find(|r| r.0 == 6)
        .expect("key 6 again");
    assert_eq!(bank::decode(6, &row.1).map(|v| v.0), Some(7));
    assert_eq!(env.replicas_differ(bank::TABLE.id()), None);
}
