//! Motor's memory store (§4): the CVT in a hash-bucket slot, and the Vpkgs and
//! attribute bars in the table's value region. Byte counts are in the module doc.

use dmtx_store::{
    attrs_bytes, Attr, RegionBytes, Result, SlotLayout, TableFormat, TableSpec, ValueArea, VALUE_REGION_HEADER_BYTES,
};

use crate::onever::tear::checksum;

/// Header: lock word (owner `coordinator + 1`, 0 free).
pub const H_LOCK: usize = 0;
/// Header: table id (bits 0..32), the occupied flag (bit 32, set once a key was placed)
/// and the attribute bar's size in bytes (bits 40..64).
pub const H_TABLE: usize = 8;
/// Header: key.
pub const H_KEY: usize = 16;
/// Header: AttrBarPtr, table-relative, 0 = no bar yet.
pub const H_BAR: usize = 24;
/// Header: VpkgPtr, table-relative.
pub const H_VPKG: usize = 32;
/// Bytes of the CVT header.
pub const HEADER_BYTES: usize = 40;

/// Bytes of one Vcell.
pub const VCELL_BYTES: usize = 56;
/// Vcell: VcellSA.
const C_SA: usize = 0;
/// Vcell: Valid.
const C_VALID: usize = 1;
/// Vcell: flags ([`TOMBSTONE`], [`FIRST`]).
const C_FLAGS: usize = 2;
/// Vcell: StartOffset (`u32`) in the attribute bar.
const C_START: usize = 4;
/// Vcell: Version (the commit timestamp; 0 as loaded).
const C_VERSION: usize = 8;
/// Vcell: the writer's transaction id (what histories name the version by).
const C_WRITER: usize = 16;
/// Vcell: Bitmap of the attributes this version changed.
const C_BITMAP: usize = 24;
/// Vcell: checksum of the old attributes this version moved into the bar.
const C_ATTR_CHECK: usize = 32;
/// Vcell: the version this one replaced (its predecessor in the record's history).
const C_PREV: usize = 40;
/// Vcell: checksum of the cell's other bytes (`u32`).
const C_CHECK: usize = 48;
/// Vcell: VcellEA.
const C_EA: usize = 55;

/// Vcell flag: the version is a delete.
pub const TOMBSTONE: u8 = 1;
/// Vcell flag: the version is an insert into a fresh CVT (nothing before it).
pub const FIRST: u8 = 2;

/// Vpkg: VpkgSA (byte 0 of the first word).
const P_SA: usize = 0;
/// Vpkg: the version the value is (the newest Vcell's).
const P_VERSION: usize = 8;
/// Vpkg: checksum over anchor, version and value.
const P_CHECK: usize = 16;
/// Vpkg: the value.
pub const P_VALUE: usize = 24;

/// Bytes of a Vpkg holding a value of `value_bytes`: SA word, version, checksum, the
/// value padded to 8, EA word.
pub fn vpkg_bytes(value_bytes: u32) -> usize {
    P_VALUE + (value_bytes as usize).next_multiple_of(8) + 8
}

/// Offset of VpkgEA in a Vpkg.
fn p_ea(value_bytes: u32) -> usize {
    vpkg_bytes(value_bytes) - 8
}

/// Bytes of a CVT with `vnum` Vcells.
pub fn cvt_bytes(vnum: u32) -> usize {
    HEADER_BYTES + vnum as usize * VCELL_BYTES
}

/// A READ returned bytes that mix two writes (anchors or check disagree).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Torn;

/// One Vcell, decoded.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Vcell {
    /// Index of the cell in its CVT.
    pub index: usize,
    /// The anchor (VcellSA = VcellEA).
    pub anchor: u8,
    /// Valid.
    pub valid: bool,
    /// [`TOMBSTONE`], [`FIRST`].
    pub flags: u8,
    /// StartOffset.
    pub start: u32,
    /// Version (commit timestamp).
    pub version: u64,
    /// Writer's transaction id.
    pub writer: u64,
    /// Bitmap.
    pub bitmap: u64,
    /// Checksum of the old attributes in the bar.
    pub attr_check: u64,
    /// The version this one replaced (0 for a [`FIRST`] one).
    pub prev: u64,
}

impl Vcell {
    /// A tombstone.
    pub fn tombstone(&self) -> bool {
        self.flags & TOMBSTONE != 0
    }

