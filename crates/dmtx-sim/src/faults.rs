//! Fault injection: a small script of faults and the triggers that fire them.
//!
//! A [`FaultScript`] comes from TOML (`--faults faults.toml`) or from a one-line form
//! (`--set fault=...`) and is installed with [`Sim::install_faults`]. Everything a fault
//! does is decided on the simulation thread from virtual time, the op stream and the
//! simulation's seed, so the same seed and script give the same run.
//!
//! # The one-line form
//!
//! Clauses separated by `;`, each `KIND key=value ...`; a clause `timeout=DUR` sets the
//! transport timeout. Durations are an integer with `ns`, `us`, `ms` or `s` (bare: ns);
//! nodes are `cnN`, `mnN` and `ms` (the membership node).
//!
//! ```text
//! timeout=200us; crash-mn mn=1 mode=pm restart=5ms at=2ms; lose-response on=kind:cas,mn:0 nth=3
//! ```
//!
//! | kind | fields | what happens |
//! | --- | --- | --- |
//! | `crash-mn` | `mn=N mode=dram\|pm [restart=DUR]` | the node stops serving; `dram`: its region is zeroed; `pm`: each cacheline keeps a seed-chosen prefix of its unflushed writes ([`persist`](crate::persist)); after `restart` it serves again and transports count a restart ([`Transport::restarts`](dmtx_verbs::Transport::restarts)) |
//! | `crash-ms` | `[restart=DUR]` | the membership node stops: lease requests that reach it are lost (no ack comes back) and no lease expires at it, so members' own leases run out ([`Sim::lease_held`]) while the view stands; after `restart` it serves again with its view (a coordination service keeps it durable) and a fresh lease for every member. Needs the `membership` clause |
//! | `crash-cn` | `[cn=N]` | the compute node stops: [`Sim::cn_down`] turns true, its later posts never apply or complete, and on each of its connections a seed-chosen prefix of its in-flight ops applies (the next one possibly torn at a word). The executor drops its tasks at once. Without `cn`, the node whose op or fault point fired the trigger |
//! | `link-down` | `node=NODE for=DUR` | every op in flight over the node's link and every op posted over it while down fails after the timeout (ops that reached the memory node stay applied) |
//! | `partition` | `side=NODE,NODE.. [for=DUR]` | the nodes of `side` cannot reach the others (as `link-down` for every path across); forever without `for` |
//! | `slow-nic` | `node=NODE factor=K [for=DUR]` | batches to or from the node are timed with every service, link, PCIe and atomic time multiplied by `K` (latency too); so are the CN↔CN messages a slow compute node sends or receives (its links, the latency and its RECV service: [`msg`](crate::msg), "Slow NICs and delays") |
//! | `clock-jump` | `node=NODE by=±DUR` | the node's clock ([`Sim::node_clock`]) jumps |
//! | `clock-drift` | `node=NODE ppm=P` | from then on the node's clock runs `P` ppm further off |
//! | `lose-response` | (needs `on=`) | the matched ops apply, but their post fails after the timeout (the CN never saw the reply) |
//! | `delay` | `by=DUR` (needs `on=`) | the matched ops' posts complete `by` later |
//! | `delay` | `by=DUR path=cnA->cnB [for=DUR]` | every CN↔CN message sent from `cnA` to `cnB` from the firing on, for `for` (forever without), is delivered `by` later; the other direction is a second clause |
//! | `delay` | `by=DUR node=NODE [for=DUR]` | from the firing on, for `for` (forever without), everything the node sends or receives arrives `by` later: its CN↔CN messages both ways, the replies of its posts (a compute node) or of the posts to it (a memory node), and its lease requests and acks (so a live node whose delay passes its lease is expelled; `ms` delays every member's) |
//! | `membership` | `lease=DUR [renew=DUR] members=NODE,..` | starts the lease-based membership node (see [`membership`](crate::membership)) |
//!
//! Triggers (any fault but `membership`; at least one of `at`, `point`, `on`):
//!
//! | field | meaning |
//! | --- | --- |
//! | `at=DUR` | armed at this virtual time |
//! | `point=NAME [occurrence=K]` | armed the `K`-th time (default 1) any compute node passes the named fault point (`ctx.fault_point("ford.commit.after_undo")`) |
//! | `on=PRED [nth=K] [count=C]` | once armed (at once if neither `at` nor `point`), fires at the `K`-th submitted op matching `PRED` (default 1); `lose-response` and `delay` strike that op and the next `C - 1` matches (default 1) |
//! | `after=DUR` | fire this long after the trigger instead of at once |
//!
//! `PRED` is `any` or a comma list of `kind:read\|write\|cas\|faa\|flush`, `mn:N`, `cn:N`,
//! `addr:LO..HI` (byte offsets, half-open, decimal or `0x` hex). An op count is a
//! predicate too: `on=any nth=1000` is the 1000th op overall, `on=mn:1 nth=1000` the
//! 1000th to memory node 1. Ops are matched when submitted.
//!
//! # The TOML form
//!
//! ```toml
//! timeout = "200us"
//! [membership]
//! lease = "1ms"
//! members = ["cn0", "cn1", "mn0", "mn1"]
//! [[fault]]
//! kind = "crash-mn"
//! mn = 1
//! mode = "pm"
//! at = "2ms"
//! restart = "5ms"
//! ```
//!
//! The same fields as the one-line form; integers may be TOML integers, lists TOML
//! arrays. Every error names the clause, the field and the fix.
//!
//! # Cost
//!
//! With no script installed the transport pays one branch per post and per event;
//! persistence is recorded only when the script crashes a node in PM mode.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dmtx_verbs::{MnId, Op, OpKind, Region, VerbError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::clock::ClockAdjust;
use crate::membership::{Membership, MembershipConfig, MsEvent};
use crate::nic::{BatchTiming, NicModel};
use crate::persist::{Persist, PmLoss};
use crate::sim::{Event, InFlight, State};
use crate::{NodeClock, Sim, SimError};

/// Transport timeout when the script sets none: how long a requester waits before an op
/// to an unreachable node fails (RDMA RC's ack timeout and retries, shortened).
pub const TIMEOUT_NS_DEFAULT: u64 = 100_000;

// ---------------------------------------------------------------------------------------
// The script.

/// A node of the simulated cluster.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    /// Compute node `n`.
    Cn(u32),
    /// Memory node `n`.
    Mn(u16),
    /// The membership node.
    Membership,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Cn(n) => write!(f, "cn{n}"),
            Node::Mn(n) => write!(f, "mn{n}"),
            Node::Membership => f.write_str("ms"),
        }
    }
}

impl FromStr for Node {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a node; write cnN, mnN or ms");
        if s == "ms" {
            return Ok(Node::Membership);
        }
        if let Some(n) = s.strip_prefix("cn") {
            return n.parse().map(Node::Cn).map_err(|_| bad());
        }
        if let Some(n) = s.strip_prefix("mn") {
            return n.parse().map(Node::Mn).map_err(|_| bad());
        }
        Err(bad())
    }
}

/// How a memory node loses its contents.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Volatile memory: the region is zeroed.
    Dram,
    /// Persistent memory: unflushed writes are lost per cacheline (see `persist`).
    Pm,
}

/// What a fault does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultAction {
    /// Crash a memory node, optionally restarting it `restart_ns` later.
    CrashMn {
        /// The node.
        mn: u16,
        /// What its memory keeps.
        mode: CrashMode,
        /// Delay until it serves again (never, if `None`).
        restart_ns: Option<u64>,
    },
    /// Crash a compute node (`None`: the one that fired the trigger).
    CrashCn {
        /// The node.
        cn: Option<u32>,
    },
    /// Take a node's link down for a while.
    LinkDown {
        /// The node.
        node: Node,
        /// How long.
        for_ns: u64,
    },
    /// Cut `side` off from every other node.
    Partition {
        /// One side.
        side: Vec<Node>,
        /// How long (forever if `None`).
        for_ns: Option<u64>,
    },
    /// Scale a node's NIC and link times.
    SlowNic {
        /// The node.
        node: Node,
        /// Multiplier (≥ 1).
        factor: u32,
        /// How long (forever if `None`).
        for_ns: Option<u64>,
    },
    /// Jump a node's clock.
    ClockJump {
        /// The node.
        node: Node,
        /// By how much (negative: back).
        by_ns: i64,
    },
    /// Change a node's clock rate.
    ClockDrift {
        /// The node.
        node: Node,
        /// Extra drift.
        ppm: i64,
    },
    /// The membership node stops: lease requests that reach it are lost and no lease
    /// expires at it until it restarts, if it does, with its view (a coordination service keeps
    /// its state durable) and a fresh lease for every member.
    CrashMs {
        /// Restart after this long (never if `None`).
        restart_ns: Option<u64>,
    },
    /// The matched ops apply but their replies are lost.
    LoseResponse,
    /// The matched ops' posts complete later.
    Delay {
        /// How much later.
        by_ns: u64,
    },
    /// CN↔CN messages on one path are delivered later while the fault lasts (`delay`
    /// with `path=`).
    DelayMessages {
        /// The sending compute node.
        from: u32,
        /// The receiving compute node (not `from`).
        to: u32,
        /// How much later.
        by_ns: u64,
        /// How long (forever if `None`).
        for_ns: Option<u64>,
    },
    /// Everything a node sends or receives arrives later while the fault lasts (`delay`
    /// with `node=`): its CN↔CN messages, its posts' replies (a compute node's posts, or
    /// the posts to a memory node) and its lease messages.
    DelayNode {
        /// The node (`cnN`, `mnN` or `ms`).
        node: Node,
        /// How much later.
        by_ns: u64,
        /// How long (forever if `None`).
        for_ns: Option<u64>,
    },
}

