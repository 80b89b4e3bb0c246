//! The persistence domain of a memory node with persistent memory (PM), for PM crashes.
//!
//! An RDMA WRITE is acknowledged once it sits in the responder NIC's or the PCIe root
//! complex's buffers, before it reaches the persistence domain. FORD §4.5 (selective
//! remote flush): a READ issued after WRITEs on the same connection makes them durable,
//! because the NIC serves a PCIe read only after the posted writes before it have
//! drained. dmtx's `Flush` op is that READ (DESIGN §2).
//!
//! # Model
//!
//! - Per memory node, every op that modifies memory (WRITE, CAS, FAA) gets a sequence
//!   number in apply order: posted PCIe writes drain in order, so "write `k` is durable"
//!   implies "every write before `k` is durable".
//! - Each connection remembers the number of its latest write. A FLUSH, READ, CAS or FAA
//!   on that connection (all are non-posted PCIe reads) raises the node's **durable
//!   watermark** to it.
//! - Writes above the watermark are **volatile**; for each the log keeps its address and
//!   the bytes it overwrote (an undo log).
//! - At a crash, every 64-byte cacheline touched by volatile writes keeps a prefix of
//!   them, in write order, whose length the seed picks (CPU caches and the PCIe/memory
//!   controller evict lines independently, ADR persists whole lines); the rest of that
//!   line's volatile writes are undone from the log, newest first.
//!
//! The log is bounded: past [`VOLATILE_WRITES_MAX`] volatile writes the oldest is taken
//! as drained (the buffers between NIC and memory are finite), so a run that never
//! flushes costs bounded memory. Nothing is recorded unless the fault script contains a
//! PM crash.

use std::collections::{BTreeMap, VecDeque};

use dmtx_verbs::Region;
use rand::rngs::SmallRng;
use rand::Rng;

/// Cacheline size: the unit in which volatile writes persist or are lost.
pub const CACHELINE_BYTES: u64 = 64;

/// Volatile writes kept per node before the oldest is taken as drained.
pub const VOLATILE_WRITES_MAX: usize = 1 << 16;

/// One volatile write: where, and the bytes it replaced.
#[derive(Debug)]
struct Undo {
    seq: u64,
    offset: u64,
    old: Vec<u8>,
}

/// One memory node's persistence domain.
#[derive(Debug, Default)]
pub(crate) struct Persist {
    /// Sequence number of the next write.
    next_seq: u64,
    /// Every write with a sequence number below this is durable.
    durable: u64,
    /// Per connection: one past the sequence number of its latest write.
    last_write: BTreeMap<u32, u64>,
    /// Volatile writes, oldest first (invariant: every `seq >= durable`).
    undo: VecDeque<Undo>,
}

/// What a crash did to a node's volatile writes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PmLoss {
    /// Volatile writes (cacheline pieces) at the crash.
    pub volatile: u64,
    /// Of those, the ones undone (lost).
    pub lost: u64,
}

impl Persist {
    /// A non-posted access (READ, FLUSH, CAS, FAA) on `conn` drains that connection's
    /// earlier writes.
    pub fn drain(&mut self, conn: u32) {
        if let Some(&upto) = self.last_write.get(&conn) {
            if upto > self.durable {
                self.durable = upto;
                while self.undo.front().is_some_and(|u| u.seq < upto) {
                    self.undo.pop_front();
                }
            }
        }
    }

    /// `conn` overwrote `old` at `offset`; the write is volatile until drained.
    pub fn record(&mut self, conn: u32, offset: u64, old: Vec<u8>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.last_write.insert(conn, seq + 1);
        self.undo.push_back(Undo { seq, offset, old });
        if self.undo.len() > VOLATILE_WRITES_MAX {
            let u = self.undo.pop_front().expect("non-empty");
            self.durable = u.seq + 1;
        }
        debug_assert!(self.undo.front().is_none_or(|u| u.seq >= self.durable));
    }

    /// Volatile writes now.
    #[cfg(test)]
    pub fn volatile(&self) -> usize {
        self.undo.len()
    }

    /// Power fails: each cacheline keeps a seed-chosen prefix of its volatile writes,
    /// the rest are undone on `region`. The domain is empty afterwards (connections are
    /// gone with the node).
    pub fn crash(&mut self, region: &Region, rng: &mut SmallRng) -> PmLoss {
        // Split every volatile write into its cacheline pieces, in write order per line.
        let mut lines: BTreeMap<u64, Vec<(u64, &[u8])>> = BTreeMap::new();
        for u in &self.undo {
            let mut at = 0usize;
            while at < u.old.len() {
                let offset = u.offset + at as u64;
                let line = offset / CACHELINE_BYTES;
                let room = ((line + 1) * CACHELINE_BYTES - offset) as usize;
                let n = room.min(u.old.len() - at);
                lines.entry(line).or_default().push((offset, &u.old[at..at + n]));
                at += n;
            }
        }
        let mut loss = PmLoss::default();
        for pieces in lines.values() {
            let keep = rng.random_range(0..=pieces.len());
            loss.volatile += pieces.len() as u64;
            loss.lost += (pieces.len() - keep) as u64;
            // Newest first, so the line ends as it was after the kept prefix.
            for &(offset, old) in pieces[keep..].iter().rev() {
                region
                    .write(offset, old)
                    .expect("the undo log holds only writes that applied");
            }
        }
        self.undo.clear();
        self.last_write.clear();
        self.durable = self.next_seq;
        loss
    }

    /// The node lost its memory or came back: nothing is volatile any more.
    pub fn reset(&mut self) {
        self.undo.clear();
        self.last_write.clear();
        self.durable = self.next_seq;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn word(r: &Region, at: u64) -> u64 {
        r.load(at).unwrap()
    }

    /// Goal: a drained write survives every crash; an undrained one is lost for some
    /// seed and kept for another, and a line never keeps a later write without the
    /// earlier ones (prefix per cacheline).
    #[test]
    fn drained_survive_and_lines_keep_prefixes() {
        let (mut lost_seen, mut kept_seen) = (false, false);
        for seed in 0..64 {
            let r = Region::new(4096);
            let mut p = Persist::default();
            let mut rng = SmallRng::seed_from_u64(seed);
            // conn 1 writes 0 -> 1 at 0 and drains it.
            p.record(1, 0, word(&r, 0).to_le_bytes().to_vec());
            r.write(0, &1u64.to_le_bytes()).unwrap();
            p.drain(1);
            // conn 2 writes 1 then 2 to the same word of another line, undrained;
            // conn 1's READ does not drain conn 2.
            for v in [1u64, 2] {
                p.record(2, 128, word(&r, 128).to_le_bytes().to_vec());
                r.write(128, &v.to_le_bytes()).unwrap();
            }
            p.drain(1);
            assert_eq!(p.volatile(), 2);
            let loss = p.crash(&r, &mut rng);
            assert_eq!(word(&r, 0), 1, "seed {seed}: a flushed write was lost");
            let v = word(&r, 128);
            assert!(v <= 2, "seed {seed}");
            assert_eq!(loss.volatile, 2);
            assert_eq!(loss.lost, 2 - v);
            lost_seen |= v < 2;
            kept_seen |= v == 2;
        }
        assert!(lost_seen && kept_seen, "64 seeds should both lose and keep");
    }
}
