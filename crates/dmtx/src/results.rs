//! The record of one run: a JSON document (schema version 2) and a human summary.
//!
//! # JSON schema, version 2
//!
//! Version 2 moved `load_s` into `run_info` (with everything else a simulated run cannot
//! repeat bit for bit) and added `sim`. Fields added since (`protocol_metrics`,
//! `addr_cache`, `memory`, `msg_rtts_per_commit`, `msg_rtts`) are absent from older
//! records and read as empty, `null` or 0.
//!
//! One object per run. Times are seconds (`_s`) or microseconds (`_us`); rates are per
//! second of the measured run (from the start barrier to the last thread's stop);
//! `*_per_commit` values divide sums over committed attempts by the committed count and
//! are `null` when nothing committed.
//!
//! | key | type | meaning |
//! | --- | --- | --- |
//! | `schema_version` | int | `1`; bumped on any incompatible change |
//! | `protocol`, `workload` | string | names as given to `--protocol`, `--workload` |
//! | `transport` | string | `mem` (in-process memory nodes), `tcp` (`--cluster`) or `sim` (the simulator: every time is virtual) |
//! | `config` | object | `threads`, `coroutines`, `duration_s` *or* `txns`, `seed`, `memory_nodes`, `replicas`, `mn_bytes`, `warmup_s` (run before measuring, not counted), `knobs` (every knob of the protocol and workload with its effective value, defaults included, as strings), `preset` (when `--preset` was given) |
//! | `stop_reason` | string | `duration`, `txns`, `interrupt` (Ctrl-C: results so far), `tables_full` (a growing table ran out of room) or `memory` (the host's memory ran low); the last two exit 2 |
//! | `stop_detail` | string, absent unless a limit stopped the run | which tables were full and the knob for each, or how much memory was left |
//! | `elapsed_s` | float | the measured window: from the end of `--warmup` to the deadline (`--duration`), or to when the last coordinator stopped if that came sooner (`--txns`, an interrupt); the transactions in hand at the deadline finish after it and are not counted |
//! | `committed`, `aborted`, `attempted` | int | transaction attempts by outcome (`attempted = committed + aborted + rolled_back`) |
//! | `successful` | int | committed attempts the workload's spec counts as successful (TATP: not "not found" or "duplicate"); equals `committed` for most workloads |
//! | `rolled_back` | int | attempts the workload rolled back on purpose (TPC-C NewOrder's 1%): neither commits nor aborts |
//! | `committed_tps`, `attempted_tps` | float | per second of `elapsed_s` |
//! | `abort_rate` | float | `aborted / attempted`, 0 to 1 |
//! | `abort_reasons` | object | every abort reason → count, zeros included: the shared ones (`lock_conflict`, `validation`, `invisible`, `torn`, `not_found`, `duplicate`, `user`, `fault`, `table_full`, `log_full`) and those the protocol declares (`Protocol::ABORT_REASONS`, each with its own name); `other` only if a protocol aborted with an index it did not declare |
//! | `latency_us` | object or null | committed transactions, from the first attempt's start to the commit (below), HDR histogram (3 significant figures): `p50`, `p90`, `p99`, `p999`, `max`, `mean` |
//! | `total` | txn-type object | all types together (below) |
//! | `per_txn_type` | object | type name → txn-type object |
//! | `per_mn` | array | per memory node: `mn`, `ops` {`read`,`write`,`cas`,`faa`,`flush`}, `bytes_in` (received by the node), `bytes_out` (returned by it); every attempt and background post |
//! | `invariant` | object | `ok` (bool), `detail` (what was checked, or what broke) |
//! | `isolation` | string | the level the protocol claims for the run: `serializable`, `strict serializable`, `snapshot isolation`, or `unchecked` (an unsafe upper bound: no check applies) |
//! | `check` | object or null | with `--check` (and a checked level): `level` checked, `txns`, `committed`, `clean` (bool), `summary` (one line), `findings` (each anomaly with its smallest cycle) |
//! | `last_fault` | string or null | the last verb error a coordinator saw, if any |
//! | `sim` | object or null | `--transport sim` only: `note` (the numbers are simulated), `profile` (its name), `profile_source` (`built-in cx5` or the file), `profile_fingerprint` (a hash of every parameter), `profile_params` (every parameter), `cpu_mode`, `compute_nodes`, `verbs` (completed), `events`, `nics` (per node `node` (`mn0`, `cn0`, ...), `ops` {…}, `tx_bytes`, `rx_bytes` (wire bytes, headers included), `link_utilisation` (busier direction's share of the run)), `waits_us` (per op kind: `ops`, `admission_mean` (waiting for the connection's outstanding-READ bound), `responder_mean` (queued at the responder NIC), `latency_mean` (doorbell to reply)), `cpus` (per worker thread `cn`, `thread`, `utilisation` of its virtual CPU), `timeseries_ms` (commits per 1 ms of virtual time), `faults` (each fault fired by `--faults`, with its virtual time), `tears` (`overlaps`: READ/WRITE pairs in service together on common words; `torn`: READs that saw old and new words), `stranded` (coordinators still in a transaction a grace after an interrupt or 1 s of virtual time after the deadline, dropped there: their locks and writes stay), `unpriced_steps` (absent when empty: CPU step names charged at the profile's `step_default_ns` because neither its `[cpu.steps]` nor the protocol's `CPU_STEPS` prices them) |
//! | `timeseries` | object or null | commits per bucket of time over the measured window, on every transport: `bucket_s` (1.0 on `mem`/`tcp`, 0.001 on `sim`), `clock` (`real` or `virtual`), `committed` (commits that ended in each bucket, from the end of the warm-up; `ceil(elapsed_s / bucket_s)` buckets, a commit ending at the deadline counted in the last, so they sum to `committed`) |
//! | `metrics` | object, absent when empty | the workload's headline figures beyond txn/s, name → {`value`, `about`}: TPC-C's `tpmc` (NewOrders, rolled back ones included, per minute of `elapsed_s`) and `warehouses` |
//! | `protocol_metrics` | object, absent when the protocol declares none | the protocol's own figures (`Protocol::METRICS`), name → {`kind` (`counter`: events, read `sum` and `per_commit`; `value`: observations, read `count`, `mean`, `max`; `duration`: times in ns, read also `p50`, `p99` and `share` (the sum over coordinators × the measured time), with `hist_ns` as `[ns, count]` pairs for `dmtx report` to merge), `count` (values added), `sum`, `mean` (`sum / count`), `max`, `per_commit` (`sum / committed`, null when nothing committed), `about`}; summed over every coordinator from the end of the warm-up. FORD: `rereads` (re-reads of a record a lock-free read found torn or invisible) |
//! | `addr_cache` | object | the address cache over the measured window (counting restarts when a thread's first coordinator leaves the warm-up), every worker thread summed: `hits` (lookups answered), `hits_shared` (of those, by the compute node's level: another thread had learned the address), `misses` (the protocol walked the bucket chain), `hit_rate` (`hits / (hits + misses)`), `evictions` (cached addresses found stale and dropped), `entries` (addresses cached at the end, summed over compute nodes), `bytes` (what they hold, 24 per entry: FORD §6.2.5's cache size) |
//! | `memory` | object | the memory plan the run was sized by (Motor §7.5's footprint): `tables` (per table `name`, `capacity` (records it has room for), `nodes` (memory nodes of its replicas, primary first), `slot_bytes` (as the protocol's format sizes it), per replica `reserved_bytes` (region bytes), `loaded_bytes` (resident once loaded), `full_bytes` (resident if the run fills its room), `value_region_bytes` and `value_region_loaded_bytes` (its value region, part of the above; 0 when values live in the slots), `loaded_bytes_total` over its replicas, and `written_bytes` (what the load wrote per replica, measured; absent when this process did not load)), `per_mn` (per memory node `mn`, `tables_bytes`, `loaded_bytes`, `full_bytes` (its table replicas), `value_region_bytes` (their value regions), `coordinators_bytes` (coordinator areas: logs), `footprint_bytes` (resident once loaded: its table replicas and coordinator areas), `need_bytes` (the region size it needs at least)) |
//! | `cn` | object, absent unless `--cn` | this compute node of a multi-process run: `id`, `compute_nodes` (in the run), `run_id` (shared by the run's CNs), `latency_ns` (the committed-latency histogram as `[ns, count]` pairs, for `dmtx report` to merge); with more than one CN, `invariant` says it was not checked and `check` is null (check the CNs' histories together with `dmtx check`) |
//! | `run_info` | object | what no two runs repeat: `host`, `started_at` (RFC 3339, UTC), `started_at_unix_s`, `dmtx_version`, `cpus`, `load_s` (building and loading the tables, real time), `load_records` (records loaded, one copy each), `load_records_per_s`, `real_s` (the measured run's real time), `real_s_per_sim_s` (`sim` only: real seconds per simulated second, over all the virtual time the run simulated, warm-up and drain included) |
//!
//! A txn-type object:
//!
//! | key | meaning |
//! | --- | --- |
//! | `committed`, `aborted`, `abort_rate`, `successful`, `rolled_back` | as above, for this type |
//! | `abort_reasons` | reason → count, non-zero reasons only |
//! | `rtt_per_commit` | round trips (posts waited for) of committed attempts / committed |
//! | `msg_rtts_per_commit` | CN↔CN message round trips (`CoordCtx::call`, `call_many`) of committed attempts / committed; never in `rtt_per_commit`; 0 for protocols without messaging |
//! | `ops_per_commit` | {`read`,`write`,`cas`,`faa`,`flush`}: verbs of committed attempts / committed |
//! | `bytes_per_commit` | {`out` (to memory nodes), `in` (from them)} / committed |
//! | `background_posts_per_commit` | posts never waited for (background release) / committed |
//! | `ts_per_commit`, `ts_rtts_per_commit` | timestamps committed attempts asked of the timestamp service / committed, and of those the ones waited a round trip for (an RPC to the oracle's host, a FAA); never in `rtt_per_commit` or `ops_per_commit` (DESIGN §4) |
//! | `wasted_rtts_per_commit` | round trips of *aborted* attempts / committed |
//! | `cleanup_rtts_per_commit` | round trips of the protocol's per-attempt cleanup (releases, restores, log truncation awaited after an attempt, committed or aborted, before the next) / committed; never in `rtt_per_commit` or `wasted_rtts_per_commit`; 0 for protocols without one (FORD) |
//! | `attempts_per_commit` | attempts of the committed transactions (the commit and the aborted attempts retried before it) / committed; 1 when nothing was retried |
//! | `latency_us` | as above, for this type, or null |
//! | `committed_counters`, `aborted_counters` | raw sums: `rtts`, `background_posts`, `ops` {…}, `bytes_out`, `bytes_in`, `ts_requests`, `ts_rtts`, `msg_rtts` (for re-aggregating runs) |
//! | `cleanup_counters` | the same raw sums over the per-attempt cleanups of every attempt (absent from older records: zeros) |
//!
//! An attempt aborted by a conflict is retried with the same inputs as `--set
//! retry_aborts` says (default `unbounded`: until it commits, as TPC-C, BenchBase and
//! OLTPBench do; `0` draws a new transaction instead, as FORD's and Motor's code do).
//! Every attempt counts in `attempted`, `aborted` and the abort reasons; a committed
//! transaction counts once in `committed`, and its latency runs from before its first
//! attempt (the workload drawing it) to its commit, retries included: what a client
//! waits for, and what retried benchmarks report. The workload's own aborts (`user`:
//! SmallBank's insufficient funds; `rolled_back`), `fault` and `table_full` are not
//! retried.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dmtx_runtime::{AbortReason, AbortReasonSpec, CacheStats, MetricKind, MetricSpec, MetricSum};
use dmtx_verbs::{MnCounters, OpKind, PostCounters};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::config::{BenchConfig, OutTarget, StopRule};
use crate::error::RunError;
use crate::stats::{slot_name, RunStats, TypeStats, REASON_SLOTS};

