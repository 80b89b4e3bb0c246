//! RCBench's cuckoo index (rcbench §4.2.1) against a model: the loader's kicks and
//! resizes, lookups through verbs reading candidates 1, 2, 3 in turn, absent keys,
//! run-time inserts (lowest free candidate by CAS, full ⇒ `Full`, racing inserters of one
//! key meet), and a table that chooses the index through its layout.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};

use dmtx_memnode::LocalCluster;
use dmtx_store::cuckoo::{
    cuckoo_hash, pk_word, rt_insert, rt_lookup, CuckooBuilder, CuckooEntry, CuckooPlace, CuckooVerbs, RtInsert,
    RtLookup, CUCKOO_ENTRY_BYTES, CUCKOO_WAYS,
};
use dmtx_store::{create_table, Catalog, IndexKind, SlotLayout, TableBuilder, TableSpec};
use dmtx_verbs::{MemTransport, MnId, Post, Region, Submitted, Transport, VerbError};

/// Runs a future that never pends (the `mem` transport completes at submit).
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a mem-transport future pended"),
    }
}

/// A transport that counts posts (round trips) and READs.
struct Counting {
    t: MemTransport,
    posts: u32,
    reads: u32,
}

impl CuckooVerbs for Counting {
    async fn post(&mut self, post: &mut Post) -> Result<(), VerbError> {
        self.posts += 1;
        self.reads += post
            .ops()
            .iter()
            .filter(|o| o.kind() == dmtx_verbs::OpKind::Read)
            .count() as u32;
        match self.t.submit(post) {
            Submitted::Done(r) => r,
            Submitted::Pending(_) => panic!("mem completes at submit"),
        }
    }
}

fn counting(cluster: &LocalCluster) -> Counting {
    Counting {
        t: cluster.fabric().transport(),
        posts: 0,
        reads: 0,
    }
}

/// A 64-bit LCG: the test's keys, reproducible.
fn keys(n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed;
    let mut out = BTreeMap::new();
    while out.len() < n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.insert(x >> 1, ());
    }
    out.into_keys().collect()
}

fn read_entry(region: &Region, at: u64) -> CuckooEntry {
    let mut b = [0u8; 24];
    region.read(at, &mut b).unwrap();
    CuckooEntry::decode(&b)
}

/// Place a builder's image on node 0 of `cluster`.
fn place(cluster: &LocalCluster, b: &CuckooBuilder) -> CuckooPlace {
    use dmtx_memnode::Control;
    let image = b.image();
    let base = cluster.alloc(MnId(0), image.len() as u64, 64).unwrap();
    cluster.load(MnId(0), base, &image).unwrap();
    CuckooPlace {
        mn: MnId(0),
        base,
        entries: b.entries(),
    }
}

#[test]
fn loader_matches_model_and_reports_load_and_probes() {
    // Goal: every loaded key is in exactly one of its three candidates with its addr and
    // size; keys never loaded are in none. Reported: load and mean probes at the default
    // sizing (printed for the report).
    let ks = keys(20_000, 1);
    let mut b = CuckooBuilder::new("t", ks.len() as u64);
    let mut model = BTreeMap::new();
    for (i, &k) in ks.iter().enumerate() {
        let addr = 64 + 64 * i as u64;
        b.insert(k, addr, 48).unwrap();
        model.insert(k, addr);
    }
    let image = b.image();
    for (&k, &addr) in &model {
        let (way, e) = b.find(k).unwrap_or_else(|| panic!("key {k} lost"));
        assert!(way < CUCKOO_WAYS);
        assert_eq!((e.addr, e.size, e.pk), (addr, 48, pk_word(k)));
        let n = b.entries();
        let held = (0..CUCKOO_WAYS)
            .map(|w| cuckoo_hash(k, w, n) as usize)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|&at| CuckooEntry::decode(&image[at * 24..at * 24 + 24]).pk == pk_word(k))
            .count();
        assert_eq!(held, 1, "key {k} held {held} times");
    }
    for k in keys(1000, 99) {
        if !model.contains_key(&k) {
            assert!(b.find(k).is_none(), "absent key {k} found");
        }
    }
    let s = b.stats();
    assert_eq!(s.keys, ks.len() as u64);
    assert!(s.load() > 0.45 && s.load() <= 0.91, "load {}", s.load());
    let probes = b.mean_probes();
    assert!((1.0..2.0).contains(&probes), "mean probes {probes}");
    eprintln!(
        "cuckoo: {} keys, {} entries, load {:.3}, mean probes {:.3}, kicks {}, resizes {}",
        s.keys,
        s.entries,
        s.load(),
        probes,
        s.kicks,
        s.resizes
    );
}

