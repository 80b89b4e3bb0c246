//! Validation of the NIC model through the `sim` transport (issue item 6): every expected
//! value is computed from the model's parameters, not written down.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use dmtx_sim::{NicModel, Sim, SimConfig, SimExecutor, SimFabric, SimTransport};
use dmtx_verbs::{MnId, Op, Post, Region, RemotePtr, Submitted, Transport};

fn sim() -> Sim {
    Sim::new(SimConfig::new(1), vec![Arc::new(Region::new(1 << 20))])
}

/// Submit and wait on virtual time; returns the completion time.
async fn post(sim: &Sim, t: &SimTransport, p: &mut Post) -> u64 {
    let Submitted::Pending(ticket) = t.submit(p) else {
        panic!("the sim transport never completes at submit")
    };
    std::future::poll_fn(|cx| t.poll(ticket, p, cx)).await.unwrap();
    sim.now()
}

/// Goal: an uncontended 64 B READ completes after exactly
/// 2·latency + link(request) + service + PCIe(64 B) + link(reply).
#[test]
fn single_read_latency_is_the_closed_form() {
    let sim = sim();
    let t = SimFabric::new(&sim, 0).transport();
    let done = Rc::new(RefCell::new(0));
    let mut ex = SimExecutor::new(&sim);
    let (s, d) = (sim.clone(), done.clone());
    ex.spawn(async move {
        let mut p = Post::new();
        p.read(RemotePtr::new(MnId(0), 4096), 64);
        *d.borrow_mut() = post(&s, &t, &mut p).await;
    });
    ex.run().unwrap();
    let m = &sim.config().nic;
    let op = Op::Read {
        ptr: RemotePtr::new(MnId(0), 4096),
        len: 64,
        dst: 0,
    };
    let want = 2 * m.one_way_latency_ns
        + m.link_ns(m.request_bytes(&op))
        + m.read_service_ns
        + m.pcie_ns(64)
        + m.link_ns(m.reply_bytes(&op));
    eprintln!("64 B READ: {} ns (model {want} ns)", done.borrow());
    assert_eq!(*done.borrow(), want);
}

/// `k` tasks, each on its own connection, each posting one CAS at time 0 on the address
/// `addr(i)`; returns the sorted completion times.
fn concurrent_cas(k: usize, addr: impl Fn(usize) -> u64) -> (Sim, Vec<u64>) {
    let sim = sim();
    let fabric = SimFabric::new(&sim, 0);
    let times = Rc::new(RefCell::new(Vec::new()));
    let mut ex = SimExecutor::new(&sim);
    for i in 0..k {
        let (s, t, times) = (sim.clone(), fabric.transport(), times.clone());
        let at = RemotePtr::new(MnId(0), addr(i));
        ex.spawn(async move {
            let mut p = Post::new();
            p.cas(at, 0, i as u64 + 1);
            let done = post(&s, &t, &mut p).await;
            times.borrow_mut().push(done);
        });
    }
    ex.run().unwrap();
    let mut v = times.take();
    v.sort_unstable();
    (sim, v)
}

/// Mops/s over the completions after the first.
fn rate_mops(times: &[u64]) -> f64 {
    (times.len() - 1) as f64 * 1e3 / (times[times.len() - 1] - times[0]) as f64
}

/// Goal: CAS on one address saturates at the per-address rate, 1 / atomic_addr_ns.
#[test]
fn cas_on_one_address_saturates_at_the_per_address_rate() {
    let (sim, times) = concurrent_cas(64, |_| 8192);
    let m = &sim.config().nic;
    for w in times.windows(2) {
        assert_eq!(w[1] - w[0], m.atomic_addr_ns, "{times:?}");
    }
    let want = 1e3 / m.atomic_addr_ns as f64;
    eprintln!("CAS one address: {:.3} Mops/s (model {want:.3})", rate_mops(&times));
    assert!((rate_mops(&times) - want).abs() < 1e-9);
    assert_eq!(sim.regions()[0].load(8192).unwrap(), 1, "exactly the first CAS won");
}

/// Goal: CAS on distinct addresses saturates at the NIC-wide cap, which for the cx5
/// model is below the processing units' rate.
#[test]
fn cas_on_distinct_addresses_saturates_at_the_nic_wide_cap() {
    let (sim, times) = concurrent_cas(64, |i| 8192 + 8 * i as u64);
    let m: &NicModel = &sim.config().nic;
    let units_gap = m.atomic_service_ns as f64 / m.units as f64;
    assert!(m.atomic_nic_gap_ns as f64 > units_gap, "the cap binds in this model");
    for w in times.windows(2) {
        assert_eq!(w[1] - w[0], m.atomic_nic_gap_ns, "{times:?}");
    }
    let want = 1e3 / m.atomic_nic_gap_ns as f64;
    eprintln!(
        "CAS distinct addresses: {:.3} Mops/s (model {want:.3})",
        rate_mops(&times)
    );
    assert!((rate_mops(&times) - want).abs() < 1e-9);
    for i in 0..64u64 {
        assert_eq!(sim.regions()[0].load(8192 + 8 * i).unwrap(), i + 1);
    }
}

/// Goal: a stream of 1 KB READs is bound by the link: goodput approaches
/// link rate × payload / (payload + reply headers), and never exceeds the link.
#[test]
fn a_stream_of_1k_reads_approaches_link_rate() {
    const CONNS: usize = 16;
    const POSTS: usize = 40;
    const READS: usize = 8;
    const LEN: usize = 1024;
    let sim = sim();
    let fabric = SimFabric::new(&sim, 0);
    let mut ex = SimExecutor::new(&sim);
    for c in 0..CONNS {
        let (s, t) = (sim.clone(), fabric.transport());
        ex.spawn(async move {
            let mut p = Post::new();
            for _ in 0..POSTS {
                p.clear();
                for r in 0..READS {
                    p.read(RemotePtr::new(MnId(0), ((c * READS + r) * LEN) as u64), LEN);
                }
                post(&s, &t, &mut p).await;
            }
        });
    }
    let report = ex.run().unwrap();
    let m = &sim.config().nic;
    let payload = (CONNS * POSTS * READS * LEN) as f64;
    let goodput = payload / report.end_ns as f64; // bytes per ns
    let link = 1000.0 / m.link_ps_per_byte as f64;
    let op = Op::Read {
        ptr: RemotePtr::new(MnId(0), 0),
        len: LEN as u32,
        dst: 0,
    };
    let ceiling = link * LEN as f64 / m.reply_bytes(&op) as f64;
    eprintln!(
        "1 KB READ stream: {:.2} GB/s goodput, link {link:.2} GB/s, ceiling {ceiling:.2} GB/s, {:.1}% of link",
        goodput,
        100.0 * goodput / link
    );
    assert!(goodput <= ceiling, "faster than the link");
    assert!(goodput >= 0.95 * ceiling, "the link should be the bottleneck");
    assert_eq!(sim.stats().ops, (CONNS * POSTS * READS) as u64);
}