/// The schema version written by this build.
pub const SCHEMA_VERSION: u32 = 2;

/// Why the measured run ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `--duration` elapsed.
    Duration,
    /// `--txns` transactions committed.
    Txns,
    /// Stopped early (Ctrl-C); the results cover the time run.
    Interrupt,
    /// A worker failed (never written: the run reports an error instead).
    Error,
    /// A growing table ran out of room: the run stopped there (`stop_detail` names every
    /// full table and its knob; the command exits 2).
    TablesFull,
    /// The host's available memory fell below what the rest of the run needs: the run
    /// stopped there (`stop_detail` says how much was left; the command exits 2).
    Memory,
}

/// The JSON record of one run (see the module doc for the schema).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Protocol name.
    pub protocol: String,
    /// Workload name.
    pub workload: String,
    /// Transport name.
    pub transport: String,
    /// The run's settings.
    pub config: ConfigRecord,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// What stopped it early, when a limit did (`tables_full`, `memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_detail: Option<String>,
    /// Measured seconds.
    pub elapsed_s: f64,
    /// Committed attempts.
    pub committed: u64,
    /// Aborted attempts.
    pub aborted: u64,
    /// All attempts.
    pub attempted: u64,
    /// Committed attempts the workload counts as successful.
    #[serde(default)]
    pub successful: u64,
    /// Attempts the workload rolled back on purpose.
    #[serde(default)]
    pub rolled_back: u64,
    /// Commits per second.
    pub committed_tps: f64,
    /// Attempts per second.
    pub attempted_tps: f64,
    /// Aborted / attempted.
    pub abort_rate: f64,
    /// Every reason with its count.
    pub abort_reasons: BTreeMap<String, u64>,
    /// Latency of committed attempts, or `None` when none committed.
    pub latency_us: Option<Latency>,
    /// All transaction types together.
    pub total: TxnTypeResult,
    /// Per transaction type.
    pub per_txn_type: BTreeMap<String, TxnTypeResult>,
    /// Load per memory node.
    pub per_mn: Vec<MnResult>,
    /// The workload's invariant check.
    pub invariant: InvariantResult,
    /// The isolation check of the recorded history (`--check`), else `null`.
    #[serde(default)]
    pub check: Option<CheckResult>,
    /// The isolation level the protocol claims for this run (`serializable`, `strict
    /// serializable`, `snapshot isolation`, or `unchecked`: an unsafe upper bound).
    #[serde(default)]
    pub isolation: String,
    /// The last verb error a coordinator saw.
    pub last_fault: Option<String>,
    /// What a simulated run adds (null otherwise).
    #[serde(default)]
    pub sim: Option<SimResult>,
    /// Commits per bucket (every transport).
    #[serde(default)]
    pub timeseries: Option<TimeSeries>,
    /// The workload's headline figures beyond txn/s (TPC-C: `tpmc`, `warehouses`), by
    /// name; empty for most workloads.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, MetricResult>,
    /// The protocol's own figures (`Protocol::METRICS`), by name; empty when it declares
    /// none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub protocol_metrics: BTreeMap<String, ProtocolMetricResult>,
    /// The address cache's lookups over the measured window (absent from older records).
    #[serde(default)]
    pub addr_cache: Option<AddrCacheResult>,
    /// The memory plan: per table and per memory node (absent from older records).
    #[serde(default)]
    pub memory: Option<MemoryResult>,
    /// Where and when.
    pub run_info: RunInfo,
    /// `--cn` runs only: this compute node's place in the run (`dmtx report` merges
    /// the records of one run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cn: Option<crate::cn_join::CnRecord>,
}

/// Commits per bucket of time (`timeseries` in the JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeSeries {
    /// Bucket width in seconds.
    pub bucket_s: f64,
    /// Which time the buckets divide.
    pub clock: Clock,
    /// Commits per bucket, from the start of the measured run.
    pub committed: Vec<u64>,
}

/// The clock of a [`TimeSeries`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// Real time (`mem`, `tcp`).
    Real,
    /// The simulator's virtual time (`sim`).
    Virtual,
}

/// One headline figure of a workload ([`dmtx_workloads::Metric`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricResult {
    /// Its value.
    pub value: f64,
    /// What it counts.
    pub about: String,
}

/// One figure of the protocol's own ([`dmtx_runtime::metric`]), summed over every
/// coordinator after the warm-up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProtocolMetricResult {
    /// `counter` (events: read `sum`, `per_commit`), `value` (observations: read
    /// `count`, `mean`, `max`) or `duration` (times in ns: also `p50`, `p99`, `share`).
    pub kind: String,
    /// Values added.
    pub count: u64,
    /// Their sum.
    pub sum: u64,
    /// `sum / count` (0 when nothing was added).
    pub mean: f64,
    /// The largest value added.
    pub max: u64,
    /// `sum / committed`, or `null` when nothing committed.
    pub per_commit: Option<f64>,
    /// A `duration`'s median, ns (absent for other kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<u64>,
    /// A `duration`'s 99th percentile, ns (absent for other kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<u64>,
    /// A `duration`'s `sum` over the coordinators' measured time (each coordinator
    /// counts the run's length): the share of their time it took (absent for other kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// A `duration`'s histogram as `[ns, count]` pairs of its recorded buckets, for
    /// `dmtx report` to merge compute nodes' records (empty for other kinds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hist_ns: Vec<(u64, u64)>,
    /// What it counts, as the protocol says.
    pub about: String,
}

