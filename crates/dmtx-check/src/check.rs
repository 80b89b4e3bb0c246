//! The isolation checker: Adya's direct serialization graph (DSG) over the committed
//! transactions of a [`History`], its cycles, and the non-cycle anomalies found while
//! building it.
//!
//! Sources: A. Adya, "Weak Consistency: A Generalized Theory and Optimistic
//! Implementations for Distributed Transactions", MIT PhD thesis, 1999 (the DSG; G0,
//! G1a, G1b, G1c, G-single, G2; PL-SI); A. Adya, B. Liskov, P. O'Neil, "Generalized
//! Isolation Level Definitions", ICDE 2000; A. Fekete et al., "Making Snapshot Isolation
//! Serializable", TODS 2005 (every cycle an SI history can have holds two adjacent rw
//! edges).
//!
//! # Algorithm
//!
//! 1. **Index.** Every write becomes a record `(table, key, version, W, txn)`, every
//!    committed write also `(table, key, prev, P, txn)` ("overwrote `prev`") and every
//!    committed read `(table, key, version, R, txn)`. One sort groups them by object
//!    version: a group holds the version's writer (W), its committed overwriters (P)
//!    and its committed readers (R). O(m log m) for m records.
//! 2. **Scan the groups** once. A group's writer is its committed W, else the initial load
//!    for version 0, else an aborted W, else nobody. It yields ww edges
//!    (writer → each overwriter), wr edges (writer → each reader) and rw edges (each
//!    reader → each overwriter), and the non-cycle findings: a read or overwrite of a
//!    version nobody wrote ([`PhantomVersion`](FindingKind::PhantomVersion)) or that an
//!    aborted transaction wrote (G1a); a read of a version its writer overwrote itself
//!    (G1b); two committed overwriters ([`LostUpdate`](FindingKind::LostUpdate)); two
//!    writers ([`DuplicateVersion`](FindingKind::DuplicateVersion)). Reads flagged G1a,
//!    G1b or phantom add no edges: they are reported already. The initial load (T0) has
//!    only outgoing edges, so it is never on a cycle and gets no node. A read that found
//!    its key absent is a read of the version it names (a tombstone, or version 0); an
//!    insert into a free slot (`prev` null) replaces no version, so an absent read of
//!    version 0 gets no anti-dependency to a later insert: only the snapshot check
//!    (below) orders the two, in histories with timestamps.
//!
//!    **Snapshots** (histories with timestamps). Every committed write becomes
//!    `(table, key, commit_ts)` and every committed read of a transaction with a start
//!    timestamp `(table, key, start_ts)`, each sorted once and then merged: each read
//!    must name the newest version committed at or before its start, not by the reader
//!    (or the reader's own write). A read that finds its
//!    key absent must meet a delete's tombstone or no committed version; a read of a
//!    version no committed transaction wrote is G1a or phantom already, and a key with a
//!    committed write that has no commit timestamp cannot be placed: such reads are not
//!    checked. Visibility is `commit_ts <= start_ts`; a protocol whose rule is strict
//!    (Motor, LOTUS: "the largest version smaller than T_start") draws both from one
//!    counter that never repeats a value, so the two rules agree.
//! 3. **Sessions** (on by default). Sort the committed transactions by (coordinator,
//!    id) and add an edge from each to its coordinator's next: at most n edges. They
//!    share the `RT` kind with real-time edges, which never join two transactions
//!    directly, so an `RT` edge between two transactions is a session edge.
//!
//!    **Real time** (optional). Sort the committed transactions by end time into time
//!    nodes `E_0 → E_1 → …`; add `T → E_rank(T)` and `E_j → T` for the last `E_j` whose
//!    end is strictly before `T`'s start. `T1` then reaches `T2` through time nodes iff
//!    `T1.end < T2.start`, with at most 3n edges instead of n². With clocks that may
//!    differ by up to `clock_offset_ns_max` (histories of several hosts), `T1` precedes
//!    `T2` only when `T1.end + clock_offset_ns_max < T2.start`.
//! 4. **CSR.** Edges become a compressed sparse row graph: `u32` offsets and `u32`
//!    targets `dst << 2 | kind`. Parallel edges merge into the one of least kind
//!    (ww < wr < rw < rt), which never hides a cycle and keeps found cycles' rw counts
//!    minimal.
//! 5. **Cycles.** Iterative Tarjan (no recursion) finds the strongly connected components
//!    (SCCs) of the graph of every edge; if all are single nodes the history is acyclic
//!    and we are done (with neither sessions nor real time, of the ww+wr+rw graph). Then
//!    the SCCs of the ww+wr+rw graph, restricted to nodes on cycles:
//!    - SCCs of the ww subgraph are G0; SCCs of the ww+wr subgraph with an internal wr
//!      edge are G1c.
//!    - In each SCC of the full graph with an internal rw edge `u → v`, a path `v ⇝ u`
//!      over ww and wr edges closes a G-single cycle. Rw edges inside one ww+wr SCC
//!      close one at once. Otherwise `v ⇝ u` needs `id(u) < id(v)` in the ww+wr SCC
//!      numbering (Tarjan numbers components in reverse topological order), the search
//!      never enters a component numbered below `id(u)`, and candidates are tried
//!      narrowest window `id(v) - id(u)` first.
//!    - Under snapshot isolation, next a cycle with no two adjacent rw edges (a BFS over
//!      states (node, last edge was rw)): G2, which SI cannot produce.
//!    - Otherwise a shortest cycle through an rw edge is G2 (serializable) or write skew
//!      (snapshot isolation, allowed).
//!    - SCCs of the graph of every edge with a session edge give a
//!      [`Session`](FindingKind::Session) cycle through it; at serializable only session
//!      edges between two ww+wr+rw SCCs count (inside one, the cycle is reported
//!      already). Otherwise, SCCs that hold a time node give
//!      [`RealTime`](FindingKind::RealTime) cycles. Under snapshot isolation session and
//!      rt edges act like wr edges (the first committed before the second began), so
//!      only cycles with no two adjacent rw edges count.
//!
//! Cycle kinds count SCCs, not cycles (which can be exponentially many). Each cycle
//! shown is a shortest one through its closing edge (BFS, or 0-1 BFS where transactions
//! are counted but time nodes are not, restricted to the SCC, with stamp arrays so a
//! search costs what it visits), the best of at most [`TRIES_MAX`] closing edges. All
//! searches in one SCC share a budget of edges scanned (16 per edge of the SCC, at least
//! 4 M), so a giant SCC costs O(E) per level, not O(V·E); an SCC whose budget ran out
//! before a violation was found is counted in [`Report::search_truncated`].
//!
//! # Complexity
//!
//! For n transactions with m reads and writes and E edges (E = O(m) when a version has
//! O(1) overwriters): O(m log m) for the sort, O(n + m + E) for the scan, the CSR build,
//! each Tarjan pass and the classification (bounded by the budgets), plus O(n log n)
//! for the session and real-time sorts and, with timestamps, O(m log m) for the snapshot
//! check. Memory: 24 bytes per record, 8 per edge while building and 4 per edge after,
//! 16 per committed transaction for the session table or sort, 48 per committed write
//! and 40 per committed read for the snapshot check, and a few `u32` per node.

