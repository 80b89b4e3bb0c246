//! Tests of the checker.
//!
//! Goal: every finding kind is reported on a minimal history that has it, with the
//! verdict each level gives, and never on histories that a serial execution produces.
//! Method: hand-built histories (one test per kind), then property tests against a
//! serial executor model, with and without an injected stale read.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::history::{Read, TxnRecord, Write, WriteKind};

/// Keys of hand-built histories.
const X: u64 = 1;
const Y: u64 = 2;
const Z: u64 = 3;

/// A hand-built transaction: committed, table 0, no times unless set.
struct T(TxnRecord);

fn txn(id: u64) -> T {
    T(TxnRecord {
        id,
        coord: 0,
        start_ns: 0,
        end_ns: 0,
        outcome: Outcome::Committed,
        reads: vec![],
        writes: vec![],
    })
}

impl T {
    /// Read `version` of `key`.
    fn r(mut self, key: u64, version: u64) -> Self {
        self.0.reads.push(Read { table: 0, key, version });
        self
    }
    /// Install this transaction's id as the version of `key` over `prev`.
    fn w(self, key: u64, prev: u64) -> Self {
        let id = self.0.id;
        self.wv(key, Some(prev), id)
    }
    /// Install `version` of `key` over `prev`.
    fn wv(mut self, key: u64, prev: Option<u64>, version: u64) -> Self {
        let kind = if prev.is_some() {
            WriteKind::Update
        } else {
            WriteKind::Insert
        };
        self.0.writes.push(Write {
            table: 0,
            key,
            prev,
            version,
            kind,
        });
        self
    }
    fn aborted(mut self) -> Self {
        self.0.outcome = Outcome::Aborted;
        self
    }
    fn at(mut self, start_ns: u64, end_ns: u64) -> Self {
        self.0.start_ns = start_ns;
        self.0.end_ns = end_ns;
        self
    }
}

fn hist(ts: Vec<T>) -> History {
    let records: Vec<TxnRecord> = ts.into_iter().map(|t| t.0).collect();
    History::from_records(&records)
}

fn opts(level: Level, real_time: bool) -> CheckOptions {
    CheckOptions {
        level,
        real_time,
        ..CheckOptions::default()
    }
}

fn ser(h: &History) -> Report {
    check(h, &opts(Level::Serializable, false))
}

fn si(h: &History) -> Report {
    check(h, &opts(Level::SnapshotIsolation, false))
}

/// All four modes.
fn modes() -> [CheckOptions; 4] {
    [
        opts(Level::Serializable, false),
        opts(Level::Serializable, true),
        opts(Level::SnapshotIsolation, false),
        opts(Level::SnapshotIsolation, true),
    ]
}

/// The only kinds with a non-zero count in `r`.
fn kinds(r: &Report) -> Vec<FindingKind> {
    r.counts.keys().copied().collect()
}

/// The listed findings of `kind`, printed.
fn printed(r: &Report, kind: FindingKind) -> Vec<String> {
    r.findings
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| f.to_string())
        .collect()
}

#[test]
fn test_check_serial_history_is_clean() {
    let h = hist(vec![
        txn(1).r(X, 0).w(X, 0).at(0, 10),
        txn(2).r(X, 1).w(X, 1).r(Y, 0).at(20, 30),
        txn(3).r(X, 2).r(Y, 0).w(Y, 0).at(40, 50),
        txn(4).w(X, 2).aborted().at(60, 70), // never read: invisible
        txn(5).w(Z, 0).r(Z, 5).at(80, 90),   // reads its own write
    ]);
    for o in modes() {
        let r = check(&h, &o);
        assert!(r.is_clean(), "{o:?}: {r}");
        assert!(r.findings.is_empty(), "{r}");
        assert_eq!((r.txns, r.committed, r.aborted), (5, 4, 1));
    }
    let r = ser(&h);
    // ww: T1 -> T2 (x); wr: T1 -> T2, T2 -> T3 (x); rw: T2 -> T3 (y0).
    assert_eq!(
        r.edges,
        EdgeCounts {
            ww: 1,
            wr: 2,
            rw: 1,
            rt: 0
        }
    );
    assert_eq!(r.txns_in_cycles, 0);
    assert_eq!(
        r.summary(),
        "history: 5 txns (4 committed), no anomalies (serializable)"
    );
}

