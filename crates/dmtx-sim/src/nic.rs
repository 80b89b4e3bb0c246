//! The NIC and link model: when one doorbell batch is served and when its reply lands.
//!
//! [`NicModel`] holds the parameters; [`NicModel::time_batch`] is the whole model. It
//! takes one batch (the ops of one post to one memory node, on one connection), the
//! virtual time `t` at which the coordinator rang the doorbell, and the fabric's
//! resource state ([`FabricState`]), and returns the batch's [`BatchTiming`] while
//! reserving the resources it uses. It is computed once, at submit, so a batch costs
//! exactly one scheduled event plus one completion, never one event per op.
//!
//! # The path of a batch
//!
//! ```text
//!  CN NIC tx ──latency──▶ MN NIC rx ─▶ unit (k in parallel) ─▶ PCIe / atomic engine ─▶ MN tx ──latency──▶ CN rx
//! ```
//!
//! 1. **Admission.** A connection (one worker thread's queue pair to one memory node)
//!    has at most [`NicModel::outstanding_rd_atomic_max`] READ/atomic ops in flight
//!    (`max_rd_atomic`). A batch whose READ/atomic ops would exceed it is issued when
//!    enough earlier ones have completed. A batch with more such ops than the limit waits
//!    for all earlier ones and then goes as a whole (a NIC would pipeline it; not modelled).
//! 2. **Request.** The request bytes ([`NicModel::request_bytes`]: headers per packet,
//!    MTU segmentation) are serialized on the CN's tx link: `s = max(issue, cn.tx_free)`,
//!    `cn.tx_free = s + link(bytes)`. They reach the MN port `latency` later and are
//!    serialized again on the MN's rx link if it is busy (the switch queues them):
//!    `r = max(s + latency, mn.rx_free)`, `arrival = mn.rx_free = r + link(bytes)`.
//!    Uncontended, `arrival = issue + latency + link(bytes)`.
//! 3. **Service.** The responder has [`NicModel::units`] processing units. The batch
//!    takes the unit that frees first (lowest index on ties) and starts at
//!    `start = max(arrival, unit_free, connection_served_until)`: batches of one
//!    connection are served in order. The unit is busy for the sum of the ops' service
//!    times ([`NicModel::service_ns`]), processing the ops one after another:
//!    `proc_i = start + Σ_{j≤i} service_j`. A READ's or WRITE's payload then crosses
//!    the responder's PCIe, one shared resource, while the unit goes on with the next op:
//!    `p = max(proc_i, pcie_free)`, `done_i = pcie_free = p + pcie(len)`. An atomic
//!    waits for the ops before it to complete, for the NIC-wide atomic token (one every
//!    [`NicModel::atomic_nic_gap_ns`]) and for its address to be free (one atomic per
//!    address every [`NicModel::atomic_addr_ns`], next-free times kept per address in a
//!    `BTreeMap`): `x = max(proc_i, done_{<i}, token, addr_free)`, `token = x + gap`,
//!    `done_i = addr_free = x + addr_ns`. Service ends when the last op is done,
//!    `end = max_i done_i`; the
//!    connection's next batch starts no earlier.
//! 4. **Reply.** The reply bytes ([`NicModel::reply_bytes`]) leave at `end` through the
//!    MN's tx link and the CN's rx link, as in step 2; the batch is done when its last
//!    byte lands: uncontended, `done = end + latency + link(reply)`.
//!
//! So an uncontended single READ of `n` bytes completes after
//! `2·latency + link(req) + service(READ) + pcie(n) + link(reply)`; CAS on one address
//! saturates at `1/atomic_addr_ns`; CAS on distinct addresses at
//! `min(1/atomic_nic_gap_ns, units/service(atomic))`.
//!
//! Resources are reserved in submit order (a batch submitted earlier is never served
//! after a later one on a shared resource), which is exact while all links have the same
//! latency. Link and PCIe transfer times are rounded up to whole nanoseconds per batch.
//!
//! # Parameters of [`NicModel::cx5`]
//!
//! Each number is *spec* (from a standard or datasheet), *measured* (a published
//! measurement) or *assumed* (our estimate, to be replaced by a measurement). The same
//! table, with units, is in `docs/sim-model.md`.
//!
//! | parameter | value | kind | source |
//! | --- | --- | --- | --- |
//! | link rate | 100 Gb/s (80 ps/B) | spec | ConnectX-5 100 Gb/s InfiniBand NIC and SB7890 switch of the FORD (§6.1) and Motor (§7.1) testbeds |
//! | one-way latency | 1000 ns | assumed | ConnectX-5 datasheet "sub-600 ns" adapter latency + SB7890 datasheet 90 ns port-to-port + PCIe doorbell/DMA; FORD §3 cites 3–8 µs RDMA RTT including software |
//! | MTU | 4096 B | spec | InfiniBand maximum MTU (IBTA spec) |
//! | packet header | 26 B | spec | IB LRH 8 + BTH 12 + ICRC 4 + VCRC 2 (IBTA spec) |
//! | RETH (READ/WRITE request) | 16 B | spec | IBTA spec |
//! | AtomicETH (CAS/FAA request) | 28 B | spec | IBTA spec |
//! | AETH (every reply packet) | 4 B | spec | IBTA spec |
//! | AtomicAckETH (atomic reply) | 8 B | spec | IBTA spec |
//! | processing units | 16 | assumed | with 80 ns each: 200 M ops/s, the ConnectX-5 datasheet message rate |
//! | READ / WRITE / atomic / FLUSH service | 80 ns each | assumed | as above |
//! | responder PCIe | 73 ps/B (≈13.7 GB/s) | assumed | PCIe 3.0 x16 (ConnectX-5) 15.75 GB/s raw, minus TLP overhead |
//! | NIC-wide atomics | one per 20 ns (50 M/s) | assumed | order of magnitude of published ConnectX atomic-rate measurements (Kalia et al., ATC'16) |
//! | per-address atomic | 400 ns (2.5 M/s) | assumed | same-address atomics serialize on a PCIe read-modify-write; ~2–3 M/s reported for ConnectX-3 (Kalia et al., ATC'16) |
//! | outstanding READ/atomic per connection | 16 | assumed | `max_qp_rd_atom` that `ibv_devinfo` commonly reports for ConnectX-5 |

