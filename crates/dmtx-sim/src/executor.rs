//! The deterministic executor: every coordinator of every simulated compute node runs
//! as a task on one OS thread, on virtual time.
//!
//! Each task has a waker that sets its "woken" flag. A pass polls the woken tasks in
//! task-index order. When no task is woken, the executor takes the next event of the
//! simulation, moves virtual time to it and processes it (which may wake tasks). Time
//! moves only there, so a run depends only on the tasks, the seed and the model.
//!
//! A task woken by itself (`dmtx_runtime::yield_now`) stays runnable; after
//! [`SimConfig::spin_passes_max`](crate::SimConfig::spin_passes_max) passes at one
//! instant the executor takes the next event anyway, so a backoff loop of yields costs
//! virtual time. To wait for virtual time, use [`Sim::sleep`].
//!
//! A run ends when every task finished ([`SimExecutor::run`]), when the next event lies
//! beyond a deadline ([`SimExecutor::run_until`]; the tasks still pending are dropped),
//! or with [`SimError::Deadlock`] when tasks wait but no event is left to wake them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use crate::cpu::CpuId;
use crate::sim::Event;
use crate::{CpuMode, Sim, SimError};

/// Tasks woken since their last poll.
struct Woken {
    flags: Vec<AtomicBool>,
    any: AtomicBool,
}

struct TaskWaker {
    index: usize,
    woken: Arc<Woken>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.flags[self.index].store(true, Ordering::Relaxed);
        self.woken.any.store(true, Ordering::Relaxed);
    }
}

/// How a run ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// Virtual time at the end (ns).
    pub end_ns: u64,
    /// Tasks that finished.
    pub finished: usize,
    /// Tasks still pending (only after a deadline).
    pub pending: usize,
    /// Tasks dropped because their compute node crashed.
    pub crashed: usize,
    /// Task polls.
    pub polls: u64,
    /// Events processed during this run.
    pub events: u64,
}

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Runs many futures on one OS thread on a simulation's virtual time.
pub struct SimExecutor<'a> {
    sim: Sim,
    tasks: Vec<Task<'a>>,
    /// The virtual CPU each task runs on (`None`: free, e.g. a timer).
    cpus: Vec<Option<CpuId>>,
}

/// Passes over spinning tasks, with no event left to move time, before giving up.
const LIVELOCK_PASSES: u64 = 10_000_000;

impl<'a> SimExecutor<'a> {
    /// An executor on `sim` with no tasks.
    pub fn new(sim: &Sim) -> Self {
        Self {
            sim: sim.clone(),
            tasks: Vec::new(),
            cpus: Vec::new(),
        }
    }

    /// Add a task that costs no CPU (a timer, a test's driver); tasks are polled in the
    /// order they were spawned.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + 'a) {
        self.tasks.push(Box::pin(task));
        self.cpus.push(None);
    }

    /// Add a task that runs on the virtual CPU `cpu` (a coordinator on its worker
    /// thread): it is polled only when that CPU is idle, and each poll costs
    /// `cpu.poll_ns` plus whatever the poll charges. Once the CPU's compute node is down
    /// ([`Sim::cn_down`]) the task is dropped unpolled.
    pub fn spawn_on(&mut self, cpu: CpuId, task: impl Future<Output = ()> + 'a) {
        self.tasks.push(Box::pin(task));
        self.cpus.push(Some(cpu));
    }

    /// Run until every task finished.
    pub fn run(self) -> Result<RunReport, SimError> {
        self.run_until(u64::MAX)
    }

    /// Run until every task finished or the next event lies after `deadline_ns`
    /// (virtual time then stops at the deadline and pending tasks are dropped).
    pub fn run_until(self, deadline_ns: u64) -> Result<RunReport, SimError> {
        let SimExecutor { sim, tasks, cpus } = self;
        let n = tasks.len();
        // A task woken while its CPU is busy waits for a wake-up at the instant the CPU
        // frees; this is the latest such instant asked for, to not ask twice.
        let mut deferred_until = vec![0u64; n];
        let cpu_model = sim.config().cpu.clone();
        let poll_ns = cpu_model.scaled(cpu_model.poll_ns);
        let measured = cpu_model.mode == CpuMode::Measured;
        let mut crashed = 0usize;
        let mut tasks: Vec<Option<Task<'a>>> = tasks.into_iter().map(Some).collect();
        let woken = Arc::new(Woken {
            flags: (0..n).map(|_| AtomicBool::new(true)).collect(),
            any: AtomicBool::new(true),
        });
        let wakers: Vec<Waker> = (0..n)
            .map(|index| {
                Waker::from(Arc::new(TaskWaker {
                    index,
                    woken: Arc::clone(&woken),
                }))
            })
            .collect();
        let events_before = sim.stats().events;
        let mut live = n;
        let mut polls = 0u64;
        let mut spins = 0u32;
        let mut idle_passes = 0u64;
        let spin_max = sim.config().spin_passes_max.max(1);
        let report = |sim: &Sim, live: usize, polls: u64, crashed: usize| RunReport {
            end_ns: sim.now(),
            finished: n - live - crashed,
            pending: live,
            crashed,
            polls,
            events: sim.stats().events - events_before,
        };
        loop {
            if woken.any.swap(false, Ordering::Relaxed) {
                for i in 0..n {
                    if !woken.flags[i].swap(false, Ordering::Relaxed) {
                        continue;
                    }
                    let Some(task) = tasks[i].as_mut() else { continue };
                    if let Some(cpu) = cpus[i] {
                        let (cn, cursor) = sim.cpu_state(cpu);
                        if sim.cn_down(cn) {
                            tasks[i] = None;
                            live -= 1;
                            crashed += 1;
                            continue;
                        }
                        if cursor > sim.now() {
                            if deferred_until[i] < cursor {
                                deferred_until[i] = cursor;
                                sim.lock().queue.push(cursor, Event::Wake(wakers[i].clone()));
                            }
                            continue;
                        }
                    }
                    polls += 1;
                    let mut cx = Context::from_waker(&wakers[i]);
                    let started = measured.then(std::time::Instant::now);
                    let ready = task.as_mut().poll(&mut cx).is_ready();
                    if let Some(cpu) = cpus[i] {
                        let ns = match started {
                            // Opt-in, for cross-checks: real time is not deterministic.
                            Some(t) => (t.elapsed().as_nanos() as f64 * cpu_model.scale) as u64,
                            None => poll_ns,
                        };
                        sim.charge(cpu, ns);
                    }
                    if ready {
                        tasks[i] = None;
                        live -= 1;
                    }
                }
                if live == 0 {
                    return Ok(report(&sim, live, polls, crashed));
                }
                if woken.any.load(Ordering::Relaxed) {
                    spins += 1;
                    if spins < spin_max {
                        continue;
                    }
                }
            }
            spins = 0;
            match sim.next_event_time() {
                None if woken.any.load(Ordering::Relaxed) => {
                    idle_passes += 1;
                    if idle_passes > LIVELOCK_PASSES {
                        return Err(SimError::Livelock {
                            pending: live,
                            now_ns: sim.now(),
                        });
                    }
                }
                None => {
                    return Err(SimError::Deadlock {
                        pending: live,
                        now_ns: sim.now(),
                    })
                }
                Some(t) if t > deadline_ns => {
                    if deadline_ns > sim.now() {
                        sim.shared.time.advance_to(deadline_ns);
                    }
                    let r = report(&sim, live, polls, crashed);
                    drop(tasks);
                    return Ok(r);
                }
                Some(_) => {
                    idle_passes = 0;
                    sim.step();
                }
            }
        }
    }
}
