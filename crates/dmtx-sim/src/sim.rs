//! The simulation: virtual time, the event queue, the fabric's resource state, posts in
//! flight and the seeded RNG, behind one handle ([`Sim`]).
//!
//! Every transport of the run ([`SimFabric`](crate::SimFabric)) and the executor
//! ([`SimExecutor`](crate::SimExecutor)) share one `Sim`. The state sits in a lock (`crate::lock`)
//! only because [`dmtx_verbs::Fabric`] must be `Send + Sync`; one OS thread runs the
//! whole simulation, so the lock is never contended.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::lock::{Guard, StateLock};
use std::task::{Context, Poll, Waker};

use dmtx_verbs::{MnId, Post, Region, VerbError};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

use crate::events::EventQueue;
use crate::nic::{FabricState, NicModel};
use crate::{NodeClock, SimError, VirtualTime};

/// What a simulation is made of.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Seeds the simulation's RNG ([`Sim::fork_rng`]); print it with every failure.
    pub seed: u64,
    /// The NIC and link model of every node.
    pub nic: NicModel,
    /// The compute nodes' CPU model.
    pub cpu: crate::CpuModel,
    /// The memory nodes' persistent-memory media ([`crate::nic::PmModel`]); None: DRAM.
    pub pm: Option<crate::nic::PmModel>,
    /// Passes over runnable tasks the executor makes without virtual time moving before
    /// it takes the next event anyway: a task that only yields (a backoff loop) then
    /// costs virtual time instead of spinning forever at one instant.
    pub spin_passes_max: u32,
}

impl SimConfig {
    /// The ConnectX-5 model and the given seed.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            nic: NicModel::cx5(),
            cpu: crate::CpuModel::default(),
            pm: None,
            spin_passes_max: 1024,
        }
    }

    /// A profile's NIC, CPU and memory models and the given seed.
    pub fn from_profile(seed: u64, profile: &crate::Profile) -> Self {
        Self {
            nic: profile.nic.clone(),
            cpu: profile.cpu.clone(),
            pm: profile.pm.clone(),
            ..Self::new(seed)
        }
    }
}

/// Counters of a simulation, for speed and sanity checks.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events processed.
    pub events: u64,
    /// Posts submitted (waited for or detached).
    pub posts: u64,
    /// Batches timed and applied.
    pub batches: u64,
    /// Verbs completed (ops applied to a region, failed ones included).
    pub ops: u64,
}

impl SimStats {
    /// What was added since `before` (an earlier reading of the same run).
    pub fn since(&self, before: &SimStats) -> SimStats {
        SimStats {
            events: self.events - before.events,
            posts: self.posts - before.posts,
            batches: self.batches - before.batches,
            ops: self.ops - before.ops,
        }
    }
}

/// What [`Sim::step_until`] found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// An event was processed.
    Took,
    /// The executor's `CpuFree` event for its CPU `c` (index in the executor's own CPU
    /// list) came: the CPU may run its woken coroutines.
    CpuFree(u32),
    /// The next event lies after the deadline.
    Later,
    /// No event is pending.
    Empty,
}

/// Something that happens at a virtual time.
#[derive(Debug)]
pub(crate) enum Event {
    /// The service of one batch of a post ends: its ops take effect.
    Apply { slot: usize, mn: MnId },
    /// The reply of one batch of a post lands at the requester.
    Complete { slot: usize },
    /// A timer fires.
    Wake(Waker),
    /// A busy virtual CPU frees; only the [`SimExecutor`](crate::SimExecutor) schedules
    /// these, for itself (no waker: it handles them as [`Step::CpuFree`]).
    CpuFree(u32),
    /// A CN↔CN message reaches its receiver (`msg` module).
    Msg(Box<crate::msg::Delivery>),
    /// A scripted fault or the membership service acts (`faults`, `membership`).
    Fault(crate::faults::FaultEvent),
}

/// A post in flight: its ops, write data and result buffers (the caller's own, swapped in
/// at submit and back at completion; a copy for a detached post).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    pub post: Post,
    /// Batches whose reply has not landed yet.
    pub pending: usize,
    /// Batches of the post (one per memory node it names).
    pub batches: u32,
    /// The failure with the lowest op index, as the `mem` transport reports it (boxed:
    /// failures are rare, and the slot stays smaller).
    pub err: Option<Box<(usize, VerbError)>>,
    /// The waker of the task that last polled a post in this slot, kept across posts:
    /// a task that frees a slot and posts again reuses it (the free list is LIFO), so it
    /// is cloned only when another task takes the slot. It is woken under the state
    /// lock, so a waker must only notify, never poll or touch the simulation.
    pub waker: Option<Waker>,
    /// The post was polled while pending: wake `waker` when it completes.
    pub waiting: bool,
    pub detached: bool,
    /// Fault-script bookkeeping (untouched when no script is installed: boxed, so that
    /// the slot's hot fields share fewer cache lines).
    pub fx: Box<crate::faults::PostFaults>,
}

