//! The busy intervals of one serial resource (a link direction, a PCIe direction, a NIC's
//! atomic engine, and, as [`Servers`], a NIC's processing units), so that a job timed
//! later may take a gap before one timed earlier: backfill.
//!
//! The NIC model times a batch once, at submit, and reserves every resource on its path
//! then (`nic` module doc). So reservations come out of time order: a batch submitted
//! later may reach a link before one submitted earlier, and one whose service ends far
//! ahead (an atomic queued behind a saturated atomic engine or a hot word, a READ behind
//! such an atomic on its connection) reserves its reply far ahead. With one "free from"
//! time per resource every later job would wait for the latest reservation, though the
//! resource is idle until then: on the `cx3` LOTUS-sized preset every op's latency was
//! the atomic queue's depth, and on an idle fabric 64 coordinators posting 4 ops each
//! saw 3.6 times the uncontended latency. A [`Calendar`] keeps the reservations
//! themselves, and a job takes the first gap that fits it.
//!
//! Reservations never start before the virtual time at which they are made, and virtual
//! time never goes back, so intervals that ended by then are dropped (`now` in
//! [`Calendar::reserve`]). Touching intervals merge: a saturated link is one interval, an
//! idle one none. What stays is one interval per stretch of work between idle gaps, as
//! many as the jobs booked ahead on a lightly loaded resource.
//!
//! In time order a calendar is the "free from" rule (`max(t, free)`, then `free = end`),
//! and [`Servers`] the "earliest-free unit" rule, exactly (tests below).

/// Busy intervals `[start, end)` of one serial resource: disjoint, not touching, in
/// ascending order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Calendar {
    /// The intervals from `head` on; those before it ended (dropped lazily, so that
    /// dropping one is an increment, not a move of the rest).
    busy: Vec<(u64, u64)>,
    head: usize,
}

/// Ended intervals are compacted away once there are this many and they are half the
/// vector.
const COMPACT_MIN: usize = 32;

impl Calendar {
    /// Reserve the earliest interval `[s, e)` with `s >= t` that is free, where
    /// `e = max(s + len, floor)`: `len` of transfer that ends no earlier than `floor`
    /// (a cut-through transfer cannot end before the data it forwards arrived). Intervals
    /// that ended by `now` (no reservation starts before it) are dropped first. Returns
    /// `(s, e)`; an empty interval (`e == s`) is not recorded.
    #[inline]
    pub fn reserve(&mut self, now: u64, t: u64, len: u64, floor: u64) -> (u64, u64) {
        let (i, s) = self.find(now, t, len, floor);
        self.insert_at(i, s, len, floor)
    }

    /// The start [`Calendar::reserve`] would give, reserving nothing.
    pub fn earliest(&mut self, now: u64, t: u64, len: u64, floor: u64) -> u64 {
        self.find(now, t, len, floor).1
    }

    /// Where the reservation goes: before `busy[i]`, from `s`.
    #[inline]
    fn find(&mut self, now: u64, t: u64, len: u64, floor: u64) -> (usize, u64) {
        if self.busy.get(self.head).is_some_and(|&(_, end)| end <= now) {
            self.drop_ended(now);
        }
        // Most transfers come after every reservation: no search.
        if t >= self.free_from() {
            return (self.busy.len(), t);
        }
        self.find_gap(t, len, floor)
    }

    /// Drop the intervals that ended by `now` (the first one has).
    fn drop_ended(&mut self, now: u64) {
        self.head += 1;
        while self.busy.get(self.head).is_some_and(|&(_, end)| end <= now) {
            self.head += 1;
        }
        if self.head == self.busy.len() {
            self.busy.clear();
            self.head = 0;
        } else if self.head >= COMPACT_MIN && 2 * self.head >= self.busy.len() {
            self.busy.drain(..self.head);
            self.head = 0;
        }
    }

