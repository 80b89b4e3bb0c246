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

use crate::{Sim, SimError};

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
}

/// Passes over spinning tasks, with no event left to move time, before giving up.
const LIVELOCK_PASSES: u64 = 10_000_000;

impl<'a> SimExecutor<'a> {
    /// An executor on `sim` with no tasks.
    pub fn new(sim: &Sim) -> Self {
        Self {
            sim: sim.clone(),
            tasks: Vec::new(),
        }
    }

    /// Add a task; tasks are polled in the order they were spawned.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + 'a) {
        self.tasks.push(Box::pin(task));
    }

    /// Run until every task finished.
    pub fn run(self) -> Result<RunReport, SimError> {
        self.run_until(u64::MAX)
    }

    /// Run until every task finished or the next event lies after `deadline_ns`
    /// (virtual time then stops at the deadline and pending tasks are dropped).
    pub fn run_until(self, deadline_ns: u64) -> Result<RunReport, SimError> {
        let SimExecutor { sim, tasks } = self;
        let n = tasks.len();
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
        let report = |sim: &Sim, live: usize, polls: u64| RunReport {
            end_ns: sim.now(),
            finished: n - live,
            pending: live,
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
                    polls += 1;
                    let mut cx = Context::from_waker(&wakers[i]);
                    if task.as_mut().poll(&mut cx).is_ready() {
                        tasks[i] = None;
                        live -= 1;
                    }
                }
                if live == 0 {
                    return Ok(report(&sim, live, polls));
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
                    let r = report(&sim, live, polls);
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
