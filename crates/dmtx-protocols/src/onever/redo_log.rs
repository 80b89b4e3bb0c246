//! Redo logs on backups and their truncation without the memory node's CPU: what FaRM
//! and DrTM+H re-implemented on one-sided verbs (FORD §2.3 Fig. 2, §6.1) share.
//!
//! A commit writes, before touching any primary, one redo log per memory node holding a
//! backup of a written record: the new image of each such record, appended to this
//! coordinator's log area on that node ([`RedoLog::room`] tells whether it fits, or
//! fits only once truncation has emptied the area: the caller stalls), followed (in the same batch) by one selective
//! FLUSH per node ([`super::replicas::post_selective_flush`]). Backups are never read
//! and never updated in place by the commit.
//!
//! ```text
//! header (32 B)  coordinator (global id) | txn sequence | entry count | status
//! entry          table id (8 B) | table-relative slot offset (8 B) | new image (slot_bytes - 8)
//! ```
//!
//! **Truncation** ([`Truncation`]) installs the logged images into the backups' in-place
//! copies, then frees the log (status [`REDO_FREE`]). Two installs of one record from
//! different coordinators can land out of order, so each install is version-guarded by
//! the record's write sequence ([`super::record::seq_newer`], carried in the meta word):
//! round 1 posts, per backup copy, `CAS(vlock, 0 → me)` and a READ of its meta word
//! behind it (same node, same batch: the READ sees the copy under our lock); round 2
//! WRITEs the image only where the copy is older, and unlocks. A copy locked by another
//! truncator is retried in the next pair of rounds (counted). The logs are freed in the
//! last round, so an area is never reused while an install from it is pending. A
//! record queued by several commits is installed once, with the newest image.
//!
//! Invariants:
//! 1. A backup copy is written only by a truncator holding its `vlock`, and only with an
//!    image newer than the one it holds: after every truncation has finished, each
//!    backup holds the newest committed image of every record it logged.
//! 2. A log never exceeds its area; a transaction whose log would aborts with `LogFull`
//!    before anything is written.
//!
//! Cost: commit: one WRITE per backup node (`32 + Σ (16 + slot_bytes - 8)` bytes) plus its
//! FLUSH, one round trip. Truncation: two round trips per committed transaction (plus two
//! per retry), off the transaction's critical path: per backup copy one CAS + one 8-byte
//! READ, then one WRITE of the image (when newer) + one 8-byte WRITE; per node one 8-byte
//! status WRITE.

use std::collections::HashMap;

use dmtx_memnode::Control;
use dmtx_runtime::{CoordCtx, Result};
use dmtx_store::Catalog;
use dmtx_verbs::{AtomicId, MnId, Post, ReadId, RemotePtr, VerbError};

use super::record::{seq_newer, META, SEQ_MASK, VERSION, VLOCK};

/// Header bytes: coordinator, txn sequence, entry count, status.
pub const REDO_HEADER_BYTES: usize = 32;
/// Offset of the status word in the header.
pub const REDO_STATUS_OFFSET: u64 = 24;
/// Entry header bytes: table id, table-relative slot offset.
pub const REDO_ENTRY_HEADER_BYTES: usize = 16;
/// Status: the log holds committed images not yet installed.
pub const REDO_LOGGED: u64 = 1;
/// Status: installed; the area may be reused.
pub const REDO_FREE: u64 = 0;

/// Rounds of install attempts before truncation gives up on a copy locked by someone
/// else (a truncator that crashed holding it).
const INSTALL_ROUNDS_MAX: u32 = 64;

/// One record to log: its table, slot, and new image (bytes 8.. of the slot) at
/// `images[at..at + len]` of the caller's buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RedoEntry {
    /// Table id.
    pub table: u32,
    /// Table-relative slot offset.
    pub rel: u64,
    /// Start of the image in the image buffer.
    pub at: u32,
    /// Image length.
    pub len: u32,
}

/// Whether `mn` holds a backup (replica 1 or later) of `table`.
fn backup_on(catalog: &Catalog, table: u32, mn: MnId) -> bool {
    let info = catalog.get(table).expect("table checked at add");
    info.meta.replicas[1..].iter().any(|&(m, _)| m == mn)
}

/// One coordinator's redo-log areas, one per memory node. Each area is filled from its
/// start, one log per committed transaction, and emptied as a whole once truncation has
/// installed every log in it ([`RedoLog::post_free`], [`RedoLog::freed`]).
#[derive(Debug)]
pub struct RedoLog {
    base: Vec<u64>,
    bytes: u32,
    /// Bytes of each area holding logs not yet truncated.
    used: Vec<u32>,
    /// Status words of the logs not yet truncated.
    headers: Vec<RemotePtr>,
}

