//! The NIC and link model: when one doorbell batch is served and when its reply lands.
//!
//! [`NicModel`] holds the parameters; [`NicModel::time_batch`] is the whole model. It
//! takes one batch (the ops of one post to one memory node, on one connection), the
//! virtual time `t` at which the coordinator rang the doorbell, and the fabric's
//! resource state ([`FabricState`]), and returns the batch's [`BatchTiming`] while
//! reserving the resources it uses. It is computed once, at submit, so a batch costs
//! one scheduled event (its service end) and its post one more (the last reply), never
//! one event per op.
//!
//! # The path of a batch
//!
//! Every link direction, PCIe direction and processing unit is a serial resource kept
//! as a calendar of its reservations: a [`DenseCalendar`] (one bit per nanosecond) for
//! links and PCIe, whose jobs are short and many, [`Servers`] of interval
//! [`Calendar`]s for the units. Below, `first(R, t, len)`
//! is the start of the first gap of resource `R` from `t` on that holds `len`, and
//! reserving it makes `[s, s + len)` busy; `first(R, t, len, floor)` also holds the
//! transfer until `floor` (cut-through: it cannot end before the data it forwards has
//! arrived).
//!
//! ```text
//!  CN PCIe ─▶ CN NIC tx ──latency──▶ MN NIC rx ─▶ unit (k in parallel) ─▶ media / PCIe / atomic engine
//!                                                                              │
//!  CN PCIe ◀─ CN rx ◀──latency── MN tx ◀───────────────────────────────────────┘
//! ```
//!
//! 1. **Admission.** A connection (one worker thread's queue pair to one memory node)
//!    has at most [`NicModel::outstanding_rd_atomic_max`] READ/atomic ops in flight
//!    (`max_rd_atomic`). A batch whose READ/atomic ops would exceed it is issued when
//!    enough earlier ones have completed. A batch with more such ops than the limit waits
//!    for all earlier ones and then goes as a whole (a NIC would pipeline it; not modelled).
//! 2. **Request.** The request bytes ([`NicModel::request_bytes`]: headers per packet,
//!    MTU segmentation) are serialized on the CN's tx link:
//!    `s = first(cn.tx, issue, link(bytes))`. WRITE payloads are first fetched from CN
//!    memory over the CN NIC's PCIe, cut-through: `d = first(cn.pcie.read, issue,
//!    pcie(payload))`, and the send starts no earlier than `d` and ends no earlier than
//!    the fetch. The bytes reach the MN port `latency` later and are serialized again on
//!    the MN's rx link if it is busy (the switch queues them):
//!    `r = first(mn.rx, s + latency, link(bytes), tx_end + latency)`,
//!    `arrival = r + link(bytes)` or the floor. Uncontended,
//!    `arrival = issue + latency + link(bytes)` (PCIe is faster than the link on every
//!    built-in profile).
//! 3. **Service.** The responder has [`NicModel::units`] processing units. The batch
//!    takes the unit that can start it first (units are interchangeable), at
//!    `start = first(units, max(arrival, connection_served_until), busy)`: batches of one
//!    connection are served in order. The unit is busy for `busy`, the sum of the ops'
//!    service times ([`NicModel::service_ns`]), processing the ops one after another:
//!    `proc_i = start + Σ_{j≤i} service_j`. A READ's payload then crosses the
//!    responder's PCIe (after the media, with [`PmModel`]), a WRITE's payload crosses it
//!    (and then lands on the media, with [`PmModel`]), while the unit goes on with the
//!    next op: `done_i = first(mn.pcie, proc_i, pcie(len)) + pcie(len)`. An
//!    atomic waits for the ops before it to complete, for the NIC-wide atomic token (one
//!    every [`NicModel::atomic_nic_gap_ns`], a calendar too) and for its address to be
//!    free (one atomic per address every [`NicModel::atomic_addr_ns`], a calendar per
//!    address in a hash map): `x` is the first time from `max(proc_i, done_{<i})` at
//!    which both the tokens hold `gap` and the address holds `addr_ns`, and
//!    `done_i = x + addr_ns`. The ops after an atomic wait for it (their
//!    `proc_i` and service interval start no earlier than its `done`): a READ
//!    hitchhiked on a lock's CAS reads the record as the lock holder (FORD §4.2), as
//!    a responder executes one connection's requests in order. Service ends when the
//!    last op is done, `end = max_i done_i`; the connection's next batch starts no
//!    earlier. An op's
//!    service interval, `[proc_{i-1}, done_i]`, is what the `tear` module overlaps.
//! 4. **Reply.** The reply bytes ([`NicModel::reply_bytes`]) leave at `end` through the
//!    MN's tx link and the CN's rx link, as in step 2, and READ payloads are written to
//!    CN memory over the CN NIC's PCIe as they land (`d = first(cn.pcie.write, r2, ...)`
//!    where `r2` is the reply's first byte at the CN); the batch is done when both ended:
//!    uncontended, `done = end + latency + max(link(reply), pcie(payload))`.
//!
//! So an uncontended single READ of `n` bytes completes after
//! `2·latency + link(req) + service(READ) + pcie(n) + max(link(reply), pcie(n))`; CAS on
//! one address saturates at `1/atomic_addr_ns`; CAS on distinct addresses at
//! `min(1/atomic_nic_gap_ns, units/service(atomic))`; a stream of large READs or WRITEs
//! at the lowest of the link, the two PCIe links and (with [`PmModel`]) the media.
//!
//! **PCIe** is full duplex: each NIC has a budget for reading host memory (a
//! responder's READ payloads, a requester's WRITE payloads) and one for writing it (the
//! other two), each at [`NicModel::pcie_fs_per_byte`], computed from the slot's
//! generation, lanes and a TLP/DLLP efficiency. Keeping the directions apart also keeps
//! a READ reply, reserved microseconds ahead at submit, from delaying a later-submitted
//! WRITE's payload fetch on the same CN.
//!
//! **Backfill.** A batch reserves its whole path when it is submitted, so resources are
//! reserved out of time order: a batch submitted later may need a link before one
//! submitted earlier (its service ended sooner), and a batch whose service ends far
//! ahead (an atomic queued behind the NIC-wide atomic rate or on its address, a READ
//! behind such an atomic on its connection, WRITEs queued on slow PM media) reserves
//! its reply far ahead. With one "free from" time per resource each of those would make
//! every later batch wait: on the `cx3` LOTUS-sized preset every op's latency would be
//! the atomic queue's depth (a FLUSH would wait 132 µs rather than 3), and a bare stream
//! of 64 coordinators posting 4 ops each would run at 3.6 times its uncontended latency
//! on an idle fabric. Calendars let a transfer take an earlier gap instead; so do the PM
//! media's queues ([`PmState`]) and each address's atomics (a CAS held behind its
//! connection does not hold its word for one ready before it).
//! Link and PCIe transfer times are rounded up to whole nanoseconds per batch (PCIe: per
//! op at the responder).
//!
//! # Parameters
//!
//! Profiles (`crates/dmtx-sim/profiles/*.toml`, [`crate::Profile`]) give every field
//! with its kind and source: *spec* (a standard or datasheet), *measured* (a published
//! measurement) or *assumed* (our estimate, to be replaced by a measurement).
//! [`NicModel::cx5`] is the `cx5` profile; its table, and those of `cx3` and `cx6`, are
//! in `docs/sim-model.md`. The main `cx5` values:
//!
//! | parameter | value | kind | source |
//! | --- | --- | --- | --- |
//! | link rate | 100 Gb/s (80 ps/B) | spec | EDR 4x; ConnectX-5 100 Gb/s NIC and SB7890 switch of the FORD (§6.1) and Motor (§7.1) testbeds |
//! | one-way latency | 1000 ns | assumed | ConnectX-5 datasheet "sub-600 ns" adapter latency + SB7890 datasheet 90 ns port-to-port + PCIe doorbell/DMA; FORD §4.9 cites 3–8 µs RDMA RTT including software |
//! | MTU, headers | 4096 B; 26 B + RETH 16 / AtomicETH 28 / AETH 4 / AtomicAckETH 8 | spec | IBTA |
//! | processing units × service | 16 × 80 ns | assumed split | 200 M ops/s, the ConnectX-5 datasheet message rate |
//! | PCIe | Gen3 x16 at 87% (≈ 13.7 GB/s per direction) | spec / assumed | ConnectX-5 datasheet; PCI-SIG rates; 87%: TLP and DLLP overhead |
//! | NIC-wide atomics | one per 20 ns (50 M/s) | assumed | order of published ConnectX-4/5 rates (Kalia et al., ATC'16); FORD §4.9 |
//! | per-address atomic | 400 ns (2.5 M/s) | assumed | same-address atomics serialize on a PCIe read-modify-write (Kalia et al., ATC'16) |
//! | outstanding READ/atomic per connection | 16 | assumed | `max_qp_rd_atom` that `ibv_devinfo` commonly reports |
//! | RECV processing (CN↔CN SEND) | 200 ns | assumed | a responder op (80 ns) plus the receive-WQE fetch over PCIe, which one-sided ops do not need (Kalia et al., FaSST, OSDI'16) |

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use dmtx_verbs::{Op, OpKind};
use serde::{Deserialize, Serialize};