#[test]
fn loader_kicks_then_resizes() {
    // Goal: a key whose three candidates are taken displaces occupants (kicks); when the
    // index is too small for its keys it grows (resize) and keeps every key.
    let ks = keys(90, 7);
    let mut b = CuckooBuilder::with_entries("t", 100);
    for &k in &ks {
        b.insert(k, k | 1, 8).unwrap();
    }
    assert!(b.stats().kicks > 0, "90 keys in 100 entries without a kick");
    assert_eq!(b.stats().resizes, 0);
    for &k in &ks {
        assert_eq!(b.find(k).unwrap().1.addr, k | 1);
    }
    let mut small = CuckooBuilder::with_entries("t", 8);
    for &k in &ks[..20] {
        small.insert(k, k | 1, 8).unwrap();
    }
    assert!(small.stats().resizes >= 1);
    assert!(small.entries() > 8);
    for &k in &ks[..20] {
        assert_eq!(small.find(k).unwrap().1.addr, k | 1, "key {k} lost in a resize");
    }
}

#[test]
fn reserved_key_is_refused() {
    let mut b = CuckooBuilder::with_entries("t", 8);
    let e = b.insert(u64::MAX, 64, 8).unwrap_err();
    assert!(e.to_string().contains("u64::MAX"), "{e}");
}

#[test]
fn lookup_reads_candidates_in_turn() {
    // Goal: getRtItemAddr READs candidate 1, then 2, then 3, one round trip each, and
    // stops at the PK; an absent key costs all three.
    let cluster = LocalCluster::new(1, 1 << 20);
    let ks = keys(2000, 3);
    let mut b = CuckooBuilder::new("t", ks.len() as u64);
    for &k in &ks {
        b.insert(k, k | 1, 16).unwrap();
    }
    let p = place(&cluster, &b);
    let mut seen_way = [false; CUCKOO_WAYS];
    let mut post = Post::new();
    for &k in &ks {
        let (way, _) = b.find(k).unwrap();
        let mut v = counting(&cluster);
        let (found, probes) = now(rt_lookup(&mut v, &p, k, &mut post)).unwrap();
        assert_eq!(found, RtLookup::Found { addr: k | 1, size: 16 });
        assert_eq!(probes, way as u32 + 1);
        assert_eq!((v.posts, v.reads), (way as u32 + 1, way as u32 + 1));
        seen_way[way] = true;
    }
    assert_eq!(seen_way, [true; CUCKOO_WAYS], "keys in every candidate");
    for k in keys(200, 1234) {
        if b.find(k).is_some() {
            continue;
        }
        let mut v = counting(&cluster);
        let (found, probes) = now(rt_lookup(&mut v, &p, k, &mut post)).unwrap();
        assert_eq!(found, RtLookup::Absent);
        assert_eq!((probes, v.posts, v.reads), (3, 3, 3));
    }
}

