//! What a simulated run reports beyond the transport-independent counters: per-node NIC
//! load and per-op-kind waiting, gathered as batches are timed.
//!
//! Every batch adds its request and reply bytes (headers included, as the wire carries
//! them) and the link time they take to both ends' counters, and its waits to the
//! counters of every op kind it holds:
//!
//! - **admission wait**: from the doorbell until the connection's outstanding READ/atomic
//!   bound let it go (`issue − doorbell`);
//! - **responder wait**: from the last request byte's arrival until a processing unit
//!   (and the connection's earlier batches) let it start (`start − arrival`);
//! - **latency**: from the doorbell until the reply landed (`done − doorbell`).
//!
//! Link utilisation is the busier direction's serialization time over the run's virtual
//! time, so 1.0 means that direction never idled.

use dmtx_verbs::OpKind;

use crate::nic::{BatchSum, BatchTiming};

/// Op kinds in [`OpKind`] order.
pub const KINDS: [OpKind; 5] = [OpKind::Read, OpKind::Write, OpKind::Cas, OpKind::Faa, OpKind::Flush];

/// One node's NIC load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLoad {
    /// Ops sent (a CN) or served (an MN), by kind in [`KINDS`] order.
    pub ops: [u64; 5],
    /// Wire bytes sent, headers included.
    pub tx_bytes: u64,
    /// Wire bytes received, headers included.
    pub rx_bytes: u64,
    /// Serialization time on the transmit link (ns).
    pub tx_busy_ns: u64,
    /// Serialization time on the receive link (ns).
    pub rx_busy_ns: u64,
}

impl NodeLoad {
    /// The busier direction's share of `elapsed_ns`.
    pub fn link_utilisation(&self, elapsed_ns: u64) -> f64 {
        if elapsed_ns == 0 {
            return 0.0;
        }
        self.tx_busy_ns.max(self.rx_busy_ns) as f64 / elapsed_ns as f64
    }
}

/// Waits of the ops of one kind, summed over ops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindWaits {
    /// Ops of the kind.
    pub ops: u64,
    /// Σ admission wait (ns).
    pub admission_ns: u64,
    /// Σ responder wait (ns).
    pub responder_ns: u64,
    /// Σ latency of the batch holding the op (ns).
    pub latency_ns: u64,
}

/// The fabric's load so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricLoad {
    /// Per memory node, by index.
    pub mns: Vec<NodeLoad>,
    /// Per compute node, by id.
    pub cns: Vec<NodeLoad>,
    /// Per op kind, in [`KINDS`] order.
    pub kinds: [KindWaits; 5],
}

impl FabricLoad {
    /// Count one timed batch from compute node `cn` to memory node `mn`, whose doorbell
    /// rang at `t` and whose ops are summed up in `sum`.
    #[inline]
    pub(crate) fn batch(&mut self, cn: u32, mn: u16, t: u64, tm: &BatchTiming, sum: &BatchSum) {
        let (cn, mn) = (cn as usize, mn as usize);
        if self.cns.len() <= cn || self.mns.len() <= mn {
            self.grow(cn, mn);
        }
        let admission = tm.issue - t;
        let responder = tm.start.saturating_sub(tm.arrival);
        let latency = tm.done - t;
        let (req, rep) = (tm.request_bytes, tm.reply_bytes);
        // Per op of each kind: adding `n` at once is adding once per op.
        for (k, &n) in sum.kinds.iter().enumerate() {
            if n == 0 {
                continue;
            }
            self.cns[cn].ops[k] += n;
            self.mns[mn].ops[k] += n;
            let w = &mut self.kinds[k];
            w.ops += n;
            w.admission_ns += admission * n;
            w.responder_ns += responder * n;
            w.latency_ns += latency * n;
        }
        let (req_ns, rep_ns) = (sum.req_ns, sum.rep_ns);
        let c = &mut self.cns[cn];
        c.tx_bytes += req;
        c.rx_bytes += rep;
        c.tx_busy_ns += req_ns;
        c.rx_busy_ns += rep_ns;
        let m = &mut self.mns[mn];
        m.rx_bytes += req;
        m.tx_bytes += rep;
        m.rx_busy_ns += req_ns;
        m.tx_busy_ns += rep_ns;
    }

