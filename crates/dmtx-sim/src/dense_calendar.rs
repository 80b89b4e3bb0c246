//! A [`Calendar`] of one bit per nanosecond, for the resources
//! whose jobs are short and many: link directions and PCIe directions.
//!
//! Those get a reservation per batch and per op (a responder's PCIe), most of them a few
//! to a few tens of nanoseconds long, and over half of them land before the latest one:
//! units serve batches in parallel, so one batch's ops reach PCIe between another's. An
//! interval list finds the gap by scanning back from its end and moves the intervals
//! after it to insert; with one bit per nanosecond both are a few word operations, with
//! no data-dependent loop in the common case. On a bare stream of 4-op posts an interval
//! list's searches and inserts would be a fifth of the simulator's instructions.
//!
//! The bits live in a ring of words that covers `[now, the last reservation's end)`. No
//! reservation starts before the virtual time at which it is made, so the words behind
//! `now` can never matter again: they are left unread until a reservation needs the
//! ring's room, then cleared, and the ring doubles only when that is not enough. Memory
//! is one bit per nanosecond booked ahead: 2 KiB for 16 µs, what a fabric at its
//! uncontended latency books; a reply reserved a millisecond ahead (behind the `cx3`
//! atomic engine's queue) takes 128 KiB. The processing units and the atomic engine,
//! whose jobs can be booked far ahead on every connection at once, keep interval lists.
//!
//! A ring is at most [`WORDS_MAX`] words (8 MiB, 67 ms booked ahead). A resource booked
//! further ahead than that (a queue of tens of milliseconds: a profile with a link of a
//! few Mb/s, a transfer of gigabytes) turns into an interval list for good, so memory
//! stays bounded by the reservations, as the list's is.
//!
//! Behind a deep queue (hundreds of coordinators on one responder) a plain search would
//! cross a run of full words, one load and test each: on the LOTUS-sized 4-op stream of
//! `examples/speed.rs` 4.8 words per search, most of them between the request's time
//! and the first gap. So the calendar remembers the last run of set bits it found or
//! extended, and a search from within it starts at its end: 0.02 words crossed per
//! search there, with the same reservations.
//!
//! The contract is the interval list's, exactly (a differential test below): the earliest
//! `s >= t` such that `[s, max(s + len, floor))` is free; a job of no length takes the
//! first free instant.

use crate::calendar::Calendar;

/// Busy nanoseconds of one serial resource, one bit each, from `now` on.
#[derive(Clone, Debug)]
pub struct DenseCalendar {
    /// Ring of words: absolute word `w` (nanoseconds `64 w .. 64 w + 64`) lives at
    /// `words[w & (len - 1)]`, for `w` from `base` to `base + len`. A power of two long.
    words: Vec<u64>,
    /// The oldest absolute word the ring holds; the words before it were cleared.
    base: u64,
    /// The end of the last reservation: every bit from here on is clear.
    end: u64,
    /// A run `[lo, hi)` of set bits (those of it from `base` on: older words may have
    /// been cleared, but no search starts there). A search from within it starts at its
    /// end: behind a deep queue most searches start in the run of full words before the
    /// first gap, and skipped them a word at a time.
    run: (u64, u64),
    /// The longest the ring may grow ([`WORDS_MAX`] but in tests).
    words_max: usize,
    /// Once a reservation ended beyond what `words_max` words reach: every reservation,
    /// as an interval list (the ring is then empty).
    sparse: Option<Box<Calendar>>,
}

/// Ring words to start with: 16 µs ahead.
const WORDS_MIN: usize = 256;

/// Ring words at most: 2^20 words, 8 MiB, 67 ms ahead.
pub const WORDS_MAX: usize = 1 << 20;

impl Default for DenseCalendar {
    fn default() -> Self {
        Self::with_limit(WORDS_MAX)
    }
}

impl DenseCalendar {
    /// An empty calendar whose ring grows to at most `words_max` words.
    fn with_limit(words_max: usize) -> Self {
        Self {
            words: vec![0; WORDS_MIN.min(words_max)],
            base: 0,
            end: 0,
            run: (0, 0),
            words_max,
            sparse: None,
        }
    }

