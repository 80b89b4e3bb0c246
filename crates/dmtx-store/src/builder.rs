//! Building table images and placing them on replicas.

use dmtx_memnode::{Control, TableMeta};
use dmtx_verbs::MnId;

use crate::shape::{scan_bucket, Shape, SlotLayout, BUCKET_NEXT_OFFSET, OVERFLOW_CURSOR_OFFSET};
use crate::{Result, StoreError};

/// What a workload asks for when it creates a table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    /// Dense, unique id.
    pub id: u32,
    /// Name for messages and results.
    pub name: String,
    /// Bytes of every value.
    pub value_bytes: u32,
    /// Most records the table will hold, inserts during the run included.
    pub capacity: u64,
    /// Slots per bucket (S).
    pub slots_per_bucket: u32,
    /// Target fill of the hashed buckets at `capacity`.
    pub load_factor: f64,
    /// Overflow buckets as a fraction of hashed buckets (FORD's reserved space).
    pub overflow_fraction: f64,
}

impl TableSpec {
    /// A spec with the default geometry: 4 slots per bucket, 75% load, 20% overflow.
    pub fn new(id: u32, name: impl Into<String>, value_bytes: u32, capacity: u64) -> Self {
        Self {
            id,
            name: name.into(),
            value_bytes,
            capacity,
            slots_per_bucket: 4,
            load_factor: 0.75,
            overflow_fraction: 0.2,
        }
    }
}

/// Builds one table's image in local memory, as FORD's loader does before shipping it.
pub struct TableBuilder<'l> {
    spec: TableSpec,
    layout: &'l dyn SlotLayout,
    shape: Shape,
    image: Vec<u8>,
    overflow_used: u64,
    records: u64,
}

impl<'l> TableBuilder<'l> {
    /// An empty table sized for `spec`.
    pub fn new(spec: TableSpec, layout: &'l dyn SlotLayout) -> Self {
        let shape = Shape::for_spec(&spec, layout);
        let image = vec![0u8; shape.table_bytes() as usize];
        Self {
            spec,
            layout,
            shape,
            image,
            overflow_used: 0,
            records: 0,
        }
    }

    /// The geometry.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Records inserted.
    pub fn len(&self) -> u64 {
        self.records
    }

    /// True when no record is in the table.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    fn bucket(&self, idx: u64) -> &[u8] {
        let at = self.shape.bucket_off(idx) as usize;
        &self.image[at..at + self.shape.bucket_bytes as usize]
    }

    /// Walk the chain of `key`: (bucket, scan) of the bucket that holds it, or of the
    /// first bucket with a free slot, or of the chain's last bucket.
    fn walk(&self, key: u64) -> (u64, crate::BucketScan, Option<(u64, u32)>) {
        let mut idx = self.shape.home_bucket(key);
        let mut first_free = None;
        loop {
            let scan = scan_bucket(&self.shape, self.layout, self.bucket(idx), key);
            if scan.found.is_some() {
                return (idx, scan, first_free);
            }
            if let (None, Some(f)) = (first_free, scan.free) {
                first_free = Some((idx, f));
            }
            match scan.next {
                Some(n) => idx = n,
                None => return (idx, scan, first_free),
            }
        }
    }

    /// Add a record.
    pub fn insert(&mut self, key: u64, value: &[u8]) -> Result<()> {
        if value.len() != self.spec.value_bytes as usize {
            return Err(StoreError::ValueSize {
                table: self.spec.name.clone(),
                expected: self.spec.value_bytes,
                got: value.len(),
            });
        }
        let (last, scan, free) = self.walk(key);
        if scan.found.is_some() {
            return Err(StoreError::DuplicateKey {
                table: self.spec.name.clone(),
                key,
            });
        }
        let (bucket, slot) = match free {
            Some(f) => f,
            None => {
                if self.overflow_used == self.shape.overflow_count {
                    return Err(StoreError::TableFull {
                        table: self.spec.name.clone(),
                        key,
                        capacity: self.spec.capacity,
                    });
                }
                self.overflow_used += 1;
                let link = self.shape.bucket_off(last) as usize + BUCKET_NEXT_OFFSET as usize;
                self.image[link..link + 8].copy_from_slice(&self.overflow_used.to_le_bytes());
                (self.shape.overflow_bucket(self.overflow_used - 1), 0)
            }
        };
        let at = self.shape.slot_off(bucket, slot) as usize;
        let slot = &mut self.image[at..at + self.shape.slot_bytes as usize];
        self.layout.encode(self.spec.id, key, value, slot);
        self.records += 1;
        Ok(())
    }

    /// Remove a record; true if it was there.
    pub fn remove(&mut self, key: u64) -> bool {
        let (bucket, scan, _) = self.walk(key);
        let Some(slot) = scan.found else { return false };
        let at = self.shape.slot_off(bucket, slot) as usize;
        self.image[at..at + self.shape.slot_bytes as usize].fill(0);
        self.records -= 1;
        true
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: u64) -> Option<&[u8]> {
        let (bucket, scan, _) = self.walk(key);
        let at = self.shape.slot_off(bucket, scan.found?) as usize;
        let slot = &self.image[at..at + self.shape.slot_bytes as usize];
        Some(self.layout.value(slot, self.spec.value_bytes))
    }

    /// The finished image, overflow cursor included.
    pub fn finish(mut self) -> (TableSpec, Shape, Vec<u8>) {
        let c = OVERFLOW_CURSOR_OFFSET as usize;
        self.image[c..c + 8].copy_from_slice(&self.overflow_used.to_le_bytes());
        (self.spec, self.shape, self.image)
    }
}