    #[inline(never)]
    fn find_gap(&self, t: u64, len: u64, floor: u64) -> (usize, u64) {
        // The first interval that ends after `t`, found from the back: transfers are
        // mostly reserved a little before the last reservation ends, so few intervals
        // end after `t`. The candidate start then moves past each interval it would
        // overlap.
        let mut i = self.busy.len();
        while i > self.head && self.busy[i - 1].1 > t {
            i -= 1;
        }
        let mut s = t;
        while let Some(&(b, e)) = self.busy.get(i) {
            let end = (s + len).max(floor);
            if end <= b && s < b {
                break;
            }
            s = s.max(e);
            i += 1;
        }
        (i, s)
    }

    /// Record `[s, max(s + len, floor))` before `busy[i]` (it fits there), merging it
    /// with the intervals it touches.
    #[inline]
    fn insert_at(&mut self, i: usize, s: u64, len: u64, floor: u64) -> (u64, u64) {
        let e = (s + len).max(floor);
        if e == s {
            return (s, e);
        }
        if i == self.busy.len() {
            // After every interval: extend the last one or add one.
            match i > self.head && self.busy[i - 1].1 == s {
                true => self.busy[i - 1].1 = e,
                false => self.busy.push((s, e)),
            }
            return (s, e);
        }
        self.insert_inside(i, s, e)
    }

    /// [`Calendar::insert_at`] before an interval.
    #[inline(never)]
    fn insert_inside(&mut self, i: usize, s: u64, e: u64) -> (u64, u64) {
        let joins_prev = i > self.head && self.busy[i - 1].1 == s;
        let joins_next = self.busy.get(i).is_some_and(|&(b, _)| b == e);
        match (joins_prev, joins_next) {
            (true, true) => {
                self.busy[i - 1].1 = self.busy[i].1;
                self.busy.remove(i);
            }
            (true, false) => self.busy[i - 1].1 = e,
            (false, true) => self.busy[i].0 = s,
            (false, false) => self.busy.insert(i, (s, e)),
        }
        (s, e)
    }

    /// The end of the last reservation (0 if none is left): the resource is free from
    /// then on.
    #[inline]
    pub fn free_from(&self) -> u64 {
        match self.busy.len() > self.head {
            true => self.busy[self.busy.len() - 1].1,
            false => 0,
        }
    }

    /// Reserved intervals still held.
    pub fn intervals(&self) -> usize {
        self.busy.len() - self.head
    }

    /// Reserve, for a job that holds two resources from the same instant (an atomic:
    /// its NIC's engine token and its word), the earliest `s >= t` at which `self`
    /// holds `len` and `other` holds `other_len`; `now` as for [`Calendar::reserve`].
    /// Each search starts where the other's ended and neither moves back, so it ends.
    pub fn reserve_with(&mut self, other: &mut Calendar, now: u64, t: u64, len: u64, other_len: u64) -> u64 {
        let mut s = t;
        loop {
            let (i, x) = self.find(now, s, len, 0);
            let (j, y) = other.find(now, x, other_len, 0);
            if y == x {
                self.insert_at(i, x, len, 0);
                other.insert_at(j, x, other_len, 0);
                return x;
            }
            s = y;
        }
    }
}

/// `k` interchangeable servers (a NIC's processing units), each serving one job at a
/// time: a job takes the server that can start it first, in a gap if one fits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Servers {
    busy: Vec<Calendar>,
    /// Per server: [`Calendar::free_from`] of its calendar, so that the common case (a
    /// server idle from `t` on) scans one array, not `k` calendars.
    free: Vec<u64>,
}

impl Servers {
    /// `k` idle servers (at least one).
    pub fn new(k: usize) -> Self {
        let k = k.max(1);
        Self {
            busy: vec![Calendar::default(); k],
            free: vec![0; k],
        }
    }

