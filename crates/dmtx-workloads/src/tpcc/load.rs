//! Initial population (§4.3.3.1). Each entity draws from its own generator, seeded by
//! its ids, so the loader of one table regenerates exactly what another saw (ORDER and
//! ORDER-LINE agree on O_OL_CNT, CUSTOMER and CUSTOMER-NAME on C_LAST and C_FIRST).

use bytemuck::{bytes_of, Zeroable};
use dmtx_store::StoreError;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::schema::*;
use super::Tpcc;
use crate::zipf::uniform;
use crate::RecordSink;

/// H_AMOUNT of every loaded HISTORY row, C_YTD_PAYMENT of every customer (10.00).
pub(crate) const LOADED_PAYMENT_CENTS: i64 = 1000;
/// O_ENTRY_D, C_SINCE and H_DATE of loaded rows (any non-null date).
pub(crate) const LOAD_DATE: u64 = 1;

const TAG_WAREHOUSE: u64 = 1;
const TAG_DISTRICT: u64 = 2;
const TAG_CUSTOMER: u64 = 3;
const TAG_HISTORY: u64 = 4;
const TAG_ORDER: u64 = 5;
const TAG_ITEM: u64 = 6;
const TAG_STOCK: u64 = 7;
const TAG_NAMES: u64 = 8;
const TAG_PERMUTATION: u64 = 9;

fn rng(parts: &[u64]) -> SmallRng {
    SmallRng::seed_from_u64(seed_of(parts))
}

fn fixed<const N: usize>(rng: &mut SmallRng, lo: usize, hi: usize) -> [u8; N] {
    let mut out = [0u8; N];
    a_string(rng, &mut out, lo, hi);
    out
}

/// Random address columns (§4.3.3.1: streets and city a-strings of 10..20, a 2-letter
/// state, a zip of 4 digits and "11111").
fn address(rng: &mut SmallRng) -> Address {
    Address {
        street_1: fixed(rng, 10, 20),
        street_2: fixed(rng, 10, 20),
        city: fixed(rng, 10, 20),
        state: state(rng),
        zip: zip(rng),
    }
}

fn state(rng: &mut SmallRng) -> [u8; 2] {
    [b'A' + uniform(rng, 26) as u8, b'A' + uniform(rng, 26) as u8]
}

impl Tpcc {
    /// Every (warehouse, district).
    fn districts(&self) -> impl Iterator<Item = (u32, u32)> {
        let ws = self.cfg.warehouses;
        (1..=ws).flat_map(|w| (1..=DISTRICTS).map(move |d| (w, d)))
    }

    /// C_LAST (as a name number) and C_FIRST of customers `1..=customers` of (w, d), by
    /// C_ID − 1. C_IDs up to 1000 take name C_ID − 1; the rest NURand(255, 0, 999) with
    /// the load-time C, redrawn if the name already lists [`NAME_IDS_MAX`] customers.
    pub(crate) fn district_names(&self, w: u32, d: u32) -> Vec<(u16, [u8; 16])> {
        let mut rng = rng(&[TAG_NAMES, w as u64, d as u64]);
        let mut counts = [0u16; NAMES as usize];
        (1..=self.cfg.customers)
            .map(|c| {
                let name = if c <= NAMES {
                    c - 1
                } else {
                    loop {
                        let n = nurand(&mut rng, A_C_LAST, 0, NAMES as u64 - 1, self.c_load.c_last) as u32;
                        if (counts[n as usize] as usize) < NAME_IDS_MAX {
                            break n;
                        }
                    }
                };
                counts[name as usize] += 1;
                (name as u16, fixed::<16>(&mut rng, 8, 16))
            })
            .collect()
    }

    /// O_C_ID of loaded orders `1..=customers` of (w, d), by O_ID − 1: a random
    /// permutation of the C_IDs.
    pub(crate) fn order_customers(&self, w: u32, d: u32) -> Vec<u16> {
        let mut rng = rng(&[TAG_PERMUTATION, w as u64, d as u64]);
        let mut perm: Vec<u16> = (1..=self.cfg.customers as u16).collect();
        for i in (1..perm.len()).rev() {
            let j = uniform(&mut rng, i as u64 + 1) as usize;
            perm.swap(i, j);
        }
        perm
    }

