//! The deterministic executor: every coordinator of every simulated compute node runs
//! as a task on one OS thread, on virtual time.
//!
//! Each task has a waker that lists it as woken (once). A pass polls the woken tasks in
//! the order they were woken. A task spawned on a virtual CPU ([`SimExecutor::spawn_on`]) joins
//! that CPU's FIFO instead, and the CPU runs its queue one poll at a time while it is
//! idle (`cursor <= now`); when it is busy, a `CpuFree` event at the instant it frees
//! brings the executor back to it (no waker: the executor schedules and handles these
//! itself; see `crate::cpu`). When no task is woken, the executor takes the next event of the
//! simulation, moves virtual time to it and processes it (which may wake tasks). Time
//! moves only there, so a run depends only on the tasks, the seed and the model.
//!
//! A task woken by itself (`dmtx_runtime::yield_now`) stays runnable; after
//! [`SimConfig::spin_passes_max`](crate::SimConfig::spin_passes_max) passes at one
//! instant the executor takes the next event anyway, so a backoff loop of yields costs
//! virtual time. To wait for virtual time, use [`Sim::sleep`], or, from protocol code
//! that knows only its clock, `dmtx_runtime::sleep_until`: for the length of a run the
//! executor is the thread's `dmtx_runtime::timer::TimerService`, so such a sleep is one
//! `Wake` event at the virtual instant its node's clock reads the deadline.
//!
//! A run ends when every task finished ([`SimExecutor::run`]), when the next event lies
//! beyond a deadline ([`SimExecutor::run_until`]; the tasks still pending are dropped),
//! a grace after an interrupt ([`SimExecutor::interrupt_on`]), or with
//! [`SimError::Deadlock`] when tasks wait but no event is left to wake them.
//!
//! A progress callback ([`SimExecutor::on_progress`], the driver's progress bar)
//! watches virtual time where it is about to move; it schedules no event, so a run gives
//! the same results with it and without it.
//!
//! The tasks of a compute node that crashed ([`Sim::cn_down`]) are dropped as soon as the
//! executor is about to move time after the crash: they wait for posts and messages that
//! never complete, and periodic events (the membership service's renewals) would keep
//! time moving for ever while they wait.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use crate::cpu::CpuId;
use crate::lock::StateLock;
use crate::sim::{Event, Step};
use crate::{CpuMode, Sim, SimError};

/// Tasks woken since their last poll: a flag per task (so a task is listed once) and
/// the list in wake order, so a pass touches only the woken tasks.
struct Woken {
    flags: Vec<AtomicBool>,
    /// Per task: the addresses of its run slot and of its future's state, prefetched
    /// when it is woken (its poll follows soon after, and with hundreds of tasks both
    /// have left the L1 cache). Addresses only, never dereferenced: the slots' vector
    /// never grows and the futures are pinned, so they stay put while the run lasts.
    hints: Vec<[usize; 2]>,
    list: StateLock<Vec<usize>>,
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
        // A load and a store where a swap would do: no locked instruction on this hot
        // path. Two threads waking one task at once would at worst list it twice, and a
        // pass polls a listed task whose flag is already clear harmlessly.
        if let Some(flag) = self.woken.flags.get(self.index) {
            if let Some(&[run, state]) = self.woken.hints.get(self.index) {
                dmtx_verbs::prefetch_lines(run as *const u8, 1);
                dmtx_verbs::prefetch_lines(state as *const u8, FUTURE_LINES);
            }
            if !flag.load(Ordering::Relaxed) {
                flag.store(true, Ordering::Relaxed);
                self.woken.list.lock().push(self.index);
            }
        }
        if !self.woken.any.load(Ordering::Relaxed) {
            self.woken.any.store(true, Ordering::Relaxed);
        }
    }
}

/// A task during a run, with what the executor keeps of it (one place, one bounds check).
struct TaskRun<'a> {
    task: Option<Task<'a>>,
    /// Index in the run's CPU list (`None`: free, e.g. a timer).
    cpu: Option<u32>,
    /// Listed in its CPU's ready queue.
    queued: bool,
    waker: Waker,
}