    #[cold]
    fn grow(&mut self, cn: usize, mn: usize) {
        if self.cns.len() <= cn {
            self.cns.resize(cn + 1, NodeLoad::default());
        }
        if self.mns.len() <= mn {
            self.mns.resize(mn + 1, NodeLoad::default());
        }
    }
}

impl NodeLoad {
    fn since(&self, before: &NodeLoad) -> NodeLoad {
        NodeLoad {
            ops: std::array::from_fn(|k| self.ops[k] - before.ops[k]),
            tx_bytes: self.tx_bytes - before.tx_bytes,
            rx_bytes: self.rx_bytes - before.rx_bytes,
            tx_busy_ns: self.tx_busy_ns - before.tx_busy_ns,
            rx_busy_ns: self.rx_busy_ns - before.rx_busy_ns,
        }
    }
}

impl FabricLoad {
    /// What was added since `before` (an earlier reading of the same run): the load of
    /// a measured window after a warm-up.
    pub fn since(&self, before: &FabricLoad) -> FabricLoad {
        let nodes = |now: &[NodeLoad], then: &[NodeLoad]| -> Vec<NodeLoad> {
            now.iter()
                .enumerate()
                .map(|(i, n)| n.since(then.get(i).unwrap_or(&NodeLoad::default())))
                .collect()
        };
        FabricLoad {
            mns: nodes(&self.mns, &before.mns),
            cns: nodes(&self.cns, &before.cns),
            kinds: std::array::from_fn(|k| {
                let (a, b) = (&self.kinds[k], &before.kinds[k]);
                KindWaits {
                    ops: a.ops - b.ops,
                    admission_ns: a.admission_ns - b.admission_ns,
                    responder_ns: a.responder_ns - b.responder_ns,
                    latency_ns: a.latency_ns - b.latency_ns,
                }
            }),
        }
    }
}

impl crate::Sim {
    /// The fabric's load so far.
    pub fn load(&self) -> FabricLoad {
        self.lock().load.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NicModel;
    use dmtx_verbs::{MnId, Op, RemotePtr};

    /// Goal: a batch adds its waits once per op of each kind, its ops to both ends, and
    /// its bytes and link time once.
    #[test]
    fn batch_counts_per_op_and_per_batch() {
        let m = NicModel::cx5();
        let p = RemotePtr::new(MnId(1), 0);
        let ops = [
            Op::Read {
                ptr: p,
                len: 64,
                dst: 0,
            },
            Op::Read {
                ptr: p,
                len: 64,
                dst: 64,
            },
            Op::Faa { ptr: p, add: 1 },
        ];
        let sum = m.sum_batch(ops.iter());
        let tm = BatchTiming {
            issue: 110,
            arrival: 1_200,
            start: 1_250,
            end: 1_400,
            done: 2_500,
            request_bytes: sum.req,
            reply_bytes: sum.rep,
        };
        let mut load = FabricLoad::default();
        load.batch(2, 1, 100, &tm, &sum);
        let read = &load.kinds[OpKind::Read as usize];
        assert_eq!(
            (read.ops, read.admission_ns, read.responder_ns, read.latency_ns),
            (2, 20, 100, 4_800)
        );
        let faa = &load.kinds[OpKind::Faa as usize];
        assert_eq!((faa.ops, faa.admission_ns, faa.latency_ns), (1, 10, 2_400));
        assert_eq!(load.cns[2].ops, [2, 0, 0, 1, 0]);
        assert_eq!(load.mns[1].ops, [2, 0, 0, 1, 0]);
        assert_eq!((load.cns[2].tx_bytes, load.mns[1].rx_bytes), (sum.req, sum.req));
        assert_eq!(load.cns[2].rx_busy_ns, m.link_ns(sum.rep));
        assert_eq!(load.cns.len(), 3);
    }
}