#[test]
fn test_check_empty_history_is_clean() {
    for o in modes() {
        let r = check(&History::new(), &o);
        assert!(r.is_clean(), "{r}");
        assert_eq!(r.txns, 0);
    }
}

/// G0: T1 and T2 write x and y in opposite orders.
#[test]
fn test_check_g0() {
    let h = hist(vec![txn(1).w(X, 0).wv(Y, Some(2), 1), txn(2).wv(X, Some(1), 2).w(Y, 0)]);
    for o in modes() {
        let r = check(&h, &o);
        assert!(!r.is_clean(), "{o:?}: {r}");
        assert_eq!(kinds(&r), vec![FindingKind::G0], "{r}");
    }
    assert_eq!(
        printed(&ser(&h), FindingKind::G0),
        ["G0: T0/1 -ww[t0:k1 v0/1->v0/2]-> T0/2 -ww[t0:k2 v0/2->v0/1]-> T0/1"]
    );
}

/// G1a: a committed transaction reads, another overwrites, an aborted write.
#[test]
fn test_check_g1a() {
    let h = hist(vec![txn(1).w(X, 0).aborted(), txn(2).r(X, 1), txn(3).w(X, 1)]);
    for o in modes() {
        let r = check(&h, &o);
        assert_eq!(kinds(&r), vec![FindingKind::G1a], "{r}");
        assert_eq!(r.count(FindingKind::G1a), 2);
    }
    assert_eq!(
        printed(&ser(&h), FindingKind::G1a),
        [
            "G1a: T0/3 overwrote t0:k1 v0/1, written by T0/1 (aborted writer)",
            "G1a: T0/2 read t0:k1 v0/1, written by T0/1 (aborted writer)",
        ]
    );
    // An aborted reader of an aborted write is no anomaly.
    let h = hist(vec![txn(1).w(X, 0).aborted(), txn(2).r(X, 1).aborted()]);
    assert!(ser(&h).is_clean());
}

/// G1b: T1 writes x twice; T2 reads the first, intermediate version.
#[test]
fn test_check_g1b() {
    let h = hist(vec![
        txn(1).wv(X, Some(0), 100).wv(X, Some(100), 1),
        txn(2).r(X, 100),
        txn(3).r(X, 1),
    ]);
    for o in modes() {
        let r = check(&h, &o);
        assert_eq!(kinds(&r), vec![FindingKind::G1b], "{r}");
        assert_eq!(r.count(FindingKind::G1b), 1, "reading the final version is fine");
    }
    assert_eq!(
        printed(&ser(&h), FindingKind::G1b),
        ["G1b: T0/2 read t0:k1 v0/100, written by T0/1 (intermediate version)"]
    );
}

/// G1c: T1 and T2 each read what the other wrote.
#[test]
fn test_check_g1c() {
    let h = hist(vec![txn(1).w(X, 0).r(Y, 2), txn(2).w(Y, 0).r(X, 1)]);
    for o in modes() {
        let r = check(&h, &o);
        assert_eq!(kinds(&r), vec![FindingKind::G1c], "{o:?}: {r}");
    }
    assert_eq!(
        printed(&ser(&h), FindingKind::G1c),
        ["G1c: T0/1 -wr[t0:k1 v0/1]-> T0/2 -wr[t0:k2 v0/2]-> T0/1"]
    );
}

/// G-single (read skew): T1 reads x0; T2 writes x and y; T1 reads T2's y.
#[test]
fn test_check_g_single() {
    let h = hist(vec![txn(1).r(X, 0).r(Y, 2), txn(2).w(X, 0).w(Y, 0)]);
    for o in modes() {
        let r = check(&h, &o);
        assert!(!r.is_clean(), "{o:?}");
        assert_eq!(kinds(&r), vec![FindingKind::GSingle], "{o:?}: {r}");
    }
    assert_eq!(
        printed(&ser(&h), FindingKind::GSingle),
        ["G-single: T0/1 -rw[t0:k1 v0]-> T0/2 -wr[t0:k2 v0/2]-> T0/1"]
    );
}

