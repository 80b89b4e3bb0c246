//! The `sim` messaging transport: CN↔CN two-sided SENDs on virtual time, implementing
//! the [`dmtx_verbs::msg`] contract, and [`serve`], which drives a worker's
//! [`Rpc`] on the [`SimExecutor`](crate::SimExecutor).
//!
//! LOTUS (§4.1) forwards lock requests to the CN that owns the lock "via RDMA SEND/RECV
//! based RPC", batches a transaction's requests to one CN into one message, and runs the
//! handler on the target's worker thread with no RPC threads. This module gives such
//! protocols the same [`Mailbox`] they get from `mem` and `tcp`.
//!
//! # The path of a message
//!
//! [`Mailbox::flush`] sends each destination's queued entries as one message (the
//! encoding of [`dmtx_verbs::msg::encode_entry`]). For a message of `b` encoded bytes
//! from worker `(cn_s, ts)` to `(cn_r, tr)`, flushed at virtual time `now`:
//!
//! 1. **Sender CPU.** One `msg.send` step is charged to the sender's virtual CPU
//!    ([`Sim::cpu_of`]); the message leaves when that CPU has done it:
//!    `t = max(now, cpu cursor) + step(msg.send)`, as a post's doorbell does.
//! 2. **Wire** ([`NicModel::time_send`]). The sender's NIC fetches the payload from CN
//!    memory over its PCIe while it sends (cut-through, on the budget its WRITE payloads
//!    use). The SEND is segmented like a WRITE ([`NicModel::send_bytes`]: one header
//!    per MTU packet, no RETH), serialized on `cn_s`'s tx link, crosses
//!    [`NicModel::one_way_latency_ns`] and is serialized on `cn_r`'s rx link. These are
//!    the same links and PCIe budget the CN's verbs use, so messages and verbs contend.
//!    Uncontended: `arrival = t + latency + max(link(send_bytes(b)), pcie(b))` (the
//!    link term wins on every built-in profile but a `cx6` on a Gen3 slot).
//! 3. **RECV.** The receiver's NIC spends [`NicModel::recv_service_ns`] (fetching the
//!    receive WQE, placing the payload, writing the CQE): the message is delivered, as
//!    one `Event::Msg` of the simulation, at `arrival + recv_service_ns`. The delivery
//!    puts it in the receiver's inbox and wakes the task that waits on that mailbox.
//! 4. **Receiver CPU.** [`Mailbox::drain`] charges one `msg.recv` step per entry to the
//!    receiving worker's CPU; the handler's own work is charged by whatever it does.
//!
//! So an uncontended RPC with CPU costs off takes
//! `Σ over request and reply of (latency + link(send_bytes(b)) + recv_service_ns)`.
//! Messages between workers of one CN do not touch the NIC: they are delivered at `t`
//! (shared memory). ACKs are not modelled (LOTUS uses UD SENDs, which have none, and RC
//! acknowledgements are coalesced); nor is contention among RECVs inside the receiver's
//! NIC (its links bound the rate).
//!
//! # Contract
//!
//! - **Batching**: entries pushed to one destination between two flushes are one
//!   message, one `msg.send` and one wire transfer.
//! - **FIFO per pair**: a message is delivered no earlier than the previous one of its
//!   pair (links take transfers in the first gap that fits, so a short message could
//!   otherwise pass a long one, which one queue pair's messages never do), and the
//!   event queue breaks ties by insertion, so deliveries from one sender to one receiver
//!   are in flush order (checked at every delivery with per-pair sequence numbers).
//! - **Crashes**: a CN is down when [`SimMsgNet::set_down`] says so or when
//!   [`Sim::cn_down`] does. Messages from or to a down CN are dropped (at flush and at
//!   delivery) and its inboxes are emptied when the crash is noticed. Each crash (a
//!   transition to down, noticed at [`SimMsgNet::set_down`], at a flush, a delivery or
//!   a drain) is reported **once** as [`Event::PeerLost`] to every mailbox that has
//!   exchanged messages with the crashed worker, however many of their messages it took
//!   with it. A later flush that finds the peer still down loses that flush's entries
//!   and reports the peer again (as `mem` does and `tcp` does during its reconnect
//!   backoff), so an RPC to a dead node fails after its retries instead of waiting for
//!   timeouts.
//! - **Link downs and partitions** (fault script) drop a message that arrives while its
//!   two compute nodes are cut apart, silently: nobody crashed, so the caller's RPC times
//!   out and retries, as over a real network.
//! - **Slow NICs and delays** (fault script) stretch a message's path: next section.
//!
//! # Slow NICs and delays (fault script)
//!
//! A message between two compute nodes is timed with each end's NIC as it is at the
//! flush instant `now`: `m_s` for the sender and `m_r` for the receiver, each the model
//! a `slow-nic` fault on that CN scales by its factor (link, latency and RECV service
//! too) while it lasts, else the configured one. Each end's own resources run at its
//! own speed, and the latency is the slower end's (a slow NIC's pipeline is on the path
//! at either end; the switch between them is shared, so the two do not add). With
//! `b' = send_bytes(b)`, and `first(R, t, len, floor)` the first gap of resource `R`
//! from `t` on that holds `len` (held until `floor`), as in the `nic` module doc:
//!
//! - sender's PCIe and tx link at its rates: `d = first(pcie, t, m_s.pcie(b))`,
//!   `s = first(tx, d, m_s.link(b'), d + m_s.pcie(b))`, ending at `tx_end` (no fetch
//!   when `b = 0`);
//! - latency `lat = max(m_s.latency, m_r.latency)`;
//! - receiver's rx link at its rate, but never done before the slow sender's last byte
//!   can be there: `r = first(rx, s + lat, m_r.link(b'), tx_end + lat)`, ending at
//!   `arrival`;
//! - RECV at the receiver's speed: delivered at `arrival + m_r.recv_service_ns`.
//!
//! With both ends unscaled this is exactly [`NicModel::time_send`] (`r ≥ s + lat` makes
//! the floor bind only when the sender's PCIe fetch is slower than its link), and that
//! is what runs then. Uncontended (and the link slower than PCIe), a
//! receiver `k` times slower gives `time_send` of the scaled model,
//! `k·latency + link_k(b') + k·recv_service_ns`; a sender `k` times slower gives
//! `k·latency + link_k(b') + recv_service_ns`.
//!
//! A `delay by=D path=cnA->cnB` fault in effect at `now` delivers a message from `cnA`
//! to `cnB` `D` later; the other direction and other pairs are untouched. A `delay by=D
//! node=cnN` fault delivers every message cnN sends or receives `D` later. The largest
//! `D` in effect on the message applies. Messages within one compute node cross no NIC
//! and see none of these faults.
//!
//! FIFO per pair survives both: a message is never delivered before the previous one of
//! its pair (a delayed or slowed message holds back the later ones of its pair, as one
//! queue pair's messages stay in order).
//!
//! # Driving RPC on the simulator: [`serve`]
//!
//! On real threads, `LocalExecutor` calls [`Rpc::progress`] after every pass over a
//! worker's coordinators. The [`SimExecutor`](crate::SimExecutor) has no per-worker
//! passes, so each worker runs one more task, [`serve`], which calls `progress` exactly
//! when there is something to do and otherwise sleeps on a waker (never spinning, so
//! virtual time is not held back):
//!
//! - a message was delivered to the worker's mailbox or a loss was reported to it (the
//!   delivery event wakes the task);
//! - a coordinator of the worker pushed an entry (a call, a one-way message, a deferred
//!   reply): [`Mailbox::push`] wakes the serving task, which flushes in the next
//!   executor pass, at the same virtual instant. Everything the worker's coordinators
//!   push in the passes of one instant thus leaves as one message per destination, as a
//!   real executor's pass would send it;
//! - calls are in flight: a timer every [`Serve::tick_ns`] runs `progress` so that RPC
//!   deadlines expire (a timeout fires up to one tick late) and a crash reported only
//!   through [`Sim::cn_down`] is noticed;
//! - the [`ServeStop`] shared by the run's workers fires: one last `progress`, and the
//!   task ends, so that [`SimExecutor::run`](crate::SimExecutor::run) can finish. It
//!   also ends when its own CN is down ([`Sim::cn_down`]).
//!
//! Spawn the serving task on the worker's CPU
//! ([`SimExecutor::spawn_on`](crate::SimExecutor::spawn_on)), as LOTUS runs its lock
//! RPCs on the worker threads (§4.1): each pass of it costs a poll, `msg.send` and
//! `msg.recv` are charged there, and a handler waits for the coordinator poll in
//! progress on its thread. (The lock-service test runs it so.) Spawned with plain
//! `spawn` it still charges the steps but never waits for the CPU.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use crate::lock::{Guard, StateLock};
use std::task::{Context, Poll, Waker};