use std::collections::{BTreeMap, VecDeque};

use dmtx_verbs::{Op, OpKind};

/// Parameters of the NIC and link model (see the module doc for each one's source).
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Responder PCIe transfer time per payload byte, in picoseconds.
    pub pcie_ps_per_byte: u64,
    /// NIC-wide atomic capacity: at most one atomic starts per this many ns.
    pub atomic_nic_gap_ns: u64,
    /// Atomics on one address are serialized: each takes this long (ns).
    pub atomic_addr_ns: u64,
    /// READ and atomic ops in flight per connection (`max_rd_atomic`).
    pub outstanding_rd_atomic_max: usize,
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
            pcie_ps_per_byte: 73,
            atomic_nic_gap_ns: 20,
            atomic_addr_ns: 400,
            outstanding_rd_atomic_max: 16,
        }
    }

    /// Time to serialize `bytes` on a link (ns, rounded up).
    #[inline]
    pub fn link_ns(&self, bytes: u64) -> u64 {
        (bytes * self.link_ps_per_byte).div_ceil(1000)
    }

    /// Time to move `bytes` over the responder's PCIe (ns, rounded up).
    #[inline]
    pub fn pcie_ns(&self, bytes: u64) -> u64 {
        (bytes * self.pcie_ps_per_byte).div_ceil(1000)
    }

    /// Packets a payload of `len` bytes takes (at least one).
    #[inline]
    pub fn packets(&self, len: u64) -> u64 {
        len.div_ceil(self.mtu_bytes).max(1)
    }

    /// Bytes on the wire for an op's request.
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
        match *op {
            Op::Read { len, .. } | Op::Write { len, .. } => len as u64,
            _ => 0,
        }
    }

    /// Time one batch: `ops` are the batch's ops in order (all to `batch.mn`). Reserves
    /// the links, unit, PCIe, atomic tokens and addresses it uses in `st`.
    pub fn time_batch<'o>(
        &self,
        st: &mut FabricState,
        batch: BatchAt,
        ops: impl Iterator<Item = &'o Op> + Clone,
    ) -> BatchTiming {
        st.ensure(batch.cn, batch.conn, batch.mn, self.units);
        let lat = self.one_way_latency_ns;
        let (mut req, mut rep, mut rd_atomic) = (0u64, 0u64, 0usize);
        for op in ops.clone() {
            req += self.request_bytes(op);
            rep += self.reply_bytes(op);
            if matches!(op.kind(), OpKind::Read | OpKind::Cas | OpKind::Faa | OpKind::Flush) {
                rd_atomic += 1;
            }
        }

        // 1. Admission: at most `outstanding_rd_atomic_max` READ/atomic ops in flight.
        let conn = &mut st.conns[batch.conn as usize][batch.mn as usize];
        let mut issue = batch.t;
        while conn.outstanding.front().is_some_and(|&(done, _)| done <= issue) {
            let (_, n) = conn.outstanding.pop_front().expect("front exists");
            conn.in_flight -= n;
        }
        while conn.in_flight > 0 && conn.in_flight + rd_atomic > self.outstanding_rd_atomic_max {
            let (done, n) = conn.outstanding.pop_front().expect("in flight ops are queued");
            issue = issue.max(done);
            conn.in_flight -= n;
        }
        let served_until = conn.served_until;

        // 2. Request: CN tx link, latency, MN rx link.
        let cn = &mut st.cns[batch.cn as usize];
        let mn = &mut st.mns[batch.mn as usize];
        let s = issue.max(cn.tx_free);
        cn.tx_free = s + self.link_ns(req);
        let r = (s + lat).max(mn.port.rx_free);
        mn.port.rx_free = r + self.link_ns(req);
        let arrival = mn.port.rx_free;

        // 3. Service: a unit, connection order, PCIe, atomic token and address.
        let (unit, unit_free) = mn
            .units
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(i, free)| (free, i))
            .expect("a NIC has at least one unit");
        let start = arrival.max(unit_free).max(served_until);
        let mut proc = start; // the unit's processing, op after op
        let mut t = start; // completion of the ops so far
        for op in ops {
            proc += self.service_ns(op.kind());
            let dma = Self::dma_bytes(op);
            if dma > 0 {
                let p = proc.max(mn.pcie_free);
                mn.pcie_free = p + self.pcie_ns(dma);
                t = t.max(mn.pcie_free);
            } else if matches!(op.kind(), OpKind::Cas | OpKind::Faa) {
                let addr = op.ptr().offset;
                let addr_free = mn.addr_free.get(&addr).copied().unwrap_or(0);
                let x = proc.max(t).max(mn.atomic_next).max(addr_free);
                mn.atomic_next = x + self.atomic_nic_gap_ns;
                mn.addr_free.insert(addr, x + self.atomic_addr_ns);
                t = x + self.atomic_addr_ns;
            } else {
                t = t.max(proc);
            }
        }
        let busy = proc - start;
        mn.units[unit] = start + busy;
        let end = t;
        if mn.addr_free.len() > ADDR_FREE_PRUNE_AT {
            // Entries in the past can never delay a later batch (issue times only grow).
            mn.addr_free.retain(|_, &mut free| free > batch.t);
        }

        // 4. Reply: MN tx link, latency, CN rx link.
        let s2 = end.max(mn.port.tx_free);
        mn.port.tx_free = s2 + self.link_ns(rep);
        let r2 = (s2 + lat).max(cn.rx_free);
        cn.rx_free = r2 + self.link_ns(rep);
        let done = cn.rx_free;

        let conn = &mut st.conns[batch.conn as usize][batch.mn as usize];
        conn.served_until = end;
        if rd_atomic > 0 {
            conn.outstanding.push_back((done, rd_atomic));
            conn.in_flight += rd_atomic;
        }
        BatchTiming {
            issue,
            arrival,
            start,
            end,
            done,
        }
    }
}

