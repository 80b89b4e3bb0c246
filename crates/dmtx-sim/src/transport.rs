//! The `sim` transport: posts travel through the NIC model on virtual time.
//!
//! [`SimFabric`] is one compute node's view of a [`Sim`]: every endpoint it hands out is
//! a [`SimTransport`] with its own connection (queue pair) per memory node, and shares
//! the node's NIC and link. [`SimTransport::submit`] takes the post's buffers (swapped
//! with a slot's, so nothing is copied; a detached post is copied, since its caller
//! keeps it), times each memory node's batch with
//! [`NicModel::time_batch`](crate::NicModel::time_batch) at the current virtual time, and
//! schedules one event per batch, `Apply` at the end of its service (the ops take effect
//! on the region, in order, and their results land in the post's buffers), and one per
//! post, `Complete` when the last of its replies lands (one per batch while a fault script
//! is installed, which may hold back or cut each). [`SimTransport::poll`] swaps the
//! buffers, results included, back once the post completed.
//!
//! Errors follow the `mem` transport: an out-of-range or misaligned op fails with a
//! [`VerbError`] and skips the rest of its batch, batches of other nodes still run, and
//! the post reports the failure of the lowest op index. An op naming a node that does
//! not exist fails with [`VerbError::UnknownNode`] without touching the fabric.
//!
//! [`Transport::progress`] takes one event of the simulation. The
//! [`SimExecutor`](crate::SimExecutor) never calls it (time moves only between its
//! passes); it is there for drivers that do not own the simulation, such as the
//! contract suite `dmtx_verbs::conformance` or a `LocalExecutor` in a quick test. Such a
//! driver is correct but, when several OS threads share one `Sim`, not deterministic.

use std::cell::RefCell;
use std::rc::Rc;
use std::task::{Context, Poll};

use dmtx_verbs::{Fabric, MnId, Post, Result, Submitted, Ticket, Transport, VerbError};

use dmtx_runtime::{Probe, ProbeSource};

use crate::cpu::CpuId;
use crate::nic::{BatchAt, BatchSum};
use crate::sim::{Event, InFlight, State};
use crate::Sim;

/// One compute node's NIC on a simulated fabric.
#[derive(Clone, Debug)]
pub struct SimFabric {
    sim: Sim,
    cn: u32,
}

impl SimFabric {
    /// The fabric of compute node `cn` (its NIC and link are shared by its endpoints).
    pub fn new(sim: &Sim, cn: u32) -> Self {
        Self { sim: sim.clone(), cn }
    }

    /// The simulation.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The compute node's id.
    pub fn cn(&self) -> u32 {
        self.cn
    }

    /// A new connection (endpoint) of this compute node whose CN-side work is free (no
    /// virtual CPU: for measuring the fabric alone). Connection ids are handed out in
    /// call order, so set endpoints up in a fixed order.
    pub fn transport(&self) -> SimTransport {
        self.connect(None)
    }

    /// A new connection of worker thread `thread`, whose posts are charged to that
    /// thread's virtual CPU ([`Sim::cpu_of`]).
    pub fn transport_of(&self, thread: u16) -> SimTransport {
        self.connect(Some(self.sim.cpu_of(self.cn, thread)))
    }

    fn connect(&self, cpu: Option<CpuId>) -> SimTransport {
        let mut st = self.sim.lock();
        let conn = st.next_conn;
        st.next_conn += 1;
        SimTransport {
            sim: self.sim.clone(),
            cn: self.cn,
            conn,
            cpu,
        }
    }
}

impl ProbeSource for SimFabric {
    fn probe(&self, thread: u16) -> Rc<dyn Probe> {
        Rc::new(SimProbe {
            sim: self.sim.clone(),
            cn: self.cn,
            cpu: self.sim.cpu_of(self.cn, thread),
            prices: RefCell::new(Vec::new()),
        })
    }
}

/// A worker thread's probe: named steps are charged to its virtual CPU, fault points go
/// to the fault script.
struct SimProbe {
    sim: Sim,
    cn: u32,
    cpu: CpuId,
    /// Step names seen (by address and length: they are `'static`) and their price: a
    /// protocol names a dozen steps several times per transaction, and looking each up
    /// by its text in the profile's map cost 3% of a FORD run.
    prices: RefCell<Vec<(usize, usize, u64)>>,
}