/// G-single across three ww+wr components (found by the pruned second pass):
/// T1 -rw-> T2 -wr-> T3 -wr-> T1.
#[test]
fn test_check_g_single_through_components() {
    let h = hist(vec![
        txn(1).r(X, 0).r(Z, 3),
        txn(2).w(X, 0).w(Y, 0),
        txn(3).r(Y, 2).w(Z, 0),
    ]);
    for o in modes() {
        let r = check(&h, &o);
        assert_eq!(kinds(&r), vec![FindingKind::GSingle], "{o:?}: {r}");
        assert_eq!(r.findings[0].cycle().unwrap().len(), 3);
    }
}

/// G2 (write skew): flagged under serializability, allowed under SI.
#[test]
fn test_check_g2_write_skew() {
    let h = hist(vec![txn(1).r(X, 0).w(Y, 0), txn(2).r(Y, 0).w(X, 0)]);
    let r = ser(&h);
    assert!(!r.is_clean());
    assert_eq!(kinds(&r), vec![FindingKind::G2], "{r}");
    assert_eq!(
        printed(&r, FindingKind::G2),
        ["G2: T0/1 -rw[t0:k1 v0]-> T0/2 -rw[t0:k2 v0]-> T0/1"]
    );
    let r = si(&h);
    assert!(r.is_clean(), "{r}");
    assert_eq!(kinds(&r), vec![FindingKind::WriteSkew], "{r}");
    assert_eq!(r.anomalies().count(), 0);
    assert!(
        r.summary()
            .ends_with("no anomalies (snapshot isolation); allowed: 1 write skew"),
        "{r}"
    );
}

/// A cycle with two rw edges, neither next to the other, cannot happen under SI:
/// T1 -rw-> T2 -wr-> T3 -rw-> T4 -wr-> T1.
#[test]
fn test_check_g2_without_adjacent_rw_violates_si() {
    let h = hist(vec![
        txn(1).r(1, 0).r(4, 4),
        txn(2).w(1, 0).w(2, 0),
        txn(3).r(2, 2).r(3, 0),
        txn(4).w(3, 0).w(4, 0),
    ]);
    for r in [ser(&h), si(&h)] {
        assert!(!r.is_clean(), "{r}");
        assert_eq!(kinds(&r), vec![FindingKind::G2], "{r}");
        assert_eq!(r.findings[0].cycle().unwrap().len(), 4);
    }
}

/// Lost update: two committed transactions overwrite the same version.
#[test]
fn test_check_lost_update() {
    // Read-modify-write by both: a fork, and the rw cycle of write skew.
    let h = hist(vec![txn(1).r(X, 0).w(X, 0), txn(2).r(X, 0).w(X, 0)]);
    let r = si(&h);
    assert!(!r.is_clean(), "SI forbids lost updates: {r}");
    assert_eq!(kinds(&r), vec![FindingKind::LostUpdate, FindingKind::WriteSkew]);
    assert_eq!(
        printed(&r, FindingKind::LostUpdate),
        ["lost update: t0:k1 v0 (by init) overwritten by T0/1 (v0/1) and T0/2 (v0/2)"]
    );
    assert_eq!(kinds(&ser(&h)), vec![FindingKind::LostUpdate, FindingKind::G2]);
    // Blind writes: only the fork shows it.
    let h = hist(vec![txn(1).w(X, 0), txn(2).w(X, 0)]);
    for o in modes() {
        assert_eq!(kinds(&check(&h, &o)), vec![FindingKind::LostUpdate]);
    }
}

/// Phantom version: a read (or overwrite) of a version nobody wrote.
#[test]
fn test_check_phantom_version() {
    let h = hist(vec![txn(1).r(X, 77), txn(2).w(Y, 88)]);
    for o in modes() {
        let r = check(&h, &o);
        assert_eq!(kinds(&r), vec![FindingKind::PhantomVersion], "{r}");
        assert_eq!(r.count(FindingKind::PhantomVersion), 2);
    }
    assert_eq!(
        printed(&ser(&h), FindingKind::PhantomVersion)[0],
        "phantom version: T0/1 read t0:k1 v0/77, which no transaction wrote"
    );
}

