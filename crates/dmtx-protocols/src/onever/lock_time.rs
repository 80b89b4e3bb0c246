//! How long records stay locked, and the wait-on-conflict mode that FORD's lock-duration
//! experiment runs in (FORD §6.2.1, Fig. 14).
//!
//! The paper measures lock duration with coordinators that, instead of aborting on a
//! failed lock, wait for the record to be unlocked, one record per transaction, and
//! reports each coordinator's mean. It does not say where a duration starts or ends;
//! here, per record a transaction locks:
//!
//! - **duration** (`lock_duration_ns`, the paper's figure): from the first lock attempt
//!   (the post of its first CAS) to the release (the post of the unlocking WRITE), waits
//!   on a locked record included;
//! - **hold** (`lock_hold_ns`): from the completion of the CAS that took the lock to the
//!   release: how long others find it locked;
//! - **wait** (`lock_wait_ns`): from the first attempt to the completion of the CAS that
//!   took it: the CAS's round trip when the first try wins (every lock outside the
//!   wait mode), plus the failed tries in the wait mode.
//!
//! A lock taken and never released by this transaction (its node crashed) records
//! nothing. The release is the post of the unlocking op (in the background on FORD's
//! commit and on aborts), so the durations exclude the last half round trip.
//!
//! **Wait mode** (`lock_wait_us`, every lock-based one-version protocol's knob): 0 (the
//! default) aborts on a failed lock, as end-to-end runs must (issue 27 item 3); a value
//! above 0 waits for the record to be unlocked (§6.2.1's words): after a refused CAS the
//! coordinator polls the lock word with 8-byte READs, one round trip each, and posts the
//! CAS again once a READ finds it clear (test-and-test-and-set: waiters that kept
//! re-posting CAS would queue at the NIC's atomic unit ahead of the holder's unlock and
//! lengthen the very hold they measure). It gives up with `LockConflict` once that many
//! µs have passed since the record's first attempt. The bound turns the deadlocks of
//! multi-record transactions (each waiting on a lock the other holds) into aborts; the
//! paper's one-record transactions never deadlock.
//!
//! **Sampling.** Clock reads and histogram adds are not free next to a `mem` round trip
//! (a fifth of FORD's CPU on SmallBank when every lock was timed), so the times are taken
//! in one transaction of every [`SAMPLE_EVERY`] of each coordinator ([`timed`]), and in
//! every transaction in wait mode (its bound needs the clock anyway). The figures' means
//! and percentiles are those of the sample; their `count` is the sample's.
//!
//! Cost: in a timed transaction, two clock reads per lock round and one at release, three
//! histogram adds per locked record; none in the others.

use dmtx_runtime::{CoordCtx, KnobSpec, MetricKind, MetricSpec, Obj};

use super::OneVersionObj;

/// One transaction in this many of each coordinator is timed (outside the wait mode).
pub const SAMPLE_EVERY: u64 = 16;

/// Whether the transaction `txn_seq` of its coordinator times its locks: one in
/// [`SAMPLE_EVERY`], or every one in wait mode (`wait_us` > 0).
#[inline]
pub fn timed(txn_seq: u64, wait_us: u64) -> bool {
    wait_us > 0 || txn_seq.is_multiple_of(SAMPLE_EVERY)
}

/// The wait-mode knob: µs a failed lock is retried before the transaction aborts.
pub const LOCK_WAIT_US: KnobSpec = KnobSpec {
    name: "lock_wait_us",
    default: "0",
    help: "retry a failed lock for up to this many µs instead of aborting at once (FORD §6.2.1's lock-duration mode; 0: abort)",
};

/// Metric: first lock attempt → release, per locked record (the paper's lock duration).
pub const DURATION: MetricSpec = MetricSpec::new(
    "lock_duration_ns",
    MetricKind::Duration,
    "per locked record, first lock attempt to release, waits included (FORD §6.2.1)",
);
/// Metric: lock taken → release, per locked record.
pub const HOLD: MetricSpec = MetricSpec::new(
    "lock_hold_ns",
    MetricKind::Duration,
    "per locked record, lock taken to release",
);
/// Metric: first attempt → lock taken, per locked record.
pub const WAIT: MetricSpec = MetricSpec::new(
    "lock_wait_ns",
    MetricKind::Duration,
    "per locked record, first lock attempt to the completion of the CAS that took it (one round trip unless `lock_wait_us` > 0 let it retry)",
);

