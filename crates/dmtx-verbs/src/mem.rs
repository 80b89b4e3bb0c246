//! The `mem` transport: memory nodes in the same process.
//!
//! A post runs to completion inside [`Transport::submit`], op by op, on the caller's
//! thread. Ops of one node run in the order posted; running the whole post in order is
//! one of the interleavings the contract allows for batches of different nodes. Racing
//! posts from other threads interleave word by word through [`Region`], so torn reads
//! happen exactly as DESIGN §2 describes. Flush is a no-op: the regions are DRAM.
//!
//! Fault injection: [`MemFabric::set_down`] makes every op to a node fail with
//! [`VerbError::Unreachable`], as a crashed memory node would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::{Fabric, MnId, Op, Post, Region, Result, Submitted, Ticket, Transport, VerbError};

/// In-process memory nodes, shared by every worker thread.
#[derive(Clone, Debug)]
pub struct MemFabric {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    regions: Vec<Arc<Region>>,
    down: Vec<AtomicBool>,
}

impl MemFabric {
    /// A fabric over the given regions; node `i` is `regions[i]`.
    pub fn new(regions: Vec<Arc<Region>>) -> Self {
        let down = regions.iter().map(|_| AtomicBool::new(false)).collect();
        Self {
            inner: Arc::new(Inner { regions, down }),
        }
    }

    /// The region of node `mn`.
    pub fn region(&self, mn: MnId) -> &Arc<Region> {
        &self.inner.regions[mn.index()]
    }

    /// Fault injection: mark a node crashed (`true`) or back (`false`).
    pub fn set_down(&self, mn: MnId, down: bool) {
        self.inner.down[mn.index()].store(down, Ordering::SeqCst);
    }