impl ProtocolMetricResult {
    /// The figure `spec` gathered as `sum`, over `committed` commits and
    /// `coordinator_ns` of coordinator time (coordinators × the measured run).
    pub fn of(spec: &MetricSpec, sum: &MetricSum, committed: u64, coordinator_ns: u64) -> Self {
        let hist_ns = match (&sum.hist, spec.kind) {
            (Some(h), MetricKind::Duration) => h
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
            _ => Vec::new(),
        };
        let mut r = Self {
            kind: spec.kind.name().to_string(),
            count: sum.count,
            sum: sum.sum,
            mean: 0.0,
            max: sum.max,
            per_commit: None,
            p50: None,
            p99: None,
            share: None,
            hist_ns,
            about: spec.about.to_string(),
        };
        r.derive(committed, coordinator_ns);
        r
    }

    /// Add another compute node's sums (`count`, `sum`, `max`, the histogram); then
    /// [`Self::derive`].
    pub fn merge(&mut self, other: &ProtocolMetricResult) {
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
        let mut at: BTreeMap<u64, u64> = self.hist_ns.iter().copied().collect();
        for &(ns, n) in &other.hist_ns {
            *at.entry(ns).or_default() += n;
        }
        self.hist_ns = at.into_iter().collect();
    }

    /// Recompute `mean`, `per_commit` and, for a `duration`, `p50`, `p99` and `share`
    /// from the sums, over `committed` commits and `coordinator_ns` of coordinator time.
    pub fn derive(&mut self, committed: u64, coordinator_ns: u64) {
        self.mean = if self.count == 0 {
            0.0
        } else {
            round(self.sum as f64 / self.count as f64, 3)
        };
        self.per_commit = (committed > 0).then(|| round(self.sum as f64 / committed as f64, 3));
        if self.kind != MetricKind::Duration.name() {
            return;
        }
        self.share = (coordinator_ns > 0).then(|| round(self.sum as f64 / coordinator_ns as f64, 6));
        let mut h = dmtx_runtime::metric::duration_histogram();
        for &(ns, n) in &self.hist_ns {
            h.saturating_record_n(ns.max(1), n);
        }
        if !h.is_empty() {
            self.p50 = Some(h.value_at_quantile(0.5));
            self.p99 = Some(h.value_at_quantile(0.99));
        }
    }

    /// One summary line's figures.
    fn line(&self) -> String {
        let per = self.per_commit.map_or_else(|| "-".to_string(), |p| format!("{p:.3}"));
        if self.kind == MetricKind::Counter.name() {
            format!("{} ({per} per commit)", self.sum)
        } else if self.kind == MetricKind::Duration.name() {
            let us = |ns: Option<u64>| ns.map_or_else(|| "-".to_string(), |n| format!("{:.2}", n as f64 / 1e3));
            format!(
                "mean {:.2} us, p50 {} us, p99 {} us, max {:.2} us over {} values, {:.2}% of coordinator time",
                self.mean / 1e3,
                us(self.p50),
                us(self.p99),
                self.max as f64 / 1e3,
                self.count,
                self.share.unwrap_or(0.0) * 100.0
            )
        } else {
            format!("mean {:.1}, max {} over {} values", self.mean, self.max, self.count)
        }
    }
}

/// The address cache's lookups (`addr_cache` in the JSON): every worker thread's, over
/// the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AddrCacheResult {
    /// Lookups answered (by the thread's level or the compute node's).
    pub hits: u64,
    /// Of those, answered by the compute node's level (another thread had learned it).
    pub hits_shared: u64,
    /// Lookups that found nothing: the protocol read the bucket chain.
    pub misses: u64,
    /// `hits / (hits + misses)`, 0 to 1 (0 when nothing was looked up).
    pub hit_rate: f64,
    /// Cached addresses found stale (the slot held another key) and dropped.
    pub evictions: u64,
    /// Addresses cached at the end, summed over compute nodes.
    pub entries: u64,
    /// What those entries hold: [`ADDR_CACHE_ENTRY_BYTES`] each (FORD §6.2.5's cache
    /// size; the hash maps' own overhead comes on top).
    #[serde(default)]
    pub bytes: u64,
}

/// Bytes one address-cache entry holds: table id, key and slot offset, 8 bytes each.
pub const ADDR_CACHE_ENTRY_BYTES: u64 = 24;

/// Add `other`'s figures into `into` by name (a name only `other` has is taken as it is);
/// `derive` each afterwards.
pub fn merge_protocol_metrics(
    into: &mut BTreeMap<String, ProtocolMetricResult>,
    other: &BTreeMap<String, ProtocolMetricResult>,
) {
    for (name, b) in other {
        match into.get_mut(name) {
            Some(a) => a.merge(b),
            None => {
                into.insert(name.clone(), b.clone());
            }
        }
    }
}

impl AddrCacheResult {
    /// Add another compute node's lookups and entries.
    pub fn merge(&mut self, other: &AddrCacheResult) {
        self.hits += other.hits;
        self.hits_shared += other.hits_shared;
        self.misses += other.misses;
        self.evictions += other.evictions;
        self.entries += other.entries;
        self.bytes += other.bytes;
        self.hit_rate = ratio(self.hits, self.hits + self.misses);
    }

    /// From the threads' stats summed and the entries left.
    pub fn of(s: &CacheStats, entries: u64) -> Self {
        Self {
            hits: s.hits(),
            hits_shared: s.hits_shared,
            misses: s.misses,
            hit_rate: ratio(s.hits(), s.hits() + s.misses),
            evictions: s.evictions,
            entries,
            bytes: entries * ADDR_CACHE_ENTRY_BYTES,
        }
    }
}

/// Where the run's memory went, as planned before loading (`memory` in the JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryResult {
    /// Per table.
    pub tables: Vec<TableMemory>,
    /// Per memory node.
    pub per_mn: Vec<MnMemory>,
}

/// One table's footprint, per replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableMemory {
    /// Table name.
    pub name: String,
    /// Records it has room for.
    pub capacity: u64,
    /// Memory nodes holding a replica, primary first.
    pub nodes: Vec<u16>,
    /// Region bytes one replica reserves.
    pub reserved_bytes: u64,
    /// Resident bytes of one replica once loaded.
    pub loaded_bytes: u64,
    /// Resident bytes of one replica if the run fills its room.
    pub full_bytes: u64,
    /// Bytes of one slot, as the protocol's format sizes it for this table (absent from
    /// older records).
    #[serde(default)]
    pub slot_bytes: u32,
    /// Region bytes of one replica's value region, part of `reserved_bytes` (0: values
    /// live in the slots).
    #[serde(default)]
    pub value_region_bytes: u64,
    /// Resident bytes of one replica's value region once loaded, part of `loaded_bytes`.
    #[serde(default)]
    pub value_region_loaded_bytes: u64,
    /// Resident bytes of all its replicas once loaded: `loaded_bytes` × replicas.
    #[serde(default)]
    pub loaded_bytes_total: u64,
    /// Bytes the load wrote into one replica (whole 4 KiB pages), measured while
    /// building: what `loaded_bytes` estimates. Absent when this process did not load
    /// the tables (a `--cn` run's other compute nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_bytes: Option<u64>,
}

/// One memory node's footprint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MnMemory {
    /// Node index.
    pub mn: u16,
    /// Region bytes its table replicas reserve.
    pub tables_bytes: u64,
    /// Resident bytes of its table replicas once loaded.
    pub loaded_bytes: u64,
    /// Resident bytes of its table replicas if every table fills.
    pub full_bytes: u64,
    /// Bytes of coordinator areas (logs) on it.
    pub coordinators_bytes: u64,
    /// Region bytes it needs at least (tables, coordinator areas, header).
    pub need_bytes: u64,
    /// Resident bytes once loaded: its table replicas and coordinator areas (absent from
    /// older records).
    #[serde(default)]
    pub footprint_bytes: u64,
    /// Region bytes of the value regions of its table replicas, part of `tables_bytes`.
    #[serde(default)]
    pub value_region_bytes: u64,
}

impl MemoryResult {
    /// This record with the bytes each table's load wrote per replica, in plan order
    /// (none when this process loaded nothing).
    pub fn with_written(mut self, written: &[u64]) -> Self {
        if written.len() == self.tables.len() {
            for (t, &w) in self.tables.iter_mut().zip(written) {
                t.written_bytes = Some(w);
            }
        }
        self
    }

