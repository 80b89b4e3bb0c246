//! The value scheme: every field carries a stamp of (key, field, writes), repeated.

use dmtx_store::key_hash;

use super::*;

/// The check word of field `field` of `key` after `writes` updates.
#[inline]
fn check32(key: u64, field: u32, writes: u32) -> u32 {
    let h = key_hash(key ^ STAMP_SEED);
    key_hash(h ^ (((field as u64) << 32) | writes as u64)) as u32
}

/// The stamp of field `field` of `key` after `writes` updates.
#[inline]
pub(super) fn stamp(key: u64, field: u32, writes: u32) -> u64 {
    ((writes as u64) << 32) | check32(key, field, writes) as u64
}

/// Fill a field with `stamp`'s bytes, repeated.
#[inline]
pub(super) fn write_field(buf: &mut [u8], stamp: u64) {
    let b = stamp.to_le_bytes();
    for chunk in buf.chunks_mut(8) {
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// The `writes` of an intact field of `key`, or `None` when torn or misplaced.
#[inline]
pub(super) fn read_field(key: u64, field: u32, buf: &[u8]) -> Option<u32> {
    let s = u64::from_le_bytes(buf[..8].try_into().expect("a field holds its stamp"));
    let writes = (s >> 32) as u32;
    if s as u32 != check32(key, field, writes) {
        return None;
    }
    let b = s.to_le_bytes();
    buf[8..]
        .chunks(8)
        .all(|chunk| chunk == &b[..chunk.len()])
        .then_some(writes)
}

/// Why a record is not intact.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Damage {
    /// A field's stamp or bytes are wrong.
    Torn { field: u32 },
    /// `update=record` but the fields carry different `writes`.
    Mixed { min: u32, max: u32 },
}

impl Ycsb {
    /// `(max writes, Σ writes)` over the fields of a record read under `key`, or why it
    /// is not intact.
    pub(super) fn damage(&self, key: u64, bytes: &[u8]) -> Result<(u32, u64), Damage> {
        let fb = self.cfg.field_bytes as usize;
        let (mut min, mut max, mut sum) = (u32::MAX, 0u32, 0u64);
        for (f, field) in bytes.chunks_exact(fb).enumerate() {
            let w = read_field(key, f as u32, field).ok_or(Damage::Torn { field: f as u32 })?;
            min = min.min(w);
            max = max.max(w);
            sum += w as u64;
        }
        if self.cfg.update == UpdateScope::Record && min != max {
            return Err(Damage::Mixed { min, max });
        }
        Ok((max, sum))
    }

    /// The record of `key` as loaded or inserted.
    pub(super) fn fill_initial(&self, key: u64, bytes: &mut [u8]) {
        for (f, field) in bytes.chunks_exact_mut(self.cfg.field_bytes as usize).enumerate() {
            write_field(field, stamp(key, f as u32, 0));
        }
    }

    /// Apply an update to an intact record; returns the fields written.
    pub(super) fn apply_update(&self, key: u64, field_arg: u64, bytes: &mut [u8]) -> u64 {
        let fb = self.cfg.field_bytes as usize;
        let mut bump = |f: usize| {
            let field = &mut bytes[f * fb..(f + 1) * fb];
            let w = read_field(key, f as u32, field).expect("updated records were checked intact");
            write_field(field, stamp(key, f as u32, w.wrapping_add(1)));
        };
        match self.cfg.update {
            UpdateScope::Record => {
                (0..self.cfg.fields as usize).for_each(&mut bump);
                self.cfg.fields as u64
            }
            UpdateScope::Field => {
                bump(field_arg as usize);
                1
            }
        }
    }
}
