//! The event queue: a min-heap of events keyed by `(time, sequence number)`.
//!
//! The sequence number is the order of insertion, so events due at the same virtual
//! time come out in the order they were scheduled: the queue's behaviour depends on
//! nothing but the calls made to it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Events ordered by time, ties by insertion order.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

#[derive(Debug)]
struct Entry<E> {
    at: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed, so `BinaryHeap` (a max-heap) pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
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
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// Schedule `event` at virtual time `at` (ns).
    pub fn push(&mut self, at: u64, event: E) {
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Entry { at, seq, event });
    }

    /// Take the earliest event and its time.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        self.heap.pop().map(|e| (e.at, e.event))
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.at)
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no event waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Events scheduled so far (the next sequence number).
    pub fn scheduled(&self) -> u64 {
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