/// Duplicate version: two transactions install the same version of a key.
#[test]
fn test_check_duplicate_version() {
    let h = hist(vec![
        txn(1).wv(X, Some(0), 5),
        txn(2).wv(X, None, 5),
        txn(3).wv(Y, None, 0),
    ]);
    let r = ser(&h);
    assert_eq!(kinds(&r), vec![FindingKind::DuplicateVersion], "{r}");
    assert_eq!(
        printed(&r, FindingKind::DuplicateVersion),
        [
            "duplicate version: t0:k1 v0/5 installed by T0/1 and T0/2",
            "duplicate version: t0:k2 v0 installed by init and T0/3"
        ]
    );
}

/// Real time: T2 starts after T1 ended but reads what T1 overwrote, so it is serialized
/// before T1. Serializable and SI allow it; their real-time variants do not.
#[test]
fn test_check_real_time() {
    let h = hist(vec![txn(1).w(X, 0).at(0, 10), txn(2).r(X, 0).at(20, 30)]);
    for level in [Level::Serializable, Level::SnapshotIsolation] {
        let r = check(&h, &opts(level, false));
        assert!(r.is_clean(), "{r}");
        let r = check(&h, &opts(level, true));
        assert_eq!(kinds(&r), vec![FindingKind::RealTime], "{r}");
        assert_eq!(
            printed(&r, FindingKind::RealTime),
            ["real-time: T0/2 -rw[t0:k1 v0]-> T0/1 -rt[end 10 < start 20]-> T0/2"]
        );
        // T1 -> E0, T2 -> E1, E0 -> E1, E0 -> T2.
        assert_eq!(r.edges.rt, 4);
    }
    assert_eq!(
        check(&h, &opts(Level::Serializable, true)).level_name(),
        "strict serializable"
    );
    // Overlapping in time, the same reads are fine.
    let h = hist(vec![txn(1).w(X, 0).at(0, 10), txn(2).r(X, 0).at(5, 30)]);
    for o in modes() {
        assert!(check(&h, &o).is_clean());
    }
}

/// Under strong SI, a real-time cycle with two adjacent rw edges is write skew: allowed.
#[test]
fn test_check_real_time_write_skew_allowed_under_si() {
    // T1 and T2 overlap and skew; T3 starts after both ended and sees both.
    let h = hist(vec![
        txn(1).r(X, 0).w(Y, 0).at(0, 10),
        txn(2).r(Y, 0).w(X, 0).at(5, 15),
        txn(3).r(X, 2).r(Y, 1).at(20, 30),
    ]);
    let r = check(&h, &opts(Level::SnapshotIsolation, true));
    assert!(r.is_clean(), "{r}");
    assert_eq!(kinds(&r), vec![FindingKind::WriteSkew]);
}

#[test]
fn test_check_findings_max_per_kind() {
    // 30 independent G0 pairs.
    let mut ts = Vec::new();
    for i in 0..30u64 {
        let (a, b, x, y) = (2 * i + 1, 2 * i + 2, 10 * i + 1, 10 * i + 2);
        ts.push(txn(a).w(x, 0).wv(y, Some(b), a));
        ts.push(txn(b).wv(x, Some(a), b).w(y, 0));
    }
    let r = check(
        &hist(ts),
        &CheckOptions {
            findings_max_per_kind: 10,
            ..CheckOptions::default()
        },
    );
    assert_eq!(r.count(FindingKind::G0), 30);
    assert_eq!(r.findings.len(), 10);
    assert_eq!(r.violations(), 30);
    assert_eq!(r.txns_in_cycles, 60);
    assert!(r.to_string().ends_with("  ... and 20 more G0\n"), "{r}");
}

/// Several anomalies in one component are each reported once.
#[test]
fn test_check_g0_and_g1c_in_one_component() {
    // G0 between T1 and T2; T3 reads T1's x and T1 reads T3's z: G1c.
    let h = hist(vec![
        txn(1).w(X, 0).wv(Y, Some(2), 1).r(Z, 3),
        txn(2).wv(X, Some(1), 2).w(Y, 0),
        txn(3).r(X, 1).w(Z, 0),
    ]);
    let r = ser(&h);
    assert_eq!(r.count(FindingKind::G0), 1, "{r}");
    assert_eq!(r.count(FindingKind::G1c), 1, "{r}");
}