use std::collections::VecDeque;

use crate::history::{History, Outcome, WriteKind, INITIAL_VERSION, NO_TS};
use crate::report::{Access, Edge, EdgeCounts, Evidence, Finding, FindingKind, Level, Overwrite, Report, Step};

/// What to check a history against.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// The isolation level.
    pub level: Level,
    /// Also require the serialization order to respect real time: a transaction that
    /// began after another ended must follow it (strict serializability, or strong SI).
    pub real_time: bool,
    /// With `real_time`: the most two clocks that stamped the history can differ, in ns
    /// (0 when one clock stamped it). A transaction is ordered after another only when it
    /// began more than this after the other ended, so that an offset between hosts'
    /// clocks within the bound never invents a real-time edge; anomalies closer in time
    /// than the bound go unseen.
    pub clock_offset_ns_max: u64,
    /// Require each coordinator's transactions to be serialized in the order it ran them
    /// (session order): a coordinator never reads older state than it read or wrote
    /// before. On by default.
    pub sessions: bool,
    /// How many findings of each kind to list with evidence; all are counted.
    pub findings_max_per_kind: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            level: Level::Serializable,
            real_time: false,
            clock_offset_ns_max: 0,
            sessions: true,
            findings_max_per_kind: 10,
        }
    }
}

/// The options that check a protocol's claimed isolation level.
pub fn check_options(isolation: dmtx_runtime::Isolation) -> CheckOptions {
    use dmtx_runtime::Isolation;
    let (level, real_time) = match isolation {
        Isolation::Serializable => (Level::Serializable, false),
        Isolation::StrictSerializable => (Level::Serializable, true),
        Isolation::SnapshotIsolation => (Level::SnapshotIsolation, false),
        // Runs of an unchecked protocol are not checked (the driver says so); a history
        // of one checked anyway is held to serializability.
        Isolation::Unchecked => (Level::Serializable, false),
    };
    CheckOptions {
        level,
        real_time,
        ..CheckOptions::default()
    }
}

/// Closing edges tried per component when looking for a shorter cycle than one found.
pub const TRIES_MAX: usize = 64;

/// Edges a component's searches may scan at least (the budget is the larger of this and
/// [`BUDGET_PER_EDGE`] times the component's out-edges).
const BUDGET_MIN: u64 = 1 << 22;
/// Edges a component's searches may scan per out-edge of the component.
const BUDGET_PER_EDGE: u64 = 16;

/// Coordinator numbers up to this (plus 4 per committed transaction) find session edges
/// through a table rather than a sort.
const SESSION_TABLE_MIN: usize = 1 << 16;

/// Graph nodes are `u32`s with two bits to spare for the edge kind.
const NODES_MAX: usize = 1 << 30;
/// Record tags live in the top two bits of a `u32` beside the transaction index.
const TXNS_MAX: usize = 1 << 30;
const NONE: u32 = u32::MAX;

const WW: u32 = 0;
const WR: u32 = 1;
const RW: u32 = 2;
const RT: u32 = 3;
const M_WW: u8 = 1 << WW;
const M_WR: u8 = 1 << WR;
const M_RW: u8 = 1 << RW;
const M_RT: u8 = 1 << RT;
const M_ALL: u8 = M_WW | M_WR | M_RW | M_RT;

/// Check `history` against `opts`. Only committed transactions are serialized; aborted
/// ones matter only when a committed one saw their writes.
///
/// # Panics
///
/// When the history has more than 2^30 transactions.
pub fn check(history: &History, opts: &CheckOptions) -> Report {
    Checker::new(history, opts).run()
}

/// One index record. Invariant: `tag_txn >> 30` is the tag, the rest a transaction index.
#[derive(Copy, Clone, Debug)]
struct Rec {
    key: u64,
    version: u64,
    table: u32,
    tag_txn: u32,
}

/// The transaction installed `version` (any outcome).
const TAG_W: u32 = 0;
/// The committed transaction installed its version over `version`.
const TAG_P: u32 = 1;
/// The committed transaction read `version`.
const TAG_R: u32 = 2;

impl Rec {
    fn new(table: u32, key: u64, version: u64, tag: u32, txn: usize) -> Self {
        debug_assert!(txn < TXNS_MAX);
        Rec {
            key,
            version,
            table,
            tag_txn: (tag << 30) | txn as u32,
        }
    }
    fn tag(&self) -> u32 {
        self.tag_txn >> 30
    }
    fn txn(&self) -> usize {
        (self.tag_txn & ((1 << 30) - 1)) as usize
    }
    fn object(&self) -> (u32, u64, u64) {
        (self.table, self.key, self.version)
    }
}

/// The records of one object version, from the sorted index.
fn group(recs: &[Rec], table: u32, key: u64, version: u64) -> &[Rec] {
    let o = (table, key, version);
    let lo = recs.partition_point(|r| r.object() < o);
    let hi = lo + recs[lo..].partition_point(|r| r.object() <= o);
    &recs[lo..hi]
}

/// A directed graph in compressed sparse row form.
///
/// Invariants: (1) `offsets.len() == nodes + 1`, non-decreasing, last == `targets.len()`;
/// (2) each target is `dst << 2 | kind` with `dst < nodes`, `dst != src`; (3) within a
/// node's row, each `dst` appears once, with the least kind among its parallel edges.
struct Graph {
    offsets: Vec<u32>,
    targets: Vec<u32>,
}

impl Graph {
    /// Build from packed edges `src << 32 | dst << 2 | kind` (counting sort by source).
    fn build(nodes: usize, edges: Vec<u64>) -> Graph {
        assert!(nodes < NODES_MAX, "{nodes} graph nodes: the checker holds at most 2^30");
        assert!(
            edges.len() < u32::MAX as usize,
            "{} dependency edges: the checker holds at most 2^32 - 1; check a shorter history",
            edges.len()
        );
        let mut offsets = vec![0u32; nodes + 1];
        for e in &edges {
            offsets[(e >> 32) as usize + 1] += 1;
        }
        for i in 0..nodes {
            offsets[i + 1] += offsets[i];
        }
        let mut cursor = offsets.clone();
        let mut targets = vec![0u32; edges.len()];
        for e in &edges {
            let src = (e >> 32) as usize;
            targets[cursor[src] as usize] = *e as u32;
            cursor[src] += 1;
        }
        drop(edges);
        drop(cursor);
        // Merge parallel edges (invariant 3): sorting a row puts each dst's least kind first.
        let mut out = 0usize;
        let mut start = 0usize;
        for v in 0..nodes {
            let end = offsets[v + 1] as usize;
            targets[start..end].sort_unstable();
            offsets[v] = out as u32;
            let mut last = NONE;
            for i in start..end {
                let t = targets[i];
                if t >> 2 != last {
                    debug_assert_ne!((t >> 2) as usize, v, "self edge");
                    last = t >> 2;
                    targets[out] = t;
                    out += 1;
                }
            }
            start = end;
        }
        offsets[nodes] = out as u32;
        targets.truncate(out);
        targets.shrink_to_fit();
        Graph { offsets, targets }
    }

    fn nodes(&self) -> usize {
        self.offsets.len() - 1
    }

    #[inline]
    fn out(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize]
    }
}

