//! Motor's memory store (§4): the CVT in a hash-bucket slot, and the Vpkgs and
//! attribute bars in the table's value region. Byte counts are in the module doc.

use dmtx_store::{
    attrs_bytes, Attr, RegionBytes, Result, SlotLayout, StoreError, TableFormat, TableSpec, ValueArea,
    VALUE_REGION_HEADER_BYTES,
};

use crate::onever::tear::checksum;

/// Header: lock word (owner `coordinator + 1`, 0 free).
pub const H_LOCK: usize = 0;
/// Header: table id (`u32`) and the occupied flag (`u32`, 1 once a key was placed).
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
pub const VCELL_BYTES: usize = 48;
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
/// Vcell: checksum of the cell's other bytes (`u32`).
const C_CHECK: usize = 40;
/// Vcell: VcellEA.
const C_EA: usize = 47;

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
        out[C_EA] = self.anchor;
        let check = cell_check(out);
        out[C_CHECK..C_CHECK + 4].copy_from_slice(&check.to_le_bytes());
    }
}

/// The check of a cell's bytes other than the check itself.
fn cell_check(cell: &[u8]) -> u32 {
    let mut head = [0u8; 48];
    head[..C_CHECK].copy_from_slice(&cell[..C_CHECK]);
    head[C_EA] = cell[C_EA];
    let h = checksum(word(&head, 0), word(&head, 8), word(&head, 16), &head[24..]);
    (h as u32) | 1
}

