//! What the checker found: [`Report`], its [`Finding`]s and their evidence, and how they
//! print.
//!
//! Transaction ids print as `T<coord>/<seq>` (the id's top bits name the coordinator,
//! the low [`SEQ_BITS`] its sequence number) and the initial load as `init`; versions,
//! which are their writers' ids, print the same way after a `v` (`v0` is the initial
//! version). A cycle prints as the chain of its edges with their evidence:
//!
//! ```text
//! G-single: T0/2 -rw[t0:k7 v0]-> T0/3 -wr[t0:k8 v0/3]-> T0/2
//! session: T0/3 -so-> T0/4 -rw[t0:k1 v0/1]-> T0/2 -wr[t0:k1 v0/2]-> T0/3
//! ```
//!
//! (`so`: the same coordinator ran the next transaction after this one; `rt[end <
//! start]`: this one ended before the next began.) A snapshot finding names the read and
//! the version the start timestamp's snapshot holds:
//!
//! ```text
//! snapshot: T0/3 (start ts 5) read t0:k1 v0/1 (commit ts 2), but its snapshot holds v0/2 (commit ts 4): it missed a committed write
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// Bits of a transaction id that hold the per-coordinator sequence number.
pub const SEQ_BITS: u32 = dmtx_runtime::CoordId::SEQ_BITS;

/// The isolation level a history is checked against.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Adya's PL-3: no G0, G1, G-single or G2 (nor lost updates or broken versions).
    #[default]
    Serializable,
    /// Adya's PL-SI as far as the graph shows it: no G0, G1, G-single, lost updates or
    /// broken versions; cycles with two or more anti-dependencies (write skew) are
    /// allowed and reported as [`FindingKind::WriteSkew`].
    SnapshotIsolation,
}

impl Level {
    /// Lower-case name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            Level::Serializable => "serializable",
            Level::SnapshotIsolation => "snapshot isolation",
        }
    }
}

/// The kind of a finding. Every kind but [`WriteSkew`](FindingKind::WriteSkew) is a
/// violation of the level it was found under.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum FindingKind {
    /// A version that no transaction wrote and that is not the initial one was read or
    /// overwritten: the history or the protocol is broken.
    PhantomVersion,
    /// Two transactions (or a transaction and the initial load) installed the same
    /// version of a key: versions no longer name their writers.
    DuplicateVersion,
    /// G0, write cycle: a cycle of write-write dependencies only.
    G0,
    /// G1a, aborted read: a committed transaction read (or overwrote) a version written
    /// by an aborted one.
    G1a,
    /// G1b, intermediate read: a committed transaction read a version that its writer
    /// later overwrote itself.
    G1b,
    /// G1c, circular information flow: a cycle of ww and wr edges with at least one wr.
    G1c,
    /// Two committed transactions overwrote the same version (a fork in the key's
    /// version chain): one update was lost.
    LostUpdate,
    /// A committed read of a timestamped transaction did not see exactly the snapshot
    /// its start timestamp names: the newest version committed at or before it (or the
    /// transaction's own write). It missed a committed write, or saw a later one, even
    /// where no cycle shows it.
    Snapshot,
    /// G-single: a cycle with exactly one anti-dependency (rw) edge (read skew, missed
    /// effects).
    GSingle,
    /// G2: a cycle with two or more anti-dependency edges, and no G-single found in its
    /// component. Under [`Level::SnapshotIsolation`], only such a cycle with no two
    /// adjacent rw edges, which SI cannot produce (Fekete et al., TODS 2005).
    G2,
    /// A G2 cycle with two adjacent rw edges under [`Level::SnapshotIsolation`], where it
    /// is allowed: information, not a violation.
    WriteSkew,
    /// A cycle through real-time order: a transaction that began after another ended is
    /// serialized before it (checked with `real_time` on).
    RealTime,
    /// A cycle through session order: a coordinator's transaction is serialized before
    /// one it ran earlier, e.g. it read older state than it read or wrote before
    /// (checked with `sessions` on, the default).
    Session,
}