use dmtx_runtime::Rpc;
use dmtx_verbs::msg::{check_size, decode_entries, Entry, Event, Mailbox, MsgError, MsgFabric, Outbox, WorkerAddr};

use crate::cpu::CpuId;
use crate::sim::Event as SimEvent;
use crate::{NicModel, Node, Sim, Sleep};

/// Messages that may wait in one worker's inbox: far beyond any run's need; reaching it
/// means a receiver is never drained.
pub const INBOX_MESSAGES_MAX: usize = 1 << 20;

/// Default period of [`Serve`]'s timer while calls are in flight (50 µs of virtual time:
/// about twenty uncontended round trips, far below any sensible RPC timeout).
pub const SERVE_TICK_NS_DEFAULT: u64 = 50_000;

/// Counters of a [`SimMsgNet`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MsgStats {
    /// Messages sent (one per destination per flush), dropped ones included.
    pub messages: u64,
    /// Entries in those messages.
    pub entries: u64,
    /// Bytes on the wire (headers included) of messages between compute nodes.
    pub wire_bytes: u64,
    /// Messages delivered to an inbox.
    pub delivered: u64,
    /// Messages dropped because their sender or receiver was down, or their path was cut.
    pub dropped: u64,
    /// Messages a scripted `delay path=` delivered later.
    pub delayed: u64,
    /// [`Event::PeerLost`] handed to mailboxes.
    pub peer_lost: u64,
}

