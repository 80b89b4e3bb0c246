//! TATP's invariants on a quiesced snapshot (the module doc of `tatp`, "Invariants").

use std::fmt::Write as _;

use bytemuck::Pod;

use super::*;

fn fail(invariant: &'static str, detail: String) -> InvariantError {
    InvariantError { invariant, detail }
}

const TABLE_NAMES: [&str; 6] = [
    "subscriber",
    "access_info",
    "special_facility",
    "call_forwarding",
    "cf_index",
    "sub_nbr_index",
];

fn decode<T: Pod>(table: u32, key: u64, bytes: &[u8]) -> Result<T, InvariantError> {
    if bytes.len() != size_of::<T>() {
        return Err(fail(
            "tatp_record_size",
            format!(
                "{} key {key:#x}: {}-byte value, expected {}",
                TABLE_NAMES[table as usize],
                bytes.len(),
                size_of::<T>()
            ),
        ));
    }
    Ok(bytemuck::pod_read_unaligned(bytes))
}

/// Fail on a key equal to the previous one (the snapshot is sorted by key).
fn distinct(prev: &mut Option<u64>, key: u64, table: u32) -> Result<(), InvariantError> {
    if *prev == Some(key) {
        return Err(fail(
            "tatp_rows",
            format!("{} holds key {key:#x} twice", TABLE_NAMES[table as usize]),
        ));
    }
    *prev = Some(key);
    Ok(())
}

/// The rows of `table` by key, each key checked distinct from the previous one.
fn rows(snapshot: &Snapshot, table: u32) -> impl Iterator<Item = (Result<u64, InvariantError>, &[u8])> {
    let mut prev = None;
    snapshot
        .iter(table)
        .map(move |(key, bytes)| (distinct(&mut prev, key, table).map(|()| key), bytes))
}

/// `(s_id, ty)` of a key of a load-time table, which must name a loaded row: `s_id` in
/// `1..=p`, slot 0, and `ty` among the types `types(s_id)` draws (bit `ty`).
fn loaded_key(key: u64, p: u64, table: u32, types: impl Fn(u64) -> u8) -> Result<(u64, u8), InvariantError> {
    let (s, ty, slot) = unpack_key(key);
    if (1..=p).contains(&s) && slot == 0 && pack_key(s, ty, slot) == key && types(s) & (1 << ty) != 0 {
        Ok((s, ty))
    } else {
        Err(fail(
            "tatp_rows",
            format!(
                "{} holds key {key:#x} (s_id {s}, type {}, slot {slot}), which was never loaded",
                TABLE_NAMES[table as usize],
                ty + 1
            ),
        ))
    }
}

fn identity(ok: bool, what: impl FnOnce() -> String) -> Result<(), InvariantError> {
    if ok {
        Ok(())
    } else {
        Err(fail("tatp_record_identity", what()))
    }
}

fn unchanged(ok: bool, what: impl FnOnce() -> String) -> Result<(), InvariantError> {
    if ok {
        Ok(())
    } else {
        Err(fail("tatp_static_fields", what()))
    }
}

