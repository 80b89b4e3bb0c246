//! Counters and figures any protocol can add, in the run's record (issue 26, item 11).
//!
//! Goal: what a protocol declares (its own abort reasons, its own figures, its CN↔CN
//! round trips) and what every run now counts (address-cache lookups, the memory plan)
//! reach the JSON record and the summary with values that follow from the run. Method:
//! [`Coin`], a test-only protocol (not registered in the CLI) that declares a retryable
//! abort reason `coin_flip` (every 4th commit attempt of a coordinator takes it), two
//! figures, and messages its own worker once per commit attempt; it runs KVS serially
//! (one coordinator, so no concurrency control is needed) through the real driver on
//! `mem`. FORD runs through the registry on `mem` and `sim`, and the `dmtx` binary
//! prints the new summary lines.
//!
//! [`Coin`]'s record: `key + 1 | value`, 8-byte words, one copy. Round trips of an
//! attempt: per object either its cached address or one bucket READ per chain bucket,
//! then one READ round of every new object's slot; at commit, one message round trip to
//! its own worker and one WRITE round.

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::{dmtx, run_registry, scratch_dir, text};
use dmtx::config::TransportKind;
use dmtx::driver::{self, RunHooks, Silent};
use dmtx::results::BenchResult;
use dmtx::{BenchArgs, BenchConfig};
use dmtx_memnode::Control;
use dmtx_runtime::rpc::{Handled, Request, Rpc};
use dmtx_runtime::{
    Abort, AbortReason, AbortReasonSpec, Access, CoordCtx, Isolation, KnobError, KnobSpec, Knobs, MetricKind,
    MetricSpec, Protocol, Txn,
};
use dmtx_store::{scan_bucket, SlotLayout};
use dmtx_verbs::Post;
use dmtx_workloads::kvs::Kvs;
use dmtx_workloads::Workload;

const KEY: usize = 0;
const VALUE: usize = 8;
/// Bucket READ rounds to locate one attempt's objects (chain length bound).
const LOOKUP_ROUNDS_MAX: u64 = 64;
/// Every this many commit attempts, a coordinator aborts with `coin_flip`.
const FLIP_EVERY: u64 = 4;

/// `Coin::ABORT_REASONS` index of `coin_flip`.
const COIN_FLIP: u8 = 0;
/// `Coin::METRICS` indexes.
const FETCHED: usize = 0;
const WALK_ROUNDS: usize = 1;

struct KeyLayout;

impl SlotLayout for KeyLayout {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        VALUE as u32 + value_bytes.next_multiple_of(8)
    }
    fn encode(&self, _table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        slot[KEY..VALUE].copy_from_slice(&(key + 1).to_le_bytes());
        slot[VALUE..VALUE + value.len()].copy_from_slice(value);
    }
    fn key(&self, slot: &[u8]) -> Option<u64> {
        u64::from_le_bytes(slot[KEY..VALUE].try_into().unwrap()).checked_sub(1)
    }
    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        &slot[VALUE..VALUE + value_bytes as usize]
    }
}

#[derive(Debug, Default)]
struct CoinObj {
    /// Bucket to read next while locating.
    bucket: Option<u64>,
    /// Table-relative slot offset, once located.
    rel: Option<u64>,
}

/// Test-only: reads and writes without concurrency control, for one coordinator.
struct Coin {
    layout: KeyLayout,
    /// Message its own worker once per commit (not on `sim`, which has no messaging).
    messaging: bool,
}

/// A step `Coin` declares in `CPU_STEPS`, once per commit attempt.
const STEP_COMMIT: &str = "coin.commit";
/// A step `Coin` charges without declaring it: the simulator names it as unpriced.
const STEP_UNDECLARED: &str = "coin.undeclared";

fn fault(_: dmtx_verbs::VerbError) -> Abort {
    Abort::new(AbortReason::Fault)
}