impl FaultAction {
    /// True for the faults that strike individual ops (they need `on=`).
    pub fn is_per_op(&self) -> bool {
        matches!(self, FaultAction::LoseResponse | FaultAction::Delay { .. })
    }

    fn kind(&self) -> &'static str {
        match self {
            FaultAction::CrashMn { .. } => "crash-mn",
            FaultAction::CrashCn { .. } => "crash-cn",
            FaultAction::CrashMs { .. } => "crash-ms",
            FaultAction::LinkDown { .. } => "link-down",
            FaultAction::Partition { .. } => "partition",
            FaultAction::SlowNic { .. } => "slow-nic",
            FaultAction::ClockJump { .. } => "clock-jump",
            FaultAction::ClockDrift { .. } => "clock-drift",
            FaultAction::LoseResponse => "lose-response",
            FaultAction::Delay { .. } | FaultAction::DelayMessages { .. } | FaultAction::DelayNode { .. } => "delay",
        }
    }
}

/// Which submitted ops a trigger matches (every given field must match).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpFilter {
    /// The op's kind.
    pub kind: Option<OpKind>,
    /// The memory node it targets.
    pub mn: Option<u16>,
    /// The compute node that posts it.
    pub cn: Option<u32>,
    /// Byte offsets `[lo, hi)` its address falls in.
    pub addr: Option<(u64, u64)>,
}

impl OpFilter {
    /// True when `op`, posted by `cn`, matches.
    pub fn matches(&self, cn: u32, op: &Op) -> bool {
        let ptr = op.ptr();
        self.kind.is_none_or(|k| k == op.kind())
            && self.mn.is_none_or(|m| m == ptr.mn.0)
            && self.cn.is_none_or(|c| c == cn)
            && self.addr.is_none_or(|(lo, hi)| (lo..hi).contains(&ptr.offset))
    }
}

/// When a fault fires.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trigger {
    /// Armed at this virtual time.
    pub at_ns: Option<u64>,
    /// Armed when a compute node passes this fault point for the `occurrence`-th time.
    pub point: Option<String>,
    /// Which pass of `point` arms (1-based).
    pub occurrence: u64,
    /// Once armed, fire at the `nth` op matching this.
    pub on: Option<OpFilter>,
    /// Which match fires (1-based).
    pub nth: u64,
    /// Per-op faults: how many consecutive matches they strike.
    pub count: u64,
    /// Fire this long after the trigger.
    pub after_ns: u64,
}

/// One scripted fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// What it does.
    pub action: FaultAction,
    /// When.
    pub trigger: Trigger,
}

/// A set of faults, the transport timeout and optionally the membership service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultScript {
    /// How long an op to an unreachable node takes to fail (ns).
    pub timeout_ns: u64,
    /// The faults, in script order.
    pub faults: Vec<Fault>,
    /// Start the lease-based membership service.
    pub membership: Option<MembershipConfig>,
}

impl Default for FaultScript {
    fn default() -> Self {
        Self {
            timeout_ns: TIMEOUT_NS_DEFAULT,
            faults: Vec::new(),
            membership: None,
        }
    }
}

/// A fault script that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultError {
    /// A clause or field is wrong; the message says which and how to fix it.
    #[error("fault script, {clause}: {message}")]
    Invalid {
        /// Which clause (`clause 2 (crash-mn)`).
        clause: String,
        /// What is wrong and the fix.
        message: String,
    },
    /// The TOML does not parse.
    #[error("fault script is not valid TOML: {0}")]
    Toml(String),
}

const KINDS: &[&str] = &[
    "crash-mn",
    "crash-cn",
    "crash-ms",
    "link-down",
    "partition",
    "slow-nic",
    "clock-jump",
    "clock-drift",
    "lose-response",
    "delay",
    "membership",
];
const TRIGGER_KEYS: &[&str] = &["at", "point", "occurrence", "on", "nth", "count", "after"];

/// Levenshtein distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j])).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

fn did_you_mean(word: &str, known: &[&str]) -> String {
    match known.iter().min_by_key(|k| distance(word, k)) {
        Some(k) if distance(word, k) <= 2 => format!("; did you mean `{k}`?"),
        _ => format!("; known: {}", known.join(", ")),
    }
}

/// Parse a duration: an integer with `ns`, `us`, `ms` or `s` (bare: ns), optionally signed.
fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("`{s}` is not a duration; write e.g. 500ns, 20us, 2ms or 1s");
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let split = body.find(|c: char| !c.is_ascii_digit()).unwrap_or(body.len());
    let (num, unit) = body.split_at(split);
    let n: i64 = num.parse().map_err(|_| bad())?;
    let mul = match unit {
        "" | "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(bad()),
    };
    let v = n.checked_mul(mul).ok_or_else(bad)?;
    Ok(if neg { -v } else { v })
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("`{s}` is not a non-negative integer"))
}

