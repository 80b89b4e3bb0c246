//! The snapshot check against a multi-version toy with a stale-snapshot bug.
//!
//! Goal: the timestamp check catches a multi-version protocol whose reads use an older
//! snapshot than the start timestamp it reports, which the dependency graph alone
//! (with or without session order) accepts; the same toy without the bug is clean.
//! Method: a deterministic toy of snapshot isolation (multi-version chains, one
//! timestamp counter, first-committer-wins, deletes and re-inserts), its coordinators
//! interleaved one step at a time by a seeded RNG, recorded as a history with start and
//! commit timestamps. In the broken variant, read-only coordinators read the snapshot
//! [`LAG`] ticks before their start timestamp (as a stale timestamp cache would): each
//! such snapshot is consistent, so the graph shows no cycle, but it is not the snapshot
//! the start timestamp names.

use dmtx_check::history::{History, Outcome, Read, TxnRecord, Write, WriteKind, INITIAL_VERSION};
use dmtx_check::{check, CheckOptions, FindingKind, Level};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: u64 = 12;
/// Coordinators `0..WRITERS` run read-write transactions, the rest read-only ones.
const WRITERS: u32 = 4;
const COORDS: u32 = 6;
const STEPS: usize = 6000;
/// How far behind its start timestamp the broken variant's readers read.
const LAG: u64 = 6;
const SEQ_BITS: u32 = dmtx_check::report::SEQ_BITS;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Variant {
    Fixed,
    StaleSnapshot,
}

/// One committed version of a key.
#[derive(Copy, Clone)]
struct Version {
    commit_ts: u64,
    id: u64,
    deleted: bool,
}

/// A transaction in progress on one coordinator.
struct Running {
    rec: TxnRecord,
    snapshot_ts: u64,
    keys: Vec<u64>,
    next: usize,
}

struct Toy {
    variant: Variant,
    /// Committed versions of each key, oldest first; every key is bulk-loaded at 0.
    chains: Vec<Vec<Version>>,
    /// The timestamp counter: the last commit timestamp handed out.
    clock: u64,
    seq: Vec<u64>,
    running: Vec<Option<Running>>,
    history: Vec<TxnRecord>,
}

impl Toy {
    fn new(variant: Variant) -> Self {
        let loaded = Version {
            commit_ts: 0,
            id: INITIAL_VERSION,
            deleted: false,
        };
        Toy {
            variant,
            chains: vec![vec![loaded]; KEYS as usize],
            clock: 0,
            seq: vec![0; COORDS as usize],
            running: (0..COORDS).map(|_| None).collect(),
            history: Vec::new(),
        }
    }

    /// The version of `key` visible at `ts`: the newest committed at or before it.
    fn visible(&self, key: u64, ts: u64) -> Version {
        *self.chains[key as usize]
            .iter()
            .rev()
            .find(|v| v.commit_ts <= ts)
            .expect("the load is visible at every timestamp")
    }

    fn begin(&mut self, c: u32, step: usize, rng: &mut SmallRng) {
        self.seq[c as usize] += 1;
        let id = ((c as u64) << SEQ_BITS) | self.seq[c as usize];
        let start_ts = self.clock;
        let reader = c >= WRITERS;
        let snapshot_ts = match self.variant {
            Variant::StaleSnapshot if reader => start_ts.saturating_sub(LAG),
            _ => start_ts,
        };
        let a = rng.random_range(0..KEYS);
        let b = (a + rng.random_range(1..KEYS)) % KEYS;
        let keys = if reader {
            vec![a, b, (b + 1 + rng.random_range(0..KEYS - 2)) % KEYS]
        } else {
            vec![a, b]
        };
        self.running[c as usize] = Some(Running {
            rec: TxnRecord {
                id,
                coord: c,
                start_ns: 10 * step as u64,
                end_ns: 0,
                start_ts: Some(start_ts),
                commit_ts: None,
                outcome: Outcome::Committed,
                reads: vec![],
                writes: vec![],
            },
            snapshot_ts,
            keys,
            next: 0,
        });
    }

