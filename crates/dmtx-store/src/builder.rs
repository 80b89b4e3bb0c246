//! Building table images and placing them on replicas.

use dmtx_memnode::{Control, TableMeta};
use dmtx_verbs::MnId;

use crate::format::{
    check_spec, Attr, RegionBytes, TableFormat, ValueArea, VALUE_REGION_CURSOR_OFFSET, VALUE_REGION_HEADER_BYTES,
};
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
    /// The value's attributes (columns) in offset order, tiling `0..value_bytes`
    /// ([`crate::check_attrs`]); empty when the workload declares none, and the value
    /// is then one attribute ([`TableSpec::schema`]).
    pub attrs: Vec<Attr>,
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
            attrs: Vec::new(),
        }
    }

    /// This spec with its value's attributes, in offset order (checked with the rest of
    /// the spec before a run, [`crate::check_spec`]).
    pub fn with_attrs(mut self, attrs: Vec<Attr>) -> Self {
        self.attrs = attrs;
        self
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
    format: TableFormat,
    shape: Shape,
    image: Image,
    overflow_used: u64,
    /// Region-relative offset of the value region's first free byte.
    region_cursor: u64,
    records: u64,
    /// A slot's bytes while the layout encodes them.
    scratch: Vec<u8>,
}

impl<'l> TableBuilder<'l> {
    /// An empty table sized for `spec`, in the format `layout` gives it.
    ///
    /// # Panics
    ///
    /// When `spec` fails [`check_spec`]; [`TableBuilder::try_new`] returns the error.
    pub fn new(spec: TableSpec, layout: &'l dyn SlotLayout) -> Self {
        Self::try_new(spec, layout).unwrap_or_else(|e| panic!("{e}"))
    }

    /// An empty table sized for `spec`, or why `spec` cannot be built in `layout`'s
    /// format (an attribute schema that does not tile the value, a value region too
    /// small for the load).
    pub fn try_new(spec: TableSpec, layout: &'l dyn SlotLayout) -> Result<Self> {
        check_spec(&spec, layout)?;
        let format = layout.format(&spec);
        let shape = Shape::for_format(&spec, &format);
        let image = Image::zeroed(shape.table_bytes() as usize);
        Ok(Self {
            spec,
            layout,
            format,
            shape,
            image,
            overflow_used: 0,
            region_cursor: VALUE_REGION_HEADER_BYTES,
            records: 0,
            scratch: Vec::new(),
        })
    }

    /// The format the layout gave the table.
    pub fn format(&self) -> TableFormat {
        self.format
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
        let slot_bytes = self.shape.slot_bytes as usize;
        let encoded = match self.shape.value_region {
            // Values in the slot: encoded in place.
            None => {
                let mut values = ValueArea {
                    table: &self.spec.name,
                    image: None,
                    region: None,
                    cursor: &mut self.region_cursor,
                    knob: self.format.value_region_knob,
                };
                let slot = self.image.get_mut(at, slot_bytes);
                self.layout.encode_record(&self.spec, key, value, slot, &mut values)
            }
            // The value area borrows the image too: the slot is encoded in a scratch
            // copy, reused from insert to insert.
            Some(region) => {
                let mut scratch = std::mem::take(&mut self.scratch);
                scratch.clear();
                scratch.resize(slot_bytes, 0);
                let mut values = ValueArea {
                    table: &self.spec.name,
                    image: Some(&mut self.image),
                    region: Some(region),
                    cursor: &mut self.region_cursor,
                    knob: self.format.value_region_knob,
                };
                let r = self
                    .layout
                    .encode_record(&self.spec, key, value, &mut scratch, &mut values);
                if r.is_ok() {
                    self.image.get_mut(at, slot_bytes).copy_from_slice(&scratch);
                }
                self.scratch = scratch;
                r
            }
        };
        encoded?;
        self.records += 1;
        Ok(())
    }

    /// Remove a record; true if it was there. What it kept in the value region stays
    /// (the loader's space is handed out in order and never given back).
    pub fn remove(&mut self, key: u64) -> bool {
        let (bucket, scan, _) = self.walk(key);
        let Some(slot) = scan.found else { return false };
        let at = self.shape.slot_off(bucket, slot) as usize;
        self.image.get_mut(at, self.shape.slot_bytes as usize).fill(0);
        self.records -= 1;
        true
    }