/// Parse a message path `cnA->cnB` (two distinct compute nodes).
fn parse_path(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{s}` is not a message path; write path=cnA->cnB (two compute nodes)");
    let (a, b) = s.split_once("->").ok_or_else(bad)?;
    match (a.parse::<Node>(), b.parse::<Node>()) {
        (Ok(Node::Cn(a)), Ok(Node::Cn(b))) if a != b => Ok((a, b)),
        (Ok(Node::Cn(a)), Ok(Node::Cn(_))) => Err(format!(
            "path cn{a}->cn{a} stays inside one compute node, whose messages cross no NIC; name two compute nodes"
        )),
        _ => Err(bad()),
    }
}

fn parse_kind(s: &str) -> Result<OpKind, String> {
    OpKind::ALL
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| format!("`{s}` is not an op kind; use read, write, cas, faa or flush"))
}

impl FromStr for OpFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut f = OpFilter::default();
        if s == "any" {
            return Ok(f);
        }
        for part in s.split(',') {
            let (k, v) = part
                .split_once(':')
                .ok_or_else(|| format!("`{part}` is not `name:value`; write e.g. on=kind:cas,mn:0 or on=any"))?;
            match k {
                "kind" => f.kind = Some(parse_kind(v)?),
                "mn" => f.mn = Some(v.parse().map_err(|_| format!("mn `{v}` is not a node number"))?),
                "cn" => f.cn = Some(v.parse().map_err(|_| format!("cn `{v}` is not a node number"))?),
                "addr" => {
                    let (lo, hi) = v
                        .split_once("..")
                        .ok_or_else(|| format!("addr `{v}` is not a range; write addr:LO..HI"))?;
                    let (lo, hi) = (parse_u64(lo)?, parse_u64(hi)?);
                    if lo >= hi {
                        return Err(format!("addr range {lo}..{hi} is empty; LO must be below HI"));
                    }
                    f.addr = Some((lo, hi));
                }
                _ => {
                    return Err(format!(
                        "`{k}` is not an op property{}",
                        did_you_mean(k, &["kind", "mn", "cn", "addr"])
                    ))
                }
            }
        }
        Ok(f)
    }
}

/// One clause's fields, consumed as they are validated.
struct Clause {
    name: String,
    kind: String,
    fields: BTreeMap<String, String>,
}

enum Item {
    Fault(Fault),
    Timeout(u64),
    Membership(MembershipConfig),
}

impl Clause {
    fn err(&self, message: String) -> FaultError {
        FaultError::Invalid {
            clause: self.name.clone(),
            message,
        }
    }

    fn field<T>(&mut self, key: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<Option<T>, FaultError> {
        match self.fields.remove(key) {
            None => Ok(None),
            Some(v) => parse(&v).map(Some).map_err(|m| self.err(format!("field `{key}`: {m}"))),
        }
    }

    fn required<T>(
        &mut self,
        key: &str,
        fix: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, FaultError> {
        self.field(key, parse)?
            .ok_or_else(|| self.err(format!("field `{key}` is missing; add {fix}")))
    }

    fn duration(&mut self, key: &str) -> Result<Option<u64>, FaultError> {
        self.field(key, |s| {
            let v = parse_duration(s)?;
            u64::try_from(v).map_err(|_| format!("`{s}` is negative; a {key} must be ≥ 0"))
        })
    }

    fn build(mut self) -> Result<Item, FaultError> {
        let node = |s: &str| s.parse::<Node>();
        let action = match self.kind.as_str() {
            "timeout" => {
                let t = self.duration("timeout")?.expect("a timeout clause has the field");
                self.finish(&["timeout"])?;
                if t == 0 {
                    return Err(self.err("field `timeout`: must be > 0; write e.g. timeout=100us".into()));
                }
                return Ok(Item::Timeout(t));
            }
            "membership" => {
                let lease_ns = self
                    .duration("lease")?
                    .ok_or_else(|| self.err("field `lease` is missing; add e.g. lease=1ms".into()))?;
                let renew_ns = self.duration("renew")?.unwrap_or(lease_ns / 3);
                let members = self.required("members", "e.g. members=cn0,cn1,mn0", |s| {
                    s.split(',').map(node).collect::<Result<Vec<_>, _>>()
                })?;
                self.finish(&["lease", "renew", "members"])?;
                let cfg = MembershipConfig {
                    lease_ns,
                    renew_ns,
                    members,
                };
                cfg.check().map_err(|m| self.err(m))?;
                return Ok(Item::Membership(cfg));
            }
            "crash-mn" => FaultAction::CrashMn {
                mn: self.required("mn", "mn=N", |s| {
                    s.parse().map_err(|_| format!("`{s}` is not a node number"))
                })?,
                mode: self.required(
                    "mode",
                    "mode=dram (contents lost) or mode=pm (unflushed writes lost)",
                    |s| match s {
                        "dram" => Ok(CrashMode::Dram),
                        "pm" => Ok(CrashMode::Pm),
                        _ => Err(format!("`{s}` is not a crash mode; use dram or pm")),
                    },
                )?,
                restart_ns: self.duration("restart")?,
            },
            "crash-ms" => FaultAction::CrashMs {
                restart_ns: self.duration("restart")?,
            },
            "crash-cn" => FaultAction::CrashCn {
                cn: self.field("cn", |s| s.parse().map_err(|_| format!("`{s}` is not a node number")))?,
            },
            "link-down" => FaultAction::LinkDown {
                node: self.required("node", "node=cnN or node=mnN", node)?,
                for_ns: self
                    .duration("for")?
                    .ok_or_else(|| self.err("field `for` is missing; add e.g. for=500us".into()))?,
            },
            "partition" => FaultAction::Partition {
                side: self.required("side", "e.g. side=cn1,mn0", |s| {
                    s.split(',').map(node).collect::<Result<Vec<_>, _>>()
                })?,
                for_ns: self.duration("for")?,
            },
            "slow-nic" => FaultAction::SlowNic {
                node: self.required("node", "node=cnN or node=mnN", node)?,
                factor: self.required("factor", "e.g. factor=4", |s| match s.parse::<u32>() {
                    Ok(f) if (1..=1000).contains(&f) => Ok(f),
                    _ => Err(format!("`{s}` is not a factor in 1..=1000")),
                })?,
                for_ns: self.duration("for")?,
            },
            "clock-jump" => FaultAction::ClockJump {
                node: self.required("node", "node=cnN", node)?,
                by_ns: self.required("by", "e.g. by=-5ms", parse_duration)?,
            },
            "clock-drift" => FaultAction::ClockDrift {
                node: self.required("node", "node=cnN", node)?,
                ppm: self.required("ppm", "e.g. ppm=-500000", |s| match s.parse::<i64>() {
                    Ok(p) if (-999_999..=999_999).contains(&p) => Ok(p),
                    _ => Err(format!("`{s}` is not a drift in -999999..=999999 ppm")),
                })?,
            },
            "lose-response" => FaultAction::LoseResponse,
            "delay" => {
                let by_ns = self
                    .duration("by")?
                    .ok_or_else(|| self.err("field `by` is missing; add e.g. by=50us".into()))?;
                let node = self.field("node", node)?;
                match self.field("path", parse_path)? {
                    Some(_) if node.is_some() => {
                        return Err(self.err(
                            "`path` delays one message path, `node` everything a node sends or receives; keep one"
                                .into(),
                        ));
                    }
                    None if node.is_some() => FaultAction::DelayNode {
                        node: node.expect("checked"),
                        by_ns,
                        for_ns: self.duration("for")?,
                    },
                    Some((from, to)) => FaultAction::DelayMessages {
                        from,
                        to,
                        by_ns,
                        for_ns: self.duration("for")?,
                    },
                    None if self.fields.contains_key("for") => {
                        return Err(self.err(
                            "`for` bounds a message or node delay; add path=cnA->cnB or node=NODE, or drop `for` (an op delay strikes `count` ops)"
                                .into(),
                        ));
                    }
                    None => FaultAction::Delay { by_ns },
                }
            }
            k => {
                return Err(self.err(format!("`{k}` is not a fault kind{}", did_you_mean(k, KINDS))));
            }
        };
        let trigger = Trigger {
            at_ns: self.duration("at")?,
            point: self.fields.remove("point"),
            occurrence: self.field("occurrence", parse_u64)?.unwrap_or(1),
            on: self.field("on", |s| s.parse::<OpFilter>())?,
            nth: self.field("nth", parse_u64)?.unwrap_or(1),
            count: self.field("count", parse_u64)?.unwrap_or(1),
            after_ns: self.duration("after")?.unwrap_or(0),
        };
        let keys: &[&str] = match &action {
            FaultAction::CrashMn { .. } => &["mn", "mode", "restart"],
            FaultAction::CrashCn { .. } => &["cn"],
            FaultAction::CrashMs { .. } => &["restart"],
            FaultAction::LinkDown { .. } => &["node", "for"],
            FaultAction::Partition { .. } => &["side", "for"],
            FaultAction::SlowNic { .. } => &["node", "factor", "for"],
            FaultAction::ClockJump { .. } => &["node", "by"],
            FaultAction::ClockDrift { .. } => &["node", "ppm"],
            FaultAction::LoseResponse => &[],
            FaultAction::Delay { .. } => &["by", "path"],
            FaultAction::DelayMessages { .. } => &["by", "path", "for"],
            FaultAction::DelayNode { .. } => &["by", "node", "for"],
        };
        self.finish(keys)?;
        let t = &trigger;
        if t.at_ns.is_none() && t.point.is_none() && t.on.is_none() {
            return Err(self.err("no trigger; add at=DUR, point=NAME or on=PRED (e.g. on=kind:cas,mn:0 nth=3)".into()));
        }
        if t.at_ns.is_some() && t.point.is_some() {
            return Err(self.err("`at` and `point` both arm the fault; keep one".into()));
        }
        if t.occurrence == 0 || t.nth == 0 || t.count == 0 {
            return Err(self.err("`occurrence`, `nth` and `count` count from 1".into()));
        }
        if action.is_per_op() && t.on.is_none() {
            return Err(self.err(format!(
                "{} strikes ops; add on=PRED saying which (e.g. on=kind:cas,mn:0 nth=3)",
                action.kind()
            )));
        }
        if !action.is_per_op() && t.count != 1 {
            return Err(self.err(format!(
                "`count` applies to lose-response and op delays (no path) only; {} fires once",
                action.kind()
            )));
        }
        if let FaultAction::CrashCn { cn: None } = action {
            if t.point.is_none() && t.on.is_none() {
                return Err(
                    self.err("field `cn` is missing; add cn=N (only a point or op trigger names a node)".into())
                );
            }
        }
        Ok(Item::Fault(Fault { action, trigger }))
    }

    fn finish(&self, own: &[&str]) -> Result<(), FaultError> {
        if let Some(k) = self.fields.keys().next() {
            let mut known: Vec<&str> = own.to_vec();
            if !matches!(self.kind.as_str(), "timeout" | "membership") {
                known.extend_from_slice(TRIGGER_KEYS);
            }
            return Err(self.err(format!("unknown field `{k}`{}", did_you_mean(k, &known))));
        }
        Ok(())
    }
}

impl FaultScript {
    /// Parse the one-line form (module doc).
    pub fn parse_line(line: &str) -> Result<Self, FaultError> {
        let mut clauses = Vec::new();
        for (i, text) in line.split(';').map(str::trim).filter(|c| !c.is_empty()).enumerate() {
            let mut words = text.split_whitespace().peekable();
            let first = *words.peek().expect("clause is not empty");
            let kind = if first.contains('=') {
                "timeout".to_string()
            } else {
                words.next();
                first.to_string()
            };
            let name = format!("clause {} (`{kind}`)", i + 1);
            let mut fields = BTreeMap::new();
            for w in words {
                let Some((k, v)) = w.split_once('=') else {
                    return Err(FaultError::Invalid {
                        clause: name,
                        message: format!("`{w}` is not key=value; write e.g. at=2ms"),
                    });
                };
                if fields.insert(k.to_string(), v.to_string()).is_some() {
                    return Err(FaultError::Invalid {
                        clause: name,
                        message: format!("field `{k}` given twice; keep one"),
                    });
                }
            }
            if kind == "timeout" && !fields.contains_key("timeout") {
                let k = fields.keys().next().cloned().unwrap_or_default();
                return Err(FaultError::Invalid {
                    clause: name,
                    message: format!("a clause starts with its kind, not `{k}=`{}", did_you_mean(&k, KINDS)),
                });
            }
            clauses.push(Clause { name, kind, fields });
        }
        Self::from_clauses(clauses)
    }

    /// Parse the TOML form (module doc).
    pub fn from_toml(text: &str) -> Result<Self, FaultError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| FaultError::Toml(e.to_string()))?;
        let mut clauses = Vec::new();
        let to_fields = |name: &str, t: &toml::Table| -> Result<BTreeMap<String, String>, FaultError> {
            let mut out = BTreeMap::new();
            for (k, v) in t {
                let s = match v {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Array(a) => a
                        .iter()
                        .map(|x| match x {
                            toml::Value::String(s) => Ok(s.clone()),
                            toml::Value::Integer(i) => Ok(i.to_string()),
                            _ => Err(()),
                        })
                        .collect::<Result<Vec<_>, ()>>()
                        .map_err(|()| FaultError::Invalid {
                            clause: name.to_string(),
                            message: format!("field `{k}`: list items must be strings or integers"),
                        })?
                        .join(","),
                    _ => {
                        return Err(FaultError::Invalid {
                            clause: name.to_string(),
                            message: format!("field `{k}` must be a string, an integer or a list"),
                        })
                    }
                };
                out.insert(k.clone(), s);
            }
            Ok(out)
        };
        for (k, v) in &table {
            match (k.as_str(), v) {
                ("timeout", v) => {
                    let mut t = toml::Table::new();
                    t.insert("timeout".into(), v.clone());
                    clauses.push(Clause {
                        name: "`timeout`".into(),
                        kind: "timeout".into(),
                        fields: to_fields("`timeout`", &t)?,
                    });
                }
                ("membership", toml::Value::Table(t)) => clauses.push(Clause {
                    name: "[membership]".into(),
                    kind: "membership".into(),
                    fields: to_fields("[membership]", t)?,
                }),
                ("fault", toml::Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        let name = format!("[[fault]] {}", i + 1);
                        let toml::Value::Table(t) = item else {
                            return Err(FaultError::Invalid {
                                clause: name,
                                message: "must be a table; write [[fault]] then kind = \"...\"".into(),
                            });
                        };
                        let mut fields = to_fields(&name, t)?;
                        let kind = fields.remove("kind").ok_or_else(|| FaultError::Invalid {
                            clause: name.clone(),
                            message: format!(
                                "field `kind` is missing; add kind = \"crash-mn\" (one of {})",
                                KINDS.join(", ")
                            ),
                        })?;
                        clauses.push(Clause {
                            name: format!("{name} (`{kind}`)"),
                            kind,
                            fields,
                        });
                    }
                }
                (k, _) => {
                    return Err(FaultError::Invalid {
                        clause: "top level".into(),
                        message: format!(
                            "unknown key `{k}`{} (write faults as [[fault]] tables, the service as [membership])",
                            did_you_mean(k, &["timeout", "membership", "fault"])
                        ),
                    })
                }
            }
        }
        Self::from_clauses(clauses)
    }

    fn from_clauses(clauses: Vec<Clause>) -> Result<Self, FaultError> {
        let mut s = FaultScript::default();
        for c in clauses {
            match c.build()? {
                Item::Fault(f) => s.faults.push(f),
                Item::Timeout(t) => s.timeout_ns = t,
                Item::Membership(m) => s.membership = Some(m),
            }
        }
        Ok(s)
    }

    /// True when some fault crashes a memory node in PM mode (persistence is recorded).
    pub fn has_pm_crash(&self) -> bool {
        self.faults.iter().any(|f| {
            matches!(
                f.action,
                FaultAction::CrashMn {
                    mode: CrashMode::Pm,
                    ..
                }
            )
        })
    }
}

impl FromStr for FaultScript {
    type Err = FaultError;
    fn from_str(s: &str) -> Result<Self, FaultError> {
        Self::parse_line(s)
    }
}

// ---------------------------------------------------------------------------------------
// The running state.

/// Flags read without the state lock on hot paths.
#[derive(Debug, Default)]
pub(crate) struct Flags {
    /// Compute-node crashes so far ([`Sim::cn_crashes`]; [`Sim::cn_down`] takes the
    /// lock only once there was one).
    pub cn_crashes: AtomicU64,
    /// Memory-node restarts so far ([`Transport::restarts`](dmtx_verbs::Transport::restarts)).
    pub restarts: AtomicU64,
}

/// A post's fault bookkeeping (filled only while a script is installed).
#[derive(Debug, Default)]
pub(crate) struct PostFaults {
    /// Its completions are held until then (a failed path's timeout, a delay);
    /// `u64::MAX`: never (its compute node crashed).
    pub hold_until: u64,
    pub cn: u32,
    pub conn: u32,
    /// Submit order (for a crashed CN's in-flight prefix).
    pub seq: u64,
    /// Per batch: memory node and when its reply lands.
    pub batches: Vec<(u16, u64)>,
    /// Memory nodes whose batch must not apply (bit per node).
    pub cut: u64,
    /// Memory nodes whose batch applied.
    pub applied: u64,
    /// Op indices whose reply is lost.
    pub lose: Vec<u32>,
    /// Scripted delay of its completion (ns).
    pub delay_ns: u64,
}

/// One fired fault, for the run's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRecord {
    /// Virtual time (ns).
    pub at_ns: u64,
    /// What happened.
    pub what: String,
}

/// The script's faults and their trigger state.
#[derive(Debug)]
struct Armed {
    fault: Fault,
    armed: bool,
    /// Passes of the fault point seen.
    passes: u64,
    /// Ops matched since armed.
    matches: u64,
    /// Instant faults: fired (or scheduled to).
    fired: bool,
}

/// Fault events on the simulation's queue.
#[derive(Debug)]
pub(crate) enum FaultEvent {
    /// Fault `i`'s `at` time came.
    Arm(usize),
    /// Fault `i` fires; `cn` fired its trigger, if a compute node did.
    Fire(usize, Option<u32>),
    /// A crashed memory node serves again.
    Restart(u16),
    /// The membership service.
    Ms(MsEvent),
    /// The crashed membership node serves again.
    MsRestart,
}

/// What an installed script changes while the run goes on.
#[derive(Debug)]
pub(crate) struct FaultState {
    timeout_ns: u64,
    faults: Vec<Armed>,
    rng: SmallRng,
    post_seq: u64,
    mn_down: Vec<bool>,
    cn_down: BTreeSet<u32>,
    /// The membership node is down.
    ms_down: bool,
    /// Per node: its link is down until then.
    link_down: BTreeMap<Node, u64>,
    /// Cut-off sides and until when.
    partitions: Vec<(Vec<Node>, u64)>,
    /// Per node: a scaled model until then.
    slow: BTreeMap<Node, (u32, u64, NicModel)>,
    /// CN↔CN message delays: (from, to, by ns, until), in firing order.
    msg_delays: Vec<(u32, u32, u64, u64)>,
    /// Node-wide delays: (node, by ns, until), in firing order.
    node_delays: Vec<(Node, u64, u64)>,
    /// Per memory node, when the script has a PM crash.
    persist: Option<Vec<Persist>>,
    log: Vec<FaultRecord>,
    /// Detached (background) posts that failed: nobody waits for them, so nobody
    /// retries them (FORD §4.8: a lost release is left to recovery).
    lost_background: u64,
}

/// The simulation's fault machinery (a field of the state; empty until used).
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub active: Option<Box<FaultState>>,
    /// Per node: the clock-fault corrections its clocks follow.
    clocks: BTreeMap<Node, Arc<ClockAdjust>>,
    /// Per node: the clock the membership service reads for it.
    node_clocks: BTreeMap<Node, NodeClock>,
    /// Per compute node: its durable area.
    durable: BTreeMap<u32, Arc<Mutex<Vec<u8>>>>,
    pub membership: Option<Box<Membership>>,
}

fn bit(mn: u16) -> u64 {
    1u64 << mn
}

impl FaultState {
    /// Why the path between compute node `cn` and memory node `mn` is cut now, if it is.
    fn blocked(&self, cn: u32, mn: u16, now: u64) -> Option<String> {
        if self.mn_down.get(mn as usize).copied().unwrap_or(false) {
            return Some("the memory node is down".into());
        }
        self.cut(Node::Cn(cn), Node::Mn(mn), now)
    }

    /// Why nodes `a` and `b` cannot talk now (links and partitions only), if they cannot.
    pub(crate) fn cut(&self, a: Node, b: Node, now: u64) -> Option<String> {
        for n in [a, b] {
            if self.link_down.get(&n).is_some_and(|&u| u > now) {
                return Some(format!("the link of {n} is down"));
            }
        }
        for (side, until) in &self.partitions {
            if *until > now && side.contains(&a) != side.contains(&b) {
                return Some(format!("{a} and {b} are partitioned"));
            }
        }
        None
    }

    /// True when `node` is down (crashed).
    pub(crate) fn node_down(&self, node: Node) -> bool {
        match node {
            Node::Cn(c) => self.cn_down.contains(&c),
            Node::Mn(m) => self.mn_down.get(m as usize).copied().unwrap_or(false),
            Node::Membership => self.ms_down,
        }
    }

    /// The slowdown factor of `node` now.
    pub(crate) fn slow_factor(&self, node: Node, now: u64) -> u64 {
        match self.slow.get(&node) {
            Some(&(f, until, _)) if until > now => f as u64,
            _ => 1,
        }
    }

    /// The scaled model of `node`'s NIC while a `slow-nic` fault on it lasts (`None`:
    /// the configured one). CN↔CN messages read it for each end (`msg`, "Slow NICs and delays").
    pub(crate) fn slow_model(&self, node: Node, now: u64) -> Option<&NicModel> {
        self.slow.get(&node).filter(|s| s.1 > now).map(|s| &s.2)
    }

    /// How much later a CN↔CN message sent now from compute node `from` to `to` is
    /// delivered: the largest `delay path=` on that path or `delay node=` on either end
    /// in effect (0: none).
    pub(crate) fn msg_delay_ns(&self, from: u32, to: u32, now: u64) -> u64 {
        let path = self
            .msg_delays
            .iter()
            .filter(|&&(f, t, _, until)| f == from && t == to && until > now)
            .map(|&(_, _, by, _)| by)
            .max()
            .unwrap_or(0);
        path.max(self.node_delay_ns(Node::Cn(from), now))
            .max(self.node_delay_ns(Node::Cn(to), now))
    }

    /// How much later what `node` sends or receives now arrives: the largest `delay
    /// node=` in effect on it (0: none).
    pub(crate) fn node_delay_ns(&self, node: Node, now: u64) -> u64 {
        self.node_delays
            .iter()
            .filter(|&&(n, _, until)| n == node && until > now)
            .map(|&(_, by, _)| by)
            .max()
            .unwrap_or(0)
    }

    fn model_for(&self, cn: u32, mn: u16, now: u64) -> Option<&NicModel> {
        let a = self.slow.get(&Node::Cn(cn)).filter(|s| s.1 > now);
        let b = self.slow.get(&Node::Mn(mn)).filter(|s| s.1 > now);
        match (a, b) {
            (Some(x), Some(y)) => Some(if x.0 >= y.0 { &x.2 } else { &y.2 }),
            (x, y) => x.or(y).map(|s| &s.2),
        }
    }

    fn record(&mut self, at_ns: u64, what: String) {
        self.log.push(FaultRecord { at_ns, what });
    }
}

