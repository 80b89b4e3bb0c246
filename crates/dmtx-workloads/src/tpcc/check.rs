//! The consistency conditions of §3.3.2.1 on a quiesced snapshot, plus the secondary
//! paths' own invariants and the insert budgets (see the module doc for the list).

use std::collections::HashMap;

use bytemuck::Pod;

use super::schema::*;
use super::{Tpcc, TpccLocal, Variant, NEW_ORDER_TXN, PAYMENT_TXN};
use crate::{InvariantError, Snapshot};

fn fail(invariant: &'static str, detail: String) -> InvariantError {
    InvariantError { invariant, detail }
}

/// Decode every row of `table` as `T`, or say which row is malformed.
fn rows<'a, T: Pod>(snapshot: &'a Snapshot, table: u32) -> impl Iterator<Item = Result<(u64, T), InvariantError>> + 'a {
    let size = std::mem::size_of::<T>();
    snapshot.iter(table).map(move |(k, v)| {
        if v.len() < size {
            return Err(fail(
                "tpcc_records",
                format!(
                    "table `{}` key {k:#x}: {}-byte value, expected {size}",
                    TABLE_NAMES[table as usize],
                    v.len()
                ),
            ));
        }
        Ok((k, bytemuck::pod_read_unaligned(&v[..size])))
    })
}

/// Per-district aggregates.
#[derive(Clone, Default)]
struct Dist {
    present: bool,
    ytd: i64,
    next_o_id: u32,
    payments: u32,
    h_sum: i64,
    max_o: u32,
    ol_cnt_sum: u64,
    lines: u64,
    no_min: u32,
    no_max: u32,
    no_count: u64,
    undelivered: u64,
}

/// Per-order aggregates from ORDER and ORDER-LINE.
struct OrderInfo {
    c_id: u32,
    carrier: u8,
    ol_cnt: u8,
    lines: u32,
    null_delivery: u32,
    delivered_amount: i64,
}