    /// The cell's bytes.
    pub fn encode(&self, out: &mut [u8]) {
        out[..VCELL_BYTES].fill(0);
        out[C_SA] = self.anchor;
        out[C_VALID] = self.valid as u8;
        out[C_FLAGS] = self.flags;
        out[C_START..C_START + 4].copy_from_slice(&self.start.to_le_bytes());
        put(out, C_VERSION, self.version);
        put(out, C_WRITER, self.writer);
        put(out, C_BITMAP, self.bitmap);
        put(out, C_ATTR_CHECK, self.attr_check);
        put(out, C_PREV, self.prev);
        out[C_EA] = self.anchor;
        let check = cell_check(out);
        out[C_CHECK..C_CHECK + 4].copy_from_slice(&check.to_le_bytes());
    }
}

/// The check of a cell's bytes other than the check itself.
fn cell_check(cell: &[u8]) -> u32 {
    let mut head = [0u8; VCELL_BYTES];
    head[..C_CHECK].copy_from_slice(&cell[..C_CHECK]);
    head[C_EA] = cell[C_EA];
    let h = checksum(word(&head, 0), word(&head, 8), word(&head, 16), &head[24..]);
    (h as u32) | 1
}

/// A cell read back: `None` when it was never written (all zero), `Err` when its bytes
/// mix two writes (the anchors differ, or the check fails).
pub fn decode_cell(cvt: &[u8], index: usize) -> Option<std::result::Result<Vcell, Torn>> {
    decode_cell_with(cvt, index, false)
}

/// [`decode_cell`]; `anchors_only` checks the anchors alone (the paper's check).
pub fn decode_cell_with(cvt: &[u8], index: usize, anchors_only: bool) -> Option<std::result::Result<Vcell, Torn>> {
    let c = &cvt[HEADER_BYTES + index * VCELL_BYTES..][..VCELL_BYTES];
    if c.iter().all(|&b| b == 0) {
        return None;
    }
    let check = u32::from_le_bytes(c[C_CHECK..C_CHECK + 4].try_into().unwrap());
    if c[C_SA] != c[C_EA] || (!anchors_only && check != cell_check(c)) {
        return Some(Err(Torn));
    }
    Some(Ok(Vcell {
        index,
        anchor: c[C_SA],
        valid: c[C_VALID] != 0,
        flags: c[C_FLAGS],
        start: u32::from_le_bytes(c[C_START..C_START + 4].try_into().unwrap()),
        version: word(c, C_VERSION),
        writer: word(c, C_WRITER),
        bitmap: word(c, C_BITMAP),
        attr_check: word(c, C_ATTR_CHECK),
        prev: word(c, C_PREV),
    }))
}

/// A CVT read back.
#[derive(Clone, Debug, Default)]
pub struct Cvt {
    /// Lock word.
    pub lock: u64,
    /// A key was placed.
    pub occupied: bool,
    /// The key.
    pub key: u64,
    /// AttrBarPtr (0 = none).
    pub bar: u64,
    /// Bytes of the attribute bar.
    pub bar_bytes: u32,
    /// VpkgPtr.
    pub vpkg: u64,
    /// Its valid Vcells.
    pub cells: Vec<Vcell>,
    /// Indices of cells that are not valid (free for a new version).
    pub free: Vec<usize>,
}

impl Cvt {
    /// Decode `bytes` (a whole CVT); `Err` when a cell is torn.
    pub fn decode(bytes: &[u8], vnum: u32) -> std::result::Result<Cvt, Torn> {
        Self::decode_with(bytes, vnum, false)
    }

    /// [`Cvt::decode`]; `anchors_only` checks each Vcell's anchors alone.
    pub fn decode_with(bytes: &[u8], vnum: u32, anchors_only: bool) -> std::result::Result<Cvt, Torn> {
        let mut cvt = Cvt {
            lock: word(bytes, H_LOCK),
            occupied: word(bytes, H_TABLE) >> 32 & 1 != 0,
            bar_bytes: (word(bytes, H_TABLE) >> 40) as u32,
            key: word(bytes, H_KEY),
            bar: word(bytes, H_BAR),
            vpkg: word(bytes, H_VPKG),
            ..Default::default()
        };
        for i in 0..vnum as usize {
            match decode_cell_with(bytes, i, anchors_only) {
                None => cvt.free.push(i),
                Some(Err(Torn)) => return Err(Torn),
                Some(Ok(c)) if !c.valid => cvt.free.push(i),
                Some(Ok(c)) => cvt.cells.push(c),
            }
        }
        Ok(cvt)
    }

