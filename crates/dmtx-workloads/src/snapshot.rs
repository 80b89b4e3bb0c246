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

    /// Sort every table by key; call once after the last `push`.
    pub fn seal(&mut self) {
        for t in self.tables.values_mut() {
            let vb = t.value_bytes;
            let mut order: Vec<usize> = (0..t.keys.len()).collect();
            order.sort_unstable_by_key(|&i| t.keys[i]);
            let keys = order.iter().map(|&i| t.keys[i]).collect();
            let mut values = Vec::with_capacity(t.values.len());
            for &i in &order {
                values.extend_from_slice(&t.values[i * vb..(i + 1) * vb]);
            }
            t.keys = keys;
            t.values = values;
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
}