use crate::calendar::{Calendar, Servers};
use crate::dense_calendar::DenseCalendar;
use crate::tear::Tears;

/// Parameters of the NIC and link model (see the module doc for each one's source).
/// Deserialized from a profile's `[nic]` table ([`crate::Profile`]); every field is
/// required there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicModel {
    /// Link serialization time per byte, in picoseconds (100 Gb/s = 80 ps/B).
    pub link_ps_per_byte: u64,
    /// One-way latency from a sender's port to a receiver's port, switch included (ns).
    pub one_way_latency_ns: u64,
    /// Largest payload of one packet (bytes).
    pub mtu_bytes: u64,
    /// Header and trailer bytes of every packet.
    pub packet_header_bytes: u64,
    /// Extra header of a READ or WRITE request's first packet (RETH).
    pub reth_bytes: u64,
    /// Extra header of a CAS or FAA request (AtomicETH).
    pub atomic_eth_bytes: u64,
    /// Extra header of every reply packet (AETH).
    pub aeth_bytes: u64,
    /// Extra header of an atomic's reply carrying the old word (AtomicAckETH).
    pub atomic_ack_eth_bytes: u64,
    /// Parallel processing units of a responder NIC.
    pub units: usize,
    /// Responder processing time of a READ (ns), before its payload crosses PCIe.
    pub read_service_ns: u64,
    /// Responder processing time of a WRITE (ns), before its payload crosses PCIe.
    pub write_service_ns: u64,
    /// Responder processing time of a CAS or FAA (ns), before the atomic engine.
    pub atomic_service_ns: u64,
    /// Responder processing time of a FLUSH (modelled as a 0-byte READ) (ns).
    pub flush_service_ns: u64,
    /// PCIe generation of the NIC's slot (1..=5): sets the per-lane rate and line
    /// encoding ([`NicModel::pcie_fs_per_byte`]). Both sides' NICs use it.
    pub pcie_gen: u8,
    /// PCIe lanes of the slot (1, 2, 4, 8, 16 or 32).
    pub pcie_lanes: u8,
    /// Share of the raw PCIe rate left for payload after TLP headers and DLLP traffic
    /// (percent, 1..=100).
    pub pcie_efficiency_pct: u8,
    /// NIC-wide atomic capacity: at most one atomic starts per this many ns.
    pub atomic_nic_gap_ns: u64,
    /// Atomics on one address are serialized: each takes this long (ns).
    pub atomic_addr_ns: u64,
    /// READ and atomic ops in flight per connection (`max_rd_atomic`).
    pub outstanding_rd_atomic_max: usize,
    /// Receiver processing of a two-sided SEND (ns): fetch the receive WQE, place the
    /// payload, write the CQE ([`NicModel::time_send`]).
    pub recv_service_ns: u64,
}

impl Default for NicModel {
    fn default() -> Self {
        Self::cx5()
    }
}

impl NicModel {
    /// A 100 Gb/s ConnectX-5 InfiniBand NIC behind one switch, as in the FORD (§6.1) and
    /// Motor (§7.1) testbeds. Which numbers are measured and which assumed: module doc.
    pub fn cx5() -> Self {
        Self {
            link_ps_per_byte: 80,
            one_way_latency_ns: 1000,
            mtu_bytes: 4096,
            packet_header_bytes: 26,
            reth_bytes: 16,
            atomic_eth_bytes: 28,
            aeth_bytes: 4,
            atomic_ack_eth_bytes: 8,
            units: 16,
            read_service_ns: 80,
            write_service_ns: 80,
            atomic_service_ns: 80,
            flush_service_ns: 80,
            pcie_gen: 3,
            pcie_lanes: 16,
            pcie_efficiency_pct: 87,
            atomic_nic_gap_ns: 20,
            atomic_addr_ns: 400,
            outstanding_rd_atomic_max: 16,
            recv_service_ns: 200,
        }
    }

    /// Time to serialize `bytes` on a link (ns, rounded up).
    #[inline]
    pub fn link_ns(&self, bytes: u64) -> u64 {
        (bytes * self.link_ps_per_byte).div_ceil(1000)
    }

    /// PCIe payload time per byte, in femtoseconds: the lanes' raw rate (2.5, 5, 8, 16 or
    /// 32 GT/s per lane for generations 1 to 5), less the line encoding (8b/10b up to
    /// Gen2, 128b/130b from Gen3) and [`NicModel::pcie_efficiency_pct`]. Gen3 x16 at 87%:
    /// ≈ 72 960 fs/B (13.7 GB/s); Gen4 x16: ≈ 36 480 fs/B (27.4 GB/s).
    pub fn pcie_fs_per_byte(&self) -> u64 {
        // GT/s × 10 and encoding (payload bits / line bits) per generation (PCI-SIG).
        let (gts_x10, num, den) = match self.pcie_gen {
            1 => (25, 8, 10),
            2 => (50, 8, 10),
            3 => (80, 128, 130),
            4 => (160, 128, 130),
            _ => (320, 128, 130),
        };
        // fs/B = 8 · 10^15 / (gts_x10/10 · 10^9 · num/den · lanes · pct/100)
        //      = 8 · 10^9 · den / (gts_x10 · num · lanes · pct).
        let bits_fs: u64 = 8_000_000_000 * den;
        let rate = gts_x10 * num * u64::from(self.pcie_lanes.max(1)) * u64::from(self.pcie_efficiency_pct.max(1));
        bits_fs.div_ceil(rate)
    }

    /// Time to move `bytes` over one NIC's PCIe (ns, rounded up).
    #[inline]
    pub fn pcie_ns(&self, bytes: u64) -> u64 {
        pcie_ns_at(bytes, self.pcie_fs_per_byte())
    }

