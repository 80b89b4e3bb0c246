//! RCBench's index (rcbench.txt §4.2.1, Eq. 1): a 3-way cuckoo hash table of 24-byte
//! entries ⟨addr, size, PK⟩, one per table and memory node, beside FORD's hash index.
//!
//! A table chooses it through [`SlotLayout::index_kind`](crate::SlotLayout::index_kind).
//! Its records stay in the table's buckets (so loading and scans are those of every
//! table); the cuckoo index maps each key to its record's slot, and a coordinator finds a
//! record by READing candidate entries instead of walking buckets.
//!
//! ```text
//! index:  [entry 0][entry 1]...[entry E-1]          (E = CuckooPlace::entries, no header)
//! entry:  [addr 8 B: table-relative slot offset, 0 = empty][size 8 B][pk 8 B: key + 1, 0 = none]
//! ```
//!
//! Invariants:
//! 1. Entry `i` of key `k` is at `24 · hash_i(k)` (Eq. 1), `i ∈ {0, 1, 2}`; a key is in
//!    at most one of its three candidates.
//! 2. The PK word is `key + 1`: 0 is reserved for "no key" (the paper stores the PK
//!    always and reserves 0), so key `u64::MAX` cannot be indexed.
//! 3. At run time entries only go from free to taken: a run-time insert CASes the PK word
//!    of the *lowest* free candidate, then WRITEs addr and size. An entry whose PK is set
//!    and addr is 0 is an insert in flight, which a reader treats as a conflict. Nothing
//!    frees an entry at run time (a deleted record keeps its entry; its slot says it is
//!    deleted), so two inserters of one key always meet: the later one's CAS fails, or
//!    its read sees the earlier one's PK at a lower or equal candidate.
//! 4. No kicks at run time: when all three candidates are taken by other keys the insert
//!    fails ([`RtInsert::Full`]; protocols abort with `index_full`).
//!
//! The loader ([`CuckooBuilder`]) kicks: a key whose three candidates are taken displaces
//! the occupant of one (a seeded random walk), which moves to one of its own,
//! up to [`CUCKOO_KICKS_MAX`] displacements. Beyond that (a long path or a cycle) the
//! index grows by [`CUCKOO_GROWTH`] and every key is placed again, at most
//! [`CUCKOO_RESIZES_MAX`] times in a row for one key. The paper gives neither the kick limit, the growth nor
//! the load; [32] grows by 1.6 and allows 3 resizes. The index is sized for the
//! table's capacity at a load of [`CUCKOO_LOAD_INITIAL`] = 0.5: a 3-way table fills to
//! about 91 % before loading fails, but run-time inserts never kick, so one finds its
//! three candidates taken with probability about load³ (12.5 % at 0.5, 42 % at 0.75).
//! At 0.5 a lookup takes 1.35 READs on average, 1.65 at 0.75 ([`CuckooStats`] reports
//! the load; `tests/cuckoo.rs` prints both).

use dmtx_verbs::{MnId, Post, RemotePtr, VerbError};

use crate::key_hash;

/// Bytes of one entry.
pub const CUCKOO_ENTRY_BYTES: u64 = 24;
/// Candidate entries per key.
pub const CUCKOO_WAYS: usize = 3;
/// Offset of the addr word in an entry.
pub const CUCKOO_ADDR_OFFSET: u64 = 0;
/// Offset of the size word in an entry.
pub const CUCKOO_SIZE_OFFSET: u64 = 8;
/// Offset of the PK word in an entry (the word a run-time insert CASes).
pub const CUCKOO_PK_OFFSET: u64 = 16;
/// Displacements the loader makes for one key before it grows the index.
pub const CUCKOO_KICKS_MAX: u32 = 256;
/// Factor the loader grows the index by when a key does not fit ([32]).
pub const CUCKOO_GROWTH: f64 = 1.6;
/// Times the loader grows the index in a row for one key before it gives up ([32]).
pub const CUCKOO_RESIZES_MAX: u32 = 3;
/// The load the index is first sized for.
pub const CUCKOO_LOAD_INITIAL: f64 = 0.5;
/// Run-time insert rounds (a lost CAS re-probes) before the insert reports a conflict.
pub const CUCKOO_INSERT_ROUNDS_MAX: u32 = 8;

