//! `dmtx sim calibrate`: fit the simulator's CPU costs from `mem` runs on this host.
//!
//! The simulator charges each worker thread's virtual CPU per coroutine poll and per
//! named step (`workload.txn`, `txn.add`, `ford.execute`, ...; see `dmtx_sim::cpu`). Their
//! costs are fitted here from real runs:
//!
//! 1. Each workload runs on the `mem` transport with one thread and one coroutine, so its
//!    real time per attempt is one core's work: the protocol and workload logic plus the
//!    `mem` transport's own cost (it executes the verbs on the calling thread). A
//!    counting probe records, per transaction type, how often each named step ran and
//!    the real time from one attempt's end to the next's (the driver says when an
//!    attempt ends: [`Probe::attempt_end`]), so every type with at least
//!    [`MIN_ATTEMPTS`] attempts is a row of the fit (22 rows over the five workloads,
//!    where one row per workload left the seven costs underdetermined).
//! 2. The `mem` transport's cost is measured apart (posts of one 64-B READ, and of one
//!    4-KiB READ for the per-byte part) and subtracted, with the probe's clock reading:
//!    on the simulator the NIC model stands in for it, and the doorbell, WQE and CQE
//!    costs a real NIC driver adds are charged from the profile (literature values, not
//!    fitted: `mem` has no NIC).
//! 3. With `A[r][k]` the count of step `k` per attempt of row `r` (polls included) and
//!    `t[r]` the remaining ns per attempt, the costs `c ≥ 0` minimise
//!    `Σ_w [ e(w̄)² + Σ_{r∈w} s_r e(r)² ] + λ Σ_k ((c_k − p_k) / p_k)²`, where
//!    `e(r) = (t_r − A_r·c) / t_r` is a row's relative error, `s_r` its type's share of
//!    workload `w`'s attempts and `w̄` the workload's mean attempt (throughput follows
//!    it): every workload counts as much however many types it has, pulled gently
//!    (`λ = 0.001`) towards the starting profile's values `p` so that steps the runs
//!    cannot tell apart keep sensible costs. Each workload charges its own per-attempt
//!    step (`kvs.txn`, `tatp.txn`: their logic differs), and the solve is non-negative
//!    least squares (Lawson–Hanson): clipping the unconstrained solution's negative
//!    costs, as this did before, left the others where the negative ones had pushed
//!    them (KVS and SmallBank came out 44–54% high on this host, now within 3%).
//!
//! The output is the starting profile with a refitted `[cpu]` table, as TOML, and a table
//! of the fit per transaction type and per workload, with the starting profile's error
//! beside it. Use it with `--nic FILE`. Recalibrate on the host whose speed
//! the simulated compute nodes should have, on an idle machine; `scale` then stays 1.0.

use std::cell::{Cell, RefCell};
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

/// What the probes counted for one transaction type: attempts, their real time
/// (from the end of the attempt before to the end of this one: the whole loop of the
/// driver), and the named steps they ran.
#[derive(Clone, Debug, Default)]
struct TypeTally {
    attempts: u64,
    ns: u128,
    steps: BTreeMap<&'static str, u64>,
}

impl TypeTally {
    /// Count `attempts` more, taking `ns` and running `steps`.
    fn add<'s>(&mut self, attempts: u64, ns: u128, steps: impl IntoIterator<Item = (&'s &'static str, &'s u64)>) {
        self.attempts += attempts;
        self.ns += ns;
        for (k, v) in steps {
            *self.steps.entry(k).or_default() += v;
        }
    }
}

/// Counts every named step and times every attempt, per transaction type and thread,
/// merged when the thread's probe is dropped.
#[derive(Default)]
struct Counting {
    per_type: Mutex<BTreeMap<usize, TypeTally>>,
}

