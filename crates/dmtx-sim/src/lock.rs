//! The simulation state's lock.
//!
//! One OS thread runs a simulation, so the lock is never contended on the hot path; it
//! exists because [`dmtx_verbs::Fabric`] must be `Send + Sync`. A `std::sync::Mutex`
//! costs two locked instructions per acquisition (lock and unlock); this lock costs one
//! (the swap that takes it; releasing is a plain store), which matters at several
//! acquisitions per simulated event. When another thread does hold it (a test driving a
//! transport's `progress` from its own thread), waiters spin and yield.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A lock around `T`; see the module doc.
pub(crate) struct StateLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `Guard`, and at most one guard exists at a
// time (the `held` flag, taken with Acquire and released with Release, orders accesses).
unsafe impl<T: Send> Sync for StateLock<T> {}

impl<T> StateLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Take the lock (not re-entrant: taking it twice on one thread never returns).
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        while self.held.swap(true, Ordering::Acquire) {
            while self.held.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
        }
        Guard { lock: self }
    }
}

impl<T> std::fmt::Debug for StateLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The value may be held by its owner right now: show only whether it is.
        f.debug_struct("StateLock")
            .field("held", &self.held.load(Ordering::Relaxed))
            .finish()
    }
}

/// Access to the locked value; dropping it releases the lock (also while unwinding).
pub(crate) struct Guard<'a, T> {
    lock: &'a StateLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Goal: the lock excludes: threads incrementing under it lose no increment.
    #[test]
    fn threads_under_the_lock_lose_nothing() {
        let lock = Arc::new(StateLock::new(0u64));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let mut g = lock.lock();
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
    }
}