/// `model` with every service, link, PCIe and atomic time multiplied by `k` (latency
/// too; `recv_service_ns` is read by CN↔CN messages only).
fn scaled(model: &NicModel, k: u64) -> NicModel {
    let mut m = model.clone();
    m.recv_service_ns *= k;
    m.link_ps_per_byte *= k;
    m.one_way_latency_ns *= k;
    m.read_service_ns *= k;
    m.write_service_ns *= k;
    m.atomic_service_ns *= k;
    m.flush_service_ns *= k;
    // PCIe is given as a link (generation, lanes, efficiency): a k-times slower one
    // has a k-th of the efficiency (rounded down, at least 1 %).
    m.pcie_efficiency_pct = (m.pcie_efficiency_pct as u64 / k).max(1) as u8;
    m.atomic_nic_gap_ns *= k;
    m.atomic_addr_ns *= k;
    m
}

/// Run op `i` of `p` on `region`, keeping `persist` up to date; `words` limits a WRITE to
/// its first words (a torn write).
#[allow(clippy::too_many_arguments)]
fn exec_op(
    region: &Region,
    persist: Option<&mut Persist>,
    conn: u32,
    p: &mut InFlight,
    i: usize,
    words: Option<usize>,
) -> Result<(), VerbError> {
    let op = p.post.ops()[i];
    let ptr = op.ptr();
    let parts = p.post.parts_mut();
    let Some(persist) = persist else {
        return match (op, words) {
            (Op::Write { src, .. }, Some(w)) => write_prefix(region, ptr.offset, &parts.write_data[src as usize..], w),
            _ => dmtx_verbs::apply::apply_op(region, i, &op, parts.write_data, parts.read_buf, parts.old),
        };
    };
    let old_len = match op {
        Op::Write { len, .. } => words.map_or(len as usize, |w| (w * 8).min(len as usize)),
        Op::Cas { .. } | Op::Faa { .. } => {
            persist.drain(conn);
            8
        }
        Op::Read { .. } | Op::Flush { .. } => 0,
    };
    let mut old = vec![0u8; old_len];
    let captured = old_len > 0 && region.read(ptr.offset, &mut old).is_ok();
    let r = match (op, words) {
        (Op::Write { src, .. }, Some(w)) => write_prefix(region, ptr.offset, &parts.write_data[src as usize..], w),
        _ => dmtx_verbs::apply::apply_op(region, i, &op, parts.write_data, parts.read_buf, parts.old),
    };
    if r.is_ok() {
        if captured {
            persist.record(conn, ptr.offset, old);
        } else if old_len == 0 {
            persist.drain(conn);
        }
    }
    r
}