impl SimProbe {
    /// The price of one step `name`.
    #[inline]
    fn price(&self, name: &'static str) -> u64 {
        let key = (name.as_ptr() as usize, name.len());
        let mut prices = self.prices.borrow_mut();
        match prices.iter().find(|p| (p.0, p.1) == key) {
            Some(p) => p.2,
            None => {
                // A name seen twice at two addresses gets two entries of one price.
                let cpu = &self.sim.config().cpu;
                let ns = cpu.step_ns(name);
                if !cpu.prices_step(name) {
                    self.sim.note_unpriced_step(name);
                }
                prices.push((key.0, key.1, ns));
                ns
            }
        }
    }
}

impl Probe for SimProbe {
    fn step(&self, name: &'static str, n: u32) {
        let ns = self.price(name) * u64::from(n);
        self.sim.charge(self.cpu, ns);
    }
    fn point(&self, name: &'static str) {
        self.sim.fault_point(self.cn, name);
    }
}

impl Fabric for SimFabric {
    fn name(&self) -> &'static str {
        "sim"
    }
    fn mn_count(&self) -> usize {
        self.sim.regions().len()
    }
    fn endpoint(&self, worker: u32) -> Result<Box<dyn Transport>> {
        Ok(Box::new(self.transport_of(worker as u16)))
    }
}

/// One worker thread's connections to every memory node, on virtual time.
#[derive(Debug)]
pub struct SimTransport {
    sim: Sim,
    cn: u32,
    conn: u32,
    /// The worker thread's virtual CPU: doorbells, WQEs and CQEs are charged to it.
    cpu: Option<CpuId>,
}

/// Memory nodes a post may address: batches are found with a bit set, so ops naming a
/// node beyond it fail like unknown nodes.
const MNS_MAX: usize = 64;

impl SimTransport {
    /// The connection id (unique in the simulation).
    pub fn conn(&self) -> u32 {
        self.conn
    }

    /// The virtual CPU its posts are charged to, if any.
    pub fn cpu(&self) -> Option<CpuId> {
        self.cpu
    }

    fn start(&self, post: &mut Post, detached: bool) -> usize {
        let sim = &self.sim;
        let mn_count = sim.regions().len().min(MNS_MAX);
        let model = &sim.config().nic;
        let cpu_model = &sim.config().cpu;
        let mut guard = sim.lock();
        let st = &mut *guard;
        // The doorbells ring as the worker's CPU gets to them (DESIGN §4; Kalia et al.,
        // ATC'16): each batch costs a WQE per op and one MMIO.
        let mut now = sim.now();
        st.fabric.clock(now);
        if let Some(cpu) = self.cpu {
            now = now.max(st.cpus[cpu.index()].cursor);
        }
        st.stats.posts += 1;
        let slot = match st.free.pop() {
            Some(s) => s,
            None => {
                st.posts.push(InFlight::default());
                st.posts.len() - 1
            }
        };
        let p = &mut st.posts[slot];
        // The caller's buffers travel with the post (swapped back when it is polled
        // complete); a detached post's caller keeps its own, so it is copied.
        match detached {
            false => std::mem::swap(&mut p.post, post),
            true => p.post.clone_from(post),
        }
        p.err = None;
        p.waiting = false;
        p.detached = detached;
        let mut mns: u64 = 0;
        let mut unknown = None;
        let regions = sim.regions();
        // The post summed up on the way while its ops name one node: the batch's sum
        // when it is the only one. A post to several nodes stops summing at its second
        // node (each batch is summed on its own below).
        let mut whole = BatchSum::default();
        for (i, op) in p.post.ops().iter().enumerate() {
            let ptr = op.ptr();
            let mn = ptr.mn;
            if mn.index() < mn_count {
                mns |= 1 << mn.index();
                if mns == 1 << mn.index() {
                    model.sum_op(&mut whole, op);
                }
                // The op's memory is touched when its batch is applied, some posts
                // later: start the host's cache miss now, so that it overlaps them.
                // (An atomic's word, or a FLUSH's: 8 bytes.)
                let len = u64::from(op.payload_len()).max(8);
                regions[mn.index()].prefetch(ptr.offset, len);
            } else if unknown.is_none() {
                unknown = Some((i, mn));
            }
        }
        if let Some((i, mn)) = unknown {
            p.fail(
                i,
                VerbError::UnknownNode {
                    mn,
                    mn_count: regions.len(),
                },
            );
        }
        // Most posts go to one memory node: no bit count then.
        let batches = match mns & mns.wrapping_sub(1) {
            0 => (mns != 0) as u32,
            _ => mns.count_ones(),
        };
        p.pending = (batches as usize).max(1);
        p.batches = batches;
        // Fault script: a crashed CN's posts never run; triggers count the ops.
        if st.faults.active.is_some() && !sim.fault_admit(st, slot, self.cn, self.conn, now) {
            return slot;
        }
        if mns == 0 {
            st.queue.push(now, Event::Complete { slot });
            return slot;
        }
        // Without a fault script, the post completes with its last batch's reply: one
        // event for the post, beside one per batch for its service end. A script
        // follows each batch's reply (it may hold one back, or cut one path).
        let faulty = st.faults.active.is_some();
        // A slow NIC's model sums the batch again (its link times differ).
        let single = batches == 1 && unknown.is_none() && !faulty;
        let pm = sim.config().pm.as_ref();
        let mut done = now;
        let mut left = mns;
        while left != 0 {
            let mn = MnId(left.trailing_zeros() as u16);
            left &= left - 1;
            // Fault script: a cut path fails after the timeout, a slow NIC scales the model.
            let slow = match faulty {
                false => None,
                true => match sim.fault_gate(st, slot, self.cn, mn, now) {
                    Some(m) => m,
                    None => continue,
                },
            };
            let model = slow.as_ref().unwrap_or(model);
            let State {
                posts,
                fabric,
                load,
                cpus,
                queue,
                ..
            } = &mut *st;
            // One pass sums the batch up for the CPU model, the timing and the report.
            let ops = posts[slot].post.ops().iter().filter(move |o| o.ptr().mn == mn);
            let sum = match single {
                true => model.sum_done(whole),
                false => model.sum_batch(ops.clone()),
            };
            let mut t = now;
            if let Some(cpu) = self.cpu {
                // WRITE payloads are built (images, checksums) before the doorbell.
                let cost = cpu_model.scaled(
                    cpu_model.wqe_ns * sum.ops
                        + cpu_model.doorbell_ns
                        + sum.write_bytes * cpu_model.copy_ns_per_kib / 1024,
                );
                let cpu = &mut cpus[cpu.index()];
                cpu.cursor = now.max(cpu.cursor) + cost;
                cpu.busy_ns += cost;
                t = cpu.cursor;
            }
            let at = BatchAt {
                cn: self.cn,
                conn: self.conn,
                mn: mn.0,
                t,
                slot: Some(slot as u32),
            };
            let tm = model.time_summed(pm, fabric, at, &sum, ops);
            load.batch(self.cn, mn.0, t, &tm, &sum);
            queue.push(tm.end, Event::Apply { slot, mn });
            if faulty {
                queue.push(tm.done, Event::Complete { slot });
                sim.fault_batch(st, slot, mn, &tm, now);
            } else {
                done = done.max(tm.done);
            }
        }
        if !faulty {
            st.posts[slot].pending = 1;
            st.queue.push(done, Event::Complete { slot });
        }
        slot
    }
}