impl FindingKind {
    /// Every kind, in report order.
    pub const ALL: [FindingKind; 13] = [
        FindingKind::PhantomVersion,
        FindingKind::DuplicateVersion,
        FindingKind::G0,
        FindingKind::G1a,
        FindingKind::G1b,
        FindingKind::G1c,
        FindingKind::LostUpdate,
        FindingKind::Snapshot,
        FindingKind::GSingle,
        FindingKind::G2,
        FindingKind::WriteSkew,
        FindingKind::RealTime,
        FindingKind::Session,
    ];

    /// Adya's name (or ours, for kinds he has none for), as printed.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::PhantomVersion => "phantom version",
            FindingKind::DuplicateVersion => "duplicate version",
            FindingKind::G0 => "G0",
            FindingKind::G1a => "G1a",
            FindingKind::G1b => "G1b",
            FindingKind::G1c => "G1c",
            FindingKind::LostUpdate => "lost update",
            FindingKind::GSingle => "G-single",
            FindingKind::G2 => "G2",
            FindingKind::WriteSkew => "write skew",
            FindingKind::RealTime => "real-time",
            FindingKind::Snapshot => "snapshot",
            FindingKind::Session => "session",
        }
    }

    /// True for every kind but [`FindingKind::WriteSkew`], which is reported only under
    /// the level that allows it.
    pub fn is_violation(self) -> bool {
        self != FindingKind::WriteSkew
    }
}

/// How a committed transaction met a version it should not have.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// It read the version.
    Read,
    /// It installed its own version over it.
    Overwrite,
}

/// Why there is an edge from one transaction to the next in a cycle.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Edge {
    /// Write dependency: the next transaction installed `version` over `prev`, which
    /// this one installed.
    Ww {
        /// Table id.
        table: u32,
        /// Key.
        key: u64,
        /// The version this transaction installed.
        prev: u64,
        /// The version the next one installed over it.
        version: u64,
    },
    /// Read dependency: the next transaction read `version`, which this one installed.
    Wr {
        /// Table id.
        table: u32,
        /// Key.
        key: u64,
        /// The version read.
        version: u64,
    },
    /// Anti-dependency: this transaction read `version` and the next one installed
    /// `overwrite` right after it.
    Rw {
        /// Table id.
        table: u32,
        /// Key.
        key: u64,
        /// The version read.
        version: u64,
        /// The version installed over it.
        overwrite: u64,
    },
    /// Real-time order: this transaction ended before the next one began.
    Rt {
        /// This transaction's end (ns).
        end_ns: u64,
        /// The next transaction's start (ns).
        start_ns: u64,
    },
    /// Session order: the next transaction is the same coordinator's next one.
    So {
        /// The coordinator (compact id).
        coord: u32,
    },
}

impl Edge {
    /// `ww`, `wr`, `rw` or `rt`.
    pub fn name(&self) -> &'static str {
        match self {
            Edge::Ww { .. } => "ww",
            Edge::Wr { .. } => "wr",
            Edge::Rw { .. } => "rw",
            Edge::Rt { .. } => "rt",
            Edge::So { .. } => "so",
        }
    }
}

/// One edge of a cycle: `from` precedes `to` because of `edge`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Step {
    /// Transaction id the edge leaves.
    pub from: u64,
    /// The dependency and its evidence.
    pub edge: Edge,
    /// Transaction id the edge enters.
    pub to: u64,
}

/// One transaction's write of a version, in a fork.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Overwrite {
    /// Transaction id.
    pub txn: u64,
    /// The version it installed.
    pub version: u64,
}