    /// From the run's plan.
    pub fn of(plan: &crate::plan::MemoryPlan) -> Self {
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        Self {
            tables: plan
                .tables
                .iter()
                .map(|t| TableMemory {
                    name: t.name.clone(),
                    capacity: t.capacity,
                    nodes: t.nodes.iter().map(|m| m.index() as u16).collect(),
                    reserved_bytes: t.replica_bytes,
                    loaded_bytes: t.loaded_bytes,
                    full_bytes: t.full_bytes,
                    slot_bytes: t.slot_bytes,
                    value_region_bytes: t.value_region_bytes,
                    value_region_loaded_bytes: t.value_region_loaded_bytes,
                    loaded_bytes_total: t.loaded_bytes * t.nodes.len() as u64,
                    written_bytes: None,
                })
                .collect(),
            per_mn: (0..plan.need_per_mn.len())
                .map(|i| MnMemory {
                    mn: i as u16,
                    tables_bytes: at(&plan.tables_per_mn, i),
                    loaded_bytes: at(&plan.loaded_per_mn, i),
                    full_bytes: at(&plan.full_per_mn, i),
                    coordinators_bytes: at(&plan.coordinators_per_mn, i),
                    need_bytes: plan.need_per_mn[i],
                    footprint_bytes: at(&plan.loaded_per_mn, i) + at(&plan.coordinators_per_mn, i),
                    value_region_bytes: plan
                        .tables
                        .iter()
                        .filter(|t| t.nodes.iter().any(|m| m.index() == i))
                        .map(|t| t.value_region_bytes)
                        .sum(),
                })
                .collect(),
        }
    }
}

/// The settings of a run, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigRecord {
    /// Worker threads.
    pub threads: u16,
    /// Coordinators per thread.
    pub coroutines: u16,
    /// `--duration`, when the run was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// `--txns`, when the run counted commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txns: Option<u64>,
    /// Run seed.
    pub seed: u64,
    /// Memory nodes.
    pub memory_nodes: u16,
    /// Copies of each table.
    pub replicas: u16,
    /// Region bytes per memory node (given or computed).
    pub mn_bytes: u64,
    /// `--warmup`: time run before measuring, not counted (seconds).
    #[serde(default)]
    pub warmup_s: f64,
    /// Every knob's effective value.
    pub knobs: BTreeMap<String, String>,
    /// The `--preset` the run started from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
}

/// Latency percentiles in microseconds.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Latency {
    /// Percentiles of a nanosecond histogram; `None` when it is empty.
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| round(ns as f64 / 1e3, 3);
        Some(Self {
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: round(h.mean() / 1e3, 3),
        })
    }
}

/// Something counted per verb kind.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ops<T> {
    /// READs.
    pub read: T,
    /// WRITEs.
    pub write: T,
    /// CASes.
    pub cas: T,
    /// FAAs.
    pub faa: T,
    /// FLUSHes.
    pub flush: T,
}

impl<T: Copy> Ops<T> {
    /// From an array indexed by `OpKind as usize`.
    pub fn from_array(a: [T; OpKind::COUNT]) -> Self {
        Self {
            read: a[OpKind::Read as usize],
            write: a[OpKind::Write as usize],
            cas: a[OpKind::Cas as usize],
            faa: a[OpKind::Faa as usize],
            flush: a[OpKind::Flush as usize],
        }
    }
}

/// Bytes each way.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bytes {
    /// To memory nodes.
    pub out: f64,
    /// From memory nodes.
    #[serde(rename = "in")]
    pub r#in: f64,
}

/// Raw verb sums.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Round trips waited for.
    pub rtts: u64,
    /// Posts never waited for.
    pub background_posts: u64,
    /// Verbs by kind.
    pub ops: Ops<u64>,
    /// Bytes sent to memory nodes.
    pub bytes_out: u64,
    /// Bytes returned by memory nodes.
    pub bytes_in: u64,
    /// Timestamps asked of the timestamp service (absent from records before they were
    /// counted: 0).
    #[serde(default)]
    pub ts_requests: u64,
    /// Of those, the ones waited a round trip for.
    #[serde(default)]
    pub ts_rtts: u64,
    /// CN↔CN message round trips waited for (absent from older records: 0).
    #[serde(default)]
    pub msg_rtts: u64,
}

impl From<&PostCounters> for Counters {
    fn from(c: &PostCounters) -> Self {
        Self {
            rtts: c.rtts,
            background_posts: c.background_posts,
            ops: Ops::from_array(c.ops),
            bytes_out: c.bytes_out,
            bytes_in: c.bytes_in,
            ts_requests: c.ts_requests,
            ts_rtts: c.ts_rtts,
            msg_rtts: c.msg_rtts,
        }
    }
}

/// The results of one transaction type (or of all together).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TxnTypeResult {
    /// Committed attempts.
    pub committed: u64,
    /// Aborted attempts.
    pub aborted: u64,
    /// Committed attempts the workload counts as successful.
    #[serde(default)]
    pub successful: u64,
    /// Attempts the workload rolled back on purpose.
    #[serde(default)]
    pub rolled_back: u64,
    /// Aborted / attempted (0 when nothing was attempted).
    pub abort_rate: f64,
    /// Non-zero abort reasons.
    pub abort_reasons: BTreeMap<String, u64>,
    /// Round trips per commit.
    pub rtt_per_commit: Option<f64>,
    /// CN↔CN message round trips of committed attempts per commit (absent from older
    /// records: `null`).
    #[serde(default)]
    pub msg_rtts_per_commit: Option<f64>,
    /// Verbs per commit, by kind.
    pub ops_per_commit: Option<Ops<f64>>,
    /// Bytes per commit.
    pub bytes_per_commit: Option<Bytes>,
    /// Background posts per commit.
    pub background_posts_per_commit: Option<f64>,
    /// Round trips of aborted attempts per commit.
    pub wasted_rtts_per_commit: Option<f64>,
    /// Attempts of the committed transactions per commit: 1 when none was retried
    /// (absent from records before retries: `null`).
    #[serde(default)]
    pub attempts_per_commit: Option<f64>,
    /// Timestamps asked by committed attempts per commit.
    #[serde(default)]
    pub ts_per_commit: Option<f64>,
    /// Of those, the ones waited a round trip for, per commit.
    #[serde(default)]
    pub ts_rtts_per_commit: Option<f64>,
    /// Round trips of the per-attempt cleanups, per commit (absent from older records:
    /// `null`).
    #[serde(default)]
    pub cleanup_rtts_per_commit: Option<f64>,
    /// Latency of committed attempts.
    pub latency_us: Option<Latency>,
    /// Raw sums over committed attempts.
    pub committed_counters: Counters,
    /// Raw sums over aborted attempts.
    pub aborted_counters: Counters,
    /// Raw sums over the per-attempt cleanups of every attempt.
    #[serde(default)]
    pub cleanup_counters: Counters,
}

impl TxnTypeResult {
    /// Derive the per-commit figures of `t`; `reasons` names the protocol's own abort
    /// reasons (`Protocol::ABORT_REASONS`).
    pub fn of(t: &TypeStats, reasons: &[AbortReasonSpec]) -> Self {
        let c = &t.committed_counters;
        let per = |x: u64| (t.committed > 0).then(|| round(x as f64 / t.committed as f64, 3));
        Self {
            committed: t.committed,
            aborted: t.aborted,
            successful: t.successful(),
            rolled_back: t.rolled_back,
            abort_rate: ratio(t.aborted, t.attempted()),
            abort_reasons: (0..REASON_SLOTS)
                .filter(|&s| t.abort_reasons[s] > 0)
                .map(|s| (slot_name(s, reasons).to_string(), t.abort_reasons[s]))
                .collect(),
            rtt_per_commit: per(c.rtts),
            msg_rtts_per_commit: per(c.msg_rtts),
            ops_per_commit: (t.committed > 0).then(|| {
                let mut a = [0.0; OpKind::COUNT];
                for k in OpKind::ALL {
                    a[k as usize] = per(c.ops_of(k)).unwrap_or_default();
                }
                Ops::from_array(a)
            }),
            bytes_per_commit: (t.committed > 0).then(|| Bytes {
                out: per(c.bytes_out).unwrap_or_default(),
                r#in: per(c.bytes_in).unwrap_or_default(),
            }),
            background_posts_per_commit: per(c.background_posts),
            wasted_rtts_per_commit: per(t.aborted_counters.rtts),
            attempts_per_commit: per(t.commit_attempts),
            ts_per_commit: per(c.ts_requests),
            ts_rtts_per_commit: per(c.ts_rtts),
            cleanup_rtts_per_commit: per(t.cleanup_counters.rtts),
            latency_us: Latency::of(&t.latency_ns),
            committed_counters: Counters::from(c),
            aborted_counters: Counters::from(&t.aborted_counters),
            cleanup_counters: Counters::from(&t.cleanup_counters),
        }
    }
}

/// One memory node's load.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MnResult {
    /// Node index.
    pub mn: u16,
    /// Verbs it served, by kind.
    pub ops: Ops<u64>,
    /// Payload bytes it received.
    pub bytes_in: u64,
    /// Payload bytes it returned.
    pub bytes_out: u64,
}

/// The outcome of the workload's invariant check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvariantResult {
    /// True when every invariant held.
    pub ok: bool,
    /// What was checked, or what broke.
    pub detail: String,
}

