//! Time for protocols (leases, timestamps, latency). Protocol code never reads the OS
//! clock directly, so the simulator can substitute virtual time.

use std::time::Instant;

/// A source of monotonic time in nanoseconds.
pub trait Clock: Send + Sync {
    /// Nanoseconds since an arbitrary, fixed origin.
    fn now_ns(&self) -> u64;
}

/// The host's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct RealClock {
    origin: Instant,
}

impl RealClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self { origin: Instant::now() }
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
}
