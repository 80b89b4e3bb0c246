//! Motor's recovery hooks (§5.3): the owner in every lock word, and a per-coordinator
//! operation log of the keys a transaction locks and commits, kept in the compute
//! node's memory (the paper's UPS-backed DRAM). Recovery itself (a lease noticing a
//! dead coordinator and a new one reading its log) is a later issue; the log and
//! [`OpLog::release`] are what it needs.
//!
//! ```text
//! log  = txn id 8 | T_commit 8 (0 before commit) | state 1 | pad 1 | keys 2 | pad 4
//!        | per key: table 4 (bit 31: the home bucket's insert lock) | key 8
//! ```
//!
//! 24 B + 12 B per locked key: a TPC-C NewOrder with 15 items (33 locked keys) logs
//! 420 B, under §7.9's 556 B per transaction. A key is logged before its lock's CAS is
//! posted, so every lock the coordinator may hold is in the log; a logged key it never
//! got is harmless to release, since the release is `CAS(owner → 0)`.

use dmtx_store::{Catalog, BUCKET_LOCK_OFFSET};
use dmtx_verbs::Post;

/// Bytes of the log header.
pub const HEADER_BYTES: usize = 24;
/// Bytes per logged key.
pub const KEY_BYTES: usize = 12;
/// Table-id bit marking the home bucket's insert lock of the key, not its CVT's lock.
pub const BUCKET_LOCK: u32 = 1 << 31;

/// Where a transaction is, as its log says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LogState {
    /// No transaction, or it finished (committed, or aborted with its locks released).
    Idle = 0,
    /// Locking and executing: recovery releases the logged locks.
    Locking = 1,
    /// Installing at T_commit: recovery finishes the install (values are not logged:
    /// the paper resumes from its logs; dmtx's recovery is a later issue) and releases.
    Committing = 2,
}

/// One coordinator's operation log.
#[derive(Clone, Debug, Default)]
pub struct OpLog {
    bytes: Vec<u8>,
}

impl OpLog {
    /// Start transaction `txn_id`'s log.
    pub fn begin(&mut self, txn_id: u64) {
        self.bytes.clear();
        self.bytes.resize(HEADER_BYTES, 0);
        self.bytes[..8].copy_from_slice(&txn_id.to_le_bytes());
        self.bytes[16] = LogState::Locking as u8;
    }

    /// Log a key about to be locked: its CVT's lock, or (`bucket`) its home bucket's
    /// insert lock.
    pub fn lock(&mut self, table: u32, key: u64, bucket: bool) {
        debug_assert!(table & BUCKET_LOCK == 0);
        let t = if bucket { table | BUCKET_LOCK } else { table };
        self.bytes.extend_from_slice(&t.to_le_bytes());
        self.bytes.extend_from_slice(&key.to_le_bytes());
        let n = self.keys().len() as u16;
        self.bytes[18..20].copy_from_slice(&n.to_le_bytes());
    }

    /// The transaction installs at `ts`.
    pub fn committing(&mut self, ts: u64) {
        self.bytes[8..16].copy_from_slice(&ts.to_le_bytes());
        self.bytes[16] = LogState::Committing as u8;
    }

    /// The transaction is over and holds nothing.
    pub fn idle(&mut self) {
        if !self.bytes.is_empty() {
            self.bytes[16] = LogState::Idle as u8;
        }
    }

    /// The log's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The state it records.
    pub fn state(&self) -> LogState {
        match self.bytes.get(16) {
            Some(1) => LogState::Locking,
            Some(2) => LogState::Committing,
            _ => LogState::Idle,
        }
    }

    /// The logged keys: `(table, key, bucket lock)`.
    pub fn keys(&self) -> Vec<(u32, u64, bool)> {
        self.bytes
            .get(HEADER_BYTES..)
            .unwrap_or_default()
            .chunks_exact(KEY_BYTES)
            .map(|k| {
                let t = u32::from_le_bytes(k[..4].try_into().unwrap());
                let key = u64::from_le_bytes(k[4..].try_into().unwrap());
                (t & !BUCKET_LOCK, key, t & BUCKET_LOCK != 0)
            })
            .collect()
    }

    /// Add to `post` the release of every lock the log names that `owner` holds:
    /// `CAS(owner → 0)` on the lock word, found at `rel(table, key)` (the CVT's offset,
    /// which recovery finds by walking the key's chain). Insert locks are on the key's
    /// home bucket.
    pub fn release(&self, post: &mut Post, catalog: &Catalog, owner: u64, rel: impl Fn(u32, u64) -> Option<u64>) {
        for (table, key, bucket) in self.keys() {
            let Ok(info) = catalog.get(table) else { continue };
            let at = if bucket {
                Some(info.shape.bucket_off(info.shape.home_bucket(key)) + BUCKET_LOCK_OFFSET)
            } else {
                rel(table, key).map(|r| r + super::layout::H_LOCK as u64)
            };
            if let Some(at) = at {
                post.cas(info.ptr(0, at), owner, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tpcc_new_order_logs_under_556_bytes() {
        let mut log = OpLog::default();
        log.begin(7);
        // District, 15 stocks, and the order, new-order and 15 order-line inserts.
        log.lock(1, 10, false);
        for i in 0..15 {
            log.lock(2, 100 + i, false);
        }
        for i in 0..17 {
            log.lock(3, 1000 + i, true);
        }
        log.committing(99);
        assert_eq!(log.state(), LogState::Committing);
        assert_eq!(log.keys().len(), 33);
        assert_eq!(log.keys()[16], (3, 1000, true));
        assert!(log.bytes().len() <= 556, "{} bytes", log.bytes().len());
        log.idle();
        assert_eq!(log.state(), LogState::Idle);
    }
}