/// Per-way seeds of the three hash functions.
const SEEDS: [u64; CUCKOO_WAYS] = [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9];

const _: () = assert!(CUCKOO_PK_OFFSET + 8 == CUCKOO_ENTRY_BYTES);
const _: () = assert!(CUCKOO_ADDR_OFFSET < CUCKOO_SIZE_OFFSET && CUCKOO_SIZE_OFFSET < CUCKOO_PK_OFFSET);

/// Why the cuckoo loader failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CuckooError {
    /// A key the index cannot hold (its PK word would be 0).
    #[error("table `{table}`: key {key} cannot be indexed by the cuckoo index (PK word key+1 would be 0); use keys below u64::MAX")]
    ReservedKey {
        /// Table name.
        table: String,
        /// The key.
        key: u64,
    },
    /// Growing the index [`CUCKOO_RESIZES_MAX`] times in a row did not place a key.
    #[error("table `{table}`: cuckoo index of {entries} entries still failed to place key {key} after {resizes} resizes (limit {CUCKOO_RESIZES_MAX}); the keys collide in all 3 hashes, which should not happen: report it")]
    Unplaceable {
        /// Table name.
        table: String,
        /// The key that did not fit.
        key: u64,
        /// Entries at the last try.
        entries: u64,
        /// Resizes done.
        resizes: u32,
    },
}

/// Candidate `way` (0, 1 or 2) of `key` in an index of `entries` entries (Eq. 1's hash_i).
#[inline]
pub fn cuckoo_hash(key: u64, way: usize, entries: u64) -> u64 {
    debug_assert!(entries > 0);
    key_hash(key ^ SEEDS[way]) % entries
}

/// The PK word of `key` (invariant 2).
#[inline]
pub fn pk_word(key: u64) -> u64 {
    key.wrapping_add(1)
}

/// One entry, decoded.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CuckooEntry {
    /// Table-relative offset of the record; 0 = empty (or insert in flight).
    pub addr: u64,
    /// Bytes of the record.
    pub size: u64,
    /// `key + 1`; 0 = no key.
    pub pk: u64,
}

impl CuckooEntry {
    /// Decode 24 bytes.
    #[inline]
    pub fn decode(b: &[u8]) -> Self {
        let w = |o: u64| u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().expect("8 bytes"));
        Self {
            addr: w(CUCKOO_ADDR_OFFSET),
            size: w(CUCKOO_SIZE_OFFSET),
            pk: w(CUCKOO_PK_OFFSET),
        }
    }

    /// Encode into 24 bytes.
    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.pk.to_le_bytes());
    }

    /// Whether no key holds it.
    #[inline]
    pub fn is_free(&self) -> bool {
        self.pk == 0
    }
}

/// Where one table's cuckoo index is on one memory node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CuckooPlace {
    /// The node.
    pub mn: MnId,
    /// Region offset of entry 0.
    pub base: u64,
    /// Entries.
    pub entries: u64,
}

impl CuckooPlace {
    /// Bytes of the published name value: base, entries.
    pub const NAMED_BYTES: usize = 16;

    /// The address of candidate `way` of `key`.
    #[inline]
    pub fn entry_ptr(&self, key: u64, way: usize) -> RemotePtr {
        RemotePtr::new(
            self.mn,
            self.base + CUCKOO_ENTRY_BYTES * cuckoo_hash(key, way, self.entries),
        )
    }

    /// The value published under [`cuckoo_name`].
    pub fn to_named(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.base.to_le_bytes());
        b[8..].copy_from_slice(&self.entries.to_le_bytes());
        b
    }

    /// Parse a published value of node `mn`; `None` if malformed.
    pub fn from_named(mn: MnId, b: &[u8]) -> Option<Self> {
        if b.len() != Self::NAMED_BYTES {
            return None;
        }
        let base = u64::from_le_bytes(b[..8].try_into().ok()?);
        let entries = u64::from_le_bytes(b[8..].try_into().ok()?);
        (entries > 0).then_some(Self { mn, base, entries })
    }
}

/// The name under which table `id`'s cuckoo index is published on each of its nodes.
pub fn cuckoo_name(id: u32) -> String {
    format!("store.cuckoo.{id}")
}

