//! A registered memory region: word-addressed memory touched only through atomic
//! 8-byte loads, stores, CAS and FAA.
//!
//! READ and WRITE move words one at a time in increasing address order, so a READ that
//! races a WRITE sees any mixture of old and new words (DESIGN §2). The stall knob
//! ([`Region::arm_stall`]) stops a READ or WRITE before a chosen word until a test
//! releases it, so every tear shape can be produced on purpose.
//!
//! The region is shared by the `mem` transport and (later) the memory-node server, so
//! both tear in exactly the same way.

use std::alloc::{self, Layout};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Why the region refused an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionError {
    /// Outside `[0, region_bytes)`.
    OutOfRange {
        /// The region's size.
        region_bytes: u64,
    },
    /// An atomic on an address that is not 8-byte aligned.
    Misaligned,
}

/// Why a region could not be created: the OS would not give that much memory.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot allocate a memory-node region of {bytes} bytes ({}): {why}; \
     give it a smaller size (`dmtx memnode --size`, `dmtx bench --mn-bytes`)",
    binary_units(*bytes)
)]
pub struct RegionAllocError {
    /// The size asked for.
    pub bytes: u64,
    /// What the OS said.
    pub why: String,
}

/// `bytes` in the largest binary unit that keeps a whole part: `100.0 TiB`, `1.5 GiB`.
pub fn binary_units(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

/// Which side of a race a stall holds up.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StallKind {
    /// A READ (a verb READ, or the read half of a FLUSH).
    Read,
    /// A WRITE.
    Write,
}

/// Word-addressed memory of one memory node.
pub struct Region {
    words: Words,
    stalls: Arc<Stalls>,
    /// True when the words are a shared mapping of a file (`--backing`).
    file_backed: bool,
}

/// The words of a region: an anonymous mapping backed by transparent huge pages where
/// the OS offers them (random slot accesses would otherwise miss the TLB on nearly every
/// op), zeroed lazily by the OS so an untouched region costs no resident memory.
struct Words {
    ptr: std::ptr::NonNull<AtomicU64>,
    len: usize,
    /// `Some(bytes)` when the words live in an `mmap` of that many bytes.
    mapped: Option<usize>,
}

// SAFETY: `Words` owns its memory exclusively; every access goes through `AtomicU64`.
unsafe impl Send for Words {}
// SAFETY: as above; shared access is only through atomics.
unsafe impl Sync for Words {}

/// A huge page: mappings are whole multiples of it.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Regions at least this large are mapped with huge pages: from half a huge page, the
/// TLB misses saved outweigh at most doubling the memory a fully touched region holds
/// (the simulator's 1 MiB speed regions ran 5–11% faster on them, median of 15 runs).
const MAPPED_MIN_BYTES: usize = HUGE_PAGE_BYTES / 2;

impl Words {
    /// `n` zeroed words; `Err` is the OS's reason when it will not give them.
    fn zeroed(n: usize) -> Result<Self, String> {
        let Some(bytes) = n.checked_mul(8).filter(|&b| b <= isize::MAX as usize - HUGE_PAGE_BYTES) else {
            return Err("larger than the address space".into());
        };
        let mut why = None;
        if bytes >= MAPPED_MIN_BYTES {
            match Self::mapped(n) {
                Ok(w) => return Ok(w),
                Err(e) => why = Some(e),
            }
        }
        let layout = Layout::array::<AtomicU64>(n).map_err(|_| "larger than the address space".to_string())?;
        // SAFETY: `layout` has non-zero size (n >= 1); zeroed memory is a valid `AtomicU64`
        // array; `Drop` frees it with the same layout.
        let p = unsafe { alloc::alloc_zeroed(layout) as *mut AtomicU64 };
        let Some(ptr) = std::ptr::NonNull::new(p) else {
            return Err(why.unwrap_or_else(|| "out of memory".into()));
        };
        Ok(Self {
            ptr,
            len: n,
            mapped: None,
        })
    }

