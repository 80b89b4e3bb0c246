//! Virtual time and the per-node clocks that read it.
//!
//! The simulation keeps one [`VirtualTime`]: nanoseconds since the start of the run,
//! advanced only by the [`SimExecutor`](crate::SimExecutor) when it takes the next
//! event from the queue. Nothing here reads the host's clock.
//!
//! Each simulated node reads that time through its own [`NodeClock`], which adds a
//! fixed offset and a rate error (drift, in parts per million):
//!
//! ```text
//! node_ns = max(0, t + floor(t * drift_ppm / 1_000_000) + offset_ns)
//! ```
//!
//! A drift above −1 000 000 ppm keeps every node clock monotonic (non-decreasing) in
//! virtual time; clamping at 0 keeps it so for a negative offset too.
//!
//! A clock made by [`Sim::node_clock`](crate::Sim::node_clock) also follows the fault
//! script's clock faults for its node (OOCC §VII-B: a clock that jumps, or drifts
//! beyond the bound the protocol assumes). A jump adds to the offset at once (a
//! backwards jump makes the clock go back: that is the fault); a drift change at
//! virtual time `t0` adds `floor((t - t0) * extra_ppm / 1_000_000)` from then on:
//!
//! ```text
//! node_ns = max(0, t + floor(t * drift_ppm / 1e6) + offset_ns + jumps_ns + floor((t - t0) * extra_ppm / 1e6))
//! ```
//!
//! As a [`dmtx_runtime::Clock`], a node clock reports `|drift_ppm|` as its drift bound
//! (the configured drift is what the deployment promised; a scripted change beyond it
//! is the fault), and [`NodeClock::reaches_at`] gives the first virtual instant it reads
//! a deadline, so a `dmtx_runtime::sleep_until` on it is one event at exactly that
//! instant.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::SimError;

/// The simulation's current time in nanoseconds, shared by every clock of the run.
///
/// It is an `Arc<AtomicU64>` only because [`dmtx_runtime::Clock`] must be
/// `Send + Sync`; the simulation runs on one OS thread, so `Relaxed` suffices.
#[derive(Clone, Debug, Default)]
pub struct VirtualTime(Arc<AtomicU64>);

impl VirtualTime {
    /// Time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nanoseconds since the start of the run.
    #[inline]
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Move time to `t`. Time never goes back.
    #[inline]
    pub(crate) fn advance_to(&self, t: u64) {
        debug_assert!(t >= self.now(), "virtual time went back: {} -> {t}", self.now());
        self.0.store(t, Ordering::Relaxed);
    }
}

/// A node's view of virtual time: offset and drift applied (see the module doc).
#[derive(Clone, Debug)]
pub struct NodeClock {
    time: VirtualTime,
    offset_ns: i64,
    drift_ppm: i64,
    /// The fault script's jumps and drift changes for this node, if it is registered.
    adjust: Option<Arc<ClockAdjust>>,
}

/// Clock faults applied to one node's clocks (shared by every clone).
///
/// Atomics only because clocks must be `Send + Sync`; the simulation thread is the
/// only writer and reader, so `Relaxed` suffices.
#[derive(Debug, Default)]
pub(crate) struct ClockAdjust {
    /// Sum of the jumps, plus the drift accrued before `since_ns`.
    offset_ns: AtomicI64,
    /// Extra drift since `since_ns`.
    drift_ppm: AtomicI64,
    since_ns: AtomicU64,
}

impl ClockAdjust {
    /// The correction at virtual time `t`.
    #[inline]
    fn at(&self, t: u64) -> i128 {
        let since = self.since_ns.load(Ordering::Relaxed);
        let ppm = self.drift_ppm.load(Ordering::Relaxed) as i128;
        // No 128-bit division (a library call) without drift, the common case.
        let accrued = match ppm {
            0 => 0,
            _ => (t.saturating_sub(since) as i128 * ppm).div_euclid(1_000_000),
        };
        self.offset_ns.load(Ordering::Relaxed) as i128 + accrued
    }

    /// The clock jumps by `by_ns` (negative: back).
    pub(crate) fn jump(&self, by_ns: i64) {
        self.offset_ns.fetch_add(by_ns, Ordering::Relaxed);
    }