#[test]
fn test_check_options_from_isolation() {
    use dmtx_runtime::Isolation;
    assert_eq!(check_options(Isolation::Serializable), opts(Level::Serializable, false));
    assert_eq!(
        check_options(Isolation::StrictSerializable),
        opts(Level::Serializable, true)
    );
    assert_eq!(
        check_options(Isolation::SnapshotIsolation),
        opts(Level::SnapshotIsolation, false)
    );
}

#[test]
fn test_graph_build_merges_parallel_edges() {
    let g = Graph::build(
        3,
        vec![
            edge(0, RW, 1),
            edge(0, WW, 1),
            edge(0, WR, 2),
            edge(2, RT, 0),
            edge(0, WR, 1),
        ],
    );
    assert_eq!(g.out(0), [(1 << 2) | WW, (2 << 2) | WR]);
    assert_eq!(g.out(1), [] as [u32; 0]);
    assert_eq!(g.out(2), [RT]);
}

#[test]
fn test_tarjan() {
    // 0 -> 1 -> 2 -> 0, 2 -> 3, 3 -> 4 -> 3 (rw), 5 alone.
    let edges = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4)]
        .iter()
        .map(|&(a, b)| edge(a, WW, b));
    let g = Graph::build(6, edges.chain([edge(4, RW, 3)]).collect());
    let all = tarjan(&g, M_WW | M_RW, 0..6, |_| true);
    assert_eq!(all.ranges.len(), 2);
    let of = &all.of;
    assert!(of[0] == of[1] && of[1] == of[2]);
    assert!(of[3] == of[4] && of[3] != of[0]);
    assert!(of[0] > of[3], "reverse topological numbering: {of:?}");
    let ww = tarjan(&g, M_WW, 0..6, |_| true);
    assert_eq!(ww.ranges.len(), 1, "the rw edge closes 3-4 only with rw");
    let some = tarjan(&g, M_WW, 0..6, |v| v != 1);
    assert!(some.ranges.is_empty());
    assert_eq!(some.of[1], NONE);
}

// ---- Property tests against a serial executor model. ----

/// One operation of a planned transaction.
#[derive(Clone, Debug)]
enum Op {
    Read(usize),
    Write(usize),
    ReadModifyWrite(usize),
    Delete(usize),
}

#[derive(Clone, Debug)]
struct Plan {
    ops: Vec<Op>,
    aborted: bool,
}

/// Keys 0..KEYS_LOADED exist at version 0; the rest are inserted by their first write.
const KEYS: usize = 8;
const KEYS_LOADED: usize = 6;

fn plan() -> impl Strategy<Value = Plan> {
    let op = prop_oneof![
        4 => (0..KEYS).prop_map(Op::Read),
        2 => (0..KEYS).prop_map(Op::Write),
        3 => (0..KEYS).prop_map(Op::ReadModifyWrite),
        1 => (0..KEYS).prop_map(Op::Delete),
    ];
    (prop::collection::vec(op, 1..6), prop::bool::weighted(0.2)).prop_map(|(ops, aborted)| Plan { ops, aborted })
}

/// (table, key) of key number `k`: two tables.
fn object(k: usize) -> (u32, u64) {
    ((k % 2) as u32, (k / 2) as u64)
}

/// A stale read to inject: into transaction `txn % n`, of the key `key % eligible`
/// among those overwritten before it began; `rmw` also writes that key.
#[derive(Clone, Debug)]
struct Stale {
    txn: usize,
    key: usize,
    rmw: bool,
}

