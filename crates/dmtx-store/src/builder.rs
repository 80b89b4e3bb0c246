//! Building table images and placing them on replicas.

use dmtx_memnode::{Control, TableMeta};
use dmtx_verbs::MnId;

use crate::image::Image;
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
    /// Records the loader inserts; the rest of `capacity` is room for the run's inserts.
    pub initial: u64,
    /// The knob that sizes the room for inserts, named when the table fills during a
    /// run; `None` for tables that never grow.
    pub growth_knob: Option<&'static str>,
    /// Placement by runs of a growing key field (see [`KeyRuns`]); `None` hashes every
    /// key over all hashed buckets, FORD's index as the paper has it.
    pub runs: Option<KeyRuns>,
}

/// How a table whose keys grow along one field is placed: the hashed buckets form one
/// segment per run of `2^run_log2` consecutive field values, sized for
/// `records_per_run` records at the table's load factor, and a key hashes within its
/// run's segment. Records inserted late in a long run then land in segments nobody
/// has touched before, and the room reserved for them costs no memory until they come
/// (the field is TPC-C's O_ID; every district's orders of one run share a segment).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KeyRuns {
    /// Bit position of the growing field in the key.
    pub seq_shift: u8,
    /// Its width in bits, 1..=64.
    pub seq_bits: u8,
    /// Consecutive field values per run: `2^run_log2`.
    pub run_log2: u8,
    /// Records of one run over all the keys' other fields (all districts' orders).
    pub records_per_run: u64,
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
            initial: capacity,
            growth_knob: None,
            runs: None,
        }
    }

    /// This spec for a table loaded with `initial` records that grows during the run up
    /// to `capacity`, whose room `knob` sizes.
    pub fn growing(mut self, initial: u64, knob: &'static str) -> Self {
        assert!(
            initial <= self.capacity,
            "table `{}`: {initial} loaded records exceed the capacity {}",
            self.name,
            self.capacity
        );
        self.initial = initial;
        self.growth_knob = Some(knob);
        self
    }

    /// This spec placed by runs of a growing key field.
    pub fn with_runs(mut self, runs: KeyRuns) -> Self {
        self.runs = Some(runs);
        self
    }
}

/// Builds one table's image in local memory, as FORD's loader does before shipping it.
pub struct TableBuilder<'l> {
    spec: TableSpec,
    layout: &'l dyn SlotLayout,
    shape: Shape,
    image: Image,
    overflow_used: u64,
    records: u64,
}