/// The `replicas` nodes of a table, primary first: primaries rotate over the nodes by
/// table id, backups are the next nodes round-robin (FORD §6.3: each node is primary
/// for some tables and backup for others).
pub fn placement(table_id: u32, mn_count: usize, replicas: usize) -> Result<Vec<MnId>> {
    if replicas == 0 || replicas > mn_count {
        return Err(StoreError::TooManyReplicas { replicas, mn_count });
    }
    let first = table_id as usize % mn_count;
    Ok((0..replicas).map(|i| MnId(((first + i) % mn_count) as u16)).collect())
}

/// Ship a built table to its replicas and publish its metadata on each.
pub fn create_table(control: &dyn Control, table: TableBuilder<'_>, replicas: &[MnId]) -> Result<TableMeta> {
    let (spec, shape, image) = table.finish();
    let mut placed = Vec::with_capacity(replicas.len());
    for &mn in replicas {
        let base = control.alloc(mn, image.len() as u64, 64)?;
        // Bounded chunks keep a control RPC's frame small on the tcp transport.
        const LOAD_CHUNK_BYTES: usize = 4 << 20;
        for (i, chunk) in image.chunks(LOAD_CHUNK_BYTES).enumerate() {
            control.load(mn, base + (i * LOAD_CHUNK_BYTES) as u64, chunk)?;
        }
        placed.push((mn, base));
    }
    let meta = TableMeta {
        id: spec.id,
        name: spec.name,
        value_bytes: spec.value_bytes,
        slot_bytes: shape.slot_bytes,
        slots_per_bucket: shape.slots,
        bucket_bytes: shape.bucket_bytes,
        bucket_count: shape.bucket_count,
        overflow_bucket_count: shape.overflow_count,
        replicas: placed,
    };
    for &mn in replicas {
        control.put_table(mn, &meta)?;
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A minimal layout: [occupied+key 8 B][value].
    struct Plain;
    impl SlotLayout for Plain {
        fn slot_bytes(&self, v: u32) -> u32 {
            16 + v.next_multiple_of(8)
        }
        fn encode(&self, _t: u32, key: u64, value: &[u8], slot: &mut [u8]) {
            slot[0..8].copy_from_slice(&1u64.to_le_bytes());
            slot[8..16].copy_from_slice(&key.to_le_bytes());
            slot[16..16 + value.len()].copy_from_slice(value);
        }
        fn key(&self, slot: &[u8]) -> Option<u64> {
            (slot[0] == 1).then(|| u64::from_le_bytes(slot[8..16].try_into().unwrap()))
        }
        fn value<'a>(&self, slot: &'a [u8], v: u32) -> &'a [u8] {
            &slot[16..16 + v as usize]
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u64, u8),
        Remove(u64),
        Get(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        // Few keys and tiny tables, so chains and overflow are exercised constantly.
        prop_oneof![
            (0u64..64, any::<u8>()).prop_map(|(k, v)| Step::Insert(k, v)),
            (0u64..64).prop_map(Step::Remove),
            (0u64..64).prop_map(Step::Get),
        ]
    }

    proptest! {
        #[test]
        fn hash_index_matches_a_map(steps in prop::collection::vec(step(), 1..300), slots in 1u32..4) {
            let mut spec = TableSpec::new(1, "t", 8, 16);
            spec.slots_per_bucket = slots;
            let mut t = TableBuilder::new(spec, &Plain);
            let mut model = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Insert(k, v) => match t.insert(k, &[v; 8]) {
                        Ok(()) => { prop_assert!(model.insert(k, v).is_none()); }
                        Err(StoreError::DuplicateKey { key, .. }) => prop_assert!(model.contains_key(&key)),
                        Err(StoreError::TableFull { .. }) => prop_assert!(!model.contains_key(&k)),
                        Err(e) => prop_assert!(false, "{e}"),
                    },
                    Step::Remove(k) => prop_assert_eq!(t.remove(k), model.remove(&k).is_some()),
                    Step::Get(k) => prop_assert_eq!(t.get(k).map(|v| v[0]), model.get(&k).copied()),
                }
                prop_assert_eq!(t.len(), model.len() as u64);
            }
            for (k, v) in &model {
                prop_assert_eq!(t.get(*k), Some(&[*v; 8][..]));
            }
        }
    }

    #[test]
    fn overflow_links_are_table_relative_and_full_tables_fail_clearly() {
        let mut spec = TableSpec::new(1, "tiny", 8, 1);
        spec.slots_per_bucket = 1;
        spec.load_factor = 1.0;
        spec.overflow_fraction = 0.0;
        let mut t = TableBuilder::new(spec, &Plain);
        assert_eq!(t.shape().bucket_count, 1);
        assert_eq!(t.shape().overflow_count, 1);
        t.insert(1, &[1; 8]).unwrap();
        t.insert(2, &[2; 8]).unwrap(); // goes to overflow bucket 0
        let e = t.insert(3, &[3; 8]).unwrap_err();
        assert!(e.to_string().contains("raise the table's capacity"), "{e}");
        let (_, shape, image) = t.finish();
        let link = shape.bucket_off(0) as usize + 8;
        assert_eq!(u64::from_le_bytes(image[link..link + 8].try_into().unwrap()), 1);
        assert_eq!(
            u64::from_le_bytes(image[0..8].try_into().unwrap()),
            1,
            "overflow cursor"
        );
    }

    #[test]
    fn a_table_filled_to_its_capacity_always_loads() {
        for capacity in (1..=400).chain([1_000, 10_000, 100_000]) {
            let mut t = TableBuilder::new(TableSpec::new(1, "full", 8, capacity), &Plain);
            for k in 0..capacity {
                t.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), &[1; 8])
                    .unwrap_or_else(|e| panic!("capacity {capacity}, key #{k}: {e}"));
            }
        }
    }

    #[test]
    fn placement_rotates_primaries() {
        assert_eq!(placement(0, 2, 2).unwrap(), vec![MnId(0), MnId(1)]);
        assert_eq!(placement(1, 2, 2).unwrap(), vec![MnId(1), MnId(0)]);
        assert_eq!(placement(5, 3, 1).unwrap(), vec![MnId(2)]);
        assert!(placement(0, 2, 3).unwrap_err().to_string().contains("lower `replicas`"));
    }
}
