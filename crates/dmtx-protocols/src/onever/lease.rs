//! Implicit leases (OOCC §III, §VII): the two durations every coordinator of a compute
//! node reads, packed into one 8-byte word so a lease manager can change both at once.
//!
//! A *read-validate* lease `rv` tells a reader how long after posting a READ the record
//! it returned is known unchanged; a *write-wait* lease `ww` tells a writer how long
//! after taking a lock it must wait before writing the record. Both are durations on the
//! reading coordinator's own clock, so only clock *rates* matter: a clock within
//! `drift_ppm` of true time reads a true duration `d` as at most `d × (1 + drift)`, so
//! `rv = lease − offset` and `ww = lease + offset` with `offset = lease × drift_ppm / 10⁶`
//! (OOCC §VII-B) keep `rv ≤ ww` in true time across any two such clocks.
//!
//! Invariants:
//! 1. A word in use on any compute node has `rv ≤ ww` of every word in use on every
//!    other (OOCC §VII Property 2); a lease manager keeps it while changing leases by
//!    going through the intermediate word `(min(old, new), max(old, new))`.
//! 2. Readers sample `rv` when they post each READ round and writers sample `ww` when
//!    they compute their deadline, never once per transaction: a long transaction that
//!    spans an adjustment would otherwise use a word no longer in use elsewhere.
//!
//! Cost: one relaxed atomic load per round; no verb.

use std::sync::atomic::{AtomicU64, Ordering};

/// The two leases of one word, in ns.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    /// Read-validate lease: a record READ at `post` is unchanged until `post + rv`.
    pub rv_ns: u32,
    /// Write-wait lease: a writer writes a record locked at `t` no earlier than `t + ww`.
    pub ww_ns: u32,
}

impl Lease {
    /// Both leases `lease_ns`, widened by `offset_ns` (read-validate shorter, write-wait
    /// longer; OOCC §VII-B).
    pub fn with_offset(lease_ns: u32, offset_ns: u32) -> Self {
        Self {
            rv_ns: lease_ns.saturating_sub(offset_ns),
            ww_ns: lease_ns.saturating_add(offset_ns),
        }
    }

    /// The intermediate word of an adjustment from `self` to `new` (OOCC Table II):
    /// read-validate the smaller, write-wait the larger.
    pub fn between(self, new: Lease) -> Self {
        Self {
            rv_ns: self.rv_ns.min(new.rv_ns),
            ww_ns: self.ww_ns.max(new.ww_ns),
        }
    }

    /// Packed: `rv` in the low half, `ww` in the high half.
    #[inline]
    pub fn pack(self) -> u64 {
        (self.ww_ns as u64) << 32 | self.rv_ns as u64
    }

    /// Unpacked from [`Lease::pack`].
    #[inline]
    pub fn unpack(w: u64) -> Self {
        Self {
            rv_ns: w as u32,
            ww_ns: (w >> 32) as u32,
        }
    }
}

/// The drift offset of `lease_ns` under a clock-rate bound of `drift_ppm`, rounded up.
pub fn drift_offset_ns(lease_ns: u32, drift_ppm: u64) -> u32 {
    ((lease_ns as u64 * drift_ppm).div_ceil(1_000_000)).min(u32::MAX as u64) as u32
}

/// One compute node's lease word, read by all its coordinators. The default is
/// `(0, 0)`: nothing is ever read in lease and writers never wait, which is safe
/// (invariant 1 holds trivially) and is what a coordinator built outside a compute node
/// gets.
#[derive(Debug, Default)]
pub struct LeaseWord(AtomicU64);

impl LeaseWord {
    /// A word holding `lease`.
    pub fn new(lease: Lease) -> Self {
        Self(AtomicU64::new(lease.pack()))
    }

    /// The leases now.
    #[inline]
    pub fn get(&self) -> Lease {
        Lease::unpack(self.0.load(Ordering::Acquire))
    }

    /// Replace both leases at once.
    pub fn set(&self, lease: Lease) {
        self.0.store(lease.pack(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_shortens_reads_and_lengthens_waits() {
        // OOCC §VII-B: 1000 ppm of 20 µs is 20 ns.
        assert_eq!(drift_offset_ns(20_000, 1_000), 20);
        assert_eq!(drift_offset_ns(10_000, 1_000), 10);
        assert_eq!(drift_offset_ns(1, 1), 1, "rounded up");
        let l = Lease::with_offset(10_000, 10);
        assert_eq!((l.rv_ns, l.ww_ns), (9_990, 10_010));
        assert_eq!(Lease::unpack(l.pack()), l);
    }

    #[test]
    fn the_intermediate_word_keeps_reads_below_waits_both_ways() {
        let old = Lease::with_offset(10_000, 10);
        let new = Lease::with_offset(4_000, 4);
        for (a, b) in [(old, new), (new, old)] {
            let mid = a.between(b);
            // Property 2 across every pair of words that can be in use at once.
            for x in [a, mid] {
                for y in [a, mid] {
                    assert!(x.rv_ns <= y.ww_ns);
                }
            }
            for x in [mid, b] {
                for y in [mid, b] {
                    assert!(x.rv_ns <= y.ww_ns);
                }
            }
        }
        let w = LeaseWord::default();
        assert_eq!(w.get(), Lease::default());
        w.set(old);
        assert_eq!(w.get(), old);
    }
}