    /// Reserve the earliest interval `[s, e)` with `s >= t` that is free, where
    /// `e = max(s + len, floor)`, as [`Calendar::reserve`](crate::calendar::Calendar::reserve)
    /// does. `now` is virtual time: `t >= now`, and `now` never goes back. Returns
    /// `(s, e)`; an empty interval is not recorded.
    #[inline(always)]
    pub fn reserve(&mut self, now: u64, t: u64, len: u64, floor: u64) -> (u64, u64) {
        debug_assert!(t >= now, "a reservation at {t} made at {now}");
        // Once it is a list, `end` is `u64::MAX` and the ring empty: it goes through the
        // two out-of-line calls, and the common path needs no test for it.
        let s = match t >= self.end {
            true => t,
            false => self.find_gap(now, t, len, floor),
        };
        let e = (s + len).max(floor);
        if e > s {
            if (e - 1) / 64 >= self.base + self.words.len() as u64 {
                return self.reserve_beyond(now, s, len, floor);
            }
            self.mark(s, e);
            self.end = self.end.max(e);
            if s == self.run.1 {
                self.run.1 = e;
            }
        }
        (s, e)
    }

    /// [`DenseCalendar::reserve`] of a job found free at `s` that ends beyond the ring:
    /// make room, or turn into an interval list when the ring would grow too long (or
    /// is one already).
    #[cold]
    #[inline(never)]
    fn reserve_beyond(&mut self, now: u64, s: u64, len: u64, floor: u64) -> (u64, u64) {
        let e = (s + len).max(floor);
        if self.sparse.is_none() {
            if self.make_room(now, e) {
                self.mark(s, e);
                self.end = self.end.max(e);
                return (s, e);
            }
            self.sparse = Some(Box::new(self.to_list(now)));
            self.words = Vec::new();
            self.end = u64::MAX;
        }
        let list = self.sparse.as_mut().expect("a list by now");
        let got = list.reserve(now, s, len, floor);
        debug_assert_eq!(got, (s, e), "it was free");
        got
    }

    /// The end of the last reservation: the resource is free from then on.
    #[inline]
    pub fn free_from(&self) -> u64 {
        match &self.sparse {
            Some(list) => list.free_from(),
            None => self.end,
        }
    }

    /// Let the ring hold `[now, e)`: clear the words wholly before `now`'s (no
    /// reservation starts before `now`, so they can never matter again: until the ring
    /// needs their room they are left as they are, unread), then grow it if that is not
    /// enough. False when the ring would grow beyond its limit.
    fn make_room(&mut self, now: u64, e: u64) -> bool {
        let w = now / 64;
        if w > self.base {
            // Only words before the last reservation's end can be set: at most the whole
            // ring, from `base`'s slot on, wrapping once.
            let dirty = self.end.div_ceil(64).min(w).saturating_sub(self.base) as usize;
            let from = (self.base & self.mask()) as usize;
            let (wrapped, head) = self.words.split_at_mut(from);
            let in_head = dirty.min(head.len());
            head[..in_head].fill(0);
            wrapped[..(dirty - in_head).min(from)].fill(0);
            self.base = w;
        }
        let last = (e - 1) / 64;
        if last >= self.base + self.words.len() as u64 {
            if last - self.base >= self.words_max as u64 {
                return false;
            }
            self.grow(last);
        }
        true
    }

    /// The reservations from `now` on, as an interval list.
    fn to_list(&self, now: u64) -> Calendar {
        let mut list = Calendar::default();
        let mut s = now;
        // Runs of set bits: from a set bit to the next clear one.
        while let Some(b) = self.next_set(s, self.end) {
            let e = self.next_clear(b);
            list.reserve(now, b, e - b, 0);
            s = e;
        }
        list
    }

    #[inline]
    fn mask(&self) -> u64 {
        self.words.len() as u64 - 1
    }