fn write_prefix(region: &Region, offset: u64, data: &[u8], words: usize) -> Result<(), VerbError> {
    let n = (words * 8).min(data.len());
    // Only reached for a WRITE that is known to be in range (it is a prefix of one).
    let _ = region.write(offset, &data[..n]);
    Ok(())
}

impl Sim {
    /// Install a fault script. Call it before the run; a second call replaces the
    /// faults that have not fired (what fired stays in effect). Fails when the script
    /// names a memory node the simulation does not have.
    pub fn install_faults(&self, script: FaultScript) -> Result<(), FaultError> {
        let mn_count = self.regions().len();
        for (i, f) in script.faults.iter().enumerate() {
            let mut nodes = Vec::new();
            match &f.action {
                FaultAction::CrashMn { mn, .. } => nodes.push(Node::Mn(*mn)),
                FaultAction::LinkDown { node, .. }
                | FaultAction::SlowNic { node, .. }
                | FaultAction::ClockJump { node, .. }
                | FaultAction::ClockDrift { node, .. } => nodes.push(*node),
                FaultAction::Partition { side, .. } => nodes.extend(side.iter().copied()),
                _ => {}
            }
            if let Some(Node::Mn(m)) = nodes
                .iter()
                .find(|n| matches!(n, Node::Mn(m) if *m as usize >= mn_count))
            {
                return Err(FaultError::Invalid {
                    clause: format!("fault {} (`{}`)", i + 1, f.action.kind()),
                    message: format!(
                        "mn{m} does not exist; this simulation has {mn_count} memory nodes (mn0..mn{})",
                        mn_count.saturating_sub(1)
                    ),
                });
            }
        }
        let now = self.now();
        let mut guard = self.lock();
        let st = &mut *guard;
        let crashes_ms = script
            .faults
            .iter()
            .position(|f| matches!(f.action, FaultAction::CrashMs { .. }));
        if let Some(i) = crashes_ms.filter(|_| script.membership.is_none() && st.faults.membership.is_none()) {
            return Err(FaultError::Invalid {
                clause: format!("fault {} (`crash-ms`)", i + 1),
                message: "there is no membership node to crash; add e.g. `membership lease=1ms members=cn0,mn0`".into(),
            });
        }
        let old = st.faults.active.take();
        let mut fs = Box::new(FaultState {
            timeout_ns: script.timeout_ns,
            faults: Vec::new(),
            rng: SmallRng::seed_from_u64(self.config().seed ^ 0xfa17_5eed_0000_0001),
            post_seq: 0,
            mn_down: vec![false; mn_count],
            cn_down: BTreeSet::new(),
            ms_down: false,
            link_down: BTreeMap::new(),
            partitions: Vec::new(),
            slow: BTreeMap::new(),
            msg_delays: Vec::new(),
            node_delays: Vec::new(),
            persist: script
                .has_pm_crash()
                .then(|| (0..mn_count).map(|_| Persist::default()).collect()),
            log: Vec::new(),
            lost_background: 0,
        });
        if let Some(o) = old {
            // What already fired stays in effect.
            fs.post_seq = o.post_seq;
            fs.mn_down = o.mn_down;
            fs.cn_down = o.cn_down;
            fs.ms_down = o.ms_down;
            fs.link_down = o.link_down;
            fs.partitions = o.partitions;
            fs.slow = o.slow;
            fs.msg_delays = o.msg_delays;
            fs.node_delays = o.node_delays;
            fs.log = o.log;
            fs.lost_background = o.lost_background;
        }
        let mut due = Vec::new();
        for (i, fault) in script.faults.into_iter().enumerate() {
            let armed = fault.trigger.at_ns.is_none() && fault.trigger.point.is_none();
            match fault.trigger.at_ns {
                // Due already: armed before any post of this instant is submitted.
                Some(at) if at <= now => due.push(i),
                Some(at) => st.queue.push(at, Event::Fault(FaultEvent::Arm(i))),
                None => {}
            }
            fs.faults.push(Armed {
                fault,
                armed,
                passes: 0,
                matches: 0,
                fired: false,
            });
        }
        st.faults.active = Some(fs);
        for i in due {
            self.fault_event(st, FaultEvent::Arm(i));
        }
        drop(guard);
        if let Some(cfg) = script.membership {
            self.start_membership(cfg)?;
        }
        Ok(())
    }

