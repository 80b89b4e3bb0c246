//! Motor's isolation rules (issue 28 items 4 and 9): SR validates the RO data of
//! read-write transactions, snapshots of read-only and SI transactions read at the
//! completed-commit watermark, SI keeps first-committer-wins; each rule's broken
//! variant is caught. SI admits write skew, SR does not.

use dmtx_protocols::motor::{Motor, MotorVariant};
use dmtx_runtime::{block_on, AbortReason, Knobs, Protocol, TxnHints};
use dmtx_suite::{bank, Env, Setup, Transport};

fn knobs(k: &[&str]) -> Knobs {
    Knobs::parse(k.iter().copied()).unwrap()
}

/// Goal: without validating RO data, SR admits write skew; the checker catches it.
#[test]
fn sr_without_ro_validation_is_caught() {
    dmtx_suite::assert_caught(
        "motor SR without RO validation",
        || Motor::with_variant(&knobs(&[]), MotorVariant::NoRoValidation).unwrap(),
        &Setup::new(2, 20),
        Transport::Mem,
        20,
    );
}

/// Goal: a read-only snapshot at the raw counter misses commits still being written
/// (writers pause between T_commit and their install, so the window is real); the
/// watermark snapshot, with the same pause, does not.
#[test]
fn raw_counter_snapshots_for_read_only_txns_are_caught() {
    let delay = 30_000;
    let env = Env::bank(
        Motor::from_knobs(&knobs(&[])).unwrap().with_install_delay(delay),
        Setup::new(2, 20),
    );
    let out = dmtx_suite::contended::run(&env, Transport::Mem, 0, None);
    out.assert_clean(&env, "watermark snapshots, installs delayed", 0);
    dmtx_suite::assert_caught(
        "motor raw-counter T_start for RO txns",
        || {
            Motor::with_variant(&knobs(&[]), MotorVariant::RawStartForRo)
                .unwrap()
                .with_install_delay(delay)
        },
        &Setup::new(2, 20),
        Transport::Mem,
        20,
    );
}

/// Goal: SI without first-committer-wins loses updates; the checker (at snapshot
/// isolation) and the bank's money catch it.
#[test]
fn si_without_first_committer_wins_is_caught() {
    dmtx_suite::assert_caught(
        "motor SI without first-committer-wins",
        || Motor::with_variant(&knobs(&["isolation=si"]), MotorVariant::SiNoFirstCommitterWins).unwrap(),
        &Setup::new(2, 20),
        Transport::Mem,
        20,
    );
}

/// Goal: write skew, on a workload built for it. Two transactions each read one
/// account (RO) and write the other, both executed before either commits. SI commits
/// both (the skew SI allows); SR commits at most one (validation of the RO data, or
/// the other's lock, stops the second).
#[test]
fn write_skew_commits_in_si_and_not_in_sr() {
    for (iso, both) in [("si", true), ("sr", false)] {
        let env = Env::bank(
            Motor::from_knobs(&knobs(&[&format!("isolation={iso}")])).unwrap(),
            Setup::new(2, 20),
        );
        let w = env.mem_cn(0).worker(0).expect("worker");
        let mut c1 = w.coordinator(&env.proto, 0).expect("coordinator");
        let mut c2 = w.coordinator(&env.proto, 1).expect("coordinator");
        let (a, b) = (1, 2);
        let committed = block_on(async {
            let mut t1 = c1.begin_with(TxnHints::DECLARED);
            let _ = t1.add_ro(bank::TABLE, a);
            let y1 = t1.add_rw(bank::TABLE, b);
            let mut t2 = c2.begin_with(TxnHints::DECLARED);
            let _ = t2.add_ro(bank::TABLE, b);
            let x2 = t2.add_rw(bank::TABLE, a);
            t1.execute().await.expect("t1 executes");
            t2.execute().await.expect("t2 executes");
            for (t, obj, key) in [(&mut t1, y1, b), (&mut t2, x2, a)] {
                let v = t.bytes_mut(obj);
                let (bal, s) = bank::decode(key, v).expect("a bank value");
                bank::encode(key, bal - 150, s + 1, v);
            }
            let r1 = t1.commit().await;
            let r2 = t2.commit().await;
            if let Err(e) = &r1 {
                assert!(matches!(e.reason, AbortReason::Validation), "{e}");
            }
            if let Err(e) = &r2 {
                assert!(matches!(e.reason, AbortReason::Validation), "{e}");
            }
            r1.is_ok() as u32 + r2.is_ok() as u32
        });
        if both {
            assert_eq!(committed, 2, "{iso}: both skewed writers commit");
        } else {
            assert_eq!(committed, 1, "{iso}: one skewed writer commits");
        }
    }
}
