//! Compute nodes as separate processes over `tcp`: `dmtx cluster up --compute-nodes`,
//! `dmtx report` merging one run's CN records, `dmtx check` over several histories.
//!
//! Goal: three FORD compute-node processes meet at two memory-node processes, run one
//! run together, and their records and histories merge into cluster totals and one clean
//! check; records of different runs stay apart; an anomaly whose transactions are split
//! across two history files is caught only when the files are checked together.
//! Method: the built binary on loopback (one run shared by the tests that read its
//! records), and hand-written histories.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{dmtx, scratch_dir, text};
use dmtx::results::BenchResult;

/// Commits of the shared run, over all compute nodes.
const TXNS: u64 = 3000;

/// The shared three-CN run: its stdout, stderr, exit code and records.
struct Run {
    stdout: String,
    stderr: String,
    code: Option<i32>,
    records: Vec<PathBuf>,
}

fn three_cn_run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = scratch_dir("three_cn_run");
        let out = dir.join("run.json");
        let out_s = out.display().to_string();
        let txns = TXNS.to_string();
        let o = dmtx(&[
            "cluster",
            "up",
            "--local",
            "2",
            "--size",
            "256MiB",
            "--compute-nodes",
            "3",
            "--",
            "bench",
            "--protocol",
            "ford",
            "-w",
            "kvs",
            "--set",
            "keys=2000",
            "--threads",
            "1",
            "--coroutines",
            "4",
            "--txns",
            &txns,
            "--check",
            "-o",
            &out_s,
        ]);
        Run {
            stdout: text(&o.stdout),
            stderr: text(&o.stderr),
            code: o.status.code(),
            records: (0..3).map(|i| dir.join(format!("run-cn{i}.json"))).collect(),
        }
    })
}