    /// Control passed the named fault point on compute node `cn` (called by the worker
    /// threads' probes).
    pub fn fault_point(&self, cn: u32, name: &'static str) {
        let mut st = self.lock();
        let Some(fs) = st.faults.active.as_deref_mut() else {
            return;
        };
        let mut fire = Vec::new();
        for (i, a) in fs.faults.iter_mut().enumerate() {
            if a.armed || a.fault.trigger.point.as_deref() != Some(name) {
                continue;
            }
            a.passes += 1;
            if a.passes == a.fault.trigger.occurrence {
                a.armed = true;
                if a.fault.trigger.on.is_none() {
                    a.fired = true;
                    fire.push(i);
                }
            }
        }
        for i in fire {
            self.trigger(&mut st, i, Some(cn));
        }
    }

    /// True when a scripted link down or partition cuts compute nodes `a` and `b` apart
    /// now (CN↔CN messages are then dropped).
    pub(crate) fn path_cut(&self, a: u32, b: u32) -> bool {
        let now = self.now();
        self.lock()
            .faults
            .active
            .as_ref()
            .is_some_and(|f| f.cut(Node::Cn(a), Node::Cn(b), now).is_some())
    }

    /// True when compute node `cn` crashed: its tasks are never polled again.
    #[inline]
    pub fn cn_down(&self, cn: u32) -> bool {
        if self.cn_crashes() == 0 {
            return false;
        }
        self.lock()
            .faults
            .active
            .as_ref()
            .is_some_and(|f| f.cn_down.contains(&cn))
    }

    /// Compute-node crashes so far, without the lock: the executor drops a crashed
    /// node's tasks when this changes.
    #[inline]
    pub(crate) fn cn_crashes(&self) -> u64 {
        self.shared.flags.cn_crashes.load(Ordering::Relaxed)
    }

    /// True when memory node `mn` is down (crashed and not restarted).
    pub fn mn_down(&self, mn: MnId) -> bool {
        self.lock()
            .faults
            .active
            .as_ref()
            .is_some_and(|f| f.node_down(Node::Mn(mn.0)))
    }

    /// Memory-node restarts so far (what every sim transport reports as `restarts()`).
    pub fn mn_restarts(&self) -> u64 {
        self.shared.flags.restarts.load(Ordering::Relaxed)
    }

    /// Background (detached) posts that failed because of a fault so far.
    pub fn lost_background_posts(&self) -> u64 {
        self.lock().faults.active.as_ref().map_or(0, |f| f.lost_background)
    }

    /// Every fault fired so far, in order.
    pub fn fault_log(&self) -> Vec<FaultRecord> {
        self.lock()
            .faults
            .active
            .as_ref()
            .map(|f| f.log.clone())
            .unwrap_or_default()
    }

    /// A clock for `node` with `offset_ns` and `drift_ppm` that also follows the fault
    /// script's clock faults for that node; the membership service reads the node's time
    /// from the last clock made here for it.
    pub fn node_clock(&self, node: Node, offset_ns: i64, drift_ppm: i64) -> Result<NodeClock, SimError> {
        let c = NodeClock::new(self.time(), offset_ns, drift_ppm)?;
        let mut st = self.lock();
        let adjust = Arc::clone(st.faults.clocks.entry(node).or_default());
        let c = c.with_adjust(adjust);
        st.faults.node_clocks.insert(node, c.clone());
        Ok(c)
    }

    /// The clock the simulation reads for `node` (exact, plus its clock faults, unless
    /// [`Sim::node_clock`] registered another).
    pub(crate) fn clock_of(&self, st: &mut State, node: Node) -> NodeClock {
        if let Some(c) = st.faults.node_clocks.get(&node) {
            return c.clone();
        }
        let adjust = Arc::clone(st.faults.clocks.entry(node).or_default());
        let c = NodeClock::exact(self.time()).with_adjust(adjust);
        st.faults.node_clocks.insert(node, c.clone());
        c
    }

    /// Compute node `cn`'s durable area: bytes that survive its crash (Motor §5.3's
    /// battery-backed logs).
    pub fn cn_durable(&self, cn: u32) -> CnDurable {
        let bytes = Arc::clone(self.lock().faults.durable.entry(cn).or_default());
        CnDurable {
            sim: self.clone(),
            cn,
            bytes,
        }
    }

    /// A post was submitted while a script is installed: count its ops against the
    /// triggers, fire what they trigger, and set up its bookkeeping. Returns false when
    /// the compute node is down: the post must not be scheduled (it never completes).
    pub(crate) fn fault_admit(&self, st: &mut State, slot: usize, cn: u32, conn: u32, now: u64) -> bool {
        let fs = st.faults.active.as_deref_mut().expect("called with a script installed");
        if fs.cn_down.contains(&cn) {
            return false;
        }
        fs.post_seq += 1;
        let p = &mut st.posts[slot];
        p.fx.hold_until = 0;
        p.fx.cn = cn;
        p.fx.conn = conn;
        p.fx.seq = fs.post_seq;
        p.fx.batches.clear();
        p.fx.cut = 0;
        p.fx.applied = 0;
        p.fx.lose.clear();
        p.fx.delay_ns = 0;
        let mut fire = Vec::new();
        let mut delay = 0u64;
        for (i, op) in p.post.ops().iter().enumerate() {
            for (k, a) in fs.faults.iter_mut().enumerate() {
                let t = &a.fault.trigger;
                let Some(on) = &t.on else { continue };
                if !a.armed || a.fired || !on.matches(cn, op) {
                    continue;
                }
                a.matches += 1;
                if a.matches < t.nth {
                    continue;
                }
                if a.matches + 1 >= t.nth + t.count {
                    a.fired = true;
                }
                match a.fault.action {
                    FaultAction::LoseResponse => {
                        p.fx.lose.push(i as u32);
                        fs.log.push(FaultRecord {
                            at_ns: now,
                            what: format!("lose-response: cn{cn} op {i} ({:?} at {})", op.kind(), op.ptr()),
                        });
                    }
                    FaultAction::Delay { by_ns } => delay = delay.max(by_ns),
                    _ => fire.push(k),
                }
            }
        }
        if !p.fx.lose.is_empty() {
            p.fx.hold_until = now + fs.timeout_ns;
        }
        // A delayed compute node's replies land late, whatever they answer.
        p.fx.delay_ns = delay.max(fs.node_delay_ns(Node::Cn(cn), now));
        for k in fire {
            self.trigger(st, k, Some(cn));
        }
        !st.faults.active.as_ref().expect("installed").cn_down.contains(&cn)
    }

    /// One batch of an admitted post is about to be timed: when its path is cut, fail it
    /// after the timeout and return `None` (skip it); else the model to time it with
    /// (`None` inner: the configured one).
    pub(crate) fn fault_gate(
        &self,
        st: &mut State,
        slot: usize,
        cn: u32,
        mn: MnId,
        now: u64,
    ) -> Option<Option<NicModel>> {
        let fs = st.faults.active.as_deref_mut().expect("called with a script installed");
        match fs.blocked(cn, mn.0, now) {
            None => Some(fs.model_for(cn, mn.0, now).cloned()),
            Some(why) => {
                let until = now + fs.timeout_ns;
                let p = &mut st.posts[slot];
                if p.detached && p.err.is_none() {
                    fs.lost_background += 1;
                }
                let first = p
                    .post
                    .ops()
                    .iter()
                    .position(|o| o.ptr().mn == mn)
                    .expect("the batch has ops");
                p.fail(first, VerbError::Unreachable { mn, why });
                p.fx.cut |= bit(mn.0);
                p.fx.batches.push((mn.0, until));
                p.fx.hold_until = p.fx.hold_until.max(until);
                st.queue.push(until, Event::Complete { slot });
                None
            }
        }
    }

