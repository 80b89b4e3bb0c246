//! Transaction hints end to end: a protocol that requires every key declared before
//! the first execute runs the workloads that declare them and is refused the others,
//! and `dmtx list` shows each workload's hints and the protocols it runs.
//!
//! Goal: a protocol that states `requires_declared_keys` (Calvin's need) sees, under the
//! real driver, only transactions begun with `keys_declared` whose whole set is added
//! before its first execute; the registry's pair check refuses it on a workload whose
//! types choose keys from what they read, naming those types and what to run instead;
//! `dmtx list` names the read-only and declaring types of each workload and the
//! protocols each runs. Method: [`Declared`], a test-only protocol (not registered in
//! the CLI) with no concurrency control, run by one coordinator on `kvs` and
//! `smallbank` on `mem`, counting what it sees; the pair check and the list text with it
//! added beside the registered protocols.
//!
//! [`Declared`]'s record: `key + 1 | value`, 8-byte words, one copy (`--replicas 1`).
//! Execute reads each object's home bucket (chains are one bucket long at these sizes;
//! a longer one is followed) and takes the value from it; commit writes the values of
//! the read-write objects back. With one coordinator, transactions run one after
//! another, so the workload's invariants hold without locks.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dmtx::config::TransportKind;
use dmtx::driver::{self, RunHooks, Silent};
use dmtx::registry::{self, protocol_entry, PROTOCOLS, WORKLOADS};
use dmtx::{BenchArgs, BenchConfig, OutTarget};
use dmtx_memnode::Control;
use dmtx_runtime::{Abort, AbortReason, Access, CoordCtx, Isolation, KnobError, KnobSpec, Knobs, Protocol, Txn};
use dmtx_store::{scan_bucket, SlotLayout, BUCKET_HEADER_BYTES};
use dmtx_verbs::Post;
use dmtx_workloads::{Kvs, SmallBank, Workload};

/// Where the key word ends and the value starts.
const VALUE: usize = 8;
/// Bucket READ rounds to locate one transaction's objects (chain length bound).
const LOOKUP_ROUNDS_MAX: u32 = 64;

/// What the protocol saw, shared with the test that runs it.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// Transactions whose (first) execute ran, all begun with `keys_declared`.
    declared: Arc<AtomicU64>,
    /// Of those, begun read-only.
    read_only: Arc<AtomicU64>,
    /// Executes that found objects already fetched: keys added after the first execute.
    added_after_execute: Arc<AtomicU64>,
    /// Read-write objects written back.
    written: Arc<AtomicU64>,
}

struct KeyLayout;

impl SlotLayout for KeyLayout {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        VALUE as u32 + value_bytes.next_multiple_of(8)
    }
    fn encode(&self, _table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        slot[..VALUE].copy_from_slice(&(key + 1).to_le_bytes());
        slot[VALUE..VALUE + value.len()].copy_from_slice(value);
    }
    fn key(&self, slot: &[u8]) -> Option<u64> {
        u64::from_le_bytes(slot[..VALUE].try_into().unwrap()).checked_sub(1)
    }
    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        &slot[VALUE..VALUE + value_bytes as usize]
    }
}

/// Test-only protocol that requires declared keys; one coordinator only.
struct Declared {
    seen: Seen,
}

#[derive(Debug, Default)]
struct Located {
    /// Table-relative offset of its slot.
    rel: Option<u64>,
}

fn fault(_: dmtx_verbs::VerbError) -> Abort {
    Abort::new(AbortReason::Fault)
}

impl Protocol for Declared {
    type CoordState = ();
    type ObjState = Located;
    type CnState = ();
    type ThreadState = ();
    const NAME: &'static str = "toy-declared";
    const ABOUT: &'static str = "test-only: requires every key declared before the first execute";
    const KNOBS: &'static [KnobSpec] = &[];

    fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
        Ok(Self { seen: Seen::default() })
    }
    /// No concurrency control: one coordinator runs transactions one at a time.
    fn isolation(&self) -> Isolation {
        Isolation::Unchecked
    }
    fn layout(&self) -> &dyn SlotLayout {
        &KeyLayout
    }
    fn coord_state(&self, _: &CoordCtx, _: &dyn Control) -> dmtx_runtime::Result<()> {
        Ok(())
    }
    fn requires_declared_keys(&self) -> bool {
        true
    }

    async fn execute(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let hints = txn.hints();
        let coord = &mut *txn.coord;
        let seen = &coord.proto.seen;
        assert!(hints.keys_declared, "the runtime lets no undeclared transaction begin");
        if coord.set.fetched > 0 {
            seen.added_after_execute.fetch_add(1, Ordering::Relaxed);
        }
        seen.declared.fetch_add(1, Ordering::Relaxed);
        if hints.read_only {
            seen.read_only.fetch_add(1, Ordering::Relaxed);
        }
        let catalog = Arc::clone(&coord.ctx.catalog);
        let n = coord.set.objs.len();
        let mut buckets: Vec<u64> = coord
            .set
            .objs
            .iter()
            .map(|o| catalog.get(o.table).unwrap().shape.home_bucket(o.key))
            .collect();
        for round in 1.. {
            assert!(
                round <= LOOKUP_ROUNDS_MAX,
                "bucket chain longer than {LOOKUP_ROUNDS_MAX}"
            );
            let mut post = Post::new();
            let mut reads = Vec::new();
            for (i, o) in coord.set.objs.iter().enumerate() {
                assert!(
                    matches!(o.access, Access::ReadOnly | Access::ReadWrite),
                    "toy-declared neither inserts nor deletes"
                );
                if o.proto.rel.is_some() {
                    continue;
                }
                let shape = &catalog.get(o.table).unwrap().shape;
                let ptr = catalog.get(o.table).unwrap().ptr(0, shape.bucket_off(buckets[i]));
                reads.push((i, post.read(ptr, shape.bucket_bytes as usize)));
            }
            if reads.is_empty() {
                break;
            }
            coord.ctx.post(&mut post).await.map_err(fault)?;
            for (i, read) in reads {
                let (table, key) = (coord.set.objs[i].table, coord.set.objs[i].key);
                let shape = &catalog.get(table).unwrap().shape;
                let bucket = post.bytes(read);
                let scan = scan_bucket(shape, &KeyLayout, bucket, key);
                match (scan.found, scan.next) {
                    (Some(slot), _) => {
                        let at = (BUCKET_HEADER_BYTES + slot * shape.slot_bytes) as usize + VALUE;
                        let len = coord.set.objs[i].value_len as usize;
                        let value = bucket[at..at + len].to_vec();
                        coord.set.value_mut(i).copy_from_slice(&value);
                        coord.set.objs[i].proto.rel = Some(shape.slot_off(buckets[i], slot));
                    }
                    (None, Some(next)) => buckets[i] = next,
                    (None, None) => return Err(Abort::new(AbortReason::NotFound)),
                }
            }
        }
        coord.set.fetched = n;
        Ok(())
    }

    async fn commit(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
        let coord = &mut *txn.coord;
        let catalog = Arc::clone(&coord.ctx.catalog);
        let mut post = Post::new();
        for (i, o) in coord.set.objs.iter().enumerate() {
            if o.access != Access::ReadWrite {
                continue;
            }
            let ptr = catalog
                .get(o.table)
                .unwrap()
                .ptr(0, o.proto.rel.unwrap() + VALUE as u64);
            post.write(ptr, coord.set.value(i));
            coord.proto.seen.written.fetch_add(1, Ordering::Relaxed);
        }
        if !post.is_empty() {
            coord.ctx.post(&mut post).await.map_err(fault)?;
        }
        Ok(())
    }

    /// Nothing to release: it takes no locks.
    fn abort(_: &mut Txn<'_, Self>) {}
}

fn run<W: Workload>(knobs: &[&str]) -> (dmtx::results::BenchResult, Seen) {
    let knobs = Knobs::parse(knobs.iter().copied()).unwrap();
    let mut cfg = BenchConfig::from_args_unchecked(
        &BenchArgs {
            protocol: Declared::NAME.into(),
            workload: W::NAME.into(),
            threads: 1,
            coroutines: 1,
            txns: Some(400),
            replicas: Some(1),
            transport: TransportKind::Mem,
            out: "-".into(),
            quiet: true,
            ..BenchArgs::default()
        },
        knobs.clone(),
    )
    .unwrap();
    cfg.out = OutTarget::None;
    let proto = Declared::from_knobs(&knobs).unwrap();
    let seen = proto.seen.clone();
    let stop = AtomicBool::new(false);
    let r = driver::run(
        proto,
        W::from_knobs(&knobs).unwrap(),
        &cfg,
        &RunHooks {
            stop: &stop,
            monitor: &Silent,
            probes: None,
        },
    )
    .unwrap();
    (r, seen)
}

/// (a) On workloads whose every type declares its keys, the protocol runs to the end,
/// sees `keys_declared` on every transaction and never a key added after the first
/// execute; read-only types arrive read-only; the invariants hold.
#[test]
fn a_protocol_requiring_declared_keys_runs_the_workloads_that_declare_them() {
    for (name, (r, seen)) in [
        ("kvs", run::<Kvs>(&["keys=1000", "objects=4"])),
        ("smallbank", run::<SmallBank>(&["accounts=1000"])),
    ] {
        assert!(r.invariant.ok, "{name}: {}", r.invariant.detail);
        let declared = seen.declared.load(Ordering::Relaxed);
        assert!(declared >= 400, "{name}: every transaction executes once: {declared}");
        assert_eq!(seen.added_after_execute.load(Ordering::Relaxed), 0, "{name}");
        let read_only = seen.read_only.load(Ordering::Relaxed);
        assert!(
            read_only > 0 && read_only < declared,
            "{name}: both kinds ran: {read_only} of {declared}"
        );
        assert!(
            seen.written.load(Ordering::Relaxed) > 0,
            "{name}: read-write types wrote"
        );
    }
}

