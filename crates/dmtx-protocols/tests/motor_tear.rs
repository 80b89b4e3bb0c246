//! Motor's reads against torn READs and GC (issue 28 items 2–3): a READ racing a WRITE
//! may return any mixture of old and new words, and a GC may overwrite a Vcell or the
//! attributes a reader is about to fetch. Every such race must end in an abort (or a
//! re-read), never in a wrong value.
//!
//! Method: the suite's contended bank on `mem` (its injector stalls READs and WRITEs
//! inside CVTs), with VNum 2 so every write past the second overwrites a Vcell (GC) and
//! every bar reclaims, plus a second injector that stalls READs and WRITEs inside the
//! value region: a random account's Vpkg or attribute bar. Every committed value must
//! decode, every audit must sum, and the history must pass the checker. The paper's
//! anchors-only check, and anchors-only with the Vpkg read before the attributes, must
//! be caught.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dmtx_protocols::motor::layout::{cell_off, vpkg_bytes, Cvt, MotorLayout};
use dmtx_protocols::motor::{Motor, MotorVariant, R_VERSION_GONE};
use dmtx_runtime::{block_on, AbortReason, Knobs, Protocol, TxnHints};
use dmtx_suite::{bank, contended, Env, Outcome, Setup};
use dmtx_verbs::StallKind;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// VNum 2: GC on every write past the second.
fn knobs() -> Knobs {
    Knobs::parse(["vnum=2"]).unwrap()
}

/// Until `stop`, stall a READ (3 in 4) or a WRITE at a random word of a random
/// account's Vpkg or attribute bar on a random replica, or a READ between the Vcells of
/// its CVT on the primary; hold it while the others run,
/// then release. Returns how many stalls caught an op.
fn stall_values(env: &Env<Motor>, seed: u64, stop: &AtomicBool) -> u64 {
    let catalog = env.catalog();
    let info = catalog.get(bank::TABLE.id()).expect("bank table");
    let slots: Vec<u64> = env.slots(bank::TABLE.id()).into_values().collect();
    let vnum = MotorLayout::vnum_of_slot(info.shape.slot_bytes);
    let vb = info.meta.value_bytes;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x57a11);
    let mut slot = vec![0u8; info.shape.slot_bytes as usize];
    let mut caught = 0;
    while !stop.load(Ordering::Relaxed) {
        let rel = slots[rng.random_range(0..slots.len())];
        let r = rng.random_range(0..info.replica_count());
        let at = info.ptr(r, rel);
        env.region(at.mn).read(at.offset, &mut slot).expect("slot in range");
        let Ok(cvt) = Cvt::decode(&slot, vnum) else { continue };
        let (word, kind) = match rng.random_range(0..3) {
            // A CVT READ of the primary held between its Vcells while writers overwrite
            // them (GC): the READ returns cells from before and after.
            0 => (
                rel + cell_off(rng.random_range(1..vnum as usize)) as u64,
                StallKind::Read,
            ),
            1 if cvt.bar != 0 => (
                cvt.bar + 8 * rng.random_range(0..(cvt.bar_bytes as u64 / 8).max(1)),
                read_or_write(&mut rng),
            ),
            _ => (
                cvt.vpkg + 8 * rng.random_range(1..vpkg_bytes(vb) as u64 / 8),
                read_or_write(&mut rng),
            ),
        };
        let r = if kind == StallKind::Read && word < cvt.vpkg.min(cvt.bar.max(1)) {
            0
        } else {
            r
        };
        let ptr = info.ptr(r, word);
        let gate = env.region(ptr.mn).arm_stall(kind, ptr.offset);
        let start = Instant::now();
        while !gate.is_stalled() && start.elapsed() < Duration::from_millis(2) && !stop.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        if gate.is_stalled() {
            caught += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
        gate.release();
    }
    caught
}

fn read_or_write(rng: &mut SmallRng) -> StallKind {
    if rng.random_range(0..4) < 3 {
        StallKind::Read
    } else {
        StallKind::Write
    }
}

/// The contended bank with both injectors; the outcome and the value-region stalls
/// that caught an op.
fn run_torn(proto: Motor, seed: u64) -> (Env<Motor>, Outcome, u64) {
    let setup = Setup {
        txns: 300,
        ..Setup::new(2, 44)
    };
    let env = Env::bank(proto, setup);
    let stop = AtomicBool::new(false);
    let caught = AtomicU64::new(0);
    let out = std::thread::scope(|s| {
        let env = &env;
        let (stop, caught) = (&stop, &caught);
        s.spawn(move || caught.store(stall_values(env, seed, stop), Ordering::Relaxed));
        let out = contended::run_mem(env, seed, true);
        stop.store(true, Ordering::Relaxed);
        out
    });
    (env, out, caught.into_inner())
}