/// What shows a finding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Evidence {
    /// A cycle: `steps[i].to == steps[i + 1].from`, and the last step returns to the first
    /// transaction. Steps through real-time order are collapsed into one `rt` step.
    Cycle {
        /// The edges, in order.
        steps: Vec<Step>,
    },
    /// A committed transaction read or overwrote a version it must not have seen.
    Observed {
        /// The committed transaction.
        txn: u64,
        /// Read or overwrite.
        access: Access,
        /// Table id.
        table: u32,
        /// Key.
        key: u64,
        /// The version.
        version: u64,
        /// Its writer (aborted, or committed and later overwriting it), or `None` when no
        /// transaction wrote it.
        writer: Option<u64>,
    },
    /// Several committed transactions installed their versions over the same one.
    Fork {
        /// Table id.
        table: u32,
        /// Key.
        key: u64,
        /// The version overwritten more than once.
        prev: u64,
        /// Its writer (0 for the initial load).
        writer: u64,
        /// Every committed overwrite of `prev`.
        overwrites: Vec<Overwrite>,
    },
    /// A committed read that its start timestamp's snapshot does not explain.
    Snapshot {
        /// The reading transaction.
        txn: u64,
        /// Table id.
        table: u32,
        /// Key.
        key: u64,
        /// The reader's start timestamp.
        start_ts: u64,
        /// The version read.
        read: u64,
        /// The read found the key absent.
        read_absent: bool,
        /// The commit timestamp of the version read (`None` for the initial version).
        read_commit_ts: Option<u64>,
        /// The version the snapshot holds: the newest committed at or before `start_ts`
        /// (`None`: no transaction had committed one, the initial state).
        expected: Option<u64>,
        /// The snapshot holds `expected` as a delete's tombstone.
        expected_absent: bool,
        /// The commit timestamp of `expected`.
        expected_commit_ts: Option<u64>,
    },
    /// Several writers installed the same version.
    Duplicate {
        /// Table id.
        table: u32,
        /// Key.
        key: u64,
        /// The version.
        version: u64,
        /// Its writers (0 for the initial load).
        writers: Vec<u64>,
    },
}

/// One anomaly (or, for [`FindingKind::WriteSkew`], one allowed pattern) with evidence.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Finding {
    /// What was found.
    pub kind: FindingKind,
    /// What shows it.
    pub evidence: Evidence,
}

impl Finding {
    /// The cycle's steps, for cycle findings.
    pub fn cycle(&self) -> Option<&[Step]> {
        match &self.evidence {
            Evidence::Cycle { steps } => Some(steps),
            _ => None,
        }
    }
}

/// Edges of the direct serialization graph, by kind, as derived (before parallel edges
/// merge). Edges from the initial load are not counted: it is never on a cycle, so it has
/// no node.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EdgeCounts {
    /// Write dependencies.
    pub ww: u64,
    /// Read dependencies.
    pub wr: u64,
    /// Anti-dependencies.
    pub rw: u64,
    /// Real-time edges, to, along and from the chain of time nodes (0 unless
    /// `real_time`): at most 3 per committed transaction.
    pub rt: u64,
    /// Session-order edges, one from each committed transaction to its coordinator's
    /// next committed one (0 unless `sessions`).
    pub so: u64,
}

/// The checker's verdict on one history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The level checked.
    pub level: Level,
    /// Whether real-time order was checked too.
    pub real_time: bool,
    /// Whether session order was checked too.
    pub sessions: bool,
    /// Transactions in the history.
    pub txns: usize,
    /// Committed transactions.
    pub committed: usize,
    /// Aborted transactions.
    pub aborted: usize,
    /// Reads by committed transactions.
    pub reads: u64,
    /// Writes by committed transactions.
    pub writes: u64,
    /// Dependency edges by kind.
    pub edges: EdgeCounts,
    /// Committed transactions on some dependency cycle (in a non-trivial strongly
    /// connected component of the ww/wr/rw graph).
    pub txns_in_cycles: u64,
    /// How many of each kind were found. Cycle kinds count strongly connected
    /// components that hold such a cycle; the others count occurrences.
    pub counts: BTreeMap<FindingKind, u64>,
    /// At most `findings_max_per_kind` findings of each kind, in [`FindingKind::ALL`]
    /// order.
    pub findings: Vec<Finding>,
    /// Components whose bounded search for a violating cycle (G-single; under SI also G2
    /// or real-time) hit its limit on closing edges tried or edges scanned; they were
    /// classified by the cycle found, which does not prove that no violation exists there.
    pub search_truncated: u64,
    /// Committed reads checked against the snapshot of their transaction's start
    /// timestamp (0 for a history without timestamps).
    pub snapshot_reads: u64,
}