    /// The loaded ORDER `o` of (w, d) and its lines (the first `ol_cnt` of the array).
    pub(crate) fn loaded_order(&self, w: u32, d: u32, o: u32, c_id: u32) -> (Order, [OrderLine; OL_CNT_MAX as usize]) {
        let mut rng = rng(&[TAG_ORDER, w as u64, d as u64, o as u64]);
        let delivered = o < self.first_new_order();
        let ol_cnt = rand_range(&mut rng, OL_CNT_MIN as u64, OL_CNT_MAX as u64) as u8;
        let order = Order {
            entry_d: LOAD_DATE,
            c_id,
            carrier_id: if delivered {
                rand_range(&mut rng, 1, 10) as u8
            } else {
                0
            },
            ol_cnt,
            all_local: 1,
            _pad: 0,
        };
        let mut lines = [OrderLine::zeroed(); OL_CNT_MAX as usize];
        for l in &mut lines[..ol_cnt as usize] {
            *l = OrderLine {
                delivery_d: if delivered { LOAD_DATE } else { 0 },
                amount: if delivered {
                    0
                } else {
                    rand_range(&mut rng, 1, 999_999) as i64
                },
                i_id: rand_range(&mut rng, 1, self.cfg.items as u64) as u32,
                supply_w_id: w as u16,
                quantity: 5,
                _pad: 0,
                dist_info: fixed::<24>(&mut rng, 24, 24),
            };
        }
        (order, lines)
    }

    /// W_YTD at load: the sum of the warehouse's loaded H_AMOUNTs (300 000.00 at full scale).
    pub(crate) fn loaded_w_ytd(&self) -> i64 {
        DISTRICTS as i64 * self.loaded_d_ytd()
    }

    /// D_YTD at load (30 000.00 at full scale).
    pub(crate) fn loaded_d_ytd(&self) -> i64 {
        self.cfg.customers as i64 * LOADED_PAYMENT_CENTS
    }
}