    /// The value of `key`, if present, decoded by the layout ([`SlotLayout::value_into`]).
    pub fn get(&self, key: u64) -> Option<Vec<u8>> {
        let (bucket, scan, _) = self.walk(key);
        let at = self.shape.slot_off(bucket, scan.found?) as usize;
        let slot = self.image.get(at, self.shape.slot_bytes as usize);
        let region = match self.shape.value_region {
            Some(r) => RegionBytes::new(&self.spec.name, r, self.image.get(r.offset as usize, r.bytes as usize)),
            None => RegionBytes::none(&self.spec.name),
        };
        let mut out = vec![0u8; self.spec.value_bytes as usize];
        self.layout
            .value_into(slot, &region, &mut out)
            .unwrap_or_else(|e| panic!("{e}: the builder wrote this slot itself"));
        Some(out)
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
        if let Some(r) = self.shape.value_region {
            debug_assert!(self.region_cursor <= r.bytes);
            let c = (r.offset + VALUE_REGION_CURSOR_OFFSET) as usize;
            self.image
                .get_mut(c, 8)
                .copy_from_slice(&self.region_cursor.to_le_bytes());
        }
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

/// Ship a built table to its replicas and publish its metadata on each: its geometry,
/// its value region (allocated with the table, on every replica) and its attribute
/// schema ([`TableSpec::schema`]).
///
/// Only the pages the builder wrote are shipped: the space `alloc` hands out reads as
/// zero (a region starts zeroed: `mem` and `tcp` nodes map fresh anonymous memory, a
/// `--backing` node a file it empties unless it reopens it, and the allocator never
/// hands out space twice), so the rest of the image is there already, and writing its
/// zeros would make reserved-but-unused room resident.
pub fn create_table(control: &dyn Control, table: TableBuilder<'_>, replicas: &[MnId]) -> Result<TableMeta> {
    let layout = table.layout;
    let (spec, shape, image) = table.finish_image();
    let cuckoo = match layout.index_kind(&spec) {
        crate::IndexKind::Hash => None,
        crate::IndexKind::Cuckoo => Some(crate::cuckoo::index_image(&spec, &shape, layout, |o, n| {
            image.get(o, n)
        })?),
    };
    // Bounded chunks keep a control RPC's frame small on the tcp transport.
    const LOAD_CHUNK_BYTES: usize = 4 << 20;
    let runs = image.written_runs(LOAD_CHUNK_BYTES);
    let mut placed = Vec::with_capacity(replicas.len());
    // A table with a value region starts on a page, so the region's pages (page-aligned
    // in the table) hold nothing else; one without keeps FORD's 64-byte alignment.
    let align = match shape.value_region {
        Some(_) => crate::image::PAGE_BYTES as u64,
        None => 64,
    };
    for &mn in replicas {
        let base = control.alloc(mn, image.len() as u64, align)?;
        for &(start, end) in &runs {
            control.load(mn, base + start as u64, &image.bytes()[start..end])?;
        }
        placed.push((mn, base));
    }
    let attrs = spec.schema().into_owned();
    let id = spec.id;
    let meta = TableMeta {
        id,
        name: spec.name,
        value_bytes: spec.value_bytes,
        slot_bytes: shape.slot_bytes,
        slots_per_bucket: shape.slots,
        bucket_bytes: shape.bucket_bytes,
        bucket_count: shape.bucket_count,
        overflow_bucket_count: shape.overflow_count,
        replicas: placed,
        runs: shape.runs,
        value_region: shape.value_region,
        attrs,
    };
    if let Some(index) = &cuckoo {
        crate::cuckoo::ship(control, id, index, replicas)?;
    }
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
                prop_assert_eq!(t.get(*k), Some(vec![*v; 8]));
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

    /// A layout that keeps values out of its slots, as Motor keeps Vpkgs: slot =
    /// [occupied 8 B][key 8 B], and in tables named `wide*` [value's table-relative offset
    /// 8 B] too (slots sized per table); the value, padded to 8, in the value region.
    struct Boxed {
        region_bytes: u64,
    }
    impl SlotLayout for Boxed {
        fn slot_bytes(&self, _v: u32) -> u32 {
            16
        }
        fn encode(&self, _t: u32, _k: u64, _v: &[u8], _s: &mut [u8]) {
            unreachable!("Boxed encodes through encode_record")
        }
        fn key(&self, slot: &[u8]) -> Option<u64> {
            Plain.key(slot)
        }
        fn format(&self, spec: &TableSpec) -> TableFormat {
            let slot = if spec.name.starts_with("wide") { 24 } else { 16 };
            TableFormat::in_slot(slot).with_value_region(
                self.region_bytes,
                spec.value_bytes.next_multiple_of(8),
                Some("region_bytes"),
            )
        }
        fn encode_record(
            &self,
            spec: &TableSpec,
            key: u64,
            value: &[u8],
            slot: &mut [u8],
            values: &mut ValueArea<'_>,
        ) -> Result<()> {
            let (at, bytes) = values.alloc(spec.value_bytes.next_multiple_of(8) as usize, 8)?;
            bytes[..value.len()].copy_from_slice(value);
            slot[0..8].copy_from_slice(&1u64.to_le_bytes());
            slot[8..16].copy_from_slice(&key.to_le_bytes());
            // Wide slots hold the value's offset; narrow ones have no room for it and
            // keep it in a side word of the region, whose offset rides in the occupied
            // word's upper bits (so a record takes two region allocations).
            match slot.len() {
                24 => slot[16..24].copy_from_slice(&at.to_le_bytes()),
                _ => {
                    let (side, b) = values.alloc(8, 8)?;
                    b.copy_from_slice(&at.to_le_bytes());
                    slot[0..8].copy_from_slice(&(1 | (side << 8)).to_le_bytes());
                }
            }
            Ok(())
        }
        fn value_into(&self, slot: &[u8], region: &RegionBytes<'_>, out: &mut [u8]) -> Result<()> {
            let at = match slot.len() {
                24 => u64::from_le_bytes(slot[16..24].try_into().unwrap()),
                _ => {
                    let side = u64::from_le_bytes(slot[0..8].try_into().unwrap()) >> 8;
                    u64::from_le_bytes(region.get(side, 8)?.try_into().unwrap())
                }
            };
            out.copy_from_slice(region.get(at, out.len())?);
            Ok(())
        }
    }

    proptest! {
        /// Goal: a layout that keeps values in the value region is still the hash index.
        /// Method: the model test of `hash_index_matches_a_map`, values read back through
        /// `value_into`.
        #[test]
        fn values_in_a_value_region_match_a_map(steps in prop::collection::vec(step(), 1..200), wide in any::<bool>()) {
            let spec = TableSpec::new(1, if wide { "wide" } else { "narrow" }, 12, 16);
            let mut t = TableBuilder::new(spec, &Boxed { region_bytes: 64 << 10 });
            prop_assert_eq!(t.shape().slot_bytes, if wide { 24 } else { 16 });
            let mut model = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Insert(k, v) => match t.insert(k, &[v; 12]) {
                        Ok(()) => { prop_assert!(model.insert(k, v).is_none()); }
                        Err(StoreError::DuplicateKey { .. }) => prop_assert!(model.contains_key(&k)),
                        Err(StoreError::TableFull { .. }) => prop_assert!(!model.contains_key(&k)),
                        Err(e) => prop_assert!(false, "{e}"),
                    },
                    Step::Remove(k) => prop_assert_eq!(t.remove(k), model.remove(&k).is_some()),
                    Step::Get(k) => prop_assert_eq!(t.get(k).map(|v| v[0]), model.get(&k).copied()),
                }
            }
            for (k, v) in &model {
                prop_assert_eq!(t.get(*k), Some(vec![*v; 12]));
            }
        }
    }