impl Report {
    /// True when no violation of the checked level was found.
    pub fn is_clean(&self) -> bool {
        self.violations() == 0
    }

    /// Number of violations (cycle kinds count components).
    pub fn violations(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.is_violation())
            .map(|(_, n)| n)
            .sum()
    }

    /// How many of `kind` were found.
    pub fn count(&self, kind: FindingKind) -> u64 {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// The listed findings that are violations (not the informational write skews).
    pub fn anomalies(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.kind.is_violation())
    }

    /// The level as printed: `serializable`, `strict serializable`, `snapshot isolation`
    /// or `strong snapshot isolation`.
    pub fn level_name(&self) -> &'static str {
        match (self.level, self.real_time) {
            (Level::Serializable, false) => "serializable",
            (Level::Serializable, true) => "strict serializable",
            (Level::SnapshotIsolation, false) => "snapshot isolation",
            (Level::SnapshotIsolation, true) => "strong snapshot isolation",
        }
    }

    /// One line: `history: 1234 txns (1200 committed), no anomalies (serializable)`, or
    /// the anomaly counts by kind.
    pub fn summary(&self) -> String {
        let mut s = format!("history: {} txns ({} committed), ", self.txns, self.committed);
        let kinds = |violation: bool| {
            FindingKind::ALL
                .iter()
                .filter(|k| k.is_violation() == violation && self.count(**k) > 0)
                .map(|k| format!("{} {}", self.count(*k), k.name()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.violations() {
            0 => s.push_str("no anomalies"),
            1 => s.push_str("1 anomaly: "),
            n => s.push_str(&format!("{n} anomalies: ")),
        }
        if !self.is_clean() {
            s.push_str(&kinds(true));
        }
        s.push_str(&format!(" ({})", self.level_name()));
        if self.count(FindingKind::WriteSkew) > 0 {
            s.push_str(&format!("; allowed: {}", kinds(false)));
        }
        if self.snapshot_reads > 0 {
            s.push_str(&format!(
                "; {} reads checked against their start timestamps' snapshots",
                self.snapshot_reads
            ));
        }
        if self.search_truncated > 0 {
            s.push_str(&format!(
                "; {} component(s) too large to rule out G-single exhaustively",
                self.search_truncated
            ));
        }
        s
    }
}

/// `T<coord>/<seq>`, or `init` for the initial load (id 0).
pub struct TxnName(pub u64);

impl fmt::Display for TxnName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == crate::history::INITIAL_VERSION {
            f.write_str("init")
        } else {
            write!(f, "T{}/{}", self.0 >> SEQ_BITS, self.0 & ((1 << SEQ_BITS) - 1))
        }
    }
}

/// `v<coord>/<seq>` (the writer's id), or `v0` for the initial version.
pub struct VersionName(pub u64);