/// Strongly connected components: `of[v]` is `v`'s component, or `NONE` when `v` was
/// not visited. Components are numbered in reverse topological order: an edge between
/// two components goes from the higher number to the lower.
struct Comps {
    of: Vec<u32>,
    /// Nodes of the components of two or more nodes, grouped by component.
    nodes: Vec<u32>,
    /// `(component, start, end)` into `nodes`, one per component of two or more nodes.
    ranges: Vec<(u32, u32, u32)>,
}

impl Comps {
    fn members(&self, r: (u32, u32, u32)) -> &[u32] {
        &self.nodes[r.1 as usize..r.2 as usize]
    }
}

/// Iterative Tarjan over the edges in `mask`, from `roots`, never entering a node where
/// `allowed` is false.
fn tarjan(g: &Graph, mask: u8, roots: impl Iterator<Item = u32>, allowed: impl Fn(u32) -> bool) -> Comps {
    let n = g.nodes();
    let mut index = vec![NONE; n];
    let mut low = vec![0u32; n];
    let mut of = vec![NONE; n];
    let mut next = 0u32;
    let mut count = 0u32;
    let mut stack: Vec<u32> = Vec::new();
    let mut call: Vec<(u32, u32)> = Vec::new();
    for root in roots {
        if index[root as usize] != NONE || !allowed(root) {
            continue;
        }
        index[root as usize] = next;
        low[root as usize] = next;
        next += 1;
        stack.push(root);
        call.push((root, g.offsets[root as usize]));
        while let Some(top) = call.last_mut() {
            let v = top.0 as usize;
            if top.1 < g.offsets[v + 1] {
                let e = g.targets[top.1 as usize];
                top.1 += 1;
                if mask & (1 << (e & 3)) == 0 {
                    continue;
                }
                let w = (e >> 2) as usize;
                if index[w] == NONE {
                    if !allowed(w as u32) {
                        continue;
                    }
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w as u32);
                    call.push((w as u32, g.offsets[w]));
                } else if of[w] == NONE {
                    // Visited and not yet in a component: on the stack.
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if low[v] == index[v] {
                    loop {
                        let w = stack.pop().expect("Tarjan stack holds the root") as usize;
                        of[w] = count;
                        if w == v {
                            break;
                        }
                    }
                    count += 1;
                }
                if let Some(parent) = call.last() {
                    let p = parent.0 as usize;
                    low[p] = low[p].min(low[v]);
                }
            }
        }
    }
    assert!(stack.is_empty(), "Tarjan left nodes on its stack");
    drop(index);
    drop(low);
    // Group the members of non-trivial components (counting sort).
    let mut size = vec![0u32; count as usize];
    for &c in &of {
        if c != NONE {
            size[c as usize] += 1;
        }
    }
    let mut start = vec![0u32; count as usize];
    let mut ranges = Vec::new();
    let mut total = 0u32;
    for c in 0..count as usize {
        if size[c] > 1 {
            start[c] = total;
            ranges.push((c as u32, total, total + size[c]));
            total += size[c];
        }
    }
    let mut nodes = vec![0u32; total as usize];
    for (v, &c) in of.iter().enumerate() {
        if c != NONE && size[c as usize] > 1 {
            nodes[start[c as usize] as usize] = v as u32;
            start[c as usize] += 1;
        }
    }
    Comps { of, nodes, ranges }
}

/// One edge of a raw cycle: `(src, kind, dst)` in graph nodes.
type RawEdge = (u32, u32, u32);

/// How a search ended.
enum Search {
    Found(Vec<RawEdge>),
    NotFound,
    OutOfBudget,
}

/// Reusable BFS state over search states `node << 1 | flag`, where the flag records
/// that the last edge was rw (used to forbid two adjacent rw edges); stamps make each
/// search cost only what it visits.
struct Bfs {
    stamp: Vec<u32>,
    epoch: u32,
    dist: Vec<u32>,
    parent: Vec<u32>,
    kind: Vec<u8>,
    deque: VecDeque<u32>,
}

/// Where a search starts and what it may do.
struct PathSpec<'a> {
    /// Edges the path may use.
    mask: u8,
    /// May the path enter this node.
    ok: &'a dyn Fn(u32) -> bool,
    /// Weight (0 or 1) of entering node `dst` by an edge of `kind`; the path found is
    /// least in total weight (0-1 BFS).
    weight: &'a dyn Fn(u32, u32) -> u32,
    /// Forbid two adjacent rw edges; the start state's flag says whether the edge before
    /// the start was rw, and the target must be entered by a non-rw edge when `end_non_rw`.
    no_adjacent_rw: bool,
    start_after_rw: bool,
    end_non_rw: bool,
}

impl Bfs {
    fn new(nodes: usize) -> Self {
        Bfs {
            stamp: vec![0; 2 * nodes],
            epoch: 0,
            dist: vec![0; 2 * nodes],
            parent: vec![0; 2 * nodes],
            kind: vec![0; 2 * nodes],
            deque: VecDeque::new(),
        }
    }

    /// A path `from ⇝ to` as `spec` says, scanning at most `budget` edges.
    fn path(&mut self, g: &Graph, from: u32, to: u32, spec: &PathSpec, budget: &mut u64) -> Search {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.stamp.fill(0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        let start = (from << 1) | (spec.no_adjacent_rw && spec.start_after_rw) as u32;
        self.stamp[start as usize] = epoch;
        self.dist[start as usize] = 0;
        self.deque.clear();
        self.deque.push_back(start);
        while let Some(s) = self.deque.pop_front() {
            let x = s >> 1;
            if x == to && !(spec.no_adjacent_rw && spec.end_non_rw && s & 1 == 1) {
                let mut path = Vec::new();
                let mut y = s;
                while y != start {
                    let p = self.parent[y as usize];
                    path.push((p >> 1, self.kind[y as usize] as u32, y >> 1));
                    y = p;
                }
                path.reverse();
                return Search::Found(path);
            }
            let d = self.dist[s as usize];
            for &e in g.out(x) {
                if *budget == 0 {
                    return Search::OutOfBudget;
                }
                *budget -= 1;
                let k = e & 3;
                if spec.mask & (1 << k) == 0 {
                    continue;
                }
                let after_rw = spec.no_adjacent_rw && k == RW;
                if after_rw && s & 1 == 1 {
                    continue;
                }
                let y = e >> 2;
                if !(spec.ok)(y) {
                    continue;
                }
                let w = (spec.weight)(k, y);
                let nd = d + w;
                let t = ((y << 1) | after_rw as u32) as usize;
                if self.stamp[t] != epoch || nd < self.dist[t] {
                    self.stamp[t] = epoch;
                    self.dist[t] = nd;
                    self.parent[t] = s;
                    self.kind[t] = k as u8;
                    if w == 0 {
                        self.deque.push_front(t as u32);
                    } else {
                        self.deque.push_back(t as u32);
                    }
                }
            }
        }
        Search::NotFound
    }
}

/// A short-cycle search in one component: try closing edges `u → v` (from the
/// component's nodes, where `closing` holds), find `v ⇝ u`, and keep the cycle.
struct CycleQuery<'a> {
    /// Which edge `(u, kind, v)` may close the cycle.
    closing: &'a dyn Fn(u32, u32, u32) -> bool,
    /// Edges the path may use.
    path_mask: u8,
    /// `ok(u, y)`: may the path from `v` back to `u` enter `y`.
    ok: &'a dyn Fn(u32, u32) -> bool,
    /// Weight of entering node `dst` by an edge of `kind`: 0 or 1.
    weight: &'a dyn Fn(u32, u32) -> u32,
    /// Only cycles with no two adjacent rw edges (cyclically, closing edge included).
    no_adjacent_rw: bool,
    /// Keep trying for a shorter cycle after the first (else stop at the first).
    shortest: bool,
    /// Try closing edges `(u, v)` in increasing rank (else in node order).
    rank: Option<&'a dyn Fn(u32, u32) -> u64>,
}