    /// Read every record of a published table from `region` through the layout, as a
    /// compute node would: bucket by bucket, values from the fetched value region.
    fn read_back(
        meta: &TableMeta,
        base: u64,
        region: &dmtx_verbs::Region,
        layout: &dyn SlotLayout,
    ) -> BTreeMap<u64, Vec<u8>> {
        let shape = Shape::of(meta);
        let r = shape.value_region.expect("a value region in the metadata");
        let mut region_bytes = vec![0u8; r.bytes as usize];
        region.read(base + r.offset, &mut region_bytes).unwrap();
        let values = RegionBytes::new(&meta.name, r, &region_bytes);
        let mut out = BTreeMap::new();
        for idx in 0..shape.bucket_count + shape.overflow_count {
            let mut b = vec![0u8; shape.bucket_bytes as usize];
            region.read(base + shape.bucket_off(idx), &mut b).unwrap();
            for s in b[crate::BUCKET_HEADER_BYTES as usize..].chunks_exact(shape.slot_bytes as usize) {
                if let Some(k) = layout.key(s) {
                    let mut v = vec![0u8; meta.value_bytes as usize];
                    layout.value_into(s, &values, &mut v).unwrap();
                    out.insert(k, v);
                }
            }
        }
        out
    }

    fn boxed_table(layout: &Boxed, records: u64) -> (TableBuilder<'_>, BTreeMap<u64, Vec<u8>>) {
        let spec = TableSpec::new(5, "wide_accounts", 20, records)
            .with_attrs(vec![Attr::new("balance", 0, 8), Attr::new("owner", 8, 12)]);
        let mut t = TableBuilder::new(spec, layout);
        let mut model = BTreeMap::new();
        for k in 0..records {
            let v: Vec<u8> = (0..20).map(|i| (k as u8).wrapping_mul(7).wrapping_add(i)).collect();
            t.insert(k * 1000 + 3, &v).unwrap();
            model.insert(k * 1000 + 3, v);
        }
        (t, model)
    }

