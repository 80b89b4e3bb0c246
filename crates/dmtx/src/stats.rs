//! What a worker thread counts while it runs, merged after the run.
//!
//! One [`RunStats`] per worker thread, shared by that thread's coordinators through a
//! `RefCell` (they run on one thread and never hold the borrow across an await), so
//! recording a transaction takes no lock, no atomic and no allocation. Threads' stats
//! are merged once, after they are joined.

use dmtx_runtime::{AbortReason, AbortReasonSpec, PROTOCOL_ABORT_REASONS_MAX};
use dmtx_verbs::PostCounters;
use hdrhistogram::Histogram;

/// Largest latency recorded exactly; longer transactions are recorded as this (100 s).
pub const LATENCY_NS_MAX: u64 = 100_000_000_000;
/// Significant figures kept by the latency histograms.
pub const LATENCY_SIGFIGS: u8 = 3;
/// Abort reason slots: one per shared reason ([`AbortReason::ALL`]), one per reason a
/// protocol may declare, and one for an index beyond those.
pub const REASON_SLOTS: usize = AbortReason::ALL.len() + PROTOCOL_ABORT_REASONS_MAX + 1;

/// The slot of `reason` in per-reason arrays ([`AbortReason::slot`]; the last slot is
/// "other").
#[inline]
pub fn reason_slot(reason: AbortReason) -> usize {
    reason.slot().min(REASON_SLOTS - 1)
}

/// The result name of a reason slot, with `protocol` the run's protocol's
/// `ABORT_REASONS`: a shared reason's name, the protocol's entry's, else `other`.
pub fn slot_name(slot: usize, protocol: &[AbortReasonSpec]) -> &'static str {
    let shared = AbortReason::ALL.len();
    match AbortReason::ALL.get(slot) {
        Some(r) => r.name(),
        None => protocol.get(slot - shared).map_or("other", |s| s.name),
    }
}

/// A fresh latency histogram, in nanoseconds.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGFIGS).expect("constant histogram bounds are valid")
}

/// Counters of one transaction type.
#[derive(Clone, Debug)]
pub struct TypeStats {
    /// Committed attempts.
    pub committed: u64,
    /// Aborted attempts.
    pub aborted: u64,
    /// Committed attempts the workload's spec does not count as successful.
    pub unsuccessful: u64,
    /// Attempts the workload rolled back on purpose (neither committed nor aborted).
    pub rolled_back: u64,
    /// Aborted attempts by reason slot ([`reason_slot`]).
    pub abort_reasons: [u64; REASON_SLOTS],
    /// Verbs of committed attempts, summed.
    pub committed_counters: PostCounters,
    /// Verbs of aborted attempts, summed.
    pub aborted_counters: PostCounters,
    /// Attempts of the committed transactions (the committing one and the aborted ones
    /// retried before it), summed.
    pub commit_attempts: u64,
    /// Verbs of the protocol's per-attempt cleanup (`Protocol::cleanup`) after every
    /// attempt, committed or not, summed; in neither of the counters above.
    pub cleanup_counters: PostCounters,
    /// Latency of committed transactions, ns: from the first attempt's start to the
    /// commit.
    pub latency_ns: Histogram<u64>,
}

impl Default for TypeStats {
    fn default() -> Self {
        Self {
            committed: 0,
            aborted: 0,
            unsuccessful: 0,
            rolled_back: 0,
            abort_reasons: [0; REASON_SLOTS],
            committed_counters: PostCounters::default(),
            aborted_counters: PostCounters::default(),
            commit_attempts: 0,
            cleanup_counters: PostCounters::default(),
            latency_ns: latency_histogram(),
        }
    }
}

impl TypeStats {
    /// Add `other` into `self`.
    pub fn merge(&mut self, other: &TypeStats) {
        self.committed += other.committed;
        self.aborted += other.aborted;
        self.unsuccessful += other.unsuccessful;
        self.rolled_back += other.rolled_back;
        for (a, b) in self.abort_reasons.iter_mut().zip(other.abort_reasons) {
            *a += b;
        }
        self.committed_counters.add(&other.committed_counters);
        self.aborted_counters.add(&other.aborted_counters);
        self.commit_attempts += other.commit_attempts;
        self.cleanup_counters.add(&other.cleanup_counters);
        self.latency_ns.add(&other.latency_ns).expect("histograms share bounds");
    }

    /// Committed, aborted and rolled back.
    pub fn attempted(&self) -> u64 {
        self.committed + self.aborted + self.rolled_back
    }

    /// Committed and successful.
    pub fn successful(&self) -> u64 {
        self.committed - self.unsuccessful
    }
}

/// Per-type counters of one thread, or of a whole run once merged.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Indexed by the workload's transaction type index.
    pub types: Vec<TypeStats>,
}