impl fmt::Display for VersionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == crate::history::INITIAL_VERSION {
            f.write_str("v0")
        } else {
            write!(f, "v{}/{}", self.0 >> SEQ_BITS, self.0 & ((1 << SEQ_BITS) - 1))
        }
    }
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Edge::Ww {
                table,
                key,
                prev,
                version,
            } => {
                write!(f, "ww[t{table}:k{key} {}->{}]", VersionName(prev), VersionName(version))
            }
            Edge::Wr { table, key, version } => write!(f, "wr[t{table}:k{key} {}]", VersionName(version)),
            Edge::Rw {
                table, key, version, ..
            } => write!(f, "rw[t{table}:k{key} {}]", VersionName(version)),
            Edge::Rt { end_ns, start_ns } => write!(f, "rt[end {end_ns} < start {start_ns}]"),
            Edge::So { .. } => f.write_str("so"),
        }
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evidence::Cycle { steps } => {
                for (i, s) in steps.iter().enumerate() {
                    if i == 0 {
                        write!(f, "{}", TxnName(s.from))?;
                    }
                    write!(f, " -{}-> {}", s.edge, TxnName(s.to))?;
                }
                Ok(())
            }
            Evidence::Observed {
                txn,
                access,
                table,
                key,
                version,
                writer,
            } => {
                let verb = match access {
                    Access::Read => "read",
                    Access::Overwrite => "overwrote",
                };
                write!(f, "{} {verb} t{table}:k{key} {}", TxnName(*txn), VersionName(*version))?;
                match writer {
                    Some(w) => write!(f, ", written by {}", TxnName(*w)),
                    None => f.write_str(", which no transaction wrote"),
                }
            }
            Evidence::Fork {
                table,
                key,
                prev,
                writer,
                overwrites,
            } => {
                write!(
                    f,
                    "t{table}:k{key} {} (by {}) overwritten by ",
                    VersionName(*prev),
                    TxnName(*writer)
                )?;
                for (i, o) in overwrites.iter().enumerate() {
                    let sep = if i == 0 { "" } else { " and " };
                    write!(f, "{sep}{} ({})", TxnName(o.txn), VersionName(o.version))?;
                }
                Ok(())
            }
            Evidence::Snapshot {
                txn,
                table,
                key,
                start_ts,
                read,
                read_absent,
                read_commit_ts,
                expected,
                expected_absent,
                expected_commit_ts,
            } => {
                let state = |absent: bool, version: Option<u64>, ts: Option<u64>| {
                    let mut s = match (absent, version) {
                        (true, Some(v)) => format!("absent ({} deleted it)", TxnName(v)),
                        (true, None) => "absent".to_string(),
                        (false, v) => VersionName(v.unwrap_or(crate::history::INITIAL_VERSION)).to_string(),
                    };
                    match ts {
                        Some(ts) => s.push_str(&format!(" (commit ts {ts})")),
                        None => s.push_str(" (initial)"),
                    }
                    s
                };
                let read_v = (*read != crate::history::INITIAL_VERSION).then_some(*read);
                write!(
                    f,
                    "{} (start ts {start_ts}) read t{table}:k{key} {}, but its snapshot holds {}",
                    TxnName(*txn),
                    state(*read_absent, read_v, *read_commit_ts),
                    state(*expected_absent, *expected, *expected_commit_ts),
                )?;
                let why = match (*read_commit_ts, *expected_commit_ts) {
                    (Some(r), _) if r > *start_ts => ": it saw a write committed after its start",
                    (None, Some(_)) => ": it missed a committed write",
                    (Some(r), Some(e)) if r < e => ": it missed a committed write",
                    _ => "",
                };
                f.write_str(why)
            }
            Evidence::Duplicate {
                table,
                key,
                version,
                writers,
            } => {
                write!(f, "t{table}:k{key} {} installed by ", VersionName(*version))?;
                for (i, w) in writers.iter().enumerate() {
                    let sep = if i == 0 { "" } else { " and " };
                    write!(f, "{sep}{}", TxnName(*w))?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let detail = match (self.kind, &self.evidence) {
            (FindingKind::G1a, _) => " (aborted writer)",
            (FindingKind::G1b, _) => " (intermediate version)",
            _ => "",
        };
        write!(f, "{}: {}{detail}", self.kind.name(), self.evidence)
    }
}