    /// The newest valid version.
    pub fn newest(&self) -> Option<&Vcell> {
        self.cells.iter().max_by_key(|c| c.version)
    }

    /// The oldest valid version.
    pub fn oldest(&self) -> Option<&Vcell> {
        self.cells.iter().min_by_key(|c| c.version)
    }

    /// Whether the key is live: occupied and its newest version is not a delete.
    pub fn live(&self) -> bool {
        self.occupied && self.newest().is_some_and(|c| !c.tombstone())
    }
}

/// What a snapshot `snap` (inclusive) sees of a CVT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The version the snapshot holds, and the Vcells from the newest seen down to (not
    /// including) it, newest first: their old attributes rebuild it from the newest
    /// full value.
    Version(Vcell, Vec<Vcell>),
    /// The key did not exist at the snapshot.
    Absent,
    /// The version the snapshot holds, or one between it and the newest, is not among
    /// the cells read (reclaimed by GC, or overwritten while the CVT was being read).
    Gone,
}

/// The version `snap` sees, from cells that need not be one moment's: a READ racing
/// writers may return some cells before and some after a GC overwrote them. Every cell
/// names the version it replaced (`prev`), so the choice rests on what the cells prove
/// (every version `<= snap` was installed before the READ began):
/// - no cell holds a version above `snap`: the snapshot's version was never overwritten
///   while being read (a version above `snap` would show where it was), so it is the
///   largest seen;
/// - some do: the one whose `prev <= snap` is the snapshot version's successor, so its
///   `prev` names the snapshot's version (or, for a [`FIRST`] successor, the key's
///   absence); the successor not seen, or the version it names not seen, is `Gone`.
///
/// The chain from the newest seen cell down to the snapshot's version must be complete
/// (each cell's `prev` seen), or the value cannot be rebuilt: `Gone`.
pub fn pick(cvt: &Cvt, snap: u64) -> Pick {
    let find = |v: u64| cvt.cells.iter().find(|c| c.version == v).copied();
    let v = if cvt.cells.iter().all(|c| c.version <= snap) {
        match cvt.newest() {
            None => return Pick::Absent,
            Some(v) => *v,
        }
    } else {
        let Some(succ) = cvt.cells.iter().find(|c| c.version > snap && c.prev <= snap) else {
            return Pick::Gone;
        };
        if succ.flags & FIRST != 0 {
            return Pick::Absent;
        }
        match find(succ.prev) {
            Some(v) => v,
            None => return Pick::Gone,
        }
    };
    let mut chain = Vec::new();
    let mut cur = *cvt.newest().unwrap();
    while cur.version != v.version {
        chain.push(cur);
        match find(cur.prev) {
            Some(p) if p.version < cur.version => cur = p,
            _ => return Pick::Gone,
        }
    }
    Pick::Version(v, chain)
}

/// The paper's choice (§5.1), trusting one READ of the CVT to be one moment's: the
/// largest valid version `<= snap`, rebuilt from every valid Vcell above it. Used only
/// by [`crate::motor::MotorVariant::AnchorsOnly`].
pub fn pick_paper(cvt: &Cvt, snap: u64) -> Pick {
    let Some(v) = cvt.cells.iter().filter(|c| c.version <= snap).max_by_key(|c| c.version) else {
        return match cvt.oldest() {
            Some(o) if o.flags & FIRST == 0 => Pick::Gone,
            _ => Pick::Absent,
        };
    };
    let mut chain: Vec<Vcell> = cvt.cells.iter().filter(|c| c.version > v.version).copied().collect();
    chain.sort_by_key(|c| std::cmp::Reverse(c.version));
    Pick::Version(*v, chain)
}

/// Write a Vpkg for `value` at `version` with `anchor` into `out` ([`vpkg_bytes`]).
pub fn encode_vpkg(anchor: u8, version: u64, value: &[u8], out: &mut [u8]) {
    let n = vpkg_bytes(value.len() as u32);
    out[..n].fill(0);
    out[P_SA] = anchor;
    put(out, P_VERSION, version);
    out[P_VALUE..P_VALUE + value.len()].copy_from_slice(value);
    put(out, P_CHECK, vpkg_check(anchor, version, value));
    out[p_ea(value.len() as u32)] = anchor;
}

fn vpkg_check(anchor: u8, version: u64, value: &[u8]) -> u64 {
    checksum(version, anchor as u64, 0x006d_6f74_6f72, value)
}