#[test]
fn run_time_insert_takes_lowest_free_and_full_fails() {
    // Goal: a run-time insert CASes the PK word of the lowest free candidate, then writes
    // addr and size; with all three taken it reports Full (no run-time kicks); an entry
    // with the PK and addr 0 reads as an insert in flight.
    let cluster = LocalCluster::new(1, 1 << 20);
    let b = CuckooBuilder::with_entries("t", 64);
    let p = place(&cluster, &b);
    let mut post = Post::new();
    let key = 42;
    let region: &Arc<Region> = cluster.fabric().region(MnId(0));
    let entry_at = |way: usize| p.base + CUCKOO_ENTRY_BYTES * cuckoo_hash(key, way, p.entries);
    let distinct: std::collections::BTreeSet<u64> = (0..3).map(entry_at).collect();
    assert_eq!(distinct.len(), 3, "test key's candidates must differ");
    // Take candidate 0 by another key: the insert goes to candidate 1.
    let mut taken = [0u8; 24];
    CuckooEntry {
        addr: 8,
        size: 8,
        pk: 777,
    }
    .encode(&mut taken);
    region.write(entry_at(0), &taken).unwrap();
    let mut v = counting(&cluster);
    let r = now(rt_insert(&mut v, &p, key, 4096, 32, &mut post)).unwrap();
    assert_eq!(r, RtInsert::Inserted { way: 1 });
    assert_eq!(v.posts, 3, "read, CAS, write");
    let (found, probes) = now(rt_lookup(&mut v, &p, key, &mut post)).unwrap();
    assert_eq!((found, probes), (RtLookup::Found { addr: 4096, size: 32 }, 2));
    let again = now(rt_insert(&mut v, &p, key, 8192, 32, &mut post)).unwrap();
    assert_eq!(again, RtInsert::Exists { addr: 4096 });

    // A key whose three candidates hold other keys: Full.
    let k2 = 5;
    for w in 0..3 {
        let at = p.base + CUCKOO_ENTRY_BYTES * cuckoo_hash(k2, w, p.entries);
        if read_entry(region, at).pk == 0 {
            CuckooEntry {
                addr: 16,
                size: 8,
                pk: 9000 + w as u64,
            }
            .encode(&mut taken);
            region.write(at, &taken).unwrap();
        }
    }
    assert_eq!(
        now(rt_insert(&mut v, &p, k2, 64, 8, &mut post)).unwrap(),
        RtInsert::Full
    );

    // PK set, addr 0: an insert in flight.
    let k3 = 31337;
    let at = p.base + CUCKOO_ENTRY_BYTES * cuckoo_hash(k3, 0, p.entries);
    CuckooEntry {
        addr: 0,
        size: 0,
        pk: pk_word(k3),
    }
    .encode(&mut taken);
    region.write(at, &taken).unwrap();
    assert_eq!(now(rt_lookup(&mut v, &p, k3, &mut post)).unwrap().0, RtLookup::InFlight);
    assert_eq!(
        now(rt_insert(&mut v, &p, k3, 64, 8, &mut post)).unwrap(),
        RtInsert::Exists { addr: 0 }
    );
}