/// Prune a responder's per-address map when it holds more entries than this.
const ADDR_FREE_PRUNE_AT: usize = 4096;

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
}

/// Send and receive sides of one port.
#[derive(Clone, Debug, Default)]
pub struct Port {
    /// The tx link is busy until then.
    pub tx_free: u64,
    /// The rx link is busy until then.
    pub rx_free: u64,
}

/// A memory node's NIC.
#[derive(Clone, Debug, Default)]
pub struct Responder {
    /// Its port.
    pub port: Port,
    /// When each processing unit frees.
    pub units: Vec<u64>,
    /// When PCIe frees.
    pub pcie_free: u64,
    /// When the next NIC-wide atomic token is available.
    pub atomic_next: u64,
    /// Per address: when the next atomic on it may run.
    pub addr_free: BTreeMap<u64, u64>,
}

/// One connection to one memory node.
#[derive(Clone, Debug, Default)]
pub struct ConnState {
    /// The previous batch's service end.
    pub served_until: u64,
    /// READ/atomic ops in flight: (completion time, count), completion times ascending.
    pub outstanding: VecDeque<(u64, usize)>,
    /// Sum of the counts in `outstanding`.
    pub in_flight: usize,
}

/// Every resource of the fabric the model reserves; grows as nodes and connections
/// appear.
#[derive(Clone, Debug, Default)]
pub struct FabricState {
    /// Compute-node ports.
    pub cns: Vec<Port>,
    /// Memory-node NICs.
    pub mns: Vec<Responder>,
    /// Per connection, per memory node.
    pub conns: Vec<Vec<ConnState>>,
}

impl FabricState {
    fn ensure(&mut self, cn: u32, conn: u32, mn: u16, units: usize) {
        let (cn, conn, mn) = (cn as usize, conn as usize, mn as usize);
        if self.cns.len() <= cn {
            self.cns.resize_with(cn + 1, Port::default);
        }
        if self.mns.len() <= mn {
            self.mns.resize_with(mn + 1, || Responder {
                units: vec![0; units.max(1)],
                ..Responder::default()
            });
        }
        if self.conns.len() <= conn {
            self.conns.resize_with(conn + 1, Vec::new);
        }
        let c = &mut self.conns[conn];
        if c.len() <= mn {
            c.resize_with(mn + 1, ConnState::default);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmtx_verbs::{MnId, RemotePtr};

    fn at(conn: u32, t: u64) -> BatchAt {
        BatchAt { cn: 0, conn, mn: 0, t }
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
}
