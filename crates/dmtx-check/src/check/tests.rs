//! Tests of the checker.
//!
//! Goal: every finding kind is reported on a minimal history that has it, with the
//! verdict each level gives, and never on histories that a serial execution produces.
//! Method: hand-built histories (one test per kind), then property tests against a
//! serial executor model, with and without an injected stale read.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::history::{Read, TxnRecord, Write, WriteKind};

/// Keys of hand-built histories.
const X: u64 = 1;
const Y: u64 = 2;
const Z: u64 = 3;

/// A hand-built transaction: committed, table 0, no times unless set, its own session
/// (coordinator `id`) unless [`T::session`] says otherwise.
struct T(TxnRecord);

fn txn(id: u64) -> T {
    T(TxnRecord {
        id,
        coord: id as u32,
        start_ns: 0,
        end_ns: 0,
        start_ts: None,
        commit_ts: None,
        outcome: Outcome::Committed,
        reads: vec![],
        writes: vec![],
    })
}

impl T {
    /// Read `version` of `key`.
    fn r(mut self, key: u64, version: u64) -> Self {
        self.0.reads.push(Read::of(0, key, version));
        self
    }
    /// Find `key` absent: `version` is a tombstone, or 0 when no version was seen.
    fn ra(mut self, key: u64, version: u64) -> Self {
        self.0.reads.push(Read::absent(0, key, version));
        self
    }
    /// Delete `key`, replacing `prev`: installs this transaction's id as the tombstone.
    fn del(mut self, key: u64, prev: u64) -> Self {
        let version = self.0.id;
        self.0.writes.push(Write {
            table: 0,
            key,
            prev: Some(prev),
            version,
            kind: WriteKind::Delete,
        });
        self
    }
    /// Run on coordinator `coord`: transactions of one coordinator form a session,
    /// ordered by id.
    fn session(mut self, coord: u32) -> Self {
        self.0.coord = coord;
        self
    }
    /// Start (snapshot) timestamp and commit timestamp.
    fn ts(mut self, start_ts: u64, commit_ts: Option<u64>) -> Self {
        self.0.start_ts = Some(start_ts);
        self.0.commit_ts = commit_ts;
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
        txn(1).r(X, 0).w(X, 0).at(0, 10).session(1),
        txn(2).r(X, 1).w(X, 1).r(Y, 0).at(20, 30).session(1),
        txn(3).r(X, 2).r(Y, 0).w(Y, 0).at(40, 50).session(1),
        txn(4).w(X, 2).aborted().at(60, 70).session(1), // never read: invisible
        txn(5).w(Z, 0).r(Z, 5).at(80, 90).session(1),   // reads its own write
    ]);
    for o in modes() {
        let r = check(&h, &o);
        assert!(r.is_clean(), "{o:?}: {r}");
        assert!(r.findings.is_empty(), "{r}");
        assert_eq!((r.txns, r.committed, r.aborted), (5, 4, 1));
    }
    let r = ser(&h);
    // ww: T1 -> T2 (x); wr: T1 -> T2, T2 -> T3 (x); rw: T2 -> T3 (y0); so: T1 -> T2 ->
    // T3 -> T5 (the aborted T4 is no node).
    assert_eq!(
        r.edges,
        EdgeCounts {
            ww: 1,
            wr: 2,
            rw: 1,
            rt: 0,
            so: 3,
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

/// Clocks of several hosts: a real-time edge needs a gap wider than the clocks' offset
/// bound, so an offset within the bound never invents one.
#[test]
fn test_check_real_time_clock_offset_bound() {
    // T2 starts 10 ns after T1 ended, by clocks that may differ by up to the bound.
    let h = hist(vec![txn(1).w(X, 0).at(0, 10), txn(2).r(X, 0).at(20, 30)]);
    let bounded = |ns| CheckOptions {
        clock_offset_ns_max: ns,
        ..opts(Level::Serializable, true)
    };
    assert_eq!(kinds(&check(&h, &bounded(9))), vec![FindingKind::RealTime]);
    let r = check(&h, &bounded(10));
    assert!(r.is_clean(), "a gap no wider than the bound orders nothing: {r}");
    assert_eq!(r.edges.rt, 3, "T1 -> E0, T2 -> E1, E0 -> E1; no E0 -> T2");
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

/// Session order: a coordinator that reads x at v2 and later at v1 went back in time.
/// In one session it is an anomaly at every level; in two sessions (or with sessions
/// off) it is serializable: the second reader is serialized before T2.
#[test]
fn test_check_session_reads_older_version_than_before() {
    let h = |second: u32| {
        hist(vec![
            txn(1).w(X, 0),
            txn(2).w(X, 1),
            txn(3).r(X, 2).session(10),
            txn(4).r(X, 1).session(second),
        ])
    };
    let one = h(10);
    for o in modes() {
        let r = check(&one, &o);
        assert_eq!(kinds(&r), vec![FindingKind::Session], "{o:?}: {r}");
    }
    assert_eq!(
        printed(&ser(&one), FindingKind::Session),
        ["session: T0/3 -so-> T0/4 -rw[t0:k1 v0/1]-> T0/2 -wr[t0:k1 v0/2]-> T0/3"]
    );
    let r = ser(&one);
    assert_eq!(r.edges.so, 1);
    assert!(r.sessions);
    let off = CheckOptions {
        sessions: false,
        ..CheckOptions::default()
    };
    let r = check(&one, &off);
    assert!(r.is_clean(), "sessions off: {r}");
    assert_eq!(r.edges.so, 0);
    assert!(!r.sessions);

    let two = h(11);
    for o in modes().into_iter().filter(|o| !o.real_time) {
        assert!(check(&two, &o).is_clean(), "{o:?}");
    }

    // Listed out of sequence order, or on a coordinator numbered too sparsely for the
    // table, a session is ordered by id all the same.
    let reversed = |coord: u32| {
        hist(vec![
            txn(4).r(X, 1).session(coord),
            txn(3).r(X, 2).session(coord),
            txn(2).w(X, 1),
            txn(1).w(X, 0),
        ])
    };
    for h in [reversed(10), reversed(u32::MAX)] {
        let r = ser(&h);
        assert_eq!(kinds(&r), vec![FindingKind::Session], "{r}");
        assert_eq!(
            printed(&r, FindingKind::Session),
            ["session: T0/3 -so-> T0/4 -rw[t0:k1 v0/1]-> T0/2 -wr[t0:k1 v0/2]-> T0/3"]
        );
    }
}

/// A session whose transactions are serialized in its order adds edges, not findings;
/// a session edge inside a dependency cycle adds no second finding at serializable.
#[test]
fn test_check_session_edges_add_no_finding_to_a_dependency_cycle() {
    // G-single (read skew) between two transactions of one session.
    let h = hist(vec![
        txn(1).r(X, 0).r(Y, 2).session(7),
        txn(2).w(X, 0).w(Y, 0).session(7),
    ]);
    let r = ser(&h);
    assert_eq!(kinds(&r), vec![FindingKind::GSingle], "{r}");
    assert_eq!(r.edges.so, 1);
}

/// A hand-built timestamped history: T1 installs x at commit ts 2, T2 at 4.
fn two_versions_of_x() -> Vec<T> {
    vec![txn(1).w(X, 0).ts(1, Some(2)), txn(2).r(X, 1).w(X, 1).ts(3, Some(4))]
}

/// The same history without timestamps: what the graph alone sees.
fn without_timestamps(h: &History) -> History {
    let mut records: Vec<TxnRecord> = (0..h.len()).map(|i| h.record(i)).collect();
    for r in &mut records {
        r.start_ts = None;
        r.commit_ts = None;
    }
    History::from_records(&records)
}

/// Snapshot: a read-only transaction starting at 5 reads v1 (commit 2) although v2
/// committed at 4. The graph has no cycle (T3 is serialized between T1 and T2); only the
/// timestamps show the snapshot is wrong.
#[test]
fn test_check_snapshot_misses_a_smaller_committed_write() {
    let mut ts = two_versions_of_x();
    ts.push(txn(3).r(X, 1).ts(5, None));
    let h = hist(ts);
    for o in modes().into_iter().filter(|o| !o.real_time) {
        let r = check(&h, &o);
        assert_eq!(kinds(&r), vec![FindingKind::Snapshot], "{o:?}: {r}");
        assert_eq!(r.txns_in_cycles, 0);
        let g = check(&without_timestamps(&h), &o);
        assert!(g.is_clean(), "the graph alone: {g}");
    }
    assert_eq!(
        printed(&ser(&h), FindingKind::Snapshot),
        [
            "snapshot: T0/3 (start ts 5) read t0:k1 v0/1 (commit ts 2), but its snapshot holds v0/2 (commit ts 4): \
          it missed a committed write"
        ]
    );
    // Reading the initial version misses both.
    let mut ts = two_versions_of_x();
    ts.push(txn(3).r(X, 0).ts(5, None));
    assert_eq!(
        printed(&ser(&hist(ts)), FindingKind::Snapshot),
        [
            "snapshot: T0/3 (start ts 5) read t0:k1 v0 (initial), but its snapshot holds v0/2 (commit ts 4): \
          it missed a committed write"
        ]
    );
}

/// Snapshot: a transaction starting at 3 sees T2's write, committed at 4.
#[test]
fn test_check_snapshot_sees_a_later_write() {
    let mut ts = two_versions_of_x();
    ts.push(txn(3).r(X, 2).ts(3, None));
    let h = hist(ts);
    let r = ser(&h);
    assert_eq!(kinds(&r), vec![FindingKind::Snapshot], "{r}");
    assert_eq!(
        printed(&r, FindingKind::Snapshot),
        [
            "snapshot: T0/3 (start ts 3) read t0:k1 v0/2 (commit ts 4), but its snapshot holds v0/1 (commit ts 2): \
          it saw a write committed after its start"
        ]
    );
    assert!(ser(&without_timestamps(&h)).is_clean());
}

/// Reads that see their snapshot exactly: a commit at the start timestamp is visible,
/// a transaction reads its own write, an absent read of a deleted key (naming the
/// tombstone or no version) or of a key nobody wrote, a read before the delete.
#[test]
fn test_check_snapshot_reads_that_see_their_snapshot() {
    let mut ts = two_versions_of_x();
    ts.extend([
        txn(3).r(X, 2).ts(4, None),
        txn(4).r(X, 2).w(X, 2).r(X, 4).ts(5, Some(6)),
        txn(5).del(Y, 0).ts(6, Some(7)),
        txn(6).ra(Y, 5).ra(Z, 0).ts(8, None),
        txn(7).ra(Y, 0).ts(8, None),
        txn(8).r(Y, 0).ts(6, None),
    ]);
    let h = hist(ts);
    for o in modes() {
        let r = check(&h, &o);
        assert!(r.is_clean(), "{o:?}: {r}");
        // T2: 1, T3: 1, T4: 1 (its own write is not counted), T6: 2, T7: 1, T8: 1.
        assert_eq!(r.snapshot_reads, 7, "{r}");
        assert!(r
            .summary()
            .ends_with("; 7 reads checked against their start timestamps' snapshots"));
    }
    // Without timestamps, nothing is checked against a snapshot.
    assert_eq!(ser(&without_timestamps(&h)).snapshot_reads, 0);
}

/// Absent reads against the snapshot: absent where the snapshot holds a value, and a
/// value where it holds a delete.
#[test]
fn test_check_snapshot_absent_reads() {
    let mut ts = two_versions_of_x();
    ts.extend([txn(3).del(Y, 0).ts(5, Some(6)), txn(4).ra(X, 0).r(Y, 0).ts(7, None)]);
    let r = ser(&hist(ts));
    assert_eq!(r.count(FindingKind::Snapshot), 2, "{r}");
    assert_eq!(
        printed(&r, FindingKind::Snapshot),
        [
            "snapshot: T0/4 (start ts 7) read t0:k1 absent (initial), but its snapshot holds v0/2 (commit ts 4): \
             it missed a committed write",
            "snapshot: T0/4 (start ts 7) read t0:k2 v0 (initial), but its snapshot holds absent (T0/3 deleted it) \
             (commit ts 6): it missed a committed write",
        ]
    );
}

/// Reads the snapshot check cannot judge are left to the graph: a key with a committed
/// write that has no commit timestamp, and a read of an aborted write (G1a).
#[test]
fn test_check_snapshot_leaves_unplaceable_reads_to_the_graph() {
    let h = hist(vec![
        txn(1).w(X, 0).ts(1, None),
        txn(2).r(X, 0).ts(5, None),
        txn(3).w(Y, 0).ts(1, Some(2)).aborted(),
        txn(4).r(Y, 3).ts(5, None),
    ]);
    let r = ser(&h);
    assert_eq!(kinds(&r), vec![FindingKind::G1a], "{r}");
    assert_eq!(r.snapshot_reads, 0);
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

/// Execute `plans` one after another (times in execution order, and with `timestamps`
/// start and commit timestamps too). Versions are the transaction ids; aborted
/// transactions' writes are never installed; a read of a deleted or never inserted key
/// is an absent read. Returns `None` when the stale read asked for cannot be injected.
fn serial(plans: &[Plan], stale: Option<&Stale>, timestamps: bool) -> Option<History> {
    // Committed versions of each key, oldest first (`None` = absent).
    let mut versions: Vec<Vec<u64>> = (0..KEYS)
        .map(|k| if k < KEYS_LOADED { vec![0] } else { vec![] })
        .collect();
    let mut tombstones: HashSet<(usize, u64)> = HashSet::new();
    let mut records = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        // Spread ids over coordinators to exercise `T<coord>/<seq>`.
        let id = (((i % 3) as u64) << crate::report::SEQ_BITS) | (i as u64 + 1);
        let mut t = TxnRecord {
            id,
            coord: (i % 3) as u32,
            start_ns: 100 * i as u64,
            end_ns: 100 * i as u64 + 50,
            start_ts: timestamps.then_some(10 * i as u64),
            commit_ts: (timestamps && !p.aborted).then_some(10 * i as u64 + 5),
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
                match current(k, &mine) {
                    Some(version) if tombstones.contains(&(k, version)) => {
                        t.reads.push(Read::absent(table, key, version))
                    }
                    Some(version) => t.reads.push(Read::of(table, key, version)),
                    // Not loaded and not inserted yet: absent, no version seen.
                    None => t.reads.push(Read::absent(table, key, INITIAL_VERSION)),
                }
            }
            if matches!(op, Op::Write(_) | Op::ReadModifyWrite(_) | Op::Delete(_)) && !mine.contains_key(&k) {
                let prev = versions[k].last().copied();
                let kind = match (op, prev) {
                    (Op::Delete(_), Some(_)) => {
                        tombstones.insert((k, id));
                        WriteKind::Delete
                    }
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
            t.reads.push(Read::of(table, key, old));
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
        let h = serial(&plans, None, false).expect("no injection");
        for o in modes() {
            let r = check(&h, &o);
            prop_assert!(r.is_clean(), "{:?}: {}", o, r);
            prop_assert_eq!(r.txns_in_cycles, 0);
        }
    }

    /// A serial execution with timestamps sees every snapshot exactly.
    #[test]
    fn prop_serial_histories_with_timestamps_are_clean(plans in prop::collection::vec(plan(), 0..40)) {
        let h = serial(&plans, None, true).expect("no injection");
        for o in modes() {
            let r = check(&h, &o);
            prop_assert!(r.is_clean(), "{:?}: {}", o, r);
        }
    }

    /// With timestamps, one stale read is a snapshot finding at every level, without
    /// real time or sessions.
    #[test]
    fn prop_stale_read_with_timestamps_is_a_snapshot_finding(
        plans in prop::collection::vec(plan(), 2..40),
        txn in 0usize..1000,
        key in 0usize..KEYS,
        rmw in any::<bool>(),
    ) {
        let stale = Stale { txn, key, rmw };
        let h = serial(&plans, Some(&stale), true);
        prop_assume!(h.is_some());
        let h = h.unwrap();
        for level in [Level::Serializable, Level::SnapshotIsolation] {
            let o = CheckOptions { sessions: false, ..opts(level, false) };
            let r = check(&h, &o);
            prop_assert_eq!(r.count(FindingKind::Snapshot), 1, "{:?}: {}", level, r);
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
        let h = serial(&plans, Some(&stale), false);
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