    /// From virtual time `now` on, the clock runs `ppm` further off (replacing the
    /// previous extra drift; what it accrued so far stays).
    pub(crate) fn set_drift(&self, now: u64, ppm: i64) {
        let accrued = self.at(now) - self.offset_ns.load(Ordering::Relaxed) as i128;
        self.offset_ns.fetch_add(accrued as i64, Ordering::Relaxed);
        self.since_ns.store(now, Ordering::Relaxed);
        self.drift_ppm.store(ppm, Ordering::Relaxed);
    }

    /// The extra drift now in force.
    pub(crate) fn drift_ppm(&self) -> i64 {
        self.drift_ppm.load(Ordering::Relaxed)
    }
}

/// Drift limit: a clock that ran at or below zero speed would go backwards or stop.
pub const DRIFT_PPM_MIN: i64 = -999_999;
/// Drift limit, symmetric to [`DRIFT_PPM_MIN`].
pub const DRIFT_PPM_MAX: i64 = 999_999;

impl NodeClock {
    /// A clock reading `time` with `offset_ns` added and running `drift_ppm` parts per
    /// million fast (negative: slow). Fails when the drift is outside
    /// [`DRIFT_PPM_MIN`]..=[`DRIFT_PPM_MAX`].
    pub fn new(time: VirtualTime, offset_ns: i64, drift_ppm: i64) -> Result<Self, SimError> {
        if !(DRIFT_PPM_MIN..=DRIFT_PPM_MAX).contains(&drift_ppm) {
            return Err(SimError::Drift { drift_ppm });
        }
        Ok(Self {
            time,
            offset_ns,
            drift_ppm,
            adjust: None,
        })
    }

    /// This clock, following the clock faults in `adjust`.
    pub(crate) fn with_adjust(mut self, adjust: Arc<ClockAdjust>) -> Self {
        self.adjust = Some(adjust);
        self
    }

    /// The rate error now in force, in ppm (configured drift plus scripted drift).
    pub fn drift_ppm(&self) -> i64 {
        self.drift_ppm + self.adjust.as_ref().map_or(0, |a| a.drift_ppm())
    }

    /// Virtual nanoseconds that pass while this clock advances `local_ns` at its current
    /// rate (rounded up; a clock at or below zero speed never gets there: `u64::MAX`).
    pub fn virtual_ns_for(&self, local_ns: u64) -> u64 {
        let rate = 1_000_000i128 + self.drift_ppm() as i128;
        if rate <= 0 {
            return u64::MAX;
        }
        let v = (local_ns as i128 * 1_000_000 + rate - 1) / rate;
        v.min(u64::MAX as i128) as u64
    }

    /// A perfect clock (no offset, no drift).
    pub fn exact(time: VirtualTime) -> Self {
        Self {
            time,
            offset_ns: 0,
            drift_ppm: 0,
            adjust: None,
        }
    }

    /// What this clock shows at virtual time `t`.
    #[inline]
    pub fn at(&self, t: u64) -> u64 {
        let t = t as i128;
        // No 128-bit division (a library call, on every clock read) without drift.
        let skew = match self.drift_ppm {
            0 => 0,
            ppm => (t * ppm as i128).div_euclid(1_000_000),
        };
        let mut v = t + skew + self.offset_ns as i128;
        if let Some(a) = &self.adjust {
            v += a.at(t as u64);
        }
        v.clamp(0, u64::MAX as i128) as u64
    }

    /// The first virtual instant `>= now_v` at which this clock reads at least
    /// `deadline_ns`, at the rates now in force (a scripted jump or drift change later
    /// moves it; a sleep reads the clock again when woken). `None`: never (the clock
    /// stopped, or the instant lies beyond `u64`).
    pub fn reaches_at(&self, now_v: u64, deadline_ns: u64) -> Option<u64> {
        if self.at(now_v) >= deadline_ns {
            return Some(now_v);
        }
        // The estimate from the rate, before the floors and the clamp at 0 of `at`.
        let raw_now = now_v as i128
            + match self.drift_ppm {
                0 => 0,
                ppm => (now_v as i128 * ppm as i128).div_euclid(1_000_000),
            }
            + self.offset_ns as i128
            + self.adjust.as_ref().map_or(0, |a| a.at(now_v));
        let left = (deadline_ns as i128 - raw_now).clamp(1, u64::MAX as i128) as u64;
        let estimate = now_v.checked_add(self.virtual_ns_for(left))?;
        if self.at(estimate) >= deadline_ns && self.at(estimate - 1) < deadline_ns {
            return Some(estimate);
        }
        // The floors put it a few ns off: find the crossing by bisection, between `lo`
        // (short of the deadline) and `hi` (at or past it).
        let (mut lo, mut hi) = (now_v, estimate);
        let mut steps = 0;
        while self.at(hi) < deadline_ns {
            lo = hi;
            hi = hi.checked_add((hi - now_v).max(1))?;
            steps += 1;
            assert!(steps <= 64, "clock {self:?} never reaches {deadline_ns}");
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.at(mid) >= deadline_ns {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }
}

impl dmtx_runtime::Clock for NodeClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.at(self.time.now())
    }

