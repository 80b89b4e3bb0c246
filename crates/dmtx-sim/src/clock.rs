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

use std::sync::atomic::{AtomicU64, Ordering};
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
        })
    }

    /// A perfect clock (no offset, no drift).
    pub fn exact(time: VirtualTime) -> Self {
        Self {
            time,
            offset_ns: 0,
            drift_ppm: 0,
        }
    }

    /// What this clock shows at virtual time `t`.
    #[inline]
    pub fn at(&self, t: u64) -> u64 {
        let t = t as i128;
        let skew = (t * self.drift_ppm as i128).div_euclid(1_000_000);
        let v = t + skew + self.offset_ns as i128;
        v.clamp(0, u64::MAX as i128) as u64
    }
}

impl dmtx_runtime::Clock for NodeClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.at(self.time.now())
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
}