/// Where a protocol's `METRICS` table has [`DURATION`], [`HOLD`] and [`WAIT`].
#[derive(Copy, Clone, Debug)]
pub struct LockMetrics {
    /// Index of [`DURATION`].
    pub duration: usize,
    /// Index of [`HOLD`].
    pub hold: usize,
    /// Index of [`WAIT`].
    pub wait: usize,
}

/// One record's lock times on the coordinator's clock (0: not yet).
#[derive(Copy, Clone, Debug, Default)]
pub struct LockTimes {
    asked_ns: u64,
    taken_ns: u64,
    polling: bool,
}

impl LockTimes {
    /// A lock CAS is being posted at `now`; the first one starts the duration.
    #[inline]
    pub fn asking(&mut self, now: u64) {
        if self.asked_ns == 0 {
            self.asked_ns = now.max(1);
        }
    }

    /// The CAS posted after [`LockTimes::asking`] took the lock; its completion is `now`.
    #[inline]
    pub fn taken(&mut self, now: u64) {
        self.taken_ns = now.max(1);
    }

    /// A CAS was refused at `now`: whether the wait mode (`wait_us`) keeps trying; if
    /// so, the lock word is polled from now on ([`LockTimes::polling`]).
    #[inline]
    pub fn refused(&mut self, now: u64, wait_us: u64) -> bool {
        self.polling = self.may_wait(now, wait_us);
        self.polling
    }

    /// Whether the next try is a READ of the lock word (8 bytes) rather than a CAS.
    #[inline]
    pub fn polling(&self) -> bool {
        self.polling
    }

    /// A poll READ found `word` at `now`: whether to keep waiting (the next try is the
    /// CAS when the word was clear).
    #[inline]
    pub fn polled(&mut self, word: u64, now: u64, wait_us: u64) -> bool {
        if word == 0 {
            self.polling = false;
        }
        self.may_wait(now, wait_us)
    }

    fn may_wait(&self, now: u64, wait_us: u64) -> bool {
        wait_us > 0 && now.saturating_sub(self.asked_ns) < wait_us * 1000
    }
}

/// Record the lock times of every object still holding its primary's lock, released now
/// by the caller (call it before the release forgets the locks), and reset them. Reads
/// the clock only when a lock was timed.
pub fn note_release<S: OneVersionObj>(ctx: &mut CoordCtx, objs: &mut [Obj<S>], m: LockMetrics) {
    if !objs.iter_mut().any(|o| o.proto.holds().times.taken_ns != 0) {
        return;
    }
    let now = ctx.clock.now_ns();
    for o in objs {
        let h = o.proto.holds();
        if !h.locked || h.times.taken_ns == 0 {
            h.times = LockTimes::default();
            continue;
        }
        let t = std::mem::take(&mut h.times);
        ctx.metric_ns(m.duration, now.saturating_sub(t.asked_ns));
        ctx.metric_ns(m.hold, now.saturating_sub(t.taken_ns));
        ctx.metric_ns(m.wait, t.taken_ns.saturating_sub(t.asked_ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_attempt_starts_the_wait_and_the_bound_ends_it() {
        let mut t = LockTimes::default();
        t.asking(1_000);
        t.asking(5_000);
        assert_eq!(t.asked_ns, 1_000, "a retry keeps the first attempt");
        assert!(!t.refused(2_000, 0), "no wait mode: abort at once");
        assert!(!t.polling());
        assert!(t.refused(2_000, 2), "1 µs into a 2 µs bound");
        assert!(t.polling(), "a refused lock is polled");
        assert!(t.polled(7, 2_500, 2) && t.polling(), "still locked: poll again");
        assert!(t.polled(0, 2_600, 2) && !t.polling(), "clear: the next try is the CAS");
        assert!(!t.polled(7, 3_000, 2), "the bound has passed");
        t.taken(6_000);
        assert_eq!(t.taken_ns, 6_000);
    }
}
