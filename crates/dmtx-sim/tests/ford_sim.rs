//! FORD on the `sim` transport: 2 compute nodes × 2 worker threads × 4 coroutines, all
//! on one `SimExecutor`, running randomized transfers for a fixed virtual duration.
//! The same seed must give a bit-identical run; the history must be serializable and
//! money conserved.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use dmtx_check::history::History;
use dmtx_runtime::Cn;
use dmtx_sim::{Sim, SimConfig, SimExecutor, SimFabric, SimStats};
use rand::Rng;

mod common;
use common::{bank, transfer, ACCTS, INITIAL};

const KEYS: u64 = 64;
const CNS: u16 = 2;
const THREADS: u16 = 2;
const COROS: u16 = 4;
/// Virtual time during which coordinators start new transfers; `DMTX_SIM_DURATION_NS`
/// overrides it (for measuring the simulator's speed in a release build).
const DURATION_NS: u64 = 1_000_000;
const TRIES_MAX: u32 = 500;

/// Everything a run produced that must be identical for one seed.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    commits: u64,
    aborts: u64,
    end_ns: u64,
    table_hash: u64,
    stats: SimStats,
}

fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

fn duration_ns() -> u64 {
    std::env::var("DMTX_SIM_DURATION_NS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DURATION_NS)
}

fn run(seed: u64) -> Outcome {
    let duration_ns = duration_ns();
    let (cluster, ford, regions) = bank(KEYS);
    let sim = Sim::new(SimConfig::new(seed), regions);

    // CN 1's clock is 5 µs ahead and 50 ppm fast; FORD does not read clocks for
    // correctness, so this only exercises the plumbing.
    let cns: Vec<Cn> = (0..CNS)
        .map(|cn| {
            let clock = sim.clock(5_000 * cn as i64, 50 * cn as i64).unwrap();
            Cn::connect(
                cn,
                Arc::new(SimFabric::new(&sim, cn as u32)),
                Arc::new(cluster.clone()),
                Arc::new(clock),
            )
            .unwrap()
        })
        .collect();
    let workers: Vec<_> = cns
        .iter()
        .flat_map(|cn| (0..THREADS).map(move |t| cn.worker(t).unwrap()))
        .collect();
    let history = Rc::new(RefCell::new(History::new()));
    let f = &ford;
    let mut coords: Vec<_> = workers
        .iter()
        .flat_map(|w| (0..COROS).map(move |k| w.coordinator(f, k).unwrap()))
        .collect();
    for c in &mut coords {
        c.set_observer(Box::new(dmtx_check::recorder::Recorder::new(history.clone())));
    }
    let commits = Rc::new(Cell::new(0u64));
    let aborts = Rc::new(Cell::new(0u64));
    let mut ex = SimExecutor::new(&sim);
    for c in coords.iter_mut() {
        let mut rng = sim.fork_rng();
        let (sim, commits, aborts) = (sim.clone(), commits.clone(), aborts.clone());
        ex.spawn(async move {
            let clock = Arc::clone(&c.ctx.clock);
            let start = clock.now_ns();
            while clock.now_ns() - start < duration_ns {
                let a = rng.random_range(0..KEYS);
                let b = (a + rng.random_range(1..KEYS)) % KEYS;
                let amount = rng.random_range(1..10u64);
                for tries in 0..TRIES_MAX {
                    if transfer(c, a, b, amount).await.is_ok() {
                        commits.set(commits.get() + 1);
                        break;
                    }
                    aborts.set(aborts.get() + 1);
                    // Randomized exponential backoff in virtual time.
                    let cap = 2_000u64 << tries.min(6);
                    sim.sleep(rng.random_range(0..cap)).await;
                }
            }
        });
    }
    let wall = std::time::Instant::now();
    let report = ex.run().expect("the run ends when every coordinator stops");
    let wall = wall.elapsed();
    drop(coords);

    // The history is serializable.
    let all = Rc::try_unwrap(history).expect("recorders dropped").into_inner();
    let check = dmtx_check::check(&all, &dmtx_check::CheckOptions::default());
    assert!(check.is_clean(), "seed {seed}: {check}");
    assert_eq!(check.committed as u64, commits.get(), "seed {seed}");
    assert!(commits.get() > 100, "seed {seed}: only {} commits", commits.get());

    // Money is conserved: a read-only audit on the simulator.
    let w = cns[0].worker(50).unwrap();
    let mut auditor = w.coordinator(&ford, 0).unwrap();
    let sum = Rc::new(Cell::new(None));
    let mut ex = SimExecutor::new(&sim);
    let s = sum.clone();
    ex.spawn(async move {
        for _ in 0..TRIES_MAX {
            let r: Result<u64, dmtx_runtime::Abort> = async {
                let mut tx = auditor.begin();
                let objs: Vec<_> = (0..KEYS).map(|k| tx.add_ro(ACCTS, k)).collect();
                tx.execute().await?;
                let total = objs.iter().fold(0u64, |acc, &o| acc.wrapping_add(tx.get(o)[0]));
                tx.commit().await?;
                Ok(total)
            }
            .await;
            if let Ok(total) = r {
                s.set(Some(total));
                return;
            }
        }
    });
    ex.run().unwrap();
    assert_eq!(
        sum.get(),
        Some(KEYS * INITIAL),
        "seed {seed}: money was created or destroyed"
    );

    let stats = sim.stats();
    eprintln!(
        "seed {seed}: {} commits, {} aborts, virtual {} ns, {} verbs, {} events in {:.3} s wall: {:.0} verb completions/s",
        commits.get(),
        aborts.get(),
        report.end_ns,
        stats.ops,
        stats.events,
        wall.as_secs_f64(),
        stats.ops as f64 / wall.as_secs_f64()
    );
    let mut table_hash = 0xcbf2_9ce4_8422_2325u64;
    for (i, r) in sim.regions().iter().enumerate() {
        let used = cluster.node(dmtx_verbs::MnId(i as u16)).unwrap().used_bytes();
        let mut buf = vec![0u8; used as usize];
        r.read(0, &mut buf).unwrap();
        fnv1a(&mut table_hash, &buf);
    }
    Outcome {
        commits: commits.get(),
        aborts: aborts.get(),
        end_ns: report.end_ns,
        table_hash,
        stats,
    }
}

/// Goal: the simulation is deterministic and FORD stays correct on it.
/// Method: run the same seed twice and another seed once; compare commit counts, abort
/// counts, virtual end time, simulator counters and a hash of both memory nodes' bytes.
#[test]
fn ford_on_sim_is_deterministic_serializable_and_conserves_money() {
    let seed = std::env::var("DMTX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    eprintln!("DMTX_SEED={seed}");
    let a = run(seed);
    let b = run(seed);
    assert_eq!(a, b, "DMTX_SEED={seed}: the same seed gave different runs");
    let c = run(seed + 1);
    assert_ne!(
        (a.commits, a.end_ns, a.table_hash),
        (c.commits, c.end_ns, c.table_hash),
        "another seed gave the same run"
    );
    assert_ne!(a.table_hash, c.table_hash, "another seed left the same bytes");
}