/// The result of a [`CycleQuery`]: a cycle (the closing edge first) and whether the search
/// stopped at a limit before trying every closing edge.
struct CycleFound {
    cycle: Option<Vec<RawEdge>>,
    truncated: bool,
}

fn rw_count(c: &[RawEdge]) -> usize {
    c.iter().filter(|e| e.1 == RW).count()
}

/// True when two consecutive edges of cycle `c` (cyclically) are both rw.
fn adjacent_rw(c: &[RawEdge]) -> bool {
    (0..c.len()).any(|i| c[i].1 == RW && c[(i + 1) % c.len()].1 == RW)
}

struct Findings {
    max: usize,
    counts: [u64; FindingKind::ALL.len()],
    list: Vec<Finding>,
}

impl Findings {
    fn wants(&self, kind: FindingKind) -> bool {
        self.counts[kind as usize] < self.max as u64
    }
    /// Count one `kind`; build its evidence only while the kind is under the listing cap.
    fn add(&mut self, kind: FindingKind, evidence: impl FnOnce() -> Evidence) {
        if self.wants(kind) {
            self.list.push(Finding {
                kind,
                evidence: evidence(),
            });
        }
        self.counts[kind as usize] += 1;
    }
}

/// A committed write, for the snapshot check: `h.writes[at]` by transaction `txn`.
#[derive(Copy, Clone)]
struct Install {
    table: u32,
    key: u64,
    commit_ts: u64,
    version: u64,
    at: u32,
    txn: u32,
    delete: bool,
}

/// A committed read of a transaction with a start timestamp, not of its own write.
#[derive(Copy, Clone)]
struct SnapshotRead {
    table: u32,
    key: u64,
    start_ts: u64,
    version: u64,
    txn: u32,
    absent: bool,
}

/// Who installed an object version.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Writer {
    Nobody,
    Init,
    Committed(usize),
    Aborted(usize),
}

struct Checker<'h> {
    h: &'h History,
    opts: CheckOptions,
    /// Sorted by `(table, key, version, tag, txn)`.
    recs: Vec<Rec>,
    /// Graph node of each transaction (`NONE` when aborted).
    node_of: Vec<u32>,
    /// Transaction of each real node; time nodes follow the real ones.
    txn_of: Vec<u32>,
    findings: Findings,
    edges: EdgeCounts,
    reads: u64,
    writes: u64,
    search_truncated: u64,
    txns_in_cycles: u64,
    snapshot_reads: u64,
}

impl<'h> Checker<'h> {
    fn new(h: &'h History, opts: &CheckOptions) -> Self {
        assert!(
            h.txns.len() < TXNS_MAX,
            "{} transactions: the checker holds at most 2^30; check the history in parts",
            h.txns.len()
        );
        let mut node_of = vec![NONE; h.txns.len()];
        let mut txn_of = Vec::new();
        for (i, t) in h.txns.iter().enumerate() {
            if t.outcome == Outcome::Committed {
                node_of[i] = txn_of.len() as u32;
                txn_of.push(i as u32);
            }
        }
        Checker {
            h,
            opts: *opts,
            recs: Vec::new(),
            node_of,
            txn_of,
            findings: Findings {
                max: opts.findings_max_per_kind,
                counts: [0; FindingKind::ALL.len()],
                list: Vec::new(),
            },
            edges: EdgeCounts::default(),
            reads: 0,
            writes: 0,
            search_truncated: 0,
            txns_in_cycles: 0,
            snapshot_reads: 0,
        }
    }

    fn committed(&self, txn: usize) -> bool {
        self.node_of[txn] != NONE
    }

    fn run(mut self) -> Report {
        self.index();
        let mut edges = self.scan();
        self.snapshots();
        if self.opts.sessions {
            self.session_edges(&mut edges);
        }
        let c = self.txn_of.len();
        let nodes = if self.opts.real_time {
            self.time_edges(&mut edges);
            2 * c
        } else {
            c
        };
        let g = Graph::build(nodes, edges);
        self.cycles(&g);
        self.report()
    }

    /// Step 1: the sorted index of writes, overwrites and reads.
    fn index(&mut self) {
        let h = self.h;
        let mut n = h.writes.len();
        for t in h.txns.iter().filter(|t| t.outcome == Outcome::Committed) {
            n += t.reads_len as usize + t.writes_len as usize;
        }
        let mut recs = Vec::with_capacity(n);
        for (i, t) in h.txns.iter().enumerate() {
            let committed = t.outcome == Outcome::Committed;
            for w in h.writes_of(t) {
                recs.push(Rec::new(w.table, w.key, w.version, TAG_W, i));
                if let (true, Some(prev)) = (committed, w.prev) {
                    recs.push(Rec::new(w.table, w.key, prev, TAG_P, i));
                }
            }
            if committed {
                self.writes += t.writes_len as u64;
                self.reads += t.reads_len as u64;
                for r in h.reads_of(t) {
                    recs.push(Rec::new(r.table, r.key, r.version, TAG_R, i));
                }
            }
        }
        recs.sort_unstable_by_key(|r| (r.table, r.key, r.version, r.tag_txn));
        self.recs = recs;
    }