impl Protocol for Coin {
    /// Commit attempts so far.
    type CoordState = u64;
    type ObjState = CoinObj;
    type CnState = ();
    type ThreadState = ();
    const NAME: &'static str = "toy-coin";
    const ABOUT: &'static str = "test-only: declares an abort reason, figures and messages";
    const KNOBS: &'static [KnobSpec] = &[];
    const ABORT_REASONS: &'static [AbortReasonSpec] = &[AbortReasonSpec::new(
        "coin_flip",
        true,
        "every 4th commit attempt of a coordinator",
    )];
    const CPU_STEPS: &'static [(&'static str, u64)] = &[(STEP_COMMIT, 30)];
    const METRICS: &'static [MetricSpec] = &[
        MetricSpec::new("objects_fetched", MetricKind::Counter, "slots read by execute"),
        MetricSpec::new(
            "walk_rounds",
            MetricKind::Value,
            "bucket READ rounds per execute (0: every address was cached)",
        ),
    ];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(Self {
            layout: KeyLayout,
            messaging: true,
        })
    }
    fn isolation(&self) -> Isolation {
        Isolation::Unchecked
    }
    fn messaging(&self) -> bool {
        self.messaging
    }
    fn layout(&self) -> &dyn SlotLayout {
        &self.layout
    }
    fn coord_state(&self, ctx: &CoordCtx, _: &dyn Control) -> dmtx_runtime::Result<u64> {
        // The driver's sizing of one coordinator's areas runs without messaging.
        if let Some(rpc) = &ctx.rpc {
            rpc.set_handler(|_: &Rpc, _: Request<'_>, _: &mut Vec<u8>| Handled::Reply);
        }
        Ok(0)
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let coord = &mut *txn.coord;
        let (from, n) = (coord.set.fetched, coord.set.objs.len());
        let catalog = Arc::clone(&coord.ctx.catalog);
        let proto = Arc::clone(&coord.proto);
        for i in from..n {
            let o = &mut coord.set.objs[i];
            assert!(matches!(o.access, Access::ReadOnly | Access::ReadWrite));
            o.proto.rel = coord.ctx.cache.get(o.table, o.key);
        }
        let mut rounds = 0;
        loop {
            let mut post = Post::new();
            let mut reads = Vec::new();
            for i in from..n {
                let o = &mut coord.set.objs[i];
                if o.proto.rel.is_some() {
                    continue;
                }
                let info = catalog.get(o.table).unwrap();
                let b = *o.proto.bucket.get_or_insert(info.shape.home_bucket(o.key));
                let read = post.read(info.ptr(0, info.shape.bucket_off(b)), info.shape.bucket_bytes as usize);
                reads.push((i, b, read));
            }
            if reads.is_empty() {
                break;
            }
            rounds += 1;
            assert!(
                rounds <= LOOKUP_ROUNDS_MAX,
                "bucket chain longer than {LOOKUP_ROUNDS_MAX}"
            );
            coord.ctx.post(&mut post).await.map_err(fault)?;
            for (i, b, read) in reads {
                let o = &mut coord.set.objs[i];
                let shape = &catalog.get(o.table).unwrap().shape;
                let scan = scan_bucket(shape, proto.layout(), post.bytes(read), o.key);
                match (scan.found, scan.next) {
                    (Some(slot), _) => {
                        let rel = shape.slot_off(b, slot);
                        o.proto.rel = Some(rel);
                        coord.ctx.cache.put(o.table, o.key, rel);
                    }
                    (None, Some(next)) => o.proto.bucket = Some(next),
                    (None, None) => return Err(Abort::new(AbortReason::NotFound)),
                }
            }
        }
        coord.ctx.metric(WALK_ROUNDS, rounds);
        let mut post = Post::new();
        let mut reads = Vec::new();
        for i in from..n {
            let o = &coord.set.objs[i];
            let info = catalog.get(o.table).unwrap();
            let ptr = info.ptr(0, o.proto.rel.unwrap());
            reads.push((i, post.read(ptr, info.shape.slot_bytes as usize)));
        }
        if !post.is_empty() {
            coord.ctx.post(&mut post).await.map_err(fault)?;
        }
        for (i, read) in reads {
            let slot = post.bytes(read);
            let o = &coord.set.objs[i];
            // KVS never deletes: a cached address stays right.
            assert_eq!(KeyLayout.key(slot), Some(o.key), "slot holds its key");
            let value = slot[VALUE..VALUE + o.value_len as usize].to_vec();
            coord.set.value_mut(i).copy_from_slice(&value);
            coord.ctx.metric(FETCHED, 1);
        }
        coord.set.fetched = n;
        Ok(())
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let coord = &mut *txn.coord;
        coord.ctx.step(STEP_COMMIT, 1);
        coord.ctx.step(STEP_UNDECLARED, 1);
        coord.state += 1;
        if coord.state.is_multiple_of(FLIP_EVERY) {
            return Err(Abort::new(AbortReason::Protocol(COIN_FLIP)));
        }
        if coord.proto.messaging {
            let me = coord.ctx.rpc.as_ref().unwrap().addr();
            coord.ctx.call(me, b"ping").await.expect("a worker answers itself");
        }
        let catalog = Arc::clone(&coord.ctx.catalog);
        let mut post = Post::new();
        for i in 0..coord.set.objs.len() {
            let o = &coord.set.objs[i];
            if o.access != Access::ReadWrite {
                continue;
            }
            let ptr = catalog
                .get(o.table)
                .unwrap()
                .ptr(0, o.proto.rel.unwrap() + VALUE as u64);
            post.write(ptr, coord.set.value(i));
        }
        if !post.is_empty() {
            coord.ctx.post(&mut post).await.map_err(fault)?;
        }
        Ok(())
    }

    fn abort(_: &mut Txn<'_, Self>) {}
}

const KEYS: u64 = 64;

fn kvs_args(transport: TransportKind) -> BenchArgs {
    BenchArgs {
        workload: "kvs".into(),
        set: vec![format!("keys={KEYS}")],
        transport,
        threads: 1,
        coroutines: 1,
        txns: Some(600),
        replicas: Some(1),
        out: "-".into(),
        quiet: true,
        ..BenchArgs::default()
    }
}

fn run_coin() -> BenchResult {
    run_coin_on(TransportKind::Mem)
}

fn run_coin_on(transport: TransportKind) -> BenchResult {
    let cfg = BenchConfig::from_args(&kvs_args(transport)).unwrap();
    let stop = AtomicBool::new(false);
    let hooks = RunHooks {
        stop: &stop,
        monitor: &Silent,
        probes: None,
    };
    let kvs = Kvs::from_knobs(&cfg.knobs).unwrap();
    let coin = Coin {
        layout: KeyLayout,
        messaging: transport != TransportKind::Sim,
    };
    driver::run(coin, kvs, &cfg, &hooks).unwrap()
}

/// Goal: a protocol's own abort reason is counted, named in the record and the summary,
/// and retried because its spec says so. Method: every 4th commit attempt of the one
/// coordinator aborts with `coin_flip` (retryable), so about a quarter of the attempts
/// abort, and each is retried: attempts per commit exceed 1 (a reason the driver did not
/// retry would leave every commit's attempts at 1, under `--txns`).
#[test]
fn a_protocols_own_abort_reason_is_named_counted_and_retried() {
    let r = run_coin();
    assert!(r.invariant.ok, "{}", r.invariant.detail);
    let flips = r.abort_reasons["coin_flip"];
    assert_eq!(flips, r.aborted, "the only aborts: {:?}", r.abort_reasons);
    // Every 4th of the attempts that reach the commit (all of them: nothing else aborts).
    assert_eq!(flips, r.attempted / FLIP_EVERY, "{r:?}");
    assert!(
        r.abort_reasons.contains_key("lock_conflict"),
        "shared reasons stay, zeros included"
    );
    let by_type: u64 = r
        .per_txn_type
        .values()
        .map(|t| t.abort_reasons.get("coin_flip").copied().unwrap_or(0))
        .sum();
    assert_eq!(by_type, flips);
    let attempts = r.total.attempts_per_commit.unwrap();
    assert!(attempts > 1.2, "coin_flip is retried: {attempts} attempts per commit");
    assert!(
        r.summary(None).contains(&format!("coin_flip {flips}")),
        "{}",
        r.summary(None)
    );
}

/// Goal: a protocol's figures are summed from its coordinators into `protocol_metrics`
/// with their kind, and its CN↔CN calls are counted as message round trips per commit,
/// apart from the memory-node round trips. Method: `Coin` adds 1 per slot fetched
/// (`objects_fetched`, a counter) and the bucket rounds of every execute (`walk_rounds`,
/// a value); it messages once per commit attempt that passes the coin, so exactly once
/// per commit.
#[test]
fn protocol_figures_and_message_round_trips_reach_the_record() {
    let r = run_coin();
    let fetched = &r.protocol_metrics["objects_fetched"];
    assert_eq!(fetched.kind, "counter");
    // KVS reads `objects` keys per attempt: every attempt fetched them.
    let per_attempt = fetched.sum as f64 / r.attempted as f64;
    assert!(
        per_attempt >= 1.0 && per_attempt == per_attempt.round(),
        "{fetched:?}, {} attempts",
        r.attempted
    );
    assert_eq!(fetched.count, fetched.sum, "added 1 at a time");
    let walks = &r.protocol_metrics["walk_rounds"];
    assert_eq!(walks.kind, "value");
    assert_eq!(walks.count, r.attempted, "one per execute: {walks:?}");
    assert!(walks.max >= 1, "a cold cache walks: {walks:?}");
    assert!(walks.mean < 0.5, "most executes find every address cached: {walks:?}");
    assert_eq!(r.total.msg_rtts_per_commit, Some(1.0), "{:?}", r.total);
    assert_eq!(r.total.committed_counters.msg_rtts, r.committed);
    assert_eq!(r.total.aborted_counters.msg_rtts, 0, "coin_flip aborts before the call");
    for (name, t) in &r.per_txn_type {
        if t.committed > 0 {
            assert_eq!(t.msg_rtts_per_commit, Some(1.0), "{name}");
        }
    }
    // Memory-node round trips stay apart: a commit is at least one READ round and its
    // message, never counted as one.
    assert!(r.total.rtt_per_commit.unwrap() >= 1.0);
    let summary = r.summary(None);
    assert!(summary.contains("objects_fetched"), "{summary}");
    assert!(summary.contains("1.00 CN-to-CN round trips per commit"), "{summary}");
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["protocol_metrics"]["walk_rounds"]["count"], walks.count);
    assert_eq!(json["total"]["msg_rtts_per_commit"], 1.0);
}