/// A virtual CPU during a run: its woken tasks in wake order, and whether it is due in
/// the current pass.
struct CpuRun {
    id: CpuId,
    cn: u32,
    ready: VecDeque<usize>,
    due: bool,
    /// The latest instant a "CPU free" wake-up was asked for.
    wake_at: u64,
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
    interrupt: Option<Interrupt<'a>>,
    progress: Option<Progress<'a>>,
}

/// A callback on virtual time's progress ([`SimExecutor::on_progress`]).
struct Progress<'a> {
    every_ns: u64,
    next_ns: u64,
    f: Box<dyn FnMut(u64) + 'a>,
}

/// A flag that ends a run early ([`SimExecutor::interrupt_on`]).
struct Interrupt<'a> {
    flag: &'a AtomicBool,
    grace_ns: u64,
    on_set: Box<dyn FnOnce() + 'a>,
}

/// Cache lines of a woken task's future state to prefetch: a coordinator's live
/// variables at its await point sit near the start of the state machine.
const FUTURE_LINES: usize = 4;

/// Passes over spinning tasks, with no event left to move time, before giving up.
const LIVELOCK_PASSES: u64 = 10_000_000;

impl<'a> SimExecutor<'a> {
    /// An executor on `sim` with no tasks.
    pub fn new(sim: &Sim) -> Self {
        Self {
            sim: sim.clone(),
            tasks: Vec::new(),
            cpus: Vec::new(),
            interrupt: None,
            progress: None,
        }
    }

    /// Call `f(now)` whenever virtual time is about to move and at least `every_ns` of
    /// it passed since the last call (and once at the start): a progress bar. It is an
    /// observer, not a task: it schedules no event, so a run with it gives the results
    /// of a run without it.
    pub fn on_progress(&mut self, every_ns: u64, f: impl FnMut(u64) + 'a) {
        self.progress = Some(Progress {
            every_ns: every_ns.max(1),
            next_ns: 0,
            f: Box::new(f),
        });
    }