/// The outcome of checking a run's history (`--check`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The level checked (the protocol's claim).
    pub level: String,
    /// Transactions in the history.
    pub txns: u64,
    /// Committed transactions.
    pub committed: u64,
    /// True when no anomaly was found.
    pub clean: bool,
    /// One line: `history: N txns, no anomalies (serializable)` or the anomaly counts.
    pub summary: String,
    /// Each finding with its evidence, one string each (at most a few per kind).
    pub findings: Vec<String>,
}

impl CheckResult {
    /// Summarize a checker report.
    pub fn of(report: &dmtx_check::Report) -> Self {
        Self {
            level: report.level_name().to_string(),
            txns: report.txns as u64,
            committed: report.committed as u64,
            clean: report.is_clean(),
            summary: report.summary(),
            findings: report.findings.iter().map(|f| f.to_string()).collect(),
        }
    }
}

/// Where and when a run happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Host name.
    pub host: String,
    /// Start of the measured run, RFC 3339 UTC.
    pub started_at: String,
    /// The same, as Unix seconds.
    pub started_at_unix_s: f64,
    /// `dmtx` crate version.
    pub dmtx_version: String,
    /// CPUs available to the process.
    pub cpus: usize,
    /// Seconds spent building the tables and loading them into the memory nodes.
    pub load_s: f64,
    /// Records loaded before the run (every table, one copy each).
    #[serde(default)]
    pub load_records: u64,
    /// `load_records / load_s`.
    #[serde(default)]
    pub load_records_per_s: f64,
    /// Real time of the measured run (seconds).
    pub real_s: f64,
    /// `sim` only: real seconds per simulated second.
    pub real_s_per_sim_s: Option<f64>,
}

/// What a simulated run reports beyond the common fields (`sim` in the JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    /// Says that the numbers are simulated.
    pub note: String,
    /// The NIC profile's name.
    pub profile: String,
    /// Where the profile came from: `built-in cx5` or a file's path.
    #[serde(default)]
    pub profile_source: String,
    /// Fingerprint of every parameter (`Profile::fingerprint`).
    #[serde(default)]
    pub profile_fingerprint: String,
    /// Every parameter of the profile, as its TOML reads (CPU mode applied).
    #[serde(default)]
    pub profile_params: serde_json::Value,
    /// `model`, `off` or `measured`.
    pub cpu_mode: String,
    /// Simulated compute nodes.
    pub compute_nodes: u16,
    /// Verbs completed.
    pub verbs: u64,
    /// Events processed.
    pub events: u64,
    /// Per node: memory nodes first, then compute nodes.
    pub nics: Vec<NicResult>,
    /// Per op kind.
    pub waits_us: BTreeMap<String, WaitResult>,
    /// Per worker thread.
    pub cpus: Vec<CpuResult>,
    /// Commits per 1 ms of virtual time, from the start of the measured run.
    pub timeseries_ms: Vec<u64>,
    /// Faults fired (`--faults`), with their virtual time.
    pub faults: Vec<String>,
    /// READ/WRITE pairs found in service together on common words, and of those the
    /// READs that saw a mixture of old and new words (DESIGN §2).
    #[serde(default)]
    pub tears: TearResult,
    /// Coordinators still in a transaction when the run stopped (a grace after an
    /// interrupt, a second of virtual time after the deadline), dropped there: a `delay`
    /// or a peer that never answers held them. Their locks and writes stay.
    #[serde(default)]
    pub stranded: u64,
    /// Step names the run charged at the profile's `step_default_ns` because neither the
    /// profile nor the protocol's `CPU_STEPS` prices them (an undeclared step, a typo).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced_steps: Vec<String>,
}

/// Tears the simulator produced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TearResult {
    /// Overlapping READ/WRITE pairs.
    pub overlaps: u64,
    /// READs torn.
    pub torn: u64,
}

/// One node's NIC load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicResult {
    /// `mn0`, `cn0`, ...
    pub node: String,
    /// Ops sent (a compute node) or served (a memory node).
    pub ops: Ops<u64>,
    /// Wire bytes sent.
    pub tx_bytes: u64,
    /// Wire bytes received.
    pub rx_bytes: u64,
    /// The busier link direction's share of the run.
    pub link_utilisation: f64,
}

/// Mean waits of one op kind (µs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitResult {
    /// Ops of the kind.
    pub ops: u64,
    /// For the connection's outstanding READ/atomic bound.
    pub admission_mean: f64,
    /// Queued at the responder NIC.
    pub responder_mean: f64,
    /// Doorbell to reply.
    pub latency_mean: f64,
}

/// One worker thread's virtual CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuResult {
    /// Compute node.
    pub cn: u32,
    /// Worker thread.
    pub thread: u16,
    /// Busy share of the run.
    pub utilisation: f64,
}

/// What the driver hands over about a simulated run.
pub struct SimRaw {
    /// The profile.
    pub profile: dmtx_sim::Profile,
    /// CPU mode.
    pub cpu_mode: dmtx_sim::CpuMode,
    /// Compute nodes.
    pub compute_nodes: u16,
    /// The fabric's load.
    pub load: dmtx_sim::FabricLoad,
    /// CPU work per worker thread.
    pub cpus: Vec<dmtx_sim::CpuBusy>,
    /// Simulator counters.
    pub stats: dmtx_sim::SimStats,
    /// Commits per ms.
    pub series: Vec<u64>,
    /// Faults fired, with their virtual time.
    pub faults: Vec<String>,
    /// Tears over the whole run (warm-up included).
    pub tears: dmtx_sim::TearStats,
    /// Coordinators dropped in a transaction when the run stopped.
    pub stranded: u64,
    /// Virtual time the real time simulated: the warm-up, the window and what ran after
    /// the deadline.
    pub simulated_ns: u64,
    /// Step names charged at the default cost ([`dmtx_sim::Sim::unpriced_steps`]).
    pub unpriced_steps: Vec<String>,
}

impl SimResult {
    fn of(raw: SimRaw, elapsed_ns: u64) -> Self {
        // Counters are read at the deadline, and work booked by then (a CPU step, a
        // transfer reserved at submit) may end just after it: a share is at most 1.
        let share = |ns: u64| {
            if elapsed_ns == 0 {
                0.0
            } else {
                round((ns as f64 / elapsed_ns as f64).min(1.0), 4)
            }
        };
        let node = |name: String, l: &dmtx_sim::NodeLoad| NicResult {
            node: name,
            ops: Ops::from_array(l.ops),
            tx_bytes: l.tx_bytes,
            rx_bytes: l.rx_bytes,
            link_utilisation: round(l.link_utilisation(elapsed_ns).min(1.0), 4),
        };
        let mut nics: Vec<NicResult> = raw
            .load
            .mns
            .iter()
            .enumerate()
            .map(|(i, l)| node(format!("mn{i}"), l))
            .collect();
        nics.extend(raw.load.cns.iter().enumerate().map(|(i, l)| node(format!("cn{i}"), l)));
        let mean_us = |sum: u64, n: u64| {
            if n == 0 {
                0.0
            } else {
                round(sum as f64 / n as f64 / 1e3, 3)
            }
        };
        let waits_us = dmtx_sim::report::KINDS
            .iter()
            .zip(&raw.load.kinds)
            .filter(|(_, w)| w.ops > 0)
            .map(|(k, w)| {
                (
                    k.name().to_string(),
                    WaitResult {
                        ops: w.ops,
                        admission_mean: mean_us(w.admission_ns, w.ops),
                        responder_mean: mean_us(w.responder_ns, w.ops),
                        latency_mean: mean_us(w.latency_ns, w.ops),
                    },
                )
            })
            .collect();
        Self {
            note: format!(
                "simulated: throughput, latency and utilisation are virtual-time results of the `{}` NIC/CPU model, not measurements of this host",
                raw.profile.name
            ),
            cpu_mode: match raw.cpu_mode {
                dmtx_sim::CpuMode::Model => "model",
                dmtx_sim::CpuMode::Off => "off",
                dmtx_sim::CpuMode::Measured => "measured",
            }
            .to_string(),
            profile: raw.profile.name.clone(),
            profile_source: raw.profile.source.clone(),
            profile_fingerprint: raw.profile.fingerprint(),
            profile_params: serde_json::to_value(&raw.profile).unwrap_or_default(),
            compute_nodes: raw.compute_nodes,
            verbs: raw.stats.ops,
            events: raw.stats.events,
            nics,
            waits_us,
            cpus: raw
                .cpus
                .iter()
                .map(|c| CpuResult {
                    cn: c.cn,
                    thread: c.thread,
                    utilisation: share(c.busy_ns),
                })
                .collect(),
            timeseries_ms: raw.series,
            faults: raw.faults,
            tears: TearResult {
                overlaps: raw.tears.overlaps,
                torn: raw.tears.torn,
            },
            stranded: raw.stranded,
            unpriced_steps: raw.unpriced_steps,
        }
    }
}