impl<'l> TableBuilder<'l> {
    /// An empty table sized for `spec`.
    pub fn new(spec: TableSpec, layout: &'l dyn SlotLayout) -> Self {
        let shape = Shape::for_spec(&spec, layout);
        let image = Image::zeroed(shape.table_bytes() as usize);
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

    /// 4 KiB pages of the image the loader has written so far: what the table costs
    /// in memory once loaded (room never written is never shipped, see
    /// [`create_table`]).
    pub fn written_pages(&self) -> u64 {
        self.image.written_pages()
    }

    fn bucket(&self, idx: u64) -> &[u8] {
        let at = self.shape.bucket_off(idx) as usize;
        self.image.get(at, self.shape.bucket_bytes as usize)
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
                self.image
                    .get_mut(link, 8)
                    .copy_from_slice(&self.overflow_used.to_le_bytes());
                (self.shape.overflow_bucket(self.overflow_used - 1), 0)
            }
        };
        let at = self.shape.slot_off(bucket, slot) as usize;
        let slot = self.image.get_mut(at, self.shape.slot_bytes as usize);
        self.layout.encode(self.spec.id, key, value, slot);
        self.records += 1;
        Ok(())
    }

    /// Remove a record; true if it was there.
    pub fn remove(&mut self, key: u64) -> bool {
        let (bucket, scan, _) = self.walk(key);
        let Some(slot) = scan.found else { return false };
        let at = self.shape.slot_off(bucket, slot) as usize;
        self.image.get_mut(at, self.shape.slot_bytes as usize).fill(0);
        self.records -= 1;
        true
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: u64) -> Option<&[u8]> {
        let (bucket, scan, _) = self.walk(key);
        let at = self.shape.slot_off(bucket, scan.found?) as usize;
        let slot = self.image.get(at, self.shape.slot_bytes as usize);
        Some(self.layout.value(slot, self.spec.value_bytes))
    }

    /// The finished image, overflow cursor included.
    pub fn finish(self) -> (TableSpec, Shape, Vec<u8>) {
        let (spec, shape, image) = self.finish_image();
        (spec, shape, image.bytes().to_vec())
    }

    fn finish_image(mut self) -> (TableSpec, Shape, Image) {
        let c = OVERFLOW_CURSOR_OFFSET as usize;
        self.image
            .get_mut(c, 8)
            .copy_from_slice(&self.overflow_used.to_le_bytes());
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
///
/// Only the pages the builder wrote are shipped: the space `alloc` hands out reads as
/// zero (a region starts zeroed: `mem` and `tcp` nodes map fresh anonymous memory, a
/// `--backing` node a file it empties unless it reopens it, and the allocator never
/// hands out space twice), so the rest of the image is there already, and writing its
/// zeros would make reserved-but-unused room resident.
pub fn create_table(control: &dyn Control, table: TableBuilder<'_>, replicas: &[MnId]) -> Result<TableMeta> {
    let (spec, shape, image) = table.finish_image();
    // Bounded chunks keep a control RPC's frame small on the tcp transport.
    const LOAD_CHUNK_BYTES: usize = 4 << 20;
    let runs = image.written_runs(LOAD_CHUNK_BYTES);
    let mut placed = Vec::with_capacity(replicas.len());
    for &mn in replicas {
        let base = control.alloc(mn, image.len() as u64, 64)?;
        for &(start, end) in &runs {
            control.load(mn, base + start as u64, &image.bytes()[start..end])?;
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
        runs: shape.runs,
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

    /// Keys `(partition p, sequence o)` packed as TPC-C packs (w, d, o): the field
    /// grows at bit 8.
    fn seq_key(p: u64, o: u64) -> u64 {
        (o << 8) | p
    }

    fn runs_spec(initial: u64, capacity: u64) -> TableSpec {
        TableSpec::new(1, "orders", 64, capacity)
            .growing(initial, "orders_max")
            .with_runs(KeyRuns {
                seq_shift: 8,
                seq_bits: 32,
                run_log2: 6,
                records_per_run: 16 * 64,
            })
    }

    proptest! {
        /// Placement by runs is still the hash index: the model agrees whatever the
        /// keys, runs beyond the designed ones (which wrap) included.
        #[test]
        fn runs_placement_matches_a_map(keys in prop::collection::vec((0u64..16, 0u64..2000), 1..400)) {
            let mut spec = runs_spec(0, 640);
            spec.slots_per_bucket = 2;
            let mut t = TableBuilder::new(spec, &Plain);
            let mut model = BTreeMap::new();
            for (p, o) in keys {
                let k = seq_key(p, o);
                match t.insert(k, &[o as u8; 64]) {
                    Ok(()) => { prop_assert!(model.insert(k, o as u8).is_none()); }
                    Err(StoreError::DuplicateKey { .. }) => prop_assert!(model.contains_key(&k)),
                    Err(StoreError::TableFull { .. }) => prop_assert!(!model.contains_key(&k)),
                    Err(e) => prop_assert!(false, "{e}"),
                }
            }
            for (k, v) in &model {
                prop_assert_eq!(t.get(*k).map(|x| x[0]), Some(*v));
            }
        }
    }

    #[test]
    fn a_run_of_keys_stays_in_its_segment() {
        let shape = Shape::for_spec(&runs_spec(0, 100 * 16 * 64), &Plain);
        let runs = shape.runs.expect("runs");
        assert_eq!(shape.bucket_count, 100 * runs.segment_buckets);
        for o in [0u64, 1, 63, 64, 700, 6399] {
            for p in 0..16 {
                let seg = shape.home_bucket(seq_key(p, o)) / runs.segment_buckets;
                assert_eq!(seg, o / 64, "key (p {p}, o {o})");
            }
        }
    }

    /// A control plane that counts the bytes each load ships.
    struct Counting {
        inner: dmtx_memnode::LocalCluster,
        loaded: std::sync::atomic::AtomicU64,
    }
    impl Control for Counting {
        fn mn_count(&self) -> usize {
            self.inner.mn_count()
        }
        fn alloc(&self, mn: MnId, bytes: u64, align: u64) -> dmtx_memnode::Result<u64> {
            self.inner.alloc(mn, bytes, align)
        }
        fn load(&self, mn: MnId, offset: u64, bytes: &[u8]) -> dmtx_memnode::Result<()> {
            self.loaded
                .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            self.inner.load(mn, offset, bytes)
        }
        fn put_table(&self, mn: MnId, meta: &TableMeta) -> dmtx_memnode::Result<()> {
            self.inner.put_table(mn, meta)
        }
        fn tables(&self, mn: MnId) -> dmtx_memnode::Result<Vec<TableMeta>> {
            self.inner.tables(mn)
        }
        fn put_named(&self, mn: MnId, name: &str, value: &[u8]) -> dmtx_memnode::Result<()> {
            self.inner.put_named(mn, name, value)
        }
        fn named(&self, mn: MnId, name: &str) -> dmtx_memnode::Result<Vec<u8>> {
            self.inner.named(mn, name)
        }
        fn names(&self, mn: MnId) -> dmtx_memnode::Result<Vec<String>> {
            self.inner.names(mn)
        }
    }

    /// Goal: room reserved for a long run costs nothing at load. Method: load 1/50 of a
    /// runs-placed table's capacity and count what `create_table` ships per replica, then
    /// read every record back from both replicas' regions.
    #[test]
    fn create_table_ships_only_the_written_pages() {
        let records_per_run = 16 * 64;
        let spec = runs_spec(2 * records_per_run, 100 * records_per_run);
        let mut t = TableBuilder::new(spec.clone(), &Plain);
        for o in 0..128 {
            for p in 0..16 {
                t.insert(seq_key(p, o), &[o as u8 + 1; 64]).unwrap();
            }
        }
        let written = t.written_pages() * 4096;
        let reserved = t.shape().table_bytes();
        assert!(written * 20 < reserved, "{written} of {reserved} bytes written");
        let ctl = Counting {
            inner: dmtx_memnode::LocalCluster::new(2, reserved * 2 + 4096),
            loaded: Default::default(),
        };
        let meta = create_table(&ctl, t, &[MnId(0), MnId(1)]).unwrap();
        let loaded = ctl.loaded.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            loaded <= 2 * written,
            "shipped {loaded} bytes, wrote {written} per replica"
        );
        let shape = Shape::of(&meta);
        assert_eq!(
            shape.runs,
            Shape::for_spec(&spec, &Plain).runs,
            "the catalog knows the placement"
        );
        for &(mn, base) in &meta.replicas {
            let region = ctl.inner.node(mn).unwrap().region();
            for o in 0..128u64 {
                for p in 0..16 {
                    let key = seq_key(p, o);
                    let mut idx = shape.home_bucket(key);
                    let found = loop {
                        let mut b = vec![0u8; shape.bucket_bytes as usize];
                        region.read(base + shape.bucket_off(idx), &mut b).unwrap();
                        let scan = scan_bucket(&shape, &Plain, &b, key);
                        if let Some(s) = scan.found {
                            let at = (crate::BUCKET_HEADER_BYTES + s * shape.slot_bytes) as usize + 16;
                            break b[at];
                        }
                        idx = scan.next.unwrap_or_else(|| panic!("{mn}: key ({p}, {o}) lost"));
                    };
                    assert_eq!(found, o as u8 + 1);
                }
            }
        }
    }

    /// Goal: the planner's estimate of a table's loaded memory is the loader's. Method:
    /// build plain and runs-placed tables, compare `footprint` with the pages written.
    #[test]
    fn footprint_matches_the_pages_a_load_writes() {
        let plain = TableSpec::new(2, "plain", 48, 20_000);
        let grown = TableSpec::new(3, "grown", 48, 400_000).growing(20_000, "grown_max");
        let runs = runs_spec(20 * 16 * 64, 400 * 16 * 64);
        for spec in [plain, grown, runs] {
            let f = crate::footprint(&spec, &Plain);
            let mut t = TableBuilder::new(spec.clone(), &Plain);
            assert_eq!(f.reserved_bytes, t.shape().table_bytes(), "{}", spec.name);
            let mut n = 0u64;
            'fill: for o in 0.. {
                for p in 0..16 {
                    if n == spec.initial {
                        break 'fill;
                    }
                    t.insert(seq_key(p, o), &vec![1; spec.value_bytes as usize]).unwrap();
                    n += 1;
                }
            }
            let real = t.written_pages() * 4096;
            let est = f.loaded_bytes;
            assert!(
                est.abs_diff(real) * 10 <= real,
                "{}: estimated {est} B loaded, the load wrote {real} B",
                spec.name
            );
            assert!(f.loaded_bytes <= f.full_bytes && f.full_bytes <= f.reserved_bytes.next_multiple_of(4096));
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
