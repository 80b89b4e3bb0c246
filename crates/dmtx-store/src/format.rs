//! A table's format: the size of its slots, its value region, and its value's
//! attributes.
//!
//! A protocol chooses the format of each table ([`SlotLayout::format`]): FORD and FaRM
//! keep the value in the slot, so their format is the slot size alone; Motor sizes a
//! table's slots from that table's VNum and keeps values in a value region beside the
//! buckets (Motor §4.1–4.2). The workload declares the attributes of each table's value
//! ([`TableSpec::with_attrs`]); a protocol that stores only the attributes a write
//! changed diffs values with [`attrs_changed`], packs them with [`pack_attrs`] and
//! assembles an older value into a buffer with [`unpack_attrs`].
//!
//! ```text
//! value region (table-relative, after the buckets, page-aligned):
//!   [header 64 B: word 0 = cursor, the region-relative offset of the first free byte]
//!   [values the loader wrote, in load order][room handed out by FAA on the cursor]...
//! ```

use std::borrow::Cow;

pub use dmtx_memnode::{Attr, ValueRegion};

use crate::image::Image;
use crate::{Result, SlotLayout, StoreError, TableSpec};

/// Bytes at the start of a value region before its first value: the cursor word, padded
/// so values start cacheline-aligned.
pub const VALUE_REGION_HEADER_BYTES: u64 = 64;
/// Region-relative offset of the value region's cursor: the region-relative offset of
/// its first byte not yet handed out. The loader leaves it past the values it wrote;
/// a coordinator reserves room with FAA on it (and must check the result against the
/// region's size).
pub const VALUE_REGION_CURSOR_OFFSET: u64 = 0;
/// Most attributes a value declares (a set of attributes is one `u64` bitmap).
pub const ATTRS_MAX: usize = dmtx_memnode::server::wire::ATTRS_MAX;

/// How one table is laid out on a memory node, as its protocol chooses
/// ([`SlotLayout::format`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TableFormat {
    /// Bytes of one slot, a non-zero multiple of 8.
    pub slot_bytes: u32,
    /// Bytes of the table's value region on each replica, its 64-byte header included;
    /// 0 for none.
    pub value_region_bytes: u64,
    /// Bytes the loader writes into the value region per loaded record (its value and
    /// whatever the protocol keeps with it, aligned): the region must hold the header and
    /// this much per loaded record, and the memory plan counts it as resident.
    pub region_bytes_per_record: u32,
    /// The knob that sizes the value region, named when it is too small.
    pub value_region_knob: Option<&'static str>,
}

impl TableFormat {
    /// Values in the slot, slots of `slot_bytes`: FORD's and FaRM's format.
    pub const fn in_slot(slot_bytes: u32) -> Self {
        Self {
            slot_bytes,
            value_region_bytes: 0,
            region_bytes_per_record: 0,
            value_region_knob: None,
        }
    }

    /// This format with a value region of `bytes` (header included), into which the
    /// loader writes `per_record` bytes per loaded record, sized by `knob`.
    pub const fn with_value_region(mut self, bytes: u64, per_record: u32, knob: Option<&'static str>) -> Self {
        self.value_region_bytes = bytes;
        self.region_bytes_per_record = per_record;
        self.value_region_knob = knob;
        self
    }

    /// Region bytes the loader writes for `records` records, the header included.
    pub fn loaded_region_bytes(&self, records: u64) -> u64 {
        VALUE_REGION_HEADER_BYTES + records * self.region_bytes_per_record as u64
    }
}

/// Check `spec` for a table laid out by `layout`, once, before anything is built: its
/// attribute schema tiles the value, and its value region (if the format has one) holds
/// the header and the values of every loaded record.
pub fn check_spec(spec: &TableSpec, layout: &dyn SlotLayout) -> Result<()> {
    check_attrs(&spec.name, spec.value_bytes, &spec.attrs)?;
    let f = layout.format(spec);
    if f.value_region_bytes > 0 {
        let need = f.loaded_region_bytes(spec.initial);
        if f.value_region_bytes < need {
            return Err(StoreError::ValueRegionTooSmall {
                table: spec.name.clone(),
                bytes: f.value_region_bytes,
                need,
                records: spec.initial,
                per_record: f.region_bytes_per_record,
                fix: knob_fix(f.value_region_knob),
            });
        }
    }
    Ok(())
}

/// What to do about a value region that is too small.
pub(crate) fn knob_fix(knob: Option<&'static str>) -> String {
    match knob {
        Some(k) => format!("raise `{k}`"),
        None => "the protocol's table format sizes it: raise the protocol's region knob".into(),
    }
}

