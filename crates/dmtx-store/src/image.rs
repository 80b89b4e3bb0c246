//! A table image under construction: zero until written, and resident only where
//! written, with a record of which pages were.

/// Granularity of the written-page record: the OS page.
pub(crate) const PAGE_BYTES: usize = 4096;

/// Images at least this large are anonymous mappings made without reserving swap, so a
/// table reserved for a long run (tens of GB) costs only the pages the loader writes.
const MAPPED_MIN_BYTES: usize = 1 << 20;

/// Zeroed bytes plus a bitmap of the pages written since creation.
pub(crate) struct Image {
    buf: Buf,
    /// Bit `p` set: page `p` was written (it may still hold only zeros).
    dirty: Vec<u64>,
}

enum Buf {
    Heap(Vec<u8>),
    #[cfg(target_os = "linux")]
    Mapped {
        ptr: std::ptr::NonNull<u8>,
        len: usize,
    },
}

// SAFETY: `Buf::Mapped` owns its mapping exclusively, like a `Vec`.
unsafe impl Send for Buf {}
// SAFETY: as above; shared access is read-only through `&self`.
unsafe impl Sync for Buf {}

impl Buf {
    fn zeroed(len: usize) -> Self {
        #[cfg(target_os = "linux")]
        if len >= MAPPED_MIN_BYTES {
            // SAFETY: a fresh private anonymous mapping; the kernel zero-fills its pages on
            // first touch. NORESERVE: untouched room must not count against overcommit.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                // SAFETY: `p..p+len` is the mapping just created. A hint: huge pages cut the
                // TLB misses of the loader's random inserts; failure leaves small pages.
                unsafe {
                    libc::madvise(p, len, libc::MADV_HUGEPAGE);
                }
                if let Some(ptr) = std::ptr::NonNull::new(p as *mut u8) {
                    return Buf::Mapped { ptr, len };
                }
            }
        }
        Buf::Heap(vec![0u8; len])
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Buf::Heap(v) => v,
            #[cfg(target_os = "linux")]
            // SAFETY: `ptr..ptr+len` is our live mapping, zero-initialized by the kernel.
            Buf::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Buf::Heap(v) => v,
            #[cfg(target_os = "linux")]
            // SAFETY: as in `bytes`, and `&mut self` makes the access exclusive.
            Buf::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), *len) },
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Buf::Mapped { ptr, len } = self {
            // SAFETY: unmapping exactly the mapping `zeroed` created.
            unsafe {
                libc::munmap(ptr.as_ptr() as *mut libc::c_void, *len);
            }
        }
    }
}

impl Image {
    /// `len` zero bytes, no page written.
    pub(crate) fn zeroed(len: usize) -> Self {
        Self {
            buf: Buf::zeroed(len),
            dirty: vec![0; len.div_ceil(PAGE_BYTES).div_ceil(64)],
        }
    }

    /// Bytes in the image.
    pub(crate) fn len(&self) -> usize {
        self.bytes().len()
    }

    /// The whole image.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.buf.bytes()
    }

    /// `len` bytes at `at`, for reading.
    pub(crate) fn get(&self, at: usize, len: usize) -> &[u8] {
        &self.bytes()[at..at + len]
    }

    /// `len` bytes at `at`, for writing: their pages are recorded as written.
    pub(crate) fn get_mut(&mut self, at: usize, len: usize) -> &mut [u8] {
        if len > 0 {
            for p in at / PAGE_BYTES..=(at + len - 1) / PAGE_BYTES {
                self.dirty[p / 64] |= 1 << (p % 64);
            }
        }
        &mut self.buf.bytes_mut()[at..at + len]
    }

    /// Pages written.
    pub(crate) fn written_pages(&self) -> u64 {
        self.dirty.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// Maximal runs `[start, end)` of written bytes, each at most `max` bytes long, in
    /// increasing order. Everything outside them is zero.
    pub(crate) fn written_runs(&self, max: usize) -> Vec<(usize, usize)> {
        assert!(max >= PAGE_BYTES && max.is_multiple_of(PAGE_BYTES));
        let pages = self.len().div_ceil(PAGE_BYTES);
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut p = 0;
        while p < pages {
            let w = self.dirty[p / 64];
            if w == 0 && p.is_multiple_of(64) {
                p += 64;
                continue;
            }
            if w & (1 << (p % 64)) != 0 {
                let start = p * PAGE_BYTES;
                let end = ((p + 1) * PAGE_BYTES).min(self.len());
                match runs.last_mut() {
                    Some(last) if last.1 == start && end - last.0 <= max => last.1 = end,
                    _ => runs.push((start, end)),
                }
            }
            p += 1;
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_runs_cover_exactly_the_written_pages_and_respect_the_chunk_bound() {
        for len in [100usize, 5 * PAGE_BYTES + 7, 3 << 20] {
            let mut img = Image::zeroed(len);
            assert!(img.written_runs(PAGE_BYTES).is_empty());
            let writes = [(0usize, 1usize), (PAGE_BYTES - 1, 2), (len - 1, 1)];
            for &(at, n) in &writes {
                if at + n <= len {
                    img.get_mut(at, n).fill(0xAB);
                }
            }
            let runs = img.written_runs(2 * PAGE_BYTES);
            for w in runs.windows(2) {
                assert!(w[0].1 <= w[1].0, "runs overlap or are out of order: {runs:?}");
            }
            for &(s, e) in &runs {
                assert!(e - s <= 2 * PAGE_BYTES);
            }
            // Every non-zero byte lies in a run, and the runs hold nothing unwritten.
            for (i, &b) in img.bytes().iter().enumerate() {
                if b != 0 {
                    assert!(runs.iter().any(|&(s, e)| s <= i && i < e), "byte {i} outside the runs");
                }
            }
            let covered: usize = runs.iter().map(|(s, e)| e - s).sum();
            assert!(covered <= img.written_pages() as usize * PAGE_BYTES);
        }
    }
}