/// A cell read back: `None` when it was never written (all zero), `Err` when its bytes
/// mix two writes (the anchors differ, or the check fails).
pub fn decode_cell(cvt: &[u8], index: usize) -> Option<std::result::Result<Vcell, ()>> {
    let c = &cvt[HEADER_BYTES + index * VCELL_BYTES..][..VCELL_BYTES];
    if c.iter().all(|&b| b == 0) {
        return None;
    }
    let check = u32::from_le_bytes(c[C_CHECK..C_CHECK + 4].try_into().unwrap());
    if c[C_SA] != c[C_EA] || check != cell_check(c) {
        return Some(Err(()));
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
    /// VpkgPtr.
    pub vpkg: u64,
    /// Its valid Vcells.
    pub cells: Vec<Vcell>,
    /// Indices of cells that are not valid (free for a new version).
    pub free: Vec<usize>,
}

impl Cvt {
    /// Decode `bytes` (a whole CVT); `Err` when a cell is torn.
    pub fn decode(bytes: &[u8], vnum: u32) -> std::result::Result<Cvt, ()> {
        let mut cvt = Cvt {
            lock: word(bytes, H_LOCK),
            occupied: word(bytes, H_TABLE) >> 32 != 0,
            key: word(bytes, H_KEY),
            bar: word(bytes, H_BAR),
            vpkg: word(bytes, H_VPKG),
            ..Default::default()
        };
        for i in 0..vnum as usize {
            match decode_cell(bytes, i) {
                None => cvt.free.push(i),
                Some(Err(())) => return Err(()),
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
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The version the snapshot holds.
    Version(Vcell),
    /// The key did not exist at the snapshot (no version at or below it, and the oldest
    /// kept is an insert into a fresh CVT, or there is none).
    Absent,
    /// The version the snapshot holds was reclaimed.
    Gone,
}

/// The version `snap` sees: the largest valid version `<= snap`. The valid versions of
/// a CVT are always the newest ones of its history (GC reclaims the oldest first, and a
/// bar reclaim invalidates every version up to the newest reclaimed), so the largest
/// one at or below `snap` is the snapshot's.
pub fn pick(cvt: &Cvt, snap: u64) -> Pick {
    if let Some(c) = cvt.cells.iter().filter(|c| c.version <= snap).max_by_key(|c| c.version) {
        return Pick::Version(*c);
    }
    match cvt.oldest() {
        None => Pick::Absent,
        Some(o) if o.flags & FIRST != 0 => Pick::Absent,
        Some(_) => Pick::Gone,
    }
}

/// The Vcells whose old attributes rebuild version `v` from the newest full value,
/// newest first.
pub fn newer_than(cvt: &Cvt, v: u64) -> Vec<Vcell> {
    let mut cells: Vec<Vcell> = cvt.cells.iter().filter(|c| c.version > v).copied().collect();
    cells.sort_by_key(|c| std::cmp::Reverse(c.version));
    cells
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
    checksum(version, anchor as u64, 0x6d6f_746f_72, value)
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
        checksum(version, packed.len() as u64, 0x6261_72, packed)
    }
}

/// Bytes the old attributes of a cell take in the bar.
pub fn entry_bytes(attrs: &[Attr], value_bytes: u32, c: &Vcell) -> u32 {
    attrs_bytes(attrs, value_bytes, c.bitmap)
}

/// The CVT header of a record.
pub fn encode_header(table: u32, key: u64, bar: u64, vpkg: u64, out: &mut [u8]) {
    put(out, H_TABLE, table as u64 | 1 << 32);
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

/// Motor's slot layout: VNum per table, the value region sized for the loaded Vpkgs and
/// the coordinators' delta spaces.
#[derive(Clone, Debug)]
pub struct MotorLayout {
    /// VNum of every table without an override.
    pub vnum: u32,
    /// Per-table VNum overrides, by table name.
    pub vnum_tables: Vec<(String, u32)>,
    /// Bytes of each coordinator's delta space in each table.
    pub delta_bytes: u64,
    /// Delta spaces reserved in each table.
    pub delta_spaces: u32,
    /// Attribute-bar size override in bytes (0: `VNum × value`).
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

    /// Bytes of a table's attribute bar (ABS).
    pub fn bar_bytes_of(&self, vnum: u32, value_bytes: u32) -> u32 {
        if self.bar_bytes > 0 {
            self.bar_bytes
        } else {
            // No sampled TotAttrSize frequencies: one size, the whole value, always.
            attr_bar_bytes(vnum, &[(value_bytes, 1.0)]).next_multiple_of(8)
        }
    }

    /// Bytes of the delta spaces of one table.
    pub fn delta_area_bytes(&self) -> u64 {
        self.delta_bytes * self.delta_spaces as u64
    }
}

impl SlotLayout for MotorLayout {
    fn slot_bytes(&self, _value_bytes: u32) -> u32 {
        cvt_bytes(self.vnum) as u32
    }

    /// The CVT of a loaded record without its value (that needs the value region:
    /// [`SlotLayout::encode_record`]); its VpkgPtr is 0.
    fn encode(&self, table: u32, key: u64, _value: &[u8], slot: &mut [u8]) {
        encode_header(table, key, 0, 0, slot);
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
        let region = VALUE_REGION_HEADER_BYTES + spec.initial * per_record as u64 + self.delta_area_bytes();
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
        encode_header(spec.id, key, 0, at, slot);
        loaded_cell().encode(&mut slot[cell_off(0)..]);
        Ok(())
    }

    fn value_into(&self, slot: &[u8], region: &RegionBytes<'_>, out: &mut [u8]) -> Result<()> {
        let vnum = Self::vnum_of_slot(slot.len() as u32);
        let cvt = Cvt::decode(slot, vnum).map_err(|()| StoreError::AttrSchema {
            table: "motor".into(),
            detail: "a torn CVT in a quiesced table".into(),
        })?;
        let bytes = region.get(cvt.vpkg, vpkg_bytes(out.len() as u32))?;
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
        };
        let mut cvt = vec![0u8; cvt_bytes(3)];
        c.encode(&mut cvt[cell_off(2)..]);
        assert_eq!(decode_cell(&cvt, 2), Some(Ok(c)));
        assert_eq!(decode_cell(&cvt, 0), None);
        let mut other = c;
        other.version = 100;
        other.anchor = 8;
        let mut new = vec![0u8; VCELL_BYTES];
        other.encode(&mut new);
        // Any one 8-byte word of the new cell over the old one is a tear.
        for w in 0..VCELL_BYTES / 8 {
            let mut mixed = cvt.clone();
            let at = cell_off(2) + 8 * w;
            mixed[at..at + 8].copy_from_slice(&new[8 * w..8 * w + 8]);
            assert_eq!(decode_cell(&mixed, 2), Some(Err(())), "word {w}");
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
    fn a_snapshot_picks_the_largest_version_at_or_below_it() {
        let mk = |i, version, flags| Vcell {
            index: i,
            valid: true,
            version,
            flags,
            ..Default::default()
        };
        let cvt = Cvt {
            occupied: true,
            cells: vec![mk(0, 9, 0), mk(1, 5, 0), mk(2, 14, 0)],
            ..Default::default()
        };
        assert_eq!(pick(&cvt, 12), Pick::Version(mk(0, 9, 0)));
        assert_eq!(pick(&cvt, 14), Pick::Version(mk(2, 14, 0)));
        assert_eq!(pick(&cvt, 4), Pick::Gone);
        assert_eq!(newer_than(&cvt, 5).iter().map(|c| c.version).collect::<Vec<_>>(), [14, 9]);
        let fresh = Cvt {
            occupied: true,
            cells: vec![mk(0, 9, FIRST)],
            ..Default::default()
        };
        assert_eq!(pick(&fresh, 4), Pick::Absent);
    }
}
