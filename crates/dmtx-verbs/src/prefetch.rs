//! Software prefetch: a hint that starts a cache miss early, so that it overlaps work
//! done meanwhile. It has no effect on what a program computes.

/// Prefetch the `n` cache lines from the one holding `x` on.
#[inline(always)]
pub fn prefetch_lines<T>(x: *const T, n: usize) {
    #[cfg(target_arch = "x86_64")]
    for k in 0..n {
        // SAFETY: `_mm_prefetch` is a hint with no architectural effect (it never faults,
        // whatever the address); SSE is part of the x86_64 baseline.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>((x as *const i8).wrapping_add(64 * k));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, n);
}