impl Transport for SimTransport {
    fn mn_count(&self) -> usize {
        self.sim.regions().len()
    }

    fn submit(&self, post: &mut Post) -> Submitted {
        Submitted::Pending(Ticket(self.start(post, false) as u64))
    }

    fn poll(&self, ticket: Ticket, post: &mut Post, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let slot = ticket.0 as usize;
        let mut st = self.sim.lock();
        let p = &mut st.posts[slot];
        if p.pending > 0 {
            p.waiting = true;
            match &p.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => p.waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        crate::tear::before_poll(&mut st, slot);
        let p = &mut st.posts[slot];
        // The caller's buffers, with the results, go back to it.
        std::mem::swap(&mut p.post, post);
        // One CQE per batch, and the READ payloads copied out (the NIC wrote them to
        // the caller's buffers; the application copies them from there).
        let cpu_model = &self.sim.config().cpu;
        let read_bytes = post.parts_mut().read_buf.len() as u64;
        let cost = cpu_model.scaled(cpu_model.cqe_ns * p.batches as u64)
            + cpu_model.scaled((read_bytes * cpu_model.copy_ns_per_kib) / 1024);
        let res = match p.err.take() {
            None => Ok(()),
            Some(f) => Err(f.1),
        };
        // Mark the slot spent so a stale ticket cannot read a later post's results.
        p.pending = usize::MAX;
        st.free.push(slot);
        if let Some(cpu) = self.cpu {
            let now = self.sim.now();
            let cpu = &mut st.cpus[cpu.index()];
            cpu.cursor = cpu.cursor.max(now) + cost;
            cpu.busy_ns += cost;
        }
        Poll::Ready(res)
    }

    fn submit_detached(&self, post: &mut Post) {
        self.start(post, true);
    }

    /// Memory-node restarts in the simulation so far: every endpoint reconnects and
    /// sees them.
    fn restarts(&self) -> u64 {
        self.sim.mn_restarts()
    }

    fn progress(&self) {
        self.sim.step();
    }

    fn progress_nowait(&self) {
        self.sim.step();
    }
}