    /// Packets a payload of `len` bytes takes (at least one).
    #[inline]
    pub fn packets(&self, len: u64) -> u64 {
        // Most payloads fit one packet: no division (tens of cycles, once per op).
        match len <= self.mtu_bytes {
            true => 1,
            false => len.div_ceil(self.mtu_bytes),
        }
    }

    /// Bytes on the wire for an op's request.
    #[inline]
    pub fn request_bytes(&self, op: &Op) -> u64 {
        let h = self.packet_header_bytes;
        match *op {
            Op::Read { .. } | Op::Flush { .. } => h + self.reth_bytes,
            Op::Write { len, .. } => {
                let len = len as u64;
                self.packets(len) * h + self.reth_bytes + len
            }
            Op::Cas { .. } | Op::Faa { .. } => h + self.atomic_eth_bytes,
        }
    }

    /// Bytes on the wire for an op's reply (READ data, or an acknowledgement).
    #[inline]
    pub fn reply_bytes(&self, op: &Op) -> u64 {
        let h = self.packet_header_bytes + self.aeth_bytes;
        match *op {
            Op::Read { len, .. } => {
                let len = len as u64;
                self.packets(len) * h + len
            }
            Op::Write { .. } | Op::Flush { .. } => h,
            Op::Cas { .. } | Op::Faa { .. } => h + self.atomic_ack_eth_bytes,
        }
    }

    /// Responder processing time of one op of `kind` (ns), excluding PCIe and atomics.
    #[inline]
    pub fn service_ns(&self, kind: OpKind) -> u64 {
        match kind {
            OpKind::Read => self.read_service_ns,
            OpKind::Write => self.write_service_ns,
            OpKind::Cas | OpKind::Faa => self.atomic_service_ns,
            OpKind::Flush => self.flush_service_ns,
        }
    }

    /// Payload bytes an op moves over the responder's PCIe (atomics: inside
    /// [`NicModel::atomic_addr_ns`]).
    #[inline]
    pub fn dma_bytes(op: &Op) -> u64 {
        u64::from(op.payload_len())
    }