/// Every worker's mailbox state of a simulated cluster of compute nodes. See the module
/// doc.
#[derive(Debug)]
pub struct SimMsgNet {
    sim: Sim,
    shared: Arc<NetShared>,
}

/// The part of the network that deliveries in the event queue point to. It holds no
/// [`Sim`], so events do not keep the simulation alive in a cycle.
#[derive(Debug)]
pub(crate) struct NetShared {
    workers: Vec<WorkerAddr>,
    cns: u16,
    threads: u16,
    state: StateLock<NetState>,
}

#[derive(Debug)]
struct NetState {
    slots: Vec<Slot>,
    /// Per CN: down by [`SimMsgNet::set_down`].
    forced_down: Vec<bool>,
    /// Per CN: down when last looked at.
    was_down: Vec<bool>,
    /// Per CN: how many times it went down (epoch 0: never).
    epoch: Vec<u64>,
    stats: MsgStats,
}

/// One worker's end, shared by its mailboxes, the deliveries and its serving task.
///
/// Invariants: (1) `lost` holds a peer at most once; (2) `reported[p]` is the epoch of
/// `p`'s CN whose crash was last reported here, so a crash is reported once; (3) `inbox`
/// holds at most [`INBOX_MESSAGES_MAX`] messages; (4) and (5) below.
#[derive(Debug, Default)]
struct Slot {
    /// Delivered messages not yet drained: (sender index, encoded entries).
    inbox: VecDeque<(u32, Vec<u8>)>,
    /// Loss reports not yet drained: (peer index, why).
    lost: Vec<(u32, String)>,
    /// Per peer index: the crash epoch last reported (0: none).
    reported: Vec<u64>,
    /// Per peer index: a message went either way (a "connection" a crash breaks).
    seen: Vec<bool>,
    /// A mailbox of this worker holds entries not flushed yet.
    queued: bool,
    /// The task waiting for this worker's mailbox ([`serve`]).
    waker: Option<Waker>,
    /// Per destination index: messages sent to it (the last one's sequence number).
    sent_seq: Vec<u64>,
    /// Per destination index: when the last message sent to it is delivered. Invariant
    /// 5: a later one is delivered no earlier (FIFO per pair under slow NICs and delays).
    sent_due: Vec<u64>,
    /// Per sender index: the sequence number of the last message delivered from it.
    /// Invariant 4: it only grows (FIFO per pair; a dropped message leaves a gap).
    delivered_seq: Vec<u64>,
}

impl Slot {
    fn has_work(&self) -> bool {
        self.queued || !self.inbox.is_empty() || !self.lost.is_empty()
    }

    /// Queue a loss report of `peer` (its CN's crash `epoch`). `again`: report even if
    /// this crash was reported already (a new send attempt was lost). Returns whether a
    /// report was queued.
    fn report(&mut self, peer: u32, why: String, epoch: u64, again: bool) -> bool {
        let p = peer as usize;
        if self.lost.iter().any(|(q, _)| *q == peer) {
            return false; // invariant 1
        }
        if !again && self.reported[p] == epoch {
            return false; // invariant 2
        }
        self.reported[p] = epoch;
        self.lost.push((peer, why));
        true
    }
}

impl NetShared {
    fn lock(&self) -> Guard<'_, NetState> {
        self.state.lock()
    }

    fn index(&self, a: WorkerAddr) -> Option<u32> {
        (a.cn < self.cns && a.thread < self.threads)
            .then(|| u32::from(a.cn) * u32::from(self.threads) + u32::from(a.thread))
    }

    /// Whether `cn` is down now, and if so the epoch of its crash. Notices a crash
    /// [`Sim::cn_down`] reports: the first time, the CN's inboxes are emptied and every
    /// mailbox that exchanged messages with one of its workers gets one loss report.
    /// Never call with the simulation's state locked (`Sim::cn_down` may lock it).
    fn observe(&self, sim: &Sim, cn: u16) -> Option<u64> {
        let sim_down = sim.cn_down(u32::from(cn));
        let mut wake = Vec::new();
        let epoch = {
            let mut st = self.lock();
            let c = usize::from(cn);
            let down = sim_down || st.forced_down[c];
            if !down {
                st.was_down[c] = false;
                return None;
            }
            if !st.was_down[c] {
                st.was_down[c] = true;
                st.epoch[c] += 1;
                let epoch = st.epoch[c];
                self.crashed(&mut st, cn, epoch, &mut wake);
            }
            st.epoch[c]
        };
        for w in wake {
            w.wake();
        }
        Some(epoch)
    }

    /// `cn` just went down (crash `epoch`).
    fn crashed(&self, st: &mut NetState, cn: u16, epoch: u64, wake: &mut Vec<Waker>) {
        let t = usize::from(self.threads);
        let dead = usize::from(cn) * t..usize::from(cn + 1) * t;
        for i in dead.clone() {
            let s = &mut st.slots[i];
            s.inbox.clear();
            s.lost.clear();
            s.queued = false;
        }
        for (i, s) in st.slots.iter_mut().enumerate() {
            if dead.contains(&i) {
                continue;
            }
            let mut told = false;
            for peer in dead.clone() {
                if s.seen[peer] {
                    let why = format!("{} is down", self.workers[peer]);
                    told |= s.report(peer as u32, why, epoch, false);
                }
            }
            if told {
                wake.extend(s.waker.take());
            }
        }
    }
}