fn record(path: &Path) -> BenchResult {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn three_ford_cns_run_as_one_and_merge_into_a_clean_total() {
    let run = three_cn_run();
    assert_eq!(run.code, Some(0), "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let recs: Vec<BenchResult> = run.records.iter().map(|p| record(p)).collect();
    let run_id = &recs[0].cn.as_ref().expect("a --cn record").run_id;
    for (i, r) in recs.iter().enumerate() {
        let cn = r.cn.as_ref().unwrap();
        assert_eq!((cn.id, cn.compute_nodes), (i as u16, 3));
        assert_eq!(&cn.run_id, run_id, "one run id for every CN");
        assert_eq!(r.transport, "tcp");
        // Each CN ran its share; none checked alone.
        assert_eq!(r.committed, TXNS / 3, "cn{i}");
        assert!(r.check.is_none());
        assert!(
            r.invariant.detail.contains("not checked by cn"),
            "{}",
            r.invariant.detail
        );
    }
    assert!(
        run.stderr.contains(&format!("merged 3 CN records of run {run_id}")),
        "{}",
        run.stderr
    );
    // The merged row: 3 CNs, the whole budget, and one clean check of every history.
    let row = run
        .stdout
        .lines()
        .find(|l| l.contains(&format!("run-{run_id}")))
        .unwrap();
    assert!(row.contains("tcp   3"), "{row}");
    assert!(!row.contains(" ok "), "no invariant was checked across the CNs: {row}");
    assert!(
        run.stdout.contains(&format!("({TXNS} committed), no anomalies")),
        "{}",
        run.stdout
    );
}

#[test]
fn report_merges_one_runs_records_with_percentiles_of_the_merged_histogram() {
    let run = three_cn_run();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let recs: Vec<(PathBuf, BenchResult)> = run.records.iter().map(|p| (p.clone(), record(p))).collect();
    let merged = dmtx::report::merge_cn_runs(recs.clone());
    assert_eq!(merged.runs.len(), 1);
    let m = &merged.runs[0].1;
    assert_eq!(m.committed, TXNS);
    assert_eq!(m.attempted, recs.iter().map(|(_, r)| r.attempted).sum::<u64>());
    let tps: f64 = recs.iter().map(|(_, r)| r.committed_tps).sum();
    assert!((m.committed_tps - tps).abs() < 1.0, "{} vs {tps}", m.committed_tps);
    assert_eq!(
        m.total.committed_counters.rtts,
        recs.iter().map(|(_, r)| r.total.committed_counters.rtts).sum::<u64>()
    );
    for (i, mn) in m.per_mn.iter().enumerate() {
        let reads: u64 = recs.iter().map(|(_, r)| r.per_mn[i].ops.read).sum();
        assert_eq!(mn.ops.read, reads, "mn{i}");
    }
    // The percentiles are those of the union of the CNs' histograms.
    let mut h = dmtx::stats::latency_histogram();
    for (_, r) in &recs {
        for &(ns, n) in &r.cn.as_ref().unwrap().latency_ns {
            h.record_n(ns, n).unwrap();
        }
    }
    assert_eq!(h.len(), TXNS);
    assert_eq!(m.latency_us, dmtx::results::Latency::of(&h));

    // The CLI says what it merged, and shows one row.
    let paths: Vec<String> = run.records.iter().map(|p| p.display().to_string()).collect();
    let mut args = vec!["report"];
    args.extend(paths.iter().map(String::as_str));
    let o = dmtx(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let run_id = &recs[0].1.cn.as_ref().unwrap().run_id;
    assert!(text(&o.stderr).contains(&format!("merged 3 CN records of run {run_id}")));
    assert_eq!(
        text(&o.stdout).lines().count(),
        2,
        "header and one row:\n{}",
        text(&o.stdout)
    );
}

#[test]
fn report_never_merges_records_of_different_runs() {
    let run = three_cn_run();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let mut recs: Vec<(PathBuf, BenchResult)> = run.records.iter().map(|p| (p.clone(), record(p))).collect();
    // cn2's record, relabelled as another run's.
    recs[2].1.cn.as_mut().unwrap().run_id = "00000000000000aa".into();
    let merged = dmtx::report::merge_cn_runs(recs.clone());
    assert_eq!(merged.runs.len(), 2, "{:?}", merged.notes);
    let (first, other) = (&merged.runs[0].1, &merged.runs[1].1);
    assert_eq!(first.committed, recs[0].1.committed + recs[1].1.committed);
    assert_eq!(other.committed, recs[2].1.committed);
    assert!(
        merged.notes.iter().any(|n| n.contains("merged 2 CN records")),
        "{:?}",
        merged.notes
    );
    // Each run says records of its compute nodes are missing.
    assert!(
        merged
            .notes
            .iter()
            .any(|n| n.contains("records of 2 of its 3 compute nodes")),
        "{:?}",
        merged.notes
    );
    assert!(merged
        .notes
        .iter()
        .any(|n| n.contains("run 00000000000000aa: records of 1 of its 3")));
}

/// A committed transaction of coordinator `coord` (CN << 16), sequence 1, reading
/// `reads` (key, version) and updating `writes` (key, prev) of table 0.
fn txn(coord: u32, start_ns: u64, end_ns: u64, reads: &[(u64, u64)], writes: &[(u64, u64)]) -> String {
    let id = (u64::from(coord) << 40) | 1;
    let reads: Vec<String> = reads
        .iter()
        .map(|(k, v)| format!(r#"{{"table":0,"key":{k},"version":{v}}}"#))
        .collect();
    let writes: Vec<String> = writes
        .iter()
        .map(|(k, p)| format!(r#"{{"table":0,"key":{k},"prev":{p},"version":{id},"kind":"update"}}"#))
        .collect();
    format!(
        r#"{{"id":{id},"coord":{coord},"start_ns":{start_ns},"end_ns":{end_ns},"outcome":"committed","reads":[{}],"writes":[{}]}}"#,
        reads.join(","),
        writes.join(",")
    )
}

fn history(dir: &Path, name: &str, txns: &[String]) -> String {
    let p = dir.join(name);
    let mut s = String::from("{\"format\":\"dmtx-history\",\"version\":2}\n");
    for t in txns {
        s += t;
        s.push('\n');
    }
    std::fs::write(&p, s).unwrap();
    p.display().to_string()
}

#[test]
fn check_over_several_files_catches_a_cycle_split_across_them() {
    let dir = scratch_dir("split_cycle");
    // Write skew across CNs: cn0 reads x, writes y; cn1 reads y, writes x; both from the
    // load. Each file alone is serializable; together they are G2.
    let a = history(&dir, "cn0.history", &[txn(0, 10, 20, &[(1, 0)], &[(2, 0)])]);
    let b = history(&dir, "cn1.history", &[txn(1 << 16, 10, 20, &[(2, 0)], &[(1, 0)])]);
    for one in [&a, &b] {
        let o = dmtx(&["check", one]);
        assert_eq!(o.status.code(), Some(0), "{one} alone: {}", text(&o.stdout));
    }
    let o = dmtx(&["check", &a, &b]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("G2"), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("merged 2 histories: 2 txns"),
        "{}",
        text(&o.stderr)
    );
    // The same file twice is refused, not checked as a history of duplicates.
    let o = dmtx(&["check", &a, &a]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("is in both"), "{}", text(&o.stderr));
}

#[test]
fn real_time_across_files_needs_and_honours_a_clock_offset_bound() {
    let dir = scratch_dir("split_real_time");
    // cn0 updates x and ends at 1000 ns; cn1 begins at 1100 ns and reads the load's x:
    // a stale read in real time if the clocks agree within 100 ns, and no anomaly if they
    // may differ by more.
    let a = history(&dir, "cn0.history", &[txn(0, 900, 1000, &[], &[(1, 0)])]);
    let b = history(&dir, "cn1.history", &[txn(1 << 16, 1100, 1200, &[(1, 0)], &[])]);
    let o = dmtx(&["check", &a, &b, "--level", "strict"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--clock-offset-max"), "{}", text(&o.stderr));
    let o = dmtx(&["check", &a, &b, "--level", "strict", "--clock-offset-max", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).to_lowercase().contains("real"), "{}", text(&o.stdout));
    let o = dmtx(&["check", &a, &b, "--level", "strict", "--clock-offset-max", "1us"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    // Serializable order does not compare clocks: no bound needed.
    assert_eq!(dmtx(&["check", &a, &b]).status.code(), Some(0));
}

#[test]
fn cn_flag_needs_a_listed_compute_node() {
    let dir = scratch_dir("cn_flag");
    let cluster = dir.join("cluster.toml");
    std::fs::write(
        &cluster,
        "format = \"dmtx-cluster\"\nversion = 1\ncluster_id = 1\nepoch = 0\nreplicas = 1\n\n\
         [[memory_nodes]]\nid = 0\naddress = \"127.0.0.1:9\"\nbytes = \"64MiB\"\n\n\
         [[compute_nodes]]\nid = 0\naddress = \"127.0.0.1:10\"\n\n\
         [[compute_nodes]]\nid = 1\naddress = \"127.0.0.1:11\"\n",
    )
    .unwrap();
    let c = cluster.display().to_string();
    let o = dmtx(&["bench", "--cluster", &c, "--cn", "5", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(e.contains("--cn 5") && e.contains("listed: 0, 1"), "{e}");
    let o = dmtx(&["cluster", "up", "--local", "1", "--compute-nodes", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("give the bench"), "{}", text(&o.stderr));
    let o = dmtx(&[
        "cluster",
        "up",
        "--local",
        "1",
        "--size",
        "64MiB",
        "--compute-nodes",
        "2",
        "--",
        "bench",
        "--out",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("2 records"), "{}", text(&o.stderr));
    let o = dmtx(&["bench", "--cn", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--cluster"), "{}", text(&o.stderr));
}

// ---------------------------------------------------------------------------------
// A messaging protocol across compute nodes over tcp.

/// Goal: a protocol that messages other compute nodes runs with `--cn` over tcp, and
/// its correctness rests on those messages: [`GlobalLock`] serializes every
/// transaction through one lock served by worker (cn0, thread 0), so CNs whose messages
/// did not cross could not commit, and a lock that did not exclude would show as lost
/// updates in the merged history.
/// Method: one memory-node process; three compute nodes run by `driver::run` on threads
/// of this test, each with its own `--cn` view of one cluster file; their histories are
/// checked together.
mod global_lock {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    use dmtx::driver::{self, RunHooks, Silent};
    use dmtx::{BenchArgs, BenchConfig, OutTarget};
    use dmtx_memnode::Control;
    use dmtx_runtime::{
        yield_now, Abort, AbortReason, Access, CoordCtx, CoordId, Coordinator, Handled, Isolation, KnobError, KnobSpec,
        Knobs, Protocol, Request, Rpc, Table, Txn,
    };
    use dmtx_store::{scan_bucket, SlotLayout, StoreError, TableSpec};
    use dmtx_verbs::msg::WorkerAddr;
    use dmtx_verbs::Post;
    use dmtx_workloads::{InvariantError, Outcome, RecordSink, Snapshot, Workload};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    const KEY: usize = 0;
    const VERSION: usize = 8;
    const VALUE: usize = 16;
    /// Where the lock lives.
    const HOME: WorkerAddr = WorkerAddr::new(0, 0);
    const LOCK: u8 = 1;
    const UNLOCK: u8 = 2;
    /// "My coordinator is done"; the reply counts the coordinators done so far.
    const DONE: u8 = 3;
    /// Coordinators of the run: 3 CNs x 1 thread x 2 coroutines.
    const COORDS: u64 = 6;
    /// Lock requests of one attempt before it aborts `lock_conflict`.
    const LOCK_TRIES_MAX: u32 = 100_000;
    const LOOKUP_ROUNDS_MAX: u32 = 64;
    /// Grants served, per requesting compute node (the server is in this process).
    static GRANTS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

    fn word(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    /// `key + 1 | version | value`.
    struct Layout;

    impl SlotLayout for Layout {
        fn slot_bytes(&self, value_bytes: u32) -> u32 {
            VALUE as u32 + value_bytes.next_multiple_of(8)
        }
        fn encode(&self, _table: u32, key: u64, value: &[u8], slot: &mut [u8]) {
            slot[KEY..VERSION].copy_from_slice(&(key + 1).to_le_bytes());
            slot[VERSION..VALUE].fill(0);
            slot[VALUE..VALUE + value.len()].copy_from_slice(value);
        }
        fn key(&self, slot: &[u8]) -> Option<u64> {
            word(slot, KEY).checked_sub(1)
        }
        fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
            &slot[VALUE..VALUE + value_bytes as usize]
        }
    }

    #[derive(Debug, Default)]
    pub struct Obj {
        bucket: Option<u64>,
        rel: Option<u64>,
    }

    /// Test-only: one cluster-wide lock, served over CN messaging, around every
    /// transaction (strict 2PL with a single lock).
    pub struct GlobalLock;

    pub struct Coord {
        held: bool,
    }

    fn fault(_: dmtx_verbs::VerbError) -> Abort {
        Abort::new(AbortReason::Fault)
    }

    fn req(op: u8, owner: u64) -> [u8; 9] {
        let mut b = [0u8; 9];
        b[0] = op;
        b[1..].copy_from_slice(&owner.to_le_bytes());
        b
    }

    /// What (cn0, thread 0) serves: the lock's holder (owner + 1, or 0 when free) and
    /// the coordinators done.
    #[derive(Default)]
    struct Home {
        holder: Cell<u64>,
        done: std::cell::RefCell<std::collections::BTreeSet<u64>>,
    }

    fn serve(home: &Home, r: Request<'_>, out: &mut Vec<u8>) -> Handled {
        let holder = &home.holder;
        let owner = u64::from_le_bytes(r.payload[1..9].try_into().unwrap()) + 1;
        match r.payload[0] {
            LOCK => {
                let granted = holder.get() == 0 || holder.get() == owner;
                if granted {
                    holder.set(owner);
                    GRANTS[usize::from(r.from.cn)].fetch_add(1, Ordering::Relaxed);
                }
                out.push(u8::from(granted));
            }
            UNLOCK => {
                // A retried unlock may find the lock taken by the next owner already.
                if holder.get() == owner {
                    holder.set(0);
                }
            }
            DONE => {
                let mut done = home.done.borrow_mut();
                done.insert(owner);
                out.extend_from_slice(&(done.len() as u64).to_le_bytes());
            }
            op => panic!("unknown op {op}"),
        }
        Handled::Reply
    }

    impl Protocol for GlobalLock {
        type CoordState = Coord;
        type ObjState = Obj;
        type CnState = ();
        type ThreadState = ();
        const NAME: &'static str = "test-global-lock";
        const ABOUT: &'static str = "test-only: one lock served over CN messaging";
        const KNOBS: &'static [KnobSpec] = &[];

        fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
            Ok(Self)
        }
        fn isolation(&self) -> Isolation {
            Isolation::Serializable
        }
        fn messaging(&self) -> bool {
            true
        }
        fn layout(&self) -> &dyn SlotLayout {
            &Layout
        }
        fn coord_state(&self, ctx: &CoordCtx, _: &dyn Control) -> dmtx_runtime::Result<Coord> {
            // The driver's sizing pass sets up a coordinator without messaging.
            if let Some(rpc) = ctx.rpc.as_ref().filter(|_| ctx.id.coroutine == 0) {
                let home = Rc::new(Home::default());
                rpc.set_handler(move |_: &Rpc, r: Request<'_>, out: &mut Vec<u8>| serve(&home, r, out));
            }
            Ok(Coord { held: false })
        }

        async fn execute(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
            let coord = &mut *txn.coord;
            let rpc = Rc::clone(coord.ctx.rpc.as_ref().unwrap());
            let owner = coord.ctx.id.global();
            let mut tries = 0;
            while !coord.state.held {
                tries += 1;
                if tries > LOCK_TRIES_MAX {
                    return Err(Abort::new(AbortReason::LockConflict));
                }
                let granted = rpc
                    .call(HOME, &req(LOCK, owner))
                    .await
                    .map_err(|_| Abort::new(AbortReason::Fault))?;
                coord.state.held = granted == [1];
                if !coord.state.held {
                    yield_now().await;
                }
            }
            let (from, n) = (coord.set.fetched, coord.set.objs.len());
            let catalog = Arc::clone(&coord.ctx.catalog);
            for round in 1.. {
                assert!(round <= LOOKUP_ROUNDS_MAX);
                let mut post = Post::new();
                let mut reads = Vec::new();
                for i in from..n {
                    let o = &mut coord.set.objs[i];
                    assert!(matches!(o.access, Access::ReadOnly | Access::ReadWrite));
                    if o.proto.rel.is_some() {
                        continue;
                    }
                    let info = catalog.get(o.table).unwrap();
                    let b = *o.proto.bucket.get_or_insert(info.shape.home_bucket(o.key));
                    reads.push((
                        i,
                        b,
                        post.read(info.ptr(0, info.shape.bucket_off(b)), info.shape.bucket_bytes as usize),
                    ));
                }
                if reads.is_empty() {
                    break;
                }
                coord.ctx.post(&mut post).await.map_err(fault)?;
                for (i, b, read) in reads {
                    let o = &mut coord.set.objs[i];
                    let shape = &catalog.get(o.table).unwrap().shape;
                    let scan = scan_bucket(shape, &Layout, post.bytes(read), o.key);
                    match (scan.found, scan.next) {
                        (Some(slot), _) => o.proto.rel = Some(shape.slot_off(b, slot)),
                        (None, Some(next)) => o.proto.bucket = Some(next),
                        (None, None) => return Err(Abort::new(AbortReason::NotFound)),
                    }
                }
            }
            let mut post = Post::new();
            let reads: Vec<_> = (from..n)
                .map(|i| {
                    let o = &coord.set.objs[i];
                    let info = catalog.get(o.table).unwrap();
                    (
                        i,
                        post.read(info.ptr(0, o.proto.rel.unwrap()), info.shape.slot_bytes as usize),
                    )
                })
                .collect();
            coord.ctx.post(&mut post).await.map_err(fault)?;
            for (i, read) in reads {
                let slot = post.bytes(read).to_vec();
                let o = &mut coord.set.objs[i];
                o.version_read = Some(word(&slot, VERSION));
                let len = o.value_len as usize;
                coord.set.value_mut(i).copy_from_slice(&slot[VALUE..VALUE + len]);
            }
            coord.set.fetched = n;
            Ok(())
        }

        async fn commit(txn: &mut Txn<'_, Self>) -> Result<(), Abort> {
            let coord = &mut *txn.coord;
            assert!(coord.state.held, "writes only under the lock");
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
                    .ptr(0, o.proto.rel.unwrap() + VERSION as u64);
                let mut image = coord.set.txn_id.to_le_bytes().to_vec();
                image.extend_from_slice(coord.set.value(i));
                post.write(ptr, &image);
            }
            if !post.is_empty() {
                coord.ctx.post(&mut post).await.map_err(fault)?;
            }
            Ok(())
        }

        /// Nothing: the unlock is a message, so it is the cleanup's.
        fn abort(_: &mut Txn<'_, Self>) {}

        async fn cleanup(coord: &mut Coordinator<Self>) {
            if coord.state.held {
                let rpc = Rc::clone(coord.ctx.rpc.as_ref().unwrap());
                rpc.call(HOME, &req(UNLOCK, coord.ctx.id.global()))
                    .await
                    .expect("the lock's home answers");
                coord.state.held = false;
            }
        }

        /// The lock lives on cn0's executor, which ends when its coordinators do: every
        /// coordinator waits here (its executor serving meanwhile) until all are done.
        async fn drain(coord: &mut Coordinator<Self>) {
            let rpc = Rc::clone(coord.ctx.rpc.as_ref().unwrap());
            let me = coord.ctx.id.global();
            let mut told = false;
            loop {
                match rpc.call(HOME, &req(DONE, me)).await {
                    Ok(n) if u64::from_le_bytes(n[..8].try_into().unwrap()) == COORDS => return,
                    Ok(_) => told = true,
                    // The home leaves only once every coordinator told it.
                    Err(_) if told => return,
                    Err(e) => panic!("the lock's home is gone before this coordinator was done: {e}"),
                }
                yield_now().await;
            }
        }
    }

    const BALANCES: Table<u64> = Table::new(0);
    const ACCOUNTS: u64 = 8;
    const INITIAL: u64 = 100;

    /// Transfers between a few accounts; the balances' sum is the invariant.
    pub struct Bank;

    pub struct BankLocal {
        rng: SmallRng,
    }

    impl Workload for Bank {
        type Local = BankLocal;
        type Input = (u64, u64);
        const NAME: &'static str = "test-bank";
        const ABOUT: &'static str = "test-only transfers";
        const KNOBS: &'static [KnobSpec] = &[];

        fn from_knobs(_: &Knobs) -> Result<Self, KnobError> {
            Ok(Self)
        }
        fn txn_types(&self) -> &'static [&'static str] {
            &["transfer"]
        }
        fn tables(&self) -> Vec<TableSpec> {
            vec![TableSpec::new(BALANCES.id(), "balances", 8, ACCOUNTS)]
        }
        fn load(&self, _table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
            (0..ACCOUNTS).try_for_each(|k| insert(k, &INITIAL.to_le_bytes()))
        }
        fn local(&self, _coord: CoordId, seed: u64) -> BankLocal {
            BankLocal {
                rng: SmallRng::seed_from_u64(seed),
            }
        }
        fn draw(&self, local: &mut BankLocal) -> (usize, (u64, u64)) {
            let a = local.rng.random_range(0..ACCOUNTS);
            (0, (a, (a + local.rng.random_range(1..ACCOUNTS)) % ACCOUNTS))
        }
        async fn run<P: Protocol>(
            &self,
            _local: &mut BankLocal,
            &(a, b): &(u64, u64),
            coord: &mut Coordinator<P>,
        ) -> Result<Outcome, Abort> {
            let mut txn = coord.begin();
            let (ra, rb) = (txn.add_rw(BALANCES, a), txn.add_rw(BALANCES, b));
            txn.execute().await?;
            *txn.get_mut(ra) -= 1;
            *txn.get_mut(rb) += 1;
            txn.commit().await.map(|()| Outcome::Committed)
        }
        fn check(&self, _locals: &[BankLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
            let sum: u64 = snapshot
                .iter(BALANCES.id())
                .map(|(_, v)| u64::from_le_bytes(v.try_into().unwrap()))
                .sum();
            if sum != ACCOUNTS * INITIAL {
                return Err(InvariantError {
                    invariant: "sum",
                    detail: format!("balances sum to {sum}, not {}", ACCOUNTS * INITIAL),
                });
            }
            Ok(format!("balances sum to {sum}"))
        }
    }

    #[test]
    fn a_messaging_protocol_runs_across_cn_views_over_tcp() {
        const TXNS: u64 = 300;
        let dir = super::scratch_dir("global_lock");
        let exe = std::path::Path::new(env!("CARGO_BIN_EXE_dmtx"));
        let nodes = dmtx::cluster::LocalNodes::start(exe, 1, 64 << 20, 1, &dir.join("cluster")).unwrap();
        nodes.add_compute_nodes(3).unwrap();
        let view = dmtx::cluster::ClusterView::load(&nodes.cluster_file).unwrap();
        let cfg = |cn: u16| {
            let mut c = BenchConfig::from_args_unchecked(
                &BenchArgs {
                    protocol: GlobalLock::NAME.into(),
                    workload: Bank::NAME.into(),
                    threads: 1,
                    coroutines: 2,
                    txns: Some(TXNS),
                    memory_nodes: Some(1),
                    replicas: Some(1),
                    check: true,
                    quiet: true,
                    ..BenchArgs::default()
                },
                Knobs::default(),
            )
            .unwrap();
            c.out = OutTarget::None;
            c.history = Some(dir.join(format!("cn{cn}.history")));
            let mut v = view.clone();
            v.select_cn(cn, &nodes.cluster_file).unwrap();
            c.cluster = Some(v);
            c
        };
        let results: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u16)
                .map(|cn| {
                    let c = cfg(cn);
                    s.spawn(move || {
                        let stop = AtomicBool::new(false);
                        driver::run(
                            GlobalLock,
                            Bank,
                            &c,
                            &RunHooks {
                                stop: &stop,
                                monitor: &Silent,
                                probes: None,
                            },
                        )
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        assert_eq!(results.iter().map(|r| r.committed).sum::<u64>(), TXNS);
        for (cn, r) in results.iter().enumerate() {
            assert_eq!(r.cn.as_ref().unwrap().id, cn as u16);
            assert!(
                GRANTS[cn].load(Ordering::Relaxed) >= r.committed,
                "cn{cn}'s commits each took the lock from cn0"
            );
        }
        let paths: Vec<_> = (0..3).map(|cn| dir.join(format!("cn{cn}.history"))).collect();
        let h = dmtx_check::format::read_histories(&paths).unwrap();
        let report = dmtx_check::check(&h, &dmtx_check::check_options(Isolation::Serializable));
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.committed as u64, TXNS);
    }
}