pub(super) fn check(w: &Tatp, locals: &[TatpLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
    let p = w.cfg.subscribers;
    let c = w.counts();
    let mut ok = [0u64; 7];
    let mut miss = [0u64; 7];
    let mut anomalies = 0;
    let mut first_anomaly = None;
    for l in locals {
        for t in 0..7 {
            ok[t] += l.successful[t];
            miss[t] += l.unsuccessful[t];
        }
        anomalies += l.anomalies;
        first_anomaly = first_anomaly.or(l.first_anomaly);
    }

    // 1. Row counts of the tables whose key set is fixed. Each pass below checks that
    //    every key is distinct and names a loaded row, so the key set is exactly the
    //    loaded one.
    let mut fixed = vec![
        (SUBSCRIBER_TABLE_ID, p),
        (ACCESS_INFO_TABLE_ID, c.access_info),
        (SPECIAL_FACILITY_TABLE_ID, c.special_facility),
        (CF_INDEX_TABLE_ID, c.special_facility),
    ];
    if w.cfg.sub_nbr_index {
        fixed.push((SUB_NBR_INDEX_TABLE_ID, p));
    }
    for (table, want) in fixed {
        let got = snapshot.len(table) as u64;
        if got != want {
            return Err(fail(
                "tatp_rows",
                format!(
                    "{}: {got} rows, loaded {want} and no transaction inserts or deletes any",
                    TABLE_NAMES[table as usize]
                ),
            ));
        }
    }

    // Sequential passes (no lookups); per-subscriber facts go to dense vectors.
    let n = p as usize + 1;
    let mut sf_stamps = vec![0u16; n];
    let mut cf_slots = vec![0u8; 4 * n];
    let mut listed = 0u64;

    for (key, bytes) in rows(snapshot, ACCESS_INFO_TABLE_ID) {
        let key = key?;
        let (s, ty) = loaded_key(key, p, ACCESS_INFO_TABLE_ID, population::ai_types)?;
        let t = ty + 1;
        let a: AccessInfo = decode(ACCESS_INFO_TABLE_ID, key, bytes)?;
        identity(a.s_id as u64 == s && a.ai_type == t, || {
            format!("access_info ({s}, {t}) holds s_id {} ai_type {}", a.s_id, a.ai_type)
        })?;
        let g = population::access_info(s, t);
        unchanged(a == g, || format!("access_info ({s}, {t}): {a:?}, loaded as {g:?}"))?;
    }

    for (key, bytes) in rows(snapshot, SPECIAL_FACILITY_TABLE_ID) {
        let key = key?;
        let (s, ty) = loaded_key(key, p, SPECIAL_FACILITY_TABLE_ID, population::sf_types)?;
        let t = ty + 1;
        let f: SpecialFacility = decode(SPECIAL_FACILITY_TABLE_ID, key, bytes)?;
        identity(f.s_id as u64 == s && f.sf_type == t, || {
            format!(
                "special_facility ({s}, {t}) holds s_id {} sf_type {}",
                f.s_id, f.sf_type
            )
        })?;
        let g = population::special_facility(s, t);
        unchanged(
            f.is_active == g.is_active
                && f.error_cntl == g.error_cntl
                && f.data_b == g.data_b
                && (f.usd_stamp != 0 || f.data_a == g.data_a),
            || format!("special_facility ({s}, {t}): {f:?}, loaded as {g:?}"),
        )?;
        sf_stamps[s as usize] = sf_stamps[s as usize].wrapping_add(f.usd_stamp);
    }

    for (key, bytes) in rows(snapshot, CF_INDEX_TABLE_ID) {
        let key = key?;
        let (s, ty) = loaded_key(key, p, CF_INDEX_TABLE_ID, population::sf_types)?;
        let t = ty + 1;
        let ix: CfIndex = decode(CF_INDEX_TABLE_ID, key, bytes)?;
        identity(ix.s_id as u64 == s && ix.sf_type == t, || {
            format!("cf_index ({s}, {t}) holds s_id {} sf_type {}", ix.s_id, ix.sf_type)
        })?;
        if ix.slots > 0b111 {
            return Err(fail(
                "tatp_cf_index",
                format!("cf_index ({s}, {t}) lists slots {:#b}", ix.slots),
            ));
        }
        cf_slots[4 * s as usize + ty as usize] = ix.slots;
        listed += ix.slots.count_ones() as u64;
    }

    let (mut usd_sum, mut ul_sum) = (0u16, 0u16);
    for (key, bytes) in rows(snapshot, SUBSCRIBER_TABLE_ID) {
        let key = key?;
        let (s, _) = loaded_key(key, p, SUBSCRIBER_TABLE_ID, |_| 1)?;
        let v: Subscriber = decode(SUBSCRIBER_TABLE_ID, key, bytes)?;
        let g = population::subscriber(s);
        identity(v.s_id as u64 == s && v.sub_nbr == g.sub_nbr, || {
            format!(
                "subscriber {s} holds s_id {} and sub_nbr {:?}",
                v.s_id,
                String::from_utf8_lossy(&v.sub_nbr)
            )
        })?;
        unchanged(
            v.msc_location == g.msc_location
                && v.hex == g.hex
                && v.byte2 == g.byte2
                && v.bits & !1 == g.bits & !1
                && (v.usd_stamp != 0 || v.bits == g.bits)
                && (v.ul_stamp != 0 || v.vlr_location == g.vlr_location),
            || format!("subscriber {s}: {v:?}, loaded as {g:?}"),
        )?;
        if sf_stamps[s as usize] != v.usd_stamp {
            return Err(fail(
                "tatp_update_stamps",
                format!(
                    "subscriber {s}: usd_stamp {} but its special_facility rows' sum to {} (mod 2^16); an update_subscriber_data landed half",
                    v.usd_stamp, sf_stamps[s as usize]
                ),
            ));
        }
        usd_sum = usd_sum.wrapping_add(v.usd_stamp);
        ul_sum = ul_sum.wrapping_add(v.ul_stamp);
    }

    if w.cfg.sub_nbr_index {
        let mut prev = None;
        for (key, bytes) in snapshot.iter(SUB_NBR_INDEX_TABLE_ID) {
            distinct(&mut prev, key, SUB_NBR_INDEX_TABLE_ID)?;
            let ix: SubNbrIndex = decode(SUB_NBR_INDEX_TABLE_ID, key, bytes)?;
            let s = ix.s_id as u64;
            identity((1..=p).contains(&s) && sub_nbr_key(&sub_nbr(s)) == key, || {
                format!(
                    "sub_nbr_index key {key:#x} names subscriber {s}, whose sub_nbr is {:#x}",
                    sub_nbr_key(&sub_nbr(s))
                )
            })?;
        }
    }

    // 3. Every CALL_FORWARDING row: its key, its parent, its fields, its index entry.
    let mut cf_rows = 0u64;
    let mut prev = None;
    for (key, bytes) in snapshot.iter(CALL_FORWARDING_TABLE_ID) {
        cf_rows += 1;
        distinct(&mut prev, key, CALL_FORWARDING_TABLE_ID)?;
        let row: CallForwarding = decode(CALL_FORWARDING_TABLE_ID, key, bytes)?;
        let (s, ty, slot) = unpack_key(key);
        let sf_type = ty + 1;
        identity(
            (1..=p).contains(&s)
                && slot < 3
                && row.s_id as u64 == s
                && row.sf_type == sf_type
                && row.start_time == START_TIMES[slot.min(2) as usize],
            || format!("call_forwarding key {key:#x} (s_id {s}, sf_type {sf_type}, slot {slot}) holds {row:?}"),
        )?;
        if population::sf_types(s) & (1 << ty) == 0 {
            return Err(fail(
                "tatp_call_forwarding_parent",
                format!(
                    "call_forwarding ({s}, {sf_type}, {}) has no special_facility ({s}, {sf_type})",
                    row.start_time
                ),
            ));
        }
        if !(1..=END_TIME_MAX).contains(&row.end_time) || !row.numberx.iter().all(u8::is_ascii_digit) {
            return Err(fail(
                "tatp_record_fields",
                format!(
                    "call_forwarding ({s}, {sf_type}, {}): end_time or numberx out of range: {row:?}",
                    row.start_time
                ),
            ));
        }
        let slots = cf_slots[4 * s as usize + ty as usize];
        if slots & (1 << slot) == 0 {
            return Err(fail(
                "tatp_cf_index",
                format!(
                    "call_forwarding ({s}, {sf_type}, {}) exists but cf_index ({s}, {sf_type}) lists slots {slots:#05b}",
                    row.start_time
                ),
            ));
        }
    }
    // Every row is listed and rows are distinct: equal counts mean every listed row exists.
    if listed != cf_rows {
        return Err(fail(
            "tatp_cf_index",
            format!("cf_index lists {listed} call_forwarding rows but {cf_rows} exist: a listed row is missing"),
        ));
    }

    // 4. Inserts and deletes account for the row count.
    let (ins, del) = (ok[ICF], ok[DCF]);
    let expect = c.call_forwarding as i128 + ins as i128 - del as i128;
    if cf_rows as i128 != expect {
        return Err(fail(
            "tatp_cf_row_count",
            format!(
                "call_forwarding has {cf_rows} rows, expected loaded {} + {ins} committed inserts − {del} committed deletes = {expect}",
                c.call_forwarding
            ),
        ));
    }

    // 5. Stamps account for the committed updates.
    for (sum, ty, field) in [(usd_sum, USD, "usd_stamp"), (ul_sum, UL, "ul_stamp")] {
        if sum != ok[ty] as u16 {
            return Err(fail(
                "tatp_update_stamps",
                format!(
                    "Σ subscriber.{field} = {sum} (mod 2^16), but {} {} committed ({} mod 2^16)",
                    ok[ty], TXN_TYPES[ty], ok[ty] as u16
                ),
            ));
        }
    }

    // 6. Committed reads were consistent.
    if let Some(a) = first_anomaly {
        return Err(fail(
            "tatp_committed_reads",
            format!(
                "{anomalies} committed transactions read an inconsistent record; first: {} ({} key {:#x})",
                a.what, TABLE_NAMES[a.table as usize], a.key
            ),
        ));
    }

    // 7. Impossible success ratios.
    for ty in [GSD, UL] {
        if miss[ty] > 0 {
            return Err(fail(
                "tatp_success_ratio",
                format!(
                    "{} unsuccessful {} (of {}): a subscriber was not found, but none is ever deleted",
                    miss[ty],
                    TXN_TYPES[ty],
                    ok[ty] + miss[ty]
                ),
            ));
        }
    }

    let mut out = format!(
        "tatp: {p} subscribers intact, {} access_info, {} special_facility and cf_index rows as loaded; call_forwarding {cf_rows} = loaded {} + {ins} inserts − {del} deletes, each under its facility and indexed; stamps match {} update_subscriber_data and {} update_location commits; success ratio (spec):",
        c.access_info, c.special_facility, c.call_forwarding, ok[USD], ok[UL]
    );
    for ty in 0..7 {
        let n = ok[ty] + miss[ty];
        let sep = if ty == 6 { "" } else { "," };
        if n == 0 {
            let _ = write!(out, " {} not run{sep}", TXN_TYPES[ty]);
            continue;
        }
        let _ = write!(
            out,
            " {} {:.3} ({:.3}",
            TXN_TYPES[ty],
            ok[ty] as f64 / n as f64,
            SPEC_SUCCESS[ty]
        );
        if ty == GND {
            let _ = write!(out, "; {GND_LOADED_SUCCESS:.3} on the loaded population");
        }
        let _ = write!(out, ") of {n}{sep}");
    }
    Ok(out)
}