pub(super) fn check(t: &Tpcc, locals: &[TpccLocal], s: &Snapshot) -> Result<String, InvariantError> {
    let ws = t.cfg.warehouses;
    let n = t.cfg.customers;
    let spec = t.cfg.variant == Variant::Spec;
    let nd = (ws * DISTRICTS) as usize;
    let di = |w: u32, d: u32| -> Option<usize> {
        ((1..=ws).contains(&w) && (1..=DISTRICTS).contains(&d)).then(|| ((w - 1) * DISTRICTS + (d - 1)) as usize)
    };
    let bad_key = |table: u32, k: u64| {
        fail(
            "tpcc_records",
            format!(
                "table `{}` holds key {k:#x} of no loaded district",
                TABLE_NAMES[table as usize]
            ),
        )
    };

    // WAREHOUSE and DISTRICT.
    let mut w_ytd = vec![None::<i64>; ws as usize + 1];
    let mut w_h_sum = vec![0i64; ws as usize + 1];
    for r in rows::<Warehouse>(s, WAREHOUSE_ID) {
        let (k, v) = r?;
        let w = key_w(k);
        if k != warehouse_key(w) || w == 0 || w > ws {
            return Err(bad_key(WAREHOUSE_ID, k));
        }
        w_ytd[w as usize] = Some(v.ytd);
    }
    let mut dists = vec![Dist::default(); nd];
    for r in rows::<District>(s, DISTRICT_ID) {
        let (k, v) = r?;
        let (w, d) = key_wd(DISTRICT_ID, k);
        let i = di(w, d).ok_or_else(|| bad_key(DISTRICT_ID, k))?;
        dists[i] = Dist {
            present: true,
            ytd: v.ytd,
            next_o_id: v.next_o_id,
            payments: v.payments,
            no_min: u32::MAX,
            ..Dist::default()
        };
    }
    for w in 1..=ws {
        if w_ytd[w as usize].is_none() {
            return Err(fail("tpcc_records", format!("warehouse {w} is missing")));
        }
        for d in 1..=DISTRICTS {
            if !dists[di(w, d).unwrap()].present {
                return Err(fail("tpcc_records", format!("district ({w}, {d}) is missing")));
            }
        }
    }

    // Insert budgets: a district that used its share may have refused NewOrders or
    // Payments (`table_full` aborts); the run is then not TPC-C's. Every budget that ran
    // out is named, each with its knob.
    let (o_budget, p_budget) = (t.orders_per_district(), t.payments_per_district());
    let mut exhausted: Vec<String> = Vec::new();
    let full_orders = dists
        .iter()
        .enumerate()
        .find(|(_, dist)| dist.next_o_id.saturating_sub(n + 1) >= o_budget);
    if let Some((i, dist)) = full_orders {
        let (w, d) = (i as u32 / DISTRICTS + 1, i as u32 % DISTRICTS + 1);
        exhausted.push(format!(
            "district ({w}, {d}) took {} NewOrders, its whole share of `new_orders_max` = {} per warehouse (raise `new_orders_max`)",
            dist.next_o_id.saturating_sub(n + 1),
            t.cfg.new_orders_max
        ));
    }
    let full_payments = dists.iter().enumerate().find(|(_, dist)| dist.payments >= p_budget);
    if let Some((i, dist)) = full_payments {
        let (w, d) = (i as u32 / DISTRICTS + 1, i as u32 % DISTRICTS + 1);
        exhausted.push(format!(
            "district ({w}, {d}) took {} Payments, its whole share of `payments_max` = {} per warehouse (raise `payments_max`)",
            dist.payments, t.cfg.payments_max
        ));
    }
    if !exhausted.is_empty() {
        return Err(fail(
            "tpcc_capacity",
            format!(
                "{}; later ones aborted `table_full`: raise the named knobs (or run shorter)",
                exhausted.join("; ")
            ),
        ));
    }

    // HISTORY.
    let mut history_rows = 0u64;
    for r in rows::<History>(s, HISTORY_ID) {
        let (k, v) = r?;
        let (w, d) = key_wd(HISTORY_ID, k);
        let i = di(w, d).ok_or_else(|| bad_key(HISTORY_ID, k))?;
        dists[i].h_sum += v.amount;
        w_h_sum[w as usize] += v.amount;
        history_rows += 1;
    }

    // ORDER.
    let mut orders: HashMap<u64, OrderInfo> = HashMap::with_capacity(s.len(ORDER_ID));
    let mut last_order: HashMap<u64, u32> = HashMap::with_capacity(nd * n as usize);
    for r in rows::<Order>(s, ORDER_ID) {
        let (k, v) = r?;
        let (w, d, o) = unpack_order(k);
        let i = di(w, d).ok_or_else(|| bad_key(ORDER_ID, k))?;
        let dist = &mut dists[i];
        dist.max_o = dist.max_o.max(o);
        dist.ol_cnt_sum += v.ol_cnt as u64;
        dist.undelivered += u64::from(v.carrier_id == 0);
        let last = last_order.entry(customer_key(w, d, v.c_id)).or_default();
        *last = (*last).max(o);
        orders.insert(
            k,
            OrderInfo {
                c_id: v.c_id,
                carrier: v.carrier_id,
                ol_cnt: v.ol_cnt,
                lines: 0,
                null_delivery: 0,
                delivered_amount: 0,
            },
        );
    }

    // NEW-ORDER (condition 5, first half: every row's order is undelivered).
    for r in rows::<NewOrder>(s, NEW_ORDER_ID) {
        let (k, _) = r?;
        let (w, d, o) = unpack_order(k);
        let i = di(w, d).ok_or_else(|| bad_key(NEW_ORDER_ID, k))?;
        let dist = &mut dists[i];
        dist.no_min = dist.no_min.min(o);
        dist.no_max = dist.no_max.max(o);
        dist.no_count += 1;
        match orders.get(&k) {
            Some(info) if info.carrier == 0 => {}
            Some(info) => {
                return Err(fail(
                    "tpcc_condition_5",
                    format!(
                        "NEW-ORDER ({w}, {d}, {o}) exists but its ORDER has O_CARRIER_ID {}",
                        info.carrier
                    ),
                ))
            }
            None => {
                return Err(fail(
                    "tpcc_condition_5",
                    format!("NEW-ORDER ({w}, {d}, {o}) has no ORDER row"),
                ))
            }
        }
    }

    // ORDER-LINE.
    let mut line_rows = 0u64;
    for r in rows::<OrderLine>(s, ORDER_LINE_ID) {
        let (k, v) = r?;
        let (w, d, o, ol) = unpack_order_line(k);
        let i = di(w, d).ok_or_else(|| bad_key(ORDER_LINE_ID, k))?;
        dists[i].lines += 1;
        line_rows += 1;
        let Some(info) = orders.get_mut(&order_key(w, d, o)) else {
            return Err(fail(
                "tpcc_condition_6",
                format!("ORDER-LINE ({w}, {d}, {o}, {ol}) has no ORDER row"),
            ));
        };
        info.lines += 1;
        if v.delivery_d == 0 {
            info.null_delivery += 1;
        } else {
            info.delivered_amount += v.amount;
        }
    }

    // Conditions 1..5, 8, 9 per warehouse and district.
    for w in 1..=ws {
        let ds = &dists[di(w, 1).unwrap()..=di(w, DISTRICTS).unwrap()];
        let wy = w_ytd[w as usize].unwrap();
        let sum_d: i64 = ds.iter().map(|x| x.ytd).sum();
        if wy != sum_d {
            return Err(fail(
                "tpcc_condition_1",
                format!("warehouse {w}: W_YTD {wy} ≠ Σ D_YTD {sum_d} (cents)"),
            ));
        }
        if wy != w_h_sum[w as usize] {
            return Err(fail(
                "tpcc_condition_8",
                format!("warehouse {w}: W_YTD {wy} ≠ Σ H_AMOUNT {} (cents)", w_h_sum[w as usize]),
            ));
        }
        for (j, x) in ds.iter().enumerate() {
            let d = j as u32 + 1;
            if x.next_o_id == 0 || x.next_o_id - 1 != x.max_o {
                return Err(fail(
                    "tpcc_condition_2",
                    format!(
                        "district ({w}, {d}): D_NEXT_O_ID − 1 = {} ≠ max(O_ID) = {}",
                        x.next_o_id as i64 - 1,
                        x.max_o
                    ),
                ));
            }
            if spec && x.no_count > 0 && x.no_max != x.max_o {
                return Err(fail(
                    "tpcc_condition_2",
                    format!(
                        "district ({w}, {d}): max(NO_O_ID) = {} ≠ max(O_ID) = {}",
                        x.no_max, x.max_o
                    ),
                ));
            }
            if spec && x.no_count > 0 && (x.no_max - x.no_min + 1) as u64 != x.no_count {
                return Err(fail(
                    "tpcc_condition_3",
                    format!(
                        "district ({w}, {d}): max(NO_O_ID) − min(NO_O_ID) + 1 = {} ≠ {} NEW-ORDER rows",
                        x.no_max - x.no_min + 1,
                        x.no_count
                    ),
                ));
            }
            if x.ol_cnt_sum != x.lines {
                return Err(fail(
                    "tpcc_condition_4",
                    format!(
                        "district ({w}, {d}): Σ O_OL_CNT = {} ≠ {} ORDER-LINE rows",
                        x.ol_cnt_sum, x.lines
                    ),
                ));
            }
            if x.undelivered != x.no_count {
                return Err(fail(
                    "tpcc_condition_5",
                    format!(
                        "district ({w}, {d}): {} ORDERs with null O_CARRIER_ID but {} NEW-ORDER rows",
                        x.undelivered, x.no_count
                    ),
                ));
            }
            if x.ytd != x.h_sum {
                return Err(fail(
                    "tpcc_condition_9",
                    format!("district ({w}, {d}): D_YTD {} ≠ Σ H_AMOUNT {} (cents)", x.ytd, x.h_sum),
                ));
            }
        }
    }

    // Conditions 6 and 7 per order; 12's per-customer sums.
    let mut delivered_by_customer: HashMap<u64, i64> = HashMap::with_capacity(nd * n as usize);
    for (&k, info) in &orders {
        let (w, d, o) = unpack_order(k);
        if info.lines != info.ol_cnt as u32 {
            return Err(fail(
                "tpcc_condition_6",
                format!(
                    "ORDER ({w}, {d}, {o}): O_OL_CNT {} but {} ORDER-LINE rows",
                    info.ol_cnt, info.lines
                ),
            ));
        }
        let want_null = if info.carrier == 0 { info.lines } else { 0 };
        if info.null_delivery != want_null {
            return Err(fail(
                "tpcc_condition_7",
                format!(
                    "ORDER ({w}, {d}, {o}): O_CARRIER_ID {} but {} of its {} lines have a null OL_DELIVERY_D",
                    info.carrier, info.null_delivery, info.lines
                ),
            ));
        }
        *delivered_by_customer.entry(customer_key(w, d, info.c_id)).or_default() += info.delivered_amount;
    }

    // CUSTOMER: condition 12.
    let mut customers = 0u64;
    for r in rows::<Customer>(s, CUSTOMER_ID) {
        let (k, v) = r?;
        let (w, d, c) = unpack_customer(k);
        customers += 1;
        let delivered = delivered_by_customer.get(&k).copied().unwrap_or(0);
        if v.balance + v.ytd_payment != delivered {
            return Err(fail(
                "tpcc_condition_12",
                format!(
                    "customer ({w}, {d}, {c}): C_BALANCE {} + C_YTD_PAYMENT {} ≠ Σ delivered OL_AMOUNT {delivered} (cents)",
                    v.balance, v.ytd_payment
                ),
            ));
        }
    }
    let want_customers = nd as u64 * n as u64;
    if customers != want_customers {
        return Err(fail(
            "tpcc_records",
            format!("{customers} CUSTOMER rows, loaded {want_customers}"),
        ));
    }

    // LAST-ORDER names each customer's newest order.
    for r in rows::<LastOrder>(s, LAST_ORDER_ID) {
        let (k, v) = r?;
        let (w, d, c) = unpack_customer(k);
        let newest = last_order.get(&k).copied().unwrap_or(0);
        if v.o_id != newest {
            return Err(fail(
                "tpcc_last_order",
                format!(
                    "customer ({w}, {d}, {c}): LAST-ORDER says {} but the newest ORDER is {newest}",
                    v.o_id
                ),
            ));
        }
    }
    if s.len(LAST_ORDER_ID) as u64 != want_customers {
        return Err(fail(
            "tpcc_last_order",
            format!(
                "{} LAST-ORDER rows, one per customer expected ({want_customers})",
                s.len(LAST_ORDER_ID)
            ),
        ));
    }

    // DELIVERY-CURSOR (spec variant: FIFO delivery).
    if spec {
        for r in rows::<DeliveryCursor>(s, DELIVERY_CURSOR_ID) {
            let (k, v) = r?;
            let (w, d) = key_wd(DELIVERY_CURSOR_ID, k);
            let x = &dists[di(w, d).ok_or_else(|| bad_key(DELIVERY_CURSOR_ID, k))?];
            let oldest = if x.no_count > 0 { x.no_min } else { x.next_o_id };
            if v.next_o_id != oldest || v.seen_next_o_id > x.next_o_id {
                return Err(fail(
                    "tpcc_delivery_cursor",
                    format!(
                        "district ({w}, {d}): cursor ({}, seen {}) but the oldest undelivered O_ID is {oldest} and D_NEXT_O_ID {}",
                        v.next_o_id, v.seen_next_o_id, x.next_o_id
                    ),
                ));
            }
        }
    }

    // Rows inserted = transactions committed.
    let new_orders: u64 = locals.iter().map(|l| l.committed[NEW_ORDER_TXN]).sum();
    let payments: u64 = locals.iter().map(|l| l.committed[PAYMENT_TXN]).sum();
    let loaded = nd as u64 * n as u64;
    if s.len(ORDER_ID) as u64 != loaded + new_orders {
        return Err(fail(
            "tpcc_rows",
            format!(
                "{} ORDER rows ≠ {loaded} loaded + {new_orders} committed NewOrders",
                s.len(ORDER_ID)
            ),
        ));
    }
    if history_rows != loaded + payments {
        return Err(fail(
            "tpcc_rows",
            format!("{history_rows} HISTORY rows ≠ {loaded} loaded + {payments} committed Payments"),
        ));
    }

    let delivered: u64 = locals.iter().map(|l| l.delivered).sum();
    let skipped: u64 = locals.iter().map(|l| l.deliveries_skipped).sum();
    let rolled_back: u64 = locals.iter().map(|l| l.rolled_back).sum();
    Ok(format!(
        "tpcc ({}) consistency conditions 1-9 and 12 hold over {ws} warehouses: {} orders ({new_orders} new), {line_rows} lines, {history_rows} history rows ({payments} new), {delivered} delivered, {skipped} districts skipped, {rolled_back} rolled back",
        if spec { "spec" } else { "ford" },
        s.len(ORDER_ID)
    ))
}