    /// Time one batch: `ops` are the batch's ops in order (all to `batch.mn`). Reserves
    /// the links, both sides' PCIe, the unit, atomic tokens and addresses it uses in
    /// `st`. Memory is DRAM; [`NicModel::time_batch_pm`] adds persistent-memory media.
    pub fn time_batch<'o>(
        &self,
        st: &mut FabricState,
        batch: BatchAt,
        ops: impl Iterator<Item = &'o Op> + Clone,
    ) -> BatchTiming {
        self.time_batch_pm(None, st, batch, ops)
    }

    /// [`NicModel::time_batch`] on a memory node whose memory is `pm` (None: DRAM, whose
    /// bandwidth never binds before PCIe's): WRITE payloads pass through the media after
    /// PCIe, READ payloads before it ([`PmModel`]).
    pub fn time_batch_pm<'o>(
        &self,
        pm: Option<&PmModel>,
        st: &mut FabricState,
        batch: BatchAt,
        ops: impl Iterator<Item = &'o Op> + Clone,
    ) -> BatchTiming {
        let sum = self.sum_batch(ops.clone());
        self.time_summed(pm, st, batch, &sum, ops)
    }

    /// What one pass over a batch's ops gives: its sizes, for the timing, the CPU
    /// model and the report.
    #[inline]
    pub(crate) fn sum_batch<'o>(&self, ops: impl Iterator<Item = &'o Op>) -> BatchSum {
        let mut sum = BatchSum::default();
        for op in ops {
            self.sum_op(&mut sum, op);
        }
        self.sum_done(sum)
    }

    /// Add `op` to a [`BatchSum`] being built (finish it with [`NicModel::sum_done`]).
    #[inline(always)]
    pub(crate) fn sum_op(&self, sum: &mut BatchSum, op: &Op) {
        sum.req += self.request_bytes(op);
        sum.rep += self.reply_bytes(op);
        match *op {
            Op::Read { len, .. } => sum.read_bytes += u64::from(len),
            Op::Write { len, .. } => sum.write_bytes += u64::from(len),
            _ => {}
        }
        let kind = op.kind();
        if kind != OpKind::Write {
            sum.rd_atomic += 1;
        }
        sum.kinds[kind as usize] += 1;
        sum.ops += 1;
    }

    /// A [`BatchSum`] whose ops were all added: the serialization times of its sizes.
    #[inline]
    pub(crate) fn sum_done(&self, mut sum: BatchSum) -> BatchSum {
        sum.req_ns = self.link_ns(sum.req);
        sum.rep_ns = self.link_ns(sum.rep);
        sum.busy_ns = OpKind::ALL
            .iter()
            .map(|&k| sum.kinds[k as usize] * self.service_ns(k))
            .sum();
        sum
    }

    /// [`NicModel::time_batch_pm`] of a batch whose [`BatchSum`] is `sum`.
    #[inline]
    pub(crate) fn time_summed<'o>(
        &self,
        pm: Option<&PmModel>,
        st: &mut FabricState,
        batch: BatchAt,
        sum: &BatchSum,
        ops: impl Iterator<Item = &'o Op>,
    ) -> BatchTiming {
        st.ensure(batch.cn, batch.conn, batch.mn, self.units);
        let lat = self.one_way_latency_ns;
        let pcie_fs = st.pcie_fs(self);
        let now = st.now;
        let (req, rep, rd_atomic) = (sum.req, sum.rep, sum.rd_atomic);
        let (req_ns, rep_ns) = (sum.req_ns, sum.rep_ns);
        let (write_bytes, read_bytes) = (sum.write_bytes, sum.read_bytes);
        let FabricState {
            cns,
            mns,
            cn_pcie,
            tears,
            conns,
            ..
        } = st;

        // 1. Admission: at most `outstanding_rd_atomic_max` READ/atomic ops in flight.
        let conn = conns.get_mut(batch.conn, batch.mn);
        let issue = conn.admit(batch.t, rd_atomic, self.outstanding_rd_atomic_max);
        let served_until = conn.served_until;

        // 2. Request: CN PCIe (WRITE payloads), CN tx link, latency, MN rx link.
        let cn = &mut cns[batch.cn as usize];
        let cn_pcie = &mut cn_pcie[batch.cn as usize];
        let mn = &mut mns[batch.mn as usize];
        let (mut ready, mut fetched) = (issue, 0);
        if write_bytes > 0 {
            // The NIC fetches the payload from CN memory while it sends (cut-through):
            // sending starts no earlier than the fetch and ends no earlier than it.
            (ready, fetched) = cn_pcie
                .dma_read
                .reserve(now, issue, pcie_ns_at(write_bytes, pcie_fs), 0);
        }
        let (s, tx_end) = cn.tx.reserve(now, ready, req_ns, fetched);
        let (_, arrival) = mn.port.rx.reserve(now, s + lat, req_ns, tx_end + lat);

        // 3. Service: a unit, connection order, media, PCIe, atomic token and address.
        let start = mn.units.serve(now, arrival.max(served_until), sum.busy_ns);
        let tear_at = batch.slot.map(|slot| (slot, batch.mn));
        let mut proc = start; // the unit's processing, op after op
        let mut t = start; // completion of the ops so far

        // The ops after an atomic run once it has (a READ hitchhiked on a lock's CAS must
        // see the record as the lock holder: FORD §4.2); 0 while none came.
        let mut fence = 0;
        for (ord, op) in ops.enumerate() {
            let begin = proc.max(fence);
            proc += self.service_ns(op.kind());
            let due = proc.max(fence);
            match *op {
                Op::Read { ptr, len, dst } if len > 0 => {
                    let n = u64::from(len);
                    let ready = match pm {
                        Some(pm) => mn.pm.read(pm, now, due, n, batch.t),
                        None => due,
                    };
                    let (_, sent) = mn.pcie.dma_read.reserve(now, ready, pcie_ns_at(n, pcie_fs), 0);
                    t = t.max(sent);
                    if let Some(at) = tear_at.filter(|_| Tears::may_tear(ptr.offset, len)) {
                        tears.push(at, false, ord, (ptr.offset, len, dst), (begin, sent), fence > 0);
                    }
                }
                Op::Write { ptr, src, len } if len > 0 => {
                    let n = u64::from(len);
                    let (_, crossed) = mn.pcie.dma_write.reserve(now, due, pcie_ns_at(n, pcie_fs), 0);
                    let landed = match pm {
                        Some(pm) => mn.pm.write(pm, now, crossed, n, batch.t),
                        None => crossed,
                    };
                    t = t.max(landed);
                    if let Some(at) = tear_at.filter(|_| Tears::may_tear(ptr.offset, len)) {
                        tears.push(at, true, ord, (ptr.offset, len, src), (begin, landed), false);
                    }
                }
                Op::Cas { ptr, .. } | Op::Faa { ptr, .. } => {
                    let word = mn.addr_busy.entry(ptr.offset).or_default();
                    let (gap, hold) = (self.atomic_nic_gap_ns, self.atomic_addr_ns);
                    let x = mn.atomics.reserve_with(word, now, proc.max(t), gap, hold);
                    t = x + hold;
                    fence = t;
                }
                // FLUSH, and READ/WRITE of no bytes: the unit alone.
                _ => t = t.max(due),
            }
        }
        debug_assert_eq!(proc - start, sum.busy_ns);
        let end = t;
        if mn.addr_busy.len() > mn.addr_prune_at {
            // An address free from now on can never delay a later batch: none is
            // served before now. Kept small, the map stays in the L1 cache; the
            // threshold follows what stays, so pruning is O(1) per insert.
            mn.addr_busy.retain(|_, word| word.free_from() > now);
            mn.addr_prune_at = (2 * mn.addr_busy.len()).max(ADDR_PRUNE_MIN);
        }

        // 4. Reply: MN tx link, latency, CN rx link, CN PCIe (READ payloads).
        let (s2, sent) = mn.port.tx.reserve(now, end, rep_ns, 0);
        let (r2, mut done) = cn.rx.reserve(now, s2 + lat, rep_ns, sent + lat);
        if read_bytes > 0 {
            // Cut-through again: the NIC writes the payload to CN memory as packets land.
            let (_, written) = cn_pcie.dma_write.reserve(now, r2, pcie_ns_at(read_bytes, pcie_fs), 0);
            done = done.max(written);
        }
        tears.close(end, done);

        conn.served_until = end;
        if rd_atomic > 0 {
            conn.push(done, rd_atomic);
        }
        BatchTiming {
            issue,
            arrival,
            start,
            end,
            done,
            request_bytes: req,
            reply_bytes: rep,
        }
    }

    /// Bytes on the wire for a two-sided SEND of `len` bytes: one header per MTU packet,
    /// as a WRITE, without the RETH.
    pub fn send_bytes(&self, len: u64) -> u64 {
        self.packets(len) * self.packet_header_bytes + len
    }

    /// Time a CN→CN SEND of `len` bytes leaving compute node `from` at `t` for compute
    /// node `to` (`from != to`), reserving `from`'s PCIe (the payload fetch), its tx
    /// link and `to`'s rx link as step 2 of the module doc does for a WRITE request.
    /// Returns when the receiver's NIC has placed it: `arrival + recv_service_ns`;
    /// uncontended, `t + latency + max(link(send_bytes(len)), pcie(len)) +
    /// recv_service_ns`, where the link term wins on every built-in profile but a `cx6`
    /// on a Gen3 slot. ACKs are not modelled.
    pub fn time_send(&self, st: &mut FabricState, from: u32, to: u32, len: u64, t: u64) -> u64 {
        Self::time_send_between((self, self), st, from, to, len, t)
    }

    /// [`NicModel::time_send`] with each end at its own speed (a `slow-nic` fault on
    /// one of them): `models` are the sender's and the receiver's. The sender's PCIe
    /// and tx link run at its rates, the receiver's rx link and RECV service at its
    /// own, the latency is the slower end's, and the receiver is done no earlier than
    /// the sender's last byte arrives. Equal models give the closed form of `time_send`.
    pub fn time_send_between(
        models: (&NicModel, &NicModel),
        st: &mut FabricState,
        from: u32,
        to: u32,
        len: u64,
        t: u64,
    ) -> u64 {
        let (ms, mr) = models;
        assert_ne!(from, to, "a message within one compute node does not cross its NIC");
        // A slow-NIC fault scales times, never the packet format.
        debug_assert_eq!(ms.send_bytes(len), mr.send_bytes(len), "both ends segment alike");
        st.grow_cns(from.max(to) as usize);
        let (pcie_fs, now) = (st.pcie_fs(ms), st.now);
        let bytes = ms.send_bytes(len);
        let lat = ms.one_way_latency_ns.max(mr.one_way_latency_ns);
        let (mut ready, mut fetched) = (t, 0);
        if len > 0 {
            // The sender's NIC fetches the payload from CN memory as a WRITE's
            // (cut-through, on the same budget as WRITE payloads).
            (ready, fetched) = st.cn_pcie[from as usize]
                .dma_read
                .reserve(now, t, pcie_ns_at(len, pcie_fs), 0);
        }
        let (s, tx_end) = st.cns[from as usize].tx.reserve(now, ready, ms.link_ns(bytes), fetched);
        let (_, arrival) = st.cns[to as usize]
            .rx
            .reserve(now, s + lat, mr.link_ns(bytes), tx_end + lat);
        arrival + mr.recv_service_ns
    }
}

/// A responder's per-address map is pruned when it holds more entries than this, or
/// twice what the last pruning kept.
const ADDR_PRUNE_MIN: usize = 64;

/// `bytes` at `fs_per_byte` femtoseconds each, in ns rounded up.
#[inline]
fn pcie_ns_at(bytes: u64, fs_per_byte: u64) -> u64 {
    (bytes * fs_per_byte).div_ceil(1_000_000)
}

/// Persistent-memory media of a memory node (a profile's optional `[pm]`), after FORD
/// §1 and §3.2 (Fig. 3): Optane DIMMs write far slower than a NIC moves data, and
/// concurrent reads cut their write throughput further.
///
/// Each memory node has one media resource with a read queue and a write queue (the
/// memory controller keeps separate read and write pending queues). A READ's payload
/// is read from the media before it crosses PCIe, in the read queue's first gap:
/// `first(read, proc, n·read_ps_per_byte)`. A WRITE's payload lands on the media after
/// PCIe: `first(write, pcie_done, n·write_ps_per_byte / (1 − cut))`, and the op is done
/// (for its batch's service end) when it landed. Both queues are calendars, like the
/// links (`nic` module doc, "Backfill"): a WRITE held far ahead (behind an atomic on
/// its connection) does not hold the media for the ones after it. FLUSH adds
/// nothing: the media's write queue is inside the persistence domain (ADR).
///
/// Interference: `cut = write_cut_max_permille/1000 · load`, where `load ∈ [0, 1]` is
/// the READ bytes sent to the node during the previous `load_window_ns` window (of
/// doorbell time), as a share of what the media could write in that window:
/// `load = min(1, read_bytes · write_ps_per_byte / window)`. So reads cut write
/// throughput linearly in their rate, by at most `write_cut_max_permille` (FORD's
/// measured 87.5%) once they flow at the media's write bandwidth or more, which is
/// where one 100 Gb/s ConnectX-5 was in FORD's Fig. 3 (32 reading threads). The shape
/// in between is assumed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PmModel {
    /// Media write time per byte (ps): 78 ≈ 12.9 GB/s.
    pub write_ps_per_byte: u64,
    /// Media read time per byte (ps).
    pub read_ps_per_byte: u64,
    /// Largest cut of write throughput by concurrent reads, per mille (< 1000).
    pub write_cut_max_permille: u64,
    /// Window over which the read load is measured (ns).
    pub load_window_ns: u64,
}