    /// The configured drift's size: what the deployment promised. A scripted drift
    /// change ([`crate::FaultScript`]) goes beyond it; that is the fault.
    fn drift_bound_ppm(&self) -> u64 {
        self.drift_ppm.unsigned_abs()
    }

    /// Virtual ns until this clock reads `deadline_ns`: exact for the offset, drift and
    /// clock faults in force now.
    fn ns_until(&self, deadline_ns: u64) -> u64 {
        let now = self.time.now();
        self.reaches_at(now, deadline_ns).map_or(u64::MAX, |t| t - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmtx_runtime::Clock;

    /// Goal: offset and drift arithmetic is exact, clamps at 0 and stays monotonic.
    #[test]
    fn offset_and_drift() {
        let vt = VirtualTime::new();
        let exact = NodeClock::exact(vt.clone());
        let fast = NodeClock::new(vt.clone(), 5_000, 100).unwrap();
        let slow = NodeClock::new(vt.clone(), -2_000, -250).unwrap();
        assert_eq!((exact.now_ns(), fast.now_ns(), slow.now_ns()), (0, 5_000, 0));
        vt.advance_to(1_000_000_000); // 1 s
        assert_eq!(exact.now_ns(), 1_000_000_000);
        assert_eq!(fast.now_ns(), 1_000_000_000 + 100_000 + 5_000);
        assert_eq!(slow.now_ns(), 1_000_000_000 - 250_000 - 2_000);
        // Floor division: 1 ns at -250 ppm is -0.00025 ns, floored to -1.
        assert_eq!(slow.at(1), 0, "clamped at 0");
        assert_eq!(fast.at(9_999), 9_999 + 5_000, "0.9999 ns of drift floors to 0");
        assert_eq!(fast.at(10_000), 10_000 + 1 + 5_000);
        let mut last = 0;
        for t in (0..5_000_000u64).step_by(997) {
            let v = slow.at(t);
            assert!(v >= last, "monotonic at {t}");
            last = v;
        }
        assert!(matches!(
            NodeClock::new(vt.clone(), 0, -1_000_000),
            Err(SimError::Drift { .. })
        ));
        assert!(NodeClock::new(vt, 0, DRIFT_PPM_MAX).is_ok());
    }

    /// Goal: scripted jumps and drift changes add exactly to a clock's readings, keep
    /// what accrued before a change, and `virtual_ns_for` inverts the rate.
    #[test]
    fn jumps_and_drift_changes() {
        let vt = VirtualTime::new();
        let a = Arc::new(ClockAdjust::default());
        let c = NodeClock::new(vt.clone(), 1_000, 0)
            .unwrap()
            .with_adjust(Arc::clone(&a));
        vt.advance_to(10_000);
        assert_eq!(c.now_ns(), 11_000);
        a.jump(-5_000);
        assert_eq!(c.now_ns(), 6_000, "a backwards jump makes the clock go back");
        a.set_drift(10_000, 500_000); // +50 % from t = 10 µs
        vt.advance_to(20_000);
        assert_eq!(c.now_ns(), 20_000 + 1_000 - 5_000 + 5_000);
        a.set_drift(20_000, 0); // accrued 5 µs stays
        vt.advance_to(30_000);
        assert_eq!(c.now_ns(), 30_000 + 1_000 - 5_000 + 5_000);
        a.set_drift(30_000, -500_000);
        assert_eq!(c.drift_ppm(), -500_000);
        assert_eq!(c.virtual_ns_for(1_000), 2_000, "half speed: 1 µs of clock is 2 µs");
    }
}
