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
//! (33 µs ahead of the current slot): scheduling appends to the slot's list and sets
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
//! # Ties
//!
//! Every list is kept in scheduling order and every move keeps order. Two events due at
//! one time that wait in the radix heap always share a bucket (an event's bucket
//! depends only on the bits where its time differs from `last`, and `last` only moves
//! towards it). Events reach a wheel slot from the radix heap when the slot comes
//! within reach, before any event can be scheduled into it directly. So events due at
//! one instant come out in the order they were scheduled.

use std::collections::VecDeque;

/// log2 of a wheel slot's width in ns.
const SLOT_SHIFT: u32 = 6;
/// A wheel slot's width (ns).
pub const SLOT_NS: u64 = 1 << SLOT_SHIFT;
/// Slots of the wheel: 512 × 64 ns = 32.8 µs ahead (a fabric round trip is 2–5 µs).
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
    /// The current slot (absolute: time >> SLOT_SHIFT). The wheel holds the slots
    /// `base + 1 .. base + SLOTS`, slot `s` at index `s % SLOTS`.
    base: u64,
    wheel: Vec<Vec<(u64, E)>>,
    /// Bit `i` set when `wheel[i]` holds an event.
    bits: [u64; WORDS],
    /// Events due at or after `(base + SLOTS) << SLOT_SHIFT`.
    far: RadixHeap<E>,
    /// The time of the last event taken.
    last: u64,
    len: usize,
    scheduled: u64,
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
            base: 0,
            wheel: (0..SLOTS).map(|_| Vec::new()).collect(),
            bits: [0; WORDS],
            far: RadixHeap::new(),
            last: 0,
            len: 0,
            scheduled: 0,
        }
    }

    /// Schedule `event` at virtual time `at` (ns).
    #[inline(always)]
    pub fn push(&mut self, at: u64, event: E) {
        self.scheduled += 1;
        self.len += 1;
        let at = at.max(self.last);
        let slot = at >> SLOT_SHIFT;
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
            // The current slot (`last` lies in it, so `at` does too): before the events
            // due later, after (taken after) those due at the same time or earlier.
            let i = self.cur.partition_point(|&(t, _)| t > at);
            self.cur.insert(i, (at, event));
        } else {
            self.far.push(at, event);
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
                Some(t) => (t >> SLOT_SHIFT, t),
                None => return false,
            },
        };
        if earliest > deadline {
            return false;
        }
        // Turn the wheel: first the events of the radix heap it now reaches.
        self.base = next;
        let reach = (next + SLOTS as u64) << SLOT_SHIFT;
        while let Some((at, event)) = self.far.pop_until(reach - 1) {
            self.put(at >> SLOT_SHIFT, at, event);
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

    /// Goal: under a random interleaving of pushes (never before the last time taken)
    /// and pops, the queue gives exactly what a sort by (time, scheduling order) gives,
    /// across the whole `u64` range of times.
    #[test]
    fn matches_a_sorted_reference() {
        for seed in 0..20 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut q = EventQueue::new();
            let mut reference: Vec<(u64, u64)> = Vec::new(); // (time, seq), kept sorted
            let mut now = 0u64;
            let mut seq = 0u64;
            for _ in 0..20_000 {
                if rng.random_bool(0.55) {
                    // Now, this slot, the wheel's reach, the radix heap's, anywhere.
                    let span = match rng.random_range(0..5) {
                        0 => 0,
                        1 => 16,
                        2 => 1 << 12,
                        3 => 1 << 20,
                        _ => u64::MAX - now,
                    };
                    let at = now + rng.random_range(0..=span);
                    q.push(at, seq);
                    let i = reference.partition_point(|&k| k <= (at, seq));
                    reference.insert(i, (at, seq));
                    seq += 1;
                } else {
                    let want = (!reference.is_empty()).then(|| reference.remove(0));
                    assert_eq!(q.peek_time(), want.map(|w| w.0), "seed {seed}");
                    let got = q.pop();
                    assert_eq!(got, want, "seed {seed}");
                    if let Some((at, _)) = got {
                        now = at;
                    }
                }
                assert_eq!(q.len(), reference.len());
            }
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