    /// Step 2: edges and non-cycle findings, one object version at a time.
    fn scan(&mut self) -> Vec<u64> {
        let h = self.h;
        let recs = std::mem::take(&mut self.recs);
        let mut edges: Vec<u64> = Vec::with_capacity(recs.len() + recs.len() / 2);
        let mut overwriters: Vec<usize> = Vec::new();
        let mut readers: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < recs.len() {
            let (table, key, version) = recs[i].object();
            let mut j = i + 1;
            while j < recs.len() && recs[j].object() == (table, key, version) {
                j += 1;
            }
            let g = &recs[i..j];
            i = j;
            let w_end = g.partition_point(|r| r.tag() == TAG_W);
            let p_end = g.partition_point(|r| r.tag() <= TAG_P);
            let ws = &g[..w_end];
            // Distinct transactions (records of one transaction are adjacent).
            overwriters.clear();
            readers.clear();
            for r in &g[w_end..p_end] {
                if overwriters.last() != Some(&r.txn()) {
                    overwriters.push(r.txn());
                }
            }
            for r in &g[p_end..] {
                if readers.last() != Some(&r.txn()) {
                    readers.push(r.txn());
                }
            }

            let initial = version == INITIAL_VERSION;
            if ws.len() + initial as usize > 1 {
                self.findings
                    .add(FindingKind::DuplicateVersion, || Evidence::Duplicate {
                        table,
                        key,
                        version,
                        writers: initial
                            .then_some(INITIAL_VERSION)
                            .into_iter()
                            .chain(ws.iter().map(|r| h.txns[r.txn()].id))
                            .collect(),
                    });
            }
            let writer = match ws.iter().find(|r| self.committed(r.txn())) {
                Some(r) => Writer::Committed(r.txn()),
                None if initial => Writer::Init,
                None => ws.first().map_or(Writer::Nobody, |r| Writer::Aborted(r.txn())),
            };
            let writer_id = match writer {
                Writer::Committed(x) | Writer::Aborted(x) => Some(h.txns[x].id),
                Writer::Init => Some(INITIAL_VERSION),
                Writer::Nobody => None,
            };
            // Invariant: a committed writer overwriting its own version made it intermediate.
            let intermediate = matches!(writer, Writer::Committed(x) if overwriters.contains(&x));

            if overwriters.len() > 1 {
                self.findings.add(FindingKind::LostUpdate, || Evidence::Fork {
                    table,
                    key,
                    prev: version,
                    writer: writer_id.unwrap_or(INITIAL_VERSION),
                    overwrites: overwriters
                        .iter()
                        .map(|&p| Overwrite {
                            txn: h.txns[p].id,
                            version: overwrite_version(h, p, table, key, version),
                        })
                        .collect(),
                });
            }
            for &p in &overwriters {
                match writer {
                    Writer::Committed(x) if x == p => {}
                    Writer::Committed(x) => {
                        edges.push(edge(self.node_of[x], WW, self.node_of[p]));
                        self.edges.ww += 1;
                    }
                    Writer::Init => {}
                    Writer::Aborted(_) | Writer::Nobody => {
                        let kind = if writer == Writer::Nobody {
                            FindingKind::PhantomVersion
                        } else {
                            FindingKind::G1a
                        };
                        self.findings.add(kind, || Evidence::Observed {
                            txn: h.txns[p].id,
                            access: Access::Overwrite,
                            table,
                            key,
                            version,
                            writer: writer_id,
                        });
                    }
                }
            }
            for &r in &readers {
                let kind = match writer {
                    Writer::Committed(x) if x == r => continue, // its own write
                    Writer::Nobody => FindingKind::PhantomVersion,
                    Writer::Aborted(_) => FindingKind::G1a,
                    Writer::Committed(_) if intermediate => FindingKind::G1b,
                    Writer::Committed(x) => {
                        edges.push(edge(self.node_of[x], WR, self.node_of[r]));
                        self.edges.wr += 1;
                        self.rw_edges(&mut edges, r, &overwriters);
                        continue;
                    }
                    Writer::Init => {
                        self.rw_edges(&mut edges, r, &overwriters);
                        continue;
                    }
                };
                self.findings.add(kind, || Evidence::Observed {
                    txn: h.txns[r].id,
                    access: Access::Read,
                    table,
                    key,
                    version,
                    writer: writer_id,
                });
            }
        }
        self.recs = recs;
        edges
    }

    /// Step 2b: with timestamps, every committed read against the snapshot its
    /// transaction's start timestamp names. Reads and installs are sorted by object and
    /// timestamp and merged, so memory is scanned in order (a binary search per read
    /// into arrays of millions misses the cache at every step).
    fn snapshots(&mut self) {
        let h = self.h;
        if !h.txns.iter().any(|t| t.start_ts != NO_TS) {
            return;
        }
        // Committed writes by object in commit-timestamp order; a transaction's later
        // write of one key sorts after its earlier one (the write index breaks ties).
        // `NO_TS` sorts last: a committed write without a commit timestamp cannot be
        // placed, and its key's reads are left unchecked.
        let mut installs: Vec<Install> = Vec::new();
        let mut reads: Vec<SnapshotRead> = Vec::new();
        for &t in &self.txn_of {
            let m = &h.txns[t as usize];
            let own = h.writes_of(m);
            for (k, w) in own.iter().enumerate() {
                installs.push(Install {
                    table: w.table,
                    key: w.key,
                    commit_ts: m.commit_ts,
                    version: w.version,
                    at: m.writes_at + k as u32,
                    txn: t,
                    delete: w.kind == WriteKind::Delete,
                });
            }
            if m.start_ts == NO_TS {
                continue;
            }
            for r in h.reads_of(m) {
                if own
                    .iter()
                    .any(|w| (w.table, w.key, w.version) == (r.table, r.key, r.version))
                {
                    continue; // its own write
                }
                reads.push(SnapshotRead {
                    table: r.table,
                    key: r.key,
                    start_ts: m.start_ts,
                    version: r.version,
                    txn: t,
                    absent: r.absent,
                });
            }
        }
        installs.sort_unstable_by_key(|i| (i.table, i.key, i.commit_ts, i.at));
        reads.sort_unstable_by_key(|r| (r.table, r.key, r.start_ts, r.txn));
        // Merge: `lo..hi` are the installs of the current read's object, and `upto` the
        // first of them committed after its start (starts only grow within an object).
        let (mut lo, mut hi, mut upto) = (0usize, 0usize, 0usize);
        let mut object = None;
        for r in &reads {
            let o = (r.table, r.key);
            if object != Some(o) {
                object = Some(o);
                lo = hi + installs[hi..].partition_point(|i| (i.table, i.key) < o);
                hi = lo + installs[lo..].partition_point(|i| (i.table, i.key) == o);
                upto = lo;
            }
            let placed = &installs[lo..hi];
            if placed.last().is_some_and(|i| i.commit_ts == NO_TS) {
                continue;
            }
            while upto < hi && installs[upto].commit_ts <= r.start_ts {
                upto += 1;
            }
            // The newest install at or before the start, not by the reader itself.
            let expected = installs[lo..upto].iter().rev().find(|i| i.txn != r.txn);
            let ok = match expected {
                None => r.version == INITIAL_VERSION,
                Some(e) if e.delete => r.absent && (r.version == INITIAL_VERSION || r.version == e.version),
                Some(e) => !r.absent && r.version == e.version,
            };
            if ok {
                self.snapshot_reads += 1;
                continue;
            }
            // A read of what no committed transaction wrote is G1a or phantom, found in
            // Step 2 already.
            let read_commit_ts = match self.committed_writer(r.table, r.key, r.version) {
                Some(x) => Some(h.txns[x].commit_ts),
                None if r.version == INITIAL_VERSION => None,
                None => continue,
            };
            self.snapshot_reads += 1;
            self.findings.add(FindingKind::Snapshot, || Evidence::Snapshot {
                txn: h.txns[r.txn as usize].id,
                table: r.table,
                key: r.key,
                start_ts: r.start_ts,
                read: r.version,
                read_absent: r.absent,
                read_commit_ts,
                expected: expected.map(|e| e.version),
                expected_absent: expected.is_some_and(|e| e.delete),
                expected_commit_ts: expected.map(|e| e.commit_ts),
            });
        }
    }

    /// The committed transaction that installed `version` of (`table`, `key`).
    fn committed_writer(&self, table: u32, key: u64, version: u64) -> Option<usize> {
        group(&self.recs, table, key, version)
            .iter()
            .take_while(|r| r.tag() == TAG_W)
            .map(|r| r.txn())
            .find(|&x| self.committed(x))
    }