/// Check that `attrs` tile `0..value_bytes` in offset order: each non-empty, each
/// starting where the one before ended, the last ending at `value_bytes`, at most
/// [`ATTRS_MAX`], names unique and non-empty. An empty list (no schema declared) passes:
/// the value is then one attribute ([`TableSpec::schema`]).
pub fn check_attrs(table: &str, value_bytes: u32, attrs: &[Attr]) -> Result<()> {
    let bad = |detail: String| {
        Err(StoreError::AttrSchema {
            table: table.to_owned(),
            detail,
        })
    };
    if attrs.is_empty() {
        return Ok(());
    }
    if attrs.len() > ATTRS_MAX {
        return bad(format!("declares {} attributes, at most {ATTRS_MAX}", attrs.len()));
    }
    let mut at = 0u32;
    for (i, a) in attrs.iter().enumerate() {
        if a.name.is_empty() {
            return bad(format!("attribute #{i} (offset {}) has no name", a.offset));
        }
        if attrs[..i].iter().any(|b| b.name == a.name) {
            return bad(format!("names attribute `{}` twice", a.name));
        }
        if a.bytes == 0 {
            return bad(format!("attribute `{}` has 0 bytes", a.name));
        }
        if a.offset != at {
            let what = if a.offset > at { "leaves a gap" } else { "overlaps" };
            return bad(format!(
                "attribute `{}` starts at byte {}, the attributes before it end at byte {at} (it {what})",
                a.name, a.offset
            ));
        }
        at = match a.offset.checked_add(a.bytes) {
            Some(end) => end,
            None => return bad(format!("attribute `{}` ends past 2^32 bytes", a.name)),
        };
    }
    if at != value_bytes {
        return bad(format!(
            "covers {at} bytes, the value has {value_bytes} (the last attribute, `{}`, ends at byte {at})",
            attrs[attrs.len() - 1].name
        ));
    }
    Ok(())
}

/// The set of attributes whose bytes differ between `old` and `new`, bit `i` for
/// `attrs[i]` (Motor §4.2's Bitmap; an empty schema is one attribute, bit 0).
pub fn attrs_changed(attrs: &[Attr], old: &[u8], new: &[u8]) -> u64 {
    assert_eq!(old.len(), new.len(), "values of one table have one size");
    if attrs.is_empty() {
        return (old != new) as u64;
    }
    attrs.iter().enumerate().fold(0u64, |m, (i, a)| {
        let r = a.offset as usize..a.end() as usize;
        m | (((old[r.clone()] != new[r]) as u64) << i)
    })
}

/// Bytes of the attributes in `set` (Motor §4.2's TotAttrSize).
pub fn attrs_bytes(attrs: &[Attr], value_bytes: u32, set: u64) -> u32 {
    if attrs.is_empty() {
        return if set & 1 != 0 { value_bytes } else { 0 };
    }
    attrs
        .iter()
        .enumerate()
        .filter(|(i, _)| set & (1 << i) != 0)
        .map(|(_, a)| a.bytes)
        .sum()
}

/// Write the attributes of `value` in `set` back to back into `out` (an attribute
/// bar's entry), in schema order; returns the bytes written ([`attrs_bytes`]).
pub fn pack_attrs(attrs: &[Attr], set: u64, value: &[u8], out: &mut [u8]) -> usize {
    for_each_attr(attrs, value.len(), set, |r, at| {
        out[at..at + r.len()].copy_from_slice(&value[r]);
    })
}

/// Overlay the attributes in `set`, packed back to back in `packed` as [`pack_attrs`]
/// wrote them, onto `value`: how an older version is assembled in a buffer from the
/// newest full value and the attributes a later write replaced. Returns the bytes of
/// `packed` consumed.
pub fn unpack_attrs(attrs: &[Attr], set: u64, packed: &[u8], value: &mut [u8]) -> usize {
    let len = value.len();
    for_each_attr(attrs, len, set, |r, at| {
        let n = r.len();
        value[r].copy_from_slice(&packed[at..at + n]);
    })
}

/// Call `f(range in the value, offset in the packed bytes)` for each attribute in `set`.
fn for_each_attr(
    attrs: &[Attr],
    value_bytes: usize,
    set: u64,
    mut f: impl FnMut(std::ops::Range<usize>, usize),
) -> usize {
    let whole = [Attr::new("value", 0, value_bytes as u32)];
    let attrs = if attrs.is_empty() { &whole[..] } else { attrs };
    assert!(
        attrs.len() >= 64 || set >> attrs.len() == 0,
        "attribute set {set:#x} names attributes past the schema's {}",
        attrs.len()
    );
    let mut at = 0;
    for (i, a) in attrs.iter().enumerate() {
        if set & (1 << i) != 0 {
            f(a.offset as usize..a.end() as usize, at);
            at += a.bytes as usize;
        }
    }
    at
}