/// What the driver hands over to build a [`BenchResult`].
pub struct RawRun<'a> {
    /// The run's config.
    pub cfg: &'a BenchConfig,
    /// Transport name.
    pub transport: &'a str,
    /// Region bytes per memory node.
    pub mn_bytes: u64,
    /// Transaction type names, by index.
    pub txn_types: &'a [&'a str],
    /// Merged counters.
    pub stats: &'a RunStats,
    /// Load per node.
    pub per_mn: &'a [MnCounters],
    /// Measured time.
    pub elapsed: Duration,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// What stopped it early, when a limit did.
    pub stop_detail: Option<String>,
    /// Invariant outcome.
    pub invariant: InvariantResult,
    /// History check outcome.
    pub check: Option<CheckResult>,
    /// The protocol's claimed level.
    pub isolation: dmtx_runtime::Isolation,
    /// Last verb error seen.
    pub last_fault: Option<String>,
    /// Start of the measured run, Unix seconds.
    pub started_at_unix_s: f64,
    /// Time spent building and loading the tables before the run.
    pub load: Duration,
    /// Records loaded (one copy each).
    pub records_loaded: u64,
    /// Real time of the measured run.
    pub real: Duration,
    /// What the simulator adds (`--transport sim`).
    pub sim: Option<SimRaw>,
    /// Commits per bucket of time.
    pub timeseries: Option<TimeSeries>,
    /// The workload's headline figures.
    pub metrics: Vec<dmtx_workloads::Metric>,
    /// The protocol's own abort reasons (`Protocol::ABORT_REASONS`), to name them.
    pub abort_reasons: &'static [AbortReasonSpec],
    /// The protocol's own figures (`Protocol::METRICS`) and what each gathered.
    pub protocol_metrics: Vec<(MetricSpec, MetricSum)>,
    /// The address cache's lookups and the entries left.
    pub addr_cache: Option<(CacheStats, u64)>,
    /// The memory plan.
    pub memory: Option<MemoryResult>,
}

impl BenchResult {
    /// Build the record from a finished run.
    pub fn from_run(raw: RawRun<'_>) -> Self {
        let cfg = raw.cfg;
        let total_stats = raw.stats.total();
        let total = TxnTypeResult::of(&total_stats, raw.abort_reasons);
        let elapsed_s = raw.elapsed.as_secs_f64();
        let per_s = |n: u64| {
            if elapsed_s > 0.0 {
                round(n as f64 / elapsed_s, 1)
            } else {
                0.0
            }
        };
        let mut abort_reasons: BTreeMap<String, u64> = AbortReason::ALL
            .iter()
            .map(|r| r.name())
            .chain(raw.abort_reasons.iter().map(|s| s.name))
            .map(|name| (name.to_string(), 0))
            .collect();
        for (name, n) in &total.abort_reasons {
            *abort_reasons.entry(name.clone()).or_default() += n;
        }
        let per_txn_type = raw
            .txn_types
            .iter()
            .zip(&raw.stats.types)
            .map(|(name, t)| (name.to_string(), TxnTypeResult::of(t, raw.abort_reasons)))
            .collect();
        let coordinators = cfg.coordinators() as u64;
        let coordinator_ns = (raw.elapsed.as_nanos() as u64).saturating_mul(coordinators);
        let protocol_metrics = raw
            .protocol_metrics
            .iter()
            .map(|(spec, sum)| {
                (
                    spec.name.to_string(),
                    ProtocolMetricResult::of(spec, sum, total.committed, coordinator_ns),
                )
            })
            .collect();
        Self {
            protocol_metrics,
            addr_cache: raw.addr_cache.map(|(s, entries)| AddrCacheResult::of(&s, entries)),
            memory: raw.memory,
            schema_version: SCHEMA_VERSION,
            protocol: cfg.protocol.clone(),
            workload: cfg.workload.clone(),
            transport: raw.transport.to_string(),
            config: ConfigRecord {
                threads: cfg.threads,
                coroutines: cfg.coroutines,
                duration_s: match cfg.stop {
                    StopRule::Duration(d) => Some(d.as_secs_f64()),
                    StopRule::Txns(_) => None,
                },
                txns: match cfg.stop {
                    StopRule::Txns(n) => Some(n),
                    StopRule::Duration(_) => None,
                },
                seed: cfg.seed,
                memory_nodes: cfg.memory_nodes,
                replicas: cfg.replicas,
                mn_bytes: raw.mn_bytes,
                warmup_s: cfg.warmup.as_secs_f64(),
                knobs: cfg.knobs_effective.clone(),
                preset: cfg.preset.clone(),
            },
            stop_reason: raw.stop_reason,
            stop_detail: raw.stop_detail,
            elapsed_s: round(elapsed_s, 6),
            committed: total.committed,
            aborted: total.aborted,
            attempted: total.committed + total.aborted + total.rolled_back,
            successful: total.successful,
            rolled_back: total.rolled_back,
            committed_tps: per_s(total.committed),
            attempted_tps: per_s(total.committed + total.aborted + total.rolled_back),
            abort_rate: total.abort_rate,
            abort_reasons,
            latency_us: total.latency_us,
            total,
            per_txn_type,
            per_mn: raw
                .per_mn
                .iter()
                .enumerate()
                .map(|(i, m)| MnResult {
                    mn: i as u16,
                    ops: Ops::from_array(m.ops),
                    bytes_in: m.bytes_in,
                    bytes_out: m.bytes_out,
                })
                .collect(),
            invariant: raw.invariant,
            check: raw.check,
            isolation: raw.isolation.name().to_string(),
            last_fault: raw.last_fault,
            run_info: RunInfo {
                host: host_name(),
                started_at: rfc3339_utc(raw.started_at_unix_s as u64),
                started_at_unix_s: round(raw.started_at_unix_s, 3),
                dmtx_version: env!("CARGO_PKG_VERSION").to_string(),
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
                load_s: round(raw.load.as_secs_f64(), 3),
                load_records: raw.records_loaded,
                load_records_per_s: round(raw.records_loaded as f64 / raw.load.as_secs_f64().max(1e-9), 0),
                real_s: round(raw.real.as_secs_f64(), 3),
                real_s_per_sim_s: raw
                    .sim
                    .as_ref()
                    .map(|s| round(raw.real.as_secs_f64() / (s.simulated_ns as f64 / 1e9).max(1e-9), 2)),
            },
            sim: raw.sim.map(|s| SimResult::of(s, raw.elapsed.as_nanos() as u64)),
            cn: None,
            timeseries: raw.timeseries,
            metrics: raw
                .metrics
                .into_iter()
                .map(|m| {
                    (
                        m.name.to_string(),
                        MetricResult {
                            value: round(m.value, 3),
                            about: m.about,
                        },
                    )
                })
                .collect(),
        }
    }