/// What the loader did.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct CuckooStats {
    /// Keys indexed.
    pub keys: u64,
    /// Entries.
    pub entries: u64,
    /// Displacements made (over the last size tried).
    pub kicks: u64,
    /// Times the index grew.
    pub resizes: u32,
}

impl CuckooStats {
    /// Keys per entry.
    pub fn load(&self) -> f64 {
        self.keys as f64 / self.entries.max(1) as f64
    }
}

/// Builds one table's cuckoo index in memory (bulk loading, with kicks and resizes).
#[derive(Clone, Debug)]
pub struct CuckooBuilder {
    table: String,
    entries: Vec<CuckooEntry>,
    /// Every key inserted, in order, with its addr and size (to place again on a resize).
    keys: Vec<(u64, u64, u64)>,
    stats: CuckooStats,
    /// Xorshift state choosing which candidate a kick evicts (seeded, so loads repeat).
    victim: u64,
}

impl CuckooBuilder {
    /// An empty index for about `capacity` keys of table `table`.
    pub fn new(table: impl Into<String>, capacity: u64) -> Self {
        let n = ((capacity.max(1) as f64 / CUCKOO_LOAD_INITIAL).ceil() as u64).max(CUCKOO_WAYS as u64);
        Self::with_entries(table, n)
    }

    /// An empty index of exactly `entries` entries (tests force kicks and resizes).
    pub fn with_entries(table: impl Into<String>, entries: u64) -> Self {
        assert!(entries >= 1);
        Self {
            table: table.into(),
            entries: vec![CuckooEntry::default(); entries as usize],
            keys: Vec::new(),
            stats: CuckooStats {
                entries,
                ..CuckooStats::default()
            },
            victim: 0x2545_f491_4f6c_dd1d,
        }
    }

    /// Index `key` at table-relative `addr` (non-zero), record of `size` bytes. Keys must
    /// be unique (the table builder refuses duplicates first).
    pub fn insert(&mut self, key: u64, addr: u64, size: u64) -> Result<(), CuckooError> {
        assert!(addr != 0, "table `{}`: addr 0 means an empty entry", self.table);
        if pk_word(key) == 0 {
            return Err(CuckooError::ReservedKey {
                table: self.table.clone(),
                key,
            });
        }
        self.keys.push((key, addr, size));
        self.stats.keys += 1;
        let entry = CuckooEntry {
            addr,
            size,
            pk: pk_word(key),
        };
        if self.place(entry) {
            return Ok(());
        }
        for tried in 0.. {
            if tried >= CUCKOO_RESIZES_MAX {
                return Err(CuckooError::Unplaceable {
                    table: self.table.clone(),
                    key,
                    entries: self.stats.entries,
                    resizes: self.stats.resizes,
                });
            }
            if self.regrow() {
                return Ok(());
            }
        }
        unreachable!("the loop returns")
    }

    /// Grow by [`CUCKOO_GROWTH`] and place every key again; false if one still fails.
    fn regrow(&mut self) -> bool {
        let n = ((self.entries.len() as f64 * CUCKOO_GROWTH).ceil() as u64).max(self.entries.len() as u64 + 1);
        self.stats.resizes += 1;
        self.stats.entries = n;
        self.stats.kicks = 0;
        self.entries = vec![CuckooEntry::default(); n as usize];
        let keys = std::mem::take(&mut self.keys);
        let mut ok = true;
        for &(key, addr, size) in &keys {
            if !self.place(CuckooEntry {
                addr,
                size,
                pk: pk_word(key),
            }) {
                ok = false;
                break;
            }
        }
        self.keys = keys;
        ok
    }