struct ThreadCounts {
    /// Steps of the attempt under way.
    current: RefCell<BTreeMap<&'static str, u64>>,
    per_type: RefCell<BTreeMap<usize, TypeTally>>,
    /// When the previous attempt ended (none before the first).
    last: Cell<Option<Instant>>,
    sink: Arc<Counting>,
}

impl Probe for ThreadCounts {
    fn step(&self, name: &'static str, n: u32) {
        *self.current.borrow_mut().entry(name).or_default() += n as u64;
    }
    fn point(&self, _name: &'static str) {}
    fn attempt_end(&self, txn_type: usize) {
        let now = Instant::now();
        let mut current = self.current.borrow_mut();
        // The first attempt has no start to time it from: it is dropped.
        if let Some(prev) = self.last.replace(Some(now)) {
            let mut per_type = self.per_type.borrow_mut();
            per_type
                .entry(txn_type)
                .or_default()
                .add(1, (now - prev).as_nanos(), current.iter());
        }
        current.clear();
    }
}

impl Drop for ThreadCounts {
    fn drop(&mut self) {
        let mut all = self.sink.per_type.lock().unwrap_or_else(|e| e.into_inner());
        for (ty, t) in self.per_type.borrow().iter() {
            all.entry(*ty).or_default().add(t.attempts, t.ns, &t.steps);
        }
    }
}

struct CountingSource(Arc<Counting>);

impl ProbeSource for CountingSource {
    fn probe(&self, _thread: u16) -> Rc<dyn Probe> {
        Rc::new(ThreadCounts {
            current: RefCell::new(BTreeMap::new()),
            per_type: RefCell::new(BTreeMap::new()),
            last: Cell::new(None),
            sink: Arc::clone(&self.0),
        })
    }
}

/// Attempts a transaction type needs in a calibration run to be a row of the fit: its
/// mean time is then good to a percent or so.
pub const MIN_ATTEMPTS: u64 = 1_000;

/// One transaction type's measurement: a row of the fit.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Workload name.
    pub workload: String,
    /// Transaction type.
    pub txn_type: String,
    /// Attempts measured.
    pub attempts: u64,
    /// Real ns per attempt.
    pub ns_per_attempt: f64,
    /// Of which the `mem` transport's own cost and the probe's clock reading.
    pub mem_ns_per_attempt: f64,
    /// Step counts per attempt (polls under `POLL`).
    pub steps: BTreeMap<String, f64>,
}

impl Sample {
    /// The time the CPU model should account for (ns per attempt).
    fn target_ns(&self) -> f64 {
        (self.ns_per_attempt - self.mem_ns_per_attempt).max(1.0)
    }

    /// What `costs` charge per attempt.
    fn model_ns(&self, costs: &BTreeMap<String, f64>) -> f64 {
        self.steps
            .iter()
            .map(|(n, c)| c * costs.get(n).copied().unwrap_or(0.0))
            .sum()
    }
}

/// What the `mem` transport costs by itself on this host, and the probe's clock reading.
#[derive(Copy, Clone, Debug)]
pub struct MemCost {
    /// Per post (one 64-B READ).
    pub post_ns: f64,
    /// Per payload byte beyond that.
    pub byte_ns: f64,
    /// One `Instant::now()`: the counting probe reads the clock once per attempt.
    pub clock_ns: f64,
}

/// Time posts of one READ on an in-process memory node, and a clock reading.
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
    let n = 1_000_000u32;
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(Instant::now());
    }
    MemCost {
        post_ns: small,
        byte_ns: ((big - small) / (4096.0 - 64.0)).max(0.0),
        clock_ns: start.elapsed().as_nanos() as f64 / f64::from(n),
    }
}