    /// The earliest fitting start for a request before the last reservation's end (at
    /// virtual time `now`).
    #[inline(never)]
    fn find_gap(&mut self, now: u64, t: u64, len: u64, floor: u64) -> u64 {
        if let Some(list) = &mut self.sparse {
            return list.earliest(now, t, len, floor);
        }
        // The first clear bit from `t` on: after the run, if `t` is in it.
        let (lo, hi) = self.run;
        let from = match lo <= t && t < hi {
            true => hi,
            false => t,
        };
        let mut s = self.next_clear(from);
        self.run = (if from == hi { lo } else { t }, s);
        loop {
            let e = (s + len).max(floor).min(self.end);
            match self.next_set(s, e) {
                None => return s,
                Some(busy) => s = self.next_clear(busy),
            }
        }
    }

    /// The first clear bit at or after `s`.
    #[inline]
    fn next_clear(&self, s: u64) -> u64 {
        if s >= self.end {
            return s;
        }
        let mask = self.mask();
        let mut w = s / 64;
        // The bits below `s` count as set.
        let mut bits = self.words[(w & mask) as usize] | ((1u64 << (s % 64)) - 1);
        while bits == u64::MAX {
            w += 1;
            if w * 64 >= self.end {
                return w * 64;
            }
            bits = self.words[(w & mask) as usize];
        }
        w * 64 + u64::from((!bits).trailing_zeros())
    }

    /// The first set bit in `[s, e)`, if any.
    #[inline]
    fn next_set(&self, s: u64, e: u64) -> Option<u64> {
        let mask = self.mask();
        let mut w = s / 64;
        let mut bits = self.words[(w & mask) as usize] & !((1u64 << (s % 64)) - 1);
        loop {
            if bits != 0 {
                let at = w * 64 + u64::from(bits.trailing_zeros());
                return (at < e).then_some(at);
            }
            w += 1;
            if w * 64 >= e {
                return None;
            }
            bits = self.words[(w & mask) as usize];
        }
    }

    /// Set the bits of `[s, e)` (free, non-empty, in the ring).
    #[inline(always)]
    fn mark(&mut self, s: u64, e: u64) {
        let last = (e - 1) / 64;
        let mask = self.mask();
        let first = s / 64;
        let lo = !0u64 << (s % 64);
        let hi = !0u64 >> (63 - (e - 1) % 64);
        if first == last {
            self.words[(first & mask) as usize] |= lo & hi;
            return;
        }
        self.words[(first & mask) as usize] |= lo;
        for w in first + 1..last {
            self.words[(w & mask) as usize] = u64::MAX;
        }
        self.words[(last & mask) as usize] |= hi;
    }

    /// Double the ring until it holds absolute word `last`.
    fn grow(&mut self, last: u64) {
        let len = (last - self.base + 1).next_power_of_two() as usize;
        let mut words = vec![0; len];
        let (old, new) = (self.mask(), len as u64 - 1);
        for a in self.base..self.base + self.words.len() as u64 {
            words[(a & new) as usize] = self.words[(a & old) as usize];
        }
        self.words = words;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Goal: the dense calendar gives every reservation the interval list gives, over
    /// random requests in and out of time order, long and empty jobs, cut-through floors,
    /// long idle stretches (the ring's words are reused) and reservations far ahead (it
    /// grows).
    #[test]
    fn matches_the_interval_list() {
        for seed in 0..20 {
            let mut rng = SmallRng::seed_from_u64(seed);
            // Every other seed with a ring limit the requests exceed (they book up to
            // 2 ms ahead): the calendar turns into a list midway.
            let mut dense = match seed % 2 {
                0 => DenseCalendar::default(),
                _ => DenseCalendar::with_limit(1 << (8 + seed % 5)),
            };
            let mut list = Calendar::default();
            let mut now = 0;
            for i in 0..5_000 {
                now += match rng.random_range(0..100) {
                    0 => rng.random_range(0..100_000),
                    _ => rng.random_range(0..40),
                };
                let ahead = match rng.random_range(0..50) {
                    0 => rng.random_range(0..2_000_000),
                    1..10 => rng.random_range(0..20_000),
                    _ => rng.random_range(0..500),
                };
                let t = now + ahead;
                let len = match rng.random_range(0..20) {
                    0 => 0,
                    1 => rng.random_range(100..3_000),
                    _ => rng.random_range(1..80),
                };
                let floor = match rng.random_bool(0.2) {
                    true => t + rng.random_range(0..200),
                    false => 0,
                };
                assert_eq!(
                    dense.reserve(now, t, len, floor),
                    list.reserve(now, t, len, floor),
                    "seed {seed} request {i}: now {now} t {t} len {len} floor {floor}"
                );
                assert_eq!(dense.free_from().max(now), list.free_from().max(now));
            }
            assert_eq!(dense.sparse.is_some(), seed % 2 == 1, "seed {seed}");
        }
    }

    /// Goal: behind a deep queue (a resource booked solid for hundreds of microseconds
    /// with a few holes, as a responder's PCIe under hundreds of coordinators), the
    /// search finds the gap the list finds, as the ring grows, wraps and clears old
    /// words.
    #[test]
    fn a_deep_queue_is_searched_like_the_list() {
        for seed in 0..4 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let (mut dense, mut list) = (DenseCalendar::default(), Calendar::default());
            let mut now = 0;
            for i in 0..10_000 {
                now += rng.random_range(0..30);
                // Most jobs queue at once behind the others; some land in the queue.
                let t = match rng.random_range(0..4) {
                    0 => now + rng.random_range(0..40_000),
                    _ => now,
                };
                let len = rng.random_range(1..120);
                assert_eq!(
                    dense.reserve(now, t, len, 0),
                    list.reserve(now, t, len, 0),
                    "seed {seed} request {i}: now {now} t {t} len {len}"
                );
            }
            assert!(dense.free_from() > now + 100_000, "the queue stayed deep");
        }
    }