    /// A batch of a post submitted at `now` was timed: remember when its reply lands,
    /// and apply a scripted delay (as [`Sim::fault_admit`] and [`Sim::fault_gate`], at
    /// the post's `now`).
    pub(crate) fn fault_batch(&self, st: &mut State, slot: usize, mn: MnId, tm: &BatchTiming, now: u64) {
        let fs = st.faults.active.as_deref().expect("called with a script installed");
        // So do the replies of a delayed memory node.
        let delay = fs.node_delay_ns(Node::Mn(mn.0), now);
        let p = &mut st.posts[slot];
        let delay = p.fx.delay_ns.max(delay);
        if delay > 0 {
            p.fx.hold_until = p.fx.hold_until.max(tm.done + delay);
        }
        p.fx.batches.push((mn.0, tm.done));
    }

    /// The batch of `slot` for `mn` reaches its node with a script installed.
    pub(crate) fn apply_faulty(&self, st: &mut State, slot: usize, mn: MnId) {
        let region = &self.shared.regions[mn.index()];
        if st.posts[slot].fx.cut & bit(mn.0) == 0 {
            // READs and WRITEs in service together tear here as on the fast path.
            crate::tear::before_apply(st, region, slot, mn, self.now());
        }
        let State {
            posts, stats, faults, ..
        } = st;
        let fs = faults.active.as_deref_mut().expect("called with a script installed");
        let p = &mut posts[slot];
        stats.batches += 1;
        if p.fx.cut & bit(mn.0) != 0 {
            return;
        }
        p.fx.applied |= bit(mn.0);
        let conn = p.fx.conn;
        for i in 0..p.post.ops().len() {
            if p.post.ops()[i].ptr().mn != mn {
                continue;
            }
            stats.ops += 1;
            let persist = fs.persist.as_mut().map(|v| &mut v[mn.index()]);
            if let Err(e) = exec_op(region, persist, conn, p, i, None) {
                p.fail(i, e);
                break;
            }
            if p.fx.lose.contains(&(i as u32)) {
                p.fail(
                    i,
                    VerbError::Unreachable {
                        mn,
                        why: "the reply was lost (the op applied); the transport timed out".into(),
                    },
                );
            }
        }
    }

    /// A fault event is due.
    pub(crate) fn fault_event(&self, st: &mut State, ev: FaultEvent) {
        match ev {
            FaultEvent::Arm(i) => {
                let Some(fs) = st.faults.active.as_deref_mut() else {
                    return;
                };
                let Some(a) = fs.faults.get_mut(i) else { return };
                a.armed = true;
                if a.fault.trigger.on.is_none() && !a.fired {
                    a.fired = true;
                    self.trigger(st, i, None);
                }
            }
            FaultEvent::Fire(i, cn) => self.fire(st, i, cn),
            FaultEvent::Restart(mn) => {
                let now = self.now();
                let Some(fs) = st.faults.active.as_deref_mut() else {
                    return;
                };
                fs.mn_down[mn as usize] = false;
                if let Some(p) = fs.persist.as_mut() {
                    p[mn as usize].reset();
                }
                self.shared.flags.restarts.fetch_add(1, Ordering::Relaxed);
                fs.record(now, format!("restart mn{mn}"));
                self.membership_join(st, Node::Mn(mn));
            }
            FaultEvent::Ms(e) => self.membership_event(st, e),
            FaultEvent::MsRestart => {
                let now = self.now();
                let Some(fs) = st.faults.active.as_deref_mut() else {
                    return;
                };
                fs.ms_down = false;
                fs.record(now, "restart ms (view kept, every member's lease renewed)".into());
                self.membership_restart(st);
            }
        }
    }

    /// Fault `i`'s trigger fired: fire it now or `after` from now.
    fn trigger(&self, st: &mut State, i: usize, cn: Option<u32>) {
        let after = st.faults.active.as_ref().expect("installed").faults[i]
            .fault
            .trigger
            .after_ns;
        if after == 0 {
            self.fire(st, i, cn);
        } else {
            st.queue.push(self.now() + after, Event::Fault(FaultEvent::Fire(i, cn)));
        }
    }

    /// Fail every in-flight batch whose path `cut(cn, mn)` says is cut at `now`: a batch
    /// not yet applied never will be; one applied loses its reply. Both fail after the
    /// timeout.
    fn fail_in_flight(&self, st: &mut State, now: u64, why: &str, cut: impl Fn(u32, u16) -> bool) {
        let fs = st.faults.active.as_deref_mut().expect("installed");
        let until = now + fs.timeout_ns;
        for p in st.posts.iter_mut() {
            if p.pending == 0 || p.pending == usize::MAX {
                continue;
            }
            for b in 0..p.fx.batches.len() {
                let (mn, done) = p.fx.batches[b];
                if done <= now || p.fx.cut & bit(mn) != 0 || !cut(p.fx.cn, mn) {
                    continue;
                }
                if p.fx.applied & bit(mn) == 0 {
                    p.fx.cut |= bit(mn);
                }
                if p.detached && p.err.is_none() {
                    fs.lost_background += 1;
                }
                let first = p
                    .post
                    .ops()
                    .iter()
                    .position(|o| o.ptr().mn.0 == mn)
                    .expect("the batch has ops");
                p.fail(
                    first,
                    VerbError::Unreachable {
                        mn: MnId(mn),
                        why: why.to_string(),
                    },
                );
                p.fx.hold_until = p.fx.hold_until.max(until);
            }
        }
    }

    /// Fault `i` takes effect now.
    fn fire(&self, st: &mut State, i: usize, cn_ctx: Option<u32>) {
        let now = self.now();
        let action = st.faults.active.as_ref().expect("installed").faults[i]
            .fault
            .action
            .clone();
        match action {
            FaultAction::CrashMn { mn, mode, restart_ns } => {
                let fs = st.faults.active.as_deref_mut().expect("installed");
                if fs.mn_down[mn as usize] {
                    return;
                }
                fs.mn_down[mn as usize] = true;
                let region = &self.shared.regions[mn as usize];
                let what = match mode {
                    CrashMode::Dram => {
                        zero(region);
                        if let Some(p) = fs.persist.as_mut() {
                            p[mn as usize].reset();
                        }
                        format!("crash mn{mn} (dram: region zeroed)")
                    }
                    CrashMode::Pm => {
                        let p = &mut fs.persist.as_mut().expect("a PM crash records persistence")[mn as usize];
                        let PmLoss { volatile, lost } = p.crash(region, &mut fs.rng);
                        format!("crash mn{mn} (pm: {lost} of {volatile} unflushed cacheline writes lost)")
                    }
                };
                fs.record(now, what);
                if let Some(d) = restart_ns {
                    st.queue.push(now + d, Event::Fault(FaultEvent::Restart(mn)));
                }
                self.fail_in_flight(st, now, "the memory node crashed", |_, m| m == mn);
            }
            FaultAction::CrashMs { restart_ns } => {
                let fs = st.faults.active.as_deref_mut().expect("installed");
                if fs.ms_down {
                    return;
                }
                fs.ms_down = true;
                fs.record(
                    now,
                    "crash ms (no lease is granted or expires until it restarts)".into(),
                );
                if let Some(d) = restart_ns {
                    st.queue.push(now + d, Event::Fault(FaultEvent::MsRestart));
                }
            }
            FaultAction::CrashCn { cn } => {
                let cn = cn
                    .or(cn_ctx)
                    .expect("validated: a crash-cn without cn has a node trigger");
                self.crash_cn(st, cn);
            }
            FaultAction::LinkDown { node, for_ns } => {
                let fs = st.faults.active.as_deref_mut().expect("installed");
                let until = now + for_ns;
                let e = fs.link_down.entry(node).or_insert(0);
                *e = (*e).max(until);
                fs.record(now, format!("link of {node} down until {until} ns"));
                self.fail_in_flight(st, now, &format!("the link of {node} went down"), |c, m| {
                    node == Node::Cn(c) || node == Node::Mn(m)
                });
            }
            FaultAction::Partition { side, for_ns } => {
                let fs = st.faults.active.as_deref_mut().expect("installed");
                let until = for_ns.map_or(u64::MAX, |d| now + d);
                let names: Vec<String> = side.iter().map(|n| n.to_string()).collect();
                fs.record(
                    now,
                    format!("partition {{{}}} from the rest until {until} ns", names.join(",")),
                );
                fs.partitions.push((side.clone(), until));
                self.fail_in_flight(st, now, "partitioned", |c, m| {
                    side.contains(&Node::Cn(c)) != side.contains(&Node::Mn(m))
                });
            }
            FaultAction::SlowNic { node, factor, for_ns } => {
                let model = scaled(&self.config().nic, factor as u64);
                let fs = st.faults.active.as_deref_mut().expect("installed");
                let until = for_ns.map_or(u64::MAX, |d| now + d);
                fs.slow.insert(node, (factor, until, model));
                fs.record(now, format!("{node} NIC {factor}x slower until {until} ns"));
            }
            FaultAction::ClockJump { node, by_ns } => {
                let adjust = Arc::clone(st.faults.clocks.entry(node).or_default());
                adjust.jump(by_ns);
                let fs = st.faults.active.as_deref_mut().expect("installed");
                fs.record(now, format!("clock of {node} jumps {by_ns} ns"));
            }
            FaultAction::ClockDrift { node, ppm } => {
                let adjust = Arc::clone(st.faults.clocks.entry(node).or_default());
                adjust.set_drift(now, ppm);
                let fs = st.faults.active.as_deref_mut().expect("installed");
                fs.record(now, format!("clock of {node} drifts {ppm} ppm"));
            }
            FaultAction::DelayMessages {
                from,
                to,
                by_ns,
                for_ns,
            } => {
                let fs = st.faults.active.as_deref_mut().expect("installed");
                let until = for_ns.map_or(u64::MAX, |d| now + d);
                fs.msg_delays.push((from, to, by_ns, until));
                fs.record(
                    now,
                    format!("messages cn{from}->cn{to} delayed {by_ns} ns until {until} ns"),
                );
            }
            FaultAction::DelayNode { node, by_ns, for_ns } => {
                let fs = st.faults.active.as_deref_mut().expect("installed");
                let until = for_ns.map_or(u64::MAX, |d| now + d);
                fs.node_delays.push((node, by_ns, until));
                fs.record(
                    now,
                    format!("everything {node} sends or receives delayed {by_ns} ns until {until} ns"),
                );
            }
            FaultAction::LoseResponse | FaultAction::Delay { .. } => {
                unreachable!("per-op faults strike at submit")
            }
        }
    }