/// Run `workload` on `mem` with one thread and one coroutine for `duration`: a row per
/// transaction type with at least [`MIN_ATTEMPTS`] attempts.
pub fn sample(workload: &str, duration: &str, mem: MemCost, extra: &[String]) -> Result<Vec<Sample>, RunError> {
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
    let names = registry::WORKLOADS
        .iter()
        .find(|e| e.name == workload)
        .map_or(&[][..], |e| (e.txn_types)());
    let tallies = std::mem::take(&mut *counting.per_type.lock().unwrap_or_else(|e| e.into_inner()));
    let mut rows = Vec::new();
    for (ty, t) in tallies {
        let (Some(name), true) = (names.get(ty), t.attempts >= MIN_ATTEMPTS) else {
            continue;
        };
        let Some(stats) = r.per_txn_type.get(*name) else {
            continue;
        };
        // Posts and bytes per attempt, from the run's own counters of the type.
        let (c, a) = (&stats.committed_counters, &stats.aborted_counters);
        let counted = (stats.committed + stats.aborted + stats.rolled_back).max(1) as f64;
        let posts = (c.rtts + c.background_posts + a.rtts + a.background_posts) as f64 / counted;
        let bytes_in = (c.bytes_in + a.bytes_in) as f64 / counted;
        let payload = (c.bytes_in + c.bytes_out + a.bytes_in + a.bytes_out) as f64 / counted;
        let attempts = t.attempts as f64;
        let mut steps: BTreeMap<String, f64> = t
            .steps
            .iter()
            .map(|(k, &v)| (k.to_string(), v as f64 / attempts))
            .collect();
        // One poll per critical round trip, plus the attempt's first.
        steps.insert(POLL.into(), (c.rtts + a.rtts) as f64 / counted + 1.0);
        steps.insert(KIB.into(), payload / 1024.0);
        rows.push(Sample {
            workload: workload.to_string(),
            txn_type: name.to_string(),
            attempts: t.attempts,
            ns_per_attempt: t.ns as f64 / attempts,
            mem_ns_per_attempt: posts * mem.post_ns + bytes_in * mem.byte_ns + mem.clock_ns,
            steps,
        });
    }
    Ok(rows)
}

/// The fitted costs (ns) by step name (`POLL` for `cpu.poll_ns`): the non-negative
/// least squares of the module doc.
pub fn fit(samples: &[Sample], prior: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let names: Vec<&String> = prior.keys().collect();
    let k = names.len();
    // Normal equations of the weighted, regularised least squares of the module doc.
    let mut m = vec![vec![0.0; k]; k];
    let mut rhs = vec![0.0; k];
    let mut row = |steps: &BTreeMap<String, f64>, t: f64, weight: f64| {
        let a: Vec<f64> = names.iter().map(|n| steps.get(*n).copied().unwrap_or(0.0)).collect();
        let w = weight / (t * t);
        for i in 0..k {
            rhs[i] += w * a[i] * t;
            for j in 0..k {
                m[i][j] += w * a[i] * a[j];
            }
        }
    };
    for mean in workload_means(samples) {
        // A type weighs its share of the workload's attempts; the workload's mean
        // attempt is a row of its own (throughput follows it).
        for s in samples.iter().filter(|s| s.workload == mean.workload) {
            row(&s.steps, s.target_ns(), s.attempts as f64 / mean.attempts.max(1) as f64);
        }
        row(&mean.steps, mean.target_ns(), 1.0);
    }
    for (i, n) in names.iter().enumerate() {
        let p = prior[*n].max(1.0);
        m[i][i] += LAMBDA / (p * p);
        rhs[i] += LAMBDA * prior[*n] / (p * p);
    }
    names.into_iter().cloned().zip(nnls(&m, &rhs)).collect()
}