impl SimMsgNet {
    /// A network of `cns` compute nodes with `threads` workers each, on `sim`.
    pub fn new(sim: &Sim, cns: u16, threads: u16) -> Arc<Self> {
        assert!(cns > 0 && threads > 0, "a messaging network needs a worker");
        let workers: Vec<WorkerAddr> = (0..cns)
            .flat_map(|cn| (0..threads).map(move |t| WorkerAddr::new(cn, t)))
            .collect();
        let n = workers.len();
        let slots = (0..n)
            .map(|_| Slot {
                reported: vec![0; n],
                seen: vec![false; n],
                sent_seq: vec![0; n],
                sent_due: vec![0; n],
                delivered_seq: vec![0; n],
                ..Slot::default()
            })
            .collect();
        let c = usize::from(cns);
        Arc::new(Self {
            sim: sim.clone(),
            shared: Arc::new(NetShared {
                workers,
                cns,
                threads,
                state: StateLock::new(NetState {
                    slots,
                    forced_down: vec![false; c],
                    was_down: vec![false; c],
                    epoch: vec![0; c],
                    stats: MsgStats::default(),
                }),
            }),
        })
    }

    /// The simulation.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// Compute node `cn`'s view, which hands its threads their mailboxes.
    pub fn fabric(self: &Arc<Self>, cn: u16) -> SimMsgFabric {
        assert!(
            cn < self.shared.cns,
            "cn{cn} is not in this network of {} CNs",
            self.shared.cns
        );
        SimMsgFabric {
            net: Arc::clone(self),
            cn,
        }
    }

    /// The mailbox of worker `addr`. Several mailboxes of one worker share its inbox.
    pub fn mailbox(&self, addr: WorkerAddr) -> Result<SimMailbox, MsgError> {
        let index = self.shared.index(addr).ok_or(MsgError::UnknownPeer { to: addr })?;
        Ok(SimMailbox {
            sim: self.sim.clone(),
            net: Arc::clone(&self.shared),
            addr,
            index,
            cpu: self.sim.cpu_of(u32::from(addr.cn), addr.thread),
            send_ns: self.sim.config().cpu.step_ns("msg.send"),
            recv_ns: self.sim.config().cpu.step_ns("msg.recv"),
            out: RefCell::new(Outbox::new()),
        })
    }

    /// Crash (or revive) compute node `cn` for messaging: while down, messages from and
    /// to it are dropped, its inboxes are emptied, and its peers get [`Event::PeerLost`]
    /// (module doc, "Crashes").
    pub fn set_down(&self, cn: u16, down: bool) {
        assert!(cn < self.shared.cns, "cn{cn} is not in this network");
        self.shared.lock().forced_down[usize::from(cn)] = down;
        self.shared.observe(&self.sim, cn);
    }

    /// True when `cn` is down ([`SimMsgNet::set_down`] or [`Sim::cn_down`]).
    pub fn is_down(&self, cn: u16) -> bool {
        self.shared.observe(&self.sim, cn).is_some()
    }

    /// Counters so far.
    pub fn stats(&self) -> MsgStats {
        self.shared.lock().stats
    }
}

/// One compute node's view of a [`SimMsgNet`].
#[derive(Clone, Debug)]
pub struct SimMsgFabric {
    net: Arc<SimMsgNet>,
    cn: u16,
}

impl SimMsgFabric {
    /// The network.
    pub fn net(&self) -> &Arc<SimMsgNet> {
        &self.net
    }
}

impl MsgFabric for SimMsgFabric {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn workers(&self) -> Vec<WorkerAddr> {
        self.net.shared.workers.clone()
    }

    fn mailbox(&self, thread: u16) -> Result<Box<dyn Mailbox>, MsgError> {
        Ok(Box::new(self.net.mailbox(WorkerAddr::new(self.cn, thread))?))
    }
}

/// A worker's mailbox on a [`SimMsgNet`].
#[derive(Debug)]
pub struct SimMailbox {
    sim: Sim,
    net: Arc<NetShared>,
    addr: WorkerAddr,
    index: u32,
    cpu: CpuId,
    /// The `msg.send` and `msg.recv` steps' prices, looked up once (by name in the
    /// profile's map, they were paid per message).
    send_ns: u64,
    recv_ns: u64,
    /// Per destination index: the encoded entries queued since the last flush, and how
    /// many there are.
    out: RefCell<Outbox>,
}

