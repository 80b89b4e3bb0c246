//! The CN CPU model: coordinators of one worker thread share its virtual CPU.

use std::sync::Arc;

use dmtx_runtime::ProbeSource;
use dmtx_sim::{CpuMode, Sim, SimConfig, SimExecutor, SimFabric};
use dmtx_verbs::{MnId, Post, Region, RemotePtr, Submitted, Transport};

/// Each coordinator: `step` ns of CPU work, then one 64-B READ, `rounds` times. Returns
/// the virtual ns the run took.
fn run(coroutines: usize, step_ns: u64, rounds: usize, mode: CpuMode) -> u64 {
    let mut cfg = SimConfig::new(3);
    cfg.cpu.mode = mode;
    cfg.cpu.steps.insert("test.work".into(), step_ns);
    let sim = Sim::new(cfg, vec![Arc::new(Region::new(1 << 16))]);
    let fabric = SimFabric::new(&sim, 0);
    let cpu = sim.cpu_of(0, 0);
    let t = Arc::new(fabric.transport_of(0));
    let probe = fabric.probe(0);
    let mut ex = SimExecutor::new(&sim);
    for c in 0..coroutines {
        let (t, probe) = (Arc::clone(&t), probe.clone());
        ex.spawn_on(cpu, async move {
            let mut post = Post::new();
            for _ in 0..rounds {
                probe.step("test.work", 1);
                post.clear();
                post.read(RemotePtr::new(MnId(0), 64 * c as u64), 64);
                let Submitted::Pending(ticket) = t.submit(&mut post) else {
                    unreachable!()
                };
                std::future::poll_fn(|cx| t.poll(ticket, &mut post, cx)).await.unwrap();
            }
        });
    }
    ex.run().unwrap().end_ns
}

/// Goal: one coordinator alternates CPU work and a round trip; many coordinators
/// overlap their round trips until the CPU saturates, as FORD Fig. 22 shows: the
/// throughput rises, then flattens at 1 / (CPU cost per round).
#[test]
fn coroutines_overlap_round_trips_until_the_cpu_saturates() {
    let (step, rounds) = (1_000, 200);
    let single = run(1, step, rounds, CpuMode::Model);
    let rtt_free = run(1, 0, rounds, CpuMode::Off) / rounds as u64;
    let cfg = SimConfig::new(0).cpu;
    let per_round = step + cfg.poll_ns + cfg.wqe_ns + cfg.doorbell_ns + cfg.cqe_ns + 64 * cfg.copy_ns_per_kib / 1024;
    // One coordinator: CPU and network in series.
    let expect = rounds as u64 * (per_round + rtt_free);
    assert!(
        single.abs_diff(expect) < expect / 50,
        "1 coroutine: {single} ns, expected about {expect}"
    );
    let tput = |c: usize| (c * rounds) as f64 / run(c, step, rounds, CpuMode::Model) as f64 * 1e9;
    let (t1, t2, t4, t8) = (tput(1), tput(2), tput(4), tput(8));
    let cap = 1e9 / per_round as f64;
    assert!(t2 > 1.8 * t1, "2 coroutines overlap: {t1:.0} -> {t2:.0}/s");
    assert!(
        t4 > 0.95 * cap && t8 > 0.95 * cap,
        "saturated at the CPU: {t4:.0}, {t8:.0} of {cap:.0}/s"
    );
    assert!(t8 <= cap * 1.001, "never beyond the CPU: {t8:.0} > {cap:.0}/s");
    // With the CPU free, 8 coroutines are bounded only by the fabric.
    let free = (8 * rounds) as f64 / run(8, step, rounds, CpuMode::Off) as f64 * 1e9;
    assert!(free > 2.0 * cap, "compute for free: {free:.0}/s");
}