impl InFlight {
    pub fn fail(&mut self, index: usize, e: VerbError) {
        if self.err.as_ref().is_none_or(|f| index < f.0) {
            self.err = Some(Box::new((index, e)));
        }
    }
}

pub(crate) struct State {
    pub queue: EventQueue<Event>,
    pub fabric: FabricState,
    pub posts: Vec<InFlight>,
    pub free: Vec<usize>,
    pub next_conn: u32,
    pub rng: SmallRng,
    pub stats: SimStats,
    /// NIC load and waits, for the run's report.
    pub load: crate::report::FabricLoad,
    /// Worker threads' virtual CPUs, and who they belong to.
    pub cpus: Vec<crate::cpu::CpuState>,
    pub cpu_ids: std::collections::BTreeMap<(u32, u16), u32>,
    /// Step names charged that the CPU model does not list (priced at
    /// `step_default_ns`), each noted once ([`Sim::unpriced_steps`]).
    pub unpriced_steps: std::collections::BTreeSet<&'static str>,
    /// The fault script, node clocks' faults, CN durable areas, membership.
    pub faults: crate::faults::Faults,
}

pub(crate) struct Shared {
    pub time: VirtualTime,
    pub config: SimConfig,
    pub regions: Vec<Arc<Region>>,
    pub state: StateLock<State>,
    /// Fault flags read without the lock (crashed CNs, MN restarts).
    pub flags: crate::faults::Flags,
}

/// A handle on one simulation; clones share it.
#[derive(Clone)]
pub struct Sim {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.shared.config.seed)
            .field("now_ns", &self.now())
            .field("mn_count", &self.shared.regions.len())
            .finish()
    }
}

impl Sim {
    /// A simulation at virtual time 0 whose memory node `i` is `regions[i]`.
    pub fn new(config: SimConfig, regions: Vec<Arc<Region>>) -> Self {
        let rng = SmallRng::seed_from_u64(config.seed);
        Self {
            shared: Arc::new(Shared {
                time: VirtualTime::new(),
                config,
                regions,
                state: StateLock::new(State {
                    queue: EventQueue::new(),
                    fabric: FabricState::default(),
                    posts: Vec::new(),
                    free: Vec::new(),
                    next_conn: 0,
                    rng,
                    stats: SimStats::default(),
                    load: Default::default(),
                    cpus: Vec::new(),
                    cpu_ids: Default::default(),
                    unpriced_steps: Default::default(),
                    faults: Default::default(),
                }),
                flags: Default::default(),
            }),
        }
    }

    pub(crate) fn lock(&self) -> Guard<'_, State> {
        self.shared.state.lock()
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// The memory nodes' regions.
    pub fn regions(&self) -> &[Arc<Region>] {
        &self.shared.regions
    }

    /// Virtual time now (ns since the start of the run).
    pub fn now(&self) -> u64 {
        self.shared.time.now()
    }

    /// The run's virtual time, for building clocks.
    pub fn time(&self) -> VirtualTime {
        self.shared.time.clone()
    }

    /// A node clock with `offset_ns` and `drift_ppm` (see [`NodeClock`]).
    pub fn clock(&self, offset_ns: i64, drift_ppm: i64) -> Result<NodeClock, SimError> {
        NodeClock::new(self.time(), offset_ns, drift_ppm)
    }

    /// A new RNG seeded from the simulation's own: the n-th call of a run always gets the
    /// same seed, so give each coordinator its own in a fixed order.
    pub fn fork_rng(&self) -> SmallRng {
        SmallRng::seed_from_u64(self.lock().rng.next_u64())
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        self.lock().stats
    }

    /// A future that completes `ns` nanoseconds of virtual time from its first poll.
    pub fn sleep(&self, ns: u64) -> Sleep {
        Sleep {
            sim: self.clone(),
            ns,
            until: None,
        }
    }

    /// Time of the next event, if any.
    pub fn next_event_time(&self) -> Option<u64> {
        self.lock().queue.peek_time()
    }

    /// Take the next event, move virtual time to it and process it. Returns false when
    /// the queue was empty. Timer and message wakers are woken after the lock is
    /// released, a completed post's under it (`InFlight::waker`).
    pub fn step(&self) -> bool {
        matches!(self.step_until(u64::MAX), Step::Took | Step::CpuFree(_))
    }