    /// A private anonymous mapping of `n` words, reserving no swap (`MAP_NORESERVE`):
    /// pages cost memory only once touched.
    #[cfg(target_os = "linux")]
    fn mapped(n: usize) -> Result<Self, String> {
        let bytes = (n * 8).next_multiple_of(HUGE_PAGE_BYTES);
        // SAFETY: a fresh private anonymous mapping; the kernel zero-fills it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().to_string());
        }
        // SAFETY: `p..p+bytes` is the mapping just created. The advice is a hint; failure
        // (THP disabled) leaves ordinary pages.
        unsafe {
            libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
        }
        Ok(Self {
            ptr: std::ptr::NonNull::new(p as *mut AtomicU64).expect("mmap returned null"),
            len: n,
            mapped: Some(bytes),
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn mapped(_n: usize) -> Result<Self, String> {
        Err("no anonymous mappings on this OS".into())
    }

    /// `n` words shared with `file` (sized to fit): what is written reaches the file.
    #[cfg(target_os = "linux")]
    fn file(file: &std::fs::File, n: usize) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        let bytes = n * 8;
        file.set_len(bytes as u64)?;
        // SAFETY: a shared mapping of `bytes` bytes of a file we just sized; the file's
        // bytes are valid `AtomicU64`s (any bit pattern is).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            ptr: std::ptr::NonNull::new(p as *mut AtomicU64).expect("mmap returned null"),
            len: n,
            mapped: Some(bytes),
        })
    }
}