impl RunStats {
    /// Counters for `types` transaction types (histograms allocated here, not per txn).
    pub fn new(types: usize) -> Self {
        Self {
            types: (0..types).map(|_| TypeStats::default()).collect(),
        }
    }

    #[inline]
    fn ty(&mut self, ty: usize) -> &mut TypeStats {
        let n = self.types.len();
        match self.types.get_mut(ty) {
            Some(t) => t,
            None => panic!("draw reported txn type {ty}, but the workload declares {n}"),
        }
    }

    /// Count a committed attempt of type `ty` (`successful` as the workload's spec
    /// counts it), the `attempts`-th of its transaction, `latency_ns` after the first.
    #[inline]
    pub fn commit(&mut self, ty: usize, counters: &PostCounters, latency_ns: u64, successful: bool, attempts: u32) {
        debug_assert!(attempts >= 1, "a commit is an attempt");
        let t = self.ty(ty);
        t.committed += 1;
        t.commit_attempts += u64::from(attempts);
        t.unsuccessful += u64::from(!successful);
        t.committed_counters.add(counters);
        t.latency_ns.saturating_record(latency_ns.max(1));
    }

    /// Count an aborted attempt of type `ty`.
    #[inline]
    pub fn abort(&mut self, ty: usize, reason: AbortReason, counters: &PostCounters) {
        let t = self.ty(ty);
        t.aborted += 1;
        t.abort_reasons[reason_slot(reason)] += 1;
        t.aborted_counters.add(counters);
    }

    /// Count an attempt of type `ty` that the workload rolled back on purpose; its verbs
    /// count as those of an aborted attempt (work that committed nothing).
    #[inline]
    pub fn rolled_back(&mut self, ty: usize, counters: &PostCounters) {
        let t = self.ty(ty);
        t.rolled_back += 1;
        t.aborted_counters.add(counters);
    }

    /// Count the cleanup that followed an attempt of type `ty` (whatever its outcome).
    #[inline]
    pub fn cleanup(&mut self, ty: usize, counters: &PostCounters) {
        self.ty(ty).cleanup_counters.add(counters);
    }

    /// Add another thread's counters.
    pub fn merge(&mut self, other: &RunStats) {
        if self.types.len() < other.types.len() {
            self.types.resize_with(other.types.len(), TypeStats::default);
        }
        for (a, b) in self.types.iter_mut().zip(&other.types) {
            a.merge(b);
        }
    }

    /// Every type summed.
    pub fn total(&self) -> TypeStats {
        let mut all = TypeStats::default();
        for t in &self.types {
            all.merge(t);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_record_and_merge() {
        let mut a = RunStats::new(2);
        let c = PostCounters {
            rtts: 2,
            ..Default::default()
        };
        a.commit(0, &c, 1_000, true, 1);
        a.commit(0, &c, 3_000, false, 3);
        a.abort(1, AbortReason::Validation, &c);
        a.rolled_back(1, &c);
        a.cleanup(1, &c);
        let mut b = RunStats::new(2);
        b.commit(1, &c, 2_000, true, 1);
        b.merge(&a);
        assert_eq!(b.types[0].committed, 2);
        assert_eq!(b.types[1].committed, 1);
        assert_eq!(b.types[1].aborted, 1);
        assert_eq!(b.types[1].abort_reasons[reason_slot(AbortReason::Validation)], 1);
        let all = b.total();
        assert_eq!(all.committed, 3);
        assert_eq!((all.successful(), all.unsuccessful, all.rolled_back), (2, 1, 1));
        assert_eq!(all.attempted(), 5);
        assert_eq!(all.commit_attempts, 5, "1 + 3 + 1 attempts of the three commits");
        assert_eq!(all.committed_counters.rtts, 6);
        assert_eq!(all.aborted_counters.rtts, 4);
        assert_eq!(all.cleanup_counters.rtts, 2, "apart from both");
        assert_eq!(b.types[1].cleanup_counters.rtts, 2);
        assert_eq!(all.latency_ns.len(), 3);
        assert_eq!(all.latency_ns.max(), 3_001, "3 significant figures");
        assert_eq!(slot_name(reason_slot(AbortReason::LockConflict), &[]), "lock_conflict");
        assert_eq!(slot_name(REASON_SLOTS - 1, &[]), "other");
        let mine = [AbortReasonSpec::new("lease_expired", true, "")];
        assert_eq!(slot_name(reason_slot(AbortReason::Protocol(0)), &mine), "lease_expired");
        assert_eq!(slot_name(reason_slot(AbortReason::Protocol(1)), &mine), "other");
        assert_eq!(reason_slot(AbortReason::Protocol(200)), REASON_SLOTS - 1);
    }

    #[test]
    #[should_panic(expected = "txn type 5")]
    fn test_type_out_of_range_is_a_workload_bug() {
        RunStats::new(1).commit(5, &PostCounters::default(), 1, true, 1);
    }
}