    /// Take the next event if it is due no later than `deadline`, and the ones after it
    /// while they wake nothing (a batch's `Apply`, a reply its task is not waiting for
    /// yet): the executor would only call again, so one lock serves them all.
    pub(crate) fn step_until(&self, deadline: u64) -> Step {
        let mut wake = None;
        let mut delivery = None;
        let mut st = self.lock();
        let mut took = false;
        loop {
            let Some((at, event)) = st.queue.pop_until(deadline) else {
                return match (took, st.queue.is_empty()) {
                    (true, _) => Step::Took,
                    (false, true) => Step::Empty,
                    (false, false) => Step::Later,
                };
            };
            took = true;
            prefetch_next(&st);
            self.shared.time.advance_to(at.max(self.now()));
            st.stats.events += 1;
            match event {
                Event::Apply { slot, mn } if st.faults.active.is_some() => self.apply_faulty(&mut st, slot, mn),
                Event::Apply { slot, mn } => {
                    self.apply(&mut st, slot, mn);
                    continue;
                }
                // Only a fault script holds replies back, and once installed one stays
                // (installing replaces it): without one, the post's fault bookkeeping
                // (a cache line of its own) is not read.
                Event::Complete { slot } if st.faults.active.is_some() && st.posts[slot].fx.hold_until > self.now() => {
                    // A fault holds the reply back (a timeout, a delay): it lands later,
                    // or never when its compute node crashed.
                    let until = st.posts[slot].fx.hold_until;
                    if until != u64::MAX {
                        st.queue.push(until, Event::Complete { slot });
                    }
                }
                Event::Fault(ev) => self.fault_event(&mut st, ev),
                Event::Complete { slot } => {
                    let p = &mut st.posts[slot];
                    p.pending -= 1;
                    if p.pending == 0 {
                        if p.detached {
                            st.free.push(slot);
                        } else if p.waiting {
                            // Under the lock, by reference: the waker stays in the slot
                            // for the next post of the same task (no clone per post).
                            // Wakers only notify (see `InFlight::waker`).
                            p.waiting = false;
                            if let Some(w) = &p.waker {
                                w.wake_by_ref();
                            }
                            break;
                        }
                    }
                    continue;
                }
                Event::Wake(w) => wake = Some(w),
                Event::CpuFree(c) => return Step::CpuFree(c),
                // Handled below: it looks at crashed nodes, which may lock the state.
                Event::Msg(d) => delivery = Some(d),
            }
            break;
        }
        drop(st);
        if let Some(d) = delivery {
            d.arrive(self);
        }
        if let Some(w) = wake {
            w.wake();
        }
        Step::Took
    }

    /// Run the ops of `slot`'s batch for `mn` on its region, in order; the first failure
    /// skips the rest of that batch, as an RDMA queue pair in the error state does.
    fn apply(&self, st: &mut State, slot: usize, mn: MnId) {
        let region = &self.shared.regions[mn.index()];
        crate::tear::before_apply(st, region, slot, mn, self.now());
        let State { posts, stats, .. } = st;
        let p = &mut posts[slot];
        stats.batches += 1;
        let parts = p.post.parts_mut();
        let mut failed = None;
        for (i, op) in parts.ops.iter().enumerate() {
            if op.ptr().mn != mn {
                continue;
            }
            stats.ops += 1;
            // The `mem` transport's semantics and error mapping, shared.
            if let Err(e) = dmtx_verbs::apply::apply_op(region, i, op, parts.write_data, parts.read_buf, parts.old) {
                failed = Some((i, e));
                break;
            }
        }
        if let Some((i, e)) = failed {
            p.fail(i, e);
        }
    }
}

/// Start the host's cache misses of the next events' posts while this one is handled:
/// with hundreds of posts in flight (540 coordinators on a LOTUS-sized run), a post's
/// slot and buffers have left the caches by the time its batch is applied or its reply
/// lands. Two stages, since the buffers' addresses are in the slot: the slot of the
/// event after next, and for the next one (whose slot the previous call fetched) the
/// buffers its batch will read and fill, or the waker its reply will wake. Hints only:
/// nothing here changes what the simulation computes.
#[inline(always)]
fn prefetch_next(st: &State) {
    let slot_of = |e: &Event| match *e {
        Event::Apply { slot, .. } | Event::Complete { slot } => Some(slot),
        _ => None,
    };
    if let Some(p) = st.queue.peek_current(1).and_then(slot_of).and_then(|s| st.posts.get(s)) {
        dmtx_verbs::prefetch_lines(p, 3);
    }
    match st.queue.peek_current(0) {
        Some(&Event::Apply { slot, .. }) => {
            if let Some(p) = st.posts.get(slot) {
                let [ops, write, read] = p.post.buffer_addrs();
                dmtx_verbs::prefetch_lines(ops, 2);
                dmtx_verbs::prefetch_lines(write, 2);
                dmtx_verbs::prefetch_lines(read, 2);
            }
        }
        Some(&Event::Complete { slot }) => {
            if let Some(w) = st.posts.get(slot).and_then(|p| p.waker.as_ref()) {
                dmtx_verbs::prefetch_lines(w.data().cast::<u8>(), 1);
            }
        }
        _ => {}
    }
}

/// A virtual-time timer ([`Sim::sleep`]).
#[derive(Debug)]
pub struct Sleep {
    sim: Sim,
    ns: u64,
    until: Option<u64>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let now = self.sim.now();
        match self.until {
            Some(until) if now >= until => Poll::Ready(()),
            Some(_) => Poll::Pending,
            None if self.ns == 0 => Poll::Ready(()),
            None => {
                let until = now + self.ns;
                self.until = Some(until);
                self.sim.lock().queue.push(until, Event::Wake(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}
