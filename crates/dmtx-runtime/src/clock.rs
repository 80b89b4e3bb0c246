//! Time for protocols (leases, timestamps, latency). Protocol code never reads the OS
//! clock directly, so the simulator can substitute virtual time.
//!
//! Besides the time, a clock states two things protocols need:
//!
//! - **Its drift bound** ([`Clock::drift_bound_ppm`]): how far its rate may be off, in
//!   parts per million. OOCC §VII-B widens each lease by `lease × bound` on both sides
//!   (read-validate at `lease − offset`, write-wait at `lease + offset`) and assumes
//!   1 000 ppm, ten times the worst rate drift observed; LOTUS §5 reclaims versions older
//!   than 500 ms "relative to the local clock (with bounded drift)". A [`RealClock`]
//!   reports [`DRIFT_BOUND_PPM_DEFAULT`] (OOCC's value) unless built with another
//!   ([`RealClock::with_drift_bound_ppm`]); the simulator's `NodeClock` reports its
//!   configured drift, so a scripted drift change beyond it is the fault OOCC guards
//!   against. The bound is a promise the deployment makes, not a measurement.
//! - **How long until it reads a deadline** ([`Clock::ns_until`]), in the time of the
//!   executor that runs the caller (host ns for a real clock, virtual ns for a simulated
//!   one). [`crate::sleep_until`] waits on it ([`crate::timer`]).

use std::time::Instant;

/// The drift bound a [`RealClock`] reports unless told otherwise: OOCC §VII-B's 1 000 ppm
/// (ten times the largest rate drift seen over 6.5 million server hours).
pub const DRIFT_BOUND_PPM_DEFAULT: u64 = 1_000;

/// A source of monotonic time in nanoseconds.
pub trait Clock: Send + Sync {
    /// Nanoseconds since an arbitrary, fixed origin.
    fn now_ns(&self) -> u64;

    /// The most this clock's rate may differ from true time, in parts per million (see
    /// the module doc). A lease of `d` ns read on it is widened by `d × bound / 10⁶`.
    fn drift_bound_ppm(&self) -> u64 {
        DRIFT_BOUND_PPM_DEFAULT
    }

    /// Nanoseconds of the executor's time (the host's for a real clock, virtual for a
    /// simulated one) until this clock reads at least `deadline_ns`, if its rate stays
    /// as it is now; 0 when it already does, `u64::MAX` when it never will.
    fn ns_until(&self, deadline_ns: u64) -> u64 {
        deadline_ns.saturating_sub(self.now_ns())
    }
}

/// The host's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct RealClock {
    origin: Instant,
    drift_bound_ppm: u64,
}

impl RealClock {
    /// A clock whose origin is now, promising [`DRIFT_BOUND_PPM_DEFAULT`].
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            drift_bound_ppm: DRIFT_BOUND_PPM_DEFAULT,
        }
    }

    /// This clock, promising a drift of at most `ppm` (what the deployment's oscillators
    /// and clock synchronization guarantee).
    pub fn with_drift_bound_ppm(mut self, ppm: u64) -> Self {
        assert!(
            ppm < 1_000_000,
            "a drift bound of {ppm} ppm lets the clock stop; give less than 1000000"
        );
        self.drift_bound_ppm = ppm;
        self
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn drift_bound_ppm(&self) -> u64 {
        self.drift_bound_ppm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a real clock reports OOCC's bound by default and the one it was given
    /// otherwise; `ns_until` is the remaining time, 0 once past.
    #[test]
    fn real_clock_drift_bound_and_ns_until() {
        let c = RealClock::new();
        assert_eq!(c.drift_bound_ppm(), 1_000);
        assert_eq!(c.with_drift_bound_ppm(50).drift_bound_ppm(), 50);
        let now = c.now_ns();
        assert_eq!(c.ns_until(now), 0);
        let left = c.ns_until(now + 1_000_000_000);
        assert!(left <= 1_000_000_000 && left > 900_000_000, "{left}");
    }

    /// Goal: a bound that would let the clock stop is refused.
    #[test]
    #[should_panic(expected = "lets the clock stop")]
    fn real_clock_refuses_a_bound_of_a_million_ppm() {
        let _ = RealClock::new().with_drift_bound_ppm(1_000_000);
    }
}