/// Per transaction type, the round whose time per attempt is the median (the order of
/// the first round is kept; a type missing from a round has fewer to choose from).
pub fn median_rows(rounds: Vec<Vec<Sample>>) -> Vec<Sample> {
    let mut rounds = rounds.into_iter();
    let Some(first) = rounds.next() else { return Vec::new() };
    let mut by_type: Vec<Vec<Sample>> = first.into_iter().map(|s| vec![s]).collect();
    for round in rounds {
        for s in round {
            if let Some(v) = by_type
                .iter_mut()
                .find(|v| v[0].workload == s.workload && v[0].txn_type == s.txn_type)
            {
                v.push(s);
            }
        }
    }
    by_type
        .into_iter()
        .map(|mut v| {
            v.sort_by(|a, b| a.ns_per_attempt.total_cmp(&b.ns_per_attempt));
            v.swap_remove(v.len() / 2)
        })
        .collect()
}

/// Each workload's mean attempt, its types weighted by their attempts, in order of
/// first appearance: a row of the fit, and the report's line per workload.
fn workload_means(samples: &[Sample]) -> Vec<Sample> {
    let mut means: Vec<Sample> = Vec::new();
    for s in samples {
        if !means.iter().any(|m| m.workload == s.workload) {
            means.push(Sample {
                workload: s.workload.clone(),
                txn_type: "(mean)".into(),
                attempts: samples
                    .iter()
                    .filter(|r| r.workload == s.workload)
                    .map(|r| r.attempts)
                    .sum(),
                ns_per_attempt: 0.0,
                mem_ns_per_attempt: 0.0,
                steps: BTreeMap::new(),
            });
        }
    }
    for m in &mut means {
        for s in samples.iter().filter(|s| s.workload == m.workload) {
            let share = s.attempts as f64 / m.attempts.max(1) as f64;
            m.ns_per_attempt += share * s.ns_per_attempt;
            m.mem_ns_per_attempt += share * s.mem_ns_per_attempt;
            for (n, c) in &s.steps {
                *m.steps.entry(n.clone()).or_default() += share * c;
            }
        }
    }
    means
}

/// Minimise `½ xᵀMx − qᵀx` over `x ≥ 0`, for a positive definite `M` (the normal
/// equations of a regularised least squares): the Lawson–Hanson active-set method.
/// Clipping the unconstrained solution's negative entries instead leaves the others
/// where the negative ones had pushed them, which is not the constrained optimum.
fn nnls(m: &[Vec<f64>], q: &[f64]) -> Vec<f64> {
    let n = q.len();
    let tol = 1e-12 * q.iter().fold(1e-300_f64, |a, v| a.max(v.abs()));
    let gradient = |x: &[f64], i: usize| q[i] - m[i].iter().zip(x).map(|(a, b)| a * b).sum::<f64>();
    // The unconstrained optimum over the free set (zero elsewhere).
    let solve_free = |free: &[bool]| {
        let idx: Vec<usize> = (0..n).filter(|&i| free[i]).collect();
        let sub: Vec<Vec<f64>> = idx.iter().map(|&i| idx.iter().map(|&j| m[i][j]).collect()).collect();
        let z = solve(sub, idx.iter().map(|&i| q[i]).collect());
        let mut full = vec![0.0; n];
        for (&i, v) in idx.iter().zip(z) {
            full[i] = v;
        }
        full
    };
    let mut x = vec![0.0; n];
    let mut free = vec![false; n];
    // Each outer step frees one variable; inner steps only bind variables, so this ends.
    for _ in 0..4 * n + 4 {
        let Some(j) = (0..n)
            .filter(|&i| !free[i])
            .map(|i| (i, gradient(&x, i)))
            .filter(|&(_, g)| g > tol)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i)
        else {
            break;
        };
        free[j] = true;
        loop {
            let z = solve_free(&free);
            if (0..n).all(|i| !free[i] || z[i] > 0.0) {
                x = z;
                break;
            }
            // Move from x towards z until the first free variable reaches zero; bind it.
            let alpha = (0..n)
                .filter(|&i| free[i] && z[i] <= 0.0)
                .map(|i| x[i] / (x[i] - z[i]))
                .fold(1.0, f64::min);
            for i in 0..n {
                x[i] += alpha * (z[i] - x[i]);
                if free[i] && x[i] <= tol {
                    free[i] = false;
                    x[i] = 0.0;
                }
            }
        }
    }
    x
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