impl PmModel {
    /// Six interleaved Optane DC PM DIMMs per memory node, FORD's PM pool (§6.1).
    /// Sources: `docs/sim-model.md`.
    pub fn optane_6x() -> Self {
        Self {
            write_ps_per_byte: 78,
            read_ps_per_byte: 25,
            write_cut_max_permille: 875,
            load_window_ns: 10_000,
        }
    }

    /// Media time of a WRITE of `n` bytes under a read load of `load_permille` (ns,
    /// rounded up).
    #[inline]
    pub fn write_ns(&self, n: u64, load_permille: u64) -> u64 {
        let cut = self.write_cut_max_permille * load_permille.min(1000) / 1000;
        (n * self.write_ps_per_byte * 1000).div_ceil((1000 - cut.min(999)) * 1000)
    }

    /// Media time of a READ of `n` bytes (ns, rounded up).
    #[inline]
    pub fn read_ns(&self, n: u64) -> u64 {
        (n * self.read_ps_per_byte).div_ceil(1000)
    }

    /// Read load (per mille) of `read_bytes` in one window.
    #[inline]
    pub fn load_permille(&self, read_bytes: u64) -> u64 {
        (read_bytes * self.write_ps_per_byte / self.load_window_ns.max(1)).min(1000)
    }
}

/// One memory node's media queues and read-load windows ([`PmModel`]).
#[derive(Clone, Debug, Default)]
pub struct PmState {
    /// The read queue's reservations.
    pub read: Calendar,
    /// The write queue's reservations.
    pub write: Calendar,
    /// Index of the current load window (doorbell time / window).
    window: u64,
    /// READ bytes in the current window.
    read_bytes_cur: u64,
    /// READ bytes in the window before it.
    read_bytes_prev: u64,
}

impl PmState {
    /// Move the load windows to the one holding doorbell time `t`. Doorbell times are
    /// nearly monotonic (each CPU's are); an older one counts in the current window.
    fn roll(&mut self, pm: &PmModel, t: u64) {
        let idx = t / pm.load_window_ns.max(1);
        if idx > self.window {
            self.read_bytes_prev = if idx == self.window + 1 { self.read_bytes_cur } else { 0 };
            self.read_bytes_cur = 0;
            self.window = idx;
        }
    }

    /// A READ of `n` bytes, doorbell at `t`, whose unit is done at `at` (reserved at
    /// virtual time `now`): when its payload is off the media.
    fn read(&mut self, pm: &PmModel, now: u64, at: u64, n: u64, t: u64) -> u64 {
        self.roll(pm, t);
        self.read_bytes_cur += n;
        self.read.reserve(now, at, pm.read_ns(n), 0).1
    }

    /// A WRITE of `n` bytes, doorbell at `t`, off PCIe at `at` (reserved at virtual time
    /// `now`): when it landed on the media.
    fn write(&mut self, pm: &PmModel, now: u64, at: u64, n: u64, t: u64) -> u64 {
        self.roll(pm, t);
        let load = pm.load_permille(self.read_bytes_prev);
        self.write.reserve(now, at, pm.write_ns(n, load), 0).1
    }
}

/// Who sends a batch where, and when the doorbell rang.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchAt {
    /// Requesting compute node (its NIC and link).
    pub cn: u32,
    /// Connection (queue pair) id, unique in the simulation.
    pub conn: u32,
    /// Responding memory node.
    pub mn: u16,
    /// Virtual time of the doorbell (ns).
    pub t: u64,
    /// The in-flight post slot that owns the batch, for tears (the `sim` transport's):
    /// its READ and WRITE ops are recorded so that concurrent ones can tear
    /// (the `tear` module). None: timing only.
    pub slot: Option<u32>,
}

/// A batch's sizes, from one pass over its ops ([`NicModel::time_batch_pm`] and the
/// `sim` transport share it).
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct BatchSum {
    /// Ops of the batch, and of each kind in [`OpKind`] order.
    pub ops: u64,
    pub kinds: [u64; 5],
    /// Wire bytes of the request and of the reply, headers included, and their
    /// serialization times ([`NicModel::link_ns`]).
    pub req: u64,
    pub rep: u64,
    pub req_ns: u64,
    pub rep_ns: u64,
    /// The responder unit's time on the batch: the ops' service times.
    pub busy_ns: u64,
    /// READ, atomic and FLUSH ops (those `max_rd_atomic` bounds).
    pub rd_atomic: usize,
    /// WRITE and READ payload bytes.
    pub write_bytes: u64,
    pub read_bytes: u64,
}

/// When a batch passes each point of its path (virtual ns).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchTiming {
    /// Sent to the wire (after the outstanding-op bound admitted it).
    pub issue: u64,
    /// Last request byte at the responder.
    pub arrival: u64,
    /// Service start.
    pub start: u64,
    /// Service end: the ops take effect and the reply leaves.
    pub end: u64,
    /// Last reply byte at the requester: the batch's completion.
    pub done: u64,
    /// Wire bytes of the request, headers included.
    pub request_bytes: u64,
    /// Wire bytes of the reply, headers included.
    pub reply_bytes: u64,
}

/// Send and receive sides of one port.
#[derive(Clone, Debug, Default)]
pub struct Port {
    /// The tx link's reservations.
    pub tx: DenseCalendar,
    /// The rx link's reservations.
    pub rx: DenseCalendar,
}

/// One NIC's PCIe link, full duplex: the two directions are separate budgets.
#[derive(Clone, Debug, Default)]
pub struct Pcie {
    /// The NIC reading host memory (a responder's READ payloads, a requester's WRITE
    /// payloads and SENDs): its reservations.
    pub dma_read: DenseCalendar,
    /// The NIC writing host memory (a responder's WRITE payloads, a requester's READ
    /// payloads): its reservations.
    pub dma_write: DenseCalendar,
}

/// A memory node's NIC.
#[derive(Clone, Debug, Default)]
pub struct Responder {
    /// Its port.
    pub port: Port,
    /// Its processing units' reservations.
    pub units: Servers,
    /// Its PCIe.
    pub pcie: Pcie,
    /// The NIC-wide atomic engine's tokens (one atomic per `atomic_nic_gap_ns`).
    pub atomics: Calendar,
    /// Per address: the atomics on it, one per `atomic_addr_ns`. Never iterated in an
    /// order that matters (pruning only drops past entries), so a hash map keeps runs
    /// deterministic.
    pub addr_busy: FxHashMap<u64, Calendar>,
    /// `addr_busy` is pruned when it holds more entries than this.
    addr_prune_at: usize,
    /// Its persistent-memory media, when the profile has `[pm]`.
    pub pm: PmState,
}

