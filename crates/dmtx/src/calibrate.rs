//! `dmtx sim calibrate`: fit the simulator's CPU costs from `mem` runs on this host.
//!
//! The simulator charges each worker thread's virtual CPU per coroutine poll and per
//! named step (`workload.txn`, `txn.add`, `ford.execute`, ...; see `dmtx_sim::cpu`). Their
//! costs are fitted here from real runs:
//!
//! 1. Each workload runs on the `mem` transport with one thread and one coroutine, so its
//!    real time per attempt is one core's work: the protocol and workload logic plus the
//!    `mem` transport's own cost (it executes the verbs on the calling thread). A
//!    counting probe records how often each named step ran.
//! 2. The `mem` transport's cost is measured apart (posts of one 64-B READ, and of one
//!    4-KiB READ for the per-byte part) and subtracted: on the simulator the NIC model
//!    stands in for it, and the doorbell, WQE and CQE costs a real NIC driver adds are
//!    charged from the profile (literature values, not fitted: `mem` has no NIC).
//! 3. With `A[w][k]` the count of step `k` per attempt of workload `w` (polls included)
//!    and `t[w]` the remaining ns per attempt, the costs `c` minimise
//!    `Σ_w ((t_w − A_w·c) / t_w)² + λ Σ_k ((c_k − p_k) / p_k)²`: relative error per
//!    workload, pulled gently (`λ = 0.001`) towards the starting profile's values `p` so
//!    that steps the runs cannot tell apart keep sensible costs. Negative costs are
//!    clipped to zero.
//!
//! The output is the starting profile with a refitted `[cpu]` table, as TOML, and a table
//! of the fit per workload. Use it with `--nic FILE`. Recalibrate on the host whose speed
//! the simulated compute nodes should have, on an idle machine; `scale` then stays 1.0.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dmtx_runtime::{block_on, Probe, ProbeSource};
use dmtx_verbs::{MnId, Post, RemotePtr, Submitted};

use crate::config::{BenchArgs, BenchConfig, OutTarget, TransportKind};
use crate::driver::{RunHooks, Silent};
use crate::error::RunError;
use crate::registry;

/// The pseudo-step the executor charges per coroutine poll (`cpu.poll_ns`).
const POLL: &str = "poll";
/// The pseudo-step the transport charges per KiB of verb payload (`cpu.copy_ns_per_kib`):
/// copying it, and the checksums and record images protocols compute over it.
const KIB: &str = "payload_kib";

/// Pull towards the starting profile (see the module doc).
const LAMBDA: f64 = 1e-3;

/// Counts every named step, per thread, merged when the thread's probe is dropped.
#[derive(Default)]
struct Counting {
    totals: Mutex<BTreeMap<String, u64>>,
}

struct ThreadCounts {
    counts: RefCell<BTreeMap<&'static str, u64>>,
    sink: Arc<Counting>,
}

impl Probe for ThreadCounts {
    fn step(&self, name: &'static str, n: u32) {
        *self.counts.borrow_mut().entry(name).or_default() += n as u64;
    }
    fn point(&self, _name: &'static str) {}
}

impl Drop for ThreadCounts {
    fn drop(&mut self) {
        let mut t = self.sink.totals.lock().unwrap_or_else(|e| e.into_inner());
        for (k, v) in self.counts.borrow().iter() {
            *t.entry(k.to_string()).or_default() += v;
        }
    }
}

struct CountingSource(Arc<Counting>);

impl ProbeSource for CountingSource {
    fn probe(&self, _thread: u16) -> Rc<dyn Probe> {
        Rc::new(ThreadCounts {
            counts: RefCell::new(BTreeMap::new()),
            sink: Arc::clone(&self.0),
        })
    }
}

/// One workload's measurement.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Workload name.
    pub workload: String,
    /// Real ns per attempt.
    pub ns_per_attempt: f64,
    /// Of which the `mem` transport's own cost.
    pub mem_ns_per_attempt: f64,
    /// Step counts per attempt (polls under `POLL`).
    pub steps: BTreeMap<String, f64>,
}

/// What the `mem` transport costs by itself on this host.
#[derive(Copy, Clone, Debug)]
pub struct MemCost {
    /// Per post (one 64-B READ).
    pub post_ns: f64,
    /// Per payload byte beyond that.
    pub byte_ns: f64,
}

