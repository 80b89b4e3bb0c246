//! The event queue: events come out earliest first, and events due at the same virtual
//! time in the order they were scheduled, so the queue's behaviour depends on nothing
//! but the calls made to it.
//!
//! Virtual time never goes back: every event is scheduled at or after the time of the
//! last one taken (one scheduled before it is due then, after those already due). The
//! queue is built on that.
//!
//! # A timing wheel for the near future
//!
//! Almost every event of a fabric is due within microseconds: a batch's service end,
//! its reply, a CPU freeing. Those go to a wheel of [`SLOTS`] slots of [`SLOT_NS`] ns
//! at first (33 µs ahead of the current slot): scheduling appends to the slot's list and sets
//! its bit in a bitmap. When the current slot is used up, the bitmap finds the next
//! non-empty one, whose list is sorted by time (stably, so ties keep their scheduling
//! order) and becomes the current one; an event scheduled into the current slot is
//! inserted in order. An event is copied twice and sorted with a handful of others,
//! where a binary heap of a thousand events costs ten unpredictable comparisons per
//! take: on the LOTUS-sized stream of `examples/speed.rs` the binary heap took a
//! quarter of the simulator's time.
//!
//! # A radix heap for the rest
//!
//! Events beyond the wheel (timers, scripted faults, long waits) go to a radix heap
//! (Ahuja, Mehlhorn, Orlin and Tarjan, 1990). It keeps `last`, the time of the last
//! event taken from it, and 65 buckets: bucket 0 holds the events due at `last`, bucket
//! `b ≥ 1` those whose time first differs from `last` at bit `b − 1`. Scheduling
//! appends to a bucket; taking pops from the front of bucket 0, and when that is empty
//! the lowest non-empty bucket's earliest time becomes `last` and its events move down.
//! When the wheel turns, the events it now reaches move to it, in order.
//!
//! # Widening
//!
//! A congested fabric schedules most events far beyond 33 µs: on the LOTUS-sized preset
//! (cx3, its NIC-wide atomic rate saturated) an op waits 130 µs, and with 64 ns slots
//! nearly every event would go through the radix heap, whose moves would be 15% of the
//! run's instructions. So
//! every 65,536 events scheduled, the queue looks at how many went beyond the
//! wheel; when more than half did, it doubles the slots' width (up to 512 ns, 262 µs
//! ahead), moving the wheel's events to their new slots and then the radix heap's that
//! it now reaches, so the order below holds. It never narrows them again. Widening
//! from the start does not pay: 512 ns slots made the LOTUS-sized bare stream of
//! `examples/speed.rs`, whose events are a few µs ahead, 9% slower (more events per
//! slot to sort), and 4096 slots of 64 ns 13% slower (4096 slot lists to cycle
//! through the host's caches).
//!
//! # Ties
//!
//! Every list is kept in scheduling order and every move keeps order. Two events due at
//! one time that wait in the radix heap always share a bucket (an event's bucket
//! depends only on the bits where its time differs from `last`, and `last` only moves
//! towards it). Events reach a wheel slot from the radix heap when the slot comes
//! within reach, before any event can be scheduled into it directly (at a turn, and
//! when the wheel widens). So events due at one instant come out in the order they
//! were scheduled.

use std::collections::VecDeque;

/// log2 of a wheel slot's width in ns, at first.
const SLOT_SHIFT: u32 = 6;
/// A wheel slot's width at first (ns): [`EventQueue`] widens its slots when most
/// events land beyond the wheel (see "Widening" in the module doc).
pub const SLOT_NS: u64 = 1 << SLOT_SHIFT;
/// log2 of the widest slot: 512 ns, so that 512 slots reach 262 µs ahead.
const SLOT_SHIFT_MAX: u32 = 9;
/// Scheduled events per look at how many went beyond the wheel.
const WIDEN_WINDOW: u64 = 1 << 16;
/// Slots of the wheel: 512 × 64 ns = 32.8 µs ahead at first (an idle fabric's round
/// trip is 2–5 µs).
/// Narrower slots sort less when one becomes current, but a slot is then mostly empty
/// and every event scheduled touches a cold slot: 2048 × 16 ns measured 7–15% slower
/// on `examples/speed.rs` (its slot headers alone filled an L1 cache).
pub const SLOTS: usize = 512;
const WORDS: usize = SLOTS / 64;