/// Whether a transaction's log fits.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Room {
    /// It fits in what is left of every area.
    Fits,
    /// It fits only once truncation has emptied the areas: stall and truncate first.
    AfterTruncation,
    /// It needs this many bytes on one node, more than a whole area.
    Never(usize),
}

impl RedoLog {
    /// Allocate an area of `bytes` on every memory node.
    pub fn alloc(control: &dyn Control, bytes: u32) -> Result<Self> {
        let mut base = Vec::with_capacity(control.mn_count());
        for mn in 0..control.mn_count() {
            base.push(control.alloc(MnId(mn as u16), bytes as u64, 64)?);
        }
        let used = vec![0; base.len()];
        Ok(Self {
            base,
            bytes,
            used,
            headers: Vec::new(),
        })
    }

    /// Bytes of each area.
    #[inline]
    pub fn bytes(&self) -> u32 {
        self.bytes
    }

    /// The start of the area on `mn` (also where a selective FLUSH is aimed).
    #[inline]
    pub fn area(&self, mn: MnId) -> RemotePtr {
        RemotePtr::new(mn, self.base[mn.index()])
    }

    /// Bytes the log of `entries` takes on `mn` (0 when `mn` holds no backup of them).
    fn log_len(mn: MnId, entries: &[RedoEntry], catalog: &Catalog) -> usize {
        let mut len = 0;
        for e in entries.iter().filter(|e| backup_on(catalog, e.table, mn)) {
            len += REDO_ENTRY_HEADER_BYTES + e.len as usize;
        }
        if len == 0 {
            0
        } else {
            (REDO_HEADER_BYTES + len).next_multiple_of(8)
        }
    }

    /// Whether the logs of `entries` on `mns` fit.
    pub fn room(&self, mns: &[MnId], entries: &[RedoEntry], catalog: &Catalog) -> Room {
        let mut room = Room::Fits;
        for &mn in mns {
            let len = Self::log_len(mn, entries, catalog);
            if len > self.bytes as usize {
                return Room::Never(len);
            }
            if self.used[mn.index()] as usize + len > self.bytes as usize {
                room = Room::AfterTruncation;
            }
        }
        room
    }

    /// Append to `post` the log WRITE for memory node `mn`, after the logs already in
    /// its area: one entry per record of `entries` with a backup there (nothing when
    /// there is none). `Err(needed)` with nothing appended when the log does not fit in
    /// what is left of the area (invariant 2; [`RedoLog::room`] tells beforehand).
    pub fn post_write(
        &mut self,
        post: &mut Post,
        mn: MnId,
        (coord, txn_seq): (u64, u64),
        entries: &[RedoEntry],
        images: &[u8],
        catalog: &Catalog,
    ) -> std::result::Result<(), usize> {
        let mine = || entries.iter().filter(|e| backup_on(catalog, e.table, mn));
        let count = mine().count();
        if count == 0 {
            return Ok(());
        }
        let len = Self::log_len(mn, entries, catalog);
        let used = self.used[mn.index()] as usize;
        if used + len > self.bytes as usize {
            return Err(len);
        }
        self.used[mn.index()] = (used + len) as u32;
        let at = self.area(mn).offset + used as u64;
        self.headers.push(RemotePtr::new(mn, at + REDO_STATUS_OFFSET));
        let header = [coord, txn_seq, count as u64, REDO_LOGGED];
        post.write_with(RemotePtr::new(mn, at), len, |buf| {
            for (i, w) in header.iter().enumerate() {
                buf[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            let mut at = REDO_HEADER_BYTES;
            for e in mine() {
                buf[at..at + 8].copy_from_slice(&(e.table as u64).to_le_bytes());
                buf[at + 8..at + 16].copy_from_slice(&e.rel.to_le_bytes());
                let img = &images[e.at as usize..(e.at + e.len) as usize];
                buf[at + 16..at + 16 + img.len()].copy_from_slice(img);
                at += REDO_ENTRY_HEADER_BYTES + img.len();
            }
            debug_assert!(at <= len);
            buf[at..].fill(0);
        });
        Ok(())
    }

    /// Append to `post` the WRITEs freeing every log not yet truncated.
    pub fn post_free(&self, post: &mut Post) {
        for &at in &self.headers {
            post.write(at, &REDO_FREE.to_le_bytes());
        }
    }

    /// The frees of [`RedoLog::post_free`] landed: the areas are empty again.
    pub fn freed(&mut self) {
        self.headers.clear();
        self.used.fill(0);
    }
}

/// What one truncation did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Truncated {
    /// Backup copies written (their image was older than the logged one).
    pub installed: u64,
    /// Backup copies left alone: they already held a newer image.
    pub skipped_older: u64,
    /// Install attempts repeated because another truncator held the copy's lock.
    pub retries: u64,
}

/// One install's `CAS(vlock)` and READ of the meta word.
type InstallIds = (AtomicId, ReadId);

/// The committed images of one coordinator still to install into backups (the logs
/// written by its last commit).
#[derive(Debug, Default)]
pub struct Truncation {
    entries: Vec<RedoEntry>,
    images: Vec<u8>,
    /// Committed transactions queued.
    txns: u32,
    /// Index into `entries` by (table, slot): a record queued twice keeps only its
    /// newer image (one coordinator's commits of one record are ordered), so one
    /// truncation never installs two images of one copy.
    by_slot: HashMap<(u32, u64), usize>,
    post: Post,
    /// Per pending install: entry, replica, its CAS and READ.
    todo: Vec<(usize, usize, Option<InstallIds>)>,
}

impl Truncation {
    /// Nothing waits to be installed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Committed transactions queued.
    pub fn txns(&self) -> u32 {
        self.txns
    }