/// One connection to one memory node: one cache line, since each batch reads and updates
/// it while the host's caches hold little else of its connection (on the LOTUS-sized
/// stream of `examples/speed.rs`, 540 coordinators take turns).
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
pub struct ConnState {
    /// The previous batch's service end.
    pub served_until: u64,
    /// READ/atomic ops in flight: the sum of the counts queued below.
    in_flight: usize,
    /// The oldest batches with READ/atomic ops in flight, `len` of them in a ring from
    /// `head`: their completion times (ascending: a connection serves in order) and
    /// counts.
    done: [u64; NEAR],
    count: [u32; NEAR],
    head: u8,
    len: u8,
    /// Batches queued behind a full ring, all newer than its own; kept once allocated.
    /// Boxed: a deque in place would push the state past one line.
    #[allow(clippy::box_collection)]
    more: Option<Box<VecDeque<(u64, u32)>>>,
}

/// Batches of one connection whose completions [`ConnState`] holds in its own line.
const NEAR: usize = 3;
const _: () = assert!(std::mem::size_of::<ConnState>() == 64);

impl ConnState {
    /// READ/atomic ops of the connection in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// When a batch ready at `t` with `n` READ/atomic ops may issue, so that at most
    /// `max` are in flight (one batch always may). Batches completed by `t` leave the
    /// queue first; then the oldest leave, one by one, until the batch fits.
    #[inline]
    fn admit(&mut self, t: u64, n: usize, max: usize) -> u64 {
        while let Some((done, k)) = self.front() {
            if done > t {
                break;
            }
            self.pop(k);
        }
        let mut issue = t;
        while self.in_flight > 0 && self.in_flight + n > max {
            let (done, k) = self.front().expect("in flight ops are queued");
            issue = issue.max(done);
            self.pop(k);
        }
        issue
    }

    #[inline]
    fn front(&self) -> Option<(u64, u32)> {
        let h = self.head as usize;
        (self.len > 0).then(|| (self.done[h], self.count[h]))
    }

    /// Drop the front batch, of `k` ops; the ring refills from the overflow.
    #[inline]
    fn pop(&mut self, k: u32) {
        self.in_flight -= k as usize;
        self.head = ((self.head as usize + 1) % NEAR) as u8;
        self.len -= 1;
        if let Some((done, k)) = self.more.as_mut().and_then(|m| m.pop_front()) {
            self.put(done, k);
        }
    }

    #[inline]
    fn put(&mut self, done: u64, k: u32) {
        let i = (self.head as usize + self.len as usize) % NEAR;
        (self.done[i], self.count[i]) = (done, k);
        self.len += 1;
    }

    /// Queue a batch with `n` READ/atomic ops completing at `done` (no earlier than
    /// those queued).
    #[inline]
    fn push(&mut self, done: u64, n: usize) {
        self.in_flight += n;
        let k = u32::try_from(n).expect("fewer than 2^32 ops in a batch");
        match self.more.as_mut() {
            Some(m) if !m.is_empty() => m.push_back((done, k)),
            _ if (self.len as usize) < NEAR => self.put(done, k),
            _ => self.more.get_or_insert_with(Default::default).push_back((done, k)),
        }
    }
}

/// Every connection's [`ConnState`] per memory node in one array, a connection's row
/// of `mns` together: finding one is a single load.
#[derive(Clone, Debug, Default)]
pub struct Conns {
    states: Vec<ConnState>,
    /// Memory nodes per row.
    mns: usize,
}

impl Conns {
    /// The state of connection `conn` to memory node `mn` (panics when it has none).
    #[inline]
    pub fn get_mut(&mut self, conn: u32, mn: u16) -> &mut ConnState {
        assert!(
            (mn as usize) < self.mns,
            "memory node {mn} is beyond the connection rows"
        );
        &mut self.states[conn as usize * self.mns + mn as usize]
    }

    /// True when connection `conn` to `mn` has a state.
    #[inline]
    fn holds(&self, conn: u32, mn: u16) -> bool {
        (mn as usize) < self.mns && (conn as usize + 1) * self.mns <= self.states.len()
    }

    /// Make room for connection `conn` to `mn`; rows widen when a node beyond them
    /// appears.
    #[cold]
    fn grow(&mut self, conn: u32, mn: u16) {
        let (conn, mn) = (conn as usize, mn as usize);
        let mns = self.mns.max(mn + 1);
        if mns != self.mns && self.mns > 0 {
            let old = std::mem::take(&mut self.states);
            for row in old.chunks(self.mns) {
                self.states.extend_from_slice(row);
                self.states
                    .resize_with(self.states.len() + mns - self.mns, ConnState::default);
            }
        }
        self.mns = mns;
        let rows = (self.states.len() / mns).max(conn + 1);
        self.states.resize_with(rows * mns, ConnState::default);
    }
}

/// Every resource of the fabric the model reserves; grows as nodes and connections
/// appear.
#[derive(Clone, Debug, Default)]
pub struct FabricState {
    /// Compute-node ports.
    pub cns: Vec<Port>,
    /// Memory-node NICs.
    pub mns: Vec<Responder>,
    /// Per compute node: its NIC's PCIe (WRITE payloads fetched from CN memory, READ
    /// payloads written to it).
    pub cn_pcie: Vec<Pcie>,
    /// READ and WRITE ops in service, for tears.
    pub(crate) tears: Tears,
    /// Per connection, per memory node.
    pub conns: Conns,
    /// The last PCIe rate computed: (generation, lanes, efficiency) and its fs/B, so
    /// that a batch does not redo the division.
    pcie_fs: Option<((u8, u8, u8), u64)>,
    /// Virtual time as last told ([`FabricState::clock`]): no reservation starts
    /// before it, so the calendars drop what ended by then.
    now: u64,
}

impl FabricState {
    /// The virtual time is `now`. Called before batches or messages are timed; a
    /// state never told keeps every reservation.
    #[inline]
    pub fn clock(&mut self, now: u64) {
        self.now = self.now.max(now);
        self.tears.clock(now);
    }

    /// [`NicModel::pcie_fs_per_byte`] of `model`, from the cache when the slot is the
    /// same as last time.
    #[inline]
    fn pcie_fs(&mut self, model: &NicModel) -> u64 {
        let key = (model.pcie_gen, model.pcie_lanes, model.pcie_efficiency_pct);
        match self.pcie_fs {
            Some((k, fs)) if k == key => fs,
            _ => {
                let fs = model.pcie_fs_per_byte();
                self.pcie_fs = Some((key, fs));
                fs
            }
        }
    }

    /// Make room for the nodes and the connection of a batch (a check per batch; the
    /// growing is out of line).
    #[inline]
    fn ensure(&mut self, cn: u32, conn: u32, mn: u16, units: usize) {
        let (c, m) = (cn as usize, mn as usize);
        let ready = c < self.cns.len() && c < self.cn_pcie.len() && m < self.mns.len() && self.conns.holds(conn, mn);
        if !ready {
            self.grow(cn, conn, mn, units);
        }
    }

    /// Make room for compute nodes up to `cn`: their ports and PCIe.
    fn grow_cns(&mut self, cn: usize) {
        if self.cns.len() <= cn {
            self.cns.resize_with(cn + 1, Port::default);
        }
        if self.cn_pcie.len() <= cn {
            self.cn_pcie.resize_with(cn + 1, Pcie::default);
        }
    }