    /// End the run early once `flag` is set (from another thread, e.g. a Ctrl-C
    /// handler). The executor looks at it whenever it is about to move virtual time, so
    /// a run whose tasks never finish is reached too. The first time it is set,
    /// `on_set` runs on the executor's thread (to ask the tasks to finish), and the
    /// tasks still pending `grace_ns` of virtual time later are dropped, as at a
    /// deadline (but virtual time stays at the last event).
    pub fn interrupt_on(&mut self, flag: &'a AtomicBool, grace_ns: u64, on_set: impl FnOnce() + 'a) {
        self.interrupt = Some(Interrupt {
            flag,
            grace_ns,
            on_set: Box::new(on_set),
        });
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
        let SimExecutor {
            sim,
            tasks,
            cpus,
            mut interrupt,
            mut progress,
        } = self;
        let n = tasks.len();
        // `dmtx_runtime::sleep_until` on this thread becomes a virtual-time event.
        let _timers = dmtx_runtime::timer::install_timer_service(Rc::new(SimTimers(sim.clone())));
        let cpu_model = sim.config().cpu.clone();
        let poll_ns = cpu_model.scaled(cpu_model.poll_ns);
        let measured = cpu_model.mode == CpuMode::Measured;
        let mut slots: Vec<TaskRun<'a>> = Vec::with_capacity(n);
        let hints = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let state: *const (dyn Future<Output = ()> + 'a) = &**t;
                [slots.as_ptr().wrapping_add(i) as usize, state as *const u8 as usize]
            })
            .collect();
        let woken = Arc::new(Woken {
            flags: (0..n).map(|_| AtomicBool::new(true)).collect(),
            hints,
            list: StateLock::new((0..n).collect()),
            any: AtomicBool::new(true),
        });
        // The distinct CPUs, each with a FIFO of its woken tasks: a CPU runs one task at
        // a time, in the order they were woken, so a task that keeps waking itself cannot
        // starve the others of its thread.
        let mut cpu_list: Vec<CpuRun> = Vec::new();
        let mut local: BTreeMap<CpuId, u32> = BTreeMap::new();
        for (index, (task, cpu)) in tasks.into_iter().zip(cpus).enumerate() {
            let cpu = cpu.map(|c| {
                *local.entry(c).or_insert_with(|| {
                    cpu_list.push(CpuRun {
                        id: c,
                        cn: sim.cpu_state(c).0,
                        ready: VecDeque::new(),
                        due: false,
                        wake_at: 0,
                    });
                    cpu_list.len() as u32 - 1
                })
            });
            slots.push(TaskRun {
                task: Some(task),
                cpu,
                queued: false,
                waker: Waker::from(Arc::new(TaskWaker {
                    index,
                    woken: Arc::clone(&woken),
                })),
            });
        }
        let mut crashed = 0usize;
        // CPUs with woken tasks to run this pass, in the order they became due.
        let mut due: Vec<u32> = Vec::with_capacity(cpu_list.len());
        let mut pass: Vec<usize> = Vec::with_capacity(n);
        let events_before = sim.stats().events;
        let mut live = n;
        let mut polls = 0u64;
        let mut spins = 0u32;
        let mut idle_passes = 0u64;
        let spin_max = sim.config().spin_passes_max.max(1);
        // Compute-node crashes already handled (`Sim::cn_crashes`).
        let mut cn_crashes_seen = 0u64;
        // Where this run stops: the deadline, or a grace after an interrupt.
        let mut stop_ns = deadline_ns;
        let report = |sim: &Sim, live: usize, polls: u64, crashed: usize| RunReport {
            end_ns: sim.now(),
            finished: n - live - crashed,
            pending: live,
            crashed,
            polls,
            events: sim.stats().events - events_before,
        };
        // Poll task `t` (on CPU `cpu`, if any); true when it finished.
        let poll = |t: &mut TaskRun<'a>, cpu: Option<CpuId>, polls: &mut u64| {
            let Some(task) = t.task.as_mut() else { return false };
            *polls += 1;
            let mut cx = Context::from_waker(&t.waker);
            let started = measured.then(std::time::Instant::now);
            let done = task.as_mut().poll(&mut cx).is_ready();
            if let (Some(c), Some(t)) = (cpu, started) {
                // Opt-in, for cross-checks: real time is not deterministic.
                sim.charge(c, (t.elapsed().as_nanos() as f64 * cpu_model.scale) as u64);
            }
            if done {
                t.task = None;
            }
            done
        };
        // A busy CPU freed (its `CpuFree` event came): run its queue this pass.
        let mut freed = false;
        loop {
            if freed || woken.any.load(Ordering::Relaxed) {
                freed = false;
                woken.any.store(false, Ordering::Relaxed);
                pass.clear();
                std::mem::swap(&mut pass, &mut *woken.list.lock());
                for &i in &pass {
                    woken.flags[i].store(false, Ordering::Relaxed);
                    let t = &mut slots[i];
                    if t.task.is_none() {
                        continue;
                    }
                    match t.cpu {
                        None => {
                            if poll(t, None, &mut polls) {
                                live -= 1;
                            }
                        }
                        Some(c) => {
                            let cpu = &mut cpu_list[c as usize];
                            if !t.queued {
                                t.queued = true;
                                cpu.ready.push_back(i);
                            }
                            if !cpu.due {
                                cpu.due = true;
                                due.push(c);
                            }
                        }
                    }
                }
                // Only CPUs with something new to run; a busy one comes back when it frees.
                for &c in &due {
                    let cpu = &mut cpu_list[c as usize];
                    cpu.due = false;
                    while let Some(&i) = cpu.ready.front() {
                        if sim.cn_down(cpu.cn) {
                            // Its coordinators stop where they are.
                            for i in cpu.ready.drain(..) {
                                let t = &mut slots[i];
                                t.queued = false;
                                if t.task.take().is_some() {
                                    live -= 1;
                                    crashed += 1;
                                }
                            }
                            break;
                        }
                        // Resuming the coroutine comes first: what the poll posts leaves
                        // after it (measured mode charges the real time afterwards).
                        if let Err(cursor) = sim.claim(cpu.id, if measured { 0 } else { poll_ns }) {
                            if cpu.wake_at < cursor {
                                cpu.wake_at = cursor;
                                sim.lock().queue.push(cursor, Event::CpuFree(c));
                            }
                            break;
                        }
                        cpu.ready.pop_front();
                        let t = &mut slots[i];
                        t.queued = false;
                        if poll(t, Some(cpu.id), &mut polls) {
                            live -= 1;
                        }
                    }
                }
                due.clear();
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
            // Before time moves: a crashed node's tasks never finish, so drop them now
            // (not when the queue runs dry, which periodic events may never let happen).
            let cn_crashes = sim.cn_crashes();
            if cn_crashes != cn_crashes_seen {
                cn_crashes_seen = cn_crashes;
                let n = drop_crashed(&sim, &mut slots, &cpu_list);
                live -= n;
                crashed += n;
                if live == 0 {
                    return Ok(report(&sim, live, polls, crashed));
                }
            }
            if interrupt.as_ref().is_some_and(|i| i.flag.load(Ordering::Relaxed)) {
                let i = interrupt.take().expect("checked");
                stop_ns = stop_ns.min(sim.now().saturating_add(i.grace_ns));
                (i.on_set)();
            }
            if let Some(p) = progress.as_mut().filter(|p| sim.now() >= p.next_ns) {
                let now = sim.now();
                (p.f)(now);
                p.next_ns = now.saturating_add(p.every_ns);
            }
            match sim.step_until(stop_ns) {
                Step::Took => idle_passes = 0,
                Step::CpuFree(c) => {
                    idle_passes = 0;
                    let cpu = &mut cpu_list[c as usize];
                    if !cpu.due {
                        cpu.due = true;
                        due.push(c);
                    }
                    freed = true;
                }
                Step::Empty if woken.any.load(Ordering::Relaxed) => {
                    idle_passes += 1;
                    if idle_passes > LIVELOCK_PASSES {
                        return Err(SimError::Livelock {
                            pending: live,
                            now_ns: sim.now(),
                        });
                    }
                }
                Step::Empty => {
                    // A crashed node's tasks were dropped above: these wait on live nodes.
                    debug_assert!(live > 0);
                    return Err(SimError::Deadlock {
                        pending: live,
                        now_ns: sim.now(),
                    });
                }
                Step::Later => {
                    // An interrupt's grace ends where the last event left time.
                    if stop_ns == deadline_ns && deadline_ns > sim.now() {
                        sim.shared.time.advance_to(deadline_ns);
                    }
                    let r = report(&sim, live, polls, crashed);
                    drop(slots);
                    return Ok(r);
                }
            }
        }
    }
}

/// The simulation as the thread's timer service during a run: a wake-up is a `Wake`
/// event, as [`Sim::sleep`]'s.
struct SimTimers(Sim);

impl dmtx_runtime::timer::TimerService for SimTimers {
    fn now_ns(&self) -> u64 {
        self.0.now()
    }

    fn wake_at(&self, at_ns: u64, waker: &Waker) {
        self.0.lock().queue.push(at_ns, Event::Wake(waker.clone()));
    }
}

/// Drop the tasks on the CPUs of crashed compute nodes; returns how many were live.
/// Their coordinators stop where they are, as the node did.
#[cold]
fn drop_crashed(sim: &Sim, slots: &mut [TaskRun<'_>], cpu_list: &[CpuRun]) -> usize {
    let down: Vec<bool> = cpu_list.iter().map(|c| sim.cn_down(c.cn)).collect();
    let mut dropped = 0;
    for t in slots {
        if t.cpu.is_some_and(|c| down[c as usize]) && t.task.take().is_some() {
            dropped += 1;
        }
    }
    dropped
}