#[test]
fn racing_inserts_of_one_key_meet() {
    // Goal: threads inserting one key at once (different addrs) leave exactly one entry;
    // exactly one thread reports Inserted, the others Exists.
    for round in 0..50u64 {
        let cluster = Arc::new(LocalCluster::new(1, 1 << 20));
        let b = CuckooBuilder::with_entries("t", 32);
        let p = place(&cluster, &b);
        let key = 100 + round;
        let threads = 4;
        let barrier = Arc::new(Barrier::new(threads));
        let outcomes: Vec<RtInsert> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|i| {
                    let cluster = Arc::clone(&cluster);
                    let barrier = Arc::clone(&barrier);
                    s.spawn(move || {
                        let mut v = counting(&cluster);
                        let mut post = Post::new();
                        barrier.wait();
                        now(rt_insert(&mut v, &p, key, 64 * (i as u64 + 1), 8, &mut post)).unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won = outcomes
            .iter()
            .filter(|o| matches!(o, RtInsert::Inserted { .. }))
            .count();
        assert_eq!(won, 1, "round {round}: {outcomes:?}");
        let region = cluster.fabric().region(MnId(0));
        let holders = (0..p.entries)
            .map(|i| read_entry(region, p.base + 24 * i))
            .filter(|e| e.pk == pk_word(key))
            .count();
        assert_eq!(holders, 1, "round {round}: key indexed {holders} times");
    }
}

/// A layout that chooses the cuckoo index: [key + 1 8 B][value].
struct Keyed;
impl SlotLayout for Keyed {
    fn slot_bytes(&self, value_bytes: u32) -> u32 {
        8 + value_bytes
    }
    fn encode(&self, _: u32, key: u64, value: &[u8], slot: &mut [u8]) {
        slot[..8].copy_from_slice(&(key + 1).to_le_bytes());
        slot[8..].copy_from_slice(value);
    }
    fn key(&self, slot: &[u8]) -> Option<u64> {
        let w = u64::from_le_bytes(slot[..8].try_into().unwrap());
        (w != 0).then(|| w - 1)
    }
    fn value<'a>(&self, slot: &'a [u8], value_bytes: u32) -> &'a [u8] {
        &slot[8..8 + value_bytes as usize]
    }
    fn index_kind(&self, _: &TableSpec) -> IndexKind {
        IndexKind::Cuckoo
    }
}

#[test]
fn table_choosing_cuckoo_is_indexed_on_every_replica() {
    // Goal: create_table builds the cuckoo index of a table whose layout chooses it, on
    // every replica; the catalog finds it; each entry points at the key's slot. A table
    // in FORD's format gets none.
    let cluster = LocalCluster::new(3, 8 << 20);
    let mut tb = TableBuilder::new(TableSpec::new(5, "kv", 16, 500), &Keyed);
    for k in 0..500u64 {
        tb.insert(k, &[k as u8; 16]).unwrap();
    }
    create_table(&cluster, tb, &[MnId(2), MnId(0)]).unwrap();
    struct Plain;
    impl SlotLayout for Plain {
        fn slot_bytes(&self, v: u32) -> u32 {
            8 + v
        }
        fn encode(&self, t: u32, k: u64, v: &[u8], s: &mut [u8]) {
            Keyed.encode(t, k, v, s)
        }
        fn key(&self, s: &[u8]) -> Option<u64> {
            Keyed.key(s)
        }
    }
    let mut plain = TableBuilder::new(TableSpec::new(6, "plain", 16, 10), &Plain);
    plain.insert(1, &[1; 16]).unwrap();
    create_table(&cluster, plain, &[MnId(1)]).unwrap();
    let cat = Catalog::fetch(&cluster).unwrap();
    assert!(cat.get(6).unwrap().cuckoo.is_empty());
    let info = cat.get(5).unwrap();
    assert_eq!(info.cuckoo.iter().map(|p| p.mn).collect::<Vec<_>>(), [MnId(2), MnId(0)]);
    let mut post = Post::new();
    for (r, p) in info.cuckoo.iter().enumerate() {
        let mut v = counting(&cluster);
        for k in 0..500u64 {
            let (found, _) = now(rt_lookup(&mut v, p, k, &mut post)).unwrap();
            let RtLookup::Found { addr, size } = found else {
                panic!("replica {r}: key {k}: {found:?}")
            };
            assert_eq!(size, info.shape.slot_bytes as u64);
            let ptr = info.ptr(r, addr);
            let mut slot = vec![0u8; size as usize];
            cluster.fabric().region(ptr.mn).read(ptr.offset, &mut slot).unwrap();
            assert_eq!(Keyed.key(&slot), Some(k));
            assert_eq!(&slot[8..], &[k as u8; 16]);
        }
        assert_eq!(now(rt_lookup(&mut v, p, 500, &mut post)).unwrap().0, RtLookup::Absent);
    }
}