/// (b) The pair check refuses the protocol on TPC-C and TATP before anything is built,
/// in one line naming the types that cannot declare their keys and what to run
/// instead; the pairs that run pass it.
#[test]
fn the_pair_check_refuses_a_workload_that_cannot_declare_its_keys() {
    let entry = |name: &str| WORKLOADS.iter().find(|w| w.name == name).unwrap();
    let check = |workload: &str, knobs: &[&str]| {
        let knobs = Knobs::parse(knobs.iter().copied()).unwrap();
        registry::check_pair(Declared::NAME, true, entry(workload), &knobs, PROTOCOLS, WORKLOADS)
    };
    let e = check("tpcc", &[]).unwrap_err().to_string();
    assert_eq!(
        e,
        "--protocol toy-declared requires every key declared before the first execute, which \
         workload `tpcc` cannot do in new_order, payment, order_status, delivery, stock_level \
         (they pick keys from what they read); run toy-declared on kvs, smallbank, ycsb; or run \
         tpcc with ford, farm, drtmh, fordlv, motor, oocc, drtm, nowait, waitdie, woundwait, to"
    );
    assert!(!e.contains('\n'));
    // FORD's variant makes Payment declare its keys; the others still read first.
    let e = check("tpcc", &["tpcc_variant=ford"]).unwrap_err().to_string();
    assert!(
        e.contains("cannot do in new_order, order_status, delivery, stock_level ("),
        "{e}"
    );
    let e = check("tatp", &[]).unwrap_err().to_string();
    assert!(
        e.contains(
            "cannot do in get_new_destination, update_location, insert_call_forwarding, delete_call_forwarding ("
        ),
        "{e}"
    );
    let e = check("tatp", &["sub_nbr_index=false"]).unwrap_err().to_string();
    assert!(e.contains("cannot do in get_new_destination ("), "{e}");
    for ok in ["kvs", "smallbank", "ycsb"] {
        check(ok, &[]).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    // A protocol that requires nothing runs every workload.
    for w in WORKLOADS {
        registry::check_pair("ford", false, w, &Knobs::default(), PROTOCOLS, WORKLOADS).unwrap();
    }
}

/// The lines of `name`'s entry in `dmtx list` text: its first line and the indented
/// lines under it.
fn section(text: &str, name: &str) -> String {
    let head = format!("  {name:<12} ");
    let mut lines = text.lines().skip_while(|l| !l.starts_with(&head));
    let first = lines.next().unwrap_or_else(|| panic!("no entry `{name}`: {text}"));
    let mut out = format!("{first}\n");
    for l in lines.take_while(|l| l.starts_with(&" ".repeat(15))) {
        out += l;
        out.push('\n');
    }
    out
}

/// `dmtx list` names, per workload, its read-only types, the types that declare their
/// keys and the protocols it runs; with the toy beside FORD, only the declaring
/// workloads list it, and the toy's requirement is shown.
#[test]
fn list_shows_hints_and_which_protocols_run_each_workload() {
    let out = common::dmtx(&["list"]);
    assert!(out.status.success());
    let text = common::text(&out.stdout);
    let tpcc = section(&text, "tpcc");
    assert!(tpcc.contains("read-only: order_status, stock_level\n"), "{tpcc}");
    assert!(tpcc.contains("keys declared up front: none\n"), "{tpcc}");
    assert!(
        tpcc.contains("protocols: ford, farm, drtmh, fordlv, motor, oocc, drtm, nowait, waitdie, woundwait, to\n"),
        "{tpcc}"
    );
    let tatp = section(&text, "tatp");
    assert!(
        tatp.contains("read-only: get_subscriber_data, get_new_destination, get_access_data\n"),
        "{tatp}"
    );
    let kvs = section(&text, "kvs");
    assert!(kvs.contains("keys declared up front: read_only, read_write\n"), "{kvs}");

    let with_toy = [PROTOCOLS[0], protocol_entry::<Declared>()];
    let text = registry::render_list_of(&with_toy, WORKLOADS);
    for w in ["kvs", "smallbank", "ycsb"] {
        assert!(
            section(&text, w).contains("protocols: ford, toy-declared\n"),
            "{w}: {text}"
        );
    }
    for w in ["tatp", "tpcc"] {
        assert!(section(&text, w).contains("protocols: ford\n"), "{w}: {text}");
    }
    assert!(
        section(&text, "toy-declared").contains("requires: every key declared before the first execute"),
        "{text}"
    );
}