    /// Goal: a search that starts where the ring ends (the last reservation ends on its
    /// last word, and the remembered run of full words with it) does not read the word
    /// that slot wraps to, the ring's first, whose bits belong to other nanoseconds. (A
    /// search that reads the word after its start without wrapping would; the
    /// differential tests do not reach that position.)
    #[test]
    fn a_search_from_the_rings_end_reads_no_wrapped_word() {
        let ring = WORDS_MIN as u64 * 64;
        let (mut dense, mut list) = (DenseCalendar::default(), Calendar::default());
        // The first word is partly booked, the rest of the ring solid; a probe of no
        // length from within the solid part makes the ring's end the run's end.
        for (t, len) in [(0, 10), (64, ring - 64), (100, 0), (150, 5), (200, 5)] {
            assert_eq!(
                dense.reserve(0, t, len, 0),
                list.reserve(0, t, len, 0),
                "t {t} len {len}"
            );
        }
    }

    /// Goal: a calendar booked beyond its ring's limit turns into an interval list that
    /// holds every reservation it had, the first one at `now` included: after the turn,
    /// each instant is busy or free as in a list that was one all along.
    #[test]
    fn turning_into_a_list_keeps_every_reservation() {
        let (mut dense, mut list) = (DenseCalendar::with_limit(256), Calendar::default());
        let now = 1_000;
        let mut both = |t: u64, len: u64| {
            let got = dense.reserve(now, t, len, 0);
            assert_eq!(got, list.reserve(now, t, len, 0), "t {t} len {len}");
            got
        };
        for i in 0..40 {
            both(now + i * 100, 1 + i * 7 % 70);
        }
        assert_eq!(both(now + 1_000_000, 10), (now + 1_000_000, now + 1_000_010));
        // A job of no length is not recorded: it probes the first free instant.
        for t in now..now + 4_200 {
            both(t, 0);
        }
        assert!(dense.sparse.is_some() && dense.words.is_empty());
    }

    /// Goal: the ring's words behind `now` are cleared when their room is needed, so a
    /// ring that never grew serves an endless stream; words a wrap reuses start clear.
    #[test]
    fn a_steady_stream_keeps_the_ring_small() {
        let mut c = DenseCalendar::default();
        let mut t = 0;
        for _ in 0..100_000 {
            t += 90;
            // Two jobs a step, the second booked before the first's end.
            assert_eq!(c.reserve(t, t + 40, 30, 0), (t + 40, t + 70));
            assert_eq!(c.reserve(t, t, 40, 0), (t, t + 40), "the gap before it");
        }
        assert_eq!(c.words.len(), WORDS_MIN);
    }
}