    /// The record as pretty JSON, with a final newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("results serialize");
        s.push('\n');
        s
    }

    fn sim_summary(&self, o: &mut String, sim: &SimResult) {
        let _ = writeln!(
            o,
            "  simulated   profile {} ({}, parameters {}), cpu {}, {} compute node(s); {} verbs; {:.1} s real per simulated second ({:.2} M verbs per real second)",
            sim.profile,
            sim.profile_source,
            sim.profile_fingerprint,
            sim.cpu_mode,
            sim.compute_nodes,
            sim.verbs,
            self.run_info.real_s_per_sim_s.unwrap_or(0.0),
            // The window's verbs over the real time its share of the run took.
            sim.verbs as f64 / (self.run_info.real_s_per_sim_s.unwrap_or(0.0) * self.elapsed_s).max(1e-9) / 1e6
        );
        let links: Vec<String> = sim
            .nics
            .iter()
            .map(|n| format!("{} {:.0}%", n.node, n.link_utilisation * 100.0))
            .collect();
        let _ = writeln!(o, "  link busy   {}", links.join(", "));
        if !sim.cpus.is_empty() {
            let u: Vec<f64> = sim.cpus.iter().map(|c| c.utilisation).collect();
            let mean = u.iter().sum::<f64>() / u.len() as f64;
            let max = u.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                o,
                "  cpu busy    mean {:.0}%, max {:.0}% over {} worker threads",
                mean * 100.0,
                max * 100.0,
                u.len()
            );
        }
        let waits: Vec<String> = sim
            .waits_us
            .iter()
            .map(|(k, w)| {
                format!(
                    "{k} {:.2}+{:.2}/{:.2}",
                    w.admission_mean, w.responder_mean, w.latency_mean
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "  waits us    {}   (admission+responder queueing / latency, per op)",
            waits.join(", ")
        );
        if !sim.unpriced_steps.is_empty() {
            let _ = writeln!(
                o,
                "  cpu steps   {} charged at the default cost: neither the profile's [cpu.steps] nor the protocol's CPU_STEPS prices them",
                sim.unpriced_steps.join(", ")
            );
        }
        if sim.stranded > 0 {
            let _ = writeln!(
                o,
                "  stranded    {} coordinator(s) still in a transaction when the run stopped were dropped there (a delay or a peer that never answers held them); their locks and writes stay",
                sim.stranded
            );
        }
    }

    /// The fixed-width human summary; `saved` is where the JSON went, if anywhere.
    pub fn summary(&self, saved: Option<&Path>) -> String {
        let mut o = String::new();
        let c = &self.config;
        let stop = match (c.duration_s, c.txns) {
            (Some(d), _) => format!("{d} s"),
            (_, Some(n)) => format!("{n} txns"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "dmtx bench  {} on {} over {}: {} threads x {} coroutines, {} memory nodes x {} replicas, {}, seed {}",
            self.protocol,
            self.workload,
            self.transport,
            c.threads,
            c.coroutines,
            c.memory_nodes,
            c.replicas,
            stop,
            c.seed
        );
        let interrupted = match self.stop_reason {
            StopReason::Interrupt => "  (interrupted)",
            StopReason::TablesFull => "  (stopped: tables full)",
            StopReason::Memory => "  (stopped: host memory low)",
            _ => "",
        };
        let _ = writeln!(
            o,
            "  elapsed     {:.2} s{interrupted}   (tables loaded before: {} records in {:.2} s, {:.2} M records/s)",
            self.elapsed_s,
            self.run_info.load_records,
            self.run_info.load_s,
            self.run_info.load_records_per_s / 1e6
        );
        let _ = writeln!(
            o,
            "  committed   {:>12} txns  {:>12.1} txn/s",
            self.committed, self.committed_tps
        );
        for (name, m) in &self.metrics {
            let _ = writeln!(o, "  {name:<11} {:>12.1}   ({})", m.value, m.about);
        }
        if self.successful != self.committed {
            let _ = writeln!(
                o,
                "  successful  {:>12} txns  {:>12.1} txn/s   (the spec's count: committed minus not-found/duplicate)",
                self.successful,
                self.successful as f64 / self.elapsed_s.max(f64::MIN_POSITIVE)
            );
        }
        if self.rolled_back > 0 {
            let _ = writeln!(
                o,
                "  rolled back {:>12} txns  (by the workload, on purpose)",
                self.rolled_back
            );
        }
        let _ = writeln!(
            o,
            "  attempted   {:>12} txns  {:>12.1} txn/s   abort rate {:.2}%",
            self.attempted,
            self.attempted_tps,
            self.abort_rate * 100.0
        );
        if let Some(l) = &self.latency_us {
            let _ = writeln!(
                o,
                "  latency us  p50 {:.1}  p90 {:.1}  p99 {:.1}  p999 {:.1}  max {:.1}  mean {:.1}",
                l.p50, l.p90, l.p99, l.p999, l.max, l.mean
            );
        }
        let reasons: Vec<String> = self
            .abort_reasons
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        if !reasons.is_empty() {
            let _ = writeln!(o, "  aborts      {}", reasons.join(", "));
        }
        if let Some(sim) = &self.sim {
            self.sim_summary(&mut o, sim);
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "  {:<20} {:>10} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>8} {:>8}",
            "txn type",
            "committed",
            "abort%",
            "att/c",
            "rtt/c",
            "read/c",
            "writ/c",
            "cas/c",
            "faa/c",
            "flsh/c",
            "Bout/c",
            "Bin/c",
            "p50 us",
            "p99 us"
        );
        let rows = self
            .per_txn_type
            .iter()
            .map(|(n, t)| (n.as_str(), t))
            .chain([("(all)", &self.total)]);
        for (name, t) in rows {
            let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
            let ops = t.ops_per_commit;
            let _ = writeln!(
                o,
                "  {:<20} {:>10} {:>7.2} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>8} {:>8}",
                name,
                t.committed,
                t.abort_rate * 100.0,
                f(t.attempts_per_commit),
                f(t.rtt_per_commit),
                f(ops.map(|o| o.read)),
                f(ops.map(|o| o.write)),
                f(ops.map(|o| o.cas)),
                f(ops.map(|o| o.faa)),
                f(ops.map(|o| o.flush)),
                t.bytes_per_commit
                    .map_or_else(|| "-".into(), |b| format!("{:.0}", b.out)),
                t.bytes_per_commit
                    .map_or_else(|| "-".into(), |b| format!("{:.0}", b.r#in)),
                t.latency_us.map_or_else(|| "-".into(), |l| format!("{:.1}", l.p50)),
                t.latency_us.map_or_else(|| "-".into(), |l| format!("{:.1}", l.p99)),
            );
        }
        let _ = writeln!(o);
        if let Some(ts) = self.total.ts_per_commit.filter(|&n| n > 0.0) {
            let waited = self.total.ts_rtts_per_commit.unwrap_or_default();
            let _ = writeln!(
                o,
                "  timestamps  {ts:.2} per commit, {waited:.2} of them waited a round trip for (not in rtt/c)"
            );
        }
        if let Some(n) = self.total.cleanup_rtts_per_commit.filter(|&n| n > 0.0) {
            let _ = writeln!(
                o,
                "  cleanup     {n:.2} round trips per commit after the attempts (not in rtt/c)"
            );
        }
        if let Some(n) = self.total.msg_rtts_per_commit.filter(|&n| n > 0.0) {
            let per_type: Vec<String> = self
                .per_txn_type
                .iter()
                .filter_map(|(name, t)| t.msg_rtts_per_commit.map(|m| format!("{name} {m:.2}")))
                .collect();
            let _ = writeln!(
                o,
                "  messages    {n:.2} CN-to-CN round trips per commit (not in rtt/c): {}",
                per_type.join(", ")
            );
        }
        if let Some(c) = &self.addr_cache {
            let _ = writeln!(
                o,
                "  addr cache  {:.1}% hits ({} hits, {} of them from another thread, {} misses), {} stale evicted, {} entries ({})",
                c.hit_rate * 100.0,
                c.hits,
                c.hits_shared,
                c.misses,
                c.evictions,
                c.entries,
                crate::units::bytes(c.bytes)
            );
        }
        for (name, m) in &self.protocol_metrics {
            let _ = writeln!(o, "  {:<11} {}   ({}: {})", name, m.line(), self.protocol, m.about);
        }
        if let Some(m) = &self.memory {
            let tables: Vec<String> = m
                .tables
                .iter()
                .map(|t| {
                    let region = match t.value_region_bytes {
                        0 => String::new(),
                        r => format!(" (value region {})", crate::units::bytes(r)),
                    };
                    format!(
                        "{} {}/{}/{}{region}",
                        t.name,
                        crate::units::bytes(t.reserved_bytes),
                        crate::units::bytes(t.loaded_bytes),
                        crate::units::bytes(t.full_bytes)
                    )
                })
                .collect();
            let _ = writeln!(
                o,
                "  memory      per replica reserved/loaded/full: {}",
                tables.join(", ")
            );
            let mns: Vec<String> = m
                .per_mn
                .iter()
                .map(|n| {
                    format!(
                        "mn{} {} (tables {} + coordinator areas {})",
                        n.mn,
                        crate::units::bytes(n.footprint_bytes),
                        crate::units::bytes(n.loaded_bytes),
                        crate::units::bytes(n.coordinators_bytes)
                    )
                })
                .collect();
            let total: u64 = m.per_mn.iter().map(|n| n.footprint_bytes).sum();
            // The load's own count, where this process loaded: what the tables' part of
            // the estimate stands for.
            let written: Option<u64> = m
                .tables
                .iter()
                .map(|t| t.written_bytes.map(|w| w * t.nodes.len() as u64))
                .sum();
            let _ = writeln!(
                o,
                "  footprint   {} over {} memory nodes once loaded: {}{}",
                crate::units::bytes(total),
                m.per_mn.len(),
                mns.join(", "),
                match written {
                    Some(w) => format!("; the load wrote {} of tables", crate::units::bytes(w)),
                    None => String::new(),
                }
            );
            let mns: Vec<String> = m
                .per_mn
                .iter()
                .map(|n| format!("mn{} {}", n.mn, crate::units::bytes(n.need_bytes)))
                .collect();
            let _ = writeln!(o, "  mn need     {}", mns.join(", "));
        }
        let _ = writeln!(
            o,
            "  invariant   {}: {}",
            if self.invariant.ok { "ok" } else { "VIOLATED" },
            self.invariant.detail
        );
        if self.isolation == dmtx_runtime::Isolation::Unchecked.name() {
            let _ = writeln!(
                o,
                "  isolation   UNCHECKED: `{}` is an unsafe upper bound; its commits promise no isolation, and --check does not apply",
                self.protocol
            );
        }
        if let Some(c) = &self.check {
            let _ = writeln!(o, "  {}", c.summary);
            for f in &c.findings {
                let _ = writeln!(o, "    {f}");
            }
        }
        if let Some(f) = &self.last_fault {
            let _ = writeln!(o, "  last fault  {f}");
        }
        if let Some(d) = &self.stop_detail {
            let _ = writeln!(o, "  stopped     {d}");
        }
        if let Some(p) = saved {
            let _ = writeln!(o, "  results     {}", p.display());
        }
        o
    }
}

/// Write `result` where `target` says, as a file. Returns the file written; `None` for
/// [`OutTarget::None`] and [`OutTarget::Stdout`] (the caller prints those). In a
/// directory, the file is `{stem}.json`, or `{stem}-{n}.json` if that is taken; an
/// existing file is never replaced there.
pub fn write(result: &BenchResult, target: &OutTarget, stem: &str) -> Result<Option<PathBuf>, RunError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| RunError::Write { path, error }
    };
    let json = result.to_json();
    match target {
        OutTarget::None | OutTarget::Stdout => Ok(None),
        OutTarget::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(io(dir))?;
            }
            std::fs::write(path, json).map_err(io(path))?;
            Ok(Some(path.clone()))
        }
        OutTarget::Dir(dir) => {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            const NAME_TRIES_MAX: u32 = 1000;
            for n in 0..NAME_TRIES_MAX {
                let name = if n == 0 {
                    format!("{stem}.json")
                } else {
                    format!("{stem}-{n}.json")
                };
                let path = dir.join(name);
                match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                    Ok(mut f) => {
                        f.write_all(json.as_bytes()).map_err(io(&path))?;
                        return Ok(Some(path));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io(&path)(e)),
                }
            }
            Err(io(dir)(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{NAME_TRIES_MAX} files named {stem}*.json already exist"),
            )))
        }
    }
}