    /// Queue the records of one committed transaction's `entries` (images in `images`).
    pub fn push(&mut self, entries: &[RedoEntry], images: &[u8]) {
        for e in entries {
            let at = self.images.len() as u32;
            self.images
                .extend_from_slice(&images[e.at as usize..(e.at + e.len) as usize]);
            let e = RedoEntry { at, ..*e };
            match self.by_slot.get(&(e.table, e.rel)) {
                Some(&i) => self.entries[i] = e,
                None => {
                    self.by_slot.insert((e.table, e.rel), self.entries.len());
                    self.entries.push(e);
                }
            }
        }
        self.txns += 1;
    }

    /// Install every queued image into the backups (version-guarded, module doc), then
    /// free the logs; `lock` is the coordinator's lock word. Failed posts are retried
    /// (bounded); what is still not installed then stays queued for the next call, and
    /// the error is returned.
    pub async fn run(
        &mut self,
        ctx: &mut CoordCtx,
        log: &mut RedoLog,
        lock: u64,
    ) -> std::result::Result<Truncated, VerbError> {
        let mut done = Truncated::default();
        let catalog = ctx.catalog.clone();
        self.todo.clear();
        for (i, e) in self.entries.iter().enumerate() {
            let info = catalog.get(e.table).expect("table checked at add");
            for r in 1..info.replica_count() {
                self.todo.push((i, r, None));
            }
        }
        let mut last_err = None;
        let mut settled = Vec::new();
        for round in 0..INSTALL_ROUNDS_MAX {
            if self.todo.is_empty() {
                break;
            }
            if round > 0 {
                done.retries += self.todo.len() as u64;
            }
            self.post.clear();
            for (i, r, ids) in &mut self.todo {
                let e = &self.entries[*i];
                let info = catalog.get(e.table).expect("table checked at add");
                let cas = self.post.cas(info.ptr(*r, e.rel + VLOCK as u64), 0, lock);
                let read = self.post.read(info.ptr(*r, e.rel + META as u64), 8);
                *ids = Some((cas, read));
            }
            if let Err(e) = ctx.post(&mut self.post).await {
                // A CAS whose response was lost may have taken the lock: the next
                // round finds our own word there and takes it as held.
                last_err = Some(e);
                continue;
            }
            let first = std::mem::take(&mut self.post);
            self.post.clear();
            settled.clear();
            let mut counts = (0, 0);
            for (k, &(i, r, ids)) in self.todo.iter().enumerate() {
                let (cas, read) = ids.expect("posted above");
                let old = first.old(cas);
                if old != 0 && old != lock {
                    continue;
                }
                let e = &self.entries[i];
                let info = catalog.get(e.table).expect("table checked at add");
                let have = (u64::from_le_bytes(first.bytes(read)[..8].try_into().unwrap()) >> 1) & SEQ_MASK;
                let img = &self.images[e.at as usize..(e.at + e.len) as usize];
                let m = META - VERSION;
                let logged = (u64::from_le_bytes(img[m..m + 8].try_into().unwrap()) >> 1) & SEQ_MASK;
                if seq_newer(logged, have) {
                    self.post.write(info.ptr(r, e.rel + VERSION as u64), img);
                    counts.0 += 1;
                } else {
                    counts.1 += 1;
                }
                self.post.write(info.ptr(r, e.rel + VLOCK as u64), &0u64.to_le_bytes());
                settled.push(k);
            }
            let last = settled.len() == self.todo.len();
            if last {
                log.post_free(&mut self.post);
            }
            if !self.post.is_empty() {
                if let Err(e) = ctx.post(&mut self.post).await {
                    // Held copies stay ours: the next round re-takes and re-installs them
                    // (idempotent under the lock, and guarded by the sequence).
                    last_err = Some(e);
                    continue;
                }
            }
            if last {
                log.freed();
            }
            done.installed += counts.0;
            done.skipped_older += counts.1;
            for &k in settled.iter().rev() {
                self.todo.swap_remove(k);
            }
        }
        if !self.todo.is_empty() {
            // Left for the next call (the next cleanup or the drain).
            return Err(last_err.unwrap_or(VerbError::Unreachable {
                mn: MnId(0),
                why: format!(
                    "{} backup copies stayed locked by another truncator for {INSTALL_ROUNDS_MAX} rounds",
                    self.todo.len()
                ),
            }));
        }
        if self.todo.is_empty() && self.post.is_empty() {
            // Nothing was queued: free the logs all the same.
            log.post_free(&mut self.post);
            if !self.post.is_empty() {
                ctx.post(&mut self.post).await?;
                log.freed();
            }
        }
        self.entries.clear();
        self.by_slot.clear();
        self.images.clear();
        self.txns = 0;
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use dmtx_runtime::Access;

    use super::super::testkit::{catalog, obj, ops, table};
    use super::*;

    fn word(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn a_redo_log_goes_to_backup_nodes_only_with_the_new_images() {
        // Table 0: primary on node 0, backup on node 1. Table 1: node 1 only.
        let cat = catalog([table(0, &[0, 1]), table(1, &[1])]);
        let _ = obj(0, 1, Access::ReadWrite, 0, 0);
        let images: Vec<u8> = (0..32).collect();
        let entries = [
            RedoEntry {
                table: 0,
                rel: 64,
                at: 0,
                len: 16,
            },
            RedoEntry {
                table: 1,
                rel: 128,
                at: 16,
                len: 16,
            },
        ];
        let mut log = RedoLog {
            base: vec![4096, 8192],
            bytes: 4096,
            used: vec![0, 0],
            headers: Vec::new(),
        };
        let mut post = Post::new();
        log.post_write(&mut post, MnId(0), (3, 44), &entries, &images, &cat)
            .unwrap();
        assert!(post.is_empty(), "node 0 holds no backup");
        log.post_write(&mut post, MnId(1), (3, 44), &entries, &images, &cat)
            .unwrap();
        let got = ops(&post);
        assert_eq!((got.len(), got[0].1, got[0].2), (1, 1, 8192));
        let b = &got[0].3;
        assert_eq!([0, 8, 16, 24].map(|at| word(b, at)), [3, 44, 1, REDO_LOGGED]);
        assert_eq!([32, 40].map(|at| word(b, at)), [0, 64]);
        assert_eq!(&b[48..], &images[..16]);

        // A second log goes after the first; a third no longer fits until the area is
        // freed, and one larger than the area never does.
        post.clear();
        let one = REDO_HEADER_BYTES + REDO_ENTRY_HEADER_BYTES + 16;
        assert_eq!(log.room(&[MnId(1)], &entries, &cat), Room::Fits);
        log.post_write(&mut post, MnId(1), (3, 45), &entries, &images, &cat)
            .unwrap();
        assert_eq!(ops(&post)[0].2, 8192 + one as u64);
        log.bytes = 3 * one as u32 - 8;
        assert_eq!(log.room(&[MnId(0), MnId(1)], &entries, &cat), Room::AfterTruncation);
        post.clear();
        assert_eq!(
            log.post_write(&mut post, MnId(1), (3, 46), &entries, &images, &cat),
            Err(one)
        );
        assert!(post.is_empty());
        log.post_free(&mut post);
        let free = REDO_FREE.to_le_bytes().to_vec();
        assert_eq!(
            ops(&post),
            [
                ("write", 1, 8192 + REDO_STATUS_OFFSET, free.clone()),
                ("write", 1, 8192 + one as u64 + REDO_STATUS_OFFSET, free)
            ]
        );
        log.freed();
        assert_eq!(log.room(&[MnId(1)], &entries, &cat), Room::Fits);
        log.bytes = one as u32 - 8;
        assert_eq!(log.room(&[MnId(1)], &entries, &cat), Room::Never(one));
    }
}