impl std::ops::Deref for Words {
    type Target = [AtomicU64];
    #[inline]
    fn deref(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` points to `len` initialised (zeroed) words owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        match self.mapped {
            #[cfg(target_os = "linux")]
            // SAFETY: unmapping exactly the mapping `mapped` created.
            Some(bytes) => unsafe {
                libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, bytes);
            },
            #[cfg(not(target_os = "linux"))]
            Some(_) => unreachable!(),
            None => {
                let layout = Layout::array::<AtomicU64>(self.len).unwrap();
                // SAFETY: allocated in `zeroed` with this layout.
                unsafe { alloc::dealloc(self.ptr.as_ptr() as *mut u8, layout) }
            }
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("bytes", &self.bytes()).finish()
    }
}

impl Region {
    /// A zeroed region of `bytes` (rounded up to whole words). Pages are zeroed lazily by
    /// the OS, so an untouched region costs no resident memory.
    ///
    /// # Panics
    ///
    /// If the OS will not give that much memory; sizes that come from users go through
    /// [`Region::try_new`].
    pub fn new(bytes: u64) -> Self {
        Self::try_new(bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A zeroed region of `bytes`, as [`Region::new`], or an error naming the size when
    /// the OS will not map that much (address space, `vm.overcommit_memory`, `ulimit -v`).
    pub fn try_new(bytes: u64) -> Result<Self, RegionAllocError> {
        let fail = |why: String| RegionAllocError { bytes, why };
        let n = usize::try_from(bytes.div_ceil(8).max(1)).map_err(|_| fail("larger than the address space".into()))?;
        Ok(Self {
            words: Words::zeroed(n).map_err(fail)?,
            stalls: Arc::new(Stalls::default()),
            file_backed: false,
        })
    }

    /// A region backed by the file at `path` (created if missing, sized to `bytes`): a
    /// PM-like memory node. Its contents are what the file holds, so a node restarted
    /// on the same file keeps them; [`Region::persist`] makes writes durable.
    #[cfg(target_os = "linux")]
    pub fn map_file(path: &std::path::Path, bytes: u64) -> std::io::Result<Self> {
        let n = (bytes.div_ceil(8)).max(1) as usize;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(Self {
            words: Words::file(&file, n)?,
            stalls: Arc::new(Stalls::default()),
            file_backed: true,
        })
    }

    /// True when the region is a mapping of a file.
    pub fn is_file_backed(&self) -> bool {
        self.file_backed
    }

    /// Make everything written to `[offset, offset + len)` durable (msync). A no-op for
    /// a memory region, whose contents die with the process anyway.
    pub fn persist(&self, offset: u64, len: u64) -> std::io::Result<()> {
        if !self.file_backed || len == 0 {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            const PAGE: u64 = 4096;
            let end = offset.saturating_add(len).min(self.bytes());
            let start = (offset.min(end) / PAGE) * PAGE;
            let base = self.words.as_ptr() as *mut u8;
            // SAFETY: `[start, end)` lies inside the mapping and `start` is page-aligned
            // (the mapping itself is page-aligned).
            let rc = unsafe {
                libc::msync(
                    base.add(start as usize) as *mut libc::c_void,
                    (end - start) as usize,
                    libc::MS_SYNC,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Size in bytes.
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    #[inline]
    fn check(&self, offset: u64, len: u64) -> Result<(), RegionError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes() => Ok(()),
            _ => Err(RegionError::OutOfRange {
                region_bytes: self.bytes(),
            }),
        }
    }

    #[inline]
    fn word(&self, offset: u64) -> Result<&AtomicU64, RegionError> {
        if !offset.is_multiple_of(8) {
            return Err(RegionError::Misaligned);
        }
        self.check(offset, 8)?;
        Ok(&self.words[(offset / 8) as usize])
    }

    /// READ `dst.len()` bytes at `offset`, word by word in increasing address order.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), RegionError> {
        self.check(offset, dst.len() as u64)?;
        let stalls = self.stalls.armed.load(Ordering::Relaxed) != 0;
        if !stalls && offset.is_multiple_of(8) && dst.len().is_multiple_of(8) {
            let words = &self.words[(offset / 8) as usize..][..dst.len() / 8];
            for (w, d) in words.iter().zip(dst.chunks_exact_mut(8)) {
                d.copy_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
            }
            return Ok(());
        }
        let mut pos = 0usize;
        let mut addr = offset;
        while pos < dst.len() {
            let w = (addr / 8) as usize;
            let skip = (addr % 8) as usize;
            let take = (8 - skip).min(dst.len() - pos);
            if stalls {
                self.stalls.pass(StallKind::Read, w as u64);
            }
            let word = self.words[w].load(Ordering::Acquire).to_le_bytes();
            dst[pos..pos + take].copy_from_slice(&word[skip..skip + take]);
            pos += take;
            addr += take as u64;
        }
        Ok(())
    }

    /// WRITE `src` at `offset`, word by word in increasing address order. A partial word
    /// at either end is merged atomically with the bytes around it.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<(), RegionError> {
        self.check(offset, src.len() as u64)?;
        let stalls = self.stalls.armed.load(Ordering::Relaxed) != 0;
        if !stalls && offset.is_multiple_of(8) && src.len().is_multiple_of(8) {
            let words = &self.words[(offset / 8) as usize..][..src.len() / 8];
            for (w, c) in words.iter().zip(src.chunks_exact(8)) {
                w.store(u64::from_le_bytes(c.try_into().unwrap()), Ordering::Release);
            }
            return Ok(());
        }
        let mut pos = 0usize;
        let mut addr = offset;
        while pos < src.len() {
            let w = (addr / 8) as usize;
            let skip = (addr % 8) as usize;
            let take = (8 - skip).min(src.len() - pos);
            if stalls {
                self.stalls.pass(StallKind::Write, w as u64);
            }
            if take == 8 {
                let v = u64::from_le_bytes(src[pos..pos + 8].try_into().unwrap());
                self.words[w].store(v, Ordering::Release);
            } else {
                let _ = self.words[w].fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                    let mut b = old.to_le_bytes();
                    b[skip..skip + take].copy_from_slice(&src[pos..pos + take]);
                    Some(u64::from_le_bytes(b))
                });
            }
            pos += take;
            addr += take as u64;
        }
        Ok(())
    }

    /// Hint that `len` bytes at `offset` are about to be touched, so a post's cache
    /// misses overlap as a NIC's parallel DMA reads would. Prefetches the first and the
    /// last cache line; out-of-range hints are ignored.
    #[inline]
    pub fn prefetch(&self, offset: u64, len: u64) {
        let first = (offset / 8) as usize;
        let last = (offset.saturating_add(len.max(1) - 1) / 8) as usize;
        if let (Some(a), Some(b)) = (self.words.get(first), self.words.get(last)) {
            crate::prefetch_lines(a, 1);
            if last / 8 != first / 8 {
                crate::prefetch_lines(b, 1);
            }
        }
    }

    /// Atomic compare-and-swap; returns the old word.
    #[inline]
    pub fn cas(&self, offset: u64, expect: u64, swap: u64) -> Result<u64, RegionError> {
        let w = self.word(offset)?;
        Ok(
            match w.compare_exchange(expect, swap, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    /// Atomic fetch-and-add (wrapping); returns the old word.
    #[inline]
    pub fn faa(&self, offset: u64, add: u64) -> Result<u64, RegionError> {
        Ok(self.word(offset)?.fetch_add(add, Ordering::AcqRel))
    }

    /// Load one aligned word.
    #[inline]
    pub fn load(&self, offset: u64) -> Result<u64, RegionError> {
        Ok(self.word(offset)?.load(Ordering::Acquire))
    }

    /// Test knob: stop the next `kind` access just before it touches the word at byte
    /// `offset` (rounded down to its word), until the returned gate is released or
    /// dropped. Several stalls may be armed at once; each fires once.
    pub fn arm_stall(&self, kind: StallKind, offset: u64) -> StallGate {
        let mut st = self.stalls.slots.lock().unwrap();
        st.next_id += 1;
        let id = st.next_id;
        st.slots.push(StallSlot {
            id,
            kind,
            word: offset / 8,
            state: SlotState::Armed,
        });
        self.stalls.armed.fetch_add(1, Ordering::SeqCst);
        StallGate {
            stalls: Arc::clone(&self.stalls),
            id,
        }
    }
}

#[derive(Default)]
struct Stalls {
    armed: AtomicUsize,
    slots: Mutex<StallState>,
    cv: Condvar,
}

#[derive(Default)]
struct StallState {
    next_id: u64,
    slots: Vec<StallSlot>,
}

struct StallSlot {
    id: u64,
    kind: StallKind,
    word: u64,
    state: SlotState,
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum SlotState {
    Armed,
    Stalled,
    Released,
}

/// How long a stalled op or a test waiting on one blocks before giving up; a test that
/// forgets to release must fail, not hang CI.
const STALL_WAIT_MAX: Duration = Duration::from_secs(20);

impl Stalls {
    fn pass(&self, kind: StallKind, word: u64) {
        let mut st = self.slots.lock().unwrap();
        let Some(i) = st
            .slots
            .iter()
            .position(|s| s.kind == kind && s.word == word && s.state == SlotState::Armed)
        else {
            return;
        };
        let id = st.slots[i].id;
        st.slots[i].state = SlotState::Stalled;
        self.cv.notify_all();
        let (mut st, timeout) = self
            .cv
            .wait_timeout_while(st, STALL_WAIT_MAX, |st| {
                st.slots.iter().any(|s| s.id == id && s.state == SlotState::Stalled)
            })
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "stalled {kind:?} at word {word} was never released"
        );
        st.slots.retain(|s| s.id != id);
        self.armed.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Holds a stalled READ or WRITE (see [`Region::arm_stall`]). Dropping it releases.
pub struct StallGate {
    stalls: Arc<Stalls>,
    id: u64,
}

impl StallGate {
    /// Block until the armed op has reached its word and stopped there.
    pub fn wait_stalled(&self) {
        let st = self.stalls.slots.lock().unwrap();
        let (_st, timeout) = self
            .stalls
            .cv
            .wait_timeout_while(st, STALL_WAIT_MAX, |st| {
                !st.slots
                    .iter()
                    .any(|s| s.id == self.id && s.state == SlotState::Stalled)
            })
            .unwrap();
        assert!(!timeout.timed_out(), "no op reached the armed stall");
    }

    /// True once the armed op has stopped at its word.
    pub fn is_stalled(&self) -> bool {
        let st = self.stalls.slots.lock().unwrap();
        st.slots
            .iter()
            .any(|s| s.id == self.id && s.state == SlotState::Stalled)
    }

    /// Let the stalled op go on (or disarm the stall if nothing reached it yet).
    pub fn release(self) {}
}

impl Drop for StallGate {
    fn drop(&mut self) {
        let mut st = self.stalls.slots.lock().unwrap();
        if let Some(i) = st.slots.iter().position(|s| s.id == self.id) {
            match st.slots[i].state {
                SlotState::Armed => {
                    st.slots.remove(i);
                    self.stalls.armed.fetch_sub(1, Ordering::SeqCst);
                }
                SlotState::Stalled => st.slots[i].state = SlotState::Released,
                SlotState::Released => {}
            }
        }
        self.stalls.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Goal: a size the OS cannot map is an error naming it, not an abort
    /// (`dmtx memnode --size 100TiB` died with "memory allocation failed").
    #[test]
    fn try_new_refuses_sizes_the_os_cannot_map() {
        for bytes in [u64::MAX, 1 << 62] {
            let e = Region::try_new(bytes).unwrap_err().to_string();
            assert!(e.contains(&format!("{bytes} bytes")), "{e}");
            assert!(e.contains("smaller size"), "{e}");
        }
        assert_eq!(binary_units(100 << 40), "100.0 TiB");
        assert_eq!(binary_units(3 << 29), "1.5 GiB");
        assert_eq!(Region::try_new(1 << 20).unwrap().bytes(), 1 << 20);
    }

    #[test]
    fn out_of_range_and_misaligned_are_errors() {
        let r = Region::new(64);
        assert_eq!(
            r.read(60, &mut [0; 8]),
            Err(RegionError::OutOfRange { region_bytes: 64 })
        );
        assert!(r.write(u64::MAX - 2, &[1]).is_err());
        assert_eq!(r.cas(4, 0, 1), Err(RegionError::Misaligned));
        assert_eq!(r.faa(64, 1), Err(RegionError::OutOfRange { region_bytes: 64 }));
        assert_eq!(r.cas(56, 0, 1), Ok(0));
    }

    #[test]
    fn a_file_backed_region_keeps_its_bytes() {
        let path = std::env::temp_dir().join(format!("dmtx-region-{}", std::process::id()));
        let r = Region::map_file(&path, 1 << 16).unwrap();
        assert!(r.is_file_backed());
        r.write(4096, b"persist me").unwrap();
        r.persist(4096, 10).unwrap();
        drop(r);
        let r = Region::map_file(&path, 1 << 16).unwrap();
        let mut got = [0u8; 10];
        r.read(4096, &mut got).unwrap();
        assert_eq!(&got, b"persist me");
        assert!(
            Region::new(64).persist(0, 64).is_ok(),
            "a memory region has nothing to persist"
        );
        std::fs::remove_file(&path).unwrap();
    }

    proptest! {
        /// Unaligned reads and writes behave like a byte array.
        #[test]
        fn matches_byte_array(ops in prop::collection::vec((0u64..120, prop::collection::vec(any::<u8>(), 0..24)), 1..40)) {
            let r = Region::new(128);
            let mut model = vec![0u8; 128];
            for (off, bytes) in ops {
                let end = off as usize + bytes.len();
                if end > 128 {
                    prop_assert!(r.write(off, &bytes).is_err());
                    continue;
                }
                r.write(off, &bytes).unwrap();
                model[off as usize..end].copy_from_slice(&bytes);
                let mut got = vec![0u8; 128];
                r.read(0, &mut got).unwrap();
                prop_assert_eq!(&got, &model);
            }
        }
    }
}