/// Time posts of one READ on an in-process memory node.
pub fn measure_mem_cost() -> MemCost {
    let cluster = dmtx_memnode::LocalCluster::new(1, 1 << 20);
    let t = dmtx_verbs::Fabric::endpoint(cluster.fabric(), 0).expect("an in-process endpoint");
    let time = |len: usize, n: u32| {
        let mut post = Post::new();
        let start = Instant::now();
        for i in 0..n {
            post.clear();
            post.read(RemotePtr::new(MnId(0), ((i as u64 * 4096) % (1 << 19)) & !63), len);
            match t.submit(&mut post) {
                Submitted::Done(r) => r.expect("an in-range read"),
                Submitted::Pending(ticket) => {
                    block_on(std::future::poll_fn(|cx| t.poll(ticket, &mut post, cx))).expect("an in-range read")
                }
            }
        }
        start.elapsed().as_nanos() as f64 / n as f64
    };
    time(64, 20_000); // warm up
    let small = time(64, 200_000);
    let big = time(4096, 50_000);
    MemCost {
        post_ns: small,
        byte_ns: ((big - small) / (4096.0 - 64.0)).max(0.0),
    }
}

/// Run `workload` on `mem` with one thread and one coroutine for `duration`.
pub fn sample(workload: &str, duration: &str, mem: MemCost, extra: &[String]) -> Result<Sample, RunError> {
    let args = BenchArgs {
        workload: workload.to_string(),
        threads: 1,
        coroutines: 1,
        duration: Some(duration.to_string()),
        transport: TransportKind::Mem,
        out: "-".into(),
        quiet: true,
        set: extra.to_vec(),
        ..BenchArgs::default()
    };
    let mut cfg = BenchConfig::from_args(&args).map_err(|e| RunError::Unsupported(e.to_string()))?;
    cfg.out = OutTarget::None;
    let counting = Arc::new(Counting::default());
    let stop = AtomicBool::new(false);
    let hooks = RunHooks {
        stop: &stop,
        monitor: &Silent,
        probes: Some(Arc::new(CountingSource(Arc::clone(&counting)))),
    };
    let r = registry::run(&cfg, &hooks)?;
    let attempts = r.attempted.max(1) as f64;
    let c = &r.total.committed_counters;
    let a = &r.total.aborted_counters;
    let posts = (c.rtts + c.background_posts + a.rtts + a.background_posts) as f64;
    let bytes = (c.bytes_in + a.bytes_in) as f64;
    let mut steps: BTreeMap<String, f64> = counting
        .totals
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(k, &v)| (k.clone(), v as f64 / attempts))
        .collect();
    // One poll per critical round trip, plus the attempt's first.
    steps.insert(POLL.into(), (c.rtts + a.rtts) as f64 / attempts + 1.0);
    let payload = (c.bytes_in + c.bytes_out + a.bytes_in + a.bytes_out) as f64;
    steps.insert(KIB.into(), payload / 1024.0 / attempts);
    Ok(Sample {
        workload: workload.to_string(),
        ns_per_attempt: r.elapsed_s * 1e9 / attempts,
        mem_ns_per_attempt: (posts * mem.post_ns + bytes * mem.byte_ns) / attempts,
        steps,
    })
}

/// The fitted costs (ns) by step name (`POLL` for `cpu.poll_ns`).
pub fn fit(samples: &[Sample], prior: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let names: Vec<&String> = prior.keys().collect();
    let k = names.len();
    // Normal equations of the weighted, regularised least squares of the module doc.
    let mut m = vec![vec![0.0; k]; k];
    let mut rhs = vec![0.0; k];
    for s in samples {
        let t = (s.ns_per_attempt - s.mem_ns_per_attempt).max(1.0);
        let a: Vec<f64> = names.iter().map(|n| s.steps.get(*n).copied().unwrap_or(0.0)).collect();
        let w = 1.0 / (t * t);
        for i in 0..k {
            rhs[i] += w * a[i] * t;
            for j in 0..k {
                m[i][j] += w * a[i] * a[j];
            }
        }
    }
    for (i, n) in names.iter().enumerate() {
        let p = prior[*n].max(1.0);
        m[i][i] += LAMBDA / (p * p);
        rhs[i] += LAMBDA * prior[*n] / (p * p);
    }
    let c = solve(m, rhs);
    names
        .into_iter()
        .cloned()
        .zip(c.into_iter().map(|x| x.max(0.0)))
        .collect()
}

/// Gaussian elimination with partial pivoting (the system is small and, thanks to the
/// regularisation, never singular).
fn solve(mut m: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))
            .expect("a non-empty system");
        m.swap(col, piv);
        b.swap(col, piv);
        let d = m[col][col];
        if d.abs() < f64::MIN_POSITIVE {
            continue;
        }
        let (top, rest) = m.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (k, row) in rest.iter_mut().enumerate() {
            let f = row[col] / d;
            for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
            b[col + 1 + k] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|j| m[row][j] * x[j]).sum();
        x[row] = if m[row][row].abs() < f64::MIN_POSITIVE {
            0.0
        } else {
            (b[row] - s) / m[row][row]
        };
    }
    x
}