    fn rw_edges(&mut self, edges: &mut Vec<u64>, reader: usize, overwriters: &[usize]) {
        for &p in overwriters {
            if p != reader {
                edges.push(edge(self.node_of[reader], RW, self.node_of[p]));
                self.edges.rw += 1;
            }
        }
    }

    /// Step 3a: session order, an `RT` edge from each committed transaction to the
    /// coordinator's next committed one (by sequence number). Real-time edges never join
    /// two transactions directly (they pass through time nodes), so an `RT` edge between
    /// two transactions is a session edge.
    fn session_edges(&mut self, edges: &mut Vec<u64>) {
        let h = self.h;
        let before_len = edges.len();
        let Some(coord_max) = self.txn_of.iter().map(|&t| h.txns[t as usize].coord).max() else {
            return;
        };
        // A recorder lists each coordinator's transactions in sequence order: one pass
        // that remembers each coordinator's last transaction finds the edges, when
        // coordinators are numbered densely enough for a table. Any other order sorts.
        if coord_max as usize <= 4 * self.txn_of.len() + SESSION_TABLE_MIN {
            let mut last: Vec<(u64, u32)> = vec![(0, NONE); coord_max as usize + 1];
            let mut in_order = true;
            for (v, &t) in self.txn_of.iter().enumerate() {
                let m = &h.txns[t as usize];
                let (id, node) = &mut last[m.coord as usize];
                if *node != NONE {
                    if *id >= m.id {
                        in_order = false;
                        break;
                    }
                    edges.push(edge(*node, RT, v as u32));
                }
                (*id, *node) = (m.id, v as u32);
            }
            if in_order {
                self.edges.so = (edges.len() - before_len) as u64;
                return;
            }
            edges.truncate(before_len);
        }
        let mut order: Vec<(u32, u64, u32)> = self
            .txn_of
            .iter()
            .enumerate()
            .map(|(v, &t)| (h.txns[t as usize].coord, h.txns[t as usize].id, v as u32))
            .collect();
        order.sort_unstable();
        for w in order.windows(2) {
            if w[0].0 == w[1].0 {
                edges.push(edge(w[0].2, RT, w[1].2));
            }
        }
        self.edges.so = (edges.len() - before_len) as u64;
    }

    /// Step 3b: time nodes `c + i` for the committed transactions in end order.
    fn time_edges(&mut self, edges: &mut Vec<u64>) {
        let c = self.txn_of.len();
        let h = self.h;
        let mut order: Vec<(u64, u32)> = self
            .txn_of
            .iter()
            .enumerate()
            .map(|(v, &t)| (h.txns[t as usize].end_ns, v as u32))
            .collect();
        order.sort_unstable();
        let time = |i: usize| (c + i) as u32;
        let before_len = edges.len();
        for (i, &(_, v)) in order.iter().enumerate() {
            edges.push(edge(v, RT, time(i)));
        }
        for i in 1..c {
            edges.push(edge(time(i - 1), RT, time(i)));
        }
        for (v, &t) in self.txn_of.iter().enumerate() {
            let t = &h.txns[t as usize];
            // A start after the end would put the transaction before itself: clamp it.
            let start = t.start_ns.min(t.end_ns);
            let margin = self.opts.clock_offset_ns_max;
            let before = order.partition_point(|&(end, _)| end.saturating_add(margin) < start);
            if before > 0 {
                edges.push(edge(time(before - 1), RT, v as u32));
            }
        }
        self.edges.rt = (edges.len() - before_len) as u64;
    }

    /// The evidence for a real edge `u → v` of `kind`.
    fn evidence(&self, u: u32, kind: u32, v: u32) -> Edge {
        let (tu, tv) = (self.txn_of[u as usize] as usize, self.txn_of[v as usize] as usize);
        let h = self.h;
        let has = |g: &[Rec], tag: u32, txn: usize| g.iter().any(|r| r.tag() == tag && r.txn() == txn);
        let found = match kind {
            WW => h.writes_of(&h.txns[tv]).iter().find_map(|w| {
                let prev = w.prev?;
                has(group(&self.recs, w.table, w.key, prev), TAG_W, tu).then_some(Edge::Ww {
                    table: w.table,
                    key: w.key,
                    prev,
                    version: w.version,
                })
            }),
            WR => h.reads_of(&h.txns[tv]).iter().find_map(|r| {
                has(group(&self.recs, r.table, r.key, r.version), TAG_W, tu).then_some(Edge::Wr {
                    table: r.table,
                    key: r.key,
                    version: r.version,
                })
            }),
            RW => h.reads_of(&h.txns[tu]).iter().find_map(|r| {
                has(group(&self.recs, r.table, r.key, r.version), TAG_P, tv).then(|| Edge::Rw {
                    table: r.table,
                    key: r.key,
                    version: r.version,
                    overwrite: overwrite_version(h, tv, r.table, r.key, r.version),
                })
            }),
            // Between two transactions, an RT edge is session order (Step 3a).
            _ => Some(Edge::So {
                coord: h.txns[tu].coord,
            }),
        };
        found.expect("every graph edge comes from a read or write of its endpoints")
    }

    /// The printable form of a raw cycle; runs through time nodes become one `rt` step.
    fn steps(&self, raw: &[RawEdge]) -> Vec<Step> {
        let c = self.txn_of.len() as u32;
        let real = |v: u32| v < c;
        // Start at a real node.
        let first = raw.iter().position(|e| real(e.0)).expect("a cycle holds a transaction");
        let mut steps = Vec::new();
        let mut from = NONE;
        for k in 0..raw.len() {
            let (u, kind, v) = raw[(first + k) % raw.len()];
            if real(u) {
                from = u;
            }
            if !real(v) {
                continue;
            }
            let t = |x: u32| &self.h.txns[self.txn_of[x as usize] as usize];
            let e = if real(u) {
                self.evidence(u, kind, v)
            } else {
                Edge::Rt {
                    end_ns: t(from).end_ns,
                    start_ns: t(v).start_ns,
                }
            };
            steps.push(Step {
                from: t(from).id,
                edge: e,
                to: t(v).id,
            });
        }
        steps
    }