    /// Place `e`, kicking up to [`CUCKOO_KICKS_MAX`] times; false (with the index
    /// possibly holding a different set of keys) when it does not fit.
    fn place(&mut self, mut e: CuckooEntry) -> bool {
        let n = self.entries.len() as u64;
        let mut came_from = u64::MAX;
        for _ in 0..=CUCKOO_KICKS_MAX {
            let key = e.pk - 1;
            for way in 0..CUCKOO_WAYS {
                let at = cuckoo_hash(key, way, n) as usize;
                if self.entries[at].is_free() {
                    self.entries[at] = e;
                    return true;
                }
            }
            // All three taken: evict the occupant of a random candidate other than the
            // one the carried key was just evicted from (a random walk; a fixed choice
            // cycles), and carry it on.
            self.victim ^= self.victim << 13;
            self.victim ^= self.victim >> 7;
            self.victim ^= self.victim << 17;
            let mut way = (self.victim % CUCKOO_WAYS as u64) as usize;
            if cuckoo_hash(key, way, n) == came_from {
                way = (way + 1) % CUCKOO_WAYS;
            }
            let at = cuckoo_hash(key, way, n);
            std::mem::swap(&mut self.entries[at as usize], &mut e);
            came_from = at;
            self.stats.kicks += 1;
        }
        false
    }

    /// What the loader did so far.
    pub fn stats(&self) -> CuckooStats {
        self.stats
    }

    /// Entries.
    pub fn entries(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Where `key` is: its candidate (0, 1 or 2) and entry, if indexed.
    pub fn find(&self, key: u64) -> Option<(usize, CuckooEntry)> {
        let n = self.entries.len() as u64;
        (0..CUCKOO_WAYS).find_map(|way| {
            let e = self.entries[cuckoo_hash(key, way, n) as usize];
            (e.pk == pk_word(key)).then_some((way, e))
        })
    }

    /// Mean READs a lookup of an indexed key takes (1 in its first candidate, 2, 3).
    pub fn mean_probes(&self) -> f64 {
        if self.keys.is_empty() {
            return 0.0;
        }
        let sum: usize = self
            .keys
            .iter()
            .map(|&(k, _, _)| self.find(k).map_or(CUCKOO_WAYS, |(w, _)| w + 1))
            .sum();
        sum as f64 / self.keys.len() as f64
    }

    /// The index's bytes, entry 0 first.
    pub fn image(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.entries.len() * CUCKOO_ENTRY_BYTES as usize];
        for (e, b) in self
            .entries
            .iter()
            .zip(out.chunks_exact_mut(CUCKOO_ENTRY_BYTES as usize))
        {
            e.encode(b);
        }
        out
    }
}

/// How a coordinator posts and waits (a `CoordCtx` in protocols, a transport in tests).
pub trait CuckooVerbs {
    /// Post `post` and wait for its completions (one round trip).
    fn post(&mut self, post: &mut Post) -> impl std::future::Future<Output = Result<(), VerbError>>;
}

/// What [`rt_lookup`] found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RtLookup {
    /// The key's entry: its record's table-relative offset and size.
    Found {
        /// Table-relative offset of the record.
        addr: u64,
        /// Bytes of the record.
        size: u64,
    },
    /// No candidate holds the key.
    Absent,
    /// A candidate holds the key with addr 0: an insert is in flight (a conflict).
    InFlight,
}

/// getRtItemAddr (§4.2.1): READ candidates 1, 2, 3 in turn (one round trip each) until
/// the PK matches. Returns the outcome and the READs taken.
pub async fn rt_lookup(
    v: &mut impl CuckooVerbs,
    place: &CuckooPlace,
    key: u64,
    post: &mut Post,
) -> Result<(RtLookup, u32), VerbError> {
    let pk = pk_word(key);
    for way in 0..CUCKOO_WAYS {
        post.clear();
        let id = post.read(place.entry_ptr(key, way), CUCKOO_ENTRY_BYTES as usize);
        v.post(post).await?;
        let e = CuckooEntry::decode(post.bytes(id));
        if e.pk == pk {
            let found = if e.addr == 0 {
                RtLookup::InFlight
            } else {
                RtLookup::Found {
                    addr: e.addr,
                    size: e.size,
                }
            };
            return Ok((found, way as u32 + 1));
        }
    }
    Ok((RtLookup::Absent, CUCKOO_WAYS as u32))
}

/// What [`rt_insert`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RtInsert {
    /// This caller's entry holds the key now, at candidate `way`.
    Inserted {
        /// The candidate (0, 1, 2).
        way: u32,
    },
    /// The key is indexed already (at `addr`), or being inserted by someone else
    /// (`addr` = 0).
    Exists {
        /// The record's offset; 0 = an insert in flight.
        addr: u64,
    },
    /// All three candidates hold other keys (no run-time kicks): abort `index_full`.
    Full,
    /// Lost [`CUCKOO_INSERT_ROUNDS_MAX`] CAS races in a row.
    Contended,
}