/// Goal: the address cache's counters follow a cold start: misses while it fills, hits
/// once every key is cached; its entries are the keys touched. Method: `Coin`, whose only
/// lookups are the cache's, over 64 keys and 600 commits (no warm-up under `--txns`).
#[test]
fn the_address_cache_misses_when_cold_and_hits_once_warm() {
    let r = run_coin();
    let c = r.addr_cache.as_ref().expect("every run reports its cache");
    assert!(c.misses > 0 && c.misses <= KEYS, "one miss per key at most: {c:?}");
    assert!(c.hits > 10 * c.misses, "{c:?}");
    assert_eq!(c.hits_shared, 0, "one thread: nothing learned from another");
    assert_eq!(c.entries, c.misses, "every miss cached its key: {c:?}");
    assert_eq!(c.evictions, 0);
    assert!((c.hit_rate - c.hits as f64 / (c.hits + c.misses) as f64).abs() < 1e-6);
}

/// Goal: FORD's declared figure (`rereads`) and the memory plan appear on every
/// transport, and FORD's CPU steps come from its declaration on `sim`. Method: FORD on
/// KVS through the registry, on `mem` and `sim`; the memory plan's table and nodes match
/// the run's shape; on `sim`, the recorded profile lists FORD's steps at their declared
/// costs.
#[test]
fn ford_reports_its_figure_the_cache_and_the_memory_plan() {
    for transport in [TransportKind::Mem, TransportKind::Sim] {
        let mut args = kvs_args(transport);
        args.threads = 2;
        args.coroutines = 4;
        args.replicas = Some(2);
        args.txns = None;
        args.duration = Some(
            if transport == TransportKind::Sim {
                "5ms"
            } else {
                "100ms"
            }
            .into(),
        );
        let r = run_registry(&args);
        let rereads = &r.protocol_metrics["rereads"];
        assert_eq!(rereads.kind, "counter", "{transport:?}");
        assert_eq!(rereads.count, rereads.sum);
        let c = r.addr_cache.as_ref().unwrap();
        assert!(c.hits > c.misses, "{transport:?}: {c:?}");
        assert!(c.entries > 0 && c.entries <= KEYS, "{transport:?}: {c:?}");
        let m = r.memory.as_ref().expect("the memory plan");
        assert_eq!(m.tables.len(), 1);
        assert_eq!(m.tables[0].name, "kvs");
        assert_eq!(m.tables[0].nodes.len(), 2, "two replicas");
        assert!(m.tables[0].loaded_bytes > 0 && m.tables[0].full_bytes >= m.tables[0].loaded_bytes);
        assert_eq!(m.per_mn.len(), r.config.memory_nodes as usize);
        for n in &m.per_mn {
            assert!(n.need_bytes >= n.tables_bytes + n.coordinators_bytes, "{n:?}");
        }
        if transport == TransportKind::Sim {
            let sim = r.sim.as_ref().unwrap();
            let steps = &sim.profile_params["cpu"]["steps"];
            for (name, ns) in dmtx_protocols::ford::CPU_STEPS {
                assert_eq!(steps[*name], *ns, "{name}: {steps}");
            }
            assert!(
                sim.unpriced_steps.is_empty(),
                "FORD declares every step: {:?}",
                sim.unpriced_steps
            );
        }
    }
}