/// A Vpkg read back.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Vpkg {
    /// VpkgSA.
    pub sa: u8,
    /// VpkgEA.
    pub ea: u8,
    /// Version word.
    pub version: u64,
    /// The checksum holds over anchor, version and value.
    pub intact: bool,
}

/// Decode the Vpkg in `bytes` for values of `value_bytes`.
pub fn decode_vpkg(bytes: &[u8], value_bytes: u32) -> Vpkg {
    let version = word(bytes, P_VERSION);
    let value = &bytes[P_VALUE..P_VALUE + value_bytes as usize];
    Vpkg {
        sa: bytes[P_SA],
        ea: bytes[p_ea(value_bytes)],
        version,
        intact: word(bytes, P_CHECK) == vpkg_check(bytes[P_SA], version, value),
    }
}

/// The value bytes of a Vpkg.
pub fn vpkg_value(bytes: &[u8], value_bytes: u32) -> &[u8] {
    &bytes[P_VALUE..P_VALUE + value_bytes as usize]
}

/// The checksum of a bar entry: the old attributes a version moved into the bar.
pub fn attr_check(version: u64, packed: &[u8]) -> u64 {
    if packed.is_empty() {
        0
    } else {
        checksum(version, packed.len() as u64, 0x0062_6172, packed)
    }
}

/// Bytes the old attributes of a cell take in the bar.
pub fn entry_bytes(attrs: &[Attr], value_bytes: u32, c: &Vcell) -> u32 {
    attrs_bytes(attrs, value_bytes, c.bitmap)
}

/// Most bytes of an attribute bar (24 bits of the header word).
pub const BAR_BYTES_MAX: u32 = (1 << 24) - 1;

/// The CVT header of a record whose bar (at `bar`) has `bar_bytes`.
pub fn encode_header(table: u32, key: u64, bar: u64, bar_bytes: u32, vpkg: u64, out: &mut [u8]) {
    assert!(bar_bytes <= BAR_BYTES_MAX, "an attribute bar of {bar_bytes} bytes");
    put(out, H_TABLE, table as u64 | 1 << 32 | (bar_bytes as u64) << 40);
    put(out, H_KEY, key);
    put(out, H_BAR, bar);
    put(out, H_VPKG, vpkg);
}

/// Offset of Vcell `i` in a CVT.
pub fn cell_off(i: usize) -> usize {
    HEADER_BYTES + i * VCELL_BYTES
}

