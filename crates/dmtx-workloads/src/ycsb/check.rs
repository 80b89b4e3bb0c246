//! The invariants, checked on the quiesced tables (see the module doc).

use std::collections::BTreeMap;

use super::record::Damage;
use super::*;

impl Ycsb {
    /// What [`Workload::check`] runs: the invariants of the module doc, in order.
    pub(super) fn check_tables(&self, locals: &[YcsbLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        let fail = |invariant, detail: String| Err(InvariantError { invariant, detail });
        let n = self.cfg.partitions as u64;
        let by_coord: BTreeMap<u64, &YcsbLocal> = locals.iter().map(|l| (l.compact, l)).collect();
        // Inserted records found, per (coordinator, partition).
        let mut found: BTreeMap<(u64, u32), u64> = BTreeMap::new();
        let mut writes_sum: u128 = 0;
        let mut records = 0u64;
        let mut max_writes = 0u32;
        for p in 0..self.cfg.partitions {
            let mut loaded = 0u64;
            let mut prev = None;
            for (key, bytes) in snapshot.iter(p) {
                if prev == Some(key) {
                    return fail("ycsb_key_set", format!("table {p} holds key {key} twice"));
                }
                prev = Some(key);
                if bytes.len() != self.record_bytes() {
                    return fail(
                        "ycsb_record_size",
                        format!(
                            "key {key}: {}-byte value, expected {}",
                            bytes.len(),
                            self.record_bytes()
                        ),
                    );
                }
                if let Some((kp, i, c)) = self.decode_insert(key) {
                    if kp != p {
                        return fail(
                            "ycsb_partition",
                            format!("inserted key {key} belongs to table {kp} but sits in table {p}"),
                        );
                    }
                    let Some(l) = by_coord.get(&c) else {
                        return fail(
                            "ycsb_inserts",
                            format!("table {p} holds key {key}, inserted by unknown coordinator {c:#x}"),
                        );
                    };
                    if i >= l.inserted[p as usize] {
                        return fail(
                            "ycsb_inserts",
                            format!(
                                "table {p} holds insert {i} of {}, which committed only {} inserts there",
                                l.coord, l.inserted[p as usize]
                            ),
                        );
                    }
                    *found.entry((c, p)).or_default() += 1;
                } else if key < self.cfg.records {
                    if key % n != p as u64 {
                        return fail(
                            "ycsb_partition",
                            format!("key {key} belongs to table {} but sits in table {p}", key % n),
                        );
                    }
                    loaded += 1;
                } else {
                    return fail(
                        "ycsb_key_set",
                        format!(
                            "table {p} holds key {key}, neither loaded (< {}) nor inserted",
                            self.cfg.records
                        ),
                    );
                }
                match self.damage(key, bytes) {
                    Ok((max, sum)) => {
                        writes_sum += sum as u128;
                        max_writes = max_writes.max(max);
                    }
                    Err(Damage::Torn { field }) => {
                        return fail(
                            "ycsb_record_intact",
                            format!("table {p} key {key} field {field}: stamp or bytes wrong, a torn or misplaced record was installed"),
                        )
                    }
                    Err(Damage::Mixed { min, max }) => {
                        return fail(
                            "ycsb_record_atomic",
                            format!("table {p} key {key}: fields carry {min}..={max} writes, but every update rewrites all of them"),
                        )
                    }
                }
                records += 1;
            }
            if loaded != self.partition_len(p) {
                return fail(
                    "ycsb_key_set",
                    format!(
                        "table {p} holds {loaded} loaded keys, expected {}",
                        self.partition_len(p)
                    ),
                );
            }
        }
        let mut inserts = 0u64;
        for l in locals {
            for (p, &want) in l.inserted.iter().enumerate() {
                let got = found.get(&(l.compact, p as u32)).copied().unwrap_or(0);
                if got != want {
                    return fail(
                        "ycsb_inserts",
                        format!(
                            "{} committed {want} inserts into table {p}, which holds {got} of them",
                            l.coord
                        ),
                    );
                }
                inserts += want;
            }
        }
        let bad_reads: u64 = locals.iter().map(|l| l.bad_reads).sum();
        if bad_reads > 0 {
            return fail(
                "ycsb_committed_reads_intact",
                format!("{bad_reads} committed transactions read a torn, misplaced or half-written record"),
            );
        }
        let expect: u128 = locals.iter().map(|l| l.field_writes as u128).sum();
        if writes_sum != expect {
            return fail(
                "ycsb_write_count",
                format!("Σ field writes = {writes_sum}, but committed transactions wrote {expect} fields; an update was lost or applied twice"),
            );
        }
        Ok(format!(
            "ycsb: {records} records intact in {n} tables ({inserts} inserted, each once), Σ field writes = {writes_sum} = committed field writes (max {max_writes} on one field)"
        ))
    }
}