/// A message on its way: processed as `Event::Msg` at its delivery time.
#[derive(Debug)]
pub(crate) struct Delivery {
    net: Arc<NetShared>,
    from: u32,
    to: u32,
    /// Its number among the messages `from` sent to `to` (from 1).
    seq: u64,
    msg: Vec<u8>,
}

impl Delivery {
    /// The message reaches its receiver: into the inbox, or dropped if either end is
    /// down. Called by [`Sim::step`] with the simulation's state unlocked.
    pub(crate) fn arrive(self, sim: &Sim) {
        let net = &self.net;
        let (from, to) = (net.workers[self.from as usize], net.workers[self.to as usize]);
        if from.cn != to.cn && sim.path_cut(u32::from(from.cn), u32::from(to.cn)) {
            // A link down or a partition drops the message silently, as a network does:
            // the caller's RPC times out and retries (no peer is reported lost, since
            // none crashed).
            net.lock().stats.dropped += 1;
            return;
        }
        let to_down = net.observe(sim, to.cn);
        let from_down = net.observe(sim, from.cn);
        let waker = {
            let mut st = net.lock();
            match (to_down, from_down) {
                (None, None) => {
                    st.stats.delivered += 1;
                    let s = &mut st.slots[self.to as usize];
                    let last = &mut s.delivered_seq[self.from as usize];
                    assert!(
                        *last < self.seq,
                        "FIFO {from} -> {to}: message {} delivered after message {last}",
                        self.seq
                    ); // invariant 4
                    *last = self.seq;
                    assert!(
                        s.inbox.len() < INBOX_MESSAGES_MAX,
                        "{to}: {INBOX_MESSAGES_MAX} messages wait undrained; is its worker served?"
                    );
                    s.inbox.push_back((self.from, self.msg));
                    s.seen[self.from as usize] = true;
                    s.waker.take()
                }
                (Some(epoch), None) => {
                    // The sender learns of the crash once (module doc, "Crashes").
                    st.stats.dropped += 1;
                    let s = &mut st.slots[self.from as usize];
                    let told = s.report(self.to, format!("{to} is down"), epoch, false);
                    if told {
                        s.waker.take()
                    } else {
                        None
                    }
                }
                (None, Some(epoch)) => {
                    st.stats.dropped += 1;
                    let s = &mut st.slots[self.to as usize];
                    let told = s.report(self.from, format!("{from} is down"), epoch, false);
                    if told {
                        s.waker.take()
                    } else {
                        None
                    }
                }
                (Some(_), Some(_)) => {
                    st.stats.dropped += 1;
                    None
                }
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl SimMailbox {
    /// Send one message of `entries` entries to worker index `to` (module doc, "The path
    /// of a message").
    fn send(&self, model: &NicModel, to: u32, msg: Vec<u8>, entries: u32) {
        let dest = self.net.workers[to as usize];
        {
            let mut st = self.net.lock();
            st.stats.messages += 1;
            st.stats.entries += u64::from(entries);
        }
        if self.net.observe(&self.sim, self.addr.cn).is_some() {
            // A crashed node sends nothing.
            self.net.lock().stats.dropped += 1;
            return;
        }
        if let Some(epoch) = self.net.observe(&self.sim, dest.cn) {
            let waker = {
                let mut st = self.net.lock();
                st.stats.dropped += 1;
                let s = &mut st.slots[self.index as usize];
                s.seen[to as usize] = true;
                s.report(to, format!("{dest} is down"), epoch, true);
                // The serving task is flushing right now; it looks at `lost` next.
                s.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
            return;
        }
        self.sim.charge(self.cpu, self.send_ns);
        // Charging moved the cursor to at least now: the CPU is done with the send then.
        let (_, t) = self.sim.cpu_state(self.cpu);
        let len = msg.len() as u64;
        let (seq, due_before) = {
            let mut st = self.net.lock();
            let s = &mut st.slots[self.index as usize];
            s.sent_seq[to as usize] += 1;
            (s.sent_seq[to as usize], s.sent_due[to as usize])
        };
        let delivery = Delivery {
            net: Arc::clone(&self.net),
            from: self.index,
            to,
            seq,
            msg,
        };
        let (mut wire, mut delay) = (0, 0);
        let at = {
            let mut guard = self.sim.lock();
            let st = &mut *guard;
            let at = if dest.cn == self.addr.cn {
                t
            } else {
                wire = model.send_bytes(len);
                let (from, to) = (u32::from(self.addr.cn), u32::from(dest.cn));
                st.fabric.clock(self.sim.now());
                match st.faults.active.as_deref() {
                    None => model.time_send(&mut st.fabric, from, to, len, t),
                    Some(fs) => {
                        let now = self.sim.now();
                        let (ms, mr) = (fs.slow_model(Node::Cn(from), now), fs.slow_model(Node::Cn(to), now));
                        delay = fs.msg_delay_ns(from, to, now);
                        let ends = (ms.unwrap_or(model), mr.unwrap_or(model));
                        NicModel::time_send_between(ends, &mut st.fabric, from, to, len, t) + delay
                    }
                }
            };
            // Invariant 5: FIFO per pair.
            let at = at.max(due_before);
            st.queue.push(at, SimEvent::Msg(Box::new(delivery)));
            at
        };
        let mut st = self.net.lock();
        st.stats.wire_bytes += wire;
        st.stats.delayed += u64::from(delay > 0);
        let s = &mut st.slots[self.index as usize];
        s.seen[to as usize] = true;
        s.sent_due[to as usize] = at;
    }
}

impl Mailbox for SimMailbox {
    fn addr(&self) -> WorkerAddr {
        self.addr
    }

    fn workers(&self) -> &[WorkerAddr] {
        &self.net.workers
    }

    fn push(&self, to: WorkerAddr, entry: Entry<'_>) -> Result<(), MsgError> {
        check_size(&entry)?;
        let i = self.net.index(to).ok_or(MsgError::UnknownPeer { to })?;
        self.out.borrow_mut().push(i as usize, &entry);
        // Wake the serving task: it flushes in the next pass, at this virtual instant.
        let waker = {
            let mut st = self.net.lock();
            let s = &mut st.slots[self.index as usize];
            if s.queued {
                None
            } else {
                s.queued = true;
                s.waker.take()
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    fn flush(&self) {
        self.net.lock().slots[self.index as usize].queued = false;
        let model = &self.sim.config().nic;
        self.out
            .borrow_mut()
            .flush(|to, msg, entries| self.send(model, to as u32, msg, entries));
    }

    fn drain(&self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        // Notice crashes reported only by `Sim::cn_down`, with no traffic to show them.
        for cn in 0..self.net.cns {
            self.net.observe(&self.sim, cn);
        }
        let (lost, inbox) = {
            let mut st = self.net.lock();
            let s = &mut st.slots[self.index as usize];
            if s.lost.is_empty() && s.inbox.is_empty() {
                return 0;
            }
            let taken = (std::mem::take(&mut s.lost), std::mem::take(&mut s.inbox));
            st.stats.peer_lost += taken.0.len() as u64;
            taken
        };
        let mut n = 0;
        for (peer, why) in lost {
            f(Event::PeerLost {
                peer: self.net.workers[peer as usize],
                why,
            });
            n += 1;
        }
        let mut entries = 0u32;
        for (from, msg) in inbox {
            let from = self.net.workers[from as usize];
            match decode_entries(&msg, &mut |entry| f(Event::Entry { from, entry })) {
                Ok(k) => entries += k as u32,
                // Unreachable with this module's own encoding; kept as `mem` handles it.
                Err(e) => {
                    f(Event::PeerLost {
                        peer: from,
                        why: format!("malformed message: {e}"),
                    });
                    n += 1;
                }
            }
        }
        if entries > 0 {
            self.sim.charge(self.cpu, self.recv_ns * u64::from(entries));
        }
        n + entries as usize
    }
}

/// Ends the [`serve`] tasks of a run: when [`ServeStop::stop`] is called, or when
/// [`ServeStop::done_one`] was called as many times as [`ServeStop::after`] said. Clones
/// share it.
#[derive(Clone, Debug, Default)]
pub struct ServeStop(Rc<StopState>);

#[derive(Debug, Default)]
struct StopState {
    remaining: Cell<usize>,
    stopped: Cell<bool>,
    wakers: RefCell<Vec<Waker>>,
}

impl ServeStop {
    /// A stop that fires only on [`ServeStop::stop`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A stop that fires after `n` calls of [`ServeStop::done_one`] (one per coordinator
    /// of the run, say); `n = 0` has fired already.
    pub fn after(n: usize) -> Self {
        let s = Self::default();
        s.0.remaining.set(n);
        s.0.stopped.set(n == 0);
        s
    }

    /// One of the `n` things [`ServeStop::after`] waits for finished.
    pub fn done_one(&self) {
        let r = self.0.remaining.get();
        assert!(
            r > 0,
            "ServeStop::done_one called more often than ServeStop::after said"
        );
        self.0.remaining.set(r - 1);
        if r == 1 {
            self.stop();
        }
    }

    /// Fire: every serving task ends after one last `progress`.
    pub fn stop(&self) {
        self.0.stopped.set(true);
        for w in self.0.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// True once fired.
    pub fn is_stopped(&self) -> bool {
        self.0.stopped.get()
    }

    fn register(&self, w: &Waker) {
        let mut ws = self.0.wakers.borrow_mut();
        if !ws.iter().any(|x| x.will_wake(w)) {
            ws.push(w.clone());
        }
    }
}

/// Drive worker `rpc`'s messaging on the [`SimExecutor`](crate::SimExecutor): spawn
/// one per worker, before or after its coordinators. `rpc` must sit on a mailbox of
/// `net` ([`SimMsgNet::mailbox`] or [`SimMsgFabric`]) and should read time from a
/// clock of `net`'s simulation ([`Sim::clock`]). See the module doc.
pub fn serve(net: &SimMsgNet, rpc: Rc<Rpc>, stop: ServeStop) -> Serve {
    let index = net
        .shared
        .index(rpc.addr())
        .unwrap_or_else(|| panic!("{} is not a worker of this network", rpc.addr()));
    Serve {
        sim: net.sim.clone(),
        net: Arc::clone(&net.shared),
        index,
        rpc,
        stop,
        tick_ns: SERVE_TICK_NS_DEFAULT,
        timer: None,
    }
}

/// The future of [`serve`].
#[derive(Debug)]
pub struct Serve {
    sim: Sim,
    net: Arc<NetShared>,
    index: u32,
    rpc: Rc<Rpc>,
    stop: ServeStop,
    tick_ns: u64,
    timer: Option<Sleep>,
}

impl Serve {
    /// Run `progress` every `ns` of virtual time while calls are in flight (default
    /// [`SERVE_TICK_NS_DEFAULT`]): a timeout fires and a crash seen only through
    /// [`Sim::cn_down`] is noticed up to this late.
    pub fn tick_ns(mut self, ns: u64) -> Self {
        assert!(ns > 0, "a zero tick would spin at one virtual instant");
        self.tick_ns = ns;
        self
    }

    /// Register `w` as the worker's waker; true when the mailbox has something to do.
    fn wait_for_work(&self, w: &Waker) -> bool {
        let mut st = self.net.lock();
        let s = &mut st.slots[self.index as usize];
        match &s.waker {
            Some(old) if old.will_wake(w) => {}
            _ => s.waker = Some(w.clone()),
        }
        s.has_work()
    }
}

impl Future for Serve {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.stop.register(cx.waker());
        if this.stop.is_stopped() {
            this.rpc.progress();
            return Poll::Ready(());
        }
        if this.sim.cn_down(u32::from(this.rpc.addr().cn)) {
            return Poll::Ready(()); // a crashed CN serves nothing
        }
        let tick = this.timer.as_mut().is_some_and(|t| Pin::new(t).poll(cx).is_ready());
        if tick {
            this.timer = None;
        }
        if this.wait_for_work(cx.waker()) || tick {
            this.rpc.progress();
            // Its own flush may have reported a lost peer: handle that at this instant,
            // after the other tasks of the pass.
            if this.wait_for_work(cx.waker()) {
                cx.waker().wake_by_ref();
            }
        }
        if this.timer.is_none() && this.rpc.in_flight() > 0 {
            let mut t = this.sim.sleep(this.tick_ns);
            // The first poll schedules the timer's event with this task's waker.
            let armed = Pin::new(&mut t).poll(cx).is_pending();
            debug_assert!(armed, "a tick of {} ns is in the future", this.tick_ns);
            this.timer = Some(t);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::Calendar;
    use crate::nic::FabricState;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Goal: back-to-back SENDs queue on the sender's tx link, SENDs from two CNs queue
    /// on the receiver's rx link, and an idle path costs latency + link + RECV.
    #[test]
    fn time_send_reserves_both_links() {
        let m = NicModel::cx5();
        let mut st = FabricState::default();
        let len = 1_000;
        let wire = m.link_ns(m.send_bytes(len));
        let idle = m.one_way_latency_ns + wire + m.recv_service_ns;
        let a = m.time_send(&mut st, 0, 1, len, 0);
        assert_eq!(a, idle);
        assert_eq!(m.time_send(&mut st, 0, 1, len, 0), a + wire, "cn0's tx link");
        assert_eq!(m.time_send(&mut st, 2, 1, len, 0), a + 2 * wire, "cn1's rx link");
        assert_eq!(m.time_send(&mut st, 1, 0, len, 0), idle, "the other direction is free");
        assert_eq!(m.send_bytes(0), m.packet_header_bytes);
        assert_eq!(
            m.send_bytes(m.mtu_bytes + 1),
            2 * m.packet_header_bytes + m.mtu_bytes + 1
        );
    }

    /// Goal: the sender's NIC fetches a SEND's payload over its PCIe, on the budget its
    /// WRITE payloads use: behind a slot slower than the link the SEND arrives when the
    /// fetch ends, a WRITE posted right after it on that CN fetches its payload only
    /// then, and another CN's WRITE to the same memory node does not wait (it takes
    /// the node's rx link before the first WRITE, which arrives later).
    #[test]
    fn send_payload_crosses_the_sender_pcie() {
        use crate::nic::BatchAt;
        use dmtx_verbs::{MnId, Op, RemotePtr};
        let mut m = NicModel::cx5();
        m.pcie_lanes = 1; // Gen3 x1: about 0.86 GB/s, below the 100 Gb/s link
        let len = 8_000;
        let fetch = m.pcie_ns(len);
        assert!(fetch > m.link_ns(m.send_bytes(len)), "the slot binds");
        let mut st = FabricState::default();
        let lat = m.one_way_latency_ns;
        assert_eq!(m.time_send(&mut st, 0, 1, len, 0), fetch + lat + m.recv_service_ns);
        let write = [Op::Write {
            ptr: RemotePtr::new(MnId(0), 0),
            src: 0,
            len: 64,
        }];
        let at = |cn| BatchAt {
            cn,
            conn: cn,
            mn: 0,
            t: 0,
            slot: None,
        };
        let behind = m.time_batch(&mut st, at(0), write.iter());
        assert_eq!(st.cn_pcie[0].dma_read.free_from(), fetch + m.pcie_ns(64));
        assert!(behind.arrival >= fetch + m.pcie_ns(64) + lat, "{behind:?}");
        let free = m.time_batch(&mut st, at(2), write.iter());
        assert!(free.arrival < fetch, "{free:?}");
    }

    /// `m` with the times a `slow-nic` fault of factor `k` scales on a message's path.
    fn slowed(m: &NicModel, k: u64) -> NicModel {
        let mut s = m.clone();
        s.link_ps_per_byte *= k;
        s.one_way_latency_ns *= k;
        s.recv_service_ns *= k;
        s
    }

    /// Goal: with both ends at one model, `NicModel::time_send_between` (which
    /// `time_send` is) keeps the single-speed rule messages had before slow NICs
    /// reached them, written out here (each link a calendar: a transfer takes the first
    /// gap that fits), over a random contended stream among three CNs: a run without a
    /// slow NIC times every message as before.
    #[test]
    fn equal_ends_keep_the_single_speed_rule() {
        /// Per CN: its tx and its rx link.
        type Links = Vec<(Calendar, Calendar)>;
        fn single_speed(m: &NicModel, st: &mut Links, from: u32, to: u32, len: u64, t: u64) -> u64 {
            let n = from.max(to) as usize + 1;
            if st.len() < n {
                st.resize(n, Default::default());
            }
            let wire = m.link_ns(m.send_bytes(len));
            let (s, _) = st[from as usize].0.reserve(0, t, wire, 0);
            let (_, arrival) = st[to as usize].1.reserve(0, s + m.one_way_latency_ns, wire, 0);
            arrival + m.recv_service_ns
        }
        let m = NicModel::cx5();
        let (mut a, mut b) = (FabricState::default(), Links::new());
        let mut rng = SmallRng::seed_from_u64(17);
        let mut t = 0;
        for _ in 0..2_000 {
            t += rng.random_range(0..400);
            let from = rng.random_range(0..3u32);
            let to = (from + rng.random_range(1..3)) % 3;
            let len = rng.random_range(0..10_000);
            assert_eq!(
                NicModel::time_send_between((&m, &m), &mut a, from, to, len, t),
                single_speed(&m, &mut b, from, to, len, t)
            );
        }
    }

    /// Goal: a slow receiver alone gives `time_send` of the scaled model; a slow sender
    /// scales its link and the latency but not the receiver's RECV, and holds its own tx
    /// link `k` times longer (a second SEND queues behind it).
    #[test]
    fn time_send_ends_runs_each_end_at_its_speed() {
        let (m, k, len) = (NicModel::cx5(), 4, 3_000);
        let slow = slowed(&m, k);
        let mut st = FabricState::default();
        let want = slow.time_send(&mut FabricState::default(), 0, 1, len, 0);
        assert_eq!(NicModel::time_send_between((&m, &slow), &mut st, 0, 1, len, 0), want);
        let bytes = m.send_bytes(len);
        let (lat, wire) = (k * m.one_way_latency_ns, slow.link_ns(bytes));
        assert_eq!(want, lat + wire + k * m.recv_service_ns);
        let mut st = FabricState::default();
        let first = NicModel::time_send_between((&slow, &m), &mut st, 0, 1, len, 0);
        assert_eq!(first, lat + wire + m.recv_service_ns);
        assert_eq!(st.cns[0].tx.free_from(), wire, "the slow sender's tx link");
        // The second SEND leaves when the first has left the slow link; the receiver's
        // fast rx link does not make it arrive sooner than its last byte.
        assert_eq!(
            NicModel::time_send_between((&slow, &m), &mut st, 0, 1, len, 0),
            wire + lat + wire + m.recv_service_ns
        );
    }

    /// Goal: a slot holds a peer's report at most once, reports a crash epoch once, and
    /// reports again for a new send attempt or a new crash.
    #[test]
    fn reports_are_once_per_crash() {
        let mut s = Slot {
            reported: vec![0; 2],
            ..Slot::default()
        };
        assert!(s.report(1, "down".into(), 1, false));
        assert!(!s.report(1, "down".into(), 1, true), "already queued");
        s.lost.clear();
        assert!(!s.report(1, "down".into(), 1, false), "crash 1 was reported");
        assert!(s.report(1, "down".into(), 1, true), "a new send attempt was lost");
        s.lost.clear();
        assert!(s.report(1, "down".into(), 2, false), "crash 2 is news");
        assert!(s.has_work());
    }
}