    #[cold]
    fn grow(&mut self, cn: u32, conn: u32, mn: u16, units: usize) {
        let (cn, conn, mn) = (cn as usize, conn as usize, mn as usize);
        self.grow_cns(cn);
        if self.mns.len() <= mn {
            self.mns.resize_with(mn + 1, || Responder {
                units: Servers::new(units),
                ..Responder::default()
            });
        }
        if !self.conns.holds(conn as u32, mn as u16) {
            self.conns.grow(conn as u32, mn as u16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmtx_verbs::{MnId, RemotePtr};

    /// A CAS of the word at `offset` of memory node 0.
    fn cas_at(offset: u64) -> Op {
        Op::Cas {
            ptr: RemotePtr::new(MnId(0), offset),
            expect: 0,
            swap: 1,
        }
    }

    /// A 64-byte READ at `offset` of memory node 0.
    fn read_at(offset: u64) -> Op {
        Op::Read {
            ptr: RemotePtr::new(MnId(0), offset),
            len: 64,
            dst: 0,
        }
    }

    fn at(conn: u32, t: u64) -> BatchAt {
        BatchAt {
            cn: 0,
            conn,
            mn: 0,
            t,
            slot: None,
        }
    }

    /// Goal: pruning the per-address map of atomics never changes a timing, with
    /// workers' doorbells ahead of the virtual time by different amounts (the CPU
    /// model), and it keeps the map small.
    #[test]
    fn pruning_atomics_changes_no_timing() {
        use rand::{Rng, SeedableRng};
        let m = NicModel::cx5();
        // [pruned, reference whose map is never pruned]
        let mut st = [FabricState::default(), FabricState::default()];
        st[1].ensure(0, 0, 0, m.units);
        st[1].mns[0].addr_prune_at = usize::MAX;
        let both = |st: &mut [FabricState; 2], batch: BatchAt, word: u64| {
            for s in st.iter_mut() {
                s.clock(s.now.max(batch.t.saturating_sub(3_000)));
            }
            let op = cas_at(word * 8);
            let a = m.time_batch(&mut st[0], batch, [op].iter());
            let b = m.time_batch(&mut st[1], batch, [op].iter());
            assert_eq!(a, b, "the same timing with and without pruning");
        };
        // Words long free, then word 0 twice at once: the first prunes the map (its
        // threshold set so), and its own entry, which the second waits for, must stay.
        for word in 1..=8 {
            both(&mut st, at(0, 0), word);
        }
        st[0].mns[0].addr_prune_at = st[0].mns[0].addr_busy.len();
        both(&mut st, at(1, 100_000), 0);
        assert_eq!(st[0].mns[0].addr_busy.len(), 1, "pruned down to word 0");
        both(&mut st, at(2, 100_000), 0);
        // Random doorbells up to 3 µs ahead of the virtual time, 5 M/s, a tenth of them on
        // one hot word (a load the node sustains).
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let mut now = 200_000u64;
        for _ in 0..20_000 {
            now += rng.random_range(0..200);
            let batch = at(rng.random_range(0..8), now + rng.random_range(0..3_000));
            let word = match rng.random_bool(0.1) {
                true => 0,
                false => rng.random_range(1..100_000u64),
            };
            both(&mut st, batch, word);
        }
        assert!(st[1].mns[0].addr_busy.len() > 10_000, "the reference kept every word");
        let n = st[0].mns[0].addr_busy.len();
        assert!(n < 1_000, "pruned: {n} entries");
    }

    /// Goal: one READ's timing is the closed form of the module doc.
    #[test]
    fn single_read_closed_form() {
        let m = NicModel::cx5();
        let mut st = FabricState::default();
        let op = Op::Read {
            ptr: RemotePtr::new(MnId(0), 64),
            len: 64,
            dst: 0,
        };
        let tm = m.time_batch(&mut st, at(0, 1_000), [op].iter());
        let req = m.link_ns(m.request_bytes(&op));
        let rep = m.link_ns(m.reply_bytes(&op));
        assert_eq!(tm.arrival, 1_000 + m.one_way_latency_ns + req);
        assert_eq!(tm.end, tm.arrival + m.read_service_ns + m.pcie_ns(64));
        assert_eq!(tm.done, tm.end + m.one_way_latency_ns + rep);
        assert_eq!(m.request_bytes(&op), 42);
        assert_eq!(m.reply_bytes(&op), 94);
    }

    /// Goal: the cached PCIe rate follows the model it is asked for (a slow-NIC fault
    /// times batches with another model on the same fabric state).
    #[test]
    fn pcie_rate_follows_the_model() {
        let mut st = FabricState::default();
        let gen3 = NicModel::cx5();
        let gen4 = NicModel {
            pcie_gen: 4,
            ..NicModel::cx5()
        };
        assert_ne!(gen3.pcie_fs_per_byte(), gen4.pcie_fs_per_byte());
        for m in [&gen3, &gen4, &gen4, &gen3] {
            assert_eq!(st.pcie_fs(m), m.pcie_fs_per_byte());
        }
    }

    /// Goal: one pass sums a mixed batch up as the per-op formulas do.
    #[test]
    fn batch_sum_matches_the_per_op_formulas() {
        let m = NicModel::cx5();
        let p = |off| RemotePtr::new(MnId(0), off);
        let ops = [
            Op::Read {
                ptr: p(0),
                len: 5000,
                dst: 0,
            },
            Op::Write {
                ptr: p(64),
                src: 0,
                len: 100,
            },
            Op::Cas {
                ptr: p(8),
                expect: 0,
                swap: 1,
            },
            Op::Flush { ptr: p(0) },
        ];
        let sum = m.sum_batch(ops.iter());
        assert_eq!(sum.ops, 4);
        assert_eq!(sum.kinds, [1, 1, 1, 0, 1]);
        assert_eq!(sum.req, ops.iter().map(|o| m.request_bytes(o)).sum::<u64>());
        assert_eq!(sum.rep, ops.iter().map(|o| m.reply_bytes(o)).sum::<u64>());
        assert_eq!((sum.req_ns, sum.rep_ns), (m.link_ns(sum.req), m.link_ns(sum.rep)));
        assert_eq!((sum.read_bytes, sum.write_bytes, sum.rd_atomic), (5000, 100, 3));
        let service = ops.iter().map(|o| m.service_ns(o.kind())).sum::<u64>();
        assert_eq!(sum.busy_ns, service);
        // Op by op, every kind, across the packet boundaries.
        for len in [0, 1, 64, 4096, 4097, 9000] {
            let each = [
                Op::Read { ptr: p(0), len, dst: 0 },
                Op::Write { ptr: p(0), len, src: 0 },
                Op::Cas {
                    ptr: p(0),
                    expect: 0,
                    swap: 1,
                },
                Op::Faa { ptr: p(0), add: 1 },
                Op::Flush { ptr: p(0) },
            ];
            for op in &each {
                let s = m.sum_batch(std::iter::once(op));
                assert_eq!((s.req, s.rep), (m.request_bytes(op), m.reply_bytes(op)), "{op:?}");
                assert_eq!(s.read_bytes + s.write_bytes, u64::from(op.payload_len()), "{op:?}");
                assert_eq!(s.kinds[op.kind() as usize], 1, "{op:?}");
            }
        }
    }

    /// Goal: MTU segmentation adds one header per packet.
    #[test]
    fn segmentation() {
        let m = NicModel::cx5();
        let w = |len| Op::Write {
            ptr: RemotePtr::new(MnId(0), 0),
            src: 0,
            len,
        };
        assert_eq!(m.request_bytes(&w(4096)), 26 + 16 + 4096);
        assert_eq!(m.request_bytes(&w(4097)), 2 * 26 + 16 + 4097);
        assert_eq!(m.request_bytes(&w(0)), 26 + 16);
    }

    /// Goal: a batch whose service ends far ahead (CASes queued on one word) holds
    /// neither the memory node's links nor a processing unit for the batches timed
    /// after it: a READ on another connection completes within a few transfers of its
    /// time on an idle fabric, even with one unit and a READ held behind the last CAS
    /// on its connection (served only then, as one connection's batches are).
    #[test]
    fn a_far_batch_holds_back_only_its_connection() {
        let mut m = NicModel::cx5();
        m.units = 1;
        let mut st = FabricState::default();
        let (cas, read) = (cas_at(0), read_at(4096));
        let last = (0..10)
            .map(|c| m.time_batch(&mut st, at(c, 0), [cas].iter()))
            .last()
            .unwrap();
        assert!(last.end >= 10 * m.atomic_addr_ns, "{last:?}");
        let held = m.time_batch(&mut st, at(9, 0), [read].iter());
        assert!(held.start >= last.end, "served after its connection's CAS: {held:?}");
        let alone = m.time_batch(&mut FabricState::default(), at(0, 0), [read].iter());
        let other = m.time_batch(&mut st, at(99, 0), [read].iter());
        assert!(other.done < alone.done + 1_000, "{other:?} against {alone:?}");
    }

    /// Goal: an address's atomics backfill: a CAS held far ahead (behind its
    /// connection's CASes on a hot word) does not hold its word for a CAS on another
    /// connection, served as on an idle node; one that would overlap it goes after.
    #[test]
    fn atomics_backfill_per_address() {
        let m = NicModel::cx5();
        let mut st = FabricState::default();
        for c in 0..10 {
            m.time_batch(&mut st, at(c, 0), [cas_at(0)].iter());
        }
        let held = m.time_batch(&mut st, at(9, 0), [cas_at(64)].iter());
        assert!(held.end >= 11 * m.atomic_addr_ns, "{held:?}");
        let alone = m.time_batch(&mut FabricState::default(), at(0, 0), [cas_at(64)].iter());
        let other = m.time_batch(&mut st, at(99, 0), [cas_at(64)].iter());
        assert_eq!(
            other.end - other.arrival,
            alone.end - alone.arrival,
            "{other:?} against {alone:?}"
        );
        // Ready just before the held one runs: no room for a whole hold, so after it.
        let late = m.time_batch(
            &mut st,
            at(98, held.end - m.atomic_addr_ns - 1_200),
            [cas_at(64)].iter(),
        );
        assert_eq!(late.end, held.end + m.atomic_addr_ns, "{late:?} after {held:?}");
    }

    /// Goal: the PM media's write queue backfills like the links: a WRITE held behind
    /// its connection's CAS on a hot word, landing microseconds ahead, does not hold
    /// the media for a WRITE on another connection, served as on an idle node.
    #[test]
    fn pm_media_backfills_before_a_far_write() {
        let (m, pm) = (NicModel::cx5(), PmModel::optane_6x());
        let mut st = FabricState::default();
        let write = Op::Write {
            ptr: RemotePtr::new(MnId(0), 4096),
            src: 0,
            len: 64,
        };
        for c in 0..10 {
            m.time_batch_pm(Some(&pm), &mut st, at(c, 0), [cas_at(0)].iter());
        }
        let held = m.time_batch_pm(Some(&pm), &mut st, at(9, 0), [write].iter());
        assert!(held.end >= 10 * m.atomic_addr_ns, "{held:?}");
        let alone = m.time_batch_pm(Some(&pm), &mut FabricState::default(), at(0, 0), [write].iter());
        let other = m.time_batch_pm(Some(&pm), &mut st, at(99, 0), [write].iter());
        // It arrives a little later than alone (the CASes' requests hold the rx link).
        assert_eq!(
            other.end - other.arrival,
            alone.end - alone.arrival,
            "{other:?} against {alone:?}"
        );
    }

    /// Goal: an op after an atomic in one batch runs once the atomic has: a READ
    /// hitchhiked on a lock's CAS reads the record as the lock holder (FORD §4.2), so
    /// the batch ends a PCIe transfer after its CAS, which waits for the address here.
    #[test]
    fn ops_after_an_atomic_wait_for_it() {
        let m = NicModel::cx5();
        let mut st = FabricState::default();
        let (cas, read) = (cas_at(0), read_at(64));
        let first = m.time_batch(&mut st, at(0, 0), [cas].iter());
        let both = m.time_batch(&mut st, at(1, 0), [cas, read].iter());
        assert_eq!(both.end, first.end + m.atomic_addr_ns + m.pcie_ns(64));
    }

    /// Goal: the outstanding READ bound delays the 17th READ of a connection until the
    /// first completes.
    #[test]
    fn outstanding_bound() {
        let m = NicModel::cx5();
        let mut st = FabricState::default();
        let op = Op::Read {
            ptr: RemotePtr::new(MnId(0), 0),
            len: 8,
            dst: 0,
        };
        let first = m.time_batch(&mut st, at(0, 0), [op].iter());
        for _ in 1..m.outstanding_rd_atomic_max {
            assert_eq!(m.time_batch(&mut st, at(0, 0), [op].iter()).issue, 0);
        }
        let late = m.time_batch(&mut st, at(0, 0), [op].iter());
        assert_eq!(late.issue, first.done);
        // Another connection is not held back.
        assert_eq!(m.time_batch(&mut st, at(1, 0), [op].iter()).issue, 0);
    }

    /// Goal: a connection's queue of READ/atomic batches (three in its own line, the
    /// rest behind) admits every batch when the plain deque it replaced did, across
    /// rings that fill, spill and drain, and rows that widen as memory nodes appear.
    #[test]
    fn connection_queue_matches_a_deque() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for case in 0..200 {
            let max = rng.random_range(1..24usize);
            let mut conns = Conns::default();
            let mut model: Vec<(VecDeque<(u64, usize)>, usize)> = Vec::new();
            let mut t = 0u64;
            for _ in 0..400 {
                let (conn, mn) = (rng.random_range(0..3u32), rng.random_range(0..4u16));
                if !conns.holds(conn, mn) {
                    conns.grow(conn, mn);
                }
                let k = conn as usize * 4 + mn as usize;
                if model.len() <= k {
                    model.resize_with(k + 1, Default::default);
                }
                t += rng.random_range(0..8u64);
                let n = rng.random_range(0..=max.min(6));
                // The deque, as the model kept it before.
                let (q, in_flight) = &mut model[k];
                while q.front().is_some_and(|&(done, _)| done <= t) {
                    *in_flight -= q.pop_front().unwrap().1;
                }
                let mut issue = t;
                while *in_flight > 0 && *in_flight + n > max {
                    let (done, m) = q.pop_front().unwrap();
                    issue = issue.max(done);
                    *in_flight -= m;
                }
                let c = conns.get_mut(conn, mn);
                assert_eq!(c.admit(t, n, max), issue, "case {case}");
                let done = issue.max(q.back().map_or(0, |b| b.0)) + rng.random_range(0..60u64);
                if n > 0 {
                    q.push_back((done, n));
                    *in_flight += n;
                    c.push(done, n);
                }
                assert_eq!(c.in_flight(), *in_flight, "case {case}");
            }
        }
    }
}