    /// Goal: a table's value region is allocated with it on every replica and recorded
    /// in its metadata, and its values read back from any replica. Method: load a table
    /// of a value-region layout on two nodes, check the metadata (region, schema, cursor
    /// word), then read every record from both replicas' bytes.
    #[test]
    fn create_table_places_the_value_region_on_every_replica() {
        let layout = Boxed { region_bytes: 1 << 20 };
        let (t, model) = boxed_table(&layout, 300);
        let fp = crate::footprint(&t.spec, &layout);
        let cluster = dmtx_memnode::LocalCluster::new(2, 8 << 20);
        let meta = create_table(&cluster, t, &[MnId(1), MnId(0)]).unwrap();
        let r = meta.value_region.expect("value region recorded");
        assert_eq!(r.bytes, 1 << 20);
        assert!(r.offset >= Shape::of(&meta).index_bytes() && r.offset.is_multiple_of(4096));
        assert_eq!(fp.value_region_bytes, r.bytes);
        assert_eq!(fp.reserved_bytes, r.offset + r.bytes);
        assert_eq!(meta.attrs, vec![Attr::new("balance", 0, 8), Attr::new("owner", 8, 12)]);
        assert_eq!(cluster.tables(MnId(0)).unwrap(), vec![meta.clone()]);
        for &(mn, base) in &meta.replicas {
            assert!(
                base.is_multiple_of(4096),
                "{mn}: a table with a region starts on a page"
            );
            let region = cluster.node(mn).unwrap().region();
            let mut cursor = [0u8; 8];
            region
                .read(base + r.offset + VALUE_REGION_CURSOR_OFFSET, &mut cursor)
                .unwrap();
            // 300 values of 24 B plus 0 side words (wide slots hold the offset).
            assert_eq!(u64::from_le_bytes(cursor), VALUE_REGION_HEADER_BYTES + 300 * 24);
            assert_eq!(read_back(&meta, base, region, &layout), model, "{mn}");
        }
    }