    /// Find a short cycle in component `members` as `q` says.
    fn cycle_in(&self, g: &Graph, bfs: &mut Bfs, members: &[u32], q: &CycleQuery) -> CycleFound {
        let out_edges: u64 = members.iter().map(|&v| g.out(v).len() as u64).sum();
        let mut budget = BUDGET_MIN.max(BUDGET_PER_EDGE * out_edges);
        let closing = members
            .iter()
            .flat_map(|&u| g.out(u).iter().map(move |&e| (u, e & 3, e >> 2)));
        let closing = closing.filter(|&(u, kind, v)| (q.closing)(u, kind, v));
        let ranked: Vec<RawEdge>;
        let candidates: &mut dyn Iterator<Item = RawEdge> = match q.rank {
            None => &mut { closing },
            Some(rank) => {
                let mut all: Vec<RawEdge> = closing.collect();
                all.sort_by_key(|&(u, _, v)| rank(u, v));
                ranked = all;
                &mut ranked.iter().copied()
            }
        };
        let mut best: Option<Vec<RawEdge>> = None;
        for (tries, (u, kind, v)) in candidates.enumerate() {
            // Improving a found cycle stops after TRIES_MAX tries; finding one stops only
            // at the budget.
            if tries >= TRIES_MAX && best.is_some() {
                return CycleFound {
                    truncated: false,
                    cycle: best,
                };
            }
            let ok = |y: u32| (q.ok)(u, y);
            let spec = PathSpec {
                mask: q.path_mask,
                ok: &ok,
                weight: q.weight,
                no_adjacent_rw: q.no_adjacent_rw,
                start_after_rw: kind == RW,
                end_non_rw: kind == RW,
            };
            match bfs.path(g, v, u, &spec, &mut budget) {
                Search::Found(path) => {
                    let path: Vec<RawEdge> = std::iter::once((u, kind, v)).chain(path).collect();
                    debug_assert!(!q.no_adjacent_rw || !adjacent_rw(&path), "{path:?}");
                    if best.as_ref().is_none_or(|b| path.len() < b.len()) {
                        let done = !q.shortest || path.len() == 2;
                        best = Some(path);
                        if done {
                            return CycleFound {
                                cycle: best,
                                truncated: false,
                            };
                        }
                    }
                }
                Search::NotFound => {}
                Search::OutOfBudget => {
                    return CycleFound {
                        truncated: best.is_none(),
                        cycle: best,
                    }
                }
            }
        }
        CycleFound {
            cycle: best,
            truncated: false,
        }
    }

    fn add_cycle(&mut self, kind: FindingKind, cycle: Option<Vec<RawEdge>>) {
        match cycle {
            Some(raw) if self.findings.wants(kind) => {
                let steps = self.steps(&raw);
                self.findings.add(kind, || Evidence::Cycle { steps });
            }
            // Over the listing cap, or (only at a search limit) no cycle to show: count it.
            _ => self.findings.counts[kind as usize] += 1,
        }
    }

    /// Step 5: G0, G1c, G-single and G2 (or write skew), then cycles through session or
    /// real-time order.
    fn cycles(&mut self, g: &Graph) {
        let c = self.txn_of.len() as u32;
        if !(self.opts.sessions || self.opts.real_time) {
            let full = tarjan(g, M_WW | M_WR | M_RW, 0..c, |v| v < c);
            self.dependency_cycles(g, &full);
            return;
        }
        // One Tarjan over every edge first: an acyclic graph (the common case) is done.
        let all = tarjan(g, M_ALL, 0..g.nodes() as u32, |_| true);
        if all.ranges.is_empty() {
            return;
        }
        let mut on_cycle = vec![false; c as usize];
        for &v in all.nodes.iter().filter(|&&v| v < c) {
            on_cycle[v as usize] = true;
        }
        // Every dependency cycle lies inside a component of the full graph.
        let roots = all.nodes.iter().copied().filter(|&v| v < c);
        let full = tarjan(g, M_WW | M_WR | M_RW, roots, |v| v < c && on_cycle[v as usize]);
        drop(on_cycle);
        self.dependency_cycles(g, &full);
        self.order_cycles(g, &all, &full);
    }

    /// G0, G1c, G-single and G2 (or write skew) in the components `full` of the ww, wr
    /// and rw edges.
    fn dependency_cycles(&mut self, g: &Graph, full: &Comps) {
        let c = self.txn_of.len() as u32;
        self.txns_in_cycles = full.nodes.len() as u64;
        if full.ranges.is_empty() {
            return;
        }
        let mut on_cycle = vec![false; c as usize];
        for &v in &full.nodes {
            on_cycle[v as usize] = true;
        }
        let on_cycle = |v: u32| on_cycle[v as usize];
        let mut bfs = Bfs::new(g.nodes());
        let unit = |_: u32, _: u32| 1;

        // G0: cycles of ww edges.
        let c0 = tarjan(g, M_WW, full.nodes.iter().copied(), on_cycle);
        for &r in &c0.ranges {
            let kind = FindingKind::G0;
            let cycle = if self.findings.wants(kind) {
                let same = |u: u32, y: u32| c0.of[u as usize] == c0.of[y as usize];
                let closing = |u: u32, k: u32, v: u32| k == WW && same(u, v);
                let q = CycleQuery {
                    closing: &closing,
                    path_mask: M_WW,
                    ok: &same,
                    weight: &unit,
                    no_adjacent_rw: false,
                    shortest: true,
                    rank: None,
                };
                self.cycle_in(g, &mut bfs, c0.members(r), &q).cycle
            } else {
                None
            };
            self.add_cycle(kind, cycle);
        }
        drop(c0);

        // G1c: cycles of ww and wr edges with a wr edge.
        let c1 = tarjan(g, M_WW | M_WR, full.nodes.iter().copied(), on_cycle);
        let same1 = |u: u32, y: u32| c1.of[u as usize] == c1.of[y as usize];
        for &r in &c1.ranges {
            let members = c1.members(r);
            let has_wr = members
                .iter()
                .any(|&u| g.out(u).iter().any(|&e| e & 3 == WR && same1(u, e >> 2)));
            if !has_wr {
                continue;
            }
            let kind = FindingKind::G1c;
            let cycle = if self.findings.wants(kind) {
                let closing = |u: u32, k: u32, v: u32| k == WR && same1(u, v);
                let q = CycleQuery {
                    closing: &closing,
                    path_mask: M_WW | M_WR,
                    ok: &same1,
                    weight: &unit,
                    no_adjacent_rw: false,
                    shortest: true,
                    rank: None,
                };
                self.cycle_in(g, &mut bfs, members, &q).cycle
            } else {
                None
            };
            self.add_cycle(kind, cycle);
        }

        // G-single, then G2 or write skew, per component of the full graph.
        let si = self.opts.level == Level::SnapshotIsolation;
        let skew = if si { FindingKind::WriteSkew } else { FindingKind::G2 };
        // A cycle with rw edges is G-single with one; under SI, two or more with none
        // adjacent cannot happen (Fekete et al., TODS 2005: every SI cycle has two
        // consecutive rw edges), so it is G2; otherwise it is write skew (or G2).
        let classify = |c: &[RawEdge]| match rw_count(c) {
            1 => FindingKind::GSingle,
            _ if si && !adjacent_rw(c) => FindingKind::G2,
            _ => skew,
        };
        let same_f = |u: u32, y: u32| full.of[u as usize] == full.of[y as usize];
        let closing_rw = |u: u32, k: u32, v: u32| k == RW && same_f(u, v);
        for &r in &full.ranges {
            let members = full.members(r);
            let has_rw = members
                .iter()
                .any(|&u| g.out(u).iter().any(|&e| e & 3 == RW && same_f(u, e >> 2)));
            if !has_rw {
                continue;
            }
            let want = self.findings.wants(FindingKind::GSingle);
            // Pass 1: rw edges inside one ww+wr component close a G-single at once.
            let closing = |u: u32, k: u32, v: u32| k == RW && same_f(u, v) && same1(u, v);
            let q = CycleQuery {
                closing: &closing,
                path_mask: M_WW | M_WR,
                ok: &same1,
                weight: &unit,
                no_adjacent_rw: false,
                shortest: want,
                rank: None,
            };
            let mut found = self.cycle_in(g, &mut bfs, members, &q);
            if found.cycle.is_none() {
                // Pass 2: v ⇝ u over ww+wr needs id1(u) <= id1(v) (reverse topological
                // numbering); never enter a ww+wr component numbered below id1(u).
                let id1 = |x: u32| c1.of[x as usize];
                let closing = |u: u32, k: u32, v: u32| k == RW && same_f(u, v) && id1(u) < id1(v);
                let ok = |u: u32, y: u32| same_f(u, y) && id1(y) >= id1(u);
                // The narrower the window of components between u and v, the cheaper the
                // search: try those first.
                let window = |u: u32, v: u32| (id1(v) - id1(u)) as u64;
                let q = CycleQuery {
                    closing: &closing,
                    path_mask: M_WW | M_WR,
                    ok: &ok,
                    weight: &unit,
                    no_adjacent_rw: false,
                    shortest: want,
                    rank: Some(&window),
                };
                found = self.cycle_in(g, &mut bfs, members, &q);
            }
            if found.cycle.is_some() {
                self.add_cycle(FindingKind::GSingle, found.cycle);
                continue;
            }
            let mut truncated = found.truncated;
            if si {
                // Pass 3: a cycle with no two adjacent rw edges.
                let q = CycleQuery {
                    closing: &closing_rw,
                    path_mask: M_WW | M_WR | M_RW,
                    ok: &same_f,
                    weight: &unit,
                    no_adjacent_rw: true,
                    shortest: self.findings.wants(FindingKind::G2),
                    rank: None,
                };
                let found = self.cycle_in(g, &mut bfs, members, &q);
                if let Some(cycle) = found.cycle {
                    self.add_cycle(classify(&cycle), Some(cycle));
                    continue;
                }
                truncated |= found.truncated;
            }
            if truncated {
                self.search_truncated += 1;
            }
            // No violation found: a shortest cycle through rw, classified by what it shows.
            let (kind, cycle) = if self.findings.wants(skew) || truncated {
                let q = CycleQuery {
                    closing: &closing_rw,
                    path_mask: M_WW | M_WR | M_RW,
                    ok: &same_f,
                    weight: &unit,
                    no_adjacent_rw: false,
                    shortest: true,
                    rank: None,
                };
                let cycle = self.cycle_in(g, &mut bfs, members, &q).cycle;
                (cycle.as_deref().map_or(skew, classify), cycle)
            } else {
                (skew, None)
            };
            self.add_cycle(kind, cycle);
        }
    }