    /// Read the next key at the transaction's snapshot.
    fn read(&mut self, c: u32) {
        let r = self.running[c as usize].as_ref().expect("a running transaction");
        let key = r.keys[r.next];
        let v = self.visible(key, r.snapshot_ts);
        let read = if v.deleted {
            Read::absent(0, key, v.id)
        } else {
            Read::of(0, key, v.id)
        };
        let r = self.running[c as usize].as_mut().expect("a running transaction");
        r.rec.reads.push(read);
        r.next += 1;
    }

    /// A writer writes its first key (update, delete 1 in 6, or re-insert when it read
    /// it absent) under first-committer-wins; a reader just commits.
    fn commit(&mut self, c: u32, step: usize, rng: &mut SmallRng) {
        let mut r = self.running[c as usize].take().expect("a running transaction");
        r.rec.end_ns = 10 * step as u64 + 5;
        if c < WRITERS {
            let read = r.rec.reads[0];
            let kind = if read.absent {
                WriteKind::Insert
            } else if rng.random_ratio(1, 6) {
                WriteKind::Delete
            } else {
                WriteKind::Update
            };
            r.rec.writes.push(Write {
                table: 0,
                key: read.key,
                prev: Some(read.version),
                version: r.rec.id,
                kind,
            });
            let start_ts = r.rec.start_ts.expect("every toy transaction has one");
            let newest = self.chains[read.key as usize].last().expect("loaded");
            if newest.commit_ts > start_ts {
                r.rec.outcome = Outcome::Aborted;
            } else {
                self.clock += 1;
                r.rec.commit_ts = Some(self.clock);
                self.chains[read.key as usize].push(Version {
                    commit_ts: self.clock,
                    id: r.rec.id,
                    deleted: kind == WriteKind::Delete,
                });
            }
        }
        self.history.push(r.rec);
    }

    fn run(variant: Variant, seed: u64) -> History {
        let mut toy = Toy::new(variant);
        let mut rng = SmallRng::seed_from_u64(seed);
        for step in 0..STEPS {
            let c = rng.random_range(0..COORDS);
            match &toy.running[c as usize] {
                None => toy.begin(c, step, &mut rng),
                Some(r) if r.next < r.keys.len() => toy.read(c),
                Some(_) => toy.commit(c, step, &mut rng),
            }
        }
        History::from_records(&toy.history)
    }
}

/// The history as a protocol without timestamps would record it.
fn without_timestamps(h: &History) -> History {
    let records: Vec<TxnRecord> = (0..h.len())
        .map(|i| {
            let mut r = h.record(i);
            r.start_ts = None;
            r.commit_ts = None;
            r
        })
        .collect();
    History::from_records(&records)
}

fn si(real_time: bool, sessions: bool) -> CheckOptions {
    CheckOptions {
        level: Level::SnapshotIsolation,
        real_time,
        sessions,
        ..CheckOptions::default()
    }
}

#[test]
fn fixed_toy_sees_its_snapshots() {
    for seed in 0..3 {
        let h = Toy::run(Variant::Fixed, seed);
        for real_time in [false, true] {
            let r = check(&h, &si(real_time, true));
            assert!(r.is_clean(), "seed {seed}: {r}");
            assert!(r.snapshot_reads > 1000, "seed {seed}: {r:?}");
            assert!(r.edges.so > 0 && r.aborted > 0, "seed {seed}: {r:?}");
        }
        let absent = h.reads.iter().filter(|r| r.absent).count();
        assert!(absent > 0, "seed {seed}: the toy reads deleted keys");
    }
}

#[test]
fn stale_snapshot_is_caught_by_timestamps_only() {
    for seed in 0..3 {
        let h = Toy::run(Variant::StaleSnapshot, seed);
        let r = check(&h, &si(false, true));
        assert!(r.count(FindingKind::Snapshot) > 0, "seed {seed}: {r}");
        assert_eq!(
            r.violations(),
            r.count(FindingKind::Snapshot),
            "seed {seed}: only the snapshots are wrong: {r}"
        );
        let f = r.findings.iter().find(|f| f.kind == FindingKind::Snapshot).unwrap();
        assert!(f.to_string().ends_with("it missed a committed write"), "{f}");
        // The graph alone, as the checker saw it before timestamps, accepts it.
        let g = without_timestamps(&h);
        for sessions in [false, true] {
            let r = check(&g, &si(false, sessions));
            assert!(r.is_clean(), "seed {seed}, sessions {sessions}: {r}");
            assert_eq!(r.snapshot_reads, 0);
        }
    }
}
