//! How fast the simulator runs: simulated verb completions per real second, for a stream
//! of posts with no protocol logic around them (the simulator's own cost), with one and
//! with four ops per doorbell batch, with the CPU model off (the fabric alone) and on
//! (the default costs: threads saturate, so CPU wake-ups add events).
//!
//! `cargo run --release -p dmtx-sim --example speed [virtual_ms] [warmup_ms]` measures
//! `virtual_ms` of virtual time (default 200) after `warmup_ms`
//! (default 10: the slabs, queues and regions' pages grow then) on each case
//! (`DMTX_SPEED_CASE=k` runs case k alone, `DMTX_SPEED_OPS=n` sets the batch size of the
//! multi-op cases, `DMTX_SPEED_CO=n` the coroutines per thread of the LOTUS-sized ones:
//! how the speed falls as more coordinators take turns).
//!
//! On a shared machine one run says little: the same build varies by a third from one
//! minute to the next as neighbours come and go (`docs/sim-model.md`, "Speed").
//! `DMTX_SPEED_RUNS=n` runs each case `n` times in a row and ends with a line per case
//! giving the median and the best; compare builds by alternating them, not by runs an
//! hour apart.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use dmtx_sim::{CpuMode, Sim, SimConfig, SimExecutor, SimFabric, SimStats};
use dmtx_verbs::{MnId, Post, Region, RemotePtr, Submitted, Transport};
use rand::RngCore;

/// Region per memory node: 1 MiB, so that the simulator's own costs are measured
/// rather than cache misses on the regions (`DMTX_SPEED_REGION_MIB` overrides it).
static REGION_BYTES: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
    std::env::var("DMTX_SPEED_REGION_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64)
        << 20
});

/// A number below `n` from the high bits of the random word `r` (multiply-shift).
fn below(r: u64, n: u64) -> u64 {
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

/// `cns` compute nodes × `threads` × `coroutines` coordinators post `ops` READs/WRITEs per
/// post, spread over `mns` memory nodes, for `virtual_ns` after `warmup_ns`.
fn run(
    cns: u32,
    threads: u16,
    coroutines: usize,
    mns: usize,
    ops: usize,
    (warmup_ns, virtual_ns): (u64, u64),
    cpu: CpuMode,
) -> f64 {
    let regions: Vec<Arc<Region>> = (0..mns).map(|_| Arc::new(Region::new(*REGION_BYTES))).collect();
    let mut config = SimConfig::new(1);
    config.cpu.mode = cpu;
    let sim = Sim::new(config, regions);
    let mut ex = SimExecutor::new(&sim);
    for cn in 0..cns {
        let fabric = SimFabric::new(&sim, cn);
        for t in 0..threads {
            let transport = Rc::new(fabric.transport_of(t));
            let cpu = sim.cpu_of(cn, t);
            for _ in 0..coroutines {
                let (tr, mut rng) = (Rc::clone(&transport), sim.fork_rng());
                let records = *REGION_BYTES / 64;
                ex.spawn_on(cpu, async move {
                    let mut post = Post::new();
                    loop {
                        post.clear();
                        let mn = MnId(below(rng.next_u64(), mns as u64) as u16);
                        // One random word per op: its high bits pick the record, its low
                        // bit READ or WRITE (the harness's own cost is part of the figure).
                        for _ in 0..ops {
                            let r = rng.next_u64();
                            let at = RemotePtr::new(mn, below(r, records) * 64);
                            if r & 1 == 0 {
                                post.read(at, 64);
                            } else {
                                post.write(at, &[7u8; 64]);
                            }
                        }
                        let Submitted::Pending(ticket) = tr.submit(&mut post) else {
                            unreachable!()
                        };
                        std::future::poll_fn(|cx| tr.poll(ticket, &mut post, cx)).await.unwrap();
                    }
                });
            }
        }
    }
    // The window opens when the warm-up ends: a task wakes then and reads the clock.
    let opened: Rc<Cell<Option<(Instant, SimStats)>>> = Rc::new(Cell::new(None));
    let (meter, mark) = (sim.clone(), Rc::clone(&opened));
    ex.spawn(async move {
        meter.sleep(warmup_ns).await;
        mark.set(Some((Instant::now(), meter.stats())));
    });
    ex.run_until(warmup_ns + virtual_ns).unwrap();
    let (started, before) = opened.get().expect("the warm-up ended");
    let real = started.elapsed().as_secs_f64();
    let st = sim.stats().since(&before);
    println!(
        "{cns} CN x {threads} threads x {coroutines} coroutines, {mns} MNs, {ops} op(s)/post, cpu {cpu:?}: {} verbs, {} events in {real:.2} s: {:.2} M verb completions/s, {:.1} s real per simulated second",
        st.ops,
        st.events,
        st.ops as f64 / real / 1e6,
        real / (virtual_ns as f64 / 1e9)
    );
    st.ops as f64 / real / 1e6
}

fn main() {
    let arg = |i: usize, default: u64| std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let window = (arg(2, 10) * 1_000_000, arg(1, 200) * 1_000_000);
    // `DMTX_SPEED_CASE=k` runs only the k-th case (0..8), for profiling.
    let only: Option<usize> = std::env::var("DMTX_SPEED_CASE").ok().and_then(|v| v.parse().ok());
    // `DMTX_SPEED_OPS=n` replaces the 4-op cases' batch size (how the cost per verb
    // falls as batches grow).
    let wide: usize = std::env::var("DMTX_SPEED_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let lotus_co: usize = std::env::var("DMTX_SPEED_CO")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let runs: usize = std::env::var("DMTX_SPEED_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut summary = Vec::new();
    let mut case = 0;
    for cpu in [CpuMode::Off, CpuMode::Model] {
        // 1 CN, 64 coordinators; then LOTUS-sized: 3 MNs, 9 CNs, 540 coordinators.
        for (cns, threads, coroutines, mns) in [(1, 8, 8, 2), (9, 10, lotus_co, 3)] {
            for ops in [1, wide] {
                if only.is_none_or(|k| k == case) {
                    let mut rates: Vec<f64> = (0..runs)
                        .map(|_| run(cns, threads, coroutines, mns, ops, window, cpu))
                        .collect();
                    rates.sort_by(f64::total_cmp);
                    summary.push((case, rates));
                }
                case += 1;
            }
        }
    }
    if runs > 1 {
        for (case, rates) in summary {
            let shown: Vec<String> = rates.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "case {case}: median {:.2}, best {:.2} M verb completions/s over {runs} runs ({})",
                rates[rates.len() / 2],
                rates[rates.len() - 1],
                shown.join(" ")
            );
        }
    }
}