/// Events ordered by time, ties by scheduling order (see the module doc).
#[derive(Debug)]
pub struct EventQueue<E> {
    /// The current slot's events, sorted latest first: the next event is the last one.
    cur: Vec<(u64, E)>,
    /// log2 of a slot's width in ns.
    shift: u32,
    /// The current slot (absolute: time >> shift). The wheel holds the slots
    /// `base + 1 .. base + SLOTS`, slot `s` at index `s % SLOTS`.
    base: u64,
    wheel: Vec<Vec<(u64, E)>>,
    /// Bit `i` set when `wheel[i]` holds an event.
    bits: [u64; WORDS],
    /// Events due at or after `(base + SLOTS) << shift`.
    far: RadixHeap<E>,
    /// The time of the last event taken.
    last: u64,
    len: usize,
    scheduled: u64,
    /// Events scheduled beyond the wheel since `scheduled` was last a multiple of
    /// [`WIDEN_WINDOW`].
    far_pushes: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            cur: Vec::new(),
            shift: SLOT_SHIFT,
            base: 0,
            wheel: (0..SLOTS).map(|_| Vec::new()).collect(),
            bits: [0; WORDS],
            far: RadixHeap::new(),
            last: 0,
            len: 0,
            scheduled: 0,
            far_pushes: 0,
        }
    }

    /// Schedule `event` at virtual time `at` (ns).
    #[inline(always)]
    pub fn push(&mut self, at: u64, event: E) {
        self.scheduled += 1;
        self.len += 1;
        if self.scheduled.is_multiple_of(WIDEN_WINDOW) {
            self.look_at_reach();
        }
        let at = at.max(self.last);
        let slot = at >> self.shift;
        // Inline only the common case, a slot of the wheel beyond the current one.
        if slot > self.base && slot < self.base + SLOTS as u64 {
            self.put(slot, at, event);
        } else {
            self.push_now_or_far(slot, at, event);
        }
    }

    /// [`EventQueue::push`] into the current slot or, beyond the wheel, the radix heap.
    #[inline(never)]
    fn push_now_or_far(&mut self, slot: u64, at: u64, event: E) {
        if slot <= self.base {
            self.insert_current(at, event);
        } else {
            self.far_pushes += 1;
            self.far.push(at, event);
        }
    }

    /// Insert into the current slot (`last` lies in it, so `at` does too): before the
    /// events due later, after (taken after) those due at the same time or earlier.
    fn insert_current(&mut self, at: u64, event: E) {
        let i = self.cur.partition_point(|&(t, _)| t > at);
        self.cur.insert(i, (at, event));
    }

    /// Widen the slots when most events of the last window were scheduled beyond the
    /// wheel (a congested fabric: replies wait far longer than a round trip).
    #[cold]
    fn look_at_reach(&mut self) {
        let far = std::mem::take(&mut self.far_pushes);
        if far * 2 > WIDEN_WINDOW && self.shift < SLOT_SHIFT_MAX {
            self.widen();
        }
    }

    /// Double the slots' width, moving every event of the wheel to its new slot and
    /// then the radix heap's events that the wheel now reaches, keeping each time's
    /// events in scheduling order.
    fn widen(&mut self) {
        // Earliest first: the current slot's, then the wheel's slot by slot (events of
        // one time share a slot, in scheduling order).
        let mut moving: Vec<(u64, E)> = Vec::with_capacity(self.len);
        moving.extend(self.cur.drain(..).rev());
        for s in self.base + 1..self.base + SLOTS as u64 {
            let i = s as usize % SLOTS;
            moving.append(&mut self.wheel[i]);
        }
        self.bits = [0; WORDS];
        self.shift += 1;
        self.base = self.last >> self.shift;
        for (at, event) in moving {
            self.place(at, event);
        }
        let reach = (self.base + SLOTS as u64) << self.shift;
        while let Some((at, event)) = self.far.pop_until(reach - 1) {
            self.place(at, event);
        }
    }

    /// Put an event due within the wheel's reach in its slot, the current one included.
    fn place(&mut self, at: u64, event: E) {
        match at >> self.shift {
            slot if slot <= self.base => self.insert_current(at, event),
            slot => self.put(slot, at, event),
        }
    }

    /// Append to wheel slot `slot` (within reach).
    #[inline]
    fn put(&mut self, slot: u64, at: u64, event: E) {
        let i = slot as usize % SLOTS;
        self.wheel[i].push((at, event));
        self.bits[i / 64] |= 1 << (i % 64);
    }

    /// The next non-empty wheel slot after the current one (absolute), if any.
    #[inline]
    fn next_slot(&self) -> Option<u64> {
        let from = (self.base as usize + 1) % SLOTS;
        let (w0, b0) = (from / 64, from % 64);
        // Circularly from `from`: the rest of its word, the other words, then the
        // beginning of its word.
        let mut found = None;
        for k in 0..=WORDS {
            let w = (w0 + k) % WORDS;
            let word = match k {
                0 => self.bits[w] & (!0u64 << b0),
                _ if k == WORDS => self.bits[w] & !(!0u64 << b0),
                _ => self.bits[w],
            };
            if word != 0 {
                found = Some(w * 64 + word.trailing_zeros() as usize);
                break;
            }
        }
        let i = found?;
        Some(self.base + 1 + ((i + SLOTS - from) % SLOTS) as u64)
    }

    /// Make `cur` hold the earliest events if one is due by `deadline`. False when none
    /// is; nothing moves then, since a later call may still schedule events before the
    /// earliest one.
    #[inline]
    fn refill(&mut self, deadline: u64) -> bool {
        if let Some(&(t, _)) = self.cur.last() {
            return t <= deadline;
        }
        let (next, earliest) = match self.next_slot() {
            Some(s) => {
                let i = s as usize % SLOTS;
                (s, self.wheel[i].iter().map(|&(t, _)| t).min().expect("a marked slot"))
            }
            None => match self.far.peek_time() {
                Some(t) => (t >> self.shift, t),
                None => return false,
            },
        };
        if earliest > deadline {
            return false;
        }
        // Turn the wheel: first the events of the radix heap it now reaches.
        self.base = next;
        let reach = (next + SLOTS as u64) << self.shift;
        while let Some((at, event)) = self.far.pop_until(reach - 1) {
            self.put(at >> self.shift, at, event);
        }
        let i = next as usize % SLOTS;
        std::mem::swap(&mut self.cur, &mut self.wheel[i]);
        self.bits[i / 64] &= !(1 << (i % 64));
        // Latest first, and ties in reverse scheduling order, so popping from the end
        // takes the earliest, first scheduled.
        self.cur.sort_by_key(|&(t, _)| t);
        self.cur.reverse();
        true
    }

    /// Take the earliest event and its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(u64, E)> {
        self.pop_until(u64::MAX)
    }

    /// Take the earliest event and its time if it is due no later than `deadline`.
    #[inline]
    pub fn pop_until(&mut self, deadline: u64) -> Option<(u64, E)> {
        if !self.refill(deadline) {
            return None;
        }
        self.len -= 1;
        let (at, event) = self.cur.pop().expect("refilled");
        self.last = at;
        Some((at, event))
    }

    /// The event `n` places after the earliest one, when the current slot holds it (no
    /// search: for prefetching what the next events will touch).
    #[inline]
    pub fn peek_current(&self, n: usize) -> Option<&E> {
        let i = self.cur.len().checked_sub(n + 1)?;
        Some(&self.cur[i].1)
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<u64> {
        if let Some(&(t, _)) = self.cur.last() {
            return Some(t);
        }
        match self.next_slot() {
            Some(s) => self.wheel[s as usize % SLOTS].iter().map(|&(t, _)| t).min(),
            None => self.far.peek_time(),
        }
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no event waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Events scheduled so far.
    pub fn scheduled(&self) -> u64 {
        self.scheduled
    }
}

/// Buckets of the radix heap: 0 for `last` itself, then one per bit of a `u64` time.
const BUCKETS: usize = 65;

/// The far events: ordered by time, ties by scheduling order (module doc).
#[derive(Debug)]
struct RadixHeap<E> {
    /// Events due at `last`, in scheduling order.
    due: VecDeque<(u64, E)>,
    /// `buckets[b]`: events whose time first differs from `last` at bit `b − 1`
    /// (`buckets[0]` is unused), each in scheduling order.
    buckets: Vec<Vec<(u64, E)>>,
    /// Bit `b` set when `buckets[b]` holds an event.
    nonempty: u128,
    /// The time of the last event taken.
    last: u64,
}

impl<E> RadixHeap<E> {
    fn new() -> Self {
        Self {
            due: VecDeque::new(),
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            nonempty: 0,
            last: 0,
        }
    }

    /// The bucket of an event due at `at` (`at >= last`).
    #[inline]
    fn bucket(&self, at: u64) -> usize {
        (u64::BITS - (at ^ self.last).leading_zeros()) as usize
    }

    fn push(&mut self, at: u64, event: E) {
        let at = at.max(self.last);
        match self.bucket(at) {
            0 => self.due.push_back((at, event)),
            b => {
                self.buckets[b].push((at, event));
                self.nonempty |= 1 << b;
            }
        }
    }

    /// Make `due` non-empty if an event is due by `deadline` (see
    /// [`EventQueue::refill`]).
    fn refill(&mut self, deadline: u64) -> bool {
        if !self.due.is_empty() {
            return self.last <= deadline;
        }
        let Some(earliest) = self.peek_time() else {
            return false;
        };
        if earliest > deadline {
            return false;
        }
        let b = self.nonempty.trailing_zeros() as usize;
        let mut moving = std::mem::take(&mut self.buckets[b]);
        self.nonempty &= !(1 << b);
        self.last = earliest;
        // Every event of bucket `b` lands in a bucket below it, in order.
        for (at, event) in moving.drain(..) {
            match self.bucket(at) {
                0 => self.due.push_back((at, event)),
                c => {
                    self.buckets[c].push((at, event));
                    self.nonempty |= 1 << c;
                }
            }
        }
        // Keep the allocation for the next time the bucket fills.
        self.buckets[b] = moving;
        true
    }

    fn pop_until(&mut self, deadline: u64) -> Option<(u64, E)> {
        if !self.refill(deadline) {
            return None;
        }
        self.due.pop_front()
    }

    fn peek_time(&self) -> Option<u64> {
        if !self.due.is_empty() {
            return Some(self.last);
        }
        let b = self.nonempty.trailing_zeros() as usize;
        self.buckets.get(b)?.iter().map(|&(at, _)| at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Goal: earliest first, ties in insertion order.
    #[test]
    fn time_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(20, 'a');
        q.push(10, 'b');
        q.push(20, 'c');
        q.push(10, 'd');
        q.push(5, 'e');
        assert_eq!(q.peek_time(), Some(5));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(5, 'e'), (10, 'b'), (10, 'd'), (20, 'a'), (20, 'c')]);
        assert!(q.is_empty());
        assert_eq!(q.scheduled(), 5);
    }

    /// Push (with probability `p_push`) or pop `steps` times, pushes `now` plus a random
    /// part of a span picked from `spans` (`u64::MAX`: anywhere up to the end of time),
    /// rounded down to a multiple of `grain` (ties), and check every pop against a
    /// sort by (time, scheduling order). Returns the queue.
    fn against_reference(seed: u64, steps: usize, p_push: f64, spans: &[u64], grain: u64) -> EventQueue<u64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut q = EventQueue::new();
        let mut reference = std::collections::BTreeSet::new(); // (time, seq)
        let mut now = 0u64;
        let mut seq = 0u64;
        for _ in 0..steps {
            if rng.random_bool(p_push) {
                let span = spans[rng.random_range(0..spans.len())].min(u64::MAX - now);
                let at = (now + rng.random_range(0..=span)) / grain * grain;
                q.push(at, seq);
                reference.insert((at.max(now), seq));
                seq += 1;
            } else {
                let want = reference.pop_first();
                assert_eq!(q.peek_time(), want.map(|w| w.0), "seed {seed}");
                let got = q.pop();
                assert_eq!(got, want, "seed {seed}");
                if let Some((at, _)) = got {
                    now = at;
                }
            }
            assert_eq!(q.len(), reference.len());
        }
        q
    }

    /// Goal: under a random interleaving of pushes (never before the last time taken)
    /// and pops, the queue gives exactly what a sort by (time, scheduling order) gives,
    /// across the whole `u64` range of times.
    #[test]
    fn matches_a_sorted_reference() {
        for seed in 0..20 {
            // Now, this slot, the wheel's reach, the radix heap's, anywhere.
            let q = against_reference(seed, 20_000, 0.55, &[0, 16, 1 << 12, 1 << 20, u64::MAX], 1);
            assert_eq!(
                q.shift, SLOT_SHIFT,
                "most events within reach: the slots keep their width"
            );
        }
    }

    /// Goal: when most events are scheduled beyond the wheel, its slots widen, and the
    /// order stays exact through every widening, ties included.
    #[test]
    fn widening_keeps_the_order() {
        for seed in 0..4 {
            // Mostly up to 524 µs ahead (beyond even the widest wheel's reach at
            // times), on a coarse grain so that times tie; some now.
            let spans = [1 << 19, 1 << 19, 1 << 19, 1 << 19, 1 << 19, 0];
            let q = against_reference(seed, 500_000, 0.5, &spans, 4096);
            assert_eq!(q.shift, SLOT_SHIFT_MAX, "seed {seed}: widened all the way");
        }
    }

    /// Goal: looking at the earliest event, or failing to take it before a deadline,
    /// does not stop an earlier event from being scheduled afterwards.
    #[test]
    fn peeking_moves_nothing() {
        let mut q = EventQueue::new();
        q.push(100, 'a');
        assert_eq!(q.peek_time(), Some(100));
        assert_eq!(q.pop_until(99), None);
        q.push(50, 'b');
        assert_eq!(q.peek_time(), Some(50));
        assert_eq!(q.pop(), Some((50, 'b')));
        assert_eq!(q.pop(), Some((100, 'a')));
    }

    /// Goal: an event scheduled in the past is due at once, after those already due.
    #[test]
    fn the_past_is_due_now() {
        let mut q = EventQueue::new();
        q.push(100, 'a');
        q.push(100, 'b');
        assert_eq!(q.pop(), Some((100, 'a')));
        q.push(50, 'c');
        assert_eq!(q.pop(), Some((100, 'b')));
        assert_eq!(q.pop(), Some((100, 'c')));
        assert_eq!(q.pop(), None);
    }
}