/// The summary line, then each listed finding on its own line, then how many of each
/// kind were left unlisted.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        for kind in FindingKind::ALL {
            let listed = self.findings.iter().filter(|x| x.kind == kind).count() as u64;
            for x in self.findings.iter().filter(|x| x.kind == kind) {
                writeln!(f, "  {x}")?;
            }
            let more = self.count(kind).saturating_sub(listed);
            if more > 0 {
                writeln!(f, "  ... and {more} more {}", kind.name())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(counts: &[(FindingKind, u64)], findings: Vec<Finding>) -> Report {
        Report {
            level: Level::Serializable,
            real_time: false,
            txns: 10,
            committed: 8,
            aborted: 2,
            reads: 0,
            writes: 0,
            sessions: true,
            edges: EdgeCounts::default(),
            txns_in_cycles: 0,
            counts: counts.iter().copied().collect(),
            findings,
            search_truncated: 0,
            snapshot_reads: 0,
        }
    }

    #[test]
    fn test_txn_name() {
        assert_eq!(TxnName(0).to_string(), "init");
        assert_eq!(TxnName(5).to_string(), "T0/5");
        assert_eq!(TxnName((3 << SEQ_BITS) | 17).to_string(), "T3/17");
        assert_eq!(VersionName(0).to_string(), "v0");
        assert_eq!(VersionName((1 << SEQ_BITS) | 2).to_string(), "v1/2");
    }

    #[test]
    fn test_summary_clean() {
        let r = report(&[], vec![]);
        assert!(r.is_clean());
        assert_eq!(
            r.summary(),
            "history: 10 txns (8 committed), no anomalies (serializable)"
        );
        assert_eq!(
            r.to_string(),
            "history: 10 txns (8 committed), no anomalies (serializable)\n"
        );
    }

    #[test]
    fn test_write_skew_is_not_a_violation() {
        let mut r = report(&[(FindingKind::WriteSkew, 2)], vec![]);
        r.level = Level::SnapshotIsolation;
        assert!(r.is_clean());
        assert_eq!(r.anomalies().count(), 0);
        assert_eq!(
            r.summary(),
            "history: 10 txns (8 committed), no anomalies (snapshot isolation); allowed: 2 write skew"
        );
    }

    #[test]
    fn test_cycle_display() {
        let steps = vec![
            Step {
                from: 1,
                edge: Edge::Ww {
                    table: 0,
                    key: 5,
                    prev: 1,
                    version: 2,
                },
                to: 2,
            },
            Step {
                from: 2,
                edge: Edge::Rw {
                    table: 0,
                    key: 9,
                    version: 0,
                    overwrite: 1,
                },
                to: 1,
            },
        ];
        let g = Finding {
            kind: FindingKind::GSingle,
            evidence: Evidence::Cycle { steps },
        };
        let r = report(&[(FindingKind::GSingle, 3)], vec![g]);
        assert!(!r.is_clean());
        assert_eq!(r.anomalies().count(), 1);
        assert_eq!(
            r.to_string(),
            "history: 10 txns (8 committed), 3 anomalies: 3 G-single (serializable)\n  \
             G-single: T0/1 -ww[t0:k5 v0/1->v0/2]-> T0/2 -rw[t0:k9 v0]-> T0/1\n  ... and 2 more G-single\n"
        );
    }

    #[test]
    fn test_observed_display() {
        let e = Evidence::Observed {
            txn: 3,
            access: Access::Read,
            table: 1,
            key: 4,
            version: 9,
            writer: None,
        };
        let f = Finding {
            kind: FindingKind::PhantomVersion,
            evidence: e,
        };
        assert_eq!(
            f.to_string(),
            "phantom version: T0/3 read t1:k4 v0/9, which no transaction wrote"
        );
    }

    #[test]
    fn test_report_serializes() {
        let r = report(&[(FindingKind::G0, 1)], vec![]);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["counts"]["G0"], 1);
        assert_eq!(j["level"], "serializable");
    }
}