    /// Cycles through session order (an `RT` edge between two transactions), then
    /// through time nodes, in the components `all` of every edge; one finding per
    /// component. Under SI, a session or real-time edge is like a wr edge (the first
    /// committed before the second began), so only cycles with two adjacent rw edges are
    /// allowed. Under serializability, a session edge inside one component of `full`
    /// closes no cycle that the dependency edges do not close already (and report), so
    /// only session edges between such components close a session finding.
    fn order_cycles(&mut self, g: &Graph, all: &Comps, full: &Comps) {
        let c = self.txn_of.len() as u32;
        let mut bfs: Option<Bfs> = None; // only histories with such cycles pay for it
        let same = |u: u32, y: u32| all.of[u as usize] == all.of[y as usize];
        let si = self.opts.level == Level::SnapshotIsolation;
        // Count transactions, not time nodes, in a cycle's length.
        let weight = |_: u32, y: u32| (y < c) as u32;
        let session = |u: u32, k: u32, v: u32| {
            k == RT && u < c && v < c && same(u, v) && (si || full.of[u as usize] != full.of[v as usize])
        };
        let closing = |u: u32, k: u32, v: u32| k == RT && u >= c && v < c && same(u, v);
        for &r in &all.ranges {
            let members = all.members(r);
            let has_session = members
                .iter()
                .any(|&u| g.out(u).iter().any(|&e| session(u, e & 3, e >> 2)));
            if has_session {
                let q = CycleQuery {
                    closing: &session,
                    path_mask: M_ALL,
                    ok: &same,
                    weight: &weight,
                    no_adjacent_rw: si,
                    shortest: false,
                    rank: None,
                };
                if self.order_finding(g, &mut bfs, members, FindingKind::Session, &q) {
                    continue;
                }
            }
            if !members.iter().any(|&v| v >= c) {
                continue;
            }
            let q = CycleQuery {
                closing: &closing,
                path_mask: M_ALL,
                ok: &same,
                weight: &weight,
                no_adjacent_rw: si,
                shortest: false,
                rank: None,
            };
            self.order_finding(g, &mut bfs, members, FindingKind::RealTime, &q);
        }
    }

    /// One component's session or real-time finding of [`Self::order_cycles`]: true when
    /// it reported one. Without wanting evidence, every node of a component lies on a
    /// cycle through the closing edge's ends; under SI only a cycle the query finds counts.
    fn order_finding(
        &mut self,
        g: &Graph,
        bfs: &mut Option<Bfs>,
        members: &[u32],
        kind: FindingKind,
        q: &CycleQuery,
    ) -> bool {
        let si = q.no_adjacent_rw;
        if !si && !self.findings.wants(kind) {
            self.add_cycle(kind, None);
            return true;
        }
        let bfs = bfs.get_or_insert_with(|| Bfs::new(g.nodes()));
        let found = self.cycle_in(g, bfs, members, q);
        if found.truncated {
            self.search_truncated += 1;
        }
        if found.cycle.is_some() || !si {
            self.add_cycle(kind, found.cycle);
            return true;
        }
        false
    }

    fn report(self) -> Report {
        let Findings { counts, mut list, .. } = self.findings;
        list.sort_by_key(|f| f.kind);
        let committed = self.txn_of.len();
        Report {
            level: self.opts.level,
            real_time: self.opts.real_time,
            sessions: self.opts.sessions,
            txns: self.h.txns.len(),
            committed,
            aborted: self.h.txns.len() - committed,
            reads: self.reads,
            writes: self.writes,
            edges: self.edges,
            txns_in_cycles: self.txns_in_cycles,
            counts: FindingKind::ALL
                .iter()
                .map(|&k| (k, counts[k as usize]))
                .filter(|&(_, n)| n > 0)
                .collect(),
            findings: list,
            search_truncated: self.search_truncated,
            snapshot_reads: self.snapshot_reads,
        }
    }
}

/// The version `txn` installed over (`table`, `key`, `prev`).
fn overwrite_version(h: &History, txn: usize, table: u32, key: u64, prev: u64) -> u64 {
    h.writes_of(&h.txns[txn])
        .iter()
        .rev()
        .find(|w| w.table == table && w.key == key && w.prev == Some(prev))
        .map(|w| w.version)
        .expect("an overwrite record comes from one of the transaction's writes")
}

/// A packed edge for [`Graph::build`].
#[inline]
fn edge(src: u32, kind: u32, dst: u32) -> u64 {
    debug_assert_ne!(src, dst, "self edge");
    debug_assert!(src != NONE && dst != NONE, "edge of an aborted transaction");
    ((src as u64) << 32) | ((dst as u64) << 2) | kind as u64
}

#[cfg(test)]
mod tests;