/// The fit per transaction type and per workload (attempt-weighted), and the costs.
fn fit_report(
    samples: &[Sample],
    fitted: &BTreeMap<String, f64>,
    base: &BTreeMap<String, f64>,
    mem: MemCost,
) -> String {
    let mut report = String::new();
    let _ = writeln!(
        report,
        "mem transport: {:.0} ns per post, {:.3} ns per byte; clock read {:.0} ns (subtracted)",
        mem.post_ns, mem.byte_ns, mem.clock_ns
    );
    let _ = writeln!(
        report,
        "{:<10} {:<22} {:>9} {:>11} {:>8} {:>10} {:>7}",
        "workload", "txn type", "attempts", "ns/attempt", "mem ns", "fitted ns", "error"
    );
    let error = |fit: f64, target: f64| (fit - target) / target.max(1.0) * 100.0;
    for s in samples {
        let (t, f) = (s.target_ns(), s.model_ns(fitted));
        let _ = writeln!(
            report,
            "{:<10} {:<22} {:>9} {:>11.0} {:>8.0} {:>10.0} {:>6.1}%",
            s.workload,
            s.txn_type,
            s.attempts,
            s.ns_per_attempt,
            s.mem_ns_per_attempt,
            f,
            error(f, t)
        );
    }
    let _ = writeln!(
        report,
        "per workload (its measured types, weighted by attempts; `base`: the starting profile's costs):"
    );
    for m in workload_means(samples) {
        let (t, f, b) = (m.target_ns(), m.model_ns(fitted), m.model_ns(base));
        let _ = writeln!(
            report,
            "  {:<10} {:>9} attempts  {:>7.0} ns/attempt to fit  {:>7.0} fitted {:>6.1}%  (base {:>6.1}%)",
            m.workload,
            m.attempts,
            t,
            f,
            error(f, t),
            error(b, t)
        );
    }
    let _ = writeln!(report, "fitted costs (ns):");
    for (n, c) in fitted {
        let _ = writeln!(report, "  {n:<16} {c:>8.1}");
    }
    report
}