/// Execute `plans` one after another (times in execution order). Versions are the
/// transaction ids; aborted transactions' writes are never installed. Returns `None`
/// when the stale read asked for cannot be injected.
fn serial(plans: &[Plan], stale: Option<&Stale>) -> Option<History> {
    // Committed versions of each key, oldest first (`None` = absent).
    let mut versions: Vec<Vec<u64>> = (0..KEYS)
        .map(|k| if k < KEYS_LOADED { vec![0] } else { vec![] })
        .collect();
    let mut records = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        // Spread ids over coordinators to exercise `T<coord>/<seq>`.
        let id = (((i % 3) as u64) << crate::report::SEQ_BITS) | (i as u64 + 1);
        let mut t = TxnRecord {
            id,
            coord: (i % 3) as u32,
            start_ns: 100 * i as u64,
            end_ns: 100 * i as u64 + 50,
            outcome: if p.aborted {
                Outcome::Aborted
            } else {
                Outcome::Committed
            },
            reads: vec![],
            writes: vec![],
        };
        let mut mine: HashMap<usize, u64> = HashMap::new();
        let current = |k: usize, mine: &HashMap<usize, u64>| mine.get(&k).copied().or(versions[k].last().copied());
        for op in &p.ops {
            let (table, key) = object(*op_key(op));
            let k = *op_key(op);
            if matches!(op, Op::Read(_) | Op::ReadModifyWrite(_)) {
                if let Some(version) = current(k, &mine) {
                    t.reads.push(Read { table, key, version });
                }
            }
            if matches!(op, Op::Write(_) | Op::ReadModifyWrite(_) | Op::Delete(_)) && !mine.contains_key(&k) {
                let prev = versions[k].last().copied();
                let kind = match (op, prev) {
                    (Op::Delete(_), Some(_)) => WriteKind::Delete,
                    (Op::Delete(_), None) => continue,
                    (_, Some(_)) => WriteKind::Update,
                    (_, None) => WriteKind::Insert,
                };
                t.writes.push(Write {
                    table,
                    key,
                    prev,
                    version: id,
                    kind,
                });
                mine.insert(k, id);
            }
        }
        if let Some(s) = stale.filter(|s| s.txn % plans.len() == i) {
            // Keys with a committed overwrite before this transaction began.
            let eligible: Vec<usize> = (0..KEYS).filter(|&k| versions[k].len() >= 2).collect();
            if eligible.is_empty() || p.aborted {
                return None;
            }
            let k = eligible[s.key % eligible.len()];
            let (table, key) = object(k);
            let old = versions[k][versions[k].len() - 2];
            t.reads.retain(|r| (r.table, r.key) != (table, key));
            t.reads.push(Read {
                table,
                key,
                version: old,
            });
            let target = if s.rmw {
                Some(k)
            } else {
                (0..KEYS).find(|&j| j != k && !versions[j].is_empty())
            };
            let target = target?;
            if let Entry::Vacant(e) = mine.entry(target) {
                let (table, key) = object(target);
                let prev = versions[target].last().copied();
                t.writes.push(Write {
                    table,
                    key,
                    prev,
                    version: id,
                    kind: WriteKind::Update,
                });
                e.insert(id);
            }
        }
        if !p.aborted {
            for (k, v) in mine {
                versions[k].push(v);
            }
        }
        records.push(t);
    }
    Some(History::from_records(&records))
}

fn op_key(op: &Op) -> &usize {
    match op {
        Op::Read(k) | Op::Write(k) | Op::ReadModifyWrite(k) | Op::Delete(k) => k,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A serial execution is clean under every level, with real time too.
    #[test]
    fn prop_serial_histories_are_clean(plans in prop::collection::vec(plan(), 0..40)) {
        let h = serial(&plans, None).expect("no injection");
        for o in modes() {
            let r = check(&h, &o);
            prop_assert!(r.is_clean(), "{:?}: {}", o, r);
            prop_assert_eq!(r.txns_in_cycles, 0);
        }
    }

    /// One stale read (of a version overwritten before the transaction began, in a
    /// transaction that writes) is caught with real time on; when the transaction also
    /// writes the key it read stale, it is caught without real time too (G-single).
    #[test]
    fn prop_stale_read_is_caught(
        plans in prop::collection::vec(plan(), 2..40),
        txn in 0usize..1000,
        key in 0usize..KEYS,
        rmw in any::<bool>(),
    ) {
        let stale = Stale { txn, key, rmw };
        let h = serial(&plans, Some(&stale));
        prop_assume!(h.is_some());
        let h = h.unwrap();
        for level in [Level::Serializable, Level::SnapshotIsolation] {
            let r = check(&h, &opts(level, true));
            prop_assert!(!r.is_clean(), "{:?} with real time: {}", level, r);
            if rmw {
                let r = check(&h, &opts(level, false));
                prop_assert!(!r.is_clean(), "{:?}: {}", level, r);
                prop_assert!(r.count(FindingKind::GSingle) + r.count(FindingKind::LostUpdate) > 0, "{}", r);
            }
        }
    }
}