/// Run the calibration: sample every workload, fit, and return the profile TOML and a
/// report of the fit.
pub fn calibrate(base: &str, workloads: &[String], duration: &str) -> Result<(String, String), RunError> {
    let mut profile = dmtx_sim::Profile::load(base).map_err(|e| RunError::Unsupported(e.to_string()))?;
    let mem = measure_mem_cost();
    let mut samples = Vec::new();
    for w in workloads {
        samples.push(sample(w, duration, mem, &[])?);
    }
    let cpu = &profile.cpu;
    let mut prior: BTreeMap<String, f64> = BTreeMap::new();
    prior.insert(POLL.into(), cpu.poll_ns as f64);
    prior.insert(KIB.into(), cpu.copy_ns_per_kib as f64);
    for s in &samples {
        for name in s.steps.keys().filter(|n| *n != POLL && *n != KIB) {
            let p = cpu.steps.get(name).copied().unwrap_or(cpu.step_default_ns);
            prior.insert(name.clone(), p as f64);
        }
    }
    let fitted = fit(&samples, &prior);
    let mut report = String::new();
    let _ = writeln!(
        report,
        "mem transport: {:.0} ns per post, {:.3} ns per byte (subtracted)",
        mem.post_ns, mem.byte_ns
    );
    let _ = writeln!(
        report,
        "{:<10} {:>12} {:>12} {:>12} {:>8}",
        "workload", "ns/attempt", "mem ns", "fitted ns", "error"
    );
    for s in &samples {
        let t = s.ns_per_attempt - s.mem_ns_per_attempt;
        let f: f64 = s
            .steps
            .iter()
            .map(|(n, c)| c * fitted.get(n).copied().unwrap_or(0.0))
            .sum();
        let _ = writeln!(
            report,
            "{:<10} {:>12.0} {:>12.0} {:>12.0} {:>7.1}%",
            s.workload,
            s.ns_per_attempt,
            s.mem_ns_per_attempt,
            f,
            (f - t) / t.max(1.0) * 100.0
        );
    }
    let _ = writeln!(report, "fitted costs (ns):");
    for (n, c) in &fitted {
        let _ = writeln!(report, "  {n:<16} {c:>8.1}");
    }
    let cpu = &mut profile.cpu;
    for (n, c) in &fitted {
        if n == POLL {
            cpu.poll_ns = c.round() as u64;
        } else if n == KIB {
            cpu.copy_ns_per_kib = c.round() as u64;
        } else {
            cpu.steps.insert(n.clone(), c.round() as u64);
        }
    }
    profile.name = format!("{}-calibrated", profile.name);
    let toml = profile.to_toml();
    let header = format!(
        "# Made by `dmtx sim calibrate --base {base}` on host `{}`: [cpu] fitted from mem runs\n# of {} (see the fit below); the rest is the `{base}` profile.\n{}\n",
        crate::results::host_name(),
        workloads.join(", "),
        report.lines().map(|l| format!("# {l}")).collect::<Vec<_>>().join("\n")
    );
    Ok((header + &toml, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: with consistent measurements the fit recovers the true costs (within 5%: the
    /// pull towards a prior 1.5 times off moves them a little).
    #[test]
    fn fit_recovers_known_costs() {
        let truth: BTreeMap<String, f64> = [("a", 100.0), ("b", 30.0), (POLL, 50.0)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let rows = [[1.0, 4.0, 3.0], [2.0, 10.0, 5.0], [1.0, 1.0, 2.0], [3.0, 2.0, 4.0]];
        let samples: Vec<Sample> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let steps: BTreeMap<String, f64> = ["a", "b", POLL]
                    .iter()
                    .zip(r)
                    .map(|(k, v)| (k.to_string(), *v))
                    .collect();
                let t: f64 = steps.iter().map(|(k, v)| v * truth[k]).sum();
                Sample {
                    workload: format!("w{i}"),
                    ns_per_attempt: t + 200.0,
                    mem_ns_per_attempt: 200.0,
                    steps,
                }
            })
            .collect();
        // A prior half as large again as the truth (the base profile is a guess).
        let prior: BTreeMap<String, f64> = truth.iter().map(|(k, v)| (k.clone(), v * 1.5)).collect();
        let got = fit(&samples, &prior);
        for (k, v) in &truth {
            assert!((got[k] - v).abs() / v < 0.05, "{k}: fitted {} vs {v}", got[k]);
        }
    }
}