/// Run the calibration: sample every workload, fit, and return the profile TOML and a
/// report of the fit.
pub fn calibrate(
    base: &str,
    workloads: &[String],
    duration: &str,
    repeat: usize,
) -> Result<(String, String), RunError> {
    let mut profile = dmtx_sim::Profile::load(base).map_err(|e| RunError::Unsupported(e.to_string()))?;
    // The runs are FORD's: its declared step costs are the fit's prior, as in a run.
    profile.cpu.add_protocol_steps(dmtx_protocols::ford::CPU_STEPS);
    let mem = measure_mem_cost();
    // Rounds over all workloads, so that a noisy stretch of the host hits each about
    // equally.
    let mut rounds = Vec::new();
    for _ in 0..repeat.max(1) {
        let mut round = Vec::new();
        for w in workloads {
            let rows = sample(w, duration, mem, &[])?;
            if rows.is_empty() {
                return Err(RunError::Unsupported(format!(
                    "calibration: no transaction type of `{w}` ran {MIN_ATTEMPTS} attempts in {duration}; give a longer --duration"
                )));
            }
            round.extend(rows);
        }
        rounds.push(round);
    }
    let samples = median_rows(rounds);
    let cpu = &profile.cpu;
    let mut prior: BTreeMap<String, f64> = BTreeMap::new();
    prior.insert(POLL.into(), cpu.poll_ns as f64);
    prior.insert(KIB.into(), cpu.copy_ns_per_kib as f64);
    for s in &samples {
        for name in s.steps.keys().filter(|n| *n != POLL && *n != KIB) {
            let p = cpu.unscaled_step_ns(name);
            prior.insert(name.clone(), p as f64);
        }
    }
    let fitted = fit(&samples, &prior);
    let report = fit_report(&samples, &fitted, &prior, mem);
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
                    workload: format!("w{}", i / 2),
                    txn_type: format!("t{i}"),
                    attempts: 1_000 * (i as u64 + 1),
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

    /// Goal: with several rounds each type keeps its median round, whole (its steps
    /// with its time), in the first round's order.
    #[test]
    fn median_rows_keeps_each_types_median_round() {
        let row = |ty: &str, ns: f64| Sample {
            workload: "w".into(),
            txn_type: ty.into(),
            attempts: ns as u64,
            ns_per_attempt: ns,
            mem_ns_per_attempt: 0.0,
            steps: BTreeMap::new(),
        };
        let rounds = vec![
            vec![row("a", 300.0), row("b", 10.0)],
            vec![row("b", 30.0), row("a", 100.0)],
            vec![row("a", 200.0), row("b", 20.0)],
        ];
        let got: Vec<(String, f64, u64)> = median_rows(rounds)
            .into_iter()
            .map(|s| (s.txn_type, s.ns_per_attempt, s.attempts))
            .collect();
        assert_eq!(got, [("a".to_string(), 200.0, 200), ("b".to_string(), 20.0, 20)]);
    }

    /// `½ xᵀMx − qᵀx`.
    fn objective(m: &[Vec<f64>], q: &[f64], x: &[f64]) -> f64 {
        let quad: f64 = (0..x.len())
            .map(|i| x[i] * (0..x.len()).map(|j| m[i][j] * x[j]).sum::<f64>())
            .sum();
        0.5 * quad - q.iter().zip(x).map(|(a, b)| a * b).sum::<f64>()
    }

    /// Goal: the non-negative solve finds the constrained optimum, which clipping the
    /// unconstrained one misses. Method: random positive definite problems of 2 to 6
    /// variables, many with negative unconstrained entries, against every subset of
    /// free variables solved exactly (the optimum is the best feasible one of them).
    #[test]
    fn nnls_finds_the_constrained_optimum() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(7);
        let mut clipping_missed = 0;
        for case in 0..300 {
            let n = rng.random_range(2..=6);
            // M = AᵀA + εI from a random A: positive definite.
            let a: Vec<Vec<f64>> = (0..n + 2)
                .map(|_| (0..n).map(|_| rng.random_range(-1.0..1.0)).collect())
                .collect();
            let m: Vec<Vec<f64>> = (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| a.iter().map(|r| r[i] * r[j]).sum::<f64>() + if i == j { 1e-3 } else { 0.0 })
                        .collect()
                })
                .collect();
            let q: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let got = nnls(&m, &q);
            assert!(got.iter().all(|&x| x >= 0.0), "case {case}: {got:?}");
            let mut best = f64::INFINITY;
            for mask in 0u32..1 << n {
                let free: Vec<usize> = (0..n).filter(|&i| mask & (1 << i) != 0).collect();
                let sub = free.iter().map(|&i| free.iter().map(|&j| m[i][j]).collect()).collect();
                let z = solve(sub, free.iter().map(|&i| q[i]).collect());
                if z.iter().all(|&v| v >= 0.0) {
                    let mut x = vec![0.0; n];
                    for (&i, v) in free.iter().zip(z) {
                        x[i] = v;
                    }
                    best = best.min(objective(&m, &q, &x));
                }
            }
            let f = objective(&m, &q, &got);
            assert!(
                f <= best + 1e-9 * best.abs().max(1.0),
                "case {case}: {f} vs the optimum {best}"
            );
            let clipped: Vec<f64> = solve(m.clone(), q.clone()).iter().map(|v| v.max(0.0)).collect();
            if objective(&m, &q, &clipped) > best + 1e-6 {
                clipping_missed += 1;
            }
        }
        assert!(clipping_missed > 30, "the cases test the constraint: {clipping_missed}");
    }
}