    /// Serve a job of `len` ns that may start at `t` (`now` as for
    /// [`Calendar::reserve`]) on the server that can start it first, and returns its
    /// start. Among servers idle from `t` on, the lowest-numbered takes it (in time
    /// order, any of them is as good: this is the "earliest-free unit" rule).
    #[inline]
    pub fn serve(&mut self, now: u64, t: u64, len: u64) -> u64 {
        if let Some(k) = self.free.iter().position(|&f| f <= t) {
            self.book(k, now, t, len);
            return t;
        }
        // Every server has work booked after `t`: the first gap that fits.
        self.serve_in_gap(now, t, len)
    }

    #[inline(never)]
    fn serve_in_gap(&mut self, now: u64, t: u64, len: u64) -> u64 {
        let (mut s, mut k) = (u64::MAX, 0);
        for (i, c) in self.busy.iter_mut().enumerate() {
            let e = c.earliest(now, t, len, 0);
            if e < s {
                (s, k) = (e, i);
            }
        }
        self.book(k, now, s, len);
        s
    }

    /// Reserve `[s, s + len)` on server `k` (it is free then).
    #[inline]
    fn book(&mut self, k: usize, now: u64, s: u64, len: u64) {
        let c = &mut self.busy[k];
        c.reserve(now, s, len, 0);
        self.free[k] = c.free_from();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Goal: in time order a calendar is the plain "free from" rule (each transfer starts
    /// at `max(t, free)`), and touching reservations merge into one interval.
    #[test]
    fn in_order_it_is_the_free_from_rule() {
        let mut c = Calendar::default();
        let mut free = 0;
        let mut rng = SmallRng::seed_from_u64(3);
        let mut t = 0;
        for _ in 0..10_000 {
            t += rng.random_range(0..50);
            let len = rng.random_range(1..60);
            let floor = t + rng.random_range(0..80);
            let s = t.max(free);
            free = (s + len).max(floor);
            assert_eq!(c.reserve(t, t, len, floor), (s, free));
        }
        assert!(c.intervals() <= 1, "{c:?}");
    }

    /// Goal: a transfer takes the first gap that fits it, before a reservation made
    /// earlier; one that does not fit goes after; a cut-through floor counts.
    #[test]
    fn backfills_the_first_gap_that_fits() {
        let mut c = Calendar::default();
        assert_eq!(c.reserve(0, 1_000, 10, 0), (1_000, 1_010));
        assert_eq!(c.reserve(0, 0, 10, 0), (0, 10), "before the far one");
        assert_eq!(c.reserve(0, 5, 10, 0), (10, 20), "after the first, touching it");
        assert_eq!(c.intervals(), 2);
        assert_eq!(c.reserve(0, 15, 990, 0), (1_010, 2_000), "too long for the gap");
        assert_eq!(c.reserve(0, 20, 10, 995), (20, 995), "held to its floor, still fits");
        assert_eq!(c.intervals(), 2, "merged with [0, 20)");
        assert_eq!(c.reserve(0, 995, 1, 1_001), (2_000, 2_001), "its floor overlaps");
        assert_eq!(c.free_from(), 2_001);
        // Nothing reserved starts before `now`: what ended by then goes.
        assert_eq!(c.reserve(1_500, 1_500, 0, 0), (2_001, 2_001));
        assert_eq!(c.intervals(), 1);
    }

    /// Goal: a job that holds two resources from one instant gets the earliest instant
    /// at which both are free for its two lengths, against two brute-force timelines,
    /// over random out-of-order requests.
    #[test]
    fn reserve_with_matches_two_brute_force_timelines() {
        let mut rng = SmallRng::seed_from_u64(13);
        let (mut a, mut b) = (Calendar::default(), Calendar::default());
        let (mut taken_a, mut taken_b) = (vec![false; 400_000], vec![false; 400_000]);
        let free = |taken: &[bool], s: u64, len: u64| (s..s + len).all(|x| !taken[x as usize]);
        let mut now = 0;
        for _ in 0..3_000 {
            now += rng.random_range(0..200);
            let t = now + rng.random_range(0..2_000);
            let (len_a, len_b) = (rng.random_range(1..30), rng.random_range(1..150));
            // Some jobs on one resource alone, so that the two differ.
            match rng.random_range(0..4) {
                0 => {
                    let (s, e) = a.reserve(now, t, len_a, 0);
                    taken_a[s as usize..e as usize].fill(true);
                }
                1 => {
                    let (s, e) = b.reserve(now, t, len_b, 0);
                    taken_b[s as usize..e as usize].fill(true);
                }
                _ => {
                    let s = a.reserve_with(&mut b, now, t, len_a, len_b);
                    let want = (t..)
                        .find(|&s| free(&taken_a, s, len_a) && free(&taken_b, s, len_b))
                        .unwrap();
                    assert_eq!(s, want, "t {t} lengths {len_a} {len_b}");
                    taken_a[s as usize..(s + len_a) as usize].fill(true);
                    taken_b[s as usize..(s + len_b) as usize].fill(true);
                }
            }
        }
    }

    /// Goal: in time order, servers are the "earliest-free unit" rule: a job starts at
    /// `max(t, min free)` and that server is busy until it ends.
    #[test]
    fn servers_in_order_take_the_earliest_free() {
        let mut rng = SmallRng::seed_from_u64(5);
        let mut servers = Servers::new(4);
        let mut free = [0u64; 4];
        let mut t = 0;
        for _ in 0..10_000 {
            t += rng.random_range(0..30);
            let len = rng.random_range(1..120);
            let k = (0..4).min_by_key(|&k| free[k]).unwrap();
            let s = t.max(free[k]);
            free[k] = s + len;
            assert_eq!(servers.serve(t, t, len), s);
        }
    }

    /// Goal: a job held back (its connection's previous batch ends far ahead) does not
    /// keep a server idle until then: a later job starts at once on that server.
    #[test]
    fn servers_backfill_before_a_far_job() {
        let mut servers = Servers::new(1);
        assert_eq!(servers.serve(0, 10_000, 100), 10_000);
        assert_eq!(servers.serve(0, 0, 100), 0, "served before the far job");
        assert_eq!(servers.serve(0, 9_950, 100), 10_100, "no gap fits");
        let mut two = Servers::new(2);
        two.serve(0, 5_000, 100);
        two.serve(0, 0, 5_000);
        assert_eq!(
            two.serve(0, 4_990, 20),
            5_000,
            "the other server at 5000 is the first fit"
        );
    }

    /// Goal: against a brute-force timeline, every reservation is the earliest free one
    /// and none overlaps another, over random out-of-order requests; intervals that ended
    /// before `now` are dropped.
    #[test]
    fn matches_a_brute_force_timeline() {
        let mut rng = SmallRng::seed_from_u64(11);
        let mut c = Calendar::default();
        // Busy nanoseconds of the timeline.
        let mut taken = vec![false; 100_000];
        let mut now = 0;
        for _ in 0..3_000 {
            now += rng.random_range(0..40);
            let t = now + rng.random_range(0..3_000);
            let len = rng.random_range(0..16);
            let floor = if rng.random_bool(0.2) {
                t + rng.random_range(0..60)
            } else {
                0
            };
            let (s, e) = c.reserve(now, t, len, floor);
            // The earliest s >= t whose [s, max(s + len, floor)) is free.
            let want = (t..)
                .find(|&s| {
                    let e = (s + len).max(floor);
                    (s..e).all(|x| !taken[x as usize]) && (e > s || !taken[s as usize])
                })
                .unwrap();
            assert_eq!(s, want, "t {t} len {len} floor {floor}");
            assert_eq!(e, (s + len).max(floor));
            for x in s..e {
                taken[x as usize] = true;
            }
            assert!(c.busy[c.head..].first().is_none_or(|&(_, e)| e > now), "pruned");
        }
    }
}
