//! Drawing a transaction's operations: partitions, keys, reads, writes, inserts.

use rand::rngs::SmallRng;
use rand::Rng;

use super::*;
use crate::zipf::uniform;

/// How keys of one domain (the whole table, or one partition) are drawn.
#[derive(Clone, Debug)]
pub(super) enum Dist {
    /// Uniform or scrambled Zipfian over the loaded keys.
    Keys(KeyGen),
    /// YCSB's "latest": an unscrambled Zipfian rank, 0 the newest record.
    Latest(Zipf),
}

/// What an operation does to its key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    Read,
    Update,
    Insert,
}

/// One operation of a transaction.
#[derive(Copy, Clone, Debug)]
pub(super) struct Op {
    pub(super) table: u32,
    pub(super) key: u64,
    pub(super) kind: OpKind,
    /// Partition-local insert index (inserts) or the field to update (`update=field`).
    pub(super) arg: u64,
}

/// One transaction's operations, drawn before it begins (no allocation).
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub(super) ops: [Op; OPS_MAX],
    pub(super) n: usize,
    /// Partitions touched in `nodes_per_txn` mode, the home first.
    pub(super) parts: [u32; OPS_MAX],
    pub(super) k: usize,
    /// 0 = read-only, 1 = read-write (or insert).
    pub(super) ty: usize,
}

impl Plan {
    pub(super) const EMPTY: Plan = Plan {
        ops: [Op {
            table: 0,
            key: 0,
            kind: OpKind::Read,
            arg: 0,
        }; OPS_MAX],
        n: 0,
        parts: [0; OPS_MAX],
        k: 0,
        ty: 0,
    };

    pub(super) fn ops(&self) -> &[Op] {
        &self.ops[..self.n]
    }
}

impl Ycsb {
    /// The key of coordinator `compact`'s `i`-th insert into partition `p`.
    #[inline]
    pub(super) fn insert_key(&self, p: u32, i: u64, compact: u64) -> u64 {
        debug_assert!(i < INSERT_SEQ_MAX && compact < 1 << COORD_BITS);
        (INSERT_FLAG | (i << COORD_BITS) | compact) * self.cfg.partitions as u64 + p as u64
    }

    /// `(partition, insert index, coordinator)` of an inserted key, or `None`.
    pub(super) fn decode_insert(&self, key: u64) -> Option<(u32, u64, u64)> {
        let n = self.cfg.partitions as u64;
        let j = key / n;
        (j & INSERT_FLAG != 0).then(|| {
            (
                (key % n) as u32,
                (j & !INSERT_FLAG) >> COORD_BITS,
                j & ((1 << COORD_BITS) - 1),
            )
        })
    }

    /// The generator of partition `p` (or of the whole table for `None`).
    #[inline]
    fn dist(&self, p: Option<u32>) -> &Dist {
        match p {
            Some(p) if (p as u64) < self.cfg.records % self.cfg.partitions as u64 => &self.dists[1],
            _ => &self.dists[0],
        }
    }

    /// Keys in the domain `p` draws from.
    #[inline]
    fn domain_len(&self, p: Option<u32>) -> u64 {
        p.map_or(self.cfg.records, |p| self.partition_len(p))
    }

    /// The key of index `d` of domain `p` (for "latest", `d` is a recency rank).
    #[inline]
    fn index_key(&self, local: &YcsbLocal, p: Option<u32>, d: u64) -> u64 {
        let n = self.cfg.partitions as u64;
        match (self.dist(p), p) {
            (Dist::Keys(_), None) => d,
            (Dist::Keys(_), Some(p)) => d * n + p as u64,
            (Dist::Latest(_), None) => {
                let t = local.inserted_total;
                if d < t {
                    let t = t - 1 - d;
                    self.insert_key((t % n) as u32, t / n, local.compact)
                } else {
                    self.cfg.records - 1 - (d - t)
                }
            }
            (Dist::Latest(_), Some(p)) => {
                let c = local.inserted[p as usize];
                if d < c {
                    self.insert_key(p, c - 1 - d, local.compact)
                } else {
                    (self.partition_len(p) - 1 - (d - c)) * n + p as u64
                }
            }
        }
    }