/// Hand every initial record of `table` to `insert`.
pub(super) fn load(t: &Tpcc, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
    let n = t.cfg.customers;
    match table {
        WAREHOUSE_ID => {
            for w in 1..=t.cfg.warehouses {
                let mut r = rng(&[TAG_WAREHOUSE, w as u64]);
                let v = Warehouse {
                    ytd: t.loaded_w_ytd(),
                    tax: rand_range(&mut r, 0, 2000) as u32,
                    name: fixed(&mut r, 6, 10),
                    address: address(&mut r),
                    _pad: [0; 3],
                };
                insert(warehouse_key(w), bytes_of(&v))?;
            }
        }
        DISTRICT_ID => {
            for (w, d) in t.districts() {
                let mut r = rng(&[TAG_DISTRICT, w as u64, d as u64]);
                let v = District {
                    ytd: t.loaded_d_ytd(),
                    tax: rand_range(&mut r, 0, 2000) as u32,
                    next_o_id: n + 1,
                    payments: 0,
                    name: fixed(&mut r, 6, 10),
                    address: address(&mut r),
                    _pad: [0; 3],
                };
                insert(district_key(w, d), bytes_of(&v))?;
            }
        }
        CUSTOMER_ID => {
            for (w, d) in t.districts() {
                for (i, (name, first)) in t.district_names(w, d).into_iter().enumerate() {
                    let c = i as u32 + 1;
                    let mut r = rng(&[TAG_CUSTOMER, w as u64, d as u64, c as u64]);
                    let mut v = Customer::zeroed();
                    v.since = LOAD_DATE;
                    v.credit_lim = 5_000_000;
                    v.balance = -LOADED_PAYMENT_CENTS;
                    v.ytd_payment = LOADED_PAYMENT_CENTS;
                    v.discount = rand_range(&mut r, 0, 5000) as u32;
                    v.payment_cnt = 1;
                    v.delivery_cnt = 0;
                    v.first = first;
                    v.middle = *b"OE";
                    v.last = last_name(name as u32);
                    v.address = address(&mut r);
                    n_string(&mut r, &mut v.phone);
                    v.credit = if uniform(&mut r, 10) == 0 { *b"BC" } else { *b"GC" };
                    a_string(&mut r, &mut v.data, 300, 500);
                    insert(customer_key(w, d, c), bytes_of(&v))?;
                }
            }
        }
        HISTORY_ID => {
            for (w, d) in t.districts() {
                for c in 1..=n {
                    let mut r = rng(&[TAG_HISTORY, w as u64, d as u64, c as u64]);
                    let v = History {
                        date: LOAD_DATE,
                        amount: LOADED_PAYMENT_CENTS,
                        c_id: c,
                        c_w_id: w as u16,
                        c_d_id: d as u8,
                        data: fixed(&mut r, 12, 24),
                        _pad: 0,
                    };
                    insert(history_key(w, d, 0, c), bytes_of(&v))?;
                }
            }
        }
        NEW_ORDER_ID => {
            for (w, d) in t.districts() {
                for o in t.first_new_order()..=n {
                    insert(order_key(w, d, o), bytes_of(&NewOrder { o_id: o, _pad: 0 }))?;
                }
            }
        }
        ORDER_ID | ORDER_LINE_ID => {
            for (w, d) in t.districts() {
                for (i, c) in t.order_customers(w, d).into_iter().enumerate() {
                    let o = i as u32 + 1;
                    let (order, lines) = t.loaded_order(w, d, o, c as u32);
                    if table == ORDER_ID {
                        insert(order_key(w, d, o), bytes_of(&order))?;
                        continue;
                    }
                    for (l, line) in lines[..order.ol_cnt as usize].iter().enumerate() {
                        insert(order_line_key(w, d, o, l as u32 + 1), bytes_of(line))?;
                    }
                }
            }
        }
        ITEM_ID => {
            for i in 1..=t.cfg.items {
                let mut r = rng(&[TAG_ITEM, i as u64]);
                let v = Item {
                    im_id: rand_range(&mut r, 1, 10_000) as u32,
                    price: rand_range(&mut r, 100, 10_000) as u32,
                    name: fixed(&mut r, 14, 24),
                    data: data_50(&mut r),
                    _pad: [0; 6],
                };
                insert(item_key(i), bytes_of(&v))?;
            }
        }
        STOCK_ID => {
            for w in 1..=t.cfg.warehouses {
                for i in 1..=t.cfg.items {
                    let mut r = rng(&[TAG_STOCK, w as u64, i as u64]);
                    let mut v = Stock::zeroed();
                    v.quantity = rand_range(&mut r, 10, 100) as i32;
                    for dist in &mut v.dist {
                        a_string(&mut r, dist, 24, 24);
                    }
                    v.data = data_50(&mut r);
                    insert(stock_key(w, i), bytes_of(&v))?;
                }
            }
        }
        CUSTOMER_NAME_ID => {
            for (w, d) in t.districts() {
                let names = t.district_names(w, d);
                let mut order: Vec<u32> = (0..names.len() as u32).collect();
                // By name, then C_FIRST, then C_ID.
                order.sort_unstable_by(|&a, &b| {
                    let (na, fa) = &names[a as usize];
                    let (nb, fb) = &names[b as usize];
                    (na, fa, a).cmp(&(nb, fb, b))
                });
                let mut at = 0;
                while at < order.len() {
                    let name = names[order[at] as usize].0;
                    let mut v = CustomerName::zeroed();
                    while at < order.len() && names[order[at] as usize].0 == name {
                        v.c_ids[v.count as usize] = order[at] as u16 + 1;
                        v.count += 1;
                        at += 1;
                    }
                    insert(customer_name_key(w, d, name as u32), bytes_of(&v))?;
                }
            }
        }
        LAST_ORDER_ID => {
            for (w, d) in t.districts() {
                let perm = t.order_customers(w, d);
                let mut last = vec![0u32; n as usize + 1];
                for (i, &c) in perm.iter().enumerate() {
                    last[c as usize] = i as u32 + 1;
                }
                for c in 1..=n {
                    insert(
                        customer_key(w, d, c),
                        bytes_of(&LastOrder {
                            o_id: last[c as usize],
                            _pad: 0,
                        }),
                    )?;
                }
            }
        }
        DELIVERY_CURSOR_ID => {
            for (w, d) in t.districts() {
                let v = DeliveryCursor {
                    next_o_id: t.first_new_order(),
                    seen_next_o_id: n + 1,
                };
                insert(district_key(w, d), bytes_of(&v))?;
            }
        }
        _ => return Err(StoreError::UnknownTable(table)),
    }
    Ok(())
}