/// Wall-clock time as Unix seconds, for the record's `started_at` and file name only.
///
/// The workspace bans `SystemTime::now` so that nothing a run computes depends on the
/// wall clock (STYLE.md "Deterministic simulation"); a label on the record is not such
/// a thing, and this crate is never driven by the simulator.
#[allow(clippy::disallowed_methods)]
pub fn wall_clock_unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        round(a as f64 / b as f64, 6)
    }
}

pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}

/// `YYYY-MM-DDTHH:MM:SSZ` for Unix seconds (proleptic Gregorian, UTC).
pub fn rfc3339_utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let rem = unix_s % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_rfc3339() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn test_per_commit_figures() {
        let mut s = RunStats::new(1);
        let mut c = PostCounters {
            rtts: 3,
            bytes_out: 100,
            bytes_in: 50,
            ts_requests: 2,
            ts_rtts: 1,
            ..Default::default()
        };
        c.ops[OpKind::Cas as usize] = 2;
        s.commit(0, &c, 5_000, true, 2);
        s.commit(0, &c, 7_000, true, 1);
        s.abort(
            0,
            AbortReason::LockConflict,
            &PostCounters {
                rtts: 1,
                ..Default::default()
            },
        );
        s.cleanup(
            0,
            &PostCounters {
                rtts: 3,
                background_posts: 1,
                ..Default::default()
            },
        );
        let t = TxnTypeResult::of(&s.types[0], &[]);
        assert_eq!(t.rtt_per_commit, Some(3.0));
        assert_eq!(
            t.cleanup_rtts_per_commit,
            Some(1.5),
            "3 cleanup round trips for 2 commits"
        );
        assert_eq!(t.cleanup_counters.background_posts, 1);
        assert_eq!(t.ops_per_commit.unwrap().cas, 2.0);
        assert_eq!(t.bytes_per_commit.unwrap().r#in, 50.0);
        assert_eq!(t.wasted_rtts_per_commit, Some(0.5));
        assert_eq!(t.attempts_per_commit, Some(1.5), "3 attempts for 2 commits");
        assert_eq!((t.ts_per_commit, t.ts_rtts_per_commit), (Some(2.0), Some(1.0)));
        assert_eq!((t.committed_counters.ts_requests, t.committed_counters.ts_rtts), (4, 2));
        assert_eq!(t.abort_rate, round(1.0 / 3.0, 6));
        assert_eq!(t.abort_reasons["lock_conflict"], 1);
        let l = t.latency_us.unwrap();
        assert!((4.99..=5.01).contains(&l.p50), "{l:?}");
        let empty = TxnTypeResult::of(&TypeStats::default(), &[]);
        assert_eq!(empty.rtt_per_commit, None);
        assert_eq!(empty.latency_us, None);
        let v = serde_json::to_value(&t).unwrap();
        assert!(v["bytes_per_commit"]["in"].is_number(), "{v}");
        assert_eq!(v["ts_rtts_per_commit"], 1.0, "{v}");
        // A record written before timestamps were counted still reads.
        let mut old = v.clone();
        let o = old.as_object_mut().unwrap();
        o.remove("ts_per_commit");
        o.remove("ts_rtts_per_commit");
        o.remove("cleanup_rtts_per_commit");
        o.remove("cleanup_counters");
        o.remove("msg_rtts_per_commit");
        o["committed_counters"].as_object_mut().unwrap().remove("ts_requests");
        o["committed_counters"].as_object_mut().unwrap().remove("msg_rtts");
        let back: TxnTypeResult = serde_json::from_value(old).unwrap();
        assert_eq!((back.ts_per_commit, back.committed_counters.ts_requests), (None, 0));
        assert_eq!((back.cleanup_rtts_per_commit, back.cleanup_counters.rtts), (None, 0));
        assert_eq!((back.msg_rtts_per_commit, back.committed_counters.msg_rtts), (None, 0));
    }

    #[test]
    fn test_protocol_figures_and_caches_merge_over_compute_nodes() {
        let spec = MetricSpec::new("hold_ns", MetricKind::Value, "lock hold time");
        let of = |values: &[u64], committed| {
            let mut sum = MetricSum::default();
            values.iter().for_each(|&v| sum.add(v));
            ProtocolMetricResult::of(&spec, &sum, committed, 1000)
        };
        let a = of(&[10, 30], 2);
        assert_eq!(
            (a.kind.as_str(), a.count, a.sum, a.mean, a.max),
            ("value", 2, 40, 20.0, 30)
        );
        assert_eq!(a.per_commit, Some(20.0));
        assert_eq!(of(&[], 0).per_commit, None);
        let mut into = BTreeMap::from([("hold_ns".to_string(), a)]);
        let other = BTreeMap::from([
            ("hold_ns".to_string(), of(&[50], 1)),
            ("only_there".to_string(), of(&[1], 1)),
        ]);
        merge_protocol_metrics(&mut into, &other);
        into.values_mut().for_each(|m| m.derive(3, 2000));
        let m = &into["hold_ns"];
        assert_eq!((m.count, m.sum, m.max, m.mean), (3, 90, 50, 30.0));
        assert_eq!(m.per_commit, Some(30.0));
        assert_eq!((m.p50, m.share), (None, None), "a value has no percentiles");
        assert_eq!(into["only_there"].sum, 1);

        // A duration's percentiles come from the merged histograms, its share from the
        // summed coordinator time.
        let dspec = MetricSpec::new("wait_ns", MetricKind::Duration, "a wait");
        let dof = |values: &[u64]| {
            let mut sum = MetricSum::default();
            values.iter().for_each(|&v| sum.add_ns(v));
            ProtocolMetricResult::of(&dspec, &sum, 1, 10_000)
        };
        let mut d = dof(&[100; 98]);
        assert_eq!((d.p50, d.p99, d.share), (Some(100), Some(100), Some(0.98)));
        d.merge(&dof(&[5000, 5000]));
        d.derive(2, 20_000);
        assert_eq!(d.count, 100);
        assert_eq!(d.p50, Some(100));
        assert!(d.p99.unwrap() >= 4990, "{d:?}");
        assert_eq!(d.share, Some(0.99));
        let json = serde_json::to_value(&d).unwrap();
        let back: ProtocolMetricResult = serde_json::from_value(json).unwrap();
        assert_eq!(back, d, "a duration round-trips through the record");

        let stats = |hits_local, misses| CacheStats {
            hits_local,
            hits_shared: 1,
            misses,
            evictions: 2,
        };
        let mut c = AddrCacheResult::of(&stats(9, 0), 5);
        assert_eq!((c.hits, c.hit_rate), (10, 1.0));
        c.merge(&AddrCacheResult::of(&stats(4, 10), 7));
        assert_eq!(
            (c.hits, c.hits_shared, c.misses, c.evictions, c.entries),
            (15, 2, 10, 4, 12)
        );
        assert_eq!(c.hit_rate, 0.6);
    }
}