/// Bytes of the field a projection names: `field_bytes(|r: &T| &r.f)` is
/// `size_of` of `T::f`'s type. [`attrs!`](crate::attrs) uses it.
pub const fn field_bytes<T, F>(_field: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// The attributes of a `#[repr(C)]` record type from its fields, offsets and sizes taken
/// from the compiler: `attrs!(Record { "name" => field, "city" => address.city })`.
/// List every field (padding too) in declaration order, so the schema tiles the value
/// ([`check_attrs`]).
#[macro_export]
macro_rules! attrs {
    ($ty:ty { $($name:literal => $($field:ident).+),* $(,)? }) => {
        ::std::vec![$(
            $crate::Attr::new(
                $name,
                ::core::mem::offset_of!($ty, $($field).+) as u32,
                $crate::field_bytes(|r: &$ty| &r.$($field).+) as u32,
            )
        ),*]
    };
}

impl TableSpec {
    /// The value's attributes: those declared, or one attribute `value` over the whole
    /// value when none were.
    pub fn schema(&self) -> Cow<'_, [Attr]> {
        if self.attrs.is_empty() {
            Cow::Owned(vec![Attr::new("value", 0, self.value_bytes)])
        } else {
            Cow::Borrowed(&self.attrs)
        }
    }
}

/// A table's value region as fetched bytes (or none), addressed table-relative: what
/// [`SlotLayout::value_into`] reads a value from when the slot holds only its address.
#[derive(Copy, Clone, Debug)]
pub struct RegionBytes<'a> {
    table: &'a str,
    region: Option<ValueRegion>,
    bytes: &'a [u8],
}

impl<'a> RegionBytes<'a> {
    /// No value region: a layout that keeps values in its slots reads nothing here.
    pub fn none(table: &'a str) -> Self {
        Self {
            table,
            region: None,
            bytes: &[],
        }
    }

    /// The bytes of `region` (all of them, header included).
    pub fn new(table: &'a str, region: ValueRegion, bytes: &'a [u8]) -> Self {
        assert_eq!(bytes.len() as u64, region.bytes, "the whole value region");
        Self {
            table,
            region: Some(region),
            bytes,
        }
    }

    /// `len` bytes at table-relative offset `at`, or an error naming the table when they
    /// are not inside the region (a damaged slot).
    pub fn get(&self, at: u64, len: usize) -> Result<&'a [u8]> {
        let (offset, bytes) = self.region.map_or((0, 0), |r| (r.offset, r.bytes));
        match at.checked_sub(offset) {
            Some(rel) if rel.checked_add(len as u64).is_some_and(|end| end <= bytes) => {
                Ok(&self.bytes[rel as usize..rel as usize + len])
            }
            _ => Err(StoreError::ValueOutsideRegion {
                table: self.table.to_owned(),
                at,
                len: len as u64,
                region_offset: offset,
                region_bytes: bytes,
            }),
        }
    }
}

/// The value region of a table being built: where [`SlotLayout::encode_record`] puts a
/// value the slot only points to. Space is handed out in order and never given back.
pub struct ValueArea<'i> {
    pub(crate) table: &'i str,
    /// The table's image, when it has a value region (`None` with `region`).
    pub(crate) image: Option<&'i mut Image>,
    pub(crate) region: Option<ValueRegion>,
    /// Region-relative offset of the first free byte.
    pub(crate) cursor: &'i mut u64,
    pub(crate) knob: Option<&'static str>,
}