    /// Goal: a `--backing` node keeps a table's value region across a restart: its
    /// metadata in the sidecar, its bytes in the file. Method: load a value-region table
    /// onto a file-backed node, reopen the node on the same file, read every record back.
    #[test]
    fn a_backed_node_keeps_the_value_region_across_a_restart() {
        struct One(dmtx_memnode::MemNode);
        impl Control for One {
            fn mn_count(&self) -> usize {
                1
            }
            fn alloc(&self, _mn: MnId, bytes: u64, align: u64) -> dmtx_memnode::Result<u64> {
                self.0.alloc(bytes, align)
            }
            fn load(&self, _mn: MnId, offset: u64, bytes: &[u8]) -> dmtx_memnode::Result<()> {
                self.0.load(offset, bytes)
            }
            fn put_table(&self, _mn: MnId, meta: &TableMeta) -> dmtx_memnode::Result<()> {
                self.0.put_table(meta)
            }
            fn tables(&self, _mn: MnId) -> dmtx_memnode::Result<Vec<TableMeta>> {
                Ok(self.0.tables())
            }
            fn put_named(&self, _mn: MnId, name: &str, value: &[u8]) -> dmtx_memnode::Result<()> {
                self.0.put_named(name, value)
            }
            fn named(&self, _mn: MnId, name: &str) -> dmtx_memnode::Result<Vec<u8>> {
                self.0.named(name)
            }
            fn names(&self, _mn: MnId) -> dmtx_memnode::Result<Vec<String>> {
                Ok(self.0.names())
            }
        }
        let dir = std::env::temp_dir().join(format!("dmtx-store-backed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mn0");
        let layout = Boxed { region_bytes: 64 << 10 };
        let (t, model) = boxed_table(&layout, 100);
        let meta = {
            let (node, reopened) = dmtx_memnode::MemNode::open_backed(MnId(0), &path, 1 << 20).unwrap();
            assert!(!reopened);
            create_table(&One(node), t, &[MnId(0)]).unwrap()
        };
        let (node, reopened) = dmtx_memnode::MemNode::open_backed(MnId(0), &path, 1 << 20).unwrap();
        assert!(reopened);
        assert_eq!(
            node.tables(),
            vec![meta.clone()],
            "the sidecar keeps the region and the schema"
        );
        assert_eq!(read_back(&meta, meta.replicas[0].1, node.region(), &layout), model);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Goal: a value region that does not fit is a clear error naming the table and the
    /// knob, before the build (too small for the load) or at the insert that overflows.
    #[test]
    fn a_value_region_that_does_not_fit_names_the_knob() {
        let spec = TableSpec::new(1, "wide_t", 16, 100);
        let e = TableBuilder::try_new(
            spec.clone(),
            &Boxed {
                region_bytes: 64 + 99 * 16,
            },
        )
        .err()
        .expect("too small for 100 records")
        .to_string();
        assert!(
            e.contains("table `wide_t`: value region of 1648 bytes cannot hold its 100 loaded records (1664 bytes"),
            "{e}"
        );
        assert!(e.contains("raise `region_bytes`"), "{e}");
        // Sized for the load, but the layout writes more than it said per record.
        let narrow = TableSpec::new(1, "narrow_t", 16, 100);
        let mut t = TableBuilder::try_new(
            narrow,
            &Boxed {
                region_bytes: 64 + 100 * 16,
            },
        )
        .unwrap();
        let mut err = None;
        for k in 0..100 {
            if let Err(e) = t.insert(k, &[1; 16]) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("side words overflow the region").to_string();
        assert!(
            e.contains("table `narrow_t`: value region of 1664 bytes is full"),
            "{e}"
        );
        assert!(e.contains("raise `region_bytes`"), "{e}");
        // A layout without a region that stores a value there.
        struct Lost;
        impl SlotLayout for Lost {
            fn slot_bytes(&self, _v: u32) -> u32 {
                16
            }
            fn encode(&self, _t: u32, _k: u64, _v: &[u8], _s: &mut [u8]) {}
            fn key(&self, _s: &[u8]) -> Option<u64> {
                None
            }
            fn encode_record(
                &self,
                _: &TableSpec,
                _: u64,
                _: &[u8],
                _: &mut [u8],
                values: &mut ValueArea<'_>,
            ) -> Result<()> {
                values.alloc(8, 8).map(|_| ())
            }
        }
        let e = TableBuilder::new(TableSpec::new(2, "lost", 8, 4), &Lost)
            .insert(1, &[0; 8])
            .unwrap_err();
        assert!(matches!(e, StoreError::NoValueRegion { .. }), "{e}");
    }

    #[test]
    fn a_spec_whose_schema_does_not_cover_the_value_is_refused_before_the_build() {
        let spec = TableSpec::new(1, "district", 16, 10).with_attrs(vec![Attr::new("d_ytd", 0, 8)]);
        let e = TableBuilder::try_new(spec, &Plain).err().expect("refused").to_string();
        assert!(
            e.contains("table `district`: attribute schema covers 8 bytes, the value has 16"),
            "{e}"
        );
    }

    /// Goal: the planner's estimate counts the value region. Method: a value-region
    /// table's `footprint` against the pages its load writes.
    #[test]
    fn footprint_counts_the_value_region() {
        let layout = Boxed { region_bytes: 4 << 20 };
        let (t, _) = boxed_table(&layout, 20_000);
        let f = crate::footprint(&t.spec, &layout);
        assert_eq!(f.slot_bytes, 24);
        assert_eq!(
            f.value_region_loaded_bytes,
            (64 + 20_000 * 24u64).next_multiple_of(4096)
        );
        let real = t.written_pages() * 4096;
        assert!(
            f.loaded_bytes.abs_diff(real) * 10 <= real,
            "estimated {} B loaded, the load wrote {real} B",
            f.loaded_bytes
        );
        let plain = crate::footprint(&TableSpec::new(5, "wide_accounts", 20, 20_000), &Plain);
        assert_eq!(plain.value_region_bytes, 0);
        // Full: the whole region (the run may fill it) besides the index of a full table.
        assert_eq!(
            f.full_bytes,
            f.value_region_bytes + (f.loaded_bytes - f.value_region_loaded_bytes),
            "the table is loaded to its capacity"
        );
    }

    #[test]
    fn placement_rotates_primaries() {
        assert_eq!(placement(0, 2, 2).unwrap(), vec![MnId(0), MnId(1)]);
        assert_eq!(placement(1, 2, 2).unwrap(), vec![MnId(1), MnId(0)]);
        assert_eq!(placement(5, 3, 1).unwrap(), vec![MnId(2)]);
        assert!(placement(0, 2, 3).unwrap_err().to_string().contains("lower `replicas`"));
    }
}
