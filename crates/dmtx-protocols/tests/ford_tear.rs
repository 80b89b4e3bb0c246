//! Torn reads (DESIGN §2): a lock-free READ racing a commit WRITE may see any mixture of
//! old and new words. Method: the stall knob stops the reader's READ and the writer's
//! WRITE at chosen words of the record, producing each shape deterministically; the
//! reader runs with `reread_max = 0` so a detected tear surfaces as an abort. FORD must
//! never return a torn value; the paper's detector (trust the invisible bit) must be
//! shown returning one.
//!
//! Slot words: 0 vlock, 1 version, 2 key, 3 meta, 4 checksum, 5 balance, 6 writes, 7-9 fill.

mod common;

use std::thread;

use common::*;
use dmtx_protocols::ford::{FordConfig, FordVariant};
use dmtx_runtime::{AbortReason, Coordinator};
use dmtx_verbs::StallKind;

const KEY: u64 = 0;
const OLD: i64 = 100;
const NEW: i64 = 1100;

struct Race {
    env: Env,
    replica: usize,
    /// Byte offset of the record on the replica the reader reads.
    base: u64,
}

impl Race {
    fn new(replica: usize, variant: FordVariant) -> Self {
        let cfg = FordConfig {
            backup_read: replica == 1,
            reread_max: 0,
            variant,
            ..FordConfig::default()
        };
        let env = Env::new(4, OLD, 16, 4, cfg);
        // Warm every coordinator's address cache so no bucket READ interferes.
        let w = env.worker(0);
        let mut c = env.coord(&w, 0);
        read_one(&mut c, KEY).unwrap();
        let rel = w.ctx(0).cache.get(0, KEY).unwrap();
        let base = env.cn.catalog.get(0).unwrap().ptr(replica, rel).offset;
        Self { env, replica, base }
    }

    fn word(&self, w: u64) -> u64 {
        self.base + 8 * w
    }

    fn reader(&self) -> thread::JoinHandle<Result<Acct, dmtx_runtime::Abort>> {
        let cn = self.env.cn.clone();
        let ford = self.env.ford.clone();
        thread::spawn(move || {
            let w = cn.worker(1).unwrap();
            let mut c: Coordinator<_> = w.coordinator(&ford, 0).unwrap();
            read_one(&mut c, KEY)
        })
    }

    fn writer(&self) -> thread::JoinHandle<()> {
        let cn = self.env.cn.clone();
        let ford = self.env.ford.clone();
        thread::spawn(move || {
            let w = cn.worker(2).unwrap();
            let mut c: Coordinator<_> = w.coordinator(&ford, 0).unwrap();
            bump(&mut c, KEY, NEW - OLD).unwrap();
        })
    }

    fn region(&self) -> std::sync::Arc<dmtx_verbs::Region> {
        self.env.region(self.replica as u16)
    }

    /// Old prefix, new suffix: the reader reads words 0-5 old, the writer commits and
    /// releases, the reader reads words 6-9 new.
    fn old_prefix_new_suffix(&self) -> Result<Acct, dmtx_runtime::Abort> {
        let rs = self.region().arm_stall(StallKind::Read, self.word(6));
        let r = self.reader();
        rs.wait_stalled();
        self.writer().join().unwrap();
        rs.release();
        r.join().unwrap()
    }

    /// Alternating: reader reads word 0 old; writer writes words ..5 and stalls at 6;
    /// reader reads 1-5 new and 6-9 old.
    fn new_middle_old_suffix(&self) -> Result<Acct, dmtx_runtime::Abort> {
        let rs = self.region().arm_stall(StallKind::Read, self.word(1));
        let r = self.reader();
        rs.wait_stalled();
        let ws = self.region().arm_stall(StallKind::Write, self.word(6));
        let w = self.writer();
        ws.wait_stalled();
        rs.release();
        let res = r.join().unwrap();
        ws.release();
        w.join().unwrap();
        res
    }

    /// Several crossings: old, new 1-3, old 4-6, new 7-9.
    fn alternating(&self) -> Result<Acct, dmtx_runtime::Abort> {
        let rs1 = self.region().arm_stall(StallKind::Read, self.word(1));
        let r = self.reader();
        rs1.wait_stalled();
        let ws = self.region().arm_stall(StallKind::Write, self.word(4));
        let w = self.writer();
        ws.wait_stalled();
        let rs7 = self.region().arm_stall(StallKind::Read, self.word(7));
        rs1.release();
        rs7.wait_stalled();
        ws.release();
        w.join().unwrap();
        rs7.release();
        r.join().unwrap()
    }
}

fn is_whole(a: &Acct) -> bool {
    *a == Acct::new(OLD)
        || *a
            == Acct {
                writes: 1,
                ..Acct::new(NEW)
            }
}

type Shape = fn(&Race) -> Result<Acct, dmtx_runtime::Abort>;
const SHAPES: [(&str, Shape); 3] = [
    ("old prefix/new suffix", Race::old_prefix_new_suffix),
    ("new middle/old suffix", Race::new_middle_old_suffix),
    ("alternating", Race::alternating),
];

#[test]
fn ford_never_returns_a_torn_record() {
    for replica in [0, 1] {
        for (name, shape) in SHAPES {
            let race = Race::new(replica, FordVariant::Fixed);
            let res = shape(&race);
            match res {
                Err(a) => assert_eq!(a.reason, AbortReason::Torn, "{name} on replica {replica}"),
                Ok(v) => panic!("{name} on replica {replica}: a torn read returned {v:?}"),
            }
            // After the race the record is whole and new everywhere.
            let w = race.env.worker(5);
            let mut c = race.env.coord(&w, 0);
            assert_eq!(read_one(&mut c, KEY).unwrap().balance, NEW);
            race.env.assert_replicas_agree();
        }
    }
}

#[test]
fn trusting_the_invisible_bit_returns_torn_records() {
    // The paper's protection alone: every shape above yields a mixture.
    for replica in [0, 1] {
        for (name, shape) in SHAPES {
            let race = Race::new(replica, FordVariant::NoTearDetector);
            let v = shape(&race).unwrap_or_else(|a| panic!("{name}: {a}"));
            assert!(
                !is_whole(&v),
                "{name} on replica {replica}: expected a torn record, got {v:?}"
            );
        }
    }
}

#[test]
fn a_read_after_the_commit_cas_sees_invisible_not_torn() {
    let race = Race::new(1, FordVariant::Fixed);
    // The writer stalls in the middle of the backup WRITE: the vlock word already says
    // invisible, so a fresh reader stops there.
    let ws = race.region().arm_stall(StallKind::Write, race.word(6));
    let w = race.writer();
    ws.wait_stalled();
    let res = race.reader().join().unwrap();
    assert_eq!(res.unwrap_err().reason, AbortReason::Invisible);
    ws.release();
    w.join().unwrap();
}