#[test]
fn tears_and_gc_races_end_in_aborts_never_wrong_values() {
    for isolation in ["sr", "si"] {
        for seed in 0..2 {
            let mut k = knobs();
            k.set("isolation", isolation);
            let (env, out, caught) = run_torn(Motor::from_knobs(&k).unwrap(), seed);
            out.assert_clean(&env, &format!("{isolation}, VNum 2, value-region tears"), seed);
            eprintln!(
                "{isolation} seed {seed}: {} commits, aborts {:?}, {} CVT stalls, {caught} value-region stalls",
                out.commits, out.aborts, out.stalls
            );
            assert!(caught > 0, "no value-region stall caught an op");
        }
    }
}

/// A reader's CVT READ of key 2 is held between its two Vcells while two writes
/// overwrite both (GC with VNum 2): the READ returns the loaded version from cell 0 and
/// the third write's from cell 1, and misses the version its snapshot holds (the
/// first write's). Returns the reader's stamp of key 2, or its abort.
fn read_across_two_overwrites(variant: MotorVariant) -> Result<u32, AbortReason> {
    let env = Env::bank(Motor::with_variant(&knobs(), variant).unwrap(), Setup::new(1, 44));
    let catalog = env.catalog();
    let info = catalog.get(bank::TABLE.id()).unwrap().clone();
    let rel = env.slots(bank::TABLE.id())[&2];
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut writer = w.coordinator(&env.proto, 0).expect("coordinator");
    let restamp = |c: &mut dmtx_runtime::Coordinator<Motor>| {
        block_on(async {
            let mut t = c.begin_with(TxnHints::DECLARED);
            let o = t.add_rw(bank::TABLE, 2);
            t.execute().await.expect("writer executes");
            let v = t.bytes_mut(o);
            let (b, s) = bank::decode(2, v).unwrap();
            bank::encode(2, b, s + 1, v);
            t.commit().await.expect("writer commits");
            c.cleanup().await;
        })
    };
    restamp(&mut writer);
    let (to_reader, go) = std::sync::mpsc::channel::<()>();
    let (snapped, snapshot_taken) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let env = &env;
        let reader = s.spawn(move || {
            let w = env.mem_cn(1).worker(0).expect("worker");
            let mut c = w.coordinator(&env.proto, 0).expect("coordinator");
            block_on(async {
                let mut t = c.begin_with(TxnHints::READ_ONLY);
                t.add_ro(bank::TABLE, 1);
                t.execute().await.expect("the snapshot");
                snapped.send(()).unwrap();
                go.recv().unwrap();
                let o = t.add_ro(bank::TABLE, 2);
                match t.execute().await {
                    Ok(()) => Ok(bank::decode(2, t.bytes(o)).expect("intact").1),
                    Err(a) => Err(a.reason),
                }
            })
        });
        snapshot_taken.recv().unwrap();
        let at = info.ptr(0, rel + cell_off(1) as u64);
        let gate = env.region(at.mn).arm_stall(StallKind::Read, at.offset);
        to_reader.send(()).unwrap();
        let start = Instant::now();
        while !gate.is_stalled() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the reader's READ never reached the stall"
            );
            std::thread::yield_now();
        }
        restamp(&mut writer);
        restamp(&mut writer);
        gate.release();
        reader.join().expect("reader")
    })
}

/// Goal: the paper's check (anchors, and the largest valid version below the snapshot
/// from one READ) returns a wrong value from a CVT READ that raced two GC overwrites;
/// the full detector (`prev` links) aborts it.
#[test]
fn the_papers_anchors_alone_are_caught() {
    assert_eq!(
        read_across_two_overwrites(MotorVariant::Fixed),
        Err(AbortReason::Protocol(R_VERSION_GONE))
    );
    let wrong = read_across_two_overwrites(MotorVariant::AnchorsOnly);
    assert!(
        matches!(wrong, Ok(stamp) if stamp != 1),
        "anchors only: {wrong:?}; the snapshot's version has stamp 1"
    );
}

#[test]
fn reading_the_vpkg_before_the_attributes_is_caught() {
    dmtx_suite::assert_caught_by("motor anchors-only, Vpkg first", 40, |seed| {
        let (env, out, _) = run_torn(Motor::with_variant(&knobs(), MotorVariant::VpkgFirst).unwrap(), seed);
        out.findings(&env)
    });
}