/// Goal: the binary prints the new lines and writes the new fields. Method: `dmtx bench`
/// on KVS, JSON to a file.
#[test]
fn the_binary_prints_and_records_the_new_figures() {
    let dir = scratch_dir("metrics_binary");
    let out = dir.join("run.json");
    let o = dmtx(&[
        "bench",
        "-w",
        "kvs",
        "--txns",
        "2000",
        "--set",
        "keys=64",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    for line in ["addr cache", "rereads", "memory      per replica", "mn need"] {
        assert!(stdout.contains(line), "`{line}` missing:\n{stdout}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(v["addr_cache"]["misses"].as_u64().unwrap() > 0);
    assert!(v["memory"]["per_mn"][0]["need_bytes"].as_u64().unwrap() > 0);
    assert!(v["protocol_metrics"]["rereads"]["sum"].is_u64());
    assert_eq!(v["total"]["msg_rtts_per_commit"], 0.0, "FORD sends no messages");
}

/// Goal: on `sim`, a protocol's declared steps join the CPU model at their declared
/// cost, and a step it charges without declaring is named in the record and the summary
/// (it costs `step_default_ns`). Method: `Coin` on `sim` (without messaging) declares
/// `coin.commit` at 30 ns and charges `coin.undeclared` too.
#[test]
fn the_simulator_prices_declared_steps_and_names_undeclared_ones() {
    let r = run_coin_on(TransportKind::Sim);
    assert!(r.committed > 0);
    let sim = r.sim.as_ref().unwrap();
    assert_eq!(sim.profile_params["cpu"]["steps"][STEP_COMMIT], 30);
    assert_eq!(sim.unpriced_steps, [STEP_UNDECLARED]);
    assert!(r.summary(None).contains("coin.undeclared charged at the default cost"));
    assert_eq!(r.total.msg_rtts_per_commit, Some(0.0), "no messaging on sim");
    assert!(r.abort_reasons["coin_flip"] > 0, "{:?}", r.abort_reasons);
}

/// Goal: an unsafe upper bound (`Isolation::Unchecked`) runs under `--check` and is
/// marked as such: the record says `unchecked`, holds no check (no history was kept
/// to check), and the summary says no isolation is promised. Method: [`Coin`], which
/// claims `Unchecked`, through the driver with `--check`.
#[test]
fn an_unchecked_protocol_runs_under_check_and_is_marked_unsafe() {
    let cfg = BenchConfig::from_args(&BenchArgs {
        check: true,
        ..kvs_args(TransportKind::Mem)
    })
    .unwrap();
    let stop = AtomicBool::new(false);
    let hooks = RunHooks {
        stop: &stop,
        monitor: &Silent,
        probes: None,
    };
    let kvs = Kvs::from_knobs(&cfg.knobs).unwrap();
    let coin = Coin {
        layout: KeyLayout,
        messaging: true,
    };
    let r = driver::run(coin, kvs, &cfg, &hooks).unwrap();
    assert!(r.committed > 0);
    assert_eq!(r.isolation, "unchecked");
    assert!(r.check.is_none(), "no check applies to an upper bound");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["isolation"], "unchecked");
    assert!(json["check"].is_null(), "{}", json["check"]);
    let summary = r.summary(None);
    assert!(
        summary.contains("UNCHECKED") && summary.contains("--check does not apply"),
        "{summary}"
    );
}

/// Goal: FaRM's `addr_cache` knob decides whether its compute node learns addresses
/// (FORD's code gives FaRM none: every execution reads the home bucket). Method: the same
/// KVS run with the knob off (the default) and on; the record's cache figures.
#[test]
fn farm_learns_addresses_only_with_its_cache_on() {
    let args = |set: &[&str]| BenchArgs {
        protocol: "farm".into(),
        set: [format!("keys={KEYS}")]
            .into_iter()
            .chain(set.iter().map(|s| s.to_string()))
            .collect(),
        ..kvs_args(TransportKind::Mem)
    };
    let off = run_registry(&args(&[]));
    let c = off.addr_cache.as_ref().unwrap();
    assert_eq!((c.hits, c.entries), (0, 0), "no cache: {c:?}");
    let on = run_registry(&args(&["addr_cache=true"]));
    let c = on.addr_cache.as_ref().unwrap();
    assert!(c.entries > 0 && c.hits > c.misses, "{c:?}");
    assert_eq!(c.bytes, c.entries * 24, "the cache's size: 24 bytes an entry");
}