    /// A key of domain `p` not in `taken`. A key drawn [`KEY_DRAW_MAX`] times without a
    /// new one gives way to the next unused index, so the loop is bounded.
    #[inline]
    fn draw_key(&self, local: &mut YcsbLocal, p: Option<u32>, taken: &[Op]) -> u64 {
        let len = self.domain_len(p);
        let draw = |rng: &mut SmallRng| match self.dist(p) {
            Dist::Keys(g) => g.next(rng),
            Dist::Latest(z) => z.rank(rng),
        };
        let mut d = draw(&mut local.rng);
        let mut draws = 1;
        loop {
            let key = self.index_key(local, p, d);
            if !taken.iter().any(|o| o.key == key) {
                return key;
            }
            if draws < KEY_DRAW_MAX {
                d = draw(&mut local.rng);
                draws += 1;
            } else {
                d = if d + 1 == len { 0 } else { d + 1 };
            }
        }
    }

    /// Fill `plan.parts[..k]` with `k` distinct partitions in random order (Floyd's
    /// sample, then a shuffle); the first is the home.
    fn pick_partitions(&self, rng: &mut SmallRng, plan: &mut Plan) {
        let n = self.cfg.partitions as u64;
        let k = self.cfg.nodes_per_txn as usize;
        let parts = &mut plan.parts[..k];
        for (i, j) in (n - k as u64..n).enumerate() {
            let t = uniform(rng, j + 1) as u32;
            parts[i] = if parts[..i].contains(&t) { j as u32 } else { t };
        }
        for i in (1..k).rev() {
            parts.swap(i, uniform(rng, i as u64 + 1) as usize);
        }
        plan.k = k;
    }

    /// Draw one transaction's operations.
    pub(super) fn plan(&self, local: &mut YcsbLocal, plan: &mut Plan) {
        let cfg = &self.cfg;
        let n = cfg.ops_per_txn as usize;
        let parts = cfg.partitions as u64;
        plan.n = n;
        plan.k = 0;
        plan.ty = 0;
        if cfg.nodes_per_txn > 0 {
            self.pick_partitions(&mut local.rng, plan);
        }
        let txn_writes = cfg.write_unit == WriteUnit::Txn && local.rng.random::<f64>() < cfg.write_ratio;
        let mut pending_inserts = 0u64;
        for i in 0..n {
            let writes = match cfg.write_unit {
                WriteUnit::Op => local.rng.random::<f64>() < cfg.write_ratio,
                WriteUnit::Txn => txn_writes,
            };
            let part = (plan.k > 0).then(|| plan.parts[i * plan.k / n]);
            let op = if writes && cfg.preset == Preset::D {
                let (p, idx) = match part {
                    Some(p) => {
                        let earlier = plan.ops[..i]
                            .iter()
                            .filter(|o| o.kind == OpKind::Insert && o.table == p)
                            .count() as u64;
                        (p, local.inserted[p as usize] + earlier)
                    }
                    None => {
                        let t = local.inserted_total + pending_inserts;
                        ((t % parts) as u32, t / parts)
                    }
                };
                pending_inserts += 1;
                Op {
                    table: p,
                    key: self.insert_key(p, idx, local.compact),
                    kind: OpKind::Insert,
                    arg: idx,
                }
            } else {
                let key = self.draw_key(local, part, &plan.ops[..i]);
                let (kind, arg) = match (writes, cfg.update) {
                    (false, _) => (OpKind::Read, 0),
                    (true, UpdateScope::Record) => (OpKind::Update, 0),
                    (true, UpdateScope::Field) => (OpKind::Update, uniform(&mut local.rng, cfg.fields as u64)),
                };
                Op {
                    table: (key % parts) as u32,
                    key,
                    kind,
                    arg,
                }
            };
            plan.ty |= usize::from(writes);
            plan.ops[i] = op;
        }
    }
}