    /// Compute node `cn` stops. On each of its connections to each memory node, the ops
    /// in flight and not yet applied, in post order, apply up to a seed-chosen prefix; the
    /// op after the prefix, if a WRITE of several words, applies a seed-chosen prefix of
    /// its words (a torn write). Everything else of the node never applies.
    fn crash_cn(&self, st: &mut State, cn: u32) {
        let now = self.now();
        let State { posts, faults, .. } = st;
        let fs = faults.active.as_deref_mut().expect("installed");
        if !fs.cn_down.insert(cn) {
            return;
        }
        self.shared.flags.cn_crashes.fetch_add(1, Ordering::Relaxed);
        // (conn, mn) -> [(post seq, slot)], in post order.
        let mut conns: BTreeMap<(u32, u16), Vec<(u64, usize)>> = BTreeMap::new();
        for (slot, p) in posts.iter().enumerate() {
            if p.pending == 0 || p.pending == usize::MAX || p.fx.cn != cn {
                continue;
            }
            for &(mn, _) in &p.fx.batches {
                if (p.fx.applied | p.fx.cut) & bit(mn) == 0 {
                    conns.entry((p.fx.conn, mn)).or_default().push((p.fx.seq, slot));
                }
            }
        }
        let (mut applied, mut total, mut torn) = (0usize, 0usize, 0usize);
        for ((conn, mn), mut list) in conns {
            list.sort_unstable();
            let ops: Vec<(usize, usize)> = list
                .iter()
                .flat_map(|&(_, slot)| {
                    let p = &posts[slot];
                    (0..p.post.ops().len())
                        .filter(move |&i| p.post.ops()[i].ptr().mn.0 == mn)
                        .map(move |i| (slot, i))
                })
                .collect();
            let keep = fs.rng.random_range(0..=ops.len());
            let region = &self.shared.regions[mn as usize];
            total += ops.len();
            for (n, &(slot, i)) in ops.iter().enumerate().take(keep + 1) {
                let p = &mut posts[slot];
                let words = if n < keep {
                    None
                } else {
                    match p.post.ops()[i] {
                        Op::Write { len, .. } if len > 8 => Some(fs.rng.random_range(0..(len as usize).div_ceil(8))),
                        _ => break,
                    }
                };
                let persist = fs.persist.as_mut().map(|v| &mut v[mn as usize]);
                if exec_op(region, persist, conn, p, i, words).is_err() {
                    break;
                }
                if words.is_some() {
                    torn += 1;
                } else {
                    applied += 1;
                }
            }
            for &(_, slot) in &list {
                posts[slot].fx.cut |= bit(mn);
            }
        }
        // The node's posts in flight never complete: nobody is left to see them.
        for p in posts
            .iter_mut()
            .filter(|p| p.pending != 0 && p.pending != usize::MAX && p.fx.cn == cn)
        {
            p.fx.hold_until = u64::MAX;
        }
        fs.record(
            now,
            format!("crash cn{cn}: {applied} of {total} in-flight ops applied, {torn} torn"),
        );
    }
}

/// Zero a region (a DRAM node lost its contents).
fn zero(region: &Region) {
    const CHUNK: usize = 1 << 16;
    let zeros = vec![0u8; CHUNK];
    let mut at = 0u64;
    while at < region.bytes() {
        let n = (region.bytes() - at).min(CHUNK as u64) as usize;
        region.write(at, &zeros[..n]).expect("in range");
        at += n as u64;
    }
}

/// A compute node's durable area ([`Sim::cn_durable`]): it survives the node's crash,
/// and a crashed node can no longer change it.
#[derive(Clone, Debug)]
pub struct CnDurable {
    sim: Sim,
    cn: u32,
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl CnDurable {
    /// Write `data` at `offset`, growing the area as needed. Returns false (and writes
    /// nothing) when the node is down.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        if self.sim.cn_down(self.cn) {
            return false;
        }
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() < offset + data.len() {
            b.resize(offset + data.len(), 0);
        }
        b[offset..offset + data.len()].copy_from_slice(data);
        true
    }

    /// The bytes (what recovery reads after a crash).
    pub fn read(&self) -> Vec<u8> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the one-line and TOML forms give the same script, and both report the
    /// field and the fix for bad input.
    #[test]
    fn line_and_toml_agree_and_errors_name_the_field() {
        let line = "timeout=200us; crash-mn mn=1 mode=pm restart=5ms at=2ms; \
                    lose-response on=kind:cas,mn:0,addr:0x40..0x80 nth=3 count=2";
        let a: FaultScript = line.parse().unwrap();
        let b = FaultScript::from_toml(
            r#"
            timeout = "200us"
            [[fault]]
            kind = "crash-mn"
            mn = 1
            mode = "pm"
            restart = "5ms"
            at = "2ms"
            [[fault]]
            kind = "lose-response"
            on = "kind:cas,mn:0,addr:0x40..0x80"
            nth = 3
            count = 2
            "#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.timeout_ns, 200_000);
        assert_eq!(
            a.faults[0].action,
            FaultAction::CrashMn {
                mn: 1,
                mode: CrashMode::Pm,
                restart_ns: Some(5_000_000)
            }
        );
        assert_eq!(a.faults[1].trigger.on.as_ref().unwrap().addr, Some((0x40, 0x80)));
        let err = |s: &str| s.parse::<FaultScript>().unwrap_err().to_string();
        assert!(err("crash-mn mn=1 mode=flash at=1ms")
            .contains("field `mode`: `flash` is not a crash mode; use dram or pm"));
        assert!(err("crash-mn mn=1 at=1ms").contains("field `mode` is missing; add mode=dram"));
        assert!(err("crash-mn mn=1 mode=pm atx=1ms").contains("did you mean `at`?"));
        assert!(err("crash-nm mn=1").contains("did you mean `crash-mn`?"));
        assert!(err("lose-response at=1ms").contains("add on=PRED"));
        assert!(err("crash-mn mn=1 mode=dram").contains("no trigger"));
        assert!(err("delay by=1ms on=kind:cass").contains("field `on`: `cass` is not an op kind"));
        assert!(err("link-down node=xn1 for=1ms at=0").contains("`xn1` is not a node"));
        assert!(err("crash-cn at=1ms").contains("field `cn` is missing"));
        assert!(FaultScript::from_toml("[[fault]]\nmn = 1")
            .unwrap_err()
            .to_string()
            .contains("`kind` is missing"));
        assert!(FaultScript::from_toml("faults = 1")
            .unwrap_err()
            .to_string()
            .contains("did you mean `fault`?"));
    }
}