/// Little-endian word at `at`.
#[inline]
pub fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[inline]
fn put(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Attribute bar size (§4.2): `Σ max(⌊VNum × freq_i⌋, 1) × size_i` over the
/// TotAttrSizes a table's writes change, with their frequencies.
pub fn attr_bar_bytes(vnum: u32, tot_attr_sizes: &[(u32, f64)]) -> u32 {
    tot_attr_sizes
        .iter()
        .map(|&(size, freq)| ((vnum as f64 * freq).floor() as u32).max(1) * size)
        .sum()
}

/// Least bytes of a delta space sized from its table (a small table's share of its
/// wanted area would not hold a bar).
pub const DELTA_SPACE_MIN_BYTES: u64 = 4096;

/// Motor's slot layout: VNum per table, the value region sized for the loaded Vpkgs and
/// the coordinators' delta spaces.
#[derive(Clone, Debug)]
pub struct MotorLayout {
    /// VNum of every table without an override.
    pub vnum: u32,
    /// Per-table VNum overrides, by table name.
    pub vnum_tables: Vec<(String, u32)>,
    /// Bytes of each coordinator's delta space in each table; 0: sized from the table.
    pub delta_bytes: u64,
    /// Delta spaces reserved in each table.
    pub delta_spaces: u32,
    /// Attribute-bar size override in bytes (0: §4.2's formula over sampled sizes).
    pub bar_bytes: u32,
}

impl MotorLayout {
    /// VNum of table `name`.
    pub fn vnum_of(&self, name: &str) -> u32 {
        self.vnum_tables
            .iter()
            .find(|(n, _)| n == name)
            .map_or(self.vnum, |&(_, v)| v)
    }

    /// VNum of the table whose slots are `slot_bytes` long.
    pub fn vnum_of_slot(slot_bytes: u32) -> u32 {
        ((slot_bytes as usize - HEADER_BYTES) / VCELL_BYTES) as u32
    }

    /// Bytes of a new attribute bar (ABS, §4.2) from the TotAttrSizes sampled so far
    /// (`(size, count)`), at least `need`: `bar_bytes` when set, else the paper's formula.
    pub fn bar_bytes_for(&self, vnum: u32, samples: &[(u32, u64)], need: u32) -> u32 {
        let abs = if self.bar_bytes > 0 {
            self.bar_bytes
        } else {
            let total: u64 = samples.iter().map(|s| s.1).sum();
            let freqs: Vec<(u32, f64)> = samples
                .iter()
                .map(|&(size, n)| (size, n as f64 / total.max(1) as f64))
                .collect();
            attr_bar_bytes(vnum, &freqs)
        };
        abs.max(need).next_multiple_of(8).min(BAR_BYTES_MAX & !7)
    }

    /// Bytes of the value region of a table of `spec`: loaded Vpkgs, then the delta
    /// spaces (module doc).
    pub fn region_bytes(&self, spec: &TableSpec) -> u64 {
        let vpkg = vpkg_bytes(spec.value_bytes) as u64;
        let loaded = VALUE_REGION_HEADER_BYTES + spec.initial * vpkg;
        if self.delta_bytes > 0 {
            return loaded + self.delta_bytes * self.delta_spaces as u64;
        }
        let wanted = spec.capacity * spec.value_bytes as u64 + spec.capacity.saturating_sub(spec.initial) * vpkg;
        let floor = DELTA_SPACE_MIN_BYTES * self.delta_spaces as u64;
        let half = loaded
            .max(wanted)
            .max(floor)
            .next_multiple_of(8 * self.delta_spaces as u64);
        2 * half
    }

    /// Bytes of each delta space of a table whose value region has `region_bytes`.
    pub fn delta_space_bytes(&self, region_bytes: u64) -> u64 {
        if self.delta_bytes > 0 {
            self.delta_bytes
        } else {
            (region_bytes / 2 / self.delta_spaces as u64) & !7
        }
    }
}

impl SlotLayout for MotorLayout {
    fn slot_bytes(&self, _value_bytes: u32) -> u32 {
        cvt_bytes(self.vnum) as u32
    }

    /// The CVT of a loaded record without its value (that needs the value region:
    /// [`SlotLayout::encode_record`]); its VpkgPtr is 0.
    fn encode(&self, table: u32, key: u64, _value: &[u8], slot: &mut [u8]) {
        encode_header(table, key, 0, 0, 0, slot);
        loaded_cell().encode(&mut slot[cell_off(0)..]);
    }

    fn key(&self, slot: &[u8]) -> Option<u64> {
        let vnum = Self::vnum_of_slot(slot.len() as u32);
        match Cvt::decode(slot, vnum) {
            Ok(c) if c.live() => Some(c.key),
            _ => None,
        }
    }

    fn format(&self, spec: &TableSpec) -> TableFormat {
        let vnum = self.vnum_of(&spec.name);
        let per_record = vpkg_bytes(spec.value_bytes) as u32;
        let region = self.region_bytes(spec);
        TableFormat::in_slot(cvt_bytes(vnum) as u32).with_value_region(region, per_record, Some("delta_bytes"))
    }

    fn encode_record(
        &self,
        spec: &TableSpec,
        key: u64,
        value: &[u8],
        slot: &mut [u8],
        values: &mut ValueArea<'_>,
    ) -> Result<()> {
        let (at, bytes) = values.alloc(vpkg_bytes(spec.value_bytes), 8)?;
        encode_vpkg(0, 0, value, bytes);
        encode_header(spec.id, key, 0, 0, at, slot);
        loaded_cell().encode(&mut slot[cell_off(0)..]);
        Ok(())
    }

    /// The newest value is the Vpkg's (VpkgPtr is one word of the header).
    fn value_into(&self, slot: &[u8], region: &RegionBytes<'_>, out: &mut [u8]) -> Result<()> {
        let bytes = region.get(word(slot, H_VPKG), vpkg_bytes(out.len() as u32))?;
        out.copy_from_slice(vpkg_value(bytes, out.len() as u32));
        Ok(())
    }
}

/// The Vcell of a loaded record: version 0, anchor 0.
fn loaded_cell() -> Vcell {
    Vcell {
        valid: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_customer_bar_is_552_bytes() {
        // §4.2: TotAttrSizes 512 B, 12 B, 4 B at 10%, 88%, 2%, VNum 4.
        assert_eq!(attr_bar_bytes(4, &[(512, 0.10), (12, 0.88), (4, 0.02)]), 552);
    }

    #[test]
    fn a_cell_round_trips_and_any_mixed_byte_is_torn() {
        let c = Vcell {
            index: 2,
            anchor: 7,
            valid: true,
            flags: TOMBSTONE,
            start: 40,
            version: 99,
            writer: 1234,
            bitmap: 0b101,
            attr_check: 77,
            prev: 98,
        };
        let mut cvt = vec![0u8; cvt_bytes(3)];
        c.encode(&mut cvt[cell_off(2)..]);
        assert_eq!(decode_cell(&cvt, 2), Some(Ok(c)));
        assert_eq!(decode_cell(&cvt, 0), None);
        // Another write of the cell: every field differs.
        let other = Vcell {
            index: 2,
            anchor: 8,
            valid: true,
            flags: 0,
            start: 48,
            version: 100,
            writer: 1235,
            bitmap: 0b11,
            attr_check: 78,
            prev: 99,
        };
        let mut new = vec![0u8; VCELL_BYTES];
        other.encode(&mut new);
        // Any one 8-byte word of the new cell over the old one is a tear.
        for w in 0..VCELL_BYTES / 8 {
            let mut mixed = cvt.clone();
            let at = cell_off(2) + 8 * w;
            mixed[at..at + 8].copy_from_slice(&new[8 * w..8 * w + 8]);
            assert_eq!(decode_cell(&mixed, 2), Some(Err(Torn)), "word {w}");
        }
    }

    #[test]
    fn a_vpkg_with_equal_anchors_and_a_mixed_middle_fails_its_check() {
        let mut a = vec![0u8; vpkg_bytes(20)];
        let mut b = a.clone();
        encode_vpkg(3, 10, &[1u8; 20], &mut a);
        encode_vpkg(4, 11, &[2u8; 20], &mut b);
        assert!(decode_vpkg(&a, 20).intact);
        // Anchors and version new, one value word old: the anchors agree, the check does not.
        let mut mixed = b.clone();
        mixed[P_VALUE..P_VALUE + 8].copy_from_slice(&a[P_VALUE..P_VALUE + 8]);
        let v = decode_vpkg(&mixed, 20);
        assert_eq!((v.sa, v.ea, v.version), (4, 4, 11));
        assert!(!v.intact);
    }

    #[test]
    fn a_snapshot_picks_its_version_from_what_the_cells_prove() {
        let mk = |i, version, prev, flags| Vcell {
            index: i,
            valid: true,
            version,
            prev,
            flags,
            ..Default::default()
        };
        let cvt = |cells: Vec<Vcell>| Cvt {
            occupied: true,
            cells,
            ..Default::default()
        };
        let full = cvt(vec![mk(0, 9, 5, 0), mk(1, 5, 0, 0), mk(2, 14, 9, 0)]);
        assert_eq!(pick(&full, 12), Pick::Version(mk(0, 9, 5, 0), vec![mk(2, 14, 9, 0)]));
        assert_eq!(pick(&full, 14), Pick::Version(mk(2, 14, 9, 0), vec![]));
        assert_eq!(
            pick(&full, 6),
            Pick::Version(mk(1, 5, 0, 0), vec![mk(2, 14, 9, 0), mk(0, 9, 5, 0)])
        );
        // Version 0 (loaded) was overwritten: a snapshot below 5 cannot be served.
        assert_eq!(pick(&full, 4), Pick::Gone);
        // A READ that saw cell 1 before and cell 0 after a GC overwrite: 9 was replaced
        // by 20 while being read. Snapshot 12's version (9) is not among the cells: its
        // successor 14 names it, so the read is `Gone`, never version 5.
        let torn = cvt(vec![mk(0, 20, 14, 0), mk(1, 5, 0, 0), mk(2, 14, 9, 0)]);
        assert_eq!(pick(&torn, 12), Pick::Gone);
        // Missing a link between the newest and the snapshot's version: `Gone`.
        let gap = cvt(vec![mk(0, 20, 14, 0), mk(1, 5, 0, 0), mk(2, 9, 5, 0)]);
        assert_eq!(pick(&gap, 12), Pick::Gone);
        let fresh = cvt(vec![mk(0, 9, 0, FIRST)]);
        assert_eq!(pick(&fresh, 4), Pick::Absent);
    }
}
