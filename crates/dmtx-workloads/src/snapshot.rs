//! A quiesced copy of tables, for invariant checks.

use std::collections::BTreeMap;

/// Every record of some tables, as read from the primaries after a run.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    tables: BTreeMap<u32, TableSnapshot>,
}

#[derive(Debug, Default, Clone)]
struct TableSnapshot {
    value_bytes: usize,
    /// Sorted by key once `seal` ran.
    keys: Vec<u64>,
    /// `value_bytes` per key, in `keys` order.
    values: Vec<u8>,
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a record of `table`.
    pub fn push(&mut self, table: u32, key: u64, value: &[u8]) {
        let t = self.tables.entry(table).or_default();
        t.value_bytes = value.len();
        t.keys.push(key);
        t.values.extend_from_slice(value);
    }

    /// Sort every table by key; call once after the last `push`. In place: a long run's
    /// snapshot is a good part of a memory node's data, and a sorted copy would double it.
    pub fn seal(&mut self) {
        for t in self.tables.values_mut() {
            let vb = t.value_bytes;
            let mut order: Vec<usize> = (0..t.keys.len()).collect();
            order.sort_unstable_by_key(|&i| t.keys[i]);
            // Position `j` takes the record at `order[j]`: follow each cycle of the
            // permutation once, holding the record that starts it.
            let mut held = vec![0u8; vb];
            for start in 0..order.len() {
                if order[start] == start {
                    continue;
                }
                let held_key = t.keys[start];
                held.copy_from_slice(&t.values[start * vb..(start + 1) * vb]);
                let mut j = start;
                loop {
                    let from = std::mem::replace(&mut order[j], j);
                    if from == start {
                        t.keys[j] = held_key;
                        t.values[j * vb..(j + 1) * vb].copy_from_slice(&held);
                        break;
                    }
                    t.keys[j] = t.keys[from];
                    t.values.copy_within(from * vb..(from + 1) * vb, j * vb);
                    j = from;
                }
            }
        }
    }

    /// Records in `table`.
    pub fn len(&self, table: u32) -> usize {
        self.tables.get(&table).map_or(0, |t| t.keys.len())
    }

    /// True when `table` has no record.
    pub fn is_empty(&self, table: u32) -> bool {
        self.len(table) == 0
    }

    /// The value of `key` in `table` (after `seal`).
    pub fn get(&self, table: u32, key: u64) -> Option<&[u8]> {
        let t = self.tables.get(&table)?;
        let i = t.keys.binary_search(&key).ok()?;
        Some(&t.values[i * t.value_bytes..(i + 1) * t.value_bytes])
    }

    /// Every (key, value) of `table`, by key (after `seal`).
    pub fn iter(&self, table: u32) -> impl Iterator<Item = (u64, &[u8])> {
        self.tables.get(&table).into_iter().flat_map(|t| {
            t.keys
                .iter()
                .enumerate()
                .map(move |(i, &k)| (k, &t.values[i * t.value_bytes..(i + 1) * t.value_bytes]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_lookup() {
        let mut s = Snapshot::new();
        s.push(1, 9, &[9, 9]);
        s.push(1, 3, &[3, 3]);
        s.seal();
        assert_eq!(s.get(1, 3), Some(&[3u8, 3][..]));
        assert_eq!(s.get(1, 4), None);
        assert_eq!(s.iter(1).map(|(k, _)| k).collect::<Vec<_>>(), [3, 9]);
        assert_eq!(s.len(2), 0);
    }

    #[test]
    fn sealing_in_place_keeps_every_record_with_its_value() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut s = Snapshot::new();
        let mut keys: Vec<u64> = (0..2000).map(|_| rng.random::<u64>() >> 8).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut shuffled = keys.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.random_range(0..=i));
        }
        // Three-byte values, so records straddle words.
        let value = |k: u64| [k as u8, (k >> 8) as u8, (k >> 16) as u8];
        for &k in &shuffled {
            s.push(4, k, &value(k));
        }
        s.seal();
        let got: Vec<(u64, Vec<u8>)> = s.iter(4).map(|(k, v)| (k, v.to_vec())).collect();
        let want: Vec<(u64, Vec<u8>)> = keys.iter().map(|&k| (k, value(k).to_vec())).collect();
        assert_eq!(got, want);
    }
}