    /// A transport usable from any thread (the `mem` transport keeps no per-thread state).
    pub fn transport(&self) -> MemTransport {
        MemTransport {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl Fabric for MemFabric {
    fn name(&self) -> &'static str {
        "mem"
    }
    fn mn_count(&self) -> usize {
        self.inner.regions.len()
    }
    fn endpoint(&self, _worker: u32) -> Result<Box<dyn Transport>> {
        Ok(Box::new(self.transport()))
    }
}

/// One worker thread's handle on a [`MemFabric`].
#[derive(Clone, Debug)]
pub struct MemTransport {
    inner: Arc<Inner>,
}

/// Nodes whose batch already failed in this post; later ops of that batch are flushed
/// with the same error, as an RDMA queue pair in the error state does.
const FAILED_MNS_MAX: usize = 64;

impl MemTransport {
    fn run(&self, post: &mut Post) -> Result<()> {
        let parts = post.parts_mut();
        // Touch every target first so the misses of a post overlap instead of queueing.
        for op in parts.ops {
            let ptr = op.ptr();
            if let Some(region) = self.inner.regions.get(ptr.mn.index()) {
                let len = match *op {
                    Op::Read { len, .. } | Op::Write { len, .. } => len as u64,
                    _ => 8,
                };
                region.prefetch(ptr.offset, len);
            }
        }
        let mut failed: u64 = 0;
        let mut first_err = None;
        for (i, op) in parts.ops.iter().enumerate() {
            let mn = op.ptr().mn;
            let bit = 1u64 << (mn.index() % FAILED_MNS_MAX);
            if failed & bit != 0 {
                continue;
            }
            if let Err(e) = self.run_op(i, op, parts.write_data, parts.read_buf, parts.old) {
                failed |= bit;
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    #[inline]
    fn run_op(&self, i: usize, op: &Op, wdata: &[u8], rbuf: &mut [u8], old: &mut [u64]) -> Result<()> {
        let ptr = op.ptr();
        let Some(region) = self.inner.regions.get(ptr.mn.index()) else {
            return Err(VerbError::UnknownNode {
                mn: ptr.mn,
                mn_count: self.inner.regions.len(),
            });
        };
        if self.inner.down[ptr.mn.index()].load(Ordering::Relaxed) {
            return Err(VerbError::Unreachable {
                mn: ptr.mn,
                why: "memory node is down (fault injected)".into(),
            });
        }
        crate::apply::apply_op(region, i, op, wdata, rbuf, old)
    }
}

impl Transport for MemTransport {
    fn mn_count(&self) -> usize {
        self.inner.regions.len()
    }

    fn submit(&self, post: &mut Post) -> Submitted {
        Submitted::Done(self.run(post))
    }

    fn poll(&self, ticket: Ticket, _post: &mut Post, _cx: &mut Context<'_>) -> Poll<Result<()>> {
        unreachable!("the mem transport completes posts at submit; no ticket {ticket:?} exists")
    }

    fn submit_detached(&self, post: &mut Post) {
        // Background posts have nobody to report to; a failure leaves what a crashed
        // node leaves, which recovery handles.
        let _ = self.run(post);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OpKind, RemotePtr};

    fn fabric() -> MemFabric {
        MemFabric::new(vec![Arc::new(Region::new(4096)), Arc::new(Region::new(4096))])
    }

    fn run(t: &MemTransport, p: &mut Post) -> Result<()> {
        match t.submit(p) {
            Submitted::Done(r) => r,
            Submitted::Pending(_) => unreachable!(),
        }
    }

    #[test]
    fn batch_runs_in_order_and_returns_results() {
        let f = fabric();
        let t = f.transport();
        let p0 = RemotePtr::new(MnId(0), 64);
        let mut p = Post::new();
        let c1 = p.cas(p0, 0, 5);
        let r = p.read(p0, 8);
        let c2 = p.cas(p0, 0, 6);
        let a = p.faa(p0, 10);
        p.write(RemotePtr::new(MnId(1), 0), b"abcdefgh");
        let r1 = p.read(RemotePtr::new(MnId(1), 0), 8);
        p.flush(RemotePtr::new(MnId(1), 0));
        run(&t, &mut p).unwrap();
        assert_eq!(p.old(c1), 0);
        assert_eq!(p.bytes(r), 5u64.to_le_bytes());
        assert_eq!(p.old(c2), 5, "failed CAS returns the current word");
        assert_eq!(p.old(a), 5);
        assert_eq!(p.bytes(r1), b"abcdefgh");
        assert_eq!(f.region(MnId(0)).load(64).unwrap(), 15);
    }

    #[test]
    fn errors_name_the_op_and_stop_only_that_batch() {
        let f = fabric();
        let t = f.transport();
        let mut p = Post::new();
        p.cas(RemotePtr::new(MnId(0), 3), 0, 1);
        p.write(RemotePtr::new(MnId(0), 0), &[1; 8]);
        p.write(RemotePtr::new(MnId(1), 0), &[2; 8]);
        let e = run(&t, &mut p).unwrap_err();
        assert!(matches!(e, VerbError::Misaligned { kind: OpKind::Cas, .. }), "{e}");
        assert_eq!(
            f.region(MnId(0)).load(0).unwrap(),
            0,
            "op after the failed one was skipped"
        );
        assert_eq!(f.region(MnId(1)).load(0).unwrap(), u64::from_le_bytes([2; 8]));

        p.clear();
        p.read(RemotePtr::new(MnId(1), 4090), 16);
        let e = run(&t, &mut p).unwrap_err();
        assert!(
            matches!(
                e,
                VerbError::OutOfRange {
                    kind: OpKind::Read,
                    len: 16,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("outside the region"));

        p.clear();
        p.read(RemotePtr::new(MnId(7), 0), 8);
        assert!(matches!(run(&t, &mut p), Err(VerbError::UnknownNode { .. })));
    }

    #[test]
    fn a_down_node_fails_its_ops() {
        let f = fabric();
        let t = f.transport();
        f.set_down(MnId(1), true);
        let mut p = Post::new();
        p.read(RemotePtr::new(MnId(1), 0), 8);
        assert!(matches!(run(&t, &mut p), Err(VerbError::Unreachable { .. })));
        f.set_down(MnId(1), false);
        run(&t, &mut p).unwrap();
    }
}