/// A run-time insert of `key` → (`addr`, `size`) (not in the paper; invariant 3): READ
/// the three candidates (one round trip), CAS the PK word of the lowest free one; a lost
/// CAS re-probes. Then one WRITE of addr and size. Two round trips when uncontended.
pub async fn rt_insert(
    v: &mut impl CuckooVerbs,
    place: &CuckooPlace,
    key: u64,
    addr: u64,
    size: u64,
    post: &mut Post,
) -> Result<RtInsert, VerbError> {
    assert!(addr != 0, "addr 0 means an empty entry");
    let pk = pk_word(key);
    assert!(pk != 0, "key u64::MAX cannot be indexed (invariant 2)");
    for _ in 0..CUCKOO_INSERT_ROUNDS_MAX {
        post.clear();
        let ids: [_; CUCKOO_WAYS] =
            std::array::from_fn(|way| post.read(place.entry_ptr(key, way), CUCKOO_ENTRY_BYTES as usize));
        v.post(post).await?;
        let seen: [CuckooEntry; CUCKOO_WAYS] = std::array::from_fn(|w| CuckooEntry::decode(post.bytes(ids[w])));
        if let Some(e) = seen.iter().find(|e| e.pk == pk) {
            return Ok(RtInsert::Exists { addr: e.addr });
        }
        let Some(way) = seen.iter().position(CuckooEntry::is_free) else {
            return Ok(RtInsert::Full);
        };
        let at = place.entry_ptr(key, way);
        post.clear();
        let cas = post.cas(RemotePtr::new(at.mn, at.offset + CUCKOO_PK_OFFSET), 0, pk);
        v.post(post).await?;
        let old = post.old(cas);
        if old == pk {
            return Ok(RtInsert::Exists { addr: 0 });
        }
        if old != 0 {
            // Another key (or this one, by a racer) took it: look again.
            continue;
        }
        post.clear();
        let mut words = [0u8; 16];
        words[..8].copy_from_slice(&addr.to_le_bytes());
        words[8..].copy_from_slice(&size.to_le_bytes());
        post.write(at, &words);
        v.post(post).await?;
        return Ok(RtInsert::Inserted { way: way as u32 });
    }
    Ok(RtInsert::Contended)
}

/// The cuckoo index of a built table: every occupied slot of its buckets (hashed and
/// overflow), keyed by the layout, at its table-relative offset. `bytes(offset, len)`
/// reads the table image.
pub(crate) fn index_image<'a>(
    spec: &crate::TableSpec,
    shape: &crate::Shape,
    layout: &dyn crate::SlotLayout,
    bytes: impl Fn(usize, usize) -> &'a [u8],
) -> Result<CuckooBuilder, CuckooError> {
    let mut b = CuckooBuilder::new(spec.name.clone(), spec.capacity);
    for bucket in 0..shape.bucket_count + shape.overflow_count {
        for s in 0..shape.slots {
            let off = shape.slot_off(bucket, s);
            if let Some(key) = layout.key(bytes(off as usize, shape.slot_bytes as usize)) {
                b.insert(key, off, shape.slot_bytes as u64)?;
            }
        }
    }
    Ok(b)
}

/// Allocate and load `index` on every replica node, and publish its place there under
/// [`cuckoo_name`].
pub(crate) fn ship(
    control: &dyn dmtx_memnode::Control,
    table: u32,
    index: &CuckooBuilder,
    replicas: &[MnId],
) -> crate::Result<()> {
    let image = index.image();
    const LOAD_CHUNK_BYTES: usize = 4 << 20;
    for &mn in replicas {
        let base = control.alloc(mn, image.len() as u64, 64)?;
        for (i, chunk) in image.chunks(LOAD_CHUNK_BYTES).enumerate() {
            control.load(mn, base + (i * LOAD_CHUNK_BYTES) as u64, chunk)?;
        }
        let place = CuckooPlace {
            mn,
            base,
            entries: index.entries(),
        };
        control.put_named(mn, &cuckoo_name(table), &place.to_named())?;
    }
    Ok(())
}
