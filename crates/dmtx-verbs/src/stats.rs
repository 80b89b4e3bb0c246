//! Verb accounting: round trips, ops by kind, bytes each way, per memory node.
//!
//! Counting happens where a coordinator posts (see `dmtx-runtime`), not inside each
//! transport, so every transport is counted the same way.

use crate::{MnId, OpKind, Post};

/// Counters of one transaction attempt, or summed over many.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PostCounters {
    /// Round trips on the critical path: posts a coordinator waited for.
    pub rtts: u64,
    /// Posts that were never waited for (background release).
    pub background_posts: u64,
    /// Ops by kind, indexed by `OpKind as usize`.
    pub ops: [u64; OpKind::COUNT],
    /// Payload bytes sent to memory nodes.
    pub bytes_out: u64,
    /// Payload bytes returned by memory nodes.
    pub bytes_in: u64,
    /// Timestamps asked of the timestamp service (`dmtx_runtime::timestamp`), of any
    /// kind; a FAA timestamp's verb is in none of the fields above (DESIGN §4).
    pub ts_requests: u64,
    /// Of those, the ones the coordinator waited a round trip for (an RPC to the oracle's
    /// host, or the FAA on a memory-node counter); not in `rtts`.
    pub ts_rtts: u64,
    /// CN↔CN message round trips the coordinator waited for (`dmtx_runtime`'s
    /// `CoordCtx::call`): lock RPCs, lease requests; not in `rtts`.
    pub msg_rtts: u64,
}

impl PostCounters {
    /// Count one post; `critical` when the coordinator waits for it.
    #[inline]
    pub fn count(&mut self, post: &Post, critical: bool) {
        if critical {
            self.rtts += 1;
        } else {
            self.background_posts += 1;
        }
        for op in post.ops() {
            self.ops[op.kind() as usize] += 1;
            self.bytes_out += op.bytes_out();
            self.bytes_in += op.bytes_in();
        }
    }

    /// Ops of one kind.
    #[inline]
    pub fn ops_of(&self, kind: OpKind) -> u64 {
        self.ops[kind as usize]
    }

    /// Total ops of all kinds.
    pub fn ops_total(&self) -> u64 {
        self.ops.iter().sum()
    }

    /// Add `other` into `self`.
    #[inline]
    pub fn add(&mut self, other: &PostCounters) {
        self.rtts += other.rtts;
        self.background_posts += other.background_posts;
        for (a, b) in self.ops.iter_mut().zip(other.ops) {
            *a += b;
        }
        self.bytes_out += other.bytes_out;
        self.bytes_in += other.bytes_in;
        self.ts_requests += other.ts_requests;
        self.ts_rtts += other.ts_rtts;
        self.msg_rtts += other.msg_rtts;
    }
}

/// Load one memory node received.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MnCounters {
    /// Ops by kind.
    pub ops: [u64; OpKind::COUNT],
    /// Payload bytes the node received.
    pub bytes_in: u64,
    /// Payload bytes the node returned.
    pub bytes_out: u64,
}

/// Everything one coordinator (or, merged, one run) posted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerbStats {
    /// Totals over all nodes.
    pub total: PostCounters,
    /// Per node, indexed by [`MnId::index`].
    pub per_mn: Vec<MnCounters>,
}

impl VerbStats {
    /// Counters sized for `mn_count` nodes.
    pub fn new(mn_count: usize) -> Self {
        Self {
            total: PostCounters::default(),
            per_mn: vec![MnCounters::default(); mn_count],
        }
    }

    /// Count one post.
    #[inline]
    pub fn count(&mut self, post: &Post, critical: bool) {
        self.total.count(post, critical);
        for op in post.ops() {
            let i = op.ptr().mn.index();
            if i >= self.per_mn.len() {
                self.per_mn.resize(i + 1, MnCounters::default());
            }
            let mn = &mut self.per_mn[i];
            mn.ops[op.kind() as usize] += 1;
            mn.bytes_in += op.bytes_out();
            mn.bytes_out += op.bytes_in();
        }
    }

    /// Merge another coordinator's counters into these.
    pub fn merge(&mut self, other: &VerbStats) {
        self.total.add(&other.total);
        if self.per_mn.len() < other.per_mn.len() {
            self.per_mn.resize(other.per_mn.len(), MnCounters::default());
        }
        for (a, b) in self.per_mn.iter_mut().zip(&other.per_mn) {
            for (x, y) in a.ops.iter_mut().zip(b.ops) {
                *x += y;
            }
            a.bytes_in += b.bytes_in;
            a.bytes_out += b.bytes_out;
        }
    }

    /// Counters of one node (zero if it saw nothing).
    pub fn mn(&self, mn: MnId) -> MnCounters {
        self.per_mn.get(mn.index()).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RemotePtr;

    #[test]
    fn counts_ops_bytes_and_nodes() {
        let mut p = Post::new();
        p.cas(RemotePtr::new(MnId(0), 0), 0, 1);
        p.read(RemotePtr::new(MnId(0), 0), 40);
        p.write(RemotePtr::new(MnId(1), 0), &[0; 24]);
        let mut s = VerbStats::new(2);
        s.count(&p, true);
        s.count(&p, false);
        assert_eq!(s.total.rtts, 1);
        assert_eq!(s.total.background_posts, 1);
        assert_eq!(s.total.ops_of(OpKind::Cas), 2);
        assert_eq!(s.total.bytes_out, 2 * (16 + 24));
        assert_eq!(s.total.bytes_in, 2 * (8 + 40));
        assert_eq!(s.mn(MnId(1)).ops[OpKind::Write as usize], 2);
        let mut m = VerbStats::default();
        m.merge(&s);
        m.merge(&s);
        assert_eq!(m.total.rtts, 2);
        assert_eq!(m.mn(MnId(0)).bytes_out, 4 * 48);
    }
}