impl ValueArea<'_> {
    /// Reserve `len` bytes aligned to `align` (a power of two) and return their
    /// table-relative offset and the bytes, zeroed, to fill.
    pub fn alloc(&mut self, len: usize, align: u64) -> Result<(u64, &mut [u8])> {
        assert!(align.is_power_of_two(), "alignment {align} is not a power of two");
        let (Some(region), Some(image)) = (self.region, self.image.as_deref_mut()) else {
            return Err(StoreError::NoValueRegion {
                table: self.table.to_owned(),
            });
        };
        let at = self.cursor.next_multiple_of(align);
        let end = at + len as u64;
        if end > region.bytes {
            return Err(StoreError::ValueRegionFull {
                table: self.table.to_owned(),
                bytes: region.bytes,
                asked: len as u64,
                free: region.bytes - *self.cursor,
                fix: knob_fix(self.knob),
            });
        }
        *self.cursor = end;
        let abs = region.offset + at;
        Ok((abs, image.get_mut(abs as usize, len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn schema() -> Vec<Attr> {
        vec![Attr::new("a", 0, 4), Attr::new("b", 4, 8), Attr::new("c", 12, 4)]
    }

    #[test]
    fn a_schema_must_tile_the_value_and_the_error_names_the_attribute() {
        check_attrs("t", 16, &schema()).unwrap();
        check_attrs("t", 16, &[]).unwrap();
        let cases: [(Vec<Attr>, u32, &str); 6] = [
            (schema(), 20, "covers 16 bytes, the value has 20"),
            (
                vec![Attr::new("a", 0, 4), Attr::new("b", 6, 10)],
                16,
                "`b` starts at byte 6, the attributes before it end at byte 4 (it leaves a gap)",
            ),
            (vec![Attr::new("a", 0, 4), Attr::new("b", 2, 14)], 16, "(it overlaps)"),
            (vec![Attr::new("a", 0, 0), Attr::new("b", 0, 16)], 16, "`a` has 0 bytes"),
            (
                vec![Attr::new("a", 0, 8), Attr::new("a", 8, 8)],
                16,
                "names attribute `a` twice",
            ),
            (
                (0..65).map(|i| Attr::new(format!("f{i}"), i, 1)).collect(),
                65,
                "declares 65 attributes, at most 64",
            ),
        ];
        for (attrs, value_bytes, want) in cases {
            let e = check_attrs("stock", value_bytes, &attrs).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(e.starts_with("table `stock`: attribute schema"), "{e}");
            assert!(e.contains("TableSpec::with_attrs"), "the fix is named: {e}");
        }
    }

    #[test]
    fn an_undeclared_schema_is_the_whole_value() {
        let spec = TableSpec::new(0, "t", 24, 10);
        assert_eq!(&*spec.schema(), &[Attr::new("value", 0, 24)]);
        let spec = spec.with_attrs(vec![Attr::new("x", 0, 8), Attr::new("y", 8, 16)]);
        assert_eq!(spec.schema().len(), 2);
        assert_eq!(attrs_changed(&[], &[1, 2], &[1, 3]), 1);
        assert_eq!(attrs_changed(&[], &[1, 2], &[1, 2]), 0);
        assert_eq!(attrs_bytes(&[], 24, 1), 24);
    }

    proptest! {
        /// Goal: an old value is rebuilt exactly from the new one and the attributes the
        /// write changed. Method: random old and new values over a fixed schema; diff,
        /// pack the old attributes, overlay them on the new value, compare with the old.
        #[test]
        fn an_old_value_is_assembled_from_the_new_one_and_the_changed_attributes(
            old in prop::collection::vec(any::<u8>(), 16),
            changes in prop::collection::vec((0usize..16, any::<u8>()), 0..6),
        ) {
            let attrs = schema();
            let mut new = old.clone();
            for (i, b) in changes { new[i] = b; }
            let set = attrs_changed(&attrs, &old, &new);
            for (i, a) in attrs.iter().enumerate() {
                let r = a.offset as usize..a.end() as usize;
                prop_assert_eq!(set & (1 << i) != 0, old[r.clone()] != new[r]);
            }
            let mut bar = vec![0u8; 16];
            let n = pack_attrs(&attrs, set, &old, &mut bar);
            prop_assert_eq!(n as u32, attrs_bytes(&attrs, 16, set));
            let mut value = new.clone();
            prop_assert_eq!(unpack_attrs(&attrs, set, &bar[..n], &mut value), n);
            prop_assert_eq!(value, old);
        }
    }

    #[test]
    fn attrs_takes_offsets_and_sizes_from_the_record_type() {
        #[repr(C)]
        struct Inner {
            x: [u8; 3],
            y: u8,
        }
        #[repr(C)]
        struct Rec {
            a: u64,
            inner: Inner,
            b: u32,
        }
        let attrs = crate::attrs!(Rec { "a" => a, "x" => inner.x, "y" => inner.y, "b" => b });
        assert_eq!(
            attrs,
            vec![
                Attr::new("a", 0, 8),
                Attr::new("x", 8, 3),
                Attr::new("y", 11, 1),
                Attr::new("b", 12, 4)
            ]
        );
        check_attrs("rec", std::mem::size_of::<Rec>() as u32, &attrs).unwrap();
    }

    #[test]
    fn region_bytes_refuse_reads_outside_the_region() {
        let bytes = [7u8; 128];
        let r = RegionBytes::new(
            "t",
            ValueRegion {
                offset: 4096,
                bytes: 128,
            },
            &bytes,
        );
        assert_eq!(r.get(4096 + 64, 64).unwrap(), &[7u8; 64][..]);
        for (at, len) in [(4095, 1), (4096 + 100, 29), (u64::MAX, 2)] {
            let e = r.get(at, len).unwrap_err().to_string();
            assert!(e.contains("table `t`") && e.contains("outside its value region"), "{e}");
        }
        assert!(RegionBytes::none("t").get(0, 1).is_err());
    }
}
